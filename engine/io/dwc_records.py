"""The records a Darwin Core export writes (docs/SPEC.md §4.1): the terms of the occurrence
core and its two extensions, each relevant photo as an occurrence (its taxon, date, place as
the catalog's place rule publishes it, attributes, licence), a multimedia row and its
measurements (how it was decided relevant, its p(relevant)), and the query's provenance for
the dataset's metadata. `engine/io/dwc.py` checks and writes them."""

from __future__ import annotations

import mimetypes
import os
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from urllib.parse import quote

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from engine import quadrat_version
from engine.catalog import Judgment, LibraryMeta, Query, Run, RunResult
from engine.catalog.library import Library
from engine.catalog.privacy import WITHHELD, PlacePolicy, PublishedPlace
from engine.catalog.reads import PhotoDetails, photo_details
from engine.errors import BadInputError
from engine.io.dwc_quality import (
    ADJUDICATED,
    AGREED,
    DISPUTED,
    JUDGED,
    PackageQuality,
    RecordDecision,
    package_quality,
)
from engine.io.eml import Provenance
from engine.judgments.attributes import DWC_ATTRIBUTE_TERMS, attributes_for_query
from engine.licences import Licence, read_licence
from engine.methods.registry import run_label
from engine.search.filters import filter_names

DWC = "http://rs.tdwg.org/dwc/terms/"
DCTERMS = "http://purl.org/dc/terms/"
OCCURRENCE_ROW_TYPE = DWC + "Occurrence"
MULTIMEDIA_ROW_TYPE = "http://rs.gbif.org/terms/1.0/Multimedia"
MEASUREMENT_ROW_TYPE = DWC + "MeasurementOrFact"
BASIS_OF_RECORD = "HumanObservation"
GEODETIC_DATUM = "WGS84"  # what EXIF GPS and iNaturalist coordinates are given in
DWCA, DWC_CSV = "dwca", "dwc-csv"

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
    ("informationWithheld", DWC + "informationWithheld"),
    ("dataGeneralizations", DWC + "dataGeneralizations"),
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
# Darwin Core's MeasurementOrFact: how each record was decided relevant and its p(relevant).
MEASUREMENT_TERMS: tuple[tuple[str, str], ...] = tuple(
    (term, DWC + term)
    for term in (
        "measurementID",
        "measurementType",
        "measurementValue",
        "measurementAccuracy",
        "measurementUnit",
        "measurementDeterminedDate",
        "measurementDeterminedBy",
        "measurementMethod",
        "measurementRemarks",
    )
)
# The flat CSV: the core's columns, the record's quality as JSON, the photo.
CSV_COLUMNS: tuple[str, ...] = (
    *(name for name, _ in OCCURRENCE_TERMS),
    "dynamicProperties",
    "associatedMedia",
)

# Missing from a record, these make it "incomplete" (exported all the same, and listed).
_NEEDED = ("scientificName", "eventDate", "decimalLatitude")
_NEEDED_WORDS = {"scientificName": "taxon", "eventDate": "date", "decimalLatitude": "place"}

META_LIBRARY_ID = "library_id"  # the library's own UUID, which occurrence ids derive from
RELEVANCE_TYPE = "relevance to the query"
PROBABILITY_TYPE = "probability of relevance"
_P_METHODS = {
    JUDGED: "one judge's precision measured on the blind double-judging sample (see the "
    "dataset's quality control)",
    AGREED: "agreed and adjudicated records are the reference: counted as relevant",
    ADJUDICATED: "agreed and adjudicated records are the reference: counted as relevant",
    DISPUTED: "the judges disagree and no adjudication settled it: counted as 0.5",
}
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


@dataclass(frozen=True)
class ListedPhoto:
    """A photo an export names to the user: its path and why (missing terms, its licence)."""

    image_id: int
    path: str
    reason: str


@dataclass
class Record:
    """One relevant photo as the export writes it: its occurrence and multimedia rows, its
    published place, how it was decided relevant, and the terms it lacks."""

    details: PhotoDetails
    licence: Licence
    place: PublishedPlace
    decision: RecordDecision
    occurrence: dict[str, str]
    multimedia: dict[str, str]
    missing: tuple[str, ...] = ()
    query_words: str = ""  # 'query "..."', the measurements' remarks

    @property
    def measurements(self) -> list[dict[str, str]]:
        """The record's rows of the MeasurementOrFact extension."""
        occurrence = self.occurrence["occurrenceID"]
        decision = self.decision
        day = decision.decided_at.date().isoformat() if decision.decided_at else ""
        shared = {
            "measurementDeterminedDate": day,
            "measurementDeterminedBy": decision.determined_by,
        }
        rows = [
            {
                "measurementID": f"{occurrence}/relevance",
                "measurementType": RELEVANCE_TYPE,
                "measurementValue": "relevant",
                **shared,
                "measurementMethod": decision.method + ", in Quadrat",
                "measurementRemarks": self.query_words,
            }
        ]
        p = decision.p_relevant
        if p.value is not None and p.low is not None and p.high is not None:
            rows.append(
                {
                    "measurementID": f"{occurrence}/p-relevant",
                    "measurementType": PROBABILITY_TYPE,
                    "measurementValue": f"{p.value:.4f}",
                    "measurementAccuracy": f"95 % interval {p.low:.4f}-{p.high:.4f}",
                    **shared,
                    "measurementMethod": _P_METHODS[decision.how],
                    "measurementRemarks": self.query_words,
                }
            )
        return rows


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


