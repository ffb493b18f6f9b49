"""Several judges on one query: whose judgments count, blind double judging, adjudication and
the record of a certified recall.

- **Views of the judgments** (`judgment_view`): "newest" (the newest judgment of each photo, an
  adjudicated one where there is one: what `judgments` holds, the default), one judge's own,
  "majority" (each photo's most frequent judgment among its judges, each judge's newest
  counting once; a tie goes to the newest judgment of the photo; an adjudication wins over
  any majority), and "adjudicated" (only the photos adjudicated).
- **Blind double judging**: `offer_double_judging` puts a sample of a query's judged photos
  (a number of them, or all judged so far) into `double_judging`, the same for every process on
  a shared catalog; a second judge opens it with a blind `QueryStore`, seeing their own marks
  only (`own_judgments`).
- **Adjudication**: `disagreements` lists the photos the judges disagree on, each judge's mark
  and note (their newest `occurrenceRemarks`) side by side; `adjudicate` records the settling
  judgment as an event of kind "adjudication", which then counts in metrics and exports.
- **Certificates**: `record_certificate` keeps a certified recall (target, confidence,
  judgments spent, rule) with its query; `certificates` reads them back for exports.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from engine.catalog.library import Library
from engine.catalog.models import (
    AttributeEvent,
    DoubleJudging,
    Judgment,
    JudgmentEvent,
    RecallCertificate,
    utcnow,
)
from engine.errors import BadInputError
from engine.judgments.agreement import judge_ratings
from engine.judgments.certified_recall import Certification
from engine.judgments.queries import (
    ADJUDICATION,
    JUDGMENT,
    JudgmentChange,
    QueryStore,
    own_judgments,
)

NEWEST = "newest"
MAJORITY = "majority"
ADJUDICATED = "adjudicated"
VIEWS = (NEWEST, MAJORITY, ADJUDICATED)
NOTE_TERM = "occurrenceRemarks"  # a judge's note on a photo: their newest remark


@dataclass(frozen=True)
class JudgmentView:
    """A query's judgments as one view sees them, with the words that say which."""

    view: str  # NEWEST, MAJORITY, ADJUDICATED, or a judge's name
    judgments: dict[int, int]
    adjudicated: int  # photos whose judgment here is an adjudicated one

    @property
    def label(self) -> str:
        """What the metrics panel and exports say about the judgments they use."""
        if self.view == NEWEST:
            text = "newest per photo"
        elif self.view == MAJORITY:
            text = "judges' majority"
        elif self.view == ADJUDICATED:
            return f"adjudicated only ({_photos(self.adjudicated)})"
        else:
            return f"{self.view}'s judgments"
        if self.adjudicated:
            text += f", {self.adjudicated} adjudicated"
        return text


def _photos(count: int) -> str:
    return f"{count} photo{'s' * (count != 1)}"


def adjudications(library: Library, query_id: int) -> dict[int, int]:
    """image id -> the adjudicated judgment of each settled photo (the newest adjudication;
    a cleared one settles nothing)."""
    with library.catalog.session() as s:
        rows = s.execute(
            select(JudgmentEvent.image_id, JudgmentEvent.relevance)
            .where(JudgmentEvent.query_id == query_id, JudgmentEvent.kind == ADJUDICATION)
            .order_by(JudgmentEvent.id)
        ).all()
    settled: dict[int, int | None] = {}
    for image_id, relevance in rows:
        settled[int(image_id)] = relevance
    return {image_id: int(v) for image_id, v in settled.items() if v is not None}


def adjudicated_photos(s: Session, query_ids: Iterable[int]) -> set[tuple[int, int]]:
    """(query id, photo) of every photo an adjudication settles, read in the caller's
    transaction (an import keeps them as they are in `judgments`)."""
    wanted = list(query_ids)
    if not wanted:
        return set()
    rows = s.execute(
        select(JudgmentEvent.query_id, JudgmentEvent.image_id, JudgmentEvent.relevance)
        .where(JudgmentEvent.query_id.in_(wanted), JudgmentEvent.kind == ADJUDICATION)
        .order_by(JudgmentEvent.id)
    ).all()
    newest: dict[tuple[int, int], int | None] = {}
    for query_id, image_id, relevance in rows:
        newest[(int(query_id), int(image_id))] = relevance
    return {key for key, relevance in newest.items() if relevance is not None}


