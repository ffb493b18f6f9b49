"""The synthetic demo collection (layout, metadata, benchmark files) and the shipped demo model."""

from __future__ import annotations

import csv
import hashlib
import json
import re
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from engine.demo.collection import write_demo_collection
from engine.demo.scenes import (
    BACKGROUNDS,
    COLOURS,
    DEMO_QUERIES,
    SHAPES,
    SIZES,
    SUPERCATEGORIES,
)
from engine.errors import BadInputError

INAT_FOLDER = re.compile(r"^\d{5}(_[A-Z][a-z]+){6}_[a-z]+$")
UUID_JPG = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}\.jpg$")
SPECIES_NAMES = {f"{c} {s}" for c in COLOURS for s in SHAPES}
NEW_CATEGORIES = {"binding", "relation", "count", "size", "background", "occlusion"}
BASE_RGB = {"red": (215, 35, 35), "green": (35, 165, 55), "blue": (35, 75, 215), "yellow": (240, 205, 35)}  # fmt: skip


@pytest.fixture(scope="module")
def small_collection(tmp_path_factory):
    return write_demo_collection(tmp_path_factory.mktemp("demo") / "collection", images_per_class=3)


def _digests(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _metadata(collection) -> dict:
    return json.loads(Path(collection.metadata_path).read_text(encoding="utf-8"))


def test_species_folders_metadata_and_judgments_agree(small_collection) -> None:
    """What is on disk, read back without the writer's constants: each species folder holds
    the photos metadata.json files there, its species has one query, and that query's
    judgments are every photo the metadata shows the species in (filed there or elsewhere)."""
    root = small_collection.root
    metadata = _metadata(small_collection)
    on_disk = Counter(p.parent.name for p in (root / "train").rglob("*") if p.is_file())
    in_metadata = Counter(i["file_name"].split("/")[1] for i in metadata["images"])
    assert on_disk == in_metadata and sum(on_disk.values()) == len(metadata["images"])
    assert {p.relative_to(root).as_posix() for p in (root / "train").rglob("*.jpg")} == {
        i["file_name"] for i in metadata["images"]
    }

    queries = _read_csv(root / "queries.csv")
    species_query = {q["query_text"]: q["query_id"] for q in queries if q["category"] == "species"}
    judged = defaultdict(set)
    for row in _read_csv(root / "judgments.csv"):
        judged[row["query_id"]].add(row["image_path"])
    files = {i["id"]: i["file_name"] for i in metadata["images"]}
    showing = defaultdict(set)  # category id -> every photo with an object of it
    for a in metadata["annotations"]:
        showing[a["category_id"]].add(files[a["image_id"]])
    categories = metadata["categories"]
    assert sorted(c["image_dir_name"] for c in categories) == sorted(on_disk)
    assert len(species_query) == len(categories)
    for category in categories:
        folder = category["image_dir_name"]
        relevant = judged[species_query[category["common_name"]]]
        assert relevant == showing[category["id"]], category["common_name"]
        filed_here = {f for f in files.values() if f.split("/")[1] == folder}
        assert len(filed_here) == on_disk[folder] and filed_here <= relevant
    # Photos of two or three species are relevant to a species filed in another folder too.
    assert sum(len(judged[qid]) for qid in species_query.values()) > len(files)


def test_folders_are_inat_style_with_the_promised_counts(small_collection) -> None:
    root = small_collection.root
    folders = sorted(p.name for p in (root / "train").iterdir())
    assert len(folders) == len(COLOURS) * len(SHAPES)
    assert all(INAT_FOLDER.match(name) and len(name.split("_")) == 8 for name in folders), folders
    assert folders[0] == "00000_Plantae_Demonstrata_Formae_Rotundales_Circulaceae_Circulus_ruber"
    assert [int(name[:5]) for name in folders] == list(range(len(folders)))
    per_folder = Counter(path.split("/")[1] for path in small_collection.labels)
    plain = Counter(
        path.split("/")[1] for path, kind in small_collection.kinds.items() if kind == "species"
    )
    for name in folders:
        photos = list((root / "train" / name).iterdir())
        assert len(photos) == per_folder[name] and plain[name] == 3
        assert all(UUID_JPG.match(p.name) for p in photos)
    # 3 plain photos per species and one photo for each of the 48 other queries.
    assert small_collection.photos_per_query == 1
    assert small_collection.image_count == 3 * len(folders) + 48 == len(small_collection.labels)
    assert sorted(p.name for p in root.iterdir()) == [
        "judgments.csv",
        "metadata.json",
        "queries.csv",
        "train",
    ]


def test_the_default_collection_stays_small(demo_collection) -> None:
    assert demo_collection.photos_per_query == 10
    assert demo_collection.image_count == 40 * 12 + 48 * 10 == 960
    assert Counter(demo_collection.kinds.values())["species"] == 480


def test_metadata_json_is_coco_style_and_matches_the_files(small_collection) -> None:
    root = small_collection.root
    metadata = _metadata(small_collection)
    images, categories, annotations = (
        metadata["images"],
        metadata["categories"],
        metadata["annotations"],
    )
    assert len(images) == small_collection.image_count
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
        "attributes",
    }
    first_category = {}
    for a in annotations:
        first_category.setdefault(a["image_id"], a["category_id"])
    by_id = {c["id"]: c for c in categories}
    for image in images:
        assert image_fields <= set(image)
        with Image.open(root / image["file_name"]) as photo:
            assert photo.size == (image["width"], image["height"])
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\+00:00", image["date"])
        assert -90 <= image["latitude"] <= 90 and -180 <= image["longitude"] <= 180
        # A photo lives in the folder of its first annotation's species (the one it is filed
        # under, like an iNat observation's taxon).
        category = by_id[first_category[image["id"]]]
        assert image["file_name"].split("/")[1] == category["image_dir_name"]
        assert small_collection.labels[image["file_name"]] == category["common_name"]
    red_circle = next(c for c in categories if c["common_name"] == "red circle")
    assert red_circle["genus"] == "Circulus" and red_circle["specific_epithet"] == "ruber"
    assert red_circle["name"] == "Circulus ruber"
    assert {"kingdom", "phylum", "class", "order", "family", "supercategory"} <= set(red_circle)
    assert len({i["license"] for i in images}) > 1 and len({i["date"][:10] for i in images}) > 1


