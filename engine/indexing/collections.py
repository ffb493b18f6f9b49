"""Collections of a library and the photos in them: counts, skipped files, relocation, removal.
What the catalog says of a photo or of missing photos is read in `engine.catalog.reads`.

A photo is *indexed* for a model when it has a vector under that model's key, *skipped* when
the indexer could not use it (the reason is recorded), and *pending* when it is waiting to be
encoded: a catalog row without a vector, or (when the folder is scanned) a file on disk the
catalog does not know yet or that changed since it was indexed. A photo is *missing* when its
file went away: its row, id, vectors and judgments stay until the user forgets it.

A collection whose folder was moved or renamed is *relocated*: its rows follow the new root, so
ids and judgments are kept and no photo appears twice.
"""

from __future__ import annotations

import contextlib
import logging
from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import Connection, delete, func, select, update
from sqlalchemy.orm import Session

from engine.catalog import (
    Collection,
    Embedding,
    Image,
    Judgment,
    RunResult,
)
from engine.catalog.library import Library
from engine.catalog.models import STATUS_MISSING, STATUS_OK, STATUS_SKIPPED
from engine.catalog.reads import MissingPhotos, missing_photos, refuse_if_unmounted
from engine.errors import BadInputError, QuadratError
from engine.indexing.hashes import content_hash
from engine.indexing.walk import FileEntry, walk_images

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
    missing: int = 0  # photos whose files are gone; kept with their judgments
    skipped_photos: tuple[SkippedPhoto, ...] = field(default=(), repr=False)

    @property
    def total(self) -> int:
        return self.indexed + self.skipped + self.pending


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
            indexed: int | None = 0
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
            # Sorted here, not in SQL: ORDER BY made SQLite walk the collection's paths (every
            # row) instead of reading the few skipped ones from the (collection, status) index.
            skipped = tuple(
                SkippedPhoto(rel, reason or "skipped")
                for rel, reason in sorted(
                    (str(rel), reason)
                    for rel, reason in s.execute(
                        select(Image.rel_path, Image.skip_reason).where(
                            Image.collection_id == coll.id, Image.status == STATUS_SKIPPED
                        )
                    )
                )
            )
            pending = (ok or 0) - (indexed or 0)
            missing_photos = s.scalar(
                select(func.count())
                .select_from(Image)
                .where(Image.collection_id == coll.id, Image.status == STATUS_MISSING)
            )
            missing = False
            if scan_disk:
                unseen, missing = _unseen_files(s, coll, library.photo_root(coll.root))
                pending += unseen
            out.append(
                CollectionStats(
                    id=coll.id,
                    name=coll.name,
                    root=str(library.photo_root(coll.root)),  # where it is on this workstation
                    indexed=indexed or 0,
                    skipped=len(skipped),
                    pending=pending,
                    last_scanned_at=coll.last_scanned_at,
                    folder_missing=missing,
                    missing=missing_photos or 0,
                    skipped_photos=skipped,
                )
            )
    return out


def _unseen_files(s: Session, coll: Collection, root: Path) -> tuple[int, bool]:
    """Files on disk (in `root`, the collection's folder on this workstation) that are new or
    changed since the catalog saw them; and whether the folder is missing."""
    if not root.is_dir():
        return 0, True
    rows = FolderRows(s.connection(), coll.id)
    unseen = 0
    try:
        for entry in walk_images(root):
            row = rows.take(entry.rel_path)
            if row is None or (row[1], row[2]) != (entry.size, entry.mtime_ns):
                unseen += 1
    except BadInputError:
        return 0, True
    return unseen, False


# What a re-scan compares with a file: (id, size, mtime_ns, content_hash, status, skip_reason).
CatalogRow = tuple[int, int, int, str | None, str, str | None]


_ROWS_SQL = (
    "SELECT id, rel_path, size, mtime_ns, content_hash, status, skip_reason FROM images "
    "WHERE collection_id = ? "
)
_FOLDER_SQL = (
    _ROWS_SQL + "AND rel_path >= ? AND rel_path < ? AND instr(substr(rel_path, ?), '/') = 0"
)
_ROOT_SQL = _ROWS_SQL + "AND instr(rel_path, '/') = 0"


