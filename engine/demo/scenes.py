"""The synthetic demo collection and the tiny demo CLIP model trained on it.

The demo collection is drawn photos of coloured shapes ("red circle", "blue triangle", ...) on
varied backgrounds, laid out like an iNaturalist dataset (iNat folder names, a COCO-style
metadata file) with INQUIRE-format query and judgment files, so every feature of the
application can be tried without downloading anything. Each of the 12 colour-shape classes is a
fictional species (a taxon folder). Like INQUIRE, the benchmark asks for more than the species
label, so that plain CLIP similarity (a bag of concepts) has something to miss:

| category | supercategory | example query | photos drawn for it |
| --- | --- | --- | --- |
| species | Species | "red circle" | `images_per_class` plain photos per class |
| binding | Context | "a red circle beside a blue square" | two shapes side by side; the swapped binding ("a blue circle beside a red square") is always drawn too |
| relation | Context | "a yellow triangle above a green circle" | two shapes one above the other; the swapped binding and the swapped order are drawn too |
| background | Context | "a green triangle on a striped background" | one shape on a striped or spotted background |
| occlusion | Context | "a red circle partly hidden behind twigs" | one shape with twigs and leaves drawn over it |
| count | Behavior | "two red circles", "three red circles" | two or three shapes of one species |
| size | Appearance | "a tiny blue square", "a large blue square" | one tiny or one large shape |

Relations go to Context (as INQUIRE's "on a flower" or "next to a road": where the organism is
and what is around it) and counts to Behavior (as INQUIRE's groups, pairs and swarms). Every
query other than a species query has `photos_per_query` photos drawn for it.

A photo with two species lives in the folder (taxon) of the first one named in the query it
was drawn for, the sentence's subject ("a red circle beside a blue square" is filed under red
circle), as an iNat observation has one observed taxon; its first annotation is that object.

`metadata.json` describes what each photo shows (docs/SPEC.md §6.4): one annotation per drawn object
(`category_id` of its colour-shape species, `bbox` [x, y, w, h] in pixels, `attributes` with
`size` tiny/normal/large and `occluded`) and, per image, `attributes` with `count` (objects
drawn) and `background` (solid, gradient, noise, blotches, striped or spotted). Every judgment
follows from that metadata alone (`judge`), so the judgments are exact and exhaustive:

- species S: some object is an S;
- "a A beside a B": an A and a B whose bbox centres lie further apart across than up and down;
- "a A above a B": an A and a B further apart up and down than across, the A higher;
- "two S" / "three S": exactly two (three) objects are S;
- "a tiny S" / "a large S": an S whose `size` is tiny (large);
- "a S on a striped (spotted) background": an S, and the image's `background` is that pattern;
- "a S partly hidden behind twigs": an S whose `occluded` is true.

The demo model (`resources/models/quadrat-demo.*`) is a small open_clip model trained on images
from the same generator, with other seeds and random scenes (any species, pairs, counts, sizes,
backgrounds), captioned the way web captions are: varied phrasings, the relation, count, size
or background words in some captions only. Train it again with::

    python -m engine.demo.scenes train [--minutes 10] [--out resources/models]
"""

from __future__ import annotations

import argparse
import colorsys
import csv
import io
import json
import logging
import math
import os
import shutil
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import product
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

from engine.errors import BadInputError
from engine.progress import ProgressCallback, RateMeter, no_progress

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

COLOURS: tuple[str, ...] = ("red", "green", "blue", "yellow")
SHAPES: tuple[str, ...] = ("circle", "square", "triangle")
SIZES: tuple[str, ...] = ("tiny", "normal", "large")
PLAIN_BACKGROUNDS: tuple[str, ...] = ("solid", "gradient", "noise", "blotches")
PATTERNED_BACKGROUNDS: tuple[str, ...] = ("striped", "spotted")
BACKGROUNDS: tuple[str, ...] = PLAIN_BACKGROUNDS + PATTERNED_BACKGROUNDS

# Query category -> INQUIRE supercategory (see the module docstring).
SUPERCATEGORIES: dict[str, str] = {
    "species": "Species",
    "binding": "Context",
    "relation": "Context",
    "background": "Context",
    "occlusion": "Context",
    "count": "Behavior",
    "size": "Appearance",
}

DEMO_ARCH = "quadrat-demo"
"""open_clip model name of the demo architecture (the stem of its config JSON)."""

# Saturated base colours of the shapes; each drawing jitters them a little.
_COLOUR_RGB: dict[str, tuple[int, int, int]] = {
    "red": (215, 35, 35),
    "green": (35, 165, 55),
    "blue": (35, 75, 215),
    "yellow": (240, 205, 35),
}
# Fictional taxonomy: the shape decides order, family and genus; the colour the epithet
# (Latin adjectives agree with the genus: Circulus is masculine, the others neuter).
_SHAPE_TAXA: dict[str, tuple[str, str, str]] = {
    "circle": ("Rotundales", "Circulaceae", "Circulus"),
    "square": ("Quadratales", "Quadrataceae", "Quadratum"),
    "triangle": ("Trigonales", "Trigonaceae", "Trigonum"),
}
_EPITHETS: dict[str, tuple[str, str]] = {  # colour -> (masculine, neuter)
    "red": ("ruber", "rubrum"),
    "green": ("viridis", "viride"),
    "blue": ("caeruleus", "caeruleum"),
    "yellow": ("flavus", "flavum"),
}
_KINGDOM, _PHYLUM, _CLASS = "Plantae", "Demonstrata", "Formae"
_ICONIC_GROUP = "Plants"

_IMAGE_SIZE = 160
_JPEG_QUALITY = 90
_GENERATOR_NAME = "quadrat-demo"
_GENERATOR_VERSION = 3

# Seed streams: the purpose comes first so the shipped collection (purpose 0) never shares
# images with the model's training (1) or validation (2) data, whatever the seeds.
_PURPOSE_COLLECTION, _PURPOSE_TRAIN, _PURPOSE_VALIDATION = 0, 1, 2

_LICENCES = ("CC BY 4.0", "CC BY-NC 4.0", "CC0 1.0", "CC BY-SA 4.0")
_RIGHTS_HOLDERS = ("Ada Linnaea", "Ben Herbarium", "Chloe Sedge", "Dev Kestrel", "Eli Mossbank")
# (latitude, longitude) of a few fictional field sites; photos scatter around them.
_SITES = ((51.50, -0.12), (-33.92, 18.42), (37.77, -122.42), (35.68, 139.69), (-41.29, 174.78))

QUERIES_HEADER = ",query_id,query_text,supercategory,category,iconic_group"
JUDGMENTS_HEADER = "query_id,image_id,image_path"


@dataclass(frozen=True)
class DemoClass:
    """One colour-shape class of the demo collection, with its fictional taxon."""

    index: int
    colour: str
    shape: str

    @property
    def common_name(self) -> str:
        return f"{self.colour} {self.shape}"

    @property
    def taxon(self) -> dict[str, str]:
        order, family, genus = _SHAPE_TAXA[self.shape]
        masculine, neuter = _EPITHETS[self.colour]
        return {
            "kingdom": _KINGDOM,
            "phylum": _PHYLUM,
            "class": _CLASS,
            "order": order,
            "family": family,
            "genus": genus,
            "specific_epithet": masculine if genus == "Circulus" else neuter,
        }

    @property
    def dir_name(self) -> str:
        t = self.taxon
        fields = [t["kingdom"], t["phylum"], t["class"], t["order"], t["family"], t["genus"]]
        return f"{self.index:05d}_" + "_".join(fields) + f"_{t['specific_epithet']}"


