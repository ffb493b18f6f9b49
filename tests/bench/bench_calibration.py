"""The probe's probabilities on held-out judgments, before and after calibration (issue 24).

Run on demand (a minute or two on 2 cores; never part of the default test run):

    python tests/bench/bench_calibration.py [--workdir DIR]

Writes the demo collection (960 photos, 60 queries, every photo judged for every query) to a
temporary folder (or reuses `--workdir`), indexes it with the demo model and simulates a user per
query: the top 10 of the Text ranking judged first, then the next 10 unjudged photos of the
probe's ranking, round after round. After 10, 20, 50 and 100 judgments the probe is fitted to
those judgments only, without calibration (the probe's own logistic output, "before") and with it
(Platt scaling on cross-fitted held-out logits, "after"), and every photo *not* judged is scored:
its p against the demo's judgment of it. Nothing the probe or its calibration reads is scored.

Prints Markdown: ECE and the p >= 0.5 / 0.8 / 0.9 lists per judgment count, the reliability
tables (10 equal-width bins) before and after, and the time a fit takes with and without
calibration.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "2")

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

COUNTS = (10, 20, 50, 100)
PER_ROUND = 10
CUTS = (0.5, 0.8, 0.9)


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@dataclass
class Scored:
    """Held-out photos at one judgment count, over every query whose probe was fitted."""

    before: list[np.ndarray] = field(default_factory=list)
    after: list[np.ndarray] = field(default_factory=list)
    truth: list[np.ndarray] = field(default_factory=list)
    withheld: list[np.ndarray] = field(default_factory=list)  # before, where after claims none
    withheld_truth: list[np.ndarray] = field(default_factory=list)
    queries: int = 0
    calibrated: int = 0  # of them, queries with enough judged photos of each kind
    seconds_plain: list[float] = field(default_factory=list)
    seconds_calibrated: list[float] = field(default_factory=list)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Before, after and truth over the queries whose calibrated probe gives p."""
        if not self.truth:
            empty = np.zeros(0)
            return empty, empty, empty
        return (
            np.concatenate(self.before),
            np.concatenate(self.after),
            np.concatenate(self.truth),
        )

    def withheld_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """Before and truth over the queries where the calibrated probe claims no p."""
        if not self.withheld:
            return np.zeros(0), np.zeros(0)
        return np.concatenate(self.withheld), np.concatenate(self.withheld_truth)


def simulate(library, encoder, queries, truth) -> dict[int, Scored]:  # type: ignore[no-untyped-def]
    from engine.judgments.learning import PRIOR_WEIGHT, fit_probe, prior_scale
    from engine.methods import MethodContext, SearchQuery
    from engine.methods.feedback import query_vector

    ids = np.sort(library.vector_index(encoder.model_key).ids())
    loaded_ids, vectors = library.load_vectors(encoder.model_key, ids)
    vectors = np.asarray(vectors, dtype=np.float64)
    vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    ids = np.asarray(loaded_ids, dtype=np.int64)
    context = MethodContext(library, lambda: encoder)
    scored = {n: Scored() for n in COUNTS}
    for number, query in enumerate(queries, 1):
        relevant = truth.get(query.query_id, set())
        y = np.asarray([int(i) in relevant for i in ids.tolist()], dtype=np.int64)
        q = np.asarray(query_vector(SearchQuery(query.text), context), dtype=np.float64)
        scale = prior_scale(vectors @ q, PRIOR_WEIGHT)
        order = np.argsort(-(vectors @ q), kind="stable")  # the Text ranking
        judged: list[int] = []  # row numbers, in the order judged
        while len(judged) < max(COUNTS):
            taken = set(judged)
            judged += [int(r) for r in order if int(r) not in taken][:PER_ROUND]
            rows = np.asarray(judged)
            started = time.perf_counter()
            plain = fit_probe(q, vectors[rows], y[rows], prior_scale=scale, calibrate=False)
            plain_seconds = time.perf_counter() - started
            started = time.perf_counter()
            calibrated = fit_probe(q, vectors[rows], y[rows], prior_scale=scale)
            calibrated_seconds = time.perf_counter() - started
            order = np.argsort(-(vectors @ plain.direction), kind="stable")  # the next round's
            if len(judged) not in scored or not plain.fitted:
                continue
            held_out = np.ones(len(ids), dtype=bool)
            held_out[rows] = False
            at = scored[len(judged)]
            at.queries += 1
            if not calibrated.has_probabilities:
                at.withheld.append(plain.probabilities(vectors[held_out]))
                at.withheld_truth.append(y[held_out])
                continue
            at.calibrated += 1
            at.before.append(plain.probabilities(vectors[held_out]))
            at.after.append(calibrated.probabilities(vectors[held_out]))
            at.truth.append(y[held_out])
            at.seconds_plain.append(plain_seconds)
            at.seconds_calibrated.append(calibrated_seconds)
        if number % 20 == 0:
            log(f"simulated {number} of {len(queries)} queries")
    return scored


