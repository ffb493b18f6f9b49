"""Indexing on a Ray cluster: a real local cluster on loopback (one node, then two) gives the
same catalog and vectors as the local indexer, keeps skip reasons, survives a killed worker and
resumes after a killed writer."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import signal
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

try:
    import ray  # noqa: F401
except ImportError:
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        raise  # CI installs the test extra, which includes Ray: its absence is a failure
    pytest.skip(
        "ray is not installed (pip install 'quadrat[ray]'); the Ray indexer is not tested",
        allow_module_level=True,
    )

from engine.catalog.library import Library
from engine.errors import QuadratError
from engine.indexing.indexer import Indexer
from engine.indexing.ray_indexer import RayIndexer
from tests.ray_cluster import REPO, LocalRayCluster, free_port, pids_named
from tests.test_indexer import add_bad_files, consistency

pytestmark = [pytest.mark.slow, pytest.mark.integration]

ROW_COLUMNS = (
    "id, rel_path, content_hash, status, skip_reason, width, height, taxon_id, observed_at, "
    "latitude, longitude"
)


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalRayCluster]:
    """One one-CPU node; `two_nodes` adds a second (the tests below run in file order)."""
    started = LocalRayCluster()
    try:
        started.start_head()
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="module")
def two_nodes(cluster: LocalRayCluster) -> LocalRayCluster:
    if cluster.nodes < 2:
        cluster.add_node()  # waits until the cluster counts two live nodes
    return cluster


@pytest.fixture(scope="module")
def collection(tmp_path_factory: pytest.TempPathFactory, small_demo_collection: Any) -> Path:
    """The small demo collection with a corrupt, an empty and a non-image JPEG added."""
    root = tmp_path_factory.mktemp("ray-photos") / "photos"
    shutil.copytree(small_demo_collection.root, root)
    add_bad_files(root)
    return root


def catalog_rows(library_dir: Path) -> tuple[list[tuple[Any, ...]], dict[int, np.ndarray]]:
    with sqlite3.connect(library_dir / "catalog.sqlite3") as conn:
        rows = conn.execute(f"select {ROW_COLUMNS} from images order by id").fetchall()
        vectors = {
            image_id: np.frombuffer(blob, dtype="<f4")
            for image_id, blob in conn.execute("select image_id, vector from embeddings")
        }
    return rows, vectors


@pytest.fixture(scope="module")
def local_run(
    tmp_path_factory: pytest.TempPathFactory, collection: Path, demo_encoder: Any
) -> tuple[Any, list[tuple[Any, ...]], dict[int, np.ndarray]]:
    """The local indexer's report, catalog rows and vectors for `collection`."""
    library_dir = tmp_path_factory.mktemp("local") / "lib"
    with Library.open(library_dir) as lib:
        report = Indexer(lib, demo_encoder).run(collection)
    return report, *catalog_rows(library_dir)


def assert_same_as_local(library_dir: Path, local_run: Any, *, same_ids: bool = True) -> None:
    """The library holds the local run's rows and vectors: with the same ids, or (after a
    fault, when photos may arrive in another order) the same photos under any ids."""
    _, local_rows, local_vectors = local_run
    rows, vectors = catalog_rows(library_dir)
    if same_ids:
        assert rows == local_rows  # ids, paths, hashes, statuses, skip reasons and metadata
        assert vectors.keys() == local_vectors.keys()
        pairs = [(vectors[i], local_vectors[i]) for i in local_vectors]
    else:
        by_path = {row[1]: row for row in rows}
        local_by_path = {row[1]: row for row in local_rows}
        assert len(by_path) == len(rows)  # no photo twice
        assert {p: r[2:] for p, r in by_path.items()} == {
            p: r[2:] for p, r in local_by_path.items()
        }
        assert len(vectors) == len(local_vectors)
        pairs = [
            (vectors[by_path[path][0]], local_vectors[row[0]])
            for path, row in local_by_path.items()
            if row[0] in local_vectors
        ]
    assert pairs
    for vector, local_vector in pairs:
        np.testing.assert_allclose(vector, local_vector, atol=1e-5)


