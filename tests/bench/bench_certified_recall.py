"""Judgments needed to certify recall with a guarantee (issues 28 and 35).

Run on demand (a few minutes on 2 cores):

    python tests/bench/bench_certified_recall.py [--runs 200] [--big-runs 20]

Prints a Markdown table of the stratified rule (engine/judgments/certified_recall.py: census of
the ranking's top, a Bernoulli sample below, an exact binomial bound) at targets 0.8 and 0.9,
confidence 95 %, against
- the quantile rule it replaced (Lewis, Yang & Frieder's QBCB: a simple random sample of the
  whole collection until it holds 14 or 29 relevant photos, then the ranking down to the
  quantile's stop; written out below as it was);
- the oracle: judging the ranking from the top until the target share of the relevant photos
  is found (it knows where they are; no real user can stop there on purpose).

Collections: the demo benchmark's 60 queries ranked by the demo model's text search (960 photos,
exact judgments), synthetic collections of 10,000 photos (1 to 5 % relevant, and a rare
behaviour: 5 to 30 relevant photos) and of 1,000,000 (1 to 5 %), ranked by a scorer of random
quality. "reached" is the share of runs whose realised recall reached the target: both rules
promise at least 0.95.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

from engine.judgments.certified_recall import binomial_tail, simulate  # noqa: E402

TARGETS = (0.8, 0.9)
CONFIDENCE = 0.95
Make = Callable[[np.random.Generator], tuple[np.ndarray, np.ndarray]]


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def quantile_rule(
    relevance: np.ndarray, scores: np.ndarray, target: float, seed: int
) -> tuple[float, int]:
    """The QBCB rule (the one before issue 35): (realised recall, judged)."""
    alpha = 1.0 - CONFIDENCE
    needed = math.ceil(math.log(alpha) / math.log(target) - 1e-12)
    order = np.argsort(-scores, kind="stable")
    n, total = len(order), int(relevance.sum())
    sample = np.random.default_rng([seed, 28]).permutation(n)
    cumulative = np.cumsum(relevance[sample])
    reached = np.nonzero(cumulative >= needed)[0]
    if len(reached) == 0:
        return 1.0, n  # too few relevant photos: the sample is the whole collection
    size = int(reached[0]) + 1
    r = int(cumulative[size - 1])
    j = next(j for j in range(1, r + 1) if binomial_tail(r, target, j) <= alpha)
    position = np.empty(n, dtype=np.int64)
    position[order] = np.arange(1, n + 1)
    sampled = sample[:size]
    stop = int(np.sort(position[sampled[relevance[sampled] > 0]])[j - 1])
    found = int(relevance[order[:stop]].sum())
    return found / total, len(np.union1d(sampled, order[:stop]))


def synthetic(n: int, low: float, high: float, counts: bool = False) -> Make:
    """Relevant photos at a share in [low, high) (or, with `counts`, a number of them)."""

    def make(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        relevance = np.zeros(n, dtype=np.int64)
        if counts:
            relevance[rng.choice(n, int(rng.integers(low, high)), replace=False)] = 1
        else:
            relevance = (rng.random(n) < rng.uniform(low, high)).astype(np.int64)
        scores = rng.normal(size=n) + relevance * rng.uniform(0.5, 4.0)
        return relevance, scores

    return make


def demo_rankings() -> list[tuple[np.ndarray, np.ndarray]]:
    """(relevance, text scores) over the demo's 960 photos for each of its 60 queries."""
    from PIL import Image

    from engine.demo.collection import write_demo_collection
    from engine.models.encoders import load_encoder

    encoder = load_encoder("demo", device="cpu")
    with tempfile.TemporaryDirectory() as work:
        demo = write_demo_collection(Path(work) / "demo")
        paths = sorted(str(p.relative_to(demo.root)) for p in Path(demo.root).rglob("*.jpg"))
        vectors = []
        for start in range(0, len(paths), 64):
            images = [
                Image.open(Path(demo.root) / p).convert("RGB") for p in paths[start : start + 64]
            ]
            vectors.append(encoder.encode_images(images))
        photos = np.concatenate(vectors)
        position = {p: i for i, p in enumerate(paths)}
        out = []
        for query in demo.queries:
            relevance = np.zeros(len(paths), dtype=np.int64)
            for path in demo.relevant[query.query_id]:
                relevance[position[path]] = 1
            text = encoder.encode_texts([query.text])[0]
            out.append((relevance, photos @ text))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200, help="runs at 10,000 photos")
    parser.add_argument("--big-runs", type=int, default=20, help="runs at 1,000,000 photos")
    parser.add_argument("--no-demo", action="store_true", help="leave out the demo's queries")
    args = parser.parse_args()
    print(
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs, load "
        f"{os.getloadavg()[0]:.1f}; confidence {CONFIDENCE}\n"
    )
    print("| collection | target | runs | rule: judged (median) | rule: judged (mean) | rule: "
          "reached | quantile rule: judged (median) | quantile rule: judged (mean) | quantile "
          "rule: reached | oracle: judged | rule / oracle |")  # fmt: skip
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    collections: list[tuple[str, list[tuple[np.ndarray, np.ndarray]] | None, int, Make | None]]
    collections = []
    if not args.no_demo:
        log("demo rankings")
        demo = demo_rankings()
        collections.append(("demo, 60 queries x 960 photos", demo, len(demo), None))
    collections += [
        ("synthetic 10,000, 1-5 %", None, args.runs, synthetic(10_000, 0.01, 0.05)),
        ("synthetic 10,000, 5-30 relevant", None, args.runs, synthetic(10_000, 5, 31, True)),
        ("synthetic 1,000,000, 1-5 %", None, args.big_runs, synthetic(1_000_000, 0.01, 0.05)),
    ]
    for name, fixed, runs, make in collections:
        for target in TARGETS:
            rng = np.random.default_rng(int(target * 1000))
            rule, old, oracle, ratio = [], [], [], []
            started = time.perf_counter()
            for seed in range(runs):
                relevance, scores = fixed[seed] if fixed is not None else make(rng)  # type: ignore[misc]
                if relevance.sum() == 0:
                    continue
                run = simulate(relevance, scores, target=target, confidence=CONFIDENCE, seed=seed)
                rule.append(run)
                old.append(quantile_rule(relevance, scores, target, seed))
                oracle.append(run.oracle)
                ratio.append(run.judged / max(run.oracle, 1))
            log(f"{name} at {target}: {time.perf_counter() - started:.1f} s")
            cells = [
                name, f"{target:.1f}", str(len(rule)),
                f"{statistics.median(r.judged for r in rule):,.0f}",
                f"{statistics.mean(r.judged for r in rule):,.0f}",
                f"{np.mean([r.recall >= target for r in rule]):.3f}",
                f"{statistics.median(j for _, j in old):,.0f}",
                f"{statistics.mean(j for _, j in old):,.0f}",
                f"{np.mean([r >= target for r, _ in old]):.3f}",
                f"{statistics.median(oracle):,.0f}", f"{statistics.median(ratio):.1f}",
            ]  # fmt: skip
            print("| " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
