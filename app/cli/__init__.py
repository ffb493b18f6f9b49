"""The `quadrat` command (docs/SPEC.md §5). Never imports Qt unless the GUI is asked for.

Exit codes: 0 success; 2 bad usage or bad input (one line on stderr); 1 any other failure.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from app.cli.analyses import add_analyses_command
from app.cli.args import index_memory_gb, positive_int
from app.cli.attributes import add_attributes_command
from app.cli.backup import add_backup_command
from app.cli.camtrap import (
    CAMTRAP_KIND,
    add_camera_trap_demo_option,
    add_camtrap_options,
    cmd_camera_trap_demo,
    cmd_export_camtrap,
)
from app.cli.common import (
    EXIT_FAILURE,
    EXIT_OK,
    EXIT_USAGE,
    TqdmProgress,
    add_rerank_options,
    add_visret_options,
    confirm,
    load_encoder_for,
    method_from_args,
    one_query_argument,
    open_library,
    quick_text_encoder,
    reset_settings,
    resolve_model_spec,
    saved_query_id,
    set_database_url,
    user_settings,
)
from app.cli.evaluate import add_evaluate_command
from app.cli.events import (
    add_deployments_command,
    add_search_event_options,
    event_results,
    print_event_results,
    search_depth,
)
from app.cli.export_dwc import (
    DWC_KINDS,
    add_dwc_options,
    cmd_export_records,
    cmd_export_relevant_photos,
)
from app.cli.export_xmp import add_xmp_export_options, cmd_export_xmp
from app.cli.feedback import add_feedback_commands
from app.cli.filters import add_filter_options, check_filter_args, filters_from_args
from app.cli.inquire import add_inquire_command
from app.cli.judges import add_export_judge_option, add_judge_option, add_judges_commands
from app.cli.methods import add_methods_command, lists_methods, method_option_help
from app.cli.metrics import add_metrics_command
from app.cli.models import add_models_command
from app.cli.privacy import add_sensitive_taxa_command
from app.settings import language_model
from engine.errors import BadInputError, ModelLoadError, ModelMismatchError, QuadratError
from engine.models.hub import ModelUnavailableError

log = logging.getLogger("quadrat.cli")


class UsageError(Exception):
    """Raised by the argument parser instead of printing a two-line usage message."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="quadrat", description="Expert image search over local photo collections."
    )
    parser.add_argument(  # handled in main(), before logging touches the user's folders
        "--self-test",
        action="store_true",
        help="check this installation offline in a throwaway folder (demo, index, search, "
        "judge, metrics, window) and print one line; exit 0 only if all passed",
    )
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)

    def library_option(p: argparse.ArgumentParser) -> None:
        p.add_argument("--library", type=Path, help="library folder (catalog, indexes, caches)")
        p.add_argument(
            "--database-url",
            metavar="URL",
            help="the catalog of a new library folder, e.g. postgresql://USER@HOST/DATABASE "
            "(recorded in the folder, password never; default: the settings' database URL)",
        )

    def model_option(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--model",
            help="demo | ARCH:PRETRAINED | hf-hub:ORG/NAME | ARCH:/path/to/checkpoint "
            "(default: the library's model)",
        )
        p.add_argument(
            "--device", choices=["auto", "cpu", "cuda", "mps"], help="default: the settings' device"
        )

    def runtime_option(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--runtime",
            choices=["torch", "onnx", "auto"],
            help="how the model encodes on the CPU: onnx (exported once into the model store "
            "and checked against torch; same vectors), torch, or auto: onnx when the model "
            "exports (default: the settings' runtime, auto)",
        )

    gui = sub.add_parser("gui", help="open the window")
    gui.add_argument("folder", nargs="?", type=Path)
    gui.add_argument("--demo", action="store_true", help="open the bundled demo collection")
    gui.set_defaults(func=cmd_gui)

    index = sub.add_parser("index", help="index a photo folder (incremental, resumable)")
    index.add_argument("folder", type=Path)
    library_option(index)
    model_option(index)
    runtime_option(index)
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
    index.set_defaults(func=cmd_index)

    search = sub.add_parser("search", help="search a library by text and/or image")
    search.add_argument("text", nargs="?", default="")
    library_option(search)
    model_option(search)
    runtime_option(search)
    search.add_argument("--top", type=positive_int, default=20)
    search.add_argument("--image", type=Path, help="query image (with TEXT: image+text query)")
    lists_methods(search.add_argument("--method", default="text", help=method_option_help()))
    search.add_argument("--json", action="store_true", help="one JSON object per result")
    add_search_event_options(search)
    add_filter_options(search)
    add_visret_options(search)
    add_rerank_options(search)
    search.set_defaults(func=cmd_search)

    forget = sub.add_parser(
        "forget", help="forget the photos missing from disk, with their judgments"
    )
    forget.add_argument("--collection", type=Path, help="only this collection's folder")
    library_option(forget)
    forget.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    forget.add_argument(
        "--even-if-unmounted",
        action="store_true",
        help="forget even when the collection's folder is not there or a large share of its "
        "photos is missing at once (by default that looks like an unmounted drive or share, "
        "and nothing is forgotten)",
    )
    forget.set_defaults(func=cmd_forget)

    relocate = sub.add_parser(
        "relocate", help="point a collection at the folder it was moved or renamed to"
    )
    relocate.add_argument("old", type=Path, help="the collection's old folder")
    relocate.add_argument("new", type=Path, help="where the folder is now")
    library_option(relocate)
    relocate.set_defaults(func=cmd_relocate)

    demo = sub.add_parser("demo", help="write the demo collection to DIR")
    demo.add_argument("dir", type=Path)
    demo.add_argument("--images-per-class", type=positive_int, default=40)
    add_camera_trap_demo_option(demo)
    demo.set_defaults(func=cmd_demo)

    export = sub.add_parser(
        "export",
        help="export judgments, copy the photos judged relevant, or write XMP sidecars (xmp)",
    )
    export.add_argument(
        "what", choices=["judgments", "relevant-photos", "xmp", *DWC_KINDS, CAMTRAP_KIND]
    )
    export.add_argument(
        "out", type=Path, nargs="?",
        help="output file (judgments) or folder (photos); none for xmp (beside the photos)",
    )  # fmt: skip
    library_option(export)
    export.add_argument("--format", default="csv", choices=["csv", "qrels"])
    export.add_argument(
        "--query", action="append", metavar="ID_OR_TEXT", help="saved query id or its exact text"
    )
    add_export_judge_option(export)
    add_xmp_export_options(export)
    add_dwc_options(export)  # dwca, dwc-csv: Darwin Core records of a query's relevant photos
    add_camtrap_options(export)  # camtrap-dp: a Camtrap DP package of its judged events
    export.set_defaults(func=cmd_export)

    imp = sub.add_parser(
        "import",
        help="import benchmark queries (and judgments) as saved queries, or judgments alone",
    )
    imp.add_argument(
        "queries", type=Path, nargs="?",
        help="queries CSV (INQUIRE format); without it the judgments' query ids are saved-query "
        "ids, as 'quadrat export judgments' writes them",
    )  # fmt: skip
    imp.add_argument("--judgments", type=Path)
    add_judge_option(imp)
    library_option(imp)
    imp.set_defaults(func=cmd_import)

    add_metrics_command(sub)
    add_evaluate_command(sub)
    add_inquire_command(sub)
    add_backup_command(sub)
    add_deployments_command(sub)
    add_methods_command(sub)
    add_models_command(sub)
    add_feedback_commands(sub)
    add_attributes_command(sub)
    add_analyses_command(sub)
    add_judges_commands(sub)
    add_sensitive_taxa_command(sub)
    return parser


