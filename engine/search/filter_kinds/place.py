"""Filter kinds of place: a box on the map, and a radius around a point (great-circle)."""

from __future__ import annotations

import math
from typing import Any

from sqlalchemy import ColumnElement, or_
from sqlalchemy.orm import Session

from engine.catalog import Image
from engine.errors import BadInputError
from engine.search.filter_kinds.base import CliOption, FilterKind, MenuEntry, Terms, fail, numbers

EARTH_RADIUS_KM = 6371.0088  # the mean radius (IUGG)
MAX_RADIUS_KM = 20_000.0  # about half the circumference: further than that is everywhere


def check_lat_lon(key: str, lat: float, lon: float) -> None:
    """`fail` for a latitude outside -90..90 or a longitude outside -180..180."""
    if not -90.0 <= lat <= 90.0:
        raise fail(key, f"latitude {lat:g} is outside -90..90")
    if not -180.0 <= lon <= 180.0:
        raise fail(key, f"longitude {lon:g} is outside -180..180")


def latitude_text(lat: float, digits: int = 1) -> str:
    """A latitude as people read it on a map: "52.1°N", "33.9°S"."""
    return f"{abs(lat):.{digits}f}°{'S' if lat < 0 else 'N'}"


def longitude_text(lon: float, digits: int = 1) -> str:
    """A longitude as people read it on a map: "4.3°E", "79.3°W"."""
    return f"{abs(lon):.{digits}f}°{'W' if lon < 0 else 'E'}"


def near_box(
    lat: float, lon: float, radius_km: float
) -> tuple[float, float, list[tuple[float, float]] | None]:
    """The bounding box of a spherical cap: (min_lat, max_lat, longitude ranges), the ranges
    None when every longitude can be in it (the cap holds a pole or is wider than the globe)
    and two ranges when it crosses the antimeridian."""
    delta = radius_km / EARTH_RADIUS_KM  # the angular radius, in radians
    dlat = math.degrees(delta)
    min_lat, max_lat = lat - dlat, lat + dlat
    if min_lat <= -90.0 or max_lat >= 90.0:
        return max(min_lat, -90.0), min(max_lat, 90.0), None
    # The cap's widest point is not at its centre's latitude: asin(sin δ / cos φ) is exact.
    dlon = math.degrees(math.asin(min(1.0, math.sin(delta) / math.cos(math.radians(lat)))))
    if dlon >= 180.0:
        return min_lat, max_lat, None
    margin = 1e-9  # rounding must not drop a photo on the edge; the exact test follows
    lo, hi = lon - dlon - margin, lon + dlon + margin
    if lo < -180.0:
        return min_lat, max_lat, [(lo + 360.0, 180.0), (-180.0, hi)]
    if hi > 180.0:
        return min_lat, max_lat, [(lo, 180.0), (-180.0, hi - 360.0)]
    return min_lat, max_lat, [(lo, hi)]


# -- the command line's texts -----------------------------------------------------------------


