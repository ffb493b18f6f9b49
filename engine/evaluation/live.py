"""Live metrics: what the window's metrics panel, `quadrat feedback` and the self-test show of
one ranking against the judgments a query has so far (docs/SPEC.md §1). Pure: the caller reads
the ranking and the judgments from the query store."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from engine.evaluation.metrics import QueryMetrics, evaluate_ranking, trailing_nonrelevant


@dataclass(frozen=True)
class LiveMetrics:
    """Metrics of one run at cut-off k against the query's judgments (docs/SPEC.md §1)."""

    run_id: int
    k: int
    metrics: QueryMetrics
    trailing_nonrelevant: int  # "stop rule": non-relevant results after the last relevant one
    precision_curve: list[float]  # P@i for i = 1..min(k, len(run))


def live_metrics(
    ranking: Sequence[int], judgments: Mapping[int, int], k: int, run_id: int = 0
) -> LiveMetrics:
    """Metrics of a ranking (image ids in rank order) against a query's judgments."""
    metrics = evaluate_ranking(list(ranking), judgments, k, "fullrank", query_id=str(run_id))
    rels = [1 if judgments.get(i, 0) > 0 else 0 for i in ranking]
    curve, hits = [], 0
    for i, rel in enumerate(rels[:k], start=1):
        hits += rel
        curve.append(hits / i)
    # The stop rule counts judged photos only: an unjudged one is no evidence that the
    # relevant ones have run out, whether it lies below the judged top or between it and a
    # photo judged deep down (a random sample for the recall estimate).
    judged_rels = [r for image_id, r in zip(ranking, rels, strict=True) if image_id in judgments]
    return LiveMetrics(run_id, k, metrics, trailing_nonrelevant(judged_rels), curve)
