"""The vector index: FAISS over L2-normalised image embeddings, keyed by catalog image ids.

One index per (library, model) lives in one file. The catalog's `embeddings` table is the source
of truth; this file is a cache the library repairs at open, which is why the index reports its
ids cheaply and adds/removes in batches.

Three kinds, chosen by size and by the memory the user lets the index take (`choose_kind`):

- ``"flat"``: exact search, ``IndexIDMap2`` over ``IndexFlatIP``. Used up to `EXACT_LIMIT`.
- ``"ivf"``: approximate search, ``IndexIVFFlat`` (inner product) with a hashtable direct map,
  so ids are stored natively in the inverted lists and can be removed and reconstructed.
  ``IndexIDMap2`` is not used here: its removal compacts ids the way a flat index does, which
  would scramble the mapping of an IVF index. Used up to `COMPRESSED_LIMIT` while it fits the
  memory budget (4 bytes per dimension per vector: 10 GB at 5M x 512).
- ``"compressed"``: IVF over 8-bit scalar-quantized vectors (``IndexIVFScalarQuantizer``, one
  byte per dimension) or, where even that exceeds the budget, product-quantized ones
  (``IndexIVFPQ``, `PQ_BYTES_PER_DIMENSION`) finds a shortlist of `rerank_factor` x k, which
  is re-ranked exactly with the vectors of a memory-mapped float16 file beside the index
  (engine.vectors.vectorfile; attached by the library with `attach_vectors`). Used above
  `COMPRESSED_LIMIT`, or whenever IVF-Flat would exceed the memory budget.

Vectors are L2-normalised on the way in (a no-op for vectors that already are), so scores are
cosine similarities. Results are a strict order: score descending, ties broken by smaller id.

Safe to share between threads: FAISS must not be searched while it is modified, so every
public method takes an internal lock and concurrent searches and updates run one at a time.

Filtered searches (`allowed_ids`) keep no second copy of the vectors. Up to `SMALL_FILTER_LIMIT`
allowed ids are scored directly. Larger filters go to FAISS as a bitmap of ids; an IVF search scans
only lists that hold allowed vectors, nearest centroid first, as many as an unfiltered search
probes and enough for `FILTER_CANDIDATES_PER_RESULT` allowed vectors per result, or all of them
(exact) when that costs little more (`EXACT_COST_SLACK`). What this needs beside FAISS (each
id's list, the centroids: about 12 MB at 1M vectors) is built by the first filtered search and
dropped by every change.

The file is verified: `save` writes a checksum file beside it (``<name>.faiss.check.json``:
algorithm, digest, size, vector count) and `load` refuses a file that does not match it, so
damage inside the vector data is never served. Searches check that every score is one a cosine
similarity can have (within [-1, 1], not NaN); anything else raises `CorruptIndexError` and the
library rebuilds the file from the catalog.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import math
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from engine.errors import CorruptIndexError, QuadratError
from engine.progress import CancelToken, Progress, ProgressCallback, no_progress
from engine.vectors.vectorfile import VectorFile

log = logging.getLogger(__name__)

EXACT_LIMIT: int = 200_000
"""At or below this many vectors, `VectorIndex.build(kind="auto")` chooses exact search."""

COMPRESSED_LIMIT: int = 2_000_000
"""Above this many vectors `choose_kind` takes the compressed kind whatever the budget."""

DEFAULT_MEMORY_BUDGET: int = 4 * 1024**3
"""Memory the index may take by default: 4 GiB, an eighth of a 32 GB workstation, which leaves
room for the model, the window and the page cache of the vector file (5 GB at 5M photos)."""

# Below this many vectors a compressed index has too little to train on: flat, whatever the
# budget (200k x 512 flat takes 0.4 GB).
_MIN_COMPRESSED: int = 10_000

PQ_BYTES_PER_DIMENSION: float = 0.25
"""Code bytes per dimension of the product-quantized codec (8 bits per sub-quantizer of 4
dimensions: 128 bytes at 512-d). Chosen by tests/bench/bench_5m.py at 500k clustered vectors
(docs/BENCHMARKS.md, "Five million photos"): 64 bytes re-ranked from a 400 shortlist reached
recall@100 0.83 (0.93 from 1,000), 128 bytes 0.96 (0.99), 8-bit scalar codes 0.997."""

RERANK_FACTOR: int = 4
"""The compressed kind re-ranks a shortlist of this many times k exactly."""

COMPRESSED_NPROBE_FRACTION: float = 1 / 64
"""The compressed kind probes this share of its lists. At 5M clustered 512-d vectors and 4,096
lists (docs/BENCHMARKS.md, "Five million photos"), 8-bit codes re-ranked from 400: recall@100
0.985 at 64 lists (8-21 ms median in three runs) and 0.998 at 128 (13-51 ms) on a busy 2-core
machine: each list probed is a scan of a byte per dimension of every vector in it."""

# The shortest shortlist re-ranked: a few hundred rows of the vector file cost well under a
# millisecond, and a small k (10) would otherwise re-rank too few to recover PQ's errors.
_MIN_SHORTLIST: int = 200
# The compressed kind's lists: 4 * sqrt(N) as for IVF-Flat, at most this many. Assigning 5M
# vectors to 8,192 lists costs twice as long as to 4,096 (the build is dominated by it on two
# cores); a query scans the same share of the vectors either way (`default_nprobe`).
_COMPRESSED_MAX_LISTS: int = 4096
# Vectors the product quantizer trains on (FAISS asks for 39 per centroid, 256 centroids).
_COMPRESSED_TRAIN_SAMPLE: int = 65_536

MIN_NPROBE: int = 16
NPROBE_FRACTION: float = 1 / 32
"""The default nprobe is this fraction of the IVF lists (at least `MIN_NPROBE`). From the
benchmark in docs/BENCHMARKS.md (clustered 512-d data, top-100): at 1M vectors and 4,000 lists,
recall@100 was 0.947 at nprobe 64 and 0.986 at 128 (3.3 ms median); at 100k and 1,265 lists,
0.961 at 32 and 0.992 at 64. 1/32 of the lists keeps recall@100 above 0.95 at both sizes."""

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
most this many times the lists it would choose otherwise (`_scan_cost`)."""

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

