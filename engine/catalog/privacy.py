"""Where a photo may be said to have been taken, when its place leaves the workstation.

Two sources decide it, and every export, the map and the place filter's display ask this
module (`PlacePolicy.publish`) rather than read the catalog's coordinates themselves:

- **The record.** iNaturalist-style metadata says how the observer and iNaturalist want the
  place published: `geoprivacy` / `taxon_geoprivacy` ("open", "obscured", "private"),
  `coordinates_obscured` (the coordinates given are already moved within a cell), and null
  coordinates, which mean *withheld*, never unknown (the importer then never takes the photo's
  EXIF GPS: `engine.indexing.catalog_writer`). Private or withheld places are not published;
  obscured ones are published only as the source obscured them, or generalised to iNaturalist's
  0.2° cell when the coordinates might be the true ones.
- **The lab's sensitive-taxa list** (table `sensitive_taxa`, shared by every workstation of a
  catalog): a scientific name at any rank, and whether places of its photos are generalised to
  a grid of so many kilometres or withheld. The strictest matching entry wins.

What is withheld or generalised is said in Darwin Core's own terms (`informationWithheld`,
`dataGeneralizations`), and the published uncertainty covers the generalisation. An uncertainty
GBIF would reject (not above 0, or above 5,000 km, such as iNaturalist's occasional
106,807,033 m) is left out and flagged rather than published.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sqlalchemy import delete, select

from engine.catalog.db import Catalog
from engine.catalog.models import SensitiveTaxon
from engine.errors import BadInputError

ACTION_GENERALISE = "generalise"
ACTION_WITHHOLD = "withhold"
ACTIONS = (ACTION_GENERALISE, ACTION_WITHHOLD)
DEFAULT_GRID_KM = 10.0
# iNaturalist obscures a place to a random point in a 0.2° by 0.2° cell.
OBSCURED_CELL_DEGREES = 0.2
KM_PER_DEGREE = 111.32  # a degree of latitude (and of longitude at the equator)
# GBIF flags coordinateUncertaintyInMeters outside (0, 5,000,000] as invalid.
MAX_UNCERTAINTY_M = 5_000_000.0
MAX_GRID_KM = 1000.0

# How each decision reads in a one-line summary and in the window.
OPEN, GENERALISED, WITHHELD, NO_PLACE = "open", "generalised", "withheld", "no place"


@dataclass(frozen=True)
class PlaceFacts:
    """What a photo's record said about publishing its place (catalog columns, migration 0018)."""

    geoprivacy: str | None = None
    taxon_geoprivacy: str | None = None
    coordinates_obscured: bool | None = None
    location_withheld: bool | None = None
    public_location_uncertainty: float | None = None


@dataclass(frozen=True)
class SensitiveRule:
    """One entry of the lab's list: a taxon name (any rank) and what happens to its places."""

    name: str
    action: str
    grid_km: float | None = None
    note: str | None = None
    added_by: str | None = None

    @property
    def description(self) -> str:
        if self.action == ACTION_WITHHOLD:
            return f"{self.name}: withheld"
        return f"{self.name}: generalised to {_km(self.grid_km or DEFAULT_GRID_KM)}"


@dataclass(frozen=True)
class PublishedPlace:
    """A place as it may leave the workstation, with Darwin Core's words for what was done.

    `decision` is OPEN, GENERALISED, WITHHELD or NO_PLACE; `reason` says why in a few words
    (for the window and the command line); `uncertainty_dropped` holds an implausible
    uncertainty that was left out."""

    latitude: float | None
    longitude: float | None
    uncertainty_m: float | None
    decision: str
    information_withheld: str = ""
    data_generalizations: str = ""
    reason: str = ""
    uncertainty_dropped: float | None = None

    @property
    def has_place(self) -> bool:
        return self.latitude is not None and self.longitude is not None


def _km(value: float) -> str:
    return f"{value:g} km"


def plausible_uncertainty(value: float | None) -> float | None:
    """`value` when GBIF would take it as coordinateUncertaintyInMeters, else None."""
    if value is None or not math.isfinite(value) or not 0 < value <= MAX_UNCERTAINTY_M:
        return None
    return value


def cell_half_diagonal_m(latitude: float, cell_degrees: float) -> float:
    """The distance from a cell's centre to its corner, in metres: what a point moved anywhere
    inside a `cell_degrees` cell may be off by (longitude degrees shrink with latitude)."""
    north_south = cell_degrees * KM_PER_DEGREE * 1000.0
    east_west = north_south * max(math.cos(math.radians(latitude)), 0.0)
    return math.hypot(north_south, east_west) / 2.0


def snap_to_grid(latitude: float, longitude: float, cell_degrees: float) -> tuple[float, float]:
    """The centre of the `cell_degrees` grid cell holding the point (cells counted from 0°)."""

    def centre(value: float, low: float, high: float) -> float:
        snapped = (math.floor(value / cell_degrees) + 0.5) * cell_degrees
        return round(min(max(snapped, low), high), 6)

    return centre(latitude, -90.0, 90.0), centre(longitude, -180.0, 180.0)


