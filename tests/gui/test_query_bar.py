"""What the query is: an attached photo is shown in the query bar (thumbnail and taxon name),
removed with one key or click, and the status line, run labels and the Queries tab say what
was searched; a reopened query puts its photo back in the query bar."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QImage

from app.controllers.application import Application
from app.controllers.results import query_photo, taxon_label
from engine.methods.registry import run_label
from tests.gui.test_window import indexed_app

RED = "train/00000_Plantae_Demonstrata_Formae_Rotundales_Circulaceae_Circulus_ruber"


@pytest.fixture
def app(qtbot, make_app, photos) -> Application:
    app = indexed_app(qtbot, make_app, photos)
    app.window.resize(1300, 900)
    return app


def red_photo(photos: Path) -> Path:
    return sorted((photos / RED).glob("*.jpg"))[0]


def search_now(qtbot, app: Application) -> None:
    """Press Enter in the query field; wait until the run is saved and its query open."""
    with qtbot.waitSignal(app.judging.queryOpened, timeout=20_000):
        qtbot.keyClick(app.window.query_bar.edit, Qt.Key.Key_Return)


def shown_run(app: Application):  # noqa: ANN201
    store = app.judging.store
    return next(r for r in store.runs_for(app.judging.query_id) if r.id == app.judging.run_id)


def colours(image: QImage) -> int:
    return len({image.pixel(x, y) for x in range(image.width()) for y in range(image.height())})


def test_taxon_label_prefers_scientific_with_common_name() -> None:
    assert taxon_label("Mungos mungo", "banded mongoose") == "Mungos mungo (banded mongoose)"
    assert taxon_label("Mungos mungo", None) == "Mungos mungo"
    assert taxon_label(None, "banded mongoose") == "banded mongoose"
    assert taxon_label("red circle", "Red circle") == "red circle"
    assert taxon_label(None, None) is None


def test_a_photo_is_named_by_its_taxon_else_its_file_name(app, photos, tmp_path) -> None:
    photo = red_photo(photos)
    named = query_photo(app.session.library, photo)
    assert named.name == "Circulus ruber (red circle)"
    assert named.image_id is not None and named.reference.endswith(f" #{named.image_id}")
    outside = tmp_path / "outside" / photo.name
    outside.parent.mkdir()
    shutil.copy(photo, outside)
    assert query_photo(app.session.library, outside).name == photo.name  # not in the catalog


def test_attach_type_clear_with_esc_then_search_text_only(qtbot, app, photos) -> None:
    bar, window = app.window.query_bar, app.window
    photo = red_photo(photos)
    # File › Search by a photo… attaches the chosen photo and searches it, as a drop does.
    window.ask_open_file = lambda caption, file_filter: str(photo)
    with qtbot.waitSignal(app.judging.queryOpened, timeout=20_000):
        window.search_by_photo_action.trigger()
    assert bar.image() == photo
    assert bar.image_chip.isVisible()
    qtbot.waitUntil(lambda: bar.image_label() == "Circulus ruber (red circle)", timeout=10_000)
    qtbot.waitUntil(lambda: bar.image_thumb.pixmap() is not None, timeout=10_000)
    assert colours(bar.image_thumb.pixmap().toImage()) > 2  # the photo, not a blank box
    status = window.status_line.text()
    assert "for photo “Circulus ruber (red circle) #" in status
    assert photo.name not in status
    run = shown_run(app)
    assert (run.kind, run_label(run.method, run.params, run.kind)) == ("image", "Text · image")
    assert photo.name not in app.judging.current_run().label  # the metrics panel's label
    assert "Circulus ruber (red circle) #" in app.judging.current_run().label

    # Ctrl+L, type new words: the photo stays attached, plainly, and both are searched.
    window.activateWindow()
    qtbot.keyClick(window.results, Qt.Key.Key_L, Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(bar.edit.hasFocus)
    qtbot.keyClicks(bar.edit, "blue square")
    assert bar.image_chip.isVisible()
    search_now(qtbot, app)
    run = shown_run(app)
    label = run_label(run.method, run.params, run.kind)
    assert (run.kind, label) == ("image+text", "Text · image+text")
    assert "for photo “Circulus ruber (red circle) #" in window.status_line.text()
    assert "+ “blue square”" in window.status_line.text()

    # Esc removes the photo (the words stay); the next search is the words alone.
    qtbot.keyClick(bar.edit, Qt.Key.Key_Escape)
    assert bar.image() is None and not bar.image_chip.isVisible()
    assert bar.text() == "blue square"
    search_now(qtbot, app)
    run = shown_run(app)
    assert (run.kind, run_label(run.method, run.params, run.kind)) == ("text", "Text")
    assert "for “blue square”" in window.status_line.text()
    assert "photo" not in window.status_line.text()


def test_backspace_in_an_empty_field_or_the_x_removes_the_photo(qtbot, app, photos) -> None:
    bar = app.window.query_bar
    bar.set_image(red_photo(photos))
    bar.set_text("a")
    bar.edit.setFocus()
    qtbot.keyClick(bar.edit, Qt.Key.Key_Backspace)  # deletes the "a", keeps the photo
    assert bar.text() == "" and bar.image() is not None
    qtbot.keyClick(bar.edit, Qt.Key.Key_Backspace)
    assert bar.image() is None
    bar.set_image(red_photo(photos))
    qtbot.mouseClick(bar.image_clear, Qt.MouseButton.LeftButton)
    assert bar.image() is None and not bar.image_chip.isVisible()


def test_query_rows_of_a_text_and_a_photo_search_differ(qtbot, app, photos) -> None:
    bar, panel = app.window.query_bar, app.window.query_list
    bar.set_text("red circle")
    search_now(qtbot, app)
    text_query = app.judging.query_id
    bar.set_image(red_photo(photos))
    search_now(qtbot, app)
    photo_query = app.judging.query_id
    assert photo_query != text_query
    text_row, photo_row = panel.row(text_query), panel.row(photo_query)
    assert text_row is not None and photo_row is not None
    assert text_row.title == photo_row.title == "red circle"  # the same words ...
    # ... told apart by the method and the photo (its thumbnail in the row).
    assert panel.item_for(text_query).text(3) == "Text"
    assert panel.item_for(photo_query).text(3) == "Text · image+text"
    assert photo_row.photo_name == "Circulus ruber (red circle)"
    assert panel.item_for(text_query).icon(0).isNull()
    qtbot.waitUntil(
        lambda: colours(panel.item_for(photo_query).icon(0).pixmap(28, 28).toImage()) > 2,
        timeout=10_000,
    )
    assert "photo: Circulus ruber (red circle)" in panel.item_for(photo_query).toolTip(0)


def test_reopening_a_photo_run_puts_the_photo_back_in_the_query_bar(qtbot, app, photos) -> None:
    bar, panel, model = app.window.query_bar, app.window.query_list, app.window.results_model
    bar.set_text("red circle")
    search_now(qtbot, app)
    red = app.judging.query_id
    # "More like this" on the top photo: an image run of the "red circle" query.
    top = model.item(0)
    with qtbot.waitSignal(app.judging.queryOpened, timeout=20_000):
        app.window.results.moreLikeThisRequested.emit(top)
    assert app.judging.query_id == red
    bar.clear_image()
    bar.set_text("blue square")
    search_now(qtbot, app)
    assert bar.image() is None

    # Reopened, "red circle" shows its newest run (the photo's) and that photo in the bar.
    panel.select(red)
    with qtbot.waitSignal(app.judging.queryOpened, timeout=20_000):
        panel.open_button.click()
    assert shown_run(app).kind == "image"
    assert bar.image() == Path(top.path)
    assert bar.text() == ""  # the photo alone was searched
    qtbot.waitUntil(lambda: bar.image_label() == "Circulus ruber (red circle)", timeout=10_000)
    # Its label names the photo by its taxon (as the run was labelled when made).
    assert f"Circulus ruber (red circle) #{top.image_id}" in app.judging.current_run().label
