"""Opening a catalog database: engine, SQLite pragmas, migrations to the current schema.

Every database failure a user can meet (a read-only folder, a full disk, a removed file, a
locked or damaged catalog; on a PostgreSQL server also a server that cannot be reached, a
refused login, a missing database, a value out of range, a lost connection) leaves this module
as one `CatalogError` line that names the cause and the way on; the original exception, with
its SQL, parameters and traceback, goes to the log file.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import shutil
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import URL, Connection, Engine, create_engine, event, exc, make_url, text
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import NullPool

from engine.errors import BadInputError, CatalogError, QuadratError

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
# ... and those only a database server has.
UNREACHABLE, AUTH_FAILED, NO_DATABASE, OUT_OF_RANGE, CONNECTION_LOST, NO_PERMISSION = (
    "server unreachable",
    "login refused",
    "database missing",
    "out of range",
    "connection lost",
    "no permission",
)

_SERVER_CAUSES = frozenset(
    (UNREACHABLE, AUTH_FAILED, NO_DATABASE, OUT_OF_RANGE, CONNECTION_LOST, NO_PERMISSION)
)

# The environment variable that gives the password of a server catalog: the library folder
# records the catalog's URL without it (libpq's PGPASSWORD and ~/.pgpass work as well).
PASSWORD_ENV = "QUADRAT_DATABASE_PASSWORD"

# PostgreSQL's SQLSTATE codes (and classes, by their first two characters).
_PG_CODES = {
    "22003": OUT_OF_RANGE,  # numeric_value_out_of_range
    "22008": OUT_OF_RANGE,  # datetime_field_overflow
    "28000": AUTH_FAILED,  # invalid_authorization_specification
    "28P01": AUTH_FAILED,  # invalid_password
    "3D000": NO_DATABASE,  # invalid_catalog_name
    "42501": NO_PERMISSION,  # insufficient_privilege
    "25006": READ_ONLY,  # read_only_sql_transaction
    "53100": DISK_FULL,  # disk_full
    "40001": LOCKED,  # serialization_failure
    "40P01": LOCKED,  # deadlock_detected
    "55P03": LOCKED,  # lock_not_available
    "57P01": CONNECTION_LOST,  # admin_shutdown
    "57P02": CONNECTION_LOST,  # crash_shutdown
    "57P03": UNREACHABLE,  # cannot_connect_now (starting up, shutting down)
    "53300": UNREACHABLE,  # too_many_connections
}
_PG_CLASSES = {"08": CONNECTION_LOST, "58": DISK_IO, "XX": DAMAGED}

# libpq's messages for failures that carry no SQLSTATE (those met while connecting).
_SERVER_TEXTS = (
    ("password authentication failed", AUTH_FAILED),
    ("no password supplied", AUTH_FAILED),
    ("authentication failed", AUTH_FAILED),
    ("no pg_hba.conf entry", AUTH_FAILED),
    ('role "', AUTH_FAILED),  # role "x" does not exist
    ("does not exist", NO_DATABASE),  # database "x" does not exist
    ("connection refused", UNREACHABLE),
    ("failed to resolve host", UNREACHABLE),
    ("could not translate host name", UNREACHABLE),
    ("name or service not known", UNREACHABLE),
    ("no route to host", UNREACHABLE),
    ("network is unreachable", UNREACHABLE),
    ("timeout expired", UNREACHABLE),
    ("connection timed out", UNREACHABLE),
    ("no such file or directory", UNREACHABLE),  # a Unix socket with no server behind it
    ("the database system is starting up", UNREACHABLE),
    ("the database system is shutting down", UNREACHABLE),
    ("server closed the connection unexpectedly", CONNECTION_LOST),
    ("terminating connection", CONNECTION_LOST),
    ("connection is lost", CONNECTION_LOST),
    ("connection is closed", CONNECTION_LOST),
    ("consuming input failed", CONNECTION_LOST),
    ("ssl syscall error", CONNECTION_LOST),
    ("out of range", OUT_OF_RANGE),
    ("permission denied", NO_PERMISSION),
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


def _classify_server(base: BaseException) -> str:
    """The cause of a database server's failure, from its SQLSTATE, else libpq's message."""
    sqlstate = getattr(base, "sqlstate", None) or getattr(base, "pgcode", None)
    if isinstance(sqlstate, str) and sqlstate:
        # The server said what it was: no guessing from words ("relation x does not exist").
        return _PG_CODES.get(sqlstate) or _PG_CLASSES.get(sqlstate[:2]) or OTHER
    message = str(base).lower()
    for needle, cause in _SERVER_TEXTS:
        if needle in message:
            return cause
    return OTHER


def _from_server(base: BaseException) -> bool:
    """Whether a DB-API exception comes from a server's driver (psycopg), not from SQLite."""
    return not isinstance(base, sqlite3.Error | OSError) and type(base).__module__.startswith(
        ("psycopg", "pg8000", "asyncpg")
    )