DEMO_CLASSES: tuple[DemoClass, ...] = tuple(
    DemoClass(i, colour, shape) for i, (colour, shape) in enumerate(product(COLOURS, SHAPES))
)
_CLASS_BY_NAME: dict[str, DemoClass] = {c.common_name: c for c in DEMO_CLASSES}


# ---------------------------------------------------------------------------------------------
# Scenes and queries


@dataclass(frozen=True)
class DemoScene:
    """What one photo shows. `objects` are common names ("red circle"), one per shape drawn;
    the first is the photo's taxon. `layout` places two objects "beside" each other or the
    first "above" the second ("free": anywhere, not touching). `size` and `occluded` apply to
    every object; `background` None picks one of the plain patterns at random."""

    objects: tuple[str, ...]
    layout: str = "free"
    size: str = "normal"
    background: str | None = None
    occluded: bool = False


@dataclass(frozen=True)
class DemoQuery:
    """One benchmark query. `species` names the colour-shape classes it is about (in the order
    of the sentence); `value` is the category's parameter: a count, a size or a background.
    `scene` is what is drawn for it (None for species queries: every photo of a species)."""

    query_id: int
    text: str
    category: str
    species: tuple[str, ...]
    value: int | str | None = None
    scene: DemoScene | None = None

    @property
    def supercategory(self) -> str:
        return SUPERCATEGORIES[self.category]


def _swap_colours(a: str, b: str) -> tuple[str, str]:
    """("red circle", "blue square") -> ("blue circle", "red square"): the swapped binding."""
    (colour_a, shape_a), (colour_b, shape_b) = a.split(), b.split()
    return f"{colour_b} {shape_a}", f"{colour_a} {shape_b}"


# Pairs of species (different colours, different shapes): each is drawn with its swapped
# binding, and the "above" pairs also in the swapped order.
_BESIDE_PAIRS = (
    ("red circle", "blue square"),
    ("yellow triangle", "green square"),
    ("green circle", "red triangle"),
    ("blue triangle", "yellow circle"),
)
_ABOVE_PAIRS = (("yellow triangle", "green circle"), ("blue square", "red triangle"))
_COUNT_SPECIES = (
    "red circle",
    "blue square",
    "yellow triangle",
    "green circle",
    "red square",
    "blue triangle",
)
_SIZE_SPECIES = ("yellow circle", "red square", "green triangle", "blue square")
_BACKGROUND_SPECIES = ("red triangle", "green square", "blue circle", "yellow circle")
_OCCLUSION_SPECIES = ("blue triangle", "yellow square", "red circle", "green circle")
_COUNT_WORDS = {2: "two", 3: "three"}


def _plural(name: str) -> str:
    return name + "s"


def _build_queries() -> tuple[DemoQuery, ...]:
    queries: list[DemoQuery] = [
        DemoQuery(c.index + 1, c.common_name, "species", (c.common_name,)) for c in DEMO_CLASSES
    ]

    def add(text: str, category: str, species: tuple[str, ...], value: Any, scene: Any) -> None:
        queries.append(DemoQuery(len(queries) + 1, text, category, species, value, scene))

    for a, b in _BESIDE_PAIRS:
        for x, y in ((a, b), _swap_colours(a, b)):
            add(f"a {x} beside a {y}", "binding", (x, y), "beside", DemoScene((x, y), "beside"))
    for a, b in _ABOVE_PAIRS:
        swapped = _swap_colours(a, b)
        for x, y in ((a, b), swapped, (b, a), swapped[::-1]):
            add(f"a {x} above a {y}", "relation", (x, y), "above", DemoScene((x, y), "above"))
    for name in _COUNT_SPECIES:
        for n, word in _COUNT_WORDS.items():
            add(f"{word} {_plural(name)}", "count", (name,), n, DemoScene((name,) * n))
    for name in _SIZE_SPECIES:
        for size in ("tiny", "large"):
            add(f"a {size} {name}", "size", (name,), size, DemoScene((name,), size=size))
    for name in _BACKGROUND_SPECIES:
        for pattern in PATTERNED_BACKGROUNDS:
            scene = DemoScene((name,), background=pattern)
            add(f"a {name} on a {pattern} background", "background", (name,), pattern, scene)
    for name in _OCCLUSION_SPECIES:
        scene = DemoScene((name,), occluded=True)
        add(f"a {name} partly hidden behind twigs", "occlusion", (name,), True, scene)
    return tuple(queries)


DEMO_QUERIES: tuple[DemoQuery, ...] = _build_queries()
"""The benchmark's queries: the 12 species queries (ids 1-12, in class order), then the rest."""


def judge(query: DemoQuery, image: dict[str, Any], objects: Sequence[dict[str, Any]]) -> bool:
    """Whether a photo answers `query`, from its metadata alone: `image` is its COCO image
    record and `objects` its annotations, each with `name` (the category's common name)
    added."""
    names = [o["name"] for o in objects]

    def centre(o: dict[str, Any]) -> tuple[float, float]:
        x, y, w, h = o["bbox"]
        return x + w / 2, y + h / 2

    if query.category == "species":
        return query.species[0] in names
    if query.category in ("binding", "relation"):
        a_name, b_name = query.species
        for a in objects:
            for b in objects:
                if a is b or a["name"] != a_name or b["name"] != b_name:
                    continue
                (ax, ay), (bx, by) = centre(a), centre(b)
                dx, dy = abs(ax - bx), abs(ay - by)
                if query.value == "beside" and dx > dy:
                    return True
                if query.value == "above" and dy > dx and ay < by:
                    return True
        return False
    name = query.species[0]
    if query.category == "count":
        return names.count(name) == query.value
    if query.category == "size":
        return any(o["name"] == name and o["attributes"]["size"] == query.value for o in objects)
    if query.category == "background":
        return name in names and image["attributes"]["background"] == query.value
    if query.category == "occlusion":
        return any(o["name"] == name and o["attributes"]["occluded"] for o in objects)
    raise ValueError(f"unknown query category {query.category!r}")


@dataclass(frozen=True)
class DemoCollection:
    """A demo collection on disk. `labels` maps each image path (relative to `root`) to its
    taxon's common name ("red circle": the folder it lives in, and the text of the species
    query it answers). `queries` are the benchmark's queries and `relevant` maps each query id
    to the paths judged relevant (what `judgments.csv` says); `kinds` maps each path to the
    category of the query it was drawn for ("species" for plain photos)."""

    root: Path
    metadata_path: Path
    queries_path: Path
    judgments_path: Path
    image_count: int
    labels: dict[str, str]
    queries: tuple[DemoQuery, ...] = DEMO_QUERIES
    relevant: dict[int, tuple[str, ...]] = field(default_factory=dict)
    kinds: dict[str, str] = field(default_factory=dict)
    photos_per_query: int = 0


# ---------------------------------------------------------------------------------------------
# Drawing


@dataclass(frozen=True)
class _Placed:
    """One object of a planned photo: where and how big it is drawn."""

    name: str
    cx: float
    cy: float
    radius: float
    angle: float
    size: str
    occluded: bool

    @property
    def demo_class(self) -> DemoClass:
        return _CLASS_BY_NAME[self.name]

    def bbox(self, image_size: int = _IMAGE_SIZE) -> list[float]:
        shape = self.demo_class.shape
        if shape == "circle":
            r = _circle_radius(self.radius)
            x0, y0, x1, y1 = self.cx - r, self.cy - r, self.cx + r, self.cy + r
        else:
            xs, ys = zip(
                *_shape_polygon(shape, self.cx, self.cy, self.radius, self.angle), strict=True
            )
            x0, y0, x1, y1 = min(xs), min(ys), max(xs), max(ys)
        x0, y0 = max(0.0, x0), max(0.0, y0)
        x1, y1 = min(float(image_size), x1), min(float(image_size), y1)
        # Rounded outwards to 0.1 px, so the box still covers the shape.
        x, y = math.floor(x0 * 10) / 10, math.floor(y0 * 10) / 10
        return [x, y, round(math.ceil(x1 * 10) / 10 - x, 1), round(math.ceil(y1 * 10) / 10 - y, 1)]


