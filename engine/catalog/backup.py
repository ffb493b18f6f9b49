"""Backups of a library's catalog: the user's queries and judgments are hours of work.

Two kinds, both single SQLite files in `LIBRARY/backups/`, named
`KIND-YYYYMMDD-HHMMSS[-N][-reason].sqlite3` (UTC, so clock changes never reorder them; `N` = 2,
3, ... orders backups made within one second):

- `catalog-…` (*full*): the whole SQLite catalog, a consistent snapshot taken through SQLite's
  online backup API (safe while other connections read and write in WAL mode), in rollback
  journal mode so the one file is everything.
- `judgments-…` (*judgments only*): the user's work without what is rebuilt from the photos,
  from any catalog (SQLite or a PostgreSQL server) in one consistent snapshot; the file is
  `engine.catalog.judgments_backup`'s.

Every backup is written to a hidden temporary file, checked (`PRAGMA integrity_check`) and
only then renamed into place, so a backup file that exists is whole.

*Special* backups, taken before an act that changes many judgments at once (reasons
`before-import`, `before-restore`, `before-forget`, `before-upgrade`, ...: see
`safety_backup`), are kept out of the rotation of session backups: each group is pruned to its
own limit (`DEFAULT_KEEP` newest session/manual backups, `SPECIAL_KEEP` special ones), so a
week of small sessions never rotates away the state before an import. Only files that match
the naming pattern are ever pruned; anything else in `backups/` is left alone.

Taking, naming, rotating and listing backups is this module's; restoring one is
`engine.catalog.restore`'s, and finding the catalog behind a path, URL, engine or library is
`engine.catalog.backup_source`'s.

Plain Python, no Qt. Every failure is a `QuadratError` with a one-line message.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sqlite3
import tempfile
import time
from collections.abc import Callable, Iterator
from collections.abc import Collection as CollectionT
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engine.catalog.backup_source import (
    BUSY_TIMEOUT_S,
    KIND_FULL,
    KIND_JUDGMENTS,
    CatalogRef,
    catalog_engine,
    catalog_errors,
    failure_cause,
    fsync_file,
    integrity,
    is_sqlite_catalog,
    open_read_only,
    sqlite_catalog_file,
)
from engine.catalog.judgments_backup import judgments_to_file
from engine.errors import BadInputError, QuadratError

log = logging.getLogger(__name__)

BACKUP_DIR = "backups"
DEFAULT_KEEP = 5  # session and manual backups kept
SPECIAL_KEEP = 20  # special backups (before an import, restore, forget, upgrade) kept
STALE_TEMP_S = 3600.0
# Above this size a SQLite catalog's special backups are judgments only: a full copy of a
# 5-million-photo catalog is ~10 GB, most of it vectors the photos give back.
LARGE_CATALOG_BYTES = 1 << 30

_PREFIX = {KIND_FULL: "catalog", KIND_JUDGMENTS: "judgments"}
_KIND_OF_PREFIX = {prefix: kind for kind, prefix in _PREFIX.items()}

_NAME_RE = re.compile(
    r"^(?P<prefix>catalog|judgments)-(?P<stamp>\d{8}-\d{6})(?:-(?P<seq>\d+))?"
    r"(?:-(?P<reason>[a-z][a-z0-9-]*))?\.sqlite3$"
)
_STAMP_FORMAT = "%Y%m%d-%H%M%S"

Fingerprint = tuple[Any, ...]


def is_special(reason: str | None) -> bool:
    """Whether a backup of this reason is a special one (kept out of the session rotation)."""
    return bool(reason) and str(reason).startswith("before-")


@dataclass(frozen=True)
class BackupInfo:
    """One backup file. `judgments`/`queries` are None when the file cannot be read."""

    path: Path
    created: datetime  # aware, UTC, from the file name
    size: int  # bytes
    judgments: int | None
    queries: int | None
    reason: str | None
    kind: str = KIND_FULL  # KIND_FULL or KIND_JUDGMENTS

    @property
    def special(self) -> bool:
        return is_special(self.reason)

    def to_json(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "created": self.created.isoformat(timespec="seconds"),
            "size": self.size,
            "judgments": self.judgments,
            "queries": self.queries,
            "reason": self.reason,
            "kind": self.kind,
            "special": self.special,
        }


def backups_dir(library_root: str | os.PathLike[str]) -> Path:
    """The folder of a library's backups."""
    return Path(library_root) / BACKUP_DIR


