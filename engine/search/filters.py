"""Metadata filters: which photos a search may return, and what the current results hold.

`SearchFilters` is the one description of a restriction (taxon, dates, months of any year,
a box or a radius on the map, licences, collections, judged or not for a saved query), saved
with a run through `to_params`/`from_params` and shown as chips through `describe`.
`filtered_ids` turns it into the sorted id array the vector search takes as its filter; every
common filter runs inside SQLite, and only "near" finishes in numpy (exact great-circle
distances over the candidates of a bounding box). Dates, months and a box alone are read from
the indexes of migration 0012 (`engine.search.filter_index`), not from every row, or at
millions of photos from the columns cached in memory (`engine.search.filter_cache`). Each
kind of filter checks its values, writes its SQL and reads as a chip in its own module of
`engine.search.filter_kinds` (time, place, records, judged); this module goes through them.

`facet_counts`, `month_counts`, `locations` and `taxon_suggestions` describe a result set or
the catalog for the window's chips, histogram and map.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import date
from typing import Any

import numpy as np
from sqlalchemy import (
    ColumnElement,
    Select,
    and_,
    func,
    or_,
    select,
)
from sqlalchemy.orm import Session

from engine.catalog import Catalog, Collection, Image, Taxon
from engine.catalog.filter_columns import filter_columns_filled
from engine.errors import BadInputError
from engine.search.filter_cache import cached_ids
from engine.search.filter_index import answered_by_indexes, indexed_ids
from engine.search.filter_index import fetch_ids as _fetch_ids
from engine.search.filter_kinds import KINDS
from engine.search.filter_kinds.base import LITERAL_LIST as _LITERAL_LIST
from engine.search.filter_kinds.base import STATUS_OK as _STATUS_OK
from engine.search.filter_kinds.base import fold as _fold
from engine.search.filter_kinds.base import in_ids as _in_ids
from engine.search.filter_kinds.base import is_sqlite as _sqlite
from engine.search.filter_kinds.base import like_escaped as _like_escaped
from engine.search.filter_kinds.judged import JUDGED, UNJUDGED
from engine.search.filter_kinds.place import (
    EARTH_RADIUS_KM,
    MAX_RADIUS_KM,
    latitude_text,
    longitude_text,
    near_box,
)
from engine.search.filter_kinds.records import RANKS as _RANKS
from engine.search.filter_kinds.records import SQL_NEEDLE as _SQL_NEEDLE
from engine.search.filter_kinds.records import (
    license_label,
    normalise_license,
    taxon_ids,
)
from engine.search.filter_kinds.time import MONTH_NAMES, month_range_label
from engine.search.filter_kinds.time import month_of as _month_of
from engine.search.filter_kinds.time import year_of as _year_of

__all__ = [
    "EARTH_RADIUS_KM",
    "JUDGED",
    "MAX_RADIUS_KM",
    "MONTH_NAMES",
    "UNJUDGED",
    "FacetValue",
    "FilterNames",
    "SearchFilters",
    "TaxonSuggestion",
    "facet_counts",
    "filter_names",
    "filter_terms",
    "filtered_ids",
    "find_collections",
    "great_circle_km",
    "great_circle_sql",
    "latitude_text",
    "license_label",
    "locations",
    "longitude_text",
    "month_counts",
    "month_range_label",
    "near_box",
    "normalise_license",
    "taxon_ids",
    "taxon_suggestions",
]

UNKNOWN_KEY, UNKNOWN_LABEL = "", "unknown"

# Ids per IN (...) list: SQLite builds before 3.32 allow at most 999 bound variables.
_CHUNK = 900
# -- the filters ------------------------------------------------------------------------------


@dataclass(frozen=True)
class SearchFilters:
    """Metadata restrictions, applied as an id filter before the vector search.

    A photo without a date fails the date and month filters; one without GPS fails `bbox` and
    `near`; one without a licence fails the licence filters. Values are checked (and lists made
    tuples, licence codes normalised) when the filters are made: a bad one raises a one-line
    `BadInputError` naming the filter.
    """

    taxon: str | None = None  # any rank, scientific or common name (see `taxon_ids`)
    date_from: date | None = None
    date_to: date | None = None
    # (first, last) month 1..12, inclusive, any year; first > last wraps the year end:
    # (11, 2) = Nov..Feb.
    months: tuple[int, int] | None = None
    # min_lat, min_lon, max_lat, max_lon; min_lon > max_lon crosses the antimeridian
    bbox: tuple[float, float, float, float] | None = None
    near: tuple[float, float, float] | None = None  # (lat, lon, radius_km), great-circle
    license: str | None = None  # substring of the licence text, any case
    licenses: tuple[str, ...] = ()  # any of these licence codes, normalised
    collection_ids: tuple[int, ...] = ()
    judged: str | None = None  # None, "judged" or "unjudged" ...
    judged_query_id: int | None = None  # ... for this saved query (both or neither)
    keyword: str | None = None  # an XMP/IPTC keyword, any case, whole or a level of a path
    deployment_ids: tuple[int, ...] = ()  # camera deployments (engine.indexing.deployments)
    # (first, last) hour 0..23 of the photo's local time, inclusive; first > last wraps
    # midnight: (20, 5) = 20:00 to 05:59, the night (diel activity).
    hours: tuple[int, int] | None = None
    # Detector and classifier output (engine.search.filter_kinds.detections): frames empty at
    # this confidence, frames with a box at this one, a detector category, a classifier label.
    empty: float | None = None
    not_empty: float | None = None
    detected: str | None = None
    detection_label: str | None = None

    def __post_init__(self) -> None:
        # Each kind checks its own fields (engine.search.filter_kinds), in field order.
        for kind in KINDS:
            for name, value in kind.check(self).items():
                object.__setattr__(self, name, value)  # frozen: only here, while being made

    @property
    def active(self) -> bool:
        """True when any filter is set."""
        return any(getattr(self, f.name) not in (None, ()) for f in fields(self))

    def to_params(self) -> dict[str, Any]:
        """The set filters as JSON-safe values (saved with a run); `from_params` reads it back."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value in (None, ()):
                continue
            if isinstance(value, date):
                value = value.isoformat()
            elif isinstance(value, tuple):
                value = list(value)
            out[f.name] = value
        return out

    @classmethod
    def from_params(cls, data: Mapping[str, Any] | None) -> SearchFilters:
        """Filters from `to_params`'s dictionary; missing keys are unset and unknown keys
        ignored (a run saved by a later version); a bad value is a one-line BadInputError."""
        if data is None:
            return cls()
        if not isinstance(data, Mapping):
            raise BadInputError(f"filters: expected a mapping of filter names, got {data!r:.60}")
        known = {f.name for f in fields(cls)}
        values = {key: value for key, value in data.items() if key in known and value is not None}
        try:
            return cls(**values)
        except (TypeError, ValueError) as exc:  # a shape no field check caught
            raise BadInputError(f"filters: {exc}") from None

    def describe(self, names: FilterNames | None = None) -> list[tuple[str, str]]:
        """(key, short label) of each set filter, in field order: the window's chips. A key is
        the field's name ("judged" stands for judged and judged_query_id); `without(key)`
        clears it. Collections and deployments are named from `names` (`filter_names`),
        by number where it has none."""
        names = names or FilterNames()
        chips: list[tuple[str, str]] = []
        for kind in KINDS:
            label = kind.chip(self, names)
            if label:
                chips.append((kind.name, label))
        return chips

    def without(self, key: str) -> SearchFilters:
        """The same filters with one (a `describe` key, or "date" for both dates) cleared:
        every field of its kind (judged clears the saved query it is about too)."""
        if key == "date":
            return replace(self, date_from=None, date_to=None)
        kind = next((k for k in KINDS if key == k.name or key in k.fields), None)
        if kind is None:
            names = ", ".join(f.name for f in fields(self))
            raise ValueError(f"no filter {key!r}; the filters are {names}")
        unset: dict[str, Any] = {f.name: f.default for f in fields(self)}  # None, or ()
        return replace(self, **{name: unset[name] for name in kind.fields})


