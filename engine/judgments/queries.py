"""Saved queries, their runs (one per search method), and the user's relevance judgments.

Judgments belong to the query, not to a run: a photo judged while looking at the text method's
results counts as judged for every other method of the same query. Each judgment is committed
the moment it is made (SQLite FULL sync), so a crash right after a click loses nothing. On a
shared (PostgreSQL) catalog several people judge at once: each judgment is kept with who made it
and when (`judgment_events`), and the newest one of a photo counts.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import delete, func, insert, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from engine.catalog import Judgment, JudgmentEvent, Query, Run, RunResult
from engine.catalog.library import Library
from engine.catalog.models import utcnow
from engine.detections.records import Box
from engine.errors import BadInputError
from engine.judgments.attributes import AttributeChange, preset_changes, write_changes
from engine.judgments.judges import default_judge
from engine.judgments.runs import SavedRunParams

if TYPE_CHECKING:
    from sqlalchemy import CursorResult, Table

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class QueryInfo:
    id: int
    text: str
    image_path: str | None
    name: str | None
    notes: str | None
    created_at: datetime
    runs: int
    judged: int
    relevant: int

    @property
    def title(self) -> str:
        return self.name or self.text or (self.image_path or "")


@dataclass(frozen=True)
class RunInfo:
    """One saved run of a query. Its label for the window and the command line comes from the
    method registry (`engine.methods.registry.run_label`): this store knows no search method."""

    id: int
    query_id: int
    method: str
    model_key: str | None
    params: dict[str, Any]
    created_at: datetime
    duration_ms: float | None
    ranking: list[tuple[int, float]]  # (image_id, score), rank order
    kind: str = "text"  # "text", "image" or "image+text"
    quadrat_version: str | None = None

    @property
    def signature(self) -> tuple[str, str, str]:
        """What makes two runs the same search: method, query kind and parameters. Runs that
        differ in any are compared side by side; the newest of each signature is shown."""
        import json

        return (self.method, self.kind, json.dumps(self.params, sort_keys=True, default=str))

    @property
    def saved(self) -> SavedRunParams:
        """Its parameters as the typed record (filters, details, evidence, photo, ...)."""
        return SavedRunParams.from_json(self.params)


@dataclass(frozen=True)
class JudgmentRecord:
    """One judgment as it was made (`QueryStore.judgment_history`)."""

    image_id: int
    relevance: int | None  # None: the judgment was cleared
    judged_by: str | None
    judged_at: datetime


@dataclass(frozen=True)
class JudgmentChange:
    """What one judgment call changed; `previous` makes undo exact, and `attributes` the
    values the query's presets filled or took back with it (None: none). `box` is the
    detector's box the judgment was made on, `previous_box` the one it replaced (None: the
    whole frame)."""

    query_id: int
    image_id: int
    previous: int | None
    current: int | None
    attributes: AttributeChange | None = None
    box: Box | None = None
    previous_box: Box | None = None


JUDGMENT = "judgment"  # `judgment_events.kind` of a judge's own judgment
ADJUDICATION = "adjudication"  # ... of the judgment that settles judges' disagreement


class QueryStore:
    """Queries, runs and judgments of one library, judged as `user` (the judge: by default
    the server login on a PostgreSQL catalog, else the OS user). A `blind` store reads only
    its judge's own marks (blind double judging: no other judge's mark shows)."""

    def __init__(self, library: Library, user: str | None = None, *, blind: bool = False) -> None:
        self.library = library
        self._user = user or None
        self.blind = blind

    @property
    def user(self) -> str:
        """Who judges: the name given, else `default_judge` (asked of a PostgreSQL server on
        first use, so making a store never waits on the catalog)."""
        if self._user is None:
            self._user = default_judge(self.library)
        return self._user

    @user.setter
    def user(self, name: str | None) -> None:
        self._user = name or None

    # -- queries -----------------------------------------------------------------------------

    def find_or_create_query(self, text: str, image_path: str | None = None) -> int:
        """The id of the saved query with this text (and query image), creating it if new.

        Runs of whitespace in the text count as one space; otherwise the text is compared
        exactly (case and punctuation count). Safe when several sessions ask for the same new
        query at once: the catalog's unique key lets one insert it, and all get its id."""
        text = " ".join(text.split())
        image_path = image_path or None
        if not text and not image_path:
            raise BadInputError("a query needs text or an image")
        catalog = self.library.catalog
        with catalog.session() as s:
            existing = find_query(s, text, image_path)
        if existing is not None:
            return existing
        with catalog.session() as s:
            # The insert comes first in its transaction: on SQLite it waits for the write lock
            # with no older snapshot that another writer could make stale.
            return insert_query(s, text, image_path)[0]

    def list_queries(self) -> list[QueryInfo]:
        with self.library.catalog.session() as s:
            runs = dict(s.execute(select(Run.query_id, func.count()).group_by(Run.query_id)).all())
            judged = dict(
                s.execute(select(Judgment.query_id, func.count()).group_by(Judgment.query_id)).all()
            )
            relevant = dict(
                s.execute(
                    select(Judgment.query_id, func.count())
                    .where(Judgment.relevance > 0)
                    .group_by(Judgment.query_id)
                ).all()
            )
            return [
                QueryInfo(
                    q.id,
                    q.text,
                    q.image_path,
                    q.name,
                    q.notes,
                    q.created_at,
                    runs.get(q.id, 0),
                    judged.get(q.id, 0),
                    relevant.get(q.id, 0),
                )
                for q in s.scalars(select(Query).order_by(Query.updated_at.desc(), Query.id.desc()))
            ]

    def rename_query(self, query_id: int, name: str | None) -> None:
        with self.library.catalog.session() as s:
            self._query(s, query_id).name = (name or "").strip() or None

    def set_notes(self, query_id: int, notes: str | None) -> None:
        with self.library.catalog.session() as s:
            self._query(s, query_id).notes = notes or None

    def delete_query(self, query_id: int) -> None:
        """Delete a query with its runs and judgments."""
        with self.library.catalog.session() as s:
            s.delete(self._query(s, query_id))

    @staticmethod
    def _query(s: Session, query_id: int) -> Query:
        query = s.get(Query, query_id)
        if query is None:
            raise BadInputError(f"no saved query with id {query_id}")
        return query

    # -- runs --------------------------------------------------------------------------------

    def save_run(
        self,
        query_id: int,
        method: str,
        ranking: Sequence[tuple[int, float]],
        *,
        model_key: str | None = None,
        params: SavedRunParams | dict[str, Any] | None = None,
        duration_ms: float | None = None,
        kind: str = "text",
    ) -> int:
        """Store one method's ranked list for a query, with what it takes to repeat it (method,
        full parameters, query kind, model key, Quadrat version); returns the run id."""
        if isinstance(params, SavedRunParams):
            params = params.to_json()
        from engine import quadrat_version

        with self.library.catalog.session() as s:
            run = Run(
                query_id=query_id,
                method=method,
                kind=kind,
                model_key=model_key,
                params=dict(params or {}),
                duration_ms=duration_ms,
                quadrat_version=quadrat_version(),
            )
            s.add(run)
            s.flush()
            s.add_all(
                RunResult(run_id=run.id, rank=rank, image_id=int(image_id), score=float(score))
                for rank, (image_id, score) in enumerate(ranking, start=1)
            )
            self._query(s, query_id).updated_at = utcnow()
            return run.id

    def runs_for(self, query_id: int) -> list[RunInfo]:
        """Every run of a query, oldest first, with its ranking."""
        with self.library.catalog.session() as s:
            runs = s.scalars(select(Run).where(Run.query_id == query_id).order_by(Run.id)).all()
            out = []
            for run in runs:
                ranking = [
                    (image_id, score)
                    for image_id, score in s.execute(
                        select(RunResult.image_id, RunResult.score)
                        .where(RunResult.run_id == run.id)
                        .order_by(RunResult.rank)
                    )
                ]
                out.append(
                    RunInfo(
                        run.id,
                        run.query_id,
                        run.method,
                        run.model_key,
                        dict(run.params or {}),
                        run.created_at,
                        run.duration_ms,
                        ranking,
                        run.kind,
                        run.quadrat_version,
                    )
                )
            return out

    def latest_runs_by_method(self, query_id: int) -> dict[tuple[str, str, str], RunInfo]:
        """The newest run of each method, query kind and parameters of a query (what the
        metrics panel compares), keyed by `RunInfo.signature`."""
        latest: dict[tuple[str, str, str], RunInfo] = {}
        for run in self.runs_for(query_id):
            latest[run.signature] = run
        return latest

    # -- judgments ---------------------------------------------------------------------------

    def judgments(self, query_id: int) -> dict[int, int]:
        """image id -> relevance for every judged photo of the query: the newest judgment of
        each photo, or its adjudicated one where there is one; a blind store's own only."""
        if self.blind:
            return own_judgments(self.library, query_id, self.user)
        with self.library.catalog.session() as s:
            return dict(
                s.execute(
                    select(Judgment.image_id, Judgment.relevance).where(
                        Judgment.query_id == query_id
                    )
                ).all()
            )

    def judge(
        self,
        query_id: int,
        image_id: int,
        relevance: int | None,
        *,
        attributes: Mapping[str, str | None] | None = None,
        kind: str = JUDGMENT,
        box: Box | None = None,
    ) -> JudgmentChange:
        """Mark a photo relevant (1) / not relevant (0) for a query, or clear it (None).
        `box`: the detector's box the judgment was made on; it judges the frame and is kept
        with the judgment (in both tables).

        Committed before returning, with who and when, in `judgments` (the newest per photo)
        and `judgment_events` (every act). Safe when several people judge the same query at
        once: the newest judgment of a photo wins and every act is kept. The returned change
        carries the previous value for undo.

        The query's attribute presets follow the judgment in the same transaction (judged
        relevant: filled; no longer relevant: taken back, `attributes.preset_changes`);
        `attributes` given instead sets exactly those values (what undo puts back).

        `kind` ADJUDICATION records the judgment that settles a disagreement: it becomes the
        photo's judgment in `judgments`, and later judges' judgments no longer replace it
        there (they are kept as events); clearing it brings back the newest judgment.
        """
        if relevance is not None and relevance < 0:
            raise BadInputError("relevance must be 0 (not relevant) or a positive grade")
        if kind not in (JUDGMENT, ADJUDICATION):
            raise BadInputError(f"unknown kind of judgment {kind!r}")
        catalog = self.library.catalog
        with catalog.session() as s:
            # Several people may judge this photo at once: one at a time, each reading the
            # judgment the previous one left, and the time taken after the wait, so that the
            # newest act is also the one that counts.
            catalog.serialize(s, (query_id, image_id))
            now = utcnow()
            row = s.get(Judgment, (query_id, image_id))
            previous = row.relevance if row is not None else None
            previous_box = _box_of(row.box) if row is not None else None
            shown = relevance  # what `judgments` holds for the photo after this act
            kept = kind == JUDGMENT and (
                _newest_event(s, query_id, image_id, ADJUDICATION) is not None
            )  # an adjudicated photo keeps its adjudication in `judgments`
            if kind == ADJUDICATION and relevance is None:
                shown = _newest_event(s, query_id, image_id, JUDGMENT)
            if self.blind and kind == JUDGMENT:
                # The judge's own previous mark: what undo puts back, never another's.
                previous = _newest_event(s, query_id, image_id, JUDGMENT, self.user)
                previous_box = _box_of(_newest_event_box(s, query_id, image_id, self.user))
            changes = (
                dict(attributes)
                if attributes is not None
                else preset_changes(s, query_id, image_id, previous, relevance)
            )
            filled = write_changes(s, query_id, image_id, changes, self.user, now)
            act = JudgmentAct(query_id, image_id, relevance, self.user, now, kind)
            record_judgment(s, act, row, shown=shown, settled=kept, box=box)
        # Committed pages into the catalog file itself: a plain copy of the file taken now (a
        # user's own backup while the window is open) holds this judgment, not only the -wal.
        catalog.checkpoint_wal()
        return JudgmentChange(
            query_id,
            image_id,
            previous,
            relevance,
            filled if filled.changed else None,
            box=box,
            previous_box=previous_box,
        )

    def judged_boxes(self, query_id: int) -> dict[int, Box]:
        """image id -> the box the photo's judgment (as `judgments` holds it) was made on,
        for the photos judged on a box."""
        with self.library.catalog.session() as s:
            if self.blind:  # the judge's own newest judgment of each photo, as `judgments`
                own = s.execute(
                    select(JudgmentEvent.image_id, JudgmentEvent.box)
                    .where(
                        JudgmentEvent.query_id == query_id,
                        JudgmentEvent.judged_by == self.user,
                        JudgmentEvent.kind == JUDGMENT,
                    )
                    .order_by(JudgmentEvent.id)
                ).all()
                rows = list({int(i): (i, text) for i, text in own}.values())
            else:
                rows = list(
                    s.execute(
                        select(Judgment.image_id, Judgment.box).where(
                            Judgment.query_id == query_id, Judgment.box.is_not(None)
                        )
                    ).all()
                )
        found = {int(image_id): _box_of(text) for image_id, text in rows}
        return {image_id: box for image_id, box in found.items() if box is not None}

    def judgment_history(self, query_id: int) -> list[JudgmentRecord]:
        """Every judgment made for a query, oldest first: who judged which photo how, and
        when (relevance None: a judgment cleared)."""
        with self.library.catalog.session() as s:
            rows = s.execute(
                select(
                    JudgmentEvent.image_id,
                    JudgmentEvent.relevance,
                    JudgmentEvent.judged_by,
                    JudgmentEvent.judged_at,
                )
                .where(JudgmentEvent.query_id == query_id)
                .order_by(JudgmentEvent.judged_at, JudgmentEvent.id)
            ).all()
        return [JudgmentRecord(*row) for row in rows]

    def undo(self, change: JudgmentChange) -> JudgmentChange:
        """Put back the judgment a change replaced, with the attribute values its presets
        changed. A change that does not say (one the window made before its write returned)
        applies the presets' rules on the way back, which takes back what they filled."""
        previous_values = change.attributes.previous if change.attributes is not None else None
        return self.judge(
            change.query_id,
            change.image_id,
            change.previous,
            attributes=previous_values,
            box=change.previous_box,
        )

    def clear_judgments(self, query_id: int) -> int:
        with self.library.catalog.session() as s:
            # A DELETE gives a CursorResult; Session.execute is typed as returning a Result.
            result = cast(
                "CursorResult[Any]",
                s.execute(delete(Judgment).where(Judgment.query_id == query_id)),
            )
            cleared = result.rowcount or 0
        self.library.catalog.checkpoint_wal()  # as after a judgment (see `judge`)
        return cleared


