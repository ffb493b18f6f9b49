"""The demo collection on disk: photos, metadata (with observers' notes), queries, judgments.

The collection is laid out like an iNaturalist dataset (iNat folder names, a COCO-style
metadata file) with INQUIRE-format query and judgment files, so every feature of the
application can be tried without downloading anything. What its photos show and how they are
drawn is `engine.demo.scenes`; this module writes them.

A photo with two species lives in the folder (taxon) of the first one named in the query it
was drawn for, the sentence's subject ("a red circle beside a blue square" is filed under red
circle), as an iNat observation has one observed taxon; its first annotation is that object.

`metadata.json` describes what each photo shows (docs/SPEC.md §6.4): one annotation per drawn object
(`category_id` of its colour-shape species, `bbox` [x, y, w, h] in pixels, `attributes` with
`size` tiny/normal/large and `occluded`) and, per image, `attributes` with `count` (objects
drawn) and `background` (solid, gradient, noise, blotches, striped or spotted). The judgments
follow from that metadata alone (`engine.demo.scenes.judge`).
"""

from __future__ import annotations

import csv
import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from engine.demo.scenes import (
    DEMO_CLASSES,
    DEMO_QUERIES,
    IMAGE_SIZE,
    PURPOSE_COLLECTION,
    STREAM_METADATA,
    DemoQuery,
    PlacedObject,
    PlannedPhoto,
    default_photos_per_query,
    image_rng,
    jpeg_bytes,
    pick,
    plan_collection,
    relevant_from_metadata,
    render_planned,
)
from engine.errors import BadInputError
from engine.progress import ProgressCallback, RateMeter, no_progress

log = logging.getLogger(__name__)

_ICONIC_GROUP = "Plants"
_GENERATOR_NAME = "quadrat-demo"
_GENERATOR_VERSION = 3

_LICENCES = ("CC BY 4.0", "CC BY-NC 4.0", "CC0 1.0", "CC BY-SA 4.0")
_RIGHTS_HOLDERS = ("Ada Linnaea", "Ben Herbarium", "Chloe Sedge", "Dev Kestrel", "Eli Mossbank")
# (latitude, longitude) of a few fictional field sites; photos scatter around them.
_SITES = ((51.50, -0.12), (-33.92, 18.42), (37.77, -122.42), (35.68, 139.69), (-41.29, 174.78))

QUERIES_HEADER = ",query_id,query_text,supercategory,category,iconic_group"
JUDGMENTS_HEADER = "query_id,image_id,image_path"


@dataclass(frozen=True)
class DemoCollection:
    """A demo collection on disk. `labels` maps each image path (relative to `root`) to its
    taxon's common name ("red circle": the folder it lives in, and the text of the species
    query it answers). `queries` are the benchmark's queries and `relevant` maps each query id
    to the paths judged relevant (what `judgments.csv` says); `kinds` maps each path to the
    category of the query it was drawn for ("species" for plain photos)."""

    root: Path
    metadata_path: Path
    queries_path: Path
    judgments_path: Path
    image_count: int
    labels: dict[str, str]
    queries: tuple[DemoQuery, ...] = DEMO_QUERIES
    relevant: dict[int, tuple[str, ...]] = field(default_factory=dict)
    kinds: dict[str, str] = field(default_factory=dict)
    photos_per_query: int = 0


# ---------------------------------------------------------------------------------------------
# The metadata


def _is_demo_collection(dest: Path) -> dict[str, Any] | None:
    """The `info` block of the demo collection at `dest`, or None if it is not one."""
    try:
        info = json.loads((dest / "metadata.json").read_text(encoding="utf-8")).get("info", {})
    except (OSError, ValueError, AttributeError):
        return None
    return info if isinstance(info, dict) and info.get("generator") == _GENERATOR_NAME else None


def _metadata_for_image(rng: np.random.Generator, image_id: int, file_name: str) -> dict[str, Any]:
    lat, lon = _SITES[int(rng.integers(len(_SITES)))]
    day = int(rng.integers(0, 5 * 365))
    stamp = time.gmtime(1_546_300_800 + day * 86_400 + int(rng.integers(6 * 3600, 19 * 3600)))
    return {
        "id": image_id,
        "file_name": file_name,
        "width": IMAGE_SIZE,
        "height": IMAGE_SIZE,
        "license": _LICENCES[int(rng.integers(len(_LICENCES)))],
        "rights_holder": _RIGHTS_HOLDERS[int(rng.integers(len(_RIGHTS_HOLDERS)))],
        "date": time.strftime("%Y-%m-%d %H:%M:%S+00:00", stamp),
        "latitude": round(lat + float(rng.normal(0, 0.05)), 5),
        "longitude": round(lon + float(rng.normal(0, 0.05)), 5),
        "location_uncertainty": int(rng.integers(5, 500)),
    }


