"""Opening a catalog database: engine, SQLite pragmas, migrations to the current schema."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.orm import Session, sessionmaker

from engine.errors import QuadratError

log = logging.getLogger(__name__)

MIGRATIONS_DIR = Path(__file__).with_name("migrations")


def _sqlite_pragmas(dbapi_connection, _record) -> None:  # noqa: ANN001 - DB-API object
    cursor = dbapi_connection.cursor()
    # WAL lets the GUI read while the indexer writes; FULL makes each commit (a judgment, an
    # indexing checkpoint) survive a power cut, not only a process crash.
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=FULL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.close()


class Catalog:
    """A catalog database: `session()` gives a short-lived transactional session."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._sessions = sessionmaker(engine, expire_on_commit=False)

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A session that commits on success and rolls back on any exception."""
        with self._sessions() as session, session.begin():
            yield session

    def integrity_check(self) -> str:
        """SQLite's `PRAGMA integrity_check` result ("ok" when healthy)."""
        with self.engine.connect() as conn:
            return str(conn.execute(text("PRAGMA integrity_check")).scalar())

    def dispose(self) -> None:
        self.engine.dispose()


def _alembic_config(connection):  # noqa: ANN001, ANN202 - alembic types imported lazily
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["connection"] = connection
    return cfg


def upgrade_schema(engine: Engine) -> None:
    """Bring the schema to the newest revision (no-op when it is already there)."""
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


def open_catalog(url_or_path: str | Path) -> Catalog:
    """Open (creating if needed) the catalog at a SQLAlchemy URL or a SQLite file path."""
    url = str(url_or_path)
    if "://" not in url:
        path = Path(url)
        path.parent.mkdir(parents=True, exist_ok=True)
        url = f"sqlite:///{path}"
    engine = create_engine(url)
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", _sqlite_pragmas)
    try:
        upgrade_schema(engine)
    except QuadratError:
        engine.dispose()
        raise
    except Exception as exc:  # a file that is not a database, a locked or read-only file
        engine.dispose()
        raise QuadratError(f"cannot open the catalog at {url}: {exc}") from exc
    return Catalog(engine)
