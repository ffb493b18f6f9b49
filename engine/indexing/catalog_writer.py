"""What an indexing run writes to the catalog: a plan's re-pointed, missing and restored rows
(`CatalogWriter.apply_plan`), and each checkpoint's rows with their vectors in one transaction
(`CatalogWriter.commit`), with the photo's metadata, its taxon, and rows taken back by content.

A new photo's row and its vector are committed together, so a run killed between two
checkpoints loses only the photos in flight: the next run finds them without a row. The
indexer commits in a thread of its own (`CommitQueue`), one checkpoint at a time, while the next
photos are decoded and encoded."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import numpy as np
from sqlalchemy import delete, insert, or_, select, update
from sqlalchemy.orm import Session

from engine.catalog import Collection, Embedding, Image, Taxon
from engine.catalog.library import Library
from engine.catalog.models import STATUS_MISSING, STATUS_OK, STATUS_SKIPPED, utcnow
from engine.indexing.metadata import ImageMeta, local_time_and_offset, metadata_key
from engine.indexing.names import TaxonInfo, taxon_for_path
from engine.indexing.pipeline import Failed, Prepared
from engine.indexing.plan import FilePlan, Job

log = logging.getLogger(__name__)


class CommitQueue:
    """Checkpoints written by `write` in a thread of their own, one at a time and in order, so
    the encoder never waits for SQLite: on a GPU a checkpoint's commit took as long as
    encoding it. At most one checkpoint is being written while the next one fills; `submit`
    and `wait` raise a failed write's error (once), and `failed` then stays True so the run
    does not try to write again."""

    def __init__(self, write: Callable[[list[tuple[Prepared, np.ndarray]], list[Failed]], None]):
        self._write = write
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="quadrat-commit")
        self._in_flight: Future[None] | None = None
        self.failed = False

    def submit(self, ready: list[tuple[Prepared, np.ndarray]], failed: list[Failed]) -> None:
        """Write a checkpoint once the one before it is written (its error raised here)."""
        self.wait()
        self._in_flight = self._pool.submit(self._write, ready, failed)

    def wait(self) -> None:
        """Wait until the checkpoint in flight is written; raise its error."""
        future, self._in_flight = self._in_flight, None
        if future is None:
            return
        try:
            future.result()
        except BaseException:
            self.failed = True
            raise

    def close(self) -> None:
        """Wait for the checkpoint in flight (its error logged: the run is already failing
        for another reason) and end the thread."""
        try:
            self.wait()
        except Exception:
            log.info("a checkpoint of a failed run was not written", exc_info=True)
        finally:
            self._pool.shutdown(wait=True)


class CatalogWriter:
    """Writes one model's indexing runs into a library's catalog (and its vector index)."""

    def __init__(self, library: Library, model_key: str, dim: int) -> None:
        self.library = library
        self.model_key = model_key
        self.dim = dim  # of the model's vectors: an empty checkpoint returns (0, dim)
        self._taxon_ids: dict[str, int] = {}  # taxon key -> id, kept across runs
        self._claimed: set[int] = set()  # rows taken back by content in the current run
        self.returned_elsewhere = 0  # of them, rows that came from another path

    def start_run(self) -> None:
        """Forget the previous run's rows taken back by content."""
        self._claimed = set()
        self.returned_elsewhere = 0

    def apply_plan(self, plan: FilePlan, index: Any) -> None:
        """Write what the plan found: re-pointed rows take their file's path, size and mtime;
        rows gone from disk are kept as missing, with their vectors and judgments, out of
        search (and out of `index`); returned rows come back into both."""
        gone, restored = plan.gone, plan.restored
        with self.library.catalog.session() as s:
            self._load_rows(s, [image_id for image_id, _ in plan.relinked])
            for image_id, entry in plan.relinked:
                img = s.get(Image, image_id)
                if img is not None:
                    img.rel_path, img.size, img.mtime_ns = (
                        entry.rel_path,
                        entry.size,
                        entry.mtime_ns,
                    )
            now = utcnow()
            for start in range(0, len(gone), 900):
                s.execute(
                    update(Image)
                    .where(Image.id.in_(gone[start : start + 900]))
                    .values(status=STATUS_MISSING, missing_since=now)
                    .execution_options(synchronize_session=False)  # a plain UPDATE
                )
            for start in range(0, len(restored), 900):
                s.execute(
                    update(Image)
                    .where(Image.id.in_(restored[start : start + 900]))
                    .values(status=STATUS_OK, missing_since=None, skip_reason=None)
                    .execution_options(synchronize_session=False)
                )
        if gone:
            index.remove(np.asarray(gone, dtype=np.int64))
        if restored:
            ids, vectors = self.library.load_vectors(self.model_key, np.asarray(restored))
            index.add(ids, vectors)

    def commit(
        self,
        collection_id: int,
        ready: list[tuple[Prepared, np.ndarray]],
        failed: list[Failed],
        coco: Mapping[str, ImageMeta],
    ) -> tuple[np.ndarray, np.ndarray]:
        """Write rows and vectors of one checkpoint in a single transaction.

        In bulk: one flush for the rows and one insert for the vectors. Row by row (a flush
        and a merge per photo) capped indexing at about 1,000 photos/s on a GPU machine."""
        reclaimed = 0
        with self._forget_taxa_on_failure(), self.library.catalog.session() as s:
            reclaim = self._reclaimable(
                s, collection_id, [p.content_hash for p, _ in ready if p.job.image_id is None]
            )
            for prepared, _ in ready:
                job = prepared.job
                if job.image_id is None and prepared.content_hash in reclaim:
                    # A photo the library knew under another path whose file is gone: it takes
                    # its old row back, and with it its id, runs and judgments.
                    job.image_id = reclaim.pop(prepared.content_hash)
                    reclaimed += 1
            known = [p.job.image_id for p, _ in ready] + [f.job.image_id for f in failed]
            self._load_rows(s, [i for i in known if i is not None])
            encoded: list[Image] = []
            for prepared, _ in ready:
                img = self._upsert_image(s, collection_id, prepared.job, prepared.content_hash)
                img.collection_id = collection_id
                img.status, img.skip_reason, img.missing_since = STATUS_OK, None, None
                img.width, img.height = prepared.width, prepared.height
                self._apply_metadata(
                    s, img, coco.get(metadata_key(prepared.job.entry.rel_path)), prepared.exif
                )
                encoded.append(img)
            skipped: list[Image] = []
            for fail in failed:
                img = self._upsert_image(s, collection_id, fail.job, fail.content_hash)
                img.status, img.skip_reason, img.missing_since = STATUS_SKIPPED, fail.reason, None
                self._apply_metadata(s, img, coco.get(metadata_key(fail.job.entry.rel_path)), None)
                skipped.append(img)
            s.flush()  # new rows get their ids
            ids = [img.id for img in encoded]
            for start in range(0, len(ids), 900):
                s.execute(
                    delete(Embedding).where(
                        Embedding.image_id.in_(ids[start : start + 900]),
                        Embedding.model_key == self.model_key,
                    )
                )
            if ids:
                s.execute(
                    insert(Embedding),
                    [
                        {
                            "image_id": image_id,
                            "model_key": self.model_key,
                            "vector": np.ascontiguousarray(vector, dtype="<f4").tobytes(),
                        }
                        for image_id, (_, vector) in zip(ids, ready, strict=True)
                    ],
                )
            gone = [img.id for img in skipped]
            for start in range(0, len(gone), 900):  # a skipped photo has no vector, any model
                s.execute(
                    delete(Embedding).where(Embedding.image_id.in_(gone[start : start + 900]))
                )
        self.returned_elsewhere += reclaimed
        if not ids:
            return np.zeros(0, dtype=np.int64), np.zeros((0, self.dim), dtype=np.float32)
        vectors = np.vstack([vector for _, vector in ready]).astype(np.float32)
        return np.asarray(ids, dtype=np.int64), vectors

    @staticmethod
    def _load_rows(s: Session, image_ids: list[int]) -> None:
        """Load these rows into the session in a few queries, so `s.get` finds them in memory."""
        for start in range(0, len(image_ids), 900):
            list(s.scalars(select(Image).where(Image.id.in_(image_ids[start : start + 900]))))

    @contextmanager
    def _forget_taxa_on_failure(self) -> Iterator[None]:
        """A rolled-back transaction takes the taxa it added with it: forget their cached ids."""
        try:
            yield
        except BaseException:
            self._taxon_ids.clear()
            raise

    def _reclaimable(self, s: Session, collection_id: int, digests: list[str]) -> dict[str, int]:
        """Rows whose content matches new files and whose own file is gone: missing photos, or
        photos of another collection no longer at their path. Content hash -> image id."""
        found: dict[str, int] = {}
        wanted = sorted(set(digests))
        for start in range(0, len(wanted), 900):
            stmt = (
                select(Image.id, Image.content_hash, Image.status, Image.rel_path, Collection.root)
                .join(Collection, Collection.id == Image.collection_id)
                .where(
                    Image.content_hash.in_(wanted[start : start + 900]),
                    or_(Image.status == STATUS_MISSING, Image.collection_id != collection_id),
                )
                # Missing rows first: they are known to be gone without touching the disk.
                .order_by((Image.status == STATUS_MISSING).desc(), Image.id)
            )
            for image_id, digest, status, rel_path, root in s.execute(stmt):
                if digest is None or digest in found or image_id in self._claimed:
                    continue
                if (
                    status == STATUS_MISSING
                    or not (self.library.photo_root(root) / rel_path).exists()
                ):
                    found[digest] = image_id
                    self._claimed.add(image_id)
        return found

    def _upsert_image(self, s: Session, collection_id: int, job: Job, digest: str | None) -> Image:
        """The job's row (made when new) with the file's path, size, mtime and content hash."""
        img = s.get(Image, job.image_id) if job.image_id is not None else None
        if img is None:
            img = Image(collection_id=collection_id, rel_path=job.entry.rel_path)
            s.add(img)
        img.rel_path = job.entry.rel_path
        img.size, img.mtime_ns, img.content_hash = job.entry.size, job.entry.mtime_ns, digest
        # The photo's own XMP is read again after the commit (keywords.refresh_keywords): the
        # licence it gave may have been reset from the metadata file here.
        img.keywords_source = None
        return img

    def _apply_metadata(self, s: Session, img: Image, meta: ImageMeta | None, exif: Any) -> None:
        """Metadata precedence: the COCO file, then EXIF, then the iNat folder name. The
        camera (make, model, serial) is EXIF's alone; the file's own time is never used."""
        taxon = (meta.taxon if meta else None) or taxon_for_path(img.rel_path)
        img.taxon_id = self._taxon_id(s, taxon) if taxon else None
        file_time = meta.observed_at if meta else None
        camera_time = exif.observed_at if exif is not None else None
        img.observed_at, img.observed_utc_offset = local_time_and_offset(file_time or camera_time)
        # The camera clock's reading, kept only when it is the photo's time: a deployment's
        # clock offset is added to it (engine.indexing.deployments) after the run.
        img.camera_time = None if file_time is not None else img.observed_at
        _apply_camera(img, exif)
        _apply_place(img, meta, exif)
        if meta is not None:
            img.location_uncertainty = meta.location_uncertainty
            img.license = meta.license
            img.rights_holder = meta.rights_holder
            img.external_id = meta.external_id
            img.notes = meta.notes

    def _taxon_id(self, s: Session, info: TaxonInfo) -> int:
        """The id of the taxon `info` names (made or completed when needed), cached per key."""
        key = info.image_dir_name or info.name
        cached = self._taxon_ids.get(key)
        if cached is not None:
            return cached
        taxon = s.scalar(select(Taxon).where(Taxon.key == key))
        if taxon is None:
            taxon = Taxon(key=key, name=info.name)
            s.add(taxon)
        for attr in (
            "kingdom",
            "phylum",
            "class_",
            "order",
            "family",
            "genus",
            "specific_epithet",
            "common_name",
            "category_id",
        ):
            value = getattr(info, attr, None)
            if value is not None:
                setattr(taxon, attr, value)
        s.flush()
        self._taxon_ids[key] = taxon.id
        return taxon.id


