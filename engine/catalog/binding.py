"""Which catalog a library folder belongs to.

A library folder holds its own SQLite catalog (`catalog.sqlite3`) unless it was created with a
database URL: then the folder records that URL in `catalog.url` (never the password, which
comes from QUADRAT_DATABASE_PASSWORD, PGPASSWORD or ~/.pgpass), and opening the folder opens
that catalog. Several folders, on several workstations, may belong to one server catalog; each
keeps its own vector index files, built from the catalog's `embeddings` table.
"""

from __future__ import annotations

import os
from pathlib import Path

from sqlalchemy import URL

from engine.catalog.db import catalog_url
from engine.errors import BadInputError, CatalogError

BINDING_FILE = "catalog.url"
_HEADER = (
    "# The catalog this library folder belongs to, written by Quadrat when the folder was\n"
    "# created with a database URL. The password is never stored here: Quadrat takes it from\n"
    "# QUADRAT_DATABASE_PASSWORD, PGPASSWORD or ~/.pgpass.\n"
)
_DEFAULT_PORTS = {"postgresql": 5432, "mysql": 3306, "mariadb": 3306}


def shown(url: URL) -> str:
    """A catalog URL as messages and the binding file show it: without its password."""
    return url._replace(password=None).render_as_string(hide_password=False)


def bound_url(root: Path) -> URL | None:
    """The catalog URL recorded in the library folder `root` (None: it has none)."""
    path = root / BINDING_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as error:
        raise CatalogError(
            f"cannot read {path} ({error.strerror or error}): make it readable, or pick "
            "another library folder"
        ) from error
    lines = [line.strip() for line in text.splitlines()]
    urls = [line for line in lines if line and not line.startswith("#")]
    if len(urls) != 1:
        raise BadInputError(
            f"{path} should hold one database URL; fix it, or remove it to give the folder "
            "its own catalog"
        )
    return catalog_url(urls[0])


def same_catalog(a: URL, b: URL) -> bool:
    """Whether two URLs name the same catalog (the password and driver options aside)."""
    if a.get_backend_name() != b.get_backend_name():
        return False
    if a.get_backend_name() == "sqlite":
        return _sqlite_path(a) == _sqlite_path(b)
    default_port = _DEFAULT_PORTS.get(a.get_backend_name())
    return (
        (a.host or "localhost").lower(),
        a.port or default_port,
        a.database,
        a.username,
    ) == ((b.host or "localhost").lower(), b.port or default_port, b.database, b.username)


def _sqlite_path(url: URL) -> str:
    return os.path.realpath(url.database) if url.database else ""


def choose_catalog(root: Path, default_file: Path, database_url: str | None) -> URL:
    """The catalog to open for the library folder `root`, given the database URL asked for
    (the command line's or the settings'; None: none).

    A folder that records a catalog opens it; a URL naming another one is refused, as is a
    server URL for a folder that already holds its own catalog file. Raises `BadInputError`
    with one line that says which catalog the folder belongs to and the way on."""
    bound = bound_url(root)
    asked = catalog_url(database_url) if database_url else None
    if asked is not None and asked.get_backend_name() == "sqlite" and not asked.database:
        asked = None  # "sqlite://": an in-memory catalog would be lost; keep the folder's own
    if bound is not None:
        if asked is None:
            return bound
        if not same_catalog(bound, asked):
            raise BadInputError(
                f"the library folder {root} belongs to the catalog {shown(bound)}, not "
                f"{shown(asked)}: open the folder without a database URL, or pick another "
                "(new) library folder for that catalog"
            )
        return asked  # it may carry the password
    if asked is None or same_catalog(asked, catalog_url(default_file)):
        return catalog_url(default_file)
    if default_file.exists():
        raise BadInputError(
            f"the library folder {root} has its own catalog ({default_file.name}), so it cannot "
            f"belong to {shown(asked)}: pick another (new) library folder for that catalog, or "
            "clear the database URL (Settings or --database-url) to open this one"
        )
    return asked


def record_catalog(root: Path, url: URL, default_file: Path) -> None:
    """Write the folder's binding to `url` (nothing for the folder's own catalog file or an
    existing binding). Written atomically, without the password."""
    if same_catalog(url, catalog_url(default_file)) or bound_url(root) is not None:
        return
    path = root / BINDING_FILE
    partial = path.with_name(f".{path.name}.partial")
    try:
        partial.write_text(f"{_HEADER}{shown(url)}\n", encoding="utf-8")
        os.replace(partial, path)
    except OSError as error:
        partial.unlink(missing_ok=True)
        raise CatalogError(
            f"cannot write {path} ({error.strerror or error}); pick a writable library folder "
            "with --library or in Settings"
        ) from error
