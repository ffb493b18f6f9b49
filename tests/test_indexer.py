"""The indexing pipeline: counts, incremental changes, bad files, cancel, repair, crash safety."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from PIL import Image as PILImage
from sqlalchemy import func, select

from engine.catalog import Embedding, Image, Judgment, Query, Taxon
from engine.catalog.library import Library
from engine.errors import BadInputError, ModelMismatchError, QuadratError
from engine.indexing.indexer import Indexer
from engine.methods import SearchQuery, search_hits
from engine.progress import CancelToken, Progress
from engine.search.searcher import Searcher


class CountingEncoder:
    """Wraps a real encoder and counts how many photos it encoded."""

    def __init__(self, inner, model_key: str | None = None) -> None:
        self.inner = inner
        self.model_key = model_key or inner.model_key
        self.spec = getattr(inner, "spec", self.model_key)
        self.dim = inner.dim
        self.device = inner.device
        self.encoded = 0

    def preprocess(self, image):
        return self.inner.preprocess(image)

    def encode_preprocessed(self, batch):
        self.encoded += len(batch)
        return self.inner.encode_preprocessed(batch)

    def encode_images(self, images):
        return self.inner.encode_images(images)

    def encode_texts(self, texts):
        return self.inner.encode_texts(texts)


def add_bad_files(folder: Path) -> dict[str, str]:
    """Write three unusable files; return rel_path -> a word their skip reason must contain."""
    bad = folder / "bad"
    bad.mkdir()
    (bad / "empty.jpg").write_bytes(b"")
    (bad / "notes.JPG").write_text("this is not a photo")
    good = PILImage.new("RGB", (64, 64), (200, 30, 30))
    good.save(bad / "full.jpg", quality=90)
    data = (bad / "full.jpg").read_bytes()
    (bad / "full.jpg").unlink()
    (bad / "truncated.jpg").write_bytes(data[: len(data) // 2])
    return {"bad/empty.jpg": "empty", "bad/notes.JPG": "image", "bad/truncated.jpg": "trunc"}


def consistency(library: Library, model_key: str) -> tuple[int, int, int]:
    """(ok image rows, embedding rows, ids in the vector index) — all must agree."""
    with library.catalog.session() as s:
        rows = s.scalar(select(func.count()).select_from(Image).where(Image.status == "ok"))
        vecs = s.scalar(
            select(func.count()).select_from(Embedding).where(Embedding.model_key == model_key)
        )
    return rows, vecs, len(library.vector_index(model_key))


@pytest.fixture
def folder(photos: Path) -> Path:
    return photos


@pytest.fixture
def library(tmp_path: Path, catalog_url: str):
    """A library on each catalog database: its own SQLite file, and a PostgreSQL server."""
    database_url = catalog_url if catalog_url.startswith("postgresql") else None
    with Library.open(tmp_path / "lib", database_url=database_url) as lib:
        yield lib


def test_first_run_indexes_every_photo_and_skips_bad_files_with_reasons(
    folder, library, demo_encoder, small_demo_collection
):
    expected_bad = add_bad_files(folder)
    encoder = CountingEncoder(demo_encoder)
    report = Indexer(library, encoder, batch_size=8).run(folder)

    n = small_demo_collection.image_count
    assert report.indexed == n
    assert encoder.encoded == n
    assert report.unchanged == 0 and report.removed == 0
    reasons = {s.path: s.reason.lower() for s in report.skipped}
    assert set(reasons) == set(expected_bad)
    for path, word in expected_bad.items():
        assert word in reasons[path], (path, reasons[path])
    assert consistency(library, encoder.model_key) == (n, n, n)
    if not library.catalog.is_server:
        assert library.catalog.integrity_check() == "ok"


def test_metadata_from_folder_names_and_coco_json_lands_in_the_catalog(
    folder, library, demo_encoder
):
    Indexer(library, demo_encoder).run(folder)
    with library.catalog.session() as s:
        img = s.scalars(select(Image).where(Image.status == "ok")).first()
        taxon = s.get(Taxon, img.taxon_id)
        assert taxon is not None and taxon.genus and taxon.kingdom
        assert taxon.common_name  # from the COCO categories
        assert img.observed_at is not None
        assert img.latitude is not None and img.longitude is not None
        assert img.license and img.external_id is not None
        assert img.width and img.height and img.content_hash


def test_unchanged_folder_encodes_nothing(folder, library, demo_encoder, small_demo_collection):
    add_bad_files(folder)
    Indexer(library, demo_encoder).run(folder)
    encoder = CountingEncoder(demo_encoder)
    report = Indexer(library, encoder).run(folder)
    assert encoder.encoded == 0
    assert report.indexed == 0
    assert report.unchanged == small_demo_collection.image_count
    assert len(report.skipped) == 3  # still reported, not retried


def test_added_modified_deleted_moved_and_touched_files_are_handled_exactly(
    folder, library, demo_encoder, small_demo_collection
):
    Indexer(library, demo_encoder).run(folder)
    photos = sorted(p for p in folder.rglob("*.jpg"))
    deleted, modified, moved, touched = photos[0], photos[1], photos[2], photos[3]

    with library.catalog.session() as s:
        moved_id = s.scalar(select(Image.id).where(Image.rel_path.endswith(moved.name)))
        query = Query(text="red circle")
        s.add(query)
        s.flush()
        s.add(Judgment(query_id=query.id, image_id=moved_id, relevance=1))

    deleted.unlink()
    PILImage.new("RGB", (64, 64), (10, 200, 10)).save(modified)  # new content, same name
    target = folder / "elsewhere" / "renamed.jpg"
    target.parent.mkdir()
    moved.rename(target)
    os.utime(touched, ns=(time.time_ns(), time.time_ns() + 5_000_000_000))  # same content
    for i in range(2):
        PILImage.new("RGB", (64, 64), (i * 90, 20, 200)).save(folder / f"new{i}.png")

    encoder = CountingEncoder(demo_encoder)
    report = Indexer(library, encoder).run(folder)
    n = small_demo_collection.image_count
    # The deleted photo is kept as missing (with its vector), not removed.
    assert (report.indexed, report.missing, report.removed, report.moved) == (3, 1, 0, 1)
    assert encoder.encoded == 3
    # Everything but the deleted and the modified photo; the moved and the touched one count.
    assert report.unchanged == n - 2
    assert consistency(library, demo_encoder.model_key) == (n + 1, n + 2, n + 1)
    with library.catalog.session() as s:
        assert (
            s.scalar(select(Image.rel_path).where(Image.id == moved_id)) == "elsewhere/renamed.jpg"
        )
        judgment = s.get(Judgment, (query.id, moved_id))
        assert judgment is not None and judgment.relevance == 1


def test_empty_and_missing_folders_are_refused_with_clear_messages(tmp_path, library, demo_encoder):
    with pytest.raises(BadInputError, match="folder not found"):
        Indexer(library, demo_encoder).run(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(BadInputError, match="no photos found"):
        Indexer(library, demo_encoder).run(tmp_path / "empty")


def test_a_folder_that_went_empty_removes_nothing(
    folder, library, demo_encoder, small_demo_collection
):
    Indexer(library, demo_encoder).run(folder)
    for photo in folder.rglob("*.jpg"):
        photo.unlink()
    with pytest.raises(BadInputError, match="Nothing was removed"):
        Indexer(library, demo_encoder).run(folder)
    n = small_demo_collection.image_count
    assert consistency(library, demo_encoder.model_key) == (n, n, n)


def test_cancel_keeps_committed_work_and_the_next_run_finishes(
    folder, library, demo_encoder, small_demo_collection
):
    token = CancelToken()

    def cancel_after_some(p: Progress) -> None:
        if p.message == "indexing" and p.done >= 16:  # photos (the metadata file reports bytes)
            token.cancel()

    indexer = Indexer(library, demo_encoder, batch_size=4, checkpoint_every=8)
    report = indexer.run(folder, progress=cancel_after_some, cancel=token)
    n = small_demo_collection.image_count
    assert report.cancelled
    assert 16 <= report.indexed < n
    rows, vecs, in_index = consistency(library, demo_encoder.model_key)
    assert rows == vecs == in_index == report.indexed

    second = Indexer(library, demo_encoder).run(folder)
    assert second.indexed == n - report.indexed
    assert consistency(library, demo_encoder.model_key) == (n, n, n)


def test_a_damaged_or_stale_index_file_is_repaired_from_the_catalog(
    folder, tmp_path, demo_encoder, small_demo_collection
):
    n = small_demo_collection.image_count
    with Library.open(tmp_path / "lib") as lib:
        Indexer(lib, demo_encoder).run(folder)
        path = lib.index_path(demo_encoder.model_key)
        index = lib.vector_index(demo_encoder.model_key)
        index.remove(index.ids()[:5])  # the file loses five vectors
        index.save(path)
    with Library.open(tmp_path / "lib") as lib:
        report = lib.check_consistency()
        assert report.added == 5
        assert len(lib.vector_index(demo_encoder.model_key)) == n
    path.write_bytes(b"garbage")
    with Library.open(tmp_path / "lib") as lib:
        hits = search_hits(lib, demo_encoder, SearchQuery("red circle"), top_k=5)
        assert len(hits) == 5
        assert len(lib.vector_index(demo_encoder.model_key)) == n


def test_searching_with_another_model_names_the_model_to_use(folder, library, demo_encoder):
    Indexer(library, demo_encoder).run(folder)
    other = CountingEncoder(demo_encoder, model_key="ViT-B-32:laion2b_s34b_b79k")
    other.spec = "ViT-B-32:laion2b_s34b_b79k"  # another model, not the same one updated
    with pytest.raises(ModelMismatchError, match="--model"):
        Searcher(library, other)
    with pytest.raises(ModelMismatchError):
        Indexer(library, other).run(folder)
    report = Indexer(library, other).run(folder, reindex=True)  # an explicit re-index works
    assert report.indexed > 0 and library.model_key == other.model_key


KILLER = """
import os, signal, sys
from engine.models.encoders import load_encoder
from engine.indexing.indexer import Indexer
from engine.catalog.library import Library