# -- commands -------------------------------------------------------------------------------


def _no_display() -> bool:
    """True on a Linux/BSD session with no screen, where Qt would abort with a core dump."""
    if sys.platform.startswith(("win", "darwin")) or os.environ.get("QT_QPA_PLATFORM"):
        return False
    return not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def _window_import_failure(exc: ImportError) -> str:
    """One line for an import the window needed and could not make: what, and how to fix it."""
    name = exc.name or "a module"
    detail = " ".join(str(exc).split())
    if name.split(".")[0] in ("PySide6", "shiboken6"):
        if isinstance(exc, ModuleNotFoundError):
            how = "install Qt for Python (pip install PySide6-Essentials)"
        else:  # the module is there but a system library it links to is not
            how = "install the missing system library with your package manager"
        what = f"Qt could not be imported ({name}: {detail})"
    else:
        what, how = f"{name} could not be imported ({detail})", "reinstall Quadrat"
    return f"the window cannot start: {what}; {how}, or use the command line (quadrat --help)"


def cmd_gui(args: argparse.Namespace) -> int:
    if _no_display():
        raise QuadratError(
            "no display found for the window; run it on a desktop, or use the command line "
            "(quadrat --help)"
        )
    # Qt is imported inside run_gui, not at the top of app.main: both failures land here.
    try:
        from app.main import run_gui

        return run_gui(folder=args.folder, demo=args.demo)
    except ImportError as exc:
        raise QuadratError(_window_import_failure(exc)) from exc


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


