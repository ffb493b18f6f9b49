"""`quadrat import-inquire-rerank`: the published INQUIRE-Rerank Parquet files as a collection
with its INQUIRE-format benchmark files, indexed, and the `quadrat evaluate` command that
scores it (docs/SPEC.md §6.5).

    quadrat import-inquire-rerank DIR [--out DIR2] [--library L] [--split validation|test|all]
                                  [--inquire-queries CSV ...] [--model SPEC] [--device D]
                                  [--no-index] [--json]
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any

from app.cli.args import positive_int
from app.cli.common import EXIT_OK, TqdmProgress
from app.cli.registry import Command


def _arguments(p: argparse.ArgumentParser) -> None:
    """The options of `quadrat import-inquire-rerank`."""
    p.add_argument("dir", type=Path, help="folder holding the Parquet files (or one file)")
    p.add_argument("--out", type=Path, help="where to write (default: DIR)")
    p.add_argument("--library", type=Path, help="library folder (catalog, indexes, caches)")
    p.add_argument(
        "--split",
        default="test",
        choices=["validation", "test", "all"],
        help="which split's files to read (default: %(default)s, the split of the paper's table)",
    )
    p.add_argument(
        "--inquire-queries",
        action="append",
        type=Path,
        metavar="CSV",
        help="INQUIRE's queries file (inquire_queries_val.csv / _test.csv) whose query_id is "
        "kept as inquire_query_id; give it again for both splits (default: any "
        "inquire_queries*.csv in DIR)",
    )
    p.add_argument("--model", help="model spec to index with (default: the library's model)")
    p.add_argument("--device", choices=["auto", "cpu", "cuda", "mps"])
    p.add_argument("--batch-size", type=positive_int, help="default: the settings' batch size")
    p.add_argument("--no-index", dest="index", action="store_false", help="write files only")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def cmd_import_inquire_rerank(args: argparse.Namespace) -> int:
    from engine.benchmarks.inquire_rerank import evaluate_command, import_inquire_rerank
    from engine.progress import CancelToken

    cancel = CancelToken()
    bar = TqdmProgress("importing", unit="row")
    try:
        report = import_inquire_rerank(
            args.dir,
            args.out,
            split=args.split,
            inquire_queries=args.inquire_queries or (),
            progress=bar,
            cancel=cancel,
        )
    except KeyboardInterrupt:
        cancel.cancel()
        raise
    finally:
        bar.close()
    for path, why in report.skipped:
        print(f"note: {path} skipped: {why}", file=sys.stderr)
    missing = report.inquire_ids_missing
    if missing:
        print(
            f"note: {len(missing)} quer{'ies' if len(missing) != 1 else 'y'} not in "
            f"{', '.join(str(p) for p in report.inquire_files)} (e.g. {missing[0]!r}): "
            "inquire_query_id left empty",
            file=sys.stderr,
        )
    indexed = _index(report.collection, args) if args.index else None
    command = evaluate_command(report, args.library)
    text = shlex.join(command)
    if args.json:
        out: dict[str, Any] = report.to_json()
        out["index"] = indexed
        out["evaluate"] = command
        print(json.dumps(out))
        return EXIT_OK
    print(report.summary())
    if indexed is not None:
        print(f"indexed {report.collection}: {indexed['summary']}")
    else:
        index = ["quadrat", "index", str(report.collection)]
        index += ["--library", str(args.library)] if args.library else []
        print(f"not indexed; index it with: {shlex.join(index)}")
    print(f"score it with:\n  {text}")
    return EXIT_OK


def _index(folder: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Index the written collection as `quadrat index` does (its metadata.json is read)."""
    from app.cli.common import load_encoder_for, open_library, resolve_model_spec, user_settings
    from engine.indexing.indexer import Indexer
    from engine.progress import CancelToken

    with open_library(args.library) as library:
        encoder = load_encoder_for(resolve_model_spec(args.model, library), args.device)
        batch_size = args.batch_size or user_settings().batch_size
        indexer = Indexer(library, encoder, batch_size=batch_size)
        bar = TqdmProgress("indexing")
        cancel = CancelToken()
        try:
            report = indexer.run(folder, progress=bar, cancel=cancel)
        except KeyboardInterrupt:
            cancel.cancel()
            raise
        finally:
            bar.close()
    result: dict[str, Any] = report.to_json()
    result["summary"] = report.summary()
    return result


COMMANDS = (
    Command(
        "import-inquire-rerank",
        help="turn the INQUIRE-Rerank Parquet files into an indexed collection and benchmark",
        description="Write the photos of the INQUIRE-Rerank Parquet files in DIR (once each, "
        "with their metadata) as DIR2/collection, and DIR2/queries.csv, judgments.csv and "
        "candidates.csv; index the collection; print the command that scores it.",
        add_arguments=_arguments,
        run=cmd_import_inquire_rerank,
    ),
)
