"""Darwin Core exports of a query's relevant photos: a flat CSV with Darwin Core column names
(for R and spreadsheets) and a Darwin Core Archive for GBIF's IPT (docs/SPEC.md §4.1).

Written with the standard library (csv, zipfile, xml.etree), not ALA's `dwcahandler`: compared
for this job, dwcahandler 1.1.5 requires pandas <3 (Quadrat's environment has pandas 3, and
Quadrat needs no pandas at all), pins metapype 0.0.26 for its EML, and lists pytest, pytest-cov,
pytest-mock and flake8 as run-time dependencies that a packaged desktop app would carry; it
builds archives from CSV files through data frames. What GBIF's IPT reads here is small and
fixed: one tab-separated core and one extension, a `meta.xml` naming each column's term URI,
and an EML 2.1.1 `eml.xml` in GBIF's profile; a third-party reader (python-dwca-reader, in the
tests) checks what is written.

One record per photo judged relevant (`basisOfRecord` HumanObservation: the photo is the
evidence of a person's observation, which GBIF's guide documents with a still image in the
Simple Multimedia extension; MachineObservation is for records a device made unattended, such
as camera traps, which the catalog cannot tell). Photos whose licence does not allow reuse
(all rights reserved, or none recorded) are left out unless asked for, and counted either
way; a photo without a date, a place or a taxon is written with what it has and listed.
Every write is all or nothing: the archive is built in memory and renamed into place, and a
full or read-only disk fails in one line (`engine.io.export.write_failure`).
"""

from __future__ import annotations

import csv
import io
import mimetypes
import os
import uuid
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from xml.etree import ElementTree as ET

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from engine import quadrat_version
from engine.catalog import Judgment, LibraryMeta, Query, Run, RunResult
from engine.catalog.library import Library
from engine.errors import BadInputError
from engine.files import csv_record
from engine.indexing.collections import PhotoDetails, photo_details
from engine.io.export import export_bytes
from engine.judgments.attributes import DWC_ATTRIBUTE_TERMS, attributes_for_query
from engine.judgments.queries import QueryStore
from engine.licences import Licence, read_licence
from engine.methods.registry import run_label
from engine.search.filters import filter_names

DWC = "http://rs.tdwg.org/dwc/terms/"
DCTERMS = "http://purl.org/dc/terms/"
OCCURRENCE_ROW_TYPE = DWC + "Occurrence"
MULTIMEDIA_ROW_TYPE = "http://rs.gbif.org/terms/1.0/Multimedia"
BASIS_OF_RECORD = "HumanObservation"
GEODETIC_DATUM = "WGS84"  # what EXIF GPS and iNaturalist coordinates are given in
EML_NAMESPACE = "eml://ecoinformatics.org/eml-2.1.1"
EML_SCHEMA = "http://rs.gbif.org/schema/eml-gbif-profile/1.2/eml.xsd"

_TAXON_RANKS = ("kingdom", "phylum", "class", "order", "family", "genus")

# The occurrence core's columns, in order, with each term's URI (the flat CSV's header too).
OCCURRENCE_TERMS: tuple[tuple[str, str], ...] = (
    ("occurrenceID", DWC + "occurrenceID"),
    ("basisOfRecord", DWC + "basisOfRecord"),
    ("scientificName", DWC + "scientificName"),
    ("taxonRank", DWC + "taxonRank"),
    ("vernacularName", DWC + "vernacularName"),
    *((rank, DWC + rank) for rank in _TAXON_RANKS),
    ("specificEpithet", DWC + "specificEpithet"),
    ("eventDate", DWC + "eventDate"),
    ("decimalLatitude", DWC + "decimalLatitude"),
    ("decimalLongitude", DWC + "decimalLongitude"),
    ("geodeticDatum", DWC + "geodeticDatum"),
    ("coordinateUncertaintyInMeters", DWC + "coordinateUncertaintyInMeters"),
    *((term, DWC + term) for term in DWC_ATTRIBUTE_TERMS),
    ("identificationRemarks", DWC + "identificationRemarks"),
    ("license", DCTERMS + "license"),
    ("rightsHolder", DCTERMS + "rightsHolder"),
)
# GBIF Simple Multimedia: one row per photo, joined to its occurrence by the core id.
MULTIMEDIA_TERMS: tuple[tuple[str, str], ...] = tuple(
    (term, DCTERMS + term)
    for term in (
        "type",
        "format",
        "identifier",
        "references",
        "created",
        "creator",
        "license",
        "rightsHolder",
    )
)
# The flat CSV: the core's columns and the photo as `associatedMedia`.
CSV_COLUMNS: tuple[str, ...] = (*(name for name, _ in OCCURRENCE_TERMS), "associatedMedia")