# -- filtering --------------------------------------------------------------------------------


def great_circle_km(lat: float, lon: float, lats: np.ndarray, lons: np.ndarray) -> np.ndarray:
    """Haversine distances in km from one point to arrays of points."""
    phi1, phi2 = math.radians(lat), np.radians(lats)
    dphi = phi2 - phi1
    dlmb = np.radians(lons) - math.radians(lon)
    a = np.sin(dphi / 2.0) ** 2 + math.cos(phi1) * np.cos(phi2) * np.sin(dlmb / 2.0) ** 2
    result: np.ndarray = 2.0 * EARTH_RADIUS_KM * np.arcsin(np.sqrt(np.clip(a, 0.0, 1.0)))
    return result


def _conditions(session: Session, filters: SearchFilters) -> list[ColumnElement[bool]] | None:
    """The WHERE terms of `filters` (None when a term already rules out every photo), kind by
    kind (engine.search.filter_kinds)."""
    terms: list[ColumnElement[bool]] = [_STATUS_OK]
    for kind in KINDS:
        more = kind.condition(session, filters)
        if more is None:
            return None
        terms += more
    return terms


def great_circle_sql(lat: float, lon: float) -> ColumnElement[float]:
    """`great_circle_km` from one point to each photo's position, in SQL (PostgreSQL's
    trigonometry; the same haversine, so a photo on the rim falls on the same side)."""
    phi1 = math.radians(lat)
    phi2 = func.radians(Image.latitude)
    half_dphi = (phi2 - phi1) / 2.0
    half_dlmb = (func.radians(Image.longitude) - math.radians(lon)) / 2.0
    a = func.power(func.sin(half_dphi), 2) + math.cos(phi1) * func.cos(phi2) * func.power(
        func.sin(half_dlmb), 2
    )
    clipped = func.least(func.greatest(a, 0.0), 1.0)
    return 2.0 * EARTH_RADIUS_KM * func.asin(func.sqrt(clipped))


