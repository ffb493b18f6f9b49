"""keywords and ratings read from XMP sidecars and embedded XMP/IPTC, searched with the record

Revision ID: 0015
Revises: 0014

`images.keywords` holds a photo's keywords (flat and hierarchical, "Quadrat|lifeStage|juvenile"),
one per line, as digiKam, Lightroom, darktable or exiftool wrote them into its sidecar or into
the file; `images.rating` its XMP rating (-1 rejected, 0..5); `images.keywords_source` what
they were read from (the photo's size and mtime, the sidecar's name and mtime), so a re-scan
reads them again only where a file changed (`engine/indexing/keywords.py`).

The keywords are words of the record: `record_text` gains a fourth column `keywords`. On
SQLite the FTS5 table is built again (an FTS5 table takes no new column) with 0005's triggers
now watching `keywords` too; on PostgreSQL 0010's table gets the column, its generated
`document` and `doclen` are made again over four columns, and its trigger and function watch
`keywords`. A photo with keywords and neither a taxon nor notes now has a record.
"""

import importlib.util
import sqlite3
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import op

from engine.catalog.migrations import leftovers

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

_COLUMNS = (
    ("keywords", sa.Text()),
    ("rating", sa.Integer()),
    ("keywords_source", sa.Text()),
)

# -- SQLite: 0005's FTS5 table and triggers, with a keywords column -------------------------

_NAMES = (
    "trim(coalesce({t}.name, '') || ' ' || coalesce({t}.kingdom, '') || ' ' || "
    "coalesce({t}.phylum, '') || ' ' || coalesce({t}.\"class\", '') || ' ' || "
    "coalesce({t}.\"order\", '') || ' ' || coalesce({t}.family, '') || ' ' || "
    "coalesce({t}.genus, '') || ' ' || coalesce({t}.specific_epithet, ''))"
)
_TAXON_WORDS = (
    "name",
    "common_name",
    "kingdom",
    "phylum",
    "class",
    "order",
    "family",
    "genus",
    "specific_epithet",
)
_SEARCHED = "({r}.taxon_id IS NOT NULL OR {r}.notes IS NOT NULL OR {r}.keywords IS NOT NULL)"


def _insert_photo(row: str) -> str:
    """INSERT of one photo's words (`row` is NEW inside an images trigger)."""
    return (
        f"INSERT INTO record_text(rowid, names, common, notes, keywords) SELECT {row}.id, "
        f"(SELECT {_NAMES.format(t='t')} FROM taxa t WHERE t.id = {row}.taxon_id), "
        f"(SELECT t.common_name FROM taxa t WHERE t.id = {row}.taxon_id), {row}.notes, "
        f"{row}.keywords WHERE {row}.status = 'ok' AND {_SEARCHED.format(r=row)};"
    )


_CHANGED = " OR ".join(f'OLD."{c}" IS NOT NEW."{c}"' for c in _TAXON_WORDS)
_TAXON_COLUMNS = ", ".join(f'"{c}"' for c in _TAXON_WORDS)

SQLITE_TRIGGERS = (
    "record_text_image_added",
    "record_text_image_removed",
    "record_text_image_changed",
    "record_text_taxon_changed",
)

SQLITE_STATEMENTS = (
    "CREATE VIRTUAL TABLE record_text USING fts5("
    "names, common, notes, keywords, tokenize = 'unicode61 remove_diacritics 2')",
    "CREATE TRIGGER record_text_image_added AFTER INSERT ON images BEGIN "
    + _insert_photo("NEW")
    + " END",
    "CREATE TRIGGER record_text_image_removed AFTER DELETE ON images BEGIN "
    "DELETE FROM record_text WHERE rowid = OLD.id; END",
    # Only the columns whose change changes the words (or whether the photo is searched).
    "CREATE TRIGGER record_text_image_changed AFTER UPDATE OF status, taxon_id, notes, keywords "
    "ON images WHEN OLD.status IS NOT NEW.status OR OLD.taxon_id IS NOT NEW.taxon_id "
    "OR OLD.notes IS NOT NEW.notes OR OLD.keywords IS NOT NEW.keywords BEGIN "
    "DELETE FROM record_text WHERE rowid = OLD.id; " + _insert_photo("NEW") + " END",
    f"CREATE TRIGGER record_text_taxon_changed AFTER UPDATE OF {_TAXON_COLUMNS} ON taxa "
    f"WHEN {_CHANGED} BEGIN "
    "DELETE FROM record_text WHERE rowid IN (SELECT id FROM images WHERE taxon_id = NEW.id); "
    "INSERT INTO record_text(rowid, names, common, notes, keywords) "
    f"SELECT i.id, {_NAMES.format(t='NEW')}, NEW.common_name, i.notes, i.keywords FROM images i "
    "WHERE i.taxon_id = NEW.id AND i.status = 'ok'; END",
)

FILL = (
    "INSERT INTO record_text(rowid, names, common, notes, keywords) "
    f"SELECT i.id, {_NAMES.format(t='t')}, t.common_name, i.notes, i.keywords "
    "FROM images i LEFT JOIN taxa t ON t.id = i.taxon_id "
    f"WHERE i.status = 'ok' AND {_SEARCHED.format(r='i')}"
)

# -- PostgreSQL: 0010's table with a keywords column ---------------------------------------