def _circle_radius(radius: float) -> float:
    return radius * 0.85  # a circle of the full radius looks much bigger than the polygons


# Radius ranges as fractions of the image size (a square's or triangle's circumradius).
_RADIUS_RANGES: dict[str, tuple[float, float]] = {
    "tiny": (0.06, 0.09),
    "normal": (0.16, 0.34),  # one object
    "large": (0.40, 0.47),
}
# Two or three objects: normal size, the same range for both, so that the size of the shapes
# does not give their number away.
_RADIUS_SEVERAL = {2: (0.12, 0.19), 3: (0.12, 0.19)}


def _plan_objects(rng: np.random.Generator, scene: DemoScene, size: int) -> list[_Placed]:
    """Place the scene's objects: inside the image, not touching, in the scene's layout."""
    n = len(scene.objects)
    if n == 1:
        lo, hi = _RADIUS_RANGES[scene.size]
    else:
        lo, hi = _RADIUS_SEVERAL.get(n, (0.1, 0.14))
    shrink = 1.0
    for attempt in range(100_000):
        if attempt and attempt % 500 == 0:
            shrink *= 0.9  # never happens with the ranges above; a guarantee all the same
        radii = rng.uniform(lo, hi, n) * size * shrink
        centres = [rng.uniform(r, size - r, 2) for r in radii]
        ok = all(
            math.dist(centres[i], centres[j]) >= 1.1 * (radii[i] + radii[j]) + 4
            for i in range(n)
            for j in range(i)
        )
        if ok and n == 2 and scene.layout != "free":
            dx = abs(centres[0][0] - centres[1][0])
            dy = centres[1][1] - centres[0][1]  # positive: the first object is higher
            ok = dx >= 2 * abs(dy) if scene.layout == "beside" else dy >= 2 * dx  # "above"
        if ok:
            return [
                _Placed(
                    name,
                    float(c[0]),
                    float(c[1]),
                    float(r),
                    float(rng.uniform(0, 2 * math.pi)),
                    scene.size,
                    scene.occluded,
                )
                for name, c, r in zip(scene.objects, centres, radii, strict=True)
            ]
    raise AssertionError(f"could not place {scene}")  # pragma: no cover


def _plan_photo(
    rng: np.random.Generator, scene: DemoScene, size: int = _IMAGE_SIZE
) -> tuple[str, list[_Placed]]:
    """The background pattern and the placed objects of one photo of `scene`."""
    background = scene.background or str(rng.choice(PLAIN_BACKGROUNDS))
    return background, _plan_objects(rng, scene, size)


def _muted_colour(rng: np.random.Generator) -> np.ndarray:
    """A background colour: any hue, low saturation, so it never looks like a shape colour."""
    r, g, b = colorsys.hsv_to_rgb(rng.uniform(0, 1), rng.uniform(0, 0.3), rng.uniform(0.2, 0.95))
    return np.array([r, g, b]) * 255.0


def _contrasting_muted_colour(rng: np.random.Generator, base: np.ndarray) -> np.ndarray:
    """A muted colour clearly lighter or darker than `base`: for stripes and spots."""
    brightness = float(base.max()) / 255.0
    value = (
        brightness - rng.uniform(0.3, 0.5)
        if brightness > 0.55
        else brightness + rng.uniform(0.3, 0.5)
    )
    r, g, b = colorsys.hsv_to_rgb(rng.uniform(0, 1), rng.uniform(0, 0.25), min(max(value, 0.05), 1))
    return np.array([r, g, b]) * 255.0


def _background(rng: np.random.Generator, size: int, kind: str) -> Image.Image:
    base = _muted_colour(rng)
    pixels = np.broadcast_to(base, (size, size, 3)).astype(np.float64)
    ys, xs = np.mgrid[0:size, 0:size]
    if kind == "gradient":
        other = _muted_colour(rng)
        angle = rng.uniform(0, 2 * math.pi)
        t = (xs * math.cos(angle) + ys * math.sin(angle)) / (
            abs(math.cos(angle)) + abs(math.sin(angle))
        )
        t = (t - t.min()) / max(t.max() - t.min(), 1e-6)
        pixels = base * (1 - t[..., None]) + other * t[..., None]
    elif kind == "noise":
        # Coarse noise upsampled reads as texture (gravel, foliage) rather than sensor grain;
        # mostly brightness, little colour, as in nature (confetti-coloured noise confuses).
        cells = int(rng.integers(4, 24))
        brightness = rng.normal(0, rng.uniform(10, 35), (cells, cells, 1))
        coarse = brightness + rng.normal(0, rng.uniform(0, 8), (cells, cells, 3))
        texture = np.asarray(
            Image.fromarray(np.clip(coarse + 128, 0, 255).astype(np.uint8)).resize(
                (size, size), Image.Resampling.BICUBIC
            ),
            dtype=np.float64,
        )
        pixels = pixels + texture - 128
    elif kind == "striped":
        other = _contrasting_muted_colour(rng, base)
        angle = rng.uniform(0, math.pi)
        period = rng.uniform(0.06, 0.14) * size
        phase = (xs * math.cos(angle) + ys * math.sin(angle)) / period + rng.uniform(0, 1)
        stripe = ((phase % 1.0) < 0.5).astype(np.float64)[..., None]
        pixels = base * (1 - stripe) + other * stripe
    image = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))
    if kind == "blotches":
        draw = ImageDraw.Draw(image)
        for _ in range(int(rng.integers(3, 8))):
            x, y = rng.uniform(-0.2, 1.0, 2) * size
            w, h = rng.uniform(0.2, 0.6, 2) * size
            draw.ellipse((x, y, x + w, y + h), fill=tuple(int(c) for c in _muted_colour(rng)))
        image = image.filter(ImageFilter.GaussianBlur(radius=float(rng.uniform(2, 6))))
    elif kind == "spotted":
        draw = ImageDraw.Draw(image)
        spot = tuple(int(c) for c in _contrasting_muted_colour(rng, base))
        for _ in range(int(rng.integers(25, 50))):
            x, y = rng.uniform(0, size, 2)
            r = rng.uniform(0.015, 0.035) * size
            draw.ellipse((x - r, y - r, x + r, y + r), fill=spot)
    elif kind == "striped":
        image = image.filter(ImageFilter.GaussianBlur(radius=0.6))
    grain = rng.normal(0, rng.uniform(1, 6), (size, size, 3))
    return Image.fromarray(
        np.clip(np.asarray(image, dtype=np.float64) + grain, 0, 255).astype(np.uint8)
    )


def _neutral_colour(rng: np.random.Generator) -> tuple[int, int, int]:
    """Clutter colours: greys, near-black, near-white and browns, never a shape colour."""
    if rng.uniform() < 0.7:
        v = int(rng.integers(10, 246))
        return (v, v, v)
    value = rng.uniform(0.25, 0.55)
    r, g, b = colorsys.hsv_to_rgb(rng.uniform(0.05, 0.1), rng.uniform(0.3, 0.6), value)
    return (int(r * 255), int(g * 255), int(b * 255))


def _draw_clutter(rng: np.random.Generator, draw: ImageDraw.ImageDraw, size: int) -> None:
    for _ in range(int(rng.integers(0, 6))):
        colour = _neutral_colour(rng)
        if rng.uniform() < 0.6:  # a twig
            x0, y0, x1, y1 = rng.uniform(0, size, 4)
            draw.line((x0, y0, x1, y1), fill=colour, width=int(rng.integers(1, 4)))
        else:  # a pebble
            x, y = rng.uniform(0, size, 2)
            r = rng.uniform(1, 5)
            draw.ellipse((x - r, y - r, x + r, y + r), fill=colour)


