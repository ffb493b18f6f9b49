"""Backups of a library's SQLite catalog: the user's queries and judgments are hours of work.

Backups live in `LIBRARY/backups/catalog-YYYYMMDD-HHMMSS[-N][-reason].sqlite3` (UTC, so
clock changes never reorder them; `N` = 2, 3, ... orders backups made within one second). Each is a consistent snapshot taken through SQLite's
online backup API, which is safe while other connections read and write the catalog in WAL
mode; it is written to a hidden temporary file, checked with `PRAGMA integrity_check`, and only
then renamed into place, so a backup file that exists is whole. Backups are single files
(rollback journal mode), so copying one elsewhere copies everything.

Only files that match the naming pattern are ever pruned; anything else in `backups/` is left
alone. A server catalog (a PostgreSQL `database_url`) is not backed up here: that is the
server's job (pg_dump).

Plain Python, no Qt. Every failure is a `QuadratError` with a one-line message.
"""

from __future__ import annotations

import contextlib
import errno
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
from typing import TYPE_CHECKING, Any

from engine.errors import BadInputError, QuadratError

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

log = logging.getLogger(__name__)

BACKUP_DIR = "backups"
DEFAULT_KEEP = 5
BUSY_TIMEOUT_S = 10.0
STALE_TEMP_S = 3600.0

_NAME_RE = re.compile(
    r"^catalog-(?P<stamp>\d{8}-\d{6})(?:-(?P<seq>\d+))?(?:-(?P<reason>[a-z][a-z0-9-]*))?\.sqlite3$"
)
_STAMP_FORMAT = "%Y%m%d-%H%M%S"

Fingerprint = tuple[Any, ...]


@dataclass(frozen=True)
class BackupInfo:
    """One backup file. `judgments`/`queries` are None when the file cannot be read."""

    path: Path
    created: datetime  # aware, UTC, from the file name
    size: int  # bytes
    judgments: int | None
    queries: int | None
    reason: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "created": self.created.isoformat(timespec="seconds"),
            "size": self.size,
            "judgments": self.judgments,
            "queries": self.queries,
            "reason": self.reason,
        }


# -- where the catalog is ---------------------------------------------------------------------


def sqlite_catalog_file(catalog: str | os.PathLike[str] | URL) -> Path:
    """The file of a SQLite catalog given as a path, a `sqlite:///` URL or a SQLAlchemy URL.

    Raises `QuadratError` for a server catalog (its backups are the server's job) and for an
    in-memory database.
    """
    if isinstance(catalog, os.PathLike):
        return Path(catalog)
    # Else a str, or a SQLAlchemy URL object (library.catalog.engine.url).
    text = catalog if isinstance(catalog, str) else catalog.render_as_string(hide_password=True)
    if "://" not in text:
        return Path(text)
    from sqlalchemy.engine import make_url

    from engine.catalog.db import sqlite_file_of

    url = make_url(text)
    if url.get_backend_name() != "sqlite":
        raise QuadratError(
            f"the catalog is on a {url.get_backend_name()} server; backing it up is the "
            "server's job (pg_dump), not Quadrat's"
        )
    path = sqlite_file_of(url)
    if path is None:
        raise QuadratError("the catalog is not a file Quadrat can back up")
    return path


def is_sqlite_catalog(catalog: str | os.PathLike[str] | URL) -> bool:
    """True when `catalog` is a SQLite file that `backup_catalog` can copy."""
    try:
        sqlite_catalog_file(catalog)
    except QuadratError:
        return False
    return True


def backups_dir(library_root: str | os.PathLike[str]) -> Path:
    return Path(library_root) / BACKUP_DIR


# -- backing up -------------------------------------------------------------------------------


def backup_catalog(
    library_root: str | os.PathLike[str],
    catalog_path: str | os.PathLike[str] | URL,
    *,
    keep: int = DEFAULT_KEEP,
    reason: str = "session",
    protect: CollectionT[Path] = (),
) -> Path:
    """Copy the live catalog to `LIBRARY/backups/` and prune to the newest `keep` backups.

    Safe while other connections (the window, an indexing run) read or write the catalog.
    `protect` names backups pruning must not delete (the one a restore is reading).
    Returns the new backup's path.
    """
    if keep < 1:
        raise BadInputError(f"keep at least 1 backup, not {keep}")
    source = sqlite_catalog_file(catalog_path)
    if not source.is_file():
        raise QuadratError(f"no catalog to back up at {source}")
    folder = backups_dir(library_root)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, temp_name = tempfile.mkstemp(dir=folder, prefix=".catalog-", suffix=".tmp")
        os.close(fd)
    except OSError as exc:
        raise QuadratError(f"cannot write a backup in {folder}: {_cause(exc)}") from exc
    temp = Path(temp_name)
    try:
        _copy_to_file(source, temp)
        target = _unique_name(folder, reason)
        os.replace(temp, target)
        _fsync_dir(folder)
    except BaseException as exc:
        temp.unlink(missing_ok=True)
        if isinstance(exc, QuadratError):
            raise
        if isinstance(exc, (OSError, sqlite3.Error)):
            raise QuadratError(f"cannot back up the catalog to {folder}: {_cause(exc)}") from exc
        raise
    log.info("catalog backed up to %s", target)
    prune_backups(library_root, keep, protect={target, *protect})
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
            result = _integrity(dst)
            if result != "ok":
                raise QuadratError(f"the backup failed its integrity check ({result})")
        finally:
            dst.close()
    finally:
        src.close()
    with open(temp, "rb+") as handle:
        os.fsync(handle.fileno())


