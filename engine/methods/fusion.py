"""Fusing ranked lists into one: reciprocal rank fusion, exactly as docs/SPEC.md §2.1 defines it.

Pure functions, no I/O; the methods that fuse (VisRet's drawings, the learning methods' probes,
hybrid's words and pictures) all call `reciprocal_rank_fusion`, so one tie rule holds for all.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from fractions import Fraction
from typing import Any, Literal, TypeVar, overload

Id = TypeVar("Id", bound=Hashable)

Ties = Literal["position", "shared"]


def shared_ranks(scored: Sequence[tuple[Id, float]]) -> dict[Id, int]:
    """1-based ranks of a list sorted best first, where equal scores share the best rank of
    their group ("1, 2, 2, 4"). An id repeated in the list keeps its first (best) rank.

    bm25 gives every photo of one species without notes the same score; counting them 1, 2, 3…
    in id order would make a fusion favour low ids."""
    ranks: dict[Id, int] = {}
    previous: float | None = None
    rank = 0
    for position, (doc, score) in enumerate(scored, start=1):
        if previous is None or score != previous:
            rank = position
            previous = score
        ranks.setdefault(doc, rank)
    return ranks


def _positions(ranking: Sequence[Id]) -> dict[Id, int]:
    """1-based rank of each id by its place in the list; a repeat keeps its first rank."""
    ranks: dict[Id, int] = {}
    for rank, doc in enumerate(ranking, start=1):
        ranks.setdefault(doc, rank)
    return ranks


@overload
def reciprocal_rank_fusion(
    lists: Sequence[Sequence[Id]], k_rrf: int = 60, *, ties: Literal["position"] = "position"
) -> list[tuple[Id, float]]: ...


@overload
def reciprocal_rank_fusion(
    lists: Sequence[Sequence[tuple[Id, float]]], k_rrf: int = 60, *, ties: Literal["shared"]
) -> list[tuple[Id, float]]: ...


def reciprocal_rank_fusion(
    lists: Sequence[Sequence[Any]], k_rrf: int = 60, *, ties: Ties = "position"
) -> list[tuple[Any, float]]:
    """RRF: Σ_j 1 / (k_rrf + rank_j(d)); ties by best single rank, then id (docs/SPEC.md §2.1).

    `ties="position"`: each list holds ids best first and an id's rank is its place.
    `ties="shared"`: each list holds (id, score) pairs best first and equal scores share the
    best rank of their group (`shared_ranks`), for rankers that give many items one score.
    An id repeated within one list counts once, at its first (best) rank.
    """
    if ties not in ("position", "shared"):
        raise ValueError(f"ties must be 'position' or 'shared', got {ties!r}")
    # Exact fractions: float sums of different terms that are equal in exact arithmetic
    # (1/2 + 1/6 and 1/3 + 1/3) can differ in the last bit and break a tie the wrong way.
    scores: dict[Any, Fraction] = {}
    best_rank: dict[Any, int] = {}
    for ranking in lists:
        ranks = shared_ranks(ranking) if ties == "shared" else _positions(ranking)
        for doc, rank in ranks.items():
            scores[doc] = scores.get(doc, Fraction(0)) + Fraction(1, k_rrf + rank)
            best_rank[doc] = min(best_rank.get(doc, rank), rank)
    ordered = sorted(scores, key=lambda doc: (-scores[doc], best_rank[doc], doc))
    return [(doc, float(scores[doc])) for doc in ordered]
