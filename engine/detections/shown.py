"""The detections a window shows of photos: each photo's boxes and labels with the model that
made them, read in one pass (the results grid, the full view and the detail pane)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy import select

from engine.catalog.models import Detection, DetectionSource
from engine.detections.records import StoredDetection
from engine.detections.store import detections_of

if TYPE_CHECKING:
    from engine.catalog.library import Library

DEFAULT_BOX_THRESHOLD = 0.2  # MegaDetector's own advice for a first look at its boxes


@dataclass(frozen=True)
class ShownDetection:
    """A stored detection with the detector's or classifier's name as its file gave it."""

    detection: StoredDetection
    model: str | None


def shown_detections(
    library: Library, image_ids: Sequence[int], min_confidence: float | None
) -> dict[int, list[ShownDetection]]:
    """Each photo's detections at or above `min_confidence` (whole-photo labels always),
    highest confidence first, with their source's model. Reads the catalog: call from a
    worker."""
    if not image_ids:
        return {}
    with library.catalog.session() as s:
        found = detections_of(s, image_ids, min_confidence=min_confidence)
        source_ids = {d.source_id for ds in found.values() for d in ds}
        models: dict[int, str | None] = {}
        if source_ids:
            rows = s.execute(
                select(DetectionSource.id, DetectionSource.model).where(
                    DetectionSource.id.in_(source_ids)
                )
            ).all()
            models = {int(source_id): model for source_id, model in rows}
    return {
        image_id: [ShownDetection(d, models.get(d.source_id)) for d in detections]
        for image_id, detections in found.items()
    }


def has_detections(library: Library) -> bool:
    """Whether any photo of the library has a detection (the window's box toggle)."""
    with library.catalog.session() as s:
        return s.scalar(select(Detection.id).limit(1)) is not None
