"""What a metadata file says about a photo, and the checked reading of its values: `ImageMeta`,
where a collection's metadata file is (`find_metadata_file`) and how its file names meet the
walked paths (`metadata_key`), dates and their UTC offsets, and the converters (`as_float`,
`as_int`, `as_text`) that turn a value into a usable one or None. The file itself is read by
`engine.indexing.coco`."""

from __future__ import annotations

import math
import unicodedata
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from pathlib import Path

from engine.indexing.names import TaxonInfo


@dataclass
class ImageMeta:
    """What a metadata file says about one photo. Every field may be None."""

    taxon: TaxonInfo | None = None
    observed_at: datetime | None = None
    latitude: float | None = None
    longitude: float | None = None
    location_uncertainty: float | None = None
    license: str | None = None
    rights_holder: str | None = None
    width: int | None = None
    height: int | None = None
    external_id: int | None = None  # the COCO image id
    notes: str | None = None  # the observer's free text, at most NOTES_MAX_CHARS
    # What the record says about publishing its place (engine/catalog/privacy.py): iNat's
    # geoprivacy words, whether its coordinates are obscured already, whether it withheld the
    # place (null coordinates: never filled from EXIF), and the uncertainty published with
    # obscured coordinates.
    geoprivacy: str | None = None
    taxon_geoprivacy: str | None = None
    coordinates_obscured: bool | None = None
    location_withheld: bool | None = None
    public_location_uncertainty: float | None = None


# Free-text fields of an image record, the first with usable text wins.
NOTES_FIELDS: tuple[str, ...] = ("notes", "description", "remarks")
# A record's notes are an observer's sentence or paragraph; a field holding a whole document
# would swell the catalog and the text index for nothing.
NOTES_MAX_CHARS = 10_000

METADATA_FILE_NAMES: tuple[str, ...] = ("metadata.json", "train.json")


def find_metadata_file(root: Path) -> Path | None:
    """The collection's metadata file at `root` (metadata.json, then train.json), if any."""
    for name in METADATA_FILE_NAMES:
        candidate = Path(root) / name
        if candidate.is_file():
            return candidate
    return None


def metadata_key(rel_path: str) -> str:
    """The key `load_coco_metadata` uses for a relative path.

    POSIX separators, no leading "./", Unicode NFC: macOS may hand back decomposed (NFD)
    names while metadata files are written composed, and both must meet.
    """
    key = rel_path.replace("\\", "/")
    while key.startswith("./"):
        key = key[2:]
    return unicodedata.normalize("NFC", key)


_DATE_FORMATS = ("%Y:%m:%d %H:%M:%S", "%Y/%m/%d %H:%M:%S", "%Y/%m/%d", "%Y:%m:%d")


def parse_date(value: object) -> datetime | None:
    """A date or timestamp in the usual metadata spellings, or None.

    Accepts "2021-05-03", "2021-05-03 10:00:00", ISO 8601 with a timezone ("...+02:00", "Z")
    and EXIF's "2021:05:03 10:00:00". A timezone, when given, is kept.
    """
    if not isinstance(value, str):
        return None
    text = value.strip()
    if not text:
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        pass
    for fmt in _DATE_FORMATS:
        try:
            return datetime.strptime(text, fmt)
        except ValueError:
            continue
    return None


def local_time_and_offset(moment: datetime | None) -> tuple[datetime | None, int | None]:
    """`moment` as the catalog stores it: the local wall-clock time (naive: the date filters
    read the observer's local date) and its UTC offset in minutes east (None when unknown)."""
    if moment is None:
        return None, None
    offset = moment.utcoffset()
    local = moment.replace(tzinfo=None)  # the same clock reading, the zone set apart
    return local, None if offset is None else round(offset.total_seconds() / 60)


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1  # SQLite INTEGER columns hold no more


def as_float(value: object, low: float = -math.inf, high: float = math.inf) -> float | None:
    """A finite number within [low, high] (a number, numeric text, an EXIF rational), else None."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):  # OverflowError: an int beyond a float
        return None
    if not math.isfinite(number) or not low <= number <= high:
        return None
    return number


def as_int(value: object) -> int | None:
    """A whole number that fits a signed 64-bit integer (a number or digit text), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        number = value
    elif isinstance(value, float):
        if not value.is_integer():  # also False for inf and nan
            return None
        number = int(value)
    elif isinstance(value, Decimal):
        # Checked before int(): Decimal("1e999999") is whole and would become a huge int.
        if not value.is_finite() or value.adjusted() > 18 or value != value.to_integral_value():
            return None
        number = int(value)
    elif isinstance(value, str):
        text = value.strip()
        digits = text[1:] if text.startswith("-") else text
        # isascii: str.isdigit() also accepts digits such as "²" that int() refuses.
        if not (0 < len(digits) <= 19 and digits.isascii() and digits.isdigit()):
            return None
        number = int(text)
    else:
        return None
    return number if INT64_MIN <= number <= INT64_MAX else None


def as_text(value: object) -> str | None:
    """Stripped text (numbers written out), else None: null, blanks, booleans, containers, and
    strings with lone surrogates (JSON can escape them; SQLite cannot store them)."""
    if isinstance(value, str):
        text = value.strip()
    elif isinstance(value, int | float | Decimal) and not isinstance(value, bool):
        try:
            text = str(value)
        except ValueError:  # an int beyond Python's digit limit
            return None
    else:
        return None  # never str() a container: the repr of deep nesting recurses
    if not text:
        return None
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return None
    return text


GEOPRIVACY_WORDS = ("open", "obscured", "private")


def as_geoprivacy(value: object) -> str | None:
    """iNaturalist's geoprivacy word ("open", "obscured", "private"), any case, else None."""
    text = as_text(value)
    word = text.lower() if text else None
    return word if word in GEOPRIVACY_WORDS else None


def as_bool(value: object) -> bool | None:
    """A yes/no value: JSON true/false, 1/0, or "true"/"false"/"yes"/"no" in any case."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    text = as_text(value)
    if text is None:
        return None
    return {"true": True, "yes": True, "t": True, "false": False, "no": False, "f": False}.get(
        text.lower()
    )


def ignored_metadata_line(values: int, records: int) -> str:
    """E.g. "3 metadata values were ignored as impossible or unusable"; "" when none were."""
    parts = []
    if values:
        parts.append(f"{values} metadata value{'s' * (values != 1)}")
    if records:
        parts.append(f"{records} metadata record{'s' * (records != 1)}")
    if not parts:
        return ""
    verb = "was" if values + records == 1 else "were"
    return f"{' and '.join(parts)} {verb} ignored as impossible or unusable"
