"""Judgments outlive photos: files that go away, come back, move to another folder or collection,
and a collection folder that is moved or renamed. Nothing an expert judged is lost silently."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import func, select

from app.cli import main
from engine.catalog import Collection, Image, Judgment
from engine.catalog.library import Library
from engine.catalog.reads import missing_photos
from engine.errors import QuadratError
from engine.indexing.collections import (
    collection_stats,
    find_moved_collection,
    forget_missing,
    relocate_collection,
)
from engine.indexing.indexer import Indexer
from engine.io.export import copy_relevant_photos
from engine.judgments.queries import QueryStore
from engine.methods import SearchQuery, search_hits


@pytest.fixture
def library(tmp_path: Path) -> Library:
    lib = Library.open(tmp_path / "lib")
    yield lib
    lib.close()


def ids_by_path(library: Library) -> dict[str, int]:
    with library.catalog.session() as s:
        return dict(s.execute(select(Image.rel_path, Image.id)).all())


def judge_all(library: Library) -> tuple[int, dict[int, int]]:
    """A saved query with a judgment on every photo (every third one relevant)."""
    store = QueryStore(library)
    query_id = store.find_or_create_query("round red things")
    for image_id in ids_by_path(library).values():
        store.judge(query_id, image_id, int(image_id % 3 == 0))
    return query_id, store.judgments(query_id)


def judgment_count(library: Library) -> int:
    with library.catalog.session() as s:
        return s.scalar(select(func.count()).select_from(Judgment)) or 0


def search_paths(library: Library, encoder, top_k: int = 500) -> list[str]:
    return [h.path for h in search_hits(library, encoder, SearchQuery("red circle"), top_k=top_k)]


def test_photos_that_go_away_keep_their_judgments_and_take_them_back_on_return(
    tmp_path, photos, library, demo_encoder
):
    Indexer(library, demo_encoder).run(photos)
    before_ids = ids_by_path(library)
    query_id, before = judge_all(library)
    n = len(before_ids)
    assert len(before) == n

    # Every photo but one moved aside (a drive half-mounted, a folder moved away).
    aside = tmp_path / "aside"
    files = sorted(p for p in photos.rglob("*.jpg"))
    keep = files[0]
    for path in files[1:]:
        target = aside / path.relative_to(photos)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(path, target)

    report = Indexer(library, demo_encoder).run(photos)
    assert (report.missing, report.removed, report.still_missing) == (n - 1, 0, n - 1)
    assert report.judgments_on_missing == n - 1
    assert "judgments are kept" in report.summary()
    assert judgment_count(library) == n
    # Search leaves the missing photos out; exports say how many were not copied.
    assert search_paths(library, demo_encoder) == [str(keep)]
    assert missing_photos(library).photos == n - 1
    stats = collection_stats(library)
    assert (stats[0].indexed, stats[0].missing) == (1, n - 1)

    # Back again: same ids, same judgments, all searchable, nothing re-encoded.
    shutil.copytree(aside, photos, dirs_exist_ok=True)
    shutil.rmtree(aside)
    report = Indexer(library, demo_encoder).run(photos)
    assert (report.returned, report.indexed, report.still_missing) == (n - 1, 0, 0)
    assert ids_by_path(library) == before_ids
    assert QueryStore(library).judgments(query_id) == before
    assert len(search_paths(library, demo_encoder)) == n


def test_photos_back_under_new_names_or_in_another_collection_take_back_their_ids(
    tmp_path, photos, library, demo_encoder
):
    Indexer(library, demo_encoder).run(photos)
    query_id, before = judge_all(library)
    before_ids = ids_by_path(library)
    victims = sorted(before_ids)[:6]
    # Three go missing in one run and come back renamed in the next; three move into
    # another collection of the library without the first one being re-scanned.
    lost = tmp_path / "lost"
    lost.mkdir()
    for rel in victims[:3]:
        shutil.move(photos / rel, lost / Path(rel).name)
    Indexer(library, demo_encoder).run(photos)
    assert missing_photos(library).photos == 3
    for i, rel in enumerate(victims[:3]):
        shutil.move(lost / Path(rel).name, photos / f"renamed-{i}.jpg")
    other = tmp_path / "other"
    other.mkdir()
    for rel in victims[3:]:
        shutil.move(photos / rel, other / Path(rel).name)

    report = Indexer(library, demo_encoder).run(other)
    assert report.returned == 3
    report = Indexer(library, demo_encoder).run(photos)
    assert report.returned == 3 and report.still_missing == 0

    after = ids_by_path(library)
    assert sorted(after.values()) == sorted(before_ids.values())  # no new ids, none lost
    for i, rel in enumerate(victims[:3]):
        assert after[f"renamed-{i}.jpg"] == before_ids[rel]
    assert QueryStore(library).judgments(query_id) == before
    assert len(search_paths(library, demo_encoder)) == len(before_ids)


def test_a_moved_collection_folder_is_relocated_not_indexed_twice(
    tmp_path, photos, library, demo_encoder
):
    Indexer(library, demo_encoder).run(photos)
    query_id, before = judge_all(library)
    before_ids = ids_by_path(library)
    moved = tmp_path / "moved-here"
    photos.rename(moved)

    assert find_moved_collection(library, moved).old_root == str(photos)
    report = Indexer(library, demo_encoder).run(moved)
    assert report.relocated_from == str(photos)
    assert (report.indexed, report.unchanged) == (0, len(before_ids))
    with library.catalog.session() as s:
        assert list(s.scalars(select(Collection.root))) == [str(moved.resolve())]
    assert ids_by_path(library) == before_ids
    paths = search_paths(library, demo_encoder)
    assert len(paths) == len(set(paths)) == len(before_ids)
    assert all(p.startswith(str(moved)) for p in paths)
    copied = copy_relevant_photos(library, query_id, tmp_path / "picked")
    assert len(copied) == sum(before.values()) > 0


def test_a_collection_already_indexed_twice_after_a_move_is_merged_by_relocate(
    tmp_path, photos, library, demo_encoder
):
    """The repair for libraries that met the old behaviour: a second collection at the new root."""
    Indexer(library, demo_encoder).run(photos)
    query_id, before = judge_all(library)
    before_ids = ids_by_path(library)
    # The state an earlier Quadrat left: the moved folder indexed as a second collection
    # (made here with a copy, which is rightly a collection of its own while both exist).
    moved = tmp_path / "P2"
    shutil.copytree(photos, moved)
    Indexer(library, demo_encoder).run(moved)
    assert len(search_paths(library, demo_encoder)) == 2 * len(before_ids)
    shutil.rmtree(photos)
    # A judgment made on a second-copy photo must survive the merge too.
    with library.catalog.session() as s:
        coll2 = s.scalar(select(Collection.id).where(Collection.root == str(moved.resolve())))
        twin = s.scalar(select(Image.id).where(Image.collection_id == coll2).limit(1))
        twin_path = s.get(Image, twin).rel_path
    second = QueryStore(library).find_or_create_query("asked after the move")
    QueryStore(library).judge(second, twin, 1)

    result = relocate_collection(library, str(photos), moved)
    assert result.merged_duplicates == len(before_ids)
    assert ids_by_path(library) == before_ids
    paths = search_paths(library, demo_encoder)
    assert len(paths) == len(set(paths)) == len(before_ids)
    assert QueryStore(library).judgments(query_id) == before
    assert QueryStore(library).judgments(second) == {before_ids[twin_path]: 1}
    assert len(library.vector_index(demo_encoder.model_key)) == len(before_ids)


def test_forgetting_missing_photos_is_explicit(tmp_path, photos, library, demo_encoder):
    Indexer(library, demo_encoder).run(photos)
    judge_all(library)
    n = len(ids_by_path(library))
    gone = sorted(photos.rglob("*.jpg"))[:5]
    for path in gone:
        path.unlink()
    Indexer(library, demo_encoder).run(photos)
    assert judgment_count(library) == n  # nothing forgotten as a side effect

    forgotten = forget_missing(library)
    assert (forgotten.photos, forgotten.judgments) == (5, 5)
    assert judgment_count(library) == n - 5
    assert len(ids_by_path(library)) == n - 5

    for path in sorted(photos.rglob("*.jpg"))[:2]:
        path.unlink()
    report = Indexer(library, demo_encoder).run(photos, prune=True)
    assert (report.missing, report.removed, report.still_missing) == (2, 2, 0)


def test_the_run_fails_when_the_catalog_lost_what_the_run_committed(photos, library, demo_encoder):
    """Counts are read back from the catalog: lost commits fail the run; the next repairs."""
    db = library.root / "catalog.sqlite3"

    def lose_commits(p) -> None:
        if p.done == 48:  # after a few checkpoints: another hand deletes committed rows
            with sqlite3.connect(db) as raw:
                raw.execute("PRAGMA foreign_keys=ON")
                raw.execute("DELETE FROM images WHERE id IN (SELECT id FROM images LIMIT 7)")

    indexer = Indexer(library, demo_encoder, batch_size=8, checkpoint_every=8)
    with pytest.raises(QuadratError, match="committed work was lost"):
        indexer.run(photos, progress=lose_commits)
    report = Indexer(library, demo_encoder).run(photos)
    assert report.indexed == 7
    assert report.catalog_indexed == report.total_files == len(ids_by_path(library))


def test_cli_index_summary_and_forget_command(capsys, tmp_path, photos):
    lib = tmp_path / "lib"
    assert main(["index", str(photos), "--library", str(lib), "--model", "demo"]) == 0
    capsys.readouterr()
    for path in sorted(photos.rglob("*.jpg"))[:4]:
        path.unlink()
    assert main(["index", str(photos), "--library", str(lib), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (summary["missing"], summary["removed"], summary["still_missing"]) == (4, 0, 4)

    assert main(["index", str(photos), "--library", str(lib)]) == 0
    out = capsys.readouterr().out
    assert "4 photos are missing from disk" in out and "quadrat forget" in out

    assert main(["forget", "--library", str(lib)]) == 2  # needs --yes without a terminal
    assert "--yes" in capsys.readouterr().err
    assert main(["forget", "--library", str(lib), "--yes"]) == 0
    assert "4 missing photos forgotten" in capsys.readouterr().out


def test_cli_relocate_command(capsys, tmp_path, photos):
    lib = tmp_path / "lib"
    assert main(["index", str(photos), "--library", str(lib), "--model", "demo"]) == 0
    moved = tmp_path / "renamed"
    photos.rename(moved)
    assert main(["relocate", str(photos), str(moved), "--library", str(lib)]) == 0
    out = capsys.readouterr().out
    assert str(moved) in out
    assert main(["index", str(moved), "--library", str(lib), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["indexed"] == 0 and summary["unchanged"] == summary["total_files"]
    assert main(["relocate", str(tmp_path / "never"), str(moved), "--library", str(lib)]) == 2
