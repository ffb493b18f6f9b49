"""Metadata files read into a temporary file rather than memory, with progress in bytes: the
same records, the same tally of what was ignored, and the same catalog values as before."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from sqlalchemy import select

from engine.catalog import Image, Taxon
from engine.catalog.library import Library
from engine.errors import BadInputError, Cancelled
from engine.indexing.coco import READING_METADATA, load_coco_metadata
from engine.indexing.indexer import Indexer
from engine.indexing.metadata import metadata_key
from engine.indexing.metadata_store import MetadataStore
from engine.progress import Progress


def write_varied_coco(path: Path, images: int = 5000, seed: int = 7) -> None:
    """A COCO file of every shape the reader meets: licences by id (one unknown) and by text,
    dates with and without a zone, missing and impossible values, notes, photos listed twice,
    records without a file name or not objects, several annotations per photo (the first of
    an unknown category), photos with none, and categories after the images as iNat has them."""
    rnd = random.Random(seed)
    records: list[object] = []
    for i in range(images):
        record: dict[str, object] = {"id": i, "file_name": f"train/{i % 97:03d}/{i:05d}.jpg"}
        if i % 5:
            record["date"] = rnd.choice(
                ("2021-05-03 10:00:00", "2019-11-30T23:59:59+02:00", "2018:07:04 06:30:00", "x")
            )
        if i % 7:
            record["latitude"] = rnd.choice((rnd.uniform(-90, 90), "north", 91))
            record["longitude"] = rnd.uniform(-180, 180)
        record["license"] = rnd.choice((1, 2, 3, 99, "CC BY 4.0", True, None))
        if i % 3 == 0:
            record["rights_holder"] = f"observer {i % 50}"
        if i % 3 != 1:
            record["notes"] = "seen at dusk near the ford, singing from a willow " * (1 + i % 9)
        if i % 11 == 0:
            record["location_uncertainty"] = rnd.choice((5, 30.5, -1))
        records.append(record)
    records.insert(10, {"id": 10**30, "file_name": "train/000/00000.jpg"})  # listed twice
    records.insert(20, {"id": 5})  # no file name
    records.insert(30, "not a record")
    annotations = []
    for i in range(images):
        if i % 13 == 0:
            continue  # no annotation: no taxon from the file
        if i % 17 == 0:
            annotations.append({"image_id": i, "category_id": 999})  # an unknown category first
        annotations.append({"image_id": i, "category_id": i % 40})
        if i % 19 == 0:
            annotations.append({"image_id": i, "category_id": (i + 1) % 40})
    categories = [
        {
            "id": c,
            "name": f"Genus{c} species",
            "common_name": f"common {c}",
            "kingdom": "Animalia",
            "phylum": "Chordata",
            "class": "Aves",
            "order": "Passeriformes",
            "family": f"Family{c % 5}",
            "genus": f"Genus{c}",
            "specific_epithet": "species",
        }
        for c in range(40)
    ]
    licences = [{"id": 1, "name": "CC BY-NC 4.0"}, {"id": 2, "url": "http://cc0"}, {"id": 3}]
    document = {
        "info": {"year": 2024},
        "images": records,
        "annotations": annotations,
        "categories": categories,
        "licenses": licences,
    }
    path.write_text(json.dumps(document), encoding="utf-8")


def test_the_store_holds_what_the_dict_holds_and_progress_reaches_the_file_size(
    tmp_path: Path,
) -> None:
    path = tmp_path / "train.json"
    write_varied_coco(path)
    size = path.stat().st_size
    assert size > 3 << 19  # at least one progress report along the way (one per MiB)
    in_memory = load_coco_metadata(path)
    reports: list[Progress] = []
    with MetadataStore.load(path, reports.append) as store:
        assert len(store) == len(in_memory) == 5000
        assert list(store) == list(in_memory)  # the same keys, in file order
        for key, meta in in_memory.items():
            assert store[key] == meta, key
        assert store.get("train/nowhere.jpg") is None
        tally = (store.problems, store.values_ignored, store.records_ignored, store.examples)
        assert tally == (
            in_memory.problems,
            in_memory.values_ignored,
            in_memory.records_ignored,
            in_memory.examples,
        )
        assert store.records_ignored == 3 and store.values_ignored > 100
        # The joins happened: taxa through the annotations, licences through their ids.
        first = store[metadata_key("train/001/00001.jpg")]
        assert first.taxon is not None and first.taxon.genus == "Genus1"
        assert store[metadata_key("train/017/00017.jpg")].taxon is not None  # 999 skipped
        assert store[metadata_key("train/013/00013.jpg")].taxon is None
        assert {m.license for m in in_memory.values()} >= {"CC BY-NC 4.0", "http://cc0", None}
    with pytest.raises(ValueError, match="closed"):
        store.get("train/001/00001.jpg")
    done = [p.done for p in reports]
    assert done == sorted(done) and done[-1] == size
    assert all(p.total == size and p.message == READING_METADATA for p in reports)
    assert [d for d in done if 0 < d < size]


def test_a_bad_file_is_refused_in_one_line_as_before(tmp_path: Path) -> None:
    path = tmp_path / "metadata.json"
    path.write_text('{"images": [{"file_name": "a.jpg"}, ', encoding="utf-8")
    with pytest.raises(BadInputError, match="malformed JSON"):
        MetadataStore.load(path)
    path.write_text('{"categories": []}', encoding="utf-8")
    with pytest.raises(BadInputError, match="not COCO metadata"):
        MetadataStore.load(path)


def test_a_cancel_while_reading_stops_at_once(
    tmp_path: Path,
) -> None:
    path = tmp_path / "train.json"
    write_varied_coco(path)
    reports: list[Progress] = []

    def cancel_after_the_first_mib(p: Progress) -> None:
        reports.append(p)
        if p.done > 0:
            raise Cancelled()

    with pytest.raises(Cancelled):
        MetadataStore.load(path, cancel_after_the_first_mib)
    assert reports[-1].done < path.stat().st_size  # stopped before the end


def test_indexing_reads_metadata_with_progress_into_the_same_catalog_values(
    photos: Path, tmp_path: Path, demo_encoder
) -> None:
    metadata_file = photos / "metadata.json"
    expected = load_coco_metadata(metadata_file)
    reports: list[Progress] = []
    with Library.open(tmp_path / "lib") as library:
        report = Indexer(library, demo_encoder).run(photos, progress=reports.append)
        assert report.indexed > 0
        with library.catalog.session() as s:
            rows = s.execute(select(Image, Taxon).outerjoin(Taxon, Taxon.id == Image.taxon_id))
            checked = 0
            for image, taxon in rows:
                meta = expected.get(metadata_key(image.rel_path))
                if meta is None:
                    continue
                checked += 1
                assert image.external_id == meta.external_id
                assert image.license == meta.license
                assert image.rights_holder == meta.rights_holder
                assert image.notes == meta.notes
                if meta.latitude is not None and meta.longitude is not None:
                    assert (image.latitude, image.longitude) == (meta.latitude, meta.longitude)
                if meta.observed_at is not None:
                    assert image.observed_at == meta.observed_at.replace(tzinfo=None)
                if meta.taxon is not None:
                    assert taxon is not None and taxon.name == meta.taxon.name
            assert checked == report.indexed
    reading = [p for p in reports if p.message == READING_METADATA]
    assert reading and reading[-1].done == reading[-1].total == metadata_file.stat().st_size


def test_the_window_shows_reading_metadata_in_megabytes_not_photos() -> None:
    pytest.importorskip("PySide6")
    from app.controllers.library import _progress_text

    reading = Progress(250_000_000, 1_000_000_000, message=READING_METADATA)
    assert _progress_text(reading) == "reading metadata: 250 of 1,000 MB (25 %)"
    assert _progress_text(Progress(3, 12, message="indexing")) == "3 of 12 photos (25 %)"
