"""Scores and their order: the searches every kind of vector index ends in.

Results are a strict order: score descending, ties broken by smaller id, whatever order FAISS's
heaps leave tied vectors in (`search_faiss` fetches a whole tied group at the cut). Every score
served is checked: a score no cosine similarity can have (outside [-1, 1] beyond rounding, or
NaN) raises `CorruptIndexError`, and the library rebuilds the index from the catalog.

Three ways to a ranking: a FAISS search (`search_faiss`), a FAISS shortlist re-ranked exactly
from the compressed kind's vector file (`search_shortlist`), and exact scores of a few given ids
(`score_subset`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import faiss
import numpy as np

from engine.errors import CorruptIndexError
from engine.vectors.vectorfile import VectorFile

SCORE_TOLERANCE: float = 1e-3
"""A score further than this outside [-1, 1] cannot come from unit vectors (float32 rounding
stays below 1e-5 at 512 dimensions): the index is damaged."""

RERANK_FACTOR: int = 4
"""The compressed kind re-ranks a shortlist of this many times k exactly."""

# The shortest shortlist re-ranked: a few hundred rows of the vector file cost well under a
# millisecond, and a small k (10) would otherwise re-rank too few to recover PQ's errors.
_MIN_SHORTLIST: int = 200
_SCORE_CHUNK: int = 65_536

FEW_QUERIES: int = 20
"""Batches smaller than this are searched on one OpenMP thread. Measured on 2 cores shared with
another busy process: a single flat query over 200k vectors took ~24 ms on one thread and
65-90 ms on two (the threads wait on each other at every barrier). FAISS batches of 20 or more
queries go through BLAS and keep the default thread count."""

RowSearch = Callable[[np.ndarray, slice, int], tuple[np.ndarray, np.ndarray]]
"""A search over some rows of the queries: (queries, rows, fetch) -> (scores, ids) of those
rows, padded with id -1 where fewer exist."""


def plain_search(
    index: faiss.IndexIDMap2 | faiss.IndexIVF, params: faiss.SearchParameters | None
) -> RowSearch:
    """FAISS's own search of `index` under `params` (nprobe, an id selector), as a `RowSearch`."""

    def search(queries: np.ndarray, rows: slice, fetch: int) -> tuple[np.ndarray, np.ndarray]:
        scores, ids = index.search(queries[rows], fetch, params=params)
        return scores, ids

    return search


def search_faiss(
    queries: np.ndarray, k: int, search: RowSearch, available: int, *, exact: bool
) -> list[list[tuple[int, float]]]:
    """Run `search` over `queries` and make its results the strict order (see the module doc);
    `available` is how many vectors the search may return at most, `exact` whether it is an
    exact search, which must find every one of them it is asked for."""
    results: list[list[tuple[int, float]]] = []
    # One more than asked, to see whether a tie crosses the cut at k.
    fetch = min(k + 1, available)
    scores, ids = search(queries, slice(0, len(queries)), fetch)
    for row in range(len(queries)):
        row_fetch = fetch
        row_scores, row_ids = scores[row], ids[row]
        while row_fetch < available and _tie_at_cut(row_scores, row_ids, k):
            # Fetch the whole tied group so the smallest ids win, not FAISS's heap order.
            row_fetch = min(2 * row_fetch, available)
            more_scores, more_ids = search(queries, slice(row, row + 1), row_fetch)
            row_scores, row_ids = more_scores[0], more_ids[0]
        keep = row_ids >= 0  # FAISS pads with -1 when fewer results exist
        row_ids, row_scores = row_ids[keep], row_scores[keep]
        check_scores(row_scores)
        if exact and len(row_ids) < min(k, available):
            # Exact search finds every vector it may; a short list means scores FAISS could
            # not order (NaN), that is, damaged vectors.
            raise CorruptIndexError(
                f"the vector index returned {len(row_ids)} of {min(k, available)} results "
                "of an exact search: its vectors are damaged"
            )
        results.append(strict_top_k(row_ids, row_scores, k))
    return results


def search_shortlist(
    queries: np.ndarray,
    k: int,
    search: RowSearch,
    available: int,
    vectors: VectorFile,
    rerank_factor: int,
) -> list[list[tuple[int, float]]]:
    """Run `search` for a shortlist of `rerank_factor` x k per query (compressed scores) and
    re-rank it with the exact `vectors`: the strict order."""
    fetch = min(max(k * rerank_factor, _MIN_SHORTLIST, k + 1), available)
    _, ids = search(queries, slice(0, len(queries)), fetch)
    results = []
    for row in range(len(queries)):
        row_ids = ids[row][ids[row] >= 0]  # FAISS pads with -1 when fewer results exist
        exact = vectors.get(row_ids)
        scores = inner_products(queries[row : row + 1], exact)[0]
        check_scores(scores)
        results.append(strict_top_k(row_ids, scores, k))
    return results


