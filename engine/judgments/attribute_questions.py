"""Attribute questions: a closed question ("is it flowering?") learnt from judged photos and
asked of the whole collection, a generalisation of the probe (`engine.judgments.learning`).

A question is one Darwin Core attribute value, `reproductiveCondition=flowering`. Its answers
come from the attributes stored on a query's judged photos (`attributes_for_query`), or from
labels handed in directly (`labels`):

- yes: the term carries the value (any item of a pipe list, "foraging|courtship", any case);
- no: the term carries "not VALUE" (what rejecting a suggestion stores), or, for a term that
  holds one value (`lifeStage`, `sex`, `reproductiveCondition`, `vitality`), another value:
  a juvenile is not an adult. The many-valued and free-text terms (`behavior`,
  `associatedTaxa`, `occurrenceRemarks`) record what was noticed, not everything that was
  not, so there another value says nothing and only "not VALUE" is a no;
- no answer: the term is empty; the photo teaches nothing.

The model is L2-regularised logistic regression on the photos' unit CLIP vectors, with C chosen
by the evidence (`fit_probe` with no prior direction: a value's words, "count of two", are
often a poor CLIP prompt, so the judgments alone teach it). Before anything is asked of the
collection, `cross_validate` says how well it answers on the judged photos themselves
(stratified k-fold: accuracy with a Wilson interval, balanced accuracy with a Jeffreys
interval per answer, and the AUC; the folds share a training set, so the intervals are a little
narrow; yes where the logit passes the prior odds, `yes_threshold`, so a rare answer is not
answered no throughout),
and `learning_curve` how many judgments it needs to reach a stated accuracy (subsamples of
10, 20, 50, ... judgments, each tested on the judged photos it left out; beyond the largest,
a power law fitted to the error). The suggestions' probabilities are Platt-scaled on the
cross-validated logits, so the map never learns from the judgment it scores. They hold for
photos like the judged ones: a question learnt on a query's relevant photos and asked of
photos unlike any of them may be over- or under-confident there.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from engine.errors import BadInputError
from engine.judgments.attributes import (
    DWC_ATTRIBUTE_TERMS,
    attributes_for_query,
    set_attributes,
)
from engine.judgments.calibration import PRIOR_SD, PlattCalibration, platt_targets
from engine.judgments.learning import Probe, fit_probe
from engine.judgments.logistic import fit_map, sigmoid

if TYPE_CHECKING:
    from engine.catalog.library import Library
    from engine.judgments.attributes import AttributeChange
    from engine.search.filters import SearchFilters

SINGLE_VALUED_TERMS = frozenset({"lifeStage", "sex", "reproductiveCondition", "vitality"})
"""Terms that hold one value: another value there answers the question "no"."""
NEGATION = "not "
"""A stored value "not VALUE" answers "is it VALUE?" with no (a rejected suggestion)."""
MIN_PER_ANSWER = 3
"""Judged photos of each answer before a question is cross-validated or asked (as the probe's
`MIN_PER_KIND`: with two, one fold holds half of them)."""
FOLDS = 5
LEVEL = 0.95
CURVE_SIZES: tuple[int, ...] = (10, 20, 50, 100, 200, 500)
CURVE_REPEATS = 10
EXTRAPOLATE_AT_MOST = 4
"""The learning curve says nothing beyond this many times the most judgments it tried."""
TARGET_ACCURACY = 0.9
INTERVAL_DRAWS = 4000
_SCAN_CHUNK = 20_000  # photos scored at once over the collection


# -- the question -----------------------------------------------------------------------------


@dataclass(frozen=True)
class AttributeQuestion:
    """ "Is it VALUE?" for one Darwin Core term: `reproductiveCondition=flowering`."""

    term: str
    value: str

    @classmethod
    def parse(cls, text: str) -> AttributeQuestion:
        """TERM=VALUE, the term any case ("lifestage=juvenile"); a one-line BadInputError else."""
        term, sep, value = text.partition("=")
        known = {t.casefold(): t for t in DWC_ATTRIBUTE_TERMS}
        if not sep or not value.strip():
            raise BadInputError(
                f"expected TERM=VALUE such as reproductiveCondition=flowering, got {text!r}"
            )
        canonical = known.get(term.strip().casefold())
        if canonical is None:
            raise BadInputError(
                f"unknown attribute {term.strip()!r}: one of {', '.join(DWC_ATTRIBUTE_TERMS)}"
            )
        return cls(canonical, value.strip())

    @property
    def label(self) -> str:
        return f"{self.term}={self.value}"

    @property
    def sentence(self) -> str:
        return f"is it {self.value}?"

    def answer(self, stored: str | None) -> int | None:
        """1 (yes), 0 (no) or None (no answer) for a photo whose term holds `stored`."""
        items = [item.strip().casefold() for item in (stored or "").split("|") if item.strip()]
        if not items:
            return None
        wanted = self.value.casefold()
        if wanted in items:
            return 1
        if NEGATION + wanted in items or self.term in SINGLE_VALUED_TERMS:
            return 0
        return None


def labels_from_attributes(
    attributes: Mapping[int, Mapping[str, str]], question: AttributeQuestion
) -> dict[int, int]:
    """image id -> 1 / 0 for the photos whose attributes answer `question` (see the module)."""
    labels: dict[int, int] = {}
    for image_id, values in attributes.items():
        answer = question.answer(values.get(question.term))
        if answer is not None:
            labels[int(image_id)] = answer
    return labels


# -- the model --------------------------------------------------------------------------------


def fit_question(vectors: np.ndarray, labels: Sequence[int] | np.ndarray) -> Probe:
    """Logistic regression of the answers on unit vectors, C chosen by the evidence."""
    x = np.asarray(vectors, dtype=np.float64)
    return fit_probe(np.zeros(x.shape[1]), x, labels, prior_scale=0.0, c=None, calibrate=False)


def yes_threshold(labels: np.ndarray) -> float:
    """The logit above which a photo is answered yes: the logit a model that learnt nothing
    gives every photo (the mean of Platt's targets of the photos learnt from, as odds).

    A logistic model learns the judged share of yes into its intercept; judged at random, a
    rare answer (a striped background in 4 % of the photos) then never reaches p = 0.5 and the
    model answers no to everything, however well it ranks. Moving the cut by the prior odds
    (the prior-shift correction) answers as if both answers had been judged equally often:
    the cut that balanced accuracy rewards. The probabilities stay calibrated to the real share.
    """
    share = float(platt_targets(np.asarray(labels)).mean())
    return math.log(share / (1 - share))


def _counts(y: np.ndarray) -> tuple[int, int]:
    positives = int(y.sum())
    return positives, len(y) - positives


def _check_answers(y: np.ndarray, minimum: int = MIN_PER_ANSWER) -> None:
    positives, negatives = _counts(y)
    if min(positives, negatives) < minimum:
        raise BadInputError(
            f"{positives} photos answer yes and {negatives} no: judge at least {minimum} of "
            "each before the question can be checked and asked"
        )


def shuffled_folds(y: np.ndarray, folds: int, seed: int) -> np.ndarray:
    """Each photo's fold: each answer's photos in a seeded random order, dealt round the folds,
    so every fold holds both answers in about their overall shares."""
    rng = np.random.default_rng(seed)
    assignment = np.empty(len(y), dtype=np.int64)
    start = 0
    for kind in (1, 0):
        members = rng.permutation(np.flatnonzero(y == kind))
        assignment[members] = (np.arange(len(members)) + start) % folds
        start += len(members)
    return assignment


def balanced_accuracy(y: np.ndarray, predicted: np.ndarray) -> float:
    """The mean of the share of yes photos answered yes and of no photos answered no."""
    shares = [float(np.mean(predicted[y == kind] == kind)) for kind in (1, 0) if (y == kind).any()]
    return float(np.mean(shares)) if shares else math.nan


def area_under_curve(y: np.ndarray, scores: np.ndarray) -> float:
    """The ROC curve's area by Mann-Whitney: ties count a half."""
    yes, no = scores[y == 1], scores[y == 0]
    if not len(yes) or not len(no):
        return math.nan
    order = np.argsort(np.concatenate([yes, no]), kind="mergesort")
    ranks = np.empty(len(order))
    ranks[order] = np.arange(1, len(order) + 1)
    merged = np.concatenate([yes, no])
    for value in np.unique(merged):  # mid-ranks for ties
        same = merged == value
        if same.sum() > 1:
            ranks[same] = ranks[same].mean()
    return float((ranks[: len(yes)].sum() - len(yes) * (len(yes) + 1) / 2) / (len(yes) * len(no)))


def wilson_interval(successes: int, trials: int, level: float = LEVEL) -> tuple[float, float]:
    """Wilson's score interval for a proportion (stays inside 0..1 at 0 or n successes)."""
    if trials == 0:
        return math.nan, math.nan
    z = _normal_quantile(0.5 + level / 2)
    share = successes / trials
    centre = (share + z * z / (2 * trials)) / (1 + z * z / trials)
    half = z * math.sqrt(share * (1 - share) / trials + z * z / (4 * trials * trials))
    half /= 1 + z * z / trials
    return max(0.0, centre - half), min(1.0, centre + half)


def _normal_quantile(p: float) -> float:
    """The standard normal quantile, by bisection on erf (no scipy)."""
    low, high = -10.0, 10.0
    for _ in range(100):
        mid = (low + high) / 2
        if 0.5 * (1 + math.erf(mid / math.sqrt(2))) < p:
            low = mid
        else:
            high = mid
    return (low + high) / 2


@dataclass(frozen=True)
class CrossValidation:
    """How well the question is answered on the judged photos, each by a model that did not
    learn from it: accuracy and balanced accuracy with their `level` intervals, and `chance`,
    the accuracy of always giving the commoner answer."""

    judged: int
    yes: int
    no: int
    folds: int
    accuracy: float
    accuracy_low: float
    accuracy_high: float
    balanced: float
    balanced_low: float
    balanced_high: float
    level: float
    auc: float  # the chance a yes photo's held-out logit beats a no photo's (threshold-free)
    held_out_logits: np.ndarray = field(repr=False, compare=False)

    @property
    def chance(self) -> float:
        return max(self.yes, self.no) / self.judged

    def summary(self) -> str:
        """ "cross-validated accuracy 0.93 (95 %: 0.88–0.96), balanced 0.90 (...) ..." """
        pct = round(self.level * 100)
        return (
            f"cross-validated accuracy {self.accuracy:.2f} ({pct} %: {self.accuracy_low:.2f}–"
            f"{self.accuracy_high:.2f}; always the commoner answer: {self.chance:.2f}), "
            f"balanced accuracy {self.balanced:.2f} ({self.balanced_low:.2f}–"
            f"{self.balanced_high:.2f}), AUC {self.auc:.2f} on {self.judged} judged photos "
            f"({self.yes} yes, {self.no} no; {self.folds} folds)"
        )

    def to_json(self) -> dict[str, object]:
        return {
            "judged": self.judged,
            "yes": self.yes,
            "no": self.no,
            "folds": self.folds,
            "accuracy": round(self.accuracy, 4),
            "accuracy_interval": [round(self.accuracy_low, 4), round(self.accuracy_high, 4)],
            "balanced_accuracy": round(self.balanced, 4),
            "balanced_accuracy_interval": [
                round(self.balanced_low, 4),
                round(self.balanced_high, 4),
            ],
            "auc": round(self.auc, 4),
            "chance": round(self.chance, 4),
            "level": self.level,
        }


def cross_validate(
    vectors: np.ndarray,
    labels: Sequence[int] | np.ndarray,
    *,
    folds: int = FOLDS,
    seed: int = 0,
    level: float = LEVEL,
    draws: int = INTERVAL_DRAWS,
) -> CrossValidation:
    """Stratified k-fold cross-validation of `fit_question` (fewer folds when an answer has
    fewer photos than `folds`); a one-line BadInputError under `MIN_PER_ANSWER` of an answer."""
    x = np.asarray(vectors, dtype=np.float64)
    y = (np.asarray(labels).ravel() > 0).astype(np.int64)
    if len(x) != len(y):
        raise ValueError(f"{len(x)} vectors for {len(y)} labels")
    _check_answers(y)
    yes, no = _counts(y)
    folds = max(2, min(folds, yes, no))
    assignment = shuffled_folds(y, folds, seed)
    logits = np.empty(len(y))
    predicted = np.empty(len(y), dtype=np.int64)
    for fold in range(folds):
        test = assignment == fold
        model = fit_question(x[~test], y[~test])
        logits[test] = model.logits(x[test])
        predicted[test] = logits[test] > yes_threshold(y[~test])
    correct = int((predicted == y).sum())
    low, high = wilson_interval(correct, len(y), level)
    balanced = balanced_accuracy(y, predicted)
    b_low, b_high = _balanced_interval(y, predicted, level, draws, seed)
    return CrossValidation(
        len(y), yes, no, folds, correct / len(y), low, high, balanced, b_low, b_high, level,
        area_under_curve(y, logits), logits,
    )  # fmt: skip


def _balanced_interval(
    y: np.ndarray, predicted: np.ndarray, level: float, draws: int, seed: int
) -> tuple[float, float]:
    """The interval of balanced accuracy by simulation: each answer's hit rate drawn from
    Jeffreys' Beta(hits + 1/2, misses + 1/2), the two averaged, the draws' percentiles. (A
    bootstrap collapses to one point when every photo of an answer is answered right: 20 of
    20 is not a certainty.)"""
    rng = np.random.default_rng([seed, 7])
    rates = []
    for kind in (1, 0):
        hits = int((predicted[y == kind] == kind).sum())
        misses = int((y == kind).sum()) - hits
        rates.append(rng.beta(hits + 0.5, misses + 0.5, draws))
    balanced = (rates[0] + rates[1]) / 2
    tail = (1 - level) / 2
    return float(np.quantile(balanced, tail)), float(np.quantile(balanced, 1 - tail))


def fit_calibration(logits: np.ndarray, labels: np.ndarray, folds: int) -> PlattCalibration:
    """Platt's map sigmoid(slope * z + intercept) fitted on held-out logits, to Platt's
    smoothed targets, with a weak prior around the identity. Unlike the probe's, the slope may
    fall below 1: this model has no prior pulling its logits flat, so they may as well be too
    steep (a model that overfits); it is kept at 0 or above (a question never answers the
    opposite of what it learnt)."""
    z = np.asarray(logits, dtype=np.float64).ravel()
    targets = platt_targets(labels)
    features = np.column_stack([z, np.ones_like(z)])
    prior = np.array([1.0, 0.0])
    delta, _, _ = fit_map(
        features @ prior, features, targets, np.full(2, PRIOR_SD**-2), np.zeros(2), 100, 1e-12
    )
    slope, intercept = prior + delta
    if slope < 0:
        slope, intercept = 0.0, math.log(targets.mean() / (1 - targets.mean()))
    return PlattCalibration(float(slope), float(intercept), folds, len(z))


# -- the learning curve -----------------------------------------------------------------------


@dataclass(frozen=True)
class CurvePoint:
    """The mean accuracy of models learnt from `judgments` judged photos (`repeats` random
    subsamples, each answer in its overall share), each tested on the judged photos it left out."""

    judgments: int
    accuracy: float
    balanced: float
    repeats: int

    def to_json(self) -> dict[str, object]:
        return {
            "judgments": self.judgments,
            "accuracy": round(self.accuracy, 4),
            "balanced_accuracy": round(self.balanced, 4),
            "repeats": self.repeats,
        }


@dataclass(frozen=True)
class LearningCurve:
    """Balanced accuracy against judgments, and how many judgments reach `target` (`needed`;
    `extrapolated` when beyond the largest subsample, None when the curve cannot say)."""

    points: list[CurvePoint]
    target: float
    needed: int | None
    extrapolated: bool
    note: str

    def to_json(self) -> dict[str, object]:
        return {
            "target": self.target,
            "needed": self.needed,
            "extrapolated": self.extrapolated,
            "note": self.note,
            "points": [p.to_json() for p in self.points],
        }


def _subsample(y: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray | None:
    """`size` photos, each answer in its overall share and at least `MIN_PER_ANSWER` of each
    (what `cross_validate` asks of a user); None when fewer than that of an answer would be
    left to test on."""
    yes_idx, no_idx = np.flatnonzero(y == 1), np.flatnonzero(y == 0)
    least = MIN_PER_ANSWER
    take_yes = min(max(least, round(size * len(yes_idx) / len(y))), size - least)
    take_no = size - take_yes
    if take_yes > len(yes_idx) - least or take_no > len(no_idx) - least:
        return None  # fewer than `least` of an answer left to test on
    return np.concatenate(
        [rng.choice(yes_idx, take_yes, replace=False), rng.choice(no_idx, take_no, replace=False)]
    )


def learning_curve(
    vectors: np.ndarray,
    labels: Sequence[int] | np.ndarray,
    *,
    sizes: Iterable[int] = CURVE_SIZES,
    repeats: int = CURVE_REPEATS,
    target: float = TARGET_ACCURACY,
    seed: int = 0,
) -> LearningCurve:
    """Balanced accuracy of models learnt from subsamples of the judged photos (each size
    that leaves photos of both answers to test on), and the judgments needed for `target`:
    interpolated between sizes on a log scale, else extrapolated by a power law fitted to
    1 - balanced accuracy over the sizes tried, up to `EXTRAPOLATE_AT_MOST` times the largest."""
    x = np.asarray(vectors, dtype=np.float64)
    y = (np.asarray(labels).ravel() > 0).astype(np.int64)
    rng = np.random.default_rng([seed, 11])
    points = []
    for size in sorted(set(int(s) for s in sizes)):
        if size < 2 * MIN_PER_ANSWER:
            continue
        accuracies, balanced = [], []
        for _ in range(repeats):
            chosen = _subsample(y, size, rng)
            if chosen is None:
                break
            test = np.ones(len(y), dtype=bool)
            test[chosen] = False
            model = fit_question(x[chosen], y[chosen])
            predicted = (model.logits(x[test]) > yes_threshold(y[chosen])).astype(np.int64)
            accuracies.append(float(np.mean(predicted == y[test])))
            balanced.append(balanced_accuracy(y[test], predicted))
        if len(accuracies) < repeats:
            break  # too few judged photos left to test this size
        points.append(CurvePoint(size, float(np.mean(accuracies)), float(np.mean(balanced)),
                                 repeats))  # fmt: skip
    needed, extrapolated, note = _judgments_needed(points, target)
    return LearningCurve(points, target, needed, extrapolated, note)


def _judgments_needed(points: list[CurvePoint], target: float) -> tuple[int | None, bool, str]:
    what = f"balanced accuracy {target:.2f}"
    if not points:
        return None, False, f"too few judged photos to measure how many reach {what}"
    for i, point in enumerate(points):
        if point.balanced >= target:
            if i == 0:
                return point.judgments, False, f"{what} at {point.judgments} judgments or fewer"
            before = points[i - 1]
            # Linear in log(judgments) between the two sizes that bracket the target.
            share = (target - before.balanced) / (point.balanced - before.balanced)
            logn = math.log(before.judgments) + share * (
                math.log(point.judgments) - math.log(before.judgments)
            )
            needed = int(math.ceil(math.exp(logn)))
            return needed, False, f"{what} at about {needed} judgments"
    usable = [p for p in points if p.balanced < 1]
    if len(usable) >= 2:
        sizes = np.log([p.judgments for p in usable])
        errors = np.log([1 - p.balanced for p in usable])
        slope, intercept = (float(v) for v in np.polyfit(sizes, errors, 1))
        if slope < -0.05:  # the error falls: error = e^intercept * n^slope
            needed = int(math.ceil(math.exp((math.log(1 - target) - intercept) / slope)))
            if needed <= EXTRAPOLATE_AT_MOST * points[-1].judgments:
                return (
                    needed,
                    True,
                    (
                        f"{what} at about {needed:,} judgments (extrapolated beyond "
                        f"{points[-1].judgments})"
                    ),
                )
    best = max(points, key=lambda p: p.balanced)
    return (
        None,
        False,
        (
            f"{what} not reached: {best.balanced:.2f} at {best.judgments} judgments, and the curve "
            "does not say when it would be"
        ),
    )


# -- asking the collection --------------------------------------------------------------------


@dataclass(frozen=True)
class Suggestion:
    """A photo the question answers yes, with its calibrated probability."""

    image_id: int
    probability: float


@dataclass(frozen=True)
class QuestionModel:
    """A question learnt from all its judged photos, checked, and calibrated."""

    question: AttributeQuestion
    labels: dict[int, int]
    validation: CrossValidation
    model: Probe
    calibration: PlattCalibration
    missing: int  # judged photos answering it that have no vector

    def probabilities(self, vectors: np.ndarray) -> np.ndarray:
        """Calibrated p(yes) of each row (unit vectors)."""
        return sigmoid(self.calibration.apply(self.model.logits(vectors)))

    def answers(self, vectors: np.ndarray) -> np.ndarray:
        """1 (yes) or 0 for each row, at the cut the cross-validation measured (`yes_threshold`)."""
        threshold = yes_threshold(np.asarray(list(self.labels.values())))
        out: np.ndarray = (self.model.logits(vectors) > threshold).astype(np.int64)
        return out


def learn_question(
    question: AttributeQuestion,
    image_ids: Sequence[int] | np.ndarray,
    vectors: np.ndarray,
    labels: Sequence[int] | np.ndarray,
    *,
    folds: int = FOLDS,
    seed: int = 0,
    missing: int = 0,
) -> QuestionModel:
    """Cross-validate the question on (image_ids, vectors, labels), then fit it on all of them
    with Platt's map from the held-out logits."""
    x = np.asarray(vectors, dtype=np.float64)
    x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    y = (np.asarray(labels).ravel() > 0).astype(np.int64)
    validation = cross_validate(x, y, folds=folds, seed=seed)
    model = fit_question(x, y)
    calibration = fit_calibration(validation.held_out_logits, y, validation.folds)
    ids = [int(i) for i in image_ids]
    return QuestionModel(
        question, dict(zip(ids, y.tolist(), strict=True)), validation, model, calibration, missing
    )


def rank_suggestions(
    learnt: QuestionModel,
    chunks: Iterable[tuple[np.ndarray, np.ndarray]],
    *,
    top: int,
    min_p: float = 0.0,
) -> tuple[list[Suggestion], int]:
    """The `top` photos most likely to answer yes among (ids, vectors) chunks, at least `min_p`,
    leaving out those already answered; and how many photos were scored."""
    best: list[tuple[float, int]] = []  # a min-heap of (probability, -id)
    scored = 0
    for ids, vectors in chunks:
        if not len(ids):
            continue
        x = np.asarray(vectors, dtype=np.float64)
        x /= np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
        probabilities = learnt.probabilities(x)
        for image_id, p in zip(ids.tolist(), probabilities.tolist(), strict=True):
            if image_id in learnt.labels:
                continue
            scored += 1
            if p < min_p:
                continue
            item = (p, -image_id)  # ties: the lower id first
            if len(best) < top:
                heapq.heappush(best, item)
            elif item > best[0]:
                heapq.heapreplace(best, item)
    ranked = sorted(best, reverse=True)
    return [Suggestion(-negative_id, p) for p, negative_id in ranked], scored


@dataclass(frozen=True)
class AttributeAnswers:
    """What asking a question of the collection gives: the check first, then the suggestions."""

    learnt: QuestionModel
    curve: LearningCurve | None
    suggestions: list[Suggestion]
    scored: int

    def to_json(self) -> dict[str, object]:
        return {
            "question": self.learnt.question.label,
            "cross_validation": self.learnt.validation.to_json(),
            "calibration": self.learnt.calibration.to_json(),
            "judged_without_vector": self.learnt.missing,
            "learning_curve": None if self.curve is None else self.curve.to_json(),
            "scored": self.scored,
            "suggestions": [
                {"image_id": s.image_id, "probability": round(s.probability, 4)}
                for s in self.suggestions
            ],
        }


def ask_collection(
    library: Library,
    query_id: int,
    question: AttributeQuestion,
    *,
    model_key: str | None = None,
    filters: SearchFilters | None = None,
    labels: Mapping[int, int] | None = None,
    top: int = 50,
    min_p: float = 0.0,
    curve: bool = True,
    target: float = TARGET_ACCURACY,
    on_checked: Callable[[QuestionModel], None] | None = None,
) -> AttributeAnswers:
    """Learn `question` from the query's judged photos (`labels` instead when given: image id
    -> 1 / 0), check it by cross-validation (`on_checked` hears it before the bulk run), then
    rank the collection's photos (those `filters` let through) by its calibrated probability.
    Vectors are the catalog's, of `model_key` (the library's model by default)."""
    key = model_key or library.model_key
    if key is None:
        raise BadInputError("the library has no indexed photos yet: index a folder first")
    if labels is None:
        # every answer a person gave counts, accepted suggestions on unjudged photos too
        answers = attributes_for_query(library, query_id, judged_only=False)
        labels = labels_from_attributes(answers, question)
    wanted = np.asarray(sorted(labels), dtype=np.int64)
    if not len(wanted):
        raise BadInputError(
            f"no photo of query {query_id} answers {question.sentence!r} "
            f"({question.label}): set it on some photos first"
        )
    ids, vectors = library.load_vectors(key, wanted)
    vectors = np.asarray(vectors, dtype=np.float64)
    vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    y = np.asarray([labels[int(i)] for i in ids], dtype=np.int64)
    learnt = learn_question(question, ids, vectors, y, missing=len(wanted) - len(ids))
    if on_checked is not None:
        on_checked(learnt)
    learning = learning_curve(vectors, y, target=target) if curve else None
    suggestions, scored = rank_suggestions(
        learnt, _collection_vectors(library, key, filters), top=top, min_p=min_p
    )
    return AttributeAnswers(learnt, learning, suggestions, scored)


def _collection_vectors(
    library: Library, model_key: str, filters: SearchFilters | None
) -> Iterable[tuple[np.ndarray, np.ndarray]]:
    """(ids, vectors) chunks of the photos asked: all, or those the filters let through."""
    if filters is None or not filters.active:
        yield from library.iter_vectors(model_key, _SCAN_CHUNK)
        return
    from engine.search.filters import filtered_ids

    allowed = filtered_ids(library.catalog, filters)
    for start in range(0, len(allowed), _SCAN_CHUNK):
        yield library.load_vectors(model_key, allowed[start : start + _SCAN_CHUNK])


def accept_suggestion(
    library: Library,
    query_id: int,
    image_id: int,
    question: AttributeQuestion,
    judge: str | None = None,
) -> AttributeChange:
    """The photo answers yes: its term takes the value (an attribute change, for undo).

    Kept with the photo for the query, judged or not; the next fit of the question learns
    from it like any answer a person gave."""
    return set_attributes(library, query_id, image_id, {question.term: question.value}, judge)


def reject_suggestion(
    library: Library,
    query_id: int,
    image_id: int,
    question: AttributeQuestion,
    judge: str | None = None,
) -> AttributeChange:
    """The photo answers no: its term records "not VALUE", a no the next fit learns from (kept
    as text outside the term's vocabulary, which an export flags, never refuses)."""
    values = {question.term: NEGATION + question.value}
    return set_attributes(library, query_id, image_id, values, judge)


def photo_paths(library: Library, image_ids: Sequence[int]) -> dict[int, str]:
    """image id -> the photo's path on this machine, for listing suggestions."""
    from sqlalchemy import select

    from engine.catalog import Collection, Image

    ids = [int(i) for i in image_ids]
    paths: dict[int, str] = {}
    with library.catalog.session() as s:
        for start in range(0, len(ids), 900):  # SQLite's variable limit
            stmt = (
                select(Image.id, Collection.root, Image.rel_path)
                .join(Collection, Collection.id == Image.collection_id)
                .where(Image.id.in_(ids[start : start + 900]))
            )
            for image_id, root, rel_path in s.execute(stmt):
                paths[image_id] = str(library.photo_root(root) / rel_path)
    return paths