def cmd_search(args: argparse.Namespace) -> int:
    import time

    from engine.indexing.collections import missing_photos
    from engine.indexing.walk import printable_name
    from engine.methods import MethodContext, SearchQuery
    from engine.search.searcher import validate_query_text

    method = method_from_args(args)  # fail fast, before loading any model
    query = SearchQuery(args.text, args.image)
    if args.image is None:
        validate_query_text(args.text)
    method.check_query(query)  # before loading any model
    check_filter_args(args)
    with open_library(args.library) as library:
        if library.model_key is None:
            raise BadInputError(library.no_photos_message("run 'quadrat index FOLDER'"))
        filters = filters_from_args(args, library)
        # A text query on the CPU needs no torch when the model's ONNX text tower is stored.
        quick = (
            None
            if args.image
            else quick_text_encoder(args.model, library, args.device, args.runtime)
        )
        runtime = args.runtime or user_settings().runtime
        # One search waits for no export (indexing makes it), unless ONNX was asked for.
        encoder = quick or load_encoder_for(
            resolve_model_spec(args.model, library), args.device, runtime, export=runtime == "onnx"
        )
        context = MethodContext(
            library,
            lambda: encoder,
            filters=filters,
            generator=user_settings().generator,
            llm=language_model(user_settings()),
        )
        missing = missing_photos(library)
        started = time.monotonic()
        ranking = method.run(query, context, top_k=search_depth(args))
        seconds = time.monotonic() - started
        hits = context.searcher.hits_for(ranking.pairs())
        events = event_results(library, hits, args)  # None unless --events
        names = None
        if filters.active:  # chips name collections and deployments; so does the note
            from engine.search.filters import filter_names

            names = filter_names(library.catalog)
    if events is not None:
        print_event_results(events, args.json, {"method": method.text, "kind": query.kind})
        if not args.json:
            took = f"{seconds * 1000:.0f} ms ({method.text})"
            print(f"{len(events)} events in {took}", file=sys.stderr)
    elif args.json:
        for hit in hits:
            line = {**hit.to_json(), "method": method.text, "kind": query.kind}
            evidence = ranking.evidence.get(hit.image_id, {})
            if "answers" in evidence:  # rerank: each subquery's answer for this photo
                line["answers"] = evidence["answers"]
            print(json.dumps(line))
    else:
        for hit in hits:
            name = f"  {printable_name(hit.taxon)}" if hit.taxon else ""
            # One result, one line: a newline in a file name must not split it (--json keeps
            # the exact path).
            print(f"{hit.rank:4d}  {hit.score:.4f}  {printable_name(str(hit.path))}{name}")
        print(
            f"{len(hits)} results in {seconds * 1000:.0f} ms ({method.text}, {query.kind} query)",
            file=sys.stderr,
        )
    if filters.active:
        applied = "; ".join(label for _, label in filters.describe(names))
        print(f"note: only photos passing the filters: {applied}", file=sys.stderr)
    if ranking.details.get("note"):  # e.g. why the language model's subqueries were not used
        print(f"note: {ranking.details['note']}", file=sys.stderr)
    if missing.photos:
        print(f"note: {_missing_note(missing.photos)}", file=sys.stderr)
    return EXIT_OK


def _missing_note(photos: int) -> str:
    return (
        f"{photos} photos of the library are missing from disk and were not searched "
        "(their judgments are kept; 'quadrat index FOLDER' finds them again)"
    )


def cmd_export(args: argparse.Namespace) -> int:
    from engine.io.export import export_judgments

    if args.what == "xmp":
        return cmd_export_xmp(args)
    if args.what == CAMTRAP_KIND:
        return cmd_export_camtrap(args)  # OUT may be left out with --check
    if args.what in DWC_KINDS:
        return cmd_export_records(args)  # likewise
    if args.out is None:
        raise BadInputError(f"export {args.what} needs OUT (a file or folder to write)")
    with open_library(args.library) as library:
        queries = [saved_query_id(library, q) for q in args.query or ()] or None
        if args.what == "judgments":
            view = getattr(args, "judges_view", None) or "newest"
            rows = export_judgments(library, args.out, queries, fmt=args.format, view=view)
            print(f"{rows} judgments written to {args.out}")
            return EXIT_OK
    one_query_argument(args, "relevant-photos")
    assert queries is not None  # one, resolved above
    return cmd_export_relevant_photos(args, queries[0])


