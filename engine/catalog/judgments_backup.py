"""Judgments-only backup files: the user's work without what the photos give back.

Queries, runs and run results, judgments and their events, their attributes (with their
events, and the queries' presets), subqueries and their per-photo
answers, plus each referenced photo's collection root and relative path (no vectors, no image
metadata). Read through SQLAlchemy from any catalog (SQLite or a PostgreSQL server) in one
consistent snapshot, so a 5-million-photo or shared catalog is backed up in megabytes.
Restoring one replaces only those tables, matching photos by collection root and path.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.catalog.backup_source import KIND_JUDGMENTS, fsync_file
from engine.errors import QuadratError

if TYPE_CHECKING:
    from sqlalchemy import Connection, MetaData

# The user's work in a judgments-only backup, parents before children.
JUDGMENT_TABLES = (
    "queries",
    "runs",
    "run_results",
    "judgments",
    "judgment_events",
    "judgment_attributes",
    "attribute_events",
    "attribute_presets",
    "subqueries",
    "subquery_scores",
)
_IMAGE_TABLES = (
    "judgments",
    "judgment_events",
    "judgment_attributes",
    "attribute_events",
    "run_results",
    "subquery_scores",
)
_SERIAL_TABLES = ("queries", "runs", "judgment_events", "attribute_events", "subqueries")
_ROWS_PER_BATCH = 2000
_MATCH_BATCH = 500  # paths per lookup of live photos (under SQLite's bound-parameter limit)


def _backup_metadata() -> MetaData:
    """The tables of a judgments-only file: the judgment tables as the catalog has them, the
    referenced photos by collection root and path, and what kind of file it is."""
    from sqlalchemy import Column, Integer, MetaData, String, Table, Text

    from engine.catalog.models import Base

    metadata = MetaData()
    Table("backup_meta", metadata, Column("key", String(64), primary_key=True),
          Column("value", Text))  # fmt: skip
    Table("collections", metadata, Column("id", Integer, primary_key=True),
          Column("root", Text), Column("name", Text))  # fmt: skip
    Table("images", metadata, Column("id", Integer, primary_key=True),
          Column("collection_id", Integer), Column("rel_path", Text),
          Column("content_hash", String(64)))  # fmt: skip
    for name in JUDGMENT_TABLES:
        Base.metadata.tables[name].to_metadata(metadata)
    return metadata


def judgments_to_file(conn: Connection, temp: Path) -> None:
    """Copy the judgment tables (and the photos they name) read on `conn`, inside its open
    transaction, into a new SQLite file `temp`."""
    from sqlalchemy import URL, create_engine, inspect, select, union
    from sqlalchemy.pool import NullPool

    from engine.catalog.models import Base

    temp.unlink(missing_ok=True)  # SQLAlchemy creates the file itself
    present = set(inspect(conn).get_table_names())
    metadata = _backup_metadata()
    out = create_engine(URL.create("sqlite", database=str(temp)), poolclass=NullPool)
    try:
        metadata.create_all(out)
        with out.begin() as dst:
            dst.execute(
                metadata.tables["backup_meta"].insert(),
                [
                    {"key": "kind", "value": KIND_JUDGMENTS},
                    {"key": "revision", "value": _revision(conn) or ""},
                    {"key": "source", "value": conn.dialect.name},
                    {"key": "created", "value": datetime.now(UTC).isoformat(timespec="seconds")},
                ],
            )
            if "collections" in present:
                source = Base.metadata.tables["collections"]
                _copy_rows(
                    conn, select(source.c.id, source.c.root, source.c.name),
                    dst, metadata.tables["collections"],
                )  # fmt: skip
            referenced = [
                select(Base.metadata.tables[name].c.image_id)
                for name in _IMAGE_TABLES
                if name in present
            ]
            if referenced and "images" in present:
                images = Base.metadata.tables["images"]
                wanted = select(images.c.id, images.c.collection_id, images.c.rel_path,
                                images.c.content_hash).where(
                    images.c.id.in_(union(*referenced).scalar_subquery())
                )  # fmt: skip
                _copy_rows(conn, wanted, dst, metadata.tables["images"])
            for name in JUDGMENT_TABLES:
                if name not in present:  # an older schema (before an upgrade)
                    continue
                model = Base.metadata.tables[name]
                have = {c["name"] for c in inspect(conn).get_columns(name)}
                columns = [c for c in model.c if c.name in have]
                _copy_rows(conn, select(*columns), dst, metadata.tables[name])
        with out.connect() as check:
            result = str(check.exec_driver_sql("PRAGMA integrity_check").scalar())
    finally:
        out.dispose()
    if result != "ok":
        raise QuadratError(f"the backup failed its integrity check ({result})")
    fsync_file(temp)


def _copy_rows(src: Connection, query: Any, dst: Connection, table: Any) -> int:
    """Stream the rows of `query` into `table`, a batch at a time; returns how many."""
    count = 0
    # Per statement: a connection's own options would apply to every later statement too.
    result = src.execute(query.execution_options(yield_per=_ROWS_PER_BATCH))
    for batch in result.mappings().partitions(_ROWS_PER_BATCH):
        dst.execute(table.insert(), [dict(row) for row in batch])
        count += len(batch)
    return count


def _revision(conn: Connection) -> str | None:
    """The catalog's schema revision, or None before its first migration."""
    from sqlalchemy import inspect, text

    if "alembic_version" not in inspect(conn).get_table_names():
        return None
    return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()