class PlacePolicy:
    """The publishing rule of one catalog: the records' own privacy and the sensitive taxa.

    Build it once per export (`PlacePolicy.of(catalog)`) and ask `publish` per photo."""

    def __init__(self, rules: Iterable[SensitiveRule] = (), *, use_list: bool = True) -> None:
        self.rules: dict[str, SensitiveRule] = (
            {rule.name.casefold(): rule for rule in rules} if use_list else {}
        )

    @classmethod
    def of(cls, catalog: Catalog, *, use_list: bool = True) -> PlacePolicy:
        return cls(sensitive_rules(catalog) if use_list else (), use_list=use_list)

    def rule_for(self, names: Iterable[str | None]) -> SensitiveRule | None:
        """The strictest rule naming any of `names` (a photo's taxon and its lineage)."""
        found = [self.rules[n.casefold()] for n in names if n and n.casefold() in self.rules]
        if not found:
            return None

        def strictness(rule: SensitiveRule) -> tuple[int, float]:
            grid = rule.grid_km or DEFAULT_GRID_KM
            return (rule.action == ACTION_WITHHOLD, grid)

        return max(found, key=strictness)

    def publish(
        self,
        latitude: float | None,
        longitude: float | None,
        uncertainty_m: float | None,
        facts: PlaceFacts,
        taxon_names: Sequence[str | None] = (),
    ) -> PublishedPlace:
        """Where the photo may be said to be, and what Darwin Core should say was done."""
        kept = plausible_uncertainty(uncertainty_m)
        dropped = uncertainty_m if uncertainty_m is not None and kept is None else None
        private = "private" in (facts.geoprivacy, facts.taxon_geoprivacy)
        if facts.location_withheld or private:
            who = "the observer" if facts.geoprivacy == "private" else "the source record"
            if facts.taxon_geoprivacy == "private":
                who = "the source, for this taxon"
            return PublishedPlace(
                None,
                None,
                None,
                WITHHELD,
                information_withheld=f"Location withheld at the request of {who}.",
                reason="place withheld by its record",
                uncertainty_dropped=dropped,
            )
        rule = self.rule_for(taxon_names)
        if latitude is None or longitude is None:
            return PublishedPlace(None, None, None, NO_PLACE, uncertainty_dropped=dropped)
        if rule is not None and rule.action == ACTION_WITHHOLD:
            return PublishedPlace(
                None,
                None,
                None,
                WITHHELD,
                information_withheld=f"Location withheld: {rule.name} is a sensitive taxon.",
                reason=f"sensitive taxon {rule.name}: place withheld",
                uncertainty_dropped=dropped,
            )
        obscured = "obscured" in (facts.geoprivacy, facts.taxon_geoprivacy)
        if facts.coordinates_obscured:
            # Already moved within a cell by the source: published as the source publishes them.
            public = plausible_uncertainty(facts.public_location_uncertainty)
            spread = cell_half_diagonal_m(latitude, OBSCURED_CELL_DEGREES)
            place = PublishedPlace(
                latitude,
                longitude,
                max(public or 0.0, kept or 0.0, spread),
                GENERALISED,
                data_generalizations=(
                    "Coordinates obscured by the source record within a "
                    f"{OBSCURED_CELL_DEGREES:g}° cell."
                ),
                reason="coordinates obscured by their record",
                uncertainty_dropped=dropped,
            )
            return self._coarser(place, rule, latitude, longitude)
        if obscured:
            # Asked to be obscured, with coordinates that may be the true ones: do it here.
            place = _generalised(
                latitude,
                longitude,
                kept,
                OBSCURED_CELL_DEGREES,
                f"Coordinates generalised to the centre of a {OBSCURED_CELL_DEGREES:g}° cell, "
                "as the record's geoprivacy asks.",
                "geoprivacy obscured: generalised",
                dropped,
            )
            return self._coarser(place, rule, latitude, longitude)
        if rule is not None:
            return self._rule_place(rule, latitude, longitude, kept, dropped)
        return PublishedPlace(latitude, longitude, kept, OPEN, uncertainty_dropped=dropped)

    def _rule_place(
        self,
        rule: SensitiveRule,
        latitude: float,
        longitude: float,
        kept: float | None,
        dropped: float | None,
    ) -> PublishedPlace:
        grid = rule.grid_km or DEFAULT_GRID_KM
        return _generalised(
            latitude,
            longitude,
            kept,
            grid / KM_PER_DEGREE,
            f"Coordinates generalised to the centre of a {grid:g} km grid cell: "
            f"{rule.name} is a sensitive taxon.",
            f"sensitive taxon {rule.name}: generalised to {_km(grid)}",
            dropped,
        )

    def _coarser(
        self,
        place: PublishedPlace,
        rule: SensitiveRule | None,
        latitude: float,
        longitude: float,
    ) -> PublishedPlace:
        """The record's own generalisation, or the lab's rule where that is coarser."""
        if rule is None:
            return place
        by_rule = self._rule_place(rule, latitude, longitude, place.uncertainty_m, None)
        if (by_rule.uncertainty_m or 0.0) <= (place.uncertainty_m or 0.0):
            return place
        return PublishedPlace(
            by_rule.latitude,
            by_rule.longitude,
            by_rule.uncertainty_m,
            GENERALISED,
            data_generalizations=by_rule.data_generalizations,
            reason=by_rule.reason,
            uncertainty_dropped=place.uncertainty_dropped,
        )


