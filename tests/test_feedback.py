"""Learning from judgments: Rocchio, the probe, "judge next", the recall estimate (engine side)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import select

from engine.catalog import Image
from engine.catalog.library import Library
from engine.errors import BadInputError
from engine.judgments.learning import (
    band_edges,
    estimate_recall,
    fit_probe,
    judge_next,
    rocchio,
    sample_to_judge,
)
from engine.judgments.logistic import newton_step
from engine.methods import MethodContext, SearchQuery, get_method, resolve_spec

E1, E2, E3 = np.eye(3)

# -- Rocchio ----------------------------------------------------------------------------------


def test_rocchio_moves_the_query_by_the_classic_weights():
    moved = rocchio(E1, [E2, E2], [E3])
    expected = np.array([1.0, 0.75, -0.15])
    assert np.allclose(moved, expected / np.linalg.norm(expected), atol=1e-6)
    assert np.isclose(np.linalg.norm(moved), 1.0)
    # Means, not sums: two relevant photos pull as far as one at their mean.
    assert np.allclose(rocchio(E1, [E2, E3], []), rocchio(E1, [(E2 + E3) / 2], []), atol=1e-6)
    custom = rocchio(E1, [E2], [E3], alpha=0.5, beta=1.0, gamma=0.5)
    assert np.allclose(custom, np.array([0.5, 1.0, -0.5]) / np.linalg.norm([0.5, 1.0, -0.5]))


def test_rocchio_with_empty_groups_or_cancelling_terms_keeps_the_query():
    assert np.allclose(rocchio(2 * E1, [], []), E1)
    assert np.allclose(rocchio(E1, np.zeros((0, 3)), [E3]), np.array([1, 0, -0.15]) / 1.0112, 1e-3)
    # The terms cancel exactly: the query itself, not a zero vector.
    assert np.allclose(rocchio(E1, [], [E1], gamma=1.0), E1)
    with pytest.raises(ValueError, match="dimension 3"):
        rocchio(E1, [[1.0, 0.0]], [])


# -- the probe --------------------------------------------------------------------------------


def _unit_rows(rows):
    rows = np.asarray(rows, dtype=np.float64)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def test_the_probe_without_judgments_is_the_query_and_has_no_probabilities():
    probe = fit_probe(E1, np.zeros((0, 3)), [], prior_scale=10.0)
    assert not probe.fitted
    assert np.allclose(probe.direction, E1)
    assert probe.note == "no judgments yet: the query's own ranking"
    assert math.isnan(float(probe.probability(0.5)))


@pytest.mark.parametrize(
    ("labels", "words"),
    [([1, 1, 1], "all 3 judged photos are relevant"), ([0, 0], "none of the 2 judged photos")],
)
def test_judgments_of_one_kind_fall_back_to_the_query_with_a_note(labels, words):
    vectors = _unit_rows([[0.2, 1, 0], [0.3, 0.8, 0.1], [0.1, 0.9, 0.3]])[: len(labels)]
    probe = fit_probe(E1, vectors, labels, prior_scale=10.0)
    assert not probe.fitted
    assert words in probe.note and "\n" not in probe.note
    assert np.allclose(probe.direction, E1)
    assert np.isnan(probe.probabilities(vectors)).all()
    assert probe.score_at(0.9) == math.inf  # a cut-off that lets nothing through


def test_the_probe_learns_the_direction_of_the_relevant_photos():
    relevant = _unit_rows([[0.5, 1, 0], [0.4, 0.9, 0.1], [0.6, 1.1, -0.1]])
    nonrelevant = _unit_rows([[0.5, 0, 1], [0.4, 0.1, 0.9], [0.6, -0.1, 1.1]])
    vectors = np.vstack([relevant, nonrelevant])
    labels = [1, 1, 1, 0, 0, 0]
    plain = fit_probe(E1, vectors, labels, prior_scale=1.0, calibrate=False)
    p = plain.probabilities(vectors)
    assert p[:3].min() > 0.55 and p[3:].max() < 0.45
    # Platt's targets: the fit itself is never certain from three photos of each kind.
    assert p.max() < 0.8 + 1e-3 and p.min() > 0.2 - 1e-3
    probe = fit_probe(E1, vectors, labels, prior_scale=1.0)
    assert probe.fitted and probe.relevant == 3 and probe.not_relevant == 3
    assert probe.direction[1] > 0.3 > -0.3 > probe.direction[2]
    assert np.allclose(probe.direction, plain.direction)  # calibration never moves the ranking
    p = probe.probabilities(vectors)
    assert p[:3].min() > 0.55 and p[3:].max() < 0.45
    # The probabilities of an index search's scores along `direction` are the same numbers.
    scores = vectors @ probe.direction
    assert np.allclose(probe.probability(scores), p, atol=1e-5)
    assert np.isclose(float(probe.probability(probe.score_at(0.9))), 0.9)


def test_the_probe_fit_is_the_optimum_of_its_objective():
    rng = np.random.default_rng(7)
    q = E1
    vectors = _unit_rows(rng.normal(size=(12, 3)))
    labels = (vectors[:, 1] > 0).astype(int)
    labels[:2] = [1, 0]
    c, scale = 0.7, 4.0
    probe = fit_probe(q, vectors, labels, prior_scale=scale, c=c, calibrate=False)
    n_pos, n_neg = labels.sum(), len(labels) - labels.sum()
    targets = np.where(labels > 0, (n_pos + 1) / (n_pos + 2), 1 / (n_neg + 2))
    p = probe.probabilities(vectors)
    v = probe.weights - scale * q
    # Stationary: the loss gradient balances the pull of the prior on v (and the intercept's).
    assert np.allclose(vectors.T @ (p - targets) + v / c, 0, atol=1e-6)
    assert abs(float(np.sum(p - targets)) + 1e-6 * probe.bias) < 1e-6


def test_one_or_two_judgments_only_nudge_the_query_ranking():
    rng = np.random.default_rng(3)
    photos = _unit_rows(rng.normal(size=(200, 8)))
    q = np.zeros(8)
    q[0] = 1.0
    by_query = np.argsort(-(photos @ q))
    relevant, nonrelevant = photos[by_query[3]], photos[by_query[0]]
    spread = float((photos @ q).std())
    probe = fit_probe(q, [relevant, nonrelevant], [1, 0], prior_scale=1.0 / spread)
    by_probe = np.argsort(-(photos @ probe.direction))
    overlap = len(set(by_query[:20]) & set(by_probe[:20]))
    assert overlap >= 15  # still the query's ranking, give or take
    # ... nudged toward the relevant photo and away from the other one.
    gap = relevant - nonrelevant
    assert gap @ probe.direction > gap @ q


def test_the_evidence_lets_few_judgments_nudge_and_many_consistent_ones_move_far():
    for seed in range(3):
        rng = np.random.default_rng(seed)
        truth, q = rng.normal(size=32), rng.normal(size=32)
        photos = _unit_rows(rng.normal(size=(80, 32)))
        labels = (photos @ truth > 0).astype(int)
        labels[:4] = [1, 0, 1, 0]
        few = fit_probe(q, photos[:4], labels[:4], prior_scale=5.0, c=None)
        many = fit_probe(q, photos, labels, prior_scale=5.0, c=None)
        assert few.c is not None and many.c is not None
        assert few.c <= 1.0 < 10.0 <= many.c
        assert many.to_json()["c"] == many.c
        # The chosen C fits as a fixed one would.
        fixed = fit_probe(q, photos, labels, prior_scale=5.0, c=many.c)
        assert np.allclose(fixed.weights, many.weights, atol=1e-6)


def test_the_woodbury_step_equals_the_direct_solve():
    rng = np.random.default_rng(11)
    features = rng.normal(size=(5, 9))
    curvature = rng.uniform(0.01, 0.25, 5)
    precision = np.r_[np.full(8, 2.0), 1e-6]
    gradient = rng.normal(size=9)
    hessian = (features * curvature[:, None]).T @ features + np.diag(precision)
    assert np.allclose(
        newton_step(features, curvature, precision, gradient),
        np.linalg.solve(hessian, gradient),
        rtol=1e-6,
        atol=1e-8,
    )


# -- judge next -------------------------------------------------------------------------------


def test_judge_next_mixes_the_top_with_the_most_uncertain_and_skips_judged_photos():
    ranked = [(1, 0.99), (2, 0.95), (3, 0.9), (4, 0.7), (5, 0.52), (6, 0.49), (7, 0.3), (8, 0.1)]
    picked = judge_next(ranked, {1: 1, 5: 0}, 4, top_mix=0.25)
    assert picked[0] == 2  # the top unjudged photo first
    assert picked[1:] == [6, 4, 7]  # then nearest 0.5: 0.49, 0.7, 0.3
    assert not {1, 5} & set(picked)
    only_uncertain = judge_next(ranked, set(), 2, top_mix=0.0)
    assert only_uncertain == [6, 5]  # |0.49 - 0.5| < |0.52 - 0.5|


def test_judge_next_is_deterministic_per_seed_and_never_repeats():
    ranked = [(i, 0.5) for i in range(100)]  # all equally uncertain: the seed breaks the ties
    first = judge_next(ranked, {0: 1}, 10, top_mix=0.2, seed=4)
    assert first == judge_next(ranked, {0: 1}, 10, top_mix=0.2, seed=4)
    assert first != judge_next(ranked, {0: 1}, 10, top_mix=0.2, seed=5)
    assert len(set(first)) == 10 and 0 not in first
    assert first[:2] == [1, 2]  # the top-ranked unjudged ones


def test_judge_next_without_probabilities_goes_down_the_ranking():
    ranked = [(i, math.nan) for i in range(1, 9)]
    assert judge_next(ranked, {2: 1}, 3) == [1, 3, 4]
    assert judge_next(ranked, set(range(1, 9)), 3) == []


# -- the recall estimate ----------------------------------------------------------------------


def test_bands_double_from_ten_and_the_unranked_rest_is_one_band():
    assert band_edges(100) == [0, 10, 20, 40, 80, 100]
    assert band_edges(1000, ranked_depth=200) == [0, 10, 20, 40, 80, 160, 200, 1000]
    assert band_edges(7) == [0, 7]


def _population(seed: int, size: int, profile):  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(seed)
    relevant = rng.random(size) < profile(np.arange(size))
    order = rng.permutation(size) + 1000  # ids unrelated to rank
    truth = {int(i): int(r) for i, r in zip(order, relevant, strict=True)}
    return order, truth, int(relevant.sum())


def test_every_photo_judged_gives_the_exact_count():
    order, truth, total = _population(0, 300, lambda k: 0.5 * np.exp(-k / 30))
    estimate = estimate_recall(order, truth)
    assert (estimate.found, estimate.total, estimate.low, estimate.high) == (total,) * 4
    assert estimate.unseen == 0 and estimate.note == f"every photo is judged: {total} relevant"


def test_without_a_sample_below_the_judged_top_there_is_no_estimate():
    order, truth, _ = _population(1, 300, lambda k: 0.5 * np.exp(-k / 30))
    top = {int(i): truth[int(i)] for i in order[:20]}
    estimate = estimate_recall(order, top)
    assert estimate.total is None and estimate.low is None
    assert estimate.census_depth == 20
    assert "280 photos below rank 20 have no judged sample" in estimate.note
    assert estimate.summary().startswith(f"found {sum(top.values())}; ")


def test_the_sample_gives_each_band_a_photo_first_and_never_a_judged_one():
    order, truth, _ = _population(2, 1000, lambda k: 0.5 * np.exp(-k / 30))
    judged = {int(i): truth[int(i)] for i in order[:20]}
    judged[int(order[500])] = truth[int(order[500])]
    proposed = sample_to_judge(order, judged, 6, seed=3)
    bands = band_edges(len(order))
    position = {int(i): p for p, i in enumerate(order)}
    hit = {next(b for b in range(len(bands) - 1) if bands[b + 1] > position[i]) for i in proposed}
    assert len(hit) == 6  # bands 21-40, 41-80, ... 641-1000: one photo each first
    assert not set(proposed) & set(judged)
    assert proposed == sample_to_judge(order, judged, 6, seed=3)  # fixed per seed
    for image_id in proposed:
        judged[image_id] = truth[image_id]
    estimate = estimate_recall(order, judged, seed=3)
    assert estimate.total is not None and estimate.judged_in_sample >= 6
    assert estimate.summary().startswith(f"found {estimate.found} of about ")


def test_the_interval_holds_the_true_count_about_as_often_as_it_says():
    """Synthetic populations with known counts (relevance falling with rank, plus a floor of
    rare relevant photos deep down), 400 seeds: a top of 20 judged, a sample of 60 judged."""

    def profile(k):  # type: ignore[no-untyped-def]
        return 0.6 * np.exp(-k / 60) + 0.01

    holds = below = above = 0
    errors = []
    widths = {60: [], 150: []}
    for seed in range(400):
        order, truth, total = _population(seed, 1000, profile)
        judged = {int(i): truth[int(i)] for i in order[:20]}
        for image_id in sample_to_judge(order, judged, 60, seed=seed):
            judged[image_id] = truth[image_id]
        estimate = estimate_recall(order, judged, seed=seed, draws=2000)
        assert estimate.total is not None and estimate.low is not None
        assert estimate.high is not None
        holds += estimate.low <= total <= estimate.high
        below += total < estimate.low
        above += total > estimate.high
        errors.append(estimate.total - total)
        widths[60].append(estimate.high - estimate.low)
        if seed < 40:  # a larger sample narrows the interval
            for image_id in sample_to_judge(order, judged, 90, seed=seed):
                judged[image_id] = truth[image_id]
            wider = estimate_recall(order, judged, seed=seed, draws=2000)
            assert wider.low is not None and wider.high is not None
            widths[150].append(wider.high - wider.low)
    coverage = holds / 400
    assert 0.88 <= coverage <= 1.0, coverage
    # Each end misses at most about its 5 % (conservative is allowed, lopsided is not).
    assert below / 400 <= 0.08 and above / 400 <= 0.08
    assert abs(float(np.mean(errors))) < 2.0  # Horvitz-Thompson: no systematic error
    assert np.mean(widths[150]) < 0.7 * np.mean(widths[60][:40])


# -- the methods on a demo library ------------------------------------------------------------


@pytest.fixture(scope="module")
def indexed(tmp_path_factory, copy_small_demo_library) -> Path:
    return copy_small_demo_library(tmp_path_factory.mktemp("feedback") / "lib")


def demo_relevant(library, collection, text: str) -> set[int]:  # type: ignore[no-untyped-def]
    query = next(q for q in collection.queries if q.text == text)
    paths = set(collection.relevant[query.query_id])
    with library.catalog.session() as s:
        rows = s.execute(select(Image.id, Image.rel_path)).all()
    return {image_id for image_id, rel in rows if rel in paths}


@pytest.mark.parametrize("key", ["rocchio", "probe", "more-like-these"])
def test_learning_methods_refuse_to_run_without_a_saved_query(key, indexed, demo_encoder):
    with Library.open(indexed) as library:
        context = MethodContext(library, lambda: demo_encoder)
        with pytest.raises(BadInputError, match=f"quadrat refine --query ID --method {key}"):
            resolve_spec(key).run(SearchQuery("red circle"), context, top_k=5)
    assert get_method(key).needs_judgments and not get_method("text").needs_judgments


def test_learning_methods_use_the_judgments_and_say_how_many(
    indexed, demo_encoder, small_demo_collection
):
    with Library.open(indexed) as library:
        relevant = demo_relevant(
            library, small_demo_collection, "a blue circle beside a red square"
        )
        context = MethodContext(library, lambda: demo_encoder)
        query = SearchQuery("a blue circle beside a red square")
        text = resolve_spec("text").run(query, context, top_k=60)
        judged = {i: int(i in relevant) for i in text.ids[:8]}
        assert 0 < sum(judged.values()) < 8, "the demo's text top 8 mixes both kinds"
        learning = MethodContext(library, lambda: demo_encoder, judgments=lambda: judged)
        for key in ("rocchio", "probe", "more-like-these"):
            ranking = resolve_spec(key).run(query, learning, top_k=60)
            assert ranking.details["relevant"] == sum(judged.values())
            # More like these searches from the relevant photos only.
            used = 8 if key != "more-like-these" else sum(judged.values())
            assert ranking.details["judgments_used"] == used
            # The relevant judged photos come before the judged non-relevant ones, on average.
            rank = {image_id: r for r, image_id in enumerate(ranking.ids)}
            mean_rel = np.mean([rank[i] for i, r in judged.items() if r])
            mean_non = np.mean([rank[i] for i, r in judged.items() if not r])
            assert mean_rel < mean_non, key
        probe = resolve_spec("probe").run(query, learning, top_k=10)
        assert probe.details["probe"]["fitted"] is True
        if min(sum(judged.values()), 8 - sum(judged.values())) < 3:
            # Too few of a kind to calibrate: the probe ranks, and claims no probability.
            assert not probe.evidence and probe.details["probe"]["p_scale"] is None
            assert "no probabilities until 3 relevant" in probe.details["note"]
        # With three of each kind (a query with ten relevant photos): calibrated probabilities.
        red = demo_relevant(library, small_demo_collection, "red circle")
        top = resolve_spec("text").run(SearchQuery("red circle"), context, top_k=30).ids
        more = {i: int(i in red) for i in top}
        assert min(sum(more.values()), 30 - sum(more.values())) >= 3
        learning = MethodContext(library, lambda: demo_encoder, judgments=lambda: more)
        probe = resolve_spec("probe").run(SearchQuery("red circle"), learning, top_k=10)
        p = [probe.evidence[i]["p"] for i in probe.ids]
        assert p == sorted(p, reverse=True) and all(0 < v < 1 for v in p)
        assert probe.details["probe"]["calibration"]["folds"] == 10


def test_zero_judgments_rank_exactly_as_the_query(indexed, demo_encoder):
    with Library.open(indexed) as library:
        query = SearchQuery("green triangle")
        text = resolve_spec("text").run(
            query, MethodContext(library, lambda: demo_encoder), top_k=20
        )
        empty = MethodContext(library, lambda: demo_encoder, judgments=dict)
        for key in ("rocchio", "probe", "more-like-these"):
            ranking = resolve_spec(key).run(query, empty, top_k=20)
            assert ranking.ids == text.ids, key
            assert "query's own ranking" in ranking.details["note"]


def test_a_benchmark_refuses_the_learning_methods_in_one_line(indexed, demo_encoder):
    from engine.benchmarks.runner import run_methods
    from engine.evaluation.evaluate import BenchmarkJudgment, BenchmarkQuery

    with Library.open(indexed) as library, pytest.raises(BadInputError) as refused:
        run_methods(
            library,
            lambda: demo_encoder,
            [BenchmarkQuery("1", "red circle")],
            [BenchmarkJudgment("1", None, "x.jpg", 1)],
            ["text", "probe"],
        )
    message = str(refused.value)
    assert "probe would learn from the very judgments" in message
    assert "bench_feedback.py" in message and "\n" not in message


# -- calibrated probabilities (issue 24) ------------------------------------------------------


def test_platt_scaling_recovers_a_known_map_and_never_flattens_the_ranking():
    from engine.judgments.calibration import fit_platt

    rng = np.random.default_rng(5)
    z = rng.normal(size=20_000)
    labels = rng.random(z.size) < 1 / (1 + np.exp(-(2.5 * z - 1.0)))
    slope, intercept = fit_platt(z, labels)
    assert slope == pytest.approx(2.5, abs=0.1) and intercept == pytest.approx(-1.0, abs=0.1)
    # Held-out logits that run against the ranking (or say nothing) keep the probe's slope:
    # only the intercept moves, to the judged share.
    slope, intercept = fit_platt(-z[:40], labels[:40])
    assert slope == 1.0
    # Separable held-out logits stay finite (Platt's targets): 11/12 for ten of ten.
    slope, intercept = fit_platt(np.r_[np.full(10, 0.5), np.full(20, -0.5)], [1] * 10 + [0] * 20)
    p_top = 1 / (1 + np.exp(-(slope * 0.5 + intercept)))
    assert np.isfinite(slope) and p_top == pytest.approx(11 / 12, abs=0.01)


def test_the_expected_calibration_error_of_known_cases():
    from engine.judgments.calibration import expected_calibration_error, reliability

    p = np.full(10, 0.8)
    assert expected_calibration_error(p, [1] * 8 + [0] * 2) == pytest.approx(0.0)
    assert expected_calibration_error(np.full(10, 0.95), [1] * 5 + [0] * 5) == pytest.approx(0.45)
    # Two bins, weighted by their photos: |0.05 - 0| * 0.5 + |0.95 - 0.5| * 0.5.
    mixed = np.r_[np.full(10, 0.05), np.full(10, 0.95)]
    truth = [0] * 10 + [1] * 5 + [0] * 5
    assert expected_calibration_error(mixed, truth) == pytest.approx(0.25)
    assert [(b.low, b.count) for b in reliability(mixed, truth)] == [(0.0, 10), (0.9, 10)]


def test_the_calibration_scores_each_judged_photo_with_a_probe_that_never_saw_it():
    """With ten judgments the folds are leave-one-out: each photo's held-out logit is the
    logit of the probe fitted to the other nine, so the map never reads the judgment it scores."""
    from engine.judgments import learning

    rng = np.random.default_rng(2)
    q = E1
    vectors = _unit_rows(rng.normal(size=(10, 3)) + [1.5, 0, 0])
    labels = np.array([1, 1, 0, 1, 0, 0, 1, 0, 0, 0])
    seen: list[np.ndarray] = []
    original = learning.fit_platt

    def spy(logits, y):  # type: ignore[no-untyped-def]
        seen.append(np.asarray(logits))
        return original(logits, y)

    learning.fit_platt = spy
    try:
        probe = fit_probe(q, vectors, labels, prior_scale=2.0)
    finally:
        learning.fit_platt = original
    assert probe.calibration is not None and probe.calibration.folds == 10
    for i in range(10):
        others = np.arange(10) != i
        alone = fit_probe(q, vectors[others], labels[others], prior_scale=2.0, calibrate=False)
        assert seen[0][i] == pytest.approx(float(alone.logits(vectors[i : i + 1])[0]), abs=1e-6)
    # The map moves the probabilities, never the ranking.
    plain = fit_probe(q, vectors, labels, prior_scale=2.0, calibrate=False)
    assert np.allclose(probe.direction, plain.direction)
    assert probe.to_json()["calibration"]["slope"] == pytest.approx(probe.calibration.slope)


def test_too_few_judgments_of_a_kind_rank_but_claim_no_probability():
    vectors = _unit_rows([[0.5, 1, 0], [0.4, 0.9, 0.1], [0.5, 0, 1], [0.4, 0.1, 0.9], [1, 0, 1]])
    probe = fit_probe(E1, vectors, [1, 1, 0, 0, 0], prior_scale=1.0)
    assert probe.fitted and not probe.has_probabilities
    assert probe.direction[1] > 0  # it learned where the relevant photos are
    assert np.isnan(probe.probabilities(vectors)).all()
    assert probe.score_at(0.5) == math.inf
    assert "no probabilities until 3 relevant and 3 non-relevant photos are judged" in probe.note
    assert probe.to_json()["p_scale"] is None


def test_calibrated_probabilities_hold_on_photos_never_judged(
    indexed, demo_encoder, small_demo_collection
):
    """Every demo query whose top 30 (the Text ranking) holds three photos of each kind: those
    30 judged, the probe's p of every other photo against the demo's judgment of it. The
    calibrated p is closer to the truth (ECE, pooled) than the probe's own."""
    from engine.judgments.calibration import expected_calibration_error
    from engine.judgments.learning import prior_scale
    from engine.methods.feedback import query_vector

    before, after, truth = [], [], []
    with Library.open(indexed) as library:
        key = demo_encoder.model_key
        ids, vectors = library.load_vectors(key, np.sort(library.vector_index(key).ids()))
        vectors = _unit_rows(vectors)
        context = MethodContext(library, lambda: demo_encoder)
        for query in small_demo_collection.queries:
            relevant = demo_relevant(library, small_demo_collection, query.text)
            y = np.asarray([int(i) in relevant for i in ids])
            q = np.asarray(query_vector(SearchQuery(query.text), context), dtype=np.float64)
            judged = np.argsort(-(vectors @ q), kind="stable")[:30]
            if min(y[judged].sum(), 30 - y[judged].sum()) < 3:
                continue
            held_out = np.setdiff1d(np.arange(len(ids)), judged)
            scale = prior_scale(vectors @ q)
            plain = fit_probe(q, vectors[judged], y[judged], prior_scale=scale, calibrate=False)
            probe = fit_probe(q, vectors[judged], y[judged], prior_scale=scale)
            before.append(plain.probabilities(vectors[held_out]))
            after.append(probe.probabilities(vectors[held_out]))
            truth.append(y[held_out])
    assert len(truth) >= 3
    y = np.concatenate(truth)
    ece_before = expected_calibration_error(np.concatenate(before), y)
    ece_after = expected_calibration_error(np.concatenate(after), y)
    print(
        f"{len(truth)} queries, {len(y)} photos never judged: ECE {ece_before:.4f} -> {ece_after:.4f}"
    )
    assert ece_after < 0.5 * ece_before


