"""Darwin Core exports of a query's relevant photos: a flat CSV with Darwin Core column names
(for R and spreadsheets) and a Darwin Core Archive for GBIF's IPT (docs/SPEC.md §4.1).

Written with the standard library (csv, zipfile, xml.etree), not ALA's `dwcahandler`: compared
for this job, dwcahandler 1.1.5 requires pandas <3 (Quadrat's environment has pandas 3, and
Quadrat needs no pandas at all), pins metapype 0.0.26 for its EML, and lists pytest, pytest-cov,
pytest-mock and flake8 as run-time dependencies that a packaged desktop app would carry; it
builds archives from CSV files through data frames. What GBIF's IPT reads here is small and
fixed: one tab-separated core and two extensions, a `meta.xml` naming each column's term URI,
and an EML 2.1.1 `eml.xml` in GBIF's profile (`engine/io/eml.py`); a third-party reader
(python-dwca-reader, in the tests) checks what is written.

One record per photo judged relevant (`basisOfRecord` HumanObservation: the photo is the
evidence of a person's observation, which GBIF's guide documents with a still image in the
Simple Multimedia extension; MachineObservation is for records a device made unattended, such
as camera traps, which the catalog cannot tell). Places are published through the catalog's
place rule (`engine.catalog.privacy.PlacePolicy`: withheld, obscured, the lab's sensitive
taxa). Photos whose licence does not allow reuse (all rights reserved, or none recorded) are
left out unless asked for, and counted either way; a photo without a date, a place or a taxon
is written with what it has and listed. How each record was decided relevant, and how likely
it is to be, goes with it (`engine/io/dwc_quality.py`).

Every export is checked before anything is written (`check_records`, `engine/io/dwc_checks.py`):
a problem GBIF would refuse stops the write unless asked for. Every write is all or nothing:
the archive is built in memory and renamed into place, and a full or read-only disk fails in
one line (`engine.io.export.write_failure`).
"""

from __future__ import annotations

import csv
import io
import json
import os
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from xml.etree import ElementTree as ET

from engine.catalog.library import Library
from engine.catalog.privacy import GENERALISED, WITHHELD, PlacePolicy, place_summary
from engine.catalog.reads import PhotoDetails
from engine.errors import BadInputError
from engine.files import csv_record
from engine.io import dwc_checks as checks
from engine.io.dwc_checks import ERROR, WARNING, Problem, RecordsRefused
from engine.io.dwc_quality import DISPUTED
from engine.io.dwc_records import (
    CSV_COLUMNS,
    DWC_CSV,
    DWCA,
    MEASUREMENT_ROW_TYPE,
    MEASUREMENT_TERMS,
    MULTIMEDIA_ROW_TYPE,
    MULTIMEDIA_TERMS,
    OCCURRENCE_ROW_TYPE,
    OCCURRENCE_TERMS,
    ListedPhoto,
    Record,
    collect,
    dataset_licence,
    library_id,
    select_records,
)
from engine.io.eml import Provenance, check_eml, eml_xml
from engine.io.safe_write import export_bytes
from engine.judgments.queries import QueryStore
from engine.licences import read_licence

__all__ = [
    "CSV_COLUMNS",
    "DWCA",
    "DWC_CSV",
    "DwcCheck",
    "DwcReport",
    "ListedPhoto",
    "RecordsRefused",
    "check_records",
    "dataset_licence",
    "export_dwc_csv",
    "export_dwca",
    "library_id",
]

ARCHIVE_MEMBER_MODE = 0o644  # what unzip gives the files: readable by the lab, not 0600
CLI_WRITE_HINT = "check it with --check, or write it anyway with --write-anyway"


