"""Controllers unit-tested without a window: an `InlineTaskRunner` runs their tasks at once in
the test's thread, so a search or a judgment is done when the call returns, with no threads to
wait for. Each controller gets the few widgets it talks to, not the main window."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from app.controllers.judging import JudgingController
from app.controllers.open_query import QueryState, RunState
from app.controllers.search import SearchController, SearchOutcome, SearchRequest
from app.controllers.session import LibrarySession
from app.controllers.thumbnails import ThumbnailLoader
from app.settings import QueryHistory, Settings
from app.workers import InlineTaskRunner, TaskContext
from engine.errors import BadInputError, QuadratError
from engine.progress import Progress
from widgets.detail_pane import DetailPane
from widgets.metrics_panel import MetricsPanel, MetricsView
from widgets.query_bar import QueryBar
from widgets.results import ResultRole, ResultsModel, ResultsView

# -- the inline runner ------------------------------------------------------------------------


def test_the_inline_runner_delivers_each_outcome_before_submit_returns(qapp) -> None:
    errors: list[tuple[str, str]] = []
    runner = InlineTaskRunner(error_handler=lambda exc, title: errors.append((title, str(exc))))
    seen: list[object] = []

    def counts(ctx: TaskContext) -> int:
        ctx.progress(Progress(3, 3, message="counted"))
        return 42

    def refuses(ctx: TaskContext) -> int:
        raise BadInputError("no such folder")

    runner.submit(counts, title="Counting", on_success=seen.append, on_progress=seen.append)
    assert seen == [Progress(3, 3, message="counted"), 42]
    runner.submit(refuses, title="Adding a folder")  # no on_failure: the central handler
    assert errors == [("Adding a folder", "no such folder")]
    assert runner.titles == ["Counting", "Adding a folder"]
    assert runner.idle() and runner.wait()


def test_held_tasks_of_a_group_let_the_newest_win(qapp) -> None:
    runner = InlineTaskRunner(hold=True)
    results: list[str] = []
    cancelled: list[str] = []
    for name in ("first", "second"):
        runner.submit(
            lambda ctx, name=name: name,
            title=name,
            group="search",
            on_success=results.append,
            on_cancelled=lambda name=name: cancelled.append(name),
        )
    assert results == [] and not runner.idle()  # held until run
    assert runner.run_pending() == 2
    assert results == ["second"]
    assert cancelled == ["first"]
    assert runner.idle()


# -- the search controller --------------------------------------------------------------------


@dataclass
class Searching:
    """A search controller on an open copy of the indexed small demo, and what it said."""

    runner: InlineTaskRunner
    session: LibrarySession
    controller: SearchController
    model: ResultsModel
    messages: list[str] = field(default_factory=list)
    events: list[tuple[str, int]] = field(default_factory=list)  # ("started", id), ...
    outcomes: list[SearchOutcome] = field(default_factory=list)


@pytest.fixture
def searching(
    qapp, demo_encoder, copy_small_demo_library: Callable[[Path], Path], tmp_path: Path
) -> Iterator[Searching]:
    library_dir = copy_small_demo_library(tmp_path / "library")
    runner = InlineTaskRunner()
    settings = Settings(model="demo", library_dir=str(library_dir), batch_size=16)
    session = LibrarySession(
        runner, library_dir, settings, encoder_loader=lambda spec, device: demo_encoder
    )
    model = ResultsModel()
    controller = SearchController(
        runner,
        session,
        QueryBar(),
        model,
        DetailPane(),
        ThumbnailLoader(runner, session.thumbnail_cache),
        QueryHistory(tmp_path / "history.json"),
    )
    s = Searching(runner, session, controller, model)
    controller.message.connect(s.messages.append)
    controller.searchStarted.connect(lambda i, _request: s.events.append(("started", i)))
    controller.searchStopped.connect(lambda i, how: s.events.append((how, i)))
    controller.searchFinished.connect(lambda o: s.events.append(("finished", o.search_id)))
    controller.searchFinished.connect(s.outcomes.append)
    session.start()  # opens the library and loads the model, inline
    assert session.ready
    yield s
    session.close()


def test_a_search_fills_the_results_and_says_what_it_found(searching: Searching) -> None:
    handle = searching.controller.search(SearchRequest("a red circle", top_k=5))

    assert handle is not None and handle.done  # finished when `search` returned
    model = searching.model
    assert model.rowCount() == 5
    ranks = [model.data(model.index(row, 0), ResultRole.Item).rank for row in range(5)]
    assert ranks == [1, 2, 3, 4, 5]
    [outcome] = searching.outcomes
    # Saved with the run: the method's full parameters, no filters, nothing drawn.
    assert outcome.params.to_json() == {"template": "{query}", "image_weight": 0.5}
    assert searching.messages[0] == "Searching…"
    assert searching.messages[-1].startswith("5 results for “a red circle”  ·  ")
    assert searching.controller.history.items == ["a red circle"]


def test_listeners_see_a_search_start_before_it_finishes(searching: Searching) -> None:
    # The VisRet strip and the rerank editor open on `searchStarted` and close on the result:
    # the other way round would leave them spinning.
    searching.controller.search(SearchRequest("a blue square", top_k=3))
    searching.controller.search(SearchRequest("a green triangle", top_k=3))
    assert searching.events == [("started", 1), ("finished", 1), ("started", 2), ("finished", 2)]


def test_a_newer_search_drops_the_one_still_waiting(searching: Searching) -> None:
    searching.runner.hold = True
    searching.controller.search(SearchRequest("a blue square", top_k=3))
    searching.controller.search(SearchRequest("a green triangle", top_k=4))
    searching.runner.run_pending()

    assert searching.events == [("started", 1), ("started", 2), ("cancelled", 1), ("finished", 2)]
    assert [o.request.text for o in searching.outcomes] == ["a green triangle"]
    assert searching.model.rowCount() == 4


def test_a_query_with_neither_words_nor_photo_runs_nothing(searching: Searching) -> None:
    assert searching.controller.search(SearchRequest("   ")) is None
    # No search submitted: only the start-up's two tasks.
    assert searching.runner.titles == ["Opening the library", "Loading the search engine"]
    assert searching.messages == [
        "Type a few words describing what to find, or drop a photo on the query bar"
    ]


def test_a_search_asked_before_the_model_is_ready_runs_once_it_is(
    searching: Searching,
) -> None:
    session = searching.session
    session.ready = False
    assert searching.controller.search(SearchRequest("a red circle", top_k=2)) is None
    assert searching.messages == ["The search will run as soon as the model is ready…"]
    session.update_ready()  # the model is loaded: ready again
    assert [o.request.text for o in searching.outcomes] == ["a red circle"]
    assert searching.model.rowCount() == 2


# -- the judging controller -------------------------------------------------------------------


@dataclass
class Judging:
    controller: JudgingController
    model: ResultsModel
    query_id: int
    ids: list[int]  # the ranking shown, best first
    saved: list[tuple[int, int, object]] = field(default_factory=list)
    metrics: list[MetricsView | None] = field(default_factory=list)
    errors: list[tuple[str, str]] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)


@pytest.fixture
def judging(searching: Searching) -> Judging:
    """A judging controller on a saved query whose one run is a real search's ranking."""
    s = searching
    s.controller.search(SearchRequest("a red circle", top_k=4))
    [outcome] = s.outcomes
    store = s.session.query_store()
    assert store is not None
    ranking = [(item.image_id, item.score) for item in outcome.items]
    query_id = store.find_or_create_query("a red circle")
    run_id = store.save_run(query_id, "text", ranking)
    errors: list[tuple[str, str]] = []
    s.runner.error_handler = lambda exc, title: errors.append((title, str(exc)))
    view = ResultsView()
    view.setModel(s.model)
    metrics = MetricsPanel()
    controller = JudgingController(
        s.runner, s.session.query_store, s.model, view, DetailPane(), metrics
    )
    j = Judging(controller, s.model, query_id, [i for i, _ in ranking], errors=errors)
    controller.judgmentSaved.connect(lambda q, i, v: j.saved.append((q, i, v)))
    controller.metricsUpdated.connect(j.metrics.append)
    controller.message.connect(j.messages.append)
    controller.show_query(
        QueryState(query_id, "a red circle", run_id, [RunState(run_id, "text", "Text", ranking)])
    )
    return j


