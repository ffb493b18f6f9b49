"""What the detection filters can be set to in a library: how many frames are empty or not at a
threshold, the detector categories found and the classifier labels given, with their photo
counts (the window's "Add filter" menu). Imports under way are never counted."""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import distinct, func, select

from engine.catalog import Catalog
from engine.catalog.models import Detection, DetectionFrame
from engine.detections.records import DEFAULT_THRESHOLD
from engine.detections.store import of_imported

LABELS_READ = 500  # labels kept, most photos first: the menu lists a few, completion the rest


@dataclass(frozen=True)
class DetectionChoices:
    """The choices of one library at `threshold`; `looked` is 0 where no source looked at any
    photo (no detection filter can then find one)."""

    threshold: float
    looked: int = 0  # photos a source looked at and could read
    not_empty: int = 0  # of which with a box at the threshold or above
    categories: list[tuple[str, int]] = field(default_factory=list)  # photos per category
    labels: list[tuple[str, int]] = field(default_factory=list)  # photos per label, most first

    @property
    def empty(self) -> int:
        return self.looked - self.not_empty

    @property
    def available(self) -> bool:
        return self.looked > 0 or bool(self.labels)


def detection_choices(
    catalog: Catalog, threshold: float = DEFAULT_THRESHOLD, labels: int = LABELS_READ
) -> DetectionChoices:
    """The library's choices for the detection filters, counted as those filters count: a
    photo is empty when every source that read it found nothing at `threshold` or above."""
    frame_photos = func.count(distinct(DetectionFrame.image_id))
    read = DetectionFrame.failure.is_(None)
    found = of_imported(
        select(DetectionFrame.image_id).where(DetectionFrame.max_confidence >= threshold),
        DetectionFrame.source_id,
    )
    photos = func.count(distinct(Detection.image_id))
    with catalog.session() as s:
        looked = s.scalar(of_imported(select(frame_photos).where(read), DetectionFrame.source_id))
        not_empty = s.scalar(
            of_imported(
                select(frame_photos).where(read, DetectionFrame.image_id.in_(found)),
                DetectionFrame.source_id,
            )
        )
        categories = s.execute(
            of_imported(
                select(Detection.category, photos).where(
                    Detection.category.is_not(None), Detection.confidence >= threshold
                ),
                Detection.source_id,
            )
            .group_by(Detection.category)
            .order_by(photos.desc(), Detection.category)
        ).all()
        # Every label, as the label filter finds it (at any confidence).
        named = s.execute(
            of_imported(
                select(Detection.label, photos).where(Detection.label.is_not(None)),
                Detection.source_id,
            )
            .group_by(Detection.label)
            .order_by(photos.desc(), Detection.label)
            .limit(labels)
        ).all()
    return DetectionChoices(
        threshold,
        int(looked or 0),
        int(not_empty or 0),
        [(str(c), int(n)) for c, n in categories if str(c).strip()],
        [(str(label), int(n)) for label, n in named if str(label).strip()],
    )
