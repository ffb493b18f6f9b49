"""Fixtures that run a test against both catalog databases: SQLite and PostgreSQL.

The PostgreSQL variant needs a server: QUADRAT_TEST_POSTGRES_URL names a role on it that may
create databases (e.g. postgresql://quadrat:secret@127.0.0.1:5432/quadrat); each test gets a
fresh database, dropped afterwards. Without the variable those variants are skipped, except
under CI=true, where they fail: CI must not pass by skipping them (.ci/run starts a server).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import URL, create_engine, make_url, text

POSTGRES_ENV = "QUADRAT_TEST_POSTGRES_URL"
DATABASES = ("sqlite", "postgresql")


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


@pytest.fixture(scope="session")
def postgres_server() -> URL:
    """The test server's URL (with the psycopg driver); skips, or fails under CI, without it."""
    raw = os.environ.get(POSTGRES_ENV, "").strip()
    if not raw:
        if _in_ci():
            pytest.fail(
                f"CI=true but {POSTGRES_ENV} is not set: the PostgreSQL variants must run in CI "
                "(.ci/run starts a server and sets it)"
            )
        pytest.skip(f"{POSTGRES_ENV} is not set (a PostgreSQL role that may create databases)")
    url = make_url(raw)
    if url.drivername in ("postgresql", "postgres"):
        url = url.set(drivername="postgresql+psycopg")
    return url


@pytest.fixture
def postgres_url(postgres_server: URL) -> Iterator[str]:
    """The URL of a fresh, empty database on the test server (dropped after the test)."""
    name = f"quadrat_test_{uuid.uuid4().hex[:16]}"
    admin = create_engine(postgres_server, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        yield postgres_server.set(database=name).render_as_string(hide_password=False)
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


@pytest.fixture(params=DATABASES)
def catalog_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A catalog URL of each database: a SQLite file in the test's folder, then a fresh
    PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'catalog.sqlite3'}"
    return str(request.getfixturevalue("postgres_url"))


def folder_url(catalog_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """`catalog_url` as a library folder records it: without its password, which goes into the
    environment (as users give it; subprocesses inherit it)."""
    from engine.catalog.db import PASSWORD_ENV

    url = make_url(catalog_url)
    if url.password:
        monkeypatch.setenv(PASSWORD_ENV, url.password)
    return url._replace(password=None).render_as_string(hide_password=False)


def add_plain_photos(library: Any, root: Path, count: int) -> None:
    """`count` catalog photos of one collection at `root`, with no files or vectors: enough
    to judge them."""
    from engine.catalog import Collection, Image

    with library.catalog.session() as s:
        collection = Collection(root=str(root), name=root.name)
        s.add(collection)
        s.flush()
        s.add_all(
            Image(collection_id=collection.id, rel_path=f"p{i}.jpg", size=1, mtime_ns=1)
            for i in range(count)
        )


# -- a server with pgvector -------------------------------------------------------------------

PGVECTOR_ENV = "QUADRAT_TEST_PGVECTOR_URL"


@pytest.fixture(scope="session")
def pgvector_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[URL]:
    """A PostgreSQL server with pgvector, started once per session: the `pgserver` wheel's
    (PostgreSQL 16, pgvector 0.6) unless QUADRAT_TEST_PGVECTOR_URL names a superuser role on
    another. Skips without pgserver, fails instead under CI=true."""
    raw = os.environ.get(PGVECTOR_ENV, "").strip()
    if raw:
        url = make_url(raw)
        yield url.set(drivername="postgresql+psycopg") if url.drivername == "postgresql" else url
        return
    try:
        import pgserver
    except ImportError:
        if _in_ci():
            pytest.fail(
                "CI=true but pgserver is not installed: the pgvector variants must run in CI "
                "(pip install pgserver, or set QUADRAT_TEST_PGVECTOR_URL)"
            )
        pytest.skip(
            "pgserver is not installed (pip install pgserver: PostgreSQL 16 with pgvector "
            "for the pgvector tests), and QUADRAT_TEST_PGVECTOR_URL is not set"
        )
    # A short folder: the server's Unix socket lives in it (paths of sockets are short).
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="qpgv"))
    server = pgserver.get_server(folder, cleanup_mode="delete")
    try:
        yield make_url(server.get_uri()).set(drivername="postgresql+psycopg")
    finally:
        server.cleanup()


@pytest.fixture
def pgvector_url(pgvector_server: URL) -> Iterator[str]:
    """A fresh database on the pgvector server with the extension created (dropped after)."""
    name = f"quadrat_pgv_{uuid.uuid4().hex[:16]}"
    admin = create_engine(pgvector_server, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        database = create_engine(pgvector_server.set(database=name), isolation_level="AUTOCOMMIT")
        with database.connect() as conn:
            conn.execute(text("CREATE EXTENSION IF NOT EXISTS vector"))
        database.dispose()
        yield pgvector_server.set(database=name).render_as_string(hide_password=False)
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()
