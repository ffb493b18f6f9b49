"""64-bit file sizes, modification times (ns) and source ids on every database

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25 15:00:00

A file's mtime in nanoseconds (about 1.7e18 today) and sizes over 2 GiB do not fit the 32-bit
INTEGER of PostgreSQL. SQLite's INTEGER already holds 64 bits: there nothing changes (no table
rebuild, which would also drop the record_text triggers of 0005).
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

COLUMNS = (
    ("images", "size", False),
    ("images", "mtime_ns", False),
    ("images", "external_id", True),
)


def _retype(old: type[sa.types.TypeEngine[int]], new: type[sa.types.TypeEngine[int]]) -> None:
    # SQLite's INTEGER is 64-bit already, and altering a column there rebuilds the table.
    if op.get_bind().dialect.name == "sqlite":
        return
    for table, column, nullable in COLUMNS:
        op.alter_column(table, column, existing_type=old(), type_=new(), existing_nullable=nullable)


def upgrade() -> None:
    _retype(sa.Integer, sa.BigInteger)


def downgrade() -> None:
    _retype(sa.BigInteger, sa.Integer)
