"""Detector boxes over a photo: the plain data a controller hands the widgets, and the one
painter the grid's tiles and the full view share.

A box is normalised to its photo (x, y, width, height in 0..1, origin top left), so it is
drawn over whatever rectangle the photo is painted in. The outline's colour says the
detector's category; the box a judgment was made on is drawn thicker, in the judgment's
colour; the box chosen for the next judgment gets a dashed white frame around it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QFont, QFontMetrics, QPainter, QPen

# Colour by the detector's category; a classifier label alone (no category) is "other".
CATEGORY_COLOURS = {
    "animal": "#f0b429",  # amber: bright over foliage and night-time grey
    "person": "#4aa3df",
    "vehicle": "#b38cf0",
}
OTHER_COLOUR = "#e8e8e8"
RELEVANT_COLOUR = "#2e9d57"
NOT_RELEVANT_COLOUR = "#c8453c"
SELECTED_COLOUR = "#ffffff"
# A judged box as drawn: the box and the judgment's relevance.
JudgedBox = tuple[tuple[float, float, float, float], int]
LABEL_MIN_SIDE = 200  # pixels of the painted photo's shorter side below which no label shows


@dataclass(frozen=True)
class DetectionView:
    """One detection as the window shows it: a box (None: a label on the whole photo), the
    detector's category and confidence, the classifier's label and probability, and which
    source (kind, model) said so."""

    box: tuple[float, float, float, float] | None
    category: str | None = None
    confidence: float | None = None
    label: str | None = None
    label_probability: float | None = None
    source: str = ""
    model: str | None = None

    @property
    def caption(self) -> str:
        """“red fox 0.93”, else “animal 0.92”: what a box says over the photo."""
        if self.label:
            p = self.label_probability
            return f"{self.label} {p:.2f}" if p is not None else self.label
        name = self.category or "object"
        c = self.confidence
        return f"{name} {c:.2f}" if c is not None else name

    @property
    def line(self) -> str:
        """The detail pane's line: who said what, how sure."""
        parts = []
        if self.category:
            conf = f" {self.confidence:.2f}" if self.confidence is not None else ""
            parts.append(f"{self.category}{conf}")
        if self.label:
            p = f" {self.label_probability:.2f}" if self.label_probability is not None else ""
            parts.append(f"{self.label}{p}")
        if self.box is None:
            parts.append("whole photo")
        source = ", ".join(part for part in (self.source, self.model or "") if part)
        return "  ·  ".join(parts or ["detection"]) + (f"  ({source})" if source else "")


def boxed(detections: Sequence[DetectionView]) -> list[int]:
    """The indexes of the detections that have a box (the ones drawn and chosen with B)."""
    return [i for i, d in enumerate(detections) if d.box is not None]


def category_colour(category: str | None) -> QColor:
    return QColor(CATEGORY_COLOURS.get(category or "", OTHER_COLOUR))


def box_rect(box: tuple[float, float, float, float], photo: QRectF) -> QRectF:
    """Where a normalised box lies over a photo painted in `photo`."""
    x, y, width, height = box
    return QRectF(
        photo.left() + x * photo.width(),
        photo.top() + y * photo.height(),
        width * photo.width(),
        height * photo.height(),
    )


def same_box(a: tuple[float, ...] | None, b: tuple[float, ...] | None) -> bool:
    """Two boxes alike to the catalog's four decimals (a judged box read back as text)."""
    if a is None or b is None:
        return False
    return all(abs(p - q) < 1e-4 for p, q in zip(a, b, strict=True))


def box_at(detections: Sequence[DetectionView], photo: QRectF, point: QPointF) -> int | None:
    """The index of the smallest box under `point` (a click), None when none is."""
    under = [
        (d.box[2] * d.box[3], i)
        for i, d in enumerate(detections)
        if d.box is not None and box_rect(d.box, photo).contains(point)
    ]
    return min(under)[1] if under else None


def paint_boxes(
    painter: QPainter,
    photo: QRectF,
    detections: Sequence[DetectionView],
    *,
    labels: bool,
    font: QFont,
    chosen: int | None = None,
    judged: JudgedBox | None = None,
    width: float = 2.0,
) -> None:
    """Draw the detections' boxes over a photo painted in `photo`: a thin outline in the
    category's colour; with `labels`, a small caption above each box; the `chosen` box (an
    index) framed in dashed white; the `judged` box (its box and relevance) thick in the
    judgment's colour."""
    painter.save()
    # Axis-aligned outlines stay crisp without antialiasing (a blended line reads as dirt).
    painter.setRenderHint(QPainter.RenderHint.Antialiasing, False)
    painter.setBrush(Qt.BrushStyle.NoBrush)
    painter.setClipRect(photo)
    metrics = QFontMetrics(font)
    painter.setFont(font)
    for index, detection in enumerate(detections):
        if detection.box is None:
            continue
        rect = box_rect(detection.box, photo)
        colour = category_colour(detection.category)
        pen_width = width
        if judged is not None and same_box(detection.box, judged[0]):
            colour = QColor(RELEVANT_COLOUR if judged[1] else NOT_RELEVANT_COLOUR)
            pen_width = width * 2
        painter.setPen(QPen(colour, pen_width))
        painter.drawRect(rect)
        if index == chosen:
            pen = QPen(QColor(SELECTED_COLOUR), max(1.0, width), Qt.PenStyle.DashLine)
            painter.setPen(pen)
            margin = pen_width + 1.5
            painter.drawRect(rect.adjusted(-margin, -margin, margin, margin))
        if labels:
            text = detection.caption
            tag = QRectF(0, 0, metrics.horizontalAdvance(text) + 6, metrics.height() + 2)
            # Above the box where there is room, else inside its top edge.
            top = rect.top() - tag.height()
            tag.moveTopLeft(QPointF(rect.left(), top if top >= photo.top() else rect.top()))
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(colour)
            painter.drawRect(tag)
            painter.setBrush(Qt.BrushStyle.NoBrush)
            painter.setPen(QColor("#111111"))
            painter.drawText(tag, Qt.AlignmentFlag.AlignCenter, text)
    painter.restore()


def wants_labels(photo: QRectF, min_side: float = LABEL_MIN_SIDE) -> bool:
    """Labels only where the painted photo is large enough to carry them (its shorter side
    at least `min_side` pixels)."""
    return min(photo.width(), photo.height()) >= min_side