def _draw_occluders(rng: np.random.Generator, draw: ImageDraw.ImageDraw, obj: _Placed) -> None:
    """Twigs across the shape and a leaf over one side of it: partly hidden, still there."""
    r = obj.radius
    towards = rng.uniform(0, 2 * math.pi)  # the side the leaf covers
    lx, ly = obj.cx + 0.7 * r * math.cos(towards), obj.cy + 0.7 * r * math.sin(towards)
    long, short, tilt = rng.uniform(0.6, 0.8) * r, rng.uniform(0.3, 0.45) * r, towards + math.pi / 2
    leaf = [
        (
            lx + long * math.cos(t) * math.cos(tilt) - short * math.sin(t) * math.sin(tilt),
            ly + long * math.cos(t) * math.sin(tilt) + short * math.sin(t) * math.cos(tilt),
        )
        for t in np.linspace(0, 2 * math.pi, 24, endpoint=False)
    ]
    draw.polygon(leaf, fill=_neutral_colour(rng))
    for _ in range(int(rng.integers(2, 5))):
        angle = rng.uniform(0, math.pi)
        offset = rng.uniform(-0.6, 0.6) * r
        ox, oy = obj.cx - offset * math.sin(angle), obj.cy + offset * math.cos(angle)
        half = rng.uniform(1.2, 1.8) * r
        dx, dy = half * math.cos(angle), half * math.sin(angle)
        width = max(2, int(round(rng.uniform(0.08, 0.15) * r)))
        draw.line((ox - dx, oy - dy, ox + dx, oy + dy), fill=_neutral_colour(rng), width=width)


def _shape_polygon(
    shape: str, cx: float, cy: float, radius: float, angle: float
) -> list[tuple[float, float]]:
    corners = 4 if shape == "square" else 3
    return [
        (
            cx + radius * math.cos(angle + 2 * math.pi * k / corners),
            cy + radius * math.sin(angle + 2 * math.pi * k / corners),
        )
        for k in range(corners)
    ]


def _render(
    rng: np.random.Generator, background: str, objects: Sequence[_Placed], size: int = _IMAGE_SIZE
) -> Image.Image:
    """Draw a planned photo: background, neutral clutter, the shapes, then any occluders."""
    image = _background(rng, size, background)
    draw = ImageDraw.Draw(image)
    _draw_clutter(rng, draw, size)
    for obj in objects:
        demo_class = obj.demo_class
        fill = tuple(
            int(np.clip(c + rng.integers(-20, 21), 0, 255)) for c in _COLOUR_RGB[demo_class.colour]
        )
        if demo_class.shape == "circle":
            r = _circle_radius(obj.radius)
            draw.ellipse((obj.cx - r, obj.cy - r, obj.cx + r, obj.cy + r), fill=fill)
        else:
            polygon = _shape_polygon(demo_class.shape, obj.cx, obj.cy, obj.radius, obj.angle)
            draw.polygon(polygon, fill=fill)
    for obj in objects:
        if obj.occluded:
            _draw_occluders(rng, draw, obj)
    return image


def draw_demo_scene(
    rng: np.random.Generator, scene: DemoScene, size: int = _IMAGE_SIZE
) -> tuple[Image.Image, str, list[_Placed]]:
    """Draw one photo of `scene`; returns it with its background pattern and placed objects."""
    background, objects = _plan_photo(rng, scene, size)
    return _render(rng, background, objects, size), background, objects


def draw_demo_image(
    rng: np.random.Generator, colour: str, shape: str, size: int = _IMAGE_SIZE
) -> Image.Image:
    """Draw one plain demo photo: a `colour` `shape` at a random place, size and angle on a
    varied background with some neutral clutter."""
    return draw_demo_scene(rng, DemoScene((f"{colour} {shape}",)), size)[0]


_STREAM_METADATA, _STREAM_PIXELS, _STREAM_GEOMETRY = 0, 1, 2
_EXTRA_KEY = 1000  # seed key of the photos drawn for query N: _EXTRA_KEY + N


def _image_rng(
    purpose: int, seed: int, class_index: int, number: int, stream: int = _STREAM_PIXELS
) -> np.random.Generator:
    return np.random.default_rng([purpose, seed, class_index, number, stream])


def _jpeg_bytes(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=_JPEG_QUALITY)
    return buffer.getvalue()


# ---------------------------------------------------------------------------------------------
# The collection


@dataclass(frozen=True)
class _PlannedPhoto:
    scene: DemoScene
    kind: str  # the category of the query it was drawn for
    key: int  # seed key: the class index for plain photos, _EXTRA_KEY + query id otherwise
    number: int
    background: str
    objects: tuple[_Placed, ...]

    @property
    def demo_class(self) -> DemoClass:
        return _CLASS_BY_NAME[self.scene.objects[0]]


