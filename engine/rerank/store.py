"""The subqueries saved with a query (the catalog's `subqueries` table), in their order."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import delete, select

from engine.catalog.library import Library
from engine.catalog.models import Query, Subquery
from engine.errors import BadInputError
from engine.rerank.base import Question


def save_questions(library: Library, query_id: int, questions: Sequence[Question]) -> None:
    """Replace the questions saved with query `query_id` by `questions` (in this order)."""
    with library.catalog.session() as s:
        if s.get(Query, query_id) is None:
            raise BadInputError(f"there is no saved query {query_id}")
        s.execute(delete(Subquery).where(Subquery.query_id == query_id))
        for position, question in enumerate(questions):
            s.add(
                Subquery(
                    query_id=query_id,
                    position=position,
                    text=question.text,
                    source=question.source,
                    target=question.target,
                )
            )


def load_questions(library: Library, query_id: int) -> tuple[Question, ...]:
    """The questions saved with query `query_id`, in order (none when nothing was saved)."""
    with library.catalog.session() as s:
        rows = s.scalars(
            select(Subquery)
            .where(Subquery.query_id == query_id)
            .order_by(Subquery.position, Subquery.id)
        ).all()
        return tuple(Question(r.text, r.source or "user", r.target or "") for r in rows)