@dataclass(frozen=True)
class DwcCheck:
    """What pre-flight found, before anything is written: the records an export would write,
    the photos it leaves out (restricted licences) or lists (incomplete), every problem per
    record, and how many places were generalised or withheld."""

    kind: str  # DWCA or DWC_CSV
    records: tuple[ListedPhoto, ...]
    restricted: tuple[ListedPhoto, ...]
    incomplete: tuple[ListedPhoto, ...]
    restricted_included: bool
    problems: tuple[Problem, ...]
    places: str = ""  # place_summary of the records
    licence: str = ""  # the dataset's licence (archives)

    @property
    def written(self) -> int:
        return len(self.records)

    @property
    def errors(self) -> tuple[Problem, ...]:
        return tuple(p for p in self.problems if p.severity == ERROR)

    @property
    def warnings(self) -> tuple[Problem, ...]:
        return tuple(p for p in self.problems if p.severity == WARNING)

    @property
    def left_out(self) -> tuple[ListedPhoto, ...]:
        """The photos not written, with why."""
        return () if self.restricted_included else self.restricted

    @property
    def would_write(self) -> bool:
        """Whether the export goes ahead without being asked to write anyway."""
        return not self.errors

    def summary(self) -> str:
        """The outcome of the check in one line."""
        what = "archive" if self.kind == DWCA else "CSV"
        verdict = "is ready to write" if self.would_write else "would not be written"
        parts = [f"{self.written:,} records checked, the {what} {verdict}"]
        parts.append(
            _count(len(self.errors), "error") + ", " + _count(len(self.warnings), "warning")
        )
        if self.left_out:
            parts.append(f"{len(self.left_out):,} left out for their licence")
        if self.places:
            parts.append(self.places)
        return "; ".join(parts)


def _count(n: int, word: str) -> str:
    return f"{n:,} {word}{'s' * (n != 1)}"


@dataclass(frozen=True)
class DwcReport:
    """What an export did: records written, photos left out or included with a restricted
    licence, the incomplete records (written with what they have), the problems pre-flight
    found and how many places were generalised or withheld."""

    path: Path
    written: int
    restricted: tuple[ListedPhoto, ...]
    incomplete: tuple[ListedPhoto, ...]
    restricted_included: bool
    licence: str = ""  # the dataset's licence (archives)
    problems: tuple[Problem, ...] = ()
    places: str = ""

    def summary(self, include_hint: str = "include them with --include-restricted") -> str:
        """The outcome in one line; `include_hint` says how to include restricted photos (the
        command line's option by default, the window's check box there)."""
        parts = [f"{self.written:,} records written to {self.path}"]
        if self.restricted:
            n = len(self.restricted)
            parts.append(
                f"{n:,} with a restricted licence included"
                if self.restricted_included
                else f"{n:,} {'photo' if n == 1 else 'photos'} left out: their licence does "
                f"not allow reuse ({include_hint})"
            )
        if self.incomplete:
            parts.append(f"{len(self.incomplete):,} incomplete (no date, place or taxon)")
        if self.places:
            parts.append(self.places)
        errors = sum(p.severity == ERROR for p in self.problems)
        if errors:
            parts.append(f"written with {_count(errors, 'error')} as asked")
        return "; ".join(parts)  # warnings are listed apart (`problems`), not counted here


# --- pre-flight ---------------------------------------------------------------------------------


def _record_problems(records: Sequence[Record], kind: str, media_url: str | None) -> list[Problem]:
    """Every record's problems, in the records' order."""
    out: list[Problem] = []
    repeated = checks.repeated_ids(r.occurrence["occurrenceID"] for r in records)
    today = date.today()
    for record in records:
        photo = record.details

        def add(severity: str, term: str, message: str, photo: PhotoDetails = photo) -> None:
            out.append(Problem(severity, message, photo.path, photo.image_id, term))

        occurrence = record.occurrence
        if occurrence["occurrenceID"] in repeated:
            add(ERROR, "occurrenceID", f"{occurrence['occurrenceID']} names another record too")
        restricted = not record.licence.reusable
        for problem in checks.check_occurrence(
            occurrence, restricted_included=restricted, today=today
        ):
            add(*problem)
        for problem in checks.check_media_identifier(record.multimedia["identifier"]):
            add(*problem)
        if record.decision.how == DISPUTED:
            add(WARNING, "", "the judges disagree on this photo and no adjudication settled it")
        if media_url and record.place.decision in (WITHHELD, GENERALISED):
            add(
                WARNING,
                "identifier",
                f"its place is {record.place.decision}, but the photo file may carry GPS: "
                "publish the copy 'quadrat export relevant-photos' makes (GPS removed)",
            )
        for term, value in _cells(record, kind):
            how = (
                "written with a leading ' so a spreadsheet shows it (take it off to use the value)"
                if kind == DWC_CSV
                else "left as it is: open the file in a spreadsheet as text"
            )
            add(WARNING, term, f"{value[:20]!r} starts like a spreadsheet formula; {how}")
    return out