class FolderRows:
    """A collection's catalog rows, read one folder at a time as a folder walk reaches them.

    `take(rel_path)` gives the row at that path (once; None when the catalog has none) and
    remembers its id; after the walk, `untaken()` gives the rows no file claimed: files gone
    from folders the walk saw, and whole folders it never saw. Why per folder: a dict of every
    row by path held all 5 million paths of an iNat24-sized collection at once (gigabytes); this
    holds the rows of the folders the walk is in, and 8 bytes per id taken.
    """

    _COLUMNS = (
        Image.id,
        Image.rel_path,
        Image.size,
        Image.mtime_ns,
        Image.content_hash,
        Image.status,
        Image.skip_reason,
    )

    def __init__(self, connection: Connection, collection_id: int) -> None:
        self._connection = connection
        self._collection_id = collection_id
        self._sqlite = connection.dialect.name == "sqlite"
        self._folders: dict[str, dict[str, CatalogRow]] = {}  # folder -> file name -> row
        self._loaded: set[str] = set()
        self._taken = array("q")

    def take(self, rel_path: str) -> CatalogRow | None:
        """The catalog's row for the file at `rel_path` (a POSIX path under the root)."""
        folder, _, name = rel_path.rpartition("/")
        rows = self._folders.get(folder)
        if rows is None:
            if folder in self._loaded:
                return None
            rows = self._folders[folder] = self._load(folder)
            self._loaded.add(folder)
        row = rows.pop(name, None)
        if row is not None:
            self._taken.append(row[0])
        if not rows:
            del self._folders[folder]  # a folder done with costs nothing more
        return row

    def _load(self, folder: str) -> dict[str, CatalogRow]:
        """The rows of the files directly in `folder` ("" for the root)."""
        prefix = f"{folder}/" if folder else ""
        found: Iterable[Any]
        if self._sqlite:
            # Plain SQL on the driver's connection: building a statement per folder through
            # SQLAlchemy cost more than reading the folder's rows. The rows of "folder/..."
            # are a range of the (collection, path) index ("/" + 1 is "0"; SQLite compares
            # text byte by byte); sub-folders' files are left out in SQL, and checked below.
            driver = self._connection.connection.driver_connection
            assert driver is not None
            if prefix:
                found = driver.execute(
                    _FOLDER_SQL, (self._collection_id, prefix, f"{folder}0", len(prefix) + 1)
                )
            else:
                found = driver.execute(_ROOT_SQL, (self._collection_id,))
        else:
            stmt = select(*self._COLUMNS).where(Image.collection_id == self._collection_id)
            if prefix:
                stmt = stmt.where(Image.rel_path.startswith(prefix, autoescape=True))
            found = self._connection.execute(stmt)
        rows: dict[str, CatalogRow] = {}
        for image_id, rel_path, size, mtime_ns, digest, status, reason in found:
            name = rel_path[len(prefix) :]
            if rel_path.startswith(prefix) and "/" not in name:
                rows[name] = (image_id, size, mtime_ns, digest, status, reason)
        return rows

    def untaken(self) -> dict[str, CatalogRow]:
        """The rows no `take` claimed, by path, in path order."""
        ids = _collection_ids(self._connection, self._collection_id)
        taken = np.frombuffer(self._taken, dtype=np.int64) if len(self._taken) else None
        left = ids if taken is None else np.setdiff1d(ids, taken, assume_unique=True)
        rows: list[tuple[str, CatalogRow]] = []
        id_list = [int(i) for i in left]
        for start in range(0, len(id_list), _SQLITE_VARIABLES):
            stmt = select(*self._COLUMNS).where(
                Image.id.in_(id_list[start : start + _SQLITE_VARIABLES])
            )
            for (
                image_id,
                rel_path,
                size,
                mtime_ns,
                digest,
                status,
                reason,
            ) in self._connection.execute(stmt):
                rows.append((rel_path, (image_id, size, mtime_ns, digest, status, reason)))
        rows.sort(key=lambda item: item[0])
        return dict(rows)


def _collection_ids(connection: Connection, collection_id: int) -> np.ndarray:
    """The ids of a collection's photos, sorted."""
    where = Image.collection_id == collection_id
    if connection.dialect.name == "sqlite":
        # One comma-separated text parsed by numpy: 5 million ids as rows cost seconds.
        text = connection.execute(select(func.group_concat(Image.id)).where(where)).scalar()
        ids = np.fromstring(text, dtype=np.int64, sep=",") if text else np.empty(0, np.int64)
    else:
        ids = np.fromiter(connection.execute(select(Image.id).where(where)).scalars(), np.int64)
    ids.sort()
    return ids