def find_query(s: Session, text: str, image_path: str | None = None) -> int | None:
    """The saved query of this text and query image, as stored (the oldest, should a catalog
    from before migration 0009 hold twins); None if there is none."""
    image_path = image_path or None  # the unique key reads a missing photo and '' alike
    stmt = select(Query.id).where(Query.text == text)
    stmt = stmt.where(
        Query.image_path.is_(None) if image_path is None else Query.image_path == image_path
    )
    return s.scalar(stmt.order_by(Query.id).limit(1))


def insert_query(s: Session, text: str, image_path: str | None = None) -> tuple[int, bool]:
    """Insert a saved query unless the catalog holds it already (`uq_queries_text_image`), in
    the caller's transaction; its id, and whether this call inserted it. Never fails for a
    twin another session inserted meanwhile: on PostgreSQL the insert waits for that session
    and then does nothing; on SQLite, call it first in a transaction, or in one that holds
    the write lock (`Catalog.serialize`), so that the read after it sees the winner."""
    now = utcnow()
    image_path = image_path or None
    values = {"text": text, "image_path": image_path, "created_at": now, "updated_at": now}
    table = cast("Table", Query.__table__)
    dialect = s.get_bind().dialect.name
    if dialect in ("sqlite", "postgresql"):
        from sqlalchemy.dialects import postgresql, sqlite

        upsert = sqlite.insert if dialect == "sqlite" else postgresql.insert
        done = s.execute(upsert(table).values(values).on_conflict_do_nothing())
        inserted = cast("CursorResult[Any]", done).rowcount == 1
    else:  # another database: a savepoint takes back the twin's insert
        try:
            with s.begin_nested():
                s.execute(insert(table).values(values))
            inserted = True
        except IntegrityError:
            inserted = False
    found = find_query(s, text, image_path)
    if found is None:  # the winner's row was deleted between the two statements
        raise BadInputError("another session deleted this saved query meanwhile; try again")
    return found, inserted