def _cli_numbers(text: str, count: int, shape: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        values = []
    if len(values) != count or not all(math.isfinite(v) for v in values):
        raise BadInputError(f"expected {shape}, got {text!r}")
    return values


def _cli_position(lat: float, lon: float) -> None:
    if not -90.0 <= lat <= 90.0:
        raise BadInputError(f"latitude {lat:g} is outside -90..90")
    if not -180.0 <= lon <= 180.0:
        raise BadInputError(f"longitude {lon:g} is outside -180..180")


def bounding_box(text: str) -> tuple[float, float, float, float]:
    """MIN_LAT,MIN_LON,MAX_LAT,MAX_LON (MIN_LON > MAX_LON crosses 180°)."""
    min_lat, min_lon, max_lat, max_lon = _cli_numbers(text, 4, "MIN_LAT,MIN_LON,MAX_LAT,MAX_LON")
    _cli_position(min_lat, min_lon)
    _cli_position(max_lat, max_lon)
    if min_lat > max_lat:
        raise BadInputError(f"the minimum latitude {min_lat:g} is above the maximum {max_lat:g}")
    return min_lat, min_lon, max_lat, max_lon


def near_point(text: str) -> tuple[float, float, float]:
    """LAT,LON,KM, a circle on the globe (0 < KM <= 20,000)."""
    lat, lon, radius = _cli_numbers(text, 3, "LAT,LON,KM")
    _cli_position(lat, lon)
    if not 0.0 < radius <= MAX_RADIUS_KM:
        raise BadInputError(
            f"the radius must be above 0 and at most {MAX_RADIUS_KM:,.0f} km, got {radius:g}"
        )
    return lat, lon, radius


# -- the kinds --------------------------------------------------------------------------------


def _check_bbox(filters: Any) -> dict[str, Any]:
    if filters.bbox is None:
        return {}
    min_lat, min_lon, max_lat, max_lon = numbers("bbox", filters.bbox, 4)
    check_lat_lon("bbox", min_lat, min_lon)
    check_lat_lon("bbox", max_lat, max_lon)
    if min_lat > max_lat:
        raise fail("bbox", f"the minimum latitude {min_lat:g} is above the maximum")
    return {"bbox": (min_lat, min_lon, max_lat, max_lon)}


def _bbox_terms(_session: Session, filters: Any) -> Terms:
    if not filters.bbox:
        return []
    min_lat, min_lon, max_lat, max_lon = filters.bbox
    terms: list[ColumnElement[bool]] = [Image.latitude.between(min_lat, max_lat)]
    if min_lon <= max_lon:
        terms.append(Image.longitude.between(min_lon, max_lon))
    else:  # a box across the antimeridian
        terms.append(or_(Image.longitude >= min_lon, Image.longitude <= max_lon))
    return terms


def _bbox_chip(filters: Any, _names: Any) -> str | None:
    if not filters.bbox:
        return None
    min_lat, min_lon, max_lat, max_lon = filters.bbox
    across = " (across 180°)" if min_lon > max_lon else ""
    # A tenth of a degree (about 11 km) reads well for a box a degree or more across.
    extent = min(max_lat - min_lat, (max_lon - min_lon) % 360 or 360)
    digits = 1 if extent >= 1 else 2
    lats = f"{latitude_text(min_lat, digits)}–{latitude_text(max_lat, digits)}"
    lons = f"{longitude_text(min_lon, digits)}–{longitude_text(max_lon, digits)}"
    return f"{lats}, {lons}{across}"


def _check_near(filters: Any) -> dict[str, Any]:
    if filters.near is None:
        return {}
    lat, lon, radius = numbers("near", filters.near, 3)
    check_lat_lon("near", lat, lon)
    if not 0.0 < radius <= MAX_RADIUS_KM:
        raise fail("near", f"the radius must be above 0 and at most {MAX_RADIUS_KM:,.0f} km")
    return {"near": (lat, lon, radius)}


def _near_terms(_session: Session, filters: Any) -> Terms:
    """The cap's bounding box in SQL; `filtered_ids` keeps the photos within the exact
    great-circle distance."""
    if not filters.near:
        return []
    lo_lat, hi_lat, ranges = near_box(*filters.near)
    terms: list[ColumnElement[bool]] = [
        Image.latitude.between(lo_lat, hi_lat),
        Image.longitude.is_not(None),
    ]
    if ranges is not None:
        terms.append(or_(*(Image.longitude.between(lo, hi) for lo, hi in ranges)))
    return terms


def _near_chip(filters: Any, _names: Any) -> str | None:
    if not filters.near:
        return None
    lat, lon, radius = filters.near
    digits = 1 if radius >= 10 else 2 if radius >= 1 else 3
    place = f"{latitude_text(lat, digits)} {longitude_text(lon, digits)}"
    return f"{place} ± {radius:g} km"


BBOX = FilterKind(
    "bbox",
    "place",
    ("bbox",),
    check=_check_bbox,
    condition=_bbox_terms,
    chip=_bbox_chip,
    cli=(
        CliOption(
            "--bbox",
            "bbox",
            "only photos inside this box (MIN_LON > MAX_LON: across the antimeridian)",
            5,
            metavar="MIN_LAT,MIN_LON,MAX_LAT,MAX_LON",
            parse=bounding_box,
        ),
    ),
    # The Place submenu: a box drawn on the map, or within N km of the selected photo.
    menu=MenuEntry("Place", "place", 6),
)
NEAR = FilterKind(
    "near",
    "place",
    ("near",),
    check=_check_near,
    condition=_near_terms,
    chip=_near_chip,
    cli=(
        CliOption(
            "--near",
            "near",
            "only photos within KM kilometres of this point (great-circle distance)",
            6,
            metavar="LAT,LON,KM",
            parse=near_point,
        ),
    ),
)
