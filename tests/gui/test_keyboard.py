"""Keyboard-only searching and judging: Ctrl+L, type, Enter, Down into the grid with the first
photo selected and framed, R / N / R stored, Up from the top row back to the query bar; and a
click on a thumbnail's toggle that judges without scrolling the grid."""

from __future__ import annotations

from PySide6.QtCore import QRect, Qt
from PySide6.QtGui import QColor, QImage
from PySide6.QtWidgets import QApplication

from app.controllers.application import Application
from tests.gui.test_window import indexed_app

FOCUS_AMBER = QColor("#f0b429")


def amber_pixels(image: QImage, rect: QRect) -> int:
    """Pixels of the focus frame's colour inside `rect` (device pixels = logical offscreen)."""
    count = 0
    for x in range(max(rect.left(), 0), min(rect.right(), image.width() - 1) + 1):
        for y in range(max(rect.top(), 0), min(rect.bottom(), image.height() - 1) + 1):
            c = QColor(image.pixel(x, y))
            if (
                abs(c.red() - FOCUS_AMBER.red()) < 30
                and abs(c.green() - FOCUS_AMBER.green()) < 30
                and abs(c.blue() - FOCUS_AMBER.blue()) < 30
            ):
                count += 1
    return count


def press(qtbot, key: Qt.Key, modifier: Qt.KeyboardModifier = Qt.KeyboardModifier.NoModifier):  # noqa: ANN201
    """A key press where a user's would go: to the widget with the keyboard focus."""
    widget = QApplication.focusWidget()
    assert widget is not None
    qtbot.keyClick(widget, key, modifier)


def test_search_and_judge_three_photos_without_the_mouse(qtbot, make_app, photos) -> None:
    app: Application = indexed_app(qtbot, make_app, photos)
    window, view, model = app.window, app.window.results, app.window.results_model
    bar = window.query_bar
    window.resize(1300, 900)
    window.activateWindow()
    window.query_list.tree.setFocus()  # anywhere but the query bar
    qtbot.waitUntil(window.query_list.tree.hasFocus)

    press(qtbot, Qt.Key.Key_L, Qt.KeyboardModifier.ControlModifier)
    assert bar.edit.hasFocus()
    qtbot.keyClicks(QApplication.focusWidget(), "red circle")
    with qtbot.waitSignal(app.judging.queryOpened, timeout=20_000):
        press(qtbot, Qt.Key.Key_Return)
    first = view.visualRect(model.index(0, 0))
    assert amber_pixels(view.viewport().grab().toImage(), first) == 0  # no focus there yet

    # Down leaves the query bar: the grid has the focus, photo #1 selected and framed.
    press(qtbot, Qt.Key.Key_Down)
    qtbot.waitUntil(view.hasFocus)
    assert view.currentIndex().row() == 0
    assert view.selectionModel().isSelected(model.index(0, 0))
    assert window.detail_pane.item() is not None
    assert window.detail_pane.item().image_id == model.item(0).image_id
    framed = amber_pixels(view.viewport().grab().toImage(), first)
    assert framed > 100, "the current photo shows a focus frame before it is judged"

    ids = [model.item(row).image_id for row in range(3)]
    for key in (Qt.Key.Key_R, Qt.Key.Key_N, Qt.Key.Key_R):
        press(qtbot, key)
    assert view.currentIndex().row() == 3
    store, query_id = app.judging.store, app.judging.query_id
    expected = {ids[0]: 1, ids[1]: 0, ids[2]: 1}
    qtbot.waitUntil(lambda: store.judgments(query_id) == expected, timeout=5_000)

    # Up on the top row goes back to the query bar; a judged photo stays judged.
    press(qtbot, Qt.Key.Key_Home)
    assert view.currentIndex().row() == 0
    press(qtbot, Qt.Key.Key_Up)
    assert bar.edit.hasFocus()
    assert app.judging.judgments == expected


