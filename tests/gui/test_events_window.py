"""Results grouped by event in the window: the toggle collapses a search to one card per
event with its frame count, judging an event's card judges every frame and one undo takes
them all back, a frame set apart is judged alone, and the metrics say they count events."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from app.controllers.application import Application
from tests.gui.test_judging import open_search
from tests.gui.test_window import index, wait_ready
from tests.test_exif_camera import camera_jpeg


@pytest.fixture
def trap_photos(tmp_path: Path) -> Path:
    """Camera A: a burst of three frames, then one frame an hour later; camera B: a burst of
    two; a photo with no camera time: 4 events of 3, 1, 2 and 1 frames (7 photos)."""
    root = tmp_path / "card"
    for name, moment, colour in (
        ("a1.jpg", "2024:06:30 22:00:00", (200, 40, 40)),
        ("a2.jpg", "2024:06:30 22:00:05", (190, 50, 40)),
        ("a3.jpg", "2024:06:30 22:00:10", (180, 60, 40)),
        ("a4.jpg", "2024:06:30 23:00:00", (40, 200, 40)),
    ):
        camera_jpeg(root / "site1" / name, original=moment, serial="CAM-A", color=colour)
    for name, moment, colour in (
        ("b1.jpg", "2024:06:30 22:00:02", (40, 40, 200)),
        ("b2.jpg", "2024:06:30 22:00:20", (50, 50, 190)),
    ):
        camera_jpeg(root / "site1" / name, original=moment, serial="CAM-B", color=colour)
    camera_jpeg(root / "walk" / "undated.jpg", color=(120, 120, 120))
    return root


def frame_counts(app: Application) -> list[int]:
    return sorted(item.frames for item in app.window.results_model.items())


def names(app: Application, image_ids: object) -> set[str]:
    paths = {item.image_id: item.path for item in app.search.last_outcome.items}
    return {Path(paths[i]).name for i in image_ids}  # type: ignore[attr-defined]


@pytest.fixture
def events_app(qtbot, make_app, trap_photos: Path) -> Application:
    app = make_app()
    app.window.resize(1280, 800)
    wait_ready(qtbot, app)
    index(qtbot, app, trap_photos)
    qtbot.waitUntil(lambda: app.session.ready, timeout=20_000)
    # The library holds bursts: the toggle is offered.
    qtbot.waitUntil(lambda: app.window.group_events_action.isVisible(), timeout=10_000)
    open_search(qtbot, app, "a red animal")
    assert app.window.results_model.rowCount() == 7
    return app


def test_the_toggle_collapses_results_to_events_and_judges_them_whole(
    qtbot, events_app: Application
) -> None:
    app = events_app
    model, view, panel = app.window.results_model, app.window.results, app.window.metrics_panel
    store, query_id = app.judging.store, app.judging.query_id

    app.window.group_events_action.trigger()
    qtbot.waitUntil(lambda: model.rowCount() == 4, timeout=10_000)
    assert frame_counts(app) == [1, 1, 2, 3]
    assert app.settings.group_by_event
    # Each card is scored by its best frame: the scores still fall down the grid.
    scores = [item.score for item in model.items()]
    assert scores == sorted(scores, reverse=True)
    burst = next(item for item in model.items() if item.frames == 3)
    assert names(app, burst.frame_ids) == {"a1.jpg", "a2.jpg", "a3.jpg"}
    # The metrics count events and say so.
    qtbot.waitUntil(lambda: "per event (4 events)" in panel.summary.text(), timeout=10_000)

    # Selecting the burst shows its three frames in the filmstrip, in time order.
    strip = app.window.filmstrip
    view.select_row(model.row_of(burst.image_id))
    qtbot.waitUntil(lambda: strip.isVisibleTo(app.window) and len(strip.items()) == 3)
    assert [Path(f.path).name for f in strip.items()] == ["a1.jpg", "a2.jpg", "a3.jpg"]
    # Clicking a frame shows it in the detail pane.
    second = strip.frames.item(1)
    strip.frames.itemClicked.emit(second)
    assert Path(app.window.detail_pane.item().path).name == "a2.jpg"

    # R on the burst's card judges its three frames; the panel counts one relevant event.
    app.window.activateWindow()
    view.setFocus()
    view.select_row(model.row_of(burst.image_id))
    qtbot.keyClick(view, Qt.Key.Key_R)
    frames = set(burst.frame_ids)
    qtbot.waitUntil(lambda: store.judgments(query_id) == dict.fromkeys(frames, 1), timeout=5_000)
    assert "R = 1 relevant  ·  1 judged" in panel.summary.text()
    # One undo takes back all three.
    qtbot.keyClick(view, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(lambda: store.judgments(query_id) == {}, timeout=5_000)
    assert model.judgment(burst.image_id) is None

    # The third frame set apart: the grid has 5 events, and that frame is judged alone.
    third = next(f for f in strip.items() if Path(f.path).name == "a3.jpg")
    strip.setApartRequested.emit(third)
    qtbot.waitUntil(lambda: frame_counts(app) == [1, 1, 1, 2, 2], timeout=10_000)
    qtbot.waitUntil(lambda: "per event (5 events)" in panel.summary.text(), timeout=10_000)
    view.select_row(model.row_of(third.image_id))
    qtbot.keyClick(view, Qt.Key.Key_N)
    qtbot.waitUntil(lambda: store.judgments(query_id) == {third.image_id: 0}, timeout=5_000)

    # Off again: one card per photo, metrics per photo.
    app.window.group_events_action.trigger()
    assert model.rowCount() == 7 and frame_counts(app) == [1] * 7
    assert "per event" not in panel.summary.text()
    assert not app.settings.group_by_event


def test_a_new_search_while_grouped_is_collapsed_in_its_worker(
    qtbot, events_app: Application
) -> None:
    app = events_app
    first_query = app.judging.query_id
    app.window.group_events_action.trigger()
    qtbot.waitUntil(lambda: app.window.results_model.rowCount() == 4, timeout=10_000)
    red_cards = [item.image_id for item in app.window.results_model.items()]
    said: list[str] = []
    app.search.message.connect(said.append)
    open_search(qtbot, app, "a blue bird")
    outcome = app.search.last_outcome
    assert outcome is not None and outcome.shown is not None  # collapsed with the search
    assert len(outcome.items) == 7
    assert app.window.results_model.rowCount() == 4
    assert frame_counts(app) == [1, 1, 2, 3]
    assert [item.image_id for item in app.window.results_model.items()] != red_cards
    assert any(line.startswith("4 events (7 photos) for “a blue bird”") for line in said)
    # A saved run reopened is grouped too.
    with qtbot.waitSignal(app.judging.queryOpened, timeout=10_000):
        app.queries.open_query(first_query)
    qtbot.waitUntil(
        lambda: [item.image_id for item in app.window.results_model.items()] == red_cards,
        timeout=10_000,
    )
    assert frame_counts(app) == [1, 1, 2, 3]
    assert app.window.query_bar.text() == "a red animal"


def test_hour_of_day_and_deployment_filters_from_the_add_filter_menu(
    qtbot, events_app: Application
) -> None:
    app = events_app
    bar, model = app.window.filter_bar, app.window.results_model
    # The hour editor: 22:00 to 22:59 keeps the bursts and drops a4 (23:00) and the undated.
    editor = bar.open_hours_editor()
    editor.first.setCurrentIndex(22)
    editor.last.setCurrentIndex(22)
    with qtbot.waitSignal(app.search.searchFinished, timeout=20_000):
        editor.accept()
    assert "22:00–22:59" in bar.chip_labels()
    shown = {Path(item.path).name for item in model.items()}
    assert shown == {"a1.jpg", "a2.jpg", "a3.jpg", "b1.jpg", "b2.jpg"}
    # Deployments are listed with their photos; camera B's alone leaves its two frames.
    qtbot.waitUntil(lambda: len(bar.menu_actions("Deployment")) == 2, timeout=10_000)
    camera_b = next(a for a in bar.menu_actions("Deployment") if "CAM-B" in a.text())
    assert camera_b.text().endswith("(2)")
    with qtbot.waitSignal(app.search.searchFinished, timeout=20_000):
        camera_b.trigger()
    assert {Path(item.path).name for item in model.items()} == {"b1.jpg", "b2.jpg"}
    assert any(label.startswith("deployment ") for label in bar.chip_labels())
