"""What a method may use while it runs: the library, its encoder, models, filters, progress,
cancel, its listeners and the judgments it learns from (`engine.methods.search` runs one
search in one).

A context runs other methods by name (`run_method`), so it sits above the registry; the methods
and `engine.methods.base` name it for typing only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from engine.errors import BadInputError
from engine.methods.base import (
    LanguageModelEndpoint,
    MethodSpec,
    ModelManager,
    Ranking,
    SearchQuery,
)
from engine.methods.events import MethodEvent
from engine.methods.registry import resolve_spec
from engine.progress import CancelToken, ProgressCallback, no_progress

if TYPE_CHECKING:
    from engine.catalog.library import Library
    from engine.models.encoders import Encoder
    from engine.search.searcher import Searcher, SearchFilters


def _no_notify(_event: MethodEvent) -> None:
    """The default `MethodContext.notify`: nobody listens."""


@dataclass
class MethodContext:
    """What a method may use: the library, its encoder (loaded on first use), a model manager,
    a cache folder, metadata filters, progress and cancel."""

    library: Library
    encoder_loader: Callable[[], Encoder]
    models: ModelManager = field(default_factory=ModelManager)
    cache_dir: Path | None = None
    filters: SearchFilters | None = None
    progress: ProgressCallback = no_progress
    cancel: CancelToken = field(default_factory=CancelToken)
    _searcher: Searcher | None = field(default=None, repr=False)
    generator: str = ""  # the configured generator spec ("" = none configured)
    llm: LanguageModelEndpoint = field(default_factory=LanguageModelEndpoint)
    drawings_dir: Path | None = None  # drawing cache; None = LIBRARY/cache/drawings
    # Partial results as they come, as typed events (`engine.methods.events`): visret gives a
    # `DrawingMade` as each drawing is ready and a `DrawingProgress` per step; rerank its
    # `RerankProgress` and, between batches, a `RerankPartial`.
    notify: Callable[[MethodEvent], None] = field(default=_no_notify, repr=False)
    # The judgments a learning method (rocchio, probe, ...) learns from, image id -> relevance,
    # read when the method runs: the caller gives them (the catalog's for a saved query, the
    # window's in memory, a simulated user's); None = no saved query to learn from. A callable,
    # so a context built before a judgment is made still sees it.
    judgments: Callable[[], Mapping[int, int]] | None = field(default=None, repr=False)

    @property
    def encoder(self) -> Encoder:
        return self.encoder_loader()

    @property
    def drawing_cache_dir(self) -> Path:
        """Where drawings are cached: `drawings_dir`, else LIBRARY/cache/drawings."""
        return self.drawings_dir or self.library.root / "cache" / "drawings"

    @property
    def searcher(self) -> Searcher:
        if self._searcher is None:
            from engine.search.searcher import Searcher

            self._searcher = Searcher(self.library, self.encoder)
        return self._searcher

    def query_judgments(self, method: str) -> dict[int, int]:
        """image id -> relevance of the query being refined (the `judgments` given); a one-line
        BadInputError naming `method` when none were given (no saved query to learn from)."""
        if self.judgments is None:
            raise BadInputError(
                f"method '{method}' learns from a saved query's judgments: use 'quadrat refine "
                f"--query ID --method {method}' (or Refine in the window)"
            )
        return {int(i): int(r) for i, r in self.judgments().items()}

    def run_method(
        self,
        spec: str | MethodSpec,
        query: SearchQuery,
        *,
        top_k: int,
        candidates: Sequence[int] | None = None,
    ) -> Ranking:
        """Run another method of the registry (a base under a reranker, a part of a fusion)."""
        resolved = resolve_spec(spec) if isinstance(spec, str) else spec
        return resolved.run(query, self, top_k=top_k, candidates=candidates)
