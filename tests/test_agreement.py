"""Agreement among judges against independent implementations and worked examples: Cohen's
kappa (scikit-learn), Krippendorff's alpha (the `krippendorff` package), Fleiss' kappa (Fleiss'
own worked example as Wikipedia gives it), edge cases, and each judge's newest judgment read
from the catalog's judgment events."""

from __future__ import annotations

import numpy as np
import pytest

from engine.judgments.agreement import (
    cohen_kappa,
    fleiss_kappa,
    judge_ratings,
    measure_agreement,
)

sklearn_metrics = pytest.importorskip("sklearn.metrics")
krippendorff = pytest.importorskip("krippendorff")

# Fleiss (1971) as Wikipedia works it: 10 subjects, 14 raters, 5 categories, kappa 0.210.
FLEISS_EXAMPLE = np.array([
    [0, 0, 0, 0, 14], [0, 2, 6, 4, 2], [0, 0, 3, 5, 6], [0, 3, 9, 2, 0], [2, 2, 8, 1, 1],
    [7, 7, 0, 0, 0], [3, 2, 6, 3, 0], [2, 5, 3, 2, 2], [6, 5, 2, 1, 0], [0, 2, 2, 3, 7],
])  # fmt: skip


def test_fleiss_kappa_matches_the_worked_example():
    assert fleiss_kappa(FLEISS_EXAMPLE) == pytest.approx(0.2099, abs=5e-4)


@pytest.mark.parametrize("seed", range(30))
def test_cohen_kappa_equals_scikit_learn_on_random_judges(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 200))
    a = rng.integers(0, 2, n)
    flip = rng.random(n) < rng.uniform(0, 0.6)
    b = np.where(flip, 1 - a, a)
    expected = sklearn_metrics.cohen_kappa_score(a, b)
    got = cohen_kappa(a, b)
    if np.isnan(expected):
        assert got is None
    else:
        assert got == pytest.approx(expected, abs=1e-12)


def _matrix(ratings: dict[int, dict[str, int]], judges: list[str]) -> np.ndarray:
    """Judges × photos with NaN for a missing judgment: the krippendorff package's layout."""
    photos = sorted(ratings)
    return np.array([[ratings[p].get(j, np.nan) for p in photos] for j in judges], dtype=float)


@pytest.mark.parametrize("seed", range(30))
def test_alpha_equals_the_krippendorff_package_with_missing_values(seed):
    rng = np.random.default_rng(100 + seed)
    judges = [f"j{i}" for i in range(int(rng.integers(2, 6)))]
    ratings: dict[int, dict[str, int]] = {}
    for photo in range(int(rng.integers(4, 80))):
        truth = int(rng.integers(0, 3))
        marks = {}
        for judge in judges:
            if rng.random() < 0.3:
                continue  # this judge did not see the photo
            marks[judge] = truth if rng.random() < 0.7 else int(rng.integers(0, 3))
        ratings[photo] = marks
    report = measure_agreement(ratings, resamples=50)
    matrix = _matrix(ratings, judges)
    pairable = (~np.isnan(matrix)).sum(axis=0) >= 2
    values = set(np.unique(matrix[:, pairable][~np.isnan(matrix[:, pairable])]).tolist())
    if len(values) < 2:
        assert report.krippendorff_alpha.value is None
        return
    expected = krippendorff.alpha(reliability_data=matrix, level_of_measurement="nominal")
    assert report.krippendorff_alpha.value == pytest.approx(expected, abs=1e-9)


def test_two_judges_no_missing_fleiss_is_scotts_pi_and_alpha_is_close():
    # With two judges and nothing missing, Fleiss' kappa is Scott's pi, and alpha is pi
    # corrected for sample size: alpha = 1 - (2n - 1) / (2n) * (1 - pi).
    rng = np.random.default_rng(5)
    a = rng.integers(0, 2, 60)
    b = np.where(rng.random(60) < 0.25, 1 - a, a)
    ratings = {i: {"ann": int(a[i]), "bob": int(b[i])} for i in range(60)}
    report = measure_agreement(ratings, resamples=50)
    pi = report.fleiss_kappa.value
    assert pi is not None and report.krippendorff_alpha.value is not None
    assert report.krippendorff_alpha.value == pytest.approx(1 - (119 / 120) * (1 - pi), abs=1e-12)
    assert report.pairs[0].kappa.value == pytest.approx(
        sklearn_metrics.cohen_kappa_score(a, b), abs=1e-12
    )


def test_all_agree_on_one_class_is_undefined_not_a_crash():
    ratings = {i: {"ann": 1, "bob": 1, "cy": 1} for i in range(10)}
    report = measure_agreement(ratings, resamples=20)
    assert report.raw.value == 1.0
    assert report.fleiss_kappa.value is None and report.krippendorff_alpha.value is None
    assert "one class" in report.note
    assert report.pairs[0].kappa.value is None


