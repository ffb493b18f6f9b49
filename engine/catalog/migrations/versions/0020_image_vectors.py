"""a table for vectors the PostgreSQL server searches itself (pgvector): `image_vectors`

Revision ID: 0020
Revises: 0019

`image_vectors(image_id)` holds, where the server has the pgvector extension, one vector column
per model key (added when a library first searches with that model: `engine.catalog.pgvector`),
filled from `embeddings`, with an HNSW (or IVFFlat) index built on the server. The table itself
needs no extension, so it is created on every PostgreSQL catalog; a catalog whose server lacks
pgvector keeps it empty and searches a local FAISS index as before. `embeddings` stays the
source of truth.

A statement trigger on `embeddings` clears, in the same transaction, the server's vector of
every row deleted there (a photo encoded again is deleted and written anew): a process killed
before it wrote the new vector leaves an empty one, which the next open fills from
`embeddings`, never a stale one. The column's name is the model key's hash as
`engine.catalog.pgvector.column_name` makes it.

SQLite: nothing.
"""

from __future__ import annotations

from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

TABLE = "image_vectors"

_FUNCTION = (
    "CREATE OR REPLACE FUNCTION image_vectors_cleared() RETURNS trigger LANGUAGE plpgsql AS $$ "
    "DECLARE key text; col text; BEGIN "
    "FOR key IN SELECT DISTINCT model_key FROM gone LOOP "
    "col := 'v_' || left(encode(sha256(convert_to(key, 'UTF8')), 'hex'), 24); "
    "IF EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'image_vectors'::regclass "
    "AND attname = col AND NOT attisdropped) THEN "
    "EXECUTE format('UPDATE image_vectors SET %I = NULL WHERE image_id IN "
    "(SELECT image_id FROM gone WHERE model_key = $1)', col) USING key; "
    "END IF; END LOOP; RETURN NULL; END $$"
)
_TRIGGER = (
    "CREATE TRIGGER image_vectors_cleared AFTER DELETE ON embeddings "
    "REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION image_vectors_cleared()"
)


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(
        f"CREATE TABLE IF NOT EXISTS {TABLE} ("
        "image_id BIGINT PRIMARY KEY REFERENCES images (id) ON DELETE CASCADE)"
    )
    op.execute(_FUNCTION)
    op.execute("DROP TRIGGER IF EXISTS image_vectors_cleared ON embeddings")
    op.execute(_TRIGGER)


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP TRIGGER IF EXISTS image_vectors_cleared ON embeddings")
    op.execute("DROP FUNCTION IF EXISTS image_vectors_cleared()")
    op.execute(f"DROP TABLE IF EXISTS {TABLE}")
