"""The demo's scenes: what its photos show, its benchmark queries, and how a photo is drawn.

The demo collection (written by `engine.demo.collection`) is drawn photos of coloured shapes
("red circle", "blue triangle", ...) on varied backgrounds. Each of the 12 colour-shape classes
is a fictional species (a taxon). Like INQUIRE, the benchmark asks for more than the species
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

Every judgment follows from a photo's metadata alone (`judge`), so the judgments are exact and
exhaustive:

- species S: some object is an S;
- "a A beside a B": an A and a B whose bbox centres lie further apart across than up and down;
- "a A above a B": an A and a B further apart up and down than across, the A higher;
- "two S" / "three S": exactly two (three) objects are S;
- "a tiny S" / "a large S": an S whose `size` is tiny (large);
- "a S on a striped (spotted) background": an S, and the image's `background` is that pattern;
- "a S partly hidden behind twigs": an S whose `occluded` is true.

Every photo comes from its own seeded random streams (`image_rng`), so a collection is the
same for a seed, and the demo model's training data (tools/train_demo_clip.py) never share a
photo with it.
"""

from __future__ import annotations

import colorsys
import io
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import product
from typing import Any

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

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

IMAGE_SIZE = 160  # pixels on a side of a demo photo
_JPEG_QUALITY = 90

# Seed streams: the purpose comes first so the shipped collection (purpose 0) never shares
# images with the model's training (1) or validation (2) data, whatever the seeds.
PURPOSE_COLLECTION, PURPOSE_TRAIN, PURPOSE_VALIDATION = 0, 1, 2


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


def plural(name: str) -> str:
    """The plural of a common name ("red circle" -> "red circles")."""
    return name + "s"


def pick(rng: np.random.Generator, options: Sequence[str]) -> str:
    """One of `options`, drawn with `rng` (captions, notes and random scenes use it)."""
    return options[int(rng.integers(len(options)))]


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
            add(f"{word} {plural(name)}", "count", (name,), n, DemoScene((name,) * n))
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

# Seed purpose of the held-out benchmark's collection (`heldout_queries`).
PURPOSE_HELDOUT = 7


def _pair_groups() -> list[tuple[str, str]]:
    """Every pair of species with different colours and shapes, one per swapped-binding group
    (the pair and its swap are one group), in a fixed order."""
    seen: set[frozenset[str]] = set()
    groups: list[tuple[str, str]] = []
    for a, b in product(DEMO_CLASSES, DEMO_CLASSES):
        if a.colour == b.colour or a.shape == b.shape or a.index > b.index:
            continue
        pair = (a.common_name, b.common_name)
        key = frozenset((*pair, *_swap_colours(*pair)))
        if key not in seen:
            seen.add(key)
            groups.append(pair)
    return groups


def heldout_queries() -> tuple[DemoQuery, ...]:
    """A second benchmark on the demo world whose queries the demo benchmark does not ask:
    every "beside" pair group and "above" pair group not among `DEMO_QUERIES`' (each pair with
    its swapped binding), counts, sizes, backgrounds and occlusion of the other species, and the
    12 species queries. Drawn with `PURPOSE_HELDOUT` photos (tests/bench/bench_rerank_heldout.py),
    so nothing tuned on the demo benchmark has seen its photos or judgments."""
    asked = {frozenset((*q.species, *_swap_colours(*q.species))) for q in DEMO_QUERIES
             if q.category in ("binding", "relation")}  # fmt: skip
    fresh = [g for g in _pair_groups() if frozenset((*g, *_swap_colours(*g))) not in asked]
    queries: list[DemoQuery] = [
        DemoQuery(c.index + 1, c.common_name, "species", (c.common_name,)) for c in DEMO_CLASSES
    ]

    def add(text: str, category: str, species: tuple[str, ...], value: Any, scene: Any) -> None:
        queries.append(DemoQuery(len(queries) + 1, text, category, species, value, scene))

    def unused(names: Sequence[str]) -> list[str]:
        return [c.common_name for c in DEMO_CLASSES if c.common_name not in names]

    for a, b in fresh:
        for x, y in ((a, b), _swap_colours(a, b)):
            add(f"a {x} beside a {y}", "binding", (x, y), "beside", DemoScene((x, y), "beside"))
    for a, b in fresh[1::5]:  # 3 groups, spread over the list
        swapped = _swap_colours(a, b)
        for x, y in ((a, b), swapped, (b, a), swapped[::-1]):
            add(f"a {x} above a {y}", "relation", (x, y), "above", DemoScene((x, y), "above"))
    for name in unused(_COUNT_SPECIES):
        for n, word in _COUNT_WORDS.items():
            add(f"{word} {plural(name)}", "count", (name,), n, DemoScene((name,) * n))
    for name in unused(_SIZE_SPECIES)[:4]:
        for size in ("tiny", "large"):
            add(f"a {size} {name}", "size", (name,), size, DemoScene((name,), size=size))
    for name in unused(_BACKGROUND_SPECIES)[:4]:
        for pattern in PATTERNED_BACKGROUNDS:
            scene = DemoScene((name,), background=pattern)
            add(f"a {name} on a {pattern} background", "background", (name,), pattern, scene)
    for name in unused(_OCCLUSION_SPECIES)[:4]:
        scene = DemoScene((name,), occluded=True)
        add(f"a {name} partly hidden behind twigs", "occlusion", (name,), True, scene)
    return tuple(queries)


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