# An IVF index is rebuilt as flat only when it shrinks well below EXACT_LIMIT, so a library
# hovering around the limit does not retrain k-means on every few additions and removals.
_IVF_SHRINK_FRACTION: float = 0.75
# An IVF index grown to need this many times its trained number of lists is rebuilt: its lists
# have become long (slow) and its centroids were learnt from a much smaller collection.
_IVF_GROWTH_FACTOR: int = 2

# k-means training: FAISS warns below 39 points per centroid; a few more keep it stable, and
# more than that mainly costs time (training dominates the build).
_TRAIN_POINTS_PER_LIST: int = 40
_KMEANS_ITERATIONS: int = 10
_ADD_CHUNK: int = 65_536
_SCORE_CHUNK: int = 65_536
# Batches smaller than this are searched on one OpenMP thread. Measured on 2 cores shared with
# another busy process: a single flat query over 200k vectors took ~24 ms on one thread and
# 65-90 ms on two (the threads wait on each other at every barrier). FAISS batches of 20 or
# more queries go through BLAS and keep the default thread count.
_FEW_QUERIES: int = 20

_KINDS = ("flat", "ivf", "compressed")

CHECKSUM_SUFFIX: str = ".check.json"
"""The checksum file of ``X.faiss`` is ``X.faiss.check.json`` (see `checksum_path`)."""
_CHECKSUM_FORMAT = "quadrat-vector-index-checksum"
_CHECKSUM_VERSION = 1
# SHA-256 runs on the CPU's SHA extensions through OpenSSL. Measured on a shared 2-core VM, file
# in the page cache: 0.13-0.14 s for a 100k x 512 flat file (205 MB) and 1.8-2.1 s for 1M x 512
# (2.06 GB), against 0.1 s and 3.2 s for FAISS to read them. CRC-32 was only 1.5x faster there
# (1.2 s at 1M, bound by reading the file) and is a weak check; BLAKE2b and MD5 were slower
# (3.5 s and 4.6 s).
_CHECKSUM_ALGORITHM = "sha256"
_HASH_CHUNK: int = 1 << 20
# The first four bytes FAISS writes for the two layouts this module saves (IVF-Flat had "IvFl"
# in older FAISS versions).
_OUR_FOURCCS = (b"IxM2", b"IwFl", b"IvFl", b"IwPQ", b"IwSq")
# Digests a checksum file may name (a later version may choose another); SHAKE needs a length.
_KNOWN_ALGORITHMS = frozenset(a for a in hashlib.algorithms_guaranteed if not a.startswith("shake"))

# faiss's type stubs (faiss-cpu 1.15) omit the SWIG class DirectMap, present at runtime.
_HASHTABLE_DIRECT_MAP: int = faiss.DirectMap.Hashtable  # type: ignore[attr-defined]

SCORE_TOLERANCE: float = 1e-3
"""A score further than this outside [-1, 1] cannot come from unit vectors (float32 rounding
stays below 1e-5 at 512 dimensions): the index is damaged."""


def default_nprobe(nlist: int) -> int:
    """The number of lists an IVF index of `nlist` lists probes per query by default."""
    return min(nlist, max(MIN_NPROBE, math.ceil(nlist * NPROBE_FRACTION)))