def filter_terms(catalog: Catalog, filters: SearchFilters) -> list[ColumnElement[bool]] | None:
    """The WHERE terms on `images` of the status-ok photos that pass `filters`, for a query
    that joins them itself (the server's vector search, `engine.catalog.pgvector`): the
    same photos as `filtered_ids`, "near" included (its exact distance in SQL). None when no
    photo can pass. PostgreSQL catalogs only (SQLite has no trigonometry)."""
    with catalog.session() as s:
        terms = _conditions(s, filters)
    if terms is not None and filters.near:
        lat, lon, radius = filters.near
        terms.append(great_circle_sql(lat, lon) <= radius + 1e-9)
    return terms


def filtered_ids(catalog: Catalog, filters: SearchFilters) -> np.ndarray:
    """Sorted int64 ids of the status-ok photos that pass every filter."""
    with catalog.session() as s:
        if answered_by_indexes(filters):
            cached = cached_ids(catalog, s, filters)
            if cached is not None:
                return cached
            if filter_columns_filled(s):
                return indexed_ids(s, filters)
        terms = _conditions(s, filters)
        if terms is None:
            return np.empty(0, dtype=np.int64)
        if not filters.near:
            return _fetch_ids(s, terms)
        # The SQL box holds the cap; the exact distance decides, in numpy.
        stmt = select(Image.id, Image.latitude, Image.longitude).where(and_(*terms))
        rows = s.execute(stmt).all()
    if not rows:
        return np.empty(0, dtype=np.int64)
    ids = np.fromiter((row[0] for row in rows), dtype=np.int64, count=len(rows))
    lats = np.fromiter((row[1] for row in rows), dtype=np.float64, count=len(rows))
    lons = np.fromiter((row[2] for row in rows), dtype=np.float64, count=len(rows))
    lat, lon, radius = filters.near
    inside = great_circle_km(lat, lon, lats, lons) <= radius + 1e-9
    near_ids: np.ndarray = ids[inside]
    near_ids.sort()
    return near_ids


