"""An event's face: the sharpest frame with something in it, from frames the test draws (an
empty frame the wind triggered, an animal walking through, a frame smeared by motion)."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image, ImageFilter

from engine.indexing.event_faces import (
    Frame,
    LookCache,
    choose_face,
    event_looks,
    frame_looks,
    grey_frame,
    non_empty,
    sharpness,
)
from tests.trap_frames import burst, frame, scene


class Thumbnails:
    """The frames' JPEG thumbnails by path (a ThumbnailCache stand-in that counts reads)."""

    def __init__(self, frames: dict[str, Image.Image]) -> None:
        self.data = {}
        for path, image in frames.items():
            out = io.BytesIO()
            image.copy().resize((256, 192)).save(out, "JPEG", quality=85)
            self.data[path] = out.getvalue()
        self.reads = 0

    def get_or_create(self, source: str, digest: str | None = None) -> bytes:
        self.reads += 1
        if source not in self.data:
            raise OSError(f"no such photo: {source}")
        return self.data[source]


def _drawn(seed: int = 5) -> tuple[list[Frame], list[str], Thumbnails]:
    drawn = burst(seed)
    frames = [Frame(100 + i, f"f{i}.jpg", f"{i:064x}") for i in range(len(drawn))]
    kinds = [kind for kind, _ in drawn]
    thumbnails = Thumbnails({f.path: image for f, (_, image) in zip(frames, drawn, strict=True)})
    return frames, kinds, thumbnails


def test_the_laplacian_variance_falls_with_blur():
    image = frame(scene(1), 2, 120)
    grey = np.asarray(image.convert("L"), dtype=np.float32)
    blurred = np.asarray(image.filter(ImageFilter.GaussianBlur(3)).convert("L"), dtype=np.float32)
    assert sharpness(blurred) < 0.3 * sharpness(grey)
    # A flat image has none.
    assert sharpness(np.full((20, 20), 128.0)) == 0.0


def test_the_empty_frame_is_told_from_the_background():
    frames, kinds, thumbnails = _drawn()
    looks = event_looks(thumbnails, frames)
    empty = {f.image_id for f, kind in zip(frames, kinds, strict=True) if kind == "empty"}
    assert empty and not empty & set(non_empty(looks))
    assert set(non_empty(looks)) == {f.image_id for f in frames} - empty


def test_the_face_is_the_sharpest_frame_with_the_animal():
    frames, kinds, thumbnails = _drawn()
    looks = event_looks(thumbnails, frames)
    sharp = [f.image_id for f, kind in zip(frames, kinds, strict=True) if kind == "animal"]
    empty, blurred = frames[0].image_id, frames[4].image_id
    # The query's best frame is the empty one (a query about the grass): not the face.
    face = choose_face(looks, best=empty)
    assert face in sharp
    assert (
        face
        == max(
            (look for look in looks if look.image_id in sharp), key=lambda x: x.sharpness
        ).image_id
    )
    # A best frame smeared by motion gives way to a sharp one as well.
    assert choose_face(looks, best=blurred) in sharp
    # A sharp best frame with the animal stays the face: the card shows what matched.
    assert choose_face(looks, best=sharp[1]) == sharp[1]


def test_the_judgments_say_which_frames_hold_it():
    frames, _, thumbnails = _drawn()
    looks = event_looks(thumbnails, frames)
    # Judged relevant: only that frame can be the face, whatever the looks say.
    assert (
        choose_face(looks, best=frames[0].image_id, judgments={frames[3].image_id: 1})
        == frames[3].image_id
    )
    # A judgment of not relevant alone says nothing about emptiness.
    assert (
        choose_face(looks, best=frames[0].image_id, judgments={frames[1].image_id: 0})
        != frames[0].image_id
    )


def test_a_burst_of_nothing_and_a_pair_of_frames():
    background = scene(9)
    nothing = [(i, grey_frame(_jpeg(frame(background, 20 + i, None)))) for i in range(4)]
    looks = frame_looks(nothing)
    assert sorted(non_empty(looks)) == [0, 1, 2, 3]  # the wind alone: none is empty
    assert choose_face(looks, best=2) == 2
    # Two frames: the median is their mean, so the animal's sharpness decides.
    pair = [
        (1, grey_frame(_jpeg(frame(background, 30, None)))),
        (2, grey_frame(_jpeg(frame(background, 31, 120)))),
    ]
    assert choose_face(frame_looks(pair), best=1) == 2


def test_looks_are_cached_and_unreadable_frames_left_out():
    frames, _, thumbnails = _drawn()
    cache = LookCache(limit=2)
    first = event_looks(thumbnails, frames, cache)
    reads = thumbnails.reads
    assert event_looks(thumbnails, frames, cache) == first and thumbnails.reads == reads
    gone = [*frames, Frame(999, "gone.jpg", None)]
    assert [look.image_id for look in event_looks(thumbnails, gone)] == [f.image_id for f in frames]
    assert choose_face([], best=7) == 7


def _jpeg(image: Image.Image) -> bytes:
    out = io.BytesIO()
    image.save(out, "JPEG", quality=85)
    return out.getvalue()
