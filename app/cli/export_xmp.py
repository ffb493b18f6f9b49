"""`quadrat export xmp --query ID_OR_TEXT [--mirror DIR]`: a saved query's judgments and
attributes as hierarchical keywords in the judged photos' XMP sidecars
(`engine.io.xmp.write_sidecars`); the photos themselves are never written."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from app.cli.common import EXIT_OK, one_query_argument, open_library, saved_query_id
from engine.errors import BadInputError


def add_xmp_export_options(export: argparse.ArgumentParser) -> None:
    """The options `export xmp` adds to the `export` command."""
    export.add_argument(
        "--mirror",
        type=Path,
        metavar="DIR",
        help="xmp: where sidecars of photos in folders that cannot be written go, in the same "
        "layout below each collection's name (default: the library's 'sidecars' folder)",
    )


def cmd_export_xmp(args: argparse.Namespace) -> int:
    """Write the sidecars and say what was written, and where, in a few lines."""
    from engine.io.xmp import write_sidecars

    query = one_query_argument(args, "export xmp")
    if args.out is not None:
        raise BadInputError(
            "export xmp writes beside the photos and takes no OUT (a mirror is --mirror DIR)"
        )
    with open_library(args.library) as library:
        query_id = saved_query_id(library, query)
        report = write_sidecars(library, query_id, mirror=args.mirror)
    first, *rest = report.lines()
    print(first)
    for line in rest:
        print(line, file=sys.stderr)
    return EXIT_OK
