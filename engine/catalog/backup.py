"""Backups of a library's catalog: the user's queries and judgments are hours of work.

Two kinds, both single SQLite files in `LIBRARY/backups/`, named
`KIND-YYYYMMDD-HHMMSS[-N][-reason].sqlite3` (UTC, so clock changes never reorder them; `N` = 2,
3, ... orders backups made within one second):

- `catalog-…` (*full*): the whole SQLite catalog, a consistent snapshot taken through SQLite's
  online backup API (safe while other connections read and write in WAL mode), in rollback
  journal mode so the one file is everything.
- `judgments-…` (*judgments only*): the user's work without what is rebuilt from the photos
  (no vectors, no image metadata): queries, runs and run results, judgments and their events,
  subqueries and their per-photo answers, plus each referenced photo's collection root and
  relative path. Read through SQLAlchemy from any catalog (SQLite or a PostgreSQL server) in
  one consistent snapshot, so a 5-million-photo or shared catalog is backed up in megabytes.
  Restoring one replaces only those tables, matching photos by collection root and path.

Every backup is written to a hidden temporary file, checked (`PRAGMA integrity_check`) and
only then renamed into place, so a backup file that exists is whole.

*Special* backups, taken before an act that changes many judgments at once (reasons
`before-import`, `before-restore`, `before-forget`, `before-upgrade`, ...: see
`safety_backup`), are kept out of the rotation of session backups: each group is pruned to its
own limit (`DEFAULT_KEEP` newest session/manual backups, `SPECIAL_KEEP` special ones), so a
week of small sessions never rotates away the state before an import. Only files that match
the naming pattern are ever pruned; anything else in `backups/` is left alone.

A restore is one exclusive step: the catalog's write lock is held from before the safety
backup of the current state until the restored data is committed, so every judgment committed
before the restore is in the safety backup and every one after lands in the restored catalog.

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
    from sqlalchemy import Connection, Engine, MetaData
    from sqlalchemy.engine import URL

log = logging.getLogger(__name__)

BACKUP_DIR = "backups"
DEFAULT_KEEP = 5  # session and manual backups kept
SPECIAL_KEEP = 20  # special backups (before an import, restore, forget, upgrade) kept
BUSY_TIMEOUT_S = 10.0
STALE_TEMP_S = 3600.0
# Above this size a SQLite catalog's special backups are judgments only: a full copy of a
# 5-million-photo catalog is ~10 GB, most of it vectors the photos give back.
LARGE_CATALOG_BYTES = 1 << 30

KIND_FULL = "full"
KIND_JUDGMENTS = "judgments"
_PREFIX = {KIND_FULL: "catalog", KIND_JUDGMENTS: "judgments"}
_KIND_OF_PREFIX = {prefix: kind for kind, prefix in _PREFIX.items()}
# The user's work in a judgments-only backup, parents before children.
JUDGMENT_TABLES = (
    "queries",
    "runs",
    "run_results",
    "judgments",
    "judgment_events",
    "subqueries",
    "subquery_scores",
)
_IMAGE_TABLES = ("judgments", "judgment_events", "run_results", "subquery_scores")
_SERIAL_TABLES = ("queries", "runs", "judgment_events", "subqueries")
_ROWS_PER_BATCH = 2000
_MATCH_BATCH = 500  # paths per lookup of live photos (under SQLite's bound-parameter limit)

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


@dataclass(frozen=True)
class Restored:
    """What a restore did. `unmatched_photos`: photos of a judgments-only backup that this
    catalog does not have (by collection root and path); `dropped_judgments` were on them."""

    safety: Path  # the catalog as it was, to undo the restore
    kind: str
    unmatched_photos: int = 0
    dropped_judgments: int = 0


# -- where the catalog is ---------------------------------------------------------------------

CatalogRef = Any  # a path, a URL (str or SQLAlchemy), an Engine, a Catalog or a Library


def _url_of(catalog: CatalogRef) -> URL | None:
    """The SQLAlchemy URL (password included) of a catalog given as an object, else None."""
    from sqlalchemy import Engine
    from sqlalchemy.engine import URL as UrlType

    if isinstance(catalog, UrlType):
        return catalog
    target = getattr(catalog, "catalog", catalog)  # a Library
    target = getattr(target, "engine", target)  # a Catalog
    if isinstance(target, Engine):
        return target.url
    return None


def _text_of(catalog: CatalogRef) -> str:
    url = _url_of(catalog)
    if url is not None:
        return url.render_as_string(hide_password=True)
    return os.fspath(catalog)


def sqlite_catalog_file(catalog: CatalogRef) -> Path:
    """The file of a SQLite catalog given as a path, a `sqlite:///` URL, a SQLAlchemy URL or
    engine, a `Catalog` or a `Library`.

    Raises `QuadratError` for a server catalog (a full copy of it is the server's job) and for
    an in-memory database.
    """
    if isinstance(catalog, os.PathLike):
        return Path(catalog)
    text = _text_of(catalog)
    if "://" not in text:
        return Path(text)
    from sqlalchemy.engine import make_url

    from engine.catalog.db import sqlite_file_of

    url = make_url(text)
    if url.get_backend_name() != "sqlite":
        raise QuadratError(
            f"the catalog is on a {url.get_backend_name()} server; a full copy of it is the "
            "server's job (pg_dump), not Quadrat's (a judgments-only backup is possible)"
        )
    path = sqlite_file_of(url)
    if path is None:
        raise QuadratError("the catalog is not a file Quadrat can back up")
    return path


def is_sqlite_catalog(catalog: CatalogRef) -> bool:
    """True when `catalog` is a SQLite file that `backup_catalog` can copy."""
    try:
        sqlite_catalog_file(catalog)
    except QuadratError:
        return False
    return True


def backups_dir(library_root: str | os.PathLike[str]) -> Path:
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
    target = _write_backup(
        library_root, KIND_FULL, reason, lambda temp: _copy_to_file(source, temp)
    )
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
    with _engine(catalog) as engine, _catalog_errors(catalog), engine.connect() as conn:
        if conn.dialect.name == "postgresql":
            # One snapshot for every table, so a run and its results, a judgment and its
            # event agree, while other workstations go on judging.
            conn = conn.execution_options(isolation_level="REPEATABLE READ")
        with conn.begin():
            target = _write_backup(
                library_root, KIND_JUDGMENTS, reason, lambda temp: _judgments_to_file(conn, temp)
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


def _write_backup(
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
        raise QuadratError(f"cannot write a backup in {folder}: {_cause(exc)}") from exc
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
            raise QuadratError(f"cannot back up the catalog to {folder}: {_cause(exc)}") from exc
        from sqlalchemy.exc import DBAPIError

        if isinstance(exc, DBAPIError):
            raise QuadratError(
                f"cannot back up the catalog to {folder}: {_cause(exc.orig or exc)}"
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
            result = _integrity(dst)
            if result != "ok":
                raise QuadratError(f"the backup failed its integrity check ({result})")
        finally:
            dst.close()
    finally:
        src.close()
    _fsync_file(temp)


# -- judgments-only files ---------------------------------------------------------------------


def _backup_metadata() -> MetaData:
    """The tables of a judgments-only file: the judgment tables as the catalog has them, the
    referenced photos by collection root and path, and what kind of file it is."""
    from sqlalchemy import Column, Integer, MetaData, String, Table, Text

    from engine.catalog.models import Base

    metadata = MetaData()
    Table("backup_meta", metadata, Column("key", String(64), primary_key=True),
          Column("value", Text))  # fmt: skip
    Table("collections", metadata, Column("id", Integer, primary_key=True),
          Column("root", Text), Column("name", Text))  # fmt: skip
    Table("images", metadata, Column("id", Integer, primary_key=True),
          Column("collection_id", Integer), Column("rel_path", Text),
          Column("content_hash", String(64)))  # fmt: skip
    for name in JUDGMENT_TABLES:
        Base.metadata.tables[name].to_metadata(metadata)
    return metadata


def _judgments_to_file(conn: Connection, temp: Path) -> None:
    """Copy the judgment tables (and the photos they name) read on `conn`, inside its open
    transaction, into a new SQLite file `temp`."""
    from sqlalchemy import URL, create_engine, inspect, select, union
    from sqlalchemy.pool import NullPool

    from engine.catalog.models import Base

    temp.unlink(missing_ok=True)  # SQLAlchemy creates the file itself
    present = set(inspect(conn).get_table_names())
    metadata = _backup_metadata()
    out = create_engine(URL.create("sqlite", database=str(temp)), poolclass=NullPool)
    try:
        metadata.create_all(out)
        with out.begin() as dst:
            dst.execute(
                metadata.tables["backup_meta"].insert(),
                [
                    {"key": "kind", "value": KIND_JUDGMENTS},
                    {"key": "revision", "value": _revision(conn) or ""},
                    {"key": "source", "value": conn.dialect.name},
                    {"key": "created", "value": datetime.now(UTC).isoformat(timespec="seconds")},
                ],
            )
            if "collections" in present:
                source = Base.metadata.tables["collections"]
                _copy_rows(
                    conn, select(source.c.id, source.c.root, source.c.name),
                    dst, metadata.tables["collections"],
                )  # fmt: skip
            referenced = [
                select(Base.metadata.tables[name].c.image_id)
                for name in _IMAGE_TABLES
                if name in present
            ]
            if referenced and "images" in present:
                images = Base.metadata.tables["images"]
                wanted = select(images.c.id, images.c.collection_id, images.c.rel_path,
                                images.c.content_hash).where(
                    images.c.id.in_(union(*referenced).scalar_subquery())
                )  # fmt: skip
                _copy_rows(conn, wanted, dst, metadata.tables["images"])
            for name in JUDGMENT_TABLES:
                if name not in present:  # an older schema (before an upgrade)
                    continue
                model = Base.metadata.tables[name]
                have = {c["name"] for c in inspect(conn).get_columns(name)}
                columns = [c for c in model.c if c.name in have]
                _copy_rows(conn, select(*columns), dst, metadata.tables[name])
        with out.connect() as check:
            result = str(check.exec_driver_sql("PRAGMA integrity_check").scalar())
    finally:
        out.dispose()
    if result != "ok":
        raise QuadratError(f"the backup failed its integrity check ({result})")
    _fsync_file(temp)


def _copy_rows(src: Connection, query: Any, dst: Connection, table: Any) -> int:
    """Stream the rows of `query` into `table`, a batch at a time; returns how many."""
    count = 0
    # Per statement: a connection's own options would apply to every later statement too.
    result = src.execute(query.execution_options(yield_per=_ROWS_PER_BATCH))
    for batch in result.mappings().partitions(_ROWS_PER_BATCH):
        dst.execute(table.insert(), [dict(row) for row in batch])
        count += len(batch)
    return count


def _revision(conn: Connection) -> str | None:
    from sqlalchemy import inspect, text

    if "alembic_version" not in inspect(conn).get_table_names():
        return None
    return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()


# -- engines of our own -----------------------------------------------------------------------


@contextlib.contextmanager
def _engine(catalog: CatalogRef) -> Iterator[Engine]:
    """A short-lived engine on the catalog, whose transactions are real ones: on SQLite a
    `BEGIN` (or `BEGIN IMMEDIATE` with the execution option `quadrat_write`) is sent, so every
    read in it sees one snapshot (pysqlite alone would not begin before a SELECT)."""
    from sqlalchemy import URL, create_engine, event
    from sqlalchemy.pool import NullPool

    from engine.catalog.db import catalog_url

    if is_sqlite_catalog(catalog):
        path = sqlite_catalog_file(catalog)
        if not path.is_file():
            raise QuadratError(f"no catalog to back up at {path}")
        engine = create_engine(URL.create("sqlite", database=str(path)), poolclass=NullPool)

        @event.listens_for(engine, "connect")
        def _connect(dbapi_connection: Any, _record: Any) -> None:
            dbapi_connection.isolation_level = None  # we send BEGIN ourselves
            dbapi_connection.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
            dbapi_connection.execute("PRAGMA foreign_keys=ON")

        @event.listens_for(engine, "begin")
        def _begin(conn: Connection) -> None:
            write = conn.get_execution_options().get("quadrat_write")
            conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    else:
        url = _url_of(catalog) or catalog_url(os.fspath(catalog))
        if url.get_backend_name() == "postgresql":
            url = catalog_url(url)
            engine = create_engine(url, poolclass=NullPool, connect_args={"connect_timeout": 10})
        else:
            engine = create_engine(url, poolclass=NullPool)
    try:
        yield engine
    finally:
        engine.dispose()


@contextlib.contextmanager
def _catalog_errors(catalog: CatalogRef) -> Iterator[None]:
    """Database faults while reading or writing the catalog as one-line `CatalogError`s."""
    from engine.catalog.db import catalog_faults

    where: Any
    try:
        where = sqlite_catalog_file(catalog)
    except QuadratError:
        where = _url_of(catalog)
        if where is None:
            from engine.catalog.db import catalog_url

            where = catalog_url(os.fspath(catalog))
    with catalog_faults(where):
        yield


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


# -- restoring --------------------------------------------------------------------------------


def check_backup(backup: str | os.PathLike[str]) -> str:
    """The kind of backup `backup` is (`KIND_FULL` or `KIND_JUDGMENTS`); raises
    `BadInputError` (one line) unless it is a whole Quadrat backup this version can read."""
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
            revision = kind = None
            if "backup_meta" in tables:
                meta = dict(conn.execute("SELECT key, value FROM backup_meta").fetchall())
                kind, revision = meta.get("kind"), meta.get("revision") or None
            elif "alembic_version" in tables:
                kind = KIND_FULL
                found = conn.execute("SELECT version_num FROM alembic_version").fetchone()
                revision = found[0] if found else None
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise BadInputError(f"{path} is not a Quadrat catalog backup ({_cause(exc)})") from None
    if result != "ok":
        raise BadInputError(f"{path} is damaged (integrity check: {result})")
    needed = {"judgments", "alembic_version"} if kind != KIND_JUDGMENTS else {"judgments", "images"}
    missing = needed - tables
    if missing or kind not in (KIND_FULL, KIND_JUDGMENTS) or (kind == KIND_FULL and not revision):
        raise BadInputError(
            f"{path} is not a Quadrat catalog (no {' or '.join(sorted(missing or needed))})"
        )
    if revision is not None and revision not in _known_revisions():
        raise BadInputError(
            f"{path} was written by a newer Quadrat (schema {revision}); update Quadrat first"
        )
    return str(kind)


def _known_revisions() -> set[str]:
    from alembic.script import ScriptDirectory

    from engine.catalog.db import MIGRATIONS_DIR

    return {s.revision for s in ScriptDirectory(str(MIGRATIONS_DIR)).walk_revisions()}


def restore_catalog(
    library_root: str | os.PathLike[str],
    catalog_path: CatalogRef,
    backup: str | os.PathLike[str],
    *,
    keep: int = DEFAULT_KEEP,
) -> Path:
    """`restore_backup`, returning only the safety backup of the catalog as it was."""
    return restore_backup(library_root, catalog_path, backup, keep=keep).safety


def restore_backup(
    library_root: str | os.PathLike[str],
    catalog: CatalogRef,
    backup: str | os.PathLike[str],
    *,
    keep: int = DEFAULT_KEEP,
) -> Restored:
    """Put back the catalog's queries and judgments from `backup`, in one exclusive step with
    the safety backup of the catalog as it was (reason "before-restore"), so the restore can
    be undone and no judgment made meanwhile, here or in another process, falls between them.

    A full backup replaces a SQLite catalog's whole contents (through SQLite's backup API, so
    the WAL and other open connections stay consistent); a judgments-only one replaces the
    judgment tables of any catalog, matching its photos by collection root and path.
    The caller must hold the library's indexing lock (`with library.writer_lock():`) so no
    indexing run writes meanwhile. The backup is checked first (`BadInputError`, nothing
    changed, when it is not a whole Quadrat backup). The vector index files are repaired at
    the next open (their ids are compared with the catalog); nothing to do here.
    """
    backup = Path(backup)
    kind = check_backup(backup)
    if kind == KIND_JUDGMENTS:
        return _restore_judgments(library_root, catalog, backup)
    target = sqlite_catalog_file(catalog)  # a full backup fits only a SQLite catalog
    if backup.resolve() == target.resolve():
        raise BadInputError("that is the catalog itself, not a backup")
    safety_kind = choose_kind(target)
    state: dict[str, Path] = {}
    busy = [0]

    def take_safety_backup(status: int, _remaining: int, _total: int) -> None:
        # Called after each step of the copy. After the first successful step the copy holds
        # the catalog's write lock until it commits: no judgment can commit in between, and a
        # reader (the safety backup) still sees the catalog as it was, which is what it saves.
        if "safety" in state:
            return
        if status in (_SQLITE_BUSY, _SQLITE_LOCKED):
            busy[0] += 1
            if busy[0] >= _BUSY_TRIES:
                raise QuadratError(
                    "cannot restore: another program has been writing the catalog for "
                    f"{busy[0] * BUSY_TIMEOUT_S:.0f} s; close it and try again (nothing changed)"
                )
            return
        if status != _SQLITE_OK:  # the whole copy in one step: too late for the safety backup
            raise QuadratError(f"{backup} is too small to be a Quadrat catalog")
        state["safety"] = _safety_for_restore(library_root, target, safety_kind, keep, backup)

    try:
        src = _open_read_only(backup)
        try:
            pages = int(src.execute("PRAGMA page_count").fetchone()[0])
            if pages < 2:
                raise BadInputError(f"{backup} is too small to be a Quadrat catalog")
            dst = sqlite3.connect(target, timeout=BUSY_TIMEOUT_S)
            try:
                # One page per step, so the safety backup is taken once this copy holds the
                # write lock and before it commits (an aborted copy is rolled back).
                src.backup(dst, pages=1, progress=take_safety_backup)
                dst.execute("PRAGMA journal_mode=WAL").fetchall()
                result = _integrity(dst)
            finally:
                dst.close()
        finally:
            src.close()
    except (OSError, sqlite3.Error) as exc:
        saved = f"; the catalog as it was is in {state['safety']}" if "safety" in state else ""
        raise QuadratError(
            f"cannot restore the catalog from {backup}: {_cause(exc)}{saved}"
        ) from exc
    safety = state["safety"]
    if result != "ok":
        raise QuadratError(
            f"the restored catalog failed its integrity check ({result}); the catalog as it "
            f"was is in {safety}"
        )
    log.info("catalog restored from %s; previous state saved in %s", backup, safety)
    return Restored(safety=safety, kind=KIND_FULL)


_SQLITE_OK, _SQLITE_BUSY, _SQLITE_LOCKED = 0, 5, 6
_BUSY_TRIES = 3


def _safety_for_restore(
    library_root: str | os.PathLike[str], target: Path, kind: str, keep: int, backup: Path
) -> Path:
    """The before-restore backup of a SQLite catalog whose write lock the restore holds: read
    on other connections, which see the last committed state."""
    if kind == KIND_JUDGMENTS:
        return backup_judgments(library_root, target, keep=keep, reason="before-restore",
                                protect={backup})  # fmt: skip
    return backup_catalog(library_root, target, keep=keep, reason="before-restore",
                          protect={backup})  # fmt: skip


def _restore_judgments(
    library_root: str | os.PathLike[str], catalog: CatalogRef, backup: Path
) -> Restored:
    """Replace the judgment tables of `catalog` with those of a judgments-only `backup`, in
    one transaction that first takes the safety backup under the same lock."""
    from sqlalchemy import inspect, text

    from engine.catalog.models import Base

    sqlite_file = sqlite_catalog_file(catalog) if is_sqlite_catalog(catalog) else None
    safety_kind = choose_kind(catalog)
    with (
        _engine(catalog) as engine,
        _engine(backup) as source_engine,
        _catalog_errors(catalog),
        engine.connect() as live,
        source_engine.connect() as source,
    ):
        live = live.execution_options(quadrat_write=True)
        with live.begin(), source.begin():
            if live.dialect.name == "postgresql":
                # Every judging session on any workstation waits here until we commit.
                live.execute(text(
                    f"LOCK TABLE {', '.join(JUDGMENT_TABLES)} IN EXCLUSIVE MODE"
                ))  # fmt: skip
            if safety_kind == KIND_FULL and sqlite_file is not None:
                # Read on another connection: it sees the state our write lock now freezes.
                safety = backup_catalog(library_root, sqlite_file, reason="before-restore",
                                        protect={backup})  # fmt: skip
            else:
                safety = _write_backup(
                    library_root, KIND_JUDGMENTS, "before-restore",
                    lambda temp: _judgments_to_file(live, temp),
                )  # fmt: skip
                prune_backups(library_root, DEFAULT_KEEP, protect={safety, backup})
            mapping, unmatched = _match_photos(source, live)
            for name in reversed(JUDGMENT_TABLES):
                live.execute(Base.metadata.tables[name].delete())
            dropped = 0
            source_tables = set(inspect(source).get_table_names())
            for name in JUDGMENT_TABLES:
                if name not in source_tables:
                    continue
                dropped_here = _put_back(source, live, name, mapping)
                if name == "judgments":
                    dropped = dropped_here
            if live.dialect.name == "postgresql":
                for name in _SERIAL_TABLES:  # new rows must not collide with restored ids
                    live.execute(text(
                        f"SELECT setval(pg_get_serial_sequence('{name}', 'id'), "
                        f"coalesce((SELECT max(id) FROM {name}), 0) + 1, false)"
                    ))  # fmt: skip
    log.info("judgments restored from %s (%d photos not found); previous state in %s",
             backup, unmatched, safety)  # fmt: skip
    return Restored(safety, KIND_JUDGMENTS, unmatched_photos=unmatched, dropped_judgments=dropped)


def _match_photos(source: Connection, live: Connection) -> tuple[dict[int, int], int]:
    """Backup photo id -> this catalog's photo id, by collection root and relative path; and
    how many of the backup's photos this catalog does not have."""
    from sqlalchemy import select

    from engine.catalog.models import Collection, Image

    roots: dict[int, str] = {
        int(cid): str(root)
        for cid, root in source.exec_driver_sql("SELECT id, root FROM collections").all()
    }
    wanted: dict[int, list[tuple[int, str]]] = {}
    for image_id, collection_id, rel_path in source.exec_driver_sql(
        "SELECT id, collection_id, rel_path FROM images"
    ):
        wanted.setdefault(collection_id, []).append((image_id, rel_path))
    mapping: dict[int, int] = {}
    unmatched = 0
    for collection_id, photos in wanted.items():
        live_collection: int | None = live.execute(
            select(Collection.id).where(Collection.root == roots.get(collection_id, ""))
        ).scalar()
        if live_collection is None:
            unmatched += len(photos)
            continue
        for start in range(0, len(photos), _MATCH_BATCH):
            chunk = photos[start : start + _MATCH_BATCH]
            found = dict(
                live.execute(
                    select(Image.rel_path, Image.id).where(
                        Image.collection_id == live_collection,
                        Image.rel_path.in_([rel for _, rel in chunk]),
                    )
                ).all()
            )
            for old_id, rel in chunk:
                if rel in found:
                    mapping[old_id] = found[rel]
                else:
                    unmatched += 1
    return mapping, unmatched


def _put_back(source: Connection, live: Connection, name: str, mapping: dict[int, int]) -> int:
    """Insert a backup table's rows into the live one, photo ids mapped (rows on photos this
    catalog lacks are left out); returns how many rows were left out."""
    from sqlalchemy import inspect, select

    from engine.catalog.models import Base

    model = Base.metadata.tables[name]
    have = {c["name"] for c in inspect(source).get_columns(name)}
    columns = [c for c in model.c if c.name in have]
    dropped = 0
    result = source.execute(select(*columns).execution_options(yield_per=_ROWS_PER_BATCH))
    for batch in result.mappings().partitions(_ROWS_PER_BATCH):
        rows = []
        for row in batch:
            values = dict(row)
            if "image_id" in values:
                mapped = mapping.get(values["image_id"])
                if mapped is None:
                    dropped += 1
                    continue
                values["image_id"] = mapped
            rows.append(values)
        if rows:
            live.execute(model.insert(), rows)
    return dropped


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


def _fsync_file(path: Path) -> None:
    with open(path, "rb+") as handle:
        os.fsync(handle.fileno())


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