def _cells(record: Record, kind: str) -> list[tuple[str, str]]:
    """(column, value) of each cell of the record's rows a spreadsheet would run as a formula:
    its core row and, in an archive, its multimedia and measurement rows (as "multimedia
    creator", "measurement measurementDeterminedBy"); in the CSV, its associatedMedia."""
    rows: list[tuple[str, dict[str, str]]] = [("", record.occurrence)]
    if kind == DWC_CSV:
        rows.append(("", {"associatedMedia": record.multimedia["identifier"]}))
    else:
        rows.append(("multimedia ", record.multimedia))
        rows.extend(("measurement ", row) for row in record.measurements)
    found: dict[str, str] = {}
    for prefix, row in rows:
        for term in checks.formula_terms(row):
            found.setdefault(prefix + term, row[term])
    return list(found.items())


def _export_problems(
    records: Sequence[Record], media_url: str | None, sensitive_taxa: bool
) -> list[Problem]:
    """Problems of the export as a whole (no photo named)."""
    out: list[Problem] = []
    local = sum(r.multimedia["identifier"].startswith("file:") for r in records)
    if local and not media_url:
        what = "identifier is a file: URI" if local == 1 else "identifiers are file: URIs"
        out.append(
            Problem(
                WARNING,
                f"{local:,} photo {what}, which only this computer can open: "
                "give the address where the photos will be published (--media-url)",
            )
        )
    if not sensitive_taxa:
        out.append(
            Problem(
                WARNING,
                "the lab's sensitive-taxa list was not applied, as asked: places of sensitive "
                "taxa are published as their records give them",
            )
        )
    return out


def _places_step(records: Sequence[Record], policy: PlacePolicy, sensitive_taxa: bool) -> list[str]:
    """How places were published, for the EML methods."""
    listed = len(policy.rules)
    lab = (
        f"the lab's list of sensitive taxa ({listed} {'taxon' if listed == 1 else 'taxa'}) was "
        "applied: their places are withheld or generalised to a grid"
        if sensitive_taxa
        else "the lab's list of sensitive taxa was NOT applied (as the exporter asked): places "
        "of sensitive taxa are published as their records give them"
    )
    summary = place_summary(r.place for r in records) or "no place generalised or withheld"
    return [
        "Places: a place the photo's record withholds (or marks private) is not published; "
        "coordinates the record obscured are published with the obscuring's uncertainty; "
        f"{lab}. informationWithheld and dataGeneralizations say so per record. In this "
        f"package: {summary}."
    ]


def _prepare(
    library: Library,
    query_id: int,
    kind: str,
    *,
    include_restricted: bool,
    media_url: str | None,
    creator: str | None,
    sensitive_taxa: bool,
) -> tuple[DwcCheck, dict[str, bytes]]:
    """Collect, check and lay out an export: the check, and the files it would write."""
    policy = PlacePolicy.of(library.catalog, use_list=sensitive_taxa)
    records, prov, quality = collect(library, query_id, media_url, policy)
    kept, restricted, incomplete = select_records(records, include_restricted)
    prov.quality = quality.paragraphs([r.details.image_id for r in kept])
    prov.places = _places_step(kept, policy, sensitive_taxa)
    problems = _record_problems(kept, kind, media_url)
    problems += _export_problems(kept, media_url, sensitive_taxa)
    licence = ("", "")
    if kind == DWCA:
        licence = dataset_licence([r.licence for r in kept])
        who = creator or QueryStore(library).user
        now = datetime.now(UTC)
        files = _archive_files(kept, prov, licence, who, now)
        headers = {name: data.split(b"\n", 1)[0].decode("utf-8").split("\t")
                   for name, data in files.items() if name.endswith(".txt")}  # fmt: skip
        for message in checks.check_meta(files["meta.xml"], headers) + check_eml(files["eml.xml"]):
            problems.append(Problem(ERROR, message))
        if not read_licence(licence[0]).gbif_dataset_licence:
            problems.append(
                Problem(ERROR, f"the dataset's licence {licence[0]} is not one GBIF takes")
            )
    else:
        files = {"csv": _csv_bytes(kept, prov)}
    check = DwcCheck(
        kind,
        tuple(ListedPhoto(r.details.image_id, r.details.path, "") for r in kept),
        restricted,
        incomplete,
        include_restricted,
        tuple(problems),
        place_summary(r.place for r in kept),
        licence[1],
    )
    return check, files


