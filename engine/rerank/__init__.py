"""Structured reranking: yes/no subqueries an expert can read and edit, scorers that answer
them per photo, aggregation, a score cache in the catalog, and cost estimates."""

from engine.rerank.base import (
    AGGREGATIONS,
    Answer,
    Decomposer,
    Decomposition,
    Photo,
    Question,
    Scorer,
    aggregate,
    yes_probability,
)

__all__ = [
    "AGGREGATIONS",
    "Answer",
    "Decomposer",
    "Decomposition",
    "Photo",
    "Question",
    "Scorer",
    "aggregate",
    "yes_probability",
]