def test_metadata_describes_every_drawn_object(small_collection) -> None:
    """Every annotation has a bbox inside the image that holds its shape's colour, and the
    size and occlusion attributes; every image has its object count and background."""
    root = small_collection.root
    metadata = _metadata(small_collection)
    names = {c["id"]: c["common_name"] for c in metadata["categories"]}
    objects = defaultdict(list)
    for a in metadata["annotations"]:
        objects[a["image_id"]].append(a)
    assert len({a["id"] for a in metadata["annotations"]}) == len(metadata["annotations"])
    for image in metadata["images"]:
        drawn = objects[image["id"]]
        attributes = image["attributes"]
        assert attributes["count"] == len(drawn) >= 1
        assert attributes["background"] in BACKGROUNDS
        with Image.open(root / image["file_name"]) as photo:
            pixels = np.asarray(photo.convert("RGB"), dtype=np.float64)
        for a in drawn:
            assert set(a) >= {"id", "image_id", "category_id", "bbox", "attributes"}
            assert a["category_id"] in names
            x, y, w, h = a["bbox"]
            assert min(x, y) >= 0 and w > 0 and h > 0, a
            assert x + w <= image["width"] and y + h <= image["height"], a
            assert a["attributes"]["size"] in SIZES
            assert isinstance(a["attributes"]["occluded"], bool)
            # The shape is where the box says: its colour fills a good part of the box.
            colour = names[a["category_id"]].split()[0]
            box = pixels[int(y) : int(np.ceil(y + h)), int(x) : int(np.ceil(x + w))]
            near = np.linalg.norm(box - np.array(BASE_RGB[colour]), axis=-1) < 70
            minimum = 0.1 if a["attributes"]["occluded"] else 0.25
            assert near.mean() >= minimum, (image["file_name"], a, near.mean())


def test_the_metadata_reads_back_through_the_scanner(small_collection) -> None:
    from engine.indexing.coco import load_coco_metadata

    metadata = load_coco_metadata(small_collection.metadata_path)
    assert metadata.problems == 0
    assert len(metadata) == small_collection.image_count
    for meta in metadata.values():
        assert meta.taxon is not None


