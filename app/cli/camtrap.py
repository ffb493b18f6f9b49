"""`quadrat export camtrap-dp` (a saved query's judged camera-trap events as a Camtrap DP 1.0
package, engine/io/camtrap_dp.py) and `quadrat demo DIR --camera-traps`."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from app.cli.common import EXIT_FAILURE, EXIT_OK, one_query_argument, open_library, saved_query_id
from engine.errors import BadInputError

if TYPE_CHECKING:
    from engine.io.camtrap_dp import CamtrapCheck

CAMTRAP_KIND = "camtrap-dp"
"""The kind of `quadrat export` that writes a Camtrap DP package into the folder OUT."""

_LISTED = 20  # problems and photos named one per line before "and N more"


def _add_shared(export: argparse.ArgumentParser, *flags: str, **kwargs: Any) -> None:
    """An option other kinds of `quadrat export` may define as well: one serves them all."""
    # Defined already (by the Darwin Core kinds): that option is this one.
    with contextlib.suppress(argparse.ArgumentError):
        export.add_argument(*flags, **kwargs)


def add_camtrap_options(export: argparse.ArgumentParser) -> None:
    """The options `quadrat export camtrap-dp` takes (besides --include-restricted)."""
    export.add_argument(
        "--scientific-name",
        metavar="NAME",
        help="camtrap-dp: the taxon of the observations where the photos' records name none "
        "(e.g. 'Capreolus capreolus')",
    )
    export.add_argument(
        "--timezone",
        action="append",
        metavar="[DEPLOYMENT=]ZONE",
        help="camtrap-dp: the time zone of frames whose EXIF gives no UTC offset, an IANA name "
        "(Europe/Brussels) or an offset (+01:00); DEPLOYMENT=ZONE for one deployment; without "
        "it their times are written as UTC with timestampIssues true",
    )
    export.add_argument(
        "--detection-threshold",
        type=float,
        metavar="CONFIDENCE",
        help="camtrap-dp: write detector boxes from this confidence up as machine observations "
        "(default 0.2; 0 writes every box)",
    )
    _add_shared(
        export,
        "--check",
        action="store_true",
        help="check the records against the standard and list every problem; write nothing",
    )
    _add_shared(
        export,
        "--write-anyway",
        action="store_true",
        help="write records the check finds invalid (they are not written otherwise)",
    )


def _threshold(args: argparse.Namespace) -> float | None:
    from engine.io.camtrap_tables import DEFAULT_DETECTION_THRESHOLD

    value = getattr(args, "detection_threshold", None)
    if value is None:
        return DEFAULT_DETECTION_THRESHOLD
    if not 0 <= value <= 1:
        raise BadInputError(f"--detection-threshold {value}: give a confidence from 0 to 1")
    return float(value)


def parse_timezones(values: Sequence[str] | None) -> tuple[str | None, dict[str, str]]:
    """--timezone values: the zone for every deployment, and zones by deployment name."""
    default: str | None = None
    named: dict[str, str] = {}
    for value in values or ():
        name, separator, zone = value.rpartition("=")
        if not zone.strip() or (separator and not name.strip()):
            raise BadInputError(f"--timezone {value!r}: give ZONE or DEPLOYMENT=ZONE")
        if separator:
            named[name.strip()] = zone.strip()
        elif default is not None and default != zone.strip():
            raise BadInputError("--timezone without a deployment name given twice")
        else:
            default = zone.strip()
    return default, named


def _listed(heading: str, lines: Sequence[str]) -> None:
    if not lines:
        return
    print(f"{heading}:", file=sys.stderr)
    for line in lines[:_LISTED]:
        print(f"  {line}", file=sys.stderr)
    if len(lines) > _LISTED:
        print(f"  and {len(lines) - _LISTED:,} more", file=sys.stderr)


def print_check(check: CamtrapCheck) -> None:
    """The problems per record and the records left out, on stderr."""
    _listed(f"{len(check.errors):,} errors (the package would be rejected)",
            [p.line for p in check.errors])  # fmt: skip
    _listed(f"{len(check.warnings):,} warnings", [p.line for p in check.warnings])
    included = check.report.restricted_included
    _listed(
        f"{len(check.restricted):,} photos, restricted licence"
        + (", included" if included else ", left out"),
        [f"{p.path} ({p.reason})" for p in check.restricted],
    )
    _listed(
        f"{len(check.withheld):,} deployments left out, place withheld",
        [f"{d.name}: {d.photos:,} photos ({d.reason})" for d in check.withheld],
    )
    _listed(
        f"{len(check.generalised):,} deployment places generalised",
        [f"{d.name} ({d.reason})" for d in check.generalised],
    )
    _listed(f"{len(check.undated):,} photos left out, no date",
            [p.path for p in check.undated])  # fmt: skip
    _listed(f"{len(check.outside):,} relevant photos in no deployment, left out",
            [p.path for p in check.outside])  # fmt: skip


def cmd_export_camtrap(args: argparse.Namespace) -> int:
    """Check, then write, the Camtrap DP package of one saved query (its id or its text) into
    OUT; with --check, only check."""
    from engine.io.camtrap_dp import PackageRejected, check_camtrap_dp, export_checked
    from engine.io.camtrap_tables import Options

    query = one_query_argument(args, CAMTRAP_KIND)
    if args.out is None and not getattr(args, "check", False):
        raise BadInputError(f"export {CAMTRAP_KIND} needs OUT (a folder to write), or --check")
    zone, zones = parse_timezones(getattr(args, "timezone", None))
    include = bool(getattr(args, "include_restricted", False))
    with open_library(args.library) as library:
        query_id = saved_query_id(library, query)
        options = Options.of(
            scientific_name=args.scientific_name,
            timezone=zone,
            deployment_timezones=zones,
            include_restricted=include,
            # --no-sensitive-taxa, where the Darwin Core kinds define it: the same choice here
            sensitive_taxa=getattr(args, "sensitive_taxa", True),
            detection_threshold=_threshold(args),
        )
        if getattr(args, "check", False):
            check = check_camtrap_dp(
                library,
                query_id,
                scientific_name=options.scientific_name,
                timezone=zone,
                deployment_timezones=zones,
                include_restricted=include,
                sensitive_taxa=options.sensitive_taxa,
                detection_threshold=options.detection_threshold,
            )
            print(check.report.summary())
            print_check(check)
            return EXIT_FAILURE if check.rejected else EXIT_OK
        try:
            report, check = export_checked(
                library, query_id, args.out, options, write_anyway=args.write_anyway
            )
        except PackageRejected as rejected:
            print_check(rejected.check)
            raise
    print(report.summary())
    print_check(check)
    return EXIT_OK


def add_camera_trap_demo_option(demo: argparse.ArgumentParser) -> None:
    """`--camera-traps` on `quadrat demo`."""
    demo.add_argument(
        "--camera-traps",
        action="store_true",
        help="write the camera-trap demo instead: three deployments of bursts with EXIF "
        "times, GPS and serials, empty and night frames, queries and judgments",
    )


def cmd_camera_trap_demo(args: argparse.Namespace) -> int:
    """Write the camera-trap demo to DIR."""
    from engine.demo.camera_traps import write_camera_trap_demo

    demo = write_camera_trap_demo(args.dir.expanduser())
    print(
        f"camera-trap demo written to {args.dir} ({demo.image_count} photos in "
        f"{len(demo.events)} bursts; queries {demo.queries_path.name}, judgments "
        f"{demo.judgments_path.name})"
    )
    return EXIT_OK
