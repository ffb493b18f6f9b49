"""`quadrat search [TEXT] [--image PATH]`: one search of a library by a registered method,
with the filter flags; results one per line (or JSON) on stdout, notes on stderr."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from app.cli.args import (
    add_library_options,
    add_model_options,
    add_runtime_option,
    positive_int,
)
from app.cli.common import (
    EXIT_OK,
    add_rerank_options,
    add_visret_options,
    method_from_args,
    open_library,
    search_encoder,
    user_settings,
)
from app.cli.events import (
    add_search_event_options,
    event_results,
    print_event_results,
    search_depth,
)
from app.cli.filters import add_filter_options, check_filter_args, filters_from_args
from app.cli.methods import lists_methods, method_option_help
from app.cli.registry import Command
from app.settings import language_model
from engine.errors import BadInputError
from engine.methods.units import DEFAULT_RULE, FUSE_RULES


def _search_arguments(search: argparse.ArgumentParser) -> None:
    """The options of `quadrat search`."""
    search.add_argument("text", nargs="?", default="")
    add_library_options(search)
    add_model_options(search)
    add_runtime_option(search)
    search.add_argument("--top", type=positive_int, default=20)
    search.add_argument("--image", type=Path, help="query image (with TEXT: image+text query)")
    lists_methods(search.add_argument("--method", default="text", help=method_option_help()))
    search.add_argument("--json", action="store_true", help="one JSON object per result")
    search.add_argument(
        "--unit",
        choices=["frames", "boxes", "fused"],
        default="frames",
        help="rank frames (default), boxes (detections' crops: 'quadrat crops encode' first) "
        "or frames by their full-frame and best-crop scores fused",
    )
    search.add_argument(
        "--fusion",
        choices=list(FUSE_RULES),
        default=DEFAULT_RULE,
        help=f"how --unit fused combines the two scores (default {DEFAULT_RULE})",
    )
    add_search_event_options(search)
    add_filter_options(search)
    add_visret_options(search)
    add_rerank_options(search)


def cmd_search(args: argparse.Namespace) -> int:
    from engine.catalog.reads import missing_photos
    from engine.indexing.walk import printable_name
    from engine.methods import SearchJob, SearchQuery, run_search
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
        # A text query needs no torch when the model's ONNX text tower is stored.
        encoder = search_encoder(
            args.model, library, args.device, args.runtime, text=not args.image
        )
        job = SearchJob(
            library,
            query,
            lambda: encoder,
            method,
            search_depth(args),
            filters,
            generator=user_settings().generator,
            llm=language_model(user_settings()),
            unit=args.unit,
            fusion=args.fusion,
        )
        missing = missing_photos(library)
        found = run_search(job)
        ranking, hits, seconds = found.ranking, found.hits, found.seconds
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
    elif args.unit == "boxes":
        for box in found.boxes[: args.top]:
            if args.json:
                print(json.dumps({**box.to_json(), "method": method.text, "unit": "boxes"}))
            else:
                where = ",".join(f"{v:.3f}" for v in (box.box.x, box.box.y, box.box.width,
                                                       box.box.height))  # fmt: skip
                print(f"{box.rank:4d}  {box.score:.4f}  {printable_name(box.path)}  [{where}]")
        if not args.json:
            print(f"{min(len(found.boxes), args.top)} boxes in {seconds * 1000:.0f} ms",
                  file=sys.stderr)  # fmt: skip
    elif args.json:
        for hit in hits:
            line = {**hit.to_json(), "method": method.text, "kind": query.kind}
            evidence = ranking.evidence.get(hit.image_id, {})
            if "answers" in evidence:  # rerank: each subquery's answer for this photo
                line["answers"] = evidence["answers"]
            if args.unit == "fused":
                line["unit"] = "fused"
                line["best_detection"] = found.best_box.get(hit.image_id)
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


COMMANDS = (
    Command(
        "search",
        help="search a library by text and/or image",
        add_arguments=_search_arguments,
        run=cmd_search,
    ),
)
