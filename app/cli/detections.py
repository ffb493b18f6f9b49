"""`quadrat detections`: detector and classifier output on the library's photos.

    quadrat detections import FILE [--format auto|megadetector|speciesnet] [--threshold T]
    quadrat detections summary [--threshold T] [--json]

`import` reads a MegaDetector batch output or SpeciesNet predictions file (streamed) and matches
its entries to indexed photos; importing the same file again replaces its earlier import.
`summary` says per imported file what it looked at and found.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from app.cli.args import add_library_options
from app.cli.common import EXIT_OK, TqdmProgress, open_library
from app.cli.registry import Command

SHOWN = 20  # unmatched lines printed; the rest are counted (and kept in a file when many)


def _threshold(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a confidence from 0 to 1, not {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"a confidence from 0 to 1, not {text!r}")
    return value


def _arguments(p: argparse.ArgumentParser) -> None:
    from engine.detections.records import DEFAULT_THRESHOLD  # light: `quadrat --help` reads it

    sub = p.add_subparsers(dest="detections_command", metavar="COMMAND", required=True)
    imp = sub.add_parser(
        "import",
        help="import a detector's or classifier's output file onto the indexed photos",
        description="Match each photo the file names to an indexed photo (through the root "
        "map, relative to a collection, or by its last folders) and keep its boxes and labels; "
        "importing the same file again replaces the earlier import.",
    )
    imp.add_argument("file", type=Path, help="MegaDetector batch output or SpeciesNet predictions")
    imp.add_argument(
        "--format",
        default="auto",
        metavar="KIND",
        help="the file's format: auto (the default: recognised from the file), megadetector, "
        "speciesnet",
    )
    imp.add_argument(
        "--threshold",
        type=_threshold,
        default=0.0,
        metavar="T",
        help="leave out boxes below this confidence (default 0: keep every box; a frame keeps "
        "the file's highest confidence either way)",
    )
    add_library_options(imp)
    imp.set_defaults(func=cmd_import)
    summary = sub.add_parser("summary", help="per imported file: frames, empty frames, boxes")
    summary.add_argument(
        "--threshold",
        type=_threshold,
        default=DEFAULT_THRESHOLD,
        metavar="T",
        help=f"a frame with no box at this confidence is empty (default {DEFAULT_THRESHOLD})",
    )
    summary.add_argument("--json", action="store_true", help="print JSON")
    add_library_options(summary)
    summary.set_defaults(func=cmd_summary)


def cmd_import(args: argparse.Namespace) -> int:
    from engine.detections.importing import import_detections

    with open_library(args.library) as library:
        bar = TqdmProgress("importing", unit="B")
        try:
            report = import_detections(
                library, args.file, kind=args.format, threshold=args.threshold, progress=bar
            )
        finally:
            bar.close()
    how = ", ".join(f"{n} by {way}" for way, n in sorted(report.matched_by.items()))
    print(
        f"{report.kind} file {report.path} ({report.model or 'model not named'}): "
        f"{report.frames} of {report.entries} photos matched ({how or 'none'}), "
        f"{report.detections} boxes and labels, {report.failures} photos the source could not read"
    )
    if report.duplicates:
        print(f"{report.duplicates} entries named a photo an earlier entry named (first kept)")
    for line in report.unmatched[:SHOWN]:
        print(f"unmatched: {line}")
    if report.unmatched_count > SHOWN:
        kept = f"; all of them in {report.unmatched_file}" if report.unmatched_file else ""
        print(f"... {report.unmatched_count} unmatched in all{kept}")
    return EXIT_OK


def cmd_summary(args: argparse.Namespace) -> int:
    from engine.detections.importing import summarise

    with open_library(args.library) as library:
        sources = summarise(library.catalog, args.threshold)
    if args.json:
        json.dump([asdict(s) for s in sources], sys.stdout, indent=1)
        print()
        return EXIT_OK
    if not sources:
        print("no detector or classifier output imported; see 'quadrat detections import'")
    for s in sources:
        print(f"#{s.id} {s.kind} {s.path} ({s.model or 'model not named'})")
        print(
            f"  {s.frames} frames looked at, {s.empty} empty at {args.threshold:g}, "
            f"{s.failures} unreadable"
        )
        boxes = ", ".join(f"{category} {n}" for category, n in s.boxes.items())
        print(f"  boxes at {args.threshold:g} or above: {boxes or 'none'}")
        if s.labels:
            top = list(s.labels.items())
            shown = ", ".join(f"{label} {n}" for label, n in top[:10])
            more = f" and {len(top) - 10} more" if len(top) > 10 else ""
            print(f"  labels: {shown}{more}")
    return EXIT_OK


COMMANDS = (
    Command(
        "detections",
        help="import detector and classifier output (MegaDetector, SpeciesNet); summarise it",
        add_arguments=_arguments,
    ),
)
