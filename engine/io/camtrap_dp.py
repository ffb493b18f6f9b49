"""Camtrap DP 1.0 export of a query's judged camera-trap photos (https://camtrap-dp.tdwg.org/).

A package is a folder of four files: `datapackage.json` (the Frictionless Data Package with
Camtrap DP's profile: created, contributors, project, spatial, temporal, taxonomic),
`deployments.csv`, `media.csv` and `observations.csv`, each table as the standard's table schema
(version 1.0) describes it.

- Deployments: those holding a photo judged relevant for the query; each with its place (the
  mean of its photos' GPS), its first and last capture time, its camera serial and model.
- Media: every dated photo of those deployments (the blanks too: Camtrap DP counts effort from
  them), its time in ISO 8601 with the UTC offset EXIF gave (UTC where it gave none, counted).
- Observations: per event holding a photo judged relevant, one event-level observation
  (`mediaID` empty, the event's first and last frame time) and one media-level observation per
  relevant frame; `observationType` animal, `classificationMethod` human, `classifiedBy` the
  judge; lifeStage, sex and behavior from the judgments' attributes where Camtrap DP's
  vocabulary has the value (others go to `observationComments`).

Written with the standard library. The `camtrapdp` package on PyPI (0.1.0, one release in 2024)
was compared: it reads and writes the three tables through pandas data frames (a dependency
Quadrat does not have), writes no `datapackage.json` and validates nothing; frictionless-py
validates but brings a large dependency tree for what the tests do with the published schemas.
Every file is written whole or not at all (`engine.io.export.write_failure` for a full disk).
"""

from __future__ import annotations

import csv
import errno
import io
import json
import mimetypes
import os
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from sqlalchemy import select

from engine import quadrat_version
from engine.catalog import Judgment, Query
from engine.catalog.library import Library
from engine.catalog.models import STATUS_OK, Deployment, Image, Taxon
from engine.errors import BadInputError
from engine.files import atomic_write_bytes
from engine.io.dwc import library_id
from engine.io.export import free_bytes, plain_write_errors, write_failure
from engine.judgments.attributes import PIPE, attributes_for_query
from engine.judgments.queries import QueryStore

VERSION = "1.0"
_BASE = f"https://raw.githubusercontent.com/tdwg/camtrap-dp/{VERSION}/"
PROFILE = _BASE + "camtrap-dp-profile.json"
TABLES = ("deployments", "media", "observations")
SCHEMAS = {name: f"{_BASE}{name}-table-schema.json" for name in TABLES}

DEPLOYMENT_FIELDS = (
    "deploymentID", "locationID", "locationName", "latitude", "longitude",
    "coordinateUncertainty", "deploymentStart", "deploymentEnd", "setupBy", "cameraID",
    "cameraModel", "cameraDelay", "cameraHeight", "cameraDepth", "cameraTilt", "cameraHeading",
    "detectionDistance", "timestampIssues", "baitUse", "featureType", "habitat",
    "deploymentGroups", "deploymentTags", "deploymentComments",
)  # fmt: skip
MEDIA_FIELDS = (
    "mediaID", "deploymentID", "captureMethod", "timestamp", "filePath", "filePublic",
    "fileName", "fileMediatype", "exifData", "favorite", "mediaComments",
)  # fmt: skip
OBSERVATION_FIELDS = (
    "observationID", "deploymentID", "mediaID", "eventID", "eventStart", "eventEnd",
    "observationLevel", "observationType", "cameraSetupType", "scientificName", "count",
    "lifeStage", "sex", "behavior", "individualID", "individualPositionRadius",
    "individualPositionAngle", "individualSpeed", "bboxX", "bboxY", "bboxWidth", "bboxHeight",
    "classificationMethod", "classifiedBy", "classificationTimestamp",
    "classificationProbability", "observationTags", "observationComments",
)  # fmt: skip

# Camtrap DP's own vocabularies for the attributes judges set with Darwin Core's.
_LIFE_STAGES = ("adult", "subadult", "juvenile")
_SEXES = ("female", "male")


