"""Certified recall by the stratified rule (census of the top, a Bernoulli sample below, an exact
binomial bound): its numbers against hand-worked values, its guarantee in simulation over
1,000 collections per target, rare queries within reach, and `quadrat certify` on a saved query
of the demo, whole and scoped by a filter."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from sqlalchemy import select

from app.cli import main
from engine.judgments.certified_recall import (
    allowed_missed,
    binomial_cdf,
    binomial_tail,
    census_depth,
    certify_recall,
    missed_bound,
    sample_rate,
    simulate,
    unit_uniforms,
)


def test_the_numbers_match_hand_worked_values():
    # P(Bin(3, 1/2) <= 1) = (1 + 3) / 8; P(Bin(3, 1/2) >= 2) the same.
    assert binomial_cdf(3, 0.5, 1) == pytest.approx(0.5)
    assert binomial_tail(3, 0.5, 2) == pytest.approx(0.5)
    # One relevant photo in a sample of half: P(Bin(7, 1/2) <= 1) = 8/128 = 0.0625 > 0.05,
    # P(Bin(8, 1/2) <= 1) = 9/256 = 0.035: the bound is 7.
    assert missed_bound(1, 0.5, 0.05) == 7
    # 13 relevant found at target 0.8 allow m = floor(13 / 4) = 3 missed; the sample rate is
    # the least q with (1 - q)^4 <= 0.05: 1 - 0.05^(1/4) = 0.5271, and an empty sample at that
    # rate bounds what is missed by 3: 13 >= 0.8 (13 + 3).
    assert allowed_missed(13, 0.8) == 3 and allowed_missed(9, 0.9) == 1
    q = sample_rate(13, 0.8, 0.95)
    assert q == pytest.approx(1 - 0.05**0.25, abs=1e-6)
    assert missed_bound(0, q, 0.05) == 3
    # No relevant photo found allows none missed: the sample is nearly everything.
    assert sample_rate(0, 0.9, 0.95) == pytest.approx(0.95)


def test_bad_targets_are_refused():
    with pytest.raises(ValueError, match="target recall"):
        sample_rate(3, 1.0, 0.95)
    with pytest.raises(ValueError, match="confidence"):
        certify_recall([1, 2, 3], {}, target=0.9, confidence=1.0)


def test_each_photo_draws_the_same_number_whatever_the_scope():
    ids = np.arange(1, 50_001)
    draws = unit_uniforms(ids, seed=7)
    assert draws.min() >= 0.0 and draws.max() < 1.0
    assert abs(draws.mean() - 0.5) < 0.01
    assert np.array_equal(unit_uniforms(ids[::7], seed=7), draws[::7])
    assert not np.array_equal(unit_uniforms(ids, seed=8), draws)


def _collection(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A collection of 500 to 4,000 photos, 0.3 to 15 % relevant, ranked by a scorer of random
    quality (from nearly useless to nearly perfect)."""
    n = int(rng.integers(500, 4000))
    relevance = (rng.random(n) < rng.uniform(0.003, 0.15)).astype(np.int64)
    scores = rng.normal(size=n) + relevance * rng.uniform(0.0, 4.0)
    return relevance, scores


@pytest.mark.parametrize("target", [0.8, 0.9])
def test_the_guarantee_holds_in_simulation(target):
    rng = np.random.default_rng(int(target * 100))
    runs = []
    for seed in range(1000):
        relevance, scores = _collection(rng)
        if relevance.sum() == 0:
            continue
        runs.append(simulate(relevance, scores, target=target, confidence=0.95, seed=seed))
    reached = np.mean([run.recall >= target for run in runs])
    assert len(runs) >= 950
    assert reached >= 0.95, f"recall {target} reached in only {reached:.3f} of the runs"
    # It is not free: the rule judges more than judging the ranking to the target would.
    assert np.median([r.judged / max(r.oracle, 1) for r in runs]) > 1.0