# Missing from a record, these make it "incomplete" (exported all the same, and listed).
_NEEDED = ("scientificName", "eventDate", "decimalLatitude")
_NEEDED_WORDS = {"scientificName": "taxon", "eventDate": "date", "decimalLatitude": "place"}

META_LIBRARY_ID = "library_id"  # the library's own UUID, which occurrence ids derive from


# --- licences -----------------------------------------------------------------------------------

# The three licences GBIF accepts for a dataset, least to most restrictive.
_DATASET_LICENCES = (
    ("http://creativecommons.org/publicdomain/zero/1.0/legalcode", "Public Domain (CC0 1.0)"),
    (
        "http://creativecommons.org/licenses/by/4.0/legalcode",
        "Creative Commons Attribution (CC-BY) 4.0",
    ),
    (
        "http://creativecommons.org/licenses/by-nc/4.0/legalcode",
        "Creative Commons Attribution Non Commercial (CC-BY-NC) 4.0",
    ),
)


def dataset_licence(licences: Sequence[Licence]) -> tuple[str, str]:
    """(URI, title) of the GBIF dataset licence that respects every photo's: CC BY-NC 4.0 when
    any is non-commercial (or not reusable, when restricted photos were included), CC0 when all
    are CC0 (the Public Domain Mark is no dedication: GBIF does not take it), else CC BY 4.0."""
    if any(item.non_commercial or not item.reusable for item in licences):
        return _DATASET_LICENCES[2]
    if licences and all(item.code == "CC0-1.0" for item in licences):
        return _DATASET_LICENCES[0]
    return _DATASET_LICENCES[1]


# --- what an export writes ------------------------------------------------------------------------


@dataclass(frozen=True)
class ListedPhoto:
    """A photo an export names to the user: its path and why (missing terms, its licence)."""

    image_id: int
    path: str
    reason: str


@dataclass(frozen=True)
class DwcReport:
    """What an export did: records written, photos left out or included with a restricted
    licence, and the incomplete records (written with what they have)."""

    path: Path
    written: int
    restricted: tuple[ListedPhoto, ...]
    incomplete: tuple[ListedPhoto, ...]
    restricted_included: bool
    licence: str = ""  # the dataset's licence (archives)

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
        return "; ".join(parts)


@dataclass
class _Record:
    details: PhotoDetails
    licence: Licence
    occurrence: dict[str, str]
    multimedia: dict[str, str]
    missing: tuple[str, ...] = ()


@dataclass
class _Provenance:
    """How the records were found and judged: the dataset's methods in eml.xml."""

    query_id: int
    query_text: str
    query_name: str
    runs: list[str] = field(default_factory=list)  # one line per saved run
    models: list[str] = field(default_factory=list)
    judges: list[str] = field(default_factory=list)
    version: str = ""
    certificate: str = ""  # the query's certified recall, if one was recorded
    adjudicated: int = 0  # photos whose judgment settles a disagreement among judges


