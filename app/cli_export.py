"""`quadrat export dwca` and `quadrat export dwc-csv`: a saved query's relevant photos as
Darwin Core records (engine/io/dwc.py), registered as kinds of `quadrat export`."""

from __future__ import annotations

import argparse
import sys

from app.cli_common import EXIT_OK, one_query_argument, open_library, saved_query_id

DWC_KINDS = ("dwca", "dwc-csv")
"""What `quadrat export` writes as Darwin Core: an archive for GBIF, or a flat CSV."""

_LISTED = 20  # photos named one per line before "and N more"


def add_dwc_options(export: argparse.ArgumentParser) -> None:
    """The options only the Darwin Core kinds of `quadrat export` take."""
    export.add_argument(
        "--include-restricted",
        action="store_true",
        help="dwca, dwc-csv, camtrap-dp: include photos whose licence does not allow reuse (all "
        "rights reserved, none recorded); they are left out and counted otherwise",
    )
    export.add_argument(
        "--media-url",
        metavar="URL",
        help="dwca, dwc-csv: where the photos will be published; each photo's identifier "
        "becomes URL/<its path in the collection>",
    )


def cmd_export_records(args: argparse.Namespace) -> int:
    """Write the Darwin Core archive or CSV of one saved query (its id or its text)."""
    from engine.io.dwc import export_dwc_csv, export_dwca

    query = one_query_argument(args, args.what)
    with open_library(args.library) as library:
        query_id = saved_query_id(library, query)
        write = export_dwca if args.what == "dwca" else export_dwc_csv
        report = write(
            library,
            query_id,
            args.out,
            include_restricted=args.include_restricted,
            media_url=args.media_url,
        )
    print(report.summary())
    for heading, photos in (
        ("restricted licence" + (", included" if report.restricted_included else ", left out"),
         report.restricted),
        ("incomplete, written with what they have", report.incomplete),
    ):  # fmt: skip
        if not photos:
            continue
        print(f"{len(photos):,} photos, {heading}:", file=sys.stderr)
        for photo in photos[:_LISTED]:
            print(f"  {photo.path} ({photo.reason})", file=sys.stderr)
        if len(photos) > _LISTED:
            print(f"  and {len(photos) - _LISTED:,} more", file=sys.stderr)
    return EXIT_OK
