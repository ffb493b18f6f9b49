"""Learning from the user's judgments: Rocchio, a linear probe, "judge next", recall estimates.

Pure numpy over vectors, ids and judgments; nothing here reads the catalog or the index (the
methods and workflows that do are in `engine/methods/feedback.py`).

- `rocchio`: the query vector moved toward the mean of the relevant photos' embeddings and away
  from the mean of the non-relevant ones (Rocchio 1971; the SMART defaults 1, 0.75, 0.15).
- `fit_probe`: L2-regularised logistic regression on the judged photos' embeddings whose weight
  vector is shrunk toward the query's own direction, so zero judgments rank exactly as the query
  does and one or two judgments only nudge it (C = 1 on unit embeddings, or C chosen by the
  evidence). Fitted by Newton's method (a few iterations; the Newton step goes through the
  Woodbury identity when there are fewer judgments than dimensions). Targets are Platt's (1999)
  smoothed labels, (N+ + 1)/(N+ + 2) and 1/(N- + 2): the fit cannot become certain from a
  handful of judgments, stays finite when the judgments are separable (they nearly always are
  in hundreds of dimensions). Shrunk toward the query, its own logistic output is a ranking
  more than a probability (photos judged relevant get p near 0.5 at a few dozen judgments), so
  the probabilities are Platt-scaled on held-out logits (`engine.judgments.calibration`: each
  judged photo scored by a probe fitted on the other folds, never on itself).
- `judge_next`: uncertainty sampling (the photos whose probability is nearest 0.5, where a
  judgment moves the probe most) mixed with a few of the top-ranked unjudged photos.
- `estimate_recall` / `sample_to_judge`: how many relevant photos the collection holds, from the
  judged top of a ranking plus a stratified random sample of score bands below it, with a 90 %
  interval (design-based: the estimate assumes nothing about how relevance falls with rank; only
  the allocation of the sample does, for efficiency).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from engine.judgments.calibration import (
    CALIBRATION_FOLDS,
    MIN_PER_KIND,
    PlattCalibration,
    fit_platt,
    stratified_folds,
)
from engine.judgments.logistic import fit_map, sigmoid

# -- Rocchio ----------------------------------------------------------------------------------

ROCCHIO_ALPHA, ROCCHIO_BETA, ROCCHIO_GAMMA = 1.0, 0.75, 0.15


def _unit(vector: np.ndarray) -> np.ndarray:
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm > 0 else vector


def _as_matrix(vectors: np.ndarray | Sequence[np.ndarray], dim: int) -> np.ndarray:
    matrix = np.asarray(vectors, dtype=np.float64)
    if matrix.size == 0:
        return np.zeros((0, dim), dtype=np.float64)
    if matrix.ndim != 2 or matrix.shape[1] != dim:
        raise ValueError(f"expected vectors of dimension {dim}, got shape {matrix.shape}")
    return matrix


def rocchio(
    query_vec: np.ndarray,
    relevant_vecs: np.ndarray | Sequence[np.ndarray],
    nonrelevant_vecs: np.ndarray | Sequence[np.ndarray],
    alpha: float = ROCCHIO_ALPHA,
    beta: float = ROCCHIO_BETA,
    gamma: float = ROCCHIO_GAMMA,
) -> np.ndarray:
    """alpha * q + beta * mean(relevant) - gamma * mean(non-relevant), as a unit vector.

    An empty group contributes nothing (no judgments gives the query itself); a result of length
    zero (the terms cancel) falls back to the query."""
    query = np.asarray(query_vec, dtype=np.float64).ravel()
    relevant = _as_matrix(relevant_vecs, query.size)
    nonrelevant = _as_matrix(nonrelevant_vecs, query.size)
    moved = alpha * _unit(query)
    if len(relevant):
        moved = moved + beta * relevant.mean(axis=0)
    if len(nonrelevant):
        moved = moved - gamma * nonrelevant.mean(axis=0)
    if not np.all(np.isfinite(moved)) or float(np.linalg.norm(moved)) <= 1e-12:
        moved = _unit(query)
    return _unit(moved).astype(np.float32)


# -- the linear probe -------------------------------------------------------------------------

PROBE_C = 1.0
"""The prior variance of the embedding weights, the inverse of their L2 strength (scikit-learn's
default C; the embeddings are unit vectors)."""
C_GRID: tuple[float, ...] = tuple(float(10**e) for e in np.arange(-1.0, 3.01, 0.5))
"""The values of C among which the judgments choose, by the evidence, when asked to."""
PRIOR_WEIGHT = 1.0
"""Logits per standard deviation of the query's similarity over the collection, in the prior."""
_INTERCEPT_PRECISION = 1e-6  # the intercept is nearly free; this only keeps the solve regular


