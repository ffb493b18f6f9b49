"""What was seen in a judged photo, as Darwin Core terms (behavior, lifeStage, sex, ...).

Values are kept per (query, photo, term) in `judgment_attributes` (the newest), every change
with who and when in `attribute_events` (migration 0013 says why a table of its own).

The terms, their labels and their vocabularies are one table, `engine.judgments.dwc_terms`
(iNaturalist's annotation values and GBIF's vocabularies, in lower case). A value outside a
vocabulary is kept as typed and flagged (`off_vocabulary`), never refused: an expert may need a
stage no vocabulary lists, and a value stored by an earlier version stays as it was.
`behavior` is free text or a pipe list, dominant first ("foraging | courtship"); a controlled
term may hold a pipe list too ("flowering | fruiting"), each part checked.

Presets: a query may preset values ("flowering" -> reproductiveCondition=flowering). Judging a
photo relevant fills the preset terms the photo has no value for; marking it not relevant or
clearing its judgment takes back the preset values it still carries unchanged, so no stale
preset stays on a photo that is no longer relevant, while values typed by hand stay (a
judgment undone or changed loses nothing typed). `engine/judgments/queries.py` applies this
inside the judgment's transaction (`preset_changes`). Photos judged relevant before a preset
was set get it only when asked (`preset_offer` counts them, `fill_presets` fills them in one
transaction, `undo_preset_fill` takes that back as one step).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from engine.catalog.models import (
    AttributeEvent,
    AttributePreset,
    Judgment,
    JudgmentAttribute,
    utcnow,
)
from engine.errors import BadInputError
from engine.judgments.dwc_terms import DWC_ATTRIBUTE_TERMS as DWC_ATTRIBUTE_TERMS  # re-exported
from engine.judgments.dwc_terms import VOCABULARIES as VOCABULARIES  # re-exported
from engine.judgments.judges import default_judge

if TYPE_CHECKING:
    from engine.catalog.library import Library

PIPE = " | "  # Darwin Core's recommended separator of a list in one term

Values = dict[str, str]
Changes = dict[str, "str | None"]  # term -> new value (None: cleared)


@dataclass(frozen=True)
class AttributeChange:
    """What one attribute edit changed on a photo for a query; `previous` makes undo exact
    (None: the term had no value)."""

    query_id: int
    image_id: int
    previous: dict[str, str | None] = field(default_factory=dict)
    current: dict[str, str | None] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        return self.previous != self.current


@dataclass(frozen=True)
class PresetFill:
    """A query's presets given to the photos judged relevant before them: one change per photo
    that got a value, undone together (`undo_preset_fill`)."""

    query_id: int
    changes: tuple[AttributeChange, ...] = ()

    @property
    def photos(self) -> int:
        return len(self.changes)

    @property
    def changed(self) -> bool:
        return any(change.changed for change in self.changes)


@dataclass(frozen=True)
class PresetOffer:
    """What filling a query's presets into its relevant photos would do: `photos` would get a
    value (`per_term`: how many for each term), `relevant` photos are judged relevant, and the
    others keep values of their own."""

    query_id: int
    presets: dict[str, str]
    relevant: int
    photos: int
    per_term: dict[str, int] = field(default_factory=dict)

    @property
    def keeping_their_own(self) -> int:
        return self.relevant - self.photos


@dataclass(frozen=True)
class AttributeRecord:
    """One attribute change as it was made (`attribute_history`)."""

    image_id: int
    term: str
    value: str | None  # None: cleared
    changed_by: str | None
    changed_at: datetime


# -- values ---------------------------------------------------------------------------------


def check_term(term: str) -> str:
    """The term itself, or a one-line error naming the terms there are."""
    if term not in DWC_ATTRIBUTE_TERMS:
        raise BadInputError(
            f"unknown attribute {term!r}; use one of {', '.join(DWC_ATTRIBUTE_TERMS)}"
        )
    return term


def normalize_value(term: str, value: str | None) -> str | None:
    """A value as stored: spaces collapsed, a pipe list as "a | b" (empty parts and repeats
    dropped, order kept), a vocabulary's value in its own spelling whatever the case typed
    ("Flowering" -> "flowering"); None for nothing left."""
    check_term(term)
    if value is None:
        return None
    parts: list[str] = []
    for raw in value.split("|"):
        part = " ".join(raw.split())
        if not part:
            continue
        known = {v.lower(): v for v in VOCABULARIES.get(term, ())}
        part = known.get(part.lower(), part)
        if part not in parts:
            parts.append(part)
    return PIPE.join(parts) or None


def off_vocabulary(values: Mapping[str, str | None]) -> dict[str, list[str]]:
    """term -> the parts of its value that its vocabulary does not list (terms with none, and
    free-text terms, left out): what the window and exports flag, kept as text."""
    out: dict[str, list[str]] = {}
    for term, value in values.items():
        vocabulary = VOCABULARIES.get(term)
        if vocabulary is None or not value:
            continue
        unknown = [
            part.strip()
            for part in value.split("|")
            if part.strip() and part.strip().lower() not in vocabulary
        ]
        if unknown:
            out[term] = unknown
    return out


def suggestions(term: str) -> tuple[str, ...]:
    """The controlled values offered for a term (none for free text)."""
    return VOCABULARIES.get(check_term(term), ())


def _normalized(values: Mapping[str, str | None]) -> Changes:
    return {check_term(term): normalize_value(term, value) for term, value in values.items()}


# -- storage, in a caller's transaction --------------------------------------------------------


def values_in(s: Session, query_id: int, image_id: int) -> Values:
    """term -> value of one photo for a query."""
    rows = s.execute(
        select(JudgmentAttribute.term, JudgmentAttribute.value).where(
            JudgmentAttribute.query_id == query_id, JudgmentAttribute.image_id == image_id
        )
    ).all()
    return {term: value for term, value in rows}


def presets_in(s: Session, query_id: int) -> Values:
    """term -> value a query presets."""
    rows = s.execute(
        select(AttributePreset.term, AttributePreset.value).where(
            AttributePreset.query_id == query_id
        )
    ).all()
    return {term: value for term, value in rows}


def write_changes(
    s: Session,
    query_id: int,
    image_id: int,
    changes: Changes,
    who: str | None,
    now: datetime | None = None,
) -> AttributeChange:
    """Apply normalized `changes` (None clears) to one photo, an event per term that really
    changes; the change made (terms left as they were are not in it)."""
    now = now or utcnow()
    before = values_in(s, query_id, image_id)
    previous: dict[str, str | None] = {}
    current: dict[str, str | None] = {}
    for term, value in changes.items():
        old = before.get(term)
        if old == value:
            if value is not None and _set_by(s, query_id, image_id, term) != who:
                # Another judge gives the same value: kept as their act (agreement counts it),
                # though the value itself does not change.
                s.add(AttributeEvent(query_id=query_id, image_id=image_id, term=term,
                                     value=value, changed_by=who, changed_at=now))  # fmt: skip
            continue
        previous[term], current[term] = old, value
        s.add(
            AttributeEvent(
                query_id=query_id,
                image_id=image_id,
                term=term,
                value=value,
                changed_by=who,
                changed_at=now,
            )
        )
        row = s.get(JudgmentAttribute, (query_id, image_id, term))
        if value is None:
            if row is not None:
                s.delete(row)
        elif row is None:
            s.add(
                JudgmentAttribute(
                    query_id=query_id,
                    image_id=image_id,
                    term=term,
                    value=value,
                    set_by=who,
                    set_at=now,
                )
            )
        else:
            row.value, row.set_by, row.set_at = value, who, now
    s.flush()
    return AttributeChange(query_id, image_id, previous, current)


def _set_by(s: Session, query_id: int, image_id: int, term: str) -> str | None:
    """Who gave a term its current value on a photo (None: no value)."""
    row = s.get(JudgmentAttribute, (query_id, image_id, term))
    return row.set_by if row is not None else None


def preset_changes(
    s: Session, query_id: int, image_id: int, before: int | None, after: int | None
) -> Changes:
    """What a judgment going from `before` to `after` does to the photo's attributes: judged
    relevant, the query's presets fill the terms without a value; no longer relevant, the
    preset values it still carries are taken back (see the module's docstring)."""
    was, now = (before or 0) > 0, (after or 0) > 0
    if was == now:
        return {}
    presets = presets_in(s, query_id)
    if not presets:
        return {}
    values = values_in(s, query_id, image_id)
    if now:
        return {term: value for term, value in presets.items() if term not in values}
    return {term: None for term, value in presets.items() if values.get(term) == value}


# -- the library's API -------------------------------------------------------------------------


def attributes_for_query(
    library: Library, query_id: int, *, judged_only: bool = True
) -> dict[int, dict[str, str]]:
    """image id -> {Darwin Core term: value} for the query's judged photos that carry any
    (`judged_only=False`: also photos given attributes without a judgment, such as an
    attribute question's accepted suggestions)."""
    statement = select(
        JudgmentAttribute.image_id, JudgmentAttribute.term, JudgmentAttribute.value
    ).where(JudgmentAttribute.query_id == query_id)
    if judged_only:
        statement = statement.join(
            Judgment,
            (Judgment.query_id == JudgmentAttribute.query_id)
            & (Judgment.image_id == JudgmentAttribute.image_id),
        )
    with library.catalog.session() as s:
        rows = s.execute(statement).all()
    out: dict[int, dict[str, str]] = {}
    for image_id, term, value in rows:
        out.setdefault(image_id, {})[term] = value
    return {image_id: _in_term_order(values) for image_id, values in out.items()}


def attributes_of(library: Library, query_id: int, image_id: int) -> dict[str, str]:
    """{term: value} of one photo for a query, judged or not (what the detail pane edits)."""
    with library.catalog.session() as s:
        return _in_term_order(values_in(s, query_id, image_id))


def set_attributes(
    library: Library,
    query_id: int,
    image_id: int,
    values: Mapping[str, str | None],
    judge: str | None = None,
) -> AttributeChange:
    """Set (a value) or clear (None or blank) attributes of one judged photo; each change is an
    event with who (`judge`, else `judges.default_judge`) and when. Terms not named stay as
    they are. Returns what changed, for undo (`AttributeChange`)."""
    changes = _normalized(values)
    who = judge or default_judge(library)  # as judgments name it (the PostgreSQL login, ...)
    catalog = library.catalog
    with catalog.session() as s:
        # One writer per photo at a time, as for its judgment (QueryStore.judge).
        catalog.serialize(s, (query_id, image_id))
        change = write_changes(s, query_id, image_id, changes, who)
    catalog.checkpoint_wal()  # as after a judgment: a plain copy of the file holds it
    return change


def undo_attributes(
    library: Library, change: AttributeChange, judge: str | None = None
) -> AttributeChange:
    """Put back the values an attribute change replaced."""
    return set_attributes(library, change.query_id, change.image_id, change.previous, judge)


def attribute_history(library: Library, query_id: int) -> list[AttributeRecord]:
    """Every attribute change of a query, oldest first: who set what, and when."""
    with library.catalog.session() as s:
        rows = s.execute(
            select(
                AttributeEvent.image_id,
                AttributeEvent.term,
                AttributeEvent.value,
                AttributeEvent.changed_by,
                AttributeEvent.changed_at,
            )
            .where(AttributeEvent.query_id == query_id)
            .order_by(AttributeEvent.changed_at, AttributeEvent.id)
        ).all()
    return [AttributeRecord(*row) for row in rows]


def query_presets(library: Library, query_id: int) -> dict[str, str]:
    """term -> value the query presets for photos judged relevant."""
    with library.catalog.session() as s:
        return _in_term_order(presets_in(s, query_id))


def set_query_presets(library: Library, query_id: int, values: Mapping[str, str | None]) -> None:
    """Replace a query's presets (blank values dropped). Photos judged before are not changed
    here: a preset applies from the next judgment on, and `fill_presets` gives it to the
    photos judged relevant before, when asked."""
    presets = {t: v for t, v in _normalized(values).items() if v is not None}
    with library.catalog.session() as s:
        s.execute(delete(AttributePreset).where(AttributePreset.query_id == query_id))
        s.add_all(AttributePreset(query_id=query_id, term=t, value=v) for t, v in presets.items())


def _in_term_order(values: Mapping[str, str]) -> dict[str, str]:
    return {term: values[term] for term in DWC_ATTRIBUTE_TERMS if term in values}


# -- presets for the photos judged before ---------------------------------------------------------


def _relevant_ids(s: Session, query_id: int) -> list[int]:
    return list(
        s.scalars(
            select(Judgment.image_id)
            .where(Judgment.query_id == query_id, Judgment.relevance > 0)
            .order_by(Judgment.image_id)
        )
    )


def _query_values(s: Session, query_id: int) -> dict[int, Values]:
    """image id -> term -> value of every photo of a query that carries any."""
    out: dict[int, Values] = {}
    rows = s.execute(
        select(JudgmentAttribute.image_id, JudgmentAttribute.term, JudgmentAttribute.value).where(
            JudgmentAttribute.query_id == query_id
        )
    )
    for image_id, term, value in rows:
        out.setdefault(image_id, {})[term] = value
    return out


def _missing_presets(s: Session, query_id: int) -> tuple[Values, list[int], dict[int, Values]]:
    """The query's presets, its relevant photos, and per relevant photo the preset values it
    would get (the terms it has no value for)."""
    presets = presets_in(s, query_id)
    relevant = _relevant_ids(s, query_id)
    values = _query_values(s, query_id) if presets and relevant else {}
    fills: dict[int, Values] = {}
    for image_id in relevant:
        own = values.get(image_id, {})
        wanted = {term: value for term, value in presets.items() if term not in own}
        if wanted:
            fills[image_id] = wanted
    return presets, relevant, fills


def preset_offer(library: Library, query_id: int) -> PresetOffer:
    """How many photos judged relevant would get the query's presets (`fill_presets`): those
    with no value of their own for a preset term."""
    with library.catalog.session() as s:
        presets, relevant, fills = _missing_presets(s, query_id)
    per_term = {
        term: sum(term in wanted for wanted in fills.values())
        for term in DWC_ATTRIBUTE_TERMS
        if term in presets
    }
    return PresetOffer(query_id, _in_term_order(presets), len(relevant), len(fills), per_term)


def _lock_photos(library: Library, s: Session, query_id: int, image_ids: list[int]) -> None:
    """Exclude concurrent judgments of these photos, as `QueryStore.judge` does for one: on
    PostgreSQL each photo's advisory lock, in id order; on SQLite its one write lock (first in
    the transaction, whatever the photos)."""
    catalog = library.catalog
    if catalog.engine.dialect.name == "postgresql":
        for image_id in sorted(set(image_ids)):
            catalog.serialize(s, (query_id, image_id))
    else:
        catalog.serialize(s, (query_id, 0))


def fill_presets(library: Library, query_id: int, judge: str | None = None) -> PresetFill:
    """Give the query's presets to every photo judged relevant that has no value of its own
    for a preset term, in one transaction; each value an event with the judge (`judge`, else
    `judges.default_judge`). Values a photo has are kept. Returns what changed, for undo."""
    who = judge or default_judge(library)
    catalog = library.catalog
    postgres = catalog.engine.dialect.name == "postgresql"
    with catalog.session() as s:
        # PostgreSQL locks photo by photo, so it needs their ids first; read again after. A
        # photo judged relevant in between gets the presets from its own judgment.
        locked = _relevant_ids(s, query_id) if postgres else []
        _lock_photos(library, s, query_id, locked)
        _presets, _relevant, fills = _missing_presets(s, query_id)
        if postgres:
            held = set(locked)
            fills = {i: wanted for i, wanted in fills.items() if i in held}
        now = utcnow()
        changes = tuple(
            change
            for image_id, wanted in fills.items()
            if (change := write_changes(s, query_id, image_id, dict(wanted), who, now)).changed
        )
    catalog.checkpoint_wal()
    return PresetFill(query_id, changes)


def undo_preset_fill(library: Library, fill: PresetFill, judge: str | None = None) -> PresetFill:
    """Take back what `fill_presets` gave, in one transaction: a term still holding the value
    the fill gave returns to what it had; a term changed since keeps its newer value."""
    who = judge or default_judge(library)
    catalog = library.catalog
    undone: list[AttributeChange] = []
    with catalog.session() as s:
        _lock_photos(library, s, fill.query_id, [c.image_id for c in fill.changes])
        values = _query_values(s, fill.query_id)
        now = utcnow()
        for change in fill.changes:
            now_values = values.get(change.image_id, {})
            back = {
                term: change.previous.get(term)
                for term, given in change.current.items()
                if now_values.get(term) == given
            }
            if back:
                done = write_changes(s, fill.query_id, change.image_id, back, who, now)
                if done.changed:
                    undone.append(done)
    catalog.checkpoint_wal()
    return PresetFill(fill.query_id, tuple(undone))
