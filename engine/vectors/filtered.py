"""Filtered vector searches: which vectors and which IVF lists a search restricted to some ids reads.

Filtered searches keep no second copy of the vectors. Up to `SMALL_FILTER_LIMIT` allowed ids
are scored directly (`scored_directly`). Larger filters go to FAISS as a bitmap of ids
(`id_selector`); an IVF search scans only lists that hold allowed vectors, nearest centroid
first, as many as an unfiltered search probes and enough for `FILTER_CANDIDATES_PER_RESULT`
allowed vectors per result, or all of them (exact) when that costs little more
(`EXACT_COST_SLACK`; `choose_lists`). What this needs beside FAISS (each id's list, the
centroids: about 12 MB at 1M vectors) is a `FilterLookup`, built by the first filtered search
and dropped by every change to the index.
"""

from __future__ import annotations

from typing import Any

import faiss
import numpy as np

from engine.vectors.scoring import FEW_QUERIES, RowSearch, inner_products

# Up to this many allowed vectors a filtered search scores them directly (reconstruct + dot
# product) instead of searching with a FAISS id selector: exact for IVF too. Measured at 100k
# vectors: 1,000 allowed ~0.4 ms direct vs 1.2-1.7 ms selector; 5,000 allowed ~8 ms direct vs
# 1.2-2.6 ms selector.
SMALL_FILTER_LIMIT: int = 2_000

FILTER_CANDIDATES_PER_RESULT: int = 30
"""A filtered IVF search scans lists (nearest centroid first, only lists holding allowed
vectors) until they hold this many allowed vectors per result asked, and at least as many lists
as an unfiltered search probes. See docs/BENCHMARKS.md, "Filtered search (1M vectors)"."""

EXACT_COST_SLACK: float = 1.5
"""A filtered IVF search scans every list holding an allowed vector (exact) when that costs at
most this many times the lists it would choose otherwise (`scan_cost`)."""

# Cost model of scanning IVF lists with an id selector, in id checks: every id in a scanned list
# is checked against the filter (a bitmap: ~6 ns), each allowed vector also costs a 512-d dot
# product read from scattered memory (~220-550 ns measured at 1M vectors, busy 2-core machine).
_DISTANCE_COST_IN_ID_CHECKS: int = 50

# The id -> list table of filtered searches is dense (one int32 per id up to the largest) when
# that takes at most this many slots per vector; sparser ids are looked up by binary search.
_DENSE_SLOTS_PER_VECTOR: int = 8
_DENSE_MIN_SLOTS: int = 1 << 16
# A filter is handed to FAISS as a bitmap of ids (a bit test per id scanned) when the bitmap
# takes at most this many bytes per indexed vector (beyond 1 MiB); else as a hash set.
_BITMAP_BYTES_PER_VECTOR: int = 4
_BITMAP_MIN_BYTES: int = 1 << 20


def scored_directly(allowed_count: int) -> bool:
    """Whether a filter of `allowed_count` present ids is scored directly rather than searched
    through FAISS with an id selector (`SMALL_FILTER_LIMIT`)."""
    return allowed_count <= SMALL_FILTER_LIMIT