@dataclass(frozen=True)
class Probe:
    """A fitted probe: logit p(x) = weights . x + bias for a unit embedding x.

    Ranking by the probe is ranking by similarity to `direction` (the bias and scale do not
    change the order), so any vector index ranks by it; `probability(score)` maps such a
    similarity back to the calibrated probability. `fitted` is False when the judgments could
    not teach it anything (none, or all of one kind): the weights are then the prior (the
    query's own direction) and there are no probabilities (`note` says why). `calibration`
    maps the fitted logit to the calibrated one; `withheld`: fitted, but too few judgments of
    a kind to calibrate, so it ranks and claims no probability (`note` says why)."""

    weights: np.ndarray
    bias: float
    fitted: bool
    relevant: int
    not_relevant: int
    note: str = ""
    iterations: int = 0
    c: float | None = None  # the prior variance of the embedding weights the fit used
    calibration: PlattCalibration | None = None
    withheld: bool = False

    @property
    def has_probabilities(self) -> bool:
        """Whether `probability` gives numbers (else NaN): fitted, and not withheld."""
        return self.fitted and not self.withheld

    @property
    def scale(self) -> float:
        """|w|: the fitted logits per unit of similarity to `direction`."""
        return float(np.linalg.norm(self.weights))

    @property
    def p_scale(self) -> float:
        """Calibrated logits per unit of similarity to `direction`."""
        slope = 1.0 if self.calibration is None else self.calibration.slope
        return slope * self.scale

    @property
    def p_bias(self) -> float:
        """The calibrated logit at similarity 0."""
        if self.calibration is None:
            return self.bias
        return self.calibration.slope * self.bias + self.calibration.intercept

    @property
    def direction(self) -> np.ndarray:
        """The unit vector whose similarity orders photos as the probe does (float32)."""
        return _unit(np.asarray(self.weights, dtype=np.float64)).astype(np.float32)

    def logits(self, vectors: np.ndarray) -> np.ndarray:
        """The fitted (uncalibrated) logit of each row."""
        out: np.ndarray = np.asarray(vectors, dtype=np.float64) @ self.weights + self.bias
        return out

    def probabilities(self, vectors: np.ndarray) -> np.ndarray:
        """Calibrated p(relevant) of each row (unit embeddings); NaN without probabilities."""
        if not self.has_probabilities:
            return np.full(len(vectors), np.nan)
        logits = self.logits(vectors)
        return sigmoid(logits if self.calibration is None else self.calibration.apply(logits))

    def probability(self, scores: np.ndarray | Sequence[float] | float) -> np.ndarray:
        """Calibrated p(relevant) from similarities to `direction` (an index search's scores)."""
        values = np.asarray(scores, dtype=np.float64)
        if not self.has_probabilities:
            return np.full(values.shape, np.nan)
        return sigmoid(self.p_scale * values + self.p_bias)

    def score_at(self, p: float) -> float:
        """The similarity to `direction` at which the probability is `p` (a cut-off): inf when
        no photo reaches it (or there are no probabilities), -inf when every photo does."""
        if not self.has_probabilities:
            return math.inf
        p = min(max(p, 1e-12), 1 - 1e-12)
        logit = math.log(p / (1 - p))
        if self.p_scale <= 0:
            return -math.inf if self.p_bias >= logit else math.inf
        return (logit - self.p_bias) / self.p_scale

    def to_json(self) -> dict[str, object]:
        """What a saved run keeps: enough to map its scores to probabilities again."""
        return {
            "fitted": self.fitted,
            "relevant": self.relevant,
            "not_relevant": self.not_relevant,
            # None: no probability claimed (too few judgments of a kind to calibrate)
            "p_scale": round(self.p_scale, 6) if self.has_probabilities else None,
            "p_bias": round(self.p_bias, 6) if self.has_probabilities else None,
            "iterations": self.iterations,
            "c": self.c,
            "note": self.note,
            "calibration": None if self.calibration is None else self.calibration.to_json(),
        }


