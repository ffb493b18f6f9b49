"""`quadrat import [QUERIES] [--judgments FILE]`: benchmark queries and judgments as saved
queries, or judgments alone."""

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
from app.cli.judges import add_judge_option
from app.cli.registry import Command


def _imp_arguments(imp: argparse.ArgumentParser) -> None:
    """The options of `quadrat import`."""
    imp.add_argument(
        "queries", type=Path, nargs="?",
        help="queries CSV (INQUIRE format); without it the judgments' query ids are saved-query "
        "ids, as 'quadrat export judgments' writes them",
    )  # fmt: skip
    imp.add_argument("--judgments", type=Path)
    add_judge_option(imp)
    add_library_options(imp)


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


COMMANDS = (
    Command(
        "import",
        help="import benchmark queries (and judgments) as saved queries, or judgments alone",
        add_arguments=_imp_arguments,
        run=cmd_import,
    ),
)
