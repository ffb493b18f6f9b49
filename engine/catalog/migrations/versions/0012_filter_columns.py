"""fast filters at millions of photos: observation date, year and month as indexed columns,
and the photos' places in an R*Tree (SQLite) or a GiST index (PostgreSQL)

Revision ID: 0012
Revises: 0011

At 5 million photos a months, box or date-range filter read every row of `images` (1.6-1.9 s).
`observed_date`, `observed_year` and `observed_month` are the observer's local date and its
parts, derived from `observed_at` by the database itself (triggers), so every writer (the
indexer, a re-scan that corrects a date, a restore, a bulk import in SQL) keeps them in step
without knowing they exist. The filters read them through indexes of the column and the
status.

Places: on SQLite the R*Tree `image_places` holds each searched photo that has a position
(its id, the point as a degenerate box, and the exact coordinates as auxiliary columns, since
the R*Tree's own are 32-bit and rounded outwards), kept by triggers on `images`. On PostgreSQL
a GiST index over `point(longitude, latitude)` does the same job with nothing to keep.

The rows already catalogued are filled after the upgrade, not in it: this migration is one
transaction (an interrupted upgrade changes nothing), adds the columns, indexes and triggers,
and leaves the fill of existing rows to `engine.catalog.filter_columns.fill_filter_columns`
(chunked, with progress, resumable; the filters use the new columns only once it is done).

A later migration that rebuilds `images` (Alembic's batch mode copies and drops the table)
drops the SQLite triggers with it and must create them again (`create_sqlite_triggers`).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from engine.catalog.migrations import leftovers

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

COLUMNS = ("observed_date", "observed_year", "observed_month")
# With the status, so a filter's query ("... AND status = 'ok'") reads the index alone. Not
# partial (WHERE status = 'ok'): SQLite, without statistics, would walk a partial index for
# every query that says "status = 'ok'", fetching each row through it (ten times slower than
# reading the table).
# The month rides in the date index too, so a date range with months reads that index alone.
INDEXES = {
    "ix_images_observed_date_status": ["observed_date", "observed_month", "status"],
    "ix_images_observed_month_status": ["observed_month", "status"],
}
PLACES = "image_places"  # the SQLite R*Tree
PLACE_INDEX = "ix_images_ok_place"  # the PostgreSQL GiST index

# observed_at is "YYYY-MM-DD HH:MM:SS[.ffffff]" text on SQLite (SQLAlchemy's DateTime, years
# written with four digits): its first ten characters are the local date.
_SQLITE_DATE_PARTS = (
    "observed_date = substr({row}.observed_at, 1, 10), "
    "observed_year = CAST(substr({row}.observed_at, 1, 4) AS INTEGER), "
    "observed_month = CAST(substr({row}.observed_at, 6, 2) AS INTEGER)"
)


def _sqlite_place(row: str) -> str:
    """INSERT of one photo's place into the R*Tree when it is searched and has a position."""
    return (
        f"INSERT OR REPLACE INTO {PLACES} (id, min_lat, max_lat, min_lon, max_lon, latitude, "
        f"longitude) SELECT {row}.id, {row}.latitude, {row}.latitude, {row}.longitude, "
        f"{row}.longitude, {row}.latitude, {row}.longitude WHERE {row}.status = 'ok' AND "
        f"{row}.latitude IS NOT NULL AND {row}.longitude IS NOT NULL;"
    )


SQLITE_TRIGGERS = {
    "images_observed_added": (
        "CREATE TRIGGER images_observed_added AFTER INSERT ON images "
        "WHEN NEW.observed_at IS NOT NULL BEGIN "
        f"UPDATE images SET {_SQLITE_DATE_PARTS.format(row='NEW')} WHERE id = NEW.id; END"
    ),
    "images_observed_changed": (
        "CREATE TRIGGER images_observed_changed AFTER UPDATE OF observed_at ON images "
        "WHEN NEW.observed_at IS NOT OLD.observed_at BEGIN "
        f"UPDATE images SET {_SQLITE_DATE_PARTS.format(row='NEW')} WHERE id = NEW.id; END"
    ),
    "images_place_added": (
        f"CREATE TRIGGER images_place_added AFTER INSERT ON images BEGIN {_sqlite_place('NEW')} END"
    ),
    "images_place_changed": (
        "CREATE TRIGGER images_place_changed AFTER UPDATE OF latitude, longitude, status "
        "ON images WHEN NEW.latitude IS NOT OLD.latitude OR NEW.longitude IS NOT OLD.longitude "
        "OR NEW.status IS NOT OLD.status BEGIN "
        f"DELETE FROM {PLACES} WHERE id = OLD.id; {_sqlite_place('NEW')} END"
    ),
    "images_place_removed": (
        "CREATE TRIGGER images_place_removed AFTER DELETE ON images BEGIN "
        f"DELETE FROM {PLACES} WHERE id = OLD.id; END"
    ),
}