def add_collection(library: Library, folder: str | Path) -> int:
    """Register `folder` as a collection with no photos yet (listed, waiting to be indexed);
    returns its id. An existing collection at that root is returned as it is."""
    root = Path(folder).expanduser().resolve()
    with library.catalog.session() as s:
        found = s.scalar(select(Collection.id).where(Collection.root == str(root)))
        if found is not None:
            return found
        collection = Collection(root=str(root), name=root.name or str(root))
        s.add(collection)
        s.flush()
        return collection.id


def forget_missing(
    library: Library, collection_id: int | None = None, *, even_if_unmounted: bool = False
) -> MissingPhotos:
    """Delete the photos that are missing from disk (of one collection, or all), with their
    vectors, judgments, acts of judging and places in saved runs. The explicit act the user
    confirms; nothing else deletes a photo the user may have judged.

    Refused (`LooksUnmountedError`, nothing deleted) when a collection looks unmounted or half
    mounted (`unmounted_reason`), unless `even_if_unmounted`. When judgments go, a safety
    backup is taken first (`backups/…-before-forget`; judgments only on a server catalog, so a
    workstation never wipes a lab's judgments without one); when it cannot be written,
    nothing is forgotten. Returns what was forgotten."""
    forgotten = missing_photos(library, collection_id)
    if not forgotten.photos:
        return forgotten
    if not even_if_unmounted:
        refuse_if_unmounted(library, collection_id)
    if forgotten.judgments or forgotten.events:
        from engine.catalog.backup import safety_backup

        try:
            safety_backup(library.root, library.catalog, "before-forget")
        except QuadratError as error:
            raise QuadratError(
                f"nothing was forgotten: the backup taken first failed ({error}); free space "
                f"in {library.root / 'backups'} and try again"
            ) from error
    with library.catalog.session() as s:
        stmt = select(Image.id).where(Image.status == STATUS_MISSING)
        if collection_id is not None:
            stmt = stmt.where(Image.collection_id == collection_id)
        ids = list(s.scalars(stmt))
        for start in range(0, len(ids), _SQLITE_VARIABLES):
            chunk = ids[start : start + _SQLITE_VARIABLES]
            # Judgments, events, run results and vectors go with the rows (ON DELETE CASCADE).
            s.execute(delete(Image).where(Image.id.in_(chunk)))
    log.info("forgot %d missing photos (%d judgments)", forgotten.photos, forgotten.judgments)
    # Missing photos are not in any vector index, so there is nothing to remove there.
    return forgotten


@dataclass(frozen=True)
class MovedCollection:
    """A collection whose folder is gone and whose photos a new folder holds."""

    collection_id: int
    name: str
    old_root: str
    matched: int  # files of the new folder found in the collection by path and size


# How many path-and-size matches are confirmed by content before a relocation.
_RELOCATION_SAMPLE = 16


