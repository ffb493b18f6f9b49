"""The synthetic demo collection and the tiny demo CLIP model trained on it.

The demo collection is a few hundred drawn photos of coloured shapes ("red circle", "blue
triangle", ...) on varied backgrounds, laid out like an iNaturalist dataset (iNat folder names,
a COCO-style metadata file) with INQUIRE-format query and judgment files, so every feature of
the application can be tried without downloading anything.

The demo model (`resources/models/quadrat-demo.*`) is a small open_clip model trained on images
from the same generator, with other seeds. Train it again with::

    python -m engine.demo train [--steps 3500] [--minutes 10] [--out resources/models]
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
from collections.abc import Sequence
from dataclasses import dataclass
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

_IMAGE_SIZE = 160
_JPEG_QUALITY = 90
_GENERATOR_NAME = "quadrat-demo"
_GENERATOR_VERSION = 2

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


@dataclass(frozen=True)
class DemoCollection:
    """A demo collection on disk. `labels` maps each image path (relative to `root`) to its
    class's common name ("red circle"), which is also the text of the query it answers."""

    root: Path
    metadata_path: Path
    queries_path: Path
    judgments_path: Path
    image_count: int
    labels: dict[str, str]


# ---------------------------------------------------------------------------------------------
# Drawing


def _muted_colour(rng: np.random.Generator) -> np.ndarray:
    """A background colour: any hue, low saturation, so it never looks like a shape colour."""
    r, g, b = colorsys.hsv_to_rgb(rng.uniform(0, 1), rng.uniform(0, 0.3), rng.uniform(0.2, 0.95))
    return np.array([r, g, b]) * 255.0


def _background(rng: np.random.Generator, size: int) -> Image.Image:
    kind = rng.choice(["solid", "gradient", "noise", "blotches"])
    base = _muted_colour(rng)
    pixels = np.broadcast_to(base, (size, size, 3)).astype(np.float64)
    if kind == "gradient":
        other = _muted_colour(rng)
        angle = rng.uniform(0, 2 * math.pi)
        ys, xs = np.mgrid[0:size, 0:size] / (size - 1)
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
    image = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))
    if kind == "blotches":
        draw = ImageDraw.Draw(image)
        for _ in range(int(rng.integers(3, 8))):
            x, y = rng.uniform(-0.2, 1.0, 2) * size
            w, h = rng.uniform(0.2, 0.6, 2) * size
            draw.ellipse((x, y, x + w, y + h), fill=tuple(int(c) for c in _muted_colour(rng)))
        image = image.filter(ImageFilter.GaussianBlur(radius=float(rng.uniform(2, 6))))
    grain = rng.normal(0, rng.uniform(1, 6), (size, size, 3))
    return Image.fromarray(
        np.clip(np.asarray(image, dtype=np.float64) + grain, 0, 255).astype(np.uint8)
    )


def _neutral_colour(rng: np.random.Generator) -> tuple[int, int, int]:
    """Clutter colours: greys, near-black, near-white and browns, never a shape colour."""
    if rng.uniform() < 0.7:
        v = int(rng.integers(10, 246))
        return (v, v, v)
    v = rng.uniform(0.25, 0.55)
    r, g, b = colorsys.hsv_to_rgb(rng.uniform(0.05, 0.1), rng.uniform(0.3, 0.6), v)
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


def draw_demo_image(
    rng: np.random.Generator, colour: str, shape: str, size: int = _IMAGE_SIZE
) -> Image.Image:
    """Draw one demo photo: a `colour` `shape` at a random place, size and angle on a varied
    background with some neutral clutter."""
    image = _background(rng, size)
    draw = ImageDraw.Draw(image)
    _draw_clutter(rng, draw, size)
    radius = rng.uniform(0.16, 0.34) * size
    cx, cy = rng.uniform(radius, size - radius, 2)
    fill = tuple(int(np.clip(c + rng.integers(-20, 21), 0, 255)) for c in _COLOUR_RGB[colour])
    if shape == "circle":
        r = radius * 0.85  # a circle of the full radius looks much bigger than the polygons
        draw.ellipse((cx - r, cy - r, cx + r, cy + r), fill=fill)
    else:
        draw.polygon(_shape_polygon(shape, cx, cy, radius, rng.uniform(0, 2 * math.pi)), fill=fill)
    return image


_STREAM_METADATA, _STREAM_PIXELS = 0, 1


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