# PostgreSQL changes the row before it is written: no second write per photo.
_PG_FUNCTION = (
    "CREATE OR REPLACE FUNCTION images_observed_parts() RETURNS trigger LANGUAGE plpgsql AS $$ "
    "BEGIN NEW.observed_date := NEW.observed_at::date; "
    "NEW.observed_year := extract(year FROM NEW.observed_at)::integer; "
    "NEW.observed_month := extract(month FROM NEW.observed_at)::integer; "
    "RETURN NEW; END $$"
)
_PG_TRIGGER = (
    "CREATE TRIGGER images_observed_parts BEFORE INSERT OR UPDATE OF observed_at ON images "
    "FOR EACH ROW EXECUTE FUNCTION images_observed_parts()"
)


def create_sqlite_triggers() -> None:
    """The R*Tree's and the date columns' triggers (dropped first if an earlier run left them)."""
    for name, statement in SQLITE_TRIGGERS.items():
        op.execute(f"DROP TRIGGER IF EXISTS {name}")
        op.execute(statement)


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    missing = [c for c in COLUMNS if not leftovers.has_column("images", c)]
    if missing:
        with op.batch_alter_table("images", schema=None) as batch_op:
            if "observed_date" in missing:
                batch_op.add_column(sa.Column("observed_date", sa.Date(), nullable=True))
            if "observed_year" in missing:
                batch_op.add_column(sa.Column("observed_year", sa.Integer(), nullable=True))
            if "observed_month" in missing:
                batch_op.add_column(sa.Column("observed_month", sa.Integer(), nullable=True))
    for name, columns in INDEXES.items():
        leftovers.drop_leftover_index("images", name)
        op.create_index(name, "images", columns)
    if dialect == "sqlite":
        op.execute(f"DROP TABLE IF EXISTS {PLACES}")
        # Auxiliary columns (+) keep the exact coordinates: the filters decide on them.
        op.execute(
            f"CREATE VIRTUAL TABLE {PLACES} USING rtree(id, min_lat, max_lat, min_lon, "
            "max_lon, +latitude, +longitude)"
        )
        create_sqlite_triggers()
    elif dialect == "postgresql":
        op.execute(_PG_FUNCTION)
        op.execute("DROP TRIGGER IF EXISTS images_observed_parts ON images")
        op.execute(_PG_TRIGGER)
        op.execute(f"DROP INDEX IF EXISTS {PLACE_INDEX}")
        op.execute(
            f"CREATE INDEX {PLACE_INDEX} ON images USING gist (point(longitude, latitude)) "
            "WHERE status = 'ok'"
        )
    # A catalog without photos (a new one) has nothing to fill.
    if op.get_bind().execute(sa.text("SELECT id FROM images LIMIT 1")).first() is None:
        op.execute("DELETE FROM library_meta WHERE key = 'filter_columns'")
        op.execute("INSERT INTO library_meta (key, value) VALUES ('filter_columns', 'filled')")


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        for name in SQLITE_TRIGGERS:
            op.execute(f"DROP TRIGGER IF EXISTS {name}")
        op.execute(f"DROP TABLE IF EXISTS {PLACES}")
    elif dialect == "postgresql":
        op.execute(f"DROP INDEX IF EXISTS {PLACE_INDEX}")
        op.execute("DROP TRIGGER IF EXISTS images_observed_parts ON images")
        op.execute("DROP FUNCTION IF EXISTS images_observed_parts()")
    for name in INDEXES:
        op.drop_index(name, table_name="images")
    with op.batch_alter_table("images", schema=None) as batch_op:
        for column in reversed(COLUMNS):
            batch_op.drop_column(column)
    op.execute("DELETE FROM library_meta WHERE key LIKE 'filter_columns%'")
