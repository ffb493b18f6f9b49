"""Pre-flight checks of Darwin Core records: GBIF's rules for the terms Quadrat writes, the
archive's descriptor against its files, and cells a spreadsheet would run (docs/SPEC.md §4.1).

Two kinds of problem:
- an **error** is a value GBIF would refuse or misread (an empty or repeated occurrenceID, a
  basisOfRecord outside its vocabulary, a date that is not ISO 8601, coordinates out of range
  or only one of them, coordinates without a datum, an uncertainty not above 0 or above
  5,000 km, a licence that is not a URI) or a descriptor that does not match its files: an
  export with an error is not written unless asked;
- a **warning** is what GBIF takes but flags, or what a person should know before publishing
  (no taxon or no date, the point 0,0, a date in the future, a value a spreadsheet would run as
  a formula, a photo identifier that is not public).

The checks read the rows as they will be written (text), so what is checked is what is
published.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from xml.etree import ElementTree as ET

from engine.catalog.privacy import MAX_UNCERTAINTY_M
from engine.errors import QuadratError
from engine.files import csv_cell

ERROR = "error"
WARNING = "warning"

# Darwin Core's basisOfRecord vocabulary (the classes an occurrence may be evidenced by).
BASIS_OF_RECORD_VOCABULARY = frozenset(
    {
        "HumanObservation",
        "MachineObservation",
        "PreservedSpecimen",
        "FossilSpecimen",
        "LivingSpecimen",
        "MaterialSample",
        "MaterialEntity",
        "MaterialCitation",
        "Occurrence",
    }
)
DATUMS_WITHOUT_CHECK = frozenset({"WGS84", "EPSG:4326"})
EARLIEST_PLAUSIBLE_YEAR = 1600  # GBIF flags earlier record dates as unlikely

_OFFSET = r"(?:Z|[+-]\d{2}(?::?\d{2})?)"
_DATE_TIME = re.compile(
    r"(?P<date>\d{4}(?:-\d{2}(?:-\d{2})?)?)"
    rf"(?:T(?P<time>\d{{2}}:\d{{2}}(?::\d{{2}}(?:\.\d+)?)?)(?P<offset>{_OFFSET})?)?"
)
_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:\S+")
_Add = Callable[[str, str, str], None]  # adds (severity, term, message)


@dataclass(frozen=True)
class Problem:
    """One thing pre-flight found: how bad, what, and where (a photo and a term, or the whole
    export when `path` is empty)."""

    severity: str
    message: str
    path: str = ""
    image_id: int | None = None
    term: str = ""

    @property
    def is_error(self) -> bool:
        return self.severity == ERROR

    def line(self) -> str:
        """The problem in one line: "photos/a.jpg: eventDate: not an ISO 8601 date"."""
        where = ": ".join(part for part in (self.path, self.term) if part)
        return f"{where}: {self.message}" if where else self.message


class RecordsRefused(QuadratError):
    """An export pre-flight found errors in; nothing was written. `check` holds every problem."""

    def __init__(self, what: str, problems: Sequence[Problem], hint: str) -> None:
        errors = [p for p in problems if p.is_error]
        first = errors[0].line() if errors else ""
        n = len(errors)
        super().__init__(
            f"{what} was not written: {n:,} {'problem' if n == 1 else 'problems'} GBIF would "
            f"refuse or misread (first: {first}); {hint}"
        )
        self.problems = tuple(problems)


# --- one record ---------------------------------------------------------------------------------


def is_iso_date(text: str) -> bool:
    """Whether `text` is an ISO 8601 date, date-time or interval of them ("2024-05-01",
    "2024-05", "2024-05-01T06:30:00-07:00", "2024-05-01/2024-05-03")."""
    parts = text.split("/")
    if len(parts) > 2 or not all(parts):
        return False
    return all(_iso_moment(part) is not None for part in parts)


def _iso_moment(text: str) -> date | None:
    """The calendar day of one ISO 8601 date or date-time, None when it is not one."""
    found = _DATE_TIME.fullmatch(text)
    if found is None:
        return None
    day = found.group("date")
    pieces = [int(p) for p in day.split("-")]
    try:
        when = date(
            pieces[0], pieces[1] if len(pieces) > 1 else 1, pieces[2] if len(pieces) > 2 else 1
        )
    except ValueError:
        return None
    clock = found.group("time")
    if clock is not None:
        hour, minute = int(clock[0:2]), int(clock[3:5])
        second = float(clock[6:]) if len(clock) > 5 else 0.0
        if hour > 23 or minute > 59 or second >= 61:
            return None
    offset = found.group("offset")
    if offset and offset != "Z":
        digits = offset[1:].replace(":", "")
        if int(digits[:2]) > 14 or (len(digits) > 2 and int(digits[2:]) > 59):
            return None
    return when


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def check_occurrence(
    row: Mapping[str, str], *, restricted_included: bool = False, today: date | None = None
) -> list[tuple[str, str, str]]:
    """(severity, term, message) for each of GBIF's rules one occurrence row breaks.
    `restricted_included`: the photo's licence allows no reuse and was included as asked, so a
    licence in words is a warning rather than an error."""
    found: list[tuple[str, str, str]] = []

    def add(severity: str, term: str, message: str) -> None:
        found.append((severity, term, message))

    if not row.get("occurrenceID", "").strip():
        add(ERROR, "occurrenceID", "empty: every record needs its own identifier")
    basis = row.get("basisOfRecord", "")
    if basis not in BASIS_OF_RECORD_VOCABULARY:
        add(ERROR, "basisOfRecord", f"{basis!r} is not in Darwin Core's vocabulary")
    if not row.get("scientificName", "").strip():
        add(WARNING, "scientificName", "no taxon: GBIF cannot match the record to one")
    _check_date(row.get("eventDate", ""), today or date.today(), add)
    _check_place(row, add)
    _check_licence(row.get("license", ""), restricted_included, add)
    return found


def _check_date(text: str, today: date, add: _Add) -> None:
    if not text:
        add(WARNING, "eventDate", "no date: GBIF asks for one")
        return
    if not is_iso_date(text):
        add(ERROR, "eventDate", f"{text!r} is not an ISO 8601 date")
        return
    days = [_iso_moment(part) for part in text.split("/")]
    if any(day is not None and day > today + timedelta(days=1) for day in days):
        add(WARNING, "eventDate", f"{text} is in the future")
    elif any(day is not None and day.year < EARLIEST_PLAUSIBLE_YEAR for day in days):
        add(WARNING, "eventDate", f"{text} is before {EARLIEST_PLAUSIBLE_YEAR}")


def _check_place(row: Mapping[str, str], add: _Add) -> None:
    lat_text, lon_text = row.get("decimalLatitude", ""), row.get("decimalLongitude", "")
    uncertainty = row.get("coordinateUncertaintyInMeters", "")
    if bool(lat_text) != bool(lon_text):
        term = "decimalLongitude" if lat_text else "decimalLatitude"
        add(ERROR, term, "a latitude and a longitude go together: one of them is missing")
    lat = _number(lat_text) if lat_text else None
    lon = _number(lon_text) if lon_text else None
    if lat_text and (lat is None or not -90 <= lat <= 90):
        add(ERROR, "decimalLatitude", f"{lat_text!r} is not a latitude (-90 to 90)")
    if lon_text and (lon is None or not -180 <= lon <= 180):
        add(ERROR, "decimalLongitude", f"{lon_text!r} is not a longitude (-180 to 180)")
    if lat_text and lon_text:
        if not row.get("geodeticDatum", "").strip():
            add(ERROR, "geodeticDatum", "coordinates without their datum")
        if lat == 0 and lon == 0:
            add(WARNING, "decimalLatitude", "the point 0,0 is almost always a missing place")
    if uncertainty:
        value = _number(uncertainty)
        if value is None or not 0 < value <= MAX_UNCERTAINTY_M:
            add(
                ERROR,
                "coordinateUncertaintyInMeters",
                f"{uncertainty!r} is not a plausible uncertainty (above 0, at most "
                f"{MAX_UNCERTAINTY_M:,.0f} m)",
            )
        elif not lat_text:
            add(WARNING, "coordinateUncertaintyInMeters", "an uncertainty without coordinates")


def _check_licence(text: str, restricted_included: bool, add: _Add) -> None:
    if _URI.fullmatch(text):
        return
    if restricted_included:
        add(WARNING, "license", f"{text or 'none'!r} is no licence URI; included as asked")
    else:
        add(ERROR, "license", f"{text or 'none'!r} is not a licence URI")


def check_media_identifier(identifier: str) -> list[tuple[str, str, str]]:
    """A multimedia identifier must be a URI (an absolute one: scheme and path)."""
    if _URI.fullmatch(identifier) and " " not in identifier:
        return []
    return [(ERROR, "identifier", f"{identifier!r} is not a URI")]


def repeated_ids(ids: Iterable[str]) -> set[str]:
    """The identifiers that occur more than once."""
    counts = Counter(ids)
    return {value for value, n in counts.items() if n > 1 and value}


# --- spreadsheet formulas ---------------------------------------------------------------------


def runs_as_formula(value: str) -> bool:
    """Whether a spreadsheet opening the file would run `value` as a formula (the rule every
    Quadrat CSV guards against, `engine.files.csv_cell`)."""
    return bool(value) and csv_cell(value) != value


def formula_terms(row: Mapping[str, str]) -> list[str]:
    """The terms of a row whose values start like a formula (=, +, -, @, a tab or a line break;
    plain numbers such as -33.87 excepted)."""
    return [
        term for term, value in row.items() if isinstance(value, str) and runs_as_formula(value)
    ]


# --- the archive's descriptor -----------------------------------------------------------------

_TEXT = "{http://rs.tdwg.org/dwc/text/}"


def check_meta(meta: bytes, headers: Mapping[str, Sequence[str]]) -> list[str]:
    """What is wrong with `meta.xml` against the files it describes (`headers`: file name ->
    its header's column names, in order): every file named exists, each field's index is a
    column of its file and names a term URI once, the core's id and each extension's coreid
    are column 0, tab-separated UTF-8 with one header line."""
    try:
        root = ET.fromstring(meta)
    except ET.ParseError as error:
        return [f"meta.xml is not well-formed XML: {error}"]
    found: list[str] = []
    if root.tag != _TEXT + "archive":
        found.append("meta.xml: the root element is not a Darwin Core text archive")
    tables = [(t, "core") for t in root.findall(_TEXT + "core")] + [
        (t, "extension") for t in root.findall(_TEXT + "extension")
    ]
    if len([t for t, kind in tables if kind == "core"]) != 1:
        found.append("meta.xml: an archive has exactly one core")
    described = set()
    for table, kind in tables:
        location = table.findtext(f"{_TEXT}files/{_TEXT}location") or ""
        described.add(location)
        if location not in headers:
            found.append(f"meta.xml: {kind} file {location!r} is not in the archive")
            continue
        found += _table_problems(table, kind, location, len(headers[location]))
    for location in sorted(set(headers) - described):
        found.append(f"meta.xml does not describe {location}")
    return found


def _table_problems(table: ET.Element, kind: str, location: str, columns: int) -> list[str]:
    """What is wrong with one table's entry of `meta.xml` (its file, `columns` wide, exists):
    encoding, separator and header line, row type, key column, and its fields' columns and
    term URIs, each term once."""
    found: list[str] = []
    for attribute, wanted in (
        ("encoding", "UTF-8"),
        ("fieldsTerminatedBy", "\\t"),
        ("ignoreHeaderLines", "1"),
    ):
        if table.get(attribute) != wanted:
            found.append(f"meta.xml: {location}: {attribute} is not {wanted}")
    if not table.get("rowType"):
        found.append(f"meta.xml: {location}: no rowType")
    key = table.find(_TEXT + ("id" if kind == "core" else "coreid"))
    if key is None or key.get("index") != "0":
        found.append(f"meta.xml: {location}: its {'id' if kind == 'core' else 'coreid'} "
                     "is not column 0")  # fmt: skip
    terms: list[str] = []
    for field in table.findall(_TEXT + "field"):
        index_text, term = field.get("index", ""), field.get("term", "")
        if not index_text.isdigit() or int(index_text) >= columns:
            found.append(f"meta.xml: {location}: field {term} has no column {index_text}")
        if not _URI.fullmatch(term):
            found.append(f"meta.xml: {location}: field {index_text} names no term URI")
        terms.append(term)
    for term in repeated_ids(terms):
        found.append(f"meta.xml: {location}: {term} is named twice")
    return found
