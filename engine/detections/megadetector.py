"""MegaDetector batch output (v5 and v6 detectors, format versions 1.0 to 1.5).

The file is one JSON object: `info` (the detector, the format version), `detection_categories`
(id -> animal, person, vehicle), optionally `classification_categories` (id -> a label) and
`images`: per photo its `file`, its `detections` (category id, `conf`, `bbox` as x_min, y_min,
width, height normalised with the origin top left, optionally `classifications` as [id,
probability] pairs) or a `failure`. Files of format 1.0/1.1 also give `max_detection_conf`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from engine.detections.reading import (
    ByteStream,
    Entry,
    Importer,
    Reading,
    checked_confidence,
    checked_object,
    json_header,
    json_items,
    top_level_keys,
)
from engine.detections.records import ANIMAL, PERSON, VEHICLE, Box, DetectionRecord
from engine.errors import BadInputError

KIND = "megadetector"
DESCRIPTION = "MegaDetector batch output"
# What MegaDetector calls its classes when a file leaves the map out.
DEFAULT_CATEGORIES = {"1": ANIMAL, "2": PERSON, "3": VEHICLE}


def _sniff(head: str) -> bool:
    keys = top_level_keys(head)
    return "detection_categories" in keys or ("images" in keys and '"detections"' in head)


def read(stream: ByteStream, path: Path, threshold: float) -> Reading:
    """The file's header, and its images as a stream of entries."""
    header = json_header(
        path, "images", ("info", "detection_categories", "classification_categories"), DESCRIPTION
    )
    info = header.get("info") or {}
    if not isinstance(info, dict):
        raise BadInputError(f'{path}: not {DESCRIPTION}: "info" is not an object')
    version = str(info.get("format_version", "1.0"))
    if version.split(".")[0] != "1":
        raise BadInputError(
            f"{path}: MegaDetector format_version {version} is not one Quadrat reads (1.0 to 1.5)"
        )
    categories = _names(header.get("detection_categories", DEFAULT_CATEGORIES), path, "detection")
    classes = _names(header.get("classification_categories") or {}, path, "classification")
    model = info.get("detector")
    kept: dict[str, Any] = {"detection_categories": categories, "format_version": version}
    if classes:
        kept["classification_categories"] = classes
    entries = _entries(stream, path, threshold, categories, classes)
    return Reading(str(model) if model else None, kept, entries)


def _names(value: object, path: Path, what: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise BadInputError(f"{path}: {what}_categories is not a map of ids to names")
    return {str(k): v for k, v in value.items()}


def _entries(
    stream: ByteStream,
    path: Path,
    threshold: float,
    categories: dict[str, str],
    classes: dict[str, str],
) -> Iterator[Entry]:
    for n, image in enumerate(json_items(stream, "images.item", path, DESCRIPTION)):
        yield entry_of(image, f"{path.name}: images[{n}]", threshold, categories, classes)


def entry_of(
    image: object,
    where: str,
    threshold: float,
    categories: dict[str, str],
    classes: dict[str, str],
) -> Entry:
    """One element of `images` as an `Entry`; a one-line `BadInputError` naming it when it is
    not one."""
    image = checked_object(image, where, 'an object with a "file"')
    file = image.get("file")
    if not isinstance(file, str) or not file.strip():
        raise BadInputError(f'{where}: no "file" path')
    where = f"{where} ({file})"
    failure = image.get("failure")
    detections = image.get("detections")
    if detections is None:
        detections = []
    if not isinstance(detections, list):
        raise BadInputError(f'{where}: "detections" is not a list')
    records: list[DetectionRecord] = []
    highest: float | None = None
    for k, detection in enumerate(detections):
        at = f"{where} detection {k}"
        detection = checked_object(detection, at, "an object")
        confidence = checked_confidence(detection.get("conf"), at)
        highest = confidence if highest is None else max(highest, confidence)
        if confidence < threshold:
            continue
        category = categories.get(str(detection.get("category")))
        if category is None:
            raise BadInputError(
                f"{at}: category {detection.get('category')!r:.20} is not in detection_categories"
            )
        records.append(
            DetectionRecord(
                box_of(detection.get("bbox"), at),
                category,
                confidence,
                *_label(detection.get("classifications"), classes, at),
            )
        )
    reported = image.get("max_detection_conf")
    if reported is not None:
        reported = checked_confidence(reported, f"{where} max_detection_conf")
        highest = reported if highest is None else max(highest, reported)
    return Entry(
        file,
        where,
        tuple(records),
        str(failure) if failure else None,
        None if failure else highest,
    )


def box_of(bbox: object, where: str) -> Box:
    """A [x_min, y_min, width, height] list as a checked box."""
    if not isinstance(bbox, list) or len(bbox) != 4:
        raise BadInputError(f"{where}: a bbox is [x, y, width, height], got {bbox!r:.60}")
    try:
        return Box.checked(*bbox)
    except BadInputError as error:
        raise BadInputError(f"{where}: {error}") from None


def _label(
    value: object, classes: dict[str, str], where: str
) -> tuple[str | None, float | None, str | None]:
    """The most probable classification (label, probability, "machine"), or none."""
    if not value:
        return None, None, None
    if not isinstance(value, list):
        raise BadInputError(f"{where}: classifications are [id, probability] pairs")
    best: tuple[str, float] | None = None
    for pair in value:
        if not isinstance(pair, list) or len(pair) != 2:
            raise BadInputError(f"{where}: classifications are [id, probability] pairs")
        probability = checked_confidence(pair[1], f"{where} classification")
        if best is None or probability > best[1]:
            best = (str(pair[0]), probability)
    assert best is not None
    label = classes.get(best[0])
    if label is None:
        raise BadInputError(
            f"{where}: classification {best[0]!r:.20} is not in classification_categories"
        )
    return label, best[1], "machine"


IMPORTER = Importer(KIND, DESCRIPTION, _sniff, read)