def classify(error: BaseException) -> str:
    """The cause of a catalog failure: one of READ_ONLY, DISK_FULL, DISK_IO, LOCKED, DAMAGED,
    CANNOT_OPEN or OTHER, from SQLite's result code, else its message, else the OS errno; for a
    database server also UNREACHABLE, AUTH_FAILED, NO_DATABASE, OUT_OF_RANGE, CONNECTION_LOST or
    NO_PERMISSION, from its SQLSTATE, else its message."""
    base = _dbapi_error(error)
    if _from_server(base):
        return _classify_server(base)
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


# Below this much free space a failed write is taken for a full disk (SQLite needs pages and a
# -shm file of 32 KiB to open a catalog at all).
_FULL_DISK_BYTES = 1 << 20


def _disk_is_full(folder: Path) -> bool:
    try:
        return shutil.disk_usage(folder).free < _FULL_DISK_BYTES
    except OSError:  # the folder is gone: not a question of space
        return False


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
    if cause in (DISK_IO, CANNOT_OPEN) and path is not None and _disk_is_full(path.parent):
        # SQLite says "disk I/O error" or "unable to open" when a full disk keeps it from
        # creating its -wal or -shm file: the cause the user can act on is the space.
        cause = DISK_FULL
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


def _server_detail(detail: str) -> str:
    """libpq's message without the "connection to server at ... failed:" preamble."""
    marker = " failed: "
    if detail.startswith("connection failed:") and marker in detail:
        detail = detail.rsplit(marker, 1)[1]
    return " ".join(detail.replace("FATAL:", "").split())


def server_place(url: URL) -> str:
    """How a message names a server catalog: its database, host and port (never a password)."""
    host = url.host or "localhost"
    port = f":{url.port}" if url.port else ""
    return f"database '{url.database or ''}' on {host}{port}"


def _server_message(cause: str, url: URL, detail: str, opening: bool) -> str:
    """The one line for a failure of `cause` (not OTHER) of the server catalog at `url`."""
    place = server_place(url)
    host = f"{url.host or 'localhost'}{f':{url.port}' if url.port else ''}"
    prefix = "cannot open the catalog: " if opening else ""
    if cause == UNREACHABLE:
        return (
            f"cannot reach the catalog server {host} ({detail}): check that the server is "
            "running and that the host and port of the database URL (Settings or "
            "--database-url) are right, then try again"
        )
    if cause == AUTH_FAILED:
        return (
            f"{prefix}the catalog server {host} refused the login of user '{url.username or ''}' "
            f"({detail}): give the password in {PASSWORD_ENV}, PGPASSWORD or ~/.pgpass (the "
            "library never stores it) and check the user name of the database URL"
        )
    if cause == NO_DATABASE:
        return (
            f"{prefix}the catalog {place} does not exist ({detail}): create it on the server "
            f"(createdb -O {url.username or 'USER'} {url.database or 'NAME'}) or fix the "
            "database URL"
        )
    if cause == OUT_OF_RANGE:
        return (
            f"a value does not fit its column in the catalog {place} ({detail}); nothing of "
            "this change was saved: update Quadrat, and report it with the log file if it stays"
        )
    if cause == CONNECTION_LOST:
        return (
            f"lost the connection to the catalog server {host} ({detail}); work committed so "
            "far is kept: check the server and the network, then try again"
        )
    if cause == NO_PERMISSION:
        return (
            f"{prefix}user '{url.username or ''}' may not change the catalog {place} "
            f"({detail}): ask the database's owner to grant it the rights, or use another user"
        )
    if cause == LOCKED:
        return (
            f"another user's change to the catalog {place} got in the way ({detail}); nothing "
            "of this change was saved: try again"
        )
    if cause == DISK_FULL:
        return (
            f"the disk of the catalog server {host} is full ({detail}); work committed so far "
            "is kept: ask its administrator to free space, then try again"
        )
    if cause == READ_ONLY:
        return (
            f"{prefix}the catalog {place} is read-only ({detail}): connect to a server that "
            "accepts writes (the primary, not a standby)"
        )
    return (
        f"the catalog server {host} reports a fault ({detail}): ask its administrator; the "
        "details are in the log"
    )


