"""`quadrat camtrap-dp open PACKAGE_DIR` (a Camtrap DP package read as a collection,
engine/io/camtrap_read.py) and `quadrat camtrap-dp observations PACKAGE_DIR` (its observations
as detections on photos already indexed, engine/detections/camtrap_observations.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from app.cli.args import add_library_options, add_model_options, add_runtime_option
from app.cli.common import (
    EXIT_OK,
    TqdmProgress,
    load_encoder_for,
    open_library,
    resolve_model_spec,
    user_settings,
)
from app.cli.registry import Command


def _arguments(command: argparse.ArgumentParser) -> None:
    actions = command.add_subparsers(dest="camtrap_action", metavar="ACTION", required=True)
    opened = actions.add_parser(
        "open",
        help="index a package's folder as a collection with its deployments, media times, "
        "places and licence, and import its observations (its media must be local files)",
    )
    opened.add_argument("package", type=Path, help="the package's folder (or datapackage.json)")
    add_library_options(opened)
    add_model_options(opened)
    add_runtime_option(opened)
    opened.set_defaults(func=cmd_open)
    observations = actions.add_parser(
        "observations",
        help="import a package's observations as detections on photos already indexed "
        "(matched by filePath; URLs by file name)",
    )
    observations.add_argument(
        "package", type=Path, help="the package's folder (or datapackage.json)"
    )
    observations.add_argument(
        "--collection",
        type=Path,
        help="the indexed folder whose photos media given as URLs are matched to by file name "
        "(default: every collection)",
    )
    add_library_options(observations)
    observations.set_defaults(func=cmd_observations)


def cmd_open(args: argparse.Namespace) -> int:
    from engine.indexing.indexer import Indexer
    from engine.io.camtrap_read import open_camtrap_package
    from engine.progress import CancelToken

    with open_library(args.library) as library:
        spec = resolve_model_spec(args.model, library)
        encoder = load_encoder_for(spec, args.device, args.runtime)
        settings = user_settings()
        indexer = Indexer(library, encoder, batch_size=settings.batch_size, decode=settings.decode)
        bar = TqdmProgress("opening the package")
        cancel = CancelToken()
        try:
            report = open_camtrap_package(indexer, args.package, bar, cancel)
        except KeyboardInterrupt:
            cancel.cancel()
            raise
        finally:
            bar.close()
    for line in report.lines():
        print(line)
    return EXIT_OK


def cmd_observations(args: argparse.Namespace) -> int:
    from engine.detections.camtrap_observations import read_camtrap_observations
    from engine.progress import CancelToken

    with open_library(args.library) as library:
        bar = TqdmProgress("reading observations")
        cancel = CancelToken()
        try:
            report = read_camtrap_observations(
                library, args.package, bar, cancel, collection=args.collection
            )
        except KeyboardInterrupt:
            cancel.cancel()
            raise
        finally:
            bar.close()
    for line in report.lines():
        print(line)
    return EXIT_OK


COMMANDS = (
    Command(
        "camtrap-dp",
        help="read a Camtrap DP package: open it as a collection, or import its observations",
        add_arguments=_arguments,
    ),
)
