"""`quadrat export dwca` and `quadrat export dwc-csv`: a saved query's relevant photos as
Darwin Core records (engine/io/dwc.py), registered as kinds of `quadrat export`; and the
summary of `quadrat export relevant-photos`.

Every Darwin Core export is checked first: `--check` writes nothing and reports; an export
pre-flight finds errors in is not written unless `--write-anyway` (exit 1, docs/SPEC.md §5.1).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from app.cli.common import EXIT_FAILURE, EXIT_OK, one_query_argument, open_library, saved_query_id
from engine.errors import BadInputError

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
        "becomes URL/<its path in the collection> (without it, the photo's file: URI)",
    )
    export.add_argument(
        "--check",
        action="store_true",
        help="dwca, dwc-csv, camtrap-dp: check the records (GBIF's rules, the standard's) and "
        "report, writing nothing (OUT may be left out; exit 1 when it would not be written)",
    )
    export.add_argument(
        "--write-anyway",
        action="store_true",
        help="dwca, dwc-csv, camtrap-dp: write even when the check finds errors (they are not "
        "written otherwise)",
    )
    export.add_argument(
        "--no-sensitive-taxa",
        dest="sensitive_taxa",
        action="store_false",
        help="dwca, dwc-csv, camtrap-dp, relevant-photos: do not apply the lab's sensitive-taxa list "
        "(places the records themselves withhold stay withheld; the dataset's metadata says so)",
    )


def _list(heading: str, lines: Sequence[str]) -> None:
    """A heading and up to `_LISTED` lines on stderr."""
    if not lines:
        return
    print(heading, file=sys.stderr)
    for line in lines[:_LISTED]:
        print(f"  {line}", file=sys.stderr)
    if len(lines) > _LISTED:
        print(f"  and {len(lines) - _LISTED:,} more", file=sys.stderr)


def _print_problems(problems: Sequence[object]) -> None:
    from engine.io.dwc_checks import Problem

    found = [p for p in problems if isinstance(p, Problem)]
    errors = [p.line() for p in found if p.is_error]
    warnings = [p.line() for p in found if not p.is_error]
    _list(f"{len(errors):,} errors (GBIF would refuse or misread these):", errors)
    _list(f"{len(warnings):,} warnings:", warnings)


def cmd_export_records(args: argparse.Namespace) -> int:
    """Check, then write, the Darwin Core archive or CSV of one saved query (its id or text)."""
    from engine.io.dwc import RecordsRefused, check_records, export_dwc_csv, export_dwca

    query = one_query_argument(args, args.what)
    options = {
        "include_restricted": args.include_restricted,
        "media_url": args.media_url,
        "sensitive_taxa": args.sensitive_taxa,
    }
    with open_library(args.library) as library:
        query_id = saved_query_id(library, query)
        if args.check:  # OUT may be left out: nothing is written
            check = check_records(library, query_id, args.what, **options)
            print(check.summary())
            _print_problems(check.problems)
            _list_photos(check.left_out, check.incomplete, check.restricted_included)
            return EXIT_OK if check.would_write else EXIT_FAILURE
        if args.out is None:
            raise BadInputError(f"export {args.what} needs OUT (a file to write), or --check")
        write = export_dwca if args.what == "dwca" else export_dwc_csv
        try:
            report = write(library, query_id, args.out, write_anyway=args.write_anyway, **options)
        except RecordsRefused as refused:
            _print_problems(refused.problems)
            raise
    print(report.summary())
    _print_problems(report.problems)
    _list_photos(report.restricted, report.incomplete, report.restricted_included)
    return EXIT_OK


def _list_photos(
    restricted: Sequence[object], incomplete: Sequence[object], included: bool
) -> None:
    from engine.io.dwc import ListedPhoto

    for heading, photos in (
        ("restricted licence" + (", included" if included else ", left out"), restricted),
        ("incomplete, written with what they have", incomplete),
    ):
        listed = [p for p in photos if isinstance(p, ListedPhoto)]
        _list(f"{len(listed):,} photos, {heading}:", [f"{p.path} ({p.reason})" for p in listed])


def cmd_export_relevant_photos(args: argparse.Namespace, query_id: int) -> int:
    """Copy a query's relevant photos, GPS removed where their place may not be published."""
    from engine.io.export import copy_relevant_photos

    with open_library(args.library) as library:
        copied = copy_relevant_photos(
            library, query_id, args.out, sensitive_taxa=getattr(args, "sensitive_taxa", True)
        )
    print(copied.summary(args.out))
    if copied.missing:
        print(
            f"{copied.missing} photos judged relevant are missing from disk and were not "
            "copied (their judgments are kept)",
            file=sys.stderr,
        )
    _list(
        f"{len(copied.refused):,} photos not copied: their place may not be published and "
        "Quadrat cannot remove GPS from their format:",
        [f"{path} ({reason})" for path, reason in copied.refused],
    )
    return EXIT_OK
