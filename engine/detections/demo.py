"""The camera-trap demo's boxes into the catalog: its `detections.json` (MegaDetector batch
output, written by `engine.demo.camera_traps`) read onto an indexed copy of the demo, as
source kind "demo".

A minimal reader of that one file's shape (relative paths, category names, normalised
top-left boxes); real detector output goes through the detector importers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import select

from engine.catalog.models import Collection, Image
from engine.detections.records import Box, DetectionRecord, FrameRecord
from engine.detections.store import replace_source, write_frames
from engine.errors import BadInputError

if TYPE_CHECKING:
    from engine.catalog.library import Library

KIND = "demo"


def load_demo_detections(library: Library, root: Path) -> tuple[int, int]:
    """Read `root`/detections.json onto the photos of the collection at `root` in `library`
    (replacing an earlier load of the same file). Returns (frames, detections) written."""
    from engine.demo.camera_traps import DETECTIONS_FILE

    path = (Path(root) / DETECTIONS_FILE).resolve()
    try:
        batch = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BadInputError(f"cannot read the demo's detections {path}: {exc}") from None
    categories: dict[str, str] = batch.get("detection_categories", {})
    catalog_root = library.catalog_root(Path(root).resolve())
    with library.catalog.session() as s:
        ids: dict[str, int] = dict(
            s.execute(
                select(Image.rel_path, Image.id)
                .join(Collection, Collection.id == Image.collection_id)
                .where(Collection.root == catalog_root)
            ).all()
        )
        frames = [
            FrameRecord(
                ids[entry["file"]],
                tuple(
                    DetectionRecord(
                        Box.checked(*d["bbox"]),
                        categories.get(str(d["category"]), str(d["category"])),
                        float(d["conf"]),
                    )
                    for d in entry.get("detections", [])
                ),
            )
            for entry in batch["images"]
            if entry["file"] in ids
        ]
        if not frames:
            raise BadInputError(f"no photo of {path} is in the library: index {root} first")
        source = replace_source(
            s,
            KIND,
            str(path),
            model=batch.get("info", {}).get("detector"),
            categories=categories,
        )
        count = write_frames(s, source, frames)
    return len(frames), count