class FilterLookup:
    """What filtered searches need beyond FAISS, derived from one state of the index.

    `list_by_id` maps an id to the IVF list holding it (0 for a flat index; -1: absent),
    densely, one int32 per id up to the largest; it is None when the ids are too sparse for a
    table, and then `sorted_lists` holds the list of each id in sorted-id order (IVF only).
    `list_sizes` and `centroids` are the IVF lists' lengths and centroids.
    """

    def __init__(
        self,
        list_by_id: np.ndarray | None,
        sorted_lists: np.ndarray | None = None,
        list_sizes: np.ndarray | None = None,
        centroids: np.ndarray | None = None,
    ) -> None:
        self.list_by_id = list_by_id
        self.sorted_lists = sorted_lists
        self.list_sizes = list_sizes
        self.centroids = centroids

    @classmethod
    def build(
        cls, index: faiss.IndexIDMap2 | faiss.IndexIVF, sorted_ids: np.ndarray
    ) -> FilterLookup:
        """The lookup of `index`, whose ids are `sorted_ids` (sorted, unique)."""
        n = len(sorted_ids)
        top = int(sorted_ids[-1]) if n else -1
        dense = top < _DENSE_SLOTS_PER_VECTOR * n + _DENSE_MIN_SLOTS
        list_by_id = np.full(top + 1, -1, dtype=np.int32) if dense else None
        if not isinstance(index, faiss.IndexIVF):
            if list_by_id is not None:
                list_by_id[sorted_ids] = 0
            return cls(list_by_id)
        lists = index.invlists
        assert lists is not None  # an IVF index owns its inverted lists
        nlist = int(index.nlist)
        sizes = np.array([lists.list_size(i) for i in range(nlist)], dtype=np.int64)
        parts = [
            faiss.rev_swig_ptr(lists.get_ids(i), int(sizes[i])).copy()
            for i in range(nlist)
            if sizes[i]
        ]
        ids = np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)
        numbers = np.repeat(np.arange(nlist, dtype=np.int32), sizes)
        centroids = np.ascontiguousarray(index.quantizer.reconstruct_n(0, nlist), np.float32)
        if list_by_id is not None:
            list_by_id[ids] = numbers
            return cls(list_by_id, None, sizes, centroids)
        sorted_lists = np.zeros(n, dtype=np.int32)
        sorted_lists[np.searchsorted(sorted_ids, ids)] = numbers
        return cls(None, sorted_lists, sizes, centroids)

    def locate(self, allowed: np.ndarray, sorted_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the ids of `allowed` (sorted, unique) present in the index, the list of each)."""
        if self.list_by_id is not None:
            # Ids past the table's end are not in the index.
            allowed = allowed[: int(np.searchsorted(allowed, len(self.list_by_id)))]
            lists = self.list_by_id[allowed]
            present = lists >= 0
        else:
            positions = np.minimum(np.searchsorted(sorted_ids, allowed), len(sorted_ids) - 1)
            present = sorted_ids[positions] == allowed
            lists = (
                self.sorted_lists[positions]
                if self.sorted_lists is not None
                else np.zeros(len(allowed), dtype=np.int32)
            )
        if bool(present.all()):
            return allowed, lists
        return allowed[present], lists[present]

    @property
    def nbytes(self) -> int:
        """Memory the lookup's arrays take."""
        arrays = (self.list_by_id, self.sorted_lists, self.list_sizes, self.centroids)
        return sum(a.nbytes for a in arrays if a is not None)

    def centroid_scores(self, queries: np.ndarray, lists: np.ndarray) -> np.ndarray:
        """Inner products (len(queries), len(lists)) of the queries with those centroids."""
        assert self.centroids is not None
        if len(queries) >= FEW_QUERIES:
            return inner_products(queries, self.centroids[lists])
        # All centroids (contiguous, no gather): as fast as the few left out would save.
        return inner_products(queries, self.centroids)[:, lists]


def choose_lists(
    index: faiss.IndexIVF,
    lookup: FilterLookup,
    queries: np.ndarray,
    k: int,
    allowed_lists: np.ndarray,
) -> np.ndarray:
    """The IVF lists of `index` a filtered search scans, per query (rows padded with -1), given
    the list of each allowed vector.

    Only lists holding allowed vectors are candidates, nearest centroid first. A query scans at
    least as many of them as an unfiltered search probes (so the neighbourhood is covered as
    well) and enough to meet `FILTER_CANDIDATES_PER_RESULT` allowed vectors per result asked.
    When scanning every list with an allowed vector (an exact search) would cost at most
    `EXACT_COST_SLACK` times that, the search is exact.
    """
    assert lookup.list_sizes is not None
    counts = np.bincount(allowed_lists, minlength=index.nlist)
    candidates = np.flatnonzero(counts)
    allowed_total = len(allowed_lists)
    target = FILTER_CANDIDATES_PER_RESULT * k
    min_lists = index.nprobe
    if target >= allowed_total or min_lists >= len(candidates):
        return np.broadcast_to(candidates, (len(queries), len(candidates)))
    exact_cost = scan_cost(int(lookup.list_sizes[candidates].sum()), allowed_total)
    candidate_counts = counts[candidates]
    candidate_sizes = lookup.list_sizes[candidates]
    scores = lookup.centroid_scores(queries, candidates)
    chosen: list[np.ndarray] = []
    for row in range(len(queries)):
        order = np.argsort(-scores[row], kind="stable")
        reached = np.cumsum(candidate_counts[order])
        count = int(np.searchsorted(reached, target)) + 1
        count = min(len(order), max(count, min_lists))
        cost = scan_cost(int(candidate_sizes[order[:count]].sum()), int(reached[count - 1]))
        if exact_cost <= EXACT_COST_SLACK * cost:
            count = len(order)
        chosen.append(candidates[order[:count]])
    width = max(len(row_lists) for row_lists in chosen)
    lists = np.full((len(queries), width), -1, dtype=np.int64)
    for row, row_lists in enumerate(chosen):
        lists[row, : len(row_lists)] = row_lists
    return lists


