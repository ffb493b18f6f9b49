"""The quality a Darwin Core export carries: how each record was decided relevant and how
likely it is to be so, and the package's precision and recall (docs/SPEC.md §4.1).

Only photos a person judged relevant are written (a calibrated suggestion never becomes a
record), so each record was decided one of four ways:
- **agreed**: two or more judges marked it relevant and none not;
- **adjudicated**: the judges disagreed and an adjudication settled it relevant;
- **judged**: one judge marked it;
- **disputed**: the judges disagree and no adjudication settled it (pre-flight warns).

p(relevant) of a record is the measured precision of the way it was decided. Agreed and
adjudicated records are the reference the measurement uses, so they count as relevant (1). A
record judged by one judge gets the precision of one judge's "relevant" measured on the blind
double-judging sample (`engine/judgments/adjudication.py`): of the relevant marks judges gave
to sampled photos that have a reference answer (the judges agree, or an adjudication settled
it), the share that the reference confirms, with Wilson's 95 % interval. Without a sample that
holds such marks it is unmeasured (no number is written). A disputed record counts as 0.5
(between 0 and 1 in the interval).

The package's precision is the mean of its records' p(relevant), its interval from the ends of
theirs. Recall is the query's certified recall where one was recorded (`quadrat certify`),
else said to be unmeasured.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select

from engine.catalog import Judgment, JudgmentEvent
from engine.catalog.library import Library
from engine.judgments.adjudication import certificates, double_judging_sample
from engine.judgments.agreement import judge_ratings
from engine.judgments.attribute_questions import wilson_interval
from engine.judgments.queries import ADJUDICATION

AGREED, ADJUDICATED, JUDGED, DISPUTED = "agreed", "adjudicated", "judged", "disputed"
LEVEL = 0.95


@dataclass(frozen=True)
class Measured:
    """A proportion with its interval (None: not measured) and the words behind it."""

    value: float | None
    low: float | None
    high: float | None
    basis: str

    def text(self) -> str:
        if self.value is None or self.low is None or self.high is None:
            return "unmeasured"
        return f"{self.value:.3f} ({round(LEVEL * 100)} % interval {self.low:.3f}-{self.high:.3f})"


@dataclass(frozen=True)
class RecordDecision:
    """How one record was decided relevant, by whom and when, and its p(relevant)."""

    image_id: int
    how: str  # AGREED, ADJUDICATED, JUDGED or DISPUTED
    relevant_by: tuple[str, ...]  # the judges whose newest mark is relevant
    not_relevant_by: tuple[str, ...]
    adjudicator: str | None
    decided_at: datetime | None
    p_relevant: Measured

    @property
    def determined_by(self) -> str:
        """Who decided, as Darwin Core lists agents: "Ada | Bob" (the adjudicator last)."""
        names = [*self.relevant_by, *([self.adjudicator] if self.adjudicator else [])]
        return " | ".join(dict.fromkeys(names))

    @property
    def method(self) -> str:
        """How it was decided, in words."""
        judges = len(self.relevant_by) + len(self.not_relevant_by)
        if self.how == ADJUDICATED:
            return (
                f"adjudicated relevant by {self.adjudicator} after {len(self.not_relevant_by)} "
                f"of {judges} judges marked it not relevant"
            )
        if self.how == AGREED:
            return f"judged relevant by {judges} of {judges} judges"
        if self.how == DISPUTED:
            return (
                f"judges disagree ({len(self.relevant_by)} relevant, "
                f"{len(self.not_relevant_by)} not relevant); not adjudicated"
            )
        return "judged relevant by one judge"

    def properties(self, query: str) -> dict[str, object]:
        """The record's quality as `dynamicProperties` holds it (the flat CSV)."""
        p = self.p_relevant
        return {
            "quadratQuery": query,
            "relevance": self.how,
            "relevanceDeterminedBy": self.determined_by,
            "relevanceDeterminedDate": _day(self.decided_at),
            "pRelevant": None if p.value is None else round(p.value, 4),
            "pRelevantInterval": (
                None if p.low is None or p.high is None else [round(p.low, 4), round(p.high, 4)]
            ),
        }


@dataclass(frozen=True)
class PackageQuality:
    """The decisions of every record, the judges' measured precision and the package's
    precision and recall."""

    decisions: dict[int, RecordDecision]
    single_judge: Measured
    precision: Measured
    recall: str

    def paragraphs(self, records: Sequence[int]) -> list[str]:
        """The EML quality control: one paragraph for precision, one for recall."""
        kept = [self.decisions[i] for i in records if i in self.decisions]
        counts = {
            how: sum(d.how == how for d in kept) for how in (AGREED, ADJUDICATED, JUDGED, DISPUTED)
        }
        precision = package_precision(kept)
        parts = []
        reference = counts[AGREED] + counts[ADJUDICATED]
        if reference:
            parts.append(
                f"{counts[AGREED]} agreed by two or more judges and {counts[ADJUDICATED]} "
                "adjudicated count as relevant (they are the reference)"
            )
        if counts[JUDGED]:
            parts.append(
                f"{counts[JUDGED]} judged by one judge count at one judge's measured "
                f"precision, {self.single_judge.text()}: {self.single_judge.basis}"
            )
        if counts[DISPUTED]:
            parts.append(
                f"{counts[DISPUTED]} that the judges disagree on, not adjudicated, count as 0.5 "
                "(0 to 1 in the interval)"
            )
        return [
            f"Precision of this package (the share of its {len(kept)} records that are "
            f"relevant): {precision.text()}. {'; '.join(parts) or 'No records'}. Each "
            "record's p(relevant) and how it was decided are in the measurement or fact "
            "extension.",
            f"Recall: {self.recall}.",
        ]