def default_photos_per_query(images_per_class: int) -> int:
    """Photos drawn for each non-species query: a quarter of the plain photos per class."""
    return max(1, images_per_class // 4)


def _plan_collection(
    purpose: int, seed: int, images_per_class: int, photos_per_query: int
) -> list[_PlannedPhoto]:
    plan: list[_PlannedPhoto] = []
    jobs: list[tuple[DemoScene, str, int, int]] = [
        (DemoScene((c.common_name,)), "species", c.index, number)
        for c in DEMO_CLASSES
        for number in range(images_per_class)
    ]
    for query in DEMO_QUERIES:
        if query.scene is not None:
            key = _EXTRA_KEY + query.query_id
            jobs += [(query.scene, query.category, key, n) for n in range(photos_per_query)]
    for scene, kind, key, number in jobs:
        rng = _image_rng(purpose, seed, key, number, _STREAM_GEOMETRY)
        background, objects = _plan_photo(rng, scene)
        plan.append(_PlannedPhoto(scene, kind, key, number, background, tuple(objects)))
    # Photos grouped by folder, in the order each folder got them.
    order = {c.common_name: c.index for c in DEMO_CLASSES}
    plan.sort(key=lambda p: order[p.scene.objects[0]])
    return plan


def _render_planned(purpose: int, seed: int, photo: _PlannedPhoto) -> Image.Image:
    rng = _image_rng(purpose, seed, photo.key, photo.number)
    return _render(rng, photo.background, photo.objects)


def _is_demo_collection(dest: Path) -> dict[str, Any] | None:
    """The `info` block of the demo collection at `dest`, or None if it is not one."""
    try:
        info = json.loads((dest / "metadata.json").read_text(encoding="utf-8")).get("info", {})
    except (OSError, ValueError, AttributeError):
        return None
    return info if isinstance(info, dict) and info.get("generator") == _GENERATOR_NAME else None


def _metadata_for_image(rng: np.random.Generator, image_id: int, file_name: str) -> dict[str, Any]:
    lat, lon = _SITES[int(rng.integers(len(_SITES)))]
    day = int(rng.integers(0, 5 * 365))
    stamp = time.gmtime(1_546_300_800 + day * 86_400 + int(rng.integers(6 * 3600, 19 * 3600)))
    return {
        "id": image_id,
        "file_name": file_name,
        "width": _IMAGE_SIZE,
        "height": _IMAGE_SIZE,
        "license": _LICENCES[int(rng.integers(len(_LICENCES)))],
        "rights_holder": _RIGHTS_HOLDERS[int(rng.integers(len(_RIGHTS_HOLDERS)))],
        "date": time.strftime("%Y-%m-%d %H:%M:%S+00:00", stamp),
        "latitude": round(lat + float(rng.normal(0, 0.05)), 5),
        "longitude": round(lon + float(rng.normal(0, 0.05)), 5),
        "location_uncertainty": int(rng.integers(5, 500)),
    }


def _annotation(annotation_id: int, image_id: int, obj: _Placed) -> dict[str, Any]:
    bbox = obj.bbox()
    return {
        "id": annotation_id,
        "image_id": image_id,
        "category_id": obj.demo_class.index,
        "bbox": bbox,
        "area": round(bbox[2] * bbox[3], 1),
        "iscrowd": 0,
        "attributes": {"size": obj.size, "occluded": obj.occluded},
    }


def _categories() -> list[dict[str, Any]]:
    return [
        {
            "id": c.index,
            "name": f"{c.taxon['genus']} {c.taxon['specific_epithet']}",
            "common_name": c.common_name,
            "supercategory": _KINGDOM,
            **c.taxon,
            "image_dir_name": c.dir_name,
        }
        for c in DEMO_CLASSES
    ]


# -- observers' notes ---------------------------------------------------------------------------
# Some observers write a line about what they saw; most write nothing. The notes say what the
# photo shows (count, size, background, occlusion, the other object and where it is), in the
# loose words people use, often only one thing, sometimes nothing useful at all. They come from
# a random stream of their own, so adding them moved no photo, field or judgment.

NOTES_SHARE = 0.3
"""The share of the demo's photos whose record has notes."""
_NOTES_SEED_KEY = 7_919  # the notes' stream: [purpose, seed, key], apart from every photo's
_NOTES_VERSION = 1

_COUNT_NOTES: dict[int, tuple[str, ...]] = {
    2: ("two of them", "a pair", "2 together", "two individuals", "2"),
    3: ("three of them", "group of three", "3 individuals", "three together", "3"),
}
_SIZE_NOTES: dict[str, tuple[str, ...]] = {
    "tiny": ("tiny", "very small one", "small specimen, easy to miss", "tiny, had to zoom in"),
    "large": ("big one", "large individual", "huge, filled the frame", "big"),
}
_BACKGROUND_NOTES: dict[str, tuple[str, ...]] = {
    "solid": ("on bare rock", "plain background", "on a plain surface"),
    "gradient": ("on smooth ground", "soft light behind it"),
    "noise": ("on sand", "on gravel", "sandy ground"),
    "blotches": ("on mottled ground", "on lichen", "blotchy substrate"),
    "striped": ("on a striped surface", "stripy background", "stripes behind it", "striped"),
    "spotted": ("on a spotted background", "spotty substrate", "among spots", "spotted surface"),
}
_OCCLUDED_NOTES = (
    "mostly hidden",
    "partly covered by leaves",
    "half hidden in the brush",
    "obscured by twigs",
    "hard to see",
    "hidden",
)
_BESIDE_NOTES = ("next to a {other}", "beside a {other}", "{other} right next to it", "w/ {other}")
_OVER_NOTES = ("above a {other}", "{other} just below", "sitting over a {other}")
_UNDER_NOTES = ("below a {other}", "under a {other}", "{other} on top")
_FILLER_NOTES = (
    "seen on a morning walk",
    "first one this season",
    "ID not certain",
    "common here",
    "returned the next day, still there",
    "photo taken in a hurry",
)


def _relation_note(rng: np.random.Generator, first: _Placed, other: _Placed) -> str:
    """Where the other object is, as the photo shows it (image y grows downwards)."""
    dx, dy = other.cx - first.cx, other.cy - first.cy
    beside = abs(dx) >= abs(dy)
    options = _BESIDE_NOTES if beside else (_OVER_NOTES if dy > 0 else _UNDER_NOTES)
    return _pick(rng, options).format(other=other.name)


def _note_facts(rng: np.random.Generator, photo: _PlannedPhoto) -> list[tuple[str, float]]:
    """What an observer might say about `photo`, each with how likely it is to be said."""
    objects = photo.objects
    first = objects[0]
    facts: list[tuple[str, float]] = []
    if len(objects) > 1 and all(o.name == first.name for o in objects):
        facts.append((_pick(rng, _COUNT_NOTES[len(objects)]), 3.0))
    elif len(objects) > 1:
        facts.append((_relation_note(rng, first, objects[1]), 3.0))
    if len(objects) == 1 and first.size in _SIZE_NOTES:
        facts.append((_pick(rng, _SIZE_NOTES[first.size]), 3.0))
    if first.occluded:
        facts.append((_pick(rng, _OCCLUDED_NOTES), 3.0))
    facts.append((_pick(rng, _BACKGROUND_NOTES[photo.background]), 1.0))
    return facts


def _note(rng: np.random.Generator, photo: _PlannedPhoto) -> str:
    """One observer's note about `photo`: one or two true things, or only a remark."""
    facts = _note_facts(rng, photo)
    if rng.random() < 0.15:
        return _pick(rng, _FILLER_NOTES)
    weights = np.array([w for _, w in facts])
    said = min(len(facts), 1 if rng.random() < 0.6 else 2)
    chosen = rng.choice(len(facts), size=said, replace=False, p=weights / weights.sum())
    parts = [facts[int(i)][0] for i in sorted(chosen)]
    if rng.random() < 0.2:
        parts.append(_pick(rng, _FILLER_NOTES))
    text = ", ".join(parts)
    if rng.random() < 0.5:
        text = text[0].upper() + text[1:]
    return text + "." if rng.random() < 0.3 else text


def _notes_by_photo(seed: int, plan: Sequence[_PlannedPhoto]) -> dict[int, str]:
    """Photo index in `plan` -> its note, for NOTES_SHARE of the photos (rounded)."""
    rng = np.random.default_rng([_PURPOSE_COLLECTION, seed, _NOTES_SEED_KEY])
    chosen = rng.choice(len(plan), size=round(NOTES_SHARE * len(plan)), replace=False)
    return {int(i): _note(rng, plan[int(i)]) for i in sorted(chosen)}


def relevant_from_metadata(
    metadata: dict[str, Any], queries: Iterable[DemoQuery] = DEMO_QUERIES
) -> dict[int, list[dict[str, Any]]]:
    """The image records judged relevant to each query, by `judge`, from the metadata alone."""
    names = {c["id"]: c["common_name"] for c in metadata["categories"]}
    objects: dict[int, list[dict[str, Any]]] = {i["id"]: [] for i in metadata["images"]}
    for a in metadata["annotations"]:
        objects[a["image_id"]].append({**a, "name": names[a["category_id"]]})
    return {
        q.query_id: [i for i in metadata["images"] if judge(q, i, objects[i["id"]])]
        for q in queries
    }


def write_demo_collection(
    dest: Path,
    images_per_class: int = 40,
    seed: int = 0,
    progress: ProgressCallback = no_progress,
    photos_per_query: int | None = None,
) -> DemoCollection:
    """Write the demo collection into `dest` (created if missing) and return its description.

    `images_per_class` plain photos of each species, and `photos_per_query` photos for each
    other query (default: `default_photos_per_query`); 40 gives 480 + 48 x 10 = 960 photos.
    Deterministic for a seed. On a folder that already holds the same demo collection nothing
    is rewritten; a different demo collection there is replaced. A non-empty folder that is not
    a demo collection is refused with `BadInputError`.
    """
    dest = Path(dest)
    if images_per_class < 1:
        raise BadInputError(f"images_per_class must be at least 1, not {images_per_class}")
    if photos_per_query is None:
        photos_per_query = default_photos_per_query(images_per_class)
    if photos_per_query < 0:
        raise BadInputError(f"photos_per_query must not be negative, not {photos_per_query}")
    if dest.exists() and not dest.is_dir():
        raise BadInputError(f"cannot write the demo collection to {dest}: it is a file")
    existing = _is_demo_collection(dest) if dest.is_dir() else None
    if dest.is_dir() and any(dest.iterdir()) and existing is None:
        raise BadInputError(
            f"cannot write the demo collection to {dest}: the folder is not empty "
            "and is not a demo collection; choose an empty or new folder"
        )

    # Plan every image first (cheap), so an existing identical collection can be recognised.
    plan = _plan_collection(_PURPOSE_COLLECTION, seed, images_per_class, photos_per_query)
    images: list[dict[str, Any]] = []
    annotations: list[dict[str, Any]] = []
    file_names: list[str] = []
    notes = _notes_by_photo(seed, plan)
    for number, photo in enumerate(plan):
        rng = _image_rng(_PURPOSE_COLLECTION, seed, photo.key, photo.number, _STREAM_METADATA)
        image_uuid = uuid.UUID(bytes=rng.bytes(16), version=4)
        file_name = f"train/{photo.demo_class.dir_name}/{image_uuid}.jpg"
        image_id = len(images) + 1
        record = _metadata_for_image(rng, image_id, file_name)
        record["attributes"] = {"count": len(photo.objects), "background": photo.background}
        if number in notes:
            record["notes"] = notes[number]
        images.append(record)
        for obj in photo.objects:  # the first is the photo's taxon (docs/SPEC.md §3 reads it)
            annotations.append(_annotation(len(annotations) + 1, image_id, obj))
        file_names.append(file_name)
    info = {
        "description": "Quadrat synthetic demo collection: coloured shapes",
        "generator": _GENERATOR_NAME,
        "generator_version": _GENERATOR_VERSION,
        "seed": seed,
        "images_per_class": images_per_class,
        "photos_per_query": photos_per_query,
        "notes_version": _NOTES_VERSION,
    }
    metadata = {
        "info": info,
        "images": images,
        "categories": _categories(),
        "annotations": annotations,
    }
    relevant = {
        qid: tuple(i["file_name"] for i in records)
        for qid, records in relevant_from_metadata(metadata).items()
    }
    labels = {
        name: photo.demo_class.common_name for name, photo in zip(file_names, plan, strict=True)
    }
    collection = DemoCollection(
        root=dest,
        metadata_path=dest / "metadata.json",
        queries_path=dest / "queries.csv",
        judgments_path=dest / "judgments.csv",
        image_count=len(plan),
        labels=labels,
        queries=DEMO_QUERIES,
        relevant=relevant,
        kinds={name: photo.kind for name, photo in zip(file_names, plan, strict=True)},
        photos_per_query=photos_per_query,
    )
    same_as_existing = existing == info and all((dest / f).is_file() for f in labels)
    if (
        same_as_existing
        and collection.queries_path.is_file()
        and collection.judgments_path.is_file()
    ):
        log.info("demo collection already present in %s", dest)
        progress(RateMeter(len(plan)).update(len(plan), "already present"))
        return collection
    if existing is not None:
        log.info("replacing the demo collection in %s", dest)
        shutil.rmtree(dest / "train", ignore_errors=True)

    # metadata.json first: it marks the folder as a demo collection, so an interrupted write
    # is completed by the next call instead of being refused as a foreign folder.
    dest.mkdir(parents=True, exist_ok=True)
    collection.metadata_path.write_text(json.dumps(metadata, indent=1), encoding="utf-8")
    meter = RateMeter(len(plan))
    for done, (photo, file_name) in enumerate(zip(plan, file_names, strict=True), start=1):
        path = dest / file_name
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + ".part")  # never a half-written photo in place
        partial.write_bytes(_jpeg_bytes(_render_planned(_PURPOSE_COLLECTION, seed, photo)))
        os.replace(partial, path)
        progress(meter.update(done, "writing demo photos"))
    _write_queries(collection.queries_path)
    image_ids = {i["file_name"]: i["id"] for i in images}
    _write_judgments(collection.judgments_path, relevant, image_ids)
    return collection


