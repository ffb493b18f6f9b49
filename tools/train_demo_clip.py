"""Train the tiny demo CLIP model that ships in resources/models (quadrat-demo.json + .safetensors).

    python tools/train_demo_clip.py train [--minutes 10] [--out resources/models]
    python tools/train_demo_clip.py write DEST [--seed 0]

The demo model is a small open_clip model trained on images from the demo's own scene
generator (`engine.demo.scenes`), with other seeds than the demo collection and random scenes
(any species, pairs, counts, sizes, backgrounds), captioned the way web captions are: varied
phrasings, the relation, count, size or background words in some captions only. Nothing at run
time trains: the application loads the bundled weights (`engine.models.spec`), so training
lives here, out of the engine. `tools/train_demo_diffusion.py` draws its training data with the
same random scenes and captions. `write` writes a demo collection with a chosen seed.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script: the repository's packages come first
    sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
from PIL import Image  # noqa: E402

from engine.demo.collection import (  # noqa: E402
    annotation_record,
    category_records,
    write_demo_collection,
)
from engine.demo.scenes import (  # noqa: E402
    DEMO_CLASSES,
    DEMO_QUERIES,
    PATTERNED_BACKGROUNDS,
    PURPOSE_COLLECTION,
    PURPOSE_TRAIN,
    PURPOSE_VALIDATION,
    DemoQuery,
    DemoScene,
    default_photos_per_query,
    draw_demo_scene,
    image_rng,
    jpeg_bytes,
    pick,
    plan_collection,
    plural,
    relevant_from_metadata,
    render_planned,
)
from engine.models.spec import DEMO_ARCH  # noqa: E402

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

# ---------------------------------------------------------------------------------------------
# The captions: training data

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
            return pick(rng, _PAIR_TEMPLATES).format(a=x, b=y), ("pair", frozenset((a, b)))
        if roll < 0.6 and scene.layout == "beside":
            x, y = (a, b) if rng.uniform() < 0.5 else (b, a)
            return pick(rng, _BESIDE_TEMPLATES).format(a=x, b=y), ("beside", frozenset((a, b)))
        if roll < 0.6 and scene.layout == "above":
            templates = _ABOVE_TEMPLATES if rng.uniform() < 0.7 else _BELOW_TEMPLATES
            return pick(rng, templates).format(a=a, b=b), ("above", a, b)
        return _species_caption(rng, a if rng.uniform() < 0.5 else b)
    if n in _COUNT_TEMPLATES and rng.uniform() < 0.6:
        return pick(rng, _COUNT_TEMPLATES[n]).format(p=plural(first)), ("count", n, first)
    if scene.size in _SIZE_TEMPLATES and rng.uniform() < 0.6:
        return pick(rng, _SIZE_TEMPLATES[scene.size]).format(n=first), (scene.size, first)
    if scene.background in _BACKGROUND_TEMPLATES and rng.uniform() < 0.6:
        caption = pick(rng, _BACKGROUND_TEMPLATES[scene.background]).format(n=first)
        return caption, (scene.background, first)
    if scene.occluded and rng.uniform() < 0.6:
        return pick(rng, _OCCLUDED_TEMPLATES).format(n=first), ("occluded", first)
    return _species_caption(rng, first)


def random_scene(rng: np.random.Generator) -> DemoScene:
    """A training scene: any species, and any of the collection's kinds of photo (pairs of
    any two species in either layout, counts, sizes, backgrounds, occlusion)."""
    names = [c.common_name for c in DEMO_CLASSES]
    name = pick(rng, names)
    roll = rng.uniform()
    if roll < 0.40:
        return DemoScene((name,))
    if roll < 0.50:
        return DemoScene((name,), size=pick(rng, ("tiny", "large")))
    if roll < 0.60:
        return DemoScene((name,), background=pick(rng, PATTERNED_BACKGROUNDS))
    if roll < 0.68:
        return DemoScene((name,), occluded=True)
    if roll < 0.86:
        other = pick(rng, [n for n in names if n != name])
        return DemoScene((name, other), layout=pick(rng, ("beside", "above")))
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
    with Image.open(io.BytesIO(jpeg_bytes(image))) as decoded:
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
        rng = image_rng(PURPOSE_TRAIN, seed, 0, number)
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

    plan = plan_collection(purpose, seed, images_per_class, photos_per_query)
    tensors = []
    images: list[dict[str, Any]] = []
    annotations: list[dict[str, Any]] = []
    for row, photo in enumerate(plan):
        image = render_planned(purpose, seed, photo)
        with Image.open(io.BytesIO(jpeg_bytes(image))) as decoded:
            tensors.append(preprocess(decoded.convert("RGB")))
        images.append({"id": row, "attributes": {"background": photo.background}})
        annotations += [annotation_record(len(annotations), row, obj) for obj in photo.objects]
    metadata = {"images": images, "annotations": annotations, "categories": category_records()}
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
    validation, validation_relevant = _render_benchmark(PURPOSE_VALIDATION, seed, 20, 5, preprocess)
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
        PURPOSE_COLLECTION, 0, 40, default_photos_per_query(40), preprocess
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
    """`python tools/train_demo_clip.py train|write`: the developer entry point."""
    parser = argparse.ArgumentParser(prog="python tools/train_demo_clip.py")
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