def write_demo_collection(
    dest: Path, images_per_class: int = 40, seed: int = 0, progress: ProgressCallback = no_progress
) -> DemoCollection:
    """Write the demo collection into `dest` (created if missing) and return its description.

    Deterministic for a seed. On a folder that already holds the same demo collection nothing
    is rewritten; a different demo collection there is replaced. A non-empty folder that is not
    a demo collection is refused with `BadInputError`.
    """
    dest = Path(dest)
    if images_per_class < 1:
        raise BadInputError(f"images_per_class must be at least 1, not {images_per_class}")
    if dest.exists() and not dest.is_dir():
        raise BadInputError(f"cannot write the demo collection to {dest}: it is a file")
    existing = _is_demo_collection(dest) if dest.is_dir() else None
    if dest.is_dir() and any(dest.iterdir()) and existing is None:
        raise BadInputError(
            f"cannot write the demo collection to {dest}: the folder is not empty "
            "and is not a demo collection; choose an empty or new folder"
        )

    # Plan every image first (cheap), so an existing identical collection can be recognised.
    images: list[dict[str, Any]] = []
    annotations: list[dict[str, int]] = []
    plan: list[tuple[DemoClass, int, str]] = []
    for demo_class in DEMO_CLASSES:
        for number in range(images_per_class):
            rng = _image_rng(_PURPOSE_COLLECTION, seed, demo_class.index, number, _STREAM_METADATA)
            image_uuid = uuid.UUID(bytes=rng.bytes(16), version=4)
            file_name = f"train/{demo_class.dir_name}/{image_uuid}.jpg"
            image_id = len(images) + 1
            images.append(_metadata_for_image(rng, image_id, file_name))
            annotations.append(
                {"id": image_id, "image_id": image_id, "category_id": demo_class.index}
            )
            plan.append((demo_class, number, file_name))
    info = {
        "description": "Quadrat synthetic demo collection: coloured shapes",
        "generator": _GENERATOR_NAME,
        "generator_version": _GENERATOR_VERSION,
        "seed": seed,
        "images_per_class": images_per_class,
    }
    labels = {file_name: demo_class.common_name for demo_class, _, file_name in plan}
    collection = DemoCollection(
        root=dest,
        metadata_path=dest / "metadata.json",
        queries_path=dest / "queries.csv",
        judgments_path=dest / "judgments.csv",
        image_count=len(plan),
        labels=labels,
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

    categories = [
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
    metadata = {
        "info": info,
        "images": images,
        "categories": categories,
        "annotations": annotations,
    }
    # metadata.json first: it marks the folder as a demo collection, so an interrupted write
    # is completed by the next call instead of being refused as a foreign folder.
    dest.mkdir(parents=True, exist_ok=True)
    collection.metadata_path.write_text(json.dumps(metadata, indent=1), encoding="utf-8")
    meter = RateMeter(len(plan))
    for done, (demo_class, number, file_name) in enumerate(plan, start=1):
        path = dest / file_name
        path.parent.mkdir(parents=True, exist_ok=True)
        rng = _image_rng(_PURPOSE_COLLECTION, seed, demo_class.index, number)
        partial = path.with_name(path.name + ".part")  # never a half-written photo in place
        partial.write_bytes(_jpeg_bytes(draw_demo_image(rng, demo_class.colour, demo_class.shape)))
        os.replace(partial, path)
        progress(meter.update(done, "writing demo photos"))
    _write_queries(collection.queries_path)
    _write_judgments(collection.judgments_path, images, annotations)
    return collection


def _write_queries(path: Path) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(QUERIES_HEADER.split(","))
        for c in DEMO_CLASSES:
            writer.writerow(
                [c.index, c.index + 1, c.common_name, "Appearance", "Colour and shape", "Plants"]
            )


def _write_judgments(
    path: Path, images: list[dict[str, Any]], annotations: list[dict[str, int]]
) -> None:
    file_names = {image["id"]: image["file_name"] for image in images}
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(JUDGMENTS_HEADER.split(","))
        for annotation in annotations:
            image_id = annotation["image_id"]
            writer.writerow([annotation["category_id"] + 1, image_id, file_names[image_id]])


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
    "a small {c} {s}",
    "a large {c} {s}",
)


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


def _render_tensor(
    rng: np.random.Generator, demo_class: DemoClass, preprocess: Any
) -> torch.Tensor:
    # Through JPEG and the model's own preprocessing, exactly like an indexed photo.
    image = draw_demo_image(rng, demo_class.colour, demo_class.shape)
    with Image.open(io.BytesIO(_jpeg_bytes(image))) as decoded:
        if rng.uniform() < 0.3:
            # A fast JPEG decode at reduced scale, as a thumbnailing pipeline might do: the
            # model should not care how the pixels were decoded.
            decoded.draft("RGB", (decoded.width // 2, decoded.height // 2))
        return preprocess(decoded.convert("RGB"))


def _render_pool(
    purpose: int, seed: int, per_class: int, preprocess: Any
) -> tuple[torch.Tensor, np.ndarray]:
    import torch

    tensors, classes = [], []
    for demo_class in DEMO_CLASSES:
        for number in range(per_class):
            tensors.append(
                _render_tensor(
                    _image_rng(purpose, seed, demo_class.index, number), demo_class, preprocess
                )
            )
            classes.append(demo_class.index)
    return torch.stack(tensors).half(), np.asarray(classes)


def train_demo_model(
    out_dir: Path,
    minutes: float = 10.0,
    seed: int = 0,
    steps: int = 3500,
    pool_per_class: int = 600,
) -> dict[str, float]:
    """Train the demo model for `steps` batches (stopping early after `minutes`) and write
    `quadrat-demo.json` and `quadrat-demo.safetensors` (fp16) into `out_dir`. On a busy
    two-core machine the default took about nine minutes.

    Returns P@10 per "<colour> <shape>" query, measured with the saved (fp16) weights by
    brute-force ranking of a freshly written demo collection (seed 0).
    """
    import tempfile

    import open_clip
    import torch
    import torch.nn.functional as F  # noqa: N812
    from safetensors.torch import save_file

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    config_path = out_dir / f"{DEMO_ARCH}.json"
    config_path.write_text(json.dumps(DEMO_MODEL_CONFIG, indent=2) + "\n", encoding="utf-8")
    open_clip.add_model_config(config_path)

    torch.manual_seed(seed)
    rng = np.random.default_rng([3, seed])
    model, _, preprocess = open_clip.create_model_and_transforms(DEMO_ARCH)
    tokenizer = open_clip.get_tokenizer(DEMO_ARCH)

    started = time.monotonic()
    pool, pool_classes = _render_pool(_PURPOSE_TRAIN, seed, pool_per_class, preprocess)
    validation, validation_classes = _render_pool(_PURPOSE_VALIDATION, seed, 30, preprocess)
    log.info("rendered %d training images in %.0f s", len(pool), time.monotonic() - started)

    # Tokenise every (template, class) caption once.
    captions = torch.stack(
        [
            tokenizer([t.format(c=c.colour, s=c.shape) for c in DEMO_CLASSES])
            for t in TRAINING_TEMPLATES
        ]
    )  # (templates, classes, context)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
    budget = minutes * 60.0
    batch_size, warmup_steps = 64, 100
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
        flip = torch.from_numpy(rng.uniform(size=batch_size) < 0.5)
        images[flip] = images[flip].flip(-1)
        classes = torch.from_numpy(pool_classes[picks])
        # The plain "<colour> <shape>" phrasing is what users type most: draw it more often.
        templates = torch.from_numpy(
            np.where(
                rng.uniform(size=batch_size) < 0.3,
                0,
                rng.integers(0, len(TRAINING_TEMPLATES), batch_size),
            )
        )
        texts = captions[templates, classes]
        image_features, text_features, logit_scale = model(images, texts)[:3]
        logits = logit_scale * image_features @ text_features.T
        # Soft targets: every item with the same class is a correct partner.
        same = (classes[:, None] == classes[None, :]).float()
        targets = same / same.sum(dim=1, keepdim=True)
        loss = 0.5 * (F.cross_entropy(logits, targets) + F.cross_entropy(logits.T, targets))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        step += 1
        if elapsed > next_report:
            next_report += 60.0
            scores = _evaluate_in_memory(model, tokenizer, validation, validation_classes)
            log.info(
                "step %d, %.0f s, loss %.3f, validation mean P@10 %.3f (min %.2f)",
                step,
                elapsed,
                loss.item(),
                np.mean(list(scores.values())),
                min(scores.values()),
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
        "trained %d steps; wrote %s (%.1f MB)",
        step,
        weights_path,
        weights_path.stat().st_size / 1e6,
    )
    with tempfile.TemporaryDirectory() as tmp:
        collection = write_demo_collection(Path(tmp) / "demo", seed=0)
        paths = list(collection.labels)
        images = []
        for p in paths:
            with Image.open(collection.root / p) as decoded:
                images.append(preprocess(decoded.convert("RGB")))
        with torch.inference_mode():
            image_vectors = F.normalize(model.encode_image(torch.stack(images)), dim=-1).numpy()
            queries = [c.common_name for c in DEMO_CLASSES]
            text_vectors = F.normalize(model.encode_text(tokenizer(queries)), dim=-1).numpy()
        return precision_at_k(
            image_vectors, [collection.labels[p] for p in paths], text_vectors, queries, queries
        )


def _evaluate_in_memory(
    model: Any, tokenizer: Any, images: torch.Tensor, classes: np.ndarray
) -> dict[str, float]:
    import torch
    import torch.nn.functional as F  # noqa: N812

    model.eval()
    labels = [DEMO_CLASSES[i].common_name for i in classes]
    queries, wanted = [], []
    for c in DEMO_CLASSES:
        for phrasing in ("{c} {s}", "a {c} {s}", "{c} {s}s", "there is a {c} {s} in the picture"):
            queries.append(phrasing.format(c=c.colour, s=c.shape))
            wanted.append(c.common_name)
    with torch.inference_mode():
        image_vectors = F.normalize(model.encode_image(images.float()), dim=-1).numpy()
        text_vectors = F.normalize(model.encode_text(tokenizer(queries)), dim=-1).numpy()
    return precision_at_k(image_vectors, labels, text_vectors, queries, wanted)


def _default_model_dir() -> Path:
    import resources.models

    return Path(resources.models.__file__).parent


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m engine.demo train|write`: developer entry point."""
    parser = argparse.ArgumentParser(prog="python -m engine.demo")
    commands = parser.add_subparsers(dest="command", required=True)
    train = commands.add_parser("train", help="train the demo model and write its files")
    train.add_argument("--out", type=Path, default=None, help="folder for the model files")
    train.add_argument("--minutes", type=float, default=10.0, help="time limit")
    train.add_argument("--steps", type=int, default=3500)
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
            args.out or _default_model_dir(), minutes=args.minutes, seed=args.seed
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
