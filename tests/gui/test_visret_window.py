"""VisRet in the window: the drawings strip fills in while the demo painter draws, a drawing
left out re-fuses from the cache, Draw again moves the seeds on, Cancel stops the drawing, the
run is saved with its drawings and comes back with them, and the generator setting."""

from __future__ import annotations

import threading
from pathlib import Path

from app.controllers.application import Application
from engine.methods.events import DrawingMade
from engine.methods.registry import run_label
from tests.gui.test_window import indexed_app

TIMEOUT = 60_000


def choose_visret(app: Application) -> None:
    combo = app.window.query_bar.method
    combo.setCurrentIndex(combo.findData("visret"))
    assert app.window.query_bar.method_key() == "visret"


def visret_search(qtbot, app: Application, text: str) -> object:
    choose_visret(app)
    bar = app.window.query_bar
    bar.edit.setText(text)
    with (
        qtbot.waitSignal(app.judging.queryOpened, timeout=TIMEOUT),
        qtbot.waitSignal(app.search.searchFinished, timeout=TIMEOUT) as finished,
    ):
        bar.submit()
    return finished.args[0]


def drawings_on_disk(app: Application) -> dict[Path, float]:
    root = app.session.library.root / "cache" / "drawings"
    return {p: p.stat().st_mtime_ns for p in root.rglob("*.png")}


def grid_ids(app: Application) -> list[int]:
    model = app.window.results_model
    return [model.item(row).image_id for row in range(model.rowCount())]


def shown_seeds(app: Application) -> list[int]:
    return [v.card.seed for v in app.window.drawings_strip.views if v.card is not None]


def test_a_visret_search_fills_the_strip_and_the_grid(qtbot, make_app, photos) -> None:
    app = indexed_app(qtbot, make_app, photos)
    strip = app.window.drawings_strip
    assert strip.isHidden()
    shown: list[object] = []
    app.visret.drawingShown.connect(shown.append)
    outcome = visret_search(qtbot, app, "red circle")

    assert [card.index for card in shown] == [0, 1, 2]  # each arrived while drawing
    assert strip.isVisible() and not strip.busy()
    assert len(strip.views) == 3
    assert all(not v.image.pixmap().isNull() for v in strip.views)
    assert shown_seeds(app) == [0, 1, 2]
    assert "red circle" in strip.prompt.text()
    assert "3 of 3 drawings used" in strip.status.text()
    assert app.window.results_model.rowCount() > 0
    assert outcome.method_label == "VisRet"
    assert len(drawings_on_disk(app)) == 3

    # A Text search hides the strip; the query's VisRet run is beside the Text run.
    app.window.query_bar.method.setCurrentIndex(app.window.query_bar.method.findData("text"))
    with qtbot.waitSignal(app.judging.queryOpened, timeout=TIMEOUT):
        app.window.query_bar.submit()
    assert strip.isHidden()
    assert [r.method for r in app.judging.runs] == ["VisRet", "Text"]


def test_leaving_a_drawing_out_refuses_from_the_cache(qtbot, make_app, photos) -> None:
    app = indexed_app(qtbot, make_app, photos)
    visret_search(qtbot, app, "red circle on a blue square")
    before, on_disk = grid_ids(app), drawings_on_disk(app)
    strip = app.window.drawings_strip

    with (
        qtbot.waitSignal(app.judging.queryOpened, timeout=TIMEOUT),
        qtbot.waitSignal(app.search.searchFinished, timeout=TIMEOUT) as finished,
    ):
        strip.views[0].use.setChecked(False)  # the user unticks the first drawing
    outcome = finished.args[0]
    assert outcome.params.method_params["leave_out"] == "0"
    assert grid_ids(app) != before  # fused again from two drawings
    assert drawings_on_disk(app) == on_disk  # nothing drawn, nothing rewritten
    assert all(card.cached for card in app.visret.cards.values())
    assert "2 of 3 drawings used" in strip.status.text()
    assert "0 drawn now, 3 from the cache" in strip.status.text()
    assert not strip.views[0].use.isChecked() and strip.views[1].use.isChecked()
    assert [d["left_out"] for d in outcome.params.details["drawings"]] == [True, False, False]
    assert app.judging.runs[-1].label.startswith("VisRet (without drawing 1)")