def test_queries_and_judgments_are_in_the_inquire_formats(small_collection) -> None:
    root = small_collection.root
    queries_text = (root / "queries.csv").read_text()
    assert (
        queries_text.splitlines()[0] == ",query_id,query_text,supercategory,category,iconic_group"
    )
    queries = list(csv.DictReader(queries_text.splitlines()))
    assert len(queries) >= 12 + 48
    assert [q[""] for q in queries] == [str(i) for i in range(len(queries))]
    assert (
        len({q["query_id"] for q in queries})
        == len({q["query_text"] for q in queries})
        == len(queries)
    )
    # The 12 species queries keep their ids and texts.
    species = [q for q in queries if q["category"] == "species"]
    assert [q["query_text"] for q in species] == [f"{c} {s}" for c in COLOURS for s in SHAPES]
    assert [q["query_id"] for q in species] == [str(i) for i in range(1, 13)]
    assert {q["supercategory"] for q in queries} == {"Species", "Appearance", "Context", "Behavior"}
    assert {q["category"] for q in queries} == {"species"} | NEW_CATEGORIES
    for q in queries:
        assert q["supercategory"] == SUPERCATEGORIES[q["category"]]
    assert sum(q["category"] != "species" for q in queries) >= 48

    judgments_text = (root / "judgments.csv").read_text()
    assert judgments_text.splitlines()[0] == "query_id,image_id,image_path"
    judgments = list(csv.DictReader(judgments_text.splitlines()))
    ids = {i["file_name"]: i["id"] for i in _metadata(small_collection)["images"]}
    pairs = {(row["query_id"], row["image_path"]) for row in judgments}
    assert len(pairs) == len(judgments)  # one row per relevant image
    for row in judgments:
        assert (root / row["image_path"]).is_file()
        assert int(row["image_id"]) == ids[row["image_path"]]
    assert {row["query_id"] for row in judgments} == {q["query_id"] for q in queries}
    # The returned description says the same as the files.
    assert {
        (str(qid), path) for qid, paths in small_collection.relevant.items() for path in paths
    } == pairs
    # Every photo answers the species query of the folder it lives in.
    species_id = {q.text: str(q.query_id) for q in DEMO_QUERIES if q.category == "species"}
    for path, label in small_collection.labels.items():
        assert (species_id[label], path) in pairs


NAME = r"((?:red|green|blue|yellow) (?:circle|square|triangle))"


def _rederive(query_text: str, image: dict, objects: list[dict]) -> bool:
    """Judge a photo for a query from its metadata alone: the rules written in the module
    docstring of engine.demo.scenes, implemented again here from the query's words."""
    names = [o["name"] for o in objects]

    def centre(o: dict) -> tuple[float, float]:
        x, y, w, h = o["bbox"]
        return x + w / 2, y + h / 2

    if m := re.fullmatch(NAME, query_text):
        return m[1] in names
    if m := re.fullmatch(rf"a {NAME} (beside|above) a {NAME}", query_text):
        first, relation, second = m[1], m[2], m[3]
        for a in objects:
            for b in objects:
                if a is b or a["name"] != first or b["name"] != second:
                    continue
                (ax, ay), (bx, by) = centre(a), centre(b)
                across, updown = abs(ax - bx), abs(ay - by)
                if relation == "beside" and across > updown:
                    return True
                if relation == "above" and updown > across and ay < by:
                    return True
        return False
    if m := re.fullmatch(rf"(two|three) {NAME}s", query_text):
        return names.count(m[2]) == {"two": 2, "three": 3}[m[1]]
    if m := re.fullmatch(rf"a (tiny|large) {NAME}", query_text):
        return any(o["name"] == m[2] and o["attributes"]["size"] == m[1] for o in objects)
    if m := re.fullmatch(rf"a {NAME} on a (striped|spotted) background", query_text):
        return m[1] in names and image["attributes"]["background"] == m[2]
    if m := re.fullmatch(rf"a {NAME} partly hidden behind twigs", query_text):
        return any(o["name"] == m[1] and o["attributes"]["occluded"] for o in objects)
    raise AssertionError(f"a query the test cannot judge: {query_text!r}")


# The whole 960-photo demo takes seconds to write: that variant is an integration test (as every
# test on `demo_collection` is, see tests/conftest.py; asked for by name, the fixture goes unseen).
@pytest.mark.parametrize(
    "which", ["small_collection", pytest.param("demo_collection", marks=pytest.mark.integration)]
)
def test_every_query_s_judgments_re_derive_from_the_metadata(which, request) -> None:
    collection = request.getfixturevalue(which)
    metadata = _metadata(collection)
    names = {c["id"]: c["common_name"] for c in metadata["categories"]}
    objects = defaultdict(list)
    for a in metadata["annotations"]:
        objects[a["image_id"]].append({**a, "name": names[a["category_id"]]})
    queries = _read_csv(collection.queries_path)
    derived = {
        (q["query_id"], image["file_name"])
        for q in queries
        for image in metadata["images"]
        if _rederive(q["query_text"], image, objects[image["id"]])
    }
    judged = {(row["query_id"], row["image_path"]) for row in _read_csv(collection.judgments_path)}
    assert derived == judged
    per_query = Counter(qid for qid, _ in judged)
    assert all(per_query[q["query_id"]] >= 1 for q in queries)