def score_subset(
    queries: np.ndarray,
    k: int,
    allowed: np.ndarray,
    vectors_of: Callable[[np.ndarray], np.ndarray],
) -> list[list[tuple[int, float]]]:
    """Exact scores of `queries` against the vectors of `allowed` (sorted ids present in the
    index), read in chunks with `vectors_of(ids)`: the strict order."""
    candidates: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in range(len(queries))]
    for start in range(0, len(allowed), _SCORE_CHUNK):
        chunk_ids = allowed[start : start + _SCORE_CHUNK]
        chunk_scores = inner_products(queries, vectors_of(chunk_ids))
        check_scores(chunk_scores)
        for row in range(len(queries)):
            top = strict_top_k_arrays(chunk_ids, chunk_scores[row], k)
            candidates[row].append(top)
    results = []
    for row_candidates in candidates:
        ids = np.concatenate([c[0] for c in row_candidates])
        scores = np.concatenate([c[1] for c in row_candidates])
        results.append(strict_top_k(ids, scores, k))
    return results


def inner_products(queries: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    """(len(queries), len(vectors)) float32 inner products of unit vectors.

    A few queries go one at a time through FAISS's single-threaded SIMD loop rather than BLAS:
    on a busy 2-core machine OpenBLAS handing a small product to its sleeping second thread took
    4-16 ms where the product itself takes 0.05-0.5 ms.
    """
    if len(queries) >= FEW_QUERIES:
        products: np.ndarray = queries @ vectors.T
        return products
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    scores = np.empty((len(queries), len(vectors)), dtype=np.float32)
    # faiss's type stubs (faiss-cpu 1.15) omit this SWIG function, present at runtime.
    inner_products_ny: Any = faiss.fvec_inner_products_ny  # type: ignore[attr-defined]
    for row in range(len(queries)):
        query = np.ascontiguousarray(queries[row], dtype=np.float32)
        inner_products_ny(
            faiss.swig_ptr(scores[row]),
            faiss.swig_ptr(query),
            faiss.swig_ptr(vectors),
            vectors.shape[1],
            len(vectors),
        )
    return scores


def check_scores(scores: np.ndarray) -> None:
    """Raise CorruptIndexError if any score is NaN or outside [-1, 1] beyond rounding."""
    if scores.size == 0:
        return
    in_range = np.abs(scores) <= 1.0 + SCORE_TOLERANCE  # False for NaN
    if not in_range.all():
        bad = float(np.asarray(scores)[~in_range].flat[0])
        raise CorruptIndexError(
            f"the vector index served a score of {bad:.3g}, which no cosine similarity can "
            "have: its vectors are damaged"
        )


def _tie_at_cut(scores: np.ndarray, ids: np.ndarray, k: int) -> bool:
    """Whether the k-th and the (k+1)-th results tie, so the cut at k depends on heap order."""
    return len(ids) > k and ids[k] >= 0 and scores[k] == scores[k - 1]


def strict_top_k_arrays(
    ids: np.ndarray, scores: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """The best `k` of (ids, scores) in the strict order, as two arrays."""
    if len(ids) > k:
        # Everything scoring at least the k-th best score, so ties at the cut are all kept.
        kth_best = np.partition(scores, len(scores) - k)[len(scores) - k]
        mask = scores >= kth_best
        ids, scores = ids[mask], scores[mask]
    order = np.lexsort((ids, -scores))[:k]
    return ids[order], scores[order]


def strict_top_k(ids: np.ndarray, scores: np.ndarray, k: int) -> list[tuple[int, float]]:
    """The best `k` of (ids, scores) in the strict order, as (id, score) pairs."""
    top_ids, top_scores = strict_top_k_arrays(ids, scores, k)
    return [(int(i), float(s)) for i, s in zip(top_ids, top_scores, strict=True)]


@contextmanager
def omp_threads(count: int | None) -> Iterator[None]:
    """Run FAISS on `count` OpenMP threads in this thread for the duration (None: unchanged)."""
    if count is None:
        yield
        return
    previous = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(count)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(previous)
