"""Plain values of detector and classifier output, as every importer hands them to the store."""

from __future__ import annotations

import math
from dataclasses import dataclass

from engine.errors import BadInputError

# MegaDetector's categories; a file may name its own in `detection_categories`.
ANIMAL = "animal"
PERSON = "person"
VEHICLE = "vehicle"

_BOX_DIGITS = 4  # 1/10,000 of the photo's side: finer than any pixel of a 10,000-pixel frame


@dataclass(frozen=True)
class Box:
    """A box normalised to its photo, origin top left: x, y, width, height in 0..1."""

    x: float
    y: float
    width: float
    height: float

    @classmethod
    def checked(cls, x: float, y: float, width: float, height: float) -> Box:
        """The box, clipped to the photo; a `BadInputError` when it is not a box at all (a
        value that is not a finite number, a negative or zero side, or wholly outside)."""
        values = (x, y, width, height)
        if not all(isinstance(v, int | float) and math.isfinite(v) for v in values):
            raise BadInputError(f"a box needs four finite numbers, got {list(values)}")
        if width <= 0 or height <= 0:
            raise BadInputError(f"a box needs a positive width and height, got {list(values)}")
        left, top = max(0.0, float(x)), max(0.0, float(y))
        right, bottom = min(1.0, float(x) + float(width)), min(1.0, float(y) + float(height))
        if right <= left or bottom <= top:
            raise BadInputError(f"the box {list(values)} lies outside its photo (0..1)")
        return cls(left, top, right - left, bottom - top)

    @property
    def area(self) -> float:
        """The share of the photo the box covers (0..1)."""
        return self.width * self.height

    @property
    def text(self) -> str:
        """The box as the catalog keeps it beside a judgment: "x,y,w,h" to four decimals."""
        return ",".join(f"{v:.{_BOX_DIGITS}f}" for v in (self.x, self.y, self.width, self.height))

    @classmethod
    def from_text(cls, text: str) -> Box:
        parts = text.split(",")
        if len(parts) != 4:
            raise BadInputError(f"a box is written x,y,w,h, got {text!r}")
        try:
            x, y, width, height = (float(p) for p in parts)
        except ValueError:
            raise BadInputError(f"a box is written x,y,w,h, got {text!r}") from None
        return cls.checked(x, y, width, height)


@dataclass(frozen=True)
class DetectionRecord:
    """One box (or whole-photo label when `box` is None) a source reported on a photo."""

    box: Box | None
    category: str | None = None  # the detector's class: animal, person, vehicle
    confidence: float | None = None  # the detector's confidence (0..1)
    label: str | None = None  # the classifier's label: a taxon's name, "blank", …
    label_probability: float | None = None
    classification_method: str | None = None  # Camtrap DP's: machine or human
    observation_id: str | None = None  # the Camtrap DP observation it came from
    count: int | None = None


@dataclass(frozen=True)
class FrameRecord:
    """A photo a source looked at and what it found there (possibly nothing)."""

    image_id: int
    detections: tuple[DetectionRecord, ...] = ()
    failure: str | None = None  # the source's own words when it could not read the photo

    @property
    def max_confidence(self) -> float | None:
        found = [d.confidence for d in self.detections if d.confidence is not None]
        return max(found) if found else None


@dataclass(frozen=True)
class StoredDetection:
    """A detection as the catalog holds it."""

    id: int
    image_id: int
    source_id: int
    source_kind: str
    record: DetectionRecord
