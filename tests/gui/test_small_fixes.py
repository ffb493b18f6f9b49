"""Small things a user notices: a cleared photo pane says nothing of the last photo's judgment,
dialog titles and the query hint fit a laptop screen, F1 says what Down really does, and file
dialogs open where the same kind of dialog was last used, this session and the next."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtGui import QFont, QFontMetrics
from PySide6.QtWidgets import QFileDialog

from tests.gui.test_window import indexed_app
from widgets.detail_pane import DetailPane
from widgets.filter_bar import FilterBar
from widgets.results import ResultItem

# What a title bar needs beside its title, at the least: an icon and three buttons.
TITLE_BAR_AT_LEAST = 100


def test_no_photo_selected_shows_no_judgment(qtbot) -> None:
    pane = DetailPane()
    qtbot.addWidget(pane)
    pane.set_item(ResultItem(1, 0.5, 7, "/photos/a.jpg", "a photo"))
    pane.set_judgment(1)
    assert pane.judgment_label.text() == "Judged relevant for this query"
    pane.set_item(None)  # the selection is gone (a new search, say)
    assert pane.title.text() == "No photo selected"
    assert pane.judgment_label.text() == ""
    assert not pane.relevant_button.isChecked() and not pane.relevant_button.isEnabled()


def test_the_months_dialog_has_room_for_its_title(qtbot) -> None:
    bar = FilterBar()
    qtbot.addWidget(bar)
    bar.show()
    editor = bar.open_months_editor()
    qtbot.waitExposed(editor)
    bold = QFont(editor.font())
    bold.setBold(True)
    title = QFontMetrics(bold).horizontalAdvance(editor.windowTitle())
    width = editor.width()
    editor.reject()
    qtbot.waitUntil(lambda: bar.editor is None)  # deleted before the bar is
    assert width >= title + TITLE_BAR_AT_LEAST, (width, title)


def test_the_query_hint_fits_a_laptop_screen(qtbot, make_app, photos) -> None:
    app = indexed_app(qtbot, make_app, photos)
    window = app.window
    edit = window.query_bar.edit
    for width, height in ((1280, 800), (1920, 1080)):
        window.resize(width, height)
        qtbot.waitUntil(lambda: window.width() == width)  # noqa: B023
        qtbot.wait(50)
        hint = edit.placeholderText()
        shown = edit.fontMetrics().horizontalAdvance(hint)
        # Whole in the field (less its frame and clear button), and still says what to do.
        assert shown <= edit.width() - 30, (width, hint, shown, edit.width())
        assert "a red circle" in hint, hint
    assert "drop a photo here" in edit.placeholderText()  # there is room for all of it
    assert "drop a photo" in edit.toolTip()


def test_f1_says_what_down_does_in_the_query_bar(qtbot, make_app) -> None:
    app = make_app(start=False)
    # As the query bar does: Down moves to the results, unless earlier queries are being
    # browsed (tests/gui/test_keyboard.py drives it).
    lines = dict(app.window.shortcut_lines())
    assert "results" in lines["Down"] and "Earlier queries" in lines["Up"]


def test_file_dialogs_open_where_they_were_last_used(qtbot, make_app, tmp_path, monkeypatch):
    app = make_app(start=False)
    exports = tmp_path / "shared" / "exports"
    exports.mkdir(parents=True)
    asked: list[str] = []

    def save(parent, caption, start, file_filter):  # noqa: ANN001, ANN202
        asked.append(start)
        return str(exports / Path(start).name), file_filter

    monkeypatch.setattr(QFileDialog, "getSaveFileName", save)
    for _ in range(2):
        app.window.ask_save_file("Export the results shown", "results.csv", "CSV (*.csv)")
    assert asked[0] == "results.csv"  # first time: wherever Qt starts
    assert asked[1] == str(exports / "results.csv")  # then where the user went
    # An export not made before starts where the last export went (it started wherever Qt
    # starts: "export dialogs forget their folder")...
    app.window.ask_save_file("Export the judgments", "judgments.csv", "CSV (*.csv)")
    assert asked[2] == str(exports / "judgments.csv")
    # ... and each kind then keeps its own folder.
    elsewhere = tmp_path / "paper"
    elsewhere.mkdir()
    monkeypatch.setattr(
        QFileDialog, "getSaveFileName", lambda p, c, start, f: (str(elsewhere / "j.csv"), f)
    )
    app.window.ask_save_file("Export the judgments", "judgments.csv", "CSV (*.csv)")
    monkeypatch.setattr(QFileDialog, "getSaveFileName", save)
    app.window.ask_save_file("Export the results shown", "results.csv", "CSV (*.csv)")
    assert asked[3] == str(exports / "results.csv")
    analyses: list[str] = []
    monkeypatch.setattr(
        QFileDialog,
        "getExistingDirectory",
        lambda parent, caption, start="": analyses.append(start) or str(elsewhere),
    )
    app.window.ask_folder("Export analyses to folder")  # never used: the last export's
    assert analyses == [str(exports)]
    # Add folder… opens at the folder added last (the next one is often beside it).
    photos = tmp_path / "fieldwork" / "2024"
    photos.mkdir(parents=True)
    starts: list[str] = []

    def choose(parent, caption, start=""):  # noqa: ANN001, ANN202
        starts.append(start)
        return str(photos)

    monkeypatch.setattr(QFileDialog, "getExistingDirectory", choose)
    panel = app.window.library_panel
    panel.addFolderRequested.disconnect()  # only the dialog is under test, not indexing
    added: list[str] = []
    panel.addFolderRequested.connect(added.append)
    panel.choose_folder()
    panel.choose_folder()
    assert added == [str(photos)] * 2 and starts[1] == str(photos)
    # The next session remembers too.
    from app.settings import RecentFolders

    assert RecentFolders().folder("save:results.csv") == str(exports)
    assert RecentFolders().folder("save:judgments.csv") == str(elsewhere)
