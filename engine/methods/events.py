"""What a method reports while it runs: small typed events given to `MethodContext.notify`.

A slow method hands its partial results out as they come (VisRet each drawing and each drawing
step, Reranked its progress and the ranking so far), so a window can show them before the run
ends. Listeners pick the events they know by type and pass over the others.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.methods.base import Ranking
    from engine.progress import Progress
    from engine.visret.base import Drawing


@dataclass(frozen=True)
class MethodEvent:
    """Something a running method reports; listeners match on the subclasses."""


@dataclass(frozen=True)
class DrawingMade(MethodEvent):
    """VisRet: one drawing is ready (drawn now or from the cache), or failed with its error."""

    drawing: Drawing


@dataclass(frozen=True)
class DrawingProgress(MethodEvent):
    """VisRet: a step of drawing number `index`."""

    index: int
    progress: Progress


@dataclass(frozen=True)
class RerankProgress(MethodEvent):
    """Reranked: `done` of `total` photos scored."""

    done: int
    total: int


@dataclass(frozen=True)
class RerankPartial(MethodEvent):
    """Reranked: the ranking so far, between batches (scored photos first, with evidence)."""

    ranking: Ranking
