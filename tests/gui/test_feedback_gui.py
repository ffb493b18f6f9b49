"""Learning from judgments in the window: Refine adds a run that the metrics panel shows beside
the one it came from, Judge next shows only photos not judged yet and leaving it brings the run
back, the recall estimate appears beside the stop rule once photos are judged, and the learning
methods are offered nowhere a method is picked for a search."""

from __future__ import annotations

import re

import pytest

from app.controllers.application import Application
from tests.gui.test_judging import open_search
from tests.gui.test_window import indexed_app

LEARNING = {"rocchio", "probe", "more-like-these"}


def judge_top(app: Application, relevances: list[int]) -> dict[int, int]:
    """Judge the grid's top photos in order; returns what was judged."""
    model = app.window.results_model
    judged = {}
    for row, relevance in enumerate(relevances):
        item = model.item(row)
        app.judging.judge(item.image_id, relevance)
        judged[item.image_id] = relevance
    return judged


@pytest.fixture
def feedback_app(qtbot, make_app, photos) -> Application:
    app = indexed_app(qtbot, make_app, photos)
    app.window.resize(1300, 900)
    open_search(qtbot, app, "red circle")
    return app


def test_learning_methods_are_absent_from_every_method_picker(qtbot, make_app) -> None:
    from app.controllers.benchmark import available_methods

    app = make_app(start=False)
    bar = app.window.query_bar
    picker = {bar.method.itemData(row) for row in range(bar.method.count())}
    assert "text" in picker
    assert not picker & LEARNING
    assert "text" in available_methods()
    assert not set(available_methods()) & LEARNING
    app.rerank.refresh_bases()
    base = app.window.subquery_editor.base
    bases = {base.itemData(row) for row in range(base.count())}
    assert "text" in bases and not bases & LEARNING
    # They are offered where they belong: Refine ▾ on the metrics panel.
    menu = app.window.metrics_panel.refine_menu
    assert {action.data() for action in menu.actions()} == LEARNING


def test_refine_adds_a_run_and_the_metrics_panel_shows_both(qtbot, feedback_app) -> None:
    app = feedback_app
    panel = app.window.metrics_panel
    # Nothing judged: Refine is disabled and says why.
    assert not panel.refine_button.isEnabled()
    assert "Judge a few photos" in panel.refine_button.toolTip()
    text_run = app.judging.run_id
    assert [r.method for r in app.judging.runs] == ["Text"]

    judged = judge_top(app, [1, 0, 1, 0, 0, 1, 0, 0])
    assert panel.refine_button.isEnabled()
    with qtbot.waitSignal(app.feedback.refined, timeout=30_000) as refined:
        panel.refineRequested.emit("probe")  # as choosing Refine ▾ › Probe does
    query_id, run_id = refined.args
    assert query_id == app.judging.query_id and run_id != text_run
    qtbot.waitUntil(
        lambda: app.judging.run_id == run_id and "Refined" in app.window.status_line.text(),
        timeout=20_000,
    )

    # The grid shows the new run, the metrics panel both runs on the same judgments.
    store = app.judging.store
    saved = next(r for r in store.runs_for(query_id) if r.id == run_id)
    assert saved.method == "probe" and saved.params["from_run"] == text_run
    shown = [app.window.results_model.item(r).image_id for r in range(10)]
    assert shown == [image_id for image_id, _ in saved.ranking[:10]]
    assert panel.runs.topLevelItemCount() == 2
    rows = [panel.runs.topLevelItem(row) for row in range(2)]
    assert [row.text(0) for row in rows] == ["Text", "Probe"]
    view = panel.view()
    assert view is not None and view.current_run_id == run_id
    assert {r.run_id for r in view.runs} == {text_run, run_id}
    # Each row's AP@10 is the live AP of that run's own ranking on the judgments.
    for run in view.runs:
        ranking = next(r for r in store.runs_for(query_id) if r.id == run.run_id).ranking
        live = store.live_metrics([i for i, _ in ranking], judged, view.k, run.run_id)
        assert run.values["AP"] == pytest.approx(live.metrics.AP)
    assert "Refined with probe" in app.window.status_line.text()


def test_judge_next_shows_only_unjudged_photos_and_leaving_it_returns_to_the_run(
    qtbot, feedback_app
) -> None:
    app = feedback_app
    model, view = app.window.results_model, app.window.results
    run_ids = [item.image_id for item in model.items()]
    judged = judge_top(app, [1, 1, 0, 1, 0, 0])

    action = app.window.judge_next_action
    assert action.isEnabled()
    with qtbot.waitSignal(app.feedback.judgingListShown, timeout=30_000):
        action.trigger()
    assert action.isChecked() and app.window.back_to_run_action.isEnabled()
    proposed = [item.image_id for item in model.items()]
    assert 0 < len(proposed) <= 12
    assert not set(proposed) & set(judged), "Judge next proposed a photo already judged"
    assert len(set(proposed)) == len(proposed)
    assert view.current_item() is not None and view.current_item().image_id == proposed[0]

    # Judging there counts for the query: R on the first proposed photo.
    app.judging.judge_current(1)
    assert app.judging.judgments[proposed[0]] == 1

    # Leaving the mode brings the run back, with that judgment shown.
    action.trigger()
    assert not action.isChecked() and app.feedback.mode is None
    assert [item.image_id for item in model.items()] == run_ids
    assert model.judgment(proposed[0]) == 1 or proposed[0] not in run_ids


