"""the words of each photo's record: images.notes, and an FTS5 index over names and notes

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23 11:30:00

`record_text` holds, for every photo whose status is "ok" and that has a taxon or notes, its
scientific names at every rank (`names`), its taxon's common name (`common`) and the observer's
notes (`notes`); its rowid is the image id. Triggers on `images` and `taxa` keep it right in the
same transaction as the change (indexing, a rescan, a photo gone missing or back, a collection
removed, a taxon renamed or deleted), so it never needs a refresh. A later migration that
rebuilds `images` or `taxa` (Alembic's batch mode copies and drops the table) drops these
triggers with it and must create them again; tests/test_textsearch.py checks they exist.

SQLite only: on another database the column is added and the text index is left out (hybrid
search then ranks by CLIP alone).
"""

import sqlalchemy as sa
from alembic import op

from engine.catalog.migrations import leftovers

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

# The words of a taxon row `t`, every rank (the species name repeats genus and epithet; a
# repeated word only saturates in bm25).
_NAMES = (
    "trim(coalesce({t}.name, '') || ' ' || coalesce({t}.kingdom, '') || ' ' || "
    "coalesce({t}.phylum, '') || ' ' || coalesce({t}.\"class\", '') || ' ' || "
    "coalesce({t}.\"order\", '') || ' ' || coalesce({t}.family, '') || ' ' || "
    "coalesce({t}.genus, '') || ' ' || coalesce({t}.specific_epithet, ''))"
)
_TAXON_WORDS: tuple[str, ...] = (
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


def _insert_photo(row: str) -> str:
    """INSERT of one photo's words (`row` is NEW inside an images trigger)."""
    return (
        f"INSERT INTO record_text(rowid, names, common, notes) SELECT {row}.id, "
        f"(SELECT {_NAMES.format(t='t')} FROM taxa t WHERE t.id = {row}.taxon_id), "
        f"(SELECT t.common_name FROM taxa t WHERE t.id = {row}.taxon_id), {row}.notes "
        f"WHERE {row}.status = 'ok' AND ({row}.taxon_id IS NOT NULL OR {row}.notes IS NOT NULL);"
    )


_CHANGED = " OR ".join(f'OLD."{c}" IS NOT NEW."{c}"' for c in _TAXON_WORDS)
_TAXON_COLUMNS = ", ".join(f'"{c}"' for c in _TAXON_WORDS)

STATEMENTS = (
    "CREATE VIRTUAL TABLE record_text USING fts5("
    "names, common, notes, tokenize = 'unicode61 remove_diacritics 2')",
    "CREATE TRIGGER record_text_image_added AFTER INSERT ON images BEGIN "
    + _insert_photo("NEW")
    + " END",
    "CREATE TRIGGER record_text_image_removed AFTER DELETE ON images BEGIN "
    "DELETE FROM record_text WHERE rowid = OLD.id; END",
    # Only the columns whose change changes the words (or whether the photo is searched):
    # moves, sizes and dates rewrite rows all the time and must cost nothing here.
    "CREATE TRIGGER record_text_image_changed AFTER UPDATE OF status, taxon_id, notes ON images "
    "WHEN OLD.status IS NOT NEW.status OR OLD.taxon_id IS NOT NEW.taxon_id "
    "OR OLD.notes IS NOT NEW.notes BEGIN "
    "DELETE FROM record_text WHERE rowid = OLD.id; " + _insert_photo("NEW") + " END",
    f"CREATE TRIGGER record_text_taxon_changed AFTER UPDATE OF {_TAXON_COLUMNS} ON taxa "
    f"WHEN {_CHANGED} BEGIN "
    "DELETE FROM record_text WHERE rowid IN (SELECT id FROM images WHERE taxon_id = NEW.id); "
    "INSERT INTO record_text(rowid, names, common, notes) "
    f"SELECT i.id, {_NAMES.format(t='NEW')}, NEW.common_name, i.notes FROM images i "
    "WHERE i.taxon_id = NEW.id AND i.status = 'ok'; END",
    # A deleted taxon sets images.taxon_id to NULL (the foreign key), which fires
    # record_text_image_changed for each of its photos.
)

FILL = (
    "INSERT INTO record_text(rowid, names, common, notes) "
    f"SELECT i.id, {_NAMES.format(t='t')}, t.common_name, i.notes "
    "FROM images i LEFT JOIN taxa t ON t.id = i.taxon_id "
    "WHERE i.status = 'ok' AND (i.taxon_id IS NOT NULL OR i.notes IS NOT NULL)"
)

TRIGGERS = (
    "record_text_image_added",
    "record_text_image_removed",
    "record_text_image_changed",
    "record_text_taxon_changed",
)


def upgrade() -> None:
    if not leftovers.has_column("images", "notes"):
        with op.batch_alter_table("images", schema=None) as batch_op:
            batch_op.add_column(sa.Column("notes", sa.Text(), nullable=True))
    if op.get_bind().dialect.name != "sqlite":
        return
    # A text index an interrupted run left half built is built again from the records.
    for trigger in TRIGGERS:
        op.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    op.execute("DROP TABLE IF EXISTS record_text")
    for statement in STATEMENTS:
        op.execute(statement)
    op.execute(FILL)  # an older library's photos (no notes yet: names only)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for trigger in TRIGGERS:
            op.execute(f"DROP TRIGGER IF EXISTS {trigger}")
        op.execute("DROP TABLE IF EXISTS record_text")
    with op.batch_alter_table("images", schema=None) as batch_op:
        batch_op.drop_column("notes")