@pytest.fixture(scope="module")
def one_node_run(
    tmp_path_factory: pytest.TempPathFactory,
    cluster: LocalRayCluster,
    collection: Path,
    demo_encoder: Any,
) -> tuple[Any, Path, list[Any]]:
    library_dir = tmp_path_factory.mktemp("ray1") / "lib"
    reports: list[Any] = []
    with Library.open(library_dir) as lib:
        indexer = RayIndexer(lib, demo_encoder, address=cluster.address, batch_size=8)
        report = indexer.run(collection, progress=reports.append)
    return report, library_dir, reports


def test_one_node_gives_the_local_catalog_and_vectors(one_node_run, local_run, collection):
    report, library_dir, _ = one_node_run
    local_report = local_run[0]
    assert report.indexed == local_report.indexed == report.total_files - 3
    assert report.skipped and not report.cancelled
    assert_same_as_local(library_dir, local_run)
    with Library.open(library_dir) as lib:
        rows, vecs, in_index = consistency(lib, lib.model_key)
        assert rows == vecs == in_index == report.indexed


def test_skip_reasons_of_bad_files_are_the_local_ones(one_node_run, local_run):
    report, _, _ = one_node_run
    local_report = local_run[0]
    reasons = {s.path: s.reason for s in report.skipped}
    assert reasons == {s.path: s.reason for s in local_report.skipped}
    assert "truncat" in reasons["bad/truncated.jpg"].lower()  # the corrupt JPEG
    assert "empty" in reasons["bad/empty.jpg"]


def test_progress_counts_every_photo_once_with_a_rate(one_node_run):
    report, _, reports = one_node_run
    indexing = [p for p in reports if p.message in ("indexing", "done") and p.total]
    assert indexing[-1].done == indexing[-1].total == report.indexed + len(report.skipped)
    done = [p.done for p in indexing]
    assert done == sorted(done)
    assert any(p.rate > 0 for p in indexing)


def test_a_second_run_from_the_command_line_encodes_nothing(
    one_node_run, cluster, collection, warm_python
):
    report, library_dir, _ = one_node_run
    again = warm_python.run(
        ["-m", "app.cli", "index", str(collection), "--library", str(library_dir)]
        + ["--ray", cluster.address, "--json"],
        env=cluster.env,
        cwd=REPO,
        timeout=120,
    )
    assert again.returncode == 0, again.stderr[-3000:]
    summary = json.loads(again.stdout.strip().splitlines()[-1])
    assert summary["indexed"] == 0
    assert summary["unchanged"] == report.indexed
    assert len(summary["skipped"]) == len(report.skipped)


def test_without_ray_the_command_line_says_how_to_install_it(tmp_path, collection, warm_python):
    hide_ray = (
        "import sys; sys.modules['ray'] = None; from app.cli import main; "
        "sys.exit(main(sys.argv[1:]))"
    )
    done = warm_python.run(
        ["-c", hide_ray, "index", str(collection)]
        + ["--library", str(tmp_path / "lib"), "--ray", "auto"],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        cwd=REPO,
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "error: indexing on a Ray cluster needs Ray: pip install 'quadrat[ray]'"
    ]
    assert not (tmp_path / "lib").exists()  # refused before the library was touched


def test_an_address_where_no_cluster_listens_fails_at_once(tmp_path, collection, demo_encoder):
    address = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    with Library.open(tmp_path / "lib") as lib, pytest.raises(QuadratError) as raised:
        RayIndexer(lib, demo_encoder, address=address).run(collection)
    assert time.monotonic() - started < 30  # not Ray's minutes of reconnecting
    assert str(raised.value).startswith(f"cannot connect to the Ray cluster at {address}")
    assert "\n" not in str(raised.value)


def test_a_killed_encode_worker_is_replaced_and_every_photo_indexed_once(
    cluster, tmp_path, collection, local_run, demo_encoder
):
    killed: list[int] = []
    seen_after: set[int] = set()
    stop = threading.Event()

    def kill_first_encoder() -> None:
        # SIGKILL the first encode actor as soon as it runs, then note who encodes after it.
        while not stop.is_set():
            pids = pids_named("EncodeStage")
            if not killed and pids:
                os.kill(pids[0], signal.SIGKILL)
                killed.append(pids[0])
            elif killed:
                seen_after.update(p for p in pids if p not in killed)
            time.sleep(0.02)

    watcher = threading.Thread(target=kill_first_encoder, daemon=True)
    watcher.start()
    library_dir = tmp_path / "lib"
    try:
        with Library.open(library_dir) as lib:
            report = RayIndexer(
                lib, demo_encoder, address=cluster.address, batch_size=4, checkpoint_every=8
            ).run(collection)
    finally:
        stop.set()
        watcher.join(timeout=5)
    assert killed, "no encode actor was seen to kill"
    assert seen_after, "no encode actor ran after the kill"
    assert report.indexed == local_run[0].indexed
    assert_same_as_local(library_dir, local_run, same_ids=False)
    with Library.open(library_dir) as lib:
        rows, vecs, in_index = consistency(lib, lib.model_key)
        assert rows == vecs == in_index == report.indexed
        assert sorted(lib.vector_index(lib.model_key).ids()) == sorted(
            lib.embedding_ids(lib.model_key)
        )