def prior_scale(query_scores: np.ndarray | Sequence[float], weight: float = PRIOR_WEIGHT) -> float:
    """The length of the prior weight vector along the query: `weight` logits per standard
    deviation of the query's similarity over (a sample of) the collection. The similarities of
    CLIP text and image embeddings spread over a few hundredths only, and differently in each
    model; measured in standard deviations the prior means the same in every library."""
    values = np.asarray(query_scores, dtype=np.float64)
    spread = float(values.std()) if values.size > 1 else 0.0
    return weight / max(spread, 1e-3)


def fit_probe(
    query_vec: np.ndarray,
    vectors: np.ndarray,
    labels: Sequence[int] | np.ndarray,
    *,
    prior_scale: float,
    c: float | None = PROBE_C,
    max_iter: int = 100,
    tol: float = 1e-9,
    calibrate: bool = True,
) -> Probe:
    """Fit logit p(x) = (prior_scale * q + v) . x + b to judged embeddings (labels > 0 relevant).

    Minimises the cross-entropy to Platt's smoothed targets plus |v|^2 / (2c): the prior puts the
    weights on the query's direction at `prior_scale` (see `prior_scale()`), and the judgments
    move them as far as they earn. `c` None lets the judgments choose it among `C_GRID` by the
    evidence (MacKay's type-II maximum likelihood, with Laplace's approximation).
    With `calibrate`, the probabilities are Platt-scaled on cross-fitted held-out logits
    (`engine.judgments.calibration`), and withheld until each kind has `MIN_PER_KIND` judged
    photos (the probe still ranks); without it they are the fit's own logistic output.
    With no judgments, or judgments of one kind only, returns the prior, unfitted, with a note
    the user can read."""
    q = _unit(np.asarray(query_vec, dtype=np.float64).ravel())
    x = _as_matrix(vectors, q.size)
    y = (np.asarray(labels).ravel() > 0).astype(np.float64)
    if len(y) != len(x):
        raise ValueError(f"{len(x)} vectors for {len(y)} labels")
    if c is not None and c <= 0:
        raise ValueError("c must be positive")
    w0 = prior_scale * q
    n_pos, n_neg = int(y.sum()), int(len(y) - y.sum())
    if n_pos == 0 or n_neg == 0:
        if not len(y):
            note = "no judgments yet: the query's own ranking"
        elif n_neg == 0:
            note = (
                f"all {n_pos} judged photos are relevant: judge some that are not, so the probe "
                "can learn the difference; the query's own ranking meanwhile"
            )
        else:
            note = (
                f"none of the {n_neg} judged photos is relevant: the probe needs at least one "
                "relevant photo; the query's own ranking meanwhile"
            )
        return Probe(w0, 0.0, False, n_pos, n_neg, note)
    theta, chosen, iterations = _fit_theta(x, y, w0, c, max_iter, tol)
    note = f"learned from {n_pos} relevant and {n_neg} non-relevant photos"
    calibration = None
    if calibrate:
        calibration = _cross_fitted_calibration(x, y, w0, c, max_iter, tol)
        if calibration is None:
            note += (
                f"; no probabilities until {MIN_PER_KIND} relevant and {MIN_PER_KIND} "
                "non-relevant photos are judged"
            )
    return Probe(
        w0 + theta[:-1],
        float(theta[-1]),
        True,
        n_pos,
        n_neg,
        note,
        iterations,
        chosen,
        calibration,
        withheld=calibrate and calibration is None,
    )