def media_identifier(details: PhotoDetails, media_url: str | None) -> str:
    """The photo as a URI: under `media_url` (where the publisher puts the photos, by their
    path in the collection, each part percent-encoded), else the `file:` URI of the photo on
    this computer (which no one else can open: pre-flight says so)."""
    rel = details.rel_path.replace(os.sep, "/")
    if media_url:
        parts = (quote(part, safe="") for part in rel.split("/") if part)
        return media_url.rstrip("/") + "/" + "/".join(parts)
    return Path(details.path).absolute().as_uri()


def _provenance(
    library: Library, query_id: int, relevant: Sequence[int]
) -> tuple[Provenance, dict[int, str]]:
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
        prov = Provenance(query.id, query.text, query.name or "")
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
    from engine.judgments.adjudication import adjudications

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


def _place_terms(place: PublishedPlace) -> dict[str, str]:
    """The place as Darwin Core publishes it: coordinates, datum and uncertainty only where
    coordinates are published, and what was withheld or generalised."""
    where = place.has_place
    assert place.latitude is not None or not where
    return {
        "decimalLatitude": _number(place.latitude) if place.latitude is not None else "",
        "decimalLongitude": _number(place.longitude) if place.longitude is not None else "",
        "geodeticDatum": GEODETIC_DATUM if where else "",
        "coordinateUncertaintyInMeters": (
            _number(place.uncertainty_m) if where and place.uncertainty_m is not None else ""
        ),
        "informationWithheld": place.information_withheld,
        "dataGeneralizations": place.data_generalizations,
    }


def relevant_photos(library: Library, query_id: int) -> tuple[list[int], dict[int, PhotoDetails]]:
    """A saved query's relevant photos still in the catalog, in id order, with their details;
    an unknown query is bad input."""
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
    return [i for i in relevant if i in details], details


def collect(
    library: Library, query_id: int, media_url: str | None, policy: PlacePolicy
) -> tuple[list[Record], Provenance, PackageQuality]:
    """Every relevant photo of the query as an occurrence and a multimedia row, with how each
    was decided (the package's measured quality)."""
    relevant, details = relevant_photos(library, query_id)
    prov, remarks = _provenance(library, query_id, relevant)
    quality = package_quality(library, query_id, relevant)
    attributes = attributes_for_query(library, query_id)
    base = library_id(library)
    query_words = f'query "{prov.query_text}"'
    records: list[Record] = []
    for image_id in relevant:
        photo = details[image_id]
        licence = read_licence(photo.license)
        seen = photo.observed_at
        event = seen.isoformat(timespec="seconds") if seen is not None else ""
        names = (photo.taxon, *(name for _, name in photo.lineage))
        place = policy.publish(
            photo.latitude, photo.longitude, photo.location_uncertainty, photo.place_privacy, names
        )
        values = attributes.get(image_id, {})
        occurrence = {
            "occurrenceID": occurrence_id(base, image_id),
            "basisOfRecord": BASIS_OF_RECORD,
            **_taxon_terms(photo),
            "eventDate": event,
            **_place_terms(place),
            **{term: values.get(term, "") or "" for term in DWC_ATTRIBUTE_TERMS},
            "identificationRemarks": remarks[image_id],
            "license": licence.value or "unknown",
            "rightsHolder": photo.rights_holder or "",
        }
        mime = mimetypes.guess_type(photo.rel_path)[0] or ""
        multimedia = {
            "type": "StillImage",
            "format": mime,
            "identifier": media_identifier(photo, media_url),
            "references": "",
            "created": event,
            "creator": photo.rights_holder or "",
            "license": licence.value or "unknown",
            "rightsHolder": photo.rights_holder or "",
        }
        missing = tuple(
            _NEEDED_WORDS[t]
            for t in _NEEDED
            if not occurrence[t] and not (t == "decimalLatitude" and place.decision == WITHHELD)
        )
        decision = quality.decisions[image_id]
        records.append(
            Record(photo, licence, place, decision, occurrence, multimedia, missing, query_words)
        )
    return records, prov, quality


def select_records(
    records: list[Record], include_restricted: bool
) -> tuple[list[Record], tuple[ListedPhoto, ...], tuple[ListedPhoto, ...]]:
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
