"""Learning from judgments, simulated on the demo benchmark (issue 13).

Run on demand (about a minute on 2 cores):

    python tests/bench/bench_feedback.py [--rounds 3] [--seeds 5] [--permutations 10000]

Writes the demo collection (40 photos per class, 60 queries with exact judgments) to a temporary
folder (or reuses `--workdir`), indexes it with the demo model, and prints Markdown tables:

1. A simulated user judges the top 10 of the Text ranking with the demo's exact judgments, then
   refines (rocchio, probe, more-like-these, and the probe with C chosen by the evidence) and
   judges the next 10 unjudged photos of the refined ranking, for `--rounds` rounds. Text is
   the user paging down the text ranking (its next 10 each round). Each round is scored by
   mAP@50 on the residual collection (the photos judged so far are left out of the ranking and
   of the relevant set), overall and per supercategory, with the paired randomisation test and
   bootstrap interval against Text after the same number of judgments; and by the relevant
   photos the user has found.
2. The probe's calibration on the photos not yet judged when it ranked them, every round.
3. The recall estimate: after the rounds, the user judges the samples `sample_to_judge`
   proposes, 10 at a time; how often the 90 % interval holds the true count, over every demo
   query and `--seeds` random orders of the bands, and how many judgments that took.

The methods' defaults are the classic ones (Rocchio 1 / 0.75 / 0.15, probe C = 1 with a unit
prior, RRF k = 60); nothing here tunes them to the demo's queries.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "2")

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

METHODS = ("text", "rocchio", "probe", "more-like-these", "probe:c=0")
PER_ROUND = 10
K = 50
SAMPLE_BATCH = 10
SAMPLE_BUDGETS = (10, 20, 40, 80)


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@dataclass
class QueryRun:
    """One method's simulated session on one query."""

    ap: list[float | None] = field(default_factory=list)  # residual AP@K per round (None: R = 0)
    found: list[int] = field(default_factory=list)  # relevant judged after each round's judging
    judged: dict[int, int] = field(default_factory=dict)
    seconds: list[float] = field(default_factory=list)
    # The probe's (probability, relevant) for each photo not yet judged, per round.
    calibration: list[list[tuple[float, int]]] = field(default_factory=list)


def residual_ap(ranking: Sequence[int], relevant: set[int], judged: dict[int, int]) -> float | None:
    """AP@K of the ranking with the judged photos left out of it and of the relevant set."""
    from engine.evaluation.metrics import evaluate_ranking

    remaining = relevant - set(judged)
    if not remaining:
        return None
    ids = [i for i in ranking if i not in judged]
    return evaluate_ranking(ids, dict.fromkeys(remaining, 1), K).AP


def judge_next_unjudged(ranking: Sequence[int], judged: dict[int, int], relevant: set[int]) -> None:
    added = 0
    for image_id in ranking:
        if image_id in judged:
            continue
        judged[image_id] = 1 if image_id in relevant else 0
        added += 1
        if added == PER_ROUND:
            return


def simulate(library, encoder, queries, truth, rounds: int) -> dict[str, dict[str, QueryRun]]:  # type: ignore[no-untyped-def]
    from engine.methods import MethodContext, SearchQuery, resolve_spec
    from engine.methods.feedback import probabilities_of

    total = len(library.vector_index(encoder.model_key))
    specs = {key: resolve_spec(key) for key in METHODS}
    runs: dict[str, dict[str, QueryRun]] = {key: {} for key in METHODS}
    for number, query in enumerate(queries, 1):
        relevant = truth.get(query.query_id, set())
        search = SearchQuery(query.text)
        text_ranking = (
            specs["text"].run(search, MethodContext(library, lambda: encoder), top_k=total).ids
        )
        for key in METHODS:
            run = QueryRun()
            judge_next_unjudged(text_ranking, run.judged, relevant)
            context = MethodContext(library, lambda: encoder, judgments=lambda r=run: r.judged)
            for _ in range(rounds):
                if key == "text":
                    ranking = text_ranking
                else:
                    started = time.perf_counter()
                    refined = specs[key].run(search, context, top_k=total)
                    run.seconds.append(time.perf_counter() - started)
                    ranking = refined.ids
                    chances = probabilities_of(refined.scores, refined.details)
                    if chances is not None:
                        run.calibration.append(
                            [
                                (p, int(i in relevant))
                                for i, p in zip(ranking, chances, strict=True)
                                if i not in run.judged
                            ]
                        )
                run.ap.append(residual_ap(ranking, relevant, run.judged))
                judge_next_unjudged(ranking, run.judged, relevant)
                run.found.append(sum(run.judged.values()))
            runs[key][query.query_id] = run
        if number % 10 == 0:
            log(f"simulated {number} of {len(queries)} queries")
    return runs


