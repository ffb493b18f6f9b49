"""What an interrupted upgrade of an older Quadrat may have left behind.

Before every upgrade became one transaction, SQLite committed each DDL statement of a migration
on its own: a kill in the middle left a column, table or index of a migration in the catalog
while `alembic_version` still named the revision before it, and every later open failed on
"duplicate column". The migrations ask these questions first, so they run again cleanly over
such a catalog. A table or index a migration creates cannot hold anything a user made while
the catalog is stamped with the revision before it (no Quadrat could open it), so a leftover
one is dropped and built again whole rather than trusted half-filled.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op


def has_column(table: str, column: str) -> bool:
    return any(c["name"] == column for c in sa.inspect(op.get_bind()).get_columns(table))


def has_table(table: str) -> bool:
    return bool(sa.inspect(op.get_bind()).has_table(table))


def has_index(table: str, index: str) -> bool:
    return any(i["name"] == index for i in sa.inspect(op.get_bind()).get_indexes(table))


def drop_leftover_table(table: str) -> None:
    """Drop `table` (its indexes with it) when an interrupted run of this migration made it."""
    if has_table(table):
        op.drop_table(table)


def drop_leftover_index(table: str, index: str) -> None:
    if has_index(table, index):
        op.drop_index(index, table_name=table)