@dataclass(frozen=True)
class FilterNames:
    """How chips name the collections and deployments a filter holds by id."""

    collections: Mapping[int, str] = field(default_factory=dict)
    deployments: Mapping[int, str] = field(default_factory=dict)

    def knows(self, filters: SearchFilters) -> bool:
        """Whether every collection and deployment of `filters` has a name here."""
        return all(i in self.collections for i in filters.collection_ids) and all(
            i in self.deployments for i in filters.deployment_ids
        )


def filter_names(catalog: Catalog) -> FilterNames:
    """The names of the catalog's collections and deployments (a deployment by its name: its
    folder and camera serial; the camera model, shown on the tiles, would make chips and run
    labels too long to read)."""
    from engine.indexing.deployments import deployment_labels

    with catalog.session() as s:
        collections = {
            int(i): str(name) for i, name in s.execute(select(Collection.id, Collection.name))
        }
        deployments = deployment_labels(s, with_camera=False)
    return FilterNames(collections, deployments)


def find_collections(catalog: Catalog, keys: Iterable[str]) -> tuple[int, ...]:
    """The ids of the collections named by `keys`: each a collection's name, its folder or its
    catalog id. A key naming none, or several, is a one-line BadInputError."""
    with catalog.session() as s:
        known = s.execute(select(Collection.id, Collection.name, Collection.root)).all()
    ids: list[int] = []
    for raw in keys:
        key = str(raw).strip()
        found = [c for c in known if c[1] == key]
        if not found:
            found = [c for c in known if c[2] in (key, key.rstrip("/\\"))]
        if not found and key.isdigit():
            found = [c for c in known if c[0] == int(key)]
        if len(found) > 1:
            folders = ", ".join(c[2] for c in found)
            raise BadInputError(f"several collections are named {key!r}: give a folder ({folders})")
        if not found:
            choices = ", ".join(repr(c[1]) for c in sorted(known, key=lambda c: c[1])) or "none yet"
            raise BadInputError(f"no collection {key!r} in the library; the collections: {choices}")
        ids.append(found[0][0])
    return tuple(dict.fromkeys(ids))


# -- describing results -----------------------------------------------------------------------


@dataclass(frozen=True)
class FacetValue:
    """One value of a facet and how many photos of the result set have it."""

    key: str  # what a filter takes ("" for photos without a value)
    label: str
    count: int


@dataclass(frozen=True)
class TaxonSuggestion:
    """A name the taxon filter can take, and how many photos (status ok) lie under it."""

    name: str  # the scientific name at `rank` (what to put in the filter)
    common_name: str | None
    rank: str  # "kingdom" ... "genus", "species", or "taxon" when the catalog does not say
    count: int


def _unique_ids(image_ids: Iterable[int]) -> list[int]:
    return list(dict.fromkeys(int(i) for i in image_ids))


def _rows_for_ids(
    session: Session, image_ids: Sequence[int], *columns: Any
) -> Iterator[tuple[Any, ...]]:
    """(id, *columns) of the given photos, a chunk of ids at a time."""
    for start in range(0, len(image_ids), _CHUNK):
        chunk = image_ids[start : start + _CHUNK]
        stmt: Select[Any] = select(Image.id, *columns).where(Image.id.in_(chunk))
        for row in session.execute(stmt):
            yield tuple(row)


def _sorted_facet(counts: Counter[str], labels: Mapping[str, str]) -> list[FacetValue]:
    values = [FacetValue(key, labels.get(key, key), n) for key, n in counts.items()]
    return sorted(values, key=lambda v: (-v.count, v.label.casefold(), v.key))


