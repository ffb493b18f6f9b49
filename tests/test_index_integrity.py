"""A damaged vector index is never served: checksums at open, impossible scores at search,
clear errors when a save fails. The catalog is the source of truth; the file is rebuilt."""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import faiss
import numpy as np
import pytest

import engine.vectors.files as files_module
import engine.vectors.filtered as filtered_module
import engine.vectors.index as index_module
from engine.catalog.library import Library
from engine.errors import CorruptIndexError, QuadratError
from engine.methods import SearchQuery, search_hits
from engine.search.searcher import Searcher
from engine.vectors.files import checksum_path
from engine.vectors.index import VectorIndex
from engine.vectors.scoring import SCORE_TOLERANCE
from tests.small_disk import small_tmpfs

DIM = 32
QUERY = "red circle"


def unit_vectors(n: int, seed: int = 0, dim: int = DIM) -> np.ndarray:
    array = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return array / np.linalg.norm(array, axis=1, keepdims=True)


def index_of_raw_vectors(ids: np.ndarray, vectors: np.ndarray) -> VectorIndex:
    """A VectorIndex whose FAISS index holds `vectors` as given, not normalised: what damaged
    memory or a damaged file would look like once loaded."""
    raw = faiss.IndexIDMap2(faiss.IndexFlatIP(vectors.shape[1]))
    raw.add_with_ids(np.ascontiguousarray(vectors, dtype=np.float32), ids.astype(np.int64))
    index = VectorIndex.__new__(VectorIndex)
    index._setup(raw)
    return index


def ranking(searcher: Searcher, top_k: int = 10) -> list[tuple[int, float]]:
    hits = search_hits(searcher.library, searcher.encoder, SearchQuery(QUERY), top_k=top_k)
    return [(hit.image_id, hit.score) for hit in hits]


def assert_scores_are_cosines(hits: list[tuple[int, float]]) -> None:
    for _, score in hits:
        assert -1.0 - SCORE_TOLERANCE <= score <= 1.0 + SCORE_TOLERANCE, score


def warnings_of(caplog: pytest.LogCaptureFixture, logger: str) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.name == logger and r.levelno == logging.WARNING
    ]


@pytest.fixture
def indexed(tmp_path: Path, copy_small_demo_library, demo_encoder) -> tuple[Path, Path, list]:
    """A library of the small demo collection: (library folder, index file, top 10 for QUERY).
    A copy of the session's indexed library: these tests damage its index, never the photos."""
    root = copy_small_demo_library(tmp_path / "lib")
    with Library.open(root) as lib:
        top10 = ranking(Searcher(lib, demo_encoder))
        path = lib.index_path(demo_encoder.model_key)
    assert len(top10) == 10
    return root, path, top10


def vector_block(path: Path) -> tuple[int, int]:
    """(offset, length) of the vector data inside a flat index file: found by locating the
    bytes of the first stored vector, as the FAISS layout puts the vectors in one block."""
    loaded = faiss.read_index(str(path))
    inner = faiss.downcast_index(loaded.index)
    codes = faiss.vector_to_array(inner.codes)
    first = codes[: inner.d * 4].tobytes()
    data = path.read_bytes()
    offset = data.find(first)
    assert offset > 0 and data.find(first, offset + 1) == -1
    return offset, int(loaded.ntotal) * inner.d * 4


# ---------------------------------------------------------------------- end to end


def test_random_bytes_in_the_vector_block_are_caught_and_the_file_rebuilt(
    indexed, demo_encoder, caplog: pytest.LogCaptureFixture, small_demo_collection
) -> None:
    n_photos = small_demo_collection.image_count
    root, path, top10 = indexed
    offset, length = vector_block(path)
    data = bytearray(path.read_bytes())
    header, ids_tail = bytes(data[:offset]), bytes(data[offset + length :])
    start, stop = offset + length // 4, offset + 3 * length // 4
    data[start:stop] = np.random.default_rng(7).bytes(stop - start)
    path.write_bytes(bytes(data))
    damaged = path.read_bytes()
    assert damaged[:offset] == header and damaged[offset + length :] == ids_tail

    with caplog.at_level(logging.WARNING), Library.open(root) as lib:
        searcher = Searcher(lib, demo_encoder)
        assert ranking(searcher) == top10
        every = ranking(searcher, top_k=n_photos)
    assert len(every) == n_photos
    assert_scores_are_cosines(every)
    messages = warnings_of(caplog, "engine.catalog.library")
    assert len(messages) == 1
    assert "failed its check, rebuilding from the catalog" in messages[0]
    assert path.read_bytes() != damaged  # rebuilt on disk, not only in memory
    assert len(VectorIndex.load(path)) == n_photos


