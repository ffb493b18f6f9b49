"""The metadata filter flags of `quadrat search` and `quadrat evaluate`, in one place.

Each flag's value is checked while the arguments are read (a bad one exits 2 with one line
naming the flag, before any model or library is opened); `filters_from_args` turns them into
the engine's `SearchFilters`, resolving collection names against the library.
"""

from __future__ import annotations

import argparse
import math
import re
from datetime import date
from typing import TYPE_CHECKING

from engine.errors import BadInputError

if TYPE_CHECKING:
    from engine.catalog.library import Library
    from engine.search.filters import SearchFilters

MONTHS = (
    "january", "february", "march", "april", "may", "june",
    "july", "august", "september", "october", "november", "december",
)  # fmt: skip
_NEGATIVE_VALUE = re.compile(r"^-\d+$|^-\d*\.\d+$|^-[\d.]+(,[-+\d.eE]*)+$")
MAX_RADIUS_KM = (
    20_000.0  # as engine.search.filters.MAX_RADIUS_KM (not imported: --help stays light)
)


def iso_date(text: str) -> date:
    """An argparse type: a calendar date as YYYY-MM-DD (29 February only in a leap year)."""
    try:
        return date.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a date as YYYY-MM-DD, got {text!r} (no such day?)"
        ) from None


def _month(text: str) -> int:
    word = text.strip().lower().rstrip(".")
    if word.isdigit() and 1 <= int(word) <= 12:
        return int(word)
    if len(word) >= 3:
        for number, name in enumerate(MONTHS, start=1):
            if name.startswith(word):
                return number
    raise argparse.ArgumentTypeError(
        f"expected a month as 1..12 or a name (jun, june), got {text.strip()!r}"
    )


def month_range(text: str) -> tuple[int, int]:
    """An argparse type: "6-8", "jun-aug", "nov-feb" (wraps the year end) or one month "jun"."""
    parts = text.replace("–", "-").split("-")
    if len(parts) == 1:
        month = _month(parts[0])
        return month, month
    if len(parts) != 2:
        raise argparse.ArgumentTypeError(f"expected FIRST-LAST months (6-8, jun-aug), got {text!r}")
    return _month(parts[0]), _month(parts[1])


def hour_range(text: str) -> tuple[int, int]:
    """An argparse type: "20-5" (wraps midnight: the night), "6-18", or one hour "7"."""
    parts = text.replace("–", "-").split("-")
    try:
        hours = [int(p) for p in parts]
    except ValueError:
        hours = []
    if len(hours) not in (1, 2) or not all(0 <= h <= 23 for h in hours):
        raise argparse.ArgumentTypeError(f"expected FIRST-LAST hours 0..23 (20-5), got {text!r}")
    return hours[0], hours[-1]