def judgment_shown(j: Judging, image_id: int) -> object:
    row = j.model.row_of(image_id)
    assert row is not None
    return j.model.data(j.model.index(row, 0), ResultRole.Judgment)


def test_a_judgment_is_stored_and_counted_and_undo_takes_it_back(judging: Judging) -> None:
    j, second = judging, judging.ids[1]
    store = j.controller.store
    assert store is not None

    j.controller.judge(second, 1)
    assert store.judgments(j.query_id) == {second: 1}  # committed when `judge` returned
    assert j.saved == [(j.query_id, second, 1)]
    assert judgment_shown(j, second) == 1
    view = j.metrics[-1]
    assert view is not None and view.relevant == 1
    assert view.runs[0].values["AP"] == pytest.approx(0.5)  # the one relevant photo at rank 2

    j.controller.undo()
    assert store.judgments(j.query_id) == {}
    assert judgment_shown(j, second) is None
    assert j.errors == []


def test_a_judgment_that_cannot_be_stored_is_taken_back_and_reported(judging: Judging) -> None:
    j, first = judging, judging.ids[0]
    store = j.controller.store
    assert store is not None

    def disk_full(*args: object, **kwargs: object) -> None:
        raise QuadratError("the catalog could not be written: disk full")

    store.judge = disk_full  # type: ignore[method-assign]
    j.controller.judge(first, 1)

    assert judgment_shown(j, first) is None  # the screen never claims what is not stored
    assert j.controller.judgments == {}
    assert j.errors == [("Saving the judgment", "the catalog could not be written: disk full")]
    assert j.saved == []
    assert j.controller.undo() is None  # the failed judgment left nothing to undo
    assert j.messages == ["Nothing to undo"]