def annotation_record(annotation_id: int, image_id: int, obj: PlacedObject) -> dict[str, Any]:
    """The COCO annotation of one drawn object: its species, box, size and occlusion."""
    bbox = obj.bbox()
    return {
        "id": annotation_id,
        "image_id": image_id,
        "category_id": obj.demo_class.index,
        "bbox": bbox,
        "area": round(bbox[2] * bbox[3], 1),
        "iscrowd": 0,
        "attributes": {"size": obj.size, "occluded": obj.occluded},
    }


def category_records() -> list[dict[str, Any]]:
    """The COCO categories: one per colour-shape species, with its fictional taxon."""
    return [
        {
            "id": c.index,
            "name": f"{c.taxon['genus']} {c.taxon['specific_epithet']}",
            "common_name": c.common_name,
            "supercategory": c.taxon["kingdom"],
            **c.taxon,
            "image_dir_name": c.dir_name,
        }
        for c in DEMO_CLASSES
    ]


# -- observers' notes ---------------------------------------------------------------------------
# Some observers write a line about what they saw; most write nothing. The notes say what the
# photo shows (count, size, background, occlusion, the other object and where it is), in the
# loose words people use, often only one thing, sometimes nothing useful at all. They come from
# a random stream of their own, so adding them moved no photo, field or judgment.

NOTES_SHARE = 0.3
"""The share of the demo's photos whose record has notes."""
_NOTES_SEED_KEY = 7_919  # the notes' stream: [purpose, seed, key], apart from every photo's
_NOTES_VERSION = 1

_COUNT_NOTES: dict[int, tuple[str, ...]] = {
    2: ("two of them", "a pair", "2 together", "two individuals", "2"),
    3: ("three of them", "group of three", "3 individuals", "three together", "3"),
}
_SIZE_NOTES: dict[str, tuple[str, ...]] = {
    "tiny": ("tiny", "very small one", "small specimen, easy to miss", "tiny, had to zoom in"),
    "large": ("big one", "large individual", "huge, filled the frame", "big"),
}
_BACKGROUND_NOTES: dict[str, tuple[str, ...]] = {
    "solid": ("on bare rock", "plain background", "on a plain surface"),
    "gradient": ("on smooth ground", "soft light behind it"),
    "noise": ("on sand", "on gravel", "sandy ground"),
    "blotches": ("on mottled ground", "on lichen", "blotchy substrate"),
    "striped": ("on a striped surface", "stripy background", "stripes behind it", "striped"),
    "spotted": ("on a spotted background", "spotty substrate", "among spots", "spotted surface"),
}
_OCCLUDED_NOTES = (
    "mostly hidden",
    "partly covered by leaves",
    "half hidden in the brush",
    "obscured by twigs",
    "hard to see",
    "hidden",
)
_BESIDE_NOTES = ("next to a {other}", "beside a {other}", "{other} right next to it", "w/ {other}")
_OVER_NOTES = ("above a {other}", "{other} just below", "sitting over a {other}")
_UNDER_NOTES = ("below a {other}", "under a {other}", "{other} on top")
_FILLER_NOTES = (
    "seen on a morning walk",
    "first one this season",
    "ID not certain",
    "common here",
    "returned the next day, still there",
    "photo taken in a hurry",
)


def _relation_note(rng: np.random.Generator, first: PlacedObject, other: PlacedObject) -> str:
    """Where the other object is, as the photo shows it (image y grows downwards)."""
    dx, dy = other.cx - first.cx, other.cy - first.cy
    beside = abs(dx) >= abs(dy)
    options = _BESIDE_NOTES if beside else (_OVER_NOTES if dy > 0 else _UNDER_NOTES)
    return pick(rng, options).format(other=other.name)