@dataclass(frozen=True)
class CamtrapReport:
    """What an export wrote, and what a user should know about it."""

    folder: Path
    deployments: int
    media: int
    observations: int  # rows of observations.csv (event and media level)
    events: int  # events with an animal judged relevant
    without_offset: int = 0  # photos whose EXIF gave no UTC offset (written as UTC)
    undated: int = 0  # photos of the deployments left out of media.csv: no capture time
    outside: int = 0  # relevant photos in no deployment (not exported)
    unplaced: tuple[str, ...] = ()  # deployments without GPS: latitude/longitude to fill in
    unnamed: int = 0  # observations without a scientific name

    def summary(self, name_hint: str = "give one with --scientific-name") -> str:
        """The outcome in one line; `name_hint` says how to name the observations' taxon."""
        parts = [
            f"Camtrap DP package written to {self.folder}: {self.deployments:,} deployments, "
            f"{self.media:,} media, {self.observations:,} observations ({self.events:,} events)"
        ]
        if self.without_offset:
            parts.append(f"{self.without_offset:,} photos had no UTC offset (written as UTC)")
        if self.undated:
            parts.append(f"{self.undated:,} undated photos left out")
        if self.outside:
            parts.append(f"{self.outside:,} relevant photos in no deployment left out")
        if self.unplaced:
            parts.append(
                "no GPS for deployment(s) " + ", ".join(self.unplaced) + ": fill in "
                "latitude and longitude in deployments.csv before publishing"
            )
        if self.unnamed:
            parts.append(f"{self.unnamed:,} observations without a scientific name ({name_hint})")
        return "; ".join(parts)


@dataclass
class _Photo:
    image_id: int
    rel_path: str
    deployment_id: int
    event_id: int | None
    moment: datetime | None  # aware: the photo's local time with its offset (UTC if unknown)
    offset_known: bool
    latitude: float | None
    longitude: float | None
    taxon: str | None


@dataclass
class _Judged:
    relevance: int
    judged_by: str | None
    judged_at: datetime


@dataclass
class _Deployment:
    row: Deployment
    camera: str
    key: str = ""  # its deploymentID
    photos: list[_Photo] = field(default_factory=list)


def iso(moment: datetime) -> str:
    """A time as Camtrap DP writes it: ISO 8601 to the second, with its offset (Z for UTC)."""
    text = moment.isoformat(timespec="seconds")
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def _aware(local: datetime | None, offset_minutes: int | None) -> tuple[datetime | None, bool]:
    if local is None:
        return None, False
    if local.tzinfo is not None:
        return local, True
    if offset_minutes is None:
        return local.replace(tzinfo=UTC), False
    return local.replace(tzinfo=timezone(timedelta(minutes=offset_minutes))), True


def _number(value: float, places: int = 6) -> str:
    text = f"{value:.{places}f}".rstrip("0").rstrip(".")
    return "0" if text in ("", "-0") else text


def _media_type(rel_path: str) -> str:
    guessed = mimetypes.guess_type(rel_path)[0]
    if guessed and guessed.split("/")[0] in ("image", "video", "audio"):
        return guessed
    return "image/x-" + (Path(rel_path).suffix.lower().lstrip(".") or "unknown")


def _file_path(rel_path: str) -> str:
    """A path as the media schema's pattern allows (relative, no "..", not starting with ".",
    "/" or "~")."""
    parts = [p for p in rel_path.replace(os.sep, "/").split("/") if p not in ("", ".", "..")]
    text = "/".join(parts)
    return "_" + text if text[:1] in (".", "~") else text