def catalog_error(
    error: BaseException, path: str | Path | URL | None, *, opening: bool = False
) -> CatalogError:
    """Turn a database or file-system failure into one `CatalogError` line by its cause; the
    original exception and its traceback go to the log. `path` is the catalog file, or the URL
    of a server catalog (None: a database that is neither); `opening` prefixes the message for
    a failed open."""
    cause = classify(error)
    detail = _first_line(error)
    if isinstance(path, URL) and path.get_backend_name() != "sqlite":
        url = path
        if cause != OTHER:
            message = _server_message(cause, url, _server_detail(detail), opening)
        else:
            verb = "cannot open" if opening else "cannot read or write"
            message = (
                f"{verb} the catalog {server_place(url)}: {_server_detail(detail)} "
                "(details in the log)"
            )
        log.info("catalog failure (%s) at %s", cause, server_place(url), exc_info=error)
        return CatalogError(message)
    if isinstance(path, URL):
        path = sqlite_file_of(path)
    path = Path(path) if path is not None else None
    if isinstance(error, OSError) and error.strerror:
        detail = error.strerror
    if cause == OTHER or cause in _SERVER_CAUSES:  # a server's, without its URL to name
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
def catalog_faults(path: str | Path | URL | None, *, opening: bool = False) -> Iterator[None]:
    """Database faults raised inside (disk full, I/O error, read-only, locked, damaged file;
    a server out of reach, a refused login, a lost connection, a value out of range) leave as
    one-line `CatalogError`s (see `catalog_error`); other exceptions (a constraint a caller may
    catch) pass unchanged. `path`: the catalog file, or a server catalog's URL. For code that
    uses the catalog's engine directly rather than `Catalog.session()`."""
    try:
        yield
    except (exc.DBAPIError, sqlite3.Error) as error:
        if not _is_translated(error):
            raise
        raise catalog_error(error, path, opening=opening) from error


# -- the catalog ------------------------------------------------------------------------------

