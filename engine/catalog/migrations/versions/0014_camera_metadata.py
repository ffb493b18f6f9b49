"""camera EXIF, deployments and events: images.camera_*, exif_flags, camera_time,
deployment_id, event_id, event_apart and the table `deployments`

Revision ID: 0014
Revises: 0013

A photo's camera (EXIF Make, Model and serial), what its EXIF held that was dropped as impossible
(`exif_flags`, bits of `engine.indexing.exif`), the camera clock's reading when it is the
photo's time (`camera_time`; `observed_at` is it plus its deployment's clock offset), its
deployment and its event (`event_id`: the id of the event's first frame). A deployment is a
camera at a place: a folder of a collection with, when the EXIF gives one, a camera serial; its
clock offset in seconds (and the one before it, so a change can be undone). Earlier rows keep
NULL everywhere until their folder is indexed again; events and deployments are made after
each indexing run.
"""

import sqlalchemy as sa
from alembic import op

from engine.catalog.migrations import leftovers

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

_IMAGE_COLUMNS = (
    ("camera_make", sa.String(128)),
    ("camera_model", sa.String(128)),
    ("camera_serial", sa.String(128)),
    ("exif_flags", sa.Integer()),
    ("camera_time", sa.DateTime()),
    # No foreign key: on SQLite one would rebuild the whole images table (and its triggers);
    # deployments are removed only by code that clears these ids first.
    ("deployment_id", sa.Integer()),
    ("event_id", sa.Integer()),
    ("event_apart", sa.Boolean()),
)


def upgrade() -> None:
    leftovers.drop_leftover_table("deployments")
    op.create_table(
        "deployments",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column(
            "collection_id",
            sa.Integer(),
            sa.ForeignKey("collections.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("folder", sa.Text(), nullable=False),
        sa.Column("camera_serial", sa.String(128), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("marked", sa.Boolean(), nullable=False),
        sa.Column("clock_offset_s", sa.Integer(), nullable=False),
        sa.Column("previous_clock_offset_s", sa.Integer(), nullable=True),
        sa.UniqueConstraint(
            "collection_id", "folder", "camera_serial", name="uq_deployments_folder_serial"
        ),
    )
    missing = [
        (name, kind) for name, kind in _IMAGE_COLUMNS if not leftovers.has_column("images", name)
    ]
    with op.batch_alter_table("images", schema=None) as batch_op:
        for name, kind in missing:
            batch_op.add_column(sa.Column(name, kind, nullable=True))
    leftovers.drop_leftover_index("images", "ix_images_event")
    leftovers.drop_leftover_index("images", "ix_images_deployment")
    op.create_index("ix_images_event", "images", ["event_id"])
    op.create_index("ix_images_deployment", "images", ["deployment_id"])


def downgrade() -> None:
    op.drop_index("ix_images_deployment", table_name="images")
    op.drop_index("ix_images_event", table_name="images")
    with op.batch_alter_table("images", schema=None) as batch_op:
        for name, _ in reversed(_IMAGE_COLUMNS):
            batch_op.drop_column(name)
    op.drop_table("deployments")
