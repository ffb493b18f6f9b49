"""Exported judgments that explain themselves (query text, name, notes, collection) and import
back, also where two collections hold the same relative paths; exports onto a full disk."""

from __future__ import annotations

import csv
import errno
import os
from pathlib import Path

import pytest
from sqlalchemy import select

from engine.catalog import Collection, Image
from engine.catalog.library import Library
from engine.errors import QuadratError
from engine.evaluation.evaluate import load_judgments
from engine.io.export import (
    JUDGMENT_COLUMNS,
    copy_relevant_photos,
    export_judgments,
    export_results_csv,
    import_benchmark,
)
from engine.judgments.queries import QueryStore
from tests.small_disk import small_tmpfs

PATHS = ("a/frog.jpg", "a/toad.jpg", "b/frog.jpg")


def add_collections(lib: Library, base: Path) -> dict[str, list[int]]:
    """Two collections, "field" (with source ids) and "copies" (without), holding the same
    relative paths; returns collection name -> image ids in PATHS order."""
    out: dict[str, list[int]] = {}
    with lib.catalog.session() as s:
        for name, with_ids in (("field", True), ("copies", False)):
            root = base / name
            coll = Collection(root=str(root), name=name)
            s.add(coll)
            s.flush()
            images = []
            for i, rel in enumerate(PATHS):
                (root / rel).parent.mkdir(parents=True, exist_ok=True)
                (root / rel).write_bytes(f"{name} photo {i}".encode())
                image = Image(
                    collection_id=coll.id,
                    rel_path=rel,
                    size=16,
                    mtime_ns=1,
                    external_id=500 + i if with_ids else None,
                )
                s.add(image)
                images.append(image)
            s.flush()
            out[name] = [image.id for image in images]
    return out


@pytest.fixture
def two_collections(tmp_path):
    with Library.open(tmp_path / "lib") as lib:
        yield lib, add_collections(lib, tmp_path / "photos")


def judge_both(lib: Library, photos: dict[str, list[int]]) -> tuple[int, int]:
    """Judge the same relative paths differently in the two collections."""
    store = QueryStore(lib)
    frogs = store.find_or_create_query("frog calling at night")
    store.rename_query(frogs, "frogs, night")
    store.set_notes(frogs, "only adults; tadpoles are not relevant")
    toads = store.find_or_create_query("toad on a road")
    field, copies = photos["field"], photos["copies"]
    store.judge(frogs, field[0], 1)  # field/a/frog.jpg relevant ...
    store.judge(frogs, copies[0], 0)  # ... copies/a/frog.jpg not
    store.judge(frogs, copies[2], 1)  # copies/b/frog.jpg, no source id to tell it apart
    store.judge(toads, copies[1], 1)
    return frogs, toads


def read_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_the_judgments_csv_reads_alone_and_names_each_photos_collection(two_collections, tmp_path):
    lib, photos = two_collections
    frogs, toads = judge_both(lib, photos)
    out = tmp_path / "judgments.csv"
    assert export_judgments(lib, out) == 4
    rows = read_rows(out)
    assert list(rows[0]) == JUDGMENT_COLUMNS
    assert list(rows[0])[:3] == ["query_id", "image_id", "image_path"]  # docs/SPEC.md §4 keeps them
    by_key = {(r["collection"], r["image_path"], r["query_id"]): r for r in rows}
    night = by_key["field", "a/frog.jpg", str(frogs)]
    assert night["query_text"] == "frog calling at night"
    assert night["query_name"] == "frogs, night"
    assert night["query_notes"] == "only adults; tadpoles are not relevant"
    assert night["relevant"] == "1" and night["image_id"] == "500"
    assert by_key["copies", "a/frog.jpg", str(frogs)]["relevant"] == "0"
    assert by_key["copies", "a/toad.jpg", str(toads)]["query_text"] == "toad on a road"
    # A photo without a source id is named by its catalog id, never by another photo's id.
    assert by_key["copies", "b/frog.jpg", str(frogs)]["image_id"].startswith("quadrat-")


def test_judgments_import_back_onto_the_right_collection(two_collections, tmp_path):
    lib, photos = two_collections
    frogs, toads = judge_both(lib, photos)
    before = {q: QueryStore(lib).judgments(q) for q in (frogs, toads)}
    out = tmp_path / "judgments.csv"
    export_judgments(lib, out)
    store = QueryStore(lib)
    store.clear_judgments(frogs)
    store.clear_judgments(toads)

    report = import_benchmark(lib, None, out)
    assert (report.judgments, report.unresolved, report.queries) == (4, 0, 0)
    assert {q: store.judgments(q) for q in (frogs, toads)} == before


