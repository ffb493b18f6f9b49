"""Train the demo answering model (resources/models/quadrat-demo-answerer.safetensors): a small
head on the frozen demo CLIP that answers yes/no questions about the demo's drawn scenes
(`engine.rerank.demo`).

    python tools/train_demo_answerer.py train [--scenes 3000] [--epochs 6] [--cache DIR] [--out FILE]
    python tools/train_demo_answerer.py evaluate [--file FILE] [--cache DIR]

Data: random scenes drawn by the demo's own generator (`engine.demo.scenes`) from seed purposes
of their own: 5 for training, 6 for validation. The demo collection is purpose 0, the demo CLIP
model's data 1 and 2, the LLaVA experiment's 3 and 4, the held-out rerank benchmark 7
(tests/bench/bench_rerank_heldout.py). The benchmark's queries and judgments are never read.
Each scene is stored as the demo stores photos (JPEG) and read back, and its crops encoded by
the demo CLIP exactly as the scorer encodes them.

Questions are statements as the scorer reads them (`engine.rerank.clip.question_statement`:
"red circle", "two red circles", "a red circle beside a blue square", ...), made from the demo
world's words (colour-shape objects, counts, beside/above/below, tiny/large, striped/spotted
backgrounds, twigs) around what each scene shows, with hard negatives (the swapped binding, the
other count, the reversed order). Every answer is computed from the scene's plan by the
benchmark's own rule (`engine.demo.scenes.judge`). Each scene gives at most one yes and one no
per kind of question, and each kind keeps as many no answers as yes answers. Deterministic (seeded streams, torch seed 0, one thread order); a few
minutes on two CPU cores.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script: the repository's packages come first
    sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
from PIL import Image  # noqa: E402

from engine.demo.collection import annotation_record  # noqa: E402
from engine.demo.scenes import (  # noqa: E402
    COLOURS,
    DEMO_CLASSES,
    PATTERNED_BACKGROUNDS,
    SHAPES,
    STREAM_GEOMETRY,
    DemoQuery,
    DemoScene,
    PlacedObject,
    draw_demo_scene,
    image_rng,
    jpeg_bytes,
    judge,
    pick,
    plural,
)
from engine.rerank.demo import ANSWERER_FORMAT, build_head, features_for_training  # noqa: E402

PURPOSE_TRAIN, PURPOSE_VALIDATION = 5, 6
CONFIG = {"dim": 64, "width": 96, "layers": 2, "heads": 4}
KINDS = ("object", "count", "beside", "above", "size", "background", "occlusion")
NAMES = tuple(c.common_name for c in DEMO_CLASSES)


def random_scene(rng: np.random.Generator) -> DemoScene:
    """Any of the demo's kinds of photo: one shape (tiny, normal or large), two (beside, above
    or anywhere) or a count of one species; any of them on a patterned background or behind
    twigs now and then, so that every kind of question has yes answers enough."""
    name = pick(rng, NAMES)
    background = pick(rng, PATTERNED_BACKGROUNDS) if rng.uniform() < 0.3 else None
    roll = rng.uniform()
    if roll < 0.45:
        size = pick(rng, ("tiny", "large", "normal")) if rng.uniform() < 0.6 else "normal"
        occluded = bool(rng.uniform() < 0.25)
        return DemoScene((name,), size=size, background=background, occluded=occluded)
    occluded = bool(rng.uniform() < 0.1)
    if roll < 0.75:
        other = pick(rng, [n for n in NAMES if n != name])
        layout = pick(rng, ("beside", "above", "free"))
        return DemoScene((name, other), layout, background=background, occluded=occluded)
    count = int(rng.integers(2, 4))
    return DemoScene((name,) * count, background=background, occluded=occluded)


def draw(purpose: int, number: int) -> tuple[Image.Image, str, list[PlacedObject], DemoScene]:
    """Scene `number` of a purpose's stream, as the demo stores photos (JPEG, read back)."""
    scene = random_scene(image_rng(purpose, 0, 0, number, STREAM_GEOMETRY))
    image, background, objects = draw_demo_scene(image_rng(purpose, 0, 0, number), scene)
    stored = Image.open(io.BytesIO(jpeg_bytes(image))).convert("RGB")
    return stored, background, objects, scene


def _swap(a: str, b: str) -> tuple[str, str]:
    (ca, sa), (cb, sb) = a.split(), b.split()
    return f"{cb} {sa}", f"{ca} {sb}"


