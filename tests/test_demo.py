"""The synthetic demo collection (layout, metadata, benchmark files) and the shipped demo model."""

from __future__ import annotations

import csv
import hashlib
import json
import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from engine.demo import COLOURS, SHAPES, write_demo_collection
from engine.errors import BadInputError

INAT_FOLDER = re.compile(r"^\d{5}(_[A-Z][a-z]+){6}_[a-z]+$")
UUID_JPG = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}\.jpg$")


@pytest.fixture(scope="module")
def small_collection(tmp_path_factory):
    return write_demo_collection(tmp_path_factory.mktemp("demo") / "collection", images_per_class=3)


def _digests(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_colours_and_shapes() -> None:
    assert len(COLOURS) >= 4 and len(SHAPES) >= 3
    assert {"red", "green", "blue", "yellow"} <= set(COLOURS)


def test_folders_are_inat_style_with_the_promised_counts(small_collection) -> None:
    root = small_collection.root
    folders = sorted(p.name for p in (root / "train").iterdir())
    assert len(folders) == len(COLOURS) * len(SHAPES)
    assert all(INAT_FOLDER.match(name) and len(name.split("_")) == 8 for name in folders), folders
    assert folders[0] == "00000_Plantae_Demonstrata_Formae_Rotundales_Circulaceae_Circulus_ruber"
    assert [int(name[:5]) for name in folders] == list(range(len(folders)))
    for name in folders:
        photos = list((root / "train" / name).iterdir())
        assert len(photos) == 3
        assert all(UUID_JPG.match(p.name) for p in photos)
    assert small_collection.image_count == 3 * len(folders)
    assert sorted(p.name for p in root.iterdir()) == [
        "judgments.csv",
        "metadata.json",
        "queries.csv",
        "train",
    ]


def test_metadata_json_is_coco_style_and_matches_the_files(small_collection) -> None:
    root = small_collection.root
    metadata = json.loads((root / "metadata.json").read_text())
    images, categories, annotations = (
        metadata["images"],
        metadata["categories"],
        metadata["annotations"],
    )
    assert len(images) == small_collection.image_count == len(annotations)
    assert len(categories) == len(COLOURS) * len(SHAPES)
    image_fields = {
        "id",
        "file_name",
        "width",
        "height",
        "license",
        "rights_holder",
        "date",
        "latitude",
        "longitude",
    }
    category_of = {a["image_id"]: a["category_id"] for a in annotations}
    by_id = {c["id"]: c for c in categories}
    for image in images:
        assert image_fields <= set(image)
        with Image.open(root / image["file_name"]) as photo:
            assert photo.size == (image["width"], image["height"])
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\+00:00", image["date"])
        assert -90 <= image["latitude"] <= 90 and -180 <= image["longitude"] <= 180
        category = by_id[category_of[image["id"]]]
        assert image["file_name"].split("/")[1] == category["image_dir_name"]
        assert small_collection.labels[image["file_name"]] == category["common_name"]
    red_circle = next(c for c in categories if c["common_name"] == "red circle")
    assert red_circle["genus"] == "Circulus" and red_circle["specific_epithet"] == "ruber"
    assert red_circle["name"] == "Circulus ruber"
    assert {"kingdom", "phylum", "class", "order", "family", "supercategory"} <= set(red_circle)
    assert len({i["license"] for i in images}) > 1 and len({i["date"][:10] for i in images}) > 1


def test_queries_and_judgments_are_in_the_inquire_formats(small_collection) -> None:
    root = small_collection.root
    queries_text = (root / "queries.csv").read_text()
    assert (
        queries_text.splitlines()[0] == ",query_id,query_text,supercategory,category,iconic_group"
    )
    queries = list(csv.DictReader(queries_text.splitlines()))
    expected_texts = {f"{c} {s}" for c in COLOURS for s in SHAPES}
    assert {q["query_text"] for q in queries} == expected_texts
    assert len(queries) == len(expected_texts)
    assert [q[""] for q in queries] == [str(i) for i in range(len(queries))]

    judgments_text = (root / "judgments.csv").read_text()
    assert judgments_text.splitlines()[0] == "query_id,image_id,image_path"
    judgments = list(csv.DictReader(judgments_text.splitlines()))
    assert len(judgments) == small_collection.image_count  # one row per relevant image
    text_of = {q["query_id"]: q["query_text"] for q in queries}
    ids = {
        i["file_name"]: i["id"] for i in json.loads((root / "metadata.json").read_text())["images"]
    }
    for row in judgments:
        assert (root / row["image_path"]).is_file()
        assert int(row["image_id"]) == ids[row["image_path"]]
        assert small_collection.labels[row["image_path"]] == text_of[row["query_id"]]


def test_the_collection_is_deterministic_for_a_seed(small_collection, tmp_path) -> None:
    again = write_demo_collection(tmp_path / "again", images_per_class=3)
    assert _digests(again.root) == _digests(small_collection.root)
    other = write_demo_collection(tmp_path / "other", images_per_class=3, seed=1)
    assert (
        _digests(other.root)
        .keys()
        .isdisjoint(k for k in _digests(small_collection.root) if k.startswith("train/"))
    )


def test_writing_again_is_idempotent_and_foreign_folders_are_refused(tmp_path) -> None:
    first = write_demo_collection(tmp_path / "demo", images_per_class=2)
    stamps = {p: p.stat().st_mtime_ns for p in first.root.rglob("*")}
    second = write_demo_collection(tmp_path / "demo", images_per_class=2)
    assert second.labels == first.labels
    assert {p: p.stat().st_mtime_ns for p in first.root.rglob("*")} == stamps

    # An interrupted write (some photos and the CSV files missing) is completed, identically.
    digests = _digests(first.root)
    next(iter((first.root / "train").rglob("*.jpg"))).unlink()
    (first.root / "judgments.csv").unlink()
    write_demo_collection(tmp_path / "demo", images_per_class=2)
    assert _digests(first.root) == digests

    bigger = write_demo_collection(tmp_path / "demo", images_per_class=4)  # replaces the old one
    assert len(list((tmp_path / "demo" / "train").rglob("*.jpg"))) == bigger.image_count == 48

    foreign = tmp_path / "photos"
    foreign.mkdir()
    (foreign / "holiday.jpg").write_bytes(b"not mine")
    with pytest.raises(BadInputError, match="not empty and is not a demo collection"):
        write_demo_collection(foreign)
    assert [p.name for p in foreign.iterdir()] == ["holiday.jpg"]
    with pytest.raises(BadInputError, match="it is a file"):
        write_demo_collection(foreign / "holiday.jpg")


@pytest.mark.slow
def test_the_demo_model_finds_every_colour_and_shape(tmp_path) -> None:
    """Brute-force ranking of a fresh seed-0 collection with the shipped model: P@10 >= 0.9."""
    from engine.encoders import load_encoder

    collection = write_demo_collection(tmp_path / "demo", seed=0)
    encoder = load_encoder("demo", device="cpu")
    paths = list(collection.labels)
    images = []
    for path in paths:
        with Image.open(collection.root / path) as photo:
            images.append(photo.copy())
    image_vectors = encoder.encode_images(images)
    labels = np.array([collection.labels[p] for p in paths])
    failures = {}
    for colour in COLOURS:
        for shape in SHAPES:
            for query in (f"{colour} {shape}", f"a {colour} {shape}", f"{colour} {shape}s"):
                scores = image_vectors @ encoder.encode_texts([query])[0]
                top = np.argsort(-scores, kind="stable")[:10]
                precision = float(np.mean(labels[top] == f"{colour} {shape}"))
                if precision < 0.9:
                    failures[query] = precision
    assert failures == {}
