"""Cameras and collections named in the window (issue 35): two trail cameras write the same
file names; each tile names its deployment and camera on a second line (painted inside the
card at the smallest thumbnail size), the chips name the deployment and the collection, the
status line and the Agreement rows name the photo (with its thumbnail, opened at full size),
and an event's card shows its sharpest frame with the animal, not the frame the wind
triggered, nor the one smeared by motion."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, QRect
from PySide6.QtGui import QColor, QImage, QPainter
from PySide6.QtWidgets import QStyleOptionViewItem

from app.controllers.application import Application
from engine.judgments.queries import QueryStore
from tests.gui.test_window import index, wait_ready
from tests.trap_frames import burst, save_frame
from widgets.results import MIN_THUMB_SIZE, cell_size

CAMERA_A = "camA (SER-A) · TrailCo TC-9"
CAMERA_B = "camB (SER-B) · TrailCo TC-9"


@pytest.fixture
def trap_card(tmp_path: Path) -> Path:
    """Two cameras, one burst each (IMG_0001 to IMG_0005 in both): the wind's empty frame,
    three sharp frames of an animal walking through, one smeared by its running."""
    root = tmp_path / "Forest card"
    for folder, serial, seed, hour in (("camA", "SER-A", 5, 22), ("camB", "SER-B", 11, 23)):
        for step, (_kind, image) in enumerate(burst(seed)):
            moment = f"2024:06:30 {hour}:00:{2 * step:02d}"
            save_frame(image, root / folder / f"IMG_{step + 1:04d}.JPG", moment, serial)
    return root


@pytest.fixture
def trap_app(qtbot, make_app, trap_card: Path) -> Application:
    app = make_app()
    app.window.resize(1280, 800)
    wait_ready(qtbot, app)
    index(qtbot, app, trap_card)
    qtbot.waitUntil(lambda: app.session.ready, timeout=20_000)
    qtbot.waitUntil(lambda: app.window.group_events_action.isVisible(), timeout=10_000)
    bar = app.window.query_bar
    bar.edit.setText("a brown animal")
    with qtbot.waitSignal(app.judging.queryOpened, timeout=20_000):
        bar.submit()
    assert app.window.results_model.rowCount() == 10
    return app


def _item(app: Application, folder: str, name: str):  # type: ignore[no-untyped-def]
    return next(
        item
        for item in app.window.results_model.items()
        if Path(item.path).name == name and Path(item.path).parent.name == folder
    )


def _paint(app: Application, item) -> QImage:  # type: ignore[no-untyped-def]
    """One card painted by the grid's delegate at the smallest thumbnail size."""
    view, model = app.window.results, app.window.results_model
    view.set_thumbnail_size(MIN_THUMB_SIZE)
    model.set_results([item])
    size = cell_size(MIN_THUMB_SIZE)
    image = QImage(size, QImage.Format.Format_ARGB32)
    image.fill(QColor("white"))
    option = QStyleOptionViewItem()
    option.rect = QRect(QPoint(0, 0), size)
    option.font = view.font()
    option.fontMetrics = view.fontMetrics()
    option.palette = view.palette()
    painter = QPainter(image)
    view.delegate.paint(painter, option, model.index(0, 0))
    painter.end()
    return image


def test_tiles_name_the_deployment_and_camera_of_two_cameras_alike_files(
    qtbot, trap_app: Application
) -> None:
    app = trap_app
    first_a, first_b = _item(app, "camA", "IMG_0001.JPG"), _item(app, "camB", "IMG_0001.JPG")
    assert first_a.title == first_b.title == "IMG_0001.JPG"
    assert (first_a.camera, first_b.camera) == (CAMERA_A, CAMERA_B)
    row = app.window.results_model.row_of(first_b.image_id)
    tooltip = app.window.results_model.data(app.window.results_model.index(row, 0), 3)
    assert CAMERA_B in tooltip
    # The second line is painted inside the card even at 64 px: the caption's lower band
    # holds the camera's text only when there is one.
    with_camera = _paint(app, first_a)
    without = _paint(app, replace(first_a, camera=""))
    size = cell_size(MIN_THUMB_SIZE)
    band = range(size.height() - 16, size.height() - 5)
    changed = sum(
        with_camera.pixel(x, y) != without.pixel(x, y) for y in band for x in range(8, 60)
    )
    assert changed > 20