def _numbers(text: str, count: int, shape: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        values = []
    if len(values) != count or not all(math.isfinite(v) for v in values):
        raise argparse.ArgumentTypeError(f"expected {shape}, got {text!r}")
    return values


def _check_position(lat: float, lon: float) -> None:
    if not -90.0 <= lat <= 90.0:
        raise argparse.ArgumentTypeError(f"latitude {lat:g} is outside -90..90")
    if not -180.0 <= lon <= 180.0:
        raise argparse.ArgumentTypeError(f"longitude {lon:g} is outside -180..180")


def bounding_box(text: str) -> tuple[float, float, float, float]:
    """An argparse type: MIN_LAT,MIN_LON,MAX_LAT,MAX_LON (MIN_LON > MAX_LON crosses 180°)."""
    min_lat, min_lon, max_lat, max_lon = _numbers(text, 4, "MIN_LAT,MIN_LON,MAX_LAT,MAX_LON")
    _check_position(min_lat, min_lon)
    _check_position(max_lat, max_lon)
    if min_lat > max_lat:
        raise argparse.ArgumentTypeError(
            f"the minimum latitude {min_lat:g} is above the maximum {max_lat:g}"
        )
    return min_lat, min_lon, max_lat, max_lon


def near_point(text: str) -> tuple[float, float, float]:
    """An argparse type: LAT,LON,KM, a circle on the globe (0 < KM <= 20,000)."""
    lat, lon, radius = _numbers(text, 3, "LAT,LON,KM")
    _check_position(lat, lon)
    if not 0.0 < radius <= MAX_RADIUS_KM:
        raise argparse.ArgumentTypeError(
            f"the radius must be above 0 and at most {MAX_RADIUS_KM:,.0f} km, got {radius:g}"
        )
    return lat, lon, radius


def licence_code(text: str) -> str:
    """An argparse type: a licence in any usual spelling, as its code ("CC BY-NC" -> cc-by-nc)."""
    from engine.search.filters import normalise_license

    code = normalise_license(text)
    if not code:
        raise argparse.ArgumentTypeError("expected a licence such as cc-by, cc-by-nc or cc0")
    return code


def add_filter_options(parser: argparse.ArgumentParser, *, collection: bool = True) -> None:
    """The filter flags; `collection=False` leaves out --collection for a command that has its
    own (`evaluate`'s names what is ranked)."""
    # argparse takes "-17,179.9,20" for an option (only a lone number may start with "-"); a
    # comma list of numbers is a value too, so western and southern places need no "=".
    if isinstance(getattr(parser, "_negative_number_matcher", None), re.Pattern):
        parser._negative_number_matcher = _NEGATIVE_VALUE
    group = parser.add_argument_group("filters (a photo must pass every one given)")
    group.add_argument(
        "--taxon",
        help="only this taxon: a scientific name at any rank (kingdom to species) or a common "
        "name, any case; a part of a name when no name is equal",
    )
    group.add_argument("--date-from", type=iso_date, metavar="YYYY-MM-DD",
                       help="only photos observed on or after this day")  # fmt: skip
    group.add_argument("--date-to", type=iso_date, metavar="YYYY-MM-DD",
                       help="only photos observed on or before this day")  # fmt: skip
    group.add_argument(
        "--months",
        type=month_range,
        metavar="M1-M2",
        help="only photos observed in these months of any year: 6-8, jun-aug, or nov-feb "
        "(across the year end)",
    )
    group.add_argument(
        "--bbox",
        type=bounding_box,
        metavar="MIN_LAT,MIN_LON,MAX_LAT,MAX_LON",
        help="only photos inside this box (MIN_LON > MAX_LON: across the antimeridian)",
    )
    group.add_argument(
        "--near",
        type=near_point,
        metavar="LAT,LON,KM",
        help="only photos within KM kilometres of this point (great-circle distance)",
    )
    group.add_argument(
        "--license",
        type=licence_code,
        action="append",
        metavar="CODE",
        help="only photos under this licence (cc0, cc-by, cc-by-nc, ...; any spelling); give it "
        "again to allow several",
    )
    group.add_argument(
        "--keyword",
        metavar="K",
        help="only photos with this keyword (from XMP sidecars or embedded XMP/IPTC; any case; "
        "a whole keyword or a level of a hierarchical one: juvenile, lifeStage|juvenile)",
    )
    group.add_argument(
        "--hours",
        type=hour_range,
        metavar="FIRST-LAST",
        help="only photos taken in these hours of the day (local time, clock offsets applied): "
        "6-18, or 20-5 across midnight",
    )
    group.add_argument(
        "--deployment",
        type=int,
        action="append",
        metavar="ID",
        help="only this camera deployment ('quadrat deployments' lists them); again for several",
    )
    if collection:
        group.add_argument(
            "--collection",
            action="append",
            metavar="NAME_OR_ID",
            help="only this collection (its name, folder or id); give it again for several",
        )


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
    collection_ids: tuple[int, ...] = ()
    names = getattr(args, "collection", None) or []
    if names and library is not None:
        try:
            collection_ids = find_collections(library.catalog, names)
        except BadInputError as exc:
            raise BadInputError(f"--collection: {exc}") from None
    return SearchFilters(
        taxon=args.taxon,
        date_from=args.date_from,
        date_to=args.date_to,
        months=args.months,
        bbox=args.bbox,
        near=args.near,
        licenses=tuple(args.license or ()),
        collection_ids=collection_ids,
        keyword=getattr(args, "keyword", None),
        hours=getattr(args, "hours", None),
        deployment_ids=tuple(getattr(args, "deployment", None) or ()),
    )
