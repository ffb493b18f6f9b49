"""One search, the way the command line, the window and scripts all run it: a `SearchJob`
(library, query, method, filters, k, the encoder and the models a method may call) given to
`run_search`, which builds the method's context, runs the method and turns its ranking into
hits. What each caller does around it (checks before loading a model, printing, the grid)
stays with the caller.

A job's `unit` says what is ranked: "frames" (the method's ranking, the default), "boxes"
(detections' crops, each hit naming its photo and box) or "fused" (frames by their full-frame
and best-crop scores fused): `engine.methods.units`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from engine.methods.base import LanguageModelEndpoint, MethodSpec, ModelManager, Ranking
from engine.methods.context import MethodContext
from engine.methods.events import MethodEvent
from engine.methods.registry import resolve_spec
from engine.methods.units import DEFAULT_RULE, rank_unit
from engine.progress import CancelToken, ProgressCallback, no_progress

if TYPE_CHECKING:
    from engine.catalog.library import Library
    from engine.detections.crop_index import BoxHit
    from engine.methods.base import SearchQuery
    from engine.models.encoders import Encoder
    from engine.search.searcher import SearchFilters, SearchHit


@dataclass(frozen=True)
class SearchJob:
    """What one search needs: `method` is a registry spec (`KEY[:NAME=VALUE,…]`) or a resolved
        `MethodSpec`; `encoder` loads the encoder on first use; `filters` None or inactive rank
        the whole library; `generator` and `llm` are what methods that draw or ask a language
        model use; `models` keeps loaded models between searches; `notify` hears a method's
        partial results (`engine.methods.events`); `unit` what is ranked ("frames", "boxes",
    "fused") and `fusion` the rule a fused search uses (`engine.methods.units`)."""

    library: Library
    query: SearchQuery
    encoder: Callable[[], Encoder]
    method: str | MethodSpec = "text"
    k: int = 50
    filters: SearchFilters | None = None
    generator: str = ""
    llm: LanguageModelEndpoint | None = None
    models: ModelManager | None = None
    notify: Callable[[MethodEvent], None] | None = None
    unit: str = "frames"
    fusion: str = DEFAULT_RULE

    @property
    def spec(self) -> MethodSpec:
        """The method, resolved (a one-line `BadInputError` for an unknown one)."""
        return resolve_spec(self.method) if isinstance(self.method, str) else self.method


@dataclass(frozen=True)
class SearchResult:
    """A search's ranking (ids, scores, evidence, details), its hits best first (paths,
    taxa) and how long the method ran, in seconds. A box search also has its boxes best first
    (the frames of `hits` are theirs, each at its best box's place); a fused search the boxes
    that lifted its frames, and `best_box` each frame's best detection."""

    ranking: Ranking
    hits: list[SearchHit]
    seconds: float
    boxes: list[BoxHit] = field(default_factory=list)
    best_box: dict[int, int] = field(default_factory=dict)

    def pairs(self) -> list[tuple[int, float]]:
        """(image id, score) best first."""
        return self.ranking.pairs()


def run_search(
    job: SearchJob,
    progress: ProgressCallback = no_progress,
    cancel: CancelToken | None = None,
) -> SearchResult:
    """Run one search: its method over its query in a fresh `MethodContext`, the ranking
    turned into hits. A search cancelled while the method ran raises `Cancelled` before the
    hits are read."""
    spec = job.spec
    cancel = cancel or CancelToken()
    context = MethodContext(
        job.library,
        job.encoder,
        models=job.models or ModelManager(),
        filters=job.filters,
        progress=progress,
        cancel=cancel,
        generator=job.generator,
        llm=job.llm or LanguageModelEndpoint(),
    )
    if job.notify is not None:
        context.notify = job.notify
    started = time.monotonic()
    answer = rank_unit(job.unit, job.fusion, spec, job.query, context, job.k)
    seconds = time.monotonic() - started
    cancel.check()
    ranking = answer.ranking
    boxes: list[BoxHit] = []
    if answer.boxes:
        from engine.detections.crop_index import box_hits

        boxes = box_hits(job.library, answer.boxes)
    hits = context.searcher.hits_for(ranking.pairs())
    return SearchResult(ranking, hits, seconds, boxes, answer.best_box)


def search_hits(
    library: Library,
    encoder: Encoder,
    query: SearchQuery,
    spec: str = "text",
    *,
    top_k: int,
    filters: SearchFilters | None = None,
) -> list[SearchHit]:
    """The hits of one `run_search` with a loaded encoder: the short form for scripts, the
    self-test and tests."""
    job = SearchJob(library, query, lambda: encoder, spec, top_k, filters)
    return run_search(job).hits