def choose_kind(catalog: CatalogRef) -> str:
    """The kind of a special backup: judgments only for a server catalog or a large SQLite
    file (over `LARGE_CATALOG_BYTES` with its -wal), a full copy otherwise."""
    if not is_sqlite_catalog(catalog):
        return KIND_JUDGMENTS
    path = sqlite_catalog_file(catalog)
    size = 0
    for part in (path, path.with_name(path.name + "-wal")):
        with contextlib.suppress(OSError):
            size += part.stat().st_size
    return KIND_JUDGMENTS if size > LARGE_CATALOG_BYTES else KIND_FULL


# -- backing up -------------------------------------------------------------------------------


def backup_catalog(
    library_root: str | os.PathLike[str],
    catalog_path: CatalogRef,
    *,
    keep: int = DEFAULT_KEEP,
    reason: str = "session",
    protect: CollectionT[Path] = (),
) -> Path:
    """Copy the live SQLite catalog to `LIBRARY/backups/` and prune old backups (`keep` of the
    session rotation; special ones to `SPECIAL_KEEP`).

    Safe while other connections (the window, an indexing run) read or write the catalog.
    `protect` names backups pruning must not delete (the one a restore is reading).
    Returns the new backup's path.
    """
    if keep < 1:
        raise BadInputError(f"keep at least 1 backup, not {keep}")
    source = sqlite_catalog_file(catalog_path)
    if not source.is_file():
        raise QuadratError(f"no catalog to back up at {source}")
    target = write_backup(library_root, KIND_FULL, reason, lambda temp: _copy_to_file(source, temp))
    prune_backups(library_root, keep, protect={target, *protect})
    return target


def backup_judgments(
    library_root: str | os.PathLike[str],
    catalog: CatalogRef,
    *,
    keep: int = DEFAULT_KEEP,
    reason: str = "manual",
    protect: CollectionT[Path] = (),
) -> Path:
    """Write a judgments-only backup of any catalog (SQLite or server) to `LIBRARY/backups/`
    from one consistent snapshot, and prune old backups. Returns its path."""
    if keep < 1:
        raise BadInputError(f"keep at least 1 backup, not {keep}")
    with catalog_engine(catalog) as engine, catalog_errors(catalog), engine.connect() as conn:
        if conn.dialect.name == "postgresql":
            # One snapshot for every table, so a run and its results, a judgment and its
            # event agree, while other workstations go on judging.
            conn = conn.execution_options(isolation_level="REPEATABLE READ")
        with conn.begin():
            target = write_backup(
                library_root, KIND_JUDGMENTS, reason, lambda temp: judgments_to_file(conn, temp)
            )
    prune_backups(library_root, keep, protect={target, *protect})
    return target


def safety_backup(
    library_root: str | os.PathLike[str],
    catalog: CatalogRef,
    reason: str,
    *,
    kind: str | None = None,
) -> Path:
    """The backup taken before an operation that changes many judgments at once (an import,
    a restore, forgetting photos, a schema upgrade); `reason` names it ("before-import").

    A special backup: kept out of the session rotation (`SPECIAL_KEEP` of them are kept).
    Judgments only on a server catalog or a large one (`choose_kind`), else a full copy; a
    server catalog's safety backup goes to the workstation's library folder. `catalog` may be
    a path, a URL, an Engine, a `Catalog` or a `Library`. Raises `QuadratError` when it cannot
    be written: the operation must then not run."""
    reason = reason if is_special(reason) else f"before-{_reason_slug(reason) or 'change'}"
    kind = kind or choose_kind(catalog)
    if kind == KIND_JUDGMENTS:
        return backup_judgments(library_root, catalog, reason=reason)
    return backup_catalog(library_root, catalog, reason=reason)


