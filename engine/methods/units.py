"""What a search ranks: frames (the method's ranking, as always), boxes (the detections' crops,
ranked by the crop index), or fused frames (a frame's full-frame score fused with its best
crop's).

Boxes and the crop side of a fused search are ranked by the query's own vector (its words
under the text method's template, its photo, or both), whatever the method: a method ranks
frames, the crops are ranked as plain CLIP similarity.

Fusion rules, for a frame with full-frame score f and best-crop score c (cosine similarities):
- "max": max(f, c);
- "weighted": `FULL_WEIGHT` * f + (1 - `FULL_WEIGHT`) * c;
- "rrf": reciprocal rank fusion of the frame ranking and the frames ranked by their best crop
  (`engine.methods.fusion`; rank-based, so any method's scores fuse).
A frame without a box above the threshold keeps f (under "rrf" its one term). A frame the crop
index found but the method's ranking did not reach takes the lowest full-frame score the
method returned as f. `DEFAULT_RULE` was chosen on a held-out camera-trap collection (another
seed of the demo's generator): tests/bench/bench_crops.py and docs/bench-log/33-crop-search.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from engine.errors import BadInputError
from engine.methods.base import Ranking, SearchQuery
from engine.methods.fusion import reciprocal_rank_fusion

if TYPE_CHECKING:
    from engine.catalog.library import Library
    from engine.methods.base import MethodSpec
    from engine.methods.context import MethodContext

UNITS = ("frames", "boxes", "fused")
FUSE_RULES = ("max", "weighted", "rrf")
DEFAULT_RULE = "rrf"
FULL_WEIGHT = 0.5
POOL = 1000  # frames (and boxes) each side of a fused search considers, at least k


def check_unit(unit: str, rule: str = DEFAULT_RULE) -> None:
    if unit not in UNITS:
        raise BadInputError(f"the unit must be one of {', '.join(UNITS)}, not {unit!r}")
    if rule not in FUSE_RULES:
        raise BadInputError(f"the fusion rule must be one of {', '.join(FUSE_RULES)}, not {rule!r}")


def query_vector(query: SearchQuery, spec: MethodSpec, context: MethodContext) -> np.ndarray:
    """The query's unit vector as the text method makes it (its template when the method is
    text, the default one otherwise)."""
    from engine.methods.text import TextMethod, TextParams
    from engine.search.searcher import validate_query_text

    params = spec.params if isinstance(spec.params, TextParams) else TextParams()
    vector: np.ndarray | None = None
    if query.text.strip():
        text = validate_query_text(query.text)
        vector = TextMethod.query_vector(text, params, context.encoder)
    if query.image is not None:
        photo = context.searcher.encode_image_file(query.image)
        w = params.image_weight
        vector = photo if vector is None else w * photo + (1.0 - w) * vector
    if vector is None:
        raise BadInputError("the query is empty: type a few words or give a photo")
    unit: np.ndarray = vector / (np.linalg.norm(vector) or 1.0)
    return unit


def ranked_boxes(context: MethodContext, vector: np.ndarray, k: int) -> list[tuple[int, float]]:
    """(detection id, cosine) best first, within the context's filters; a one-line
    `BadInputError` when the library has no crop vector of its model."""
    from engine.detections.crop_index import crop_index, detection_ids_of_images

    library: Library = context.library
    index = crop_index(library, context.encoder.model_key)
    if index is None:
        raise BadInputError("no box to search: import detections, then run 'quadrat crops encode'")
    allowed = None
    if context.filters is not None and context.filters.active:
        allowed = detection_ids_of_images(library, context.searcher.filtered_ids(context.filters))
        if len(allowed) == 0:
            return []
    return index.search(np.asarray(vector, dtype=np.float32), k, allowed_ids=allowed)


def image_of_detections(library: Library, detection_ids: Sequence[int]) -> dict[int, int]:
    """Detection id -> its photo's id."""
    from sqlalchemy import select

    from engine.catalog.models import Detection

    found: dict[int, int] = {}
    ids = [int(i) for i in detection_ids]
    with library.catalog.session() as s:
        for start in range(0, len(ids), 500):
            rows = s.execute(
                select(Detection.id, Detection.image_id).where(
                    Detection.id.in_(ids[start : start + 500])
                )
            ).all()
            found.update({int(d): int(i) for d, i in rows})
    return found


def best_crops(
    boxes: Sequence[tuple[int, float]], image_of: dict[int, int]
) -> list[tuple[int, float, int]]:
    """(image id, best crop score, its detection id) per photo, best first."""
    best: dict[int, tuple[float, int]] = {}
    for detection, score in boxes:
        image = image_of.get(int(detection))
        if image is not None and image not in best:  # boxes come best first
            best[image] = (float(score), int(detection))
    return [(image, score, d) for image, (score, d) in best.items()]


def fuse(
    frames: Sequence[tuple[int, float]],
    crops: Sequence[tuple[int, float]],
    rule: str = DEFAULT_RULE,
    full_weight: float = FULL_WEIGHT,
) -> list[tuple[int, float]]:
    """The fused ranking of `frames` ((image id, full-frame score) best first) and `crops`
    ((image id, best-crop score) best first) under `rule` (see the module doc); ties by id."""
    check_unit("fused", rule)
    if rule == "rrf":
        return reciprocal_rank_fusion([[i for i, _ in frames], [i for i, _ in crops]])
    full = {int(i): float(s) for i, s in frames}
    floor = min(full.values()) if full else 0.0
    crop = {int(i): float(s) for i, s in crops}
    fused: dict[int, float] = {}
    for image in full.keys() | crop.keys():
        f = full.get(image, floor)
        if image not in crop:
            fused[image] = f
        elif rule == "max":
            fused[image] = max(f, crop[image])
        else:
            fused[image] = full_weight * f + (1.0 - full_weight) * crop[image]
    return sorted(fused.items(), key=lambda pair: (-pair[1], pair[0]))


@dataclass(frozen=True)
class UnitRanking:
    """A unit's answer: the frames ranked (for hits, events, metrics) and, for boxes and fused
    searches, the boxes ranked as (detection id, score) and each frame's best box."""

    ranking: Ranking
    boxes: list[tuple[int, float]]
    best_box: dict[int, int]


def rank_unit(
    unit: str,
    rule: str,
    spec: MethodSpec,
    query: SearchQuery,
    context: MethodContext,
    k: int,
) -> UnitRanking:
    """Run `spec` (for frames and fused) and the crop index (for boxes and fused); see the
    module doc."""
    check_unit(unit, rule)
    if unit == "frames":
        return UnitRanking(spec.run(query, context, top_k=k), [], {})
    pool = max(k, POOL)
    vector = query_vector(query, spec, context)
    boxes = ranked_boxes(context, vector, pool if unit == "fused" else k)
    image_of = image_of_detections(context.library, [d for d, _ in boxes])
    best = best_crops(boxes, image_of)
    best_box = {image: d for image, _, d in best}
    if unit == "boxes":
        frames = [(image, score) for image, score, _ in best]
        return UnitRanking(Ranking.from_pairs(frames), boxes, best_box)
    method_ranking = spec.run(query, context, top_k=pool)
    fused = fuse(method_ranking.pairs(), [(i, s) for i, s, _ in best], rule)[:k]
    ranking = Ranking.from_pairs(fused)
    ranking.details = dict(method_ranking.details)
    ranking.details["unit"] = {"unit": "fused", "rule": rule}
    ranking.evidence = {
        i: method_ranking.evidence[i] for i in ranking.ids if i in method_ranking.evidence
    }
    return UnitRanking(ranking, boxes[:k], best_box)