def test_the_likely_relevant_list_holds_the_photos_judged_relevant_whatever_their_p(
    indexed, demo_encoder, small_demo_collection
):
    """Issue 24's case: the ten relevant photos of "red circle" judged, and 26 that are not.
    The probe ranks them first, yet its own p for them was 0.42-0.68, so a p >= 0.9 export
    wrote nothing. A photo judged relevant is known to be: it is listed, with p 1."""
    from engine.judgments.queries import QueryStore
    from engine.methods.feedback import photos_above

    with Library.open(indexed) as library:
        relevant = demo_relevant(library, small_demo_collection, "red circle")
        assert len(relevant) == 10
        context = MethodContext(library, lambda: demo_encoder)
        ranking = resolve_spec("text").run(SearchQuery("red circle"), context, top_k=200).ids
        not_relevant = [i for i in ranking if i not in relevant][:26]
        judgments = {**dict.fromkeys(relevant, 1), **dict.fromkeys(not_relevant, 0)}
        query_id = QueryStore(library).find_or_create_query("red circle")
        likely = photos_above(library, lambda: demo_encoder, query_id, 0.9, judgments=judgments)
    listed = [image_id for image_id, _ in likely.ranking]
    assert set(listed[:10]) == relevant  # every photo judged relevant, first
    assert likely.has_probabilities
    for image_id, _, p in likely.likely:  # then unjudged photos only, each at p >= 0.9
        assert image_id not in judgments and p >= 0.9
    assert not set(listed) & set(not_relevant)
    assert all(likely.probabilities[i] == 1.0 for i in relevant)
    assert likely.summary().startswith(f"10 judged relevant, {len(likely.likely)} unjudged")
    assert likely.best_unjudged is not None and likely.best_unjudged < 0.9 or likely.likely