def test_a_missing_checksum_file_rebuilds_the_index(
    indexed, demo_encoder, caplog: pytest.LogCaptureFixture
) -> None:
    root, path, top10 = indexed
    checksum_path(path).unlink()
    with caplog.at_level(logging.WARNING), Library.open(root) as lib:
        report = lib.check_consistency(demo_encoder.model_key)
        assert report.rebuilt
        assert ranking(Searcher(lib, demo_encoder)) == top10
    (message,) = warnings_of(caplog, "engine.catalog.library")
    assert "failed its check" in message and "older Quadrat" in message
    assert checksum_path(path).is_file()


def test_a_truncated_index_file_is_rebuilt(
    indexed, demo_encoder, caplog: pytest.LogCaptureFixture
) -> None:
    root, path, top10 = indexed
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 4096])
    with caplog.at_level(logging.WARNING), Library.open(root) as lib:
        assert lib.check_consistency(demo_encoder.model_key).rebuilt
        assert ranking(Searcher(lib, demo_encoder)) == top10
    (message,) = warnings_of(caplog, "engine.catalog.library")
    assert "failed its check" in message and "truncated" in message
    assert path.stat().st_size == len(data)


def test_a_crash_between_the_index_and_checksum_renames_leads_to_a_rebuild(
    indexed, demo_encoder, caplog: pytest.LogCaptureFixture, small_demo_collection
) -> None:
    n_photos = small_demo_collection.image_count
    root, path, top10 = indexed
    old_checksum = checksum_path(path).read_bytes()
    with Library.open(root) as lib:
        index = lib.vector_index(demo_encoder.model_key)
        index.remove(index.ids()[:5])
        index.save(path)  # both files now describe five vectors fewer
    # The index file of the next save landed; its checksum file did not.
    checksum_path(path).write_bytes(old_checksum)
    with caplog.at_level(logging.WARNING), Library.open(root) as lib:
        report = lib.check_consistency(demo_encoder.model_key)
        assert report.rebuilt  # not repaired by adding the five ids back: not trusted at all
        assert len(lib.vector_index(demo_encoder.model_key)) == n_photos
        assert ranking(Searcher(lib, demo_encoder)) == top10
    assert any("failed its check" in m for m in warnings_of(caplog, "engine.catalog.library"))


def test_impossible_scores_in_memory_make_the_searcher_rebuild_once(
    indexed, demo_encoder, caplog: pytest.LogCaptureFixture, small_demo_collection
) -> None:
    n_photos = small_demo_collection.image_count
    root, path, top10 = indexed
    with Library.open(root) as lib:
        searcher = Searcher(lib, demo_encoder)
        good = lib.vector_index(demo_encoder.model_key)
        ids = good.ids()
        garbage = np.random.default_rng(3).standard_normal((len(ids), good.dim)) * 1e6
        lib.set_index(demo_encoder.model_key, index_of_raw_vectors(ids, garbage))
        with caplog.at_level(logging.WARNING):
            hits = ranking(searcher, top_k=n_photos)
        assert len(hits) == n_photos
        assert_scores_are_cosines(hits)
        assert hits[:10] == top10
        assert lib.vector_index(demo_encoder.model_key) is not good  # rebuilt from the catalog
    (message,) = warnings_of(caplog, "engine.search.searcher")
    assert "failed its check, rebuilding from the catalog" in message


