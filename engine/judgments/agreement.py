"""How far judges agree on a query's photos: raw agreement, Cohen's kappa (two judges), Fleiss'
kappa and Krippendorff's alpha (any number, missing values allowed), each with a bootstrap
interval over the photos, and the confusion table of every pair of judges. The same statistics
measure agreement on a Darwin Core attribute (lifeStage, sex, ...): the categories are then the
values judges gave (nominal), each judge's newest value per photo from `attribute_events`.

Each judge's judgment of a photo is their newest act in `judgment_events` (a cleared judgment
is no judgment). A photo counts towards agreement when at least two judges judged it.
A statistic is None where it is undefined: every judgment in one class leaves no expected
disagreement to compare with (raw agreement still says how often judges agreed).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from sqlalchemy import select

from engine.catalog import JudgmentEvent
from engine.catalog.library import Library
from engine.catalog.models import AttributeEvent

LEVEL = 0.95
RESAMPLES = 1000

# A relevance grade, or an attribute's value (nominal either way).
Category = int | str
# photo id -> judge -> category
Ratings = Mapping[int, Mapping[str, Category]]


def judge_ratings(library: Library, query_id: int) -> dict[int, dict[str, int]]:
    """Each judge's newest judgment of each photo of a query (a cleared one removes it;
    adjudications are no judge's mark and are left out)."""
    with library.catalog.session() as s:
        rows = s.execute(
            select(JudgmentEvent.image_id, JudgmentEvent.judged_by, JudgmentEvent.relevance)
            .where(JudgmentEvent.query_id == query_id, JudgmentEvent.kind == "judgment")
            .order_by(JudgmentEvent.id)
        ).all()
    ratings: dict[int, dict[str, int]] = {}
    for image_id, judge, relevance in rows:
        marks = ratings.setdefault(int(image_id), {})
        name = judge or "unknown"
        if relevance is None:
            marks.pop(name, None)
        else:
            marks[name] = int(relevance)
    return {image_id: marks for image_id, marks in ratings.items() if marks}


def attribute_ratings(library: Library, query_id: int, term: str) -> dict[int, dict[str, str]]:
    """Each judge's newest value of a Darwin Core term on each photo of a query, from the
    attribute events (a cleared value is no value)."""
    return attribute_ratings_by_term(library, query_id, (term,)).get(term, {})


def attribute_ratings_by_term(
    library: Library, query_id: int, terms: Sequence[str] | None = None
) -> dict[str, dict[int, dict[str, str]]]:
    """term -> photo -> judge -> newest value, for `terms` (all terms with a value: None)."""
    stmt = (
        select(AttributeEvent.term, AttributeEvent.image_id, AttributeEvent.changed_by,
               AttributeEvent.value)
        .where(AttributeEvent.query_id == query_id)
        .order_by(AttributeEvent.id)
    )  # fmt: skip
    if terms is not None:
        stmt = stmt.where(AttributeEvent.term.in_(list(terms)))
    with library.catalog.session() as s:
        rows = s.execute(stmt).all()
    by_term: dict[str, dict[int, dict[str, str]]] = {}
    for term, image_id, judge, value in rows:
        marks = by_term.setdefault(term, {}).setdefault(int(image_id), {})
        name = judge or "unknown"
        if value is None or not str(value).strip():
            marks.pop(name, None)
        else:
            marks[name] = str(value)
    return {
        term: {image_id: marks for image_id, marks in photos.items() if marks}
        for term, photos in by_term.items()
    }


def attribute_agreements(
    library: Library, query_id: int, *, resamples: int = RESAMPLES
) -> dict[str, Agreement]:
    """term -> agreement, for every term of which some photo has two judges' values."""
    out: dict[str, Agreement] = {}
    for term, ratings in attribute_ratings_by_term(library, query_id).items():
        if any(len(marks) >= 2 for marks in ratings.values()):
            out[term] = measure_agreement(ratings, resamples=resamples, seed=query_id)
    return dict(sorted(out.items()))


def _counts(ratings: Ratings, categories: Sequence[Category]) -> np.ndarray:
    """Photos judged by two or more judges × categories: how many judges chose each."""
    column = {c: j for j, c in enumerate(categories)}
    rows = []
    for marks in ratings.values():
        if len(marks) < 2:
            continue
        row = np.zeros(len(categories))
        for value in marks.values():
            row[column[value]] += 1
        rows.append(row)
    if not rows:  # (numpy cannot reshape nothing into no columns)
        return np.zeros((0, len(categories)))
    return np.asarray(rows).reshape(-1, len(categories))


