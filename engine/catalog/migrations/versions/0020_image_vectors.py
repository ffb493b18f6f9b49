"""a table for vectors the PostgreSQL server searches itself (pgvector): `image_vectors`

Revision ID: 0020
Revises: 0019

`image_vectors(image_id)` holds, where the server has the pgvector extension, one vector column
per model key (added when a library first searches with that model: `engine.catalog.pgvector`),
filled from `embeddings`, with an HNSW (or IVFFlat) index built on the server. The table itself
needs no extension, so it is created on every PostgreSQL catalog; a catalog whose server lacks
pgvector keeps it empty and searches a local FAISS index as before. `embeddings` stays the
source of truth.

SQLite: nothing.
"""

from __future__ import annotations

from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

TABLE = "image_vectors"


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(
        f"CREATE TABLE IF NOT EXISTS {TABLE} ("
        "image_id BIGINT PRIMARY KEY REFERENCES images (id) ON DELETE CASCADE)"
    )


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(f"DROP TABLE IF EXISTS {TABLE}")