def _fit_theta(
    x: np.ndarray, y: np.ndarray, w0: np.ndarray, c: float | None, max_iter: int, tol: float
) -> tuple[np.ndarray, float, int]:
    """The penalised fit of (v, b) around the prior weights `w0` (judgments of both kinds):
    theta = (v, b), the C used, and the Newton iterations taken."""
    n_pos, n_neg = int(y.sum()), int(len(y) - y.sum())
    # Platt's targets: what a Bayesian with a uniform prior expects of the next photo like these.
    targets = np.where(y > 0, (n_pos + 1) / (n_pos + 2), 1 / (n_neg + 2))
    offset = x @ w0
    features = np.hstack([x, np.ones((len(x), 1))])  # v, then the intercept
    theta = np.zeros(w0.size + 1)
    # Start the intercept where the prior's logits meet the targets' mean, so Newton starts close.
    mean_target = float(targets.mean())
    theta[-1] = math.log(mean_target / (1 - mean_target)) - float(offset.mean())
    best: tuple[float, np.ndarray, float, int] | None = None
    iterations = 0
    for candidate_c in (c,) if c is not None else C_GRID:
        precision = np.full(w0.size + 1, 1.0 / candidate_c)
        precision[-1] = _INTERCEPT_PRECISION
        # Each fit starts from the previous one's optimum (the grid rises smoothly).
        theta, value, steps = fit_map(offset, features, targets, precision, theta, max_iter, tol)
        iterations += steps
        # The evidence only chooses among several C: a fixed C needs no determinant.
        evidence = -value
        if c is None:
            evidence -= 0.5 * _logdet_ratio(offset, features, precision, theta)
        if best is None or evidence > best[0]:
            best = (evidence, theta.copy(), candidate_c, steps)
    assert best is not None
    _, theta, chosen, _ = best
    return theta, chosen, iterations


def _cross_fitted_calibration(
    x: np.ndarray, y: np.ndarray, w0: np.ndarray, c: float | None, max_iter: int, tol: float
) -> PlattCalibration | None:
    """Platt's map fitted on held-out logits: each judged photo scored by the probe fitted to
    the folds it is not in (stratified; C chosen again inside each fold when `c` is None), so
    the map never learns from the judgment it scores. None with fewer than `MIN_PER_KIND`
    photos of a kind."""
    n_pos, n_neg = int(y.sum()), int(len(y) - y.sum())
    if min(n_pos, n_neg) < MIN_PER_KIND:
        return None
    folds = min(CALIBRATION_FOLDS, len(y))
    assignment = stratified_folds(y, folds)
    held_out = np.empty(len(y))
    for fold in range(folds):
        test = assignment == fold
        theta, _, _ = _fit_theta(x[~test], y[~test], w0, c, max_iter, tol)
        held_out[test] = x[test] @ (w0 + theta[:-1]) + theta[-1]
    slope, intercept = fit_platt(held_out, y)
    return PlattCalibration(slope, intercept, folds, len(y))


def _logdet_ratio(
    offset: np.ndarray, features: np.ndarray, precision: np.ndarray, theta: np.ndarray
) -> float:
    """log det(H) - log det(D) at the optimum: the Laplace evidence's Occam factor, through
    det(I + S F D^-1 F' S) when there are fewer judgments than dimensions."""
    p = sigmoid(offset + features @ theta)
    scaled = features * np.sqrt(p * (1 - p))[:, None]
    n, dim = features.shape
    if n < dim:
        inner = np.eye(n) + (scaled / precision) @ scaled.T
        _, logdet = np.linalg.slogdet(inner)
        return float(logdet)
    hessian = scaled.T @ scaled + np.diag(precision)
    _, logdet = np.linalg.slogdet(hessian)
    return float(logdet - np.sum(np.log(precision)))


# -- judge next -------------------------------------------------------------------------------

TOP_MIX = 0.25
"""The share of "judge next" photos taken from the top of the ranking (the rest: uncertain)."""


