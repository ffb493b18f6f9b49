"""The indexing pipeline: scan a folder, decode in a thread pool, encode in batches, and commit
catalog rows together with their vectors at checkpoints.

Resumable by construction: a new photo's row and its vector are written in the same SQLite
transaction, so after a crash or kill the next run simply finds the photos that have no row yet.
The FAISS file is updated after each commit and saved now and then; the library repairs it from
the catalog at open if the process died in between.
"""

from __future__ import annotations

import itertools
import logging
import os
import time
from collections import deque
from collections.abc import Callable, Container, Generator, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import numpy as np
from sqlalchemy import delete, func, insert, or_, select, update
from sqlalchemy.orm import Session

from engine.catalog import Collection, Embedding, Image, Judgment, Taxon
from engine.catalog.db import catalog_faults
from engine.catalog.library import Library
from engine.catalog.models import STATUS_MISSING, STATUS_OK, STATUS_SKIPPED, utcnow
from engine.errors import BadImageError, BadInputError, Cancelled, QuadratError
from engine.indexing.collections import CatalogRow, FolderRows
from engine.indexing.scan import (
    DecodeBudget,
    DecodedImage,
    FileEntry,
    ImageMeta,
    MetadataStore,
    TaxonInfo,
    content_hash,
    decode_image,
    find_metadata_file,
    ignored_metadata_line,
    local_time_and_offset,
    metadata_key,
    taxon_for_path,
    walk_images,
)
from engine.models.encoders import Encoder
from engine.progress import CancelToken, Progress, ProgressCallback, RateMeter, no_progress

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

CPU_CANCEL_SLICE = 8  # photos encoded between two cancel checks on a CPU

T = TypeVar("T")


@dataclass(frozen=True)
class SkippedFile:
    path: str
    reason: str


