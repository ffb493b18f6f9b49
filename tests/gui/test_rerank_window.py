"""Reranked searches in the window: the subquery editor, the answers table in the detail pane,
sorting the grid by one question, questions saved with the query and back when it is opened,
and Cancel keeping what was scored while partial results stream in."""

from __future__ import annotations

import re
import threading

import pytest

from app.controllers.application import Application
from engine.methods.events import RerankPartial
from tests.gui.test_window import indexed_app

TIMEOUT = 60_000
QUERY = "red circle beside a blue square"
QUESTIONS = ["Is there a red circle in this image?", "Is there a blue square in this image?"]


def choose_rerank(app: Application) -> None:
    combo = app.window.query_bar.method
    row = combo.findData("rerank")
    assert row >= 0, "Reranked is in the picker (filled from the registry)"
    combo.setCurrentIndex(row)
    assert app.window.subquery_editor.isVisible()


def write_questions(app: Application, questions: list[str]) -> None:
    editor = app.window.subquery_editor
    for text in questions:
        editor.add_question(text)


def rerank_search(qtbot, app: Application, text: str) -> object:
    bar = app.window.query_bar
    bar.edit.setText(text)
    with (
        qtbot.waitSignal(app.judging.queryOpened, timeout=TIMEOUT),
        qtbot.waitSignal(app.search.searchFinished, timeout=TIMEOUT) as finished,
    ):
        bar.submit()
    return finished.args[0]


def grid_ids(app: Application) -> list[int]:
    model = app.window.results_model
    return [model.item(row).image_id for row in range(model.rowCount())]


def test_reranked_search_with_edited_questions(qtbot, make_app, photos) -> None:
    app = indexed_app(qtbot, make_app, photos)
    editor = app.window.subquery_editor
    assert editor.isHidden()
    choose_rerank(app)
    bases = [editor.base.itemData(row) for row in range(editor.base.count())]
    assert "text" in bases and "rerank" not in bases  # a reranker stands on another method

    write_questions(app, ["Is there a green triangle?", *QUESTIONS])
    editor.list.setCurrentRow(0)
    editor.remove_current()  # the user changes their mind
    editor.list.setCurrentRow(1)
    editor.move_current(-1)  # ... and asks about the square first
    editor.move_current(1)  # ... then back
    assert [q.text for q in editor.questions()] == QUESTIONS
    assert "100 photos × 2 questions = 200 calls" in editor.cost.text()

    outcome = rerank_search(qtbot, app, QUERY)
    assert outcome.params.method_params["subqueries"] == "; ".join(QUESTIONS)
    details = outcome.params.details
    assert [q["text"] for q in details["questions"]] == QUESTIONS
    evidence = outcome.params.evidence
    assert outcome.params.to_json()["details"]["evidence"] == {  # stored keyed by id as text
        str(i): e for i, e in evidence.items()
    }
    ids = grid_ids(app)
    assert ids and set(ids[: len(evidence)]) == set(evidence)  # the reranked photos lead

    # The detail pane shows the selected photo's answers, as the run scored them.
    app.window.results.select_row(0)
    rows = app.window.detail_pane.answer_rows()
    assert [r[0] for r in rows] == QUESTIONS
    expected = [f"{a['p']:.3f}" for a in evidence[ids[0]]["answers"]]
    assert [r[2] for r in rows] == expected
    assert app.window.detail_pane.answers.isVisibleTo(app.window.detail_pane)

    # Sort by the second question: its p never rises down the reranked rows; Rank restores.
    assert editor.sort.isEnabled() and editor.sort.count() == 3
    editor.sort.setCurrentIndex(2)
    sorted_ids = grid_ids(app)
    p2 = [evidence[i]["answers"][1]["p"] for i in sorted_ids[: len(evidence)]]
    assert p2 == sorted(p2, reverse=True)
    assert sorted(sorted_ids) == sorted(ids)
    if p2 != [evidence[i]["answers"][1]["p"] for i in ids[: len(evidence)]]:
        assert sorted_ids != ids  # the order really changed when the run's order differs
    editor.sort.setCurrentIndex(0)
    assert grid_ids(app) == ids

    # A Text search hides the editor and the answers table.
    app.window.query_bar.method.setCurrentIndex(app.window.query_bar.method.findData("text"))
    with qtbot.waitSignal(app.judging.queryOpened, timeout=TIMEOUT):
        app.window.query_bar.submit()
    assert editor.isHidden()
    app.window.results.select_row(0)
    assert app.window.detail_pane.answers.isHidden()


