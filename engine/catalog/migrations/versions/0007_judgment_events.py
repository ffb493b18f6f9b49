"""every judgment as it was made, with who and when: judgment_events

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-25 15:10:00

`judgments` keeps the newest judgment of each photo for a query (what the metrics count);
`judgment_events` keeps each act, so that on a shared catalog a photo judged by two people
keeps both. Existing judgments are copied in as their first events.
"""

import sqlalchemy as sa
from alembic import op

from engine.catalog.migrations import leftovers

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Filled below from the judgments: a leftover table would give every judgment twice.
    leftovers.drop_leftover_table("judgment_events")
    op.create_table(
        "judgment_events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("query_id", sa.Integer(), nullable=False),
        sa.Column("image_id", sa.Integer(), nullable=False),
        sa.Column("relevance", sa.Integer(), nullable=True),
        sa.Column("judged_by", sa.String(length=128), nullable=True),
        sa.Column("judged_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["image_id"], ["images.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["query_id"], ["queries.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_judgment_events_query_image", "judgment_events", ["query_id", "image_id"])
    op.execute(
        "INSERT INTO judgment_events (query_id, image_id, relevance, judged_by, judged_at) "
        "SELECT query_id, image_id, relevance, judged_by, judged_at FROM judgments "
        "ORDER BY judged_at, query_id, image_id"
    )


def downgrade() -> None:
    op.drop_index("ix_judgment_events_query_image", table_name="judgment_events")
    op.drop_table("judgment_events")
