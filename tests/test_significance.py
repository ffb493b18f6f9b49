"""The paired tests behind `evaluate --method A --method B`: randomisation p and bootstrap CI."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from engine.evaluation.significance import bootstrap_ci, compare, paired_randomization_p


def exact_p(diffs: list[float]) -> float:
    """Every one of the 2^n sign assignments: the exact two-sided p."""
    observed = abs(np.mean(diffs))
    hits = sum(
        abs(np.mean([s * d for s, d in zip(signs, diffs, strict=True)])) >= observed - 1e-12
        for signs in itertools.product((-1, 1), repeat=len(diffs))
    )
    return hits / 2 ** len(diffs)


@pytest.mark.parametrize(
    "a, b",
    [
        ([0.9, 0.8, 0.7, 0.9, 0.6], [0.8, 0.7, 0.6, 0.8, 0.5]),  # always better: exact p = 2/32
        ([0.9, 0.2, 0.7, 0.4, 0.6, 0.5], [0.8, 0.4, 0.6, 0.5, 0.4, 0.5]),
        ([0.5, 0.1, 0.3, 0.9, 0.2, 0.8, 0.4, 0.6], [0.4, 0.3, 0.3, 0.6, 0.3, 0.7, 0.5, 0.4]),
    ],
)
def test_randomisation_p_estimates_the_exact_permutation_p(a, b):
    exact = exact_p([x - y for x, y in zip(a, b, strict=True)])
    estimate = paired_randomization_p(a, b, permutations=20_000)
    assert estimate == pytest.approx(exact, abs=0.01)


def test_no_difference_gives_p_one_and_a_zero_interval():
    same = [0.3, 0.6, 0.9]
    assert paired_randomization_p(same, same) == 1.0
    assert bootstrap_ci([0.0, 0.0, 0.0]) == (0.0, 0.0)
    assert paired_randomization_p([], []) == 1.0


def test_a_clear_gain_on_many_queries_is_significant_and_seeded():
    rng = np.random.default_rng(1)
    base = rng.uniform(0.2, 0.6, size=48)
    better = np.clip(base + rng.normal(0.15, 0.05, size=48), 0, 1)
    result = compare("new", dict(enumerate(better)), "old", dict(enumerate(base)))
    assert result.queries == 48
    assert result.delta == pytest.approx(float(np.mean(better - base)))
    assert result.ci95[0] < result.delta < result.ci95[1]
    assert result.ci95[0] > 0.1 and result.ci95[1] < 0.2
    assert result.p == pytest.approx(1 / 10_001)  # no permutation reaches the observed mean
    again = compare("new", dict(enumerate(better)), "old", dict(enumerate(base)))
    assert again == result  # seeded: the same numbers every time


def test_only_queries_both_methods_averaged_are_paired():
    result = compare("b", {"q1": 1.0, "q2": 0.5, "q9": 0.0}, "a", {"q1": 0.5, "q2": 0.5, "q3": 1})
    assert result.queries == 2 and result.delta == pytest.approx(0.25)
