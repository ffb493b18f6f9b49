"""The vector index: exact rankings, updates, id filters, persistence, IVF recall, tie order."""

from __future__ import annotations

from pathlib import Path

import faiss
import numpy as np
import pytest

import engine.vectors.filtered as filtered_module
import engine.vectors.index as index_module
import engine.vectors.policy as policy_module
from engine.errors import Cancelled, QuadratError
from engine.progress import CancelToken, Progress
from engine.vectors.index import VectorIndex

DIM = 32


def normalised(array: np.ndarray) -> np.ndarray:
    array = np.asarray(array, dtype=np.float32)
    return array / np.linalg.norm(array, axis=-1, keepdims=True)


def random_vectors(n: int, seed: int = 0, dim: int = DIM) -> np.ndarray:
    return normalised(np.random.default_rng(seed).standard_normal((n, dim)))


def random_ids(n: int, seed: int = 0) -> np.ndarray:
    # Scattered, non-contiguous ids, as a catalog has after deletions.
    return np.random.default_rng(seed).choice(10 * n, size=n, replace=False).astype(np.int64) + 1


def clustered_vectors(n: int, clusters: int, seed: int = 0, dim: int = DIM) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = normalised(rng.standard_normal((clusters, dim)))
    labels = rng.integers(0, clusters, size=n)
    return normalised(centres[labels] + 0.15 * rng.standard_normal((n, dim)))


def brute_force(
    ids: np.ndarray, vectors: np.ndarray, query: np.ndarray, k: int
) -> list[tuple[int, float]]:
    """The reference ranking: score descending, ties by smaller id."""
    scores = vectors @ normalised(query)
    order = np.lexsort((ids, -scores))[:k]
    return [(int(ids[i]), float(scores[i])) for i in order]


def recall(found: list[tuple[int, float]], expected: list[tuple[int, float]]) -> float:
    return len({i for i, _ in found} & {i for i, _ in expected}) / len(expected)


def assert_same_ranking(found: list[tuple[int, float]], expected: list[tuple[int, float]]) -> None:
    assert [i for i, _ in found] == [i for i, _ in expected]
    np.testing.assert_allclose([s for _, s in found], [s for _, s in expected], atol=1e-5)


@pytest.fixture(scope="module")
def collection() -> tuple[np.ndarray, np.ndarray]:
    return random_ids(3000), random_vectors(3000)


@pytest.fixture(scope="module")
def clustered() -> tuple[np.ndarray, np.ndarray]:
    return random_ids(4000, seed=1), clustered_vectors(4000, clusters=40, seed=1)


@pytest.fixture(scope="module")
def clustered_ivf(clustered: tuple[np.ndarray, np.ndarray]) -> VectorIndex:
    ids, vectors = clustered
    return VectorIndex.build(ids, vectors, kind="ivf")


# ---------------------------------------------------------------------- exact search


def test_exact_search_equals_brute_force_ranking(collection) -> None:
    ids, vectors = collection
    index = VectorIndex.build(ids, vectors)
    assert index.kind == "flat" and len(index) == 3000 and index.dim == DIM
    for query in random_vectors(10, seed=99):
        assert_same_ranking(index.search(query, 25), brute_force(ids, vectors, query, 25))


def test_search_many_equals_one_search_per_query(collection) -> None:
    ids, vectors = collection
    index = VectorIndex.build(ids, vectors)
    queries = random_vectors(5, seed=7)
    batched = index.search_many(queries, 10)
    assert [index.search(q, 10) for q in queries] == batched


def test_unnormalised_query_and_vectors_give_cosine_scores() -> None:
    index = VectorIndex(3)
    index.add(np.array([1, 2]), np.array([[3.0, 0, 0], [0, 5.0, 0]]))
    assert index.search(np.array([2.0, 2.0, 0]), 2) == [
        (1, pytest.approx(0.70710677)),
        (2, pytest.approx(0.70710677)),
    ]


def test_k_larger_than_index_returns_everything_and_k_zero_nothing(collection) -> None:
    ids, vectors = collection
    index = VectorIndex.build(ids[:50], vectors[:50])
    query = random_vectors(1, seed=5)[0]
    everything = index.search(query, 1000)
    assert_same_ranking(everything, brute_force(ids[:50], vectors[:50], query, 50))
    assert index.search(query, 0) == []
    assert VectorIndex(DIM).search(query, 10) == []


