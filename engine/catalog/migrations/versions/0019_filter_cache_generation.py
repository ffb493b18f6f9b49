"""the filter cache's change counter becomes a generation that never repeats: each write to
`images` that can change a date, month, year or box filter's answer draws a new random value

Revision ID: 0019
Revises: 0018

Migration 0016's counter went up by one per write, so a catalog put back from a backup (or a
dump) came back to an older value, and as many writes later to the very value a cache in
another process had read its rows at: that cache then answered from rows that were no longer
there. A random value (128 bits) drawn by each write names one state of the rows: a restore
brings back the value that belonged to the restored rows, and the next write draws a value no
state ever had. `engine.search.filter_cache` keeps its rows only while the generation
(`library_meta` key `images_generation`) is the one it read them at.

SQLite: a row trigger per insert, delete, and update of the date, place or status (only when a
value really changes). PostgreSQL: one statement trigger per INSERT, UPDATE of those columns,
DELETE or TRUNCATE. Migration 0016's triggers, function and key are dropped.

A later migration that rebuilds `images` (Alembic's batch mode copies and drops the table)
drops the SQLite triggers with it and must create them again (`create_sqlite_triggers`); the
cache checks that they exist (and SQLite's schema version) before it trusts the generation.
"""

from __future__ import annotations

from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

GENERATION_KEY = "images_generation"
_OLD_COUNTER_KEY = "images_changed"
_OLD_SQLITE_TRIGGERS = ("images_changed_added", "images_changed_updated", "images_changed_removed")
_OLD_PG_TRIGGERS = ("images_changed_rows", "images_changed_truncated")

_SQLITE_NEW = (
    f"UPDATE library_meta SET value = lower(hex(randomblob(16))) WHERE key = '{GENERATION_KEY}';"
)
# The columns a cached filter reads; a write to any other (a thumbnail, a taxon) changes nothing.
_WATCHED = ("id", "observed_at", "latitude", "longitude", "status")
_CHANGED = " OR ".join(f"NEW.{c} IS NOT OLD.{c}" for c in _WATCHED)

SQLITE_TRIGGERS = {
    "images_generation_added": "CREATE TRIGGER images_generation_added AFTER INSERT ON images "
    f"BEGIN {_SQLITE_NEW} END",
    "images_generation_updated": "CREATE TRIGGER images_generation_updated AFTER UPDATE OF "
    f"{', '.join(_WATCHED)} ON images WHEN {_CHANGED} BEGIN {_SQLITE_NEW} END",
    "images_generation_removed": "CREATE TRIGGER images_generation_removed AFTER DELETE ON "
    f"images BEGIN {_SQLITE_NEW} END",
}

# random() alone is a per-session generator; the clock and the transaction id make two
# sessions' draws differ too (md5: any version of PostgreSQL, no extension).
_PG_FUNCTION = (
    "CREATE OR REPLACE FUNCTION images_generation() RETURNS trigger LANGUAGE plpgsql AS $$ "
    "BEGIN UPDATE library_meta SET value = md5(random()::text || clock_timestamp()::text || "
    f"txid_current()::text || pg_backend_pid()::text) WHERE key = '{GENERATION_KEY}'; "
    "RETURN NULL; END $$"
)
PG_TRIGGERS = {
    "images_generation_rows": "CREATE TRIGGER images_generation_rows AFTER INSERT OR DELETE OR "
    f"UPDATE OF {', '.join(_WATCHED)} ON images FOR EACH STATEMENT "
    "EXECUTE FUNCTION images_generation()",
    "images_generation_truncated": "CREATE TRIGGER images_generation_truncated AFTER TRUNCATE "
    "ON images FOR EACH STATEMENT EXECUTE FUNCTION images_generation()",
}


def create_sqlite_triggers() -> None:
    """The generation's triggers (dropped first if an earlier run left them)."""
    for name, statement in SQLITE_TRIGGERS.items():
        op.execute(f"DROP TRIGGER IF EXISTS {name}")
        op.execute(statement)


def _drop_counter() -> None:
    """Migration 0016's triggers, function and key."""
    if op.get_bind().dialect.name == "sqlite":
        for name in _OLD_SQLITE_TRIGGERS:
            op.execute(f"DROP TRIGGER IF EXISTS {name}")
    else:
        for name in _OLD_PG_TRIGGERS:
            op.execute(f"DROP TRIGGER IF EXISTS {name} ON images")
        op.execute("DROP FUNCTION IF EXISTS images_changed()")
    op.execute(f"DELETE FROM library_meta WHERE key = '{_OLD_COUNTER_KEY}'")


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    _drop_counter()
    op.execute(f"DELETE FROM library_meta WHERE key = '{GENERATION_KEY}'")
    first = (
        "lower(hex(randomblob(16)))"
        if dialect == "sqlite"
        else "md5(random()::text || clock_timestamp()::text)"
    )
    op.execute(f"INSERT INTO library_meta (key, value) VALUES ('{GENERATION_KEY}', {first})")
    if dialect == "sqlite":
        create_sqlite_triggers()
    else:
        op.execute(_PG_FUNCTION)
        for name, statement in PG_TRIGGERS.items():
            op.execute(f"DROP TRIGGER IF EXISTS {name} ON images")
            op.execute(statement)


def downgrade() -> None:
    """Back to migration 0016's counter, from 0 (a cache of 0016 reads its rows again)."""
    import importlib

    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        for name in SQLITE_TRIGGERS:
            op.execute(f"DROP TRIGGER IF EXISTS {name}")
    else:
        for name in PG_TRIGGERS:
            op.execute(f"DROP TRIGGER IF EXISTS {name} ON images")
        op.execute("DROP FUNCTION IF EXISTS images_generation()")
    op.execute(f"DELETE FROM library_meta WHERE key = '{GENERATION_KEY}'")
    counter = importlib.import_module(
        "engine.catalog.migrations.versions.0016_filter_cache_counter"
    )
    counter.upgrade()
