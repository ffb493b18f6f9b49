"""The plan of an indexing run, a pure value: `classify_files` sorts the walked files against
the catalog's rows into a `FilePlan` (files to encode as `Job`s, unchanged, moved, returned,
skipped, re-pointed, restored and gone rows). Nothing here writes; the indexer applies the plan."""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Protocol

from engine.catalog.models import STATUS_MISSING, STATUS_SKIPPED
from engine.indexing.collections import CatalogRow
from engine.indexing.report import SkippedFile
from engine.indexing.walk import FileEntry


@dataclass(slots=True)
class _Row:
    """A catalog row as the plan reads it (a `CatalogRow` by field name)."""

    id: int
    size: int
    mtime_ns: int
    content_hash: str | None
    status: str
    skip_reason: str | None


@dataclass
class Job:
    """A file to hash, decode and encode, and the catalog row it will write to."""

    entry: FileEntry
    image_id: int | None  # existing catalog row to update, or None for a new photo
    known_hash: str | None = None


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
    jobs: list[Job] = field(default_factory=list)  # to encode, in walk order then new files
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
            plan.jobs.append(Job(entry, row.id, row.content_hash))
    elif row.status == STATUS_SKIPPED:
        plan.skipped.append(SkippedFile(entry.rel_path, row.skip_reason or "skipped"))
    elif row.id in embedded:
        plan.unchanged += 1
    else:
        plan.jobs.append(Job(entry, row.id, row.content_hash))


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
            plan.jobs.append(Job(entry, row.id, digest))


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
    plan.jobs.extend(Job(e, None, new_hashes.get(e.rel_path)) for e in new)