folder, library, kill_at = sys.argv[1], sys.argv[2], int(sys.argv[3])

def kill_midway(progress):
    # A real SIGKILL while decode threads run and photos wait uncommitted.
    if progress.message == "indexing" and progress.done >= kill_at:
        os.kill(os.getpid(), signal.SIGKILL)

with Library.open(library) as lib:
    Indexer(lib, load_encoder("demo", device="cpu"), batch_size=8, checkpoint_every=32).run(
        folder, progress=kill_midway
    )
"""


def test_sigkill_mid_run_then_resume_loses_and_duplicates_nothing(
    tmp_path, demo_collection, warm_python
):
    """Kill an indexing process mid-run, resume it, and check catalog and index agree."""
    photos = tmp_path / "photos"
    shutil.copytree(demo_collection.root, photos)
    lib_dir = tmp_path / "lib"
    here = {"env": dict(os.environ), "cwd": os.getcwd(), "timeout": 300}
    killed = warm_python.run(["-c", KILLER, str(photos), str(lib_dir), "150"], **here)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    with sqlite3.connect(lib_dir / "catalog.sqlite3") as conn:
        committed = conn.execute("select count(*) from embeddings").fetchone()[0]
    assert 0 < committed < demo_collection.image_count

    resumed = warm_python.run(
        ["-m", "app.cli", "index", str(photos), "--library", str(lib_dir), "--json"], **here
    )
    assert resumed.returncode == 0, resumed.stderr
    summary = json.loads(resumed.stdout.strip().splitlines()[-1])
    assert summary["unchanged"] == committed
    assert summary["indexed"] == demo_collection.image_count - committed

    with Library.open(lib_dir) as lib:
        key = lib.model_key
        rows, vecs, in_index = consistency(lib, key)
        assert rows == vecs == in_index == demo_collection.image_count
        assert sorted(lib.vector_index(key).ids()) == sorted(lib.embedding_ids(key))
        assert lib.catalog.integrity_check() == "ok"
        with lib.catalog.session() as s:
            paths = s.scalars(select(Image.rel_path)).all()
        assert len(paths) == len(set(paths)) == demo_collection.image_count


def test_cancel_interrupts_a_large_cpu_batch_between_slices(folder, library, demo_encoder):
    """With a real CLIP model a CPU batch of 32 takes seconds: Cancel must not wait for it."""
    token = CancelToken()

    class CancelsAfterFirstSlice(CountingEncoder):
        def encode_preprocessed(self, batch):
            vectors = super().encode_preprocessed(batch)
            token.cancel()  # the user presses Cancel while the model is busy
            return vectors

    encoder = CancelsAfterFirstSlice(demo_encoder)
    report = Indexer(library, encoder, batch_size=32).run(folder, cancel=token)
    assert report.cancelled
    assert encoder.encoded == 8  # one slice, not the whole batch of 32
    assert report.indexed == 8
    assert consistency(library, demo_encoder.model_key) == (8, 8, 8)


def test_crossing_the_exact_search_limit_switches_to_an_approximate_index(
    folder, library, demo_encoder, small_demo_collection, monkeypatch
):
    import engine.vectors.policy

    monkeypatch.setattr(engine.vectors.policy, "EXACT_LIMIT", 20)
    messages: list[str] = []
    Indexer(library, demo_encoder).run(folder, progress=lambda p: messages.append(p.message))
    index = library.vector_index(demo_encoder.model_key)
    assert index.kind == "ivf"
    assert "building the search index" in messages
    n = small_demo_collection.image_count
    assert consistency(library, demo_encoder.model_key) == (n, n, n)
    hits = search_hits(library, demo_encoder, SearchQuery("green square"), top_k=3)
    assert len(hits) == 3


def test_rebuilding_a_lost_index_file_reports_progress(
    folder, tmp_path, demo_encoder, small_demo_collection
):
    with Library.open(tmp_path / "lib") as lib:
        Indexer(lib, demo_encoder).run(folder)
        path = lib.index_path(demo_encoder.model_key)
    path.unlink()
    reports: list[Progress] = []
    with Library.open(tmp_path / "lib") as lib:
        index = lib.vector_index(demo_encoder.model_key, progress=reports.append)
        assert len(index) == small_demo_collection.image_count
    assert reports and reports[-1].done == reports[-1].total > 0
    assert path.exists()


def test_a_second_indexing_process_on_the_same_library_is_refused(folder, tmp_path, demo_encoder):
    (tmp_path / "lib").mkdir()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from filelock import FileLock; "
            "lock = FileLock(sys.argv[1], timeout=0); lock.acquire(); print('held', flush=True); "
            "time.sleep(60)",
            str(tmp_path / "lib" / "indexing.lock"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with Library.open(tmp_path / "lib") as lib:
            with pytest.raises(QuadratError, match="another Quadrat is indexing"):
                Indexer(lib, demo_encoder).run(folder)
            assert lib.embedding_ids(demo_encoder.model_key).size == 0
    finally:
        holder.kill()
        holder.wait()
    with Library.open(tmp_path / "lib") as lib:
        assert Indexer(lib, demo_encoder).run(folder).indexed > 0


def test_an_updated_model_under_the_same_spec_is_re_encoded_not_refused(
    folder, library, demo_encoder, small_demo_collection
):
    """The bundled demo model changed in an update: same spec ("demo"), other weights."""
    old = CountingEncoder(demo_encoder, model_key="quadrat-demo:sha256-of-last-version")
    Indexer(library, old).run(folder)
    with pytest.raises(ModelMismatchError, match="has changed since this library was indexed"):
        Searcher(library, demo_encoder)
    new = CountingEncoder(demo_encoder)
    report = Indexer(library, new).run(folder)
    n = small_demo_collection.image_count
    assert (report.indexed, new.encoded) == (n, n)
    assert library.model_key == demo_encoder.model_key
    assert consistency(library, demo_encoder.model_key) == (n, n, n)
    Searcher(library, demo_encoder)  # searchable again
