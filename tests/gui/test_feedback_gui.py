"""Learning from judgments in the window: Refine adds a run that the metrics panel shows beside
the one it came from, Judge next shows only photos not judged yet and leaving it brings the run
back, the recall estimate appears beside the stop rule once photos are judged, and the learning
methods are offered nowhere a method is picked for a search."""

from __future__ import annotations

import re

import pytest
from PySide6.QtCore import Qt

from app.controllers.application import Application
from engine.evaluation.live import live_metrics
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
        live = live_metrics([i for i, _ in ranking], judged, view.k, run.run_id)
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


def read_rows(path) -> list[dict[str, str]]:  # type: ignore[no-untyped-def]
    import csv

    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_export_likely_relevant_writes_the_judged_photos_then_every_one_above_the_cut(
    qtbot, feedback_app, tmp_path
) -> None:
    from engine.methods.feedback import photos_above

    app = feedback_app
    action = app.window.export_likely_action
    assert not action.isEnabled()  # nothing judged: nothing to learn a probability from
    judged = judge_top(app, [1, 1, 0, 1, 0, 0, 1, 0])
    assert action.isEnabled()

    out = tmp_path / "likely.csv"
    app.window.ask_probability = lambda *args: 0.5
    captions: list[str] = []
    app.window.ask_save_file = lambda caption, *args: captions.append(caption) or str(out)
    with qtbot.waitSignal(
        app.feedback.outcome, check_params_cb=lambda m: m.startswith("Wrote"), timeout=30_000
    ):
        action.trigger()

    rows = read_rows(out)
    relevant = {i for i, r in judged.items() if r}
    # The photos judged relevant first, marked as judged (p 1: they are known) ...
    assert {int(row["image_id"]) for row in rows[:4]} == relevant
    assert all(row["judgment"] == "1" and row["probability"] == "1.0000" for row in rows[:4])
    # ... then unjudged photos only, each at p >= 0.5, best first; none judged not relevant.
    rest = rows[4:]
    assert all(row["judgment"] == "" and float(row["probability"]) >= 0.5 for row in rest)
    probabilities = [float(row["probability"]) for row in rest]
    assert probabilities == sorted(probabilities, reverse=True)
    # The very list the engine gives for the same judgments, in its order, however deep.
    expected = photos_above(
        app.session.library,
        app.session.ensure_encoder,
        app.judging.query_id,
        0.5,
        judgments=judged,
    )
    assert [int(row["image_id"]) for row in rows] == [i for i, _ in expected.ranking]
    # The save dialog said what it would write.
    assert captions == [
        f"Export {len(rows)} photos: 4 judged relevant, {len(rest)} unjudged with p ≥ 0.5"
    ]


def test_export_likely_relevant_of_issue_24_writes_the_ten_judged_relevant_photos(
    qtbot, feedback_app, tmp_path, small_demo_collection
) -> None:
    """The ten relevant photos of "red circle" judged, and 26 that are not: the probe ranked
    them first with p 0.42-0.68, so a p >= 0.9 export wrote nothing. Now it writes them."""
    from sqlalchemy import select

    from engine.catalog import Image

    app = feedback_app
    query = next(q for q in small_demo_collection.queries if q.text == "red circle")
    paths = set(small_demo_collection.relevant[query.query_id])
    with app.session.library.catalog.session() as s:
        rows = s.execute(select(Image.id, Image.rel_path)).all()
    relevant = {image_id for image_id, rel in rows if rel in paths}
    assert len(relevant) == 10
    shown = [item.image_id for item in app.window.results_model.items()]
    not_relevant = [i for i in shown if i not in relevant][:26]
    assert len(not_relevant) == 26
    for image_id in [*relevant, *not_relevant]:
        app.judging.judge(image_id, int(image_id in relevant))

    out = tmp_path / "likely.csv"
    app.window.ask_probability = lambda *args: 0.9
    app.window.ask_save_file = lambda *args: str(out)
    with qtbot.waitSignal(
        app.feedback.outcome,
        check_params_cb=lambda m: m.startswith(("Wrote", "No photo")),
        timeout=30_000,
    ):
        app.window.export_likely_action.trigger()
    assert out.exists(), app.window.status_line.text()
    written = read_rows(out)
    assert {int(row["image_id"]) for row in written[:10]} == relevant
    assert all(row["judgment"] == "1" for row in written[:10])
    for row in written[10:]:  # anything else: unjudged, at the cut-off or above
        assert row["judgment"] == "" and float(row["probability"]) >= 0.9
    print(f"issue 24's case: {len(written)} photos written, {len(written) - 10} unjudged")


def test_export_likely_says_before_the_save_dialog_when_nothing_would_be_written(
    qtbot, feedback_app, tmp_path
) -> None:
    app = feedback_app
    judge_top(app, [0, 0, 0])  # none relevant: no probe, and nothing known relevant
    app.window.ask_probability = lambda *args: 0.9
    asked: list[str] = []
    app.window.ask_save_file = lambda caption, *args: (
        asked.append(caption) or str(tmp_path / "none.csv")
    )
    notices: list[tuple[str, str]] = []
    app.window.show_notice = lambda title, text: notices.append((title, text))
    app.window.export_likely_action.trigger()
    qtbot.waitUntil(lambda: bool(notices) or bool(asked), timeout=30_000)
    assert not asked, "the save dialog came before saying nothing would be written"
    title, text = notices[0]
    assert title == "Export likely relevant photos"
    assert text.startswith("Nothing would be written. No photo is judged relevant yet")
    assert "none of the 3 judged photos is relevant" in text  # why, in full: not cut
    assert not (tmp_path / "none.csv").exists()


def test_export_likely_relevant_with_judgments_of_one_kind_writes_the_judged_and_says_why(
    qtbot, feedback_app, tmp_path
) -> None:
    import csv

    app = feedback_app
    judged = judge_top(app, [1, 1, 1])
    out = tmp_path / "likely.csv"
    with qtbot.waitSignal(
        app.feedback.outcome, check_params_cb=lambda m: m.startswith("Wrote"), timeout=30_000
    ) as wrote:
        app.feedback.export_likely(out, 0.9)
    assert "no probability for the unjudged photos yet" in wrote.args[0]
    with out.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert {int(row["image_id"]) for row in rows} == set(judged)


def test_cards_show_no_score_where_there_is_none(qtbot, feedback_app) -> None:
    """Judge next before the probe has probabilities, and Sample to judge (a random sample):
    no "nan", no "0.000" on the cards, in their tooltips or in the detail pane."""
    app = feedback_app
    model = app.window.results_model
    judge_top(app, [1, 1])  # of one kind only: the probe has no probability yet

    def shown_numbers() -> list[str]:
        out = []
        for row in range(model.rowCount()):
            index = model.index(row, 0)
            out.append(str(model.data(index, Qt.ItemDataRole.ToolTipRole)).splitlines()[0])
        out.append(app.window.detail_pane.fields["score"].text())
        return out

    for action in (app.window.judge_next_action, app.window.sample_action):
        with qtbot.waitSignal(app.feedback.judgingListShown, timeout=30_000):
            action.trigger()
        assert model.rowCount() > 0
        texts = shown_numbers()
        assert not any("nan" in text or "0.000" in text for text in texts), texts
        tooltip = str(model.data(model.index(0, 0), Qt.ItemDataRole.ToolTipRole))
        assert tooltip.splitlines()[0] == "#1"  # the rank, and no score beside it
        app.feedback.leave_mode()
