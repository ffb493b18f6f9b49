"""The main window, driven like a user would: index, search, inspect, cancel, settings, errors."""

from __future__ import annotations

from pathlib import Path

from app.controllers.application import Application


def wait_ready(qtbot, app: Application, timeout: int = 20_000) -> None:
    qtbot.waitUntil(lambda: app.session.library is not None, timeout=timeout)


def index(qtbot, app: Application, folder: Path, timeout: int = 60_000) -> None:
    with qtbot.waitSignal(app.library.indexingFinished, timeout=timeout) as blocker:
        app.library.add_folder(folder)
    assert blocker.args[0] is not None


def test_index_then_search_fills_the_grid(qtbot, make_app, photos, small_demo_collection) -> None:
    app = make_app()
    wait_ready(qtbot, app)
    index(qtbot, app, photos)
    qtbot.waitUntil(lambda: app.session.ready, timeout=20_000)
    qtbot.waitUntil(lambda: bool(app.library.stats) and app.library.stats[0].indexed == 60)
    bar = app.window.query_bar
    bar.edit.setText("red circle")
    with qtbot.waitSignal(app.search.searchFinished, timeout=20_000):
        bar.submit()
    model = app.window.results_model
    assert model.rowCount() == 60
    top = model.item(0)
    rel = Path(top.path).relative_to(photos).as_posix()
    assert small_demo_collection.labels[rel] == "red circle"
    assert top.title == "red circle"