def check_records(
    library: Library,
    query_id: int,
    kind: str = DWCA,
    *,
    include_restricted: bool = False,
    media_url: str | None = None,
    creator: str | None = None,
    sensitive_taxa: bool = True,
) -> DwcCheck:
    """Pre-flight of an export, writing nothing: the records it would write, the photos it
    leaves out and why, and every problem per record (for the window to show before it asks
    for a file, and `quadrat export dwca|dwc-csv --check`)."""
    if kind not in (DWCA, DWC_CSV):
        raise BadInputError(f"no Darwin Core export called {kind!r}")
    check, _ = _prepare(
        library, query_id, kind, include_restricted=include_restricted, media_url=media_url,
        creator=creator, sensitive_taxa=sensitive_taxa,
    )  # fmt: skip
    return check


def _report(check: DwcCheck, path: Path) -> DwcReport:
    return DwcReport(
        path, check.written, check.restricted, check.incomplete, check.restricted_included,
        check.licence, check.problems, check.places,
    )  # fmt: skip


# --- the flat CSV -------------------------------------------------------------------------------


def _csv_bytes(records: Sequence[Record], prov: Provenance) -> bytes:
    buffer = io.StringIO(newline="")
    writer = csv.DictWriter(buffer, fieldnames=list(CSV_COLUMNS), lineterminator="\n")
    writer.writeheader()
    for record in records:
        properties = json.dumps(record.decision.properties(prov.query_text), ensure_ascii=False)
        row = {
            **record.occurrence,
            "dynamicProperties": properties,
            "associatedMedia": record.multimedia["identifier"],
        }
        writer.writerow(csv_record(row))
    return buffer.getvalue().encode("utf-8")


def export_dwc_csv(
    library: Library,
    query_id: int,
    path: str | os.PathLike[str],
    *,
    include_restricted: bool = False,
    media_url: str | None = None,
    sensitive_taxa: bool = True,
    write_anyway: bool = False,
    hint: str = CLI_WRITE_HINT,
) -> DwcReport:
    """The query's relevant photos as a CSV with Darwin Core column names, one row per photo
    (CSV_COLUMNS), spreadsheet-safe (`engine.files.csv_cell`). Checked first (`check_records`):
    with an error nothing is written (RecordsRefused) unless `write_anyway`. Written whole or
    not at all."""
    check, files = _prepare(
        library, query_id, DWC_CSV, include_restricted=include_restricted, media_url=media_url,
        creator=None, sensitive_taxa=sensitive_taxa,
    )  # fmt: skip
    if not check.would_write and not write_anyway:
        raise RecordsRefused("the Darwin Core CSV", check.problems, hint)
    target = Path(path).expanduser()
    export_bytes(target, files["csv"], "the Darwin Core CSV")
    return _report(check, target)


# --- the archive --------------------------------------------------------------------------------


def _tsv(rows: Sequence[dict[str, str]], terms: Sequence[tuple[str, str]]) -> bytes:
    """A tab-separated table with a header line, as meta.xml describes it: no quoting, so a tab
    or line break inside a value becomes a space."""
    lines = ["\t".join(name for name, _ in terms)]
    for row in rows:
        lines.append("\t".join(" ".join(str(row.get(name, "")).split()) for name, _ in terms))
    return ("\n".join(lines) + "\n").encode("utf-8")


_MULTIMEDIA_COLUMNS = (("coreid", ""), *MULTIMEDIA_TERMS)
_MEASUREMENT_COLUMNS = (("coreid", ""), *MEASUREMENT_TERMS)