def test_the_recall_estimate_appears_after_judgments_and_a_sample_can_be_judged(
    qtbot, feedback_app
) -> None:
    app = feedback_app
    label = app.window.metrics_panel.recall_estimate
    judge_top(app, [1, 0, 1, 1, 0, 0, 1, 0, 0, 0])
    qtbot.waitUntil(lambda: label.isVisible() and "found 4" in label.text(), timeout=20_000)
    assert label.text().startswith("Estimate: found 4")
    estimate = app.feedback.estimate
    if not estimate.complete:  # the bands below the judged top have no judged sample yet
        assert "Sample to judge" in label.text() and estimate.note in label.toolTip()
    assert estimate is not None and estimate.found == 4

    # Sample to judge: photos of the score bands below the judged top, none judged yet.
    with qtbot.waitSignal(app.feedback.judgingListShown, timeout=30_000) as shown:
        app.window.sample_action.trigger()
    sample = shown.args[0]
    assert sample.kind == "sample" and sample.items
    ids = [item.image_id for item in app.window.results_model.items()]
    assert ids == [item.image_id for item in sample.items]
    assert not set(ids) & set(app.judging.judgments)
    # Judging the whole sample not relevant: the estimate is recomputed (still 4 found).
    before = label.text()
    for image_id in ids:
        app.judging.judge(image_id, 0)
    qtbot.waitUntil(lambda: app.feedback.estimate is not estimate, timeout=20_000)
    assert app.feedback.estimate.found == 4
    assert app.feedback.estimate.judged_in_sample >= estimate.judged_in_sample
    assert app.feedback.estimate.complete
    assert re.fullmatch(r"Estimate: found 4 of about \d+ \(90 %: \d+–\d+\)", label.text())
    print(f"estimate before the sample: {before!r}; after: {label.text()!r}")


def test_export_likely_relevant_writes_every_photo_above_the_chosen_probability(
    qtbot, feedback_app, tmp_path
) -> None:
    import csv

    from engine.methods.feedback import photos_above

    app = feedback_app
    action = app.window.export_likely_action
    assert not action.isEnabled()  # nothing judged: nothing to learn a probability from
    judged = judge_top(app, [1, 1, 0, 1, 0, 0, 1, 0])
    assert action.isEnabled()

    out = tmp_path / "likely.csv"
    app.window.ask_probability = lambda *args: 0.5
    app.window.ask_save_file = lambda *args: str(out)
    with qtbot.waitSignal(
        app.feedback.message, check_params_cb=lambda m: m.startswith("Wrote"), timeout=30_000
    ):
        action.trigger()

    with out.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    probabilities = [float(row["probability"]) for row in rows]
    assert rows and min(probabilities) >= 0.5
    assert probabilities == sorted(probabilities, reverse=True)
    # The very list the engine gives for the same judgments, in its order, however deep.
    expected = photos_above(
        app.session.library,
        app.session.ensure_encoder,
        app.judging.query_id,
        0.5,
        judgments=judged,
    )
    assert [int(row["image_id"]) for row in rows] == [image_id for image_id, _ in expected]
    for row in rows:  # each photo's judgment, where it has one
        image_id = int(row["image_id"])
        assert row["judgment"] == ("" if image_id not in judged else str(judged[image_id]))

    # A cut-off no photo reaches yet writes nothing and says why.
    empty = tmp_path / "none.csv"
    app.window.ask_probability = lambda *args: 0.99
    app.window.ask_save_file = lambda *args: str(empty)
    with qtbot.waitSignal(
        app.feedback.message, check_params_cb=lambda m: m.startswith("No photo"), timeout=30_000
    ):
        action.trigger()
    assert not empty.exists()


def test_export_likely_relevant_with_judgments_of_one_kind_says_why_and_writes_nothing(
    qtbot, feedback_app, tmp_path
) -> None:
    app = feedback_app
    judge_top(app, [1, 1, 1])
    out = tmp_path / "likely.csv"
    with qtbot.waitSignal(
        app.feedback.message, check_params_cb=lambda m: "no probabilities" in m, timeout=30_000
    ):
        app.feedback.export_likely(out, 0.9)
    assert not out.exists()
