"""SpeciesNet predictions (the ensemble's `predictions.json`).

One JSON object whose `predictions` hold per photo its `filepath`, the detector's `detections`
(category id, label, `conf`, `bbox` as in MegaDetector's files), the classifier's top
`classifications`, and the ensemble's `prediction` with its `prediction_score`: a taxonomy
string "uuid;class;order;family;genus;species;common name" ("…;;;;;;blank" for an empty frame).
`failures` names the parts that could not run on the photo.

The prediction becomes the frame's whole-photo label (its common name, as a user types it; the
scientific name made of the genus and species fields is kept in the source's `labels` map);
the detections become its boxes.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from engine.detections.megadetector import DEFAULT_CATEGORIES, box_of
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
from engine.detections.records import DetectionRecord
from engine.errors import BadInputError

KIND = "speciesnet"
DESCRIPTION = "SpeciesNet predictions"
_RANKS = ("class", "order", "family", "genus", "species")


def _sniff(head: str) -> bool:
    return "predictions" in top_level_keys(head)


def names_of(taxonomy: str) -> tuple[str, str | None]:
    """(label, scientific name) of a taxonomy string: the common name (else the lowest rank
    given), and genus + species when both are given, else the lowest rank's name."""
    fields = taxonomy.split(";")
    if len(fields) != 7:
        raise BadInputError(
            f"a SpeciesNet label is uuid;class;order;family;genus;species;common name, "
            f"got {taxonomy!r:.80}"
        )
    ranks = [f.strip() for f in fields[1:6]]
    common = fields[6].strip()
    genus, species = ranks[3], ranks[4]
    if genus and species:
        scientific: str | None = f"{genus.capitalize()} {species.lower()}"
    else:
        lowest = next((r for r in reversed(ranks) if r), None)
        scientific = lowest.capitalize() if lowest else None
    label = common or scientific
    if not label:
        raise BadInputError(f"a SpeciesNet label names nothing: {taxonomy!r:.80}")
    return label, scientific


def read(stream: ByteStream, path: Path, threshold: float) -> Reading:
    """The predictions as a stream of entries; the model version is the first one's."""
    json_header(path, "predictions", (), DESCRIPTION)  # the shape, checked before any write
    items = json_items(stream, "predictions.item", path, DESCRIPTION)
    first = next(items, None)
    model = None
    if isinstance(first, dict) and first.get("model_version"):
        model = f"SpeciesNet {first['model_version']}"
    labels: dict[str, str | None] = {}
    categories: dict[str, Any] = {"detection_categories": DEFAULT_CATEGORIES, "labels": labels}
    return Reading(model, categories, _entries(first, items, path, threshold, labels))


def _entries(
    first: object,
    items: Iterator[Any],
    path: Path,
    threshold: float,
    labels: dict[str, str | None],
) -> Iterator[Entry]:
    if first is None:
        return
    yield entry_of(first, f"{path.name}: predictions[0]", threshold, labels)
    for n, item in enumerate(items, start=1):
        yield entry_of(item, f"{path.name}: predictions[{n}]", threshold, labels)


def entry_of(item: object, where: str, threshold: float, labels: dict[str, str | None]) -> Entry:
    """One prediction as an `Entry` (the label's scientific name noted in `labels`)."""
    item = checked_object(item, where, 'an object with a "filepath"')
    file = item.get("filepath")
    if not isinstance(file, str) or not file.strip():
        raise BadInputError(f'{where}: no "filepath"')
    where = f"{where} ({file})"
    records: list[DetectionRecord] = []
    highest: float | None = None
    detections = item.get("detections") or []
    if not isinstance(detections, list):
        raise BadInputError(f'{where}: "detections" is not a list')
    for k, detection in enumerate(detections):
        at = f"{where} detection {k}"
        detection = checked_object(detection, at, "an object")
        confidence = checked_confidence(detection.get("conf"), at)
        highest = confidence if highest is None else max(highest, confidence)
        if confidence < threshold:
            continue
        category = detection.get("label") or DEFAULT_CATEGORIES.get(str(detection.get("category")))
        if not isinstance(category, str):
            raise BadInputError(f"{at}: no category (label or category id)")
        records.append(DetectionRecord(box_of(detection.get("bbox"), at), category, confidence))
    prediction = item.get("prediction")
    if prediction is not None:
        if not isinstance(prediction, str):
            raise BadInputError(f'{where}: "prediction" is not a taxonomy string')
        try:
            label, scientific = names_of(prediction)
        except BadInputError as error:
            raise BadInputError(f"{where}: {error}") from None
        score = item.get("prediction_score")
        probability = None if score is None else checked_confidence(score, f"{where} score")
        labels.setdefault(label, scientific)
        records.append(
            DetectionRecord(
                None, label=label, label_probability=probability, classification_method="machine"
            )
        )
    failures = item.get("failures") or []
    if not isinstance(failures, list):
        raise BadInputError(f'{where}: "failures" is not a list')
    # The frame failed when its detector did, or nothing at all was predicted.
    failed = bool(failures) and ("DETECTOR" in failures or prediction is None)
    failure = ", ".join(str(f) for f in failures) if failed else None
    return Entry(file, where, tuple(records), failure, None if failure else highest)


IMPORTER = Importer(KIND, DESCRIPTION, _sniff, read)