def test_a_second_failure_after_the_rebuild_propagates(
    indexed, demo_encoder, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, _, _ = indexed
    with Library.open(root) as lib:
        ids = lib.vector_index(demo_encoder.model_key).ids()
        garbage = np.full((len(ids), demo_encoder.dim), 1e3, dtype=np.float32)
        rebuilds: list[str] = []

        def rebuild_to_garbage(model_key: str, *args: object, **kwargs: object) -> VectorIndex:
            rebuilds.append(model_key)
            bad = index_of_raw_vectors(ids, garbage)
            lib.set_index(model_key, bad)
            return bad

        lib.set_index(demo_encoder.model_key, index_of_raw_vectors(ids, garbage))
        monkeypatch.setattr(lib, "rebuild_index", rebuild_to_garbage)
        with pytest.raises(CorruptIndexError, match="no cosine similarity"):
            ranking(Searcher(lib, demo_encoder), top_k=5)
        assert rebuilds == [demo_encoder.model_key]


# ---------------------------------------------------------------------- the index file


def test_save_writes_a_checksum_file_that_load_verifies(tmp_path: Path) -> None:
    ids = np.arange(1, 201, dtype=np.int64)
    index = VectorIndex.build(ids, unit_vectors(200))
    path = tmp_path / "model.faiss"
    index.save(path)
    record = json.loads(checksum_path(path).read_text())
    assert record["algorithm"] == "sha256"
    assert record["size"] == path.stat().st_size
    assert (record["vectors"], record["dim"], record["kind"]) == (200, DIM, "flat")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.faiss", "model.faiss.check.json"]
    loaded = VectorIndex.load(path)
    assert loaded.search(unit_vectors(1, seed=5)[0], 10) == index.search(
        unit_vectors(1, seed=5)[0], 10
    )

    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01  # one flipped bit in the vectors, same size
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptIndexError, match="failed its sha256 check") as error:
        VectorIndex.load(path)
    assert str(path) in str(error.value)


@pytest.mark.parametrize(
    "sidecar",
    ["", "not json {", '{"format": "other"}', '{"format": "quadrat-vector-index-checksum"}'],
)
def test_a_garbled_checksum_file_is_refused(tmp_path: Path, sidecar: str) -> None:
    path = tmp_path / "model.faiss"
    VectorIndex.build(np.arange(50), unit_vectors(50)).save(path)
    checksum_path(path).write_text(sidecar)
    with pytest.raises(CorruptIndexError, match="garbled"):
        VectorIndex.load(path)


def test_a_file_from_an_older_quadrat_is_not_trusted(tmp_path: Path) -> None:
    path = tmp_path / "model.faiss"
    VectorIndex.build(np.arange(50), unit_vectors(50)).save(path)
    checksum_path(path).unlink()
    with pytest.raises(CorruptIndexError, match="older Quadrat") as error:
        VectorIndex.load(path)
    assert str(path) in str(error.value)


# ---------------------------------------------------------------------- impossible scores


@pytest.mark.parametrize("route", ["faiss", "faiss-filtered", "direct-subset"])
def test_a_score_outside_minus_one_one_raises_corrupt_index_error(route: str) -> None:
    ids, vectors, query, closest = damaged_collection()
    vectors[closest] *= 1e20  # the vectors nearest the query: scores of about 5e19
    index = index_of_raw_vectors(ids, vectors)
    allowed = allowed_for(route, ids, closest)
    with pytest.raises(CorruptIndexError, match="no cosine similarity"):
        index.search(query, 10, allowed_ids=allowed)
    with pytest.raises(CorruptIndexError, match="no cosine similarity"):
        index.search_many(np.stack([unit_vectors(1, seed=11)[0], query]), 10, allowed)


@pytest.mark.parametrize("route", ["faiss", "faiss-filtered", "direct-subset"])
def test_nan_vectors_raise_corrupt_index_error_rather_than_go_missing(route: str) -> None:
    ids, vectors, query, closest = damaged_collection()
    vectors[closest] = np.nan
    index = index_of_raw_vectors(ids, vectors)
    allowed = allowed_for(route, ids, closest)
    # FAISS skips NaN scores, so a search for everything comes back short; scoring directly
    # sees the NaN itself.
    everything = len(ids) if allowed is None else len(allowed)
    with pytest.raises(CorruptIndexError, match="damaged"):
        index.search(query, everything, allowed_ids=allowed)