def _unique_name(folder: Path, reason: str) -> Path:
    """A new name that sorts after every backup of the same second (UTC, so no DST repeats)."""
    stamp = datetime.now(UTC).strftime(_STAMP_FORMAT)
    slug = _reason_slug(reason)
    seqs = [
        int(match["seq"] or 1)
        for path in folder.glob(f"catalog-{stamp}*.sqlite3")
        if (match := _NAME_RE.match(path.name))
    ]
    seq = max(seqs, default=0) + 1
    middle = "" if seq == 1 else f"-{seq}"
    tail = f"-{slug}" if slug else ""
    return folder / f"catalog-{stamp}{middle}{tail}.sqlite3"


def _reason_slug(reason: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", reason.lower()).strip("-")
    return re.sub(r"^[^a-z]+", "", slug)[:40].strip("-")


def prune_backups(
    library_root: str | os.PathLike[str], keep: int, protect: CollectionT[Path] = ()
) -> list[Path]:
    """Delete all but the newest `keep` backups (files named as Quadrat names them; never
    anything else, never a `protect`ed one). Returns what was deleted."""
    protected = {_resolved(p) for p in protect}
    _remove_stale_temporaries(backups_dir(library_root))
    removed = []
    for path in _backup_files(library_root)[keep:]:
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
    """Backup files, newest first (order from the name: time, then sequence number)."""
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
            )
        )
    return out


def _open_read_only(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S)


def _counts_of_file(path: Path) -> tuple[int | None, int | None]:
    try:
        conn = _open_read_only(path)
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
    catalog_path: str | os.PathLike[str] | URL,
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


# -- restoring --------------------------------------------------------------------------------


def check_backup(backup: str | os.PathLike[str]) -> None:
    """Raise `BadInputError` (one line) unless `backup` is a whole Quadrat catalog."""
    path = Path(backup)
    if not path.is_file():
        raise BadInputError(f"no backup file at {path}")
    try:
        conn = _open_read_only(path)
        try:
            result = _integrity(conn)
            tables = {
                name
                for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
            }
            revision = None
            if "alembic_version" in tables:
                found = conn.execute("SELECT version_num FROM alembic_version").fetchone()
                revision = found[0] if found else None
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise BadInputError(f"{path} is not a Quadrat catalog backup ({_cause(exc)})") from None
    if result != "ok":
        raise BadInputError(f"{path} is damaged (integrity check: {result})")
    missing = {"judgments", "alembic_version"} - tables
    if missing or revision is None:
        raise BadInputError(f"{path} is not a Quadrat catalog (no {' or '.join(sorted(missing))})")
    if revision not in _known_revisions():
        raise BadInputError(
            f"{path} was written by a newer Quadrat (schema {revision}); update Quadrat first"
        )


def _known_revisions() -> set[str]:
    from alembic.script import ScriptDirectory

    from engine.catalog.db import MIGRATIONS_DIR

    return {s.revision for s in ScriptDirectory(str(MIGRATIONS_DIR)).walk_revisions()}


def restore_catalog(
    library_root: str | os.PathLike[str],
    catalog_path: str | os.PathLike[str] | URL,
    backup: str | os.PathLike[str],
    *,
    keep: int = DEFAULT_KEEP,
) -> Path:
    """Replace the catalog's contents with `backup`; returns the safety backup of the
    catalog as it was (reason "before-restore"), so the restore itself can be undone.

    The caller must hold the library's indexing lock (`with library.writer_lock():`) so no
    indexing run writes meanwhile. The backup is checked first (`BadInputError`, nothing
    changed, when it is not a whole Quadrat catalog), then the current catalog is backed up,
    then the backup is copied into the live catalog through SQLite's backup API, so its WAL and
    any -wal/-shm files stay consistent and other open connections see the restored data.
    The vector index files are repaired at the next open (their ids are compared with the
    catalog); nothing to do here.
    """
    target = sqlite_catalog_file(catalog_path)
    backup = Path(backup)
    check_backup(backup)
    if backup.resolve() == target.resolve():
        raise BadInputError("that is the catalog itself, not a backup")
    safety = backup_catalog(
        library_root, target, keep=keep, reason="before-restore", protect={backup}
    )
    try:
        src = _open_read_only(backup)
        try:
            dst = sqlite3.connect(target, timeout=BUSY_TIMEOUT_S)
            try:
                src.backup(dst)
                dst.execute("PRAGMA journal_mode=WAL").fetchall()
                result = _integrity(dst)
            finally:
                dst.close()
        finally:
            src.close()
    except (OSError, sqlite3.Error) as exc:
        raise QuadratError(
            f"cannot restore the catalog from {backup}: {_cause(exc)}; the catalog as it was "
            f"is in {safety}"
        ) from exc
    if result != "ok":
        raise QuadratError(
            f"the restored catalog failed its integrity check ({result}); the catalog as it "
            f"was is in {safety}"
        )
    log.info("catalog restored from %s; previous state saved in %s", backup, safety)
    return safety


# -- helpers ----------------------------------------------------------------------------------


def _integrity(conn: sqlite3.Connection) -> str:
    rows = conn.execute("PRAGMA integrity_check").fetchall()
    return "; ".join(str(r[0]) for r in rows[:3]) if rows else "no answer"


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


def _cause(exc: BaseException) -> str:
    """The cause of a failure in a few words, on one line."""
    code = getattr(exc, "errno", None)
    if code == errno.ENOSPC or "disk is full" in str(exc):
        return "the disk is full"
    if code in (errno.EACCES, errno.EPERM, errno.EROFS) or "readonly" in str(exc):
        return "no permission to write there (read-only)"
    text = str(exc) or type(exc).__name__
    if isinstance(exc, OSError) and exc.strerror:
        text = exc.strerror
    return " ".join(text.split())


def _fsync_dir(folder: Path) -> None:
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
