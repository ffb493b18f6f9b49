"""The shipped demo diffusion model: a real (tiny) Stable Diffusion that draws demo scenes offline
through the same diffusers path as any downloaded model."""

from __future__ import annotations

import numpy as np
import pytest

from engine.demo.scenes import DEMO_CLASSES
from engine.progress import CancelToken
from engine.visret.generator import load_generator

pytestmark = pytest.mark.slow  # (draws with the demo diffusion model: minutes on a loaded CPU)


@pytest.fixture(scope="module")
def demo_diffusion():
    return load_generator("demo-diffusion", device="cpu")


def test_demo_diffusion_loads_as_a_stable_diffusion_pipeline(demo_diffusion):
    assert "StableDiffusionPipeline" in demo_diffusion.label
    assert demo_diffusion.identity.startswith("diffusers:sha256-")
    settings = demo_diffusion.default_settings()
    assert (settings.width, settings.height) == (32, 32)  # the size it was trained at
    assert (settings.steps, settings.guidance) == (25, 3.0)  # its own guidance default
    options = load_generator("demo-diffusion?steps=4&guidance=5", device="cpu")
    assert (options.default_settings().steps, options.default_settings().guidance) == (4, 5.0)


def test_demo_diffusion_draws_the_colour_it_is_asked_for(demo_diffusion, demo_encoder):
    """The demo CLIP model tells the drawn colour of most drawings (0.9 of held-out captions
    when it was trained; random weights draw noise: about 1 in 4)."""
    settings = demo_diffusion.default_settings()
    classes = [c.common_name for c in DEMO_CLASSES]
    texts = demo_encoder.encode_texts(classes)
    prompts = [
        f"a {colour} {shape}"
        for colour in ("red", "green", "blue", "yellow")
        for shape in ("circle", "square")
    ]
    drawings = [
        demo_diffusion.draw(prompt, seed, settings, lambda _: None, CancelToken())
        for seed, prompt in enumerate(prompts)
    ]
    assert all(d.size == (32, 32) for d in drawings)
    best = (demo_encoder.encode_images(drawings) @ texts.T).argmax(axis=1)
    right = sum(classes[i].split()[0] == p.split()[1] for i, p in zip(best, prompts, strict=True))
    assert right >= 6, f"{right} of {len(prompts)} drawings in the asked colour"
    # and the same seed draws the same picture
    again = demo_diffusion.draw(prompts[0], 0, settings, lambda _: None, CancelToken())
    assert np.array_equal(np.asarray(again), np.asarray(drawings[0]))
