"""Per-collection counts (indexed / skipped / pending), removal, and photo details."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from sqlalchemy import func, select

from engine.catalog import Collection, Embedding, Image
from engine.catalog.library import Library
from engine.catalog.reads import find_collection, photo_details
from engine.errors import QuadratError
from engine.indexing.collections import collection_stats, relocate_collection, remove_collection
from engine.indexing.indexer import Indexer


@pytest.fixture(scope="module")
def indexed_folders(tmp_path_factory: pytest.TempPathFactory, small_demo_collection, demo_encoder):
    """Built once for the module (read-only): a folder holding `first` (the small demo plus 2 bad
    files), `second` (another copy) and `lib`, a library with both indexed as collections."""
    template = tmp_path_factory.mktemp("collections")
    first = template / "first"
    shutil.copytree(small_demo_collection.root, first)
    (first / "bad").mkdir()
    (first / "bad" / "empty.jpg").write_bytes(b"")
    (first / "bad" / "notes.jpg").write_text("not a photo")
    second = template / "second"
    shutil.copytree(small_demo_collection.root, second)
    with Library.open(template / "lib") as lib:
        indexer = Indexer(lib, demo_encoder, batch_size=32)
        indexer.run(first)
        indexer.run(second)
    return template


@pytest.fixture
def library(tmp_path: Path, indexed_folders: Path):
    """A library with two collections: the small demo (plus 2 bad files) and a second copy.

    A copy of the module's folders (file times kept, so nothing looks changed), its two
    collections pointed at the copied photo folders, which the test may change."""
    for name in ("first", "second", "lib"):
        shutil.copytree(indexed_folders / name, tmp_path / name)
    with Library.open(tmp_path / "lib") as lib:
        for name in ("first", "second"):
            relocate_collection(lib, indexed_folders / name, tmp_path / name)
        yield lib


def test_counts_per_collection_with_skipped_reasons(
    library: Library, tmp_path: Path, small_demo_collection
) -> None:
    n = small_demo_collection.image_count
    stats = {s.name: s for s in collection_stats(library)}
    assert set(stats) == {"first", "second"}
    first = stats["first"]
    assert (first.indexed, first.skipped, first.pending) == (n, 2, 0)
    reasons = {p.rel_path: p.reason for p in first.skipped_photos}
    assert reasons["bad/empty.jpg"] == "empty file"
    assert "not an image" in reasons["bad/notes.jpg"]
    assert (stats["second"].indexed, stats["second"].skipped) == (n, 0)
    assert first.total == n + 2


def test_new_and_changed_files_are_pending_when_the_disk_is_scanned(
    library: Library, tmp_path: Path
) -> None:
    folder = tmp_path / "second"
    photos = sorted(folder.rglob("*.jpg"))
    shutil.copy(photos[0], folder / "new.jpg")
    photos[1].write_bytes(photos[2].read_bytes())  # changed content and size
    photos[3].unlink()  # gone: not pending (the next scan removes it)
    quick = {s.name: s for s in collection_stats(library)}["second"]
    assert quick.pending == 0  # without a scan only the catalog is consulted
    scanned = {s.name: s for s in collection_stats(library, scan_disk=True)}["second"]
    assert scanned.pending == 2
    assert not scanned.folder_missing
    shutil.rmtree(tmp_path / "first")
    missing = {s.name: s for s in collection_stats(library, scan_disk=True)}["first"]
    assert missing.folder_missing


def test_rows_without_vectors_for_the_model_are_pending(
    library: Library, small_demo_collection
) -> None:
    key = library.model_key
    with library.catalog.session() as s:
        ids = list(
            s.scalars(
                select(Image.id)
                .join(Collection)
                .where(Collection.name == "first", Image.status == "ok")
                .limit(5)
            )
        )
        s.execute(Embedding.__table__.delete().where(Embedding.image_id.in_(ids)))
    stats = {s.name: s for s in collection_stats(library, key)}["first"]
    n = small_demo_collection.image_count
    assert (stats.indexed, stats.pending) == (n - 5, 5)
    other = {s.name: s for s in collection_stats(library, "another-model")}["first"]
    assert (other.indexed, other.pending) == (0, n)


def test_remove_collection_drops_rows_vectors_and_index_entries(
    library: Library, tmp_path: Path, small_demo_collection
) -> None:
    n = small_demo_collection.image_count
    key = library.model_key
    first_id = find_collection(library, tmp_path / "first")
    assert first_id is not None
    assert len(library.vector_index(key)) == 2 * n
    assert remove_collection(library, first_id) == n + 2
    with library.catalog.session() as s:
        assert s.scalar(select(func.count()).select_from(Image)) == n
        assert s.scalar(select(func.count()).select_from(Embedding)) == n
        assert s.get(Collection, first_id) is None
    assert len(library.vector_index(key)) == n
    # The saved index file agrees too: a fresh check changes nothing.
    assert not library.check_consistency(key).changed
    assert (tmp_path / "first" / "bad" / "notes.jpg").exists()  # files are never touched
    with pytest.raises(QuadratError, match="no collection"):
        remove_collection(library, first_id)


def test_photo_details_carry_taxonomy_and_metadata(
    library: Library, tmp_path: Path, small_demo_collection
) -> None:
    import json

    meta = json.loads(small_demo_collection.metadata_path.read_text())
    record = meta["images"][0]
    with library.catalog.session() as s:
        image_id = s.scalar(
            select(Image.id)
            .join(Collection)
            .where(Collection.name == "first", Image.rel_path == record["file_name"])
        )
    details = photo_details(library, [image_id, 999_999])
    assert list(details) == [image_id]
    d = details[image_id]
    assert d.path == str(tmp_path / "first" / record["file_name"])
    assert d.common_name == small_demo_collection.labels[record["file_name"]]
    assert d.lineage[0] == ("kingdom", "Plantae")
    assert d.lineage[-1][0] == "species"
    assert d.license == record["license"]
    assert d.rights_holder == record["rights_holder"]
    assert d.latitude == pytest.approx(record["latitude"])
    assert d.content_hash and len(d.content_hash) == 32
