"""`quadrat forget`: forget the photos missing from disk, with their judgments (refused when a
collection looks unmounted)."""

from __future__ import annotations

import argparse
from pathlib import Path

from app.cli.args import (
    add_library_options,
)
from app.cli.common import (
    EXIT_OK,
    confirm,
    open_library,
)
from app.cli.registry import Command
from engine.errors import BadInputError


def _forget_arguments(forget: argparse.ArgumentParser) -> None:
    """The options of `quadrat forget`."""
    forget.add_argument("--collection", type=Path, help="only this collection's folder")
    add_library_options(forget)
    forget.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    forget.add_argument(
        "--even-if-unmounted",
        action="store_true",
        help="forget even when the collection's folder is not there or a large share of its "
        "photos is missing at once (by default that looks like an unmounted drive or share, "
        "and nothing is forgotten)",
    )


def cmd_forget(args: argparse.Namespace) -> int:
    from engine.catalog.reads import find_collection, missing_photos, refuse_if_unmounted
    from engine.indexing.collections import forget_missing

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


COMMANDS = (
    Command(
        "forget",
        help="forget the photos missing from disk, with their judgments",
        add_arguments=_forget_arguments,
        run=cmd_forget,
    ),
)
