"""Retrieval metrics, fusion and ranking order, exactly as docs/SPEC.md §1–§2 define them.

Pure functions, no I/O. A ranking is given as a sequence of relevance values `rels`
(`rels[0]` is rank 1); a value > 0 counts as relevant (graded judgments keep their integer but
every metric here is binary). `k` is the cut-off; a list shorter than `k` is treated as if the
missing ranks held non-relevant items, so P@k always divides by `k`.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal, TypeVar, overload

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


def ndcg_at_k(rels: Sequence[int], k: int, num_relevant: int) -> float:
    """nDCG@k with binary gains; the ideal ranking puts min(k, R) relevant items first."""
    top = _top_k_binary(rels, k)
    if num_relevant <= 0:
        return 0.0
    dcg = sum(rel / math.log2(rank + 1) for rank, rel in enumerate(top, start=1))
    idcg = sum(1.0 / math.log2(rank + 1) for rank in range(1, min(k, num_relevant) + 1))
    return dcg / idcg


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


def yes_probability(l_yes: float | None, l_no: float | None) -> float:
    """p = exp(l_yes) / (exp(l_yes) + exp(l_no)) from logits or log-probabilities (docs/SPEC.md §2).

    A token the scorer did not return (None or -inf) has probability zero; with neither token,
    p = 0 ("No").
    """
    yes = -math.inf if l_yes is None else float(l_yes)
    no = -math.inf if l_no is None else float(l_no)
    if yes == -math.inf:
        return 0.0
    if no == -math.inf:
        return 1.0
    # 1 / (1 + exp(no - yes)) is the same ratio without overflowing for large logits.
    diff = no - yes
    if diff > 700:
        return 0.0
    return 1.0 / (1.0 + math.exp(diff))


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


Ties = Literal["position", "shared"]


def shared_ranks(scored: Sequence[tuple[Id, float]]) -> dict[Id, int]:
    """1-based ranks of a list sorted best first, where equal scores share the best rank of
    their group ("1, 2, 2, 4"). An id repeated in the list keeps its first (best) rank.

    bm25 gives every photo of one species without notes the same score; counting them 1, 2, 3…
    in id order would make a fusion favour low ids."""
    ranks: dict[Id, int] = {}
    previous: float | None = None
    rank = 0
    for position, (doc, score) in enumerate(scored, start=1):
        if previous is None or score != previous:
            rank = position
            previous = score
        ranks.setdefault(doc, rank)
    return ranks


def _positions(ranking: Sequence[Id]) -> dict[Id, int]:
    """1-based rank of each id by its place in the list; a repeat keeps its first rank."""
    ranks: dict[Id, int] = {}
    for rank, doc in enumerate(ranking, start=1):
        ranks.setdefault(doc, rank)
    return ranks


@overload
def reciprocal_rank_fusion(
    lists: Sequence[Sequence[Id]], k_rrf: int = 60, *, ties: Literal["position"] = "position"
) -> list[tuple[Id, float]]: ...


@overload
def reciprocal_rank_fusion(
    lists: Sequence[Sequence[tuple[Id, float]]], k_rrf: int = 60, *, ties: Literal["shared"]
) -> list[tuple[Id, float]]: ...


def reciprocal_rank_fusion(
    lists: Sequence[Sequence[Any]], k_rrf: int = 60, *, ties: Ties = "position"
) -> list[tuple[Any, float]]:
    """RRF: Σ_j 1 / (k_rrf + rank_j(d)); ties by best single rank, then id (docs/SPEC.md §2.1).

    `ties="position"`: each list holds ids best first and an id's rank is its place.
    `ties="shared"`: each list holds (id, score) pairs best first and equal scores share the
    best rank of their group (`shared_ranks`), for rankers that give many items one score.
    An id repeated within one list counts once, at its first (best) rank.
    """
    if ties not in ("position", "shared"):
        raise ValueError(f"ties must be 'position' or 'shared', got {ties!r}")
    # Exact fractions: float sums of different terms that are equal in exact arithmetic
    # (1/2 + 1/6 and 1/3 + 1/3) can differ in the last bit and break a tie the wrong way.
    scores: dict[Any, Fraction] = {}
    best_rank: dict[Any, int] = {}
    for ranking in lists:
        ranks = shared_ranks(ranking) if ties == "shared" else _positions(ranking)
        for doc, rank in ranks.items():
            scores[doc] = scores.get(doc, Fraction(0)) + Fraction(1, k_rrf + rank)
            best_rank[doc] = min(best_rank.get(doc, rank), rank)
    ordered = sorted(scores, key=lambda doc: (-scores[doc], best_rank[doc], doc))
    return [(doc, float(scores[doc])) for doc in ordered]


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
