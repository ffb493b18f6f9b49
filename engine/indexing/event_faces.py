"""An event's face: the frame its card shows, chosen so that a burst's empty frame (grass moved
by the wind, a flash on nothing) never stands for an animal it holds.

A frame is *empty* when the open query's judgments say another frame of the event is relevant
and this one is not judged so, or, without such judgments, when it hardly differs from the
event's background: the per-pixel median of its frames (what stays put over a burst), each
frame and the median taken without their mean brightness (an infrared flash or a cloud
changes every pixel alike). What differs is the share of a frame's pixels more than `CHANGED`
grey levels from the background (an animal is a patch of large changes; sensor noise and
JPEG are small ones everywhere). A frame is empty when its share is under half the most
changed frame's, unless no frame changes `MIN_CHANGED` of its pixels (a burst of nothing: none
is empty then). With two frames the median is their mean and both differ alike: neither is
empty, and sharpness decides.

The face is the sharpest non-empty frame (the variance of the Laplacian of its grey
thumbnail, a common focus measure: blur and motion smear lower it), except that the query's
best frame stays the face when it is non-empty and at least half as sharp: the card still
shows what matched. The measures are query-independent and cached per event; judgments and
the best frame only choose among them. Reading the thumbnails costs disk and decoding: run it
off the GUI thread (the thumbnails of a burst are made once, in the disk cache).
"""

from __future__ import annotations

import io
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from PIL import Image

from engine.errors import BadImageError

GREY_SIZE = (128, 96)  # frames are compared at this size (width, height)
CHANGED = 25.0  # grey levels from the background: a pixel something passed over
EMPTY_SHARE = 0.5  # a frame changed in under half the most changed frame's share: empty
MIN_CHANGED = 0.01  # a burst whose frames all change less of their pixels holds no empty one
SHARP_ENOUGH = 0.5  # the best frame stays the face at half the sharpest frame's sharpness


class ThumbnailSource(Protocol):
    """What the faces read frames from (`engine.indexing.thumbnails.ThumbnailCache`)."""

    def get_or_create(self, source: str, digest: str | None = None) -> bytes: ...


@dataclass(frozen=True)
class Frame:
    """A frame of an event, where its thumbnail comes from."""

    image_id: int
    path: str
    content_hash: str | None


@dataclass(frozen=True)
class FrameLook:
    """What a frame shows, as the face needs it."""

    image_id: int
    changed: float  # share of its pixels more than CHANGED from the background
    sharpness: float  # variance of the Laplacian of the grey thumbnail


def grey_frame(data: bytes) -> np.ndarray:
    """A thumbnail's JPEG bytes as a float grey image of `GREY_SIZE`."""
    with Image.open(io.BytesIO(data)) as image:
        grey = image.convert("L").resize(GREY_SIZE, Image.Resampling.BILINEAR)
        return np.asarray(grey, dtype=np.float32)


def sharpness(grey: np.ndarray) -> float:
    """The variance of the 4-neighbour Laplacian (no border)."""
    g = grey.astype(np.float32)
    laplacian = g[1:-1, :-2] + g[1:-1, 2:] + g[:-2, 1:-1] + g[2:, 1:-1] - 4.0 * g[1:-1, 1:-1]
    return float(laplacian.var())


def frame_looks(frames: Sequence[tuple[int, np.ndarray]]) -> list[FrameLook]:
    """How much of each (id, grey) differs from the event's background, and its sharpness."""
    if not frames:
        return []
    stack = np.stack([grey - grey.mean() for _, grey in frames])
    background = np.median(stack, axis=0)
    return [
        FrameLook(image_id, float((np.abs(level - background) > CHANGED).mean()), sharpness(grey))
        for (image_id, grey), level in zip(frames, stack, strict=True)
    ]


def non_empty(looks: Sequence[FrameLook], judgments: Mapping[int, int] | None = None) -> list[int]:
    """The ids of the frames that are not empty (see the module docstring)."""
    judged = judgments or {}
    relevant = [look.image_id for look in looks if judged.get(look.image_id, 0) > 0]
    if relevant:
        return relevant
    most = max((look.changed for look in looks), default=0.0)
    if most < MIN_CHANGED:
        return [look.image_id for look in looks]
    return [look.image_id for look in looks if look.changed >= EMPTY_SHARE * most]


def choose_face(
    looks: Sequence[FrameLook], best: int, judgments: Mapping[int, int] | None = None
) -> int:
    """The face of an event: the sharpest non-empty frame, or the query's `best` frame when it
    is non-empty and sharp enough. Without looks (no thumbnail read), `best`."""
    if not looks:
        return best
    candidates = set(non_empty(looks, judgments))
    shown = [look for look in looks if look.image_id in candidates]
    sharpest = max(shown, key=lambda look: (look.sharpness, -look.image_id))
    chosen = next((look for look in shown if look.image_id == best), None)
    if chosen is not None and chosen.sharpness >= SHARP_ENOUGH * sharpest.sharpness:
        return best
    return sharpest.image_id


class LookCache:
    """The looks of the events seen lately, by their frames (thread-safe, bounded)."""

    def __init__(self, limit: int = 5000) -> None:
        self._limit = limit
        self._looks: OrderedDict[tuple[tuple[int, str | None], ...], list[FrameLook]] = (
            OrderedDict()
        )
        self._lock = threading.Lock()

    def get(self, frames: Sequence[Frame]) -> list[FrameLook] | None:
        key = tuple((f.image_id, f.content_hash) for f in frames)
        with self._lock:
            found = self._looks.get(key)
            if found is not None:
                self._looks.move_to_end(key)
            return found

    def put(self, frames: Sequence[Frame], looks: list[FrameLook]) -> None:
        key = tuple((f.image_id, f.content_hash) for f in frames)
        with self._lock:
            self._looks[key] = looks
            while len(self._looks) > self._limit:
                self._looks.popitem(last=False)


def event_looks(
    thumbnails: ThumbnailSource, frames: Sequence[Frame], cache: LookCache | None = None
) -> list[FrameLook]:
    """The looks of one event's frames, read from their thumbnails (a frame that cannot be
    read is left out), from `cache` when it has them."""
    found = cache.get(frames) if cache is not None else None
    if found is not None:
        return found
    greys = []
    for frame in frames:
        try:
            greys.append(
                (
                    frame.image_id,
                    grey_frame(thumbnails.get_or_create(frame.path, frame.content_hash)),
                )
            )
        except (BadImageError, OSError, ValueError):
            continue  # a frame gone from disk or unreadable: it cannot be the face
    looks = frame_looks(greys)
    if cache is not None:
        cache.put(frames, looks)
    return looks