def replace_judgment_tables(source: Connection, live: Connection) -> tuple[int, int]:
    """Replace the judgment tables on `live` (inside its open transaction) with a
    judgments-only backup's on `source`, photos matched by collection root and path. Returns
    (the backup's photos this catalog lacks, the judgments left out because they were on
    them)."""
    from sqlalchemy import inspect, text

    from engine.catalog.models import Base

    mapping, unmatched = match_photos(source, live)
    for name in reversed(JUDGMENT_TABLES):
        live.execute(Base.metadata.tables[name].delete())
    dropped = 0
    source_tables = set(inspect(source).get_table_names())
    for name in JUDGMENT_TABLES:
        if name not in source_tables:
            continue
        dropped_here = put_back(source, live, name, mapping)
        if name == "judgments":
            dropped = dropped_here
    if live.dialect.name == "postgresql":
        for name in _SERIAL_TABLES:  # new rows must not collide with restored ids
            live.execute(text(
                f"SELECT setval(pg_get_serial_sequence('{name}', 'id'), "
                f"coalesce((SELECT max(id) FROM {name}), 0) + 1, false)"
            ))  # fmt: skip
    return unmatched, dropped


def match_photos(source: Connection, live: Connection) -> tuple[dict[int, int], int]:
    """Backup photo id -> this catalog's photo id, by collection root and relative path; and
    how many of the backup's photos this catalog does not have."""
    from sqlalchemy import select

    from engine.catalog.models import Collection, Image

    roots: dict[int, str] = {
        int(cid): str(root)
        for cid, root in source.exec_driver_sql("SELECT id, root FROM collections").all()
    }
    wanted: dict[int, list[tuple[int, str]]] = {}
    for image_id, collection_id, rel_path in source.exec_driver_sql(
        "SELECT id, collection_id, rel_path FROM images"
    ):
        wanted.setdefault(collection_id, []).append((image_id, rel_path))
    mapping: dict[int, int] = {}
    unmatched = 0
    for collection_id, photos in wanted.items():
        live_collection: int | None = live.execute(
            select(Collection.id).where(Collection.root == roots.get(collection_id, ""))
        ).scalar()
        if live_collection is None:
            unmatched += len(photos)
            continue
        for start in range(0, len(photos), _MATCH_BATCH):
            chunk = photos[start : start + _MATCH_BATCH]
            found = dict(
                live.execute(
                    select(Image.rel_path, Image.id).where(
                        Image.collection_id == live_collection,
                        Image.rel_path.in_([rel for _, rel in chunk]),
                    )
                ).all()
            )
            for old_id, rel in chunk:
                if rel in found:
                    mapping[old_id] = found[rel]
                else:
                    unmatched += 1
    return mapping, unmatched


def put_back(source: Connection, live: Connection, name: str, mapping: dict[int, int]) -> int:
    """Insert a backup table's rows into the live one, photo ids mapped (rows on photos this
    catalog lacks are left out); returns how many rows were left out."""
    from sqlalchemy import inspect, select

    from engine.catalog.models import Base

    model = Base.metadata.tables[name]
    have = {c["name"] for c in inspect(source).get_columns(name)}
    columns = [c for c in model.c if c.name in have]
    dropped = 0
    result = source.execute(select(*columns).execution_options(yield_per=_ROWS_PER_BATCH))
    for batch in result.mappings().partitions(_ROWS_PER_BATCH):
        rows = []
        for row in batch:
            values = dict(row)
            if "image_id" in values:
                mapped = mapping.get(values["image_id"])
                if mapped is None:
                    dropped += 1
                    continue
                values["image_id"] = mapped
            rows.append(values)
        if rows:
            live.execute(model.insert(), rows)
    return dropped
