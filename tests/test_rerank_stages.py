"""The reranker's stages on plain data: the order it starts from (the base's, or the fixed
candidates ordered by the base) and the final ordering by aggregated p(yes)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from engine.methods.base import Ranking, SearchQuery
from engine.methods.rerank import _base_order, _base_ranks, _ranking
from engine.rerank.base import Answer, Question


class BaseOnly:
    """A method context whose base method ranks photos 5, 4, 3, 2, 1 (within the candidates
    when given, leaving out photo 9), recording how deep it was asked."""

    def __init__(self) -> None:
        self.asked: list[tuple[int, Sequence[int] | None]] = []

    def run_method(
        self, spec: Any, query: SearchQuery, *, top_k: int, candidates: Sequence[int] | None = None
    ) -> Ranking:
        self.asked.append((top_k, candidates))
        ids = [i for i in (5, 4, 3, 2, 1) if candidates is None or i in candidates][:top_k]
        return Ranking(ids, [float(i) for i in ids])


def test_without_candidates_the_base_is_asked_for_at_least_the_depth() -> None:
    context = BaseOnly()
    base, order = _base_order(None, SearchQuery("x"), context, 4, 2, None)  # type: ignore[arg-type]
    assert order == [5, 4, 3, 2] and base.ids == order
    assert context.asked == [(4, None)]


def test_fixed_candidates_are_ordered_by_the_base_and_those_it_left_out_come_last() -> None:
    context = BaseOnly()
    _, order = _base_order(None, SearchQuery("x"), context, 100, 10, [1, 9, 5])  # type: ignore[arg-type]
    assert order == [5, 1, 9]
    assert context.asked == [(3, [1, 9, 5])]


def answers(**p_yes: Sequence[float]) -> dict[int, list[tuple[Question, Answer]]]:
    """Answers by photo (keyword `p<id>`), one question per value."""
    return {
        int(key[1:]): [(Question(f"q{n}?"), Answer(p)) for n, p in enumerate(values)]
        for key, values in p_yes.items()
    }


def test_answered_photos_come_first_by_mean_ties_in_base_order_then_the_rest() -> None:
    order = [1, 2, 3, 4, 5]
    given = answers(p2=[0.2, 0.4], p3=[0.9, 0.1], p4=[0.9, 0.9])
    got = _ranking(order, given, _base_ranks(order), "mean")
    # The mean of p(yes), not the first answer: 3's strong first answer does not beat 4.
    assert got.ids == [4, 3, 2, 1, 5]
    assert got.scores[:3] == pytest.approx([0.9, 0.5, 0.3])
    assert got.scores[3:] == [-1.0, -2.0]  # unanswered: below every answered photo, base order
    assert got.evidence[3]["base_rank"] == 3
    assert [a["p"] for a in got.evidence[3]["answers"]] == [0.9, 0.1]
    assert set(got.evidence) == {2, 3, 4}


def test_equal_scores_keep_the_base_order_and_min_aggregates_by_the_weakest_answer() -> None:
    order = [7, 6]
    tied = _ranking(order, answers(p6=[0.5], p7=[0.5]), _base_ranks(order), "mean")
    assert tied.ids == [7, 6]
    weakest = _ranking(order, answers(p6=[0.6, 0.6], p7=[1.0, 0.1]), _base_ranks(order), "min")
    assert weakest.ids == [6, 7]
