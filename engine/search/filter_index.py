"""Filters answered by indexes: dates, months and a box on the map, at millions of photos.

Migration 0012 gave each photo its observation date, year and month as indexed columns and
its place in an index (the R*Tree `image_places` on SQLite, a GiST index over
point(longitude, latitude) on PostgreSQL). `indexed_ids` answers a filter made only of dates,
months and a box from those indexes, where `engine.search.filters` would read every row; its
answers are the same (tests/test_filters_indexed.py holds the two paths to that). It is used
only once the columns of the rows catalogued before 0012 are filled
(`engine.catalog.filter_columns`). Also here: how ids are read in bulk (`fetch_ids`), which both
paths share.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields
from typing import TYPE_CHECKING, Any

import numpy as np
from sqlalchemy import (
    ColumnElement,
    Text,
    cast,
    column,
    func,
    or_,
    select,
    table,
)
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import UnaryExpression
from sqlalchemy.sql.operators import custom_op

from engine.catalog import Image
from engine.catalog.filter_columns import PLACES_TABLE
from engine.search.filter_kinds.base import STATUS_OK, is_sqlite

if TYPE_CHECKING:
    from engine.search.filters import SearchFilters


# The filters these indexes answer on their own. Any other filter (a taxon, a saved query's
# judgments, a collection) has an index of its own or is rarer: with one of them the query is
# written as before and the planner starts from that index.
_INDEXED_FILTERS = frozenset(("date_from", "date_to", "months", "bbox"))
# How far inside a box a place in the R*Tree must lie to pass on the tree's coordinates alone:
# the tree keeps them in 32 bits, rounded outwards (by about 2e-5 degrees at 180); a place
# nearer the edge than this is decided by its exact coordinates.
_RTREE_MARGIN = 1e-4
# Up to this many photos in a box, dates are checked by looking each photo up (random reads);
# above, the dates' ids come from their index and the two sets are intersected.
_LOOKUPS = 20_000

# SQLite's R*Tree of the searched photos' places (migration 0012); `latitude` and `longitude`
# are its auxiliary columns, the exact values.
_places = table(
    PLACES_TABLE,
    column("id"),
    column("min_lat"),
    column("max_lat"),
    column("min_lon"),
    column("max_lon"),
    column("latitude"),
    column("longitude"),
)


def fetch_ids(
    session: Session, terms: Sequence[ColumnElement[bool]], source: Any = None
) -> np.ndarray:
    """The ids of the photos matching `terms`, sorted, read as one comma-separated text
    (group_concat, string_agg): rows one by one through the ORM cost 2.3 s at 1M ids, this 0.4 s.
    `source` is what to select from and which id column (default: `images`)."""
    id_column, from_clause = source if source is not None else (Image.id, None)
    if is_sqlite(session):
        concatenated: Any = func.group_concat(id_column)
    else:  # PostgreSQL's own: one text, not a Python object per row
        concatenated = func.string_agg(cast(id_column, Text), ",")
    stmt = select(concatenated).where(*terms)
    if from_clause is not None:
        stmt = stmt.select_from(from_clause)
    joined = session.execute(stmt).scalar()
    # numpy parses the text in C: 60 ms for a million ids, against 480 ms through split.
    ids = np.fromstring(joined, dtype=np.int64, sep=",") if joined else np.empty(0, np.int64)
    # Stable (timsort): ids read along an index come in sorted runs, which it merges in a pass.
    ids.sort(kind="stable")
    return ids


def answered_by_indexes(filters: SearchFilters) -> bool:
    """Whether every set filter is a date, a month range or a box."""
    set_names = {f.name for f in fields(filters) if getattr(filters, f.name) not in (None, ())}
    return bool(set_names) and set_names <= _INDEXED_FILTERS


def _unindexed(column: Any) -> Any:
    """`+column`: the same value, which SQLite's planner may not look up in an index."""
    return UnaryExpression(column, operator=custom_op("+"), type_=column.type)


def _date_terms(filters: SearchFilters, indexed: bool = True) -> list[ColumnElement[bool]]:
    """The date range and months over the new columns (the observer's local date); with
    `indexed` False as expressions the planner checks row by row instead of starting there.
    With a date range the months are checked in the date index (which holds them), never
    looked up from the month index (a quarter of every photo, each fetched to check its date)."""
    day = Image.observed_date if indexed else _unindexed(Image.observed_date)
    dated = filters.date_from is not None or filters.date_to is not None
    month = Image.observed_month if indexed and not dated else _unindexed(Image.observed_month)
    terms: list[ColumnElement[bool]] = []
    if filters.date_from:
        terms.append(day >= filters.date_from)
    if filters.date_to:
        terms.append(day <= filters.date_to)
    if filters.months:
        first, last = filters.months
        if first <= last:
            terms.append(month.between(first, last))
        else:  # across the year end: Nov..Feb as the list 11, 12, 1, 2 (an index takes a list)
            terms.append(month.in_([*range(first, 13), *range(1, last + 1)]))
    return terms