def candidates(
    rng: np.random.Generator, objects: Sequence[PlacedObject]
) -> list[tuple[str, str, DemoQuery]]:
    """(kind, statement, the query whose judgment is its answer) around what a scene shows."""
    present = list(dict.fromkeys(o.name for o in objects))
    absent = [n for n in NAMES if n not in present]
    near = set(present)
    for a in present:  # the same colour or shape as something drawn: harder than a random one
        colour, shape = a.split()
        near.update(f"{colour} {s}" for s in SHAPES)
        near.update(f"{c} {shape}" for c in COLOURS)
    for a in present:
        for b in present:
            if a != b:
                near.update(_swap(a, b))
    near_list = sorted(near)
    some = [*present, pick(rng, absent), pick(rng, near_list), pick(rng, near_list)]
    out: list[tuple[str, str, DemoQuery]] = []

    def add(kind: str, text: str, category: str, species: tuple[str, ...], value: Any) -> None:
        out.append((kind, text, DemoQuery(0, text, category, species, value)))

    for name in some:
        add("object", name if rng.uniform() < 0.5 else f"a {name}", "species", (name,), None)
        for n, word in ((2, "two"), (3, "three")):
            add("count", f"{word} {plural(name)}", "count", (name,), n)
        size = pick(rng, ("tiny", "large"))
        add("size", f"a {size} {name}", "size", (name,), size)
        pattern = pick(rng, PATTERNED_BACKGROUNDS)
        add("background", f"a {name} on a {pattern} background", "background", (name,), pattern)
        add("occlusion", f"a {name} partly hidden behind twigs", "occlusion", (name,), True)
    pairs: list[tuple[str, str]] = []
    for a in present:
        for b in present:
            if a != b:
                pairs += [(a, b), _swap(a, b)]
    if not pairs or rng.uniform() < 0.3:
        a = pick(rng, present)
        b = pick(rng, [n for n in near_list if n != a] or list(absent))
        pairs.append((a, b) if rng.uniform() < 0.5 else (b, a))
    for x, y in pairs:
        if x == y:
            continue
        word = pick(rng, ("beside", "next to"))
        add("beside", f"a {x} {word} a {y}", "binding", (x, y), "beside")
        if rng.uniform() < 0.7:
            add("above", f"a {x} above a {y}", "relation", (x, y), "above")
        else:  # "a Y below a X": true when X is above Y
            add("above", f"a {y} below a {x}", "relation", (x, y), "above")
    return out


def questions_for(
    rng: np.random.Generator, background: str, objects: Sequence[PlacedObject]
) -> list[tuple[str, str, bool]]:
    """At most one yes and one no per kind of question for one scene: (kind, statement, answer)."""
    image = {"attributes": {"background": background}}
    records = [
        {**annotation_record(k, 0, o), "name": o.name} for k, o in enumerate(objects, start=1)
    ]
    by_kind: dict[tuple[str, bool], list[str]] = defaultdict(list)
    for kind, text, query in candidates(rng, objects):
        by_kind[(kind, judge(query, image, records))].append(text)
    out: list[tuple[str, str, bool]] = []
    for (kind, answer), texts in sorted(by_kind.items()):
        out.append((kind, pick(rng, sorted(set(texts))), answer))
    return out


def dataset(encoder: Any, purpose: int, scenes: int, cache: Path | None = None) -> dict[str, Any]:
    """Crop vectors of `scenes` drawn scenes and their questions (scene index, kind, text, y);
    kept in `cache` (a folder) when given, so a second run draws nothing."""
    import pickle

    stored = cache / f"answerer-data-{purpose}-{scenes}.pickle" if cache else None
    if stored is not None and stored.is_file():
        with stored.open("rb") as handle:
            data: dict[str, Any] = pickle.load(handle)  # noqa: S301 - our own file
        return data
    data = _draw_dataset(encoder, purpose, scenes)
    if stored is not None:
        stored.parent.mkdir(parents=True, exist_ok=True)
        with stored.open("wb") as handle:
            pickle.dump(data, handle)
    return data