def library_id(library: Library) -> uuid.UUID:
    """The library's own UUID, made once and kept in its catalog, so occurrence ids stay the
    same across exports (and differ between libraries that share photos)."""
    with library.catalog.session() as s:
        row = s.get(LibraryMeta, META_LIBRARY_ID)
        if row is not None:
            return uuid.UUID(row.value)
    try:
        with library.catalog.session() as s:
            s.add(LibraryMeta(key=META_LIBRARY_ID, value=str(uuid.uuid4())))
    except IntegrityError:
        pass  # another export made it first: use that one
    with library.catalog.session() as s:
        row = s.get(LibraryMeta, META_LIBRARY_ID)
        assert row is not None
        return uuid.UUID(row.value)


def occurrence_id(library_uuid: uuid.UUID, image_id: int) -> str:
    """The occurrence id of a photo of a library: a name-based UUID, the same on every export."""
    return f"urn:uuid:{uuid.uuid5(library_uuid, f'image/{image_id}')}"


def _number(value: float) -> str:
    """A coordinate or distance as plain decimal text (no exponent, no trailing zeros)."""
    text = format(float(value), ".10f").rstrip("0").rstrip(".")
    return "0" if text in ("", "-0") else text


def _taxon_terms(details: PhotoDetails) -> dict[str, str]:
    ranks = dict(details.lineage)
    name = details.taxon or ""
    rank = next((r for r, value in reversed(details.lineage) if value == name), "")
    species = ranks.get("species", "")
    return {
        "scientificName": name,
        "taxonRank": rank,
        "vernacularName": details.common_name or "",
        **{r: ranks.get(r, "") for r in _TAXON_RANKS},
        "specificEpithet": species.split(" ", 1)[1] if " " in species else "",
    }


def _media_identifier(details: PhotoDetails, media_url: str | None) -> str:
    """Where the photo can be fetched: under `media_url` (where the publisher put the photos,
    by their path in the collection), else the path in the collection alone."""
    rel = details.rel_path.replace(os.sep, "/")
    if media_url:
        return media_url.rstrip("/") + "/" + "/".join(part for part in rel.split("/") if part)
    return rel


def _provenance(
    library: Library, query_id: int, relevant: Sequence[int]
) -> tuple[_Provenance, dict[int, str]]:
    """The query's provenance, and per photo the line `identificationRemarks` carries."""
    with library.catalog.session() as s:
        query = s.get(Query, query_id)
        if query is None:
            raise BadInputError(f"no saved query with id {query_id}")
        runs = list(s.scalars(select(Run).where(Run.query_id == query_id).order_by(Run.id)))
        judged = {
            image_id: (by, at)
            for image_id, by, at in s.execute(
                select(Judgment.image_id, Judgment.judged_by, Judgment.judged_at).where(
                    Judgment.query_id == query_id, Judgment.relevance > 0
                )
            )
        }
        found: dict[int, tuple[int, int]] = {}  # image id -> (run id, rank): its first run
        for start in range(0, len(relevant), 500):
            chunk = list(relevant[start : start + 500])
            for run_id, rank, image_id in s.execute(
                select(RunResult.run_id, RunResult.rank, RunResult.image_id)
                .where(RunResult.image_id.in_(chunk), RunResult.run_id.in_([r.id for r in runs]))
                .order_by(RunResult.run_id)
            ):
                found.setdefault(image_id, (run_id, rank))
        prov = _Provenance(query.id, query.text, query.name or "")
    version = quadrat_version()
    names = filter_names(library.catalog)  # runs filtered by collection or camera say which
    labels = {run.id: run_label(run.method, run.params, run.kind, names) for run in runs}
    for run in runs:
        made = run.created_at.strftime("%Y-%m-%d %H:%M UTC")
        prov.runs.append(
            f"{labels[run.id]} (method {run.method}, model {run.model_key or 'none'}, "
            f"parameters {_params_text(run.params)}, Quadrat {run.quadrat_version or '?'}, "
            f"{made})"
        )
        if run.model_key and run.model_key not in prov.models:
            prov.models.append(run.model_key)
    prov.judges = sorted({by for by, _ in judged.values() if by})
    prov.version = version
    from engine.judgments.adjudication import adjudications, certificates

    certified = certificates(library, [query_id]).get(query_id)
    prov.certificate = certified.text() if certified is not None else ""
    prov.adjudicated = len(adjudications(library, query_id))
    remarks: dict[int, str] = {}
    for image_id in relevant:
        by, at = judged.get(image_id, (None, None))
        hit = found.get(image_id)
        how = f" by {labels[hit[0]]} (rank {hit[1]})" if hit is not None else ""
        who = f" by {by}" if by else ""
        when = f" on {at:%Y-%m-%d}" if isinstance(at, datetime) else ""
        remarks[image_id] = (
            f'Photo found with Quadrat {version} for the query "{query.text}"{how}; '
            f"judged relevant{who}{when}; taxon, date and place as the photo's record gives them"
        )
    return prov, remarks