def choose_nlist(n_vectors: int) -> int:
    """The number of IVF lists for a collection of `n_vectors`: about 4 * sqrt(N), with at least
    `_TRAIN_POINTS_PER_LIST` training points per list."""
    by_size = int(round(4 * math.sqrt(max(n_vectors, 1))))
    return max(1, min(by_size, n_vectors // _TRAIN_POINTS_PER_LIST))


def compressed_nprobe(nlist: int) -> int:
    """The lists a compressed index of `nlist` lists probes per query by default: half the
    share IVF-Flat probes (`COMPRESSED_NPROBE_FRACTION`), at least `MIN_NPROBE`."""
    return min(nlist, max(MIN_NPROBE, math.ceil(nlist * COMPRESSED_NPROBE_FRACTION)))


def choose_compressed_nlist(n_vectors: int) -> int:
    """The number of IVF lists of a compressed index of `n_vectors` (see `choose_nlist`)."""
    return min(choose_nlist(n_vectors), _COMPRESSED_MAX_LISTS)


def choose_codec(n_vectors: int, dim: int, memory_budget: int | None = None) -> str:
    """The codes of a compressed index: "sq8" (a byte per dimension) where they fit the budget,
    else "pq" (`PQ_BYTES_PER_DIMENSION`)."""
    budget = DEFAULT_MEMORY_BUDGET if memory_budget is None else memory_budget
    return "sq8" if _compressed_memory("sq8", n_vectors, dim) <= budget else "pq"


def _compressed_memory(codec: str, n_vectors: int, dim: int) -> int:
    code_bytes = dim if codec == "sq8" else _pq_shape(dim, 1 << 16)[0]
    return _ivf_memory(code_bytes, n_vectors, choose_compressed_nlist(n_vectors), dim)


# Memory of an index beyond its codes and ids, measured (docs/BENCHMARKS.md): the inverted
# lists grow by doubling, so they hold about a quarter more than their contents, and the
# hashtable of ids takes ~48 bytes an entry. Measured RSS growth: IVF-Flat 2.77 GB at 1M x 512
# (this formula: 2.62), IVF-SQ8 3.45 GB at 5M (3.49); a flat index 2.44 GB at 1M (2.47).
_LIST_SLACK: float = 1.25
_HASHTABLE_BYTES_PER_ID: int = 48
_FLAT_SLACK: float = 1.2


def _ivf_memory(code_bytes: int, n_vectors: int, nlist: int, dim: int) -> int:
    per_vector = (code_bytes + 8) * _LIST_SLACK + _HASHTABLE_BYTES_PER_ID
    return int(n_vectors * per_vector) + nlist * dim * 4


def _pq_shape(dim: int, training_points: int) -> tuple[int, int]:
    """(sub-quantizers, bits each) of the product-quantized codec for `dim`: 8 bits each for
    `PQ_BYTES_PER_DIMENSION` bytes, fewer sub-quantizers where they must divide `dim`, fewer
    bits where few vectors train them (a tiny library forced into this kind by its budget)."""
    most = max(1, int(dim * PQ_BYTES_PER_DIMENSION))
    subquantizers = max(m for m in range(1, most + 1) if dim % m == 0)
    bits = max(1, min(8, int(math.log2(max(training_points, 2)))))
    return subquantizers, bits


def estimated_memory(kind: str, n_vectors: int, dim: int, memory_budget: int | None = None) -> int:
    """Bytes an index of `kind` over `n_vectors` takes in memory, roughly: the vectors or codes
    and 8 bytes per id, with the slack of their growing arrays, and for IVF kinds the hashtable
    of ids and the centroids. A compressed index's codes are those `choose_codec` picks under
    `memory_budget`."""
    if kind == "flat":
        return int(n_vectors * (4 * dim + 8) * _FLAT_SLACK)
    if kind == "ivf":
        return _ivf_memory(4 * dim, n_vectors, choose_nlist(n_vectors), dim)
    if kind == "compressed":
        codec = choose_codec(n_vectors, dim, memory_budget)
        return _compressed_memory(codec, n_vectors, dim)
    raise ValueError(f"unknown index kind {kind!r}")


def choose_kind(n_vectors: int, dim: int, memory_budget: int | None = None) -> str:
    """The index kind for `n_vectors` of `dim` dimensions under `memory_budget` bytes (None:
    `DEFAULT_MEMORY_BUDGET`): flat up to `EXACT_LIMIT`, IVF-Flat up to `COMPRESSED_LIMIT`,
    compressed above it, and compressed sooner where the budget cannot hold the others."""
    budget = DEFAULT_MEMORY_BUDGET if memory_budget is None else memory_budget
    if n_vectors <= EXACT_LIMIT and estimated_memory("flat", n_vectors, dim) <= budget:
        return "flat"
    if n_vectors <= COMPRESSED_LIMIT and estimated_memory("ivf", n_vectors, dim) <= budget:
        return "ivf"  # (IVF takes more than flat: a flat index that did not fit is not here)
    if n_vectors < _MIN_COMPRESSED:  # too few to train codes on: over budget, but tiny
        return "flat" if n_vectors <= EXACT_LIMIT else "ivf"
    return "compressed"


class VectorIndex:
    """A FAISS index of L2-normalised vectors keyed by int64 image ids (see the module doc)."""

    dim: int
    kind: str

    def __init__(self, dim: int) -> None:
        """An empty exact index of `dim`-dimensional vectors."""
        if dim <= 0:
            raise ValueError(f"vector dimension must be positive, got {dim}")
        self._setup(faiss.IndexIDMap2(faiss.IndexFlatIP(dim)))

    def _setup(self, index: faiss.IndexIDMap2 | faiss.IndexIVF) -> None:
        self._index: faiss.IndexIDMap2 | faiss.IndexIVF = index
        self.dim = int(index.d)
        if isinstance(index, faiss.IndexIVFPQ | faiss.IndexIVFScalarQuantizer):
            self.kind = "compressed"
        else:
            self.kind = "ivf" if isinstance(index, faiss.IndexIVF) else "flat"
        self._lock = threading.RLock()
        # The compressed kind's exact vectors (attach_vectors); None for the others.
        self._vectors: VectorFile | None = None
        self.rerank_factor: int = RERANK_FACTOR
        # The budget `needs_rebuild` judges the kind by; the library sets the user's.
        self.memory_budget: int | None = None
        self._sorted_ids = self._read_ids_from_faiss()
        # Built by the first filtered search and dropped by every change (add, remove), so it
        # never serves a removed vector or misses an added one.
        self._lookup: _FilterLookup | None = None

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
        if kind not in (*_KINDS, "auto"):
            raise ValueError(
                f"unknown index kind {kind!r}; expected 'flat', 'ivf', 'compressed' or 'auto'"
            )
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
        if kind not in (*_KINDS, "auto"):
            raise ValueError(
                f"unknown index kind {kind!r}; expected 'flat', 'ivf', 'compressed' or 'auto'"
            )
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
        quantizer = faiss.IndexFlatIP(dim)
        ivf: faiss.IndexIVF
        if kind == "ivf":
            nlist = choose_nlist(count)
            ivf = faiss.IndexIVFFlat(quantizer, dim, nlist, faiss.METRIC_INNER_PRODUCT)
        else:
            nlist = choose_compressed_nlist(count)
            if choose_codec(count, dim, memory_budget) == "sq8":
                ivf = faiss.IndexIVFScalarQuantizer(
                    quantizer, dim, nlist, faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_INNER_PRODUCT
                )
            else:
                subquantizers, bits = _pq_shape(dim, min(count, _COMPRESSED_TRAIN_SAMPLE))
                pq_index = faiss.IndexIVFPQ(
                    quantizer, dim, nlist, subquantizers, bits, faiss.METRIC_INNER_PRODUCT
                )
                # As many k-means iterations as the lists' (FAISS's default is 25): the codes
                # only pick the shortlist, which is re-ranked exactly.
                pq_index.pq.cp.niter = _KMEANS_ITERATIONS
                ivf = pq_index
        ivf.cp.niter = _KMEANS_ITERATIONS
        ivf.cp.spherical = True  # centroids on the unit sphere, like the data
        sample_size = _TRAIN_POINTS_PER_LIST * nlist
        if kind == "compressed":
            sample_size = max(sample_size, _COMPRESSED_TRAIN_SAMPLE)
        log.info(
            "Training %s index: %d lists on up to %d of %d vectors", kind, nlist, sample_size, count
        )
        progress(Progress(0, count, message="training"))
        training = _normalised(sample(sample_size), dim)
        ivf.train(training)
        del training
        if cancel is not None:
            cancel.check()
        ivf.set_direct_map_type(_HASHTABLE_DIRECT_MAP)
        ivf.nprobe = default_nprobe(nlist) if kind == "ivf" else compressed_nprobe(nlist)
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
    def _wrap(cls, index: faiss.IndexIDMap2 | faiss.IndexIVF) -> VectorIndex:
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
        record = _verify_checksum(path)
        try:
            index = faiss.read_index(str(path))
        except (RuntimeError, MemoryError) as exc:
            reason = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
            raise QuadratError(
                f"Vector index file {path} is corrupt or unreadable ({reason[:160]})"
            ) from exc
        if isinstance(index, faiss.IndexIDMap2):
            inner = faiss.downcast_index(index.index)
            if not isinstance(inner, faiss.IndexFlatIP) or index.id_map.size() != index.ntotal:
                raise QuadratError(f"Vector index file {path} holds an unexpected index layout")
        elif isinstance(
            index, faiss.IndexIVFFlat | faiss.IndexIVFPQ | faiss.IndexIVFScalarQuantizer
        ):
            if index.metric_type != faiss.METRIC_INNER_PRODUCT:
                raise QuadratError(f"Vector index file {path} does not use inner-product scores")
            if index.direct_map.type != _HASHTABLE_DIRECT_MAP:
                index.set_direct_map_type(_HASHTABLE_DIRECT_MAP)
        else:
            raise QuadratError(
                f"Vector index file {path} is not a Quadrat vector index "
                f"(found {type(index).__name__})"
            )
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
        """Write the index to `path` and its checksum file beside it (`checksum_path`).

        Both are written to temporary files in the same folder and flushed to disk first; then
        the index file is renamed over the old one, and the checksum file after it. A failed
        write leaves both old files untouched. A crash between the two renames leaves a new
        index file with the old checksum, which `load` refuses, so the library rebuilds it
        from the catalog rather than trust it.

        Raises QuadratError naming the cause and the way on when the disk is full, read-only or
        not writable (FAISS reports those as a RuntimeError with C++ assertion text).
        """
        path = Path(path)
        folder = path.parent
        temporaries: list[str] = []
        try:
            folder.mkdir(parents=True, exist_ok=True)
            fd, tmp_index = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
            os.close(fd)
            temporaries.append(tmp_index)
            with self._lock:
                if self._vectors is not None:
                    self._vectors.flush()  # its rows are on disk already; this saves its map
                faiss.write_index(self._index, tmp_index)
                vectors, dim, kind = len(self), self.dim, self.kind
            with open(tmp_index, "rb+") as written:
                os.fsync(written.fileno())
            size, digest = _file_digest(Path(tmp_index))
            record = {
                "format": _CHECKSUM_FORMAT,
                "version": _CHECKSUM_VERSION,
                "algorithm": _CHECKSUM_ALGORITHM,
                "digest": digest,
                "size": size,
                "vectors": vectors,
                "dim": dim,
                "kind": kind,
            }
            sidecar = checksum_path(path)
            fd, tmp_sidecar = tempfile.mkstemp(
                prefix=f".{sidecar.name}.", suffix=".tmp", dir=folder
            )
            temporaries.append(tmp_sidecar)
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(json.dumps(record, indent=1) + "\n")
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp_index, path)
            temporaries.remove(tmp_index)
            os.replace(tmp_sidecar, sidecar)
            temporaries.remove(tmp_sidecar)
        except RuntimeError as exc:  # FAISS's C++ exceptions
            raise _save_error(exc, folder, path) from exc
        except OSError as exc:
            if exc.errno is None:  # not from the operating system: nothing to explain
                raise
            raise _save_error(exc, folder, path) from exc
        finally:
            for name in temporaries:
                Path(name).unlink(missing_ok=True)
        _fsync_directory(folder)

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
        # The IVF hashtable direct map accepts only an IDSelectorArray for removal.
        array_selector = self.kind != "flat"
        selector = faiss.IDSelectorArray(ids) if array_selector else faiss.IDSelectorBatch(ids)
        removed = int(self._index.remove_ids(selector))
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

        A kind is left for a bigger one as soon as `choose_kind` says so (past a size limit or
        over the budget). It is left for a smaller one only once a quarter below the limit
        (the collection, or the memory the smaller kind would take against the budget), so a
        collection hovering at a limit is not retrained again and again. IVF kinds are also
        rebuilt once grown about fourfold since training.
        """
        n = len(self)
        wanted = choose_kind(n, self.dim, self.memory_budget)
        if self.kind == "flat":
            return wanted != "flat"
        budget = DEFAULT_MEMORY_BUDGET if self.memory_budget is None else self.memory_budget
        if self.kind == "ivf":
            if wanted == "compressed":
                return True
            if n < _IVF_SHRINK_FRACTION * EXACT_LIMIT:
                return True
            return choose_nlist(n) >= _IVF_GROWTH_FACTOR * self.nlist
        if wanted != "compressed":
            smaller = estimated_memory(wanted, n, self.dim)
            limit = EXACT_LIMIT if wanted == "flat" else COMPRESSED_LIMIT
            if n < _IVF_SHRINK_FRACTION * limit and smaller < _IVF_SHRINK_FRACTION * budget:
                return True
        if self.codec == "sq8" and _compressed_memory("sq8", n, self.dim) > budget:
            return True  # the budget was lowered: product-quantized codes
        if self.codec == "pq" and (
            _compressed_memory("sq8", n, self.dim) < _IVF_SHRINK_FRACTION * budget
        ):
            return True  # the budget was raised well above what 8-bit codes need
        return choose_compressed_nlist(n) >= _IVF_GROWTH_FACTOR * self.nlist

    @property
    def codec(self) -> str | None:
        """The codes of a compressed index ("sq8" or "pq"); None for the other kinds."""
        if isinstance(self._index, faiss.IndexIVFPQ):
            return "pq"
        if isinstance(self._index, faiss.IndexIVFScalarQuantizer):
            return "sq8"
        return None

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
        with self._lock, _omp_threads(1 if len(queries) < _FEW_QUERIES else None):
            if len(self) == 0:
                return empty
            if allowed_ids is None:
                params: faiss.SearchParameters | None = None
                if isinstance(self._index, faiss.IndexIVF):
                    ivf_params = faiss.SearchParametersIVF()
                    ivf_params.nprobe = self._index.nprobe
                    params = ivf_params
                plain = _plain_search(self._index, params)
                if self.kind == "compressed":
                    return self._search_shortlist(queries, k, plain, len(self))
                return self._search_faiss(queries, k, plain, len(self))
            allowed, allowed_lists = self._present(allowed_ids)
            if len(allowed) == 0:
                return empty
            if len(allowed) <= SMALL_FILTER_LIMIT:
                return self._score_subset(queries, k, allowed)
            selector = _id_selector(allowed, len(self))
            if not isinstance(self._index, faiss.IndexIVF):
                flat_params = faiss.SearchParameters()
                flat_params.sel = selector
                search = _plain_search(self._index, flat_params)
                return self._search_faiss(queries, k, search, len(allowed))
            lists = self._choose_lists(queries, k, allowed_lists)
            if self.kind == "compressed":
                # IVF-PQ codes are residuals: a list's scores add the query's centroid score.
                centroids = self._filter_lookup().centroids
                search = _preassigned_search(self._index, lists, selector, centroids)
                results = self._search_shortlist(queries, k, search, len(allowed))
            else:
                search = _preassigned_search(self._index, lists, selector)
                results = self._search_faiss(queries, k, search, len(allowed))
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

    def _present(self, allowed_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the allowed ids present in the index, sorted; the IVF list of each, 0 for flat)."""
        allowed = _as_ids(allowed_ids)
        if len(allowed) > 1 and not bool(np.all(allowed[1:] > allowed[:-1])):
            allowed = _sorted_unique(allowed)  # the search layer usually hands them sorted
        return self._filter_lookup().locate(allowed, self._sorted_ids)

    def _filter_lookup(self) -> _FilterLookup:
        """The lookup tables of filtered searches, built on first use after any change."""
        if self._lookup is None:
            started = time.perf_counter()
            self._lookup = _FilterLookup.build(self._index, self._sorted_ids)
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

    def _choose_lists(self, queries: np.ndarray, k: int, allowed_lists: np.ndarray) -> np.ndarray:
        """The IVF lists a filtered search scans, per query (rows padded with -1), given the
        list of each allowed vector.

        Only lists holding allowed vectors are candidates, nearest centroid first. A query scans
        at least as many of them as an unfiltered search probes (so the neighbourhood is covered
        as well) and enough to meet `FILTER_CANDIDATES_PER_RESULT` allowed vectors per result
        asked. When scanning every list with an allowed vector (an exact search) would cost at
        most `EXACT_COST_SLACK` times that, the search is exact.
        """
        assert isinstance(self._index, faiss.IndexIVF)
        lookup = self._filter_lookup()
        assert lookup.list_sizes is not None
        counts = np.bincount(allowed_lists, minlength=self._index.nlist)
        candidates = np.flatnonzero(counts)
        allowed_total = len(allowed_lists)
        target = FILTER_CANDIDATES_PER_RESULT * k
        min_lists = self._index.nprobe
        if target >= allowed_total or min_lists >= len(candidates):
            return np.broadcast_to(candidates, (len(queries), len(candidates)))
        exact_cost = _scan_cost(int(lookup.list_sizes[candidates].sum()), allowed_total)
        candidate_counts = counts[candidates]
        candidate_sizes = lookup.list_sizes[candidates]
        scores = lookup.centroid_scores(queries, candidates)
        chosen: list[np.ndarray] = []
        for row in range(len(queries)):
            order = np.argsort(-scores[row], kind="stable")
            reached = np.cumsum(candidate_counts[order])
            count = int(np.searchsorted(reached, target)) + 1
            count = min(len(order), max(count, min_lists))
            cost = _scan_cost(int(candidate_sizes[order[:count]].sum()), int(reached[count - 1]))
            if exact_cost <= EXACT_COST_SLACK * cost:
                count = len(order)
            chosen.append(candidates[order[:count]])
        width = max(len(row_lists) for row_lists in chosen)
        lists = np.full((len(queries), width), -1, dtype=np.int64)
        for row, row_lists in enumerate(chosen):
            lists[row, : len(row_lists)] = row_lists
        return lists

    def _search_faiss(
        self, queries: np.ndarray, k: int, search: _RowSearch, available: int
    ) -> list[list[tuple[int, float]]]:
        """Run `search` over `queries` and make its results the strict order (see the module
        doc); `available` is how many vectors the search may return at most."""
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
            _check_scores(row_scores)
            if self.kind == "flat" and len(row_ids) < min(k, available):
                # Exact search finds every vector it may; a short list means scores FAISS could
                # not order (NaN), that is, damaged vectors.
                raise CorruptIndexError(
                    f"the vector index returned {len(row_ids)} of {min(k, available)} results "
                    "of an exact search: its vectors are damaged"
                )
            results.append(_strict_top_k(row_ids, row_scores, k))
        return results

    def _search_shortlist(
        self, queries: np.ndarray, k: int, search: _RowSearch, available: int
    ) -> list[list[tuple[int, float]]]:
        """Run `search` for a shortlist of `rerank_factor` x k per query (compressed scores)
        and re-rank it with the exact vectors of the vector file: the strict order."""
        vectors = self._require_vectors()
        fetch = min(max(k * self.rerank_factor, _MIN_SHORTLIST, k + 1), available)
        _, ids = search(queries, slice(0, len(queries)), fetch)
        results = []
        for row in range(len(queries)):
            row_ids = ids[row][ids[row] >= 0]  # FAISS pads with -1 when fewer results exist
            exact = vectors.get(row_ids)
            scores = _inner_products(queries[row : row + 1], exact)[0]
            _check_scores(scores)
            results.append(_strict_top_k(row_ids, scores, k))
        return results

    def _score_subset(
        self, queries: np.ndarray, k: int, allowed: np.ndarray
    ) -> list[list[tuple[int, float]]]:
        """Exact scores of `queries` against the vectors of `allowed` (sorted, present ids)."""
        candidates: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in range(len(queries))]
        for start in range(0, len(allowed), _SCORE_CHUNK):
            chunk_ids = allowed[start : start + _SCORE_CHUNK]
            if self._vectors is not None:
                vectors = self._vectors.get(chunk_ids)
            else:
                vectors = self._index.reconstruct_batch(chunk_ids)
            chunk_scores = _inner_products(queries, vectors)
            _check_scores(chunk_scores)
            for row in range(len(queries)):
                top = _strict_top_k_arrays(chunk_ids, chunk_scores[row], k)
                candidates[row].append(top)
        results = []
        for row_candidates in candidates:
            ids = np.concatenate([c[0] for c in row_candidates])
            scores = np.concatenate([c[1] for c in row_candidates])
            results.append(_strict_top_k(ids, scores, k))
        return results