def facet_counts(catalog: Catalog, image_ids: Sequence[int]) -> dict[str, list[FacetValue]]:
    """Counts per value of "taxon" (scientific name; the label adds the common name),
    "license" (normalised codes), "collection" (key: its id), "month" (key "1".."12", label
    "Jan"...) and "year" over the given photos. Values by count, most first, then label;
    photos without a value count under key "" labelled "unknown"."""
    ids = _unique_ids(image_ids)
    counts: dict[str, Counter[str]] = {
        name: Counter() for name in ("taxon", "license", "collection", "month", "year")
    }
    labels: dict[str, dict[str, str]] = {name: {UNKNOWN_KEY: UNKNOWN_LABEL} for name in counts}
    with catalog.session() as s:
        month, year = _month_of(s), _year_of(s)
        per_taxon: Counter[int | None] = Counter()
        per_licence: Counter[str | None] = Counter()
        for _, taxon_id, licence, collection_id, m, y in _rows_for_ids(
            s, ids, Image.taxon_id, Image.license, Image.collection_id, month, year
        ):
            per_taxon[taxon_id] += 1
            per_licence[licence] += 1
            counts["collection"][str(collection_id)] += 1
            counts["month"][str(int(m)) if m else UNKNOWN_KEY] += 1
            counts["year"][str(int(y)) if y else UNKNOWN_KEY] += 1
        known_taxa = [t for t in per_taxon if t is not None]
        names: dict[int, tuple[str, str | None]] = {}
        for start in range(0, len(known_taxa), _CHUNK):
            chunk = known_taxa[start : start + _CHUNK]
            for taxon_id, name, common in s.execute(
                select(Taxon.id, Taxon.name, Taxon.common_name).where(Taxon.id.in_(chunk))
            ):
                names[taxon_id] = (name, common)
        collections = dict(s.execute(select(Collection.id, Collection.name)).all())
    for taxon_id, n in per_taxon.items():
        name, common = names.get(taxon_id, ("", None)) if taxon_id is not None else ("", None)
        counts["taxon"][name] += n
        if name:
            labels["taxon"][name] = f"{name} ({common})" if common else name
    for licence, n in per_licence.items():
        code = normalise_license(licence) or UNKNOWN_KEY
        counts["license"][code] += n
        if code:
            labels["license"][code] = license_label(code)
    labels["collection"].update({str(c): name for c, name in collections.items()})
    labels["month"].update({str(m): MONTH_NAMES[m - 1] for m in range(1, 13)})
    return {name: _sorted_facet(counter, labels[name]) for name, counter in counts.items()}


def month_counts(catalog: Catalog, image_ids: Sequence[int]) -> list[int]:
    """Photos per observation month, January to December (photos without a date left out)."""
    ids = _unique_ids(image_ids)
    totals = [0] * 12
    with catalog.session() as s:
        for _, month in _rows_for_ids(s, ids, _month_of(s)):
            if month:
                totals[int(month) - 1] += 1
    return totals


def locations(catalog: Catalog, image_ids: Sequence[int]) -> list[tuple[int, float, float]]:
    """(id, latitude, longitude) of the photos that have a position, in the given order."""
    ids = _unique_ids(image_ids)
    found: dict[int, tuple[float, float]] = {}
    with catalog.session() as s:
        for image_id, lat, lon in _rows_for_ids(s, ids, Image.latitude, Image.longitude):
            if lat is not None and lon is not None:
                found[image_id] = (float(lat), float(lon))
    return [(i, *found[i]) for i in ids if i in found]


# -- taxon completion -------------------------------------------------------------------------


_WORD_START = re.compile(r"(?:^|(?<=[\W_]))(?=\w)")


def _match_quality(value: str, needle: str) -> int | None:
    """0 equal, 1 a prefix of the whole name, 2 a prefix of a later word; None no match."""
    if value == needle:
        return 0
    if value.startswith(needle):
        return 1
    for found in _WORD_START.finditer(value):
        if found.start() and value.startswith(needle, found.start()):
            return 2
    return None


def _own_rank(name: str, epithet: str | None, ranks: Sequence[str | None]) -> str:
    """The rank of a taxon's own name: species when it has an epithet (or two words), else
    the higher rank it equals, else "taxon"."""
    if epithet or len(name.split()) >= 2:
        return "species"
    for (rank, _), value in zip(reversed(_RANKS), reversed(ranks), strict=True):
        if value and _fold(value) == _fold(name):
            return str(rank)
    return "taxon"


