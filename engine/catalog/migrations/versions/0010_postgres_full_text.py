"""the words of each photo's record on PostgreSQL: a tsvector table, its GIN index, triggers

Revision ID: 0010
Revises: 0009

Migration 0005 gave SQLite catalogs the FTS5 table `record_text`; a PostgreSQL catalog had no
text index, so hybrid search there ranked by CLIP alone. This revision gives PostgreSQL the
same table in its own terms: `record_text(image_id, names, common, notes)` with the words as a
stored `document` tsvector (GIN index) and their count `doclen` (for bm25, which
engine/search/fulltext.py computes as FTS5 does), filled for the photos already catalogued and kept
current by triggers on `images` and `taxa` in the same transaction as the change, as the FTS5
triggers are.

Words are cut as FTS5's unicode61 tokenizer cuts them (punctuation and underscores separate)
and compared case-folded through the text search configuration `quadrat_words` (PostgreSQL's
`simple`, no stemming, no stop words); where the server offers the `unaccent` extension and
the role may create it, diacritics are removed too ("Crème" matches "creme"), else they count.

SQLite: nothing (its FTS5 table is 0005's).
"""

from __future__ import annotations

import logging

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

log = logging.getLogger(__name__)

CONFIG = "quadrat_words"

# The words of a taxon row `t`, every rank, as 0005 has them.
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
# All three columns as one text with punctuation (underscore included) turned into spaces: the
# words FTS5's unicode61 cuts. bm25 over FTS5's columns at equal weights is bm25 over their
# concatenation, so one document serves.
_CLEAN = (
    "regexp_replace(coalesce(names, '') || ' ' || coalesce(common, '') || ' ' || "
    "coalesce(notes, ''), '[[:space:][:punct:]]+', ' ', 'g')"
)

TABLE = (
    "CREATE TABLE record_text ("
    "image_id BIGINT PRIMARY KEY REFERENCES images (id) ON DELETE CASCADE, "
    "names TEXT, common TEXT, notes TEXT, "
    f"document tsvector GENERATED ALWAYS AS (to_tsvector('{CONFIG}', {_CLEAN})) STORED, "
    # Words counted as written (a repeated word twice), as FTS5's document length.
    "doclen INTEGER GENERATED ALWAYS AS (coalesce(array_length(regexp_split_to_array("
    f"btrim({_CLEAN}), ' +'), 1), 0) - CASE WHEN btrim({_CLEAN}) = '' THEN 1 ELSE 0 END) "
    "STORED)"
)

_PHOTO_FUNCTION = (
    "CREATE FUNCTION record_text_photo() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    "IF TG_OP = 'UPDATE' THEN DELETE FROM record_text WHERE image_id = OLD.id; END IF; "
    "IF NEW.status = 'ok' AND (NEW.taxon_id IS NOT NULL OR NEW.notes IS NOT NULL) THEN "
    "INSERT INTO record_text (image_id, names, common, notes) "
    f"SELECT NEW.id, (SELECT {_NAMES.format(t='t')} FROM taxa t WHERE t.id = NEW.taxon_id), "
    "(SELECT t.common_name FROM taxa t WHERE t.id = NEW.taxon_id), NEW.notes; "
    "END IF; RETURN NULL; END $$"
)
_TAXON_FUNCTION = (
    "CREATE FUNCTION record_text_taxon() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    f"UPDATE record_text r SET names = {_NAMES.format(t='NEW')}, common = NEW.common_name "
    "FROM images i WHERE i.id = r.image_id AND i.taxon_id = NEW.id; RETURN NULL; END $$"
)
_CHANGED = " OR ".join(f'OLD."{c}" IS DISTINCT FROM NEW."{c}"' for c in _TAXON_WORDS)
_TAXON_COLUMNS = ", ".join(f'"{c}"' for c in _TAXON_WORDS)

STATEMENTS = (
    TABLE,
    "CREATE INDEX ix_record_text_document ON record_text USING gin (document)",
    _PHOTO_FUNCTION,
    _TAXON_FUNCTION,
    "CREATE TRIGGER record_text_image_added AFTER INSERT ON images "
    "FOR EACH ROW EXECUTE FUNCTION record_text_photo()",
    # Only the columns whose change changes the words (or whether the photo is searched):
    # moves, sizes and dates rewrite rows all the time and must cost nothing here. A deleted
    # photo takes its row with it (ON DELETE CASCADE); a deleted taxon sets images.taxon_id
    # to NULL, which fires this trigger.
    "CREATE TRIGGER record_text_image_changed AFTER UPDATE OF status, taxon_id, notes ON images "
    "FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status "
    "OR OLD.taxon_id IS DISTINCT FROM NEW.taxon_id OR OLD.notes IS DISTINCT FROM NEW.notes) "
    "EXECUTE FUNCTION record_text_photo()",
    f"CREATE TRIGGER record_text_taxon_changed AFTER UPDATE OF {_TAXON_COLUMNS} ON taxa "
    f"FOR EACH ROW WHEN ({_CHANGED}) EXECUTE FUNCTION record_text_taxon()",
)

FILL = (
    "INSERT INTO record_text (image_id, names, common, notes) "
    f"SELECT i.id, {_NAMES.format(t='t')}, t.common_name, i.notes "
    "FROM images i LEFT JOIN taxa t ON t.id = i.taxon_id "
    "WHERE i.status = 'ok' AND (i.taxon_id IS NOT NULL OR i.notes IS NOT NULL)"
)

TRIGGERS = (
    ("record_text_image_added", "images"),
    ("record_text_image_changed", "images"),
    ("record_text_taxon_changed", "taxa"),
)


def _configuration() -> None:
    """`quadrat_words`: `simple`, with `unaccent` first where the server lets us have it."""
    op.execute(f"CREATE TEXT SEARCH CONFIGURATION {CONFIG} (COPY = pg_catalog.simple)")
    bind = op.get_bind()
    try:
        # A savepoint: a refused extension (not installed, or the role may not create it)
        # must not abort the migration's transaction.
        with bind.begin_nested():
            bind.exec_driver_sql("CREATE EXTENSION IF NOT EXISTS unaccent")
            bind.exec_driver_sql(
                f"ALTER TEXT SEARCH CONFIGURATION {CONFIG} ALTER MAPPING FOR "
                "word, numword, hword, hword_part, hword_numpart, numhword WITH unaccent, simple"
            )
    except Exception as exc:  # noqa: BLE001 - any refusal leaves plain folding
        log.warning("record words keep their diacritics (no unaccent extension): %s", exc)


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    _configuration()
    for statement in STATEMENTS:
        op.execute(statement)
    op.execute(FILL)  # the photos catalogued before this revision


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for trigger, table in TRIGGERS:
        op.execute(f"DROP TRIGGER IF EXISTS {trigger} ON {table}")
    op.execute("DROP FUNCTION IF EXISTS record_text_photo()")
    op.execute("DROP FUNCTION IF EXISTS record_text_taxon()")
    op.execute("DROP TABLE IF EXISTS record_text")
    op.execute(f"DROP TEXT SEARCH CONFIGURATION IF EXISTS {CONFIG}")