def _when(moment: object) -> datetime | None:
    return moment if isinstance(moment, datetime) else None


def _day(moment: datetime | None) -> str:
    return moment.date().isoformat() if moment is not None else ""


def package_precision(decisions: Sequence[RecordDecision]) -> Measured:
    """The mean p(relevant) of the records and its interval from the ends of theirs."""
    if not decisions:
        return Measured(None, None, None, "no records")
    value = low = high = 0.0
    for decision in decisions:
        p = decision.p_relevant
        if p.value is None or p.low is None or p.high is None:
            return Measured(None, None, None, "a record's p(relevant) is unmeasured")
        value += p.value
        low += p.low
        high += p.high
    n = len(decisions)
    return Measured(value / n, low / n, high / n, "mean of the records' p(relevant)")


def _reference(marks: dict[str, int], settled: int | None) -> int | None:
    """A photo's reference answer: its adjudication, else the judges' answer where two or more
    agree; None where they disagree unsettled, or only one judged."""
    if settled is not None:
        return int(settled > 0)
    answers = {int(v > 0) for v in marks.values()}
    return answers.pop() if len(marks) >= 2 and len(answers) == 1 else None


def single_judge_precision(
    ratings: dict[int, dict[str, int]], settled: dict[int, int], sample: Sequence[int]
) -> Measured:
    """The share of one judge's relevant marks on sampled photos that the reference confirms."""
    marks = confirmed = unsettled = 0
    for image_id in sample:
        photo = ratings.get(image_id, {})
        reference = _reference(photo, settled.get(image_id))
        relevant_marks = sum(v > 0 for v in photo.values())
        if reference is None:
            unsettled += relevant_marks if len(photo) >= 2 else 0
            continue
        marks += relevant_marks
        confirmed += relevant_marks if reference else 0
    if not sample:
        return Measured(None, None, None, "no photo of this query was offered for blind double "
                        "judging, which measures it")  # fmt: skip
    if not marks:
        return Measured(None, None, None, f"the {len(sample)} photos offered for blind double "
                        "judging hold no relevant mark with a reference answer yet")  # fmt: skip
    low, high = wilson_interval(confirmed, marks, LEVEL)
    left = (
        f"; {unsettled} marks on photos the judges disagree on, not adjudicated, left out"
        if unsettled
        else ""
    )
    return Measured(
        confirmed / marks,
        low,
        high,
        f"{confirmed} of {marks} relevant marks on the {len(sample)} photos offered for blind "
        f"double judging confirmed by the judges' agreement or an adjudication (Wilson "
        f"interval){left}",
    )


def package_quality(library: Library, query_id: int, records: Sequence[int]) -> PackageQuality:
    """How each of `records` (photos judged relevant) was decided, and what was measured."""
    ratings = judge_ratings(library, query_id)
    with library.catalog.session() as s:
        events = s.execute(
            select(JudgmentEvent.image_id, JudgmentEvent.relevance, JudgmentEvent.judged_by,
                   JudgmentEvent.judged_at)
            .where(JudgmentEvent.query_id == query_id, JudgmentEvent.kind == ADJUDICATION)
            .order_by(JudgmentEvent.id)
        ).all()  # fmt: skip
        newest: dict[int, tuple[str | None, datetime | None]] = {
            int(image_id): (by, at)
            for image_id, by, at in s.execute(
                select(Judgment.image_id, Judgment.judged_by, Judgment.judged_at).where(
                    Judgment.query_id == query_id
                )
            )
        }
    adjudication: dict[int, tuple[int, str | None, datetime | None]] = {}
    for image_id, relevance, settled_by, settled_at in events:
        if relevance is None:
            adjudication.pop(int(image_id), None)
        else:
            adjudication[int(image_id)] = (int(relevance), settled_by, settled_at)
    settled = {i: value for i, (value, _, _) in adjudication.items()}
    single = single_judge_precision(ratings, settled, double_judging_sample(library, query_id))
    one = Measured(1.0, 1.0, 1.0, "the reference")
    disputed = Measured(0.5, 0.0, 1.0, "the judges disagree")
    decisions: dict[int, RecordDecision] = {}
    for image_id in records:
        marks = ratings.get(image_id, {})
        yes = tuple(sorted(j for j, v in marks.items() if v > 0))
        no = tuple(sorted(j for j, v in marks.items() if v <= 0))
        by, judged_at = newest.get(image_id, (None, None))
        at = _when(judged_at)
        if image_id in adjudication:
            _, adjudicator, adjudicated_at = adjudication[image_id]
            at = _when(adjudicated_at)
            how, p = ADJUDICATED, one
        elif len(marks) >= 2 and not no:
            how, p, adjudicator = AGREED, one, None
        elif no:
            how, p, adjudicator = DISPUTED, disputed, None
        else:
            how, p, adjudicator = JUDGED, single, None
            yes = yes or ((by,) if by else ())
        decisions[image_id] = RecordDecision(image_id, how, yes, no, adjudicator, at, p)
    certified = certificates(library, [query_id]).get(query_id)
    recall = (
        f"{certified.text()}; recorded {certified.certified_at:%Y-%m-%d}"
        if certified is not None
        else "unmeasured: no certified recall was recorded for this query ('quadrat certify' "
        "measures one)"
    )
    return PackageQuality(decisions, single, package_precision(list(decisions.values())), recall)