@dataclass(frozen=True)
class JudgmentAct:
    """One act of judging: who marked which photo of which query how (None: cleared), when,
    as a judgment or an adjudication."""

    query_id: int
    image_id: int
    relevance: int | None
    judged_by: str
    judged_at: datetime
    kind: str = JUDGMENT


def record_judgment(
    s: Session,
    act: JudgmentAct,
    row: Judgment | None,
    *,
    shown: int | None,
    settled: bool = False,
    box: Box | None = None,
) -> Judgment | None:
    """The one rule that writes a judgment, in the caller's transaction (`QueryStore.judge`,
    the benchmark import): the act kept in `judgment_events`, and the photo's row in
    `judgments` (`row`, as read) made to hold `shown` by the act's judge and time, or
    removed when `shown` is None; a photo `settled` by an adjudication keeps its row. `box`
    (the detector's box the act was made on; None: the whole frame) is kept with the act and
    with the row it writes. The row `judgments` holds afterwards."""
    text = box.text if box is not None else None
    s.add(
        JudgmentEvent(
            query_id=act.query_id,
            image_id=act.image_id,
            relevance=act.relevance,
            judged_by=act.judged_by,
            judged_at=act.judged_at,
            kind=act.kind,
            box=text,
        )
    )
    if settled:
        return row
    if shown is None:
        if row is not None:
            s.delete(row)
        return None
    if row is None:
        row = Judgment(
            query_id=act.query_id,
            image_id=act.image_id,
            relevance=shown,
            judged_by=act.judged_by,
            judged_at=act.judged_at,
            box=text,
        )
        s.add(row)
        return row
    row.relevance, row.judged_by, row.judged_at = shown, act.judged_by, act.judged_at
    row.box = text
    return row


