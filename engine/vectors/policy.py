"""The vector index's sizing policy: which kind, how many lists, how much memory.

Pure arithmetic over a collection's size, its dimension and the memory the user lets the index
take (setting `index_memory_gb`); nothing here touches FAISS. `choose_kind` picks the kind a
build makes, `estimated_memory` is the estimate behind it, and `needs_rebuild` says when an
index that has grown, shrunk or lost its budget should be built again as another kind.
"""

from __future__ import annotations

import math

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

COMPRESSED_NPROBE_FRACTION: float = 1 / 64
"""The compressed kind probes this share of its lists. At 5M clustered 512-d vectors and 4,096
lists (docs/BENCHMARKS.md, "Five million photos"), 8-bit codes re-ranked from 400: recall@100
0.985 at 64 lists (8-21 ms median in three runs) and 0.998 at 128 (13-51 ms) on a busy 2-core
machine: each list probed is a scan of a byte per dimension of every vector in it."""

# The compressed kind's lists: 4 * sqrt(N) as for IVF-Flat, at most this many. Assigning 5M
# vectors to 8,192 lists costs twice as long as to 4,096 (the build is dominated by it on two
# cores); a query scans the same share of the vectors either way (`default_nprobe`).
_COMPRESSED_MAX_LISTS: int = 4096

COMPRESSED_TRAIN_SAMPLE: int = 65_536
"""Vectors the product quantizer trains on (FAISS asks for 39 per centroid, 256 centroids)."""

MIN_NPROBE: int = 16
NPROBE_FRACTION: float = 1 / 32
"""The default nprobe is this fraction of the IVF lists (at least `MIN_NPROBE`). From the
benchmark in docs/BENCHMARKS.md (clustered 512-d data, top-100): at 1M vectors and 4,000 lists,
recall@100 was 0.947 at nprobe 64 and 0.986 at 128 (3.3 ms median); at 100k and 1,265 lists,
0.961 at 32 and 0.992 at 64. 1/32 of the lists keeps recall@100 above 0.95 at both sizes."""

TRAIN_POINTS_PER_LIST: int = 40
"""k-means training points per IVF list: FAISS warns below 39; a few more keep it stable, and
more than that mainly costs time (training dominates the build)."""

# An IVF index is rebuilt as flat only when it shrinks well below EXACT_LIMIT, so a library
# hovering around the limit does not retrain k-means on every few additions and removals.
_IVF_SHRINK_FRACTION: float = 0.75
# An IVF index grown to need this many times its trained number of lists is rebuilt: its lists
# have become long (slow) and its centroids were learnt from a much smaller collection.
_IVF_GROWTH_FACTOR: int = 2

# Memory of an index beyond its codes and ids, measured (docs/BENCHMARKS.md): the inverted
# lists grow by doubling, so they hold about a quarter more than their contents, and the
# hashtable of ids takes ~48 bytes an entry. Measured RSS growth: IVF-Flat 2.77 GB at 1M x 512
# (this formula: 2.62), IVF-SQ8 3.45 GB at 5M (3.49); a flat index 2.44 GB at 1M (2.47).
_LIST_SLACK: float = 1.25
_HASHTABLE_BYTES_PER_ID: int = 48
_FLAT_SLACK: float = 1.2


def default_nprobe(nlist: int) -> int:
    """The number of lists an IVF index of `nlist` lists probes per query by default."""
    return min(nlist, max(MIN_NPROBE, math.ceil(nlist * NPROBE_FRACTION)))


def choose_nlist(n_vectors: int) -> int:
    """The number of IVF lists for a collection of `n_vectors`: about 4 * sqrt(N), with at least
    `TRAIN_POINTS_PER_LIST` training points per list."""
    by_size = int(round(4 * math.sqrt(max(n_vectors, 1))))
    return max(1, min(by_size, n_vectors // TRAIN_POINTS_PER_LIST))


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
    return "sq8" if compressed_memory("sq8", n_vectors, dim) <= budget else "pq"


def compressed_memory(codec: str, n_vectors: int, dim: int) -> int:
    """Bytes a compressed index of `codec` codes over `n_vectors` takes in memory, roughly."""
    code_bytes = dim if codec == "sq8" else pq_shape(dim, COMPRESSED_TRAIN_SAMPLE)[0]
    return _ivf_memory(code_bytes, n_vectors, choose_compressed_nlist(n_vectors), dim)


def _ivf_memory(code_bytes: int, n_vectors: int, nlist: int, dim: int) -> int:
    per_vector = (code_bytes + 8) * _LIST_SLACK + _HASHTABLE_BYTES_PER_ID
    return int(n_vectors * per_vector) + nlist * dim * 4


def pq_shape(dim: int, training_points: int) -> tuple[int, int]:
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
        return compressed_memory(codec, n_vectors, dim)
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


def needs_rebuild(
    kind: str,
    codec: str | None,
    n_vectors: int,
    dim: int,
    nlist: int,
    memory_budget: int | None = None,
) -> bool:
    """Whether an index of `kind` (with `codec` codes and `nlist` lists) now holding
    `n_vectors` should be built again: True when `choose_kind` under `memory_budget` would give
    a different kind (or many more lists).

    A kind is left for a bigger one as soon as `choose_kind` says so (past a size limit or
    over the budget). It is left for a smaller one only once a quarter below the limit (the
    collection, or the memory the smaller kind would take against the budget), so a collection
    hovering at a limit is not retrained again and again. IVF kinds are also rebuilt once grown
    about fourfold since training.
    """
    wanted = choose_kind(n_vectors, dim, memory_budget)
    if kind == "flat":
        return wanted != "flat"
    budget = DEFAULT_MEMORY_BUDGET if memory_budget is None else memory_budget
    if kind == "ivf":
        if wanted == "compressed":
            return True
        if n_vectors < _IVF_SHRINK_FRACTION * EXACT_LIMIT:
            return True
        return choose_nlist(n_vectors) >= _IVF_GROWTH_FACTOR * nlist
    if wanted != "compressed":
        smaller = estimated_memory(wanted, n_vectors, dim)
        limit = EXACT_LIMIT if wanted == "flat" else COMPRESSED_LIMIT
        if n_vectors < _IVF_SHRINK_FRACTION * limit and smaller < _IVF_SHRINK_FRACTION * budget:
            return True
    if codec == "sq8" and compressed_memory("sq8", n_vectors, dim) > budget:
        return True  # the budget was lowered: product-quantized codes
    if codec == "pq" and compressed_memory("sq8", n_vectors, dim) < _IVF_SHRINK_FRACTION * budget:
        return True  # the budget was raised well above what 8-bit codes need
    return choose_compressed_nlist(n_vectors) >= _IVF_GROWTH_FACTOR * nlist
