"""What every filter kind is made of, and the checks and SQL pieces the kinds share.

A `FilterKind` names the `SearchFilters` fields it owns and says how their values are checked
(`check`), which WHERE terms they add (`condition`), how the window's chip reads (`chip`), which
`quadrat` options set them (`cli`) and where they sit in the filter bar's menu (`menu`). The
registry (`engine.search.filter_kinds.KINDS`) lists them; `SearchFilters`, the command line and
the window read it. This module imports nothing heavy: `quadrat --help` reads the options.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from numbers import Integral, Real
from typing import Any

from sqlalchemy import ColumnElement, bindparam, literal_column
from sqlalchemy.orm import Session

from engine.catalog import Image
from engine.errors import BadInputError

# Above this many ids an IN list is written as literal integers instead of bound variables.
LITERAL_LIST = 500

# "status = 'ok'" with the value written into the SQL, not bound: SQLite uses an index made
# "WHERE status = 'ok'" only for a query that says so in the same words.
STATUS_OK: ColumnElement[bool] = Image.status == literal_column("'ok'")

Hours = tuple[int, int]
# The WHERE terms of one kind: none when it is not set, None when no photo can pass.
Terms = list[ColumnElement[bool]] | None


@dataclass(frozen=True)
class CliOption:
    """One `quadrat` option that sets a filter field (search, evaluate, certify, ask).

    `parse` turns the option's text into the field's value, raising `BadInputError` with the
    message the command line shows; `many` options may be given again (a list); `by_name`
    options hold names the command resolves against the library (collections)."""

    flag: str
    field: str
    help: str
    order: int  # the option's place in `--help`
    metavar: str | None = None
    parse: Callable[[str], Any] | None = None
    many: bool = False
    by_name: bool = False
    const: Any = None  # when set, the option may be given bare and then takes this value

    @property
    def dest(self) -> str:
        """The argparse attribute the option fills ("--date-from" -> "date_from")."""
        return self.flag.lstrip("-").replace("-", "_")


@dataclass(frozen=True)
class MenuEntry:
    """A kind's entry in the filter bar's "Add filter" menu: its label and which of the bar's
    editors (or submenus) it opens."""

    label: str
    editor: str
    order: int  # the entry's place in the menu


def _no_terms(_session: Session, _filters: Any) -> Terms:
    return []


def _no_chip(_filters: Any, _names: Any) -> str | None:
    return None


@dataclass(frozen=True)
class FilterKind:
    """One kind of filter; see the module docstring. `check` takes the `SearchFilters` being
    made and gives its fields' values as kept (normalised), raising `fail` for a bad one."""

    name: str  # the chip's key, which `SearchFilters.without` clears
    family: str  # "time", "place", "records", "judged" or "detections": its module
    fields: tuple[str, ...]
    check: Callable[[Any], dict[str, Any]]
    condition: Callable[[Session, Any], Terms] = _no_terms
    chip: Callable[[Any, Any], str | None] = _no_chip
    cli: tuple[CliOption, ...] = ()
    menu: MenuEntry | None = None


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


def as_float(key: str, value: object) -> float:
    """A finite number (or its text), else `fail`."""
    if isinstance(value, bool) or not isinstance(value, Real | str):
        raise fail(key, f"expected a number, got {value!r:.60}")
    try:
        number = float(value)
    except ValueError:
        raise fail(key, f"expected a number, got {value!r:.60}") from None
    if not math.isfinite(number):
        raise fail(key, f"expected a finite number, got {value!r:.60}")
    return number


def as_text(key: str, value: object) -> str | None:
    """Text with its runs of whitespace collapsed (None when nothing is left), else `fail`."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise fail(key, f"expected text, got {value!r:.60}")
    return " ".join(value.split()) or None


def as_date(key: str, value: object) -> date:
    """A date (a datetime's day, or ISO text), else `fail`."""
    if isinstance(value, datetime):
        return value.date()
    if isinstance(value, date):
        return value
    if isinstance(value, str):
        try:
            return date.fromisoformat(value.strip())
        except ValueError:
            pass
    raise fail(key, f"expected a date as YYYY-MM-DD, got {value!r:.60}")


def numbers(key: str, value: object, count: int) -> tuple[float, ...]:
    """Exactly `count` finite numbers, else `fail`."""
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise fail(key, f"expected {count} numbers, got {value!r:.60}")
    found = tuple(as_float(key, v) for v in value)
    if len(found) != count:
        raise fail(key, f"expected {count} numbers, got {len(found)}")
    return found


def unique_ids(key: str, value: object) -> tuple[int, ...]:
    """Whole numbers, sorted and unique (collections, deployments)."""
    return tuple(sorted({as_int(key, v) for v in as_sequence(key, value)}))


def fold(text: str) -> str:
    """Text compared without case or extra spaces (Unicode-aware, unlike SQLite's lower()).
    NUL characters are dropped: SQLite would end a pattern at one, and match anything."""
    return " ".join(text.replace("\x00", "").split()).casefold()


def named_ids(word: str, ids: Sequence[int], names: Mapping[int, str] | None) -> str:
    """ "deployment CAM01_trail (QT0001)", "collections Birds, #7": each id by its name where
    one is known, else by its number."""
    known = names or {}
    shown = ", ".join(known.get(i) or f"#{i}" for i in ids)
    return f"{word}{'s' * (len(ids) != 1)} {shown}"


# -- SQL --------------------------------------------------------------------------------------


def is_sqlite(session: Session) -> bool:
    return session.get_bind().dialect.name == "sqlite"


def in_ids(column: Any, ids: Sequence[int]) -> ColumnElement[bool]:
    """`column IN (ids)`; a long list is written into the SQL as integers, since SQLite caps
    the number of bound variables (the values are ints, so nothing can be injected)."""
    values = [int(i) for i in ids]
    if len(values) <= LITERAL_LIST:
        return column.in_(values)  # type: ignore[no-any-return]
    return column.in_(bindparam("ids", values, expanding=True, literal_execute=True))  # type: ignore[no-any-return]


def like_escaped(text: str) -> str:
    r"""A LIKE pattern that finds `text` as typed: %, _ and \ match themselves."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped.lower()}%"