# ---------------------------------------------------------------------- filtered search

# A search over some rows of the queries: (queries, rows, fetch) -> (scores, ids) of those rows.
_RowSearch = Callable[[np.ndarray, slice, int], tuple[np.ndarray, np.ndarray]]


class _FilterLookup:
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
    ) -> _FilterLookup:
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
        arrays = (self.list_by_id, self.sorted_lists, self.list_sizes, self.centroids)
        return sum(a.nbytes for a in arrays if a is not None)

    def centroid_scores(self, queries: np.ndarray, lists: np.ndarray) -> np.ndarray:
        """Inner products (len(queries), len(lists)) of the queries with those centroids."""
        assert self.centroids is not None
        if len(queries) >= _FEW_QUERIES:
            return _inner_products(queries, self.centroids[lists])
        # All centroids (contiguous, no gather): as fast as the few left out would save.
        return _inner_products(queries, self.centroids)[:, lists]


def _inner_products(queries: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    """(len(queries), len(vectors)) float32 inner products of unit vectors.

    A few queries go one at a time through FAISS's single-threaded SIMD loop rather than BLAS:
    on a busy 2-core machine OpenBLAS handing a small product to its sleeping second thread took
    4-16 ms where the product itself takes 0.05-0.5 ms.
    """
    if len(queries) >= _FEW_QUERIES:
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


def _scan_cost(ids_scanned: int, allowed_scanned: int) -> int:
    """The cost of scanning IVF lists with a filter, in id checks (see the constants)."""
    return ids_scanned + _DISTANCE_COST_IN_ID_CHECKS * allowed_scanned


def _id_selector(allowed: np.ndarray, n_indexed: int) -> faiss.IDSelector:
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


def _plain_search(
    index: faiss.IndexIDMap2 | faiss.IndexIVF, params: faiss.SearchParameters | None
) -> _RowSearch:
    def search(queries: np.ndarray, rows: slice, fetch: int) -> tuple[np.ndarray, np.ndarray]:
        scores, ids = index.search(queries[rows], fetch, params=params)
        return scores, ids

    return search


def _preassigned_search(
    index: faiss.IndexIVF,
    lists: np.ndarray,
    selector: faiss.IDSelector,
    centroids: np.ndarray | None = None,
) -> _RowSearch:
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


# ---------------------------------------------------------------------- file checks


def checksum_path(path: Path) -> Path:
    """The checksum file `VectorIndex.save` writes beside the index file `path`."""
    path = Path(path)
    return path.with_name(path.name + CHECKSUM_SUFFIX)


def _file_digest(path: Path, algorithm: str = _CHECKSUM_ALGORITHM) -> tuple[int, str]:
    """(size in bytes, hex digest) of a file, read in chunks so memory stays flat."""
    started = time.perf_counter()
    digest = hashlib.new(algorithm)
    size = 0
    buffer = bytearray(_HASH_CHUNK)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as handle:
        while count := handle.readinto(buffer):
            digest.update(view[:count])
            size += count
    log.debug(
        "%s of %s (%d bytes) in %.2f s",
        algorithm,
        path.name,
        size,
        time.perf_counter() - started,
    )
    return size, digest.hexdigest()


def _read_checksum_record(sidecar: Path) -> dict[str, object] | None:
    """The parsed checksum file `sidecar`, or None if it is not a well-formed one."""
    try:
        record = json.loads(sidecar.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("format") != _CHECKSUM_FORMAT:
        return None
    digest = record.get("digest")
    numbers = [record.get(key) for key in ("size", "vectors", "dim")]
    if (
        record.get("algorithm") not in _KNOWN_ALGORITHMS
        or not isinstance(digest, str)
        or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in numbers)
    ):
        return None
    return record


def _verify_checksum(path: Path) -> dict[str, object]:
    """Check the index file `path` against its checksum file; return the parsed record.

    Raises CorruptIndexError, naming what failed, for a missing, unreadable or mismatched
    checksum file, and QuadratError for a file that is no vector index of this application.
    """
    sidecar = checksum_path(path)
    if not sidecar.is_file():
        try:
            with open(path, "rb") as handle:
                fourcc = handle.read(4)
        except OSError as exc:
            raise QuadratError(f"Vector index file {path} is unreadable ({exc.strerror})") from exc
        if len(fourcc) < 4:
            raise CorruptIndexError(f"Vector index file {path} is corrupt or unreadable (empty)")
        if fourcc not in _OUR_FOURCCS:
            raise QuadratError(
                f"Vector index file {path} is not a Quadrat vector index "
                f"(header {fourcc!r}, no checksum file)"
            )
        raise CorruptIndexError(
            f"Vector index file {path} has no checksum file {sidecar.name}: it was written by "
            "an older Quadrat or its save was cut short, so it is not trusted"
        )
    record = _read_checksum_record(sidecar)
    if record is None:
        raise CorruptIndexError(
            f"The checksum file {sidecar} of the vector index is garbled or not Quadrat's, so "
            "the index is not trusted"
        )
    algorithm = str(record["algorithm"])
    try:
        size = path.stat().st_size
        if size != record["size"]:
            raise CorruptIndexError(
                f"Vector index file {path} is corrupt or unreadable: {size} bytes where its "
                f"checksum file records {record['size']} (truncated or overwritten)"
            )
        _, actual = _file_digest(path, algorithm)
    except OSError as exc:
        raise CorruptIndexError(
            f"Vector index file {path} is corrupt or unreadable ({exc.strerror or exc})"
        ) from exc
    if actual != record["digest"]:
        raise CorruptIndexError(
            f"Vector index file {path} is corrupt or unreadable: it failed its {algorithm} check"
        )
    return record


# Quota exceeded (EDQUOT) is not defined on every platform.
_DISK_FULL_ERRNOS = (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC), errno.EFBIG)
_SAVE_ERRNOS = (*_DISK_FULL_ERRNOS, errno.EROFS, errno.EACCES, errno.EPERM)
# FAISS may report only "write error" (no reason): a folder with less free space than this is
# taken to be full.
_SMALL_FREE_SPACE: int = 1 << 20


