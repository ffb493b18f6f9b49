"""`quadrat relocate OLD NEW`: point a collection at the folder it was moved to."""

from __future__ import annotations

import argparse
from pathlib import Path

from app.cli.args import (
    add_library_options,
)
from app.cli.common import (
    EXIT_OK,
    open_library,
)
from app.cli.registry import Command


def _relocate_arguments(relocate: argparse.ArgumentParser) -> None:
    """The options of `quadrat relocate`."""
    relocate.add_argument("old", type=Path, help="the collection's old folder")
    relocate.add_argument("new", type=Path, help="where the folder is now")
    add_library_options(relocate)


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


COMMANDS = (
    Command(
        "relocate",
        help="point a collection at the folder it was moved or renamed to",
        add_arguments=_relocate_arguments,
        run=cmd_relocate,
    ),
)
