"""Rerank scorer benchmark: throughput of the CLIP scorer (whole photo and regions) on CPU and
of the tiny random VLM, and whether regions help on the demo's binding questions.

    python tests/bench/bench_scorers.py [--photos 100] [--seed 7]

Photos are demo scenes drawn here (engine.demo.scenes.draw_demo_scene), never the benchmark's files
or judgments. Throughput is (photos x questions) / seconds for 3 questions on fresh scorers, so
the first question pays for encoding the photos (crops) and the later ones reuse them.
Binding: for each "beside"/"above" pair of the demo, photos of the scene and of its swapped
binding; one question per object, mean p; AP of the right binding. Species: one object per
photo; AP of "is there a {species}" over all twelve species. Prints Markdown tables.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "2")

import numpy as np  # noqa: E402 - after the thread setting

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def _ap(scores: list[float], relevant: list[bool]) -> float:
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    hits, total = 0, 0.0
    for rank, i in enumerate(order, 1):
        if relevant[i]:
            hits += 1
            total += hits / rank
    return total / max(1, sum(relevant))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--photos", type=int, default=100)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()

    from engine.demo.scenes import (
        _ABOVE_PAIRS,
        _BESIDE_PAIRS,
        DEMO_CLASSES,
        DemoScene,
        _swap_colours,
        draw_demo_scene,
    )
    from engine.indexing.hashes import content_hash
    from engine.models.encoders import load_encoder
    from engine.rerank.base import Photo, Question
    from engine.rerank.clip import ClipScorer
    from engine.rerank.vlm import VlmScorer
    from tests.tiny_vlm import build_tiny_vlm

    rng = np.random.default_rng(args.seed)
    folder = Path(tempfile.mkdtemp(prefix="bench-scorers-"))
    count = 0

    def draw(scene: DemoScene) -> Photo:
        nonlocal count
        path = folder / f"{count}.jpg"
        draw_demo_scene(rng, scene)[0].save(path, quality=90)
        count += 1
        return Photo(count, path, content_hash(path))

    encoder = load_encoder("demo", device="cpu")
    names = [c.common_name for c in DEMO_CLASSES]
    photos = [draw(DemoScene((names[i % len(names)],))) for i in range(args.photos)]
    questions = [Question(f"Is there a {x}?", target=x) for x in names[:3]]

    def throughput(scorer: object) -> float:
        start = time.perf_counter()
        for q in questions:
            scorer.score(photos, q, history=(), context="")  # type: ignore[attr-defined]
        return len(photos) * len(questions) / (time.perf_counter() - start)

    vlm = VlmScorer(build_tiny_vlm(folder / "tiny-vlm"), device="cpu", batch_size=8)
    rows = [
        ("clip:whole (demo model, CPU)", throughput(ClipScorer(encoder, regions=False))),
        (
            "clip:regions (demo model, CPU, whole + 9 crops)",
            throughput(ClipScorer(encoder, regions=True)),
        ),
        ("vlm (tiny random LLaVA, CPU, batch 8)", throughput(vlm)),
    ]
    print(f"\n{len(photos)} photos x {len(questions)} questions, {os.cpu_count()} CPUs\n")
    print("| scorer | photos x questions / s |\n| --- | ---: |")
    for name, rate in rows:
        print(f"| {name} | {rate:.1f} |")

    per_side = max(10, args.photos // 10)
    binding: dict[bool, list[float]] = {False: [], True: []}
    for a, b in list(_BESIDE_PAIRS) + list(_ABOVE_PAIRS):
        layout = "beside" if (a, b) in _BESIDE_PAIRS else "above"
        drawn = [draw(DemoScene((a, b), layout)) for _ in range(per_side)]
        drawn += [draw(DemoScene(_swap_colours(a, b), layout)) for _ in range(per_side)]
        right = [True] * per_side + [False] * per_side
        for regions in (False, True):
            scorer = ClipScorer(encoder, regions=regions)
            per_q = [
                [x.p_yes for x in scorer.score(drawn, Question(f"Is there a {o}?", target=o))]
                for o in (a, b)
            ]
            binding[regions].append(_ap(list(np.mean(per_q, axis=0)), right))
    species: dict[bool, float] = {}
    for regions in (False, True):
        scorer = ClipScorer(encoder, regions=regions)
        species[regions] = float(
            np.mean(
                [
                    _ap(
                        [x.p_yes for x in scorer.score(photos, Question("?", target=name))],
                        [names[i % len(names)] == name for i in range(len(photos))],
                    )
                    for name in names
                ]
            )
        )
    print(f"\nseed {args.seed}, {per_side} photos per scene\n")
    print("| CLIP scorer | binding AP (6 pairs, mean) | species mAP (12) |\n| --- | ---: | ---: |")
    for regions in (False, True):
        name = "regions" if regions else "whole"
        print(f"| {name} | {np.mean(binding[regions]):.3f} | {species[regions]:.3f} |")


if __name__ == "__main__":
    main()
