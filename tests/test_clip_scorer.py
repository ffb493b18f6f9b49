"""The offline CLIP scorer ranks a rerank pool without hurting it: a question every candidate
answers alike leaves the base order, a question that separates the pool moves the photos it
separates, a question that only repeats the base order leaves it, a question is read as a
condition (present or absent) so the base order stands among photos that pass it, and the
answers shown stay CLIP's own p."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from statistics import NormalDist
from typing import Any

import numpy as np
import pytest

from engine.catalog.library import Library
from engine.errors import BadInputError
from engine.methods import MethodContext, SearchQuery, resolve_spec
from engine.rerank import Answer
from engine.rerank.base import Photo
from engine.rerank.clip import ClipScorer, bimodality, otsu_threshold, pool_scores, spearman

# What the designed CLIP "sees": axis 0 is shared by every photo and text (so every answer is
# a confident "yes" against "something else"), axis 1 is the look question, axis 2 the mark.
_TEXTS = {
    "a photo of something else": (0.9, 0.0, 0.0),
    "a photo of look": (1.0, 1.0, 0.0),
    "a photo of mark": (1.0, 0.0, 1.0),
}


class _Texts:
    model_key = "designed"
    image_size = 32

    def encode_texts(self, texts: Sequence[str]) -> np.ndarray:
        return np.array([_TEXTS[t] for t in texts], dtype=np.float32)

    def encode_images(self, images: Any) -> np.ndarray:  # pragma: no cover - never asked
        raise AssertionError("the designed scorer has its photo vectors already")


class DesignedClip(ClipScorer):
    """The real CLIP scorer, with each photo's vector set by the test instead of encoded."""

    def __init__(self, vectors: dict[int, tuple[float, float, float]]) -> None:
        super().__init__(_Texts(), regions=False, logit_scale=100.0)  # type: ignore[arg-type]
        self.identity = f"clip:designed-{len(vectors)}-{sorted(vectors.items())[:3]}"
        self.vectors = vectors

    def photo_vectors(self, photos: Sequence[Photo], cancel: Any = None) -> None:
        for photo in photos:
            v = np.array([self.vectors[photo.image_id]], dtype=np.float32)
            self._photo_vectors[photo.content_hash] = v


@pytest.fixture(scope="module")
def library_path(tmp_path_factory: pytest.TempPathFactory, copy_small_demo_library: Any) -> Path:
    path: Path = copy_small_demo_library(tmp_path_factory.mktemp("clip-pool") / "lib")
    return path


def _rerank(library_path: Path, demo_encoder: Any, monkeypatch: Any, marked: set[int], spec: str):  # type: ignore[no-untyped-def]
    with Library.open(library_path) as library:
        context = MethodContext(library, lambda: demo_encoder)
        query = SearchQuery("red circle")
        base = resolve_spec("text").run(query, context, top_k=30)
        # The look question: margins spread like normal noise around a confident yes
        # (p from 0.9995 to 1.0 for every photo); the mark: the `marked` photos stand apart.
        n = len(base.ids)
        noise = [0.01 * NormalDist().inv_cdf((j + 0.5) / n) for j in range(n)]
        np.random.default_rng(3).shuffle(noise)
        vectors = {i: (1.0, noise[r], 0.05 if r in marked else 0.0) for r, i in enumerate(base.ids)}
        scorer = DesignedClip(vectors)
        monkeypatch.setattr("engine.methods.rerank.load_scorer_for", lambda s, c: scorer)
        ranking = resolve_spec(spec).run(query, context, top_k=30)
        return base, ranking