def _load(
    library: Library, query_id: int
) -> tuple[Query, dict[int, _Judged], dict[int, _Deployment], int]:
    """The query, its judgments, and the deployments holding a relevant photo with all their
    photos; and how many relevant photos lie in no deployment."""
    with library.catalog.session() as s:
        query = s.get(Query, query_id)
        if query is None:
            raise BadInputError(f"no saved query with id {query_id}")
        s.expunge(query)
        judged = {
            image_id: _Judged(relevance, by, at)
            for image_id, relevance, by, at in s.execute(
                select(
                    Judgment.image_id, Judgment.relevance, Judgment.judged_by, Judgment.judged_at
                ).where(Judgment.query_id == query_id)
            )
        }
        relevant = [i for i, j in judged.items() if j.relevance > 0]
        wanted: set[int] = set()
        outside = 0
        for start in range(0, len(relevant), 500):
            chunk = relevant[start : start + 500]
            for (deployment_id,) in s.execute(
                select(Image.deployment_id).where(Image.id.in_(chunk))
            ):
                if deployment_id is None:
                    outside += 1
                else:
                    wanted.add(deployment_id)
        deployments: dict[int, _Deployment] = {}
        for row in s.scalars(
            select(Deployment).where(Deployment.id.in_(sorted(wanted))).order_by(Deployment.id)
        ):
            s.expunge(row)
            deployments[row.id] = _Deployment(row, "")
        rows = s.execute(
            select(
                Image.id,
                Image.rel_path,
                Image.deployment_id,
                Image.event_id,
                Image.observed_at,
                Image.observed_utc_offset,
                Image.latitude,
                Image.longitude,
                Taxon.name,
                Image.camera_make,
                Image.camera_model,
            )
            .outerjoin(Taxon, Taxon.id == Image.taxon_id)
            .where(Image.deployment_id.in_(sorted(wanted)), Image.status == STATUS_OK)
            .order_by(Image.deployment_id, Image.observed_at, Image.id)
        ).all()
    for image_id, rel, dep, event, at, offset, lat, lon, taxon, make, model in rows:
        if dep is None:  # the query asked for photos of deployments only
            continue
        moment, known = _aware(at, offset)
        deployment = deployments[dep]
        deployment.photos.append(_Photo(image_id, rel, dep, event, moment, known, lat, lon, taxon))
        if not deployment.camera and (make or model):
            # Camtrap DP asks for "manufacturer-model".
            deployment.camera = "-".join(part for part in (make, model) if part)
    return query, judged, deployments, outside


def _deployment_keys(deployments: Iterable[_Deployment]) -> None:
    """Each deployment's `deploymentID`: its name, with its id where names repeat."""
    items = list(deployments)
    names = [d.row.name or f"deployment {d.row.id}" for d in items]
    for deployment, name in zip(items, names, strict=True):
        deployment.key = name if names.count(name) == 1 else f"{name}-{deployment.row.id}"


