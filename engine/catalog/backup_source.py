"""The catalog a backup is read from or a restore writes into, as backups and restores see it.

A catalog may be given as a path, a URL (str or SQLAlchemy), an Engine, a `Catalog` or a
`Library`; these helpers find its SQLite file (when it has one), open short-lived engines of
their own whose transactions are real ones, and turn faults into one-line errors. Shared by
`engine.catalog.backup`, `engine.catalog.judgments_backup` and `engine.catalog.restore`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.errors import QuadratError

if TYPE_CHECKING:
    from sqlalchemy import Connection, Engine
    from sqlalchemy.engine import URL

# The two kinds of backup file (see engine.catalog.backup).
KIND_FULL = "full"
KIND_JUDGMENTS = "judgments"
BUSY_TIMEOUT_S = 10.0

CatalogRef = Any  # a path, a URL (str or SQLAlchemy), an Engine, a Catalog or a Library
# A full restore's mark in the restored catalog (`library_meta`): a new random value each time.
# Vector index files are saved with the mark they were made under and rebuilt when it is not
# the catalog's (their ids may since name other photos); a process with the library open drops
# the indexes it holds (`engine.catalog.library.Library.vector_index`).
META_RESTORED = "catalog_restored"


def url_of(catalog: CatalogRef) -> URL | None:
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
    """The catalog as text: its URL without the password, or its path."""
    url = url_of(catalog)
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


@contextlib.contextmanager
def catalog_engine(catalog: CatalogRef) -> Iterator[Engine]:
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
        url = url_of(catalog) or catalog_url(os.fspath(catalog))
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
def catalog_errors(catalog: CatalogRef) -> Iterator[None]:
    """Database faults while reading or writing the catalog as one-line `CatalogError`s."""
    from engine.catalog.db import catalog_faults

    where: Any
    try:
        where = sqlite_catalog_file(catalog)
    except QuadratError:
        where = url_of(catalog)
        if where is None:
            from engine.catalog.db import catalog_url

            where = catalog_url(os.fspath(catalog))
    with catalog_faults(where):
        yield


def open_read_only(path: Path) -> sqlite3.Connection:
    """A read-only connection to a SQLite file (a backup is never changed by reading it)."""
    return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S)


def integrity(conn: sqlite3.Connection) -> str:
    """SQLite's integrity check in one line: "ok", or its first few findings."""
    rows = conn.execute("PRAGMA integrity_check").fetchall()
    return "; ".join(str(r[0]) for r in rows[:3]) if rows else "no answer"


def failure_cause(exc: BaseException) -> str:
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


def fsync_file(path: Path) -> None:
    """Flush a written file to disk before it is renamed into place."""
    with open(path, "rb+") as handle:
        os.fsync(handle.fileno())
