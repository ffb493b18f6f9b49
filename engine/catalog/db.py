"""Opening a catalog database: engine, SQLite pragmas, migrations to the current schema.

Every database failure a user can meet (a read-only folder, a full disk, a removed file, a
locked or damaged catalog) leaves this module as one `CatalogError` line that names the cause
and the way on; the original exception, with its SQL and traceback, goes to the log file.
"""

from __future__ import annotations

import errno
import logging
import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import URL, Connection, Engine, create_engine, event, exc, make_url, text
from sqlalchemy.orm import Session, sessionmaker

from engine.errors import CatalogError, QuadratError

if TYPE_CHECKING:
    from alembic.config import Config  # imported lazily at runtime

log = logging.getLogger(__name__)

MIGRATIONS_DIR = Path(__file__).with_name("migrations")

# How long a process opening the catalog waits for another one that creates or upgrades it.
# Migrations of a large catalog can take minutes; a crashed holder frees the lock at once.
SCHEMA_LOCK_TIMEOUT_S = 600.0

# Causes of catalog failures, as `catalog_error` tells them apart.
READ_ONLY, DISK_FULL, DISK_IO, LOCKED, DAMAGED, CANNOT_OPEN, OTHER = (
    "read-only",
    "disk full",
    "disk I/O error",
    "locked",
    "damaged",
    "cannot open",
    "other",
)

# SQLite's primary result codes (the low byte of an extended code).
_SQLITE_CODES = {
    3: READ_ONLY,  # SQLITE_PERM
    5: LOCKED,  # SQLITE_BUSY
    6: LOCKED,  # SQLITE_LOCKED
    8: READ_ONLY,  # SQLITE_READONLY
    10: DISK_IO,  # SQLITE_IOERR
    11: DAMAGED,  # SQLITE_CORRUPT
    13: DISK_FULL,  # SQLITE_FULL
    14: CANNOT_OPEN,  # SQLITE_CANTOPEN
    26: DAMAGED,  # SQLITE_NOTADB
}
_SQLITE_READONLY_DBMOVED = 8 | (4 << 8)  # the database file was deleted or moved while open

# SQLite's messages, for exceptions that carry no result code.
_SQLITE_TEXTS = (
    ("database or disk is full", DISK_FULL),
    ("disk is full", DISK_FULL),
    ("disk i/o error", DISK_IO),
    ("attempt to write a readonly database", READ_ONLY),
    ("readonly database", READ_ONLY),
    ("unable to open database file", CANNOT_OPEN),
    ("database is locked", LOCKED),
    ("database table is locked", LOCKED),
    ("database is busy", LOCKED),
    ("file is not a database", DAMAGED),
    ("database disk image is malformed", DAMAGED),
    ("malformed", DAMAGED),
)

_OS_ERRNOS = {
    errno.EACCES: READ_ONLY,
    errno.EPERM: READ_ONLY,
    errno.EROFS: READ_ONLY,
    errno.ENOSPC: DISK_FULL,
    errno.EDQUOT: DISK_FULL,
    errno.EIO: DISK_IO,
    errno.ENOENT: DISK_IO,
    errno.ENODEV: DISK_IO,
}


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:  # a DB-API connection
    cursor = dbapi_connection.cursor()
    # First, so that the pragmas below wait for a process that is writing instead of failing.
    cursor.execute("PRAGMA busy_timeout=10000")
    # WAL lets the GUI read while the indexer writes; FULL makes each commit (a judgment, an
    # indexing checkpoint) survive a power cut, not only a process crash.
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=FULL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


# -- telling the user what went wrong ---------------------------------------------------------


def _dbapi_error(error: BaseException) -> BaseException:
    """The DB-API exception under a SQLAlchemy one (the error itself otherwise)."""
    orig = getattr(error, "orig", None)
    return orig if isinstance(orig, BaseException) else error


def _first_line(error: BaseException) -> str:
    """The DB-API message without SQLAlchemy's SQL dump and help link."""
    lines = str(_dbapi_error(error)).strip().splitlines()
    return lines[0].strip() if lines else type(error).__name__


def classify(error: BaseException) -> str:
    """The cause of a catalog failure: one of READ_ONLY, DISK_FULL, DISK_IO, LOCKED, DAMAGED,
    CANNOT_OPEN or OTHER, from SQLite's result code, else its message, else the OS errno."""
    base = _dbapi_error(error)
    code = getattr(base, "sqlite_errorcode", None)
    if isinstance(code, int):
        if code == _SQLITE_READONLY_DBMOVED:
            return DISK_IO
        cause = _SQLITE_CODES.get(code & 0xFF)
        if cause is not None:
            return cause
    message = str(base).lower()
    for needle, cause in _SQLITE_TEXTS:
        if needle in message:
            return cause
    if isinstance(base, OSError) and base.errno in _OS_ERRNOS:
        return _OS_ERRNOS[base.errno]
    return OTHER


