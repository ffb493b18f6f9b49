"""Decoding large photos within a memory budget, however many threads decode."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageFile

from engine.catalog.library import Library
from engine.indexing.decode import DecodeBudget, decode_image
from engine.indexing.indexer import Indexer

BIG = (900, 700)  # with the demo model's 64-pixel side, each of these is reduced 3 times


def write_big_pngs(folder: Path, count: int) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        image = Image.new("RGBA", BIG, (40 * i % 256, 90, 200, 255))
        image.paste((255, 255, 255, 0), (0, 0, BIG[0] // 2, BIG[1]))  # half transparent
        path = folder / f"big{i}.png"
        image.save(path)
        paths.append(path)
    return paths


class LoadWatch:
    """Counts how many full-size photos PIL is decoding at once (a load held open briefly, so
    that decodes which may overlap do)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.now = self.most = 0
        self._lock = threading.Lock()
        real_load = ImageFile.ImageFile.load

        def load(image: ImageFile.ImageFile):  # type: ignore[no-untyped-def]
            big = image.size == BIG and bool(image.tile)  # not yet loaded
            if big:
                with self._lock:
                    self.now += 1
                    self.most = max(self.most, self.now)
                time.sleep(0.05)
            try:
                return real_load(image)
            finally:
                if big:
                    with self._lock:
                        self.now -= 1

        monkeypatch.setattr(ImageFile.ImageFile, "load", load)


def index_with(tmp_path: Path, name: str, photos: Path, encoder, decode_memory: int | None):
    with Library.open(tmp_path / name) as library:
        indexer = Indexer(library, encoder, batch_size=4, workers=4, decode_memory=decode_memory)
        return indexer.run(photos)


def test_a_small_budget_decodes_big_photos_one_at_a_time_and_indexes_them_all(
    tmp_path: Path, demo_encoder, monkeypatch: pytest.MonkeyPatch
) -> None:
    photos = tmp_path / "photos"
    write_big_pngs(photos, 8)
    watch = LoadWatch(monkeypatch)
    pixels = BIG[0] * BIG[1]
    # Room for one big photo's decode (its pixels, a working copy, the reduced result), not two.
    report = index_with(tmp_path, "one", photos, demo_encoder, decode_memory=pixels * 12)
    assert (report.indexed, report.skipped, report.passed_over) == (8, [], [])
    assert watch.most == 1

    # The same four threads with room for all of them decode several at once: the gate, not
    # the thread pool, is what kept them apart above.
    watch.most = 0
    report = index_with(tmp_path, "all", photos, demo_encoder, decode_memory=pixels * 100)
    assert report.indexed == 8
    assert watch.most > 1


def test_a_photo_larger_than_the_whole_budget_is_decoded_alone_not_refused(
    tmp_path: Path,
) -> None:
    [path] = write_big_pngs(tmp_path, 1)
    budget = DecodeBudget(1000)
    decoded = decode_image(path, min_side=64, budget=budget)
    assert (decoded.width, decoded.height) == BIG
    assert budget.peak == 1000 and budget.in_use == 0  # all of it, given back


def test_an_oversized_request_waits_for_the_others_then_runs(tmp_path: Path) -> None:
    budget = DecodeBudget(100)
    order: list[str] = []
    small_in = threading.Event()
    release_small = threading.Event()

    def small() -> None:
        with budget.reserve(60):
            order.append("small in")
            small_in.set()
            release_small.wait(5)
            order.append("small out")

    def big() -> None:
        with budget.reserve(500):
            order.append("big in")

    first = threading.Thread(target=small)
    first.start()
    assert small_in.wait(5)
    second = threading.Thread(target=big)
    second.start()
    second.join(0.2)
    assert order == ["small in"]  # the big one waits while the small one decodes
    release_small.set()
    first.join(5)
    second.join(5)
    assert order == ["small in", "small out", "big in"]
    assert budget.in_use == 0


@pytest.mark.parametrize("mode", ["RGBA", "P", "LA", "I;16", "1", "RGB", "L"])
def test_big_photos_reduced_before_conversion_look_the_same(tmp_path: Path, mode: str) -> None:
    base = Image.new("RGBA", (1200, 800), (30, 160, 60, 255))
    base.paste((200, 40, 40, 255), (0, 0, 600, 400))
    base.paste((0, 0, 0, 0), (600, 400, 1200, 800))  # transparent where the mode allows
    if mode == "I;16":
        image = base.convert("L").convert("I").point(lambda v: v * 257).convert("I;16")
    elif mode == "P":
        image = base.convert("RGB").convert("P", palette=Image.Palette.ADAPTIVE, colors=8)
    else:
        image = base.convert(mode)
    path = tmp_path / f"photo-{mode.replace(';', '')}.png"
    image.save(path)

    small = decode_image(path, min_side=100)
    full = decode_image(path)
    assert (small.width, small.height) == (full.width, full.height) == (1200, 800)
    assert small.image.size == (600, 400)  # halved: both sides stay at least 3 x 100
    assert small.image.mode == "RGB"
    seen = np.asarray(small.image.resize((60, 40), Image.Resampling.BOX), dtype=float)
    expected = np.asarray(full.image.resize((60, 40), Image.Resampling.BOX), dtype=float)
    assert np.abs(seen - expected).mean() < 2.0