def judges_of(library: Library, query_id: int) -> list[str]:
    """Every judge who judged a photo of the query, by name."""
    with library.catalog.session() as s:
        names = s.scalars(
            select(JudgmentEvent.judged_by)
            .where(JudgmentEvent.query_id == query_id, JudgmentEvent.kind == JUDGMENT)
            .distinct()
        ).all()
    return sorted({name or "unknown" for name in names})


def judgment_view(library: Library, query_id: int, view: str = NEWEST) -> JudgmentView:
    """The judgments of a query as `view` sees them (module docstring)."""
    settled = adjudications(library, query_id)
    if view == ADJUDICATED:
        return JudgmentView(view, dict(settled), len(settled))
    if view == NEWEST:
        return JudgmentView(view, QueryStore(library, user="-").judgments(query_id), len(settled))
    if view == MAJORITY:
        newest = QueryStore(library, user="-").judgments(query_id)
        marks = majority(judge_ratings(library, query_id), newest)
        marks.update(settled)
        return JudgmentView(view, marks, len(settled))
    if view not in judges_of(library, query_id):
        raise BadInputError(f"no judge named {view!r} judged this query")
    return JudgmentView(view, own_judgments(library, query_id, view), 0)


def majority(ratings: dict[int, dict[str, int]], newest: dict[int, int]) -> dict[int, int]:
    """Each photo's most frequent judgment among its judges; a tie takes the photo's newest
    judgment (`newest`) when it is one of the tied, else the lowest tied grade (not relevant
    before relevant: a tie is no evidence of relevance)."""
    out: dict[int, int] = {}
    for image_id, marks in ratings.items():
        counts = Counter(marks.values())
        top = max(counts.values())
        tied = sorted(value for value, count in counts.items() if count == top)
        latest = newest.get(image_id)
        out[image_id] = latest if len(tied) > 1 and latest in tied else tied[0]
    return out


# -- blind double judging -----------------------------------------------------------------------


# The first half of the key `offer_double_judging` serializes on ("DJSG"), the query id the other.
_DOUBLE_JUDGING_LOCK = 0x444A5347


def offer_double_judging(
    library: Library, query_id: int, size: int | None, by: str, *, seed: int | None = None
) -> list[int]:
    """Offer a sample of the query's judged photos to a second judge: `size` of them drawn at
    random (seeded by the query id), or all judged so far (None); photos already offered stay.
    Returns the whole sample, in its stored order."""
    if size is not None and size < 1:
        raise BadInputError("the sample needs at least one photo")
    with library.catalog.session() as s:
        # Two judges offering at once (two processes): the second waits, then reads the
        # first's sample and adds nothing it already holds (no duplicate row to fail on).
        library.catalog.serialize(s, (_DOUBLE_JUDGING_LOCK, query_id))
        judged = sorted(
            s.scalars(select(Judgment.image_id).where(Judgment.query_id == query_id)).all()
        )
        offered = set(
            s.scalars(select(DoubleJudging.image_id).where(DoubleJudging.query_id == query_id))
        )
        fresh = [i for i in judged if i not in offered]
        if size is not None:
            rng = np.random.default_rng([query_id if seed is None else seed, 17])
            wanted = max(0, size - len(offered))
            picked = rng.permutation(len(fresh))[:wanted]
            fresh = [fresh[int(i)] for i in sorted(picked)]
        if not fresh and not offered:
            raise BadInputError("judge a few photos of this query first: none is judged yet")
        now = utcnow()
        s.add_all(
            DoubleJudging(query_id=query_id, image_id=i, offered_by=by, offered_at=now)
            for i in fresh
        )
    return double_judging_sample(library, query_id)


def double_judging_sample(library: Library, query_id: int) -> list[int]:
    """The photos of a query offered for blind double judging (empty: none)."""
    with library.catalog.session() as s:
        return list(
            s.scalars(
                select(DoubleJudging.image_id)
                .where(DoubleJudging.query_id == query_id)
                .order_by(DoubleJudging.offered_at, DoubleJudging.image_id)
            )
        )


# -- adjudication ---------------------------------------------------------------------------


@dataclass(frozen=True)
class JudgeMark:
    judge: str
    relevance: int
    note: str


@dataclass(frozen=True)
class Disagreement:
    """A photo its judges disagree on: each judge's mark and note, and the adjudicated
    judgment if one settles it."""

    image_id: int
    marks: tuple[JudgeMark, ...]
    adjudicated: int | None