def test_questions_are_saved_with_the_query_and_come_back(qtbot, make_app, photos) -> None:
    from engine.rerank.store import load_questions

    app = indexed_app(qtbot, make_app, photos)
    choose_rerank(app)
    write_questions(app, QUESTIONS)
    editor = app.window.subquery_editor
    editor.set_context("Shapes are drawn flat on a patterned background.")
    outcome = rerank_search(qtbot, app, QUERY)
    context = outcome.params.method_params["context"]
    assert context == "Shapes are drawn flat on a patterned background."
    query_id = app.judging.query_id
    library = app.session.library
    qtbot.waitUntil(
        lambda: [q.text for q in load_questions(library, query_id)] == QUESTIONS, timeout=TIMEOUT
    )
    ranking = grid_ids(app)

    # Another query, with Text: the editor goes, its questions are not this query's.
    app.window.query_bar.method.setCurrentIndex(app.window.query_bar.method.findData("text"))
    app.window.query_bar.edit.setText("yellow star")
    with qtbot.waitSignal(app.judging.queryOpened, timeout=TIMEOUT):
        app.window.query_bar.submit()
    qtbot.waitUntil(lambda: editor.isHidden(), timeout=TIMEOUT)
    editor.set_questions([])
    editor.set_context("")

    # Reopened from the Queries tab: the questions, the context and the answers come back.
    with qtbot.waitSignal(app.rerank.questionsLoaded, timeout=TIMEOUT):
        app.window.query_list.openRequested.emit(query_id)
    assert editor.isVisible()
    assert [q.text for q in editor.questions()] == QUESTIONS
    assert editor.context_text() == "Shapes are drawn flat on a patterned background."
    assert grid_ids(app) == ranking
    app.window.results.select_row(0)
    assert [r[0] for r in app.window.detail_pane.answer_rows()] == QUESTIONS
    assert editor.sort.count() == 3


def test_each_query_keeps_its_own_expert_context(qtbot, make_app, photos) -> None:
    app = indexed_app(qtbot, make_app, photos)
    choose_rerank(app)
    editor = app.window.subquery_editor
    write_questions(app, QUESTIONS)
    app.window.query_bar.edit.setText(QUERY)
    editor.context.setPlainText("Circles here are always red.")  # typed by the user
    first = rerank_search(qtbot, app, QUERY)
    assert first.params.method_params["context"] == "Circles here are always red."

    # Another query: the first one's passage is not put into its prompts.
    other = rerank_search(qtbot, app, "yellow star")
    assert other.params.method_params.get("context", "") == ""
    assert editor.context_text() == ""
    editor.context.setPlainText("Stars have five points.")
    other = rerank_search(qtbot, app, "yellow star")
    assert other.params.method_params["context"] == "Stars have five points."

    # Back to the first query: its own passage comes back with it.
    again = rerank_search(qtbot, app, QUERY)
    assert again.params.method_params["context"] == "Circles here are always red."
    assert editor.context_text() == "Circles here are always red."