def _write_queries(path: Path) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(QUERIES_HEADER.split(","))
        for index, q in enumerate(DEMO_QUERIES):
            writer.writerow([index, q.query_id, q.text, q.supercategory, q.category, _ICONIC_GROUP])


def _write_judgments(
    path: Path, relevant: dict[int, tuple[str, ...]], image_ids: dict[str, int]
) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(JUDGMENTS_HEADER.split(","))
        for query_id, file_names in relevant.items():
            for file_name in file_names:
                writer.writerow([query_id, image_ids[file_name], file_name])


# ---------------------------------------------------------------------------------------------
# The demo model

DEMO_MODEL_CONFIG: dict[str, Any] = {
    "embed_dim": 64,
    # A ModifiedResNet tower learns these images much faster than a tiny ViT.
    "vision_cfg": {"image_size": 64, "layers": [1, 1, 1, 1], "width": 16},
    # The token embedding (49408 x width) dominates the file size: keep the text tower narrow.
    "text_cfg": {"context_length": 16, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 2},
}

# Several phrasings: with one fixed template, differently phrased queries collapse.
TRAINING_TEMPLATES: tuple[str, ...] = (
    "{c} {s}",
    "a {c} {s}",
    "a photo of a {c} {s}",
    "{c} {s} on a background",
    "a picture of a {c} {s}",
    "{c} {s}s",
    "a {s} that is {c}",
    "an image of a {c} {s}",
    "the {c} {s}",
    "a {c} {s} shape",
    "a drawing of a {c} {s}",
    "a photo of {c} {s}s",
    "{s}, {c}",
    "one {c} {s}",
)
_SIZE_TEMPLATES: dict[str, tuple[str, ...]] = {
    "tiny": (
        "a tiny {n}",
        "tiny {n}",
        "a photo of a tiny {n}",
        "a very small {n}",
        "a small {n} far away",
    ),
    "large": (
        "a large {n}",
        "large {n}",
        "a big {n}",
        "a close-up of a {n}",
        "a huge {n} filling the frame",
    ),
}
_BACKGROUND_TEMPLATES: dict[str, tuple[str, ...]] = {
    "striped": (
        "a {n} on a striped background",
        "{n} on stripes",
        "a {n} in front of stripes",
        "a photo of a {n} on a striped background",
    ),
    "spotted": (
        "a {n} on a spotted background",
        "{n} on spots",
        "a {n} on a dotted background",
        "a photo of a {n} on a spotted background",
    ),
}
_OCCLUDED_TEMPLATES = (
    "a {n} partly hidden behind twigs",
    "a {n} behind twigs",
    "a partly hidden {n}",
    "a {n} half covered by twigs and leaves",
)
_COUNT_TEMPLATES: dict[int, tuple[str, ...]] = {
    2: ("two {p}", "2 {p}", "a pair of {p}", "two {p} together", "a photo of two {p}"),
    3: ("three {p}", "3 {p}", "a group of three {p}", "three {p} together", "a photo of three {p}"),
}
_PAIR_TEMPLATES = ("a {a} and a {b}", "{a} and {b}", "a photo of a {a} and a {b}", "{a}, {b}")
_BESIDE_TEMPLATES = ("a {a} beside a {b}", "a {a} next to a {b}", "{a} beside {b}")
_ABOVE_TEMPLATES = ("a {a} above a {b}", "{a} above {b}", "a {a} over a {b}")
_BELOW_TEMPLATES = ("a {b} below a {a}", "a {b} under a {a}")  # {a} is still the upper one


def _species_caption(rng: np.random.Generator, name: str) -> tuple[str, tuple[Any, ...]]:
    colour, shape = name.split()
    # The plain "<colour> <shape>" phrasing is what users type most: draw it more often.
    template = "{c} {s}" if rng.uniform() < 0.3 else str(rng.choice(TRAINING_TEMPLATES))
    return template.format(c=colour, s=shape), ("species", name)