def _generalised(
    latitude: float,
    longitude: float,
    kept: float | None,
    cell_degrees: float,
    words: str,
    reason: str,
    dropped: float | None,
) -> PublishedPlace:
    lat, lon = snap_to_grid(latitude, longitude, cell_degrees)
    spread = cell_half_diagonal_m(lat, cell_degrees)
    # The true point may be anywhere in the cell, and was itself `kept` metres uncertain.
    uncertainty = plausible_uncertainty(round(spread + (kept or 0.0)))
    return PublishedPlace(
        lat,
        lon,
        uncertainty,
        GENERALISED,
        data_generalizations=words,
        reason=reason,
        uncertainty_dropped=dropped,
    )


def place_summary(places: Iterable[PublishedPlace]) -> str:
    """One line: how many places were generalised or withheld ("" when none were)."""
    generalised = withheld = dropped = 0
    for place in places:
        generalised += place.decision == GENERALISED
        withheld += place.decision == WITHHELD and bool(place.information_withheld)
        dropped += place.uncertainty_dropped is not None
    parts = []
    if generalised:
        parts.append(f"{generalised:,} {'place' if generalised == 1 else 'places'} generalised")
    if withheld:
        parts.append(f"{withheld:,} withheld")
    if dropped:
        parts.append(f"{dropped:,} implausible uncertainties left out")
    return ", ".join(parts)


# --- the lab's list -------------------------------------------------------------------------


def sensitive_rules(catalog: Catalog) -> list[SensitiveRule]:
    """The lab's sensitive taxa, by name."""
    with catalog.session() as s:
        rows = s.scalars(select(SensitiveTaxon).order_by(SensitiveTaxon.name))
        return [
            SensitiveRule(row.name, row.action, row.grid_km, row.note, row.added_by) for row in rows
        ]


def checked_rule(
    name: str, action: str, grid_km: float | None = None, note: str | None = None
) -> SensitiveRule:
    """A rule from what a person typed, or BadInputError saying what is wrong with it."""
    clean = " ".join(str(name).split())
    if not clean:
        raise BadInputError("a sensitive taxon needs a scientific name (any rank)")
    if len(clean) > 200:
        raise BadInputError(f"a taxon name of {len(clean):,} characters is not a taxon name")
    if action not in ACTIONS:
        raise BadInputError(f"the action must be one of {', '.join(ACTIONS)}, not {action!r}")
    if action == ACTION_WITHHOLD:
        grid_km = None
    elif grid_km is None:
        grid_km = DEFAULT_GRID_KM
    elif not (math.isfinite(grid_km) and 0 < grid_km <= MAX_GRID_KM):
        raise BadInputError(f"the grid must be above 0 and at most {MAX_GRID_KM:g} km")
    return SensitiveRule(clean, action, grid_km, (note or "").strip() or None)


def set_sensitive_taxa(
    catalog: Catalog, rules: Iterable[SensitiveRule], added_by: str | None = None
) -> int:
    """Add the rules, or replace the one of the same name (names compare without case), in
    one transaction. Returns how many were written."""
    written = 0
    with catalog.session() as s:
        existing = {row.name.casefold(): row for row in s.scalars(select(SensitiveTaxon))}
        for rule in rules:
            row = existing.get(rule.name.casefold())
            if row is None:
                row = SensitiveTaxon(name=rule.name)
                s.add(row)
                existing[rule.name.casefold()] = row
            row.name, row.action, row.grid_km = rule.name, rule.action, rule.grid_km
            row.note, row.added_by = rule.note, added_by or rule.added_by
            written += 1
    return written


def remove_sensitive_taxa(catalog: Catalog, names: Iterable[str]) -> int:
    """Remove the named entries (any case). Returns how many were removed."""
    wanted = {" ".join(n.split()).casefold() for n in names}
    with catalog.session() as s:
        ids = [row.id for row in s.scalars(select(SensitiveTaxon)) if row.name.casefold() in wanted]
        if ids:
            s.execute(delete(SensitiveTaxon).where(SensitiveTaxon.id.in_(ids)))
        return len(ids)
