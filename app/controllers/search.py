"""Searching: the method registry, running a query in the background, showing the results.

A method is a `SearchMethod` entry: its key, its label in the picker, and a function that runs
it with a `Searcher`. VisRet, reranking and hybrid search join by adding entries. The newest
search wins: a new query cancels the one still running and drops its late result.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QImage, QPixmap

from app.controllers.results import result_items
from app.controllers.session import LibrarySession
from app.controllers.thumbnails import ThumbnailLoader
from app.settings import QueryHistory
from app.workers import READ, TaskContext, TaskHandle, TaskRunner
from engine.errors import BadInputError, QuadratError
from widgets.detail_pane import DetailPane
from widgets.query_bar import MethodChoice, QueryBar
from widgets.results import ResultItem, ResultsModel

log = logging.getLogger(__name__)

PREVIEW_SIZE = 1400


@dataclass(frozen=True)
class SearchRequest:
    text: str
    image: Path | None = None
    method: str = "text"
    top_k: int = 1000


@dataclass(frozen=True)
class SearchMethod:
    key: str
    label: str
    tooltip: str
    run: Callable[[Any, SearchRequest], Any]  # (Searcher, request) -> engine.search.SearchResult
    available: bool = True


def _run_clip(searcher: Any, request: SearchRequest) -> Any:
    text = request.text.strip()
    if request.image is not None and text:
        return searcher.image_text(request.image, text, request.top_k)
    if request.image is not None:
        return searcher.image(request.image, request.top_k)
    return searcher.text(text, request.top_k)


METHODS: dict[str, SearchMethod] = {
    m.key: m
    for m in (
        SearchMethod(
            "text",
            "Text",
            "CLIP similarity to the query text (and to a dropped photo, if any)",
            _run_clip,
        ),
    )
}


@dataclass
class SearchOutcome:
    request: SearchRequest
    items: list[ResultItem]
    seconds: float  # engine time: encode the query and search
    total_seconds: float  # including reading the photos' details
    method_label: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    missing: int = 0  # photos of the library missing from disk, so not searched


def pil_to_qimage(image: Any) -> QImage:
    """An RGB PIL image as a QImage that owns its pixels (safe to hand to another thread)."""
    rgb = image.convert("RGB")
    data = rgb.tobytes("raw", "RGB")
    qimage = QImage(data, rgb.width, rgb.height, 3 * rgb.width, QImage.Format.Format_RGB888)
    return qimage.copy()


class SearchController(QObject):
    """Runs queries from the query bar and fills the results model and the detail pane."""

    searchFinished = Signal(object)  # SearchOutcome
    message = Signal(str)

    def __init__(
        self,
        runner: TaskRunner,
        session: LibrarySession,
        query_bar: QueryBar,
        model: ResultsModel,
        detail: DetailPane,
        thumbnails: ThumbnailLoader,
        history: QueryHistory,
    ) -> None:
        super().__init__()
        self.runner = runner
        self.session = session
        self.query_bar = query_bar
        self.model = model
        self.detail = detail
        self.thumbnails = thumbnails
        self.history = history
        self._pending: SearchRequest | None = None
        self.last_outcome: SearchOutcome | None = None
        query_bar.set_methods(
            [MethodChoice(m.key, m.label, m.tooltip, m.available) for m in METHODS.values()]
        )
        query_bar.set_history(history.items)
        query_bar.searchRequested.connect(self.on_search_requested)
        detail.moreLikeThisRequested.connect(self.more_like_this)
        model.set_thumbnail_source(thumbnails)
        thumbnails.thumbnailReady.connect(model.thumbnail_ready)
        session.readyChanged.connect(self._on_ready_changed)

    def _on_ready_changed(self, ready: bool, message: str) -> None:
        self.query_bar.set_status(ready, message)
        if ready and self._pending is not None:
            request, self._pending = self._pending, None
            self.search(request)

    def on_search_requested(self, text: str, image: object, method: str) -> None:
        request = SearchRequest(
            text=text,
            image=Path(image) if image is not None else None,
            method=method or "text",
            top_k=self.session.settings.top_k,
        )
        self.search(request)

    def more_like_this(self, item: ResultItem) -> None:
        self.query_bar.set_image(Path(item.path))
        self.query_bar.set_text("")
        self.search(
            SearchRequest(
                "",
                Path(item.path),
                self.query_bar.method_key() or "text",
                self.session.settings.top_k,
            )
        )

    def search(self, request: SearchRequest) -> TaskHandle | None:
        """Run `request` in the background; the results replace the grid's."""
        method = METHODS.get(request.method)
        if method is None:
            self.message.emit(f"Unknown search method: {request.method}")
            return None
        if request.image is None and not request.text.strip():
            self.message.emit(
                "Type a few words describing what to find, or drop a photo on the query bar"
            )
            return None
        if not self.session.ready:
            self._pending = request
            self.message.emit("The search will run as soon as the model is ready…")
            return None
        if request.text.strip():
            self.history.add(request.text)
            self.query_bar.set_history(self.history.items)
        session = self.session
        library = session.library

        def run(ctx: TaskContext) -> SearchOutcome:
            from engine.collections import missing_photos
            from engine.search import Searcher

            started = time.monotonic()
            searcher = Searcher(library, session.ensure_encoder())
            result = method.run(searcher, request)
            ctx.check()
            ranking = [(hit.image_id, hit.score) for hit in result.hits]
            items = result_items(library, ranking, result.hits)
            return SearchOutcome(
                request,
                items,
                result.seconds,
                time.monotonic() - started,
                method.label,
                result.params,
                missing_photos(library).photos,
            )

        self.message.emit("Searching…")
        return self.runner.submit(
            run,
            title="Searching",
            pool=READ,
            group="search",
            on_success=self._show,
            on_failure=self._failed,
        )

    def _show(self, outcome: SearchOutcome) -> None:
        self.last_outcome = outcome
        self.thumbnails.reset()
        self.model.set_results(outcome.items)
        count = len(outcome.items)
        what = outcome.request.text.strip() or (
            outcome.request.image.name if outcome.request.image else ""
        )
        self.message.emit(
            f"{count:,} result{'s' * (count != 1)} for “{what}”  ·  {outcome.method_label}  ·  "
            f"search {outcome.seconds * 1000:.0f} ms"
            + (
                f"  ·  {outcome.missing:,} photos missing from disk, not searched"
                if outcome.missing
                else ""
            )
        )
        self.searchFinished.emit(outcome)

    def show_results(self, items: list[ResultItem], text: str, image: Path | None) -> None:
        """Show a stored ranking (a reopened run) in the grid, its query in the query bar."""
        self.thumbnails.reset()
        self.model.set_results(items)
        self.query_bar.set_text(text)
        self.query_bar.set_image(image)

    def _failed(self, exc: BaseException) -> None:
        if isinstance(exc, BadInputError):
            self.message.emit(str(exc))  # a bad query is not worth a dialog
            return
        self.message.emit("The search failed")
        self.runner.report_error(exc, "Searching")

    # -- the detail pane -----------------------------------------------------------------------

    def show_item(self, item: ResultItem | None) -> TaskHandle | None:
        """Show `item`'s metadata now and load its large photo in the background."""
        self.detail.set_item(item)
        if item is None:
            return None
        path = item.path

        def load(ctx: TaskContext) -> QImage:
            from engine.thumbnails import load_preview

            return pil_to_qimage(load_preview(path, PREVIEW_SIZE))

        def shown(image: QImage) -> None:
            if self.detail.item() is item:
                self.detail.set_photo(QPixmap.fromImage(image))

        def failed(exc: BaseException) -> None:
            if self.detail.item() is item:
                reason = str(exc) if isinstance(exc, QuadratError) else type(exc).__name__
                self.detail.set_photo(None, f"Cannot show this photo: {reason}")

        return self.runner.submit(
            load,
            title="Loading the photo",
            pool=READ,
            group="preview",
            on_success=shown,
            on_failure=failed,
        )