def cmd_forget(args: argparse.Namespace) -> int:
    from engine.indexing.collections import (
        find_collection,
        forget_missing,
        missing_photos,
        refuse_if_unmounted,
    )

    with open_library(args.library) as library:
        collection_id = None
        if args.collection is not None:
            collection_id = find_collection(library, args.collection)
            if collection_id is None:
                raise BadInputError(f"no collection of this library is at {args.collection}")
        found = missing_photos(library, collection_id)
        if not found.photos:
            print("no photos are missing from disk; nothing to forget")
            return EXIT_OK
        if not args.even_if_unmounted:  # refuse before asking: nothing to confirm then
            refuse_if_unmounted(library, collection_id)
        confirm(
            f"forget {found.photos} missing photos and their {found.judgments} judgments for good",
            args.yes,
        )
        forgotten = forget_missing(library, collection_id, even_if_unmounted=args.even_if_unmounted)
    print(f"{forgotten.photos} missing photos forgotten, with {forgotten.judgments} judgments")
    return EXIT_OK


def cmd_relocate(args: argparse.Namespace) -> int:
    from engine.indexing.collections import relocate_collection

    with open_library(args.library) as library:
        moved = relocate_collection(library, args.old, args.new)
    merged = (
        f"; {moved.merged_duplicates} photos indexed twice were merged"
        if moved.merged_duplicates
        else ""
    )
    print(
        f"collection moved from {moved.old_root} to {moved.new_root}: {moved.photos} photos keep "
        f"their ids and judgments{merged}; run 'quadrat index {moved.new_root}' to check them"
    )
    return EXIT_OK


def cmd_import(args: argparse.Namespace) -> int:
    from engine.io.export import import_benchmark

    with open_library(args.library) as library:
        report = import_benchmark(library, args.queries, args.judgments, judge=args.judge)
    print(
        f"{report.queries} queries and {report.judgments} judgments imported"
        + (
            f"; {report.unresolved} judgments name photos not in the library"
            if report.unresolved
            else ""
        )
        + (f"; the catalog as it was before is in {report.backup}" if report.backup else "")
    )
    return EXIT_OK


def cmd_demo(args: argparse.Namespace) -> int:
    from engine.demo.collection import write_demo_collection

    if args.camera_traps:
        return cmd_camera_trap_demo(args)
    info = write_demo_collection(args.dir.expanduser(), images_per_class=args.images_per_class)
    print(f"demo collection written to {args.dir} ({info.image_count} photos)")
    return EXIT_OK


# 128 + SIGPIPE, what a shell reports for a Unix tool whose reader went away.
EXIT_BROKEN_PIPE = 141


# -- entry point ----------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    from app.logs import setup_logging

    reset_settings()  # each command reads the settings file as it is now
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--self-test"]:  # it logs only inside its own throwaway folder
        from app.selftest import main as self_test

        return self_test(argv[1:])
    log_file = setup_logging()
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            return cmd_gui(argparse.Namespace(folder=None, demo=False))
        set_database_url(getattr(args, "database_url", None))
        code = int(args.func(args) or EXIT_OK)
        sys.stdout.flush()  # a reader that went away is met here, not in Python's exit
        return code
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ModelUnavailableError as exc:  # the command was right; the network was not there
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    except (BadInputError, ModelLoadError, ModelMismatchError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except QuadratError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        print("interrupted: work committed so far is kept", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader of stdout went away (`| head`, `| grep -q`): stop quietly, as Unix tools
        # do on SIGPIPE, and keep Python from reporting the unflushed rest at exit.
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except Exception as exc:  # the details go to the log file, the user gets one line
        log.debug("unexpected failure", exc_info=True)
        if type(exc).__module__.startswith("sqlalchemy"):  # never SQL and its parameters
            from engine.catalog.db import catalog_error

            print(f"error: {catalog_error(exc, None)}", file=sys.stderr)
            return EXIT_FAILURE
        where = f" (details in {log_file})" if log_file else ""
        print(f"error: {type(exc).__name__}: {exc}{where}", file=sys.stderr)
        return EXIT_FAILURE