def find_moved_collection(
    library: Library, folder: str | Path, entries: list[FileEntry] | None = None
) -> MovedCollection | None:
    """The collection that `folder` most likely is, moved or renamed: its old root no longer
    exists and most files of `folder` are its photos (same relative path and size, confirmed by
    the content hash of a sample). None when `folder` is already a collection or nothing fits."""
    root = Path(folder).expanduser().resolve()
    with library.catalog.session() as s:
        if s.scalar(select(Collection.id).where(Collection.root == str(root))) is not None:
            return None
        gone = [
            coll
            for coll in s.scalars(select(Collection).order_by(Collection.id))
            if not library.photo_root(coll.root).exists()
        ]
    if not gone:  # the usual case: no folder walk at all
        return None
    if entries is None:
        entries = list(walk_images(root))
    if not entries:
        return None
    on_disk = {e.rel_path: e for e in entries}
    best: MovedCollection | None = None
    best_hashes: list[tuple[str, str]] = []
    with library.catalog.session() as s:
        for coll in gone:
            matches: list[tuple[str, str]] = []
            for rel, size, digest in s.execute(
                select(Image.rel_path, Image.size, Image.content_hash).where(
                    Image.collection_id == coll.id
                )
            ):
                entry = on_disk.get(rel)
                if entry is not None and entry.size == size:
                    matches.append((rel, digest or ""))
            if 2 * len(matches) > len(entries) and (best is None or len(matches) > best.matched):
                best = MovedCollection(coll.id, coll.name, coll.root, len(matches))
                best_hashes = matches
    if best is None:
        return None
    step = max(1, len(best_hashes) // _RELOCATION_SAMPLE)
    sample = [(rel, digest) for rel, digest in best_hashes[::step] if digest][:_RELOCATION_SAMPLE]
    agree = 0
    for rel, digest in sample:
        with contextlib.suppress(OSError):  # unreadable: counts as different
            agree += content_hash(on_disk[rel].abs_path) == digest
    if sample and agree * 10 < len(sample) * 9:  # fewer than 90 % same content: not the same
        log.info("%s resembles %s by name only (%d/%d same content)", root, best.old_root,
                 agree, len(sample))  # fmt: skip
        return None
    return best


@dataclass(frozen=True)
class Relocation:
    collection_id: int
    old_root: str
    new_root: str
    photos: int
    merged_duplicates: int  # photos indexed twice (a second collection at the new root) merged


def relocate_collection(
    library: Library, old: int | str | Path, new_root: str | Path
) -> Relocation:
    """Point a collection at the folder it was moved to. Its photos keep their ids, vectors and
    judgments. If the new folder was already indexed as a second collection (every photo twice),
    the two are merged: the older rows win, and judgments and run results made on the second
    copy move to them."""
    new = Path(new_root).expanduser().resolve()
    if not new.is_dir():
        raise BadInputError(f"not a folder: {new}")
    dropped: list[int] = []
    with library.catalog.session() as s:
        if isinstance(old, int):
            coll = s.get(Collection, old)
        else:
            old_text = str(Path(old).expanduser().resolve())
            coll = s.scalar(select(Collection).where(Collection.root == old_text))
            if coll is None:  # a path that no longer resolves the same way
                coll = s.scalar(select(Collection).where(Collection.root == str(old)))
        if coll is None:
            raise BadInputError(f"no collection of this library is at {old}")
        old_root = coll.root
        if old_root == str(new):
            photos = s.scalar(
                select(func.count()).select_from(Image).where(Image.collection_id == coll.id)
            )
            return Relocation(coll.id, old_root, str(new), photos or 0, 0)
        twin = s.scalar(select(Collection).where(Collection.root == str(new)))
        if twin is not None:
            dropped = _merge_into(s, keep=coll.id, twin=twin.id)
            s.delete(twin)
            s.flush()
        coll.root, coll.name = str(new), new.name or str(new)
        photos = s.scalar(
            select(func.count()).select_from(Image).where(Image.collection_id == coll.id)
        )
    _drop_from_indexes(library, dropped)
    log.info("collection %s moved from %s to %s (%d duplicates merged)", coll.id, old_root, new,
             len(dropped))  # fmt: skip
    return Relocation(coll.id, old_root, str(new), photos or 0, len(dropped))


def _merge_into(s: Session, keep: int, twin: int) -> list[int]:
    """Move the twin collection's photos into `keep`; a photo both hold (same relative path)
    keeps `keep`'s row, taking over the twin's judgments and run results. Returns dropped ids."""
    kept = dict(
        s.execute(select(Image.rel_path, Image.id).where(Image.collection_id == keep)).all()
    )
    dropped: list[int] = []
    for rel, twin_id in s.execute(
        select(Image.rel_path, Image.id).where(Image.collection_id == twin)
    ).all():
        keep_id = kept.get(rel)
        if keep_id is None:
            s.execute(update(Image).where(Image.id == twin_id).values(collection_id=keep))
            continue
        judged = select(Judgment.query_id).where(Judgment.image_id == keep_id)
        s.execute(
            update(Judgment)
            .where(Judgment.image_id == twin_id, Judgment.query_id.not_in(judged))
            .values(image_id=keep_id)
        )
        s.execute(update(RunResult).where(RunResult.image_id == twin_id).values(image_id=keep_id))
        s.execute(delete(Image).where(Image.id == twin_id))
        dropped.append(twin_id)
    return dropped


def _drop_from_indexes(library: Library, ids: list[int]) -> None:
    """Remove deleted photos from every model's vector index (the catalog is already changed;
    if the process dies first, the check at open drops them)."""
    if not ids:
        return
    with library.catalog.session() as s:
        model_keys = list(s.scalars(select(Embedding.model_key).distinct()))
    array = np.asarray(ids, dtype=np.int64)
    for model_key in model_keys:
        try:
            index = library.vector_index(model_key)
        except QuadratError:
            continue
        if index.remove(array):
            library.save_index(model_key)


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