def _photos_per_taxon(session: Session, taxa: Sequence[int]) -> dict[int, int]:
    """Status-ok photos per taxon id, for the given taxa."""
    if len(taxa) <= _LITERAL_LIST or not _sqlite(session):
        stmt = select(Image.taxon_id, func.count()).where(_STATUS_OK, _in_ids(Image.taxon_id, taxa))
        rows = session.execute(stmt.group_by(Image.taxon_id))
        return {int(t): int(n) for t, n in rows if t is not None}
    # Many taxa: one pass over the table, counted by numpy. GROUP BY would walk the taxon
    # index and fetch every row for its status, several times slower (4 s against 0.5 s at 1M).
    text = session.execute(
        select(func.group_concat(func.coalesce(Image.taxon_id, 0))).where(_STATUS_OK)
    ).scalar()
    if not text:
        return {}
    counts = np.bincount(np.fromstring(text, dtype=np.int64, sep=","))
    return {int(t): int(counts[t]) for t in taxa if 0 < t < len(counts) and counts[t]}


def _taxa_containing(session: Session, needle: str) -> list[Any]:
    """(id, name, common name, epithet, kingdom ... genus) of the taxa with a name that
    contains `needle` anywhere (a superset of the completions: they are checked in Python).
    An ASCII needle is found by SQL's LIKE, anything else by Python's casefold over all."""
    names = (Taxon.name, Taxon.common_name, *(c for _, c in _RANKS))
    stmt = select(Taxon.id, Taxon.name, Taxon.common_name, Taxon.specific_epithet).add_columns(
        *(c for _, c in _RANKS)
    )
    if needle.isascii() and len(needle) <= _SQL_NEEDLE:
        pattern = _like_escaped(needle)
        return list(
            session.execute(stmt.where(or_(*(func.lower(c).like(pattern, "\\") for c in names))))
        )
    rows = session.execute(stmt).all()
    return [
        row for row in rows if any(v and needle in _fold(v) for v in (row[1], row[2], *row[4:]))
    ]


def taxon_suggestions(catalog: Catalog, prefix: str, limit: int = 12) -> list[TaxonSuggestion]:
    """Names for the taxon filter that start with `prefix` (any case), or have a word that
    does: scientific names at every rank and common names, each with its count of status-ok
    photos. Best first: an equal name, then a prefix of the name, then of a later word; then
    more photos first. Names without photos are left out; any text is safe to pass."""
    needle = _fold(prefix) if isinstance(prefix, str) else ""
    if not needle or limit < 1:
        return []
    # (name, rank) -> [best quality, common name, taxon ids]
    found: dict[tuple[str, str], list[Any]] = {}

    def offer(name: str, rank: str, quality: int, common: str | None, taxon_id: int) -> None:
        entry = found.setdefault((name, rank), [quality, common, set()])
        entry[0] = min(entry[0], quality)
        entry[2].add(taxon_id)

    with catalog.session() as s:
        for taxon_id, name, common, epithet, *ranks in _taxa_containing(s, needle):
            for (rank, _), value in zip(_RANKS, ranks, strict=True):
                quality = _match_quality(_fold(value), needle) if value else None
                if quality is not None:
                    offer(value, rank, quality, None, taxon_id)
            qualities = [
                q for q in (_match_quality(_fold(v), needle) for v in (name, common) if v)
                if q is not None
            ]  # fmt: skip
            if qualities and name:
                offer(name, _own_rank(name, epithet, ranks), min(qualities), common, taxon_id)
        if not found:
            return []
        taxa = sorted({t for entry in found.values() for t in entry[2]})
        photos = _photos_per_taxon(s, taxa)
    suggestions = []
    for (name, rank), (quality, common, ids) in found.items():
        count = sum(photos.get(t, 0) for t in ids)
        if count:
            suggestions.append(
                (quality, -count, _fold(name), TaxonSuggestion(name, common, rank, count))
            )
    suggestions.sort(key=lambda entry: entry[:3])
    return [entry[3] for entry in suggestions[:limit]]
