"""The shared vocabulary of structured reranking: yes/no subqueries, their sources
(decomposers), the photos a scorer answers them on, the answers, and how answers aggregate
into one score per photo (docs/SPEC.md §2.2)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from engine.errors import BadInputError
from engine.progress import CancelToken

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

AGGREGATIONS: tuple[str, ...] = ("mean", "min", "product")


def yes_probability(l_yes: float | None, l_no: float | None) -> float:
    """p = exp(l_yes) / (exp(l_yes) + exp(l_no)) from logits or log-probabilities (docs/SPEC.md §2).

    A token the scorer did not return (None or -inf) has probability zero; with neither token,
    p = 0 ("No").
    """
    yes = -math.inf if l_yes is None else float(l_yes)
    no = -math.inf if l_no is None else float(l_no)
    if yes == -math.inf:
        return 0.0
    if no == -math.inf:
        return 1.0
    # 1 / (1 + exp(no - yes)) is the same ratio without overflowing for large logits.
    diff = no - yes
    if diff > 700:
        return 0.0
    return 1.0 / (1.0 + math.exp(diff))


@dataclass(frozen=True)
class Question:
    """One yes/no subquery."""

    text: str  # "Is there a red circle in this photo?"
    source: str = "user"  # "user" | "builtin" | "llm"
    # The object it asks about ("red circle"), "" for a whole-scene question; a region-aware
    # scorer answers a question with a target on the best crop.
    target: str = ""


@dataclass(frozen=True)
class Decomposition:
    """The questions a query was split into, with the expert context and a one-line note."""

    questions: tuple[Question, ...]
    context: str = ""  # expert context paragraph, prepended to every scorer prompt
    note: str = ""  # e.g. why the LLM decomposer fell back to the built-in one


class Decomposer(Protocol):
    """Turns a query into yes/no subqueries."""

    identity: str  # "user", "builtin", "llm:<url>#<model>"

    def decompose(
        self, query: str, *, context: str = "", known_names: Sequence[str] = ()
    ) -> Decomposition:
        """The subqueries of `query`; `known_names` are the catalog's taxon and common names."""
        ...


@dataclass(frozen=True)
class Photo:
    """A photo as a scorer sees it."""

    image_id: int
    path: Path
    content_hash: str


@dataclass(frozen=True)
class Answer:
    """A scorer's answer to one question on one photo."""

    p_yes: float  # in [0, 1], docs/SPEC.md §2.2 (neither token -> 0.0)
    answer: str = ""  # "yes" / "no" / the model's words
    l_yes: float | None = None  # the logits or log-probabilities it came from, when any
    l_no: float | None = None


class Scorer(Protocol):
    """Answers one yes/no question on a batch of photos."""

    identity: str  # "clip:<model_key>", "vlm:sha256-<16hex>", "endpoint:<url>#<model>", ...
    batch_size: int

    def score(
        self,
        photos: Sequence[Photo],
        question: Question,
        *,
        history: Sequence[Sequence[tuple[Question, Answer]]],
        context: str,
        cancel: CancelToken,
    ) -> list[Answer]:
        """One answer per photo; `history[i]` holds photo i's earlier questions and answers."""
        ...


def aggregate(answers: Sequence[float], how: str = "mean") -> float:
    """One photo's score from its p(yes) per subquery: "mean" (the paper's), "min" or
    "product". No answers give 0."""
    if how not in AGGREGATIONS:
        raise BadInputError(f"unknown aggregation {how!r}; choose one of {', '.join(AGGREGATIONS)}")
    values = [float(p) for p in answers]
    if not values:
        return 0.0
    if how == "mean":
        return math.fsum(values) / len(values)
    if how == "min":
        return min(values)
    return math.prod(values)