def scan_cost(ids_scanned: int, allowed_scanned: int) -> int:
    """The cost of scanning IVF lists with a filter, in id checks (see the constants)."""
    return ids_scanned + _DISTANCE_COST_IN_ID_CHECKS * allowed_scanned


def id_selector(allowed: np.ndarray, n_indexed: int) -> faiss.IDSelector:
    """A FAISS selector of the sorted, unique, non-negative ids `allowed`: a bitmap (one bit test
    per id scanned) unless the largest id makes it too big, then a hash set."""
    top = int(allowed[-1])
    size = top // 8 + 1
    if size > _BITMAP_BYTES_PER_VECTOR * n_indexed + _BITMAP_MIN_BYTES:
        return faiss.IDSelectorBatch(allowed)
    # Bit `id % 8` of byte `id // 8`, FAISS's order. Through a byte per id: numpy sets those
    # faster than it ORs bits, and the bitmap is capped small enough for the temporary.
    marks = np.zeros(size * 8, dtype=bool)
    marks[allowed] = True
    bitmap = np.packbits(marks, bitorder="little")
    # The one-argument form of FAISS's Python wrapper keeps a reference to the bitmap (its type
    # stubs know only the C++ form, which takes a raw pointer).
    bitmap_selector: Any = faiss.IDSelectorBitmap
    selector: faiss.IDSelector = bitmap_selector(bitmap)
    return selector


def preassigned_search(
    index: faiss.IndexIVF,
    lists: np.ndarray,
    selector: faiss.IDSelector,
    centroids: np.ndarray | None = None,
) -> RowSearch:
    """An IVF search that scans the given lists per query (rows padded with -1, which FAISS
    skips) and only the vectors `selector` allows. `centroids` (all of them, by list number)
    give the query-centroid scores an index of residual codes adds; IVF-Flat ignores them."""

    def search(queries: np.ndarray, rows: slice, fetch: int) -> tuple[np.ndarray, np.ndarray]:
        chosen = np.ascontiguousarray(lists[rows], dtype=np.int64)
        chosen = chosen[:, : max(1, int((chosen >= 0).sum(axis=1).max()))]
        chosen = np.ascontiguousarray(chosen)
        batch = np.ascontiguousarray(queries[rows], dtype=np.float32)
        params = faiss.SearchParametersIVF()
        params.nprobe = chosen.shape[1]  # FAISS reads the list numbers with this stride
        params.sel = selector
        coarse = np.zeros(chosen.shape, dtype=np.float32)
        if centroids is not None:
            gathered = centroids[np.maximum(chosen, 0)]  # (queries, lists, dim)
            coarse = np.ascontiguousarray(np.einsum("qld,qd->ql", gathered, batch), np.float32)
        scores = np.empty((len(batch), fetch), dtype=np.float32)
        ids = np.empty((len(batch), fetch), dtype=np.int64)
        # The Python wrapper of search_preassigned takes no parameters; the SWIG call does.
        search_c: Any = index.search_preassigned_c  # type: ignore[attr-defined]
        search_c(
            len(batch),
            faiss.swig_ptr(batch),
            fetch,
            faiss.swig_ptr(chosen),
            faiss.swig_ptr(coarse),
            faiss.swig_ptr(scores),
            faiss.swig_ptr(ids),
            False,
            params,
        )
        return scores, ids

    return search
