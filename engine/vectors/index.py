"""The vector index: FAISS over L2-normalised image embeddings, keyed by catalog image ids.

One index per (library, model) lives in one file. The catalog's `embeddings` table is the source
of truth; this file is a cache the library repairs at open, which is why the index reports its
ids cheaply and adds/removes in batches.

Three kinds, chosen by size and by the memory the user lets the index take
(`engine.vectors.policy.choose_kind`; their FAISS layouts are engine.vectors.kinds):

- ``"flat"``: exact search. Used up to `EXACT_LIMIT`.
- ``"ivf"``: approximate search over IVF-Flat lists. Used up to `COMPRESSED_LIMIT` while it fits
  the memory budget (4 bytes per dimension per vector: 10 GB at 5M x 512).
- ``"compressed"``: IVF over 8-bit scalar-quantized or product-quantized codes finds a shortlist
  of `rerank_factor` x k, which is re-ranked exactly with the vectors of a memory-mapped float16
  file beside the index (engine.vectors.vectorfile; attached by the library with
  `attach_vectors`). Used above `COMPRESSED_LIMIT`, or whenever IVF-Flat would exceed the budget.

Vectors are L2-normalised on the way in (a no-op for vectors that already are), so scores are
cosine similarities. Results are a strict order: score descending, ties broken by smaller id,
and a score no cosine similarity can have raises `CorruptIndexError` (engine.vectors.scoring).

Safe to share between threads: FAISS must not be searched while it is modified, so every
public method takes an internal lock and concurrent searches and updates run one at a time.

Filtered searches (`allowed_ids`) are engine.vectors.filtered's: their lookup tables are built
by the first filtered search and dropped by every change. The file is verified: `save` writes a
checksum file beside it and `load` refuses a file that does not match it (engine.vectors.files).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import faiss
import numpy as np

from engine.errors import CorruptIndexError, QuadratError
from engine.progress import CancelToken, Progress, ProgressCallback, no_progress
from engine.vectors import filtered
from engine.vectors.files import IndexShape, verify_checksum, write_verified
from engine.vectors.kinds import (
    FaissIndex,
    check_kind,
    checked_layout,
    codec_of,
    kind_of,
    new_flat,
    removal_selector,
    trained_ivf,
)
from engine.vectors.policy import choose_kind, needs_rebuild
from engine.vectors.scoring import (
    FEW_QUERIES,
    RERANK_FACTOR,
    RowSearch,
    omp_threads,
    plain_search,
    score_subset,
    search_faiss,
    search_shortlist,
)
from engine.vectors.vectorfile import VectorFile

log = logging.getLogger(__name__)

# Vectors handed to FAISS per call while building or adding: bounds the temporary copies.
_ADD_CHUNK: int = 65_536


class VectorIndex:
    """A FAISS index of L2-normalised vectors keyed by int64 image ids (see the module doc)."""

    dim: int
    kind: str

    def __init__(self, dim: int) -> None:
        """An empty exact index of `dim`-dimensional vectors."""
        if dim <= 0:
            raise ValueError(f"vector dimension must be positive, got {dim}")
        self._setup(new_flat(dim))

    def _setup(self, index: FaissIndex) -> None:
        self._index: FaissIndex = index
        self.dim = int(index.d)
        self.kind = kind_of(index)
        self._lock = threading.RLock()
        # The compressed kind's exact vectors (attach_vectors); None for the others.
        self._vectors: VectorFile | None = None
        self.rerank_factor: int = RERANK_FACTOR
        # The budget `needs_rebuild` judges the kind by; the library sets the user's.
        self.memory_budget: int | None = None
        self._sorted_ids = self._read_ids_from_faiss()
        # Built by the first filtered search and dropped by every change (add, remove), so it
        # never serves a removed vector or misses an added one.
        self._lookup: filtered.FilterLookup | None = None

    # ------------------------------------------------------------------ construction

    @classmethod
    def build(
        cls,
        ids: np.ndarray,
        vectors: np.ndarray,
        kind: str = "auto",
        *,
        vectors_path: Path | None = None,
        memory_budget: int | None = None,
        progress: ProgressCallback = no_progress,
        cancel: CancelToken | None = None,
    ) -> VectorIndex:
        """An index holding `vectors` under `ids`. `kind` is "flat", "ivf", "compressed" or
        "auto" (`choose_kind` under `memory_budget`). An IVF build trains k-means on a sample (it
        can take a minute at a million vectors); `progress` and `cancel` follow engine.progress.
        A compressed index writes its vector file beside `vectors_path` (the index file's path),
        which it then needs."""
        check_kind(kind)
        vectors = np.asarray(vectors)
        if vectors.ndim != 2:
            raise ValueError(f"vectors must be a 2-D array, got shape {vectors.shape}")
        ids, vectors = _dedupe_keep_last(_as_ids(ids), vectors)
        n = len(ids)

        def chunks() -> Iterator[tuple[np.ndarray, np.ndarray]]:
            for start in range(0, n, _ADD_CHUNK):
                yield ids[start : start + _ADD_CHUNK], vectors[start : start + _ADD_CHUNK]

        def sample(size: int) -> np.ndarray:
            # A fixed seed: the same collection gives the same index.
            rows = np.sort(np.random.default_rng(0).choice(n, size=min(n, size), replace=False))
            return np.asarray(vectors[rows])

        return cls.build_streamed(
            vectors.shape[1],
            n,
            chunks,
            sample,
            kind,
            vectors_path=vectors_path,
            memory_budget=memory_budget,
            progress=progress,
            cancel=cancel,
        )

    @classmethod
    def build_streamed(
        cls,
        dim: int,
        count: int,
        chunks: Callable[[], Iterator[tuple[np.ndarray, np.ndarray]]],
        sample: Callable[[int], np.ndarray],
        kind: str = "auto",
        *,
        vectors_path: Path | None = None,
        memory_budget: int | None = None,
        progress: ProgressCallback = no_progress,
        cancel: CancelToken | None = None,
    ) -> VectorIndex:
        """`build` from a stream, so memory holds one chunk of the input at a time: `chunks()`
        yields (ids, vectors) chunks of `count` vectors with unique ids in all (called once,
        twice for the compressed kind: index, then vector file), `sample(size)` returns up to
        `size` vectors drawn at random to train on."""
        check_kind(kind)
        if dim <= 0:
            raise ValueError(f"vector dimension must be positive, got {dim}")
        if kind == "auto":
            kind = choose_kind(count, dim, memory_budget)
        if kind == "flat":
            self = cls(dim)
            self._add_stream(chunks(), count, progress, cancel)
            self.memory_budget = memory_budget
            return self
        if count == 0:
            raise ValueError("an IVF index needs vectors to train on; build a flat index instead")
        if kind == "compressed" and vectors_path is None:
            raise ValueError("a compressed index needs a path for its vector file")
        ivf = trained_ivf(
            kind,
            dim,
            count,
            lambda size: _normalised(sample(size), dim),
            memory_budget,
            progress,
            cancel,
        )
        self = cls.__new__(cls)
        self._setup(ivf)
        self.memory_budget = memory_budget
        self._add_stream(chunks(), count, progress, cancel)
        if kind == "compressed":
            assert vectors_path is not None
            self._vectors = VectorFile.create(
                vectors_path,
                dim,
                ((ids, _normalised(v, dim)) for ids, v in chunks()),
                total=count,
                progress=progress,
                cancel=cancel,
            )
        return self

    @classmethod
    def _wrap(cls, index: FaissIndex) -> VectorIndex:
        """A VectorIndex over a FAISS index built elsewhere (benchmarks)."""
        self = cls.__new__(cls)
        self._setup(index)
        return self

    def _add_stream(
        self,
        chunks: Iterator[tuple[np.ndarray, np.ndarray]],
        total: int,
        progress: ProgressCallback,
        cancel: CancelToken | None,
    ) -> None:
        """Fill a freshly made index with unique ids from `chunks`; no replacement check."""
        id_parts: list[np.ndarray] = []
        done = 0
        for ids, vectors in chunks:
            if cancel is not None:
                cancel.check()
            ids = _as_ids(ids)
            for start in range(0, len(ids), _ADD_CHUNK):
                part = slice(start, start + _ADD_CHUNK)
                self._index.add_with_ids(_normalised(vectors[part], self.dim), ids[part])
            id_parts.append(ids)
            done += len(ids)
            progress(Progress(done, max(total, done), message="adding"))
        all_ids = np.concatenate(id_parts) if id_parts else np.empty(0, dtype=np.int64)
        self._sorted_ids = np.sort(all_ids)
        self._lookup = None

    @classmethod
    def load(cls, path: Path) -> VectorIndex:
        """Read an index file written by `save`, after verifying it against its checksum file.

        Raises QuadratError if it is missing or not a vector index of this application, and
        its subclass CorruptIndexError if it fails the check: a size or digest other than the
        checksum file records, a missing or unreadable checksum file (a file written by an older
        Quadrat, or a save cut short between its two renames), or a layout FAISS cannot read.
        """
        path = Path(path)
        if not path.is_file():
            raise QuadratError(f"Vector index file not found: {path}")
        record = verify_checksum(path)
        try:
            read = faiss.read_index(str(path))
        except (RuntimeError, MemoryError) as exc:
            reason = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
            raise QuadratError(
                f"Vector index file {path} is corrupt or unreadable ({reason[:160]})"
            ) from exc
        index = checked_layout(read, path)
        if (int(index.ntotal), int(index.d)) != (record["vectors"], record["dim"]):
            raise CorruptIndexError(
                f"Vector index file {path} is corrupt or unreadable: it holds {index.ntotal} "
                f"vectors of {index.d} dimensions, its checksum file records "
                f"{record['vectors']} of {record['dim']}"
            )
        self = cls.__new__(cls)
        self._setup(index)
        log.info("Loaded %s index of %d vectors from %s", self.kind, len(self), path)
        return self

    def save(self, path: Path) -> None:
        """Write the index to `path` and its checksum file beside it, atomically (see
        `engine.vectors.files.write_verified`: a failed write leaves both old files untouched).

        Raises QuadratError naming the cause and the way on when the disk is full, read-only or
        not writable.
        """

        def write(temporary: str) -> IndexShape:
            with self._lock:
                if self._vectors is not None:
                    self._vectors.flush()  # its rows are on disk already; this saves its map
                faiss.write_index(self._index, temporary)
                return len(self), self.dim, self.kind

        write_verified(Path(path), write)

    # ------------------------------------------------------------------ contents

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        """Add `vectors` (n, dim) under `ids` (n,). An id already present has its vector
        replaced; within one call the last occurrence of an id wins."""
        ids = _as_ids(ids)
        vectors = _normalised(vectors, self.dim)
        if len(ids) != len(vectors):
            raise ValueError(f"{len(ids)} ids for {len(vectors)} vectors")
        ids, vectors = _dedupe_keep_last(ids, vectors)
        if len(ids) == 0:
            return
        with self._lock:
            if self.kind == "compressed":
                # The vector file first: an index must never hold an id it cannot re-rank.
                self._require_vectors().add(ids, vectors)
            existing = ids[_isin_sorted(ids, self._sorted_ids)]
            if len(existing):
                self._remove_present(existing)
            self._index.add_with_ids(vectors, ids)
            self._sorted_ids = _sorted_unique(np.concatenate([self._sorted_ids, ids]))
            self._lookup = None

    def remove(self, ids: np.ndarray) -> int:
        """Remove the given ids (absent ones are ignored); returns how many were removed.
        Costs one pass over a flat index per call, so pass them in one batch."""
        ids = _sorted_unique(_as_ids(ids))
        with self._lock:
            present = ids[_isin_sorted(ids, self._sorted_ids)]
            if len(present) == 0:
                return 0
            removed = self._remove_present(present)
            if self._vectors is not None:
                self._vectors.remove(present)
            self._sorted_ids = self._sorted_ids[~_isin_sorted(self._sorted_ids, present)]
            self._lookup = None
            return removed

    def _remove_present(self, ids: np.ndarray) -> int:
        removed = int(self._index.remove_ids(removal_selector(self.kind, ids)))
        if removed != len(ids):
            log.warning("Asked to remove %d vectors, FAISS removed %d", len(ids), removed)
        return removed

    def ids(self) -> np.ndarray:
        """All ids in the index, sorted ascending (int64). A copy of a kept array: no vector is
        reconstructed."""
        with self._lock:
            return self._sorted_ids.copy()

    def _read_ids_from_faiss(self) -> np.ndarray:
        index = self._index
        if isinstance(index, faiss.IndexIDMap2):
            ids = faiss.vector_to_array(index.id_map)
        else:
            lists = index.invlists
            assert lists is not None  # an IVF index owns its inverted lists
            parts = [
                faiss.rev_swig_ptr(lists.get_ids(i), lists.list_size(i)).copy()
                for i in range(index.nlist)
                if lists.list_size(i)
            ]
            ids = np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)
        return _sorted_unique(ids.astype(np.int64, copy=False))

    def __len__(self) -> int:
        return int(self._index.ntotal)

    def __contains__(self, image_id: object) -> bool:
        if not isinstance(image_id, int | np.integer):
            return False
        with self._lock:
            position = np.searchsorted(self._sorted_ids, image_id)
            return bool(position < len(self._sorted_ids) and self._sorted_ids[position] == image_id)

    @property
    def nprobe(self) -> int:
        """IVF lists probed per query (more: better recall, slower). 0 for a flat index."""
        return int(self._index.nprobe) if isinstance(self._index, faiss.IndexIVF) else 0

    @nprobe.setter
    def nprobe(self, value: int) -> None:
        if value < 1:
            raise ValueError(f"nprobe must be at least 1, got {value}")
        if isinstance(self._index, faiss.IndexIVF):
            self._index.nprobe = min(int(value), int(self._index.nlist))

    @property
    def nlist(self) -> int:
        """Number of IVF lists; 0 for a flat index."""
        return int(self._index.nlist) if isinstance(self._index, faiss.IndexIVF) else 0

    def needs_rebuild(self) -> bool:
        """True when `build(kind="auto")` on the current contents, under `memory_budget`, would
        give a different kind (or many more lists): the library should rebuild from the catalog.
        The rule, and why it waits before moving to a smaller kind, is
        `engine.vectors.policy.needs_rebuild`."""
        return needs_rebuild(
            self.kind, self.codec, len(self), self.dim, self.nlist, self.memory_budget
        )

    @property
    def codec(self) -> str | None:
        """The codes of a compressed index ("sq8" or "pq"); None for the other kinds."""
        return codec_of(self._index)

    # ------------------------------------------------------------------ stored vectors

    @property
    def needs_vectors(self) -> bool:
        """Whether this kind re-ranks from a vector file (`attach_vectors`)."""
        return self.kind == "compressed"

    @property
    def vectors(self) -> VectorFile | None:
        """The attached vector file of a compressed index (None otherwise)."""
        return self._vectors

    def attach_vectors(self, vectors: VectorFile) -> None:
        """Re-rank with `vectors` from now on (a compressed index opened by `load`)."""
        if vectors.dim != self.dim:
            raise ValueError(f"vectors of {vectors.dim} dimensions for an index of {self.dim}")
        with self._lock:
            self._vectors = vectors

    def _require_vectors(self) -> VectorFile:
        if self._vectors is None:
            raise QuadratError("the compressed vector index has no vector file attached")
        return self._vectors

    # ------------------------------------------------------------------ search

    def search(
        self, query: np.ndarray, k: int, allowed_ids: np.ndarray | None = None
    ) -> list[tuple[int, float]]:
        """The up to `k` best (id, score) for one query vector (dim,), best first, ties by
        smaller id. `allowed_ids` restricts the search to those ids."""
        query = np.asarray(query)
        if query.ndim != 1:
            raise ValueError(f"search takes one vector of shape ({self.dim},), got {query.shape}")
        return self.search_many(query[None, :], k, allowed_ids)[0]

    def search_many(
        self, queries: np.ndarray, k: int, allowed_ids: np.ndarray | None = None
    ) -> list[list[tuple[int, float]]]:
        """`search` for each row of `queries` (nq, dim), in one batch."""
        queries = _normalised(queries, self.dim)
        empty: list[list[tuple[int, float]]] = [[] for _ in range(len(queries))]
        if k <= 0 or len(queries) == 0:
            return empty
        with self._lock, omp_threads(1 if len(queries) < FEW_QUERIES else None):
            if len(self) == 0:
                return empty
            if allowed_ids is None:
                return self._search_all(queries, k)
            allowed, allowed_lists = self._present(allowed_ids)
            if len(allowed) == 0:
                return empty
            if filtered.scored_directly(len(allowed)):
                return self._score_subset(queries, k, allowed)
            return self._search_filtered(queries, k, allowed, allowed_lists)

    def _search_all(self, queries: np.ndarray, k: int) -> list[list[tuple[int, float]]]:
        """An unfiltered search, with the index's own nprobe."""
        params: faiss.SearchParameters | None = None
        if isinstance(self._index, faiss.IndexIVF):
            ivf_params = faiss.SearchParametersIVF()
            ivf_params.nprobe = self._index.nprobe
            params = ivf_params
        return self._ranked(queries, k, plain_search(self._index, params), len(self))

    def _search_filtered(
        self, queries: np.ndarray, k: int, allowed: np.ndarray, allowed_lists: np.ndarray
    ) -> list[list[tuple[int, float]]]:
        """A search through FAISS restricted to `allowed` (sorted, present ids, too many to score
        directly), held in the IVF lists `allowed_lists` (see engine.vectors.filtered)."""
        selector = filtered.id_selector(allowed, len(self))
        if not isinstance(self._index, faiss.IndexIVF):
            flat_params = faiss.SearchParameters()
            flat_params.sel = selector
            return self._ranked(queries, k, plain_search(self._index, flat_params), len(allowed))
        lookup = self._filter_lookup()
        lists = filtered.choose_lists(self._index, lookup, queries, k, allowed_lists)
        # The compressed codes are residuals: a list's scores add the query's centroid score.
        centroids = lookup.centroids if self.kind == "compressed" else None
        search = filtered.preassigned_search(self._index, lists, selector, centroids)
        results = self._ranked(queries, k, search, len(allowed))
        # The chosen lists hold at least k allowed vectors, so a short list means scores
        # FAISS could not order (NaN): scoring those queries directly finds the damage.
        wanted = min(k, len(allowed))
        short = [row for row, found in enumerate(results) if len(found) < wanted]
        if short:
            log.debug("Filtered IVF search short for %d queries: exact", len(short))
            exact = self._score_subset(queries[short], k, allowed)
            for row, found in zip(short, exact, strict=True):
                results[row] = found
        return results

    def _ranked(
        self, queries: np.ndarray, k: int, search: RowSearch, available: int
    ) -> list[list[tuple[int, float]]]:
        """The strict order of what `search` finds (of at most `available` vectors): re-ranked
        from the vector file for the compressed kind, FAISS's own scores for the others."""
        if self.kind == "compressed":
            vectors = self._require_vectors()
            return search_shortlist(queries, k, search, available, vectors, self.rerank_factor)
        return search_faiss(queries, k, search, available, exact=self.kind == "flat")

    def _score_subset(
        self, queries: np.ndarray, k: int, allowed: np.ndarray
    ) -> list[list[tuple[int, float]]]:
        """Exact scores of `queries` against the vectors of `allowed` (sorted, present ids):
        read from the vector file where there is one, else reconstructed by FAISS."""
        vectors_of: Callable[[np.ndarray], np.ndarray] = (
            self._vectors.get if self._vectors is not None else self._index.reconstruct_batch
        )
        return score_subset(queries, k, allowed, vectors_of)

    def _present(self, allowed_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the allowed ids present in the index, sorted; the IVF list of each, 0 for flat)."""
        allowed = _as_ids(allowed_ids)
        if len(allowed) > 1 and not bool(np.all(allowed[1:] > allowed[:-1])):
            allowed = _sorted_unique(allowed)  # the search layer usually hands them sorted
        return self._filter_lookup().locate(allowed, self._sorted_ids)

    def _filter_lookup(self) -> filtered.FilterLookup:
        """The lookup tables of filtered searches, built on first use after any change."""
        if self._lookup is None:
            started = time.perf_counter()
            self._lookup = filtered.FilterLookup.build(self._index, self._sorted_ids)
            log.debug(
                "Filter lookup for %d vectors built in %.3f s (%d bytes)",
                len(self._sorted_ids),
                time.perf_counter() - started,
                self._lookup.nbytes,
            )
        return self._lookup

    @property
    def filter_lookup_bytes(self) -> int:
        """Memory held beside FAISS for filtered searches (0 until the first one after a
        change): an id -> IVF list table (4 bytes per id up to the largest) and, for IVF, the
        lists' lengths and centroids."""
        with self._lock:
            return 0 if self._lookup is None else self._lookup.nbytes


# ---------------------------------------------------------------------- helpers


def _as_ids(ids: np.ndarray) -> np.ndarray:
    array = np.asarray(ids)
    if array.ndim != 1:
        raise ValueError(f"ids must be a 1-D array, got shape {array.shape}")
    if len(array) and not np.issubdtype(array.dtype, np.integer):
        raise ValueError(f"ids must be integers, got {array.dtype}")
    array = np.ascontiguousarray(array, dtype=np.int64)
    if len(array) and array.min() < 0:
        raise ValueError("ids must not be negative")  # -1 is FAISS's "no result"
    return array


def _normalised(vectors: np.ndarray, dim: int) -> np.ndarray:
    array = np.asarray(vectors, dtype=np.float32)
    if array.ndim != 2 or array.shape[1] != dim:
        raise ValueError(f"expected vectors of shape (n, {dim}), got {array.shape}")
    norms = np.linalg.norm(array, axis=1, keepdims=True)
    if not np.all(np.isfinite(norms)) or np.any(norms == 0):
        raise ValueError("vectors must be finite and non-zero")
    return np.ascontiguousarray(array / norms, dtype=np.float32)


def _dedupe_keep_last(ids: np.ndarray, vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if len(ids) != len(vectors):
        raise ValueError(f"{len(ids)} ids for {len(vectors)} vectors")
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    # Of each run of equal ids (stable sort: in input order) keep the last one.
    is_last = np.append(sorted_ids[1:] != sorted_ids[:-1], True) if len(ids) else np.ones(0, bool)
    if is_last.all():
        return ids, vectors
    keep = np.sort(order[is_last])
    return ids[keep], vectors[keep]


def _sorted_unique(array: np.ndarray) -> np.ndarray:
    # np.unique in numpy >= 2.3 hashes, which is many times slower than sorting for int64 ids.
    result = np.sort(array)
    if len(result) > 1:
        result = result[np.append(True, result[1:] != result[:-1])]
    return result


def _isin_sorted(values: np.ndarray, sorted_ids: np.ndarray) -> np.ndarray:
    if len(sorted_ids) == 0:
        return np.zeros(len(values), dtype=bool)
    positions = np.minimum(np.searchsorted(sorted_ids, values), len(sorted_ids) - 1)
    found: np.ndarray = sorted_ids[positions] == values
    return found
