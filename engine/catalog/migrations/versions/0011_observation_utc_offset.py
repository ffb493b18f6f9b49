"""the UTC offset of a photo's observation time: images.observed_utc_offset

Revision ID: 0011
Revises: 0010

`observed_at` holds the local time of the observation, as the metadata wrote it (the date
and month filters read it as the observer's local date); the offset a metadata file or EXIF
gave with it ("2021-05-03T10:00:00+02:00") was dropped on SQLite, and PostgreSQL turned such a
time into the server's time zone, which could change its date. The offset now has a column of
its own, in minutes east of UTC (NULL when none was given). Earlier rows keep NULL: their
offsets were never stored.
"""

import sqlalchemy as sa
from alembic import op

from engine.catalog.migrations import leftovers

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if leftovers.has_column("images", "observed_utc_offset"):
        return
    with op.batch_alter_table("images", schema=None) as batch_op:
        batch_op.add_column(sa.Column("observed_utc_offset", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("images", schema=None) as batch_op:
        batch_op.drop_column("observed_utc_offset")
