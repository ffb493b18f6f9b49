"""`quadrat demo DIR [--camera-traps]`: write a demo collection."""

from __future__ import annotations

import argparse
from pathlib import Path

from app.cli.args import (
    positive_int,
)
from app.cli.camtrap import (
    add_camera_trap_demo_option,
    cmd_camera_trap_demo,
)
from app.cli.common import (
    EXIT_OK,
)
from app.cli.registry import Command


def _demo_arguments(demo: argparse.ArgumentParser) -> None:
    """The options of `quadrat demo`."""
    demo.add_argument("dir", type=Path)
    demo.add_argument("--images-per-class", type=positive_int, default=40)
    add_camera_trap_demo_option(demo)


def cmd_demo(args: argparse.Namespace) -> int:
    from engine.demo.collection import write_demo_collection

    if args.camera_traps:
        return cmd_camera_trap_demo(args)
    info = write_demo_collection(args.dir.expanduser(), images_per_class=args.images_per_class)
    print(f"demo collection written to {args.dir} ({info.image_count} photos)")
    return EXIT_OK


COMMANDS = (
    Command(
        "demo",
        help="write the demo collection to DIR",
        add_arguments=_demo_arguments,
        run=cmd_demo,
    ),
)
