"""A re-scan reads the catalog folder by folder as the walk reaches each folder: files at the
root and in nested folders, folders whose names begin alike ("a", "a b", "a-b", "a0"), and
whole folders gone from disk are all matched to their own rows."""

from __future__ import annotations

import os
from pathlib import Path

from PIL import Image as PILImage
from sqlalchemy import select

from engine.catalog import Image
from engine.catalog.library import Library
from engine.indexing.collections import FolderRows, collection_stats
from engine.indexing.indexer import Indexer
from engine.indexing.walk import walk_images

# Folders whose names sort around "a/" byte by byte: " " and "-" before "/", "0" after it.
LAYOUT = (
    "a.jpg",
    "a/x.jpg",
    "a/gone.jpg",
    "a/b/y.jpg",
    "a b/z.jpg",
    "a b/moves.jpg",
    "a-b/w.jpg",
    "a0/v.jpg",
    "a0/deep/u.jpg",
    "z.jpg",
)


def write_photos(root: Path, names: tuple[str, ...] = LAYOUT) -> None:
    for number, name in enumerate(names):
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        PILImage.new("RGB", (48, 40), (number * 20 % 256, 90, 160)).save(path, quality=90)


def test_rows_are_found_folder_by_folder_and_the_rest_are_left_over(
    tmp_path: Path, demo_encoder
) -> None:
    root = tmp_path / "photos"
    write_photos(root)
    with Library.open(tmp_path / "lib") as library:
        Indexer(library, demo_encoder).run(root)
        with library.catalog.session() as s:
            ids = {path: image_id for path, image_id in s.execute(select(Image.rel_path, Image.id))}
        (root / "a" / "gone.jpg").unlink()
        for name in ("a0/v.jpg", "a0/deep/u.jpg"):
            (root / name).unlink()
        with library.catalog.engine.connect() as connection:
            rows = FolderRows(connection, 1)
            seen = {e.rel_path: rows.take(e.rel_path) for e in walk_images(root)}
            assert rows.take("a/x.jpg") is None  # each row is given once
            assert rows.take("new/photo.jpg") is None
            left = rows.untaken()
    assert {path: row[0] if row else None for path, row in seen.items()} == {
        path: ids[path]
        for path in LAYOUT
        if path not in ("a/gone.jpg", "a0/v.jpg", "a0/deep/u.jpg")
    }
    assert list(left) == ["a/gone.jpg", "a0/deep/u.jpg", "a0/v.jpg"]  # in path order
    assert [row[0] for row in left.values()] == [ids[p] for p in left]


def test_a_rescan_of_nested_folders_finds_exactly_what_changed(
    tmp_path: Path, demo_encoder
) -> None:
    root = tmp_path / "photos"
    write_photos(root)
    with Library.open(tmp_path / "lib") as library:
        first = Indexer(library, demo_encoder).run(root)
        assert first.indexed == len(LAYOUT)

        (root / "a" / "gone.jpg").unlink()
        for name in ("a0/v.jpg", "a0/deep/u.jpg"):
            (root / name).unlink()
        os.rename(root / "a b" / "moves.jpg", root / "a" / "b" / "moved.jpg")
        write_photos(root / "a-b", ("new.jpg",))
        stats = collection_stats(library, demo_encoder.model_key, scan_disk=True)
        assert stats[0].pending == 2  # the moved file and the new one, before the re-scan

        report = Indexer(library, demo_encoder).run(root)
        # Unchanged counts the moved file too: it kept its vector.
        assert (report.total_files, report.unchanged, report.moved) == (len(LAYOUT) - 2, 7, 1)
        assert (report.indexed, report.missing, report.still_missing) == (1, 3, 3)
        with library.catalog.session() as s:
            status = {path: st for path, st in s.execute(select(Image.rel_path, Image.status))}
        assert status["a/b/moved.jpg"] == "ok" and "a b/moves.jpg" not in status
        assert status["a-b/new.jpg"] == "ok"
        assert [p for p, st in sorted(status.items()) if st == "missing"] == [
            "a/gone.jpg",
            "a0/deep/u.jpg",
            "a0/v.jpg",
        ]
        assert collection_stats(library, demo_encoder.model_key, scan_disk=True)[0].pending == 0


def test_a_rescan_that_changes_nothing_leaves_the_vector_index_file_alone(
    tmp_path: Path, demo_encoder
) -> None:
    root = tmp_path / "photos"
    write_photos(root)
    with Library.open(tmp_path / "lib") as library:
        Indexer(library, demo_encoder).run(root)
        index_file = library.index_path(demo_encoder.model_key)
        before = index_file.stat()
        report = Indexer(library, demo_encoder).run(root)
        assert report.unchanged == len(LAYOUT) and report.indexed == 0
        after = index_file.stat()
        assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
        # A re-scan that does change it still writes it.
        (root / "z.jpg").unlink()
        assert Indexer(library, demo_encoder).run(root).missing == 1
        assert index_file.stat().st_ino != before.st_ino
    with Library.open(tmp_path / "lib") as library:  # and the file agrees with the catalog
        assert not library.check_consistency(demo_encoder.model_key).changed
