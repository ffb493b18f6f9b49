"""The offline scorer: CLIP answers a yes/no question through the library's own encoder.

A question is turned into a statement ("a photo of a red circle") and contrasted with a fixed
"other" statement ("a photo of something else"); the two cosine similarities, multiplied by the
model's logit scale, are the logits l_yes and l_no, and p = exp(l_yes) / (exp(l_yes) +
exp(l_no)), a two-way softmax: CLIP's own zero-shot classifier between "it" and "not it". A
negated statement ("a photo with no red circle") would be the obvious negative, but CLIP reads
negation poorly: on the demo collection it ranks the photos of a species by "is there a red
circle" at mAP 0.19, the "other" statement at 0.99. The region-aware variant also encodes a
grid of crops (2x2 quarters, 3x3 overlapping half-size crops) and answers a question that names
a `target` with the mean of the whole photo's logits and those of the crop that matches the
target best, so that a blue circle beside a red square does not look like a "red circle" (demo
binding questions: AP 0.87 whole, 0.99 regions). CLIP answers each question on its own.

Those p values are shown as the answers, but they do not rank: inside a candidate pool that
already shows the subject they saturate (0.98-1.00 for relevant and other photos alike), and
their mean replaced the base ranking with noise. `pool_scores` ranks instead: each question's
logit margin is standardised over the pool, a question whose margins do not split the pool in
two (Sarle's bimodality coefficient at most 5/9, the uniform distribution's) is left out, and
a question whose margins follow the base order (Spearman's rho at least 1/2) is left out as
well, and the rest, combined and standardised over the pool, are fused with the base rank's
normal score weighing as much as it, so a question moves the photos it separates and leaves
the others in base order.
"""

from __future__ import annotations

import logging
import math
import re
import threading
from collections.abc import Mapping, Sequence
from statistics import NormalDist
from typing import TYPE_CHECKING

import numpy as np
from PIL import Image

from engine.errors import BadImageError, BadInputError
from engine.rerank.answering import check_lengths, open_photo
from engine.rerank.base import AGGREGATIONS, Answer, Photo, Question, yes_probability

if TYPE_CHECKING:
    from engine.models.encoders import Encoder
    from engine.progress import CancelToken

log = logging.getLogger(__name__)

# What "clip" means: "regions" (measured better on the demo's binding questions; see
# docs/BENCHMARKS.md, "Rerank scorers") or "whole".
DEFAULT_CLIP_VARIANT = "regions"

_QUESTION_LEADS = re.compile(
    r"^(?:(?:does|do|did)\s+(?:this|the)\s+(?:image|photo|picture|photograph)\s+"
    r"(?:show|contain|depict|have|include)s?|"
    r"(?:is|are)\s+there|is\s+(?:this|it)|are\s+(?:these|they)|"
    r"(?:can|do)\s+you\s+see|(?:is|are))\s+",
    re.IGNORECASE,
)
_QUESTION_TAILS = re.compile(
    r"\s+(?:in|on)\s+(?:this|the)\s+(?:image|photo|picture|photograph)\s*$", re.IGNORECASE
)


def question_statement(question: Question) -> str:
    """The words a CLIP scorer encodes for `question`: its target when it names one, else the
    question with its yes/no frame taken off ("Does this image show two frogs?" -> "two frogs")."""
    if question.target.strip():
        return " ".join(question.target.split())
    text = " ".join(question.text.split()).rstrip("?.! ")
    text = _QUESTION_LEADS.sub("", text, count=1)
    text = _QUESTION_TAILS.sub("", text)
    return text.strip() or " ".join(question.text.split())


