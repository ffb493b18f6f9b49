"""judges, blind double judging, adjudication and recall certificates

Revision ID: 0017
Revises: 0016

`judgment_events.kind` tells a judge's own judgment ("judgment") from the adjudicated one that
settles a disagreement ("adjudication"); older rows are judgments. `double_judging` holds the
photos of a query offered blind to a second judge (who offered them, when), so every process on
a shared catalog sees the same sample. `recall_certificates` keeps each certified recall of a
query: target, confidence, judgments spent and the rule, for exports and the Darwin Core
archive's methods text.
"""

import sqlalchemy as sa
from alembic import op

from engine.catalog.migrations import leftovers

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

_TABLES = ("double_judging", "recall_certificates")


def upgrade() -> None:
    if not leftovers.has_column("judgment_events", "kind"):
        with op.batch_alter_table("judgment_events", schema=None) as batch_op:
            batch_op.add_column(
                sa.Column("kind", sa.String(length=16), nullable=False, server_default="judgment")
            )
    for table in _TABLES:
        leftovers.drop_leftover_table(table)
    op.create_table(
        "double_judging",
        sa.Column("query_id", sa.Integer(), nullable=False),
        sa.Column("image_id", sa.Integer(), nullable=False),
        sa.Column("offered_by", sa.String(length=128), nullable=True),
        sa.Column("offered_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["image_id"], ["images.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["query_id"], ["queries.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("query_id", "image_id"),
    )
    op.create_table(
        "recall_certificates",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("query_id", sa.Integer(), nullable=False),
        sa.Column("target", sa.Float(), nullable=False),
        sa.Column("confidence", sa.Float(), nullable=False),
        sa.Column("judged", sa.Integer(), nullable=False),
        sa.Column("sample_judged", sa.Integer(), nullable=False),
        sa.Column("stop_rank", sa.Integer(), nullable=False),
        sa.Column("found", sa.Integer(), nullable=False),
        sa.Column("rule", sa.Text(), nullable=False),
        sa.Column("certified_by", sa.String(length=128), nullable=True),
        sa.Column("certified_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["query_id"], ["queries.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_recall_certificates_query", "recall_certificates", ["query_id"])


def downgrade() -> None:
    op.drop_index("ix_recall_certificates_query", table_name="recall_certificates")
    for table in reversed(_TABLES):
        op.drop_table(table)
    with op.batch_alter_table("judgment_events", schema=None) as batch_op:
        batch_op.drop_column("kind")