def test_judgments_import_into_another_library_by_query_text(two_collections, tmp_path):
    lib, photos = two_collections
    judge_both(lib, photos)
    out = tmp_path / "judgments.csv"
    export_judgments(lib, out)

    with Library.open(tmp_path / "other") as other:
        # Another library: an unrelated saved query holds id 1, the collections are added in
        # the other order, so catalog ids differ; paths clash across its two collections too.
        QueryStore(other).find_or_create_query("an unrelated query")
        with other.catalog.session() as s:
            s.add(Collection(root=str(tmp_path / "elsewhere"), name="unused"))
        ids = add_collections(other, tmp_path / "copy-of-photos")
        report = import_benchmark(other, None, out)
        assert (report.judgments, report.unresolved, report.queries) == (4, 0, 2)
        store = QueryStore(other)
        saved = {q.text: q for q in store.list_queries()}
        frogs = saved["frog calling at night"]
        assert (frogs.name, frogs.notes) == (
            "frogs, night",
            "only adults; tadpoles are not relevant",
        )
        field, copies = ids["field"], ids["copies"]
        assert store.judgments(frogs.id) == {field[0]: 1, copies[0]: 0, copies[2]: 1}
        assert store.judgments(saved["toad on a road"].id) == {copies[1]: 1}
        assert store.judgments(saved["an unrelated query"].id) == {}


def test_a_collection_column_reads_back_as_written(two_collections, tmp_path):
    lib, photos = two_collections
    judge_both(lib, photos)
    export_judgments(lib, tmp_path / "j.csv")
    loaded = {(j.collection, j.image_path, j.relevant) for j in load_judgments(tmp_path / "j.csv")}
    assert ("field", "a/frog.jpg", 1) in loaded and ("copies", "a/frog.jpg", 0) in loaded


def test_exports_onto_a_full_disk_say_so_in_one_line_and_leave_nothing_behind(
    two_collections, tmp_path, monkeypatch
):
    lib, photos = two_collections
    frogs, _ = judge_both(lib, photos)
    with small_tmpfs(tmp_path / "disk", "64k") as disk:
        old = disk / "judgments.csv"
        old.write_text("an earlier export\n")
        filler = disk / "filler"
        with open(filler, "wb", buffering=0) as f:  # fill the disk to the last byte
            with pytest.raises(OSError) as full:
                while True:
                    f.write(b"x" * 4096)
            assert full.value.errno == errno.ENOSPC
        before = sorted(os.listdir(disk))

        with pytest.raises(QuadratError) as caught:
            export_judgments(lib, old)
        message = str(caught.value)
        assert "\n" not in message
        assert str(disk) in message and "the disk is full" in message
        assert "needed" in message and "free" in message and "nothing was lost" in message
        assert old.read_text() == "an earlier export\n"  # the earlier file is intact
        assert sorted(os.listdir(disk)) == before  # no partial or temporary file

        # The same when the free space cannot be known beforehand: the write itself fails.
        monkeypatch.setattr("engine.io.safe_write.free_bytes", lambda folder: None)
        ranking = [(i, 1.0 - n / 10) for n, i in enumerate(photos["field"])] * 200
        with pytest.raises(QuadratError, match="the disk is full.*nothing was lost"):
            export_results_csv(lib, disk / "results.csv", ranking)
        assert sorted(os.listdir(disk)) == before

        with pytest.raises(QuadratError, match="relevant photos.*the disk is full"):
            copy_relevant_photos(lib, frogs, disk / "relevant")
        assert not (disk / "relevant").exists() or not any((disk / "relevant").iterdir())


def test_copying_onto_a_disk_too_small_copies_nothing(two_collections, tmp_path):
    lib, photos = two_collections
    store = QueryStore(lib)
    query = store.find_or_create_query("big photos")
    for image_id in photos["field"]:
        store.judge(query, image_id, 1)
    with lib.catalog.session() as s:
        roots = dict(s.execute(select(Image.id, Image.rel_path)).all())
    for image_id in photos["field"]:  # three photos of 30 kB on a 64 kB disk
        (tmp_path / "photos" / "field" / roots[image_id]).write_bytes(os.urandom(30_000))
    with small_tmpfs(tmp_path / "disk", "64k") as disk:
        with pytest.raises(QuadratError) as caught:
            copy_relevant_photos(lib, query, disk / "out")
        message = str(caught.value)
        assert "90.0 KB needed" in message and "free" in message
        assert "nothing was lost" in message and "\n" not in message
        assert not (disk / "out").exists() or list((disk / "out").iterdir()) == []