def _box_of(text: str | None) -> Box | None:
    """A judgment's box as the catalog keeps it; None for none (or a value not a box)."""
    if not text:
        return None
    try:
        return Box.from_text(text)
    except BadInputError:
        log.warning("a judgment's box %r is not a box; read as the whole frame", text)
        return None


def _newest_event(
    s: Session, query_id: int, image_id: int, kind: str, judge: str | None = None
) -> int | None:
    """The relevance of the newest event of `kind` for a photo (by `judge`, if given); None
    when there is none or it cleared the judgment."""
    stmt = select(JudgmentEvent.relevance).where(
        JudgmentEvent.query_id == query_id,
        JudgmentEvent.image_id == image_id,
        JudgmentEvent.kind == kind,
    )
    if judge is not None:
        stmt = stmt.where(JudgmentEvent.judged_by == judge)
    return s.scalar(stmt.order_by(JudgmentEvent.id.desc()).limit(1))


def _newest_event_box(s: Session, query_id: int, image_id: int, judge: str) -> str | None:
    """The box of `judge`'s newest judgment of a photo (None: the whole frame, or none)."""
    stmt = select(JudgmentEvent.box).where(
        JudgmentEvent.query_id == query_id,
        JudgmentEvent.image_id == image_id,
        JudgmentEvent.kind == JUDGMENT,
        JudgmentEvent.judged_by == judge,
    )
    return s.scalar(stmt.order_by(JudgmentEvent.id.desc()).limit(1))