def _save_error(exc: BaseException, folder: Path, path: Path) -> QuadratError:
    """A one-line QuadratError for a failed save: the cause and the way on."""
    text = str(exc)
    code = exc.errno if isinstance(exc, OSError) else None
    if code is None:
        # FAISS says e.g. "... write error in FILE: 1048494 != 2560000 (No space left on device)".
        code = next((c for c in _SAVE_ERRNOS if os.strerror(c) in text), None)
    if code is None and _free_bytes(folder) < _SMALL_FREE_SPACE:
        code = errno.ENOSPC
    keeps = "the catalog keeps every committed photo"
    if code in _DISK_FULL_ERRNOS:
        message = f"no space left on the disk holding {folder}: free some space and try again; "
    elif code == errno.EROFS:
        message = (
            f"the disk holding {folder} is read-only: make it writable or open the library from "
            "a writable copy; "
        )
    elif code in (errno.EACCES, errno.EPERM):
        message = f"no permission to write in {folder}: fix its permissions and try again; "
    else:
        reason = os.strerror(code) if code is not None else _last_line(text)
        message = f"cannot write the vector index {path.name} in {folder} ({reason}); "
    log.info("saving the vector index %s failed: %s", path, text)  # the error says it once
    return QuadratError(message + keeps)


def _free_bytes(folder: Path) -> int:
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return 1 << 62  # unknown: do not claim the disk is full