def test_a_rare_query_is_certified_without_judging_everything():
    """12 relevant photos of 4,000, ranked near the top: a rule that needs 14 (or 29) relevant
    photos in a random sample must judge every photo; this one judges the top, about half of
    the rest (the price of allowing 3 missed at 95 %), and stops."""
    n, relevant = 4000, 12
    judged, reached = [], []
    for seed in range(40):
        rng = np.random.default_rng(seed)
        relevance = np.zeros(n, dtype=np.int64)
        relevance[rng.choice(n, relevant, replace=False)] = 1
        scores = rng.normal(size=n) + relevance * 4.0
        run = simulate(relevance, scores, target=0.8, confidence=0.95, seed=seed)
        judged.append(run.judged)
        reached.append(run.recall >= 0.8)
    assert np.median(judged) < 0.6 * n
    assert np.mean(reached) >= 0.95


def test_the_census_goes_deeper_while_relevant_photos_keep_coming():
    # Every photo of the top 200 relevant: deeper bands pay; none after the first 10: stop at 40.
    rich = [1] * 200 + [0] * 800
    depth, found = census_depth(rich, 1000, 0.9, 0.95)
    assert depth >= 160 and found == min(depth, 200)
    poor = [1] * 3 + [0] * 997
    assert census_depth(poor, 1000, 0.9, 0.95) == (40, 3)
    # Not judged yet: the depth to judge next, no count.
    assert census_depth([1] * 10 + [None] * 990, 1000, 0.9, 0.95) == (40, None)
    assert census_depth([1] * 80 + [None] * 920, 1000, 0.9, 0.95) == (160, None)


def _judge(relevance: dict[int, int], ids: list[int]) -> dict[int, int]:
    return {i: relevance[i] for i in ids}


def test_the_rule_walks_from_census_to_sample_to_review_to_certified():
    rng = np.random.default_rng(3)
    n = 3000
    ranking = np.arange(100, 100 + n)
    truth = np.zeros(n, dtype=np.int64)
    truth[rng.choice(300, 60, replace=False)] = 1  # 60 near the top
    truth[300 + rng.choice(n - 300, 6, replace=False)] = 1  # and 6 anywhere below
    relevance = {int(i): int(r) for i, r in zip(ranking, truth, strict=True)}
    judgments: dict[int, int] = {}
    state = certify_recall(ranking, judgments, target=0.8, confidence=0.95, seed=9)
    assert state.phase == "census" and state.next_ids == ranking[:40].tolist()
    assert "judge the ranking's top 40 first" in state.plan()
    while state.phase == "census":
        judgments.update(_judge(relevance, state.next_ids))
        state = certify_recall(ranking, judgments, target=0.8, confidence=0.95, seed=9)
    # The plan is known before the sample starts: its size, the rate, the cost in all.
    assert state.phase == "sample" and state.sample_judged == 0
    k, p = state.census, state.census_relevant
    assert p == truth[:k].sum() and state.rate == pytest.approx(sample_rate(p, 0.8, 0.95))
    draws = unit_uniforms(ranking[k:], 9)
    assert state.sample_size == int((draws < state.rate).sum())
    assert state.expected == k + state.sample_size
    assert f"a random sample of {state.sample_size:,} below it" in state.plan()
    batches = 0
    while state.phase == "sample":
        assert len(state.next_ids) <= 20 and not set(state.next_ids) & set(ranking[:k].tolist())
        judgments.update(_judge(relevance, state.next_ids))
        state = certify_recall(ranking, judgments, target=0.8, confidence=0.95, seed=9)
        batches += 1
    assert batches == math.ceil(state.sample_size / 20)
    while state.phase == "review":
        # The review goes on down the ranking from the judged top, in rank order.
        assert ranking.tolist().index(state.next_ids[0]) == state.judged_top >= k
        judgments.update(_judge(relevance, state.next_ids))
        state = certify_recall(ranking, judgments, target=0.8, confidence=0.95, seed=9)
    assert state.certified and state.next_ids == []
    assert state.found == truth[: state.stop_rank].sum()
    assert state.found >= 0.8 * (state.found + state.bound)
    assert state.found / truth.sum() >= 0.8  # this run's realised recall
    assert state.judged == len(judgments)
    assert "certified: 80 % recall at 95 %" in state.summary()