def _params_text(params: object) -> str:
    """A run's parameters for people: its method options, without per-photo evidence."""
    if not isinstance(params, dict):
        return "{}"
    kept = {k: v for k, v in params.items() if k not in ("details", "evidence")}
    return ", ".join(f"{k}={v}" for k, v in sorted(kept.items())) or "defaults"


def _collect(
    library: Library, query_id: int, media_url: str | None
) -> tuple[list[_Record], _Provenance]:
    """Every relevant photo of the query as an occurrence and a multimedia row."""
    with library.catalog.session() as s:
        if s.get(Query, query_id) is None:
            raise BadInputError(f"no saved query with id {query_id}")
        relevant = list(
            s.scalars(
                select(Judgment.image_id)
                .where(Judgment.query_id == query_id, Judgment.relevance > 0)
                .order_by(Judgment.image_id)
            )
        )
    details = photo_details(library, relevant)
    relevant = [i for i in relevant if i in details]
    prov, remarks = _provenance(library, query_id, relevant)
    attributes = attributes_for_query(library, query_id)
    base = library_id(library)
    records: list[_Record] = []
    for image_id in relevant:
        photo = details[image_id]
        licence = read_licence(photo.license)
        seen = photo.observed_at
        event = seen.isoformat(timespec="seconds") if seen is not None else ""
        place = (
            (photo.latitude, photo.longitude)
            if photo.latitude is not None and photo.longitude is not None
            else None
        )
        values = attributes.get(image_id, {})
        occurrence = {
            "occurrenceID": occurrence_id(base, image_id),
            "basisOfRecord": BASIS_OF_RECORD,
            **_taxon_terms(photo),
            "eventDate": event,
            "decimalLatitude": _number(place[0]) if place else "",
            "decimalLongitude": _number(place[1]) if place else "",
            "geodeticDatum": GEODETIC_DATUM if place else "",
            "coordinateUncertaintyInMeters": (
                _number(photo.location_uncertainty)
                if place and photo.location_uncertainty is not None
                else ""
            ),
            **{term: values.get(term, "") or "" for term in DWC_ATTRIBUTE_TERMS},
            "identificationRemarks": remarks[image_id],
            "license": licence.value or "unknown",
            "rightsHolder": photo.rights_holder or "",
        }
        mime = mimetypes.guess_type(photo.rel_path)[0] or ""
        multimedia = {
            "type": "StillImage",
            "format": mime,
            "identifier": _media_identifier(photo, media_url),
            "references": "",
            "created": event,
            "creator": photo.rights_holder or "",
            "license": licence.value or "unknown",
            "rightsHolder": photo.rights_holder or "",
        }
        missing = tuple(_NEEDED_WORDS[t] for t in _NEEDED if not occurrence[t])
        records.append(_Record(photo, licence, occurrence, multimedia, missing))
    return records, prov


def _select(
    records: list[_Record], include_restricted: bool
) -> tuple[list[_Record], tuple[ListedPhoto, ...], tuple[ListedPhoto, ...]]:
    """The records to write, the restricted photos (left out unless included) and the
    incomplete ones among those written."""
    restricted = tuple(
        ListedPhoto(r.details.image_id, r.details.path, f"licence: {r.licence.text or 'unknown'}")
        for r in records
        if not r.licence.reusable
    )
    kept = [r for r in records if include_restricted or r.licence.reusable]
    incomplete = tuple(
        ListedPhoto(r.details.image_id, r.details.path, "no " + ", no ".join(r.missing))
        for r in kept
        if r.missing
    )
    return kept, restricted, incomplete