def _draw_dataset(encoder: Any, purpose: int, scenes: int) -> dict[str, Any]:
    started = time.perf_counter()
    crops: list[np.ndarray] = []
    rows: list[tuple[int, str, str, bool]] = []
    batch: list[Image.Image] = []
    for number in range(scenes):
        image, background, objects, _ = draw(purpose, number)
        rng = image_rng(purpose, 0, 1, number, STREAM_GEOMETRY)
        rows += [(number, *q) for q in questions_for(rng, background, objects)]
        batch.append(image)
        if len(batch) == 256 or number == scenes - 1:
            vectors, _ = features_for_training(encoder, batch, [])
            crops.append(vectors)
            batch = []
            print(f"  {number + 1}/{scenes} scenes, {time.perf_counter() - started:.0f} s",
                  file=sys.stderr, flush=True)  # fmt: skip
    rows = balanced(rows, np.random.default_rng([purpose, 0, 2]))
    _, texts = features_for_training(encoder, [], [r[2] for r in rows])
    return {"crops": np.concatenate(crops), "rows": rows, "texts": texts}


def balanced(
    rows: Sequence[tuple[int, str, str, bool]], rng: np.random.Generator
) -> list[tuple[int, str, str, bool]]:
    """Per kind of question, every yes and as many no answers (drawn at random): most scenes
    answer most questions no, and a head trained on that learns to say no."""
    keep: list[tuple[int, str, str, bool]] = []
    for kind in KINDS:
        yes = [r for r in rows if r[1] == kind and r[3]]
        no = [r for r in rows if r[1] == kind and not r[3]]
        chosen = rng.permutation(len(no))[: len(yes)] if len(no) > len(yes) else range(len(no))
        keep += yes + [no[int(i)] for i in sorted(chosen)]
    return sorted(keep)


def tensors(data: dict[str, Any]) -> tuple[Any, ...]:
    import torch

    rows = data["rows"]
    index = torch.tensor([r[0] for r in rows])
    texts = torch.from_numpy(np.stack([data["texts"][r[2]][0] for r in rows]).astype(np.float32))
    relation = torch.tensor([data["texts"][r[2]][1] for r in rows])
    y = torch.tensor([float(r[3]) for r in rows])
    crops = torch.from_numpy(data["crops"].astype(np.float32))
    return crops, index, texts, relation, y


def accuracy(head: Any, data: dict[str, Any]) -> dict[str, float]:
    """Balanced accuracy per kind of question (threshold p = 0.5) and over all."""
    import torch

    crops, index, texts, relation, y = tensors(data)
    with torch.inference_mode():
        logits = torch.cat([
            head(crops[index[i : i + 4096]], texts[i : i + 4096], relation[i : i + 4096])
            for i in range(0, len(y), 4096)
        ])  # fmt: skip
    right = ((logits > 0).float() == y).tolist()
    per: dict[tuple[str, bool], list[float]] = defaultdict(list)
    for (_, kind, _, answer), ok in zip(data["rows"], right, strict=True):
        per[(kind, answer)].append(ok)
        per[("all", answer)].append(ok)
    # Balanced accuracy: the mean of the accuracies on yes and on no answers.
    kinds = {k for k, _ in per}
    return {k: float(np.mean([np.mean(per[(k, a)]) for a in (True, False) if per[(k, a)]]))
            for k in kinds}  # fmt: skip


def calibration_error(head: Any, data: dict[str, Any], bins: int = 10) -> dict[str, float]:
    """Expected calibration error per kind of question and over all: the mean, weighted by the
    answers in each of `bins` equal-width bins of p(yes), of |mean p - share of yes answers|.
    How far apart two p(yes) must be before the head's order of them means anything."""
    import torch

    crops, index, texts, relation, y = tensors(data)
    with torch.inference_mode():
        logits = torch.cat([
            head(crops[index[i : i + 4096]], texts[i : i + 4096], relation[i : i + 4096])
            for i in range(0, len(y), 4096)
        ])  # fmt: skip
    p = torch.sigmoid(logits).numpy()
    truth = y.numpy()
    kinds = np.array([r[1] for r in data["rows"]])
    result: dict[str, float] = {}
    for kind in [*sorted(set(kinds.tolist())), "all"]:
        mask = np.ones(len(p), dtype=bool) if kind == "all" else kinds == kind
        which = np.minimum((p[mask] * bins).astype(int), bins - 1)
        gap = 0.0
        for b in range(bins):
            inside = which == b
            if inside.any():
                gap += inside.sum() * abs(p[mask][inside].mean() - truth[mask][inside].mean())
        result[kind] = float(gap / mask.sum())
    return result