def test_a_reranked_search_keeps_its_base_as_a_run_to_compare_with(qtbot, make_app, photos) -> None:
    """The metrics compare reranked against base on the same judgments: the base search is
    kept as a run of the query (once), and the reranked run is the one shown."""
    app = indexed_app(qtbot, make_app, photos)
    choose_rerank(app)
    write_questions(app, QUESTIONS)
    rerank_search(qtbot, app, QUERY)
    qtbot.waitUntil(lambda: app.judging.runner.idle(), timeout=TIMEOUT)
    store = app.judging.store
    runs = store.runs_for(app.judging.query_id)
    assert sorted(r.method for r in runs) == ["rerank", "text"]
    shown = next(r for r in runs if r.id == app.judging.run_id)
    assert shown.method == "rerank"
    text_run = next(r for r in runs if r.method == "text")
    reranked = dict(shown.ranking)
    # The base run is text's own order: the reranked photos came from its top 100.
    assert set(list(reranked)[:100]) <= {i for i, _ in text_run.ranking[:100]}
    assert len(app.judging.runs) == 2  # both in the metrics panel

    rerank_search(qtbot, app, QUERY)  # again: a second reranked run, no second base run
    qtbot.waitUntil(lambda: app.judging.runner.idle(), timeout=TIMEOUT)
    methods = [r.method for r in store.runs_for(app.judging.query_id)]
    assert methods.count("text") == 1 and methods.count("rerank") == 2


def test_cancel_keeps_the_partial_results(qtbot, make_app, photos, monkeypatch) -> None:
    import engine.methods.rerank as rerank_module

    original = rerank_module.load_scorer_for

    def small_batches(spec: str, context: object) -> object:
        scorer = original(spec, context)
        scorer.batch_size = 10  # several batches, so partial results arrive
        return scorer

    monkeypatch.setattr(rerank_module, "load_scorer_for", small_batches)
    app = indexed_app(qtbot, make_app, photos)
    choose_rerank(app)
    write_questions(app, QUESTIONS)
    editor = app.window.subquery_editor

    # Hold the worker after its first partial result until Cancel was pressed, so the test does
    # not race a scorer that finishes in milliseconds.
    pressed = threading.Event()

    def hold(search_id: int, event: object) -> None:
        # Heard after the controller's listener (added first), which queued the partial.
        if isinstance(event, RerankPartial):
            pressed.wait(10)

    app.search.add_event_listener(hold)
    shown: list[int] = []
    app.rerank.partialShown.connect(shown.append)
    app.rerank.partialShown.connect(lambda _n: editor.cancel_button.click())
    app.rerank.partialShown.connect(lambda _n: pressed.set())
    stopped: list[str] = []
    app.search.searchStopped.connect(lambda _id, how: stopped.append(how))
    finished: list[object] = []
    app.search.searchFinished.connect(finished.append)
    app.window.query_bar.edit.setText(QUERY)
    app.window.query_bar.submit()
    qtbot.waitUntil(lambda: stopped == ["cancelled"], timeout=TIMEOUT)
    qtbot.waitUntil(lambda: app.runner.active("search") == [], timeout=TIMEOUT)

    assert finished == []  # the run did not finish ...
    assert shown and app.window.results_model.rowCount() == shown[0]  # ... its partial stays
    scored = len(app.rerank.evidence)
    said = re.match(r"Cancelled: (\d+) of (\d+) photos scored", editor.progress.text())
    assert said is not None, editor.progress.text()
    assert int(said.group(1)) == scored == 10 < int(said.group(2))
    assert set(grid_ids(app)[:scored]) == set(app.rerank.evidence)  # the scored ones lead
    app.window.results.select_row(0)
    assert [r[0] for r in app.window.detail_pane.answer_rows()] == QUESTIONS


@pytest.mark.parametrize("index", [0, 1])
def test_sorted_by_question_keeps_ties_in_run_order(index: int) -> None:
    from app.controllers.rerank import sorted_by_question

    evidence = {
        1: {"answers": [{"p": 0.2}, {"p": 0.9}]},
        2: {"answers": [{"p": 0.8}, {"p": 0.9}]},
        3: {"answers": [{"p": 0.8}, {"p": 0.1}]},
    }
    order = [1, 2, 3, 4]  # 4 was not reranked: last
    expected = {0: [2, 3, 1, 4], 1: [1, 2, 3, 4]}[index]
    assert sorted_by_question(order, evidence, index) == expected