# --- the flat CSV -------------------------------------------------------------------------------


def export_dwc_csv(
    library: Library,
    query_id: int,
    path: str | os.PathLike[str],
    *,
    include_restricted: bool = False,
    media_url: str | None = None,
) -> DwcReport:
    """The query's relevant photos as a CSV with Darwin Core column names, one row per photo
    (CSV_COLUMNS), spreadsheet-safe (`engine.files.csv_cell`). Written whole or not at all."""
    records, _ = _collect(library, query_id, media_url)
    kept, restricted, incomplete = _select(records, include_restricted)
    buffer = io.StringIO(newline="")
    writer = csv.DictWriter(buffer, fieldnames=list(CSV_COLUMNS), lineterminator="\n")
    writer.writeheader()
    for record in kept:
        row = {**record.occurrence, "associatedMedia": record.multimedia["identifier"]}
        writer.writerow(csv_record(row))
    target = Path(path).expanduser()
    export_bytes(target, buffer.getvalue().encode("utf-8"), "the Darwin Core CSV")
    return DwcReport(target, len(kept), restricted, incomplete, include_restricted)


# --- the archive --------------------------------------------------------------------------------


def _tsv(rows: Sequence[dict[str, str]], terms: Sequence[tuple[str, str]]) -> bytes:
    """A tab-separated table with a header line, as meta.xml describes it: no quoting, so a tab
    or line break inside a value becomes a space."""
    lines = ["\t".join(name for name, _ in terms)]
    for row in rows:
        lines.append("\t".join(" ".join(str(row.get(name, "")).split()) for name, _ in terms))
    return ("\n".join(lines) + "\n").encode("utf-8")


def meta_xml() -> bytes:
    """The archive's descriptor: the occurrence core and the Simple Multimedia extension, each
    column's term URI, the core id in the first column of both files."""
    # The namespace as a plain attribute: no prefix registered in ElementTree's global table.
    archive = ET.Element(
        "archive", {"xmlns": "http://rs.tdwg.org/dwc/text/", "metadata": "eml.xml"}
    )
    for tag, row_type, name, terms, key in (
        ("core", OCCURRENCE_ROW_TYPE, "occurrence.txt", OCCURRENCE_TERMS, "id"),
        (
            "extension",
            MULTIMEDIA_ROW_TYPE,
            "multimedia.txt",
            (("coreid", ""), *MULTIMEDIA_TERMS),
            "coreid",
        ),
    ):
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


