"""A Camtrap DP 1.0 package read as a collection: its folder indexed, its deployments, media
times, places, cameras and licence given to the photos, then its observations imported as
detections (`engine.detections.camtrap_observations`), so a package downloaded from GBIF or
Agouti can be searched and exported again.

- **Media first.** Quadrat indexes local files: every media row's `filePath` must be a file of
  the package's folder. A package whose media are URLs, missing, or outside its folder is
  refused in one line before anything is indexed (never half a package).
- **Deployments** are the package's: one per `deploymentID`, named by it, its folder the
  `locationName` (the deploymentID beside it where two deployments share one), its camera
  serial the `cameraID`. The deployment's `latitude`, `longitude` and `coordinateUncertainty`
  become each photo's place; `cameraModel` ("Manufacturer-Model") its camera. Opening the
  package again keeps each deployment's id (and a clock offset set on it); indexing the folder
  leaves them as the package gave them (`engine.indexing.deployments.package_collections`).
- **Times**: each media `timestamp` (ISO 8601 with its UTC offset) is the photo's time, its
  offset kept; EXIF's time is not used for the package's photos.
- **Licence**: the package's media licence (`licenses` with scope media), where it names one.

Fields Quadrat has no place for (setupBy, cameraHeight, habitat, …) are not kept.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from sqlalchemy import Table, bindparam, select, update

from engine.catalog.library import Library
from engine.catalog.models import Collection, Deployment, Image
from engine.detections.camtrap_observations import (
    CamtrapObservationsReport,
    read_camtrap_observations,
)
from engine.detections.camtrap_package import (
    Package,
    is_absolute,
    is_url,
    open_package,
    parse_number,
    parse_time,
)
from engine.errors import BadInputError
from engine.indexing.deployments import (
    apply_clock_offsets,
    keep_package_deployments,
)
from engine.indexing.events import refresh_events
from engine.indexing.indexer import Indexer
from engine.indexing.metadata import local_time_and_offset, metadata_key
from engine.indexing.report import IndexReport
from engine.licences import read_licence
from engine.progress import CancelToken, ProgressCallback, no_progress

NOTHING_IMPORTED = "nothing was imported"
URL_MEDIA = "Quadrat indexes local files: download the media into the package folder first"
_CHUNK = 500


@dataclass
class CamtrapOpenReport:
    """What opening a package did."""

    package: Path
    index: IndexReport
    deployments: int = 0
    timed: int = 0  # photos given the package's media time
    licence: str = ""  # the media licence given to the photos ("" when none)
    observations: CamtrapObservationsReport | None = None
    unmapped: list[str] = field(default_factory=list)  # media rows whose photo is not indexed

    def lines(self) -> list[str]:
        """What to tell the user, a line each."""
        lines = [
            f"Camtrap DP package {self.package}: {self.deployments:,} deployments, "
            f"{self.timed:,} photos timed by the package"
            + (f", licence {self.licence}" if self.licence else ""),
            self.index.summary().splitlines()[0],
        ]
        lines += self.unmapped
        if self.observations is not None:
            lines += self.observations.lines()
        return lines


@dataclass(frozen=True)
class _MediaFile:
    row: dict[str, str]
    rel_path: str  # in the package's folder, as the catalog keeps it


def _media_files(package: Package) -> Iterator[_MediaFile]:
    for row in package.rows("media"):
        yield _MediaFile(row, _relative(package.folder, row.get("filePath", "")))


def _relative(folder: Path, file_path: str) -> str:
    """A filePath relative to the package folder ("" for a URL; starting with "../" outside)."""
    if not file_path or is_url(file_path):
        return ""
    text = file_path.replace("\\", "/")
    if is_absolute(file_path):
        base = str(folder).replace("\\", "/").rstrip("/")
        text = posixpath.normpath(text)
        return text[len(base) + 1 :] if text.startswith(base + "/") else "../" + text
    return metadata_key(posixpath.normpath(text))


def check_media(package: Package) -> int:
    """The number of media rows, after checking that every one is a file in the package's
    folder; a `BadInputError` in one line otherwise (module docstring)."""
    total = 0
    urls: list[str] = []
    outside: list[str] = []
    missing: list[str] = []
    for media in _media_files(package):
        total += 1
        file_path = media.row.get("filePath", "")
        if is_url(file_path):
            urls.append(file_path)
        elif not media.rel_path or media.rel_path.startswith("../") or media.rel_path == "..":
            outside.append(file_path or f"media {media.row.get('mediaID', '?')} (no filePath)")
        elif not (package.folder / media.rel_path).is_file():
            missing.append(file_path)
    if urls:
        raise BadInputError(
            f"{package.descriptor_path}: {len(urls):,} of {total:,} media are URLs "
            f"(first: {urls[0]}); {URL_MEDIA}; {NOTHING_IMPORTED}"
        )
    if outside:
        raise BadInputError(
            f"{package.descriptor_path}: {len(outside):,} of {total:,} media lie outside the "
            f"package folder (first: {outside[0]}); {NOTHING_IMPORTED}"
        )
    if missing:
        raise BadInputError(
            f"{package.descriptor_path}: {len(missing):,} of {total:,} media files are missing "
            f"(first: {missing[0]}); {NOTHING_IMPORTED}"
        )
    return total


def media_licence(descriptor: dict[str, Any]) -> str:
    """The package's one media licence as the catalog keeps it (its URL where known)."""
    found = [
        entry
        for entry in descriptor.get("licenses") or []
        if isinstance(entry, dict) and entry.get("scope") == "media"
    ]
    if len(found) != 1:
        return ""  # none, or several the media rows do not tell apart
    entry = found[0]
    licence = read_licence(str(entry.get("path") or entry.get("name") or entry.get("title") or ""))
    return licence.value