@dataclass
class IndexReport:
    """What one indexing run did. Counts follow docs/SPEC.md §5.3 (`quadrat index --json`)."""

    collection: str
    total_files: int = 0
    indexed: int = 0  # encoded in this run: new, changed, or pending for this model
    unchanged: int = 0  # already indexed and untouched (moved and returned files included)
    moved: int = 0  # renamed or moved files recognised by content, vectors kept
    returned: int = 0  # photos that were missing and came back: their id and judgments too
    missing: int = 0  # went missing from disk in this run: kept, with their judgments
    still_missing: int = 0  # photos of the collection missing from disk after the run
    judgments_on_missing: int = 0  # judgments kept on those photos
    removed: int = 0  # missing photos forgotten in this run (only with `prune`)
    relocated_from: str | None = None  # the collection's old root, when it was moved here
    metadata_problems: int = 0  # metadata records whose unusable values were ignored
    metadata_values_ignored: int = 0  # impossible values dropped (latitude "north", month 13)
    metadata_records_ignored: int = 0  # records skipped whole (not an object, no file_name)
    metadata_examples: list[str] = field(default_factory=list)  # the first few, also logged
    skipped: list[SkippedFile] = field(default_factory=list)  # each a catalog row, skipped
    # Found but given no catalog row: links leading out of the collection, names that are not
    # valid Unicode, unreadable folders (their paths printable, see `scan.printable_name`).
    passed_over: list[SkippedFile] = field(default_factory=list)
    cancelled: bool = False
    seconds: float = 0.0
    # Read back from the catalog after the last checkpoint, not counted along the way.
    catalog_indexed: int = 0
    catalog_skipped: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "collection": self.collection,
            "indexed": self.indexed,
            "skipped": [{"path": s.path, "reason": s.reason} for s in self.all_skipped()],
            "unchanged": self.unchanged,
            "removed": self.removed,
            "moved": self.moved,
            "returned": self.returned,
            "missing": self.missing,
            "still_missing": self.still_missing,
            "judgments_on_missing": self.judgments_on_missing,
            "relocated_from": self.relocated_from,
            "metadata_problems": self.metadata_problems,
            "metadata_values_ignored": self.metadata_values_ignored,
            "metadata_records_ignored": self.metadata_records_ignored,
            "metadata_examples": list(self.metadata_examples),
            "catalog": {"indexed": self.catalog_indexed, "skipped": self.catalog_skipped},
            "total_files": self.total_files,
            "cancelled": self.cancelled,
            "seconds": round(self.seconds, 3),
        }

    def summary(self) -> str:
        state = "cancelled" if self.cancelled else "done"
        parts = [
            f"{state}: {self.indexed} indexed, {self.unchanged} unchanged, {self.moved} moved",
        ]
        if self.returned:
            parts.append(f"{self.returned} came back")
        if self.removed:
            parts.append(f"{self.removed} missing forgotten")
        parts.append(f"{len(self.skipped) + len(self.passed_over)} skipped ({self.seconds:.1f} s)")
        lines = [", ".join(parts)]
        if self.relocated_from:
            lines.append(
                f"the collection moved from {self.relocated_from}: its photos, ids and "
                "judgments followed it"
            )
        if self.still_missing:
            lines.append(missing_photos_line(self.still_missing, self.judgments_on_missing))
        if self.metadata_problems:
            lines.append(f"{self.metadata_line()} (examples in the log)")
        return "\n".join(lines)

    def all_skipped(self) -> list[SkippedFile]:
        """Every file or folder the run left out, with its reason: the catalog's skipped
        photos, then what the walk passed over."""
        return [*self.skipped, *self.passed_over]

    def metadata_line(self) -> str:
        """How much of the metadata file was ignored, in words ("" when nothing was)."""
        if not self.metadata_problems:
            return ""
        line = ignored_metadata_line(self.metadata_values_ignored, self.metadata_records_ignored)
        # A tally from an older reader may lack the split: the record count still says it.
        return line or f"{self.metadata_problems} metadata records had values that were ignored"

    def status_line(self) -> str:
        """The summary in one short line, for a status bar."""
        line = self.summary().splitlines()[0]
        if self.relocated_from:
            line += f"; moved from {self.relocated_from}"
        if self.still_missing:
            line += f"; {self.still_missing} missing from disk (judgments kept)"
        if self.metadata_problems:
            line += f"; {self.metadata_line()} (examples in the log)"
        return line


def missing_photos_line(missing: int, judgments: int) -> str:
    """One line telling the user that photos are gone from disk and nothing of them is lost."""
    kept = f"their {judgments} judgments are kept" if judgments else "they are kept"
    return (
        f"{missing} photos are missing from disk and left out of search; {kept} and come back "
        "with the files (quadrat forget drops them for good)"
    )


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


@dataclass(slots=True)
class _Row:
    id: int
    size: int
    mtime_ns: int
    content_hash: str | None
    status: str
    skip_reason: str | None


@dataclass
class _Job:
    entry: FileEntry
    image_id: int | None  # existing catalog row to update, or None for a new photo
    known_hash: str | None = None


@dataclass
class _Prepared:
    job: _Job
    content_hash: str
    width: int
    height: int
    exif: Any
    tensor: torch.Tensor | np.ndarray  # what `Encoder.preprocess` returned


@dataclass
class _Failed:
    job: _Job
    reason: str
    content_hash: str | None


# What an encoding stream yields: photos done, encoded photos with their vectors, failed ones.
Encoded = tuple[int, list[tuple[_Prepared, np.ndarray]], list[_Failed]]


@dataclass(frozen=True)
class PhotoFailure:
    """Why a photo cannot be indexed (its skip reason), and its content hash when known."""

    reason: str
    content_hash: str | None