def _note_facts(rng: np.random.Generator, photo: PlannedPhoto) -> list[tuple[str, float]]:
    """What an observer might say about `photo`, each with how likely it is to be said."""
    objects = photo.objects
    first = objects[0]
    facts: list[tuple[str, float]] = []
    if len(objects) > 1 and all(o.name == first.name for o in objects):
        facts.append((pick(rng, _COUNT_NOTES[len(objects)]), 3.0))
    elif len(objects) > 1:
        facts.append((_relation_note(rng, first, objects[1]), 3.0))
    if len(objects) == 1 and first.size in _SIZE_NOTES:
        facts.append((pick(rng, _SIZE_NOTES[first.size]), 3.0))
    if first.occluded:
        facts.append((pick(rng, _OCCLUDED_NOTES), 3.0))
    facts.append((pick(rng, _BACKGROUND_NOTES[photo.background]), 1.0))
    return facts


def _note(rng: np.random.Generator, photo: PlannedPhoto) -> str:
    """One observer's note about `photo`: one or two true things, or only a remark."""
    facts = _note_facts(rng, photo)
    if rng.random() < 0.15:
        return pick(rng, _FILLER_NOTES)
    weights = np.array([w for _, w in facts])
    said = min(len(facts), 1 if rng.random() < 0.6 else 2)
    chosen = rng.choice(len(facts), size=said, replace=False, p=weights / weights.sum())
    parts = [facts[int(i)][0] for i in sorted(chosen)]
    if rng.random() < 0.2:
        parts.append(pick(rng, _FILLER_NOTES))
    text = ", ".join(parts)
    if rng.random() < 0.5:
        text = text[0].upper() + text[1:]
    return text + "." if rng.random() < 0.3 else text


def _notes_by_photo(seed: int, plan: Sequence[PlannedPhoto]) -> dict[int, str]:
    """Photo index in `plan` -> its note, for NOTES_SHARE of the photos (rounded)."""
    rng = np.random.default_rng([PURPOSE_COLLECTION, seed, _NOTES_SEED_KEY])
    chosen = rng.choice(len(plan), size=round(NOTES_SHARE * len(plan)), replace=False)
    return {int(i): _note(rng, plan[int(i)]) for i in sorted(chosen)}


def _existing_demo(dest: Path) -> dict[str, Any] | None:
    """The info of the demo collection already in `dest` (None: none, or no folder yet); a
    file, or a non-empty folder that is no demo collection, is refused."""
    if dest.exists() and not dest.is_dir():
        raise BadInputError(f"cannot write the demo collection to {dest}: it is a file")
    existing = _is_demo_collection(dest) if dest.is_dir() else None
    if dest.is_dir() and any(dest.iterdir()) and existing is None:
        raise BadInputError(
            f"cannot write the demo collection to {dest}: the folder is not empty "
            "and is not a demo collection; choose an empty or new folder"
        )
    return existing


def _planned_records(
    purpose: int, seed: int, plan: Sequence[PlannedPhoto]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str]]:
    """The COCO image records (with attributes and notes), annotations and file names of the
    planned photos, in plan order."""
    images: list[dict[str, Any]] = []
    annotations: list[dict[str, Any]] = []
    file_names: list[str] = []
    notes = _notes_by_photo(seed, plan)
    for number, photo in enumerate(plan):
        rng = image_rng(purpose, seed, photo.key, photo.number, STREAM_METADATA)
        image_uuid = uuid.UUID(bytes=rng.bytes(16), version=4)
        file_name = f"train/{photo.demo_class.dir_name}/{image_uuid}.jpg"
        image_id = len(images) + 1
        record = _metadata_for_image(rng, image_id, file_name)
        record["attributes"] = {"count": len(photo.objects), "background": photo.background}
        if number in notes:
            record["notes"] = notes[number]
        images.append(record)
        for obj in photo.objects:  # the first is the photo's taxon (docs/SPEC.md §3 reads it)
            annotations.append(annotation_record(len(annotations) + 1, image_id, obj))
        file_names.append(file_name)
    return images, annotations, file_names


