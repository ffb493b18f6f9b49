"""Filtered vector search: the id-bitmap and list-choosing paths give the exact ranking where
they scan every allowed vector, stay close to it where they do not, and follow every change."""

from __future__ import annotations

from pathlib import Path

import faiss
import numpy as np
import pytest

import engine.vectors.filtered as filtered_module
from engine.errors import CorruptIndexError
from engine.vectors.index import VectorIndex

DIM = 32
N = 4000
CLUSTERS = 40


def normalised(array: np.ndarray) -> np.ndarray:
    array = np.asarray(array, dtype=np.float32)
    return array / np.linalg.norm(array, axis=-1, keepdims=True)


def clustered_collection(seed: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ids, vectors, cluster of each): scattered ids, as a catalog has after deletions."""
    rng = np.random.default_rng(seed)
    centres = normalised(rng.standard_normal((CLUSTERS, DIM)))
    labels = rng.integers(0, CLUSTERS, size=N)
    vectors = normalised(centres[labels] + 0.15 * rng.standard_normal((N, DIM)))
    ids = rng.choice(10 * N, size=N, replace=False).astype(np.int64) + 1
    return ids, vectors, labels


def brute_force(
    ids: np.ndarray, vectors: np.ndarray, query: np.ndarray, k: int
) -> list[tuple[int, float]]:
    """The reference ranking: score descending, ties by smaller id."""
    scores = vectors @ normalised(query)
    order = np.lexsort((ids, -scores))[:k]
    return [(int(ids[i]), float(scores[i])) for i in order]


def assert_same_ranking(found: list[tuple[int, float]], expected: list[tuple[int, float]]) -> None:
    assert [i for i, _ in found] == [i for i, _ in expected]
    np.testing.assert_allclose([s for _, s in found], [s for _, s in expected], atol=1e-5)


def recall(found: list[tuple[int, float]], expected: list[tuple[int, float]]) -> float:
    return len({i for i, _ in found} & {i for i, _ in expected}) / len(expected)


@pytest.fixture(scope="module")
def collection() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return clustered_collection()


@pytest.fixture
def through_faiss(monkeypatch: pytest.MonkeyPatch) -> None:
    """Filters of more than 10 ids go through FAISS rather than direct scoring."""
    monkeypatch.setattr(filtered_module, "SMALL_FILTER_LIMIT", 10)


@pytest.fixture
def every_list(monkeypatch: pytest.MonkeyPatch) -> None:
    """A filtered IVF search scans every list holding an allowed vector: it must be exact."""
    monkeypatch.setattr(filtered_module, "FILTER_CANDIDATES_PER_RESULT", 10**9)


def queries_near(vectors: np.ndarray, count: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    picked = vectors[rng.choice(len(vectors), size=count, replace=False)]
    return normalised(picked + 0.05 * rng.standard_normal(picked.shape))


# ---------------------------------------------------------------------- exact where promised


@pytest.mark.parametrize("kind", ["flat", "ivf"])
@pytest.mark.parametrize("filter_kind", ["random", "taxon"])
@pytest.mark.usefixtures("through_faiss", "every_list")
def test_filtered_search_equals_brute_force(collection, kind: str, filter_kind: str) -> None:
    ids, vectors, labels = collection
    index = VectorIndex.build(ids, vectors, kind=kind)
    if filter_kind == "random":
        mask = np.random.default_rng(2).random(N) < 0.1
    else:  # whole clusters, as a taxon filter selects them
        mask = np.isin(labels, [3, 17, 29])
    for query in queries_near(vectors, 15, seed=3):
        found = index.search(query, 25, allowed_ids=ids[mask])
        assert_same_ranking(found, brute_force(ids[mask], vectors[mask], query, 25))


@pytest.mark.parametrize("kind", ["flat", "ivf"])
@pytest.mark.usefixtures("through_faiss", "every_list")
def test_ties_across_the_cut_go_to_the_smaller_ids(kind: str) -> None:
    ids, vectors, _ = clustered_collection(seed=5)
    # 30 copies of one vector under scattered ids, half of them allowed: the top 10 of the
    # allowed copies must be the 10 smallest allowed ids, whatever FAISS's heap order.
    copies = np.arange(10**6, 10**6 + 30 * 7919, 7919)[::-1].astype(np.int64)
    same = np.repeat(vectors[:1], len(copies), axis=0)
    index = VectorIndex.build(
        np.concatenate([ids, copies]), np.concatenate([vectors, same]), kind=kind
    )
    allowed = np.concatenate([copies[::2], ids[1 : N // 2]])  # ids[0] is vectors[0] too
    found = index.search(vectors[0], 10, allowed_ids=allowed)
    assert [i for i, _ in found] == sorted(copies[::2].tolist())[:10]
    assert len({s for _, s in found}) == 1


@pytest.mark.usefixtures("through_faiss")
def test_a_filter_cheap_to_scan_whole_is_searched_exactly(
    collection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cost model, not the candidate count, makes the search exact here: with one list
    probed and 1 candidate per result the choice alone would miss results."""
    ids, vectors, _ = collection
    index = VectorIndex.build(ids, vectors, kind="ivf")
    index.nprobe = 1
    monkeypatch.setattr(filtered_module, "FILTER_CANDIDATES_PER_RESULT", 1)
    mask = np.random.default_rng(6).random(N) < 0.3
    queries = queries_near(vectors, 10, seed=6)
    expected = [brute_force(ids[mask], vectors[mask], query, 20) for query in queries]

    monkeypatch.setattr(filtered_module, "EXACT_COST_SLACK", 0.0)  # never exact
    approximate = index.search_many(queries, 20, allowed_ids=ids[mask])
    assert min(recall(f, e) for f, e in zip(approximate, expected, strict=True)) < 1.0

    monkeypatch.setattr(filtered_module, "EXACT_COST_SLACK", 1e9)  # exact whatever it costs
    for found, wanted in zip(index.search_many(queries, 20, ids[mask]), expected, strict=True):
        assert_same_ranking(found, wanted)