def _pick(rng: np.random.Generator, options: Sequence[str]) -> str:
    return options[int(rng.integers(len(options)))]


def caption_scene(rng: np.random.Generator, scene: DemoScene) -> tuple[str, tuple[Any, ...]]:
    """A web-style caption of a photo of `scene`, and its meaning (captions with the same
    meaning are positives for each other's photos in training). Like alt text, a caption
    names the species always but the count, size, background or relation only sometimes."""
    first = scene.objects[0]
    n = len(scene.objects)
    if n == 2 and scene.objects[0] != scene.objects[1]:
        a, b = scene.objects
        roll = rng.uniform()
        if roll < 0.25:
            x, y = (a, b) if rng.uniform() < 0.5 else (b, a)
            return _pick(rng, _PAIR_TEMPLATES).format(a=x, b=y), ("pair", frozenset((a, b)))
        if roll < 0.6 and scene.layout == "beside":
            x, y = (a, b) if rng.uniform() < 0.5 else (b, a)
            return _pick(rng, _BESIDE_TEMPLATES).format(a=x, b=y), ("beside", frozenset((a, b)))
        if roll < 0.6 and scene.layout == "above":
            templates = _ABOVE_TEMPLATES if rng.uniform() < 0.7 else _BELOW_TEMPLATES
            return _pick(rng, templates).format(a=a, b=b), ("above", a, b)
        return _species_caption(rng, a if rng.uniform() < 0.5 else b)
    if n in _COUNT_TEMPLATES and rng.uniform() < 0.6:
        return _pick(rng, _COUNT_TEMPLATES[n]).format(p=_plural(first)), ("count", n, first)
    if scene.size in _SIZE_TEMPLATES and rng.uniform() < 0.6:
        return _pick(rng, _SIZE_TEMPLATES[scene.size]).format(n=first), (scene.size, first)
    if scene.background in _BACKGROUND_TEMPLATES and rng.uniform() < 0.6:
        caption = _pick(rng, _BACKGROUND_TEMPLATES[scene.background]).format(n=first)
        return caption, (scene.background, first)
    if scene.occluded and rng.uniform() < 0.6:
        return _pick(rng, _OCCLUDED_TEMPLATES).format(n=first), ("occluded", first)
    return _species_caption(rng, first)


def random_scene(rng: np.random.Generator) -> DemoScene:
    """A training scene: any species, and any of the collection's kinds of photo (pairs of
    any two species in either layout, counts, sizes, backgrounds, occlusion)."""
    names = [c.common_name for c in DEMO_CLASSES]
    name = _pick(rng, names)
    roll = rng.uniform()
    if roll < 0.40:
        return DemoScene((name,))
    if roll < 0.50:
        return DemoScene((name,), size=_pick(rng, ("tiny", "large")))
    if roll < 0.60:
        return DemoScene((name,), background=_pick(rng, PATTERNED_BACKGROUNDS))
    if roll < 0.68:
        return DemoScene((name,), occluded=True)
    if roll < 0.86:
        other = _pick(rng, [n for n in names if n != name])
        return DemoScene((name, other), layout=_pick(rng, ("beside", "above")))
    return DemoScene((name,) * int(rng.integers(2, 4)))


def precision_at_k(
    image_vectors: np.ndarray,
    labels: Sequence[str],
    text_vectors: np.ndarray,
    queries: Sequence[str],
    relevant: Sequence[str],
    k: int = 10,
) -> dict[str, float]:
    """P@k of each query by brute-force cosine ranking; `relevant[i]` is the label query i wants."""
    scores = text_vectors @ image_vectors.T
    label_array = np.asarray(labels)
    result = {}
    for query, wanted, row in zip(queries, relevant, scores, strict=True):
        top = np.argsort(-row, kind="stable")[:k]
        result[query] = float(np.mean(label_array[top] == wanted))
    return result


def _ap_at_k(ranked_relevant: np.ndarray, k: int, num_relevant: int) -> float:
    top = ranked_relevant[:k].astype(float)
    if num_relevant == 0:
        return 0.0
    precision = np.cumsum(top) / np.arange(1, len(top) + 1)
    return float((precision * top).sum() / min(k, num_relevant))


def benchmark_scores(
    image_vectors: np.ndarray,
    relevant: dict[int, set[int]],
    text_vectors: np.ndarray,
    queries: Sequence[DemoQuery] = DEMO_QUERIES,
    k: int = 10,
) -> dict[int, tuple[float, float]]:
    """(P@k, AP@k) of each query by brute-force cosine ranking; `relevant` maps a query id to
    the row numbers of `image_vectors` that answer it."""
    scores = text_vectors @ image_vectors.T
    result = {}
    for query, row in zip(queries, scores, strict=True):
        wanted = relevant[query.query_id]
        top = np.argsort(-row, kind="stable")[:k]
        hits = np.array([i in wanted for i in top])
        result[query.query_id] = (float(hits.mean()), _ap_at_k(hits, k, len(wanted)))
    return result


def summarise_by_category(
    scores: dict[int, tuple[float, float]], queries: Sequence[DemoQuery] = DEMO_QUERIES
) -> dict[str, float]:
    """Mean AP per query category."""
    groups: dict[str, list[float]] = {}
    for q in queries:
        groups.setdefault(q.category, []).append(scores[q.query_id][1])
    return {category: float(np.mean(values)) for category, values in groups.items()}