def train(args: argparse.Namespace) -> int:
    import torch
    from safetensors.torch import save_file

    from engine.models.encoders import load_encoder

    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    encoder = load_encoder("demo", device="cpu", runtime="torch")
    print("drawing and encoding training scenes", file=sys.stderr)
    train_data = dataset(encoder, PURPOSE_TRAIN, args.scenes, args.cache)
    valid_data = dataset(encoder, PURPOSE_VALIDATION, args.validation, args.cache)
    kinds = Counter((r[1], r[3]) for r in train_data["rows"])
    print(f"{len(train_data['rows'])} training questions: {dict(sorted(kinds.items()))}",
          file=sys.stderr)  # fmt: skip
    head = build_head(CONFIG)
    crops, index, texts, relation, y = tensors(train_data)
    optimiser = torch.optim.AdamW(head.parameters(), lr=args.lr, weight_decay=0.01)
    steps = args.epochs * ((len(y) + args.batch - 1) // args.batch)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimiser, args.lr, total_steps=steps)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    started = time.perf_counter()
    generator = torch.Generator().manual_seed(0)
    for epoch in range(args.epochs):
        head.train()
        order = torch.randperm(len(y), generator=generator)
        total = 0.0
        for i in range(0, len(y), args.batch):
            pick_ = order[i : i + args.batch]
            loss = loss_fn(head(crops[index[pick_]], texts[pick_], relation[pick_]), y[pick_])
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            schedule.step()
            total += float(loss.detach()) * len(pick_)
        head.eval()
        valid = accuracy(head, valid_data)
        print(f"epoch {epoch + 1}: loss {total / len(y):.4f}, validation "
              + ", ".join(f"{k} {v:.3f}" for k, v in sorted(valid.items()))
              + f" ({time.perf_counter() - started:.0f} s)", file=sys.stderr, flush=True)  # fmt: skip
    state = {k: v.detach().contiguous() for k, v in head.state_dict().items()}
    digest = hashlib.sha256()
    for key in sorted(state):
        digest.update(key.encode())
        digest.update(state[key].numpy().tobytes())
    metadata = {
        "format": ANSWERER_FORMAT,
        "config": json.dumps(CONFIG),
        "clip_model_key": encoder.model_key,
        "sha": digest.hexdigest()[:16],
        "trained_on": f"demo generator scenes, seed purpose {PURPOSE_TRAIN}, {args.scenes} "
        f"scenes; validated on purpose {PURPOSE_VALIDATION}, {args.validation} scenes",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    save_file(state, str(args.out), metadata=metadata)
    valid = accuracy(head, valid_data)
    print(json.dumps({"validation_accuracy": {k: round(v, 4) for k, v in valid.items()},
                      "questions": len(y), "seconds": round(time.perf_counter() - started, 1)},
                     indent=1))  # fmt: skip
    return 0


def evaluate(args: argparse.Namespace) -> int:
    from engine.models.encoders import load_encoder
    from engine.rerank.demo import read_answerer

    head, _ = read_answerer(args.file)
    encoder = load_encoder("demo", device="cpu", runtime="torch")
    data = dataset(encoder, PURPOSE_VALIDATION, args.validation, args.cache)
    print(json.dumps({k: round(v, 4) for k, v in sorted(accuracy(head, data).items())}, indent=1))
    calibration = calibration_error(head, data)
    print(json.dumps({"calibration_error": {k: round(v, 4) for k, v in calibration.items()}}))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    from engine.rerank.demo import answerer_path

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train")
    t.add_argument("--scenes", type=int, default=3000)
    t.add_argument("--validation", type=int, default=500)
    t.add_argument("--epochs", type=int, default=6)
    t.add_argument("--cache", type=Path, help="keep the drawn data here for the next run")
    t.add_argument("--batch", type=int, default=256)
    t.add_argument("--lr", type=float, default=2e-3)
    t.add_argument("--threads", type=int, default=2)
    t.add_argument(
        "--out",
        type=Path,
        default=REPO / "resources" / "models" / "quadrat-demo-answerer.safetensors",
    )
    e = sub.add_parser("evaluate")
    e.add_argument("--file", type=Path, default=None)
    e.add_argument("--validation", type=int, default=500)
    e.add_argument("--cache", type=Path, help="keep the drawn data here for the next run")
    args = parser.parse_args(argv)
    if args.command == "train":
        return train(args)
    args.file = args.file or answerer_path()
    return evaluate(args)


if __name__ == "__main__":
    sys.exit(main())
