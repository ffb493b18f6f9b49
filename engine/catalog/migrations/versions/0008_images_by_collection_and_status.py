"""an index of photos by collection and status, for the library panel's counts

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-25 15:15:00

At 5 million photos, counting a collection's indexed, skipped and missing photos read every
row of `images` (and the query for indexed photos chose to scan `embeddings`, vectors and all);
with this index each count reads the index alone. The model declares the same index
(`ix_images_collection_status`).
"""

from alembic import op

from engine.catalog.migrations import leftovers

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    leftovers.drop_leftover_index("images", "ix_images_collection_status")
    op.create_index("ix_images_collection_status", "images", ["collection_id", "status"])


def downgrade() -> None:
    op.drop_index("ix_images_collection_status", table_name="images")