def _to_tensor(image: Image.Image, rng: np.random.Generator, preprocess: Any) -> torch.Tensor:
    # Through JPEG and the model's own preprocessing, exactly like an indexed photo.
    with Image.open(io.BytesIO(_jpeg_bytes(image))) as decoded:
        if rng.uniform() < 0.3:
            # A fast JPEG decode at reduced scale, as a thumbnailing pipeline might do: the
            # model should not care how the pixels were decoded.
            decoded.draft("RGB", (decoded.width // 2, decoded.height // 2))
        tensor: torch.Tensor = preprocess(decoded.convert("RGB"))
        return tensor


def _render_training_pool(
    seed: int, count: int, preprocess: Any
) -> tuple[torch.Tensor, list[DemoScene]]:
    import torch

    tensors, scenes = [], []
    for number in range(count):
        rng = _image_rng(_PURPOSE_TRAIN, seed, 0, number)
        scene = random_scene(rng)
        image = draw_demo_scene(rng, scene)[0]
        tensors.append(_to_tensor(image, rng, preprocess))
        scenes.append(scene)
    return torch.stack(tensors).half(), scenes


def _render_benchmark(
    purpose: int, seed: int, images_per_class: int, photos_per_query: int, preprocess: Any
) -> tuple[torch.Tensor, dict[int, set[int]]]:
    """A whole demo collection in memory (tensors) and each query's relevant rows."""
    import torch

    plan = _plan_collection(purpose, seed, images_per_class, photos_per_query)
    tensors = []
    images: list[dict[str, Any]] = []
    annotations: list[dict[str, Any]] = []
    for row, photo in enumerate(plan):
        image = _render_planned(purpose, seed, photo)
        with Image.open(io.BytesIO(_jpeg_bytes(image))) as decoded:
            tensors.append(preprocess(decoded.convert("RGB")))
        images.append({"id": row, "attributes": {"background": photo.background}})
        annotations += [_annotation(len(annotations), row, obj) for obj in photo.objects]
    metadata = {"images": images, "annotations": annotations, "categories": _categories()}
    relevant = {
        qid: {i["id"] for i in records} for qid, records in relevant_from_metadata(metadata).items()
    }
    return torch.stack(tensors).half(), relevant


def _encode(model: Any, tokenizer: Any, images: torch.Tensor, texts: Sequence[str]) -> Any:
    import torch
    import torch.nn.functional as F  # noqa: N812

    model.eval()
    with torch.inference_mode():
        image_vectors = torch.cat(
            [model.encode_image(images[i : i + 256].float()) for i in range(0, len(images), 256)]
        )
        image_array = F.normalize(image_vectors, dim=-1).numpy()
        text_array = F.normalize(model.encode_text(tokenizer(list(texts))), dim=-1).numpy()
    return image_array, text_array


def evaluate_model(
    model: Any, tokenizer: Any, images: torch.Tensor, relevant: dict[int, set[int]]
) -> dict[int, tuple[float, float]]:
    """(P@10, AP@10) of every benchmark query over an in-memory collection."""
    image_vectors, text_vectors = _encode(model, tokenizer, images, [q.text for q in DEMO_QUERIES])
    return benchmark_scores(image_vectors, relevant, text_vectors)


def train_demo_model(
    out_dir: Path,
    minutes: float = 10.0,
    seed: int = 0,
    steps: int = 100_000,
    pool_size: int = 12_000,
    batch_size: int = 96,
) -> dict[str, float]:
    """Train the demo model until `minutes` of wall time have passed in all (rendering the
    training images included) or `steps` batches are done, and write `quadrat-demo.json` and
    `quadrat-demo.safetensors` (fp16) into `out_dir`.

    Returns P@10 per species query ("<colour> <shape>"), measured with the saved (fp16) weights
    by brute-force ranking of a freshly drawn demo collection (seed 0, in memory); the mean AP@10
    per query category there is logged.
    """
    import open_clip
    import torch
    import torch.nn.functional as F  # noqa: N812
    from safetensors.torch import save_file

    started = time.monotonic()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    config_path = out_dir / f"{DEMO_ARCH}.json"
    config_path.write_text(json.dumps(DEMO_MODEL_CONFIG, indent=2) + "\n", encoding="utf-8")
    open_clip.add_model_config(config_path)

    torch.manual_seed(seed)
    rng = np.random.default_rng([3, seed])
    model, _, preprocess = open_clip.create_model_and_transforms(DEMO_ARCH)
    tokenizer = open_clip.get_tokenizer(DEMO_ARCH)

    pool, scenes = _render_training_pool(seed, pool_size, preprocess)
    validation, validation_relevant = _render_benchmark(
        _PURPOSE_VALIDATION, seed, 20, 5, preprocess
    )
    log.info("rendered %d training images in %.0f s", len(pool), time.monotonic() - started)

    token_cache: dict[str, torch.Tensor] = {}

    def tokens(texts: list[str]) -> torch.Tensor:
        missing = [t for t in dict.fromkeys(texts) if t not in token_cache]
        if missing:
            token_cache.update(zip(missing, tokenizer(missing), strict=True))
        return torch.stack([token_cache[t] for t in texts])

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
    reserve = 30.0  # seconds kept for saving and the final measurement
    budget = max(60.0, minutes * 60.0 - (time.monotonic() - started) - reserve)
    warmup_steps = 100
    train_started, step, next_report = time.monotonic(), 0, 60.0
    model.train()
    while (elapsed := time.monotonic() - train_started) < budget and step < steps:
        # The schedule follows whichever limit comes first, so a busy machine still cools down.
        fraction = max(step / steps, elapsed / budget)
        lr_factor = min(1.0, (step + 1) / warmup_steps) * 0.5 * (1 + math.cos(math.pi * fraction))
        for group in optimizer.param_groups:
            group["lr"] = 1e-3 * lr_factor
        picks = rng.integers(0, len(pool), batch_size)
        images = pool[torch.from_numpy(picks)].float()
        # Left and right mirrored: "beside" has no side, "above" stays above.
        flip = torch.from_numpy(rng.uniform(size=batch_size) < 0.5)
        images[flip] = images[flip].flip(-1)
        captions = [caption_scene(rng, scenes[i]) for i in picks]
        texts = tokens([text for text, _ in captions])
        meanings = [meaning for _, meaning in captions]
        image_features, text_features, logit_scale = model(images, texts)[:3]
        logits = logit_scale * image_features @ text_features.T
        # Soft targets: every item whose caption means the same is a correct partner.
        same = torch.tensor([[m == other for other in meanings] for m in meanings]).float()
        targets = same / same.sum(dim=1, keepdim=True)
        loss = 0.5 * (F.cross_entropy(logits, targets) + F.cross_entropy(logits.T, targets))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        step += 1
        if elapsed > next_report:
            next_report += 60.0
            scores = evaluate_model(model, tokenizer, validation, validation_relevant)
            by_category = summarise_by_category(scores)
            log.info(
                "step %d, %.0f s, loss %.3f, validation mAP@10 %s",
                step,
                elapsed,
                loss.item(),
                " ".join(f"{c} {v:.2f}" for c, v in by_category.items()),
            )
            model.train()

    model.eval()
    state = {
        name: (t.half() if t.is_floating_point() else t).contiguous()
        for name, t in model.state_dict().items()
    }
    weights_path = out_dir / f"{DEMO_ARCH}.safetensors"
    save_file(state, str(weights_path), metadata={"arch": DEMO_ARCH, "format": "pt"})
    # Measure what users get: the fp16 weights, loaded back as fp32.
    model.load_state_dict(
        {name: t.float() if t.is_floating_point() else t for name, t in state.items()}
    )
    log.info(
        "trained %d steps (batch %d) in %.0f s; wrote %s (%.1f MB)",
        step,
        batch_size,
        time.monotonic() - train_started,
        weights_path,
        weights_path.stat().st_size / 1e6,
    )
    collection, relevant = _render_benchmark(
        _PURPOSE_COLLECTION, 0, 40, default_photos_per_query(40), preprocess
    )
    scores = evaluate_model(model, tokenizer, collection, relevant)
    for category, value in summarise_by_category(scores).items():
        log.info("seed-0 collection, mean AP@10 %-10s %.3f", category, value)
    log.info("wall time %.0f s", time.monotonic() - started)
    return {q.text: scores[q.query_id][0] for q in DEMO_QUERIES if q.category == "species"}


def _default_model_dir() -> Path:
    import resources.models

    return Path(resources.models.__file__).parent


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m engine.demo.scenes train|write`: developer entry point."""
    parser = argparse.ArgumentParser(prog="python -m engine.demo.scenes")
    commands = parser.add_subparsers(dest="command", required=True)
    train = commands.add_parser("train", help="train the demo model and write its files")
    train.add_argument("--out", type=Path, default=None, help="folder for the model files")
    train.add_argument("--minutes", type=float, default=10.0, help="wall-time limit, all in")
    train.add_argument("--steps", type=int, default=100_000)
    train.add_argument("--pool", type=int, default=12_000, help="training images to render")
    train.add_argument("--batch-size", type=int, default=96)
    train.add_argument("--seed", type=int, default=0)
    # One thread measured faster than two on a busy two-core machine (no waiting at barriers).
    train.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    write = commands.add_parser("write", help="write the demo collection")
    write.add_argument("dest", type=Path)
    write.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    if args.command == "train":
        import torch

        torch.set_num_threads(args.threads)
        scores = train_demo_model(
            args.out or _default_model_dir(),
            minutes=args.minutes,
            seed=args.seed,
            steps=args.steps,
            pool_size=args.pool,
            batch_size=args.batch_size,
        )
        for query, value in scores.items():
            log.info("P@10 %-16s %.2f", query, value)
        log.info("minimum P@10 %.2f", min(scores.values()))
    else:
        collection = write_demo_collection(args.dest, seed=args.seed)
        log.info("wrote %d photos to %s", collection.image_count, collection.root)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