WRITER_KILLED = """
import os, signal, sys
from engine.models.encoders import load_encoder
from engine.indexing.ray_indexer import RayIndexer
from engine.catalog.library import Library

folder, library, address, kill_at = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])

def kill_midway(progress):
    # Photos, not the metadata file's bytes, which report through the same callback first.
    if progress.message == "indexing" and progress.done >= kill_at:
        os.kill(os.getpid(), signal.SIGKILL)

with Library.open(library) as lib:
    RayIndexer(
        lib, load_encoder("demo", device="cpu"), address=address, batch_size=4,
        checkpoint_every=8,
    ).run(folder, progress=kill_midway)
"""


def test_a_killed_writer_keeps_whole_checkpoints_and_the_next_run_resumes(
    cluster, tmp_path, collection, local_run, demo_encoder, warm_python
):
    library_dir = tmp_path / "lib"
    killed = warm_python.run(
        ["-c", WRITER_KILLED, str(collection), str(library_dir), cluster.address, "30"],
        env=cluster.env,
        cwd=REPO,
        timeout=120,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    with sqlite3.connect(library_dir / "catalog.sqlite3") as conn:
        committed = conn.execute("select count(*) from embeddings").fetchone()[0]
        rows = conn.execute("select count(*) from images").fetchone()[0]
    assert 0 < committed < local_run[0].indexed
    assert rows % 8 == 0  # whole checkpoints of 8 photos, nothing of the one in progress

    with Library.open(library_dir) as lib:
        resumed = RayIndexer(lib, demo_encoder, address=cluster.address, batch_size=8).run(
            collection
        )
    assert resumed.unchanged == committed
    assert resumed.indexed == local_run[0].indexed - committed
    assert len(resumed.skipped) == 3
    assert_same_as_local(library_dir, local_run, same_ids=False)


def test_two_nodes_give_the_local_catalog(two_nodes, tmp_path, collection, local_run, demo_encoder):
    library_dir = tmp_path / "lib"
    with Library.open(library_dir) as lib:
        report = RayIndexer(lib, demo_encoder, address=two_nodes.address, batch_size=8).run(
            collection
        )
    assert report.indexed == local_run[0].indexed
    assert_same_as_local(library_dir, local_run)


def test_a_photo_sent_twice_by_the_cluster_is_kept_once(tmp_path):
    """A batch sent again after a worker restart must not give a photo a second row."""
    from engine.indexing.decode import ExifInfo
    from engine.indexing.plan import Job
    from engine.indexing.walk import FileEntry

    jobs = [Job(FileEntry(f"{i}.jpg", tmp_path / f"{i}.jpg", 1, 1), None, None) for i in range(3)]
    exif = pickle.dumps(ExifInfo())

    def batch(job_ids: list[int]) -> dict[str, np.ndarray]:
        n = len(job_ids)
        return {
            "job": np.array(job_ids),
            "hash": np.array([f"h{i}" for i in job_ids], dtype=object),
            "reason": np.array(["" if i else "empty file" for i in job_ids], dtype=object),
            "width": np.full(n, 10),
            "height": np.full(n, 10),
            "exif": np.array([exif] * n, dtype=object),
            "vector": np.ones((n, 4), dtype=np.float32),
        }

    seen: set[int] = set()
    first = RayIndexer._received(jobs, batch([0, 1]), seen)
    again = RayIndexer._received(jobs, batch([0, 1, 2]), seen)
    assert first[0] == 2 and [f.reason for f in first[2]] == ["empty file"]
    assert again[0] == 1
    assert [p.job.entry.rel_path for p, _ in again[1]] == ["2.jpg"] and not again[2]