def _last_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1][-160:] if lines else "unknown error"


def _check_scores(scores: np.ndarray) -> None:
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


def _tie_at_cut(scores: np.ndarray, ids: np.ndarray, k: int) -> bool:
    """Whether the k-th and the (k+1)-th results tie, so the cut at k depends on heap order."""
    return len(ids) > k and ids[k] >= 0 and scores[k] == scores[k - 1]


def _strict_top_k_arrays(
    ids: np.ndarray, scores: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    if len(ids) > k:
        # Everything scoring at least the k-th best score, so ties at the cut are all kept.
        kth_best = np.partition(scores, len(scores) - k)[len(scores) - k]
        mask = scores >= kth_best
        ids, scores = ids[mask], scores[mask]
    order = np.lexsort((ids, -scores))[:k]
    return ids[order], scores[order]


def _strict_top_k(ids: np.ndarray, scores: np.ndarray, k: int) -> list[tuple[int, float]]:
    top_ids, top_scores = _strict_top_k_arrays(ids, scores, k)
    return [(int(i), float(s)) for i, s in zip(top_ids, top_scores, strict=True)]


@contextmanager
def _omp_threads(count: int | None) -> Iterator[None]:
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


def _fsync_directory(folder: Path) -> None:
    # Makes the rename itself durable on POSIX; Windows cannot open a folder for fsync.
    if os.name != "posix":
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


__all__ = [
    "CHECKSUM_SUFFIX",
    "EXACT_LIMIT",
    "SCORE_TOLERANCE",
    "VectorIndex",
    "checksum_path",
    "choose_codec",
    "choose_kind",
    "choose_nlist",
    "compressed_nprobe",
    "default_nprobe",
    "estimated_memory",
]