def summary_table(scored: dict[int, Scored], queries: int) -> None:
    from engine.judgments.calibration import expected_calibration_error

    print("### ECE on the held-out photos, and the lists a cut-off would export")
    print()
    header = " | ".join(f"p ≥ {cut:g}: photos (relevant)" for cut in CUTS)
    print(f"| judged | probabilities | queries | held-out photos (relevant) | ECE | {header} |")
    print("| ---: | --- | ---: | ---: | ---: |" + " ---: |" * len(CUTS))

    def row(n: int, name: str, count: int, p: np.ndarray, y: np.ndarray) -> None:
        lists = " | ".join(f"{int((p >= cut).sum())} ({int(y[p >= cut].sum())})" for cut in CUTS)
        ece = expected_calibration_error(p, y)
        print(f"| {n} | {name} | {count} | {len(y)} ({int(y.sum())}) | {ece:.4f} | {lists} |")

    for n in COUNTS:
        at = scored[n]
        before, after, y = at.arrays()
        row(n, "before", at.calibrated, before, y)
        row(n, "after", at.calibrated, after, y)
        withheld, withheld_y = at.withheld_arrays()
        if len(withheld_y):
            row(n, "before, where after claims none", at.queries - at.calibrated, withheld,
                withheld_y)  # fmt: skip
    print()
    print(
        f"Queries: of {queries}, those whose probe is fitted (judgments of both kinds) and, after, "
        "calibrated (at least 3 of each kind); the last row of each count is what the probe "
        "claimed before on the queries that now get no probability."
    )
    print()


def reliability_tables(scored: dict[int, Scored]) -> None:
    from engine.judgments.calibration import reliability

    for n in COUNTS:
        before, after, y = scored[n].arrays()
        print(f"### Reliability after {n} judgments (held-out photos)")
        print()
        print(
            "| p | before: photos | mean p | share relevant | after: photos | mean p | share relevant |"
        )
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
        rows_before = {round(b.low, 1): b for b in reliability(before, y)}
        rows_after = {round(b.low, 1): b for b in reliability(after, y)}
        for low in sorted(set(rows_before) | set(rows_after)):
            cells = []
            for rows in (rows_before, rows_after):
                b = rows.get(low)
                cells.append(
                    "– | – | –" if b is None
                    else f"{b.count} | {b.mean_p:.3f} | {b.share_relevant:.3f}"
                )  # fmt: skip
            print(f"| {low:.1f}–{low + 0.1:.1f} | " + " | ".join(cells) + " |")
        print()


def timing_table(scored: dict[int, Scored]) -> None:
    print("### Time per fit (demo model, 64 dimensions, CPU)")
    print()
    print("| judged | without calibration, mean ms | with calibration, mean ms |")
    print("| ---: | ---: | ---: |")
    for n in COUNTS:
        at = scored[n]
        if at.seconds_plain:
            print(
                f"| {n} | {statistics.mean(at.seconds_plain) * 1000:.1f} | "
                f"{statistics.mean(at.seconds_calibrated) * 1000:.1f} |"
            )
    print()


def wide_timing() -> None:
    """A fit at 512 dimensions (CLIP ViT-B's width) with 100 judgments, random unit vectors."""
    from engine.judgments.learning import fit_probe

    rng = np.random.default_rng(0)
    x = rng.normal(size=(100, 512))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    q = rng.normal(size=512)
    labels = (x @ q > 0).astype(int)
    for calibrate in (False, True):
        started = time.perf_counter()
        fit_probe(q, x, labels, prior_scale=20.0, calibrate=calibrate)
        took = (time.perf_counter() - started) * 1000
        print(f"- 512 dimensions, 100 judgments, calibrate={calibrate}: {took:.0f} ms")
    print()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, help="keep (or reuse) the demo library here")
    args = parser.parse_args()

    from engine.benchmarks.runner import JudgmentResolver
    from engine.catalog.library import Library
    from engine.demo.collection import write_demo_collection
    from engine.evaluation.evaluate import load_judgments, load_queries_csv
    from engine.indexing.indexer import Indexer
    from engine.models.encoders import load_encoder

    with tempfile.TemporaryDirectory() as tmp:
        work = args.workdir or Path(tmp)
        started = time.perf_counter()
        encoder = load_encoder("demo", device="cpu")
        collection_root = work / "demo"
        if not (collection_root / "queries.csv").is_file():
            write_demo_collection(collection_root)
        library = Library.open(work / "lib")
        Indexer(library, encoder).run(collection_root)
        log(f"demo library ready in {time.perf_counter() - started:.1f} s")
        queries = load_queries_csv(collection_root / "queries.csv")
        resolver = JudgmentResolver(library)
        truth: dict[str, set[int]] = {}
        for judgment in load_judgments(collection_root / "judgments.csv"):
            image_id = resolver(judgment)
            if image_id is not None and judgment.relevant > 0:
                truth.setdefault(judgment.query_id, set()).add(image_id)
        started = time.perf_counter()
        scored = simulate(library, encoder, queries, truth)
        log(f"simulation in {time.perf_counter() - started:.1f} s")
        print(
            f"Python {platform.python_version()}, {os.cpu_count()} CPUs, demo model, "
            f"{len(library.vector_index(encoder.model_key))} photos, {len(queries)} queries"
        )
        print()
        summary_table(scored, len(queries))
        reliability_tables(scored)
        timing_table(scored)
        wide_timing()
        library.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