def test_swapped_bindings_counts_and_every_attribute_value_exist(small_demo_collection) -> None:
    """Checked on the smallest collection the test suite uses (5 plain photos per class)."""
    collection = small_demo_collection
    texts = {q.text for q in collection.queries}
    relevant = {q.text: collection.relevant[q.query_id] for q in collection.queries}
    pairs = [q for q in collection.queries if q.category in ("binding", "relation")]
    assert len(pairs) >= 8
    for q in pairs:
        (colour_a, shape_a), (colour_b, shape_b) = (name.split() for name in q.species)
        assert colour_a != colour_b and shape_a != shape_b
        swapped = f"a {colour_b} {shape_a} {q.value} a {colour_a} {shape_b}"
        assert swapped in texts, swapped  # the same concepts, bound the other way
        assert relevant[q.text] and relevant[swapped]
        assert not set(relevant[q.text]) & set(relevant[swapped])
        if q.value == "above":
            reversed_order = f"a {colour_b} {shape_b} above a {colour_a} {shape_a}"
            assert reversed_order in texts and relevant[reversed_order]
    counts = [q for q in collection.queries if q.category == "count"]
    assert {q.value for q in counts} == {2, 3}
    for q in counts:  # each species counted both ways
        assert {p.value for p in counts if p.species == q.species} == {2, 3}

    metadata = _metadata(collection)
    image_attributes = [i["attributes"] for i in metadata["images"]]
    object_attributes = [a["attributes"] for a in metadata["annotations"]]
    assert {a["count"] for a in image_attributes} == {1, 2, 3}
    assert {a["background"] for a in image_attributes} == set(BACKGROUNDS)
    assert {a["size"] for a in object_attributes} == set(SIZES)
    assert {a["occluded"] for a in object_attributes} == {True, False}
    kinds = Counter(collection.kinds.values())
    assert set(kinds) == {"species"} | NEW_CATEGORIES and kinds["species"] == 60


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
    photos = list((tmp_path / "demo" / "train").rglob("*.jpg"))
    assert len(photos) == bigger.image_count == 4 * 12 + 48

    foreign = tmp_path / "photos"
    foreign.mkdir()
    (foreign / "holiday.jpg").write_bytes(b"not mine")
    with pytest.raises(BadInputError, match="not empty and is not a demo collection"):
        write_demo_collection(foreign)
    assert [p.name for p in foreign.iterdir()] == ["holiday.jpg"]
    with pytest.raises(BadInputError, match="it is a file"):
        write_demo_collection(foreign / "holiday.jpg")


def test_the_shipped_demo_model_is_small() -> None:
    import resources.models

    folder = Path(resources.models.__file__).parent
    assert (folder / "quadrat-demo.safetensors").stat().st_size <= 8_000_000
    assert json.loads((folder / "quadrat-demo.json").read_text())["embed_dim"] > 0


def test_the_training_tool_builds_the_shipped_architecture() -> None:
    """tools/train_demo_clip.py (a developer tool: nothing at run time trains) writes the
    config that ships beside the weights."""
    import resources.models
    from tools.train_demo_clip import DEMO_MODEL_CONFIG

    folder = Path(resources.models.__file__).parent
    assert json.loads((folder / "quadrat-demo.json").read_text()) == DEMO_MODEL_CONFIG


@pytest.mark.slow
def test_the_demo_model_finds_every_colour_and_shape(demo_collection, demo_encoder) -> None:
    """Brute-force ranking of the seed-0 collection with the shipped model: P@10 >= 0.9 for
    each species query, however it is phrased (relevant: every photo showing that species)."""
    paths = list(demo_collection.labels)
    images = []
    for path in paths:
        with Image.open(demo_collection.root / path) as photo:
            images.append(photo.copy())
    image_vectors = demo_encoder.encode_images(images)
    failures = {}
    for query in demo_collection.queries:
        if query.category != "species":
            continue
        relevant = set(demo_collection.relevant[query.query_id])
        colour, shape = query.text.split()
        for text in (f"{colour} {shape}", f"a {colour} {shape}", f"{colour} {shape}s"):
            scores = image_vectors @ demo_encoder.encode_texts([text])[0]
            top = np.argsort(-scores, kind="stable")[:10]
            precision = sum(paths[i] in relevant for i in top) / 10
            if precision < 0.9:
                failures[text] = precision
    assert failures == {}