# ---------------------------------------------------------------------- approximate, still good


@pytest.mark.usefixtures("through_faiss")
def test_a_far_away_taxon_still_fills_the_list_and_finds_its_best(collection) -> None:
    """A query whose nearest lists hold no allowed vector (a taxon filter, a query about
    something else): every result allowed, k of them, nearly the exact ones."""
    ids, vectors, labels = collection
    index = VectorIndex.build(ids, vectors, kind="ivf")
    index.nprobe = 4  # a few lists, so the choice of lists matters
    mask = np.isin(labels, [5, 6])
    outside = vectors[~np.isin(labels, [5, 6])]
    recalls = []
    for query in queries_near(outside, 20, seed=7):
        found = index.search(query, 20, allowed_ids=ids[mask])
        expected = brute_force(ids[mask], vectors[mask], query, 20)
        assert len(found) == 20 and {i for i, _ in found} <= set(ids[mask].tolist())
        scores = [s for _, s in found]
        assert scores == sorted(scores, reverse=True)
        recalls.append(recall(found, expected))
    assert np.mean(recalls) >= 0.95


@pytest.mark.usefixtures("through_faiss")
def test_a_broad_filter_scans_part_of_the_lists_and_keeps_recall(
    collection, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids, vectors, _ = collection
    index = VectorIndex.build(ids, vectors, kind="ivf")
    mask = np.random.default_rng(8).random(N) < 0.5
    scanned: list[int] = []
    choose = filtered_module.choose_lists

    def counting(
        ivf: faiss.IndexIVF,
        lookup: filtered_module.FilterLookup,
        queries: np.ndarray,
        k: int,
        allowed_lists: np.ndarray,
    ) -> np.ndarray:
        lists = choose(ivf, lookup, queries, k, allowed_lists)
        scanned.extend(int((row >= 0).sum()) for row in lists)
        return lists

    monkeypatch.setattr(filtered_module, "choose_lists", counting)
    recalls = []
    for query in queries_near(vectors, 20, seed=9):
        found = index.search(query, 10, allowed_ids=ids[mask])
        recalls.append(recall(found, brute_force(ids[mask], vectors[mask], query, 10)))
    # Half the ids allowed: about as many lists as an unfiltered search, not all of them.
    assert index.nprobe <= min(scanned) and max(scanned) < index.nlist
    assert np.mean(recalls) >= 0.95


@pytest.mark.usefixtures("through_faiss")
def test_search_many_equals_one_search_per_query(collection) -> None:
    ids, vectors, labels = collection
    index = VectorIndex.build(ids, vectors, kind="ivf")
    allowed = ids[np.isin(labels, range(0, CLUSTERS, 3))]
    # 25 queries: the batched path (one FAISS call, lists padded per query).
    queries = queries_near(vectors, 25, seed=10)
    batch = index.search_many(queries, 15, allowed_ids=allowed)
    assert batch == [index.search(query, 15, allowed_ids=allowed) for query in queries]


# ---------------------------------------------------------------------- the lookup follows changes


@pytest.mark.parametrize("kind", ["flat", "ivf"])
@pytest.mark.usefixtures("through_faiss", "every_list")
def test_removed_ids_are_never_served_and_added_ones_never_missed(kind: str) -> None:
    ids, vectors, _ = clustered_collection(seed=11)
    index = VectorIndex.build(ids, vectors, kind=kind)
    query = vectors[0]
    allowed = ids[::2]
    before = index.search(query, 30, allowed_ids=allowed)  # builds the lookup
    assert index.filter_lookup_bytes > 0
    removed = np.array([i for i, _ in before[:10]])
    index.remove(removed)
    assert index.filter_lookup_bytes == 0  # dropped with the change

    # New ids right next to the query, some above every id so far (beyond the lookup table),
    # and an old id whose vector moves next to the query (another IVF list).
    moved = ids[2]
    new_ids = np.array([7, 50 * N + 1, 50 * N + 3], dtype=np.int64)
    near = normalised(query + 0.01 * np.random.default_rng(12).standard_normal((4, DIM)))
    index.add(np.append(new_ids, moved), near)

    current_ids = np.concatenate([np.setdiff1d(ids, np.append(removed, moved)), new_ids, [moved]])
    current_vectors = {int(i): v for i, v in zip(ids, vectors, strict=True)}
    current_vectors.update(
        {int(i): v for i, v in zip(np.append(new_ids, moved), near, strict=True)}
    )
    wanted = np.concatenate([allowed, removed, new_ids])
    wanted = np.intersect1d(wanted, current_ids)
    found = index.search(query, 30, allowed_ids=np.concatenate([allowed, removed, new_ids]))
    expected = brute_force(wanted, np.stack([current_vectors[int(i)] for i in wanted]), query, 30)
    assert_same_ranking(found, expected)
    assert not {i for i, _ in found} & set(removed.tolist())
    assert {int(i) for i in new_ids} | {int(moved)} <= {i for i, _ in found}


@pytest.mark.parametrize("kind", ["flat", "ivf"])
@pytest.mark.usefixtures("through_faiss", "every_list")
def test_filtered_results_survive_save_and_load(collection, kind: str, tmp_path: Path) -> None:
    ids, vectors, labels = collection
    index = VectorIndex.build(ids, vectors, kind=kind)
    mask = np.isin(labels, [1, 2, 3, 4])
    queries = queries_near(vectors, 5, seed=13)
    before = index.search_many(queries, 20, allowed_ids=ids[mask])
    path = tmp_path / "model.faiss"
    index.save(path)
    loaded = VectorIndex.load(path)
    assert loaded.filter_lookup_bytes == 0
    after = loaded.search_many(queries, 20, allowed_ids=ids[mask])
    assert after == before
    for query, found in zip(queries, after, strict=True):
        assert_same_ranking(found, brute_force(ids[mask], vectors[mask], query, 20))


# ---------------------------------------------------------------------- odd filters and ids


@pytest.mark.parametrize("kind", ["flat", "ivf"])
@pytest.mark.usefixtures("through_faiss", "every_list")
def test_huge_ids_use_the_sparse_lookup_and_a_hash_set(collection, kind: str) -> None:
    """Ids far beyond the collection's size: no dense table, no bitmap; same results."""
    ids, vectors, labels = collection
    huge = ids * 10**9 + 12345
    index = VectorIndex.build(huge, vectors, kind=kind)
    mask = np.isin(labels, [7, 8, 9])
    query = queries_near(vectors, 1, seed=14)[0]
    found = index.search(query, 15, allowed_ids=huge[mask])
    assert_same_ranking(found, brute_force(huge[mask], vectors[mask], query, 15))


@pytest.mark.usefixtures("through_faiss")
def test_unsorted_repeated_and_unknown_allowed_ids_are_accepted(collection) -> None:
    ids, vectors, labels = collection
    index = VectorIndex.build(ids, vectors, kind="ivf")
    mask = np.isin(labels, [10, 11])
    messy = np.concatenate([ids[mask][::-1], ids[mask][:5], [0, 10**12, 10 * N + 7]])
    query = queries_near(vectors, 1, seed=15)[0]
    assert index.search(query, 10, allowed_ids=messy) == index.search(
        query, 10, allowed_ids=np.sort(ids[mask])
    )
    assert index.search(query, 10, allowed_ids=np.array([10**12, 0])) == []


@pytest.mark.usefixtures("through_faiss")
def test_more_asked_than_allowed_returns_every_allowed_vector_in_order(collection) -> None:
    ids, vectors, labels = collection
    index = VectorIndex.build(ids, vectors, kind="ivf")
    mask = np.isin(labels, [20])
    query = queries_near(vectors, 1, seed=16)[0]
    found = index.search(query, int(mask.sum()) + 50, allowed_ids=ids[mask])
    assert_same_ranking(found, brute_force(ids[mask], vectors[mask], query, int(mask.sum())))


# ---------------------------------------------------------------------- damaged vectors


@pytest.mark.parametrize("damage", ["huge", "nan"])
@pytest.mark.usefixtures("through_faiss", "every_list")
def test_damaged_ivf_vectors_raise_corrupt_index_error_on_the_filtered_path(
    collection, damage: str
) -> None:
    ids, vectors, _ = collection
    index = VectorIndex.build(ids, vectors, kind="ivf")
    ivf = index._index
    assert isinstance(ivf, faiss.IndexIVF) and ivf.invlists is not None
    # Damage the first vector of the longest list in place, as bad memory or a bad file would.
    sizes = [ivf.invlists.list_size(i) for i in range(ivf.nlist)]
    target = int(np.argmax(sizes))
    codes = faiss.rev_swig_ptr(ivf.invlists.get_codes(target), sizes[target] * DIM * 4)
    stored = codes.view(np.float32).reshape(sizes[target], DIM)
    damaged_id = int(faiss.rev_swig_ptr(ivf.invlists.get_ids(target), sizes[target])[0])
    query = stored[0].copy()  # the damaged vector's own direction: it is among the results
    stored[0] = stored[0] * 1e20 if damage == "huge" else np.nan
    allowed = np.union1d(ids[::3], [damaged_id])
    with pytest.raises(CorruptIndexError, match="no cosine similarity|damaged"):
        index.search(query, len(allowed), allowed)
    if damage == "huge":  # FAISS skips a NaN score: only a search for everything sees it
        with pytest.raises(CorruptIndexError, match="no cosine similarity"):
            index.search_many(np.stack([vectors[1], query]), 10, allowed)
