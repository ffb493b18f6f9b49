"""location privacy: images.geoprivacy, taxon_geoprivacy, coordinates_obscured,
location_withheld, public_location_uncertainty and the table `sensitive_taxa`

Revision ID: 0018
Revises: 0017

What a photo's record says about publishing its place (iNaturalist's vocabulary): the observer's
`geoprivacy` and the taxon's `taxon_geoprivacy` ("open", "obscured" or "private"), whether the
record's coordinates are already obscured, whether the record withheld the place (its latitude
and longitude given as null: the photo's EXIF GPS is then never used), and the uncertainty the
source publishes with obscured coordinates. `sensitive_taxa` is the lab's own list of taxa whose
places every export generalises to a grid or withholds (engine/catalog/privacy.py). Earlier rows
keep NULL until their collection is indexed again.
"""

import sqlite3

import sqlalchemy as sa
from alembic import op

from engine.catalog.migrations import leftovers

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

_IMAGE_COLUMNS = (
    ("geoprivacy", sa.String(16)),
    ("taxon_geoprivacy", sa.String(16)),
    ("coordinates_obscured", sa.Boolean()),
    ("location_withheld", sa.Boolean()),
    ("public_location_uncertainty", sa.Float()),
)


def upgrade() -> None:
    missing = [
        (name, kind) for name, kind in _IMAGE_COLUMNS if not leftovers.has_column("images", name)
    ]
    with op.batch_alter_table("images", schema=None) as batch_op:
        for name, kind in missing:
            batch_op.add_column(sa.Column(name, kind, nullable=True))
    leftovers.drop_leftover_table("sensitive_taxa")
    op.create_table(
        "sensitive_taxa",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("grid_km", sa.Float(), nullable=True),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("added_by", sa.String(128), nullable=True),
        sa.Column("added_at", sa.DateTime(), nullable=False),
        sa.UniqueConstraint("name", name="uq_sensitive_taxa_name"),
    )


def downgrade() -> None:
    op.drop_table("sensitive_taxa")
    if op.get_bind().dialect.name == "sqlite" and sqlite3.sqlite_version_info >= (3, 35, 0):
        # In place: a batch rebuild of `images` would drop every other migration's triggers.
        for name, _ in reversed(_IMAGE_COLUMNS):
            op.execute(f"ALTER TABLE images DROP COLUMN {name}")
        return
    with op.batch_alter_table("images", schema=None) as batch_op:
        for name, _ in reversed(_IMAGE_COLUMNS):
            batch_op.drop_column(name)
