"""Attribute questions on the demo: accuracy against the number of judgments (issue 26).

Run on demand (a minute or two on 2 cores; never part of the default test run):

    python tests/bench/bench_attribute_questions.py [--workdir DIR] [--repeats 20]

Writes the demo collection (960 photos) to a temporary folder (or reuses `--workdir`) and
indexes it with the demo model. The demo's metadata answers four closed questions for every
photo: "is it striped?" and "is it spotted?" (the background, 40 photos each), "is it a count
of two?" (220) and "of three?" (60). For 10, 20, 50, 100 and 200 judged photos, drawn at random
(the collection's share of yes: what judging whatever comes gives) or half yes and half no
(a user picking examples for the question), repeated with different draws:

- what the user is shown before the bulk run: the cross-validated accuracy and balanced accuracy
  on the judged photos (`cross_validate`), and
- what it turns out to be: the model learnt from them asked of every photo *not* judged,
  against the metadata (accuracy, balanced accuracy, AUC, and the ECE of the calibrated
  probabilities in 10 bins).

A draw with fewer than 3 photos of an answer is refused, as the command refuses it; the table
says how many were. Then `learning_curve` on 200 judged photos (random draw) estimates the
judgments needed for a balanced accuracy of 0.9, beside the count the table shows reaching it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

# One BLAS thread: the matrices are tiny (judged photos x 65), and a second thread spinning on a
# shared machine made a 160 x 65 product take 40 ms instead of 0.04.
for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

COUNTS = (10, 20, 50, 100, 200)
QUESTIONS = {
    "striped": lambda a: a["background"] == "striped",
    "spotted": lambda a: a["background"] == "spotted",
    "count of two": lambda a: a["count"] == 2,
    "count of three": lambda a: a["count"] == 3,
}


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def demo_library(workdir: Path) -> Path:
    """The demo collection written and indexed with the demo model (reused when present)."""
    from engine.catalog.library import Library
    from engine.demo.collection import write_demo_collection
    from engine.indexing.indexer import Indexer
    from engine.models.encoders import load_encoder

    photos, lib = workdir / "collection", workdir / "library"
    if not (photos / "metadata.json").is_file():
        log("writing the demo collection")
        write_demo_collection(photos)
    if not (lib / "catalog.sqlite3").is_file():
        log("indexing it with the demo model")
        with Library.open(lib) as library:
            Indexer(library, load_encoder("demo", device="cpu")).run(photos)
    return lib


def truth_table(lib: Path, workdir: Path) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The photos' unit vectors and, per question, the metadata's answer for each."""
    from engine.catalog import Image
    from engine.catalog.library import Library

    metadata = json.loads((workdir / "collection" / "metadata.json").read_text(encoding="utf-8"))
    by_path = {record["file_name"]: record["attributes"] for record in metadata["images"]}
    with Library.open(lib) as library:
        assert library.model_key is not None
        ids, vectors = library.load_vectors(library.model_key)
        with library.catalog.session() as s:
            paths = dict(s.query(Image.id, Image.rel_path).all())
    vectors = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    answers = {
        name: np.asarray([int(rule(by_path[paths[int(i)]])) for i in ids])
        for name, rule in QUESTIONS.items()
    }
    return vectors, answers


def draw(y: np.ndarray, n: int, balanced: bool, rng: np.random.Generator) -> np.ndarray:
    if not balanced:
        return rng.choice(len(y), n, replace=False)
    yes = min(n // 2, int(y.sum()) - 1)
    return np.concatenate(
        [
            rng.choice(np.flatnonzero(y == 1), yes, replace=False),
            rng.choice(np.flatnonzero(y == 0), n - yes, replace=False),
        ]
    )


def measure(vectors: np.ndarray, y: np.ndarray, n: int, balanced: bool, repeats: int) -> dict:
    from engine.errors import BadInputError
    from engine.judgments.attribute_questions import (
        AttributeQuestion,
        area_under_curve,
        balanced_accuracy,
        learn_question,
    )
    from engine.judgments.calibration import expected_calibration_error

    rng = np.random.default_rng([n, int(balanced)])
    rows: dict[str, list[float]] = {k: [] for k in ("cv", "cv_bal", "acc", "bal", "auc", "ece")}
    refused = 0
    seconds = []
    for _ in range(repeats):
        judged = draw(y, n, balanced, rng)
        rest = np.ones(len(y), dtype=bool)
        rest[judged] = False
        started = time.perf_counter()
        try:
            learnt = learn_question(
                AttributeQuestion("behavior", "x"), judged, vectors[judged], y[judged]
            )
        except BadInputError:
            refused += 1
            continue
        p = learnt.probabilities(vectors[rest])
        seconds.append(time.perf_counter() - started)
        predicted = learnt.answers(vectors[rest])
        rows["cv"].append(learnt.validation.accuracy)
        rows["cv_bal"].append(learnt.validation.balanced)
        rows["acc"].append(float(np.mean(predicted == y[rest])))
        rows["bal"].append(balanced_accuracy(y[rest], predicted))
        rows["auc"].append(area_under_curve(y[rest], p))
        rows["ece"].append(expected_calibration_error(p, y[rest]))
    out = {k: (float(np.mean(v)) if v else float("nan")) for k, v in rows.items()}
    out["refused"] = refused
    out["seconds"] = float(np.median(seconds)) if seconds else float("nan")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, help="reuse this folder (collection, library)")
    parser.add_argument("--repeats", type=int, default=20, help="draws per cell")
    args = parser.parse_args()
    from engine.judgments.attribute_questions import learning_curve

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench-attributes-"))
    lib = demo_library(workdir)
    vectors, answers = truth_table(lib, workdir)
    machine = f"{platform.machine()}, {os.cpu_count()} cores"
    print(f"# Attribute questions on the demo ({len(vectors)} photos, demo model, {machine}; "
          f"{args.repeats} draws per row)\n")  # fmt: skip
    print("| question (yes in 960) | judged | draw | refused | CV acc. shown | acc. on the rest "
          "| CV bal. shown | bal. on the rest | AUC | ECE | fit + check + score (s) |")  # fmt: skip
    print("| --- | --: | --- | --: | --: | --: | --: | --: | --: | --: | --: |")
    for name, y in answers.items():
        for balanced in (False, True):
            for n in COUNTS:
                log(f"{name}, {n} judged, {'half yes' if balanced else 'random'}")
                m = measure(vectors, y, n, balanced, args.repeats)
                print(
                    f"| {name} ({int(y.sum())}) | {n} | {'half yes' if balanced else 'random'} "
                    f"| {m['refused']} | {m['cv']:.3f} | {m['acc']:.3f} | {m['cv_bal']:.3f} "
                    f"| {m['bal']:.3f} | {m['auc']:.3f} | {m['ece']:.3f} | {m['seconds']:.3f} |"
                )
    print("\n| question | judged photos the curve is drawn from | learning curve (balanced "
          "accuracy on the judged photos left out) "
          "| judgments for 0.9, as the command says it |")  # fmt: skip
    print("| --- | --- | --- | --- |")
    for name, y in answers.items():
        for label, judged in (
            ("200 at random", draw(y, 200, False, np.random.default_rng(5))),
            ("80, half yes", draw(y, 80, True, np.random.default_rng(5))),
            ("all 960", np.arange(len(y))),
        ):
            curve = learning_curve(vectors[judged], y[judged])
            points = ", ".join(f"{p.judgments}: {p.balanced:.2f}" for p in curve.points)
            print(f"| {name} | {label} | {points} | {curve.note} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