def write_demo_collection(
    dest: Path,
    images_per_class: int = 40,
    seed: int = 0,
    progress: ProgressCallback = no_progress,
    photos_per_query: int | None = None,
    *,
    queries: Sequence[DemoQuery] = DEMO_QUERIES,
    purpose: int = PURPOSE_COLLECTION,
) -> DemoCollection:
    """Write the demo collection into `dest` (created if missing) and return its description.

    `images_per_class` plain photos of each species, and `photos_per_query` photos for each
    other query (default: `default_photos_per_query`); 40 gives 480 + 48 x 10 = 960 photos.
    Deterministic for a seed. On a folder that already holds the same demo collection nothing
    is rewritten; a different demo collection there is replaced. A non-empty folder that is not
    a demo collection is refused with `BadInputError`. `queries` and `purpose` draw another
    benchmark on the demo world (`engine.demo.scenes.heldout_queries`, `PURPOSE_HELDOUT`).
    """
    dest = Path(dest)
    if images_per_class < 1:
        raise BadInputError(f"images_per_class must be at least 1, not {images_per_class}")
    if photos_per_query is None:
        photos_per_query = default_photos_per_query(images_per_class)
    if photos_per_query < 0:
        raise BadInputError(f"photos_per_query must not be negative, not {photos_per_query}")
    existing = _existing_demo(dest)

    # Plan every image first (cheap), so an existing identical collection can be recognised.
    plan = plan_collection(purpose, seed, images_per_class, photos_per_query, queries)
    images, annotations, file_names = _planned_records(purpose, seed, plan)
    info = {
        "description": "Quadrat synthetic demo collection: coloured shapes",
        "generator": _GENERATOR_NAME,
        "generator_version": _GENERATOR_VERSION,
        "seed": seed,
        "images_per_class": images_per_class,
        "photos_per_query": photos_per_query,
        "notes_version": _NOTES_VERSION,
    }
    if purpose != PURPOSE_COLLECTION or tuple(queries) != DEMO_QUERIES:
        info["purpose"] = purpose
        info["queries"] = [q.text for q in queries]
    metadata = {
        "info": info,
        "images": images,
        "categories": category_records(),
        "annotations": annotations,
    }
    relevant = {
        qid: tuple(i["file_name"] for i in records)
        for qid, records in relevant_from_metadata(metadata, queries).items()
    }
    labels = {
        name: photo.demo_class.common_name for name, photo in zip(file_names, plan, strict=True)
    }
    collection = DemoCollection(
        root=dest,
        metadata_path=dest / "metadata.json",
        queries_path=dest / "queries.csv",
        judgments_path=dest / "judgments.csv",
        image_count=len(plan),
        labels=labels,
        queries=tuple(queries),
        relevant=relevant,
        kinds={name: photo.kind for name, photo in zip(file_names, plan, strict=True)},
        photos_per_query=photos_per_query,
    )
    same_as_existing = existing == info and all((dest / f).is_file() for f in labels)
    if (
        same_as_existing
        and collection.queries_path.is_file()
        and collection.judgments_path.is_file()
    ):
        log.info("demo collection already present in %s", dest)
        progress(RateMeter(len(plan)).update(len(plan), "already present"))
        return collection
    if existing is not None:
        log.info("replacing the demo collection in %s", dest)
        shutil.rmtree(dest / "train", ignore_errors=True)

    # metadata.json first: it marks the folder as a demo collection, so an interrupted write
    # is completed by the next call instead of being refused as a foreign folder.
    dest.mkdir(parents=True, exist_ok=True)
    collection.metadata_path.write_text(json.dumps(metadata, indent=1), encoding="utf-8")
    meter = RateMeter(len(plan))
    for done, (photo, file_name) in enumerate(zip(plan, file_names, strict=True), start=1):
        path = dest / file_name
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + ".part")  # never a half-written photo in place
        partial.write_bytes(jpeg_bytes(render_planned(purpose, seed, photo)))
        os.replace(partial, path)
        progress(meter.update(done, "writing demo photos"))
    _write_queries(collection.queries_path, queries)
    image_ids = {i["file_name"]: i["id"] for i in images}
    _write_judgments(collection.judgments_path, relevant, image_ids)
    return collection


def _write_queries(path: Path, queries: Sequence[DemoQuery] = DEMO_QUERIES) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(QUERIES_HEADER.split(","))
        for index, q in enumerate(queries):
            writer.writerow([index, q.query_id, q.text, q.supercategory, q.category, _ICONIC_GROUP])


def _write_judgments(
    path: Path, relevant: dict[int, tuple[str, ...]], image_ids: dict[str, int]
) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(JUDGMENTS_HEADER.split(","))
        for query_id, file_names in relevant.items():
            for file_name in file_names:
                writer.writerow([query_id, image_ids[file_name], file_name])
