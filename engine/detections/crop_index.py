"""The crop vector index of one model: a FAISS index (`engine.vectors.VectorIndex`, flat or
IVF by size) of `crop_embeddings`, keyed by detection id, derived like the photos' index.

Kept at LIBRARY/indexes/crops-<model>.faiss with its checksum; on first use in a process, and
whenever the table changed since (its count or id range differ), the file is repaired from
the table: vectors it lacks are added, ids the table no longer has removed, an unreadable
file rebuilt. A box search then reads its hits' photos and boxes from the catalog.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from sqlalchemy import func, select

from engine.catalog.models import Collection, CropEmbedding, Detection, Image
from engine.detections.records import Box
from engine.errors import QuadratError

if TYPE_CHECKING:
    from engine.catalog.library import Library
    from engine.vectors.index import VectorIndex

log = logging.getLogger(__name__)

_CHUNK = 500
_lock = threading.Lock()
# (library folder, model key) -> (the table's signature when loaded, the index)
_loaded: dict[tuple[str, str], tuple[tuple[int, int, int], VectorIndex]] = {}


@dataclass(frozen=True)
class BoxHit:
    """One ranked box: its detection, photo, box, similarity and where the photo lies."""

    rank: int
    detection_id: int
    image_id: int
    box: Box
    score: float
    path: str
    rel_path: str
    category: str | None
    confidence: float | None

    def to_json(self) -> dict[str, object]:
        return {
            "rank": self.rank,
            "detection_id": self.detection_id,
            "image_id": self.image_id,
            "box": [self.box.x, self.box.y, self.box.width, self.box.height],
            "score": round(float(self.score), 6),
            "path": self.path,
            "rel_path": self.rel_path,
            "category": self.category,
            "confidence": self.confidence,
        }


def crop_index_path(library: Library, model_key: str) -> Path:
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", model_key).strip("_")[:120] or "model"
    return library.root / "indexes" / f"crops-{slug}.faiss"


def _signature(library: Library, model_key: str) -> tuple[int, int, int]:
    with library.catalog.session() as s:
        count, low, high = s.execute(
            select(
                func.count(),
                func.min(CropEmbedding.detection_id),
                func.max(CropEmbedding.detection_id),
            ).where(CropEmbedding.model_key == model_key)
        ).one()
    return int(count or 0), int(low or 0), int(high or 0)


def _table(library: Library, model_key: str) -> tuple[np.ndarray, np.ndarray]:
    """Every crop vector of `model_key`: (detection ids, vectors)."""
    with library.catalog.session() as s:
        rows = s.execute(
            select(CropEmbedding.detection_id, CropEmbedding.vector)
            .where(CropEmbedding.model_key == model_key)
            .order_by(CropEmbedding.detection_id)
        ).all()
    ids = np.asarray([r[0] for r in rows], dtype=np.int64)
    if not rows:
        return ids, np.zeros((0, 0), dtype=np.float32)
    blob = b"".join(r[1] for r in rows)
    return ids, np.frombuffer(blob, dtype="<f4").reshape(len(rows), -1).copy()


def crop_index(library: Library, model_key: str) -> VectorIndex | None:
    """The model's crop index, up to date with `crop_embeddings`; None when it holds no crop
    vector of that model (crops not encoded yet)."""
    from engine.vectors.index import VectorIndex

    key = (str(library.root), model_key)
    signature = _signature(library, model_key)
    with _lock:
        cached = _loaded.get(key)
        if cached is not None and cached[0] == signature:
            return cached[1]
        if signature[0] == 0:
            _loaded.pop(key, None)
            return None
        path = crop_index_path(library, model_key)
        ids, vectors = _table(library, model_key)
        index: VectorIndex | None = None
        if path.exists():
            try:
                index = VectorIndex.load(path)
                if index.dim != vectors.shape[1] or index.needs_rebuild():
                    index = None
            except QuadratError as exc:
                log.warning("crop index unreadable, rebuilt from the catalog: %s", exc)
                index = None
        if index is None:
            index = VectorIndex.build(ids, vectors, kind="auto")
            changed = True
        else:
            present = index.ids()
            extra = np.setdiff1d(present, ids, assume_unique=True)
            missing = np.isin(ids, present, invert=True)
            if len(extra):
                index.remove(extra)
            if missing.any():
                index.add(ids[missing], vectors[missing])
            changed = bool(len(extra) or missing.any())
        if changed:
            path.parent.mkdir(parents=True, exist_ok=True)
            index.save(path)
        _loaded[key] = (signature, index)
        return index


def detection_ids_of_images(library: Library, image_ids: Sequence[int] | np.ndarray) -> np.ndarray:
    """The ids of the detections on the photos `image_ids` (to restrict a box search to the
    photos a filter lets through)."""
    found: list[int] = []
    ids = [int(i) for i in image_ids]
    with library.catalog.session() as s:
        for start in range(0, len(ids), _CHUNK):
            found += s.scalars(
                select(Detection.id).where(Detection.image_id.in_(ids[start : start + _CHUNK]))
            ).all()
    return np.asarray(sorted(found), dtype=np.int64)


def box_hits(library: Library, ranked: Sequence[tuple[int, float]]) -> list[BoxHit]:
    """Ranked (detection id, score) pairs with their photos and boxes, order kept."""
    ids = [int(i) for i, _ in ranked]
    info: dict[int, tuple[int, Box, str, str, str | None, float | None]] = {}
    with library.catalog.session() as s:
        for start in range(0, len(ids), _CHUNK):
            rows = s.execute(
                select(
                    Detection.id,
                    Detection.image_id,
                    Detection.box_x,
                    Detection.box_y,
                    Detection.box_width,
                    Detection.box_height,
                    Collection.root,
                    Image.rel_path,
                    Detection.category,
                    Detection.confidence,
                )
                .join(Image, Image.id == Detection.image_id)
                .join(Collection, Collection.id == Image.collection_id)
                .where(Detection.id.in_(ids[start : start + _CHUNK]))
            ).all()
            for d, image, x, y, w, h, root, rel, category, conf in rows:
                box = Box(x or 0.0, y or 0.0, w or 0.0, h or 0.0)  # boxes only: crops have one
                info[d] = (image, box, root, rel, category, conf)
    hits: list[BoxHit] = []
    for detection, score in ranked:
        if detection not in info:  # its source was re-imported meanwhile
            continue
        image, box, root, rel, category, conf = info[detection]
        path = str(library.photo_root(root) / rel)
        hits.append(
            BoxHit(len(hits) + 1, detection, image, box, float(score), path, rel, category, conf)
        )
    return hits
