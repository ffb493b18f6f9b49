"""Certified recall of a saved query over what is shown: the photos passing the filters, and
photos or events (`engine.judgments.certified_recall` holds the rule; docs/SPEC.md §6.7).

The window and `quadrat certify` take the same path: the scope's photos ranked by the query's
own vector (the top 20,000, the rest by id: fixed before any judgment, so the census and the
sample stay put as judgments come in), turned into events when results are grouped by event
(an event ranked where its best frame is, relevant when a frame of it is judged relevant:
`engine.evaluation.units`), and the rule's state over them. Run it off the GUI thread: it
encodes the query and searches.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from engine.errors import BadInputError
from engine.evaluation.units import to_event_units
from engine.judgments.certified_recall import Certification, certify_recall
from engine.methods.feedback import RANKED_DEPTH, query_context, query_vector, saved_query

if TYPE_CHECKING:
    from engine.catalog.library import Library
    from engine.methods.base import SearchQuery
    from engine.methods.context import MethodContext
    from engine.models.encoders import Encoder
    from engine.search.filters import FilterNames, SearchFilters


@dataclass(frozen=True)
class ScopedCertification:
    """The rule's state over a scope, and the photo to show for each id it names (an event's
    best frame in scope; a photo itself)."""

    state: Certification
    photo_of: dict[int, int] = field(default_factory=dict)

    def photos(self, ids: list[int]) -> list[int]:
        """The photos to show (or judge) for the rule's `ids`."""
        return [self.photo_of.get(i, i) for i in ids]


def scoped_order(
    context: MethodContext, query: SearchQuery, filters: SearchFilters | None
) -> tuple[np.ndarray, int]:
    """The scope's indexed photos, the top `RANKED_DEPTH` by the query's vector and the rest
    by id, and how deep it is ranked."""
    index = context.searcher.index
    everything = index.ids()
    if filters is not None and filters.active:
        everything = np.intersect1d(everything, context.searcher.filtered_ids(filters))
    depth = min(RANKED_DEPTH, len(everything))
    if depth == 0:
        return everything, 0
    vector = np.asarray(query_vector(query, context), dtype=np.float32)
    allowed = everything if filters is not None and filters.active else None
    hits = index.search(vector, depth, allowed)
    ranked = np.asarray([image_id for image_id, _ in hits], dtype=np.int64)
    rest = np.setdiff1d(everything, ranked, assume_unique=True)
    return np.concatenate([ranked, rest]), len(ranked)


def scope_text(
    filters: SearchFilters | None, names: FilterNames | None, count: int, unit: str
) -> str:
    """ "the 3,214 photos shown (deployment CAM01 (QT0001))", or "" for every photo."""
    if filters is None or not filters.active:
        return "" if unit == "photo" else f"all {count:,} events"
    labels = "; ".join(label for _, label in filters.describe(names))
    return f"the {count:,} {unit}{'s' * (count != 1)} shown ({labels})"


def certify_for_query(
    library: Library,
    encoder_loader: Callable[[], Encoder],
    query_id: int,
    *,
    target: float,
    confidence: float,
    batch: int = 20,
    judgments: Mapping[int, int] | None = None,
    filters: SearchFilters | None = None,
    events: bool = False,
    names: FilterNames | None = None,
) -> ScopedCertification:
    """Where a saved query stands against a recall target with a guarantee over the photos
    passing `filters` (all when None), as events when `events`; the sample's numbers are
    seeded by the query id. A scope with no photo is a one-line BadInputError."""
    from engine.search.events import event_ids_of

    query = saved_query(library, query_id).search_query()
    context = query_context(library, encoder_loader, query_id, filters, judgments)
    judged = context.query_judgments("certify")
    order, ranked_depth = scoped_order(context, query, filters)
    if len(order) == 0:
        where = "passes the filters" if filters is not None and filters.active else "is indexed"
        raise BadInputError(f"no photo {where}: there is nothing to certify")
    photo_of: dict[int, int] = {}
    unit = "photo"
    ids: list[int] | np.ndarray = order
    if events:
        unit = "event"
        event_of = event_ids_of(library, order.tolist())
        ids, judged = to_event_units(order.tolist(), judged, event_of)
        for image_id in order.tolist():  # the best frame in scope shows the event
            photo_of.setdefault(event_of.get(image_id, image_id), image_id)
        # The unranked rest of the photos makes an unranked rest of events.
        ranked_depth = len(dict.fromkeys(event_of.get(i, i) for i in order[:ranked_depth].tolist()))
    state = certify_recall(
        ids, judged, target=target, confidence=confidence, seed=query_id, batch=batch,
        ranked_depth=ranked_depth, unit=unit,
        scope=scope_text(filters, names, len(ids), unit),
    )  # fmt: skip
    return ScopedCertification(state, photo_of)
