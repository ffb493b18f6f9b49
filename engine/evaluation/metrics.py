"""Retrieval metrics and ranking order, exactly as docs/SPEC.md §1 defines them.

Pure functions, no I/O. A ranking is given as a sequence of relevance values `rels`
(`rels[0]` is rank 1); a value > 0 counts as relevant (graded judgments keep their integer but
every metric here is binary). `k` is the cut-off; a list shorter than `k` is treated as if the
missing ranks held non-relevant items, so P@k always divides by `k`.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

PROTOCOLS: tuple[str, ...] = ("fullrank", "rerank")

Id = TypeVar("Id", bound=Hashable)


def _check_k(k: int) -> None:
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")


def _top_k_binary(rels: Sequence[int], k: int) -> list[int]:
    _check_k(k)
    return [1 if rel > 0 else 0 for rel in rels[:k]]


def precision_at_k(rels: Sequence[int], k: int) -> float:
    """P@k: relevant items in the top k, divided by k."""
    return sum(_top_k_binary(rels, k)) / k


def recall_at_k(rels: Sequence[int], k: int, num_relevant: int) -> float:
    """R@k: relevant items in the top k, divided by R; 0 when R = 0."""
    top = _top_k_binary(rels, k)
    return sum(top) / num_relevant if num_relevant > 0 else 0.0


def average_precision_at_k(
    rels: Sequence[int], k: int, num_relevant: int, protocol: str = "fullrank"
) -> float:
    """AP@k. `fullrank` (INQUIRE) divides by min(k, R); `rerank` by the relevant items in the top k.

    The fullrank normaliser counts relevant items the ranking missed, so promoting a relevant item
    into the top k never lowers the score; the rerank normaliser suits a fixed candidate set.
    """
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; expected one of {', '.join(PROTOCOLS)}")
    top = _top_k_binary(rels, k)
    hits = 0
    precision_sum = 0.0
    for rank, rel in enumerate(top, start=1):
        if rel:
            hits += 1
            precision_sum += hits / rank
    normaliser = min(k, num_relevant) if protocol == "fullrank" else hits
    return precision_sum / normaliser if normaliser > 0 else 0.0


TIES: tuple[str, ...] = ("order", "group")
"""How AP and nDCG treat tied scores: `order` (the default) scores the strict order (§1.6: ties
by the method's own, base, order); `group` scores them as INQUIRE's code does (sklearn's
average_precision_score takes each run of equal scores as one threshold, its ndcg_score averages
the gains of a tie), so the order inside a tie cannot matter. RR keeps the strict order."""


def tied_average_precision_at_k(
    rels: Sequence[int],
    scores: Sequence[float],
    k: int,
    num_relevant: int,
    protocol: str = "fullrank",
) -> float:
    """AP@k with each group of equal scores in the top k as one threshold (docs/SPEC.md §1).

    `rels` and `scores` are in ranking order (scores descending). A relevant item of a tied group
    is credited the precision at the group's end, so AP = Σ_groups hits_g · P(end of g) / norm,
    with the normaliser of `average_precision_at_k`. Within the top k this is sklearn's AP rescaled
    as INQUIRE's ap_at_k does; the top k is cut first, as INQUIRE slices before scoring.
    """
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; expected one of {', '.join(PROTOCOLS)}")
    top = _top_k_binary(rels, k)
    if len(scores) < len(top):
        raise ValueError(f"{len(top)} relevance values but only {len(scores)} scores")
    hits = 0
    precision_sum = 0.0
    for start, end in _tie_groups(scores, len(top)):
        group_hits = sum(top[start:end])
        hits += group_hits
        precision_sum += group_hits * hits / end
    normaliser = min(k, num_relevant) if protocol == "fullrank" else hits
    return precision_sum / normaliser if normaliser > 0 else 0.0


def ndcg_at_k(rels: Sequence[int], k: int, num_relevant: int) -> float:
    """nDCG@k with binary gains; the ideal ranking puts min(k, R) relevant items first."""
    top = _top_k_binary(rels, k)
    if num_relevant <= 0:
        return 0.0
    dcg = sum(rel / math.log2(rank + 1) for rank, rel in enumerate(top, start=1))
    return dcg / _ideal_dcg(k, num_relevant)


def _ideal_dcg(k: int, num_relevant: int) -> float:
    return sum(1.0 / math.log2(rank + 1) for rank in range(1, min(k, num_relevant) + 1))


def _tie_groups(scores: Sequence[float], length: int) -> list[tuple[int, int]]:
    """(start, end) of each run of equal scores among the first `length` (0-based, end
    exclusive). A NaN score ties with another NaN."""
    groups = []
    start = 0
    while start < length:
        end = start + 1
        key = _score_key(scores[start])
        while end < length and _score_key(scores[end]) == key:
            end += 1
        groups.append((start, end))
        start = end
    return groups


def tied_ndcg_at_k(
    rels: Sequence[int], scores: Sequence[float], k: int, num_relevant: int
) -> float:
    """nDCG@k with each group of equal scores in the top k sharing its gains (docs/SPEC.md §1).

    Every rank of a tied group gets the group's mean gain, so DCG@k = Σ_groups (hits_g / n_g) ·
    Σ_{i in g} 1 / log2(i + 1), over the top k cut first; the ideal DCG is `ndcg_at_k`'s. This is
    sklearn's ndcg_score with its tie averaging (ignore_ties=False), which INQUIRE's code calls.
    """
    top = _top_k_binary(rels, k)
    if len(scores) < len(top):
        raise ValueError(f"{len(top)} relevance values but only {len(scores)} scores")
    if num_relevant <= 0:
        return 0.0
    dcg = 0.0
    for start, end in _tie_groups(scores, len(top)):
        mean_gain = sum(top[start:end]) / (end - start)
        dcg += mean_gain * sum(1.0 / math.log2(rank + 1) for rank in range(start + 1, end + 1))
    return dcg / _ideal_dcg(k, num_relevant)


def reciprocal_rank_at_k(rels: Sequence[int], k: int) -> float:
    """1 / rank of the first relevant item within the top k, 0 if there is none."""
    for rank, rel in enumerate(_top_k_binary(rels, k), start=1):
        if rel:
            return 1.0 / rank
    return 0.0


def judged_at_k(judged_flags: Sequence[bool], k: int) -> float:
    """judged@k: the share of the top k that carries a judgment (how far to trust the metrics)."""
    _check_k(k)
    return sum(1 for flag in judged_flags[:k] if flag) / k


def trailing_nonrelevant(rels: Sequence[int]) -> int:
    """Consecutive non-relevant results after the last relevant one (all of them if none is).

    A stop rule for the user marking results: after a long run of misses, further marking rarely
    changes the metrics.
    """
    count = 0
    for rel in reversed(rels):
        if rel > 0:
            break
        count += 1
    return count


def _score_key(score: float) -> float:
    # NaN would make the sort order undefined; rank it last.
    return -math.inf if math.isnan(score) else score


def strict_order(
    scored: Sequence[tuple[Id, float]], prior_rank: Mapping[Id, int] | None = None
) -> list[Id]:
    """Ids sorted by score descending; ties by earlier `prior_rank`, then by id (docs/SPEC.md §1.6).

    Ids absent from `prior_rank` come after tied ids that have one. A NaN score sorts last.
    """
    ranks = prior_rank or {}

    def key(item: tuple[Id, float]) -> tuple[float, int, float, Id]:
        image_id, score = item
        prior = ranks.get(image_id)
        return (
            -_score_key(score),
            0 if prior is not None else 1,
            prior if prior is not None else 0,
            image_id,
        )

    return [image_id for image_id, _ in sorted(scored, key=key)]


@dataclass(frozen=True)
class QueryMetrics:
    """Metrics of one query's ranking at one cut-off k. Fractions in [0, 1]."""

    query_id: str
    AP: float  # the names docs/SPEC.md and the papers use
    nDCG: float
    RR: float
    P: float
    R_at_k: float  # recall at k
    R: int  # number of items known relevant
    judged: float  # judged@k


@dataclass(frozen=True)
class MeanMetrics:
    """Means over the queries with R > 0 (`queries` counts them); `per_query` holds every query."""

    queries: int
    mAP: float
    mean_nDCG: float
    MRR: float
    per_query: list[QueryMetrics] = field(default_factory=list)
    mean_P: float = 0.0
    mean_R_at_k: float = 0.0
    mean_judged: float = 0.0


def evaluate_ranking(
    ranked_ids: Sequence[Id],
    relevance: Mapping[Id, int],
    k: int,
    protocol: str = "fullrank",
    query_id: str = "",
) -> QueryMetrics:
    """Score one ranking against judgments `relevance` (id -> 0/1; absent ids are unjudged).

    Unjudged ids count as not relevant; R is the number of ids with relevance > 0. A repeated id
    counts at its first rank only, so a ranking cannot earn a relevant item twice. For the rerank
    protocol pass only the judgments of the candidate set.
    """
    _check_k(k)
    unique: list[Id] = []
    seen: set[Id] = set()
    for image_id in ranked_ids:
        if image_id not in seen:
            seen.add(image_id)
            unique.append(image_id)
    rels = [1 if relevance.get(image_id, 0) > 0 else 0 for image_id in unique]
    judged_flags = [image_id in relevance for image_id in unique]
    num_relevant = sum(1 for value in relevance.values() if value > 0)
    return QueryMetrics(
        query_id=query_id,
        AP=average_precision_at_k(rels, k, num_relevant, protocol),
        nDCG=ndcg_at_k(rels, k, num_relevant),
        RR=reciprocal_rank_at_k(rels, k),
        P=precision_at_k(rels, k),
        R_at_k=recall_at_k(rels, k, num_relevant),
        R=num_relevant,
        judged=judged_at_k(judged_flags, k),
    )


def evaluate_scored_ranking(
    scored: Sequence[tuple[Id, float]],
    relevance: Mapping[Id, int],
    k: int,
    protocol: str = "fullrank",
    query_id: str = "",
    ties: str = "order",
) -> QueryMetrics:
    """`evaluate_ranking` of a ranking given with its scores (descending, as ranked).

    `ties="group"` scores AP and nDCG with each run of equal scores in the top k as one group
    (`tied_average_precision_at_k`, `tied_ndcg_at_k`: INQUIRE's sklearn metrics); the other
    metrics keep the order given. The one scoring of `quadrat metrics` and `quadrat evaluate`.
    """
    if ties not in TIES:
        raise ValueError(f"unknown ties {ties!r}; expected one of {', '.join(TIES)}")
    first: dict[Id, float] = {}
    for image_id, score in scored:
        first.setdefault(image_id, score)  # a repeated id counts at its first rank only
    metrics = evaluate_ranking(list(first), relevance, k, protocol, query_id)
    if ties == "order":
        return metrics
    rels = [relevance.get(image_id, 0) for image_id in first]
    scores = list(first.values())
    return replace(
        metrics,
        AP=tied_average_precision_at_k(rels, scores, k, metrics.R, protocol),
        nDCG=tied_ndcg_at_k(rels, scores, k, metrics.R),
    )


def mean_metrics(per_query: Sequence[QueryMetrics]) -> MeanMetrics:
    """Average over queries with R > 0 (a query without relevant items cannot be scored)."""
    scored = [m for m in per_query if m.R > 0]
    count = len(scored)

    def mean(values: list[float]) -> float:
        return sum(values) / count if count else 0.0

    return MeanMetrics(
        queries=count,
        mAP=mean([m.AP for m in scored]),
        mean_nDCG=mean([m.nDCG for m in scored]),
        MRR=mean([m.RR for m in scored]),
        per_query=list(per_query),
        mean_P=mean([m.P for m in scored]),
        mean_R_at_k=mean([m.R_at_k for m in scored]),
        mean_judged=mean([m.judged for m in scored]),
    )