def test_a_question_every_candidate_answers_yes_keeps_the_base_order(
    library_path: Path, demo_encoder: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    base, ranking = _rerank(
        library_path, demo_encoder, monkeypatch, set(), "rerank:depth=30,subqueries=look"
    )
    answers = [ranking.evidence[i]["answers"][0]["p"] for i in base.ids]
    assert min(answers) > 0.999  # CLIP says yes to all of them, by a hair more or less
    assert ranking.ids == base.ids


def test_a_question_that_separates_the_pool_moves_what_it_separates(
    library_path: Path, demo_encoder: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    base, ranking = _rerank(
        library_path,
        demo_encoder,
        monkeypatch,
        {20, 25, 28},
        "rerank:depth=30,subqueries=look;mark",
    )
    moved = [base.ids[20], base.ids[25], base.ids[28]]
    rest = [i for i in base.ids if i not in moved]
    # The marked three come up among the first; everything else keeps its base order.
    assert set(ranking.ids[:8]) >= set(moved)
    assert [i for i in ranking.ids if i not in moved] == rest
    # The answers shown are still CLIP's p, a confident yes everywhere.
    assert all(a["p"] > 0.999 for i in base.ids for a in ranking.evidence[i]["answers"])


def test_pool_scores_keep_splitting_questions_as_conditions() -> None:
    def answer(margin: float) -> Answer:
        return Answer(1.0, "yes", 20.0 + margin, 20.0)

    ranks = {i: i for i in range(1, 9)}
    flat = {i: [answer(5.0)] for i in ranks}  # nothing to tell apart
    scores = pool_scores(flat, ranks)
    assert sorted(scores, key=lambda i: -scores[i]) == list(ranks)
    # Two groups: the last two photos have what the question asks and the others do not,
    # so they come first; each group keeps its base order.
    split = {i: [answer(9.0 if i in (7, 8) else 5.0)] for i in ranks}
    scores = pool_scores(split, ranks)
    assert sorted(scores, key=lambda i: -scores[i]) == [7, 8, 1, 2, 3, 4, 5, 6]
    assert scores[7] == pytest.approx((2 + 1 - 6.5 / 8) / 3)  # docs/SPEC.md §2.2's example
    for how in ("min", "product"):  # one question: pass or fail whichever way they combine
        other = pool_scores(split, ranks, how)
        assert sorted(other, key=lambda i: -other[i]) == [7, 8, 1, 2, 3, 4, 5, 6]
    with pytest.raises(BadInputError):
        pool_scores(split, ranks, "median")
    assert all(0.0 < s < 1.0 for s in scores.values())
    # An unreadable photo (no logits) is neither among those that pass nor those that fail.
    ranks = {i: i for i in range(1, 13)}
    unreadable = {i: [answer(9.0 if i in (11, 12) else 5.0)] for i in ranks}
    unreadable[4] = [Answer(0.0, "unreadable photo")]
    scores = pool_scores(unreadable, ranks)
    assert _order(scores) == [11, 12, 4, 1, 2, 3, 5, 6, 7, 8, 9, 10]


def test_among_photos_that_pass_the_base_order_stands() -> None:
    # A count query's pool: the base ranked the photos with the right count first (1-10),
    # then photos with the subject but the wrong count (11-30), then photos without it. The
    # question about the subject prefers a large plain subject among those that show it,
    # grading the base's first ten low (margins 2.0-2.9) and the wrong counts high (4-6);
    # read as a condition (subject present or not) it leaves the base's top ten first.
    # (Fused as a grade, z with the base's normal score, it pulled wrong counts into the top 10.)
    ranks = {i: i for i in range(1, 41)}
    margins = {
        i: (2.0 + 0.1 * (i - 1) if i <= 10 else 4.0 + 0.1 * (i - 11) if i <= 30 else -1.0)
        for i in ranks
    }
    assert bimodality(list(margins.values())) > 5 / 9
    assert spearman(list(margins.values()), [-r for r in ranks.values()]) < 0.5  # kept
    scores = pool_scores({i: [_answer(margins[i])] for i in ranks}, ranks)
    assert _order(scores) == list(ranks)


def test_otsu_threshold_cuts_between_the_two_groups() -> None:
    assert otsu_threshold([0.0, 0.1, 0.2, 5.0, 5.1]) == pytest.approx(2.6)
    assert otsu_threshold([1.0, 1.0, 1.0]) == 1.0  # nothing to cut: no photo is below
    assert otsu_threshold([-3.0, 2.0]) == pytest.approx(-0.5)


def test_bimodality_tells_two_groups_from_one() -> None:
    one = [NormalDist().inv_cdf((j + 0.5) / 50) for j in range(50)]
    two = [0.0] * 25 + [1.0] * 25
    assert bimodality(one) < 5 / 9 < bimodality(two)
    assert bimodality([1.0, 1.0, 1.0, 1.0]) == 0.0 and bimodality([1.0, 2.0]) == 0.0


def _answer(margin: float) -> Answer:
    return Answer(1.0, "yes", 20.0 + margin, 20.0)


def _order(scores: dict[int, float]) -> list[int]:
    return sorted(scores, key=lambda i: -scores[i])


def test_a_question_that_repeats_the_base_order_does_not_reshuffle_its_top() -> None:
    # A subject question on a pool of 40: the base's last ten lack the subject and stand
    # apart (so the question splits the pool and agrees with the base, rho about 0.58);
    # the thirty that show it get margins that differ only by CLIP's noise (+-0.5). Fused,
    # that noise would reshuffle the base's top ten; the question adds nothing the base
    # does not know, so the base order stays.
    ranks = {i: i for i in range(1, 41)}
    margins = {i: (-4.0 if i > 30 else (0.5 if i % 2 == 0 else -0.5)) for i in ranks}
    assert bimodality(list(margins.values())) > 5 / 9  # it does split the pool
    assert spearman(list(margins.values()), [-r for r in ranks.values()]) >= 0.5
    scores = pool_scores({i: [_answer(margins[i])] for i in ranks}, ranks)
    assert _order(scores) == list(ranks)


def test_more_questions_do_not_outvote_the_base() -> None:
    # The same split asked once or three times orders the pool alike.
    ranks = {i: i for i in range(1, 9)}
    once = pool_scores({i: [_answer(9.0 if i in (7, 8) else 5.0)] for i in ranks}, ranks)
    thrice = pool_scores({i: [_answer(9.0 if i in (7, 8) else 5.0)] * 3 for i in ranks}, ranks)
    assert _order(once) == _order(thrice) == [7, 8, 1, 2, 3, 4, 5, 6]
    # Questions that differ: photos ordered by how many they fail, then by base rank; with
    # "min" only whether a photo fails any counts.
    ranks = {i: i for i in range(1, 13)}
    groups = ((11, 12), (10, 11, 12), (2, 11, 12))
    split = {i: [_answer(9.0 if i in group else 5.0) for group in groups] for i in ranks}
    assert _order(pool_scores(split, ranks)) == [11, 12, 2, 10, 1, 3, 4, 5, 6, 7, 8, 9]
    assert _order(pool_scores(split, ranks, "min")) == [11, 12, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]


def test_spearman() -> None:
    assert spearman([1.0, 2.0, 3.0], [10.0, 20.0, 30.0]) == pytest.approx(1.0)
    assert spearman([1.0, 2.0, 3.0], [3.0, 2.0, 1.0]) == pytest.approx(-1.0)
    assert spearman([1.0, 1.0, 2.0, 2.0], [1.0, 2.0, 3.0, 4.0]) == pytest.approx(0.894, abs=1e-3)
    assert spearman([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]) == 0.0