def damaged_collection() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(ids, vectors, query, the 3 vectors nearest the query) of a collection large enough
    that a filter above SMALL_FILTER_LIMIT searches through FAISS."""
    n = filtered_module.SMALL_FILTER_LIMIT + 500
    vectors = unit_vectors(n)
    query = vectors[0].copy()
    closest = np.argsort(-(vectors @ query))[:3]
    return np.arange(n, dtype=np.int64), vectors, query, closest


def allowed_for(route: str, ids: np.ndarray, closest: np.ndarray) -> np.ndarray | None:
    if route == "faiss":
        return None
    size = filtered_module.SMALL_FILTER_LIMIT + 100 if route == "faiss-filtered" else 100
    return np.union1d(ids[:size], closest)


# ---------------------------------------------------------------------- failed saves


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MB tmpfs folder (needs root and a mount-capable container)."""
    with small_tmpfs(tmp_path / "tiny", "1M") as folder:
        yield folder


def test_a_save_on_a_full_disk_names_the_cause_and_keeps_the_old_file(tiny_disk: Path) -> None:
    path = tiny_disk / "model.faiss"
    small = VectorIndex.build(np.arange(100), unit_vectors(100, dim=512))  # 205 kB
    small.save(path)
    before = path.read_bytes(), checksum_path(path).read_bytes()
    big = VectorIndex.build(np.arange(1000), unit_vectors(1000, dim=512))  # 2 MB
    with pytest.raises(QuadratError) as error:
        big.save(path)
    message = str(error.value)
    assert message.startswith(f"no space left on the disk holding {tiny_disk}: free some space")
    assert "the catalog keeps every committed photo" in message
    assert "\n" not in message
    assert (path.read_bytes(), checksum_path(path).read_bytes()) == before
    assert len(VectorIndex.load(path)) == 100
    assert sorted(p.name for p in tiny_disk.iterdir()) == ["model.faiss", "model.faiss.check.json"]


@pytest.mark.parametrize(
    ("faiss_text", "free", "expected"),
    [
        ("write error in F: 3 != 9 (Read-only file system)", 1 << 40, "is read-only"),
        ("write error in F: 3 != 9 (Permission denied)", 1 << 40, "no permission to write"),
        ("write error in F: 3 != 9", 1000, "no space left on the disk holding"),
        ("write error in F: 3 != 9", 1 << 40, "cannot write the vector index model.faiss"),
    ],
)
def test_faiss_write_errors_become_one_line_quadrat_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, faiss_text: str, free: int, expected: str
) -> None:
    path = tmp_path / "model.faiss"
    VectorIndex.build(np.arange(10), unit_vectors(10)).save(path)
    before = path.read_bytes()

    def failing_write(index: faiss.Index, name: str) -> None:
        Path(name).write_bytes(b"partial")
        raise RuntimeError(
            "Error in void faiss::write_index(const Index*, IOWriter*, int) at "
            f"index_write.cpp:499: Error: 'ret == (size * 4)' failed: {faiss_text}"
        )

    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(index_module.faiss, "write_index", failing_write)
    monkeypatch.setattr(files_module.shutil, "disk_usage", lambda _: usage._replace(free=free))
    with pytest.raises(QuadratError, match=expected) as error:
        VectorIndex.build(np.arange(20), unit_vectors(20)).save(path)
    assert "\n" not in str(error.value) and str(tmp_path) in str(error.value)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.faiss", "model.faiss.check.json"]


# ---------------------------------------------------------------------- cost at open


@pytest.mark.bench
@pytest.mark.parametrize("n", [100_000, 1_000_000])
def test_bench_checksum_cost_at_open(tmp_path: Path, n: int) -> None:
    """Prints the time `load` spends verifying a flat 512-d file (run with -m bench -s)."""
    index = VectorIndex(512)
    rng = np.random.default_rng(0)
    for start in range(0, n, 100_000):
        vectors = rng.standard_normal((100_000, 512), dtype=np.float32)
        index.add(np.arange(start, start + 100_000), vectors)
    path = tmp_path / "big.faiss"
    index.save(path)
    del index
    timings = []
    for _ in range(3):
        started = time.perf_counter()
        files_module.verify_checksum(path)
        timings.append(time.perf_counter() - started)
    started = time.perf_counter()
    VectorIndex.load(path)
    total = time.perf_counter() - started
    print(
        f"\n{n} x 512 ({path.stat().st_size / 1e9:.2f} GB): checksum {min(timings):.2f} s "
        f"(of {', '.join(f'{t:.2f}' for t in timings)}), whole load {total:.2f} s"
    )