def _csv(fields: Sequence[str], rows: Iterable[dict[str, str]]) -> bytes:
    buffer = io.StringIO(newline="")
    writer = csv.DictWriter(buffer, fieldnames=list(fields), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({name: row.get(name, "") for name in fields})
    return buffer.getvalue().encode("utf-8")


def _attribute_columns(values: dict[str, str]) -> dict[str, str]:
    """lifeStage, sex and behavior in Camtrap DP's vocabularies; what they cannot hold goes to
    observationComments (said, never dropped)."""
    out: dict[str, str] = {}
    notes: list[str] = []
    stage, sex = values.get("lifeStage", ""), values.get("sex", "")
    if stage:
        if stage.lower() in _LIFE_STAGES:
            out["lifeStage"] = stage.lower()
        else:
            notes.append(f"lifeStage: {stage}")
    if sex:
        if sex.lower() in _SEXES:
            out["sex"] = sex.lower()
        else:
            notes.append(f"sex: {sex}")
    if values.get("behavior"):
        out["behavior"] = values["behavior"]
    if values.get("occurrenceRemarks"):
        notes.append(values["occurrenceRemarks"])
    if notes:
        out["observationComments"] = PIPE.join(notes)
    return out


def camtrap_package(
    library: Library,
    query_id: int,
    *,
    scientific_name: str | None = None,
    creator: str | None = None,
    now: datetime | None = None,
) -> tuple[dict[str, bytes], CamtrapReport]:
    """The package's files (name -> bytes) for a saved query, and its report (its `folder`
    empty). `scientific_name`: the taxon of the observations where the photos name none."""
    query, judged, deployments, outside = _load(library, query_id)
    _deployment_keys(deployments.values())
    base = library_id(library)
    attributes = attributes_for_query(library, query_id)
    created = (now or datetime.now(UTC)).astimezone(UTC)

    deployment_rows: list[dict[str, str]] = []
    media_rows: list[dict[str, str]] = []
    observation_rows: list[dict[str, str]] = []
    unplaced: list[str] = []
    points: list[tuple[float, float]] = []
    moments: list[datetime] = []
    taxa: set[str] = set()
    without_offset = undated = unnamed = events_written = 0

    for deployment in deployments.values():
        dated = [p for p in deployment.photos if p.moment is not None]
        undated += len(deployment.photos) - len(dated)
        placed = [(p.latitude, p.longitude) for p in dated if p.latitude is not None]
        row: dict[str, str] = {
            "deploymentID": deployment.key,
            "locationID": deployment.row.folder,
            "locationName": deployment.row.folder or deployment.key,
            "cameraID": deployment.row.camera_serial,
            "cameraModel": deployment.camera,
        }
        if placed:
            lat = sum(p[0] for p in placed if p[0] is not None) / len(placed)
            lon = sum(p[1] for p in placed if p[1] is not None) / len(placed)
            row["latitude"], row["longitude"] = _number(lat), _number(lon)
            points.append((lon, lat))
        else:
            unplaced.append(deployment.key)
        if dated:
            times = [p.moment for p in dated if p.moment is not None]
            row["deploymentStart"], row["deploymentEnd"] = iso(min(times)), iso(max(times))
            moments.extend((min(times), max(times)))
        if deployment.row.clock_offset_s:
            row["deploymentComments"] = (
                f"camera clock corrected by {deployment.row.clock_offset_s:+d} s"
            )
        deployment_rows.append(row)

        media_ids: dict[int, str] = {}
        for photo in dated:
            assert photo.moment is not None
            media_ids[photo.image_id] = str(uuid.uuid5(base, f"image/{photo.image_id}"))
            without_offset += not photo.offset_known
            media_rows.append(
                {
                    "mediaID": media_ids[photo.image_id],
                    "deploymentID": deployment.key,
                    "timestamp": iso(photo.moment),
                    "filePath": _file_path(photo.rel_path),
                    "filePublic": "false",  # photos on a local disk, not published
                    "fileName": Path(photo.rel_path).name,
                    "fileMediatype": _media_type(photo.rel_path),
                }
            )

        events: dict[int, list[_Photo]] = {}
        for photo in dated:
            events.setdefault(photo.event_id or photo.image_id, []).append(photo)
        for event_id, frames in events.items():
            relevant = [
                p for p in frames if p.image_id in judged and judged[p.image_id].relevance > 0
            ]
            if not relevant:
                continue
            events_written += 1
            times = [p.moment for p in frames if p.moment is not None]
            taxon = next((p.taxon for p in relevant if p.taxon), None) or scientific_name or ""
            if taxon:
                taxa.add(taxon)
            event_key = str(uuid.uuid5(base, f"event/{event_id}"))
            shared = {
                "deploymentID": deployment.key,
                "eventID": event_key,
                "eventStart": iso(min(times)),
                "eventEnd": iso(max(times)),
                "observationType": "animal",
                "scientificName": taxon,
                "classificationMethod": "human",
            }
            last_judged = max(relevant, key=lambda p: judged[p.image_id].judged_at)
            event_values = next(
                (attributes[p.image_id] for p in relevant if p.image_id in attributes), {}
            )
            observation_rows.append(
                {
                    **shared,
                    "observationID": str(uuid.uuid5(base, f"observation/event/{event_id}")),
                    "observationLevel": "event",
                    "classifiedBy": judged[last_judged.image_id].judged_by or "",
                    "classificationTimestamp": _judged_time(judged[last_judged.image_id]),
                    **_attribute_columns(event_values),
                }
            )
            for photo in relevant:
                verdict = judged[photo.image_id]
                observation_rows.append(
                    {
                        **shared,
                        "observationID": str(
                            uuid.uuid5(base, f"observation/media/{photo.image_id}")
                        ),
                        "mediaID": media_ids[photo.image_id],
                        "eventStart": iso(photo.moment or min(times)),
                        "eventEnd": iso(photo.moment or min(times)),
                        "observationLevel": "media",
                        "classifiedBy": verdict.judged_by or "",
                        "classificationTimestamp": _judged_time(verdict),
                        **_attribute_columns(attributes.get(photo.image_id, {})),
                    }
                )
            unnamed += 0 if taxon else 1 + len(relevant)

    judges = sorted({j.judged_by for j in judged.values() if j.judged_by and j.relevance > 0})
    descriptor = _descriptor(
        query, creator or QueryStore(library).user, judges, created, points, moments, taxa
    )
    files = {
        "deployments.csv": _csv(DEPLOYMENT_FIELDS, deployment_rows),
        "media.csv": _csv(MEDIA_FIELDS, media_rows),
        "observations.csv": _csv(OBSERVATION_FIELDS, observation_rows),
        "datapackage.json": (json.dumps(descriptor, indent=2, ensure_ascii=False) + "\n").encode(),
    }
    report = CamtrapReport(
        Path(),
        len(deployment_rows),
        len(media_rows),
        len(observation_rows),
        events_written,
        without_offset=without_offset,
        undated=undated,
        outside=outside,
        unplaced=tuple(unplaced),
        unnamed=unnamed,
    )
    return files, report


def _judged_time(verdict: _Judged) -> str:
    at = verdict.judged_at
    return iso(at if at.tzinfo else at.replace(tzinfo=UTC))  # the catalog keeps UTC


def _descriptor(
    query: Query,
    creator: str,
    judges: list[str],
    created: datetime,
    points: list[tuple[float, float]],
    moments: list[datetime],
    taxa: set[str],
) -> dict[str, Any]:
    """datapackage.json: the resources and Camtrap DP's required package properties."""
    title = query.name or query.text
    contributors = [{"title": creator, "role": "contact"}] + [
        {"title": judge, "role": "contributor"} for judge in judges if judge != creator
    ]
    if points:
        lons, lats = [p[0] for p in points], [p[1] for p in points]
        spatial: dict[str, Any] = {
            "type": "MultiPoint",
            "bbox": [round(v, 6) for v in (min(lons), min(lats), max(lons), max(lats))],
            "coordinates": [[round(lon, 6), round(lat, 6)] for lon, lat in points],
        }
    else:
        spatial = {"type": "MultiPoint", "coordinates": []}
    if moments:
        temporal = {
            "start": min(moments).date().isoformat(),
            "end": max(moments).date().isoformat(),
        }
    else:
        day = created.date().isoformat()
        temporal = {"start": day, "end": day}
    return {
        "resources": [
            {
                "name": name,
                "path": f"{name}.csv",
                "profile": "tabular-data-resource",
                "format": "csv",
                "mediatype": "text/csv",
                "encoding": "utf-8",
                "schema": SCHEMAS[name],
            }
            for name in TABLES
        ],
        "profile": PROFILE,
        "name": f"quadrat-query-{query.id}",
        "id": str(uuid.uuid4()),
        "created": iso(created),
        "title": f"Camera-trap observations of {title} judged with Quadrat",
        "contributors": contributors,
        "sources": [{"title": "Quadrat", "version": quadrat_version()}],
        "project": {
            "id": str(query.id),
            "title": title,
            "description": f'Photos found with Quadrat for the query "{query.text}" and '
            "judged by people; observations are the events judged relevant.",
            "samplingDesign": "opportunistic",
            "captureMethod": ["activityDetection"],
            "individualAnimals": False,
            "observationLevel": ["media", "event"],
        },
        "spatial": spatial,
        "temporal": temporal,
        "taxonomic": [{"scientificName": name} for name in sorted(taxa)],
    }


def export_camtrap_dp(
    library: Library,
    query_id: int,
    folder: str | os.PathLike[str],
    *,
    scientific_name: str | None = None,
    creator: str | None = None,
) -> CamtrapReport:
    """Write the Camtrap DP package of a saved query into `folder` (made if missing). Each
    file is replaced whole; datapackage.json is written last, so a package whose descriptor is
    there is complete. A full or read-only disk fails in one line, before any file is written
    when the free space is known to be too small."""
    files, report = camtrap_package(
        library, query_id, scientific_name=scientific_name, creator=creator
    )
    target = Path(folder).expanduser()
    total = sum(len(data) for data in files.values())
    parent = target.absolute()
    free = free_bytes(parent)
    if free is not None and total > free:
        raise write_failure(
            OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)),
            parent,
            "the Camtrap DP package",
            total,
        )
    for name in ("deployments.csv", "media.csv", "observations.csv", "datapackage.json"):
        with plain_write_errors(target / name, "the Camtrap DP package", len(files[name])):
            atomic_write_bytes(target / name, files[name])
    return CamtrapReport(**{**report.__dict__, "folder": target})
