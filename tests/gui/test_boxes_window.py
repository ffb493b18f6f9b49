"""Detector boxes in the window: the results carry each photo's boxes above the threshold,
the tiles and the full view draw them (not when View › Show detector boxes is off), the detail
pane lists them, and a judgment made on a box (B) judges the frame, keeps the box in both
judgment tables and is undone with it."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPoint, QRect, Qt
from PySide6.QtGui import QColor, QImage, QPainter, QPixmap
from PySide6.QtWidgets import QStyleOptionViewItem
from sqlalchemy import select

from app.controllers.application import Application
from engine.catalog import Judgment, JudgmentEvent
from engine.detections.records import Box, DetectionRecord, FrameRecord
from engine.detections.store import replace_source, write_frames
from tests.gui.test_judging import focus_grid, open_search
from tests.gui.test_window import indexed_app
from widgets.boxes import CATEGORY_COLOURS, DetectionView
from widgets.results import ResultItem, ResultRole, ResultsModel, ThumbnailDelegate

FOX = Box(0.25, 0.25, 0.5, 0.5)  # a big box, easy to find in a painted tile
HARE = Box(0.05, 0.05, 0.2, 0.2)
FAINT = Box(0.6, 0.6, 0.3, 0.3)  # below the default threshold of 0.2


def add_detections(app: Application, image_ids: list[int]) -> None:
    library = app.session.library
    assert library is not None
    frames = [
        FrameRecord(
            image_id,
            (
                DetectionRecord(FOX, "animal", 0.9, "red fox", 0.8),
                DetectionRecord(HARE, "animal", 0.6),
                DetectionRecord(FAINT, "animal", 0.1),
            ),
        )
        for image_id in image_ids
    ]
    with library.catalog.session() as s:
        write_frames(s, replace_source(s, "megadetector", "/md.json", model="MDV5A"), frames)


@pytest.fixture
def boxes_app(qtbot, make_app, photos) -> Application:
    app = indexed_app(qtbot, make_app, photos)
    app.window.resize(1300, 900)
    from engine.catalog import Image

    library = app.session.library
    assert library is not None
    with library.catalog.session() as s:
        ids = list(s.scalars(select(Image.id)))
    add_detections(app, ids)
    app.boxes.check_library()
    open_search(qtbot, app, "red circle")
    return app


def test_results_carry_the_boxes_above_the_threshold_and_the_pane_lists_them(
    qtbot, boxes_app
) -> None:
    app = boxes_app
    item = app.window.results_model.item(0)
    assert item is not None
    assert [d.box for d in item.detections] == [
        (FOX.x, FOX.y, FOX.width, FOX.height),
        (HARE.x, HARE.y, HARE.width, HARE.height),
    ]  # the 0.1 box is below the threshold
    assert item.detections[0].caption == "red fox 0.80"
    qtbot.waitUntil(app.window.show_boxes_action.isVisible)
    app.window.results.select_row(0)
    pane = app.window.detail_pane
    text = pane.fields["detections"].text()
    assert "animal 0.90  ·  red fox 0.80  (megadetector, MDV5A)" in text
    assert "animal 0.60" in text and "0.10" not in text
    assert len(pane.photo.boxes[0]) == 2  # drawn over the pane's photo too
    app.window.show_boxes_action.trigger()  # View › Show detector boxes off
    assert pane.photo.boxes[0] == ()


def test_judging_on_a_box_keeps_it_in_both_tables_and_undo_puts_the_whole_frame_back(
    qtbot, boxes_app
) -> None:
    app = boxes_app
    view, model = app.window.results, app.window.results_model
    store, query_id = app.judging.store, app.judging.query_id
    assert store is not None and query_id is not None
    focus_grid(qtbot, app, 0)
    photo = model.item(0).image_id
    qtbot.keyClick(view, Qt.Key.Key_B)  # the first box: the fox
    qtbot.keyClick(view, Qt.Key.Key_B)  # the next: the hare
    assert model.chosen_box(photo).box == (HARE.x, HARE.y, HARE.width, HARE.height)
    qtbot.keyClick(view, Qt.Key.Key_R)
    boxes = model.data(model.index(0, 0), ResultRole.Boxes)
    assert boxes.judged == ((HARE.x, HARE.y, HARE.width, HARE.height), 1)  # drawn distinctly

    def stored() -> tuple[list[str | None], list[str | None]]:
        library = store.library
        with library.catalog.session() as s:
            rows = s.scalars(select(Judgment.box).where(Judgment.image_id == photo)).all()
            events = s.scalars(
                select(JudgmentEvent.box)
                .where(JudgmentEvent.image_id == photo)
                .order_by(JudgmentEvent.id)
            ).all()
        return list(rows), list(events)

    qtbot.waitUntil(lambda: stored() == ([HARE.text], [HARE.text]), timeout=5_000)
    assert store.judgments(query_id) == {photo: 1}  # the frame is judged

    # N on the whole frame (B past the last box), then Ctrl+Z: the box judgment is back.
    view.select_row(0)
    qtbot.keyClick(view, Qt.Key.Key_B)  # past the hare: the whole frame
    assert model.chosen_box(photo) is None
    qtbot.keyClick(view, Qt.Key.Key_N)
    qtbot.waitUntil(lambda: stored() == ([None], [HARE.text, None]), timeout=5_000)
    assert model.judged_box(photo) is None
    qtbot.keyClick(view, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier)
    assert model.judged_box(photo) == (HARE.x, HARE.y, HARE.width, HARE.height)
    qtbot.waitUntil(lambda: stored() == ([HARE.text], [HARE.text, None, HARE.text]), timeout=5_000)
    assert store.judgments(query_id) == {photo: 1}


def test_the_toggle_hides_the_boxes_and_is_remembered(qtbot, boxes_app) -> None:
    app = boxes_app
    model = app.window.results_model
    assert model.data(model.index(0, 0), ResultRole.Boxes) is not None
    app.window.show_boxes_action.trigger()
    assert model.data(model.index(0, 0), ResultRole.Boxes) is None
    assert app.settings.show_boxes is False
    app.window.show_boxes_action.trigger()
    assert model.data(model.index(0, 0), ResultRole.Boxes) is not None


def test_the_full_view_draws_the_boxes_and_a_click_chooses_one(qtbot, boxes_app) -> None:
    app = boxes_app
    focus_grid(qtbot, app, 0)
    view = app.full_view.open()
    assert view is not None
    qtbot.waitUntil(lambda: not view.canvas.image_size().isEmpty(), timeout=10_000)
    assert len(view.canvas.detections()) == 2
    shown = view.canvas.shown_rect()
    centre = QPoint(
        int(shown.left() + (FOX.x + FOX.width / 2) * shown.width()),
        int(shown.top() + (FOX.y + FOX.height / 2) * shown.height()),
    )
    qtbot.mouseClick(view.canvas, Qt.MouseButton.LeftButton, pos=centre)
    photo = app.window.results_model.item(0).image_id
    assert app.window.results_model.chosen_index(photo) == 0
    assert not view.canvas.actual  # a click on a box does not zoom
    assert "R / N on the box red fox 0.80" in view.header_text()
    image = view.canvas.grab().toImage()
    edge = QPoint(int(shown.left() + FOX.x * shown.width()), centre.y())
    assert _near(image, edge, CATEGORY_COLOURS["animal"], 2)
    view.close()


# -- the tile's painting, without a window -----------------------------------------------------


class _Thumbs:
    def __init__(self, pixmap: QPixmap) -> None:
        self._pixmap = pixmap

    def pixmap(self, image_id: int) -> QPixmap | None:
        return self._pixmap

    def request(self, image_id: int, path: str, content_hash: str | None) -> None:
        pass


def _near(image: QImage, at: QPoint, colour: str, reach: int) -> bool:
    """Whether a pixel within `reach` of `at` is close to `colour` (antialiasing aside)."""
    want = QColor(colour)
    for dx in range(-reach, reach + 1):
        for dy in range(-reach, reach + 1):
            x, y = at.x() + dx, at.y() + dy
            if not (0 <= x < image.width() and 0 <= y < image.height()):
                continue
            got = image.pixelColor(x, y)
            if (
                max(
                    abs(got.red() - want.red()),
                    abs(got.green() - want.green()),
                    abs(got.blue() - want.blue()),
                )
                < 40
            ):
                return True
    return False


def _paint_tile(qtbot, model: ResultsModel) -> QImage:
    delegate = ThumbnailDelegate()
    size = delegate.sizeHint(QStyleOptionViewItem(), model.index(0, 0))
    image = QImage(size, QImage.Format.Format_ARGB32)
    image.fill(QColor("#ffffff"))
    option = QStyleOptionViewItem()
    option.rect = QRect(0, 0, size.width(), size.height())
    painter = QPainter(image)
    delegate.paint(painter, option, model.index(0, 0))
    painter.end()
    return image


def test_the_tile_paints_the_box_outline_over_the_thumbnail(qtbot) -> None:
    pixmap = QPixmap(160, 160)
    pixmap.fill(QColor("#202020"))  # a dark square photo fills the 160-pixel thumbnail
    detection = DetectionView((0.25, 0.25, 0.5, 0.5), "animal", 0.9)
    model = ResultsModel()
    model.set_thumbnail_source(_Thumbs(pixmap))
    model.set_results([ResultItem(1, 0.5, 7, "/p.jpg", "fox", detections=(detection,))])
    image = _paint_tile(qtbot, model)
    # The card's thumbnail starts at (8, 8) (3 px margin, 5 px padding) and is 160 wide;
    # the photo (160 x 160) fills it, so the box's left edge is at x = 8 + 40.
    left, middle = QPoint(8 + 40, 8 + 80), QPoint(8 + 80, 8 + 80)
    amber = CATEGORY_COLOURS["animal"]
    assert _near(image, left, amber, 1)
    assert not _near(image, middle, amber, 3)  # an outline, not a filled box

    model.set_show_boxes(False)
    assert not _near(_paint_tile(qtbot, model), left, amber, 1)


def test_ranking_by_boxes_encodes_the_crops_then_each_tile_shows_the_box_that_matched(
    qtbot, boxes_app
) -> None:
    from engine.catalog.models import CropEmbedding

    app = boxes_app
    model, search = app.window.results_model, app.search
    qtbot.waitUntil(lambda: app.window.rank_by_menu.menuAction().isVisible(), timeout=5_000)
    with qtbot.waitSignal(app.judging.queryOpened, timeout=60_000):  # saved as a run
        app.window.rank_by_actions["boxes"].trigger()  # View › Rank by › Detector boxes
    outcome = search.last_outcome
    assert search.unit == "boxes" and outcome.method_label.endswith("· boxes")
    assert outcome.params.details == {"unit": "boxes"}  # the saved run says what it ranked
    library = app.session.library
    with library.catalog.session() as s:
        crops = s.query(CropEmbedding).count()
    shown = model.items()
    assert crops == 2 * len(shown)  # the fox and the hare of every photo; the faint one not
    assert outcome.boxes and set(outcome.boxes) == {item.image_id for item in shown}
    for item in shown:  # the box that matched is the one chosen for R / N
        assert model.chosen_box(item.image_id).box == pytest.approx(outcome.boxes[item.image_id])

    focus_grid(qtbot, app, 0)
    photo, box = model.item(0).image_id, outcome.boxes[model.item(0).image_id]
    qtbot.keyClick(app.window.results, Qt.Key.Key_R)
    store = app.judging.store

    def judged_box() -> str | None:
        with store.library.catalog.session() as s:
            return s.scalar(select(Judgment.box).where(Judgment.image_id == photo))

    qtbot.waitUntil(lambda: judged_box() is not None, timeout=5_000)
    assert Box.from_text(judged_box()).text == Box(*box).text

    before = search.last_outcome
    app.window.rank_by_actions["frames"].trigger()  # back to whole frames: no box chosen
    qtbot.waitUntil(lambda: search.last_outcome is not before, timeout=30_000)
    assert search.unit == "frames" and search.last_outcome.boxes == {}
    assert all(model.chosen_box(item.image_id) is None for item in model.items())