def test_chips_name_the_deployment_and_the_collection(qtbot, trap_app: Application) -> None:
    app = trap_app
    bar = app.window.filter_bar
    qtbot.waitUntil(lambda: len(bar.menu_actions("Deployment")) == 2, timeout=10_000)
    camera_a = next(a for a in bar.menu_actions("Deployment") if "SER-A" in a.text())
    with qtbot.waitSignal(app.search.searchFinished, timeout=20_000):
        camera_a.trigger()
    # The chip names the deployment by folder and serial; the tiles add the camera model.
    qtbot.waitUntil(lambda: "deployment camA (SER-A)" in bar.chip_labels(), timeout=10_000)
    collection = bar.menu_actions("Collection")[0]
    with qtbot.waitSignal(app.search.searchFinished, timeout=20_000):
        collection.trigger()
    qtbot.waitUntil(lambda: "collection Forest card" in bar.chip_labels(), timeout=10_000)
    assert not any(label.endswith((" 1", " 2")) for label in bar.chip_labels())


def test_an_event_card_shows_its_sharpest_frame_with_the_animal(
    qtbot, trap_app: Application
) -> None:
    app = trap_app
    model = app.window.results_model
    # More like the empty frame: it is the best frame of its event, as a query about the grass
    # would make it.
    empty = _item(app, "camA", "IMG_0001.JPG")
    with qtbot.waitSignal(app.judging.queryOpened, timeout=20_000):
        app.search.more_like_this(empty)
    assert Path(model.item(0).path).name == "IMG_0001.JPG"
    app.window.group_events_action.trigger()
    qtbot.waitUntil(lambda: model.rowCount() == 2, timeout=10_000)
    card = next(item for item in model.items() if Path(item.path).parent.name == "camA")
    assert card.image_id == empty.image_id and card.frames == 5
    qtbot.waitUntil(
        lambda: model.item(model.row_of(card.image_id)).face is not None, timeout=20_000
    )
    face = model.item(model.row_of(card.image_id)).face
    assert Path(face[1]).name in {"IMG_0002.JPG", "IMG_0003.JPG", "IMG_0004.JPG"}
    # The grid paints the face: its thumbnail is the one asked for and shown.
    qtbot.waitUntil(lambda: app.thumbnails.pixmap(face[0]) is not None, timeout=20_000)


def test_the_status_line_and_the_agreement_rows_name_and_show_the_photo(
    qtbot, trap_app: Application
) -> None:
    app = trap_app
    photo = _item(app, "camB", "IMG_0003.JPG")
    query_id = app.judging.query_id
    app.judging.judge(photo.image_id, 1)
    qtbot.waitUntil(lambda: app.runner.idle(), timeout=20_000)
    QueryStore(app.session.library, user="bob").judge(query_id, photo.image_id, 0)
    dialog = app.agreement.open_dialog()
    assert dialog is not None
    qtbot.waitUntil(lambda: dialog.table.rowCount() == 1, timeout=20_000)
    name = dialog.table.item(0, 0).text()
    assert name == f"IMG_0003.JPG #{photo.image_id}, camB (SER-B)"
    qtbot.waitUntil(lambda: not dialog.table.item(0, 0).icon().isNull(), timeout=20_000)
    # A double click shows the photo at full size.
    dialog.table.cellDoubleClicked.emit(0, 0)
    viewer = app.agreement.viewer
    assert viewer is not None
    qtbot.waitUntil(lambda: not viewer.canvas.image_size().isEmpty(), timeout=20_000)
    assert viewer.canvas.image_size().width() == 240
    # Adjudicated: the status line names the photo as the window does, camera and all.
    with qtbot.waitSignal(app.agreement.message, timeout=20_000) as said:
        app.agreement.adjudicate(photo.image_id, 1)
    assert said.args[0] == f"Adjudicated relevant: IMG_0003.JPG #{photo.image_id}, camB (SER-B)"
    viewer.close()
    dialog.close()
