"""Certified recall: "have I found at least 90 % of them, at 95 % confidence?"

A one-phase stopping rule with a statistical guarantee, the quantile method of Lewis, Yang and
Frieder ("Certifying One-Phase Technology-Assisted Reviews", CIKM 2021; their QBCB rule):

1. Judge a simple random sample of the collection (a fixed, seeded order of every photo, taken
   from its start: independent of any ranking, so judging it in any order is allowed). Its
   relevant photos are a uniform random subset of all the relevant ones, whatever the ranking.
2. With r relevant photos in the sample, take j, the smallest number with
   P(Binomial(r, target) >= j) <= 1 - confidence. Judge the ranking from rank 1 down to the rank
   of the j-th highest-ranked relevant sample photo, and stop.

Why it holds: the stop's recall is the j-th smallest of r draws of "the share of relevant photos
ranked at or above a relevant photo"; it falls short of the target only if at least j of the r
draws fall below it, which has probability at most P(Binomial(r, target) >= j) (sampling without
replacement is less spread than the binomial, so the bound is conservative). The sample needs
at least `sample_positives_needed` relevant photos (target^r <= 1 - confidence: 14 for 0.8 at
95 %, 29 for 0.9) before any j exists; a larger sample brings the stop higher up the ranking.

The sample grows while it lacks positives ("inverse sampling"): stopping the sample on what its
judgments say keeps its relevant photos a uniform subset of the relevant ones, so the guarantee
stands for the sample judged so far, whatever its size. Recall is measured on the reviewed top of
the ranking alone (relevant sample photos below the stop are a bonus, not counted).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

RULE = "QBCB quantile stopping rule (Lewis, Yang & Frieder, CIKM 2021)"
TARGET = 0.9
CONFIDENCE = 0.95


def sample_positives_needed(target: float, confidence: float) -> int:
    """The fewest relevant sample photos for which the rule can stop at all."""
    _check(target, confidence)
    return math.ceil(math.log(1.0 - confidence) / math.log(target) - 1e-12)


def stopping_quantile(relevant_in_sample: int, target: float, confidence: float) -> int | None:
    """j: stop at the j-th highest-ranked relevant sample photo (None: the sample is too small)."""
    _check(target, confidence)
    r = relevant_in_sample
    for j in range(1, r + 1):
        if binomial_tail(r, target, j) <= 1.0 - confidence:
            return j
    return None


def binomial_tail(trials: int, p: float, at_least: int) -> float:
    """P(Binomial(trials, p) >= at_least), summed in log space (no overflow at large trials)."""
    if at_least <= 0:
        return 1.0
    log_p, log_q = math.log(p), math.log1p(-p)
    terms = [
        math.lgamma(trials + 1) - math.lgamma(k + 1) - math.lgamma(trials - k + 1)
        + k * log_p + (trials - k) * log_q
        for k in range(at_least, trials + 1)
    ]  # fmt: skip
    if not terms:
        return 0.0
    top = max(terms)
    return min(1.0, math.exp(top) * sum(math.exp(t - top) for t in terms))


def _check(target: float, confidence: float) -> None:
    if not 0.0 < target < 1.0:
        raise ValueError(f"the target recall must be between 0 and 1, not {target}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"the confidence must be between 0 and 1, not {confidence}")


def sample_order(population: Sequence[int] | np.ndarray, seed: int) -> np.ndarray:
    """The fixed random order of the whole collection the sample is taken from (its start)."""
    ids = np.sort(np.asarray(population, dtype=np.int64))
    return ids[np.random.default_rng([seed, 28]).permutation(len(ids))]


@dataclass(frozen=True)
class Certification:
    """Where a query stands against a recall target. `phase` is "sample" (judge `next_ids`, the
    next photos of the random sample), "review" (judge `next_ids`, the unjudged top of the
    ranking down to `stop_rank`), or "certified" (the target is reached with the guarantee)."""

    target: float
    confidence: float
    phase: str
    sample_judged: int
    sample_relevant: int
    positives_needed: int
    quantile: int | None
    stop_rank: int | None
    judged: int  # photos judged in all (sample and ranking)
    to_judge: int | None  # known exactly in the review phase; an estimate while sampling
    next_ids: list[int] = field(default_factory=list)
    found: int = 0  # relevant photos in the reviewed top
    rule: str = RULE

    @property
    def certified(self) -> bool:
        return self.phase == "certified"

    def summary(self) -> str:
        goal = f"{round(self.target * 100)} % recall at {round(self.confidence * 100)} %"
        if self.phase == "certified":
            return (
                f"certified: {goal} — the top {self.stop_rank} holds {self.found} relevant photos; "
                f"{self.judged} judged in all ({self.rule})"
            )
        if self.phase == "review":
            return (
                f"{goal}: judge the top {self.stop_rank} of the ranking ({self.to_judge} not yet "
                f"judged); the random sample of {self.sample_judged} holds "
                f"{self.sample_relevant} relevant"
            )
        more = "" if self.to_judge is None else f" (about {self.to_judge} more)"
        return (
            f"{goal}: judge the random sample further{more}: it holds {self.sample_relevant} "
            f"relevant of the {self.positives_needed} the rule needs, in {self.sample_judged} judged"
        )

    def to_json(self) -> dict[str, object]:
        return {
            "target": self.target,
            "confidence": self.confidence,
            "rule": self.rule,
            "phase": self.phase,
            "certified": self.certified,
            "sample_judged": self.sample_judged,
            "sample_relevant": self.sample_relevant,
            "positives_needed": self.positives_needed,
            "quantile": self.quantile,
            "stop_rank": self.stop_rank,
            "judged": self.judged,
            "to_judge": self.to_judge,
            "found": self.found,
            "next": list(self.next_ids),
            "summary": self.summary(),
        }


def certify_recall(
    ranking: Sequence[int] | np.ndarray,
    judgments: Mapping[int, int],
    *,
    target: float = TARGET,
    confidence: float = CONFIDENCE,
    seed: int = 0,
    batch: int = 20,
) -> Certification:
    """Where the rule stands for `ranking` (every photo of the collection, best first) and the
    `judgments` so far (photo -> relevance), and which photos to judge next (`batch` of them
    while sampling; every unjudged photo above the stop while reviewing)."""
    order = np.asarray(ranking, dtype=np.int64)
    needed = sample_positives_needed(target, confidence)
    sample = sample_order(order, seed)
    judged_prefix = 0
    for image_id in sample.tolist():
        if image_id not in judgments:
            break
        judged_prefix += 1
    sample_ids = sample[:judged_prefix]
    relevant = [int(i) for i in sample_ids.tolist() if judgments[int(i)] > 0]
    judged = sum(1 for i in order.tolist() if i in judgments)
    quantile = stopping_quantile(len(relevant), target, confidence)
    if quantile is None:
        rest = [int(i) for i in sample[judged_prefix:].tolist() if int(i) not in judgments]
        estimate: int | None = None
        if relevant:
            # the sample's prevalence so far, for the count still needed (said as "about")
            estimate = math.ceil((needed - len(relevant)) * judged_prefix / len(relevant))
        return Certification(
            target, confidence, "sample", judged_prefix, len(relevant), needed, None, None,
            judged, estimate, rest[:batch],
        )  # fmt: skip
    rank_of = {int(image_id): rank for rank, image_id in enumerate(order.tolist(), start=1)}
    relevant_ranks = sorted(rank_of[i] for i in relevant)
    stop_rank = relevant_ranks[quantile - 1]
    top = order[:stop_rank].tolist()
    unjudged = [int(i) for i in top if int(i) not in judgments]
    found = sum(1 for i in top if judgments.get(int(i), 0) > 0)
    phase = "review" if unjudged else "certified"
    return Certification(
        target, confidence, phase, judged_prefix, len(relevant), needed, quantile, stop_rank,
        judged, len(unjudged), unjudged, found,
    )  # fmt: skip


@dataclass(frozen=True)
class SimulatedRun:
    """One simulated collection judged to a certified stop."""

    relevant: int
    recall: float
    judged: int  # sample + review
    oracle: int  # judging in rank order until the target share of relevant is found


def simulate(
    relevance: np.ndarray,
    scores: np.ndarray,
    *,
    target: float,
    confidence: float,
    seed: int,
    sample_positives: int | None = None,
) -> SimulatedRun:
    """Run the rule on one collection whose photos' true `relevance` (0/1) is known, ranked by
    `scores`, judging as the rule asks until it certifies (or the sample has judged everything).
    The sample is judged until it holds `sample_positives` relevant photos (at least, and by
    default, the rule's minimum)."""
    order = np.argsort(-scores, kind="stable")
    ranked_relevance = relevance[order]
    total = int(relevance.sum())
    needed = max(sample_positives_needed(target, confidence), sample_positives or 0)
    sample = sample_order(np.arange(len(relevance)), seed)
    cumulative = np.cumsum(relevance[sample])
    reached = np.nonzero(cumulative >= needed)[0]
    if len(reached) == 0:
        # too few relevant photos for the rule: the sample judges the whole collection
        return SimulatedRun(total, 1.0, len(relevance), _oracle(ranked_relevance, target))
    size = int(reached[0]) + 1
    sampled = sample[:size]
    r = int(cumulative[size - 1])
    quantile = stopping_quantile(r, target, confidence)
    assert quantile is not None
    position = np.empty(len(order), dtype=np.int64)
    position[order] = np.arange(1, len(order) + 1)
    relevant_ranks = np.sort(position[sampled[relevance[sampled] > 0]])
    stop = int(relevant_ranks[quantile - 1])
    found = int(ranked_relevance[:stop].sum())
    judged = len(np.union1d(sampled, order[:stop]))
    return SimulatedRun(total, found / total, judged, _oracle(ranked_relevance, target))


def _oracle(ranked_relevance: np.ndarray, target: float) -> int:
    total = int(ranked_relevance.sum())
    if total == 0:
        return 0
    wanted = math.ceil(target * total)
    return int(np.searchsorted(np.cumsum(ranked_relevance), wanted) + 1)