def _writable(path: Path) -> bool:
    return os.access(path, os.W_OK)


def _read_only_place(path: Path) -> str:
    """What is read-only: the catalog file, or the folder it lies in."""
    if path.exists() and not _writable(path) and _writable(path.parent):
        return f"the catalog file {path} is read-only"
    return f"the library folder {path.parent} is read-only"


def _message(cause: str, path: Path | None, detail: str, opening: bool) -> str:
    """The one line for a failure of `cause` (not OTHER) on the catalog file `path`."""
    where = f" at {path}" if path is not None else ""
    prefix = "cannot open the catalog: " if opening else ""
    folder = path.parent if path is not None else None
    if cause == CANNOT_OPEN and path is not None:
        if not path.parent.is_dir():
            cause = DISK_IO  # the folder is gone: removed, or its disk went away
        elif not _writable(path.parent) or (path.exists() and not _writable(path)):
            cause = READ_ONLY
    if cause == READ_ONLY:
        place = _read_only_place(path) if path is not None else "the catalog is read-only"
        return (
            f"{prefix}{place} ({detail}); Quadrat must write its catalog there: pick a "
            "writable library folder with --library or in Settings"
        )
    if cause == DISK_FULL:
        on = f" holding {folder}" if folder is not None else ""
        return (
            f"{prefix}the disk{on} is full ({detail}); free some space and try again "
            "(work committed so far is kept)"
        )
    if cause in (DISK_IO, CANNOT_OPEN):
        verb = "cannot open" if opening else "cannot read or write"
        return (
            f"{verb} the catalog{where} ({detail}): a file of the library was removed or the "
            "disk went away; close every Quadrat and start it again (the catalog repairs what "
            "it can), or restore a backup with 'quadrat restore'"
        )
    if cause == LOCKED:
        return (
            f"{prefix}another program holds the catalog{where} locked ({detail}); close it "
            "(or wait for it to finish) and try again"
        )
    if cause == DAMAGED:
        return (
            f"{prefix}the catalog file{where} is damaged ({detail}); restore a backup with "
            "'quadrat restore', or pick another library folder with --library or in Settings"
        )
    raise ValueError(f"no message for cause {cause!r}")


def catalog_error(
    error: BaseException, path: str | Path | None, *, opening: bool = False
) -> CatalogError:
    """Turn a database or file-system failure into one `CatalogError` line by its cause; the
    original exception and its traceback go to the log. `path` is the catalog file (None for
    a database that is not a file); `opening` prefixes the message for a failed open."""
    path = Path(path) if path is not None else None
    cause = classify(error)
    detail = _first_line(error)
    if isinstance(error, OSError) and error.strerror:
        detail = error.strerror
    if cause == OTHER:
        where = f" at {path}" if path is not None else ""
        verb = "cannot open" if opening else "cannot read or write"
        message = f"{verb} the catalog{where}: {detail} (details in the log)"
    else:
        message = _message(cause, path, detail, opening)
    # Not at WARNING: the console handler would print the traceback under the one line.
    log.info("catalog failure (%s) at %s", cause, path or "database", exc_info=error)
    return CatalogError(message)


def _is_translated(error: BaseException) -> bool:
    """Database errors that are faults of the environment (disk, permissions, a damaged file),
    as opposed to a constraint a caller may want to catch (IntegrityError stays as it is)."""
    if isinstance(error, exc.OperationalError | sqlite3.OperationalError):
        return True
    if isinstance(error, exc.DatabaseError | sqlite3.DatabaseError):
        return classify(error) != OTHER
    return False


@contextmanager
def catalog_faults(path: str | Path | None, *, opening: bool = False) -> Iterator[None]:
    """Database faults raised inside (disk full, I/O error, read-only, locked, damaged file)
    leave as one-line `CatalogError`s (see `catalog_error`); other exceptions pass unchanged.
    For code that uses the catalog's engine directly rather than `Catalog.session()`."""
    try:
        yield
    except (exc.DBAPIError, sqlite3.Error) as error:
        if not _is_translated(error):
            raise
        raise catalog_error(error, path, opening=opening) from error


# -- the catalog ------------------------------------------------------------------------------


