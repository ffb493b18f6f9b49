"""The judged filter: photos judged, or not yet judged, for a saved query."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from engine.catalog import Image, Judgment
from engine.search.filter_kinds.base import FilterKind, MenuEntry, Terms, as_int, fail

JUDGED, UNJUDGED = "judged", "unjudged"


def _check_judged(filters: Any) -> dict[str, Any]:
    if filters.judged not in (None, JUDGED, UNJUDGED):
        raise fail("judged", f"expected 'judged' or 'unjudged', got {filters.judged!r:.60}")
    query_id = filters.judged_query_id
    if query_id is not None:
        query_id = as_int("judged_query_id", query_id)
    if (filters.judged is None) != (query_id is None):
        raise fail("judged", "needs both judged or unjudged and the saved query it is about")
    return {"judged_query_id": query_id}


def _judged_terms(_session: Session, filters: Any) -> Terms:
    if not filters.judged:
        return []
    judged = select(Judgment.image_id).where(Judgment.query_id == filters.judged_query_id)
    return [Image.id.in_(judged) if filters.judged == JUDGED else Image.id.not_in(judged)]


JUDGED_KIND = FilterKind(
    "judged",
    "judged",
    ("judged", "judged_query_id"),
    check=_check_judged,
    condition=_judged_terms,
    chip=lambda f, _names: f"{f.judged} for query {f.judged_query_id}" if f.judged else None,
    menu=MenuEntry("Judged for the open query", "judged", 10),
)