def test_perfect_agreement_over_two_classes_is_one_with_a_tight_interval():
    ratings = {i: {"ann": i % 2, "bob": i % 2} for i in range(40)}
    report = measure_agreement(ratings, resamples=200)
    assert report.fleiss_kappa.value == pytest.approx(1.0)
    assert report.krippendorff_alpha.value == pytest.approx(1.0)
    assert report.pairs[0].table == ((20, 0), (0, 20))
    assert report.fleiss_kappa.low == pytest.approx(1.0)


def test_the_confusion_table_counts_each_judges_marks():
    ratings = {
        1: {"ann": 1, "bob": 1}, 2: {"ann": 1, "bob": 0}, 3: {"ann": 0, "bob": 0},
        4: {"ann": 0, "bob": 1}, 5: {"ann": 1, "bob": 0}, 6: {"ann": 1},  # one judge only
    }  # fmt: skip
    report = measure_agreement(ratings, resamples=20)
    assert report.photos == 5 and report.judgments == 10
    (pair,) = report.pairs
    assert (pair.first, pair.second) == ("ann", "bob")
    assert pair.table == ((1, 1), (2, 1))  # rows ann 0/1, columns bob 0/1
    assert report.raw.value == pytest.approx(2 / 5)
    # hand: p_o = 2/5; ann 1 3/5, bob 1 2/5: p_e = 3/5*2/5 + 2/5*3/5 = 12/25
    assert pair.kappa.value == pytest.approx((0.4 - 12 / 25) / (1 - 12 / 25))


def test_no_photo_judged_twice_says_so():
    report = measure_agreement({1: {"ann": 1}, 2: {"bob": 0}})
    assert report.photos == 0 and report.fleiss_kappa.value is None
    assert "no photo is judged by two judges" in report.summary_lines()[0]


def test_each_judges_newest_judgment_counts_and_a_cleared_one_is_none(
    tmp_path, copy_small_demo_library
):
    from engine.catalog.library import Library
    from engine.judgments.queries import QueryStore

    with Library.open(copy_small_demo_library(tmp_path / "lib")) as library:
        ann, bob = QueryStore(library, user="ann"), QueryStore(library, user="bob")
        query_id = ann.find_or_create_query("red circle")
        ann.judge(query_id, 1, 1)
        ann.judge(query_id, 1, 0)  # ann changed her mind
        bob.judge(query_id, 1, 0)
        ann.judge(query_id, 2, 1)
        bob.judge(query_id, 2, 1)
        bob.judge(query_id, 2, None)  # bob cleared his
        ratings = judge_ratings(library, query_id)
    assert ratings == {1: {"ann": 0, "bob": 0}, 2: {"ann": 1}}


def test_quadrat_agreement_prints_kappa_alpha_and_the_table(
    tmp_path, copy_cli_small_demo_library, capsys
):
    import json

    from app.cli import main
    from engine.catalog.library import Library
    from engine.judgments.queries import QueryStore

    lib = copy_cli_small_demo_library(tmp_path / "lib")
    marks = [(1, 1, 1), (2, 1, 0), (3, 0, 0), (4, 0, 1), (5, 1, 1), (6, 0, 0)]
    with Library.open(lib) as library:
        ann, bob = QueryStore(library, user="ann"), QueryStore(library, user="bob")
        query_id = ann.find_or_create_query("red circle")
        for image_id, a, b in marks:
            ann.judge(query_id, image_id, a)
            bob.judge(query_id, image_id, b)
    code = main(["agreement", "--query", "red circle", "--library", str(lib), "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    report = json.loads(out)
    assert report["query_id"] == query_id and report["judges"] == ["ann", "bob"]
    assert report["photos"] == 6
    # hand: 4 of 6 agree; each judge 1 on half: p_e = 1/2, kappa = (2/3 - 1/2) / (1/2) = 1/3
    (pair,) = report["pairs"]
    assert pair["table"] == [[2, 1], [1, 2]]
    assert pair["cohen_kappa"]["value"] == pytest.approx(1 / 3, abs=1e-4)
    assert report["raw_agreement"]["value"] == pytest.approx(4 / 6, abs=1e-4)
    code = main(["agreement", "--query", str(query_id), "--library", str(lib)])
    text, _ = capsys.readouterr()
    assert code == 0 and "6 photos judged by two or more of 2 judges (ann, bob)" in text
    assert "Krippendorff's alpha" in text and "ann / bob: 6 photos, Cohen's kappa 0.333" in text
