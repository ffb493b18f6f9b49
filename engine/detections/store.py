"""Detections in the catalog: a source's frames and boxes written in batches, read per photo.

A source is one imported file (kind and absolute path). `replace_source` starts an import: the
rows of an earlier import of the same file go, in the same transaction as the first batch, so a
re-import never doubles a box and a crash part-way leaves the earlier import whole or (after the
first batch) the new one partly written under a source the next import replaces again.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any, cast

from sqlalchemy import Table, delete, insert, select
from sqlalchemy.orm import Session

from engine.catalog.models import Detection, DetectionFrame, DetectionSource
from engine.detections.records import Box, DetectionRecord, FrameRecord, StoredDetection

_CHUNK = 500  # ids per IN (...) when reading: well under SQLite's 32,766 variables


def replace_source(
    session: Session,
    kind: str,
    path: str,
    *,
    sha256: str | None = None,
    model: str | None = None,
    categories: dict[str, Any] | None = None,
) -> int:
    """A fresh source for the file `path` of `kind`, the rows of any earlier import of it
    deleted (with their frames, detections and crop vectors); its id."""
    session.execute(
        delete(DetectionSource).where(DetectionSource.kind == kind, DetectionSource.path == path)
    )
    source = DetectionSource(
        kind=kind, path=path, sha256=sha256, model=model, categories=categories
    )
    session.add(source)
    session.flush()
    return source.id


def write_frames(session: Session, source_id: int, frames: Iterable[FrameRecord]) -> int:
    """Write `frames` (and their detections) under `source_id`; the number of detections."""
    frame_rows: list[dict[str, Any]] = []
    detection_rows: list[dict[str, Any]] = []
    for frame in frames:
        frame_rows.append(
            {
                "source_id": source_id,
                "image_id": frame.image_id,
                "max_confidence": frame.max_confidence,
                "failure": frame.failure,
            }
        )
        detection_rows.extend(
            _detection_row(source_id, frame.image_id, d) for d in frame.detections
        )
    # The tables, not the ORM classes: the ORM's bulk insert leaves out a row's None values and
    # so runs one statement per change of which keys are None (boxes between whole-photo
    # labels: one per row, seven times slower); the tables' executemany writes NULLs in one.
    if frame_rows:
        session.execute(insert(cast(Table, DetectionFrame.__table__)), frame_rows)
    if detection_rows:
        session.execute(insert(cast(Table, Detection.__table__)), detection_rows)
    return len(detection_rows)


def _detection_row(source_id: int, image_id: int, record: DetectionRecord) -> dict[str, Any]:
    box = record.box
    return {
        "source_id": source_id,
        "image_id": image_id,
        "box_x": box.x if box else None,
        "box_y": box.y if box else None,
        "box_width": box.width if box else None,
        "box_height": box.height if box else None,
        "category": record.category,
        "confidence": record.confidence,
        "label": record.label,
        "label_probability": record.label_probability,
        "classification_method": record.classification_method,
        "observation_id": record.observation_id,
        "count": record.count,
    }


def detections_of(
    session: Session, image_ids: Sequence[int], *, min_confidence: float | None = None
) -> dict[int, list[StoredDetection]]:
    """Each photo's detections (every source), highest confidence first; whole-photo labels
    (no confidence) last. `min_confidence` leaves out boxes below it (labels stay)."""
    found: dict[int, list[StoredDetection]] = defaultdict(list)
    ids = list(dict.fromkeys(image_ids))
    for start in range(0, len(ids), _CHUNK):
        statement = (
            select(Detection, DetectionSource.kind)
            .join(DetectionSource, DetectionSource.id == Detection.source_id)
            .where(Detection.image_id.in_(ids[start : start + _CHUNK]))
        )
        if min_confidence is not None:
            statement = statement.where(
                (Detection.confidence.is_(None)) | (Detection.confidence >= min_confidence)
            )
        for row, kind in session.execute(statement):
            found[row.image_id].append(_stored(row, kind))
    for detections in found.values():
        detections.sort(key=lambda d: (d.record.confidence is None, -(d.record.confidence or 0)))
    return dict(found)


def _stored(row: Detection, kind: str) -> StoredDetection:
    box = None
    if row.box_x is not None and row.box_y is not None and row.box_width and row.box_height:
        box = Box(row.box_x, row.box_y, row.box_width, row.box_height)
    return StoredDetection(
        id=row.id,
        image_id=row.image_id,
        source_id=row.source_id,
        source_kind=kind,
        record=DetectionRecord(
            box=box,
            category=row.category,
            confidence=row.confidence,
            label=row.label,
            label_probability=row.label_probability,
            classification_method=row.classification_method,
            observation_id=row.observation_id,
            count=row.count,
        ),
    )