def sqlite_file_of(url: URL) -> Path | None:
    """The catalog file a SQLAlchemy URL names (None for memory databases, `file:` URIs and
    server databases)."""
    if url.get_backend_name() != "sqlite":
        return None
    database = url.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return Path(database)


class Catalog:
    """A catalog database: `session()` gives a short-lived transactional session."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.path: Path | None = sqlite_file_of(engine.url)
        self._sessions = sessionmaker(engine, expire_on_commit=False)

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A session that commits on success and rolls back on any exception.

        A database fault (disk full, I/O error, read-only, locked, damaged file) raised inside
        or at commit leaves as a one-line `CatalogError`, after the rollback."""
        with catalog_faults(self.path), self._sessions() as session, session.begin():
            yield session

    def integrity_check(self) -> str:
        """SQLite's `PRAGMA integrity_check` result ("ok" when healthy)."""
        with self.engine.connect() as conn:
            return str(conn.execute(text("PRAGMA integrity_check")).scalar())

    def dispose(self) -> None:
        self.engine.dispose()


def _alembic_config(connection: Connection) -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["connection"] = connection
    return cfg


def upgrade_schema(engine: Engine) -> None:
    """Bring the schema to the newest revision (no-op when it is already there).

    Not safe against another process doing the same at once: `open_catalog` calls it under
    the catalog's schema lock."""
    from alembic import command
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    with engine.begin() as connection:
        cfg = _alembic_config(connection)
        head = ScriptDirectory.from_config(cfg).get_current_head()
        current = MigrationContext.configure(connection).get_current_revision()
        if current == head:
            return
        known = {s.revision for s in ScriptDirectory.from_config(cfg).walk_revisions()}
        if current is not None and current not in known:
            raise QuadratError(
                f"the catalog was written by a newer Quadrat (schema {current}); update Quadrat"
            )
        log.info("migrating catalog schema %s -> %s", current, head)
        command.upgrade(cfg, "head")


def schema_lock_path(catalog_file: str | Path) -> Path:
    """The lock file beside a catalog file, held while the catalog is created or upgraded."""
    catalog_file = Path(catalog_file)
    return catalog_file.with_name(catalog_file.name + ".lock")


@contextmanager
def _schema_lock(catalog_file: Path | None, timeout: float) -> Iterator[None]:
    """Held while the schema is checked and upgraded, so that two processes opening a new
    library at once do not both run the migrations: the second waits, then finds the schema
    current. A lock left by a crashed process is free (the OS drops it with the process)."""
    if catalog_file is None:
        yield
        return
    from filelock import FileLock, Timeout

    lock = FileLock(str(schema_lock_path(catalog_file)), timeout=timeout)
    try:
        lock.acquire()
    except Timeout:
        raise CatalogError(
            f"cannot open the catalog at {catalog_file}: another Quadrat has been creating or "
            f"upgrading it for over {timeout:.0f} s; wait for it to finish (or close it) and try "
            "again"
        ) from None
    except OSError as error:  # the lock file cannot be created: read-only folder, full disk
        raise catalog_error(error, catalog_file, opening=True) from error
    try:
        yield
    finally:
        lock.release()


def open_catalog(
    url_or_path: str | Path, *, lock_timeout: float = SCHEMA_LOCK_TIMEOUT_S
) -> Catalog:
    """Open (creating if needed) the catalog at a SQLAlchemy URL or a SQLite file path.

    The schema is created or upgraded under an inter-process lock beside a SQLite file (a
    second process waits up to `lock_timeout` seconds). Failures raise a one-line
    `QuadratError` (`CatalogError` for database and file faults)."""
    url = str(url_or_path)
    if "://" not in url:
        path = Path(url)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise catalog_error(error, path, opening=True) from error
        url = f"sqlite:///{path}"
    try:
        engine = create_engine(make_url(url))
    except Exception as error:  # a malformed URL, a database driver that is not installed
        raise QuadratError(f"cannot open the catalog at {url}: {error}") from error
    catalog_file = sqlite_file_of(engine.url)
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", _sqlite_pragmas)
    try:
        with _schema_lock(catalog_file, lock_timeout):
            upgrade_schema(engine)
    except QuadratError:
        engine.dispose()
        raise
    except (exc.DBAPIError, sqlite3.Error, OSError) as error:
        engine.dispose()
        raise catalog_error(error, catalog_file, opening=True) from error
    except Exception as error:  # anything else: still one line, details in the log
        engine.dispose()
        log.info("opening the catalog at %s failed", url, exc_info=True)
        raise CatalogError(f"cannot open the catalog at {url}: {_first_line(error)}") from error
    return Catalog(engine)
