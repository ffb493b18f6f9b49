"""Generators draw a query; drawings are cached on disk and made a query's worth at a time.

A `Generator` turns a prompt and a seed into one picture, reporting its steps and stopping
between them when cancelled. `load_generator` names one by a spec (the demo painter, a diffusers
folder, a single checkpoint file or a hub id); `draw_all` makes a query's drawings, each taken
from the `DrawingCache` when the same generator drew the same prompt, seed and settings before.
Nothing here imports torch or diffusers: the diffusers backend is imported when a spec needs it.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from PIL import Image

from engine.errors import Cancelled, ModelLoadError, one_line
from engine.files import atomic_write_bytes
from engine.progress import CancelToken, Progress, ProgressCallback
from engine.visret.base import Drawing, DrawSettings, Generator

# Drawing, DrawSettings and Generator live in `engine.visret.base` (so the backends need not
# import this module, which loads them); importers of this module may still name them here.
__all__ = [
    "DEMO_DIFFUSION_SPEC",
    "DEMO_PAINTER_SPEC",
    "DrawSettings",
    "Drawing",
    "DrawingCache",
    "Generator",
    "draw_all",
    "load_generator",
]

log = logging.getLogger(__name__)

DEMO_PAINTER_SPEC = "demo-painter"
DEMO_DIFFUSION_SPEC = "demo-diffusion"
# The demo diffusion model's guidance: 7.5 (the SD family default) washes its backgrounds out
# to white or black; 3 drew the asked colour as often (0.92 vs 0.90 on held-out captions).
_DEMO_DIFFUSION_DEFAULTS = "guidance=3"


def load_generator(
    spec: str,
    *,
    device: str = "auto",
    cache_dir: Path | None = None,
    progress: ProgressCallback | None = None,
    cancel: CancelToken | None = None,
) -> Generator:
    """The generator `spec` names.

    - ``demo-painter``: the procedural demo painter (no model);
    - ``demo-diffusion``: a tiny Stable Diffusion trained on demo drawings (shipped);
    - a diffusers pipeline folder (holding ``model_index.json``);
    - one ``.safetensors``/``.ckpt`` file, with its pipeline config as ``FILE?config=FOLDER`` or
      ``FILE?config=ORG/NAME`` (without it, the configs of the family diffusers recognises in
      the file are fetched from the hub; offline, one line asks for ``?config=``);
    - ``hf-hub:ORG/NAME`` or ``ORG/NAME``: downloaded into `cache_dir` on first use, with byte
      progress through `progress`.

    Any spec may end in ``?steps=N&guidance=G&width=W&height=H`` (joined to ``config=`` with
    ``&``) to change the model's default settings. A malformed, missing or unloadable spec raises
    `ModelLoadError` (one line); a hub model neither on disk nor reachable raises
    `engine.models.hub.ModelUnavailableError` within seconds.
    """
    text = spec.strip()
    if not text:
        raise ModelLoadError("no generator given: name a diffusers model or 'demo-painter'")
    if text.split("?", 1)[0].strip().lower() == DEMO_PAINTER_SPEC:
        try:
            from engine.visret.painter import DemoPainter
        except ImportError as error:  # pragma: no cover - shipped with the engine
            raise ModelLoadError(f"the demo painter is not available: {error}") from error
        return DemoPainter()
    name, _, options = text.partition("?")
    if name.strip().lower() == DEMO_DIFFUSION_SPEC:
        # A tiny Stable Diffusion trained on demo drawings (tools/train_demo_diffusion.py),
        # shipped as a pipeline folder; options after "?" override its defaults.
        text = f"{_demo_diffusion_folder()}?{_DEMO_DIFFUSION_DEFAULTS}"
        text += f"&{options}" if options else ""
    from engine.visret.diffusers_backend import load_diffusers

    return load_diffusers(
        text, device=device, cache_dir=cache_dir, progress=progress, cancel=cancel
    )


def _demo_diffusion_folder() -> Path:
    """The shipped demo diffusion pipeline folder (package data of `resources.visret`)."""
    from importlib import resources

    folder = resources.files("resources.visret").joinpath(DEMO_DIFFUSION_SPEC)
    if not isinstance(folder, Path) or not (folder / "model_index.json").is_file():
        raise ModelLoadError(f"the demo diffusion model is not installed ({folder})")
    return folder


class DrawingCache:
    """Drawings on disk as PNG files named by their key (LIBRARY/cache/drawings, or any root),
    reused across runs and sessions. Writes are atomic: a crash never leaves half a PNG."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    @staticmethod
    def key(identity: str, prompt: str, seed: int, settings: DrawSettings) -> str:
        """The sha256 hex key of one drawing: generator identity, prompt, seed and settings."""
        fields = {
            "identity": identity,
            "prompt": prompt,
            "seed": int(seed),
            "steps": int(settings.steps),
            "guidance": float(settings.guidance),
            "width": int(settings.width),
            "height": int(settings.height),
        }
        text = json.dumps(fields, sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def path(self, key: str) -> Path:
        """Where the drawing under `key` lives (a two-letter fan-out keeps folders small)."""
        return self.root / key[:2] / f"{key}.png"

    def get(self, key: str) -> Path | None:
        """The cached PNG of `key`, or None when it was never drawn."""
        path = self.path(key)
        return path if path.is_file() else None

    def put(self, key: str, image: Image.Image) -> Path:
        """Store `image` under `key` (atomically) and return its path."""
        buffer = io.BytesIO()
        image.save(buffer, format="PNG")
        path = self.path(key)
        atomic_write_bytes(path, buffer.getvalue())
        return path


def _read_cached(path: Path) -> Image.Image | None:
    """The cached drawing at `path`, or None when the file cannot be decoded (it is redrawn)."""
    try:
        with Image.open(path) as image:
            image.load()
            return image.convert("RGB")
    except (OSError, ValueError) as error:
        log.warning("cached drawing %s is unreadable (%s); drawing it again", path, error)
        return None


def draw_all(
    generator: Generator,
    prompt: str,
    seeds: Sequence[int],
    settings: DrawSettings,
    *,
    cache: DrawingCache | None = None,
    progress: Callable[[int, Progress], None] | None = None,
    cancel: CancelToken | None = None,
    on_drawing: Callable[[Drawing], None] | None = None,
) -> list[Drawing]:
    """One drawing of `prompt` per seed, in order: each from `cache` or drawn (and cached).

    `progress(index, steps)` reports the steps of drawing `index`; `on_drawing` is called as
    each drawing is ready. A drawing that fails becomes a `Drawing` with its one-line `error`
    and the others go on. `Cancelled` propagates; drawings finished before it stay cached.
    """
    token = cancel or CancelToken()
    drawings: list[Drawing] = []
    for index, seed in enumerate(seeds):
        token.check()
        drawing = _one_drawing(generator, prompt, index, seed, settings, cache, progress, token)
        drawings.append(drawing)
        if on_drawing is not None:
            on_drawing(drawing)
    return drawings


def _one_drawing(
    generator: Generator,
    prompt: str,
    index: int,
    seed: int,
    settings: DrawSettings,
    cache: DrawingCache | None,
    progress: Callable[[int, Progress], None] | None,
    cancel: CancelToken,
) -> Drawing:
    key = DrawingCache.key(generator.identity, prompt, seed, settings)
    started = time.perf_counter()
    if cache is not None and (path := cache.get(key)) is not None:
        image = _read_cached(path)
        if image is not None:
            seconds = time.perf_counter() - started
            return Drawing(
                index, seed, prompt, image, key=key, path=path, cached=True, seconds=seconds
            )

    def steps(report: Progress) -> None:
        if progress is not None:
            progress(index, report)

    try:
        image = generator.draw(prompt, seed, settings, steps, cancel)
    except Cancelled:
        raise
    except Exception as error:  # one drawing's failure (out of memory, a bad size) is its own
        log.warning("drawing %d (seed %d) failed", index, seed, exc_info=True)
        return Drawing(
            index,
            seed,
            prompt,
            None,
            error=one_line(error, 300),
            key=key,
            seconds=time.perf_counter() - started,
        )
    stored: Path | None = None
    if cache is not None:
        try:
            stored = cache.put(key, image)
        except OSError as error:  # a full disk costs the cache, not the drawing
            log.warning("could not cache drawing %d: %s", index, error)
    return Drawing(
        index, seed, prompt, image, key=key, path=stored, seconds=time.perf_counter() - started
    )