def _apply_camera(img: Image, exif: Any) -> None:
    """The camera (make, model, serial) and EXIF's flags: EXIF's alone."""
    img.camera_make = exif.make if exif is not None else None
    img.camera_model = exif.model if exif is not None else None
    img.camera_serial = exif.serial if exif is not None else None
    img.exif_flags = (exif.flags or None) if exif is not None else None


def _apply_place(img: Image, meta: ImageMeta | None, exif: Any) -> None:
    """The place and its privacy: the record's, else the photo's own GPS unless the record
    withheld the place."""
    lat = meta.latitude if meta else None
    lon = meta.longitude if meta else None
    withheld = bool(meta and meta.location_withheld)
    # A place the record withheld is never filled from the photo's own GPS: publishing it
    # would undo the observer's (or iNaturalist's) choice to hide it.
    if (lat is None or lon is None) and exif is not None and not withheld:
        lat, lon = exif.latitude, exif.longitude
    img.latitude, img.longitude = lat, lon
    img.location_withheld = withheld or None
    img.geoprivacy = meta.geoprivacy if meta else None
    img.taxon_geoprivacy = meta.taxon_geoprivacy if meta else None
    img.coordinates_obscured = meta.coordinates_obscured if meta else None
    img.public_location_uncertainty = meta.public_location_uncertainty if meta else None
