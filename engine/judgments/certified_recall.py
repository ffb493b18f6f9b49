"""Certified recall: "have I found at least 90 % of them, at 95 % confidence?"

A stratified stopping rule with a guarantee that holds whatever the ranking (docs/SPEC.md §6.7):

1. *Census*: judge the ranking's top in full, band by band (the recall estimate's bands: 10,
   10, 20, 40, ... photos), at least 40 deep, and one band deeper while some deeper band's
   end is expected to cost fewer judgments in all (the last band's share of relevant photos
   carried down). Its depth K and its relevant photos P depend on the photos' relevance alone.
2. *Sample*: below the census, each photo is in the sample with probability q (a fixed,
   seeded uniform number per photo: Bernoulli sampling, independent of everything else); q is
   the least rate at which a sample with no relevant photo certifies the census by itself:
   with m = floor(P (1 - target) / target) photos allowed missed, (1 - q)^(m + 1) <= alpha.
   Judge the whole sample (its size is known before it starts).
3. *Review*: judge the ranking on from K; stop at the first rank k with
   F_k >= target * (F_k + U_k), F_k the relevant photos in the top k and U_k an exact
   binomial upper bound on the relevant photos below k: the largest B with
   P(Binomial(B, q) <= x_k) > alpha, x_k the relevant sample photos below k (capped by the
   photos below k not judged irrelevant).

Why it holds: the criterion only gets easier going down the ranking (F grows by one at each
relevant photo; x and so U fall at each relevant sample photo), so a stop short of the target
means it already holds at the deepest rank k0 whose top falls short, a rank fixed by the
photos' relevance alone. There the relevant sample photos below k0 are Binomial(B_k0, q) (q
is fixed by the census, which does not look at the sample), and the criterion can hold only
if U < B_k0: probability at most alpha. No approximation is made: Bernoulli sampling keeps the
photos' inclusions independent, and the binomial tail is summed exactly.

Why the rest is sampled at one rate: the relevant photos a ranking misses may sit anywhere
below it, and a bound must allow for all of them sitting where the sample is thinnest. Extra
sampling where relevant photos are likely (just below the census) costs judgments and cannot
lower the bound; the census is that stratum, sampled at rate 1. The price is set by the
allowance: a rare query (m small) needs a large share of the scope judged (P = 13 at 0.8:
q = 0.53), which any rule with this guarantee must pay, since three relevant photos hidden
at random below the census escape a sample of share q with probability (1 - q)^3.

Stratified sampling for recall in technology-assisted review: Lewis, Yang & Frieder,
"Certifying One-Phase Technology-Assisted Reviews" (CIKM 2021); the bound on what the
unscreened rest holds: Callaghan & Müller-Hansen, "Statistical stopping criteria for automated
screening in systematic reviews" (Systematic Reviews 9, 2020); estimates with the strata's
weights (1 in the census, 1/q below): Horvitz-Thompson, as in Webber, "Approximate recall
confidence intervals" (ACM TOIS 31, 2013).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from engine.judgments.learning import band_edges

RULE = (
    "stratified recall rule: the ranking's top judged in full, a random sample below it, an "
    "exact binomial bound on the relevant photos missed (Lewis, Yang & Frieder 2021; "
    "Callaghan & Müller-Hansen 2020)"
)
TARGET = 0.9
CONFIDENCE = 0.95
MIN_CENSUS = 40  # the census judges at least this deep (the first three bands)
_EXACT = 1.0 - 1e-9  # a rate's alpha, a hair under: (1 - q)^(m + 1) must not round above it


def _check(target: float, confidence: float) -> None:
    if not 0.0 < target < 1.0:
        raise ValueError(f"the target recall must be between 0 and 1, not {target}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"the confidence must be between 0 and 1, not {confidence}")


def binomial_tail(trials: int, p: float, at_least: int) -> float:
    """P(Binomial(trials, p) >= at_least), summed in log space (no overflow at large trials)."""
    if at_least <= 0:
        return 1.0
    return _log_sum(trials, p, range(at_least, trials + 1))


def binomial_cdf(trials: int, p: float, at_most: int) -> float:
    """P(Binomial(trials, p) <= at_most), summed in log space."""
    if at_most >= trials:
        return 1.0
    if at_most < 0:
        return 0.0
    return _log_sum(trials, p, range(0, at_most + 1))


def _log_sum(trials: int, p: float, ks: range) -> float:
    if p <= 0.0:
        return 1.0 if 0 in ks else 0.0
    if p >= 1.0:
        return 1.0 if trials in ks else 0.0
    log_p, log_q = math.log(p), math.log1p(-p)
    head = math.lgamma(trials + 1)
    terms = [
        head - math.lgamma(k + 1) - math.lgamma(trials - k + 1) + k * log_p + (trials - k) * log_q
        for k in ks
    ]
    if not terms:
        return 0.0
    top = max(terms)
    return min(1.0, math.exp(top) * sum(math.exp(t - top) for t in terms))


@lru_cache(maxsize=4096)
def missed_bound(observed: int, rate: float, alpha: float) -> int:
    """U: the largest number B of relevant photos a region may hold when a Bernoulli sample
    of it at `rate` found `observed` of them, P(Binomial(B, rate) <= observed) > alpha (the
    exact one-sided upper confidence bound at 1 - alpha)."""
    if rate >= 1.0:
        return observed
    low, high = observed, max(observed + 1, math.ceil((observed + 1) / rate) + 10)
    while binomial_cdf(high, rate, observed) > alpha:
        low, high = high, high * 2
    while high - low > 1:  # the cdf falls as B grows: low is kept, high rejected
        middle = (low + high) // 2
        if binomial_cdf(middle, rate, observed) > alpha:
            low = middle
        else:
            high = middle
    return low


def allowed_missed(found: float, target: float) -> int:
    """m: how many relevant photos may be missed while `found` of them is still the target."""
    return math.floor(found * (1.0 - target) / target + 1e-9)


def sample_rate(found: float, target: float, confidence: float) -> float:
    """q: the least Bernoulli rate at which a sample holding no relevant photo bounds the rest
    by `allowed_missed(found)`: (1 - q)^(m + 1) <= 1 - confidence."""
    _check(target, confidence)
    m = allowed_missed(found, target)
    return 1.0 - float(((1.0 - confidence) * _EXACT) ** (1.0 / (m + 1)))


def unit_uniforms(ids: Sequence[int] | np.ndarray, seed: int) -> np.ndarray:
    """A fixed uniform number in [0, 1) per photo (or event) id, seeded: the same photo draws
    the same number whatever the scope, so a sample judged under one set of filters is judged
    under another (SplitMix64 of the id and the seed)."""
    with np.errstate(over="ignore"):
        x = np.asarray(ids, dtype=np.int64).astype(np.uint64)
        x = x * np.uint64(0x9E3779B97F4A7C15) + np.uint64((seed * 0x632BE59BD9B4E019) % 2**64)
        for shift, factor in ((30, 0xBF58476D1CE4E5B9), (27, 0x94D049BB133111EB)):
            x ^= x >> np.uint64(shift)
            x *= np.uint64(factor)
        x ^= x >> np.uint64(31)
    return (x >> np.uint64(11)).astype(np.float64) / float(2**53)


def census_depth(
    relevance_of_top: Sequence[int | None], population: int, target: float, confidence: float,
    ranked_depth: int | None = None,
) -> tuple[int, int | None]:  # fmt: skip
    """(K, P): how deep the census goes and the relevant photos in it, from the relevance of
    the ranking's top (None: not judged). P is None while the band being decided is not judged
    in full: K is then the depth to judge next."""
    edges = band_edges(population, ranked_depth)
    marks = list(relevance_of_top)
    for index in range(1, len(edges)):
        depth = edges[index]
        top = marks[:depth]
        if len(top) < depth or any(mark is None for mark in top):
            # The first bands are asked for together, down to the least census.
            return max(depth, next((e for e in edges if e >= MIN_CENSUS), population)), None
        found = sum(1 for mark in top if mark)
        if depth >= population:
            return depth, found
        if depth < MIN_CENSUS:
            continue
        band_start = edges[index - 1]
        share = sum(1 for mark in top[band_start:] if mark) / max(depth - band_start, 1)
        here = depth + sample_rate(found, target, confidence) * (population - depth)
        # Deeper is worth it when some deeper band's end, its bands holding relevant photos at
        # the last band's share, is expected to cost less in all.
        cheaper = any(
            deeper
            + sample_rate(found + share * (deeper - depth), target, confidence)
            * (population - deeper)
            < here
            for deeper in edges[index + 1 :]
        )
        if not cheaper:
            return depth, found
    return population, sum(1 for mark in marks if mark)


@dataclass(frozen=True)
class Certification:
    """Where a query stands against a recall target.

    `phase` is "census" (judge `next_ids`, the unjudged top down to `census`), "sample" (judge
    `next_ids`, the next photos of the random sample below the census), "review" (judge
    `next_ids`, the ranking on from the judged top), or "certified" (the target is reached
    with the guarantee: the top `stop_rank` holds `found` relevant photos). `expected` is the
    judgments the plan costs in all, as known now (exact once the census is decided, plus the
    review the sample asks for). `unit` is what is ranked and sampled ("photo" or "event")."""

    target: float
    confidence: float
    phase: str
    population: int  # photos (or events) in scope
    census: int  # the census depth K (the band to judge while the census is decided)
    census_relevant: int | None  # P, once the census is decided
    rate: float | None  # q, once the census is decided
    sample_size: int  # photos of the sample below the census
    sample_judged: int
    sample_relevant: int
    bound: int | None  # U at the judged top: the relevant photos below it may number this many
    stop_rank: int | None
    judged: int  # photos (or events) of the scope judged in all
    to_judge: int | None  # of this phase, where known
    expected: int  # judgments the plan costs in all
    next_ids: list[int] = field(default_factory=list)
    found: int = 0  # relevant photos in the judged top (down to the stop, once certified)
    sample_relevant_below: int = 0  # relevant sample photos below the judged top
    judged_top: int = 0  # the ranking's top judged in full (where the review goes on)
    rule: str = RULE
    unit: str = "photo"
    scope: str = ""  # "the 3,214 photos shown (deployment CAM01_trail)"; "" for all

    @property
    def certified(self) -> bool:
        return self.phase == "certified"

    @property
    def estimate(self) -> float | None:
        """The relevant photos in scope, by the strata's weights (Horvitz-Thompson: the census
        and the judged top count once, each relevant sample photo below them 1/q times)."""
        if self.rate is None or self.phase in ("census", "sample"):
            return None
        return self.found + self.sample_relevant_below / self.rate

    def _goal(self) -> str:
        return f"{round(self.target * 100)} % recall at {round(self.confidence * 100)} %"

    def _units(self, count: int) -> str:
        return f"{count:,} {self.unit}{'s' * (count != 1)}"

    def plan(self) -> str:
        """What certifying costs, said before it starts."""
        where = self.scope or f"all {self._units(self.population)}"
        if self.census >= self.population:
            return (
                f"Certifying {self._goal()} over {where}: too few to sample, every one is "
                f"judged ({self.population:,} judgments in all)"
            )
        if self.census_relevant is None or self.rate is None:
            return (
                f"Certifying {self._goal()} over {where}: judge the ranking's top {self.census} "
                f"first; then a random sample below it, the smaller the more relevant "
                f"{self.unit}s the top holds: about {self.expected:,} judgments in all with the "
                f"{self.found} found there so far"
            )
        review = (
            " then the ranking on below it until the found reach the target share"
            if self.bound is None or self.phase != "certified"
            else ""
        )
        return (
            f"Certifying {self._goal()} over {where}: the top {self.census} ({self.census_relevant}"
            f" relevant) and a random sample of {self.sample_size:,} below it "
            f"({self.rate:.1%} of the rest);{review}: about {self.expected:,} judgments in all"
        )

    def summary(self) -> str:
        goal = self._goal()
        if self.phase == "certified":
            return (
                f"certified: {goal} — the top {self.stop_rank} holds {self.found} relevant "
                f"{self.unit}s; {self.judged:,} judged in all ({self.rule})"
            )
        if self.phase == "census":
            return (
                f"{goal}: judge the ranking's top {self.census} in full ({self.to_judge} not yet "
                "judged)"
            )
        if self.phase == "sample":
            return (
                f"{goal}: judge the random sample ({self.to_judge:,} of {self.sample_size:,} not "
                f"yet judged); it holds {self.sample_relevant} relevant so far"
            )
        return (
            f"{goal}: judge the ranking on from rank {self.judged_top + 1}: its top holds "
            f"{self.found} relevant, and up to {self.bound} may lie below "
            f"({self.sample_relevant_below} relevant in the sample there)"
        )

    def to_json(self) -> dict[str, object]:
        return {
            "target": self.target,
            "confidence": self.confidence,
            "rule": self.rule,
            "unit": self.unit,
            "scope": self.scope,
            "phase": self.phase,
            "certified": self.certified,
            "population": self.population,
            "census": self.census,
            "census_relevant": self.census_relevant,
            "rate": None if self.rate is None else round(self.rate, 6),
            "sample_size": self.sample_size,
            "sample_judged": self.sample_judged,
            "sample_relevant": self.sample_relevant,
            "bound": self.bound,
            "stop_rank": self.stop_rank,
            "judged": self.judged,
            "to_judge": self.to_judge,
            "expected": self.expected,
            "found": self.found,
            "estimate": None if self.estimate is None else round(self.estimate, 3),
            "next": list(self.next_ids),
            "plan": self.plan(),
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
    ranked_depth: int | None = None,
    unit: str = "photo",
    scope: str = "",
) -> Certification:
    """Where the rule stands for `ranking` (every photo or event in scope, best first; beyond
    `ranked_depth` in any fixed order) and the `judgments` so far (id -> relevance), and which
    to judge next: the census's unjudged top, `batch` photos of the sample, or `batch` of the
    ranking on from the judged top."""
    _check(target, confidence)
    order = np.asarray(ranking, dtype=np.int64)
    n = len(order)
    alpha = 1.0 - confidence
    marks = [judgments.get(int(i)) for i in order.tolist()]
    judged = sum(1 for mark in marks if mark is not None)

    def state(**fields: Any) -> Certification:
        return Certification(
            target=target, confidence=confidence, population=n, unit=unit, scope=scope,
            judged=judged, **fields,
        )  # fmt: skip

    depth, found = census_depth(marks, n, target, confidence, ranked_depth)
    if found is None:
        unjudged = [int(i) for i, mark in zip(order[:depth].tolist(), marks, strict=False)
                    if mark is None]  # fmt: skip
        known = sum(1 for mark in marks[:depth] if mark)
        guess = depth + round(sample_rate(known, target, confidence) * (n - depth))
        return state(
            phase="census", census=depth, census_relevant=None, rate=None, sample_size=0,
            sample_judged=0, sample_relevant=0, bound=None, stop_rank=None,
            to_judge=len(unjudged), expected=guess, next_ids=unjudged, found=known,
        )  # fmt: skip
    rate = sample_rate(found, target, confidence)
    in_sample, sample_ids, unjudged_sample, sample_relevant = _drawn_sample(
        order[depth:], rate, seed, judgments
    )
    sample_judged = len(sample_ids) - len(unjudged_sample)
    plan_cost = depth + len(sample_ids)
    if unjudged_sample:
        return state(
            phase="sample", census=depth, census_relevant=found, rate=rate,
            sample_size=len(sample_ids), sample_judged=sample_judged,
            sample_relevant=sample_relevant, bound=None, stop_rank=None,
            to_judge=len(unjudged_sample), expected=plan_cost, next_ids=unjudged_sample[:batch],
            found=found,
        )  # fmt: skip
    # The review: walk the judged top from the census down, the first rank that certifies.
    prefix = next((position for position, mark in enumerate(marks) if mark is None), n)
    walk = _review_walk(marks, depth, prefix, in_sample, rate, alpha, target)
    stop, bound = walk.stop, walk.bound
    sampled_relevant_after, top_relevant = walk.sampled_relevant_after, walk.top_relevant
    if stop is not None:
        f = int(top_relevant[stop])
        return state(
            phase="certified", census=depth, census_relevant=found, rate=rate,
            sample_size=len(sample_ids), sample_judged=sample_judged,
            sample_relevant=sample_relevant, bound=bound, stop_rank=stop, to_judge=0,
            expected=judged, found=f, sample_relevant_below=int(sampled_relevant_after[stop]),
            judged_top=prefix,
        )  # fmt: skip
    x_here = int(sampled_relevant_after[prefix])
    # The review usually ends below the deepest relevant sample photo (each adds 1/q to U).
    deepest = int(np.flatnonzero(walk.sampled_relevant).max() + 1) if x_here else prefix + 1
    ahead = [int(i) for i, m in zip(order[prefix:].tolist(), marks[prefix:], strict=True)
             if m is None]  # fmt: skip
    review_left = sum(1 for m in marks[prefix:deepest] if m is None)
    return state(
        phase="review", census=depth, census_relevant=found, rate=rate,
        sample_size=len(sample_ids), sample_judged=sample_judged, sample_relevant=sample_relevant,
        bound=bound, stop_rank=None, to_judge=review_left or None,
        expected=judged + review_left, next_ids=ahead[:batch], found=int(top_relevant[prefix]),
        sample_relevant_below=x_here, judged_top=prefix,
    )  # fmt: skip


def _drawn_sample(
    below: np.ndarray, rate: float, seed: int, judgments: Mapping[int, int]
) -> tuple[np.ndarray, np.ndarray, list[int], int]:
    """The Bernoulli sample at `rate` of the photos below the census (each photo's seeded
    uniform draw under the rate): which positions are in it, its photos in draw order, those
    not judged yet, and how many of it are judged relevant."""
    draws = unit_uniforms(below, seed)
    in_sample = draws < rate
    sample_ids = below[in_sample][np.argsort(draws[in_sample], kind="stable")]
    sample_marks = [judgments.get(int(i)) for i in sample_ids.tolist()]
    unjudged = [int(i) for i, m in zip(sample_ids.tolist(), sample_marks, strict=True) if m is None]
    return in_sample, sample_ids, unjudged, sum(1 for m in sample_marks if m)


@dataclass(frozen=True)
class _Walk:
    """The review's walk down the judged top: the first rank that certifies (None: none yet)
    and the bound there (at the last rank tried when none does), with the counts it read."""

    stop: int | None
    bound: int | None
    sampled_relevant: np.ndarray  # per position: a sample photo judged relevant
    sampled_relevant_after: np.ndarray  # a[k]: such photos at positions k..
    top_relevant: np.ndarray  # a[k]: relevant photos among the first k


def _review_walk(
    marks: Sequence[int | None],
    depth: int,
    prefix: int,
    in_sample: np.ndarray,
    rate: float,
    alpha: float,
    target: float,
) -> _Walk:
    """From the census depth down to the judged top `prefix`, the first rank k whose found
    relevant photos reach the target share of found plus the bound on those missed below k
    (the sample's exact bound, capped by the photos below k not judged irrelevant)."""
    n = len(marks)
    relevant = np.array([1 if m else 0 for m in marks], dtype=np.int64)
    irrelevant_judged = np.array([1 if m is not None and not m else 0 for m in marks])
    sampled = np.zeros(n, dtype=bool)
    sampled[depth:] = in_sample
    sampled_relevant = sampled & (relevant > 0)
    sampled_relevant_after = _after(sampled_relevant)
    irrelevant_after = _after(irrelevant_judged > 0)
    top_relevant = np.concatenate([[0], np.cumsum(relevant)])
    stop, bound = None, None
    for k in range(depth, prefix + 1):
        x = int(sampled_relevant_after[k])
        cap = (n - k) - int(irrelevant_after[k])
        bound = min(missed_bound(x, rate, alpha), cap)
        f = int(top_relevant[k])
        if f >= target * (f + bound):
            stop = k
            break
    return _Walk(stop, bound, sampled_relevant, sampled_relevant_after, top_relevant)


def _after(flags: np.ndarray) -> np.ndarray:
    """a[k] = how many of `flags` are set at positions k.. (k = 0..n)."""
    counts = np.concatenate([np.cumsum(flags[::-1].astype(np.int64))[::-1], [0]])
    return counts


@dataclass(frozen=True)
class SimulatedRun:
    """One simulated collection judged to a certified stop."""

    relevant: int
    recall: float
    judged: int  # census + sample + review
    oracle: int  # judging in rank order until the target share of relevant is found
    census: int
    rate: float


def simulate(
    relevance: np.ndarray,
    scores: np.ndarray,
    *,
    target: float,
    confidence: float,
    seed: int,
) -> SimulatedRun:
    """Run the rule on one collection whose photos' true `relevance` (0/1) is known, ranked by
    `scores`, judging as the rule asks until it certifies (vectorised: the same steps as
    `certify_recall`, without the per-photo bookkeeping)."""
    _check(target, confidence)
    order = np.argsort(-scores, kind="stable")
    ranked = np.asarray(relevance, dtype=np.int64)[order]
    n, total = len(ranked), int(ranked.sum())
    alpha = 1.0 - confidence
    depth, found = census_depth(ranked.tolist(), n, target, confidence)
    assert found is not None
    rate = sample_rate(found, target, confidence)
    sampled = np.zeros(n, dtype=bool)
    sampled[depth:] = unit_uniforms(order[depth:], seed) < rate
    sampled_relevant_after = _after(sampled & (ranked > 0))
    irrelevant_after = _after(sampled & (ranked == 0))  # the judged irrelevant below k
    top_relevant = np.concatenate([[0], np.cumsum(ranked)])
    ks = np.arange(depth, n + 1)
    xs = sampled_relevant_after[ks]
    bounds = np.array([missed_bound(int(x), rate, alpha) for x in xs.tolist()], dtype=np.int64)
    bounds = np.minimum(bounds, (n - ks) - irrelevant_after[ks])
    f = top_relevant[ks]
    stop = int(ks[np.flatnonzero(f >= target * (f + bounds))[0]])  # k = n always certifies
    judged = stop + int(sampled[stop:].sum())
    recall = float(top_relevant[stop]) / total if total else 1.0
    return SimulatedRun(total, recall, judged, _oracle(ranked, target), depth, rate)


def _oracle(ranked_relevance: np.ndarray, target: float) -> int:
    total = int(ranked_relevance.sum())
    if total == 0:
        return 0
    wanted = math.ceil(target * total)
    return int(np.searchsorted(np.cumsum(ranked_relevance), wanted) + 1)