def judge_next(
    scores_probe: Sequence[tuple[int, float]],
    judged_ids: Sequence[int] | set[int] | Mapping[int, int],
    n: int,
    top_mix: float = TOP_MIX,
    seed: int = 0,
) -> list[int]:
    """The `n` photos whose judgment teaches the probe most: the unjudged ones whose probability
    is nearest 0.5 (uncertainty sampling; ties broken at random with `seed`), mixed with
    round(n * top_mix) of the top-ranked unjudged ones (the user still sees what the probe is
    surest of). `scores_probe` is (image id, probability) in rank order; a NaN probability (an
    unfitted probe) leaves only the top of the ranking to offer. Never returns a judged photo;
    the top picks come first."""
    if n <= 0:
        return []
    if not 0.0 <= top_mix <= 1.0:
        raise ValueError("top_mix must be between 0 and 1")
    judged = set(judged_ids)
    unjudged = [(int(i), float(p)) for i, p in scores_probe if int(i) not in judged]
    unjudged = list({i: (i, p) for i, p in reversed(unjudged)}.values())[::-1]  # first rank wins
    n_top = min(n, max(0, round(n * top_mix)))
    picked = [i for i, _ in unjudged[:n_top]]
    chosen = set(picked)
    uncertain = [(i, p) for i, p in unjudged if i not in chosen and not math.isnan(p)]
    rng = np.random.default_rng(seed)
    ties = rng.random(len(uncertain))
    order = sorted(range(len(uncertain)), key=lambda k: (abs(uncertain[k][1] - 0.5), ties[k]))
    picked += [uncertain[k][0] for k in order[: n - len(picked)]]
    if len(picked) < n:  # no probabilities (or too few): carry on down the ranking
        chosen = set(picked)
        picked += [i for i, _ in unjudged if i not in chosen][: n - len(picked)]
    return picked


# -- recall estimate --------------------------------------------------------------------------

LEVEL = 0.9
FIRST_BAND = 10
DRAWS = 20_000
_JEFFREYS = 0.5  # Beta(1/2, 1/2): Jeffreys' prior


def band_edges(depth: int, ranked_depth: int | None = None, first: int = FIRST_BAND) -> list[int]:
    """Rank positions where score bands start: 0, first, 2 first, 4 first, ... doubling to the
    end of the ranked part, then one band for the unranked rest (0-based, with `depth` last).

    The bands are fixed by the collection's size, not by what has been judged, so a sample drawn
    in a band stays a random sample of it as the judged top grows."""
    ranked = depth if ranked_depth is None else min(ranked_depth, depth)
    edges = [0]
    width = first
    while edges[-1] < ranked:
        edges.append(min(edges[-1] + width, ranked))
        width = edges[-1] if edges[-1] >= first else first
    if edges[-1] < depth:
        edges.append(depth)
    return edges


@dataclass(frozen=True)
class Stratum:
    """One score band below the census depth: ranks `first`..`last` (1-based, inclusive)."""

    first: int
    last: int
    size: int  # photos of the band
    sampled: int  # of them in its random sample (the judged start of the band's random order)
    sampled_relevant: int
    known_relevant: int  # judged relevant anywhere in the band
    judged: int  # judged anywhere in the band
    unseen: float | None  # the point estimate of relevant photos not yet judged (None: no sample)

    def to_json(self) -> dict[str, object]:
        return {
            "first": self.first,
            "last": self.last,
            "size": self.size,
            "sampled": self.sampled,
            "sampled_relevant": self.sampled_relevant,
            "known_relevant": self.known_relevant,
            "judged": self.judged,
            "unseen": None if self.unseen is None else round(self.unseen, 3),
        }


@dataclass(frozen=True)
class RecallEstimate:
    """How many relevant photos the collection holds, and how many are still unseen.

    `found` is exact (judged relevant); `total` = found + `unseen`, the stratified estimate, with
    the `level` interval `low`..`high` (`unseen_low`..`unseen_high`). All of them are None while
    some band below the census depth has no judged sample (the note says how many photos that
    leaves unknown). `judged_in_sample` counts the judged photos of the bands' random samples."""

    found: int
    total: float | None
    low: int | None
    high: int | None
    unseen: float | None
    unseen_low: int | None
    unseen_high: int | None
    judged_in_sample: int
    note: str
    census_depth: int = 0  # the top bands of the ranking, judged in full
    population: int = 0
    level: float = LEVEL
    strata: list[Stratum] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return self.total is not None

    def summary(self) -> str:
        """ "found 37 of about 45 (90 %: 40–55)", or what is missing for one."""
        if self.total is None or self.low is None or self.high is None:
            return f"found {self.found}; {self.note}"
        return (
            f"found {self.found} of about {round(self.total)} "
            f"({round(self.level * 100)} %: {self.low}–{self.high})"
        )

    def to_json(self) -> dict[str, object]:
        return {
            "found": self.found,
            "total": None if self.total is None else round(self.total, 3),
            "low": self.low,
            "high": self.high,
            "unseen": None if self.unseen is None else round(self.unseen, 3),
            "unseen_low": self.unseen_low,
            "unseen_high": self.unseen_high,
            "judged_in_sample": self.judged_in_sample,
            "census_depth": self.census_depth,
            "population": self.population,
            "level": self.level,
            "note": self.note,
            "summary": self.summary(),
            "strata": [s.to_json() for s in self.strata],
        }


