"""`quadrat export FORMAT [OUT]`: every format of the registry (`engine/io/formats.py`).

Judgments, relevant photos, XMP sidecars, Darwin Core and Camtrap DP have command lines of
their own (`_OWN_COMMAND_LINES`); any other format is run from its registry entry: one saved
query (`--query`), OUT, the options it declares, and its report's summary line."""

from __future__ import annotations

import argparse
from pathlib import Path

from app.cli.args import (
    add_library_options,
)
from app.cli.camtrap import (
    CAMTRAP_KIND,
    add_camtrap_options,
    cmd_export_camtrap,
)
from app.cli.common import (
    EXIT_OK,
    one_query_argument,
    open_library,
    saved_query_id,
)
from app.cli.export_dwc import (
    DWC_KINDS,
    add_dwc_options,
    cmd_export_records,
    cmd_export_relevant_photos,
)
from app.cli.export_xmp import add_xmp_export_options, cmd_export_xmp
from app.cli.judges import add_export_judge_option
from app.cli.registry import Command
from engine.errors import BadInputError
from engine.io.formats import BESIDE, FormatOption, format_names, get_format

# The formats whose command lines came before the registry, with their own options and output.
_OWN_COMMAND_LINES = frozenset({"judgments", "relevant-photos", "xmp", *DWC_KINDS, CAMTRAP_KIND})


def _export_arguments(export: argparse.ArgumentParser) -> None:
    """The options of `quadrat export`."""
    export.add_argument("what", choices=format_names())
    export.add_argument(
        "out", type=Path, nargs="?",
        help="output file (judgments) or folder (photos); none for xmp (beside the photos)",
    )  # fmt: skip
    add_library_options(export)
    export.add_argument("--format", default="csv", choices=["csv", "qrels"])
    export.add_argument(
        "--query", action="append", metavar="ID_OR_TEXT", help="saved query id or its exact text"
    )
    add_export_judge_option(export)
    add_xmp_export_options(export)
    add_dwc_options(export)  # dwca, dwc-csv: Darwin Core records of a query's relevant photos
    add_camtrap_options(export)  # camtrap-dp: a Camtrap DP package of its judged events
    for name in format_names():  # the options of the formats registered since
        if name not in _OWN_COMMAND_LINES:
            for option in get_format(name).options:
                _add_format_option(export, name, option)


def _add_format_option(export: argparse.ArgumentParser, name: str, option: FormatOption) -> None:
    """A registered format's option; one another format defined already is that option."""
    if option.flag in export._option_string_actions:
        return
    if option.switch:
        action = "store_false" if option.negated else "store_true"
        export.add_argument(
            option.flag, dest=option.dest, action=action, help=f"{name}: {option.help}"
        )
    else:
        export.add_argument(
            option.flag, dest=option.dest, metavar=option.metavar, help=f"{name}: {option.help}"
        )


def _export_registered(args: argparse.Namespace) -> int:
    """A format run from its registry entry: one saved query into OUT."""
    chosen = get_format(args.what)
    query = one_query_argument(args, args.what)
    if args.out is None and chosen.target != BESIDE:
        raise BadInputError(f"export {args.what} needs OUT (a {chosen.target} to write)")
    options = {option.dest: getattr(args, option.dest) for option in chosen.options}
    with open_library(args.library) as library:
        report = chosen.run(library, saved_query_id(library, query), args.out, **options)
    print(report.summary())
    return EXIT_OK


def cmd_export(args: argparse.Namespace) -> int:
    from engine.io.export import export_judgments

    if args.what not in _OWN_COMMAND_LINES:
        return _export_registered(args)
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


COMMANDS = (
    Command(
        "export",
        help="export judgments, copy the photos judged relevant, or write XMP sidecars (xmp)",
        add_arguments=_export_arguments,
        run=cmd_export,
    ),
)
