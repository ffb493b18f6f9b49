"""Calibrating the probe's probabilities on held-out judgments, and measuring calibration.

Pure numpy. The probe's own logistic output is shrunk toward its prior (the query) so hard that,
with a few dozen judgments, the photos it ranks first get p near 0.5: a ranking, not a
probability. Platt scaling (Platt 1999) maps its logit z to sigmoid(slope * z + intercept), fitted
on logits the probe gave judged photos it had *not* been fitted on (stratified K-fold cross-fitting,
as scikit-learn's `CalibratedClassifierCV(method="sigmoid", ensemble=False)` does), so the map
never learns from the very judgment it scores.

Why Platt's method at small n: it has two parameters (isotonic regression needs hundreds of
calibration points before it beats it; Niculescu-Mizil and Caruana 2005), and its smoothed targets
(N+ + 1)/(N+ + 2) and 1/(N- + 2) are Laplace's rule of succession, a prior that keeps the map
finite when the held-out logits separate the two kinds (they usually do) and that never claims
more certainty than the judgments give: ten photos judged relevant out of ten like-scoring ones
make p 11/12, not 1. A weak Gaussian prior centred on the identity map (slope 1, intercept 0)
only keeps the fit defined when every held-out logit is the same. The slope is kept at 1 or above:
the judged photos are the top of a ranking, spread over a sliver of the logits the collection
spans, and a flatter map learned there (down to slope 0, the judged share for every photo) puts
the thousands of photos far below them at the judged photos' rate (measured: ECE 0.12 -> 0.38
after 10 judgments when the slope was free). Shrinking toward the query makes the probe's
logits too flat, not too steep, so the map is allowed to stretch them only.
Below `MIN_PER_KIND` judged photos of a kind there is no map, and no probability is claimed.

`reliability` and `expected_calibration_error` measure the result (tests/bench/bench_calibration.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from engine.judgments.logistic import fit_map

CALIBRATION_FOLDS = 10
"""Folds of the cross-fitting (fewer when fewer photos are judged: one photo per fold then)."""
MIN_PER_KIND = 3
"""Judged photos of each kind (relevant, not) before a probability is calibrated and shown: with
two, one held-out fold holds half of them (measured: a species query with 98 relevant and 2 not
judged put all 860 others at p >= 0.9, 2 of them relevant)."""
PRIOR_SD = 10.0
"""The standard deviation of the Gaussian prior on the slope and intercept (nearly flat)."""


@dataclass(frozen=True)
class PlattCalibration:
    """logit p = slope * z + intercept for the probe's own logit z, fitted on `folds`-fold
    held-out logits of `judged` photos."""

    slope: float
    intercept: float
    folds: int
    judged: int

    def apply(self, logits: np.ndarray) -> np.ndarray:
        out: np.ndarray = self.slope * np.asarray(logits, dtype=np.float64) + self.intercept
        return out

    def to_json(self) -> dict[str, object]:
        return {
            "method": "platt-cv",
            "slope": round(self.slope, 6),
            "intercept": round(self.intercept, 6),
            "folds": self.folds,
            "judged": self.judged,
        }


def platt_targets(labels: np.ndarray) -> np.ndarray:
    """Platt's smoothed targets: (N+ + 1)/(N+ + 2) for a relevant photo, 1/(N- + 2) for another."""
    y = np.asarray(labels).ravel() > 0
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    return np.where(y, (n_pos + 1) / (n_pos + 2), 1 / (n_neg + 2))


def stratified_folds(labels: np.ndarray, folds: int) -> np.ndarray:
    """Each photo's fold (0..folds-1): the relevant ones dealt round the folds in turn, the
    others continuing where they stopped, so every fold's complement holds both kinds when each
    kind has at least two photos. Deterministic: the judged photos come in rank order, so
    dealing spreads the ranks evenly over the folds."""
    y = np.asarray(labels).ravel() > 0
    assignment = np.zeros(len(y), dtype=np.int64)
    positives, negatives = np.flatnonzero(y), np.flatnonzero(~y)
    assignment[positives] = np.arange(len(positives)) % folds
    assignment[negatives] = (np.arange(len(negatives)) + len(positives)) % folds
    return assignment


def fit_platt(
    logits: np.ndarray, labels: np.ndarray, *, prior_sd: float = PRIOR_SD
) -> tuple[float, float]:
    """(slope, intercept) minimising the cross-entropy of sigmoid(slope * z + intercept) to
    Platt's targets plus the Gaussian prior around (1, 0); the slope is at least 1."""
    z = np.asarray(logits, dtype=np.float64).ravel()
    targets = platt_targets(labels)
    if len(z) != len(targets):
        raise ValueError(f"{len(z)} logits for {len(targets)} labels")
    precision = 1.0 / prior_sd**2
    slope, intercept = _newton_platt(z, targets, precision, free_slope=True)
    if slope < 1:  # flatter than the probe: keep its slope, move only the intercept
        slope, intercept = _newton_platt(z, targets, precision, free_slope=False)
    return slope, intercept


def _newton_platt(
    z: np.ndarray, targets: np.ndarray, precision: float, *, free_slope: bool
) -> tuple[float, float]:
    """The penalised fit by the probe's own Newton solver (`logistic.fit_map`), around the
    prior (1, 0): solved for the offset from it, so the penalty is the solver's t'Dt; with the
    slope held at 1 only the intercept moves."""
    prior_mean = np.array([1.0, 0.0])
    # With the slope held, z enters as a fixed offset and its column is zero.
    features = np.column_stack([z if free_slope else np.zeros_like(z), np.ones_like(z)])
    held = np.zeros_like(z) if free_slope else z
    offset = held + features @ prior_mean  # the logit at the prior: z either way
    delta, _, _ = fit_map(
        offset, features, targets, np.full(2, precision), np.zeros(2), max_iter=100, tol=1e-12
    )
    theta = prior_mean + delta
    return (float(theta[0]) if free_slope else 1.0), float(theta[1])


# -- measuring calibration --------------------------------------------------------------------


@dataclass(frozen=True)
class ReliabilityBin:
    """The photos whose p fell in [low, high): how many, their mean p, the share relevant."""

    low: float
    high: float
    count: int
    mean_p: float
    share_relevant: float


def reliability(
    probabilities: np.ndarray, relevant: np.ndarray, bins: int = 10
) -> list[ReliabilityBin]:
    """The reliability diagram's bins (equal width; p = 1 in the last), empty bins left out."""
    p = np.asarray(probabilities, dtype=np.float64).ravel()
    y = np.asarray(relevant, dtype=np.float64).ravel()
    which = np.minimum((p * bins).astype(np.int64), bins - 1)
    out = []
    for b in range(bins):
        inside = which == b
        if inside.any():
            out.append(
                ReliabilityBin(
                    b / bins,
                    (b + 1) / bins,
                    int(inside.sum()),
                    float(p[inside].mean()),
                    float(y[inside].mean()),
                )
            )
    return out


def expected_calibration_error(
    probabilities: np.ndarray, relevant: np.ndarray, bins: int = 10
) -> float:
    """ECE (Naeini et al. 2015; Guo et al. 2017): the mean over equal-width bins of
    |mean p - share relevant|, each bin weighted by its share of the photos. NaN when empty."""
    p = np.asarray(probabilities, dtype=np.float64).ravel()
    if not len(p):
        return math.nan
    return sum(
        b.count / len(p) * abs(b.mean_p - b.share_relevant) for b in reliability(p, relevant, bins)
    )