def eml_xml(
    prov: _Provenance, licence: tuple[str, str], creator: str, records: int, today: date
) -> bytes:
    """The dataset's metadata in EML 2.1.1 (GBIF's profile): title, creator, licence, and the
    methods: query, search runs (method, model, parameters), judges, Quadrat's version."""
    eml_ns = EML_NAMESPACE
    xsi = "http://www.w3.org/2001/XMLSchema-instance"
    ET.register_namespace("eml", eml_ns)
    ET.register_namespace("xsi", xsi)
    package = f"urn:uuid:{uuid.uuid4()}"
    root = ET.Element(
        f"{{{eml_ns}}}eml",
        {
            f"{{{xsi}}}schemaLocation": f"{eml_ns} {EML_SCHEMA}",
            "packageId": package,
            "system": "http://gbif.org",
            "scope": "system",
            "{http://www.w3.org/XML/1998/namespace}lang": "en",
        },
    )
    dataset = ET.SubElement(root, "dataset")
    ET.SubElement(dataset, "alternateIdentifier").text = package
    title = prov.query_name or prov.query_text
    ET.SubElement(
        dataset, "title", {"{http://www.w3.org/XML/1998/namespace}lang": "en"}
    ).text = f"Photos of {title!s} found and judged with Quadrat"
    for role in ("creator", "metadataProvider"):
        person = ET.SubElement(dataset, role)
        ET.SubElement(ET.SubElement(person, "individualName"), "surName").text = creator
    ET.SubElement(dataset, "pubDate").text = today.isoformat()
    ET.SubElement(dataset, "language").text = "en"
    abstract = ET.SubElement(dataset, "abstract")
    ET.SubElement(abstract, "para").text = (
        f"{records:,} occurrences, one per photo judged relevant for the query "
        f'"{prov.query_text}" in a local photo collection searched with Quadrat '
        f"{prov.version}. Each photo is in the multimedia extension with its own licence."
    )
    uri, name = licence
    rights = ET.SubElement(ET.SubElement(dataset, "intellectualRights"), "para")
    rights.text = "This work is licensed under a "
    link = ET.SubElement(rights, "ulink", {"url": uri})
    ET.SubElement(link, "citetitle").text = f"{name} License"
    link.tail = "."
    contact = ET.SubElement(dataset, "contact")
    ET.SubElement(ET.SubElement(contact, "individualName"), "surName").text = creator
    methods = ET.SubElement(dataset, "methods")
    steps = [
        f'Query: "{prov.query_text}"'
        + (f' (saved as "{prov.query_name}")' if prov.query_name else "")
        + f", saved query {prov.query_id}.",
        *(f"Search run: {line}." for line in prov.runs),
        "Models: " + (", ".join(prov.models) or "none recorded") + ".",
        "Judged relevant by: " + (", ".join(prov.judges) or "not recorded") + ".",
        *(
            [
                "Where judges disagreed, an adjudicated judgment settled "
                f"{prov.adjudicated} photo{'s' * (prov.adjudicated != 1)}."
            ]
            if prov.adjudicated
            else []
        ),
        *([f"Completeness: {prov.certificate}."] if prov.certificate else []),
        f"Exported with Quadrat {prov.version}; taxon, date and place are those of each "
        "photo's own record; attributes (behavior, lifeStage, ...) as the judges set them.",
    ]
    for text in steps:
        step = ET.SubElement(methods, "methodStep")
        ET.SubElement(ET.SubElement(step, "description"), "para").text = text
    extra = ET.SubElement(
        ET.SubElement(ET.SubElement(root, "additionalMetadata"), "metadata"), "gbif"
    )
    ET.SubElement(extra, "dateStamp").text = today.isoformat()
    ET.SubElement(extra, "hierarchyLevel").text = "dataset"
    ET.indent(root)
    return bytes(ET.tostring(root, encoding="utf-8", xml_declaration=True)) + b"\n"


def export_dwca(
    library: Library,
    query_id: int,
    path: str | os.PathLike[str],
    *,
    include_restricted: bool = False,
    media_url: str | None = None,
    creator: str | None = None,
) -> DwcReport:
    """The query's relevant photos as a Darwin Core Archive (a zip of meta.xml, eml.xml,
    occurrence.txt and multimedia.txt) for GBIF's IPT. `media_url`: where the photos will be
    published (identifiers become URLs under it). Written whole or not at all."""
    records, prov = _collect(library, query_id, media_url)
    kept, restricted, incomplete = _select(records, include_restricted)
    licence = dataset_licence([r.licence for r in kept])
    who = creator or QueryStore(library).user
    occurrences = [{**r.occurrence} for r in kept]
    media = [{"coreid": r.occurrence["occurrenceID"], **r.multimedia} for r in kept]
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("meta.xml", meta_xml())
        archive.writestr("eml.xml", eml_xml(prov, licence, who, len(kept), date.today()))
        archive.writestr("occurrence.txt", _tsv(occurrences, OCCURRENCE_TERMS))
        archive.writestr("multimedia.txt", _tsv(media, (("coreid", ""), *MULTIMEDIA_TERMS)))
    target = Path(path).expanduser()
    export_bytes(target, buffer.getvalue(), "the Darwin Core Archive")
    return DwcReport(target, len(kept), restricted, incomplete, include_restricted, licence[1])
