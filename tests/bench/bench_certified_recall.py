"""Judgments needed to certify recall with a guarantee (issue 28).

Run on demand (a few minutes on 2 cores):

    python tests/bench/bench_certified_recall.py [--runs 200] [--big-runs 20]

Prints Markdown tables of the quantile stopping rule (engine/judgments/certified_recall.py) at
targets 0.8 and 0.9, confidence 95 %, against two other ways to stop:
- the oracle: judging the ranking from the top until the target share of the relevant photos
  is found (it knows where they are; no real user can stop there on purpose);
- the current estimate: judging the ranking's top 10 at a time plus 10 photos of the recall
  estimate's own samples (`sample_to_judge`), stopping as soon as the photos found reach the
  target share of the estimated total (`estimate_recall`'s point estimate; no guarantee).

Collections: the demo benchmark's 60 queries ranked by the demo model's text search (960 photos,
exact judgments), and synthetic collections of 10,000 and 1,000,000 photos (1 to 5 % relevant,
ranked by a scorer of random quality). "reached" is the share of runs whose realised recall
reached the target: the rule promises at least 0.95.
"""

from __future__ import annotations

import argparse
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

from engine.judgments.certified_recall import simulate  # noqa: E402
from engine.judgments.learning import estimate_recall, sample_to_judge  # noqa: E402

TARGETS = (0.8, 0.9)
CONFIDENCE = 0.95
BATCH = 10


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def estimate_stop(
    relevance: np.ndarray, scores: np.ndarray, target: float, seed: int
) -> tuple[float, int]:
    """Stop when found >= target x the estimate's total: (realised recall, judged)."""
    order = np.argsort(-scores, kind="stable")
    ids = order  # photo ids are positions here
    judged: dict[int, int] = {}
    total = int(relevance.sum())
    top = 0
    while len(judged) < len(ids):
        for image_id in ids[top : top + BATCH].tolist():
            judged[image_id] = int(relevance[image_id])
        top += BATCH
        for image_id in sample_to_judge(ids, judged, BATCH, seed=seed):
            judged[image_id] = int(relevance[image_id])
        estimate = estimate_recall(ids, judged, seed=seed, draws=200)
        found = sum(judged.values())
        if estimate.total is not None and found >= target * estimate.total:
            break
    found = sum(judged.values())
    return found / total, len(judged)


def synthetic(n: int) -> Callable[[np.random.Generator], tuple[np.ndarray, np.ndarray]]:
    def make(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        relevance = (rng.random(n) < rng.uniform(0.01, 0.05)).astype(np.int64)
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


def row(name: str, target: float, rule, oracle, estimate) -> str:  # type: ignore[no-untyped-def]
    def med(values: list[float]) -> str:
        return f"{statistics.median(values):,.0f}"

    reached = np.mean([r.recall >= target for r in rule])
    cells = [name, f"{target:.1f}", str(len(rule)), med([r.judged for r in rule]),
             f"{reached:.3f}", med(oracle)]  # fmt: skip
    if estimate:
        cells += [
            med([j for _, j in estimate]),
            f"{np.mean([r >= target for r, _ in estimate]):.3f}",
        ]
    else:
        cells += ["-", "-"]
    ratio = statistics.median(r.judged / max(o, 1) for r, o in zip(rule, oracle, strict=True))
    cells.append(f"{ratio:.1f}")
    return "| " + " | ".join(cells) + " |"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200, help="runs at 10,000 photos")
    parser.add_argument("--big-runs", type=int, default=20, help="runs at 1,000,000 photos")
    parser.add_argument("--estimate-runs", type=int, default=20, help="estimate-rule runs")
    args = parser.parse_args()
    print(
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs, load "
        f"{os.getloadavg()[0]:.1f}; confidence {CONFIDENCE}\n"
    )
    print("| collection | target | runs | rule: judged (median) | rule: reached | oracle: "
          "judged | estimate stop: judged | estimate stop: reached | rule / oracle |")  # fmt: skip
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    log("demo rankings")
    demo = demo_rankings()
    collections: list[
        tuple[str, list[tuple[np.ndarray, np.ndarray]] | None, int, Callable | None, int]
    ] = [  # type: ignore[type-arg]
        ("demo, 60 queries x 960 photos", demo, len(demo), None, len(demo)),
        ("synthetic 10,000", None, args.runs, synthetic(10_000), args.estimate_runs),
        ("synthetic 1,000,000", None, args.big_runs, synthetic(1_000_000), 0),
    ]
    for name, fixed, runs, make, estimate_runs in collections:
        for target in TARGETS:
            rng = np.random.default_rng(int(target * 1000))
            rule, oracle, estimate = [], [], []
            started = time.perf_counter()
            for seed in range(runs):
                relevance, scores = fixed[seed] if fixed is not None else make(rng)  # type: ignore[misc]
                if relevance.sum() == 0:
                    continue
                run = simulate(relevance, scores, target=target, confidence=CONFIDENCE, seed=seed)
                rule.append(run)
                oracle.append(run.oracle)
                if seed < estimate_runs:
                    estimate.append(estimate_stop(relevance, scores, target, seed))
            log(f"{name} at {target}: {time.perf_counter() - started:.1f} s")
            print(row(name, target, rule, oracle, estimate), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
