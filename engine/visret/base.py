"""What every generator shares: the settings of a drawing, a drawing, the `Generator` protocol.

The backends (the demo painter, diffusers) import this module and nothing of `generator`, which
loads them: so no import circle runs between the generator module and its backends.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from PIL import Image

from engine.progress import CancelToken, ProgressCallback


@dataclass(frozen=True)
class DrawSettings:
    """How a drawing is made: denoising steps, guidance scale and size in pixels."""

    steps: int
    guidance: float
    width: int
    height: int


@dataclass(frozen=True)
class Drawing:
    """One drawing of a query, made now or taken from the cache, or why it failed."""

    index: int  # 0-based position among the query's drawings
    seed: int
    prompt: str
    image: Image.Image | None  # None when this drawing failed
    error: str = ""  # one line, when it failed
    key: str = ""  # cache key (sha256 hex of identity, prompt, seed, settings)
    path: Path | None = None  # the cached PNG
    cached: bool = False  # taken from the cache, not drawn now
    seconds: float = 0.0


@runtime_checkable
class Generator(Protocol):
    """Draws one picture of a prompt. Implementations: the demo painter, diffusers pipelines."""

    identity: str  # stable id for cache keys ("demo-painter:1", "diffusers:sha256-<16 hex>")
    label: str

    def default_settings(self) -> DrawSettings:
        """The settings this generator draws with unless the user says otherwise."""
        ...

    def draw(
        self,
        prompt: str,
        seed: int,
        settings: DrawSettings,
        progress: ProgressCallback,
        cancel: CancelToken,
    ) -> Image.Image:
        """Draw `prompt` with `seed`; `progress` counts this drawing's steps and `cancel` is
        checked between steps (raises `Cancelled`)."""
        ...
