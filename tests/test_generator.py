"""The Stable Diffusion generator on a tiny random pipeline, the drawing cache and draw_all."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from engine.errors import Cancelled, ModelLoadError
from engine.models.hub import ModelUnavailableError
from engine.progress import CancelToken, Progress
from engine.visret.generator import DrawingCache, DrawSettings, draw_all, load_generator

FAST = DrawSettings(steps=2, guidance=7.5, width=64, height=64)


@pytest.fixture(scope="module")
def tiny(tiny_sd_dir: Path):
    return load_generator(str(tiny_sd_dir), device="cpu")


def pixels(image: Image.Image) -> np.ndarray:
    return np.asarray(image, dtype=np.int16)


def test_a_folder_loads_with_the_model_s_own_defaults(tiny):
    settings = tiny.default_settings()
    assert (settings.steps, settings.guidance) == (25, 7.5)  # SD 1.x family defaults
    assert (settings.width, settings.height) == (64, 64)  # the tiny model's native size
    assert tiny.identity.startswith("diffusers:sha256-")
    assert "StableDiffusionPipeline" in tiny.label


def test_the_same_seed_draws_the_same_image_and_another_seed_does_not(tiny):
    first = tiny.draw("a red circle", 3, FAST, lambda _: None, CancelToken())
    again = tiny.draw("a red circle", 3, FAST, lambda _: None, CancelToken())
    other = tiny.draw("a red circle", 4, FAST, lambda _: None, CancelToken())
    assert first.size == (64, 64)
    assert np.array_equal(pixels(first), pixels(again))
    assert not np.array_equal(pixels(first), pixels(other))


def test_a_single_file_with_its_config_draws_what_the_folder_draws(tiny, tiny_sd_dir, tmp_path):
    from tests.tiny_sd import write_single_file

    checkpoint = write_single_file(tiny_sd_dir, tmp_path / "tiny.safetensors")
    single = load_generator(f"{checkpoint}?config={tiny_sd_dir}&steps=3", device="cpu")
    assert single.default_settings().steps == 3  # the spec's override
    assert single.identity != tiny.identity
    from_file = single.draw("a blue square", 1, FAST, lambda _: None, CancelToken())
    from_folder = tiny.draw("a blue square", 1, FAST, lambda _: None, CancelToken())
    assert np.array_equal(pixels(from_file), pixels(from_folder))


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda tmp: tmp / "nowhere" / "model", "no such file or folder"),
        (lambda tmp: (tmp / "empty").mkdir() or tmp / "empty", "no model_index.json"),
        (lambda tmp: (tmp / "notes.txt").write_text("hi") and tmp / "notes.txt", "not a Stable"),
    ],
)
def test_a_missing_model_or_a_wrong_file_is_one_clear_line(tmp_path, make, words):
    target = make(tmp_path)
    with pytest.raises(ModelLoadError) as caught:
        load_generator(str(target), device="cpu")
    assert words in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_file_that_is_not_a_checkpoint_is_one_clear_line(tiny_sd_dir, tmp_path):
    fake = tmp_path / "fake.safetensors"
    fake.write_bytes(b"this is not a checkpoint" * 10)
    with pytest.raises(ModelLoadError) as caught:
        load_generator(f"{fake}?config={tiny_sd_dir}", device="cpu")
    message = str(caught.value)
    assert "could not load the generator" in message and "fake.safetensors" in message
    assert "\n" not in message


def test_an_offline_hub_id_fails_fast_in_one_line(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    started = time.monotonic()
    with pytest.raises(ModelUnavailableError) as caught:
        load_generator("hf-hub:stabilityai/sd-turbo", device="cpu", cache_dir=tmp_path)
    assert time.monotonic() - started < 5
    message = str(caught.value)
    assert "stabilityai/sd-turbo" in message and "offline" in message
    assert "\n" not in message


def test_the_cache_is_hit_on_the_second_run_without_drawing(tiny, tmp_path):
    cache = DrawingCache(tmp_path / "drawings")
    steps: list[tuple[int, int]] = []
    first = draw_all(
        tiny, "two owls", [0, 1], FAST, cache=cache, progress=lambda i, p: steps.append((i, p.done))
    )
    assert [d.cached for d in first] == [False, False]
    assert steps[-1] == (1, 2) and (0, 2) in steps  # each drawing's steps, per drawing
    assert len(list((tmp_path / "drawings").rglob("*.png"))) == 2

    class Counting:
        identity, label = tiny.identity, tiny.label
        calls = 0

        def default_settings(self):
            return FAST

        def draw(self, *args):
            Counting.calls += 1
            return tiny.draw(*args)

    seen: list[int] = []
    second = draw_all(
        Counting(), "two owls", [0, 1], FAST, cache=cache, on_drawing=lambda d: seen.append(d.index)
    )
    assert Counting.calls == 0
    assert [d.cached for d in second] == [True, True] and seen == [0, 1]
    assert all(
        np.array_equal(pixels(a.image), pixels(b.image)) for a, b in zip(first, second, strict=True)
    )
    # Another prompt or other settings are other drawings.
    third = draw_all(Counting(), "two owls", [0], replace(FAST, steps=1), cache=cache)
    assert Counting.calls == 1 and not third[0].cached


def test_cancel_stops_between_steps_and_keeps_finished_drawings(tiny, tmp_path):
    cache = DrawingCache(tmp_path / "drawings")
    token = CancelToken()
    reports: list[tuple[int, Progress]] = []

    def progress(index: int, report: Progress) -> None:
        reports.append((index, report))
        if index == 1 and report.done == 1:
            token.cancel()  # during the second drawing, after its first step

    slow = replace(FAST, steps=5)
    with pytest.raises(Cancelled):
        draw_all(tiny, "a heron", [0, 1, 2], slow, cache=cache, progress=progress, cancel=token)
    assert max(r.done for i, r in reports if i == 1) == 1  # no step after the cancel
    assert not any(i == 2 for i, _ in reports)
    assert len(list((tmp_path / "drawings").rglob("*.png"))) == 1  # the finished one is kept


def test_one_failed_drawing_leaves_the_others_usable(tiny, tmp_path):
    class Flaky:
        identity, label = "flaky:1", "Flaky"

        def default_settings(self):
            return FAST

        def draw(self, prompt, seed, settings, progress, cancel):
            if seed == 1:
                raise RuntimeError("CUDA out of memory.\nTried to allocate 2 GiB")
            return tiny.draw(prompt, seed, settings, progress, cancel)

    cache = DrawingCache(tmp_path / "drawings")
    drawings = draw_all(Flaky(), "a fox", [0, 1, 2], FAST, cache=cache)
    assert [d.image is None for d in drawings] == [False, True, False]
    assert drawings[1].error == "CUDA out of memory. Tried to allocate 2 GiB"
    assert drawings[0].path is not None and drawings[0].path.is_file()
    assert drawings[1].path is None


def test_a_bad_size_fails_that_drawing_in_one_line(tiny):
    drawings = draw_all(tiny, "a fox", [0], replace(FAST, width=63))
    assert drawings[0].image is None and "multiples of 2" in drawings[0].error


def test_an_unreadable_cached_png_is_drawn_again(tiny, tmp_path):
    cache = DrawingCache(tmp_path)
    key = DrawingCache.key(tiny.identity, "a fox", 0, FAST)
    cache.path(key).parent.mkdir(parents=True)
    cache.path(key).write_bytes(b"half a png")
    (drawing,) = draw_all(tiny, "a fox", [0], FAST, cache=cache)
    assert not drawing.cached and drawing.image is not None
    with Image.open(cache.path(key)) as stored:
        assert stored.size == (64, 64)


def test_cache_keys_cover_identity_prompt_seed_and_settings():
    base = DrawingCache.key("g:1", "a fox", 0, FAST)
    assert base == DrawingCache.key("g:1", "a fox", 0, FAST)
    others = {
        DrawingCache.key("g:2", "a fox", 0, FAST),
        DrawingCache.key("g:1", "a fox ", 0, FAST),
        DrawingCache.key("g:1", "a fox", 1, FAST),
        DrawingCache.key("g:1", "a fox", 0, replace(FAST, steps=3)),
        DrawingCache.key("g:1", "a fox", 0, replace(FAST, guidance=0.0)),
        DrawingCache.key("g:1", "a fox", 0, replace(FAST, width=128)),
        DrawingCache.key("g:1", "a fox", 0, replace(FAST, height=128)),
    }
    assert base not in others and len(others) == 7