def read_photo(
    path: Path,
    known_hash: str | None,
    min_side: int | None,
    transform: Callable[[Any], T],
    budget: DecodeBudget | None = None,
) -> tuple[str, DecodedImage, T] | PhotoFailure:
    """Hash, decode, orient and `transform` one photo (the encoder's preprocess, for one).

    Every unusable file becomes a `PhotoFailure` whose reason is the skip reason the catalog
    records; nothing raises, so one odd file never stops a run. Decodes share `budget` (the
    process's default when None), which bounds their memory together."""
    digest = known_hash
    try:
        if digest is None:
            digest = content_hash(path)
        # Large photos decode at reduced scale when the model wants far fewer pixels.
        decoded = decode_image(path, min_side=min_side, budget=budget)
        return digest, decoded, transform(decoded.image)
    except BadImageError as exc:
        return PhotoFailure(exc.reason, digest)
    except OSError as exc:
        return PhotoFailure(f"cannot read file: {exc.strerror or exc}", digest)
    except Exception as exc:  # one odd file must never stop the run
        log.exception("unexpected error preparing %s", path)
        return PhotoFailure(f"unexpected error: {exc}", digest)


def _status_counts(session: Session, collection_id: int) -> dict[str, int]:
    """The collection's photos in the catalog, counted per status."""
    rows = session.execute(
        select(Image.status, func.count())
        .where(Image.collection_id == collection_id)
        .group_by(Image.status)
    ).all()
    return {str(status): int(count) for status, count in rows}


# -- the plan: what a scan found, file by file, before anything is written ----------------------


class RowLookup(Protocol):
    """The catalog's rows of a collection as a folder walk asks for them (`FolderRows`)."""

    def take(self, rel_path: str) -> CatalogRow | None: ...

    def untaken(self) -> dict[str, CatalogRow]: ...


# The content hashes of some files, by relative path (None: the file could not be read).
HashFiles = Callable[[list[FileEntry]], Mapping[str, str | None]]

PLAN_CANCEL_EVERY = 4096  # files walked between two cancel checks


@dataclass
class FilePlan:
    """Every walked file sorted against the catalog: a plain value, nothing written yet.

    A file is new (a job without a row), unchanged (size and mtime, or content, as the catalog
    has them), changed (a job on its row), moved (a new path whose content is a vanished row's),
    skipped before, or back after being missing; a row no file claimed is gone."""

    total_files: int = 0
    jobs: list[_Job] = field(default_factory=list)  # to encode, in walk order then new files
    unchanged: int = 0  # already encoded with this model (touched, moved and returned included)
    moved: int = 0  # new paths taken back by content
    returned: int = 0  # rows that were missing and whose file is on disk again
    skipped: list[SkippedFile] = field(default_factory=list)  # skipped before, not changed since
    relinked: list[tuple[int, FileEntry]] = field(default_factory=list)  # row -> its file now
    restored: list[int] = field(default_factory=list)  # missing rows back with their vectors
    gone: list[int] = field(default_factory=list)  # rows whose file is gone: now missing


def classify_files(
    entries: Iterable[FileEntry],
    rows: AbstractContextManager[RowLookup],
    embedded: Container[int],
    hash_files: HashFiles,
    check: Callable[[], None] = lambda: None,
) -> FilePlan:
    """Sort the walked `entries` against the catalog `rows` (held open only for the walk) into a
    `FilePlan`. `embedded` holds the ids with a vector of this model; `hash_files` is asked
    only for files whose size or mtime changed and, when rows vanished, for new files (a
    touched file is not re-encoded, a moved one keeps its row). `check` may raise to cancel."""
    plan = FilePlan()
    with rows as lookup:
        new, changed = _sort_by_stat(plan, entries, lookup, embedded, check)
        check()
        vanished = {path: _Row(*found) for path, found in lookup.untaken().items()}
    _sort_changed(plan, changed, embedded, hash_files)
    _take_moves(plan, new, vanished, embedded, hash_files)
    plan.gone = [row.id for row in vanished.values() if row.status != STATUS_MISSING]
    return plan


