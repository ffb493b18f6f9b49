"""detections: boxes and labels read from detector and classifier output, their crops' vectors

Revision ID: 0021
Revises: 0020

`detection_sources` holds each imported file (MegaDetector batch output, SpeciesNet predictions,
a Camtrap DP package's observations, a demo's drawn boxes); importing it again replaces its rows.
`detection_frames` says which photos a source looked at and its highest confidence there, so an
empty frame (looked at, nothing above a threshold) differs from a photo never looked at.
`detections` holds each box (normalised, origin top left) or whole-photo label;
`crop_embeddings` the vectors of the boxes' crops per model. `judgments` and `judgment_events`
gain `box`: the geometry of the box a judgment was made on, kept as text so it outlives a
re-import and travels in a judgments-only backup.
"""

import sqlalchemy as sa
from alembic import op

from engine.catalog.migrations import leftovers

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

_TABLES = ("detection_sources", "detection_frames", "detections", "crop_embeddings")


def upgrade() -> None:
    for table in ("judgments", "judgment_events"):
        if not leftovers.has_column(table, "box"):
            with op.batch_alter_table(table, schema=None) as batch_op:
                batch_op.add_column(sa.Column("box", sa.String(length=64), nullable=True))
    for table in reversed(_TABLES):
        leftovers.drop_leftover_table(table)
    op.create_table(
        "detection_sources",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=True),
        sa.Column("model", sa.Text(), nullable=True),
        sa.Column("categories", sa.JSON(), nullable=True),
        sa.Column("imported_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("kind", "path", name="uq_detection_sources_kind_path"),
    )
    op.create_table(
        "detection_frames",
        sa.Column("source_id", sa.Integer(), nullable=False),
        sa.Column("image_id", sa.Integer(), nullable=False),
        sa.Column("max_confidence", sa.Float(), nullable=True),
        sa.Column("failure", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(["image_id"], ["images.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["source_id"], ["detection_sources.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("source_id", "image_id"),
    )
    op.create_index("ix_detection_frames_image", "detection_frames", ["image_id"])
    op.create_table(
        "detections",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("source_id", sa.Integer(), nullable=False),
        sa.Column("image_id", sa.Integer(), nullable=False),
        sa.Column("box_x", sa.Float(), nullable=True),
        sa.Column("box_y", sa.Float(), nullable=True),
        sa.Column("box_width", sa.Float(), nullable=True),
        sa.Column("box_height", sa.Float(), nullable=True),
        sa.Column("category", sa.String(length=32), nullable=True),
        sa.Column("confidence", sa.Float(), nullable=True),
        sa.Column("label", sa.Text(), nullable=True),
        sa.Column("label_probability", sa.Float(), nullable=True),
        sa.Column("classification_method", sa.String(length=16), nullable=True),
        sa.Column("observation_id", sa.Text(), nullable=True),
        sa.Column("count", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(["image_id"], ["images.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["source_id"], ["detection_sources.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_detections_image", "detections", ["image_id"])
    op.create_index("ix_detections_source", "detections", ["source_id"])
    op.create_index(
        "ix_detections_category_confidence", "detections", ["category", "confidence"]
    )
    op.create_table(
        "crop_embeddings",
        sa.Column("detection_id", sa.Integer(), nullable=False),
        sa.Column("model_key", sa.String(length=255), nullable=False),
        sa.Column("vector", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(["detection_id"], ["detections.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("detection_id", "model_key"),
    )


def downgrade() -> None:
    for table in reversed(_TABLES):
        op.drop_table(table)
    for table in ("judgment_events", "judgments"):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_column("box")
