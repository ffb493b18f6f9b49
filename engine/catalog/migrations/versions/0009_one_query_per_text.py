"""one saved query per text and query photo: twins merged, then a unique key

Revision ID: 0009
Revises: 0008

Two sessions creating the same new query at once could each insert it, and later opens found
only the oldest, hiding the other's judgments. This revision merges such twins (same text
exactly, same query photo or none) into the oldest one, then adds the unique key
`uq_queries_text_image` on (text, coalesce(image_path, '')) that the model declares (their md5s
on PostgreSQL).

What a twin had moves to the oldest: its runs and every judgment event; of the judgments, the
newest act per photo wins (a judgment, or an event that cleared it); its subqueries when the
oldest has none (one list, edited as a whole: the twin's used last); its name when the oldest
has none, and its notes appended when they differ. Texts are compared exactly, as stored: texts that
differ in case or spacing stay apart (the app stores texts with whitespace already collapsed).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

INDEX = "uq_queries_text_image"


def _twins(conn: sa.Connection) -> list[list[Any]]:
    """Groups of query rows (id, text, image_path, name, notes) that share a text and query
    photo, oldest first; only groups of two or more."""
    rows = conn.execute(
        sa.text("SELECT id, text, image_path, name, notes FROM queries ORDER BY id")
    ).all()
    groups: dict[tuple[str, str], list[Any]] = defaultdict(list)
    for row in rows:
        groups[(row.text, row.image_path or "")].append(row)
    return [group for group in groups.values() if len(group) > 1]


def _merge_judgments(conn: sa.Connection, keep: int, others: list[int]) -> None:
    """Leave in `keep` the newest act per photo among the twins: a judgment row, or a
    judgment event that cleared it (the row of a cleared photo is gone)."""
    ids = [keep, *others]
    params: dict[str, Any] = {f"q{i}": q for i, q in enumerate(ids)}
    params["keep"] = keep
    among = ", ".join(f":q{i}" for i in range(len(ids)))
    # Oldest act first, so the last one per photo is the newest. On a tie a judgment beats a
    # clear, and the oldest query's judgment beats a twin's (it stays where it is).
    acts = conn.execute(
        sa.text(
            "SELECT image_id, query_id, 1 AS is_row, "
            "CASE WHEN query_id = :keep THEN 1 ELSE 0 END AS is_keep, judged_at FROM judgments "
            f"WHERE query_id IN ({among}) "
            "UNION ALL "
            "SELECT image_id, query_id, 0 AS is_row, 0 AS is_keep, judged_at "
            f"FROM judgment_events WHERE query_id IN ({among}) AND relevance IS NULL "
            "ORDER BY judged_at, is_row, is_keep"
        ),
        params,
    ).all()
    newest = {row.image_id: (row.query_id, row.is_row) for row in acts}
    for image_id, (query_id, is_row) in newest.items():
        if not is_row:  # cleared last: no judgment of this photo stays
            conn.execute(
                sa.text(f"DELETE FROM judgments WHERE image_id = :image AND query_id IN ({among})"),
                {"image": image_id, **params},
            )
        elif query_id != keep:  # a twin's judgment is the newest: it replaces the oldest's
            conn.execute(
                sa.text("DELETE FROM judgments WHERE query_id = :keep AND image_id = :image"),
                {"keep": keep, "image": image_id},
            )
            conn.execute(
                sa.text(
                    "UPDATE judgments SET query_id = :keep "
                    "WHERE query_id = :twin AND image_id = :image"
                ),
                {"keep": keep, "twin": query_id, "image": image_id},
            )
    # What is left of the twins' judgments lost to a newer act.
    twins_in = ", ".join(f":q{i}" for i in range(1, len(ids)))
    conn.execute(sa.text(f"DELETE FROM judgments WHERE query_id IN ({twins_in})"), params)


def _merge(conn: sa.Connection, group: list[Any]) -> None:
    """Fold the twins of `group` (rows, oldest first) into the oldest, then delete them."""
    keep, twins = group[0], group[1:]
    for twin in twins:
        move = {"keep": keep.id, "twin": twin.id}
        conn.execute(sa.text("UPDATE runs SET query_id = :keep WHERE query_id = :twin"), move)
        conn.execute(
            sa.text("UPDATE judgment_events SET query_id = :keep WHERE query_id = :twin"), move
        )
    # Events first: the clears among them count in the merge of the judgments.
    _merge_judgments(conn, keep.id, [t.id for t in twins])
    ids = {f"q{i}": q.id for i, q in enumerate(group)}
    among = ", ".join(f":{k}" for k in ids)
    has_questions = "EXISTS (SELECT 1 FROM subqueries s WHERE s.query_id = q.id)"
    # One list, edited as a whole: the oldest's if it has one, else that of the twin used
    # last (subqueries carry no time of their own).
    source = conn.execute(
        sa.text(
            f"SELECT q.id FROM queries q WHERE q.id IN ({among}) AND {has_questions} "
            "ORDER BY CASE WHEN q.id = :keep THEN 0 ELSE 1 END, q.updated_at DESC, q.id DESC"
        ),
        {"keep": keep.id, **ids},
    ).first()
    if source is not None and source.id != keep.id:
        conn.execute(
            sa.text("UPDATE subqueries SET query_id = :keep WHERE query_id = :twin"),
            {"keep": keep.id, "twin": source.id},
        )
    name = keep.name or next((t.name for t in twins if t.name), None)
    notes: list[str] = []
    for q in group:
        if q.notes and q.notes not in notes:
            notes.append(q.notes)
    conn.execute(
        sa.text("UPDATE queries SET name = :name, notes = :notes WHERE id = :id"),
        {"name": name, "notes": "\n\n".join(notes) or None, "id": keep.id},
    )
    # Listed by its latest use among the twins (compared by the database, as stored).
    conn.execute(
        sa.text(
            "UPDATE queries SET updated_at = (SELECT max(t.updated_at) FROM queries t "
            f"WHERE t.id IN ({among})) WHERE id = :keep"
        ),
        {"keep": keep.id, **ids},
    )
    for twin in twins:
        gone = {"twin": twin.id}
        # Explicitly, rather than by the foreign keys' cascade, which SQLite applies only with
        # its foreign_keys pragma on.
        conn.execute(
            sa.text(
                "DELETE FROM subquery_scores WHERE subquery_id IN "
                "(SELECT id FROM subqueries WHERE query_id = :twin)"
            ),
            gone,
        )
        conn.execute(sa.text("DELETE FROM subqueries WHERE query_id = :twin"), gone)
        conn.execute(sa.text("DELETE FROM queries WHERE id = :twin"), gone)


def upgrade() -> None:
    conn = op.get_bind()
    for group in _twins(conn):
        _merge(conn, group)
    # As the model's `key_text` writes it: md5s on PostgreSQL, whose index entries hold at
    # most 2.7 KB (a long query text would not fit, and this upgrade would fail on it).
    if conn.dialect.name == "postgresql":
        key = [sa.text("md5(text)"), sa.text("md5(coalesce(image_path, ''))")]
    else:
        key = [sa.text("text"), sa.text("coalesce(image_path, '')")]
    op.create_index(INDEX, "queries", key, unique=True)


def downgrade() -> None:
    # The merged twins stay merged: nothing tells them apart any more.
    op.drop_index(INDEX, table_name="queries")