def _sort_by_stat(
    plan: FilePlan,
    entries: Iterable[FileEntry],
    lookup: RowLookup,
    embedded: Container[int],
    check: Callable[[], None],
) -> tuple[list[FileEntry], list[tuple[FileEntry, _Row]]]:
    """The walk's pass: files with a row of the same size and mtime are settled now; returns
    the files without a row and those whose size or mtime differ."""
    new: list[FileEntry] = []
    changed: list[tuple[FileEntry, _Row]] = []
    for entry in entries:
        plan.total_files += 1
        if plan.total_files % PLAN_CANCEL_EVERY == 0:
            check()  # walking millions of files takes a while
        found = lookup.take(entry.rel_path)
        if found is None:
            new.append(entry)
            continue
        row = _Row(*found)
        if row.size == entry.size and row.mtime_ns == entry.mtime_ns:
            _known_content(plan, entry, row, embedded)
        else:
            changed.append((entry, row))
    return new, changed


def _known_content(plan: FilePlan, entry: FileEntry, row: _Row, embedded: Container[int]) -> None:
    """A file whose content the catalog already knows: skipped before, indexed, pending for
    this model, or missing until now (it takes its row back)."""
    if row.status == STATUS_MISSING:
        plan.returned += 1
        if row.id in embedded:
            plan.restored.append(row.id)
            plan.unchanged += 1
        else:  # never encoded with this model (or skipped before): try it now
            plan.jobs.append(_Job(entry, row.id, row.content_hash))
    elif row.status == STATUS_SKIPPED:
        plan.skipped.append(SkippedFile(entry.rel_path, row.skip_reason or "skipped"))
    elif row.id in embedded:
        plan.unchanged += 1
    else:
        plan.jobs.append(_Job(entry, row.id, row.content_hash))


def _sort_changed(
    plan: FilePlan,
    changed: list[tuple[FileEntry, _Row]],
    embedded: Container[int],
    hash_files: HashFiles,
) -> None:
    """Size or mtime differ: the content hash decides (a touched file is not re-encoded)."""
    if not changed:
        return
    hashes = hash_files([e for e, _ in changed])
    for entry, row in changed:
        digest = hashes[entry.rel_path]
        if digest is not None and digest == row.content_hash and row.id in embedded:
            plan.relinked.append((row.id, entry))
            plan.unchanged += 1
            if row.status == STATUS_MISSING:
                plan.returned += 1
                plan.restored.append(row.id)
        else:
            if row.status == STATUS_MISSING:
                plan.returned += 1
            plan.jobs.append(_Job(entry, row.id, digest))


