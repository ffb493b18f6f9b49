"""Alembic environment: migrations run on the connection the catalog passes in."""

from alembic import context

from engine.catalog.models import Base

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("catalog migrations run through engine.catalog.db.upgrade_schema")

context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    render_as_batch=True,  # SQLite needs batch mode to alter tables
)
with context.begin_transaction():
    context.run_migrations()