def mean_ap(values: list[float | None]) -> tuple[float | None, int]:
    scored = [v for v in values if v is not None]
    return (statistics.mean(scored) if scored else None, len(scored))


def cell(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def rounds_table(runs, queries, truth, rounds: int) -> None:  # type: ignore[no-untyped-def]
    print(f"### mAP@{K} on the residual collection, per round (the demo's 60 queries)")
    print()
    print("| method | " + " | ".join(f"round {r + 1}" for r in range(rounds)) + " |")
    print("| --- |" + " ---: |" * rounds)
    for key in METHODS:
        cells = []
        for r in range(rounds):
            value, count = mean_ap([runs[key][q.query_id].ap[r] for q in queries])
            cells.append(f"{cell(value)} ({count})")
        print(f"| `{key}` | " + " | ".join(cells) + " |")
    print()
    print(
        f"Judged before round r: {PER_ROUND} * r photos; in brackets the queries with relevant "
        "photos left unjudged (a query whose relevant photos are all found is not averaged)."
    )
    print()
    relevant_total = statistics.mean(len(truth[q.query_id]) for q in queries)
    print(f"### Relevant photos found (mean per query; {relevant_total:.1f} relevant on average)")
    print()
    print(
        "| method | "
        + " | ".join(f"after {PER_ROUND * (r + 2)} judged" for r in range(rounds))
        + " |"
    )
    print("| --- |" + " ---: |" * rounds)
    for key in METHODS:
        cells = [
            f"{statistics.mean(runs[key][q.query_id].found[r] for q in queries):.2f}"
            for r in range(rounds)
        ]
        print(f"| `{key}` | " + " | ".join(cells) + " |")
    print()


def supercategory_table(runs, queries, rounds: int) -> None:  # type: ignore[no-untyped-def]
    groups = sorted({q.extra.get("supercategory", "") for q in queries})
    print(f"### mAP@{K} on the residual collection per supercategory (round 1 / round {rounds})")
    print()
    print("| supercategory | queries | " + " | ".join(f"`{k}`" for k in METHODS) + " |")
    print("| --- | ---: |" + " ---: |" * len(METHODS))
    for group in groups:
        members = [q for q in queries if q.extra.get("supercategory", "") == group]
        cells = []
        for key in METHODS:
            first, _ = mean_ap([runs[key][q.query_id].ap[0] for q in members])
            last, _ = mean_ap([runs[key][q.query_id].ap[rounds - 1] for q in members])
            cells.append(f"{cell(first)} / {cell(last)}")
        print(f"| {group} | {len(members)} | " + " | ".join(cells) + " |")
    print()


def tests_table(runs, queries, rounds: int, permutations: int) -> None:  # type: ignore[no-untyped-def]
    from engine.evaluation.significance import compare

    print("### Paired tests against `text` after the same number of judgments")
    print()
    print("| method | round | queries | ΔmAP | 95 % CI | p |")
    print("| --- | ---: | ---: | ---: | --- | ---: |")
    for key in METHODS[1:]:
        for r in range(rounds):

            def scores(method: str, r: int = r) -> dict[str, float]:
                return {
                    q.query_id: ap
                    for q in queries
                    if (ap := runs[method][q.query_id].ap[r]) is not None
                }

            c = compare(key, scores(key), "text", scores("text"), permutations)
            print(
                f"| `{key}` | {r + 1} | {c.queries} | {c.delta:+.3f} | "
                f"[{c.ci95[0]:+.3f}, {c.ci95[1]:+.3f}] | {c.p:.4f} |"
            )
    print()


def _calibration(runs, queries, key: str):  # type: ignore[no-untyped-def]
    pairs = [pair for q in queries for round_ in runs[key][q.query_id].calibration
             for pair in round_]  # fmt: skip
    fitted = sum(len(runs[key][q.query_id].calibration) for q in queries)
    return np.asarray([p for p, _ in pairs]), np.asarray([y for _, y in pairs]), fitted


def calibration_table(runs, queries, rounds: int) -> None:  # type: ignore[no-untyped-def]
    print(
        "### The probe's calibration: photos not yet judged when it ranked them, every round "
        "(queries with judgments of both kinds)"
    )
    print()
    p_all, y_all, _ = _calibration(runs, queries, "probe")
    if not len(p_all):
        print("No query had judgments of both kinds.")
        print()
        return
    bins = np.minimum((p_all * 10).astype(int), 9)
    print("| p | photos | mean p | share relevant |")
    print("| --- | ---: | ---: | ---: |")
    for b in range(10):
        inside = bins == b
        if inside.any():
            print(f"| {b / 10:.1f}–{(b + 1) / 10:.1f} | {int(inside.sum())} | "
                  f"{float(p_all[inside].mean()):.3f} | {float(y_all[inside].mean()):.3f} |")  # fmt: skip
    print()
    print("| method | fitted probes | expected calibration error | photos with p ≥ 0.9 "
          "| of them relevant | relevant photos not yet judged |")  # fmt: skip
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for key in (k for k in METHODS if k.startswith("probe")):
        p_all, y_all, fitted = _calibration(runs, queries, key)
        bins = np.minimum((p_all * 10).astype(int), 9)
        ece = sum(
            (bins == b).sum() / len(p_all) * abs(p_all[bins == b].mean() - y_all[bins == b].mean())
            for b in range(10)
            if (bins == b).any()
        )
        above = p_all >= 0.9
        share = f"{y_all[above].mean():.1%}" if above.any() else "–"
        print(f"| `{key}` | {fitted} of {len(queries) * rounds} | {ece:.3f} | "
              f"{int(above.sum())} | {share} | {int(y_all.sum())} |")  # fmt: skip
    print()


def recall_table(library, encoder, queries, truth, runs, seeds: int) -> None:  # type: ignore[no-untyped-def]
    from engine.judgments.learning import estimate_recall, sample_to_judge
    from engine.methods import MethodContext, SearchQuery
    from engine.methods.feedback import reference_order

    rows: dict[int, list[tuple[bool, int, float, bool, int]]] = {b: [] for b in SAMPLE_BUDGETS}
    for query in queries:
        relevant = truth.get(query.query_id, set())
        context = MethodContext(library, lambda: encoder)
        order, ranked = reference_order(context, SearchQuery(query.text))
        for seed in range(seeds):
            judged = dict(runs["probe"][query.query_id].judged)
            spent = 0
            for budget in SAMPLE_BUDGETS:
                proposed = sample_to_judge(
                    order, judged, budget - spent, seed=seed, ranked_depth=ranked
                )
                for image_id in proposed:
                    judged[image_id] = int(image_id in relevant)
                spent = budget
                estimate = estimate_recall(order, judged, seed=seed, ranked_depth=ranked)
                true_count = len(relevant)
                if estimate.total is None or estimate.low is None or estimate.high is None:
                    rows[budget].append((False, len(judged), 0.0, False, 0))
                    continue
                holds = estimate.low <= true_count <= estimate.high
                rows[budget].append(
                    (
                        holds,
                        len(judged),
                        abs(estimate.total - true_count),
                        True,
                        estimate.high - estimate.low,
                    )
                )
    print(
        f"### The recall estimate's 90 % interval: {len(queries)} queries × {seeds} random "
        "band orders"
    )
    print()
    print(
        "| sample judged | judgments in all (mean) | estimates | interval holds the true count "
        "| mean interval width | mean |error| of the estimate |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for budget in SAMPLE_BUDGETS:
        done = [row for row in rows[budget] if row[3]]
        holds = sum(1 for row in done if row[0])
        print(
            f"| {budget} | {statistics.mean(row[1] for row in rows[budget]):.1f} | "
            f"{len(done)} of {len(rows[budget])} | {holds / max(len(done), 1):.1%} | "
            f"{statistics.mean(row[4] for row in done) if done else 0:.1f} | "
            f"{statistics.mean(row[2] for row in done) if done else 0:.2f} |"
        )
    print()


def timing_table(runs) -> None:  # type: ignore[no-untyped-def]
    print("### Time per refinement (960 photos ranked in full, CPU)")
    print()
    print("| method | mean ms | max ms |")
    print("| --- | ---: | ---: |")
    for key in METHODS[1:]:
        seconds = [s for run in runs[key].values() for s in run.seconds]
        print(f"| `{key}` | {statistics.mean(seconds) * 1000:.1f} | {max(seconds) * 1000:.1f} |")
    print()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seeds", type=int, default=5, help="band orders per query (estimate)")
    parser.add_argument("--permutations", type=int, default=10_000)
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
        runs = simulate(library, encoder, queries, truth, args.rounds)
        log(f"simulation in {time.perf_counter() - started:.1f} s")
        print(
            f"Python {platform.python_version()}, {os.cpu_count()} CPUs, demo model, "
            f"{len(library.vector_index(encoder.model_key))} photos, {len(queries)} queries"
        )
        print()
        rounds_table(runs, queries, truth, args.rounds)
        supercategory_table(runs, queries, args.rounds)
        tests_table(runs, queries, args.rounds, args.permutations)
        calibration_table(runs, queries, args.rounds)
        started = time.perf_counter()
        recall_table(library, encoder, queries, truth, runs, args.seeds)
        log(f"recall estimates in {time.perf_counter() - started:.1f} s")
        timing_table(runs)
        library.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
