"""The demo painter: a generator that draws the demo collection's kind of scene from the words of
the prompt alone, with the demo drawing code (`engine.demo.scenes.draw_demo_scene`).

It stands in for Stable Diffusion on the demo library, so that visualize-then-retrieve can be
measured offline. It reads no file: what it draws follows from the prompt's words and the seed.

The prompt is read as a sequence of noun phrases ("two red circles", "a tiny blue square"),
joined by relation words ("beside", "next to", "above", "below", ...). Words it does not know
are ignored; words before "of" describe the picture rather than its content ("a small and
realistic image of the red circle" draws a normal-sized red circle). Known words:

- colours: red, green, blue, yellow (and a few synonyms such as crimson or navy);
- shapes: circle, square, triangle (and synonyms such as disc, box; plurals);
- counts: a, an, one, two, three, four, five (or digits);
- sizes: tiny, little, miniature (tiny); large, big, huge, giant (large);
- relations: beside, next to, alongside, left/right of (side by side); above, over, on top of
  (the first one higher); below, under, beneath, underneath (the second one higher);
- backgrounds: striped, spotted, gradient, noisy/gravel, blotchy, plain/solid;
- occlusion: hidden, occluded, obscured, covered, behind, partly/partially.

What it draws when words are missing: a phrase with a colour and no shape gets a shape drawn
from the seed; a shape with no colour gets a colour drawn from the seed; a prompt with no
colour or shape it knows draws one shape of a colour and shape drawn from the seed, on a plain
background, so every prompt gives a plausible demo photo.
"""

from __future__ import annotations

import re
import time
import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
from PIL import Image

from engine.demo.scenes import COLOURS, SHAPES, DemoScene, draw_demo_scene
from engine.progress import CancelToken, Progress, ProgressCallback

if TYPE_CHECKING:
    from engine.visret.base import DrawSettings

IDENTITY = "demo-painter:1"
LABEL = "Demo painter"
SPEC = "demo-painter"
MAX_OBJECTS = 5  # more would not fit the demo's 160-pixel scene without touching

_COLOUR_WORDS: dict[str, str] = {
    **{c: c for c in COLOURS},
    "crimson": "red",
    "scarlet": "red",
    "navy": "blue",
    "azure": "blue",
    "golden": "yellow",
    "lime": "green",
    "emerald": "green",
}
_SHAPE_WORDS: dict[str, str] = {
    **{s: s for s in SHAPES},
    "disc": "circle",
    "disk": "circle",
    "ring": "circle",
    "ball": "circle",
    "box": "square",
    "tile": "square",
    "block": "square",
    "pyramid": "triangle",
    "wedge": "triangle",
}
_COUNT_WORDS: dict[str, int] = {"a": 1, "an": 1, "one": 1, "single": 1, "lone": 1, "two": 2,
                                "pair": 2, "three": 3, "four": 4, "five": 5}  # fmt: skip
_SIZE_WORDS: dict[str, str] = {
    "tiny": "tiny",
    "little": "tiny",
    "miniature": "tiny",
    "minuscule": "tiny",
    "large": "large",
    "big": "large",
    "huge": "large",
    "giant": "large",
    "enormous": "large",
}
_BACKGROUND_WORDS: dict[str, str] = {
    "striped": "striped",
    "stripes": "striped",
    "stripy": "striped",
    "spotted": "spotted",
    "spots": "spotted",
    "spotty": "spotted",
    "gradient": "gradient",
    "noisy": "noise",
    "gravel": "noise",
    "blotchy": "blotches",
    "blotches": "blotches",
    "plain": "solid",
    "solid": "solid",
}
_OCCLUSION_WORDS = frozenset(
    ("hidden", "occluded", "obscured", "covered", "behind", "partly", "partially", "twigs")
)
# Relation phrases, longest first; "above" puts the first phrase higher, "below" the second.
_RELATIONS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("on", "top", "of"), "above"),
    (("next", "to"), "beside"),
    (("left", "of"), "beside"),
    (("right", "of"), "beside"),
    (("beside",), "beside"),
    (("alongside",), "beside"),
    (("above",), "above"),
    (("over",), "above"),
    (("below",), "below"),
    (("under",), "below"),
    (("beneath",), "below"),
    (("underneath",), "below"),
)


@dataclass
class _Phrase:
    """One noun phrase: its count, colour, shape and size (None where the words say nothing)."""

    count: int | None = None
    colour: str | None = None
    shape: str | None = None
    size: str | None = None

    @property
    def empty(self) -> bool:
        return self.colour is None and self.shape is None


@dataclass
class ParsedPrompt:
    """What the painter understood: noun phrases, the relation between the first two, and the
    scene-wide background, size and occlusion."""

    phrases: list[_Phrase] = field(default_factory=list)
    relation: str | None = None  # "beside", "above" or "below"
    background: str | None = None
    occluded: bool = False

    def describe(self) -> str:
        """A short reading of the prompt, for logs and tests."""
        parts = [
            f"{p.count or 1} {p.size or ''} {p.colour or '?'} {p.shape or '?'}".replace("  ", " ")
            for p in self.phrases
        ]
        out = f" {self.relation} ".join(parts) if self.relation else ", ".join(parts)
        if self.background:
            out += f" on {self.background}"
        if self.occluded:
            out += " (hidden)"
        return out