def _camera(model: str) -> tuple[str | None, str | None]:
    """Camtrap DP's "Manufacturer-Model" as (make, model)."""
    if not model:
        return None, None
    make, dash, rest = model.partition("-")
    return (make, rest) if dash and make and rest else (None, model)


def _deployments(
    library: Library, collection_id: int, package: Package
) -> tuple[dict[str, int], dict[str, dict[str, str]]]:
    """The package's deployments as the collection's, made or updated (kept by name, with
    their ids and clock offsets); deploymentID -> id, and the package's rows."""
    rows = {r["deploymentID"]: r for r in package.rows("deployments") if r.get("deploymentID")}
    places: dict[tuple[str, str], list[str]] = {}
    for key, row in rows.items():
        places.setdefault((row.get("locationName") or key, row.get("cameraID", "")), []).append(key)
    with library.catalog.session() as s:
        existing = {
            d.name: d
            for d in s.scalars(select(Deployment).where(Deployment.collection_id == collection_id))
        }
        gone = [d.id for name, d in existing.items() if name not in rows]
        for name, deployment in existing.items():
            if name not in rows:
                s.delete(deployment)
        if gone:  # photos of deployments made from folders and serials before: none now
            s.execute(update(Image).where(Image.deployment_id.in_(gone)).values(deployment_id=None))
        s.flush()
        for key, row in rows.items():
            place = (row.get("locationName") or key, row.get("cameraID", ""))
            folder = place[0] if len(places[place]) == 1 else f"{place[0]} ({key})"
            found = existing.get(key)
            if found is None:
                found = Deployment(collection_id=collection_id, name=key, clock_offset_s=0)
                s.add(found)
            deployment = found
            deployment.folder, deployment.camera_serial = folder, place[1]
            deployment.marked = False
        s.flush()
        ids = {
            d.name: d.id
            for d in s.scalars(select(Deployment).where(Deployment.collection_id == collection_id))
        }
    return ids, rows


def _photo_values(
    media: _MediaFile,
    deployments: dict[str, int],
    rows: dict[str, dict[str, str]],
    licence: str,
) -> dict[str, Any]:
    deployment_key = media.row.get("deploymentID", "")
    row = rows.get(deployment_key, {})
    local, offset = local_time_and_offset(parse_time(media.row.get("timestamp", "")))
    latitude = parse_number(row.get("latitude", ""))
    longitude = parse_number(row.get("longitude", ""))
    if latitude is None or longitude is None or not (-90 <= latitude <= 90):
        latitude = longitude = None
    make, model = _camera(row.get("cameraModel", ""))
    return {
        "b_local": local,
        "b_offset": offset,
        "b_latitude": latitude,
        "b_longitude": longitude,
        "b_uncertainty": parse_number(row.get("coordinateUncertainty", "")),
        "b_make": make,
        "b_model": model,
        "b_serial": row.get("cameraID") or None,
        "b_licence": licence or None,
        "b_deployment": deployments.get(deployment_key),
    }


