"""The newer kinds of metadata filter (an XMP/IPTC keyword, camera deployments, hours of the
day), each checked, shown as a chip and turned into SQL here, and the SQL building blocks every
filter of `engine.search.filters` shares (an IN list of ids, parts of the observation time).

`engine.search.filters.SearchFilters` holds the values and calls these; this module knows
nothing of it, so that `filters` can import it without a cycle.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from numbers import Integral
from typing import Any

from sqlalchemy import ColumnElement, bindparam, extract, func, or_
from sqlalchemy.orm import Session

from engine.catalog import Image
from engine.errors import BadInputError
from engine.indexing.keywords import clean_keyword, keyword_condition
from engine.search.filter_index import is_sqlite

# Above this many ids an IN list is written as literal integers instead of bound variables.
LITERAL_LIST = 500

Hours = tuple[int, int]


# -- checks -----------------------------------------------------------------------------------


def fail(key: str, message: str) -> BadInputError:
    """The one-line error of a bad filter value, naming the filter."""
    return BadInputError(f"filter {key}: {message}")


def as_int(key: str, value: object) -> int:
    """A whole number (or its text), else `fail`."""
    if isinstance(value, bool) or not isinstance(value, Integral | str):
        raise fail(key, f"expected a whole number, got {value!r:.60}")
    try:
        return int(value)
    except ValueError:
        raise fail(key, f"expected a whole number, got {value!r:.60}") from None


def as_sequence(key: str, value: object) -> tuple[object, ...]:
    """A list or tuple as a tuple; one string counts as a list of one (licence codes)."""
    if isinstance(value, str):
        return (value,)
    if isinstance(value, bytes) or not isinstance(value, Iterable):
        raise fail(key, f"expected a list, got {value!r:.60}")
    return tuple(value)


def check_newer_kinds(
    keyword: object, deployment_ids: object, hours: object
) -> tuple[str | None, tuple[int, ...], Hours | None]:
    """The keyword (cleaned), deployment ids (sorted, unique) and hours as `SearchFilters`
    keeps them; a bad value raises `fail`."""
    if keyword is not None and not isinstance(keyword, str):
        raise fail("keyword", f"expected text, got {keyword!r:.60}")
    cleaned = clean_keyword(keyword) if keyword else None
    if cleaned is None and keyword and keyword.strip(" |"):
        raise fail("keyword", f"not a keyword (too long?): {keyword!r:.60}")
    deployments = {
        as_int("deployment_ids", d) for d in as_sequence("deployment_ids", deployment_ids)
    }
    checked_hours: Hours | None = None
    if hours is not None:
        values = tuple(as_int("hours", h) for h in as_sequence("hours", hours))
        if len(values) != 2 or not all(0 <= h <= 23 for h in values):
            raise fail("hours", f"expected two hours 0..23, got {list(values)}")
        checked_hours = (values[0], values[1])
    return cleaned, tuple(sorted(deployments)), checked_hours


def named_ids(word: str, ids: Sequence[int], names: Mapping[int, str] | None) -> str:
    """ "deployment CAM01_trail (QT0001)", "collections Birds, #7": each id by its name where
    one is known, else by its number."""
    known = names or {}
    shown = ", ".join(known.get(i) or f"#{i}" for i in ids)
    return f"{word}{'s' * (len(ids) != 1)} {shown}"


def newer_kind_chips(
    keyword: str | None,
    deployment_ids: tuple[int, ...],
    hours: Hours | None,
    deployment_names: Mapping[int, str] | None = None,
) -> list[tuple[str, str]]:
    """(key, text) chips of the newer kinds, in the order `SearchFilters.describe` shows them;
    a deployment by its name where `deployment_names` has it."""
    chips: list[tuple[str, str]] = []
    if keyword:
        chips.append(("keyword", f"keyword “{keyword}”"))
    if deployment_ids:
        chips.append(("deployment_ids", named_ids("deployment", deployment_ids, deployment_names)))
    if hours:
        first, last = hours
        chips.append(("hours", f"{first:02d}:00–{last:02d}:59"))
    return chips


# -- SQL --------------------------------------------------------------------------------------


def in_ids(column: Any, ids: Sequence[int]) -> ColumnElement[bool]:
    """`column IN (ids)`; a long list is written into the SQL as integers, since SQLite caps
    the number of bound variables (the values are ints, so nothing can be injected)."""
    values = [int(i) for i in ids]
    if len(values) <= LITERAL_LIST:
        return column.in_(values)  # type: ignore[no-any-return]
    return column.in_(bindparam("ids", values, expanding=True, literal_execute=True))  # type: ignore[no-any-return]


def newer_kind_conditions(
    session: Session, keyword: str | None, deployment_ids: tuple[int, ...], hours: Hours | None
) -> list[ColumnElement[bool]]:
    """The WHERE terms of the newer kinds (none set: none)."""
    terms: list[ColumnElement[bool]] = []
    if keyword:
        terms.append(keyword_condition(keyword))
    if deployment_ids:
        terms.append(in_ids(Image.deployment_id, deployment_ids))
    if hours:
        hour = hour_of(session)
        first, last = (hour_value(session, h) for h in hours)
        terms.append(Image.observed_at.is_not(None))
        if hours[0] <= hours[1]:
            terms.append(hour.between(first, last))
        else:  # across midnight: 20..5
            terms.append(or_(hour >= first, hour <= last))
    return terms


def hour_of(session: Session) -> Any:
    """The hour of the photo's local time in SQL (its two characters of text on SQLite)."""
    if is_sqlite(session):
        return func.substr(Image.observed_at, 12, 2)
    return extract("hour", Image.observed_at)


def hour_value(session: Session, hour: int) -> int | str:
    """An hour as `hour_of` gives it: "07" on SQLite, 7 elsewhere."""
    return f"{hour:02d}" if is_sqlite(session) else hour


def month_of(session: Session) -> Any:
    """The observation month in SQL. SQLite keeps a date as "YYYY-MM-DD HH:MM:SS.ffffff"
    text, and comparing its two month characters is twice as fast as strftime's number."""
    if is_sqlite(session):
        return func.substr(Image.observed_at, 6, 2)
    return extract("month", Image.observed_at)


def year_of(session: Session) -> Any:
    """The observation year in SQL (text on SQLite, as `month_of`)."""
    if is_sqlite(session):
        return func.substr(Image.observed_at, 1, 4)
    return extract("year", Image.observed_at)


def month_value(session: Session, month: int) -> int | str:
    """A month as `month_of` gives it: "06" on SQLite, 6 elsewhere."""
    return f"{month:02d}" if is_sqlite(session) else month
