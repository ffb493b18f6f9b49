"""`quadrat export camtrap-dp` (a saved query's judged camera-trap events as a Camtrap DP 1.0
package, engine/io/camtrap_dp.py) and `quadrat demo DIR --camera-traps`."""

from __future__ import annotations

import argparse

from app.cli_common import EXIT_OK, one_query_argument, open_library, saved_query_id

CAMTRAP_KIND = "camtrap-dp"
"""The kind of `quadrat export` that writes a Camtrap DP package into the folder OUT."""


def add_camtrap_options(export: argparse.ArgumentParser) -> None:
    """The options only `quadrat export camtrap-dp` takes."""
    export.add_argument(
        "--scientific-name",
        metavar="NAME",
        help="camtrap-dp: the taxon of the observations where the photos' records name none "
        "(e.g. 'Capreolus capreolus')",
    )


def cmd_export_camtrap(args: argparse.Namespace) -> int:
    """Write the Camtrap DP package of one saved query (its id or its text) into OUT."""
    from engine.io.camtrap_dp import export_camtrap_dp

    query = one_query_argument(args, CAMTRAP_KIND)
    with open_library(args.library) as library:
        query_id = saved_query_id(library, query)
        report = export_camtrap_dp(
            library, query_id, args.out, scientific_name=args.scientific_name
        )
    print(report.summary())
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
