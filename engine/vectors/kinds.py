"""The FAISS layouts behind the vector index's three kinds: making, training and recognising them.

- ``"flat"``: ``IndexIDMap2`` over ``IndexFlatIP``, exact.
- ``"ivf"``: ``IndexIVFFlat`` (inner product) with a hashtable direct map, so ids are stored
  natively in the inverted lists and can be removed and reconstructed. ``IndexIDMap2`` is not
  used here: its removal compacts ids the way a flat index does, which would scramble the
  mapping of an IVF index.
- ``"compressed"``: ``IndexIVFScalarQuantizer`` (8-bit codes) or ``IndexIVFPQ``
  (`engine.vectors.policy.PQ_BYTES_PER_DIMENSION`), with the same direct map.

Which kind a collection gets is `engine.vectors.policy`'s choice; this module only builds the
FAISS object for it and tells, from a FAISS object read from disk, which kind it is.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TypeAlias

import faiss
import numpy as np

from engine.errors import QuadratError
from engine.progress import CancelToken, Progress, ProgressCallback
from engine.vectors.policy import (
    COMPRESSED_TRAIN_SAMPLE,
    TRAIN_POINTS_PER_LIST,
    choose_codec,
    choose_compressed_nlist,
    choose_nlist,
    compressed_nprobe,
    default_nprobe,
    pq_shape,
)

log = logging.getLogger(__name__)

KINDS: tuple[str, ...] = ("flat", "ivf", "compressed")
"""The kinds `VectorIndex.build` makes (besides "auto": the policy's choice)."""

KMEANS_ITERATIONS: int = 10
"""k-means iterations of the IVF lists (and of the product quantizer): FAISS's default is 25,
and more mainly costs time (training dominates the build)."""

# faiss's type stubs (faiss-cpu 1.15) omit the SWIG class DirectMap, present at runtime.
HASHTABLE_DIRECT_MAP: int = faiss.DirectMap.Hashtable  # type: ignore[attr-defined]

FaissIndex: TypeAlias = faiss.IndexIDMap2 | faiss.IndexIVF
"""The FAISS objects a `VectorIndex` wraps: a flat index in an id map, or an IVF index."""


def check_kind(kind: str) -> None:
    """Raise ValueError unless `kind` is one `VectorIndex.build` accepts."""
    if kind not in (*KINDS, "auto"):
        raise ValueError(
            f"unknown index kind {kind!r}; expected 'flat', 'ivf', 'compressed' or 'auto'"
        )


def new_flat(dim: int) -> faiss.IndexIDMap2:
    """An empty exact index of `dim`-dimensional vectors."""
    return faiss.IndexIDMap2(faiss.IndexFlatIP(dim))


def trained_ivf(
    kind: str,
    dim: int,
    count: int,
    sample: Callable[[int], np.ndarray],
    memory_budget: int | None,
    progress: ProgressCallback,
    cancel: CancelToken | None,
) -> faiss.IndexIVF:
    """An empty IVF index of `kind` ("ivf" or "compressed") for `count` vectors, trained on
    `sample(size)` (up to `size` unit vectors drawn at random), with its default nprobe."""
    quantizer = faiss.IndexFlatIP(dim)
    ivf: faiss.IndexIVF
    if kind == "ivf":
        nlist = choose_nlist(count)
        ivf = faiss.IndexIVFFlat(quantizer, dim, nlist, faiss.METRIC_INNER_PRODUCT)
    else:
        nlist = choose_compressed_nlist(count)
        ivf = _compressed(quantizer, dim, nlist, count, memory_budget)
    ivf.cp.niter = KMEANS_ITERATIONS
    ivf.cp.spherical = True  # centroids on the unit sphere, like the data
    sample_size = TRAIN_POINTS_PER_LIST * nlist
    if kind == "compressed":
        sample_size = max(sample_size, COMPRESSED_TRAIN_SAMPLE)
    log.info(
        "Training %s index: %d lists on up to %d of %d vectors", kind, nlist, sample_size, count
    )
    progress(Progress(0, count, message="training"))
    training = sample(sample_size)
    ivf.train(training)
    del training
    if cancel is not None:
        cancel.check()
    ivf.set_direct_map_type(HASHTABLE_DIRECT_MAP)
    ivf.nprobe = default_nprobe(nlist) if kind == "ivf" else compressed_nprobe(nlist)
    return ivf


def _compressed(
    quantizer: faiss.IndexFlatIP, dim: int, nlist: int, count: int, memory_budget: int | None
) -> faiss.IndexIVF:
    """The untrained compressed index: 8-bit codes where they fit the budget, else PQ codes."""
    if choose_codec(count, dim, memory_budget) == "sq8":
        return faiss.IndexIVFScalarQuantizer(
            quantizer, dim, nlist, faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_INNER_PRODUCT
        )
    subquantizers, bits = pq_shape(dim, min(count, COMPRESSED_TRAIN_SAMPLE))
    pq_index = faiss.IndexIVFPQ(
        quantizer, dim, nlist, subquantizers, bits, faiss.METRIC_INNER_PRODUCT
    )
    # As many k-means iterations as the lists': the codes only pick the shortlist, which is
    # re-ranked exactly.
    pq_index.pq.cp.niter = KMEANS_ITERATIONS
    return pq_index


def kind_of(index: FaissIndex) -> str:
    """The kind of a FAISS object this module made (or `checked_layout` accepted)."""
    if isinstance(index, faiss.IndexIVFPQ | faiss.IndexIVFScalarQuantizer):
        return "compressed"
    return "ivf" if isinstance(index, faiss.IndexIVF) else "flat"


def codec_of(index: FaissIndex) -> str | None:
    """The codes of a compressed index ("sq8" or "pq"); None for the other kinds."""
    if isinstance(index, faiss.IndexIVFPQ):
        return "pq"
    if isinstance(index, faiss.IndexIVFScalarQuantizer):
        return "sq8"
    return None


def checked_layout(index: faiss.Index, path: Path) -> FaissIndex:
    """`index`, read from the file `path`, if it is one of the layouts of the three kinds (an
    IVF index gets its hashtable direct map back); else QuadratError."""
    if isinstance(index, faiss.IndexIDMap2):
        inner = faiss.downcast_index(index.index)
        if not isinstance(inner, faiss.IndexFlatIP) or index.id_map.size() != index.ntotal:
            raise QuadratError(f"Vector index file {path} holds an unexpected index layout")
        return index
    if isinstance(index, faiss.IndexIVFFlat | faiss.IndexIVFPQ | faiss.IndexIVFScalarQuantizer):
        if index.metric_type != faiss.METRIC_INNER_PRODUCT:
            raise QuadratError(f"Vector index file {path} does not use inner-product scores")
        if index.direct_map.type != HASHTABLE_DIRECT_MAP:
            index.set_direct_map_type(HASHTABLE_DIRECT_MAP)
        return index
    raise QuadratError(
        f"Vector index file {path} is not a Quadrat vector index (found {type(index).__name__})"
    )


def removal_selector(kind: str, ids: np.ndarray) -> faiss.IDSelector:
    """The selector `remove_ids` of a `kind` index takes for the sorted, present `ids`."""
    if kind == "flat":
        return faiss.IDSelectorBatch(ids)
    # The IVF hashtable direct map accepts only an IDSelectorArray for removal.
    return faiss.IDSelectorArray(ids)
