"""`quadrat crops encode --library LIB [--threshold T] [--margin M]`: the crop of every
detection above the threshold encoded by the library's model, so that `quadrat search --unit
boxes|fused` can rank boxes (incremental: run it again after an import; a run cut short keeps
what it committed). `quadrat crops load-demo DIR --library LIB`: the camera-trap demo's
detections.json read onto its indexed photos."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from app.cli.args import add_library_options, add_model_options, add_runtime_option
from app.cli.common import (
    EXIT_OK,
    TqdmProgress,
    load_encoder_for,
    open_library,
    resolve_model_spec,
)
from app.cli.registry import Command
from engine.errors import BadInputError


def _unit_interval(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {value}")
    return value


def _crops_arguments(crops: argparse.ArgumentParser) -> None:
    from engine.detections.crops import DEFAULT_MARGIN, DEFAULT_THRESHOLD

    actions = crops.add_subparsers(dest="crops_action", required=True, metavar="ACTION")
    encode = actions.add_parser(
        "encode", help="encode the crops of detections above a threshold (incremental)"
    )
    add_library_options(encode)
    add_model_options(encode)
    add_runtime_option(encode)
    encode.add_argument(
        "--threshold",
        type=_unit_interval,
        default=DEFAULT_THRESHOLD,
        help=f"least detector confidence of a box to crop (default {DEFAULT_THRESHOLD})",
    )
    encode.add_argument(
        "--margin",
        type=_unit_interval,
        default=DEFAULT_MARGIN,
        help="context around the box, a share of its longer side on each side "
        f"(default {DEFAULT_MARGIN}); the crop is then made square",
    )
    encode.add_argument("--json", action="store_true", help="the report as one JSON object")
    encode.set_defaults(func=cmd_crops_encode)
    demo = actions.add_parser(
        "load-demo", help="read the camera-trap demo's detections.json onto its indexed photos"
    )
    demo.add_argument("dir", type=Path, help="the folder 'quadrat demo --camera-traps' wrote")
    add_library_options(demo)
    demo.set_defaults(func=cmd_crops_load_demo)


def cmd_crops_encode(args: argparse.Namespace) -> int:
    from engine.detections.crops import encode_crops
    from engine.progress import CancelToken

    with open_library(args.library) as library:
        if library.model_key is None:
            raise BadInputError(library.no_photos_message("run 'quadrat index FOLDER'"))
        encoder = load_encoder_for(
            resolve_model_spec(args.model, library), args.device, args.runtime
        )
        library.check_model(encoder.model_key)
        bar = TqdmProgress("encoding crops", unit="crop")
        cancel = CancelToken()
        try:
            report = encode_crops(
                library,
                encoder,
                threshold=args.threshold,
                margin=args.margin,
                progress=bar,
                cancel=cancel,
            )
        except KeyboardInterrupt:
            cancel.cancel()
            raise
        finally:
            bar.close()
    if args.json:
        print(json.dumps({"encoded": report.encoded, "skipped": report.skipped,
                          "already": report.already}))  # fmt: skip
    else:
        print(
            f"{report.encoded} crops encoded, {report.already} had a vector already"
            + (f", {report.skipped} skipped (photo unreadable)" if report.skipped else "")
        )
    return EXIT_OK


def cmd_crops_load_demo(args: argparse.Namespace) -> int:
    from engine.detections.demo import load_demo_detections

    folder = args.dir.expanduser()
    with open_library(args.library) as library:
        frames, boxes = load_demo_detections(library, folder)
    print(f"{boxes} boxes on {frames} frames read from {folder}")
    return EXIT_OK


COMMANDS = (
    Command(
        "crops",
        help="encode the crops of detections for box search",
        add_arguments=_crops_arguments,
    ),
)