def _pairable(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows of a units × categories table whose unit has two judgments or more (a pair to
    compare), and each one's number of judgments."""
    counts = np.asarray(counts, dtype=float)
    per_unit = counts.sum(axis=1)
    keep = per_unit >= 2
    return counts[keep], per_unit[keep]


def fleiss_kappa(counts: np.ndarray) -> float | None:
    """Fleiss' kappa from a units × categories table of counts; units may have different
    numbers of judges (each needs two), the observed agreement being each unit's share of
    agreeing pairs. None when every judgment is in one category."""
    counts, per_unit = _pairable(counts)
    if len(counts) == 0:
        return None
    observed = float(np.mean(((counts**2).sum(axis=1) - per_unit) / (per_unit * (per_unit - 1))))
    shares = counts.sum(axis=0) / per_unit.sum()
    expected = float((shares**2).sum())
    if expected >= 1.0 - 1e-12:
        return None
    return (observed - expected) / (1.0 - expected)


def krippendorff_alpha(counts: np.ndarray) -> float | None:
    """Krippendorff's alpha for nominal data from a units × categories table of counts
    (missing judgments are simply not counted; units with one value are not pairable).
    alpha = 1 - (n - 1) * sum(off-diagonal coincidences) / sum over c != k of n_c * n_k."""
    counts, per_unit = _pairable(counts)
    if len(counts) == 0:
        return None
    disagreeing = float(np.sum((per_unit**2 - (counts**2).sum(axis=1)) / (per_unit - 1)))
    totals = counts.sum(axis=0)
    n = float(totals.sum())
    expected_pairs = n * n - float((totals**2).sum())
    if expected_pairs <= 0:
        return None
    return 1.0 - (n - 1.0) * disagreeing / expected_pairs


def cohen_kappa(
    first: Sequence[Category] | np.ndarray, second: Sequence[Category] | np.ndarray
) -> float | None:
    """Cohen's kappa of two judges' judgments of the same photos, in the same order."""
    a, b = np.asarray(first), np.asarray(second)
    if len(a) != len(b):
        raise ValueError("the two judges' lists differ in length")
    if len(a) == 0:
        return None
    observed = float(np.mean(a == b))
    categories = np.union1d(a, b)
    expected = float(sum(np.mean(a == c) * np.mean(b == c) for c in categories))
    if expected >= 1.0 - 1e-12:
        return None
    return (observed - expected) / (1.0 - expected)


def raw_agreement(counts: np.ndarray) -> float | None:
    """The share of agreeing pairs of judgments, over photos judged at least twice."""
    counts = np.asarray(counts, dtype=float)
    per_unit = counts.sum(axis=1)
    pairs = per_unit * (per_unit - 1) / 2
    if pairs.sum() == 0:
        return None
    agreeing = (counts * (counts - 1) / 2).sum(axis=1)
    return float(agreeing.sum() / pairs.sum())


@dataclass(frozen=True)
class Statistic:
    """A statistic with its bootstrap interval (None where undefined)."""

    value: float | None
    low: float | None = None
    high: float | None = None

    def text(self) -> str:
        if self.value is None:
            return "undefined"
        if self.low is None or self.high is None:
            return f"{self.value:.3f}"
        return f"{self.value:.3f} ({self.low:.3f} to {self.high:.3f})"

    def to_json(self) -> dict[str, float | None]:
        return {"value": _round(self.value), "low": _round(self.low), "high": _round(self.high)}


@dataclass(frozen=True)
class PairTable:
    """Two judges' confusion table over the photos both judged: rows the first judge's
    category, columns the second's, in `categories` order."""

    first: str
    second: str
    categories: tuple[Category, ...]
    table: tuple[tuple[int, ...], ...]
    kappa: Statistic

    @property
    def photos(self) -> int:
        return sum(sum(row) for row in self.table)

    def to_json(self) -> dict[str, object]:
        return {
            "judges": [self.first, self.second],
            "categories": list(self.categories),
            "table": [list(row) for row in self.table],
            "photos": self.photos,
            "cohen_kappa": self.kappa.to_json(),
        }


@dataclass(frozen=True)
class Agreement:
    judges: tuple[str, ...]
    photos: int  # judged by two judges or more
    judgments: int  # on those photos
    raw: Statistic
    fleiss_kappa: Statistic
    krippendorff_alpha: Statistic
    pairs: list[PairTable] = field(default_factory=list)
    level: float = LEVEL
    note: str = ""

    def one_line(self) -> str:
        """The gist: photos, judges, raw agreement and alpha."""
        if self.photos == 0:
            return self.note
        return (
            f"{self.photos} photos by {len(self.judges)} judges: raw agreement "
            f"{self.raw.text()}, Krippendorff's alpha {self.krippendorff_alpha.text()}"
        )

    def summary_lines(self) -> list[str]:
        if self.photos == 0:
            return [self.note]
        percent = round(self.level * 100)
        lines = [
            f"{self.photos} photos judged by two or more of {len(self.judges)} judges "
            f"({', '.join(self.judges)}); intervals {percent} % bootstrap over photos",
            f"raw agreement        {self.raw.text()}",
            f"Fleiss' kappa        {self.fleiss_kappa.text()}",
            f"Krippendorff's alpha {self.krippendorff_alpha.text()}",
        ]
        for pair in self.pairs:
            lines.append(
                f"{pair.first} / {pair.second}: {pair.photos} photos, Cohen's kappa "
                f"{pair.kappa.text()}"
            )
            header = "".join(f"{str(c)[:7]:>8}" for c in pair.categories)
            lines.append(f"    {pair.first[:10]:>10} \\ {pair.second[:10]:<10}{header}")
            for category, row in zip(pair.categories, pair.table, strict=True):
                lines.append(f"    {str(category)[:23]:>23}" + "".join(f"{v:>8}" for v in row))
        if self.note:
            lines.append(self.note)
        return lines

    def to_json(self) -> dict[str, object]:
        return {
            "judges": list(self.judges),
            "photos": self.photos,
            "judgments": self.judgments,
            "level": self.level,
            "raw_agreement": self.raw.to_json(),
            "fleiss_kappa": self.fleiss_kappa.to_json(),
            "krippendorff_alpha": self.krippendorff_alpha.to_json(),
            "pairs": [pair.to_json() for pair in self.pairs],
            "note": self.note,
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _interval(values: list[float | None], level: float) -> tuple[float | None, float | None]:
    defined = np.asarray([v for v in values if v is not None], dtype=float)
    if len(defined) < len(values) * 0.5 or len(defined) == 0:
        return None, None  # mostly undefined resamples: no honest interval
    tail = (1.0 - level) / 2
    return float(np.quantile(defined, tail)), float(np.quantile(defined, 1 - tail))


def _with_interval(
    statistic: float | None,
    counts: np.ndarray,
    compute: Callable[[np.ndarray], float | None],
    draws: np.ndarray,
    level: float,
) -> Statistic:
    if statistic is None or len(counts) < 2:
        return Statistic(statistic)
    low, high = _interval([compute(counts[rows]) for rows in draws], level)
    return Statistic(statistic, low, high)


def _pair_table(
    ratings: Ratings, first: str, second: str, categories: Sequence[Category], level: float,
    resamples: int, seed: int,
) -> PairTable | None:  # fmt: skip
    both = [(m[first], m[second]) for m in ratings.values() if first in m and second in m]
    if not both:
        return None
    index = {c: i for i, c in enumerate(categories)}
    table = np.zeros((len(categories), len(categories)), dtype=int)
    for a, b in both:
        table[index[a], index[b]] += 1
    pairs = np.asarray(both)
    value = cohen_kappa(pairs[:, 0], pairs[:, 1])
    kappa = Statistic(value)
    if value is not None and len(pairs) >= 2:
        rng = np.random.default_rng([seed, 7])
        draws = rng.integers(0, len(pairs), size=(resamples, len(pairs)))
        low, high = _interval([cohen_kappa(pairs[d, 0], pairs[d, 1]) for d in draws], level)
        kappa = Statistic(value, low, high)
    return PairTable(
        first, second, tuple(categories), tuple(tuple(int(v) for v in row) for row in table), kappa
    )


def measure_agreement(
    ratings: Ratings, *, level: float = LEVEL, resamples: int = RESAMPLES, seed: int = 0
) -> Agreement:
    """Agreement among the judges of `ratings` (photo -> judge -> category). Intervals are
    percentile bootstraps over photos (`resamples` draws, seeded)."""
    judges = tuple(sorted({judge for marks in ratings.values() for judge in marks}))
    categories = sorted({value for marks in ratings.values() for value in marks.values()})
    counts = _counts(ratings, categories)
    photos = len(counts)
    if photos == 0:
        note = (
            "no photo is judged by two judges yet: agreement needs photos judged twice "
            f"({len(judges)} judge{'s' if len(judges) != 1 else ''} so far)"
        )
        empty = Statistic(None)
        return Agreement(judges, 0, 0, empty, empty, empty, [], level, note)
    rng = np.random.default_rng([seed, 3])
    draws = rng.integers(0, photos, size=(resamples, photos))
    raw = _with_interval(raw_agreement(counts), counts, raw_agreement, draws, level)
    fleiss = _with_interval(fleiss_kappa(counts), counts, fleiss_kappa, draws, level)
    alpha = _with_interval(krippendorff_alpha(counts), counts, krippendorff_alpha, draws, level)
    pairs = [
        table
        for first, second in itertools.combinations(judges, 2)
        if (table := _pair_table(ratings, first, second, categories, level, resamples, seed))
    ]
    note = ""
    if fleiss.value is None:
        note = "every judgment is in one class: kappa and alpha are undefined (nothing to chance)"
    return Agreement(judges, photos, int(counts.sum()), raw, fleiss, alpha, pairs, level, note)