def test_tab_from_the_query_field_selects_what_the_keys_judge(qtbot, make_app, photos) -> None:
    app: Application = indexed_app(qtbot, make_app, photos)
    window, view, bar = app.window, app.window.results, app.window.query_bar
    window.activateWindow()
    bar.edit.setFocus()
    qtbot.waitUntil(bar.edit.hasFocus)
    bar.set_text("blue square")
    with qtbot.waitSignal(app.judging.queryOpened, timeout=20_000):
        press(qtbot, Qt.Key.Key_Return)
    while not view.hasFocus():  # the Search button, then the grid
        press(qtbot, Qt.Key.Key_Tab)
    # The photo R would judge is selected (framed, and shown in the detail pane).
    assert view.currentIndex().row() == 0
    assert view.selectionModel().isSelected(view.currentIndex())
    assert window.detail_pane.item().image_id == window.results_model.item(0).image_id


def test_the_down_key_steps_through_history_before_leaving(qtbot, make_app, photos) -> None:
    app: Application = indexed_app(qtbot, make_app, photos)
    bar, view = app.window.query_bar, app.window.results
    for text in ("red circle", "blue square"):
        bar.set_text(text)
        with qtbot.waitSignal(app.judging.queryOpened, timeout=20_000):
            bar.submit()
    app.window.activateWindow()
    bar.edit.setFocus()
    bar.set_text("draft")
    qtbot.keyClick(bar.edit, Qt.Key.Key_Up)
    assert bar.text() == "blue square"
    qtbot.keyClick(bar.edit, Qt.Key.Key_Down)  # back to what was typed, still in the bar
    assert bar.text() == "draft" and bar.edit.hasFocus()
    qtbot.keyClick(bar.edit, Qt.Key.Key_Down)
    qtbot.waitUntil(view.hasFocus)


def test_clicking_a_toggle_judges_without_scrolling_the_grid(qtbot, make_app, photos) -> None:
    from widgets.results import ResultRole

    app: Application = indexed_app(qtbot, make_app, photos)
    view, model, bar = app.window.results, app.window.results_model, app.window.query_bar
    app.window.resize(1000, 700)
    bar.set_text("red circle")
    with qtbot.waitSignal(app.judging.queryOpened, timeout=20_000):
        bar.submit()
    qtbot.waitUntil(lambda: view.verticalScrollBar().maximum() > 0)
    # A card cut by the bottom edge: its toggle is visible, the rest of it is not.
    viewport = view.viewport().rect()
    row = next(
        r
        for r in range(model.rowCount())
        if view.visualRect(model.index(r, 0)).bottom() > viewport.bottom()
    )
    rect = view.visualRect(model.index(row, 0))
    view.verticalScrollBar().setValue(
        view.verticalScrollBar().value() + rect.top() - (viewport.bottom() - 60)
    )
    toggle = view.toggle_center(row)
    assert viewport.contains(toggle)
    assert not viewport.contains(view.visualRect(model.index(row, 0)))
    before = view.verticalScrollBar().value()
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=toggle)
    assert model.data(model.index(row, 0), ResultRole.Judgment) == 1
    # Qt scrolls a pressed card into view after the double-click interval: wait past it.
    qtbot.wait(QApplication.doubleClickInterval() + 300)
    assert view.verticalScrollBar().value() == before
    assert view.toggle_center(row) == toggle  # a second click lands on the same photo
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=toggle)
    assert model.data(model.index(row, 0), ResultRole.Judgment) == 0


def open_from_the_query_list(qtbot, app: Application, text: str) -> None:
    """Select the saved query `text` in the Queries tab and press Enter there, as a user would;
    the keyboard stays in the list."""
    window = app.window
    window.queries_dock.show()
    window.queries_dock.raise_()
    tree = window.query_list.tree
    item = next(
        tree.topLevelItem(row)
        for row in range(tree.topLevelItemCount())
        if text in tree.topLevelItem(row).text(0)
    )
    window.activateWindow()
    tree.setFocus()
    qtbot.waitUntil(tree.hasFocus)
    tree.setCurrentItem(item)
    with qtbot.waitSignal(app.judging.queryOpened, timeout=20_000):
        press(qtbot, Qt.Key.Key_Return)
    assert tree.hasFocus()


