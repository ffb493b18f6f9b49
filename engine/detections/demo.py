"""The camera-trap demo's boxes into the catalog: its `detections.json` (MegaDetector batch
output, written by `engine.demo.camera_traps` from what it drew) imported onto an indexed copy
of the demo through the MegaDetector importer, as any detector's file is."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from engine.detections.importing import import_detections
from engine.detections.megadetector import KIND

if TYPE_CHECKING:
    from engine.catalog.library import Library


def load_demo_detections(library: Library, root: Path) -> tuple[int, int]:
    """Import `root`/detections.json onto the photos of the demo indexed from `root` (replacing
    an earlier import of the same file). Returns (frames, detections) written."""
    from engine.demo.camera_traps import DETECTIONS_FILE

    report = import_detections(library, Path(root) / DETECTIONS_FILE, kind=KIND)
    return report.frames, report.detections
