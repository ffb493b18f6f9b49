"""Detections become searchable things: each box above a threshold cut out of its photo with a
context margin, encoded by the library's model, kept in `crop_embeddings`.

The crop (`crop_region`): the box grown by `margin` (default 15 %) of its longer side on every
side, then made square around the box's centre (CLIP models centre-crop a square: a square
crop loses nothing of the animal), at least `MIN_CROP_PIXELS` on a side so a tiny box keeps
some surroundings, shifted inwards at the photo's edge and clipped only where the photo is
smaller than the square.

Encoding is incremental (only detections without a vector for the model) and commits one
batch of vectors at a time: a run cut short keeps every batch it finished, and the next run
does only the rest, with no vector twice (the table's key is detection and model).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from sqlalchemy import and_, func, insert, select

from engine.catalog.models import Collection, CropEmbedding, Detection, DetectionSource, Image
from engine.detections.records import Box
from engine.detections.store import imported
from engine.errors import BadImageError, BadInputError
from engine.progress import CancelToken, Progress, ProgressCallback, RateMeter, no_progress

if TYPE_CHECKING:
    from PIL import Image as PILImage

    from engine.catalog.library import Library
    from engine.models.encoders import Encoder

log = logging.getLogger(__name__)

DEFAULT_THRESHOLD = 0.2  # MegaDetector's own suggestion for its v5 models' output
DEFAULT_MARGIN = 0.15  # of the box's longer side, each way
MIN_CROP_PIXELS = 32  # a crop's least side: a 10-pixel animal still shows where it stands
BATCH = 64  # crops per encoder call and per commit


def crop_region(
    box: Box,
    width: int,
    height: int,
    margin: float = DEFAULT_MARGIN,
    min_pixels: int = MIN_CROP_PIXELS,
) -> tuple[int, int, int, int]:
    """The pixels (left, top, right, bottom; right and bottom exclusive) to cut for `box` from
    a `width` x `height` photo: see the module doc."""
    if margin < 0:
        raise BadInputError(f"the crop margin must be 0 or more, got {margin}")
    bw, bh = box.width * width, box.height * height
    side = max(bw, bh) * (1 + 2 * margin)
    side = max(side, float(min_pixels))
    cx, cy = (box.x + box.width / 2) * width, (box.y + box.height / 2) * height

    def span(centre: float, size: int) -> tuple[int, int]:
        if side >= size:
            return 0, size
        low = min(max(centre - side / 2, 0.0), size - side)
        start = int(round(low))
        return start, min(size, start + max(1, int(round(side))))

    left, right = span(cx, width)
    top, bottom = span(cy, height)
    return left, top, right, bottom


@dataclass(frozen=True)
class CropReport:
    """What one `encode_crops` run did."""

    encoded: int  # crops encoded and committed by this run
    skipped: int  # detections whose photo could not be read
    already: int  # detections above the threshold that had a vector before


@dataclass(frozen=True)
class _Pending:
    detection_id: int
    path: Path
    box: Box


def _pending(library: Library, model_key: str, threshold: float) -> tuple[list[_Pending], int]:
    """The detections above `threshold` with a box and no vector for `model_key`, grouped by
    photo; and how many above it already have one."""
    box_ok = and_(
        Detection.box_x.is_not(None),
        Detection.box_width > 0,
        Detection.box_height > 0,
        Detection.confidence >= threshold,
        # An import under way (or killed) is not the library's yet: its boxes get no crops.
        Detection.source_id.in_(select(DetectionSource.id).where(imported())),
    )
    done = and_(CropEmbedding.detection_id == Detection.id, CropEmbedding.model_key == model_key)
    with library.catalog.session() as s:
        already = s.scalar(
            select(func.count()).select_from(Detection).join(CropEmbedding, done).where(box_ok)
        )
        rows = s.execute(
            select(
                Detection.id,
                Collection.root,
                Image.rel_path,
                Detection.box_x,
                Detection.box_y,
                Detection.box_width,
                Detection.box_height,
            )
            .join(Image, Image.id == Detection.image_id)
            .join(Collection, Collection.id == Image.collection_id)
            .outerjoin(CropEmbedding, done)
            .where(box_ok, CropEmbedding.detection_id.is_(None))
            .order_by(Detection.image_id, Detection.id)
        ).all()
    pending = [
        _Pending(
            int(i),
            library.photo_root(root) / rel,
            Box.checked(x or 0.0, y or 0.0, w or 0.0, h or 0.0),
        )
        for i, root, rel, x, y, w, h in rows
    ]
    return pending, int(already or 0)


def _crops(
    pending: Sequence[_Pending], margin: float, skipped: list[int]
) -> Iterator[tuple[int, PILImage.Image]]:
    """(detection id, crop) for each pending detection, each photo decoded once; a photo that
    cannot be read adds its detections to `skipped` (one log line)."""
    from engine.indexing.decode import decode_image

    path: Path | None = None
    image: PILImage.Image | None = None
    for item in pending:
        if item.path != path:
            path = item.path
            try:
                image = decode_image(path).image
            except BadImageError as exc:
                log.warning("cannot crop %s: %s", path, exc.reason)
                image = None
        if image is None:
            skipped.append(item.detection_id)
            continue
        yield item.detection_id, image.crop(crop_region(item.box, *image.size, margin=margin))


def encode_crops(
    library: Library,
    encoder: Encoder,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    margin: float = DEFAULT_MARGIN,
    batch: int = BATCH,
    progress: ProgressCallback = no_progress,
    cancel: CancelToken | None = None,
) -> CropReport:
    """Encode the crop of every detection above `threshold` that has no vector for the
    encoder's model yet, `batch` at a time, each batch committed; `cancel` stops between
    batches (what was committed stays)."""
    if not 0.0 <= threshold <= 1.0:
        raise BadInputError(f"the threshold must be between 0 and 1, got {threshold}")
    cancel = cancel or CancelToken()
    model_key = encoder.model_key
    pending, already = _pending(library, model_key, threshold)
    meter = RateMeter(len(pending))
    progress(Progress(0, len(pending), message="encoding crops"))
    skipped: list[int] = []
    encoded = 0
    chunk: list[tuple[int, PILImage.Image]] = []

    def commit() -> None:
        nonlocal encoded
        vectors = np.asarray(encoder.encode_images([c for _, c in chunk]), dtype="<f4")
        rows = [
            {"detection_id": i, "model_key": model_key, "vector": v.tobytes()}
            for (i, _), v in zip(chunk, vectors, strict=True)
        ]
        with library.catalog.session() as s:
            s.execute(insert(CropEmbedding), rows)
        encoded += len(rows)
        chunk.clear()
        progress(meter.update(encoded + len(skipped), "encoding crops"))

    for item in _crops(pending, margin, skipped):
        chunk.append(item)
        if len(chunk) >= batch:
            cancel.check()
            commit()
    if chunk:
        cancel.check()
        commit()
    return CropReport(encoded, len(skipped), already)
