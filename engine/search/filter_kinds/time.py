"""Filter kinds of time: a date range, months of any year, hours of the day."""

from __future__ import annotations

from datetime import date, datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, extract, func, or_
from sqlalchemy.orm import Session

from engine.catalog import Image
from engine.errors import BadInputError
from engine.search.filter_kinds.base import (
    CliOption,
    FilterKind,
    Hours,
    MenuEntry,
    Terms,
    as_date,
    as_int,
    as_sequence,
    fail,
    is_sqlite,
)

MONTH_NAMES = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
MONTH_WORDS = (
    "january", "february", "march", "april", "may", "june",
    "july", "august", "september", "october", "november", "december",
)  # fmt: skip


def month_range_label(months: tuple[int, int]) -> str:
    """(6, 8) -> "Jun–Aug", (11, 2) -> "Nov–Feb", (5, 5) -> "May"."""
    first, last = months
    if first == last:
        return MONTH_NAMES[first - 1]
    return f"{MONTH_NAMES[first - 1]}–{MONTH_NAMES[last - 1]}"


# -- SQL: parts of the observation time -------------------------------------------------------


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


# -- the command line's texts -----------------------------------------------------------------


def iso_date(text: str) -> date:
    """A calendar date as YYYY-MM-DD (29 February only in a leap year)."""
    try:
        return date.fromisoformat(text.strip())
    except ValueError:
        raise BadInputError(f"expected a date as YYYY-MM-DD, got {text!r} (no such day?)") from None


def _month(text: str) -> int:
    word = text.strip().lower().rstrip(".")
    if word.isdigit() and 1 <= int(word) <= 12:
        return int(word)
    if len(word) >= 3:
        for number, name in enumerate(MONTH_WORDS, start=1):
            if name.startswith(word):
                return number
    raise BadInputError(f"expected a month as 1..12 or a name (jun, june), got {text.strip()!r}")


def month_range(text: str) -> tuple[int, int]:
    """ "6-8", "jun-aug", "nov-feb" (wraps the year end) or one month "jun"."""
    parts = text.replace("–", "-").split("-")
    if len(parts) == 1:
        month = _month(parts[0])
        return month, month
    if len(parts) != 2:
        raise BadInputError(f"expected FIRST-LAST months (6-8, jun-aug), got {text!r}")
    return _month(parts[0]), _month(parts[1])


def hour_range(text: str) -> tuple[int, int]:
    """ "20-5" (wraps midnight: the night), "6-18", or one hour "7"."""
    parts = text.replace("–", "-").split("-")
    try:
        hours = [int(p) for p in parts]
    except ValueError:
        hours = []
    if len(hours) not in (1, 2) or not all(0 <= h <= 23 for h in hours):
        raise BadInputError(f"expected FIRST-LAST hours 0..23 (20-5), got {text!r}")
    return hours[0], hours[-1]


# -- the kinds --------------------------------------------------------------------------------


def _check_date(name: str) -> Any:
    def check(filters: Any) -> dict[str, Any]:
        value = getattr(filters, name)
        return {name: None if value is None else as_date(name, value)}

    return check


def _date_from_terms(_session: Session, filters: Any) -> Terms:
    if not filters.date_from:
        return []
    # Dates are stored as ISO text, so these compare as strings and keep any index usable.
    return [Image.observed_at >= datetime.combine(filters.date_from, datetime.min.time())]


def _date_to_terms(_session: Session, filters: Any) -> Terms:
    if not filters.date_to:
        return []
    end = datetime.combine(filters.date_to + timedelta(days=1), datetime.min.time())
    return [Image.observed_at < end]


def _check_months(filters: Any) -> dict[str, Any]:
    if filters.months is None:
        return {}
    months = tuple(as_int("months", m) for m in as_sequence("months", filters.months))
    if len(months) != 2 or not all(1 <= m <= 12 for m in months):
        raise fail("months", f"expected two months 1..12, got {list(months)}")
    return {"months": months}


def _months_terms(session: Session, filters: Any) -> Terms:
    if not filters.months:
        return []
    first, last = (month_value(session, m) for m in filters.months)
    month = month_of(session)
    if filters.months[0] <= filters.months[1]:
        return [month.between(first, last)]
    return [or_(month >= first, month <= last)]  # across the year end: Nov..Feb


def _check_hours(filters: Any) -> dict[str, Any]:
    if filters.hours is None:
        return {"hours": None}
    values = tuple(as_int("hours", h) for h in as_sequence("hours", filters.hours))
    if len(values) != 2 or not all(0 <= h <= 23 for h in values):
        raise fail("hours", f"expected two hours 0..23, got {list(values)}")
    checked: Hours = (values[0], values[1])
    return {"hours": checked}


def _hours_terms(session: Session, filters: Any) -> Terms:
    if not filters.hours:
        return []
    hour = hour_of(session)
    first, last = (hour_value(session, h) for h in filters.hours)
    terms: list[ColumnElement[bool]] = [Image.observed_at.is_not(None)]
    if filters.hours[0] <= filters.hours[1]:
        terms.append(hour.between(first, last))
    else:  # across midnight: 20..5
        terms.append(or_(hour >= first, hour <= last))
    return terms


DATE_FROM = FilterKind(
    "date_from",
    "time",
    ("date_from",),
    check=_check_date("date_from"),
    condition=_date_from_terms,
    chip=lambda f, _names: f"from {f.date_from.isoformat()}" if f.date_from else None,
    cli=(
        CliOption(
            "--date-from",
            "date_from",
            "only photos observed on or after this day",
            2,
            metavar="YYYY-MM-DD",
            parse=iso_date,
        ),
    ),  # fmt: skip
    menu=MenuEntry("Date range…", "dates", 2),
)
DATE_TO = FilterKind(
    "date_to",
    "time",
    ("date_to",),
    check=_check_date("date_to"),
    condition=_date_to_terms,
    chip=lambda f, _names: f"until {f.date_to.isoformat()}" if f.date_to else None,
    cli=(
        CliOption(
            "--date-to",
            "date_to",
            "only photos observed on or before this day",
            3,
            metavar="YYYY-MM-DD",
            parse=iso_date,
        ),
    ),  # fmt: skip
)
MONTHS = FilterKind(
    "months",
    "time",
    ("months",),
    check=_check_months,
    condition=_months_terms,
    chip=lambda f, _names: f"{month_range_label(f.months)}, any year" if f.months else None,
    cli=(
        CliOption(
            "--months",
            "months",
            "only photos observed in these months of any year: 6-8, jun-aug, or nov-feb "
            "(across the year end)",
            4,
            metavar="M1-M2",
            parse=month_range,
        ),
    ),
    menu=MenuEntry("Months of the year…", "months", 3),
)
HOURS = FilterKind(
    "hours",
    "time",
    ("hours",),
    check=_check_hours,
    condition=_hours_terms,
    chip=lambda f, _names: f"{f.hours[0]:02d}:00–{f.hours[1]:02d}:59" if f.hours else None,
    cli=(
        CliOption(
            "--hours",
            "hours",
            "only photos taken in these hours of the day (local time, clock offsets applied): "
            "6-18, or 20-5 across midnight",
            9,
            metavar="FIRST-LAST",
            parse=hour_range,
        ),
    ),
    menu=MenuEntry("Hour of day…", "hours", 4),
)
