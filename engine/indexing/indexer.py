"""The indexer: one run over a folder, from the walk to the last checkpoint.

`Indexer.run` walks the folder into a plan (`plan.classify_files`), applies it, streams the
files to encode through the decode and encode pipeline (`pipeline`) and commits rows with their
vectors at checkpoints (`catalog_writer`), then reads its counts back from the catalog
(`report.IndexReport`). Resumable by construction: a new photo's row and its vector are written
in the same transaction, so after a crash or kill the next run simply finds the photos that have
no row yet. The FAISS file is updated after each commit and saved now and then; the library
repairs it from the catalog at open if the process died in between.
"""

from __future__ import annotations

import itertools
import logging
import os
import time
from collections.abc import Container, Generator, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from engine.catalog import Collection, Embedding, Image, Judgment
from engine.catalog.db import catalog_faults
from engine.catalog.library import Library
from engine.catalog.models import STATUS_MISSING, STATUS_OK, STATUS_SKIPPED, utcnow
from engine.errors import BadInputError, Cancelled, QuadratError
from engine.indexing.catalog_writer import CatalogWriter, CommitQueue
from engine.indexing.collections import FolderRows
from engine.indexing.decode import DecodeBudget
from engine.indexing.decode_pool import (
    DECODE_MODES,
    PixelSteps,
    pixel_steps_of,
    processes_available,
    processes_by_default,
)
from engine.indexing.hashes import content_hash
from engine.indexing.metadata import (
    ImageMeta,
    find_metadata_file,
)
from engine.indexing.metadata_store import MetadataStore
from engine.indexing.pipeline import (
    Encoded,
    Failed,
    Prepared,
    encoded_stream,
    gpu_jpeg_decoder,
    gpu_prepared_stream,
    prepare,
    prepared_stream,
    process_prepared_stream,
)
from engine.indexing.plan import Job, classify_files
from engine.indexing.report import IndexReport, SkippedFile
from engine.indexing.walk import FileEntry, walk_images
from engine.models.encoders import Encoder
from engine.progress import CancelToken, Progress, ProgressCallback, RateMeter, no_progress

log = logging.getLogger(__name__)


class _IdMask:
    """A set of image ids as one byte per id up to the largest: a Python set of 5 million ids
    took about 300 MB, this 5 MB."""

    def __init__(self, ids: np.ndarray) -> None:
        ids = np.asarray(ids, dtype=np.int64)
        self._mask = bytearray(int(ids.max()) + 1 if len(ids) else 0)
        np.frombuffer(self._mask, dtype=np.uint8)[ids] = 1

    def __contains__(self, image_id: object) -> bool:
        return (
            isinstance(image_id, int)
            and 0 <= image_id < len(self._mask)
            and (self._mask[image_id] == 1)
        )


class _CatalogRows:
    """`FolderRows` of a collection over a connection of its own, held while the folder is
    walked: `with rows as folder_rows: ...`."""

    def __init__(self, library: Library, collection_id: int) -> None:
        self._catalog = library.catalog
        self._collection_id = collection_id
        self._stack = ExitStack()

    def __enter__(self) -> FolderRows:
        with ExitStack() as stack:  # a failed connect leaves nothing open
            stack.enter_context(catalog_faults(self._catalog.path))
            connection = stack.enter_context(self._catalog.engine.connect())
            self._stack = stack.pop_all()
        return FolderRows(connection, self._collection_id)

    def __exit__(self, *exc: object) -> bool | None:
        return self._stack.__exit__(*exc)  # type: ignore[arg-type]


def _status_counts(session: Session, collection_id: int) -> dict[str, int]:
    """The collection's photos in the catalog, counted per status."""
    rows = session.execute(
        select(Image.status, func.count())
        .where(Image.collection_id == collection_id)
        .group_by(Image.status)
    ).all()
    return {str(status): int(count) for status, count in rows}


