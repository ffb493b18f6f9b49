"""Search results collapsed to events (`engine.indexing.events` groups the frames): one row
per event, scored by its best frame, with the event's frame count.

A photo whose event is not known yet (a library indexed before events were made) is an event
of its own. Collapsing reads the event ids of the ranked photos and the sizes of their events,
two indexed queries: a few milliseconds for a ranking of a few hundred photos. An event is
empty (`empty_events`) when a detector found every frame of it empty.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select

from engine.catalog.library import Library
from engine.catalog.models import STATUS_OK, Image
from engine.detections.records import DEFAULT_THRESHOLD
from engine.search.filter_kinds.detections import empty_condition

# Frames ranked per event asked for: bursts are 3 to 10 frames, so ten frames an event nearly
# always fill the events wanted; a short answer comes from a short ranking, not from this.
FRAMES_PER_EVENT = 10


@dataclass(frozen=True)
class EventHit:
    """One event of a collapsed ranking: its best frame and score, its size in frames, and how
    many of its frames the ranking held."""

    rank: int
    event_id: int
    image_id: int  # the best frame
    score: float
    frames: int
    matched: int

    def to_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "event_id": self.event_id,
            "image_id": self.image_id,
            "score": round(float(self.score), 6),
            "frames": self.frames,
            "matched": self.matched,
        }


def collapse_ranking(
    pairs: Iterable[tuple[int, float]], event_of: Mapping[int, int]
) -> list[tuple[int, int, float, int]]:
    """(event id, best frame, its score, frames ranked) per event, in the order of their best
    frames; `pairs` best first. A photo absent from `event_of` is an event of its own."""
    order: dict[int, list[Any]] = {}
    for image_id, score in pairs:
        event = event_of.get(image_id, image_id)
        found = order.get(event)
        if found is None:
            order[event] = [image_id, score, 1]
        else:
            found[2] += 1
    return [(event, best, score, count) for event, (best, score, count) in order.items()]


def event_ids_of(library: Library, image_ids: Sequence[int]) -> dict[int, int]:
    """Image id -> event id for these photos (their own id when no event is stored)."""
    found: dict[int, int] = {}
    wanted = [int(i) for i in image_ids]
    with library.catalog.session() as s:
        for start in range(0, len(wanted), 900):
            chunk = wanted[start : start + 900]
            for image_id, event_id in s.execute(
                select(Image.id, Image.event_id).where(Image.id.in_(chunk))
            ):
                found[image_id] = event_id if event_id is not None else image_id
    return found


def event_sizes(library: Library, event_ids: Sequence[int]) -> dict[int, int]:
    """Event id -> its searchable frames (1 for a photo with no stored event)."""
    sizes = dict.fromkeys((int(e) for e in event_ids), 1)
    wanted = list(sizes)
    with library.catalog.session() as s:
        for start in range(0, len(wanted), 900):
            chunk = wanted[start : start + 900]
            for event_id, count in s.execute(
                select(Image.event_id, func.count())
                .where(Image.event_id.in_(chunk), Image.status == STATUS_OK)
                .group_by(Image.event_id)
            ):
                if event_id is not None:
                    sizes[event_id] = count
    return sizes


def collapse_to_events(
    library: Library, pairs: Sequence[tuple[int, float]], top: int | None = None
) -> list[EventHit]:
    """The best `top` events (all when None) of a ranking of photos, best first."""
    collapsed = collapse_ranking(pairs, event_ids_of(library, [i for i, _ in pairs]))
    if top is not None:
        collapsed = collapsed[:top]
    sizes = event_sizes(library, [event for event, *_ in collapsed])
    return [
        EventHit(rank, event, best, float(score), max(sizes.get(event, 1), matched), matched)
        for rank, (event, best, score, matched) in enumerate(collapsed, start=1)
    ]


def frames_of_events(library: Library, event_ids: Sequence[int]) -> dict[int, list[int]]:
    """Event id -> its searchable frames' image ids in time order (then by id; an undated
    frame last). An event with no stored frames is the photo of that id alone (a photo never
    grouped keeps a NULL event id, read as its own id)."""
    frames: dict[int, list[int]] = {int(e): [] for e in event_ids}
    wanted = list(frames)
    with library.catalog.session() as s:
        for start in range(0, len(wanted), 900):
            chunk = wanted[start : start + 900]
            for image_id, event_id in s.execute(
                select(Image.id, Image.event_id)
                .where(Image.event_id.in_(chunk), Image.status == STATUS_OK)
                .order_by(Image.event_id, Image.observed_at.is_(None), Image.observed_at, Image.id)
            ):
                if event_id is not None:  # the IN above leaves none; said for the types
                    frames[event_id].append(image_id)
    return {event: found or [event] for event, found in frames.items()}


def event_frames(library: Library, event_id: int) -> list[int]:
    """The frames of one event (`frames_of_events`), in time order: the filmstrip's."""
    return frames_of_events(library, [event_id])[int(event_id)]


def has_events(library: Library) -> bool:
    """Whether any event of the library holds two frames or more (grouping results by
    event would change them)."""
    with library.catalog.session() as s:
        found = s.execute(
            select(Image.event_id)
            .where(Image.event_id.is_not(None), Image.status == STATUS_OK)
            .group_by(Image.event_id)
            .having(func.count() > 1)
            .limit(1)
        ).first()
    return found is not None


def empty_events(
    library: Library, event_ids: Sequence[int], threshold: float = DEFAULT_THRESHOLD
) -> set[int]:
    """The events of `event_ids` that are empty at `threshold`: every frame looked at by a
    detector and found empty (`engine.search.filter_kinds.detections`). An event with a frame
    no detector looked at is not known to be empty."""
    frames = frames_of_events(library, event_ids)
    every = sorted({image_id for found in frames.values() for image_id in found})
    empty: set[int] = set()
    with library.catalog.session() as s:
        for start in range(0, len(every), 900):
            chunk = every[start : start + 900]
            empty.update(
                s.scalars(select(Image.id).where(Image.id.in_(chunk), empty_condition(threshold)))
            )
    return {event for event, found in frames.items() if all(f in empty for f in found)}
