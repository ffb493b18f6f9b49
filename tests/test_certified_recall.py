"""Certified recall by the quantile stopping rule: its numbers, its guarantee in simulation over
1,000 collections per target, and `quadrat certify` on a saved query of the small demo."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sqlalchemy import select

from app.cli import main
from engine.judgments.certified_recall import (
    binomial_tail,
    certify_recall,
    sample_order,
    sample_positives_needed,
    simulate,
    stopping_quantile,
)


def test_the_sample_needs_enough_relevant_photos_for_any_stop():
    # target^r <= 1 - confidence: 0.8^14 = 0.044, 0.8^13 = 0.055; 0.9^29 = 0.047, 0.9^28 = 0.052
    assert sample_positives_needed(0.8, 0.95) == 14
    assert sample_positives_needed(0.9, 0.95) == 29
    assert stopping_quantile(13, 0.8, 0.95) is None
    assert stopping_quantile(14, 0.8, 0.95) == 14


def test_the_quantile_is_the_smallest_with_a_binomial_tail_within_alpha():
    j = stopping_quantile(40, 0.8, 0.95)
    assert j is not None
    assert binomial_tail(40, 0.8, j) <= 0.05 < binomial_tail(40, 0.8, j - 1)
    # hand: P(Bin(3, 0.5) >= 2) = (3 + 1) / 8
    assert binomial_tail(3, 0.5, 2) == pytest.approx(0.5)


def test_bad_targets_are_refused():
    with pytest.raises(ValueError, match="target recall"):
        sample_positives_needed(1.0, 0.95)
    with pytest.raises(ValueError, match="confidence"):
        stopping_quantile(10, 0.9, 0.0)


def _collection(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A collection of 500 to 4,000 photos, 1 to 15 % relevant, ranked by a scorer of random
    quality (from nearly useless to nearly perfect)."""
    n = int(rng.integers(500, 4000))
    relevance = (rng.random(n) < rng.uniform(0.01, 0.15)).astype(np.int64)
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
    assert len(runs) >= 990
    assert reached >= 0.95, f"recall {target} reached in only {reached:.3f} of the runs"
    # It is not free: the rule judges more than judging the ranking to the target would.
    assert np.median([r.judged / max(r.oracle, 1) for r in runs]) > 1.0


def _judge_all(relevance: np.ndarray, ranking: np.ndarray, ids: list[int]) -> dict[int, int]:
    position = {int(image_id): i for i, image_id in enumerate(ranking.tolist())}
    return {i: int(relevance[position[i]]) for i in ids}


def test_the_rule_walks_from_sample_to_review_to_certified():
    rng = np.random.default_rng(3)
    n = 3000
    ranking = np.arange(100, 100 + n)
    relevance = np.zeros(n, dtype=np.int64)
    relevance[rng.choice(600, 200, replace=False)] = 1  # relevant photos near the top
    judgments: dict[int, int] = {}
    state = certify_recall(ranking, judgments, target=0.8, confidence=0.95, seed=9, batch=50)
    assert state.phase == "sample" and state.positives_needed == 14
    sample = sample_order(ranking, 9)
    assert state.next_ids == sample[:50].tolist()
    while state.phase == "sample":
        judgments.update(_judge_all(relevance, ranking, state.next_ids))
        state = certify_recall(ranking, judgments, target=0.8, confidence=0.95, seed=9, batch=50)
    assert state.phase == "review" and state.sample_relevant >= 14
    assert state.stop_rank is not None and state.to_judge == len(state.next_ids)
    # the review is the unjudged top of the ranking down to the stop, in rank order
    assert state.next_ids == [i for i in ranking[: state.stop_rank].tolist() if i not in judgments]
    judgments.update(_judge_all(relevance, ranking, state.next_ids))
    done = certify_recall(ranking, judgments, target=0.8, confidence=0.95, seed=9)
    assert done.certified and done.next_ids == []
    assert done.found == int(relevance[: done.stop_rank].sum())
    assert done.found / relevance.sum() >= 0.8  # this run's realised recall
    assert "certified: 80 % recall at 95 %" in done.summary()


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


def test_quadrat_certify_guides_the_judging_to_a_certified_stop(capsys, saved_query):
    from engine.catalog.library import Library
    from engine.judgments.queries import QueryStore

    lib, query_id, relevant = saved_query
    out = _certify(capsys, lib, "--target", "80", "--next", "200")
    assert out["phase"] == "sample" and out["positives_needed"] == 14
    rounds = 0
    while out["phase"] != "certified":
        rounds += 1
        assert rounds < 20 and out["next"]
        with Library.open(lib) as library:
            store = QueryStore(library)
            for row in out["next"]:
                store.judge(query_id, row["image_id"], int(row["image_id"] in relevant))
        out = _certify(capsys, lib, "--target", "0.8", "--next", "200")
    assert out["certified"] and out["found"] >= 0.8 * len(relevant)
    assert out["query_id"] == query_id
    code = main(["certify", "--query", str(query_id), "--library", str(lib), "--target", "0.8"])
    text, _ = capsys.readouterr()
    assert code == 0 and text.startswith("certified: 80 % recall at 95 %")


def test_quadrat_certify_names_a_missing_query_in_one_line(capsys, saved_query):
    lib, _, _ = saved_query
    code = main(["certify", "--query", "no such words", "--library", str(lib)])
    _, err = capsys.readouterr()
    assert code == 2 and "no saved query has the text 'no such words'" in err
    assert len(err.strip().splitlines()) == 1