@dataclass(frozen=True)
class _Band:
    first: int  # 0-based position of the band's first photo
    end: int
    ids: list[int]  # its photos, in the band's random order
    sampled: int  # the judged start of `ids`: the band's random sample


def _bands(
    order: np.ndarray, judged: Mapping[int, int], seed: int, ranked_depth: int | None
) -> tuple[int, list[_Band]]:
    """The census depth and the score bands below it, each in its fixed random order.

    The census is the bands judged in full from rank 1 on; the band where the judged top ends
    stays a stratum (its judged photos count as found; its sample is the judged start of its
    random order), so judging a sample photo never moves a band's boundary under its sample."""
    prefix = len(order)
    for position, image_id in enumerate(order.tolist()):
        if image_id not in judged:
            prefix = position
            break
    edges = band_edges(len(order), ranked_depth)
    depth = max(edge for edge in edges if edge <= prefix)
    bands = []
    for number, (start, end) in enumerate(zip(edges[:-1], edges[1:], strict=True)):
        if end <= depth:
            continue
        # The band's random order is fixed by the seed and the band alone.
        permutation = np.random.default_rng([seed, number]).permutation(end - start) + start
        ids = order[permutation].tolist()
        sampled = 0
        for image_id in ids:
            if image_id not in judged:
                break
            sampled += 1
        bands.append(_Band(start, end, ids, sampled))
    return depth, bands


def _share_draws(rng: np.random.Generator, alpha: float, beta: float, draws: int) -> np.ndarray:
    """Draws of a band's share of relevant photos from Beta(alpha, beta); a zero parameter
    (no relevant, or no other, photo in the sample) puts all mass at 0 (or 1)."""
    if alpha <= 0:
        return np.zeros(draws)
    if beta <= 0:
        return np.ones(draws)
    return rng.beta(alpha, beta, draws)


def _band_counts(
    ids: Sequence[int], sampled: int, judged: Mapping[int, int]
) -> tuple[int, int, int, int, int]:
    """A band's (size, sample size, relevant in the sample, relevant judged in the band,
    judged in the band); its sample is the first `sampled` of `ids`."""
    flags = [judged.get(i) for i in ids]
    relevant = [value is not None and value > 0 for value in flags]
    return (
        len(ids),
        sampled,
        sum(relevant[:sampled]),
        sum(relevant),
        sum(1 for value in flags if value is not None),
    )


