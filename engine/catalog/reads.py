"""Catalog reads about photos and collections: a photo's details for display, the id of the
photo at a path, a collection by its folder, and the photos missing from disk (with the
judgments kept on them, and whether their folder looks unmounted).

Writes to collections (add, re-scan, relocate, forget, remove) are the indexer's job:
`engine.indexing.collections`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

from sqlalchemy import func, select

from engine.catalog import Collection, Image, Judgment, JudgmentEvent, Taxon
from engine.catalog.library import Library
from engine.catalog.models import STATUS_MISSING, Deployment
from engine.catalog.privacy import PlaceFacts
from engine.errors import QuadratError

_SQLITE_VARIABLES = 900  # stay under SQLite's limit on bound parameters per statement


@dataclass(frozen=True)
class PhotoDetails:
    """What the catalog knows about one photo, for display."""

    image_id: int
    path: str
    rel_path: str
    collection: str
    content_hash: str | None
    width: int | None
    height: int | None
    taxon: str | None
    common_name: str | None
    lineage: tuple[tuple[str, str], ...]  # (rank, name) from kingdom down to species
    observed_at: datetime | None  # local time, with its UTC offset when one was recorded
    latitude: float | None
    longitude: float | None
    location_uncertainty: float | None
    license: str | None
    rights_holder: str | None
    external_id: int | None
    # What the record said about publishing the place: exports, the map and the place
    # filter's display publish it through engine.catalog.privacy.PlacePolicy.
    place_privacy: PlaceFacts = PlaceFacts()
    # The camera: its deployment's name (folder and serial), the model as EXIF names it, and
    # how many deployments the photo's collection has (two or more: tiles name the camera).
    deployment: str | None = None
    camera: str | None = None
    collection_deployments: int = 0

    @property
    def camera_line(self) -> str:
        """ "CAM01_trail (QT0001) · QuadratTrail QT-1" where the collection has several
        deployments (two cameras' IMG_0013.JPG are told apart), else ""."""
        if self.collection_deployments < 2:
            return ""
        where = self.deployment or self.rel_path.rpartition("/")[0]
        camera = "" if self.camera and self.camera in where else (self.camera or "")
        return " · ".join(part for part in (where, camera) if part)


def find_collection(library: Library, folder: str | Path) -> int | None:
    """The id of the collection rooted at `folder`, or None."""
    root = str(Path(folder).expanduser().resolve())
    with library.catalog.session() as s:
        return s.scalar(select(Collection.id).where(Collection.root == root))


@dataclass(frozen=True)
class MissingPhotos:
    """Photos whose files are gone, and the judgments (and acts of judging) kept on them."""

    photos: int
    judgments: int
    events: int = 0


def missing_photos(library: Library, collection_id: int | None = None) -> MissingPhotos:
    """How many photos (of one collection, or all) are missing from disk, with their judgments."""
    with library.catalog.session() as s:
        where = [Image.status == STATUS_MISSING]
        if collection_id is not None:
            where.append(Image.collection_id == collection_id)
        photos = s.scalar(select(func.count()).select_from(Image).where(*where)) or 0
        judgments = events = 0
        if photos:
            judgments = (
                s.scalar(
                    select(func.count())
                    .select_from(Judgment)
                    .join(Image, Image.id == Judgment.image_id)
                    .where(*where)
                )
                or 0
            )
            events = (
                s.scalar(
                    select(func.count())
                    .select_from(JudgmentEvent)
                    .join(Image, Image.id == JudgmentEvent.image_id)
                    .where(*where)
                )
                or 0
            )
    return MissingPhotos(photos, judgments, events)


# A collection missing this share of its photos (and at least this many) looks unmounted or
# half mounted (a share that did not come back, a drive not plugged in), not thinned out: its
# photos are not forgotten unless the user says so for that case.
UNMOUNTED_SHARE = 0.25
UNMOUNTED_MIN_PHOTOS = 10


class LooksUnmountedError(QuadratError):
    """Forgetting was refused: a collection's folder looks unmounted or half mounted."""


def unmounted_reason(library: Library, collection_id: int | None = None) -> str | None:
    """Why the missing photos (of one collection, or all) look like a drive or share that is
    not mounted, rather than deleted files: the collection's folder is not there, or a large
    share of its photos is missing at once. None when forgetting them looks deliberate."""
    with library.catalog.session() as s:
        missing_by = select(Image.collection_id, func.count()).where(Image.status == STATUS_MISSING)
        if collection_id is not None:
            missing_by = missing_by.where(Image.collection_id == collection_id)
        missing = {
            int(coll_id): int(count)
            for coll_id, count in s.execute(missing_by.group_by(Image.collection_id)).all()
        }
        for coll_id, count in sorted(missing.items()):
            coll = s.get(Collection, coll_id)
            if coll is None:
                continue
            here = library.photo_root(coll.root)  # a shared catalog's root, mapped to this machine
            if not here.is_dir():
                return (
                    f"the folder of {coll.name} ({here}) is not there: is its drive or "
                    "share mounted?"
                )
            total = (
                s.scalar(
                    select(func.count()).select_from(Image).where(Image.collection_id == coll_id)
                )
                or 0
            )
            if count >= UNMOUNTED_MIN_PHOTOS and count > UNMOUNTED_SHARE * total:
                return (
                    f"{count:,} of the {total:,} photos of {coll.name} are missing at once: its "
                    f"folder {here} looks half mounted"
                )
    return None


def refuse_if_unmounted(library: Library, collection_id: int | None = None) -> None:
    """Raise `LooksUnmountedError` (one line, nothing changed) when forgetting the missing
    photos (of one collection, or all) looks like a mistake (`unmounted_reason`)."""
    reason = unmounted_reason(library, collection_id)
    if reason is not None:
        raise LooksUnmountedError(
            f"nothing was forgotten: {reason}; mount it and index it again, or forget the "
            "photos anyway (quadrat forget --even-if-unmounted)"
        )


_RANKS = (
    ("kingdom", "kingdom"),
    ("phylum", "phylum"),
    ("class", "class_"),
    ("order", "order"),
    ("family", "family"),
    ("genus", "genus"),
)


def photo_details(library: Library, image_ids: list[int]) -> dict[int, PhotoDetails]:
    """Details of the given photos (ids absent from the catalog are left out)."""
    out: dict[int, PhotoDetails] = {}
    ids = [int(i) for i in image_ids]
    with library.catalog.session() as s:
        cameras = {
            int(collection_id): int(count)
            for collection_id, count in s.execute(
                select(Deployment.collection_id, func.count()).group_by(Deployment.collection_id)
            )
        }
        for start in range(0, len(ids), _SQLITE_VARIABLES):
            chunk = ids[start : start + _SQLITE_VARIABLES]
            stmt = (
                select(Image, Collection.root, Collection.name, Taxon, Deployment.name)
                .join(Collection, Collection.id == Image.collection_id)
                .outerjoin(Taxon, Taxon.id == Image.taxon_id)
                .outerjoin(Deployment, Deployment.id == Image.deployment_id)
                .where(Image.id.in_(chunk))
            )
            for img, root, coll_name, taxon, deployment in s.execute(stmt):
                lineage: list[tuple[str, str]] = []
                if taxon is not None:
                    lineage = [
                        (rank, value)
                        for rank, attr in _RANKS
                        if (value := getattr(taxon, attr, None))
                    ]
                    if taxon.genus and taxon.specific_epithet:
                        lineage.append(("species", f"{taxon.genus} {taxon.specific_epithet}"))
                out[img.id] = PhotoDetails(
                    image_id=img.id,
                    path=str(library.photo_root(root) / img.rel_path),
                    rel_path=img.rel_path,
                    collection=coll_name,
                    content_hash=img.content_hash,
                    width=img.width,
                    height=img.height,
                    taxon=taxon.name if taxon else None,
                    common_name=taxon.common_name if taxon else None,
                    lineage=tuple(lineage),
                    observed_at=with_utc_offset(img.observed_at, img.observed_utc_offset),
                    latitude=img.latitude,
                    longitude=img.longitude,
                    location_uncertainty=img.location_uncertainty,
                    license=img.license,
                    rights_holder=img.rights_holder,
                    external_id=img.external_id,
                    place_privacy=PlaceFacts(
                        img.geoprivacy,
                        img.taxon_geoprivacy,
                        img.coordinates_obscured,
                        img.location_withheld,
                        img.public_location_uncertainty,
                    ),
                    deployment=deployment,
                    camera=camera_text(img.camera_make, img.camera_model) or None,
                    collection_deployments=cameras.get(img.collection_id, 0),
                )
    return out


def image_id_at(library: Library, path: str | Path) -> int | None:
    """The catalog id of the photo at `path` (under one of the collections' folders as the
    catalog records them), or None for a photo that is not the library's."""
    path = Path(path)
    with library.catalog.session() as s:
        for collection_id, root in s.execute(select(Collection.id, Collection.root)):
            try:
                rel = path.relative_to(root).as_posix()
            except ValueError:
                continue
            image_id = s.scalar(
                select(Image.id).where(Image.collection_id == collection_id, Image.rel_path == rel)
            )
            if image_id is not None:
                return int(image_id)
    return None


def with_utc_offset(local: datetime | None, minutes: int | None) -> datetime | None:
    """The stored local time with its offset attached again (as it was given), when known."""
    if local is None or minutes is None:
        return local
    try:
        return local.replace(tzinfo=timezone(timedelta(minutes=minutes)))
    except ValueError:  # an offset of a day or more: not one a reader of ours stored
        return local


def camera_text(make: str | None, model: str | None) -> str:
    """ "QuadratTrail QT-1": the camera as EXIF names it (a model that already names its make,
    "Canon EOS 5D", alone), or ""."""
    make, model = (make or "").strip(), (model or "").strip()
    if model and make and model.casefold().startswith(make.casefold()):
        return model
    return " ".join(part for part in (make, model) if part)