def write_backup(
    library_root: str | os.PathLike[str], kind: str, reason: str, fill: Callable[[Path], None]
) -> Path:
    """A new backup file: `fill` writes the empty temporary file, which is then renamed into
    place (and the folder synced). Failures are one-line `QuadratError`s, no file left."""
    folder = backups_dir(library_root)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, temp_name = tempfile.mkstemp(dir=folder, prefix=".catalog-", suffix=".tmp")
        os.close(fd)
    except OSError as exc:
        raise QuadratError(f"cannot write a backup in {folder}: {failure_cause(exc)}") from exc
    temp = Path(temp_name)
    try:
        fill(temp)
        target = _unique_name(folder, reason, kind)
        os.replace(temp, target)
        _fsync_dir(folder)
    except BaseException as exc:
        temp.unlink(missing_ok=True)
        if isinstance(exc, QuadratError):
            raise
        if isinstance(exc, (OSError, sqlite3.Error)):
            raise QuadratError(
                f"cannot back up the catalog to {folder}: {failure_cause(exc)}"
            ) from exc
        from sqlalchemy.exc import DBAPIError

        if isinstance(exc, DBAPIError):
            raise QuadratError(
                f"cannot back up the catalog to {folder}: {failure_cause(exc.orig or exc)}"
            ) from exc
        raise
    log.info("catalog backed up to %s", target)
    return target


def _copy_to_file(source: Path, temp: Path) -> None:
    """Snapshot `source` into the empty file `temp` (one backup step: one consistent read)."""
    src = sqlite3.connect(source, timeout=BUSY_TIMEOUT_S)
    try:
        dst = sqlite3.connect(temp)
        try:
            src.backup(dst)  # pages=-1: the whole database under one read transaction
            # A backup is one self-contained file: no -wal/-shm beside it when it is read.
            dst.execute("PRAGMA journal_mode=DELETE").fetchall()
            result = integrity(dst)
            if result != "ok":
                raise QuadratError(f"the backup failed its integrity check ({result})")
        finally:
            dst.close()
    finally:
        src.close()
    fsync_file(temp)


# -- naming and pruning -----------------------------------------------------------------------


def _unique_name(folder: Path, reason: str, kind: str = KIND_FULL) -> Path:
    """A new name that sorts after every backup of the same second (UTC, so no DST repeats)."""
    stamp = datetime.now(UTC).strftime(_STAMP_FORMAT)
    slug = _reason_slug(reason)
    seqs = [
        int(match["seq"] or 1)
        for path in folder.glob(f"*-{stamp}*.sqlite3")
        if (match := _NAME_RE.match(path.name)) and match["stamp"] == stamp
    ]
    seq = max(seqs, default=0) + 1
    middle = "" if seq == 1 else f"-{seq}"
    tail = f"-{slug}" if slug else ""
    return folder / f"{_PREFIX[kind]}-{stamp}{middle}{tail}.sqlite3"


