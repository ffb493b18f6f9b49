"""a change counter for the filter column cache: bumped by the database on every write to
`images` that can change a date, month, year or box filter's answer

Revision ID: 0016
Revises: 0015

`engine.search.filter_cache` keeps each searched photo's id, date and place in memory and
answers date, month and box filters in numpy (a million ids in milliseconds, where handing
them over from SQL costs about 130 ns each). It must never answer from rows that changed
since it read them: the counter (`library_meta` key `images_changed`) is bumped by triggers in
the same transaction as the change, so every writer (the indexer, a re-scan that corrects a
date, a restore, a bulk import in SQL, another process) keeps it without knowing it exists,
and the cache compares it before each use.

SQLite: a row trigger per insert, delete, and update of the date, place or status (only when
a value really changes). PostgreSQL: one statement trigger per INSERT, UPDATE of those
columns, DELETE or TRUNCATE, so a bulk write bumps it once.

A later migration that rebuilds `images` (Alembic's batch mode copies and drops the table)
drops the SQLite triggers with it and must create them again (`create_sqlite_triggers`); the
cache checks that they exist before it trusts the counter.
"""

from __future__ import annotations

from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

COUNTER_KEY = "images_changed"
_BUMP = (
    "UPDATE library_meta SET value = CAST(CAST(value AS INTEGER) + 1 AS TEXT) "
    f"WHERE key = '{COUNTER_KEY}';"
)
# The columns a cached filter reads; a write to any other (a thumbnail, a taxon) changes nothing.
_WATCHED = ("id", "observed_at", "latitude", "longitude", "status")
_CHANGED = " OR ".join(f"NEW.{c} IS NOT OLD.{c}" for c in _WATCHED)

SQLITE_TRIGGERS = {
    "images_changed_added": f"CREATE TRIGGER images_changed_added AFTER INSERT ON images "
    f"BEGIN {_BUMP} END",
    "images_changed_updated": f"CREATE TRIGGER images_changed_updated AFTER UPDATE OF "
    f"{', '.join(_WATCHED)} ON images WHEN {_CHANGED} BEGIN {_BUMP} END",
    "images_changed_removed": f"CREATE TRIGGER images_changed_removed AFTER DELETE ON images "
    f"BEGIN {_BUMP} END",
}

_PG_FUNCTION = (
    "CREATE OR REPLACE FUNCTION images_changed() RETURNS trigger LANGUAGE plpgsql AS $$ "
    "BEGIN UPDATE library_meta SET value = (value::bigint + 1)::text "
    f"WHERE key = '{COUNTER_KEY}'; RETURN NULL; END $$"
)
_PG_TRIGGERS = {
    "images_changed_rows": "CREATE TRIGGER images_changed_rows AFTER INSERT OR DELETE OR "
    f"UPDATE OF {', '.join(_WATCHED)} ON images FOR EACH STATEMENT "
    "EXECUTE FUNCTION images_changed()",
    "images_changed_truncated": "CREATE TRIGGER images_changed_truncated AFTER TRUNCATE ON "
    "images FOR EACH STATEMENT EXECUTE FUNCTION images_changed()",
}


def create_sqlite_triggers() -> None:
    """The counter's triggers (dropped first if an earlier run left them)."""
    for name, statement in SQLITE_TRIGGERS.items():
        op.execute(f"DROP TRIGGER IF EXISTS {name}")
        op.execute(statement)


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    op.execute(f"DELETE FROM library_meta WHERE key = '{COUNTER_KEY}'")
    op.execute(f"INSERT INTO library_meta (key, value) VALUES ('{COUNTER_KEY}', '0')")
    if dialect == "sqlite":
        create_sqlite_triggers()
    elif dialect == "postgresql":
        op.execute(_PG_FUNCTION)
        for name, statement in _PG_TRIGGERS.items():
            op.execute(f"DROP TRIGGER IF EXISTS {name} ON images")
            op.execute(statement)


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        for name in SQLITE_TRIGGERS:
            op.execute(f"DROP TRIGGER IF EXISTS {name}")
    elif dialect == "postgresql":
        for name in _PG_TRIGGERS:
            op.execute(f"DROP TRIGGER IF EXISTS {name} ON images")
        op.execute("DROP FUNCTION IF EXISTS images_changed()")
    op.execute(f"DELETE FROM library_meta WHERE key = '{COUNTER_KEY}'")