# Arbitrary 64-bit keys of PostgreSQL's advisory locks ("QUADRAT1", "QUADRAT2"): schema
# upgrades, and the one indexing process of a server catalog.
_SCHEMA_LOCK_KEY = 0x5155414452415431
_WRITER_LOCK_KEY = 0x5155414452415432


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

    @property
    def location(self) -> Path | URL:
        """Where the catalog is, for messages: its SQLite file, else its URL."""
        return self.path if self.path is not None else self.engine.url

    @property
    def is_server(self) -> bool:
        """Whether the catalog lives on a database server (PostgreSQL), not in a file."""
        return self.engine.dialect.name != "sqlite"

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A session that commits on success and rolls back on any exception.

        A database fault (disk full, I/O error, read-only, locked, damaged file) raised inside
        or at commit leaves as a one-line `CatalogError`, after the rollback."""
        with catalog_faults(self.location), self._sessions() as session, session.begin():
            yield session

    def serialize(self, session: Session, key: tuple[int, int]) -> None:
        """Make the session's transaction wait for, then exclude, every other one that
        serializes on `key` (two 32-bit numbers) until it ends: a read-then-write of one row
        then sees the latest committed data and cannot interleave with another process's.
        Call it first in the transaction. SQLite: its write lock (BEGIN IMMEDIATE), as a
        deferred transaction would read a snapshot another writer may change before our
        write. PostgreSQL: an advisory lock on `key`, so unrelated rows do not wait."""
        if self.engine.dialect.name == "sqlite":
            session.connection().exec_driver_sql("BEGIN IMMEDIATE")
        elif self.engine.dialect.name == "postgresql":
            session.execute(
                text("SELECT pg_advisory_xact_lock(:a, :b)"), {"a": key[0], "b": key[1]}
            )

    @contextmanager
    def writer_lock(self) -> Iterator[None]:
        """Held by the one process indexing a server catalog, whichever workstation it runs
        on (PostgreSQL's session advisory lock, on a connection kept for the purpose; freed
        by the server if the process dies). A second one is refused with one line. Nothing
        for SQLite: the library folder's lock file does it."""
        if self.engine.dialect.name != "postgresql":
            yield
            return
        key = {"key": _WRITER_LOCK_KEY}
        with catalog_faults(self.location), self.engine.connect() as conn:
            if not conn.execute(text("SELECT pg_try_advisory_lock(:key)"), key).scalar():
                raise QuadratError(
                    f"another Quadrat is indexing the catalog {server_place(self.engine.url)} "
                    "(on this or another workstation); wait for it to finish or cancel it, "
                    "then try again"
                )
            conn.commit()  # the lock belongs to the session, not to this transaction
            try:
                yield
            finally:
                try:
                    conn.execute(text("SELECT pg_advisory_unlock(:key)"), key)
                    conn.commit()
                except exc.DBAPIError:  # the connection is gone, and the lock with it
                    log.info("could not unlock the catalog's writer lock", exc_info=True)

    def checkpoint_wal(self) -> None:
        """Move committed pages from SQLite's -wal file into the catalog file (a passive
        checkpoint: it never waits for readers), so a plain copy of the catalog file taken
        now holds what was just committed. Nothing on a server catalog; a failure is logged,
        never raised: the data is already safe in the -wal."""
        if self.engine.dialect.name != "sqlite":
            return
        try:
            with self.engine.connect() as conn:
                conn.exec_driver_sql("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except (exc.DBAPIError, sqlite3.Error):
            log.info("could not checkpoint the catalog's WAL", exc_info=True)

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


BeforeUpgrade = Callable[[str, str], None]
"""Called with (current revision, head) before an existing catalog's schema changes: it takes
the backup the upgrade needs and raises `QuadratError` when it cannot, so nothing changes."""


def upgrade_schema(engine: Engine, before_upgrade: BeforeUpgrade | None = None) -> None:
    """Bring the schema to the newest revision (no-op when it is already there).

    Every upgrade is one transaction: it happens whole or not at all, so a kill, a full disk
    or a power cut in the middle leaves the catalog as it was, and the next open upgrades it
    again. `before_upgrade` runs first for a catalog that already has a schema (not a new one).
    On PostgreSQL the server's advisory lock keeps a second process out until this one is done;
    on SQLite `open_catalog` calls it under the lock file beside the catalog."""
    # A plain read on the catalog's own engine: opening a current catalog (the usual case, say
    # a search while an indexing run writes) takes no write lock and waits for no writer.
    current, head = _revisions(engine)
    if current == head:
        return
    if current is not None and before_upgrade is not None:
        before_upgrade(current, head)
    if engine.dialect.name != "sqlite":
        _migrate(engine, head)
        return
    # pysqlite's legacy transaction handling commits before every DDL statement, so each ALTER
    # TABLE of a migration would be committed on its own (an interrupted upgrade then leaves a
    # half-changed schema that no later open can upgrade). A connection of its own, with the
    # driver's transactions off and BEGIN IMMEDIATE issued here, makes the whole upgrade one
    # SQLite transaction (SQLAlchemy's documented recipe).
    migrating = create_engine(engine.url, poolclass=NullPool)
    event.listen(migrating, "connect", _sqlite_migration_pragmas)
    event.listen(migrating, "begin", _sqlite_begin_immediate)
    try:
        _migrate(migrating, head)
    finally:
        migrating.dispose()


def _sqlite_migration_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=FULL")
    # Off while migrating, as Alembic advises for batch mode: a table that batch mode copies
    # and drops must not cascade deletes into the tables that point at it. (The pragma cannot
    # change inside a transaction, so it is set here, before BEGIN.)
    cursor.execute("PRAGMA foreign_keys=OFF")
    cursor.close()
    dbapi_connection.isolation_level = None  # the driver's own BEGIN/COMMIT off: ours rule


def _sqlite_begin_immediate(connection: Connection) -> None:
    # IMMEDIATE: the write lock from the start, so no other writer slips in between the
    # revision check and the first change.
    connection.exec_driver_sql("BEGIN IMMEDIATE")


def _revisions(engine: Engine) -> tuple[str | None, str]:
    """The catalog's schema revision (None for a new catalog) and this version's newest one;
    a revision this version does not know (a newer Quadrat's) raises `QuadratError`."""
    current = _current_head_quickly(engine)
    if current is not None:
        return current, current
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    with engine.connect() as probe:
        current = MigrationContext.configure(probe).get_current_revision()
    script = ScriptDirectory(str(MIGRATIONS_DIR))
    head = script.get_current_head()
    assert head is not None  # the migrations ship with the code
    if current is not None and current not in {s.revision for s in script.walk_revisions()}:
        raise QuadratError(
            f"the catalog was written by a newer Quadrat (schema {current}); update Quadrat"
        )
    return current, head


# A migration file's `revision = "0016"` and `down_revision = "0015"` lines (annotated or not).
_REVISION_LINE = re.compile(
    r"""^(down_revision|revision)\s*(?::[^=]*)?=\s*(?:['"]([^'"]+)['"]|None)""", re.M
)


def _current_head_quickly(engine: Engine) -> str | None:
    """The catalog's revision when it is surely this version's newest one, else None (then
    Alembic decides). Importing Alembic takes a fifth of a second, most of a text search's
    budget: the usual open of a current catalog reads the revision table with plain SQL and
    the migration files' `revision` lines instead."""
    links: dict[str, str | None] = {}
    try:
        for path in (MIGRATIONS_DIR / "versions").glob("*.py"):
            found = dict(
                (name, value or None)
                for name, value in _REVISION_LINE.findall(path.read_text(encoding="utf-8"))
            )
            if path.name != "__init__.py" and "revision" in found:
                links[str(found["revision"])] = found.get("down_revision")
        with engine.connect() as probe:
            rows = probe.execute(text("SELECT version_num FROM alembic_version")).all()
    except Exception:  # no revision table yet, an unreadable file: Alembic's way, with its errors
        return None
    heads = set(links) - {down for down in links.values() if down is not None}
    if len(heads) != 1 or len(rows) != 1 or rows[0][0] not in heads:
        return None
    return str(rows[0][0])


def _migrate(engine: Engine, head: str) -> None:
    """Run the migrations up to `head` in one transaction on `engine`."""
    from alembic import command
    from alembic.runtime.migration import MigrationContext

    with engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            # The server's own lock, held to the end of this transaction (PostgreSQL's DDL is
            # transactional): two workstations opening a new shared catalog at once do not
            # both run the migrations; the second waits, then finds the schema current.
            connection.execute(
                text("SELECT pg_advisory_xact_lock(:key)"), {"key": _SCHEMA_LOCK_KEY}
            )
        # Read again inside the transaction: another process may have upgraded meanwhile.
        if MigrationContext.configure(connection).get_current_revision() == head:
            return
        log.info("migrating catalog schema to %s", head)
        command.upgrade(_alembic_config(connection), "head")


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


def catalog_url(url_or_path: str | Path | URL) -> URL:
    """The SQLAlchemy URL of a catalog given as a URL or a SQLite file path: a bare
    `postgresql://` URL gets the psycopg (3) driver, and a server URL without a password the
    one in QUADRAT_DATABASE_PASSWORD, if set (else libpq's PGPASSWORD or ~/.pgpass apply).
    A malformed URL raises `BadInputError`."""
    if isinstance(url_or_path, URL):
        url = url_or_path
    elif "://" not in str(url_or_path):
        return make_url(f"sqlite:///{Path(url_or_path)}")
    else:
        try:
            url = make_url(str(url_or_path))
        except Exception as error:  # sqlalchemy.exc.ArgumentError; hide a password it holds
            raise BadInputError(
                f"'{_without_password(str(url_or_path))}' is not a database URL "
                "(e.g. postgresql://USER@HOST/DATABASE)"
            ) from error
    if url.drivername in ("postgresql", "postgres"):
        url = url.set(drivername="postgresql+psycopg")
    password = os.environ.get(PASSWORD_ENV)
    if url.get_backend_name() != "sqlite" and url.password is None and password:
        url = url.set(password=password)
    return url


def _without_password(url: str) -> str:
    """A URL string as typed, with any password in it replaced by ***."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    credentials, at, host = rest.rpartition("@")
    if not at or ":" not in credentials:
        return url
    user = credentials.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}"


def open_catalog(
    url_or_path: str | Path | URL,
    *,
    lock_timeout: float = SCHEMA_LOCK_TIMEOUT_S,
    before_upgrade: BeforeUpgrade | None = None,
) -> Catalog:
    """Open (creating if needed) the catalog at a SQLAlchemy URL or a SQLite file path.

    The schema is created or upgraded under an inter-process lock (a lock file beside a
    SQLite file, where a second process waits up to `lock_timeout` seconds; the server's
    advisory lock on PostgreSQL), in one transaction; `before_upgrade` (say, a backup) runs
    before an existing catalog's schema changes. Failures raise a one-line `QuadratError`
    (`CatalogError` for database and file faults), never with the password of the URL."""
    url = catalog_url(url_or_path)
    shown = url.render_as_string(hide_password=True)
    path = sqlite_file_of(url)
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise catalog_error(error, path, opening=True) from error
    try:
        engine = create_engine(url, **_engine_options(url))
    except ModuleNotFoundError as error:  # the driver of the URL is not installed
        raise CatalogError(
            f"cannot open the catalog at {shown}: its database driver ({error.name}) is not "
            "installed; for PostgreSQL install Quadrat with the postgres extra "
            "(pip install 'quadrat[postgres]')"
        ) from error
    except Exception as error:  # a malformed URL, an unknown database kind
        raise QuadratError(f"cannot open the catalog at {shown}: {_first_line(error)}") from error
    catalog_file = sqlite_file_of(engine.url)
    where: Path | URL | None = catalog_file if engine.dialect.name == "sqlite" else engine.url
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", _sqlite_pragmas)
    try:
        with _schema_lock(catalog_file, lock_timeout):
            # The catalog's own engine connects first, and on SQLite moves what the -wal file
            # holds into the catalog file (a passive checkpoint reads every committed frame),
            # so that a catalog it cannot read (a removed -wal file, say) fails here, at open,
            # in one line, not at the first click.
            with engine.connect() as connection:
                if engine.dialect.name == "sqlite":
                    connection.exec_driver_sql("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            upgrade_schema(engine, before_upgrade)
    except QuadratError:
        engine.dispose()
        raise
    except (exc.DBAPIError, sqlite3.Error, OSError) as error:
        engine.dispose()
        raise catalog_error(error, where, opening=True) from error
    except Exception as error:  # anything else: still one line, details in the log
        engine.dispose()
        log.info("opening the catalog at %s failed", shown, exc_info=True)
        raise CatalogError(f"cannot open the catalog at {shown}: {_first_line(error)}") from error
    return Catalog(engine)


def _engine_options(url: URL) -> dict[str, Any]:
    """Engine settings per database kind."""
    if url.get_backend_name() == "postgresql":
        # pool_pre_ping: a connection the server dropped while idle (a restart, a network
        # blip, an idle timeout) is replaced before use instead of failing the next click.
        # connect_timeout: an unreachable server fails in seconds, not after TCP's minutes.
        return {"pool_pre_ping": True, "connect_args": {"connect_timeout": 10}}
    return {}
