"""Metrics per event rather than per photo: a ranking of frames and its judgments turned into
a ranking of events and theirs (docs/SPEC.md, "Metrics per event").

An event is ranked where its best frame is (its first frame in the ranking). An event is
relevant when any of its frames is judged relevant, judged not relevant when frames of it are
judged and none relevant, and unjudged otherwise. A frame the user set apart is an event of its
own (the catalog gives it its own event id), so judging it never speaks for its burst.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

UNITS: tuple[str, ...] = ("photo", "event")


def to_event_units(
    ranked_ids: Sequence[int], relevance: Mapping[int, int], event_of: Mapping[int, int]
) -> tuple[list[int], dict[int, int]]:
    """(ranked event ids, event id -> 0/1) from ranked photo ids and photo judgments. A photo
    absent from `event_of` is an event of its own (its id)."""
    ranked_events = list(dict.fromkeys(event_of.get(i, i) for i in ranked_ids))
    event_relevance: dict[int, int] = {}
    for image_id, relevant in relevance.items():
        event = event_of.get(image_id, image_id)
        event_relevance[event] = max(event_relevance.get(event, 0), 1 if relevant > 0 else 0)
    return ranked_events, event_relevance
