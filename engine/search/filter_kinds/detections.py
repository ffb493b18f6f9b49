"""The detection filters: empty frames, a detector's category, a classifier's label.

A frame is empty at a threshold when a source looked at it (and could read it) and no source
found a box at that confidence or above; a photo no source looked at is unknown: neither empty
nor not empty. Imports under way (`engine.detections.store.PENDING`) are never counted. This
module imports nothing heavy: `quadrat --help` reads the options.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, Select, func, select
from sqlalchemy.orm import Session

from engine.catalog import Image
from engine.catalog.models import Detection, DetectionFrame, DetectionSource
from engine.detections.records import DEFAULT_THRESHOLD
from engine.detections.store import of_imported
from engine.search.filter_kinds.base import (
    CliOption,
    FilterKind,
    MenuEntry,
    Terms,
    as_float,
    as_text,
    fail,
)


def _confidence(key: str, value: object) -> float | None:
    if value is None:
        return None
    number = as_float(key, value)
    if not 0.0 <= number <= 1.0:
        raise fail(key, f"a confidence is from 0 to 1, got {number:g}")
    return number


def _found_at(threshold: float) -> Select[Any]:
    """The photos some source found a box on at `threshold` or above."""
    return of_imported(
        select(DetectionFrame.image_id).where(DetectionFrame.max_confidence >= threshold),
        DetectionFrame.source_id,
    )


def empty_condition(threshold: float) -> ColumnElement[bool]:
    """Photos looked at (and read) by some source, and found empty at `threshold` by all."""
    looked = of_imported(
        select(DetectionFrame.image_id).where(DetectionFrame.failure.is_(None)),
        DetectionFrame.source_id,
    )
    return Image.id.in_(looked) & Image.id.not_in(_found_at(threshold))


def _empty_terms(_session: Session, filters: Any) -> Terms:
    terms: list[ColumnElement[bool]] = []
    if filters.empty is not None:
        terms.append(empty_condition(filters.empty))
    if filters.not_empty is not None:
        terms.append(Image.id.in_(_found_at(filters.not_empty)))
    return terms


def _check_empty(filters: Any) -> dict[str, Any]:
    empty = _confidence("empty", filters.empty)
    not_empty = _confidence("not_empty", filters.not_empty)
    if empty is not None and not_empty is not None and not_empty <= empty:
        raise fail("empty", "a frame cannot be both empty and not empty: no photo could match")
    return {"empty": empty, "not_empty": not_empty}


def _empty_chip(filters: Any, _names: Any) -> str | None:
    if filters.empty is not None and filters.not_empty is not None:
        return f"best box {filters.not_empty:g} to {filters.empty:g}"
    if filters.empty is not None:
        return f"empty at {filters.empty:g}"
    if filters.not_empty is not None:
        return f"not empty at {filters.not_empty:g}"
    return None


def detected_threshold(filters: Any) -> float:
    """The confidence a box of `detected` needs: the --not-empty one, else the default."""
    return float(filters.not_empty) if filters.not_empty is not None else DEFAULT_THRESHOLD


def _detected_terms(_session: Session, filters: Any) -> Terms:
    if not filters.detected:
        return []
    boxes = of_imported(
        select(Detection.image_id).where(
            Detection.category == filters.detected,
            Detection.confidence >= detected_threshold(filters),
        ),
        Detection.source_id,
    )
    return [Image.id.in_(boxes)]


def _check_detected(filters: Any) -> dict[str, Any]:
    text = as_text("detected", filters.detected)
    return {"detected": text.lower() if text else None}


def _label_terms(session: Session, filters: Any) -> Terms:
    if not filters.detection_label:
        return []
    wanted = {filters.detection_label.casefold()}
    # A label is found by its scientific name too (SpeciesNet's files keep the pair).
    for categories in session.scalars(
        select(DetectionSource.categories).where(DetectionSource.categories.is_not(None))
    ):
        labels = categories.get("labels") if isinstance(categories, dict) else None
        for label, scientific in (labels or {}).items():
            if isinstance(scientific, str) and scientific.casefold() in wanted:
                wanted.add(str(label).casefold())
    found = of_imported(
        select(Detection.image_id).where(func.lower(Detection.label).in_(sorted(wanted))),
        Detection.source_id,
    )
    return [Image.id.in_(found)]


EMPTY = FilterKind(
    "empty",
    "detections",
    ("empty", "not_empty"),
    check=_check_empty,
    condition=_empty_terms,
    chip=_empty_chip,
    cli=(
        CliOption(
            "--empty",
            "empty",
            "only frames a detector looked at and found nothing on at confidence T or above "
            f"(default {DEFAULT_THRESHOLD:g}); photos no detector looked at are left out",
            12,
            metavar="T",
            parse=float,
            const=DEFAULT_THRESHOLD,
        ),
        CliOption(
            "--not-empty",
            "not_empty",
            f"only frames with a detected box at confidence T or above (default "
            f"{DEFAULT_THRESHOLD:g})",
            13,
            metavar="T",
            parse=float,
            const=DEFAULT_THRESHOLD,
        ),
    ),
    menu=MenuEntry("Empty frames", "empty", 11),
)
DETECTED = FilterKind(
    "detected",
    "detections",
    ("detected",),
    check=_check_detected,
    condition=_detected_terms,
    chip=lambda f, _names: f"detected {f.detected}" if f.detected else None,
    cli=(
        CliOption(
            "--detected",
            "detected",
            "only frames with a box of this detector category (animal, person, vehicle) at the "
            f"--not-empty confidence or {DEFAULT_THRESHOLD:g}",
            14,
            metavar="CATEGORY",
        ),
    ),
    menu=MenuEntry("Detected category", "detected", 12),
)
LABEL = FilterKind(
    "detection_label",
    "detections",
    ("detection_label",),
    check=lambda f: {"detection_label": as_text("detection_label", f.detection_label)},
    condition=_label_terms,
    chip=lambda f, _names: f"label “{f.detection_label}”" if f.detection_label else None,
    cli=(
        CliOption(
            "--label",
            "detection_label",
            "only frames a classifier labelled so (a common or scientific name, any case: "
            '"red fox", "Vulpes vulpes")',
            15,
            metavar="NAME",
        ),
    ),
    menu=MenuEntry("Classifier label", "detection_label", 13),
)
