"""The registry of filter kinds, one module per family: `time` (dates, months, hours), `place`
(box, radius), `records` (taxon, licence, collection, keyword, deployment), `judged` and
`detections` (empty frames, detector category, classifier label).

`SearchFilters` (engine.search.filters) checks its values, builds its SQL and shows its chips
kind by kind from `KINDS`; `quadrat`'s filter options (`cli_options`) and the window's
"Add filter" menu (`menu_entries`) are read from here too. A new kind is a `FilterKind` in its
family's module, listed in `KINDS`, with a field of the same name on `SearchFilters`.
"""

from __future__ import annotations

from engine.search.filter_kinds import detections, judged, place, records, time
from engine.search.filter_kinds.base import (
    LITERAL_LIST,
    CliOption,
    FilterKind,
    MenuEntry,
    as_int,
    as_sequence,
    fail,
    in_ids,
    named_ids,
)
from engine.search.filter_kinds.time import month_of, month_value, year_of

# In the order of `SearchFilters`' fields: the order of checks, SQL terms and chips.
KINDS: tuple[FilterKind, ...] = (
    records.TAXON,
    time.DATE_FROM,
    time.DATE_TO,
    time.MONTHS,
    place.BBOX,
    place.NEAR,
    records.LICENSE,
    records.LICENSES,
    records.COLLECTIONS,
    judged.JUDGED_KIND,
    records.KEYWORD,
    records.DEPLOYMENTS,
    time.HOURS,
    detections.EMPTY,
    detections.DETECTED,
    detections.LABEL,
)


def cli_options() -> list[CliOption]:
    """Every kind's command-line options, in `--help`'s order."""
    return sorted((option for kind in KINDS for option in kind.cli), key=lambda o: o.order)


def menu_entries() -> list[MenuEntry]:
    """Every kind's entry in the filter bar's menu, in the menu's order."""
    return sorted((kind.menu for kind in KINDS if kind.menu), key=lambda e: e.order)


__all__ = [
    "KINDS",
    "LITERAL_LIST",
    "CliOption",
    "FilterKind",
    "MenuEntry",
    "as_int",
    "as_sequence",
    "cli_options",
    "fail",
    "in_ids",
    "menu_entries",
    "month_of",
    "month_value",
    "named_ids",
    "year_of",
]
