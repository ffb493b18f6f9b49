"""`quadrat index FOLDER`: index a photo folder (incremental, resumable), here or on a Ray
cluster."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from app.cli.args import (
    add_library_options,
    add_model_options,
    add_runtime_option,
    index_memory_gb,
    positive_int,
)
from app.cli.common import (
    EXIT_OK,
    TqdmProgress,
    load_encoder_for,
    open_library,
    resolve_model_spec,
    user_settings,
)
from app.cli.registry import Command
from engine.errors import BadInputError


def _index_arguments(index: argparse.ArgumentParser) -> None:
    """The options of `quadrat index`."""
    index.add_argument("folder", type=Path)
    add_library_options(index)
    add_model_options(index)
    add_runtime_option(index)
    index.add_argument("--batch-size", type=positive_int, help="default: the settings' batch size")
    index.add_argument(
        "--workers", type=positive_int, default=None, help="decode threads (or processes)"
    )
    index.add_argument(
        "--decode",
        choices=["auto", "threads", "processes", "gpu"],
        help="decode photos in threads or in worker processes; auto: processes on 4 or more "
        "cores; gpu: JPEGs on the CUDA device that encodes, else as auto (default: the "
        "settings' decoding, auto)",
    )
    index.add_argument("--metadata", type=Path, help="COCO-style metadata JSON")
    index.add_argument("--reindex", action="store_true", help="re-encode with a new model")
    index.add_argument(
        "--prune",
        action="store_true",
        help="forget photos missing from disk, with their judgments (default: keep them)",
    )
    index.add_argument(
        "--no-relocate",
        dest="relocate",
        action="store_false",
        help="index a new folder as a new collection even if it looks like a moved one",
    )
    index.add_argument(
        "--index-memory",
        type=index_memory_gb,
        metavar="GB",
        help="memory the vector index may take (default: the settings', 4 GB); above it the "
        "index is compressed and re-ranked from a float16 file on disk",
    )
    index.add_argument("--json", action="store_true", help="print a JSON summary")
    index.add_argument(
        "--ray",
        metavar="ADDRESS",
        help="decode and encode on a Ray cluster (HOST:PORT, or auto); this process writes the "
        "library; needs pip install 'quadrat[ray]'",
    )


def cmd_index(args: argparse.Namespace) -> int:
    from engine.indexing.indexer import Indexer
    from engine.indexing.walk import printable_name
    from engine.progress import CancelToken

    folder = args.folder.expanduser()
    if not folder.exists():
        raise BadInputError(f"folder not found: {folder}")
    if not folder.is_dir():
        raise BadInputError(f"not a folder: {folder}")
    if args.ray is not None:
        from engine.indexing.ray_indexer import import_ray

        if args.workers is not None or args.decode is not None:
            raise BadInputError(
                "--workers and --decode set local decoding; with --ray the cluster decodes"
            )
        import_ray()  # without Ray: one line now, before the model loads
    with open_library(args.library) as library:
        if args.index_memory is not None:
            from app.settings import index_memory_bytes

            library.index_memory_budget = index_memory_bytes(args.index_memory)
        spec = resolve_model_spec(args.model, library)
        batch_size = args.batch_size or user_settings().batch_size
        indexer: Indexer
        if args.ray is not None:
            from app import paths
            from engine.indexing.ray_indexer import RayIndexer

            # This copy only names the model (key, size); the cluster's actors load their own.
            encoder = load_encoder_for(spec, "cpu", "torch")  # no export for a name
            indexer = RayIndexer(
                library,
                encoder,
                address=args.ray,
                device=args.device or "auto",
                cache_dir=paths.model_cache_dir(),
                store_dir=paths.models_dir(),
                batch_size=batch_size,
            )
        else:
            encoder = load_encoder_for(spec, args.device, args.runtime)
            decode = args.decode or user_settings().decode
            indexer = Indexer(
                library, encoder, batch_size=batch_size, workers=args.workers, decode=decode
            )
        bar = TqdmProgress("indexing")
        cancel = CancelToken()
        try:
            report = indexer.run(
                folder,
                metadata=args.metadata,
                reindex=args.reindex,
                relocate=args.relocate,
                prune=args.prune,
                progress=bar,
                cancel=cancel,
            )
        except KeyboardInterrupt:
            cancel.cancel()
            raise
        finally:
            bar.close()
    if args.json:
        print(json.dumps(report.to_json()))
    else:
        print(report.summary())
        skipped_all = report.all_skipped()
        for skipped in skipped_all[:20]:
            print(f"  skipped {printable_name(skipped.path)}: {skipped.reason}")
        if len(skipped_all) > 20:
            print(f"  ... and {len(skipped_all) - 20} more (use --json for the full list)")
    return EXIT_OK


COMMANDS = (
    Command(
        "index",
        help="index a photo folder (incremental, resumable)",
        add_arguments=_index_arguments,
        run=cmd_index,
    ),
)