def disagreements(
    library: Library, query_id: int, *, settled_too: bool = True
) -> list[Disagreement]:
    """The photos of a query whose judges' newest judgments differ, by photo id; with
    `settled_too` False, only those no adjudication settles yet."""
    ratings = judge_ratings(library, query_id)
    settled = adjudications(library, query_id)
    split = {i: m for i, m in ratings.items() if len(set(m.values())) > 1}
    notes = _notes(library, query_id, list(split))
    out = []
    for image_id in sorted(split):
        if not settled_too and image_id in settled:
            continue
        marks = tuple(
            JudgeMark(judge, value, notes.get((image_id, judge), ""))
            for judge, value in sorted(split[image_id].items())
        )
        out.append(Disagreement(image_id, marks, settled.get(image_id)))
    return out


def _notes(library: Library, query_id: int, image_ids: Sequence[int]) -> dict[tuple[int, str], str]:
    """(photo, judge) -> that judge's newest note (occurrenceRemarks) on the photo."""
    if not image_ids:
        return {}
    with library.catalog.session() as s:
        rows = s.execute(
            select(AttributeEvent.image_id, AttributeEvent.changed_by, AttributeEvent.value)
            .where(
                AttributeEvent.query_id == query_id,
                AttributeEvent.term == NOTE_TERM,
                AttributeEvent.image_id.in_(list(image_ids)),
            )
            .order_by(AttributeEvent.id)
        ).all()
    notes: dict[tuple[int, str], str] = {}
    for image_id, who, value in rows:
        notes[(int(image_id), who or "unknown")] = value or ""
    return notes


def adjudicate(
    library: Library, query_id: int, image_id: int, relevance: int | None, by: str | None = None
) -> JudgmentChange:
    """Record the judgment that settles a photo (None: take the adjudication back); it is the
    photo's judgment in metrics and exports from now on."""
    store = QueryStore(library, user=by)
    return store.judge(query_id, image_id, relevance, kind=ADJUDICATION, attributes={})


# -- certified recall -------------------------------------------------------------------------


@dataclass(frozen=True)
class CertificateRecord:
    """A certified recall kept with its query."""

    query_id: int
    target: float
    confidence: float
    judged: int
    sample_judged: int
    stop_rank: int
    found: int
    rule: str
    certified_by: str | None
    certified_at: datetime

    def text(self) -> str:
        """One sentence for a methods text or an export."""
        return (
            f"recall of at least {round(self.target * 100)} % certified at "
            f"{round(self.confidence * 100)} % confidence after {self.judged} judgments "
            f"(the ranking's top {self.stop_rank} judged in full, {self.found} relevant, and a "
            f"random sample of {self.sample_judged} below it), by the {self.rule}"
        )


def record_certificate(
    library: Library, query_id: int, certification: Certification, by: str | None = None
) -> CertificateRecord:
    """Keep a certified recall with its query; refuses a state the rule has not certified."""
    if not certification.certified or certification.stop_rank is None:
        raise BadInputError(
            "the target is not certified yet: judge the photos the rule asks for first"
        )
    record = CertificateRecord(
        query_id,
        certification.target,
        certification.confidence,
        certification.judged,
        certification.sample_judged,
        certification.stop_rank,
        certification.found,
        certification.rule + (f"; over {certification.scope}" if certification.scope else ""),
        by,
        utcnow(),
    )
    with library.catalog.session() as s:
        s.add(
            RecallCertificate(
                query_id=query_id,
                target=record.target,
                confidence=record.confidence,
                judged=record.judged,
                sample_judged=record.sample_judged,
                stop_rank=record.stop_rank,
                found=record.found,
                rule=record.rule,
                certified_by=by,
                certified_at=record.certified_at,
            )
        )
    return record


def certificates(
    library: Library, query_ids: Sequence[int] | None = None
) -> dict[int, CertificateRecord]:
    """query id -> its newest certified recall (queries never certified are absent)."""
    with library.catalog.session() as s:
        stmt = select(RecallCertificate).order_by(RecallCertificate.id)
        if query_ids is not None:
            stmt = stmt.where(RecallCertificate.query_id.in_(list(query_ids)))
        rows = s.scalars(stmt).all()
        return {
            row.query_id: CertificateRecord(
                row.query_id,
                row.target,
                row.confidence,
                row.judged,
                row.sample_judged,
                row.stop_rank,
                row.found,
                row.rule,
                row.certified_by,
                row.certified_at,
            )
            for row in rows
        }