def _singular(word: str) -> str:
    if word.endswith("es") and word[:-2] in _SHAPE_WORDS:
        return word[:-2]
    if word.endswith("s") and word[:-1] in _SHAPE_WORDS:
        return word[:-1]
    return word


def parse_prompt(prompt: str) -> ParsedPrompt:
    """Read colours, shapes, counts, sizes, a relation, a background and occlusion from the
    prompt's words; unknown words are ignored."""
    words = re.findall(r"[a-z]+|\d+", prompt.lower())
    reader = _PromptReader()
    i = 0
    while i < len(words):
        relation = _relation_at(words, i)
        if relation is not None and (reader.parsed.phrases or not reader.current.empty):
            reader.close()
            if reader.parsed.relation is None:
                reader.parsed.relation = relation[0]
            i += relation[1]
            continue
        reader.read(_singular(words[i]), words[i - 1] if i else None)
        i += 1
    reader.close()
    return reader.parsed


def _relation_at(words: list[str], i: int) -> tuple[str, int] | None:
    """(the relation, its number of words) when the words from `i` on start with one."""
    for phrase, name in _RELATIONS:
        if tuple(words[i : i + len(phrase)]) == phrase:
            return name, len(phrase)
    return None


class _PromptReader:
    """The prompt read so far: the finished phrases and the one being read."""

    def __init__(self) -> None:
        self.parsed = ParsedPrompt()
        self.current = _Phrase()

    def close(self) -> None:
        """The phrase being read is finished (kept unless empty); a new one starts."""
        if not self.current.empty:
            self.parsed.phrases.append(self.current)
        self.current = _Phrase()

    def read(self, word: str, previous: str | None) -> None:
        """One word (singular), after the prompt's `previous` word as written."""
        current = self.current
        if word == "of":
            # "an image of the X": what came before "of" describes the picture, not X
            # ("a pair of", "two of" keep their count).
            if current.shape is None and (previous is None or previous not in _COUNT_WORDS):
                self.current = _Phrase()
        elif word in _COLOUR_WORDS:
            if current.colour is not None and current.shape is not None:
                self.close()
            self.current.colour = _COLOUR_WORDS[word]
        elif word in _SHAPE_WORDS:
            if current.shape is not None:
                self.close()
            self.current.shape = _SHAPE_WORDS[word]
        elif word in _COUNT_WORDS or word.isdigit():
            if current.shape is not None:
                self.close()
            self.current.count = _COUNT_WORDS[word] if word in _COUNT_WORDS else int(word)
        elif word in _SIZE_WORDS:
            current.size = _SIZE_WORDS[word]
        elif word in _BACKGROUND_WORDS:
            self.parsed.background = _BACKGROUND_WORDS[word]
        elif word in _OCCLUSION_WORDS:
            self.parsed.occluded = True
        elif word in ("and", "with") and current.shape is not None:
            self.close()


def scene_for(parsed: ParsedPrompt, rng: np.random.Generator) -> DemoScene:
    """The demo scene for a parsed prompt; what the words leave open is drawn from `rng`."""
    phrases = parsed.phrases or [_Phrase()]
    objects: list[str] = []
    for phrase in phrases:
        colour = phrase.colour or str(rng.choice(COLOURS))
        shape = phrase.shape or str(rng.choice(SHAPES))
        count = max(1, phrase.count or 1)
        objects += [f"{colour} {shape}"] * count
    objects = objects[:MAX_OBJECTS]
    layout = "free"
    if len(objects) == 2 and len(phrases) == 2 and parsed.relation is not None:
        if parsed.relation == "below":
            objects.reverse()  # "A below B" is drawn as "B above A"
            layout = "above"
        else:
            layout = parsed.relation
    size = next((p.size for p in phrases if p.size), "normal")
    return DemoScene(tuple(objects), layout, size, parsed.background, parsed.occluded)


class DemoPainter:
    """A `Generator` that draws demo scenes from the prompt's words (see the module docstring).
    Drawing takes one step; the same prompt and seed give the same image."""

    identity = IDENTITY
    label = LABEL

    def default_settings(self) -> DrawSettings:
        from engine.visret.base import DrawSettings

        return DrawSettings(steps=1, guidance=0.0, width=160, height=160)

    def draw(
        self,
        prompt: str,
        seed: int,
        settings: DrawSettings,
        progress: ProgressCallback,
        cancel: CancelToken,
    ) -> Image.Image:
        """Draw the prompt's scene with `seed`; `settings` give the size (steps and guidance
        change nothing here)."""
        cancel.check()
        started = time.monotonic()
        # The prompt's checksum joins the seed, so two prompts with one seed differ in layout
        # as two prompts do under Stable Diffusion; zlib's crc32 is stable across processes.
        rng = np.random.default_rng([int(seed) & 0xFFFFFFFF, zlib.crc32(prompt.encode())])
        scene = scene_for(parse_prompt(prompt), rng)
        side = max(16, min(settings.width, settings.height))
        image, _, _ = draw_demo_scene(rng, scene, size=side)
        if (settings.width, settings.height) != (side, side):
            image = image.resize((settings.width, settings.height), Image.Resampling.BICUBIC)
        progress(Progress(1, 1, message=f"drawn in {time.monotonic() - started:.2f} s"))
        return image
