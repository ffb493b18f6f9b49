"""The metadata filter flags of `quadrat search` and `quadrat evaluate`, read from the
registry of filter kinds (`engine.search.filter_kinds`: each kind declares its options).

Each flag's value is checked while the arguments are read (a bad one exits 2 with one line
naming the flag, before any model or library is opened); `filters_from_args` turns them into
the engine's `SearchFilters`, resolving collection names against the library.
"""

from __future__ import annotations

import argparse
import functools
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from engine.errors import BadInputError
from engine.search.filter_kinds import cli_options
from engine.search.filter_kinds.place import bounding_box as _bounding_box
from engine.search.filter_kinds.place import near_point as _near_point
from engine.search.filter_kinds.records import licence_code as _licence_code
from engine.search.filter_kinds.time import hour_range as _hour_range
from engine.search.filter_kinds.time import iso_date as _iso_date
from engine.search.filter_kinds.time import month_range as _month_range

if TYPE_CHECKING:
    from engine.catalog.library import Library
    from engine.search.filters import SearchFilters

_NEGATIVE_VALUE = re.compile(r"^-\d+$|^-\d*\.\d+$|^-[\d.]+(,[-+\d.eE]*)+$")


def argument_type(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """A kind's text parser as an argparse type: its `BadInputError` becomes argparse's
    one-line error for the flag."""
    if isinstance(parse, type):
        return parse  # a builtin such as int: argparse names it in its message

    @functools.wraps(parse)
    def checked(text: str) -> Any:
        try:
            return parse(text)
        except BadInputError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return checked


iso_date = argument_type(_iso_date)
month_range = argument_type(_month_range)
hour_range = argument_type(_hour_range)
bounding_box = argument_type(_bounding_box)
near_point = argument_type(_near_point)
licence_code = argument_type(_licence_code)


def add_filter_options(parser: argparse.ArgumentParser, *, collection: bool = True) -> None:
    """The filter flags; `collection=False` leaves out --collection for a command that has its
    own (`evaluate`'s names what is ranked)."""
    # argparse takes "-17,179.9,20" for an option (only a lone number may start with "-"); a
    # comma list of numbers is a value too, so western and southern places need no "=".
    if isinstance(getattr(parser, "_negative_number_matcher", None), re.Pattern):
        parser._negative_number_matcher = _NEGATIVE_VALUE
    group = parser.add_argument_group("filters (a photo must pass every one given)")
    for option in cli_options():
        if option.by_name and not collection:
            continue
        extra: dict[str, Any] = {}
        if option.parse is not None:
            extra["type"] = argument_type(option.parse)
        if option.many:
            extra["action"] = "append"
        if option.const is not None:
            extra.update(nargs="?", const=option.const)
        if option.metavar is not None:
            extra["metavar"] = option.metavar
        group.add_argument(option.flag, help=option.help, **extra)


def check_filter_args(args: argparse.Namespace) -> None:
    """What no single flag can check: a date range that ends before it starts."""
    date_from, date_to = getattr(args, "date_from", None), getattr(args, "date_to", None)
    if date_from and date_to and date_from > date_to:
        raise BadInputError(
            f"--date-from {date_from.isoformat()} is after --date-to {date_to.isoformat()}: "
            "no photo could match"
        )


def filters_from_args(args: argparse.Namespace, library: Library | None = None) -> SearchFilters:
    """The SearchFilters the flags ask for; --collection names are looked up in `library`
    (without one they are left to the caller, as `evaluate` does with its own --collection)."""
    from engine.search.filters import SearchFilters, find_collections

    check_filter_args(args)
    values: dict[str, Any] = {}
    for option in cli_options():
        value = getattr(args, option.dest, None)
        if option.by_name:  # names looked up in the library (collections)
            if value and library is not None:
                try:
                    values[option.field] = find_collections(library.catalog, value)
                except BadInputError as exc:
                    raise BadInputError(f"{option.flag}: {exc}") from None
        elif option.many:
            values[option.field] = tuple(value or ())
        else:
            values[option.field] = value
    return SearchFilters(**values)
