"""A running method's events reach every controller that listens, whatever order the window
built them in: the VisRet strip gets its drawings and the rerank editor its partial rankings
from one search controller, each picking its own events by type."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from PySide6.QtWidgets import QWidget

from app.controllers.judging import JudgingController
from app.controllers.rerank import RerankController
from app.controllers.search import SearchController, SearchRequest
from app.controllers.session import LibrarySession
from app.controllers.thumbnails import ThumbnailLoader
from app.controllers.visret import VisRetController
from app.settings import QueryHistory, Settings
from app.workers import InlineTaskRunner
from engine.methods import rerank as rerank_module
from engine.methods.events import DrawingMade, DrawingProgress, MethodEvent, RerankPartial
from engine.rerank import Answer
from widgets.detail_pane import DetailPane
from widgets.drawings_strip import DrawingsStrip
from widgets.metrics_panel import MetricsPanel
from widgets.query_bar import QueryBar
from widgets.results import ResultsModel, ResultsView
from widgets.subquery_editor import SubqueryEditor


class HalfSure:
    """A scorer answering every question with p = 0.5, in batches of five photos (so a
    Reranked search of 20 reports partial rankings between batches)."""

    batch_size = 5
    identity = "half-sure:1"

    def score(self, photos, question, *, history, context, cancel) -> list[Answer]:  # type: ignore[no-untyped-def]
        return [Answer(0.5, "yes") for _ in photos]


@pytest.mark.parametrize("rerank_first", [True, False], ids=["rerank-first", "visret-first"])
def test_each_controller_hears_its_events_whatever_the_order_it_was_built_in(
    qapp,
    demo_encoder,
    copy_small_demo_library: Callable[[Path], Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    rerank_first: bool,
) -> None:
    monkeypatch.setattr(rerank_module, "load_scorer_for", lambda spec, context: HalfSure())
    library_dir = copy_small_demo_library(tmp_path / "library")
    runner = InlineTaskRunner()
    settings = Settings(model="demo", library_dir=str(library_dir), batch_size=16)
    session = LibrarySession(
        runner, library_dir, settings, encoder_loader=lambda spec, device: demo_encoder
    )
    model, view, detail = ResultsModel(), ResultsView(), DetailPane()
    view.setModel(model)
    search = SearchController(
        runner,
        session,
        QueryBar(),
        model,
        detail,
        ThumbnailLoader(runner, session.thumbnail_cache),
        QueryHistory(tmp_path / "history.json"),
    )
    judging = JudgingController(runner, session.query_store, model, view, detail, MetricsPanel())
    window = QWidget()  # never shown: the strip and the editor show and hide inside it

    def build_rerank() -> RerankController:
        return RerankController(
            runner, session, search, judging, SubqueryEditor(window), view, detail
        )

    def build_visret() -> VisRetController:
        return VisRetController(runner, search, judging, DrawingsStrip(window))

    if rerank_first:  # the order the chained hook could not take: VisRet's replaced Reranked's
        rerank, visret = build_rerank(), build_visret()
    else:
        visret, rerank = build_visret(), build_rerank()
    drawings: list[int] = []
    partials: list[int] = []
    visret.drawingShown.connect(lambda card: drawings.append(card.index))
    rerank.partialShown.connect(partials.append)
    heard: list[type[MethodEvent]] = []

    def deliver(search_id: int, event: MethodEvent) -> None:
        # The inline runner runs the search in this thread: deliver what the controllers'
        # listeners queued while the search is still live, as the GUI thread would.
        heard.append(type(event))
        qapp.processEvents()

    search.add_event_listener(deliver)  # heard last, after both controllers
    session.start()
    assert session.ready

    search.search(SearchRequest("red circle", method="visret", top_k=20))
    assert drawings == [0, 1, 2]  # the strip got each drawing
    assert partials == []  # and the rerank editor nothing of VisRet's
    assert DrawingMade in heard and DrawingProgress in heard

    heard.clear()
    search.search(
        SearchRequest(
            "red circle",
            method="rerank",
            top_k=20,
            params={"depth": 20, "subqueries": "red circle"},
        )
    )
    assert partials and all(count > 0 for count in partials)  # the grid filled in
    assert drawings == [0, 1, 2]  # the strip heard nothing of Reranked's
    assert RerankPartial in heard and DrawingMade not in heard
    assert len(rerank.evidence) == 20  # the finished run's answers, shown
    session.close()