def apply_package(
    library: Library, collection_id: int, package: Package
) -> tuple[int, int, list[str]]:
    """Give the collection's photos the package's deployments, times, places, cameras and
    licence; (deployments, photos timed, lines for media rows whose photo is not indexed)."""
    keep_package_deployments(library, collection_id)
    deployments, rows = _deployments(library, collection_id, package)
    licence = media_licence(package.descriptor)
    table = cast(Table, Image.__table__)
    statement = (
        update(table)
        .where(table.c.id == bindparam("b_id"))
        .values(
            observed_at=bindparam("b_local"),
            camera_time=bindparam("b_local"),  # the camera's clock: a clock offset applies
            observed_utc_offset=bindparam("b_offset"),
            latitude=bindparam("b_latitude"),
            longitude=bindparam("b_longitude"),
            location_uncertainty=bindparam("b_uncertainty"),
            camera_make=bindparam("b_make"),
            camera_model=bindparam("b_model"),
            camera_serial=bindparam("b_serial"),
            license=bindparam("b_licence"),
            deployment_id=bindparam("b_deployment"),
        )
    )
    timed = 0
    unmapped: list[str] = []
    batch: list[_MediaFile] = []

    def flush() -> None:
        nonlocal timed
        with library.catalog.session() as s:
            ids = dict(
                s.execute(
                    select(Image.rel_path, Image.id).where(
                        Image.collection_id == collection_id,
                        Image.rel_path.in_([m.rel_path for m in batch]),
                    )
                ).all()
            )
            values = []
            for media in batch:
                image_id = ids.get(media.rel_path)
                if image_id is None:
                    unmapped.append(
                        f"media {media.row.get('mediaID', '?')}: {media.rel_path} was not "
                        "indexed (see the indexing report)"
                    )
                    continue
                values.append(
                    {"b_id": image_id, **_photo_values(media, deployments, rows, licence)}
                )
                timed += values[-1]["b_local"] is not None
            if values:
                s.connection().execute(statement, values)
        batch.clear()

    for media in _media_files(package):
        batch.append(media)
        if len(batch) >= _CHUNK:
            flush()
    flush()
    apply_clock_offsets(library, collection_id)
    refresh_events(library, collection_id)
    return len(deployments), timed, unmapped


def open_camtrap_package(
    indexer: Indexer,
    package_path: str | os.PathLike[str],
    progress: ProgressCallback = no_progress,
    cancel: CancelToken | None = None,
) -> CamtrapOpenReport:
    """Index the package's folder as a collection with `indexer`, give its photos the
    package's deployments, times, places and licence, and import its observations (module
    docstring). A package whose media are not all local files is refused before anything is
    indexed. Opening it again updates all of it (observations replaced, not doubled)."""
    cancel = cancel or CancelToken()
    package = open_package(package_path)
    check_media(package)
    library = indexer.library
    index = indexer.run(package.folder, progress=progress, cancel=cancel)
    report = CamtrapOpenReport(package.descriptor_path, index)
    if index.cancelled:
        return report
    with library.catalog.session() as s:
        collection = s.scalar(
            select(Collection).where(Collection.root == library.catalog_root(package.folder))
        )
        if collection is None:  # the indexer made it: only a catalog changed under us
            raise BadInputError(f"{package.folder} is not an indexed collection")
        collection.name = package.name
        collection_id = collection.id
    with library.writer_lock():  # as indexing: one writer of the collection at a time
        report.deployments, report.timed, report.unmapped = apply_package(
            library, collection_id, package
        )
        report.observations = read_camtrap_observations(
            library, package.descriptor_path, progress, cancel, collection=package.folder
        )
    licence = media_licence(package.descriptor)
    report.licence = read_licence(licence).label if licence else ""
    return report
