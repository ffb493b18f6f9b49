"""`quadrat analyses` (docs/SPEC.md §6.3): a query's relevant photos counted by month, day of
year, hour, taxon and place, written as CSV files and PNG charts into a folder
(`engine.io.analyses`).

    quadrat analyses --query ID_OR_TEXT OUT_DIR [--no-charts] [--json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from app.cli.common import EXIT_OK, open_library, saved_query_id
from app.cli.registry import Command


def _arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `quadrat analyses`."""
    parser.add_argument("out_dir", type=Path, metavar="OUT_DIR", help="folder written into")
    parser.add_argument(
        "--query", required=True, metavar="ID_OR_TEXT", help="saved query id or its exact text"
    )
    parser.add_argument("--library", type=Path, help="library folder")
    parser.add_argument("--no-charts", action="store_true", help="write the CSV files only")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def run_analyses_command(args: argparse.Namespace) -> int:
    from engine.io.analyses import analyse_query, write_analyses

    with open_library(args.library) as library:
        query_id = saved_query_id(library, args.query)
        analyses = analyse_query(library, query_id)
    title = args.query if not args.query.strip().isdigit() else f"query {query_id}"
    written = write_analyses(analyses, args.out_dir, title, charts=not args.no_charts)
    if args.json:
        print(json.dumps({
            "query_id": query_id,
            "relevant": analyses.relevant,
            "no_date": analyses.no_date,
            "no_time_of_day": analyses.no_time,
            "no_taxon": analyses.no_taxon,
            "no_place": analyses.no_place,
            "files": [str(path) for path in written],
        }))  # fmt: skip
        return EXIT_OK
    print(analyses.summary())
    print(f"wrote {len(written)} files to {args.out_dir}: {', '.join(p.name for p in written)}")
    return EXIT_OK


COMMANDS = (
    Command(
        "analyses",
        help="phenology, diel activity, taxa and places of a query's relevant photos",
        description="Count a saved query's relevant photos by month and day of year per year, "
        "by hour of the day (local time), by taxon and by place; write CSV files and PNG "
        "charts into OUT_DIR.",
        add_arguments=_arguments,
        run=run_analyses_command,
    ),
)