# ---------------------------------------------------------------------------------------------
# Drawing


@dataclass(frozen=True)
class PlacedObject:
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

    def bbox(self, image_size: int = IMAGE_SIZE) -> list[float]:
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


def _plan_objects(rng: np.random.Generator, scene: DemoScene, size: int) -> list[PlacedObject]:
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
                PlacedObject(
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
    rng: np.random.Generator, scene: DemoScene, size: int = IMAGE_SIZE
) -> tuple[str, list[PlacedObject]]:
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


def _draw_occluders(rng: np.random.Generator, draw: ImageDraw.ImageDraw, obj: PlacedObject) -> None:
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
    rng: np.random.Generator,
    background: str,
    objects: Sequence[PlacedObject],
    size: int = IMAGE_SIZE,
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
    rng: np.random.Generator, scene: DemoScene, size: int = IMAGE_SIZE
) -> tuple[Image.Image, str, list[PlacedObject]]:
    """Draw one photo of `scene`; returns it with its background pattern and placed objects."""
    background, objects = _plan_photo(rng, scene, size)
    return _render(rng, background, objects, size), background, objects


def draw_demo_image(
    rng: np.random.Generator, colour: str, shape: str, size: int = IMAGE_SIZE
) -> Image.Image:
    """Draw one plain demo photo: a `colour` `shape` at a random place, size and angle on a
    varied background with some neutral clutter."""
    return draw_demo_scene(rng, DemoScene((f"{colour} {shape}",)), size)[0]


STREAM_METADATA, STREAM_PIXELS, STREAM_GEOMETRY = 0, 1, 2
_EXTRA_KEY = 1000  # seed key of the photos drawn for query N: _EXTRA_KEY + N


def image_rng(
    purpose: int, seed: int, class_index: int, number: int, stream: int = STREAM_PIXELS
) -> np.random.Generator:
    """The random stream of one photo's metadata, pixels or geometry (`stream`), apart from
    every other photo's and every other purpose's."""
    return np.random.default_rng([purpose, seed, class_index, number, stream])


def jpeg_bytes(image: Image.Image) -> bytes:
    """The photo as the demo stores it: a JPEG file's bytes."""
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=_JPEG_QUALITY)
    return buffer.getvalue()


# ---------------------------------------------------------------------------------------------
# A collection's photos, planned and drawn (written to disk by engine/demo/collection.py)


@dataclass(frozen=True)
class PlannedPhoto:
    """One photo of a collection, planned (what it shows and where) before it is drawn."""

    scene: DemoScene
    kind: str  # the category of the query it was drawn for
    key: int  # seed key: the class index for plain photos, _EXTRA_KEY + query id otherwise
    number: int
    background: str
    objects: tuple[PlacedObject, ...]

    @property
    def demo_class(self) -> DemoClass:
        return _CLASS_BY_NAME[self.scene.objects[0]]


def default_photos_per_query(images_per_class: int) -> int:
    """Photos drawn for each non-species query: a quarter of the plain photos per class."""
    return max(1, images_per_class // 4)


def plan_collection(
    purpose: int,
    seed: int,
    images_per_class: int,
    photos_per_query: int,
    queries: Sequence[DemoQuery] = DEMO_QUERIES,
) -> list[PlannedPhoto]:
    """Every photo of a collection, planned (cheap: nothing drawn), grouped by species folder."""
    plan: list[PlannedPhoto] = []
    jobs: list[tuple[DemoScene, str, int, int]] = [
        (DemoScene((c.common_name,)), "species", c.index, number)
        for c in DEMO_CLASSES
        for number in range(images_per_class)
    ]
    for query in queries:
        if query.scene is not None:
            key = _EXTRA_KEY + query.query_id
            jobs += [(query.scene, query.category, key, n) for n in range(photos_per_query)]
    for scene, kind, key, number in jobs:
        rng = image_rng(purpose, seed, key, number, STREAM_GEOMETRY)
        background, objects = _plan_photo(rng, scene)
        plan.append(PlannedPhoto(scene, kind, key, number, background, tuple(objects)))
    # Photos grouped by folder, in the order each folder got them.
    order = {c.common_name: c.index for c in DEMO_CLASSES}
    plan.sort(key=lambda p: order[p.scene.objects[0]])
    return plan


def render_planned(purpose: int, seed: int, photo: PlannedPhoto) -> Image.Image:
    """Draw a planned photo; the same pixels for the same purpose, seed and plan."""
    rng = image_rng(purpose, seed, photo.key, photo.number)
    return _render(rng, photo.background, photo.objects)