@pytest.fixture
def saved_query(tmp_path, copy_cli_demo_library, demo_collection):
    """The full demo library with "red circle" saved (its 40 relevant photos known)."""
    from engine.catalog import Image
    from engine.catalog.library import Library
    from engine.judgments.queries import QueryStore

    lib = copy_cli_demo_library(tmp_path / "lib")
    query = next(q for q in demo_collection.queries if q.text == "red circle")
    paths = set(demo_collection.relevant[query.query_id])
    with Library.open(lib) as library:
        with library.catalog.session() as s:
            relevant = {i for i, rel in s.execute(select(Image.id, Image.rel_path)) if rel in paths}
        query_id = QueryStore(library).find_or_create_query("red circle")
    return lib, query_id, relevant


def _certify(capsys, lib, *extra: str) -> dict:
    code = main(["certify", "--query", "red circle", "--library", str(lib), "--json", *extra])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def _walk(capsys, lib, query_id: int, relevant: set[int], *extra: str) -> dict:
    from engine.catalog.library import Library
    from engine.judgments.queries import QueryStore

    out = _certify(capsys, lib, "--target", "80", "--next", "400", *extra)
    phases = [out["phase"]]
    while out["phase"] != "certified":
        assert len(phases) < 60 and out["next"]
        with Library.open(lib) as library:
            store = QueryStore(library)
            for row in out["next"]:
                store.judge(query_id, row["image_id"], int(row["image_id"] in relevant))
        out = _certify(capsys, lib, "--target", "0.8", "--next", "400", *extra)
        phases.append(out["phase"])
    assert phases[0] == "census" and "sample" in phases
    return out


def test_quadrat_certify_guides_the_judging_to_a_certified_stop(capsys, saved_query):
    lib, query_id, relevant = saved_query
    out = _walk(capsys, lib, query_id, relevant)
    assert out["certified"] and out["population"] == 960 and out["scope"] == ""
    assert out["found"] >= 0.8 * len(relevant) and out["query_id"] == query_id
    code = main(["certify", "--query", str(query_id), "--library", str(lib), "--target", "0.8"])
    text, _ = capsys.readouterr()
    assert code == 0 and "certified: 80 % recall at 95 %" in text


def test_quadrat_certify_is_scoped_by_the_filters(capsys, saved_query):
    """Only the photos the filters pass are ranked, sampled and judged: the red circles of
    one licence, and no photo of another licence is ever asked for."""
    from engine.catalog.library import Library
    from engine.judgments.queries import QueryStore
    from engine.search.filters import SearchFilters, filtered_ids

    lib, query_id, relevant = saved_query
    code = "cc0"  # a quarter of the demo's photos
    with Library.open(lib) as library:
        scope = set(filtered_ids(library.catalog, SearchFilters(licenses=(code,))).tolist())
    assert 0 < len(scope) < 960
    asked: set[int] = set()
    out = _certify(capsys, lib, "--license", code, "--target", "0.8", "--next", "400")
    assert out["population"] == len(scope) and "shown" in out["scope"]
    while out["phase"] != "certified":
        ids = [row["image_id"] for row in out["next"]]
        asked.update(ids)
        assert set(ids) <= scope
        with Library.open(lib) as library:
            store = QueryStore(library)
            for image_id in ids:
                store.judge(query_id, image_id, int(image_id in relevant))
        out = _certify(capsys, lib, "--license", code, "--target", "0.8", "--next", "400")
    assert out["found"] >= 0.8 * len(relevant & scope) and asked <= scope


def test_quadrat_certify_names_a_missing_query_in_one_line(capsys, saved_query):
    lib, _, _ = saved_query
    code = main(["certify", "--query", "no such words", "--library", str(lib)])
    _, err = capsys.readouterr()
    assert code == 2 and "no saved query has the text 'no such words'" in err
    assert len(err.strip().splitlines()) == 1
