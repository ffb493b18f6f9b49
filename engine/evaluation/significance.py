"""Is one method really better than another on these queries? Paired tests over queries.

IR evaluation practice (Smucker, Allan & Carterette 2007) compares two systems on the same
queries with a paired randomisation test: under the null hypothesis the two systems' scores
for a query are exchangeable, so each per-query difference keeps or flips its sign at random.
The p-value is the share of sign assignments whose mean difference is at least as far from zero
as the observed one. A bootstrap over queries gives the 95 % interval of the mean difference.
Both are seeded, so the same inputs give the same numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

PERMUTATIONS = 10_000
BOOTSTRAP_SAMPLES = 10_000
SEED = 20_251_123
_CHUNK = 2_000  # permutations drawn at a time: bounded memory for thousands of queries


@dataclass(frozen=True)
class Comparison:
    """A method against a baseline over the queries both averaged."""

    method: str
    baseline: str
    queries: int
    delta: float  # mean of (method - baseline)
    ci95: tuple[float, float]
    p: float

    def to_json(self) -> dict[str, object]:
        return {
            "method": self.method,
            "baseline": self.baseline,
            "queries": self.queries,
            "delta": self.delta,
            "ci95": [self.ci95[0], self.ci95[1]],
            "p": self.p,
        }


def paired_randomization_p(
    a: Sequence[float], b: Sequence[float], permutations: int = PERMUTATIONS, seed: int = SEED
) -> float:
    """Two-sided p of the paired randomisation test of mean(a - b) = 0.

    Counts the observed assignment among the permutations ((hits + 1) / (n + 1)), so p is never
    0. With no queries, or identical scores on every query, p is 1.
    """
    diffs = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    if len(diffs) == 0 or not np.any(diffs):
        return 1.0
    observed = abs(diffs.mean())
    rng = np.random.default_rng(seed)
    hits = 0
    left = permutations
    while left:
        n = min(left, _CHUNK)
        signs = rng.choice((-1.0, 1.0), size=(n, len(diffs)))
        # A tolerance so that float noise does not decide ties with the observed value.
        hits += int(np.count_nonzero(np.abs(signs @ diffs) / len(diffs) >= observed - 1e-12))
        left -= n
    return (hits + 1) / (permutations + 1)


def bootstrap_ci(
    diffs: Sequence[float] | np.ndarray,
    samples: int = BOOTSTRAP_SAMPLES,
    seed: int = SEED,
    level: float = 0.95,
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of `diffs` (resampling queries)."""
    values = np.asarray(diffs, dtype=np.float64)
    if len(values) == 0:
        return (0.0, 0.0)
    rng = np.random.default_rng(seed)
    means = np.empty(samples)
    for start in range(0, samples, _CHUNK):
        n = min(_CHUNK, samples - start)
        picks = rng.integers(0, len(values), size=(n, len(values)))
        means[start : start + n] = values[picks].mean(axis=1)
    tail = (1.0 - level) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return (float(low), float(high))


def compare(
    method: str,
    scores: dict[str, float],
    baseline: str,
    baseline_scores: dict[str, float],
    permutations: int = PERMUTATIONS,
    seed: int = SEED,
) -> Comparison:
    """`method` against `baseline` over the query ids both scored (query id -> AP, say)."""
    shared = [q for q in baseline_scores if q in scores]
    a = [scores[q] for q in shared]
    b = [baseline_scores[q] for q in shared]
    diffs = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    return Comparison(
        method=method,
        baseline=baseline,
        queries=len(shared),
        delta=float(diffs.mean()) if len(shared) else 0.0,
        ci95=bootstrap_ci(diffs, seed=seed),
        p=paired_randomization_p(a, b, permutations, seed),
    )