# ---------------------------------------------------------------------- updates


def test_add_remove_and_re_add() -> None:
    vectors = random_vectors(6, seed=3)
    index = VectorIndex(DIM)
    index.add(np.array([10, 20, 30]), vectors[:3])
    assert len(index) == 3 and 20 in index and 40 not in index

    # Re-adding an id replaces its vector: no duplicate, the new vector is found under it.
    index.add(np.array([20, 40]), vectors[3:5])
    assert len(index) == 4
    assert index.ids().tolist() == [10, 20, 30, 40]
    assert index.search(vectors[3], 1) == [(20, pytest.approx(1.0))]
    assert index.search(vectors[1], 4)[0][0] != 20  # the old vector of 20 is gone

    # Within one batch the last occurrence wins.
    index.add(np.array([50, 50]), vectors[[0, 5]])
    assert len(index) == 5
    assert index.search(vectors[5], 1) == [(50, pytest.approx(1.0))]

    # Removal counts only ids that were present; removed ids are never returned again.
    assert index.remove(np.array([10, 30, 999])) == 2
    assert index.remove(np.array([10])) == 0
    assert index.ids().tolist() == [20, 40, 50]
    assert {i for i, _ in index.search(vectors[0], 10)} == {20, 40, 50}

    index.add(np.array([10]), vectors[:1])
    assert index.search(vectors[0], 1) == [(10, pytest.approx(1.0))]


def test_ivf_add_remove_and_re_add(clustered, clustered_ivf) -> None:
    ids, vectors = clustered
    index = VectorIndex.build(ids, vectors, kind="ivf")
    assert index.remove(ids[:100]) == 100
    assert len(index) == 3900 and int(ids[0]) not in index
    assert all(i not in set(ids[:100].tolist()) for i, _ in index.search(vectors[0], 50))
    index.add(ids[100:101], vectors[0:1])  # id 100 now holds vector 0
    assert len(index) == 3900
    assert index.search(vectors[0], 1) == [(int(ids[100]), pytest.approx(1.0))]
    np.testing.assert_array_equal(index.ids(), np.sort(ids[100:]))


def test_build_keeps_the_last_vector_of_a_repeated_id() -> None:
    vectors = random_vectors(3, seed=13)
    index = VectorIndex.build(np.array([7, 8, 7]), vectors)
    assert len(index) == 2 and index.ids().tolist() == [7, 8]
    assert index.search(vectors[2], 1) == [(7, pytest.approx(1.0))]


def test_build_reports_progress_and_can_be_cancelled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(index_module, "_ADD_CHUNK", 100)
    ids, vectors = np.arange(1, 351), random_vectors(350)
    reports: list[Progress] = []
    VectorIndex.build(ids, vectors, progress=reports.append)
    assert [(p.done, p.total) for p in reports] == [(100, 350), (200, 350), (300, 350), (350, 350)]

    token = CancelToken()

    def cancel_after_first_chunk(progress: Progress) -> None:
        if progress.done >= 100:
            token.cancel()

    with pytest.raises(Cancelled):
        VectorIndex.build(ids, vectors, kind="ivf", progress=cancel_after_first_chunk, cancel=token)


def test_bad_input_is_rejected_with_value_error() -> None:
    index = VectorIndex(DIM)
    with pytest.raises(ValueError, match=r"\(n, 32\)"):
        index.add(np.array([1]), random_vectors(1, dim=16))
    with pytest.raises(ValueError, match="2 ids for 1 vectors"):
        index.add(np.array([1, 2]), random_vectors(1))
    with pytest.raises(ValueError, match="negative"):
        index.add(np.array([-1]), random_vectors(1))
    with pytest.raises(ValueError, match="non-zero"):
        index.add(np.array([1]), np.zeros((1, DIM)))
    with pytest.raises(ValueError):
        index.search(random_vectors(1, dim=16)[0], 5)
    with pytest.raises(ValueError, match="kind"):
        VectorIndex.build(np.array([1]), random_vectors(1), kind="hnsw")
    assert len(index) == 0


# ---------------------------------------------------------------------- id filter