def _reason_slug(reason: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", reason.lower()).strip("-")
    return re.sub(r"^[^a-z]+", "", slug)[:40].strip("-")


def prune_backups(
    library_root: str | os.PathLike[str],
    keep: int,
    protect: CollectionT[Path] = (),
    *,
    special_keep: int = SPECIAL_KEEP,
) -> list[Path]:
    """Delete all but the newest `keep` session/manual backups and the newest `special_keep`
    special ones (files named as Quadrat names them; never anything else, never a `protect`ed
    one). Returns what was deleted."""
    protected = {_resolved(p) for p in protect}
    _remove_stale_temporaries(backups_dir(library_root))
    files = _backup_files(library_root)
    regular = [path for path in files if not is_special(_reason_of(path))]
    special = [path for path in files if is_special(_reason_of(path))]
    removed = []
    for path in regular[keep:] + special[special_keep:]:
        if _resolved(path) in protected:
            continue
        try:
            path.unlink()
        except OSError as exc:  # pruning is housekeeping: a failure must not lose the backup
            log.warning("could not delete old backup %s: %s", path, exc)
            continue
        removed.append(path)
        log.info("deleted old backup %s", path)
    return removed


def _reason_of(path: Path) -> str | None:
    match = _NAME_RE.match(path.name)
    return match["reason"] if match else None


def _remove_stale_temporaries(folder: Path) -> None:
    """Temporary files of backups a crash interrupted (ours by name, over an hour old)."""
    cutoff = time.time() - STALE_TEMP_S
    for path in folder.glob(".catalog-*.tmp*"):
        try:
            if path.is_file() and path.stat().st_mtime < cutoff:
                path.unlink()
        except OSError:
            pass


def _resolved(path: Path) -> Path:
    try:
        return Path(path).resolve()
    except OSError:
        return Path(path)


def _backup_files(library_root: str | os.PathLike[str]) -> list[Path]:
    """Backup files of both kinds, newest first (order from the name: time, then sequence)."""
    folder = backups_dir(library_root)
    if not folder.is_dir():
        return []
    found = []
    for path in folder.iterdir():
        match = _NAME_RE.match(path.name)
        if match and path.is_file():
            found.append(((match["stamp"], int(match["seq"] or 1)), path))
    found.sort(key=lambda item: item[0], reverse=True)
    return [path for _, path in found]


def list_backups(library_root: str | os.PathLike[str]) -> list[BackupInfo]:
    """The library's backups, newest first, with their counts of judgments and saved queries."""
    out = []
    for path in _backup_files(library_root):
        match = _NAME_RE.match(path.name)
        assert match is not None
        try:
            size = path.stat().st_size
        except OSError:
            continue  # deleted meanwhile
        judgments, queries = _counts_of_file(path)
        out.append(
            BackupInfo(
                path=path,
                created=datetime.strptime(match["stamp"], _STAMP_FORMAT).replace(tzinfo=UTC),
                size=size,
                judgments=judgments,
                queries=queries,
                reason=match["reason"],
                kind=_KIND_OF_PREFIX[match["prefix"]],
            )
        )
    return out


def _counts_of_file(path: Path) -> tuple[int | None, int | None]:
    try:
        conn = open_read_only(path)
    except sqlite3.Error:
        return None, None
    try:
        return catalog_counts(conn)
    except sqlite3.Error:
        return None, None
    finally:
        conn.close()


def catalog_counts(conn: Any) -> tuple[int, int]:
    """(judgments, saved queries) in a catalog: a sqlite3 connection, SQLAlchemy engine or
    connection, `Catalog` or `Library`."""
    with _sql(conn) as execute:
        judgments = int(execute("SELECT count(*) FROM judgments")[0])
        queries = int(execute("SELECT count(*) FROM queries")[0])
    return judgments, queries


# -- knowing whether judgments changed --------------------------------------------------------


def judgment_fingerprint(engine_or_connection: Any) -> Fingerprint:
    """A cheap summary of the `judgments` table that changes when a judgment is added,
    changed, cleared or undone: (count, newest judged_at, sum of relevance, key checksum).

    Takes a SQLAlchemy engine or connection, a `Catalog`, a `Library` or a sqlite3
    connection. Equal fingerprints at open and close mean the session changed no judgment.
    """
    with _sql(engine_or_connection) as execute:
        row = execute(
            "SELECT count(*), max(judged_at), coalesce(sum(relevance), 0), "
            "coalesce(sum((query_id * 1000003 + image_id) % 2147483647), 0) FROM judgments"
        )
    count, newest, relevance, checksum = row
    return (int(count), None if newest is None else str(newest), int(relevance), int(checksum))


def backup_if_changed(
    library_root: str | os.PathLike[str],
    catalog_path: CatalogRef,
    fingerprint_at_open: Fingerprint | None,
    current_fingerprint: Fingerprint | None,
    keep: int = DEFAULT_KEEP,
) -> Path | None:
    """Back up the catalog when the judgments changed since open (reason "session").

    Returns None when nothing changed, or when the catalog is on a server (not ours to back
    up); raises `QuadratError` when the backup cannot be written.
    """
    if fingerprint_at_open == current_fingerprint:
        return None
    if not is_sqlite_catalog(catalog_path):
        log.info("judgments changed; a server catalog is backed up by the server, not here")
        return None
    return backup_catalog(library_root, catalog_path, keep=keep, reason="session")


@contextlib.contextmanager
def _sql(target: Any) -> Iterator[Callable[[str], Any]]:  # yields a one-row query function
    """`execute(sql) -> first row` over a sqlite3 connection or anything SQLAlchemy."""
    if isinstance(target, sqlite3.Connection):
        yield lambda sql: target.execute(sql).fetchone()
        return
    from sqlalchemy import Connection, Engine, text

    target = getattr(target, "catalog", target)  # a Library
    target = getattr(target, "engine", target)  # a Catalog
    if isinstance(target, Connection):
        yield lambda sql: target.execute(text(sql)).one()
        return
    if not isinstance(target, Engine):
        raise TypeError(f"expected a catalog connection or engine, got {type(target).__name__}")
    with target.connect() as conn:
        yield lambda sql: conn.execute(text(sql)).one()


def _fsync_dir(folder: Path) -> None:
    """Flush a folder after a rename into it (POSIX; best effort)."""
    if os.name != "posix":
        return
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
