"""judgment attributes (Darwin Core terms) per judgment

Revision ID: 0013
Revises: 0012

What was seen in a judged photo (`behavior`, `lifeStage`, `sex`, ...) is kept per (query,
photo, term): `judgment_attributes` holds the newest value, `attribute_events` every change
with who and when, `attribute_presets` the values a query fills in for photos judged relevant.

Why a table of attribute events rather than attribute columns on `judgment_events`: an
attribute is often edited without a relevance change (the detail pane, an attribute question
accepting suggestions), and a `judgment_events` row is read as a relevance act by the judgment
history and by anything that counts judgments; one row per term changed also keeps a new
Darwin Core term a value rather than a schema change.
"""

import sqlalchemy as sa
from alembic import op

from engine.catalog.migrations import leftovers

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

_TABLES = ("judgment_attributes", "attribute_events", "attribute_presets")


def upgrade() -> None:
    for table in _TABLES:
        leftovers.drop_leftover_table(table)
    op.create_table(
        "judgment_attributes",
        sa.Column("query_id", sa.Integer(), nullable=False),
        sa.Column("image_id", sa.Integer(), nullable=False),
        sa.Column("term", sa.String(length=64), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.Column("set_by", sa.String(length=128), nullable=True),
        sa.Column("set_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["image_id"], ["images.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["query_id"], ["queries.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("query_id", "image_id", "term"),
    )
    op.create_table(
        "attribute_events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("query_id", sa.Integer(), nullable=False),
        sa.Column("image_id", sa.Integer(), nullable=False),
        sa.Column("term", sa.String(length=64), nullable=False),
        sa.Column("value", sa.Text(), nullable=True),
        sa.Column("changed_by", sa.String(length=128), nullable=True),
        sa.Column("changed_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["image_id"], ["images.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["query_id"], ["queries.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_attribute_events_query_image", "attribute_events", ["query_id", "image_id"])
    op.create_table(
        "attribute_presets",
        sa.Column("query_id", sa.Integer(), nullable=False),
        sa.Column("term", sa.String(length=64), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["query_id"], ["queries.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("query_id", "term"),
    )


def downgrade() -> None:
    op.drop_table("attribute_presets")
    op.drop_index("ix_attribute_events_query_image", table_name="attribute_events")
    op.drop_table("attribute_events")
    op.drop_table("judgment_attributes")