class Indexer:
    """Indexes folders into a library with one encoder."""

    def __init__(
        self,
        library: Library,
        encoder: Encoder,
        *,
        batch_size: int = 32,
        workers: int | None = None,
        checkpoint_every: int | None = None,
        index_save_seconds: float = 30.0,
        decode_memory: int | None = None,
        decode: str = "auto",
    ) -> None:
        """`decode_memory`: bytes that the photos being decoded may take together, whatever
        the number of `workers` (default: the process's shared `decode.DEFAULT_DECODE_MEMORY`).
        `decode`: "threads", "processes" (`decode_pool`), "auto" (processes on 4 or more
        cores) or "gpu" (JPEGs on the encoder's CUDA device, else as auto); an encoder whose
        resize workers cannot replay is decoded in threads."""
        if batch_size < 1:
            raise BadInputError("batch size must be at least 1")
        if decode not in DECODE_MODES:
            raise BadInputError(f"decode must be one of {', '.join(DECODE_MODES)}, not {decode!r}")
        self.library = library
        self.encoder = encoder
        self.batch_size = batch_size
        self.decode = decode
        self._workers_given = bool(workers and workers > 0)
        self.workers = workers if workers and workers > 0 else min(4, os.cpu_count() or 1)
        if checkpoint_every is None:
            # Tunable from the environment so crash tests can make checkpoints frequent.
            checkpoint_every = int(os.environ.get("QUADRAT_CHECKPOINT_EVERY", "256"))
        self.checkpoint_every = max(checkpoint_every, batch_size)
        self.index_save_seconds = index_save_seconds
        self._decode_budget = DecodeBudget(decode_memory) if decode_memory else None
        self.model_key: str = encoder.model_key
        self._min_side: int | None = getattr(encoder, "image_size", None)
        self._writer = CatalogWriter(library, self.model_key, encoder.dim)
        self._metadata: MetadataStore | None = None  # the current run's metadata records

    # -- public ------------------------------------------------------------------------------

    def run(
        self,
        folder: str | Path,
        *,
        metadata: str | Path | None = None,
        reindex: bool = False,
        relocate: bool = True,
        prune: bool = False,
        progress: ProgressCallback = no_progress,
        cancel: CancelToken | None = None,
    ) -> IndexReport:
        """Index `folder` incrementally. Returns a report; a cancel keeps all committed work.

        Photos gone from disk are marked missing, never deleted (`prune` forgets them after the
        run). With `relocate`, a new folder that holds mostly the photos of a collection whose
        folder no longer exists takes that collection over (ids and judgments follow).
        Raises `QuadratError` when what the catalog holds after the run is not what the run
        committed (the next run repairs it)."""
        started = time.monotonic()
        cancel = cancel or CancelToken()
        root = Path(folder).expanduser()
        if not root.exists():
            raise BadInputError(f"folder not found: {root}")
        if not root.is_dir():
            raise BadInputError(f"not a folder: {root}")
        root = root.resolve()
        with self.library.writer_lock():
            try:
                return self._run_locked(
                    root, metadata, reindex, relocate, prune, progress, cancel, started
                )
            finally:
                if self._metadata is not None:
                    self._metadata.close()
                    self._metadata = None

    def _run_locked(
        self,
        root: Path,
        metadata: str | Path | None,
        reindex: bool,
        relocate: bool,
        prune: bool,
        progress: ProgressCallback,
        cancel: CancelToken,
        started: float,
    ) -> IndexReport:
        report = IndexReport(collection=str(root))

        if not reindex and self.library.model_changed_under(self.model_key, self._spec()):
            # The same spec now names other weights: the old vectors are of another model.
            log.warning("the model %s has changed since the last run: re-encoding every photo",
                        self._spec())  # fmt: skip
            reindex = True
        if reindex:
            self.library.drop_embeddings_except(self.model_key)
        else:
            self.library.check_model(self.model_key, self._spec())

        progress(RateMeter(0).update(0, "scanning folder"))
        # The walk is streamed into the plan: a list of 5 million entries alone took gigabytes.
        walk = walk_images(
            root, on_skip=lambda path, reason: report.passed_over.append(SkippedFile(path, reason))
        )
        first = next(walk, None)
        coco = self._load_metadata(root, metadata, progress, cancel)
        if coco:
            progress(RateMeter(0).update(0, "scanning folder"))  # after the file's progress
        report.metadata_problems = int(getattr(coco, "problems", 0))
        report.metadata_values_ignored = int(getattr(coco, "values_ignored", 0))
        report.metadata_records_ignored = int(getattr(coco, "records_ignored", 0))
        report.metadata_examples = list(getattr(coco, "examples", []))

        if relocate and first is not None and self.library.catalog_root(root) == str(root):
            from engine.indexing.collections import find_moved_collection, relocate_collection

            # It walks the folder itself, only when the folder may be a moved collection.
            moved_from = find_moved_collection(self.library, root)
            if moved_from is not None:
                relocate_collection(self.library, moved_from.collection_id, root)
                report.relocated_from = moved_from.old_root

        collection_id, rows, embedded = self._catalog_state(root)
        if first is None:
            known, present = self._row_counts(collection_id)
            if present:
                raise BadInputError(
                    f"no photos found in {root}, but {known} were indexed from it before; "
                    "is the drive connected? Nothing was removed"
                )
            raise BadInputError(f"no photos found in {root}")
        entries = itertools.chain((first,), walk)

        self.library.record_model(self.model_key, self._spec(), self.encoder.dim)
        index = self.library.vector_index(self.model_key, dim=self.encoder.dim)

        self._writer.start_run()
        jobs = self._plan(entries, rows, embedded, report, index, cancel)
        try:
            self._encode_all(collection_id, jobs, coco, index, report, progress, cancel)
        except Cancelled:
            report.cancelled = True
        except BaseException:
            # The first real error (SQLite's "disk is full", say) is the one to report: saving
            # the vector file can fail for the same reason and must not hide it.
            try:
                self.library.save_index(self.model_key)
            except Exception:
                log.info("could not save the vector index after a failed run", exc_info=True)
            raise
        if report.indexed or report.missing or report.returned:
            # Only a run that changed the index writes it: the file of 5 million 512-d vectors
            # is 10 GB, written, hashed and synced again by every re-scan that found nothing.
            self.library.save_index(self.model_key)
        with self.library.catalog.session() as s:
            coll = s.get(Collection, collection_id)
            if coll is not None and not report.cancelled:
                coll.last_scanned_at = utcnow()
        report.returned += self._writer.returned_elsewhere
        if not report.cancelled:
            # Sidecars change without their photo: read here, apart from the encode plan, so an
            # edited sidecar is picked up with no photo encoded again.
            from engine.indexing.keywords import refresh_keywords

            read = refresh_keywords(
                self.library.catalog, collection_id, root, cancel, progress, metadata=coco
            )
            if read:
                log.info("%s: keywords read for %d photos", root, read)
        if prune and not report.cancelled:
            from engine.indexing.collections import forget_missing

            report.removed = forget_missing(self.library, collection_id).photos
        self._read_back(collection_id, report)
        from engine.indexing.deployments import refresh_camera_data

        # Deployments, clock offsets and events follow every run that changed photos
        # (cancelled ones too: what was committed is searchable); about a second at 50,000.
        if report.indexed or report.moved or report.missing or report.returned or report.removed:
            report.camera = refresh_camera_data(self.library, collection_id).to_json()
        if not report.cancelled and index.needs_rebuild():
            # The collection crossed the exact-search limit (or shrank far below it): switch the
            # index kind now, with progress, rather than on the next open without any.
            try:
                self.library.rebuild_index(
                    self.model_key,
                    progress=lambda p: progress(replace(p, message="building the search index")),
                    cancel=cancel,
                )
            except Cancelled:
                log.info("index rebuild cancelled; the exact index stays in use")
        report.seconds = time.monotonic() - started
        log.info("%s: %s", root, report.summary())
        return report

    def _read_back(self, collection_id: int, report: IndexReport) -> None:
        """Fill the report's catalog counts from a fresh connection and check them.

        A fresh connection reads what is really in the database file: if a file of the catalog
        was deleted or damaged during the run, commits the run believes done can be gone.
        """
        self.library.catalog.engine.dispose()  # pooled connections may see a deleted WAL
        with self.library.catalog.session() as s:
            counts = _status_counts(s, collection_id)
            report.catalog_indexed = int(
                s.scalar(
                    select(func.count())
                    .select_from(Embedding)
                    .join(Image, Image.id == Embedding.image_id)
                    .where(
                        Image.collection_id == collection_id,
                        Image.status == STATUS_OK,
                        Embedding.model_key == self.model_key,
                    )
                )
                or 0
            )
            report.still_missing = int(counts.get(STATUS_MISSING, 0))
            report.judgments_on_missing = int(
                s.scalar(
                    select(func.count())
                    .select_from(Judgment)
                    .join(Image, Image.id == Judgment.image_id)
                    .where(Image.collection_id == collection_id, Image.status == STATUS_MISSING)
                )
                or 0
            )
        report.catalog_skipped = int(counts.get(STATUS_SKIPPED, 0))
        if report.cancelled:
            return
        expected_indexed = report.total_files - len(report.skipped)
        if (report.catalog_indexed, report.catalog_skipped) != (
            expected_indexed,
            len(report.skipped),
        ):
            log.error(
                "catalog read-back: %d indexed and %d skipped, the run expected %d and %d",
                report.catalog_indexed,
                report.catalog_skipped,
                expected_indexed,
                len(report.skipped),
            )
            raise QuadratError(
                f"the catalog holds {report.catalog_indexed} of the {expected_indexed} photos "
                f"this run indexed or found indexed in {report.collection}: committed work was "
                "lost (was a file of the library deleted, or the disk removed, during the run?); "
                "index the folder again to repair it"
            )

    # -- planning ----------------------------------------------------------------------------

    def _spec(self) -> str:
        """The model spec to remember, with local paths made absolute (the CLI may have been
        given a path relative to another working folder)."""
        spec = self.encoder.spec
        if isinstance(spec, str):
            return spec
        path = spec.path
        if spec.kind == "checkpoint" and path is not None:
            return f"{spec.arch}:{Path(path).expanduser().resolve()}"
        if spec.kind == "local-dir" and path is not None:
            return f"local-dir:{Path(path).expanduser().resolve()}"
        return str(spec.spec)

    def _load_metadata(
        self,
        root: Path,
        metadata: str | Path | None,
        progress: ProgressCallback = no_progress,
        cancel: CancelToken | None = None,
    ) -> Mapping[str, ImageMeta]:
        """The collection's metadata records, read into a temporary file rather than memory
        (iNat24's train.json lists 5 million photos); `run` deletes the file at the end.
        Reading a file of gigabytes takes minutes: a cancel stops it at the next report."""
        if metadata is not None:
            path = Path(metadata).expanduser()
            if not path.is_file():
                raise BadInputError(f"metadata file not found: {path}")
        else:
            found = find_metadata_file(root)
            if found is None:
                return {}
            path = found

        def report(p: Progress) -> None:
            progress(p)
            if cancel is not None:
                cancel.check()

        self._metadata = MetadataStore.load(path, report)
        return self._metadata

    def _catalog_state(self, root: Path) -> tuple[int, _CatalogRows, _IdMask]:
        """The collection's id (made when new), its rows as the walk will ask for them, and the
        ids of its photos that have a vector of this model."""
        with self.library.catalog.session() as s:
            # The catalog's name for this folder (a mapped root on another workstation's path).
            recorded = self.library.catalog_root(root)
            coll = s.scalar(select(Collection).where(Collection.root == recorded))
            if coll is None:
                coll = Collection(root=recorded, name=root.name or str(root))
                s.add(coll)
                s.flush()
            stmt = (
                select(Embedding.image_id)
                .join(Image, Image.id == Embedding.image_id)
                .where(Image.collection_id == coll.id, Embedding.model_key == self.model_key)
            )
            if s.get_bind().dialect.name == "sqlite":
                # One text parsed by numpy: 5 million ids as ORM rows took seconds.
                text = s.execute(select(func.group_concat(stmt.subquery().c.image_id))).scalar()
                ids = np.fromstring(text, dtype=np.int64, sep=",") if text else np.empty(0)
            else:
                ids = np.fromiter(s.scalars(stmt), dtype=np.int64)
            return coll.id, _CatalogRows(self.library, coll.id), _IdMask(ids)

    def _row_counts(self, collection_id: int) -> tuple[int, int]:
        """The collection's photos in the catalog: all of them, and those not missing."""
        with self.library.catalog.session() as s:
            counts = _status_counts(s, collection_id)
        total = int(sum(counts.values()))
        return total, total - int(counts.get(STATUS_MISSING, 0))

    def _hash_many(self, entries: list[FileEntry]) -> dict[str, str | None]:
        def safe_hash(entry: FileEntry) -> str | None:
            try:
                return content_hash(entry.abs_path)
            except OSError:
                return None

        with ThreadPoolExecutor(self.workers) as pool:
            return dict(
                zip((e.rel_path for e in entries), pool.map(safe_hash, entries), strict=True)
            )

    def _plan(
        self,
        entries: Iterable[FileEntry],
        rows: _CatalogRows,
        embedded: Container[int],
        report: IndexReport,
        index: Any,
        cancel: CancelToken,
    ) -> list[Job]:
        """Sort files into unchanged, to encode, moved, returned and missing (`classify_files`),
        apply that, and return the files to encode. Counts the files into `report`."""
        plan = classify_files(entries, rows, embedded, self._hash_many, cancel.check)
        report.total_files = plan.total_files
        report.unchanged += plan.unchanged
        report.moved += plan.moved
        report.returned += plan.returned
        report.skipped.extend(plan.skipped)
        self._writer.apply_plan(plan, index)
        if plan.gone:
            report.missing = len(plan.gone)
        return plan.jobs

    def _encode_all(
        self,
        collection_id: int,
        jobs: list[Job],
        coco: Mapping[str, ImageMeta],
        index: Any,
        report: IndexReport,
        progress: ProgressCallback,
        cancel: CancelToken,
    ) -> None:
        """Commit what `_encoded_stream` yields, a checkpoint at a time, reporting progress."""
        meter = RateMeter(len(jobs))
        ready: list[tuple[Prepared, np.ndarray]] = []
        failed: list[Failed] = []
        done = 0
        last_save = time.monotonic()
        progress(meter.update(0, "indexing"))

        def write(written: list[tuple[Prepared, np.ndarray]], skipped: list[Failed]) -> None:
            """One checkpoint, in the commit thread: rows and vectors, then the index."""
            nonlocal last_save
            ids, vectors = self._commit(collection_id, written, skipped, coco)
            if len(ids):
                index.add(ids, vectors)
            report.indexed += len(written)
            report.skipped.extend(SkippedFile(f.job.entry.rel_path, f.reason) for f in skipped)
            if time.monotonic() - last_save > self.index_save_seconds:
                self.library.save_index(self.model_key)
                last_save = time.monotonic()

        commits = CommitQueue(write)

        def checkpoint() -> None:
            commits.submit(ready[:], failed[:])
            ready.clear()
            failed.clear()

        def keep_the_rest() -> None:
            commits.wait()
            checkpoint()
            commits.wait()

        stream = self._encoded_stream(jobs, cancel)
        try:
            try:
                for advanced, encoded, failed_now in stream:
                    ready.extend(encoded)
                    failed.extend(failed_now)
                    if len(ready) + len(failed) >= self.checkpoint_every:
                        checkpoint()
                    if advanced:
                        before, done = done, done + advanced
                        if before // 8 != done // 8 or done == len(jobs):
                            progress(meter.update(done, "indexing"))
            except Cancelled:
                keep_the_rest()  # every photo that was already encoded
                raise
            except BaseException:
                # An encoder or decode failure: keep what was encoded before it. A failed
                # commit is not tried again: its error is the one to report.
                if not commits.failed:
                    try:
                        keep_the_rest()
                    except Exception:
                        log.info("could not keep the last photos of a failed run", exc_info=True)
                raise
            finally:
                stream.close()  # stops the decode workers (or a cluster's pipeline) at once
            keep_the_rest()
        finally:
            commits.close()  # no write of this run goes on after it
        progress(meter.update(done, "done"))

    # -- the steps a subclass may replace --------------------------------------------------

    def _prepare(self, job: Job) -> Prepared | Failed:
        """Runs in a worker thread: hash, decode, orient and preprocess one photo."""
        return prepare(job, self._min_side, self.encoder.preprocess, self._decode_budget)

    def _encoded_stream(
        self, jobs: list[Job], cancel: CancelToken
    ) -> Generator[Encoded, None, None]:
        """Decode in threads and encode in batches, in job order (`pipeline.encoded_stream`);
        the Ray indexer yields the same from a cluster."""
        # A bounded number of decodes in flight: each holds a decoded photo in memory.
        ahead = self.batch_size * 3
        gpu = self._gpu_decoder() if jobs else None
        steps = self._process_steps() if jobs and gpu is None else None
        prepared = (
            gpu_prepared_stream(
                jobs,
                gpu[0],
                self.encoder.device,
                gpu[1],
                self._prepare,
                self._process_workers(),
                self.batch_size,
                cancel,
            )
            if gpu is not None
            else prepared_stream(jobs, self._prepare, self.workers, ahead, cancel)
            if steps is None
            else process_prepared_stream(
                jobs,
                steps,
                self._min_side,
                self._process_workers(),
                ahead,
                cancel,
                slot_bytes=steps.output_bytes(),
                decode_memory=self._decode_budget.max_bytes if self._decode_budget else None,
            )
        )
        try:
            yield from encoded_stream(prepared, self.encoder, self.batch_size, cancel)
        finally:
            prepared.close()  # stops the decode threads at once

    def _gpu_decoder(self) -> tuple[Any, PixelSteps] | None:
        """With decode="gpu": the GPU's JPEG decoder and the encoder's resize and crop to
        run there, or None (said in the log) when either is missing."""
        if self.decode != "gpu":
            return None
        decoder = gpu_jpeg_decoder(self.encoder.device)
        steps = pixel_steps_of(self.encoder) if decoder is not None else None
        if decoder is None or steps is None:
            log.info("JPEGs cannot be decoded on %s: decoding on the CPU", self.encoder.device)
            return None
        return decoder, steps

    def _process_steps(self) -> PixelSteps | None:
        """The encoder's resize and crop for decode processes, or None to decode in threads:
        as `decode` says, and always for a subclass that prepares photos its own way."""
        if self.decode == "threads" or type(self)._prepare is not Indexer._prepare:
            return None
        if self.decode in ("auto", "gpu") and not processes_by_default():
            return None
        if not processes_available():
            log.info("decoding in threads: worker processes cannot start here")
            return None
        steps = pixel_steps_of(self.encoder)
        if steps is None:
            log.info("decoding in threads: the model's resize cannot run in a worker process")
        return steps

    def _process_workers(self) -> int:
        """Decode processes: as many as asked; else, feeding a GPU, all cores but the one that
        feeds it, and on a CPU the thread default (the encoder wants the cores itself)."""
        if self._workers_given:
            return self.workers
        cores = os.cpu_count() or 1
        on_gpu = not self.encoder.device.startswith("cpu")
        return max(1, cores - 1) if on_gpu else self.workers

    def _commit(
        self,
        collection_id: int,
        ready: list[tuple[Prepared, np.ndarray]],
        failed: list[Failed],
        coco: Mapping[str, ImageMeta],
    ) -> tuple[np.ndarray, np.ndarray]:
        """Write rows and vectors of one checkpoint in a single transaction
        (`CatalogWriter.commit`); returns the ids and vectors to add to the index."""
        return self._writer.commit(collection_id, ready, failed, coco)