def estimate_recall(
    order: Sequence[int] | np.ndarray,
    judgments: Mapping[int, int],
    *,
    seed: int = 0,
    level: float = LEVEL,
    ranked_depth: int | None = None,
    draws: int = DRAWS,
) -> RecallEstimate:
    """Estimate the relevant photos among `order` (every photo of the collection, best first by
    a fixed ranking; beyond `ranked_depth` in any fixed order) from `judgments` (id -> relevance).

    The bands (`band_edges`) judged in full from rank 1 on are a census. Below, each band is a
    stratum; each band's random sample is the judged start of its seeded random
    order (`sample_to_judge` proposes the next ones). Photos judged for other reasons count as
    found but not as sample: each band's total is estimated from its sample alone
    (Horvitz-Thompson, size * relevant / sampled), less the relevant photos already judged there.

    The interval comes from simulation, each end from its own one-sided bound: for the lower
    end, each band's share is drawn from Beta(r, m - r + 1), the exact (Clopper-Pearson) lower
    limit's distribution, which never invents relevant photos its sample did not show; for the
    upper end from Jeffreys' Beta(r + 1/2, m - r + 1/2), which allows for those it missed. The
    relevant photos among each band's unsampled ones follow (beta-binomial), summed over bands.
    (One posterior for both ends, summed over many sparsely sampled bands, lifts the lower end
    above the truth: each band's prior adds phantom relevant photos, and they add up.)"""
    ids = np.asarray(order, dtype=np.int64)
    if len(np.unique(ids)) != len(ids):
        raise ValueError("the ranking names a photo twice")
    judged = {int(i): int(r) for i, r in judgments.items()}
    in_population = set(ids.tolist())
    found = sum(1 for i, r in judged.items() if r > 0 and i in in_population)
    depth, bands = _bands(ids, judged, seed, ranked_depth)
    strata: list[Stratum] = []
    missing = 0
    point = 0.0
    rng = np.random.default_rng([seed, 1_000_003])
    lower = np.zeros(draws)
    upper = np.zeros(draws)
    for band in bands:
        size, m, r, known, judged_here = _band_counts(band.ids, band.sampled, judged)
        unseen: float | None = None
        if m == size:  # every photo of the band is judged
            unseen = 0.0
        elif m > 0:
            unseen = max(0.0, size * r / m - known)
            outside = known - r  # relevant photos judged in the band, not in its sample
            low_share = _share_draws(rng, r, m - r + 1, draws)
            high_share = _share_draws(rng, r + _JEFFREYS, m - r + _JEFFREYS, draws)
            lower += np.maximum(0, rng.binomial(size - m, low_share) - outside)
            upper += np.maximum(0, rng.binomial(size - m, high_share) - outside)
        else:
            missing += size
        if unseen is not None:
            point += unseen
        strata.append(Stratum(band.first + 1, band.end, size, m, r, known, judged_here, unseen))
    judged_in_sample = sum(s.sampled for s in strata)
    if missing:
        unsampled = sum(1 for s in strata if s.sampled == 0 and s.size > 0)
        note = (
            f"{missing:,} photos below rank {depth} have no judged sample yet ({unsampled} score "
            f"bands): judge a sample of at least {unsampled} to estimate how many remain"
        )
        return RecallEstimate(
            found, None, None, None, None, None, None, judged_in_sample, note, depth, len(ids),
            level, strata,
        )  # fmt: skip
    tail = (1.0 - level) / 2
    unseen_low = int(round(float(np.quantile(lower, tail))))
    unseen_high = int(round(float(np.quantile(upper, 1 - tail))))
    if not bands:
        note = f"every photo is judged: {found} relevant"
    else:
        note = (
            f"the top {depth} judged in full, {judged_in_sample} judged in random samples of "
            f"{len(bands)} score bands below"
        )
    return RecallEstimate(
        found,
        found + point,
        found + unseen_low,
        found + unseen_high,
        point,
        unseen_low,
        unseen_high,
        judged_in_sample,
        note,
        depth,
        len(ids),
        level,
        strata,
    )


def sample_to_judge(
    order: Sequence[int] | np.ndarray,
    judgments: Mapping[int, int],
    n: int,
    *,
    seed: int = 0,
    ranked_depth: int | None = None,
) -> list[int]:
    """The next `n` photos to judge for `estimate_recall` (same `order`, `seed` and
    `ranked_depth`), each band's in its fixed random order so that they extend its sample.

    Neyman allocation gives a band a sample in proportion to size x the spread of relevance in
    it. The spread is taken from a working assumption, not from the sample (an allocation that
    follows the sample's own results stops sampling the bands that looked empty early and
    biases the estimate low): that relevance falls about as 1/rank, so each doubling band holds
    about as many relevant photos and its spread goes as 1/sqrt(size). The allocation is then
    in proportion to sqrt(size): each next photo goes to the band with the fewest sampled per
    sqrt(size), the largest first on a tie (so every band gets one before any gets two)."""
    if n <= 0:
        return []
    ids = np.asarray(order, dtype=np.int64)
    judged = {int(i): int(r) for i, r in judgments.items()}
    _, bands = _bands(ids, judged, seed, ranked_depth)
    queues = [[i for i in band.ids[band.sampled :] if i not in judged] for band in bands]
    counts = [band.sampled for band in bands]
    roots = [math.sqrt(len(band.ids)) for band in bands]
    taken = [0] * len(bands)
    picked: list[int] = []
    while len(picked) < n:
        open_bands = [h for h in range(len(bands)) if taken[h] < len(queues[h])]
        if not open_bands:
            break  # every photo is judged or proposed
        best = min(open_bands, key=lambda h: ((counts[h] + taken[h]) / roots[h], -roots[h]))
        picked.append(queues[best][taken[best]])
        taken[best] += 1
    return picked