def test_the_run_is_saved_with_its_drawings_and_comes_back(qtbot, make_app, photos) -> None:
    app = indexed_app(qtbot, make_app, photos)
    visret_search(qtbot, app, "two green triangles")
    query_id = app.judging.query_id
    store = app.judging.store
    (run,) = store.runs_for(query_id)
    assert run.method == "visret" and run_label(run.method, run.params, run.kind) == "VisRet"
    details = run.params["details"]
    assert "two green triangles" in details["prompt"]
    assert [d["seed"] for d in details["drawings"]] == [0, 1, 2]
    assert all(Path(d["path"]).is_file() for d in details["drawings"])
    assert run.params["images"] == 3 and run.params["k_rrf"] == 1
    ranking = [image_id for image_id, _ in run.ranking]

    # Another search hides the strip; reopening the query from the Queries tab brings it back.
    app.window.query_bar.method.setCurrentIndex(app.window.query_bar.method.findData("text"))
    app.window.query_bar.edit.setText("blue square")
    with qtbot.waitSignal(app.judging.queryOpened, timeout=TIMEOUT):
        app.window.query_bar.submit()
    strip = app.window.drawings_strip
    assert strip.isHidden()
    with qtbot.waitSignal(app.judging.queryOpened, timeout=TIMEOUT):
        app.window.query_list.openRequested.emit(query_id)
    qtbot.waitUntil(lambda: strip.isVisible() and len(shown_seeds(app)) == 3, timeout=TIMEOUT)
    assert shown_seeds(app) == [0, 1, 2]
    assert all(not v.image.pixmap().isNull() for v in strip.views)
    assert strip.prompt.text() == details["prompt"]
    assert grid_ids(app) == ranking[: len(grid_ids(app))]
    assert app.window.query_bar.edit.text() == "two green triangles"

    # A toggle on the reopened run re-fuses it, still without drawing.
    on_disk = drawings_on_disk(app)
    with qtbot.waitSignal(app.search.searchFinished, timeout=TIMEOUT) as finished:
        strip.views[2].use.setChecked(False)
    assert finished.args[0].request.text == "two green triangles"
    assert finished.args[0].params.method_params["leave_out"] == "2"
    assert drawings_on_disk(app) == on_disk


def test_draw_again_makes_new_seeds(qtbot, make_app, photos) -> None:
    app = indexed_app(qtbot, make_app, photos)
    visret_search(qtbot, app, "a yellow star")
    strip = app.window.drawings_strip
    first = drawings_on_disk(app)
    with (
        qtbot.waitSignal(app.judging.queryOpened, timeout=TIMEOUT),
        qtbot.waitSignal(app.search.searchFinished, timeout=TIMEOUT) as finished,
    ):
        strip.draw_again.click()
    assert finished.args[0].params.method_params["seed"] == 3
    assert shown_seeds(app) == [3, 4, 5]
    assert not any(card.cached for card in app.visret.cards.values())  # drawn now
    assert len(drawings_on_disk(app)) == len(first) + 3
    assert "3 drawn now, 0 from the cache" in strip.status.text()


def test_an_edited_prompt_draws_again(qtbot, make_app, photos) -> None:
    app = indexed_app(qtbot, make_app, photos)
    visret_search(qtbot, app, "red circle")
    strip = app.window.drawings_strip
    messages: list[str] = []
    app.visret.message.connect(messages.append)

    strip.prompt.setText("a drawing without the words")
    strip.prompt.setModified(True)
    strip.prompt.returnPressed.emit()
    assert "Keep the query's words “red circle”" in messages[-1]
    assert strip.prompt.text() == strip.prompt_used()  # the refused edit is undone

    with qtbot.waitSignal(app.search.searchFinished, timeout=TIMEOUT) as finished:
        strip.prompt.setText("a big red circle on grass")
        strip.prompt.setModified(True)
        strip.prompt.returnPressed.emit()
    outcome = finished.args[0]
    assert outcome.params.method_params["template"] == "a big {query} on grass"
    assert outcome.params.details["prompt"] == "a big red circle on grass"
    assert strip.prompt.text() == "a big red circle on grass"


def test_cancel_stops_the_drawing(qtbot, make_app, photos) -> None:
    app = indexed_app(qtbot, make_app, photos)
    strip = app.window.drawings_strip
    # Hold the worker after its first drawing until Cancel was pressed, so the test does not
    # race a painter that draws in milliseconds.
    pressed = threading.Event()

    def hold(search_id: int, event: object) -> None:
        # Heard after the controller's listener (added first), which queued the drawing.
        if isinstance(event, DrawingMade):
            pressed.wait(10)

    app.search.add_event_listener(hold)
    app.visret.drawingShown.connect(lambda card: strip.cancel.click())
    app.visret.drawingShown.connect(lambda card: pressed.set())
    finished: list[object] = []
    app.search.searchFinished.connect(finished.append)
    choose_visret(app)
    app.window.query_bar.edit.setText("a white square")
    app.window.query_bar.submit()
    qtbot.waitUntil(pressed.is_set, timeout=TIMEOUT)
    qtbot.waitUntil(lambda: app.runner.active("search") == [], timeout=TIMEOUT)

    assert not finished  # no results from a cancelled search, no run saved
    assert not strip.busy() and strip.status.text().startswith("Cancelled after 1 drawing")
    assert len(drawings_on_disk(app)) == 1  # the one drawn stays for the next run
    assert app.judging.query_id is None


def test_the_generator_setting(qtbot, make_app, tmp_path) -> None:
    app = make_app(start=False)
    dialog = app.open_settings()
    assert dialog.generator.text() == ""
    dialog.generator.setText(str(tmp_path / "sd-turbo"))
    dialog.accept()
    assert app.settings.generator == str(tmp_path / "sd-turbo")
    assert app.session.settings.generator == str(tmp_path / "sd-turbo")
    from app.settings import load_settings

    assert load_settings().settings.generator == str(tmp_path / "sd-turbo")
    again = app.open_settings()
    assert again.generator.text() == str(tmp_path / "sd-turbo")
    again.reject()
