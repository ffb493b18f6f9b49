"""A denser grid and a full-size view: the thumbnail size slider (and Ctrl++ / Ctrl+-) changes
the cards and the number of columns and is remembered; Space shows the selected photo at its
real pixel size, where R judges it and moves on to the next photo."""

from __future__ import annotations

from PIL import Image
from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import QApplication

from app.controllers.application import Application
from app.settings import load_settings
from tests.gui.test_window import indexed_app, search


def top_row_columns(app: Application) -> int:
    """How many cards the grid's first row shows, as a user would count them."""
    view, model = app.window.results, app.window.results_model
    first = view.visualRect(model.index(0, 0))
    return sum(
        1
        for row in range(model.rowCount())
        if view.visualRect(model.index(row, 0)).top() == first.top()
    )


def test_the_slider_changes_the_thumbnails_and_the_columns(qtbot, make_app, photos) -> None:
    app: Application = indexed_app(qtbot, make_app, photos)
    window, view, model = app.window, app.window.results, app.window.results_model
    window.resize(1280, 800)
    search(qtbot, app, "red circle")
    qtbot.waitUntil(lambda: view.isVisible() and model.rowCount() > 20)
    slider = window.thumbnail_slider.slider
    assert slider.value() == 160 and view.thumbnail_size() == 160
    default_columns = top_row_columns(app)
    assert view.visualRect(model.index(0, 0)).width() == 160 + 16

    slider.setValue(64)  # the densest grid
    qtbot.waitUntil(lambda: view.visualRect(model.index(0, 0)).width() == 64 + 16)
    dense_columns = top_row_columns(app)
    assert dense_columns >= 2 * default_columns, (default_columns, dense_columns)
    assert dense_columns == view.columns()

    slider.setValue(320)
    qtbot.waitUntil(lambda: view.visualRect(model.index(0, 0)).width() == 320 + 16)
    assert 1 <= top_row_columns(app) < default_columns
    assert window.height() <= 800  # large thumbnails scroll; the window does not grow

    # Ctrl+- and Ctrl++ in the grid step the size, and the slider follows.
    view.setFocus()
    qtbot.waitUntil(view.hasFocus)
    qtbot.keyClick(view, Qt.Key.Key_Minus, Qt.KeyboardModifier.ControlModifier)
    assert view.thumbnail_size() == 320 - 32 and slider.value() == 320 - 32
    qtbot.keyClick(view, Qt.Key.Key_Plus, Qt.KeyboardModifier.ControlModifier)
    assert view.thumbnail_size() == 320 and slider.value() == 320

    # Remembered: the settings file holds it once the slider rests.
    slider.setValue(96)
    qtbot.waitUntil(lambda: load_settings().settings.thumbnail_size == 96, timeout=5_000)


def test_the_remembered_size_is_used_at_start(qtbot, make_app, tmp_path) -> None:
    from app.settings import Settings

    settings = Settings(
        model="demo", library_dir=str(tmp_path / "library"), batch_size=16, thumbnail_size=96
    )
    app: Application = make_app(settings=settings, start=False)
    assert app.window.results.thumbnail_size() == 96
    assert app.window.thumbnail_slider.slider.value() == 96
    assert Settings(thumbnail_size=20).problems()  # outside the slider's range


def press(qtbot, key: Qt.Key) -> None:
    """A key press where a user's would go: to the widget with the keyboard focus."""
    widget = QApplication.focusWidget()
    assert widget is not None
    qtbot.keyClick(widget, key)


def test_space_shows_the_photo_at_its_real_size_and_r_judges_it(qtbot, make_app, photos) -> None:
    app: Application = indexed_app(qtbot, make_app, photos)
    window, view, model = app.window, app.window.results, app.window.results_model
    window.activateWindow()
    bar = window.query_bar
    bar.edit.setFocus()
    bar.set_text("red circle")
    with qtbot.waitSignal(app.judging.queryOpened, timeout=20_000):
        bar.submit()
    qtbot.keyClick(bar.edit, Qt.Key.Key_Down)  # into the grid, photo #1 selected
    qtbot.waitUntil(view.hasFocus)
    first, second = model.item(0), model.item(1)

    press(qtbot, Qt.Key.Key_Space)
    full = app.full_view.view
    assert full is not None
    qtbot.waitUntil(full.isVisible)
    canvas = full.canvas
    with Image.open(first.path) as photo:
        real = photo.size
    qtbot.waitUntil(lambda: not canvas.image_size().isEmpty(), timeout=10_000)
    assert (canvas.image_size().width(), canvas.image_size().height()) == real
    assert app.full_view.shown_id() == first.image_id

    # Fitted into a window smaller than the photo, then 1:1 on the 1 key: real pixels.
    full.resize(260, 200)
    qtbot.waitUntil(lambda: canvas.height() < real[1])
    assert canvas.scale() < 1
    qtbot.waitUntil(canvas.hasFocus)
    press(qtbot, Qt.Key.Key_1)
    shown = canvas.shown_rect()
    assert canvas.actual and (round(shown.width()), round(shown.height())) == real
    assert "1:1" in full.header_text()

    # Dragging pans the photo at 1:1 (here: down to its top edge); a click goes back to fitted.
    top = canvas.shown_rect().top()
    assert top < 0  # the photo is taller than the window: its top is cut
    centre = canvas.rect().center()
    qtbot.mousePress(canvas, Qt.MouseButton.LeftButton, pos=centre)
    for step in (10, 20, 40):
        qtbot.mouseMove(canvas, centre + QPoint(0, step))
    qtbot.mouseRelease(canvas, Qt.MouseButton.LeftButton, pos=centre + QPoint(0, 40))
    assert canvas.actual and canvas.shown_rect().top() == 0
    qtbot.mouseClick(canvas, Qt.MouseButton.LeftButton, pos=centre)
    assert not canvas.actual and canvas.scale() < 1

    # R in the full view judges the photo shown, and the view moves on to the next one.
    press(qtbot, Qt.Key.Key_R)
    store, query_id = app.judging.store, app.judging.query_id
    qtbot.waitUntil(lambda: store.judgments(query_id) == {first.image_id: 1}, timeout=5_000)
    assert view.currentIndex().row() == 1
    qtbot.waitUntil(lambda: app.full_view.shown_id() == second.image_id)
    qtbot.waitUntil(lambda: not canvas.image_size().isEmpty(), timeout=10_000)
    assert "not judged" in full.header_text()

    # Esc closes it; the keys are the grid's again, on the photo shown last.
    press(qtbot, Qt.Key.Key_Escape)
    qtbot.waitUntil(lambda: not full.isVisible())
    qtbot.waitUntil(view.hasFocus)
    assert view.currentIndex().row() == 1