def _longitude_ranges(min_lon: float, max_lon: float) -> list[tuple[float, float]]:
    """A box's longitudes as ranges: two across the antimeridian."""
    if min_lon <= max_lon:
        return [(min_lon, max_lon)]
    return [(min_lon, 180.0), (-180.0, max_lon)]


def _rtree_terms(
    min_lat: float, max_lat: float, min_lon: float, max_lon: float
) -> list[ColumnElement[bool]]:
    """The R*Tree's places in a box (edges included; one longitude range): a place well inside
    passes on the tree's coordinates alone, one near an edge on its exact ones (reading those
    is what costs, so only the few near an edge are read)."""
    p, m = _places.c, _RTREE_MARGIN
    inside = (
        (p.min_lat >= min_lat + m)
        & (p.max_lat <= max_lat - m)
        & (p.min_lon >= min_lon + m)
        & (p.max_lon <= max_lon - m)
    )
    exact = p.latitude.between(min_lat, max_lat) & p.longitude.between(min_lon, max_lon)
    overlaps = [
        p.max_lat >= min_lat,
        p.min_lat <= max_lat,
        p.max_lon >= min_lon,
        p.min_lon <= max_lon,
    ]
    return [*overlaps, or_(inside, exact)]


def _postgres_box_terms(bbox: tuple[float, float, float, float]) -> list[ColumnElement[bool]]:
    """A box on PostgreSQL: the GiST index over point(longitude, latitude) finds the candidates
    (its comparisons allow a little slack), the exact comparisons decide."""
    min_lat, min_lon, max_lat, max_lon = bbox
    ranges = _longitude_ranges(min_lon, max_lon)
    point = func.point(Image.longitude, Image.latitude)
    boxes = [
        point.op("<@")(func.box(func.point(lo, min_lat), func.point(hi, max_lat)))
        for lo, hi in ranges
    ]
    exact = [
        Image.latitude.between(min_lat, max_lat),
        or_(*(Image.longitude.between(lo, hi) for lo, hi in ranges)),
    ]
    return [or_(*boxes), *exact]


def indexed_ids(session: Session, filters: SearchFilters) -> np.ndarray:
    """Sorted ids of the status-ok photos passing `filters` (dates, months, a box: see
    `answered_by_indexes`), read from the indexes of migration 0012."""
    dates = _date_terms(filters)
    if not filters.bbox:
        return fetch_ids(session, [STATUS_OK, *dates])
    if not is_sqlite(session):
        return fetch_ids(session, [STATUS_OK, *dates, *_postgres_box_terms(filters.bbox)])
    # The R*Tree holds only searched photos (status ok): its ids need no look at `images`.
    box_ids = _rtree_ids(session, filters.bbox)
    if not dates:
        return box_ids
    if len(box_ids) > _LOOKUPS:  # a big box: the dates' own ids, then both at once
        return np.intersect1d(box_ids, fetch_ids(session, [STATUS_OK, *dates]), assume_unique=True)
    # A small box: its photos' dates looked up by id (the dates unindexed, so the planner
    # starts from the box, not from a year of photos).
    return _rtree_ids(session, filters.bbox, _date_terms(filters, indexed=False))


def _rtree_ids(
    session: Session,
    bbox: tuple[float, float, float, float],
    dates: Sequence[ColumnElement[bool]] = (),
) -> np.ndarray:
    """Sorted ids of the R*Tree's places in `bbox` (and, given date terms, of those photos'
    rows that pass them)."""
    min_lat, min_lon, max_lat, max_lon = bbox
    source: tuple[Any, Any] = (_places.c.id, None)
    if dates:
        source = (_places.c.id, _places.join(Image.__table__, Image.id == _places.c.id))
    parts = [
        fetch_ids(session, [*_rtree_terms(min_lat, max_lat, lo, hi), *dates], source)
        for lo, hi in _longitude_ranges(min_lon, max_lon)
    ]
    ids = np.concatenate(parts)  # the ranges are disjoint: no id twice
    ids.sort(kind="stable")
    return ids
