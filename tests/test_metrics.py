"""Retrieval metrics: docs/SPEC.md §1–§2 worked examples, edge cases, and agreement with
independent brute-force definitions on random rankings."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import pytest

from engine.evaluation.metrics import (
    QueryMetrics,
    average_precision_at_k,
    evaluate_ranking,
    judged_at_k,
    mean_metrics,
    ndcg_at_k,
    precision_at_k,
    recall_at_k,
    reciprocal_rank_at_k,
    strict_order,
    trailing_nonrelevant,
)
from engine.methods.fusion import reciprocal_rank_fusion
from engine.rerank.base import yes_probability

# --- docs/SPEC.md worked examples -----------------------------------------------------------


def test_spec_fullrank_ap_examples() -> None:
    assert average_precision_at_k([1, 0, 0, 0, 0], 5, 2) == pytest.approx(0.5, abs=1e-12)
    assert average_precision_at_k([1, 0, 0, 0, 1], 5, 2) == pytest.approx(0.7, abs=1e-12)


def test_spec_rerank_ap_example() -> None:
    # num_relevant is ignored by the rerank normaliser: r = relevant within the top k.
    for num_relevant in (0, 2, 10):
        ap = average_precision_at_k([0, 1, 1, 0], 4, num_relevant, protocol="rerank")
        assert ap == pytest.approx((1 / 2 + 2 / 3) / 2, abs=1e-12)
        assert ap == pytest.approx(0.5833333, abs=1e-7)


def test_spec_ndcg_example() -> None:
    rels = [0, 1, 0, 1]
    dcg = 1 / math.log2(3) + 1 / math.log2(5)
    idcg = 1 + 1 / math.log2(3) + 1 / math.log2(4)
    assert dcg == pytest.approx(1.0616063, abs=1e-7)
    assert idcg == pytest.approx(2.1309298, abs=1e-7)
    assert ndcg_at_k(rels, 4, 3) == pytest.approx(0.4981893, abs=1e-7)
    assert ndcg_at_k(rels, 4, 3) == pytest.approx(dcg / idcg, abs=1e-12)


def test_spec_rrf_example() -> None:
    fused = reciprocal_rank_fusion([("a", "b", "c"), ("b", "c", "d")], k_rrf=60)
    assert [doc for doc, _ in fused] == ["b", "c", "a", "d"]
    expected = {"b": 0.0325225, "c": 0.0320020, "a": 0.0163934, "d": 0.0158730}
    for doc, score in fused:
        assert score == pytest.approx(expected[doc], abs=1e-7)


def test_spec_yes_probability_example() -> None:
    assert yes_probability(2.0, 0.5) == pytest.approx(0.8175745, abs=1e-7)


# --- single metrics and edge cases ----------------------------------------------------------


def test_precision_recall_rr() -> None:
    rels = [0, 1, 0, 1, 1]
    assert precision_at_k(rels, 4) == 0.5
    assert recall_at_k(rels, 4, 4) == 0.5
    assert recall_at_k(rels, 5, 3) == 1.0
    assert reciprocal_rank_at_k(rels, 5) == 0.5
    assert reciprocal_rank_at_k(rels, 1) == 0.0


def test_zero_relevant_gives_zero_not_a_crash() -> None:
    rels = [0, 0, 1]  # a judged-relevant item with R = 0 cannot happen, but must not divide by 0
    assert recall_at_k(rels, 3, 0) == 0.0
    assert average_precision_at_k([0, 0, 0], 3, 0) == 0.0
    assert ndcg_at_k(rels, 3, 0) == 0.0
    assert average_precision_at_k([0, 0, 0], 3, 0, protocol="rerank") == 0.0


def test_k_larger_than_the_list_counts_missing_ranks_as_misses() -> None:
    rels = [1, 1]
    assert precision_at_k(rels, 10) == pytest.approx(0.2)
    # R = 3 relevant exist, only 2 retrieved: AP normalised by min(10, 3).
    assert average_precision_at_k(rels, 10, 3) == pytest.approx(2 / 3)
    assert ndcg_at_k(rels, 10, 2) == pytest.approx(1.0)
    assert judged_at_k([True, True], 10) == pytest.approx(0.2)


def test_empty_ranking() -> None:
    assert precision_at_k([], 5) == 0.0
    assert average_precision_at_k([], 5, 4) == 0.0
    assert ndcg_at_k([], 5, 4) == 0.0
    assert reciprocal_rank_at_k([], 5) == 0.0
    assert trailing_nonrelevant([]) == 0
    m = evaluate_ranking([], {1: 1, 2: 0}, 5, query_id="q")
    assert (m.AP, m.nDCG, m.RR, m.P, m.R_at_k, m.R, m.judged) == (0, 0, 0, 0, 0, 1, 0)


def test_bad_k_and_protocol_are_rejected() -> None:
    with pytest.raises(ValueError, match="k must be at least 1"):
        precision_at_k([1], 0)
    with pytest.raises(ValueError, match="unknown protocol"):
        average_precision_at_k([1], 1, 1, protocol="full")


def test_graded_relevance_counts_as_relevant() -> None:
    assert average_precision_at_k([3, 0, 2], 3, 2) == pytest.approx((1 + 2 / 3) / 2)


def test_judged_at_k() -> None:
    assert judged_at_k([True, False, True, True], 4) == 0.75
    assert judged_at_k([True, False, True, True], 2) == 0.5


def test_trailing_nonrelevant() -> None:
    assert trailing_nonrelevant([1, 0, 1, 0, 0, 0]) == 3
    assert trailing_nonrelevant([0, 0, 1]) == 0
    assert trailing_nonrelevant([0, 0, 0, 0]) == 4


def test_yes_probability_edges() -> None:
    assert yes_probability(None, None) == 0.0
    assert yes_probability(-math.inf, -math.inf) == 0.0
    assert yes_probability(-1.2, None) == 1.0  # "No" absent from the returned tokens
    assert yes_probability(None, -0.1) == 0.0
    assert yes_probability(0.0, 0.0) == 0.5
    # log-probabilities work the same as logits: only the difference matters
    assert yes_probability(math.log(0.3), math.log(0.1)) == pytest.approx(0.75)
    assert yes_probability(1000.0, -1000.0) == 1.0
    assert yes_probability(-1000.0, 1000.0) == 0.0


# --- strict order ---------------------------------------------------------------------------


def test_strict_order_breaks_ties_by_prior_rank_then_id() -> None:
    scored = [(7, 0.5), (3, 0.9), (5, 0.5), (2, 0.5), (9, 0.1)]
    assert strict_order(scored) == [3, 2, 5, 7, 9]
    # the producing method ranked 7 before 5; 2 has no prior rank, so it comes after both
    assert strict_order(scored, prior_rank={7: 1, 5: 2, 3: 3}) == [3, 7, 5, 2, 9]


def test_strict_order_puts_nan_last() -> None:
    assert strict_order([(1, float("nan")), (2, -5.0), (3, 1.0)]) == [3, 2, 1]


def test_rrf_ties_by_best_single_rank_then_id() -> None:
    # equal scores and equal best ranks: by id
    assert [doc for doc, _ in reciprocal_rank_fusion([("w",), ("z",)])] == ["w", "z"]
    assert [doc for doc, _ in reciprocal_rank_fusion([("b", "a"), ("a", "b")])] == ["a", "b"]
    # with k_rrf = 0, "a" scores 1/2 + 1/2 = 1, the same as x, y, z at rank 1 once each; the
    # better single rank puts x, y, z first although "a" sorts first by id
    fused = reciprocal_rank_fusion([("z",), ("x", "a"), ("y", "a")], k_rrf=0)
    assert [doc for doc, _ in fused] == ["x", "y", "z", "a"]


def test_rrf_exact_ties_survive_rounding() -> None:
    # k_rrf = 0: "a" at ranks 2, 3, 6 scores 1/2 + 1/3 + 1/6 = 1, "b" at ranks 2, 2 scores 1 too;
    # summed in floating point "a" comes out a hair lower. Both have best rank 2, so by id: a, b.
    lists = [("f1", "a"), ("f2", "f3", "a"), ("f4", "f5", "f6", "f7", "f8", "a")]
    lists += [("f9", "b"), ("f10", "b")]
    order = [doc for doc, _ in reciprocal_rank_fusion(lists, k_rrf=0)]
    assert order.index("a") == order.index("b") - 1


def test_rrf_counts_a_repeat_once_at_its_first_rank() -> None:
    fused = reciprocal_rank_fusion([(1, 1, 2)])
    assert fused == [(1, pytest.approx(1 / 61)), (2, pytest.approx(1 / 63))]


def test_rrf_with_shared_ties_gives_equal_scores_one_rank() -> None:
    # Words scores 5, 3, 3, 1: the two 3s share rank 2, so the 1 is at rank 4, not 3.
    words = [("a", 5.0), ("b", 3.0), ("c", 3.0), ("d", 1.0)]
    fused = dict(reciprocal_rank_fusion([words], k_rrf=0, ties="shared"))
    assert fused == {"a": 1.0, "b": 0.5, "c": 0.5, "d": 0.25}
    # Without ties the two rules agree; with them, "position" would rank b above c by place.
    distinct = [("a", 5.0), ("b", 3.0), ("c", 2.0)]
    assert reciprocal_rank_fusion([distinct], ties="shared") == reciprocal_rank_fusion(
        [["a", "b", "c"]]
    )
    by_place = dict(reciprocal_rank_fusion([["a", "b", "c", "d"]], k_rrf=0))
    assert by_place["c"] == pytest.approx(1 / 3) and by_place["d"] == pytest.approx(1 / 4)
    with pytest.raises(ValueError, match="ties"):
        reciprocal_rank_fusion([["a"]], ties="nearest")  # type: ignore[call-overload]


# --- evaluate_ranking and means -------------------------------------------------------------


def test_evaluate_ranking_counts_unjudged_as_not_relevant() -> None:
    relevance = {10: 1, 11: 1, 12: 0, 13: 1}
    m = evaluate_ranking([12, 10, 99, 11, 98], relevance, k=5, query_id="q1")
    assert m.query_id == "q1"
    assert m.R == 3
    # (P, R@k, RR, AP, judged@k)
    assert (m.P, m.R_at_k, m.RR, m.AP, m.judged) == pytest.approx(
        (2 / 5, 2 / 3, 1 / 2, (1 / 2 + 2 / 4) / 3, 3 / 5)
    )


def test_evaluate_ranking_ignores_repeats() -> None:
    m = evaluate_ranking([1, 1, 1], {1: 1, 2: 1}, k=3)
    assert (m.P, m.AP, m.judged) == pytest.approx((1 / 3, 1 / 2, 1 / 3))


def test_evaluate_ranking_rerank_protocol() -> None:
    m = evaluate_ranking(["a", "b", "c", "d"], {"b": 1, "c": 1, "a": 0}, k=4, protocol="rerank")
    assert (m.AP, m.R_at_k) == pytest.approx((0.5833333, 1.0), abs=1e-7)


def test_mean_metrics_averages_only_queries_with_relevant_items() -> None:
    q1 = evaluate_ranking([1, 2], {1: 1}, k=2, query_id="1")  # AP 1, RR 1
    q2 = evaluate_ranking([1, 2], {2: 1, 3: 1}, k=2, query_id="2")  # AP (1/2)/2, RR 1/2
    q3 = evaluate_ranking([1, 2], {}, k=2, query_id="3")  # R = 0: reported, not averaged
    mean = mean_metrics([q1, q2, q3])
    assert mean.queries == 2
    assert (mean.mAP, mean.MRR, mean.mean_nDCG) == pytest.approx(
        ((1 + 0.25) / 2, (1 + 0.5) / 2, (q1.nDCG + q2.nDCG) / 2)
    )
    assert [m.query_id for m in mean.per_query] == ["1", "2", "3"]
    empty = mean_metrics([q3])
    assert (empty.queries, empty.mAP, empty.mean_nDCG, empty.MRR) == (0, 0.0, 0.0, 0.0)


# --- randomized agreement with brute-force definitions --------------------------------------


def _relevant_positions(rels: list[int], k: int) -> set[int]:
    return {i + 1 for i in range(min(k, len(rels))) if rels[i] > 0}


def _brute_ap(rels: list[int], k: int, num_relevant: int, protocol: str) -> Fraction:
    positions = _relevant_positions(rels, k)
    total = Fraction(0)
    for p in positions:
        hits_up_to_p = len({q for q in positions if q <= p})
        total += Fraction(hits_up_to_p, p)
    denominator = min(k, num_relevant) if protocol == "fullrank" else len(positions)
    return total / denominator if denominator else Fraction(0)


def _brute_ndcg(rels: list[int], k: int, num_relevant: int) -> float:
    if num_relevant == 0:
        return 0.0
    padded = ([1 if r > 0 else 0 for r in rels] + [0] * k)[:k]
    ideal = sorted([1] * num_relevant + [0] * k, reverse=True)[:k]

    def dcg(gains: list[int]) -> float:
        return sum(g / math.log(i + 2, 2) for i, g in enumerate(gains))

    return dcg(padded) / dcg(ideal)


def _brute_rr(rels: list[int], k: int) -> Fraction:
    positions = _relevant_positions(rels, k)
    return Fraction(1, min(positions)) if positions else Fraction(0)


def _random_case(rng: random.Random) -> tuple[list[int], int, int]:
    n = rng.randint(0, 30)
    rels = [1 if rng.random() < 0.3 else 0 for _ in range(n)]
    k = rng.randint(1, 35)
    # R is at least the relevant items present in the list; extra ones were never retrieved
    num_relevant = sum(rels) + rng.randint(0, 5)
    return rels, k, num_relevant


def test_random_rankings_agree_with_brute_force() -> None:
    rng = random.Random(20240611)
    for _ in range(400):
        rels, k, num_relevant = _random_case(rng)
        for protocol in ("fullrank", "rerank"):
            assert average_precision_at_k(rels, k, num_relevant, protocol) == pytest.approx(
                float(_brute_ap(rels, k, num_relevant, protocol)), abs=1e-12
            )
        assert ndcg_at_k(rels, k, num_relevant) == pytest.approx(
            _brute_ndcg(rels, k, num_relevant), abs=1e-12
        )
        assert reciprocal_rank_at_k(rels, k) == pytest.approx(float(_brute_rr(rels, k)))
        hits = len(_relevant_positions(rels, k))
        assert precision_at_k(rels, k) == pytest.approx(hits / k)
        assert recall_at_k(rels, k, num_relevant) == pytest.approx(
            hits / num_relevant if num_relevant else 0.0
        )
        last_relevant = max((i for i, r in enumerate(rels) if r), default=-1)
        assert trailing_nonrelevant(rels) == len(rels) - 1 - last_relevant


def test_metrics_stay_in_unit_interval() -> None:
    rng = random.Random(7)
    for _ in range(300):
        rels, k, num_relevant = _random_case(rng)
        for value in (
            average_precision_at_k(rels, k, num_relevant),
            average_precision_at_k(rels, k, num_relevant, "rerank"),
            ndcg_at_k(rels, k, num_relevant),
        ):
            assert 0.0 <= value <= 1.0 + 1e-12


def test_promoting_a_relevant_item_never_lowers_fullrank_ap() -> None:
    rng = random.Random(99)
    checked = 0
    for _ in range(500):
        n = rng.randint(2, 25)
        rels = [1 if rng.random() < 0.35 else 0 for _ in range(n)]
        k = rng.randint(1, n - 1)
        num_relevant = sum(rels) + rng.randint(0, 3)
        outside = [i for i in range(k, n) if rels[i]]
        inside_misses = [i for i in range(k) if not rels[i]]
        if not outside:
            continue
        source = rng.choice(outside)
        before = average_precision_at_k(rels, k, num_relevant)
        # insertion: the item jumps to a rank inside the top k, the others shift down
        target = rng.randrange(k)
        inserted = rels[:source] + rels[source + 1 :]
        inserted.insert(target, 1)
        assert average_precision_at_k(inserted, k, num_relevant) >= before - 1e-12
        if inside_misses:
            # swap with a non-relevant item inside the top k
            swapped = list(rels)
            miss = rng.choice(inside_misses)
            swapped[miss], swapped[source] = 1, 0
            assert average_precision_at_k(swapped, k, num_relevant) > before
        checked += 1
    assert checked > 200


def test_rerank_normaliser_can_drop_when_a_relevant_item_is_promoted() -> None:
    # Why fullrank does not use it: finding a second relevant item lowers rerank AP here.
    assert average_precision_at_k([1, 0, 0, 0, 0], 5, 2, "rerank") == 1.0
    assert average_precision_at_k([1, 0, 0, 0, 1], 5, 2, "rerank") == pytest.approx(0.7)
    assert average_precision_at_k([1, 0, 0, 0, 1], 5, 2) > average_precision_at_k(
        [1, 0, 0, 0, 0], 5, 2
    )


def _brute_strict_order(scored: list[tuple[int, float]], prior: dict[int, int] | None) -> list[int]:
    """Selection sort with an explicit 'comes before' relation."""

    def before(a: tuple[int, float], b: tuple[int, float]) -> bool:
        if a[1] != b[1]:
            return a[1] > b[1]
        if prior is not None:
            ra, rb = prior.get(a[0]), prior.get(b[0])
            if ra is not None and rb is None:
                return True
            if ra is None and rb is not None:
                return False
            if ra is not None and rb is not None and ra != rb:
                return ra < rb
        return a[0] < b[0]

    remaining = list(scored)
    result: list[int] = []
    while remaining:
        best = remaining[0]
        for item in remaining[1:]:
            if before(item, best):
                best = item
        remaining.remove(best)
        result.append(best[0])
    return result


def test_strict_order_agrees_with_brute_force() -> None:
    rng = random.Random(3)
    for _ in range(300):
        ids = rng.sample(range(100), rng.randint(0, 15))
        scored = [(i, float(rng.choice([0.1, 0.2, 0.3, 0.5]))) for i in ids]
        prior = None
        if rng.random() < 0.7:
            ranked = rng.sample(ids, k=len(ids) // 2 + (len(ids) % 2))
            prior = {image_id: rank for rank, image_id in enumerate(ranked, start=1)}
        assert strict_order(scored, prior) == _brute_strict_order(scored, prior)


def _brute_rrf(lists: list[list[int]], k_rrf: int) -> list[tuple[int, float]]:
    docs = {d for ranking in lists for d in ranking}
    rows = []
    for d in docs:
        ranks = [ranking.index(d) + 1 for ranking in lists if d in ranking]
        score = sum(Fraction(1, k_rrf + r) for r in ranks)
        rows.append((-score, min(ranks), d))
    rows.sort()
    return [(d, float(-negative)) for negative, _, d in rows]


def test_rrf_agrees_with_brute_force() -> None:
    rng = random.Random(11)
    for _ in range(300):
        lists = [rng.sample(range(20), rng.randint(0, 10)) for _ in range(rng.randint(1, 4))]
        k_rrf = rng.choice([0, 1, 60])
        got = reciprocal_rank_fusion(lists, k_rrf)
        want = _brute_rrf(lists, k_rrf)
        assert [d for d, _ in got] == [d for d, _ in want]
        for (_, a), (_, b) in zip(got, want, strict=True):
            assert a == pytest.approx(b, abs=1e-12)


def test_query_metrics_is_a_value() -> None:
    m = QueryMetrics("q", 0.5, 0.5, 1.0, 0.2, 0.5, 2, 1.0)
    with pytest.raises(AttributeError):
        m.AP = 1.0  # type: ignore[misc]