def test_judge_next_from_a_reopened_query_puts_the_keys_on_the_grid(
    qtbot, make_app, photos
) -> None:
    app: Application = indexed_app(qtbot, make_app, photos)
    window, view, model = app.window, app.window.results, app.window.results_model
    window.resize(1300, 900)
    bar = window.query_bar
    for text in ("red circle", "blue square"):
        bar.set_text(text)
        with qtbot.waitSignal(app.judging.queryOpened, timeout=20_000):
            bar.submit()
    open_from_the_query_list(qtbot, app, "red circle")
    query_id, store = app.judging.query_id, app.judging.store
    assert app.judging.query_title == "red circle"

    # Ctrl+J, then R: the first photo of the batch is judged relevant, whatever had the keys.
    with qtbot.waitSignal(app.feedback.judgingListShown, timeout=30_000):
        press(qtbot, Qt.Key.Key_J, Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(view.hasFocus)
    batch = [item.image_id for item in model.items()]
    assert batch and view.currentIndex().row() == 0
    assert window.detail_pane.item().image_id == batch[0]
    press(qtbot, Qt.Key.Key_R)
    qtbot.waitUntil(lambda: store.judgments(query_id).get(batch[0]) == 1, timeout=5_000)

    # The rest of the batch not relevant, by keys: the window offers the next batch.
    for _ in batch[1:]:
        press(qtbot, Qt.Key.Key_N)
    assert all(app.judging.judgments.get(i) is not None for i in batch)
    assert "Ctrl+J" in window.status_line.text() and "next" in window.status_line.text()
    assert window.judge_next_action.isChecked()

    # Ctrl+J continues: a new batch of photos none of which is judged, the first one current.
    with qtbot.waitSignal(app.feedback.judgingListShown, timeout=30_000):
        press(qtbot, Qt.Key.Key_J, Qt.KeyboardModifier.ControlModifier)
    second = [item.image_id for item in model.items()]
    assert second and not set(second) & set(app.judging.judgments)
    assert view.hasFocus() and view.currentIndex().row() == 0
    press(qtbot, Qt.Key.Key_N)
    qtbot.waitUntil(lambda: store.judgments(query_id).get(second[0]) == 0, timeout=5_000)


def test_judge_next_says_so_when_nothing_is_left_to_judge(qtbot, make_app, photos) -> None:
    app: Application = indexed_app(qtbot, make_app, photos)
    window, model = app.window, app.window.results_model
    bar = window.query_bar
    bar.set_text("red circle")
    with qtbot.waitSignal(app.judging.queryOpened, timeout=20_000):
        bar.submit()
    run = [item.image_id for item in model.items()]
    assert len(run) < app.session.settings.top_k  # the whole small demo collection
    for image_id in run:
        app.judging.judge(image_id, 0)
    window.activateWindow()
    window.results.setFocus()
    qtbot.waitUntil(window.results.hasFocus)
    with qtbot.waitSignal(app.feedback.judgingListShown, timeout=30_000):
        press(qtbot, Qt.Key.Key_J, Qt.KeyboardModifier.ControlModifier)
    assert "Nothing left to judge" in window.status_line.text()
    # The run stays on screen, with the keys on it; the mode is not entered.
    assert [item.image_id for item in model.items()] == run
    assert not window.judge_next_action.isChecked() and app.feedback.mode is None


def test_ctrl_l_selects_the_old_query_so_typing_replaces_it(qtbot, make_app, photos) -> None:
    """Ctrl+L from the grid, then typing: a new query, never the old one with the new words
    joined on (which was then searched and saved as a query of its own)."""
    app: Application = indexed_app(qtbot, make_app, photos)
    window, bar = app.window, app.window.query_bar
    bar.set_text("red circle")
    with qtbot.waitSignal(app.judging.queryOpened, timeout=20_000):
        bar.submit()
    window.activateWindow()
    window.results.setFocus()
    qtbot.waitUntil(window.results.hasFocus)

    press(qtbot, Qt.Key.Key_L, Qt.KeyboardModifier.ControlModifier)
    assert bar.edit.hasFocus()
    assert bar.edit.selectedText() == "red circle"
    qtbot.keyClicks(QApplication.focusWidget(), "blue square")
    assert bar.text() == "blue square"
    with qtbot.waitSignal(app.judging.queryOpened, timeout=20_000):
        press(qtbot, Qt.Key.Key_Return)
    assert app.judging.query_title == "blue square"

    # Already in the field (the cursor at its end): Ctrl+L still selects the whole query.
    bar.edit.setCursorPosition(len(bar.text()))
    press(qtbot, Qt.Key.Key_L, Qt.KeyboardModifier.ControlModifier)
    assert bar.edit.selectedText() == "blue square"