def crop_boxes(width: int, height: int) -> list[tuple[int, int, int, int]]:
    """The regions a region-aware CLIP scorer looks at, as (left, top, right, bottom): the
    whole photo, its four quarters, and nine half-size crops on a quarter-size stride (so an
    object on a quarter's border still lies whole inside some crop)."""
    boxes = [(0, 0, width, height)]
    for fx, fy in ((0, 0), (1, 0), (0, 1), (1, 1)):
        boxes.append(
            (fx * width // 2, fy * height // 2, (fx + 1) * width // 2, (fy + 1) * height // 2)
        )
    for fy in (0, 1, 2):
        for fx in (0, 1, 2):
            if (fx, fy) in ((0, 0), (2, 0), (0, 2), (2, 2)):
                continue  # the same crops as the quarters
            left, top = fx * width // 4, fy * height // 4
            boxes.append((left, top, left + width // 2, top + height // 2))
    return boxes


class ClipScorer:
    """p(yes) from the library's CLIP encoder: a two-way softmax, at the model's logit scale,
    between the question's statement ("a photo of {statement}") and the "other" statement
    ("a photo of something else"). With `regions`, a question naming a target is answered
    with the mean of the whole photo's logits and the best-matching crop's (`crop_boxes`);
    whole-scene questions on the whole photo.

    Photo vectors (each photo's crops, batched) are encoded once per scorer and kept in memory
    by content hash, so later questions of a run cost only a text encoding.
    """

    POSITIVE = "a photo of {statement}"
    NEGATIVE = "a photo of something else"

    def __init__(
        self,
        encoder: Encoder,
        *,
        regions: bool = DEFAULT_CLIP_VARIANT == "regions",
        batch_size: int = 64,
        logit_scale: float | None = None,
    ) -> None:
        self.encoder = encoder
        self.regions = regions
        self.batch_size = batch_size
        kind = "clip-regions" if regions else "clip"
        self.identity = f"{kind}:{encoder.model_key}"
        self.logit_scale = logit_scale if logit_scale is not None else _logit_scale(encoder)
        # Measured on 2 CPU cores with the demo model, 3 questions (tests/bench/bench_scorers.py).
        self.seconds_per_call = 0.045 if regions else 0.012
        self._photo_vectors: dict[str, np.ndarray] = {}  # content hash -> (crops, dim)
        self._text_vectors: dict[str, np.ndarray] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"ClipScorer({self.identity!r})"

    def _texts(self, texts: Sequence[str]) -> np.ndarray:
        missing = [t for t in dict.fromkeys(texts) if t not in self._text_vectors]
        if missing:
            for text, vector in zip(missing, self.encoder.encode_texts(missing), strict=True):
                self._text_vectors[text] = vector
        return np.stack([self._text_vectors[t] for t in texts])

    def _crops(self, image: Image.Image) -> list[Image.Image]:
        if not self.regions:
            return [image]
        return [image.crop(box) for box in crop_boxes(*image.size)]

    def photo_vectors(self, photos: Sequence[Photo], cancel: CancelToken | None = None) -> None:
        """Encode the photos not seen yet (all their crops, in batches of `batch_size`)."""
        pending: list[tuple[str, int]] = []  # (content hash, number of crops)
        crops: list[Image.Image] = []

        def flush() -> None:
            if not crops:
                return
            vectors = self.encoder.encode_images(crops)
            start = 0
            for key, n in pending:
                self._photo_vectors[key] = vectors[start : start + n]
                start += n
            pending.clear()
            crops.clear()

        for photo in photos:
            key = photo.content_hash
            if key in self._photo_vectors or any(key == k for k, _ in pending):
                continue
            if cancel is not None:
                cancel.check()
            try:
                image = open_photo(photo, min_side=_encoder_side(self.encoder))
            except BadImageError as error:
                log.info("rerank: %s: %s", photo.path, error)
                continue
            parts = self._crops(image)
            pending.append((key, len(parts)))
            crops.extend(parts)
            if len(crops) >= self.batch_size:
                flush()
        flush()

    def score(
        self,
        photos: Sequence[Photo],
        question: Question,
        *,
        history: Sequence[Sequence[tuple[Question, Answer]]] = (),
        context: str = "",
        cancel: CancelToken | None = None,
    ) -> list[Answer]:
        """One answer per photo. CLIP sees neither the history nor the context (it cannot
        read a conversation); they are accepted for the protocol's sake."""
        check_lengths(photos, history)
        with self._lock:  # one encoder, one cache: a scorer is used by one run at a time
            self.photo_vectors(photos, cancel)
            statement = question_statement(question)
            texts = self._texts([self.POSITIVE.format(statement=statement), self.NEGATIVE])
        answers: list[Answer] = []
        use_regions = self.regions and bool(question.target.strip())
        for photo in photos:
            vectors = self._photo_vectors.get(photo.content_hash)
            if vectors is None:
                answers.append(Answer(0.0, "unreadable photo"))
                continue
            logits = self.logit_scale * (vectors @ texts.T)  # (crops, 2); crop 0 = whole
            l_yes, l_no = float(logits[0, 0]), float(logits[0, 1])
            where = ""
            if use_regions and len(logits) > 1:
                # Half the whole photo's logits, half the best crop's: the best crop alone
                # binds colour to shape but lets background clutter answer species questions
                # (demo, species mAP 0.99 -> 0.77); the blend keeps both (docs/BENCHMARKS.md).
                best = 1 + int(np.argmax(logits[1:, 0] - logits[1:, 1]))
                l_yes = 0.5 * (l_yes + float(logits[best, 0]))
                l_no = 0.5 * (l_no + float(logits[best, 1]))
                where = f" (region {best})"
            p = yes_probability(l_yes, l_no)
            answers.append(Answer(p, ("yes" if p >= 0.5 else "no") + where, l_yes, l_no))
        return answers

    def pool_scores(
        self,
        answers: Mapping[int, Sequence[Answer]],
        base_rank: Mapping[int, int],
        how: str = "mean",
    ) -> dict[int, float]:
        """The rerank score of each photo of a pool from its answers (see `pool_scores`)."""
        return pool_scores(answers, base_rank, how)


# A pool's margins split in two when their bimodality coefficient exceeds the uniform
# distribution's (5/9, the usual cut: a normal sample gives about 1/3).
BIMODAL = 5 / 9
# Why the base rank is not outvoted. The base ranked the whole collection and is the stronger
# signal; a question is evidence about one attribute, read by the same CLIP, and worth adding
# only for what the base does not already know.
# - A question whose margins follow the base order (Spearman's rho with the base at least 1/2,
#   Cohen's "large" correlation, so that the base explains a quarter or more of its rank
#   variance) re-measures what the base measured -- a subject question is nearly the query's
#   own CLIP similarity -- and is left out. A question that goes against the base is kept:
#   that is disagreement, not repetition.
# - A kept question is read as a condition, present or absent, never as a grade. CLIP's
#   zero-shot strength is telling whether a thing is in a photo; among photos that all show
#   it, its margin prefers one large plain subject, which is not what a count, size or
#   background query asks (docs/BENCHMARKS.md, the rules measured before this one). So each
#   kept question splits the pool in two at Otsu's threshold (the cut between its two modes
#   that maximises the between-group variance), and the pool is ordered by how many
#   conditions a photo fails, then by its base rank: the base keeps the order among photos
#   the questions cannot tell apart.
# Both were fixed before measuring (docs/BENCHMARKS.md, "Structured reranking").
REDUNDANT = 0.5
_NORMAL = NormalDist()


def bimodality(values: Sequence[float]) -> float:
    """Sarle's bimodality coefficient (g1^2 + 1) / (g2 + 3(n-1)^2 / ((n-2)(n-3))), with the
    sample-corrected skewness g1 and excess kurtosis g2; 0 for fewer than 4 values or none
    spread. High for two groups, or a few photos set apart from the rest (skew)."""
    x = np.asarray(values, dtype=np.float64)
    n = len(x)
    if n < 4:
        return 0.0
    d = x - x.mean()
    m2 = float(np.mean(d**2))
    if not m2 > 1e-12 * max(1.0, float(np.mean(x**2))):
        return 0.0
    g1 = float(np.mean(d**3)) / math.pow(m2, 1.5)
    g2 = float(np.mean(d**4)) / (m2 * m2) - 3.0
    skew = g1 * math.sqrt(n * (n - 1)) / (n - 2)
    kurtosis = ((n + 1) * g2 + 6.0) * (n - 1) / ((n - 2) * (n - 3))
    return (skew * skew + 1.0) / (kurtosis + 3.0 * (n - 1) ** 2 / ((n - 2) * (n - 3)))


def _ranks(values: Sequence[float]) -> np.ndarray:
    """Ranks 1..n of `values`, ties sharing their mean rank."""
    x = np.asarray(values, dtype=np.float64)
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x), dtype=np.float64)
    ranks[order] = np.arange(1, len(x) + 1, dtype=np.float64)
    for value in np.unique(x):
        tied = x == value
        if tied.sum() > 1:
            ranks[tied] = ranks[tied].mean()
    return ranks


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's rank correlation of `a` and `b` (ties at their mean rank); 0 for fewer than
    3 values or when either is constant."""
    if len(a) != len(b) or len(a) < 3:
        return 0.0
    ra, rb = _ranks(a) - (len(a) + 1) / 2, _ranks(b) - (len(b) + 1) / 2
    norm = math.sqrt(float(ra @ ra) * float(rb @ rb))
    return float(ra @ rb) / norm if norm > 0 else 0.0


def _margin(answer: Answer) -> float | None:
    """l_yes - l_no, the one number a CLIP answer carries (p is its logistic); None for a
    photo that could not be read."""
    if answer.l_yes is None or answer.l_no is None:
        return None
    margin = float(answer.l_yes) - float(answer.l_no)
    return margin if math.isfinite(margin) else None


def otsu_threshold(values: Sequence[float]) -> float:
    """The cut that splits `values` into the two groups with the largest between-group
    variance (Otsu's criterion, exact over every cut between sorted values): a value above it
    is in the upper group. Halfway between the two values on either side of the best cut."""
    x = np.sort(np.asarray(values, dtype=np.float64))
    n = len(x)
    if n < 2 or x[0] == x[-1]:
        return float(x[0]) if n else 0.0
    below = np.cumsum(x)[:-1]  # sum of the lower group for a cut after position j
    count = np.arange(1, n, dtype=np.float64)
    total = float(x.sum())
    mean_low = below / count
    mean_high = (total - below) / (n - count)
    between = count * (n - count) * (mean_low - mean_high) ** 2
    between[x[:-1] == x[1:]] = -1.0  # a cut must fall between two different values
    j = int(np.argmax(between))
    return float(0.5 * (x[j] + x[j + 1]))


def pool_scores(
    answers: Mapping[int, Sequence[Answer]],
    base_rank: Mapping[int, int],
    how: str = "mean",
) -> dict[int, float]:
    """Each photo's rerank score in (0, 1) from its answers, relative to the pool `answers`
    holds (every photo with all its answers, in question order) and its base rank (1 = first).

    - a question is kept when its margins l_yes - l_no split the pool (`bimodality` above
      5/9) and do not follow the base order (`spearman` with the base's normal scores below
      1/2: the base's own evidence again);
    - a kept question is a condition: a photo fails it when its margin is below the
      question's `otsu_threshold`; an unreadable photo fails half of it (no evidence, so
      between the photos that pass and those that fail);
    - the photos are ordered by the conditions failed, counted by `how`: "mean" (how many),
      "min" or "product" (whether any, as the minimum or product of pass/fail would), then by
      base rank. The score is (2(k - f) + 1 - (r - 1/2)/n) / (2k + 1) for f failed of k kept
      questions at base rank r of n: with none kept, the base order.
    """
    if how not in AGGREGATIONS:
        raise BadInputError(f"unknown aggregation {how!r}; choose one of {', '.join(AGGREGATIONS)}")
    ids = sorted(answers, key=lambda i: base_rank[i])
    n = len(ids)
    if n == 0:
        return {}
    base = {i: _NORMAL.inv_cdf(1.0 - (r - 0.5) / n) for r, i in enumerate(ids, 1)}
    width = min(len(answers[i]) for i in ids)
    failed = dict.fromkeys(ids, 0.0)
    k = 0
    for q in range(width):
        margins = {i: m for i in ids if (m := _margin(answers[i][q])) is not None}
        if bimodality(list(margins.values())) <= BIMODAL:
            continue  # every photo of the pool gets the same kind of answer: no evidence
        if spearman(list(margins.values()), [base[i] for i in margins]) >= REDUNDANT:
            continue  # the base order again: nothing the base does not know (see REDUNDANT)
        cut = otsu_threshold(list(margins.values()))
        k += 1
        for i in ids:
            margin = margins.get(i)
            # No margin, no evidence: half a failure, between the photos that pass and fail.
            failed[i] += 0.5 if margin is None else float(margin < cut)
    levels = k if how == "mean" else min(k, 1)
    if how != "mean":
        failed = {i: min(f, 1.0) for i, f in failed.items()}
    # Failures come in halves (an unreadable photo's), so the levels are counted in halves and
    # the base rank's share, in (0, 1), only orders photos within one level.
    return {
        i: (2.0 * (levels - failed[i]) + 1.0 - (r - 0.5) / n) / (2 * levels + 1)
        for r, i in enumerate(ids, 1)
    }


def _logit_scale(encoder: Encoder) -> float:
    """The model's own softmax temperature (CLIP learns it: 100 for the released models)."""
    model = getattr(encoder, "model", None)
    scale = getattr(model, "logit_scale", None)
    if scale is None:
        return 100.0
    try:
        value = float(scale.detach().exp().item()) if hasattr(scale, "detach") else float(scale)
    except (TypeError, ValueError):
        return 100.0
    return value if math.isfinite(value) and value > 0 else 100.0


def _encoder_side(encoder: Encoder) -> int | None:
    # Crops are half the photo's side: decode large JPEGs at twice the model's input size.
    side = getattr(encoder, "image_size", None)
    return 2 * int(side) if isinstance(side, int) else None
