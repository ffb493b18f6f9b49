"""The catalog database: schema from migrations, SQLite settings, clear errors."""

from __future__ import annotations

import sqlite3

import pytest
from sqlalchemy import text

from engine.catalog import Base, open_catalog
from engine.errors import QuadratError


# SQLite cannot reflect the expression index of one query per text and photo, so the comparison
# passes it over there (with these two warnings) and the test below checks it is there.
@pytest.mark.filterwarnings("ignore:Skipped unsupported reflection of expression-based index")
@pytest.mark.filterwarnings("ignore:autogenerate skipping metadata-specified expression-based")
def test_migrations_build_exactly_the_schema_the_models_describe(catalog_url):
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    from engine.catalog.filter_columns import is_places_object
    from engine.catalog.pgvector import TABLE as VECTOR_TABLE
    from engine.search.fulltext import is_record_text_table

    catalog = open_catalog(catalog_url)  # SQLite and PostgreSQL
    # The FTS5 table of the records' words (and its shadow tables) is SQLite's, not a model's;
    # so are the places' R*Tree and, on PostgreSQL, their GiST index and the table of vectors
    # the server searches (its columns are added per model where the server has pgvector).
    options = {
        "include_name": lambda name, _type, _parent: (
            not (
                is_record_text_table(name or "")
                or is_places_object(name or "")
                or name == VECTOR_TABLE
            )
        )
    }
    with catalog.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn, opts=options), Base.metadata)
    catalog.dispose()
    assert diff == []


def test_sqlite_has_the_unique_key_of_queries_that_reflection_cannot_compare(tmp_path):
    catalog = open_catalog(tmp_path / "c.sqlite3")
    with catalog.engine.connect() as conn:
        sql = conn.execute(
            text("SELECT sql FROM sqlite_master WHERE name = 'uq_queries_text_image'")
        ).scalar()
    catalog.dispose()
    assert sql is not None and sql.upper().startswith("CREATE UNIQUE INDEX")


def test_sqlite_runs_in_wal_mode_with_foreign_keys(tmp_path):
    catalog = open_catalog(tmp_path / "c.sqlite3")
    with catalog.engine.connect() as conn:
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert conn.execute(text("PRAGMA foreign_keys")).scalar() == 1
        assert conn.execute(text("PRAGMA synchronous")).scalar() == 2  # FULL
    assert catalog.integrity_check() == "ok"


def test_reopening_keeps_data_and_does_not_migrate_again(tmp_path):
    path = tmp_path / "c.sqlite3"
    catalog = open_catalog(path)
    with catalog.session() as s:
        s.execute(text("INSERT INTO library_meta(key, value) VALUES ('k', 'v')"))
    catalog.dispose()
    again = open_catalog(path)
    with again.session() as s:
        assert s.execute(text("SELECT value FROM library_meta WHERE key='k'")).scalar() == "v"


def test_a_catalog_from_a_newer_version_is_refused_untouched(tmp_path):
    path = tmp_path / "c.sqlite3"
    open_catalog(path).dispose()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '9999'")
    with pytest.raises(QuadratError, match="newer Quadrat"):
        open_catalog(path)
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchone() == ("9999",)


def test_a_file_that_is_not_a_database_gives_a_clear_error(tmp_path):
    path = tmp_path / "c.sqlite3"
    path.write_bytes(b"definitely not sqlite" * 100)
    with pytest.raises(QuadratError, match="cannot open the catalog"):
        open_catalog(path)
    assert path.read_bytes().startswith(b"definitely not sqlite")
