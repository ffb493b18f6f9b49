"""Collections of a library and the photos in them: counts, skipped files, removal, details.

A photo is *indexed* for a model when it has a vector under that model's key, *skipped* when
the indexer could not use it (the reason is recorded), and *pending* when it is waiting to be
encoded: a catalog row without a vector, or (when the folder is scanned) a file on disk the
catalog does not know yet or that changed since it was indexed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import numpy as np
from sqlalchemy import delete, func, select

from engine.catalog import Collection, Embedding, Image, Taxon
from engine.catalog.models import STATUS_OK, STATUS_SKIPPED
from engine.errors import BadInputError, QuadratError
from engine.library import Library
from engine.scan import walk_images

log = logging.getLogger(__name__)

_SQLITE_VARIABLES = 900  # stay under SQLite's limit on bound parameters per statement


@dataclass(frozen=True)
class SkippedPhoto:
    rel_path: str
    reason: str


@dataclass(frozen=True)
class CollectionStats:
    """How far one collection is indexed with one model."""

    id: int
    name: str
    root: str
    indexed: int
    skipped: int
    pending: int
    last_scanned_at: datetime | None
    folder_missing: bool = False
    skipped_photos: tuple[SkippedPhoto, ...] = field(default=(), repr=False)

    @property
    def total(self) -> int:
        return self.indexed + self.skipped + self.pending


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
    observed_at: datetime | None
    latitude: float | None
    longitude: float | None
    location_uncertainty: float | None
    license: str | None
    rights_holder: str | None
    external_id: int | None


def collection_stats(
    library: Library, model_key: str | None = None, *, scan_disk: bool = False
) -> list[CollectionStats]:
    """Counts for every collection of the library, ordered by name.

    `model_key` defaults to the library's model. With `scan_disk`, each folder is walked so
    that new or changed files count as pending (costs a directory walk per collection).
    """
    model_key = model_key or library.model_key
    out: list[CollectionStats] = []
    with library.catalog.session() as s:
        collections = list(s.scalars(select(Collection).order_by(Collection.name, Collection.id)))
        for coll in collections:
            ok = s.scalar(
                select(func.count())
                .select_from(Image)
                .where(Image.collection_id == coll.id, Image.status == STATUS_OK)
            )
            indexed = 0
            if model_key is not None:
                indexed = s.scalar(
                    select(func.count())
                    .select_from(Embedding)
                    .join(Image, Image.id == Embedding.image_id)
                    .where(
                        Image.collection_id == coll.id,
                        Image.status == STATUS_OK,
                        Embedding.model_key == model_key,
                    )
                )
            skipped = tuple(
                SkippedPhoto(rel, reason or "skipped")
                for rel, reason in s.execute(
                    select(Image.rel_path, Image.skip_reason)
                    .where(Image.collection_id == coll.id, Image.status == STATUS_SKIPPED)
                    .order_by(Image.rel_path)
                )
            )
            pending = (ok or 0) - (indexed or 0)
            missing = False
            if scan_disk:
                unseen, missing = _unseen_files(s, coll)
                pending += unseen
            out.append(
                CollectionStats(
                    id=coll.id,
                    name=coll.name,
                    root=coll.root,
                    indexed=indexed or 0,
                    skipped=len(skipped),
                    pending=pending,
                    last_scanned_at=coll.last_scanned_at,
                    folder_missing=missing,
                    skipped_photos=skipped,
                )
            )
    return out


def _unseen_files(s, coll: Collection) -> tuple[int, bool]:  # noqa: ANN001 - a Session
    """Files on disk that are new or changed since the catalog saw them; and whether the
    folder is missing."""
    root = Path(coll.root)
    if not root.is_dir():
        return 0, True
    known = {
        rel: (size, mtime)
        for rel, size, mtime in s.execute(
            select(Image.rel_path, Image.size, Image.mtime_ns).where(Image.collection_id == coll.id)
        )
    }
    try:
        return (
            sum(
                1
                for entry in walk_images(root)
                if known.get(entry.rel_path) != (entry.size, entry.mtime_ns)
            ),
            False,
        )
    except BadInputError:
        return 0, True


def find_collection(library: Library, folder: str | Path) -> int | None:
    """The id of the collection rooted at `folder`, or None."""
    root = str(Path(folder).expanduser().resolve())
    with library.catalog.session() as s:
        return s.scalar(select(Collection.id).where(Collection.root == root))


def remove_collection(library: Library, collection_id: int) -> int:
    """Forget a collection: its photo rows, their vectors and their index entries.

    The photo files are not touched. Returns how many photo rows were removed. The catalog is
    changed in one transaction first; the vector indexes follow (if the process dies in
    between, the library drops the stale index entries when it next opens).
    """
    with library.catalog.session() as s:
        coll = s.get(Collection, collection_id)
        if coll is None:
            raise QuadratError(f"no collection with id {collection_id} in this library")
        image_ids = list(s.scalars(select(Image.id).where(Image.collection_id == collection_id)))
        model_keys = list(
            s.scalars(
                select(Embedding.model_key)
                .join(Image, Image.id == Embedding.image_id)
                .where(Image.collection_id == collection_id)
                .distinct()
            )
        )
        for start in range(0, len(image_ids), _SQLITE_VARIABLES):
            chunk = image_ids[start : start + _SQLITE_VARIABLES]
            s.execute(delete(Embedding).where(Embedding.image_id.in_(chunk)))
            s.execute(delete(Image).where(Image.id.in_(chunk)))
        s.delete(coll)
    ids = np.asarray(image_ids, dtype=np.int64)
    for model_key in model_keys:
        try:
            index = library.vector_index(model_key)
        except QuadratError:
            continue  # no vectors left for this model: nothing to remove from
        if len(ids) and index.remove(ids):
            library.save_index(model_key)
    log.info("removed collection %s (%d photos)", collection_id, len(image_ids))
    return len(image_ids)


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
        for start in range(0, len(ids), _SQLITE_VARIABLES):
            chunk = ids[start : start + _SQLITE_VARIABLES]
            stmt = (
                select(Image, Collection.root, Collection.name, Taxon)
                .join(Collection, Collection.id == Image.collection_id)
                .outerjoin(Taxon, Taxon.id == Image.taxon_id)
                .where(Image.id.in_(chunk))
            )
            for img, root, coll_name, taxon in s.execute(stmt):
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
                    path=str(Path(root) / img.rel_path),
                    rel_path=img.rel_path,
                    collection=coll_name,
                    content_hash=img.content_hash,
                    width=img.width,
                    height=img.height,
                    taxon=taxon.name if taxon else None,
                    common_name=taxon.common_name if taxon else None,
                    lineage=tuple(lineage),
                    observed_at=img.observed_at,
                    latitude=img.latitude,
                    longitude=img.longitude,
                    location_uncertainty=img.location_uncertainty,
                    license=img.license,
                    rights_holder=img.rights_holder,
                    external_id=img.external_id,
                )
    return out