def own_judgments(library: Library, query_id: int, judge: str) -> dict[int, int]:
    """image id -> relevance of one judge's own newest judgment of each photo of a query
    (adjudications left out; a cleared judgment is none)."""
    with library.catalog.session() as s:
        rows = s.execute(
            select(JudgmentEvent.image_id, JudgmentEvent.relevance)
            .where(
                JudgmentEvent.query_id == query_id,
                JudgmentEvent.judged_by == judge,
                JudgmentEvent.kind == JUDGMENT,
            )
            .order_by(JudgmentEvent.id)
        ).all()
    marks: dict[int, int | None] = {}
    for image_id, relevance in rows:
        marks[int(image_id)] = relevance
    return {image_id: int(v) for image_id, v in marks.items() if v is not None}


def saved_runs(library: Library) -> list[RunInfo]:
    """Every saved run of every query, oldest first, without its ranking (`ranking` is empty):
    enough to label them, cheap for a catalog of many long runs."""
    with library.catalog.session() as s:
        rows = s.execute(
            select(
                Run.id,
                Run.query_id,
                Run.method,
                Run.model_key,
                Run.params,
                Run.created_at,
                Run.duration_ms,
                Run.kind,
                Run.quadrat_version,
            ).order_by(Run.id)
        ).all()
    return [
        RunInfo(
            id=run_id,
            query_id=query_id,
            method=method,
            model_key=model_key,
            params=dict(params or {}),
            created_at=created_at,
            duration_ms=duration_ms,
            ranking=[],
            kind=kind,
            quadrat_version=version,
        )
        for run_id, query_id, method, model_key, params, created_at, duration_ms, kind, version in (
            rows
        )
    ]