def _take_moves(
    plan: FilePlan,
    new: list[FileEntry],
    vanished: dict[str, _Row],
    embedded: Container[int],
    hash_files: HashFiles,
) -> None:
    """Vanished rows may be moved files: a new file with a vanished row's content takes that
    row (out of `vanished`); the files still new become jobs, with their hash when known."""
    new_hashes: Mapping[str, str | None] = {}
    if vanished and new:
        new_hashes = hash_files(new)
        by_hash: dict[str, list[str]] = {}
        for path, row in vanished.items():
            if row.content_hash:
                by_hash.setdefault(row.content_hash, []).append(path)
        still_new = []
        for entry in new:
            candidates = by_hash.get(new_hashes.get(entry.rel_path) or "", [])
            if candidates:
                row = vanished.pop(candidates.pop(0))
                plan.relinked.append((row.id, entry))
                plan.moved += 1
                _known_content(plan, entry, row, embedded)
            else:
                still_new.append(entry)
        new = still_new
    plan.jobs.extend(_Job(e, None, new_hashes.get(e.rel_path)) for e in new)


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
    ) -> None:
        """`decode_memory`: bytes that the photos being decoded may take together, whatever
        the number of `workers` (default: the process's shared `scan.DEFAULT_DECODE_MEMORY`)."""
        if batch_size < 1:
            raise BadInputError("batch size must be at least 1")
        self.library = library
        self.encoder = encoder
        self.batch_size = batch_size
        self.workers = workers if workers and workers > 0 else min(4, os.cpu_count() or 1)
        if checkpoint_every is None:
            # Tunable from the environment so crash tests can make checkpoints frequent.
            checkpoint_every = int(os.environ.get("QUADRAT_CHECKPOINT_EVERY", "256"))
        self.checkpoint_every = max(checkpoint_every, batch_size)
        self.index_save_seconds = index_save_seconds
        self._decode_budget = DecodeBudget(decode_memory) if decode_memory else None
        self.model_key: str = encoder.model_key
        self._taxon_ids: dict[str, int] = {}
        self._min_side: int | None = getattr(encoder, "image_size", None)
        self._claimed: set[int] = set()  # rows taken back by content in the current run
        self._returned_elsewhere = 0  # of them, rows that came from another path
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

        self._claimed = set()
        self._returned_elsewhere = 0
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
        report.returned += self._returned_elsewhere
        if prune and not report.cancelled:
            from engine.indexing.collections import forget_missing

            report.removed = forget_missing(self.library, collection_id).photos
        self._read_back(collection_id, report)
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
    ) -> list[_Job]:
        """Sort files into unchanged, to encode, moved, returned and missing (`classify_files`),
        apply that, and return the files to encode. Counts the files into `report`."""
        plan = classify_files(entries, rows, embedded, self._hash_many, cancel.check)
        report.total_files = plan.total_files
        report.unchanged += plan.unchanged
        report.moved += plan.moved
        report.returned += plan.returned
        report.skipped.extend(plan.skipped)
        self._apply_plan(plan, index)
        if plan.gone:
            report.missing = len(plan.gone)
        return plan.jobs

    def _apply_plan(self, plan: FilePlan, index: Any) -> None:
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

    # -- encoding ----------------------------------------------------------------------------

    def _prepare(self, job: _Job) -> _Prepared | _Failed:
        """Runs in a worker thread: hash, decode, orient and preprocess one photo."""
        read = read_photo(
            job.entry.abs_path,
            job.known_hash,
            self._min_side,
            self.encoder.preprocess,
            self._decode_budget,
        )
        if isinstance(read, PhotoFailure):
            return _Failed(job, read.reason, read.content_hash)
        digest, decoded, tensor = read
        return _Prepared(job, digest, decoded.width, decoded.height, decoded.exif, tensor)

    def _prepared_stream(
        self, jobs: list[_Job], cancel: CancelToken
    ) -> Iterable[_Prepared | _Failed]:
        """Yield prepared photos in order, keeping a bounded number of decodes in flight."""
        in_flight: deque[Future[_Prepared | _Failed]] = deque()
        ahead = self.batch_size * 3
        pool = ThreadPoolExecutor(self.workers, thread_name_prefix="quadrat-decode")
        try:
            job_iter = iter(jobs)
            for job in job_iter:
                in_flight.append(pool.submit(self._prepare, job))
                if len(in_flight) >= ahead:
                    break
            for job in job_iter:
                cancel.check()
                yield in_flight.popleft().result()
                in_flight.append(pool.submit(self._prepare, job))
            while in_flight:
                cancel.check()
                yield in_flight.popleft().result()
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def _encoded_stream(
        self, jobs: list[_Job], cancel: CancelToken
    ) -> Generator[Encoded, None, None]:
        """Decode in threads and encode in batches, in job order. Yields (photos done, newly
        encoded photos with their vectors, newly failed photos); `Cancelled` may end it."""
        batch: list[_Prepared] = []
        # On a CPU a batch of a real CLIP model takes seconds; encoding it in slices with a
        # cancel check between them keeps Cancel responsive within about a second.
        on_cpu = self.encoder.device.startswith("cpu")
        slice_size = min(self.batch_size, CPU_CANCEL_SLICE) if on_cpu else self.batch_size

        def encode_batch() -> Iterator[Encoded]:
            while batch:
                part = batch[:slice_size]
                vectors = self.encoder.encode_preprocessed([p.tensor for p in part])
                del batch[: len(part)]
                yield 0, list(zip(part, vectors, strict=True)), []
                if batch:
                    cancel.check()

        for item in self._prepared_stream(jobs, cancel):
            if isinstance(item, _Failed):
                yield 1, [], [item]
                continue
            batch.append(item)
            if len(batch) >= self.batch_size:
                yield from encode_batch()
            yield 1, [], []
        yield from encode_batch()

    def _encode_all(
        self,
        collection_id: int,
        jobs: list[_Job],
        coco: Mapping[str, ImageMeta],
        index: Any,
        report: IndexReport,
        progress: ProgressCallback,
        cancel: CancelToken,
    ) -> None:
        """Commit what `_encoded_stream` yields, a checkpoint at a time, reporting progress."""
        meter = RateMeter(len(jobs))
        ready: list[tuple[_Prepared, np.ndarray]] = []
        failed: list[_Failed] = []
        done = 0
        last_save = time.monotonic()
        progress(meter.update(0, "indexing"))

        committing = False  # a failed commit is not retried: its error is the one to report

        def checkpoint() -> None:
            nonlocal last_save, committing
            committing = True
            ids, vectors = self._commit(collection_id, ready, failed, coco)
            committing = False
            if len(ids):
                index.add(ids, vectors)
            report.indexed += len(ready)
            report.skipped.extend(SkippedFile(f.job.entry.rel_path, f.reason) for f in failed)
            ready.clear()
            failed.clear()
            if time.monotonic() - last_save > self.index_save_seconds:
                self.library.save_index(self.model_key)
                last_save = time.monotonic()

        stream = self._encoded_stream(jobs, cancel)
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
            checkpoint()  # keep every photo that was already encoded
            raise
        except BaseException:
            if not committing:  # an encoder or decode failure: keep what was encoded before it
                try:
                    checkpoint()
                except Exception:
                    log.info("could not keep the last photos of a failed run", exc_info=True)
            raise
        finally:
            stream.close()  # stops the decode threads (or a cluster's pipeline) at once
        checkpoint()
        progress(meter.update(done, "done"))

    def _commit(
        self,
        collection_id: int,
        ready: list[tuple[_Prepared, np.ndarray]],
        failed: list[_Failed],
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
        self._returned_elsewhere += reclaimed
        if not ids:
            return np.zeros(0, dtype=np.int64), np.zeros((0, self.encoder.dim), dtype=np.float32)
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

    def _upsert_image(self, s: Session, collection_id: int, job: _Job, digest: str | None) -> Image:
        img = s.get(Image, job.image_id) if job.image_id is not None else None
        if img is None:
            img = Image(collection_id=collection_id, rel_path=job.entry.rel_path)
            s.add(img)
        img.rel_path = job.entry.rel_path
        img.size, img.mtime_ns, img.content_hash = job.entry.size, job.entry.mtime_ns, digest
        return img

    def _apply_metadata(self, s: Session, img: Image, meta: ImageMeta | None, exif: Any) -> None:
        """Metadata precedence: the COCO file, then EXIF, then the iNat folder name."""
        taxon = (meta.taxon if meta else None) or taxon_for_path(img.rel_path)
        img.taxon_id = self._taxon_id(s, taxon) if taxon else None
        img.observed_at, img.observed_utc_offset = local_time_and_offset(
            (meta.observed_at if meta else None) or (exif.observed_at if exif else None)
        )
        lat = meta.latitude if meta else None
        lon = meta.longitude if meta else None
        if (lat is None or lon is None) and exif is not None:
            lat, lon = exif.latitude, exif.longitude
        img.latitude, img.longitude = lat, lon
        if meta is not None:
            img.location_uncertainty = meta.location_uncertainty
            img.license = meta.license
            img.rights_holder = meta.rights_holder
            img.external_id = meta.external_id
            img.notes = meta.notes

    def _taxon_id(self, s: Session, info: TaxonInfo) -> int:
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
