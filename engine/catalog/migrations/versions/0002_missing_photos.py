"""photos that go missing keep their row: images.missing_since

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23 05:40:00
"""

import sqlalchemy as sa
from alembic import op

from engine.catalog.migrations import leftovers

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if leftovers.has_column("images", "missing_since"):
        return
    with op.batch_alter_table("images", schema=None) as batch_op:
        batch_op.add_column(sa.Column("missing_since", sa.DateTime(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("images", schema=None) as batch_op:
        batch_op.drop_column("missing_since")