def meta_xml() -> bytes:
    """The archive's descriptor: the occurrence core, the Simple Multimedia and the
    MeasurementOrFact extensions, each column's term URI, the core id in the first column of
    every file."""
    # The namespace as a plain attribute: no prefix registered in ElementTree's global table.
    archive = ET.Element(
        "archive", {"xmlns": "http://rs.tdwg.org/dwc/text/", "metadata": "eml.xml"}
    )
    for tag, row_type, name, terms, key in (
        ("core", OCCURRENCE_ROW_TYPE, "occurrence.txt", OCCURRENCE_TERMS, "id"),
        ("extension", MULTIMEDIA_ROW_TYPE, "multimedia.txt", _MULTIMEDIA_COLUMNS, "coreid"),
        ("extension", MEASUREMENT_ROW_TYPE, "measurementorfact.txt", _MEASUREMENT_COLUMNS,
         "coreid"),
    ):  # fmt: skip
        table = ET.SubElement(
            archive,
            tag,
            {
                "encoding": "UTF-8",
                "fieldsTerminatedBy": "\\t",
                "linesTerminatedBy": "\\n",
                "fieldsEnclosedBy": "",
                "ignoreHeaderLines": "1",
                "rowType": row_type,
            },
        )
        files = ET.SubElement(table, "files")
        ET.SubElement(files, "location").text = name
        ET.SubElement(table, key, {"index": "0"})
        for index, (_, term) in enumerate(terms):
            if term:
                ET.SubElement(table, "field", {"index": str(index), "term": term})
    ET.indent(archive)
    return bytes(ET.tostring(archive, encoding="utf-8", xml_declaration=True)) + b"\n"


def _archive_files(
    kept: Sequence[Record], prov: Provenance, licence: tuple[str, str], who: str, now: datetime
) -> dict[str, bytes]:
    """The archive's members by name."""
    occurrences = [{**r.occurrence} for r in kept]
    media = [{"coreid": r.occurrence["occurrenceID"], **r.multimedia} for r in kept]
    facts = [
        {"coreid": r.occurrence["occurrenceID"], **row} for r in kept for row in r.measurements
    ]
    return {
        "meta.xml": meta_xml(),
        "eml.xml": eml_xml(prov, licence, who, len(kept), now.date(), now),
        "occurrence.txt": _tsv(occurrences, OCCURRENCE_TERMS),
        "multimedia.txt": _tsv(media, _MULTIMEDIA_COLUMNS),
        "measurementorfact.txt": _tsv(facts, _MEASUREMENT_COLUMNS),
    }


def _zip(files: dict[str, bytes], now: datetime) -> bytes:
    """The members in a zip, each extracting as a plain file of mode 0644."""
    buffer = io.BytesIO()
    stamp = now.timetuple()[:6]
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            member = zipfile.ZipInfo(name, date_time=stamp)
            member.compress_type = zipfile.ZIP_DEFLATED
            member.create_system = 3  # Unix: the mode below is read
            member.external_attr = (0o100000 | ARCHIVE_MEMBER_MODE) << 16
            archive.writestr(member, data)
    return buffer.getvalue()


def export_dwca(
    library: Library,
    query_id: int,
    path: str | os.PathLike[str],
    *,
    include_restricted: bool = False,
    media_url: str | None = None,
    creator: str | None = None,
    sensitive_taxa: bool = True,
    write_anyway: bool = False,
    hint: str = CLI_WRITE_HINT,
) -> DwcReport:
    """The query's relevant photos as a Darwin Core Archive (a zip of meta.xml, eml.xml,
    occurrence.txt, multimedia.txt and measurementorfact.txt) for GBIF's IPT. `media_url`:
    where the photos will be published (identifiers become URLs under it). Checked first
    (`check_records`): with an error nothing is written (RecordsRefused, its message ending in
    `hint`) unless `write_anyway`. Written whole or not at all."""
    check, files = _prepare(
        library, query_id, DWCA, include_restricted=include_restricted, media_url=media_url,
        creator=creator, sensitive_taxa=sensitive_taxa,
    )  # fmt: skip
    if not check.would_write and not write_anyway:
        raise RecordsRefused("the Darwin Core Archive", check.problems, hint)
    target = Path(path).expanduser()
    export_bytes(target, _zip(files, datetime.now()), "the Darwin Core Archive")
    return _report(check, target)
