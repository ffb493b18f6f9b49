"""a cache of reranking answers keyed by photo content, question, context and scorer;
subqueries record the object they ask about

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23 08:30:00
"""

import sqlalchemy as sa
from alembic import op

from engine.catalog.migrations import leftovers

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    leftovers.drop_leftover_table("rerank_scores")
    op.create_table(
        "rerank_scores",
        sa.Column("content_hash", sa.String(length=64), nullable=False),
        sa.Column("question_key", sa.String(length=64), nullable=False),
        sa.Column("context_key", sa.String(length=64), nullable=False),
        sa.Column("scorer", sa.String(length=255), nullable=False),
        sa.Column("p_yes", sa.Float(), nullable=False),
        sa.Column("answer", sa.Text(), nullable=False),
        sa.Column("l_yes", sa.Float(), nullable=True),
        sa.Column("l_no", sa.Float(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("content_hash", "question_key", "context_key", "scorer"),
    )
    if leftovers.has_column("subqueries", "target"):
        return
    with op.batch_alter_table("subqueries", schema=None) as batch_op:
        batch_op.add_column(sa.Column("target", sa.Text(), server_default="", nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("subqueries", schema=None) as batch_op:
        batch_op.drop_column("target")
    op.drop_table("rerank_scores")