@pytest.mark.parametrize("kind", ["flat", "ivf"])
@pytest.mark.parametrize("path", ["subset", "selector"])
def test_allowed_ids_return_only_allowed_and_the_right_top(
    clustered, kind: str, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids, vectors = clustered
    index = VectorIndex.build(ids, vectors, kind=kind)
    if path == "selector":
        # Push the filter through FAISS's id selector rather than direct scoring.
        monkeypatch.setattr(filtered_module, "SMALL_FILTER_LIMIT", 10)
    allowed_mask = np.random.default_rng(4).random(len(ids)) < 0.3
    allowed = ids[allowed_mask]
    # Queries near allowed and near excluded vectors alike.
    queries = normalised(vectors[:20] + 0.05 * random_vectors(20, seed=8))
    recalls = []
    for query in queries:
        found = index.search(query, 10, allowed_ids=np.concatenate([allowed, [10**9]]))
        expected = brute_force(allowed, vectors[allowed_mask], query, 10)
        assert {i for i, _ in found} <= set(allowed.tolist())
        assert len(found) == 10
        if kind == "flat":
            assert_same_ranking(found, expected)
        recalls.append(recall(found, expected))
    assert np.mean(recalls) >= 0.95


@pytest.mark.parametrize("kind", ["flat", "ivf"])
def test_sparse_filter_is_exact_even_for_ivf(clustered, kind: str) -> None:
    ids, vectors = clustered
    index = VectorIndex.build(ids, vectors, kind=kind)
    chosen = np.arange(0, 4000, 97)  # 42 vectors spread over every cluster
    query = random_vectors(1, seed=11)[0]
    found = index.search(query, 10, allowed_ids=ids[chosen])
    assert_same_ranking(found, brute_force(ids[chosen], vectors[chosen], query, 10))
    # More asked than allowed: all allowed, in order; nothing allowed: nothing found.
    assert len(index.search(query, 100, allowed_ids=ids[chosen])) == len(chosen)
    assert index.search(query, 10, allowed_ids=np.array([10**9])) == []


# ---------------------------------------------------------------------- persistence


@pytest.mark.parametrize("kind", ["flat", "ivf"])
def test_save_load_round_trip_gives_equal_results(clustered, kind: str, tmp_path: Path) -> None:
    ids, vectors = clustered
    index = VectorIndex.build(ids, vectors, kind=kind)
    if kind == "ivf":
        index.nprobe = 7
    path = tmp_path / "indexes" / "model.faiss"
    index.save(path)
    loaded = VectorIndex.load(path)
    assert (loaded.kind, loaded.dim, len(loaded), loaded.nprobe) == (
        kind,
        DIM,
        4000,
        index.nprobe,
    )
    np.testing.assert_array_equal(loaded.ids(), np.sort(ids))
    queries = random_vectors(5, seed=12)
    assert loaded.search_many(queries, 20) == index.search_many(queries, 20)
    # No temporary file left; the checksum file sits beside the index.
    assert sorted(p.name for p in path.parent.iterdir()) == [
        "model.faiss",
        "model.faiss.check.json",
    ]


def test_failed_save_leaves_old_file_intact(
    collection, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids, vectors = collection
    path = tmp_path / "model.faiss"
    VectorIndex.build(ids[:100], vectors[:100]).save(path)
    before = path.read_bytes()
    bigger = VectorIndex.build(ids, vectors)

    def write_half_then_fail(index: faiss.Index, name: str) -> None:
        Path(name).write_bytes(before[:1000])  # a partial file in the temporary name
        raise OSError("disk full")

    monkeypatch.setattr(index_module.faiss, "write_index", write_half_then_fail)
    with pytest.raises(OSError, match="disk full"):
        bigger.save(path)

    assert path.read_bytes() == before
    assert len(VectorIndex.load(path)) == 100
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.faiss", "model.faiss.check.json"]


def test_load_missing_file_names_the_path(tmp_path: Path) -> None:
    path = tmp_path / "absent.faiss"
    with pytest.raises(QuadratError, match="not found") as error:
        VectorIndex.load(path)
    assert str(path) in str(error.value)


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty"])
def test_load_corrupt_file_raises_quadrat_error_with_path(
    collection, tmp_path: Path, damage: str
) -> None:
    ids, vectors = collection
    path = tmp_path / "model.faiss"
    VectorIndex.build(ids[:200], vectors[:200]).save(path)
    data = path.read_bytes()
    if damage == "garbage":
        path.write_bytes(b"this is not a vector index at all" * 10)
    elif damage == "truncated":
        path.write_bytes(data[: len(data) // 2])
    else:
        path.write_bytes(b"")
    with pytest.raises(QuadratError, match="corrupt or unreadable") as error:
        VectorIndex.load(path)
    assert str(path) in str(error.value)


def test_load_other_faiss_index_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "l2.faiss"
    faiss.write_index(faiss.IndexFlatL2(DIM), str(path))
    with pytest.raises(QuadratError, match="not a Quadrat vector index") as error:
        VectorIndex.load(path)
    assert str(path) in str(error.value)


# ---------------------------------------------------------------------- IVF


def test_ivf_recall_at_10_on_clustered_data(clustered, clustered_ivf) -> None:
    ids, vectors = clustered
    index = clustered_ivf
    assert index.kind == "ivf" and index.nlist > 40 and index.nprobe < index.nlist
    rng = np.random.default_rng(5)
    picks = rng.choice(len(ids), size=50, replace=False)
    queries = normalised(vectors[picks] + 0.1 * rng.standard_normal((50, DIM)))
    found = index.search_many(queries, 10)
    recalls = [
        recall(f, brute_force(ids, vectors, q, 10)) for f, q in zip(found, queries, strict=True)
    ]
    assert np.mean(recalls) >= 0.95


def test_ivf_nprobe_is_clamped_and_validated(clustered_ivf) -> None:
    index = clustered_ivf
    default = index.nprobe
    try:
        index.nprobe = 10**6
        assert index.nprobe == index.nlist
        with pytest.raises(ValueError):
            index.nprobe = 0
    finally:
        index.nprobe = default


def test_auto_kind_and_needs_rebuild_follow_exact_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(policy_module, "EXACT_LIMIT", 100)
    vectors = clustered_vectors(300, clusters=5)
    ids = np.arange(1, 301, dtype=np.int64)

    flat = VectorIndex.build(ids[:100], vectors[:100])
    assert flat.kind == "flat" and not flat.needs_rebuild()
    flat.add(ids[100:101], vectors[100:101])
    assert flat.needs_rebuild()

    ivf = VectorIndex.build(ids[:101], vectors[:101])
    assert ivf.kind == "ivf" and not ivf.needs_rebuild()
    # IVF stays until well below the limit, so additions and removals near it are cheap.
    ivf.remove(ids[75:101])
    assert len(ivf) == 75 and not ivf.needs_rebuild()
    ivf.remove(ids[74:75])
    assert ivf.needs_rebuild()


# ---------------------------------------------------------------------- ties


@pytest.mark.parametrize("kind", ["flat", "ivf"])
def test_ties_are_broken_by_smaller_id(kind: str) -> None:
    rng = np.random.default_rng(6)
    others = clustered_vectors(400, clusters=4, seed=6)
    shared = others[0]
    tied_ids = rng.choice(np.arange(1000, 2000), size=60, replace=False)
    ids = np.concatenate([np.arange(1, 401), tied_ids]).astype(np.int64)
    vectors = np.vstack([others, np.repeat(shared[None, :], 60, axis=0)])
    ids[0] = 5000  # the original vector, tied too, with the largest id
    # Shuffle so insertion order says nothing about id order.
    order = rng.permutation(len(ids))
    index = VectorIndex.build(ids[order], vectors[order], kind=kind)

    tied_sorted = sorted(tied_ids.tolist())
    found = index.search(shared, 5)
    assert [i for i, _ in found] == tied_sorted[:5]
    assert len({s for _, s in found}) == 1
    # The whole tie group, then the next best vector.
    found = index.search(shared, 62)
    assert [i for i, _ in found[:61]] == [*tied_sorted, 5000]
    # Through a filter, too.
    allowed = np.array(tied_sorted[10:20] + [5000], dtype=np.int64)
    assert [i for i, _ in index.search(shared, 3, allowed_ids=allowed)] == tied_sorted[10:13]