CONFIG = "quadrat_words"
_CLEAN = (
    "regexp_replace(coalesce(names, '') || ' ' || coalesce(common, '') || ' ' || "
    "coalesce(notes, '') || ' ' || coalesce(keywords, ''), '[[:space:][:punct:]]+', ' ', 'g')"
)
_PG_PHOTO_FUNCTION = (
    "CREATE OR REPLACE FUNCTION record_text_photo() RETURNS trigger LANGUAGE plpgsql AS $$ "
    "BEGIN IF TG_OP = 'UPDATE' THEN DELETE FROM record_text WHERE image_id = OLD.id; END IF; "
    f"IF NEW.status = 'ok' AND {_SEARCHED.format(r='NEW')} THEN "
    "INSERT INTO record_text (image_id, names, common, notes, keywords) "
    f"SELECT NEW.id, (SELECT {_NAMES.format(t='t')} FROM taxa t WHERE t.id = NEW.taxon_id), "
    "(SELECT t.common_name FROM taxa t WHERE t.id = NEW.taxon_id), NEW.notes, NEW.keywords; "
    "END IF; RETURN NULL; END $$"
)
PG_STATEMENTS = (
    "ALTER TABLE record_text ADD COLUMN keywords TEXT",
    # Generated columns cannot be altered: dropped (the GIN index with them) and made again.
    "ALTER TABLE record_text DROP COLUMN document, DROP COLUMN doclen",
    f"ALTER TABLE record_text ADD COLUMN document tsvector GENERATED ALWAYS AS "
    f"(to_tsvector('{CONFIG}', {_CLEAN})) STORED",
    "ALTER TABLE record_text ADD COLUMN doclen INTEGER GENERATED ALWAYS AS "
    f"(coalesce(array_length(regexp_split_to_array(btrim({_CLEAN}), ' +'), 1), 0) - "
    f"CASE WHEN btrim({_CLEAN}) = '' THEN 1 ELSE 0 END) STORED",
    "CREATE INDEX ix_record_text_document ON record_text USING gin (document)",
    _PG_PHOTO_FUNCTION,
    "DROP TRIGGER IF EXISTS record_text_image_changed ON images",
    "CREATE TRIGGER record_text_image_changed AFTER UPDATE OF status, taxon_id, notes, keywords "
    "ON images FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status "
    "OR OLD.taxon_id IS DISTINCT FROM NEW.taxon_id OR OLD.notes IS DISTINCT FROM NEW.notes "
    "OR OLD.keywords IS DISTINCT FROM NEW.keywords) EXECUTE FUNCTION record_text_photo()",
)


def _add_columns() -> None:
    missing = [(name, kind) for name, kind in _COLUMNS if not leftovers.has_column("images", name)]
    if missing:
        with op.batch_alter_table("images", schema=None) as batch_op:
            for name, kind in missing:
                batch_op.add_column(sa.Column(name, kind, nullable=True))


def upgrade() -> None:
    _add_columns()
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        # No photo has keywords yet: the rows 0005 filled are rebuilt as they were, with an
        # empty keywords column, and the triggers take over from here.
        for trigger in SQLITE_TRIGGERS:
            op.execute(f"DROP TRIGGER IF EXISTS {trigger}")
        op.execute("DROP TABLE IF EXISTS record_text")
        for statement in SQLITE_STATEMENTS:
            op.execute(statement)
        op.execute(FILL)
    elif dialect == "postgresql":
        if leftovers.has_column("record_text", "keywords"):
            return  # one transaction on PostgreSQL: present means done
        for statement in PG_STATEMENTS:
            op.execute(statement)


def _revision(file_name: str) -> Any:
    """An earlier migration's module (its record_text of three columns), loaded by path."""
    path = Path(__file__).with_name(file_name)
    spec = importlib.util.spec_from_file_location(f"quadrat_migration_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        before = _revision("0005_record_text.py")
        for trigger in SQLITE_TRIGGERS:
            op.execute(f"DROP TRIGGER IF EXISTS {trigger}")
        op.execute("DROP TABLE IF EXISTS record_text")
    elif dialect == "postgresql":
        # The generated columns read keywords: they go with it and are made again over three.
        op.execute("ALTER TABLE record_text DROP COLUMN keywords CASCADE")
        clean = _CLEAN.replace(" || ' ' || coalesce(keywords, '')", "")
        op.execute(
            f"ALTER TABLE record_text ADD COLUMN document tsvector GENERATED ALWAYS AS "
            f"(to_tsvector('{CONFIG}', {clean})) STORED"
        )
        op.execute(
            "ALTER TABLE record_text ADD COLUMN doclen INTEGER GENERATED ALWAYS AS "
            f"(coalesce(array_length(regexp_split_to_array(btrim({clean}), ' +'), 1), 0) - "
            f"CASE WHEN btrim({clean}) = '' THEN 1 ELSE 0 END) STORED"
        )
        op.execute("CREATE INDEX ix_record_text_document ON record_text USING gin (document)")
        pg_before = _revision("0010_postgres_full_text.py")
        op.execute("DROP TRIGGER IF EXISTS record_text_image_changed ON images")
        op.execute(
            pg_before._PHOTO_FUNCTION.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION")
        )
        for statement in pg_before.STATEMENTS:
            if "TRIGGER record_text_image_changed" in statement:
                op.execute(statement)
    if dialect == "sqlite" and sqlite3.sqlite_version_info >= (3, 35, 0):
        # In place: a batch rebuild of `images` would drop every other migration's triggers.
        for name, _kind in reversed(_COLUMNS):
            op.execute(f"ALTER TABLE images DROP COLUMN {name}")
    else:
        with op.batch_alter_table("images", schema=None) as batch_op:
            for name, _kind in reversed(_COLUMNS):
                batch_op.drop_column(name)
    if dialect == "sqlite":
        for statement in before.STATEMENTS:
            op.execute(statement)
        op.execute(before.FILL)
