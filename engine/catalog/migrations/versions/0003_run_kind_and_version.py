"""runs record their query kind and the Quadrat version that made them

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23 06:30:00
"""

import sqlalchemy as sa
from alembic import op

from engine.catalog.migrations import leftovers

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        if not leftovers.has_column("runs", "kind"):
            batch_op.add_column(
                sa.Column("kind", sa.String(length=16), server_default="text", nullable=False)
            )
        if not leftovers.has_column("runs", "quadrat_version"):
            batch_op.add_column(sa.Column("quadrat_version", sa.String(length=32), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("quadrat_version")
        batch_op.drop_column("kind")
