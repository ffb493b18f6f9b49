"""Relevance marking in the window: keys and clicks judge photos, the metrics panel shows the
hand-computed values at once, undo restores them, judgments are stored at once and belong to
the query (every method's run shows them); the query list, the benchmark view and exports."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from app.controllers.application import Application
from tests.gui.test_window import indexed_app


def open_search(qtbot, app: Application, text: str) -> None:
    """Search and wait until the search is saved as a run and its judgments are loaded."""
    bar = app.window.query_bar
    bar.edit.setText(text)
    with qtbot.waitSignal(app.judging.queryOpened, timeout=20_000):
        bar.submit()


def shown(app: Application) -> dict[str, str]:
    return {key: label.text() for key, label in app.window.metrics_panel.values.items()}


def focus_grid(qtbot, app: Application, row: int) -> None:
    view = app.window.results
    app.window.activateWindow()
    view.setFocus()
    view.select_row(row)
    qtbot.waitUntil(view.hasFocus)


@pytest.fixture
def judging_app(qtbot, make_app, photos) -> Application:
    app = indexed_app(qtbot, make_app, photos)
    app.window.resize(1300, 900)
    open_search(qtbot, app, "red circle")
    return app


def test_keys_update_the_metrics_to_hand_computed_values_and_undo_restores_them(
    qtbot, judging_app
) -> None:
    app = judging_app
    panel, view, model = app.window.metrics_panel, app.window.results, app.window.results_model
    store, query_id = app.judging.store, app.judging.query_id
    assert panel.names["AP"].text() == "AP@10"
    # Nothing judged yet: "—", not a score of 0 (judged@10 is a plain fact: 0 %).
    assert shown(app) == {
        "P": "—", "R_at_k": "—", "AP": "—", "nDCG": "—", "RR": "—", "judged": "0%"
    }  # fmt: skip
    assert panel.runs.topLevelItem(0).text(1) == "—"
    focus_grid(qtbot, app, 0)

    # Ranks 1..5 judged R, N, N, R, N: rel@10 = (1,0,0,1,0,0,0,0,0,0), R = 2.
    # The panel is updated inside the key's event (its latency: tests/bench/bench_responsiveness.py).
    for key in (Qt.Key.Key_R, Qt.Key.Key_N, Qt.Key.Key_N, Qt.Key.Key_R, Qt.Key.Key_N):
        qtbot.keyClick(view, key)
    assert view.currentIndex().row() == 5, "each key moves the selection to the next photo"
    # P@10 = 2/10; R@10 = 2/2; AP@10 = (1/1 + 2/4) / min(10, 2); nDCG@10 = (1 + 1/log2 5) /
    # (1 + 1/log2 3); RR = 1/1; judged@10 = 5/10.
    assert shown(app) == {
        "P": "0.200",
        "R_at_k": "1.000",
        "AP": "0.750",
        "nDCG": "0.877",
        "RR": "1.000",
        "judged": "50%",
    }
    assert "1 non-relevant in a row after the last relevant (rank 4)" in panel.stop_rule.text()
    assert "R = 2 relevant" in panel.summary.text()

    # Stored the moment they are made: the database has them without any further action.
    ids = [model.item(row).image_id for row in range(5)]
    expected = {ids[0]: 1, ids[1]: 0, ids[2]: 0, ids[3]: 1, ids[4]: 0}
    qtbot.waitUntil(lambda: store.judgments(query_id) == expected, timeout=5_000)

    # The grid marks them.
    from widgets.results import ResultRole

    assert [model.data(model.index(r, 0), ResultRole.Judgment) for r in range(6)] == [
        1, 0, 0, 1, 0, None
    ]  # fmt: skip

    # U clears rank 4: only rank 1 is relevant, R = 1.
    view.select_row(3)
    qtbot.keyClick(view, Qt.Key.Key_U)
    assert shown(app)["AP"] == "1.000"
    assert shown(app)["P"] == "0.100"
    assert shown(app)["judged"] == "40%"
    # Ctrl+Z puts rank 4 back, and selects it.
    qtbot.keyClick(view, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier)
    assert shown(app)["AP"] == "0.750"
    assert shown(app)["nDCG"] == "0.877"
    assert view.currentIndex().row() == 3
    # Again: the N on rank 5 is undone.
    qtbot.keyClick(view, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier)
    assert shown(app)["judged"] == "40%"
    del expected[ids[4]]
    qtbot.waitUntil(lambda: store.judgments(query_id) == expected, timeout=5_000)

    # k = 20 recomputes from the same judgments: P@20 = 2/20.
    panel.k_combo.setCurrentIndex(panel.k_combo.findData(20))
    assert panel.names["AP"].text() == "AP@20"
    assert shown(app)["P"] == "0.100"
    assert shown(app)["AP"] == "0.750"


def test_typing_in_the_query_bar_judges_nothing(qtbot, judging_app) -> None:
    app = judging_app
    app.window.results.select_row(0)
    edit = app.window.query_bar.edit
    edit.setFocus()
    qtbot.waitUntil(edit.hasFocus)
    qtbot.keyClicks(edit, " run")
    assert app.judging.judgments == {}
    assert edit.text() == "red circle run"


def test_a_judgment_made_under_one_method_shows_under_another(qtbot, judging_app) -> None:
    from widgets.results import ResultRole

    app = judging_app
    model, view = app.window.results_model, app.window.results
    query_id = app.judging.query_id
    focus_grid(qtbot, app, 0)
    qtbot.keyClick(view, Qt.Key.Key_R)  # rank 1 relevant
    qtbot.keyClick(view, Qt.Key.Key_R)  # rank 2 relevant
    judged = {model.item(0).image_id, model.item(1).image_id}
    text_ap = shown(app)["AP"]

    # "More like this" on the top photo: an image run of the same query (same method, Text).
    with qtbot.waitSignal(app.judging.queryOpened, timeout=20_000):
        view.moreLikeThisRequested.emit(model.item(0))
    assert app.search.last_outcome.request.image is not None
    assert app.judging.query_id == query_id
    runs = app.judging.store.runs_for(query_id)
    assert [(r.method, r.kind) for r in runs] == [("text", "text"), ("text", "image")]
    assert app.judging.run_id == runs[1].id
    for image_id in judged:
        row = model.row_of(image_id)
        assert row is not None
        assert model.data(model.index(row, 0), ResultRole.Judgment) == 1
    # Both runs side by side in the panel and the chart, on the same judgments (R = 2).
    panel = app.window.metrics_panel
    assert panel.runs.topLevelItemCount() == 2
    assert [r.method for r in panel.chart.runs()] == ["Text", "Text · image"]
    assert "R = 2 relevant" in panel.summary.text()
    view_ = panel.view()
    assert view_ is not None and view_.current.method == "Text · image"
    assert panel.runs.headerItem().toolTip(1) == "AP@10"  # "AP" in a column beside the grid
    assert panel.runs.topLevelItem(0).text(1) == text_ap  # the text run's AP, unchanged

    # Clicking the text run in the panel shows it again, judgments included.
    with qtbot.waitSignal(app.judging.queryOpened, timeout=20_000):
        panel.runSelected.emit(runs[0].id)
    assert app.judging.run_id == runs[0].id
    assert model.data(model.index(0, 0), ResultRole.Judgment) == 1
    assert shown(app)["AP"] == text_ap


def test_clicking_the_thumbnail_toggle_cycles_the_judgment(qtbot, judging_app) -> None:
    from widgets.results import ResultRole

    app = judging_app
    view, model = app.window.results, app.window.results_model
    image_id = model.item(2).image_id
    store, query_id = app.judging.store, app.judging.query_id
    states = []
    for _ in range(3):
        qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=view.toggle_center(2))
        states.append(model.data(model.index(2, 0), ResultRole.Judgment))
    assert states == [1, 0, None]
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=view.toggle_center(2))
    qtbot.waitUntil(lambda: store.judgments(query_id) == {image_id: 1}, timeout=5_000)
    # A click on the photo itself (not the toggle) only selects it.
    centre = view.visualRect(model.index(4, 0)).center()
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=centre)
    assert view.currentIndex().row() == 4
    assert model.data(model.index(4, 0), ResultRole.Judgment) is None
    # The detail pane's buttons judge too and show the state.
    pane = app.window.detail_pane
    pane.not_relevant_button.click()
    assert model.data(model.index(4, 0), ResultRole.Judgment) == 0
    assert view.currentIndex().row() == 5
    view.select_row(4)
    assert pane.not_relevant_button.isChecked() and not pane.relevant_button.isChecked()


def test_query_list_reopens_renames_annotates_and_deletes(qtbot, judging_app) -> None:
    from widgets.results import ResultRole

    app = judging_app
    panel, model = app.window.query_list, app.window.results_model
    red = app.judging.query_id
    focus_grid(qtbot, app, 0)
    qtbot.keyClick(app.window.results, Qt.Key.Key_R)
    red_top = model.item(0).image_id
    open_search(qtbot, app, "blue square")
    blue = app.judging.query_id
    assert blue != red
    assert panel.tree.topLevelItemCount() == 2
    assert app.judging.judgments == {}  # the red query's judgment is not on the blue one
    assert model.data(model.index(model.row_of(red_top), 0), ResultRole.Judgment) is None

    # Reopen "red circle" from the list: its ranking, its judgment, its text in the query bar.
    panel.select(red)
    with qtbot.waitSignal(app.judging.queryOpened, timeout=20_000):
        panel.open_button.click()
    assert app.judging.query_id == red
    assert app.window.query_bar.text() == "red circle"
    assert model.item(0).image_id == red_top
    assert model.data(model.index(0, 0), ResultRole.Judgment) == 1
    assert shown(app)["AP"] == "1.000"
    assert panel.item_for(red).text(2) == "1 / 1"

    # Rename in place; notes are saved after a pause in typing.
    store = app.judging.store
    panel.item_for(red).setText(0, "Red discs")
    qtbot.waitUntil(
        lambda: {q.id: q.name for q in store.list_queries()}.get(red) == "Red discs",
        timeout=5_000,
    )
    qtbot.waitUntil(lambda: app.window.metrics_panel.title.text() == "“Red discs”")
    panel.notes.setPlainText("Only flat red discs count, not spheres.")
    qtbot.waitUntil(
        lambda: (
            {q.id: q.notes for q in store.list_queries()}.get(red)
            == "Only flat red discs count, not spheres."
        ),
        timeout=5_000,
    )

    # Delete asks, then removes the query with its runs and judgments.
    app.window.ask_yes_no = lambda title, text: True
    panel.select(blue)
    panel.delete_button.click()
    qtbot.waitUntil(lambda: panel.tree.topLevelItemCount() == 1, timeout=5_000)
    assert [q.id for q in store.list_queries()] == [red]
    assert store.judgments(blue) == {}


def test_benchmark_view_runs_the_demo_benchmark(qtbot, make_app, photos, tmp_path) -> None:
    app = indexed_app(qtbot, make_app, photos)
    dialog = app.open_benchmark()
    dialog.set_files(str(photos / "queries.csv"), str(photos / "judgments.csv"))
    dialog.k_combo.setCurrentIndex(dialog.k_combo.findData(10))
    with qtbot.waitSignal(app.benchmark.finished, timeout=60_000) as blocker:
        dialog.run_button.click()
    outcome = blocker.args[0]
    assert outcome is not None
    summary = dialog.summary.topLevelItem(0)
    assert summary.text(0) == "text"
    assert summary.text(1) == "60"  # queries averaged
    assert dialog.summary.headerItem().text(2) == "mAP@10"
    assert outcome.results["text"].by_category["supercategory"]["Species"].mAP >= 0.9
    assert dialog.per_query.topLevelItemCount() == 60
    assert dialog.per_category.topLevelItemCount() > 0
    assert dialog.progress.value() == dialog.progress.maximum() == 60

    out = tmp_path / "bench.csv"
    handle = app.benchmark.export(str(out))
    qtbot.waitUntil(lambda: handle.done, timeout=5_000)
    rows = list(csv.DictReader(out.open(encoding="utf-8")))
    assert [r["level"] for r in rows].count("query") == 60
    mean = next(r for r in rows if r["level"] == "mean")
    assert float(mean["AP@10"]) == pytest.approx(outcome.results["text"].mean.mAP, abs=1e-6)


def test_export_and_import_judgments(qtbot, judging_app, tmp_path) -> None:
    app = judging_app
    model, view = app.window.results_model, app.window.results
    focus_grid(qtbot, app, 0)
    for key in (Qt.Key.Key_R, Qt.Key.Key_N, Qt.Key.Key_R):
        qtbot.keyClick(view, key)
    # Written right after the keys: the export runs after the queued judgment writes.
    out = tmp_path / "judgments.csv"
    app.window.ask_save_file = lambda caption, suggested, file_filter: str(out)
    app.export_judgments()
    qtbot.waitUntil(out.exists, timeout=5_000)
    rows = list(csv.DictReader(out.open(encoding="utf-8")))
    assert sorted(int(r["relevant"]) for r in rows) == [0, 1, 1]
    assert {r["query_id"] for r in rows} == {str(app.judging.query_id)}

    qrels = tmp_path / "judgments.qrels"
    handle = app.transfers.export_judgments(qrels)
    qtbot.waitUntil(lambda: handle.done, timeout=5_000)
    # Exactly the three judgments, as `qid 0 docid rel` lines agreeing with the CSV export.
    lines = [line.split() for line in qrels.read_text().splitlines()]
    assert len(lines) == 3
    assert sorted((qid, zero, doc, rel) for qid, zero, doc, rel in lines) == sorted(
        (r["query_id"], "0", r["image_id"], r["relevant"]) for r in rows
    )

    results = tmp_path / "results.csv"
    handle = app.transfers.export_results(results)
    qtbot.waitUntil(lambda: handle.done, timeout=5_000)
    result_rows = list(csv.DictReader(results.open(encoding="utf-8")))
    assert len(result_rows) == model.rowCount()
    assert [r["judgment"] for r in result_rows[:4]] == ["1", "0", "1", ""]

    dest = tmp_path / "relevant"
    handle = app.transfers.copy_relevant(dest)
    qtbot.waitUntil(lambda: handle.done, timeout=5_000)
    assert len(list(dest.iterdir())) == 2

    # Importing the demo benchmark judges "red circle" (query 1) for every red circle photo.
    photos = Path(model.item(0).path).parents[2]
    with qtbot.waitSignal(app.judging.queryOpened, timeout=20_000):
        handle = app.transfers.import_judgments(photos / "queries.csv", photos / "judgments.csv")
    assert shown(app)["R_at_k"] == "1.000"  # all 10 photos with a red circle are in the top 10
    assert shown(app)["AP"] == "1.000"
    qtbot.waitUntil(lambda: app.window.query_list.tree.topLevelItemCount() == 60)
    assert sum(1 for v in app.judging.judgments.values() if v > 0) == 10


def test_a_judgment_that_cannot_be_stored_is_taken_back_and_reported(qtbot, judging_app) -> None:
    from engine.errors import QuadratError
    from widgets.results import ResultRole

    app = judging_app
    model, view = app.window.results_model, app.window.results

    def disk_full(*args: object, **kwargs: object) -> None:
        raise QuadratError("the catalog could not be written: disk full")

    app.judging.store.judge = disk_full
    focus_grid(qtbot, app, 0)
    qtbot.keyClick(view, Qt.Key.Key_R)
    assert shown(app)["AP"] == "1.000"  # shown at once...
    qtbot.waitUntil(lambda: bool(app.errors.reported), timeout=5_000)
    # ...and taken back when the write failed: the screen never claims what is not stored.
    assert model.data(model.index(0, 0), ResultRole.Judgment) is None
    assert shown(app)["AP"] == "—"
    assert "disk full" in app.window.message_banner.message()
    assert app.window.message_banner.title.text() == "Saving the judgment failed"
