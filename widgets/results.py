"""The results grid: a list model of result ids, a thumbnail delegate, and the view.

The model holds small `ResultItem`s, never images. The delegate paints a cached thumbnail or a
placeholder; asking the model for `ResultRole.Thumbnail` schedules a load through the
`ThumbnailSource` the application gives it, so only rows that are painted load. When a
thumbnail arrives only its row is refreshed.

Relevance marking goes through `ResultRole.Judgment` (None = not judged, 1 relevant,
0 not relevant): the model stores it, the delegate marks judged photos with a coloured border
and a badge, and paints a toggle in the thumbnail's corner; clicking it asks the controller to
cycle the judgment (relevant -> not relevant -> cleared) without selecting or scrolling.

Keyboard: the current photo always carries a visible focus frame while the grid has focus;
`enter_from_above` (Down in the query bar) focuses the grid with a photo selected, and Up on
the top row emits `leaveUpRequested` so the query bar can take the focus back.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import IntEnum
from typing import Any, Protocol

from PySide6.QtCore import (
    QAbstractItemModel,
    QAbstractListModel,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    QPoint,
    QRect,
    QRectF,
    QSize,
    Qt,
    Signal,
)
from PySide6.QtGui import (
    QAction,
    QColor,
    QContextMenuEvent,
    QFocusEvent,
    QFont,
    QFontMetrics,
    QKeyEvent,
    QMouseEvent,
    QPainter,
    QPainterPath,
    QPen,
    QPixmap,
)
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QLabel,
    QListView,
    QMenu,
    QSlider,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QWidget,
)

from widgets.boxes import DetectionView, boxed, paint_boxes, wants_labels
from widgets.photo_view import PhotoView

THUMB_SIZE = 160  # the default thumbnail size, pixels on the longer side
MIN_THUMB_SIZE, MAX_THUMB_SIZE = 64, 320  # the size slider's range (Ctrl+- / Ctrl++ too)
THUMB_STEP = 32  # one Ctrl++ / Ctrl+- step
TOGGLE_SIZE = 24  # the judgment toggle in a thumbnail's top-right corner
TILE_LABEL_MIN_SIDE = 150  # a tile's boxes carry captions from this painted side (pixels) up


def clamp_thumb_size(size: int) -> int:
    """`size` within the slider's range."""
    return max(MIN_THUMB_SIZE, min(MAX_THUMB_SIZE, int(size)))


def cell_size(thumb_size: int) -> QSize:
    """A card's size for thumbnails of `thumb_size` pixels (room for the caption below)."""
    return QSize(thumb_size + 16, thumb_size + 44)


class ResultRole(IntEnum):
    Item = Qt.ItemDataRole.UserRole + 1
    ImageId = Qt.ItemDataRole.UserRole + 2
    Rank = Qt.ItemDataRole.UserRole + 3
    Score = Qt.ItemDataRole.UserRole + 4
    Path = Qt.ItemDataRole.UserRole + 5
    Thumbnail = Qt.ItemDataRole.UserRole + 6
    Judgment = Qt.ItemDataRole.UserRole + 7
    Boxes = Qt.ItemDataRole.UserRole + 8  # `TileBoxes`, or None when none are drawn


@dataclass(frozen=True)
class ResultItem:
    """One ranked photo as the grid shows it. `details` is what the detail pane shows about
    it (None: the catalog has no row for it)."""

    rank: int
    score: float
    image_id: int
    path: str
    title: str  # common name, else scientific name, else file name
    content_hash: str | None = None
    details: PhotoView | None = None
    # Results grouped by event: the event this best frame stands for and its frames (the
    # grid's "×7" badge); None and 1 for a photo shown alone.
    event_id: int | None = None
    frame_ids: tuple[int, ...] = ()  # in time order
    # Where a collection has several cameras: the photo's deployment and camera, the card's
    # second line ("CAM01_trail (QT0001) · QuadratTrail QT-1"); "" otherwise.
    camera: str = ""
    # An event's face when it is not the best frame (the sharpest frame with something in
    # it): its id, path and content hash, for the thumbnail; None shows the photo itself.
    face: tuple[int, str, str | None] | None = None
    # The photo's detections above the display threshold (boxes and whole-photo labels),
    # highest confidence first.
    detections: tuple[DetectionView, ...] = ()

    @property
    def frames(self) -> int:
        """How many frames the card stands for (1: a photo shown alone)."""
        return max(1, len(self.frame_ids))


@dataclass(frozen=True)
class TileBoxes:
    """What a tile draws over its thumbnail: the detections, the box chosen for the next
    judgment (an index into them) and the box the judgment was made on with its relevance."""

    detections: tuple[DetectionView, ...]
    chosen: int | None = None
    judged: tuple[tuple[float, float, float, float], int] | None = None


def score_text(score: object, digits: int = 3) -> str:
    """A card's number, or "" when there is none to show: a NaN score is a probability not
    known yet (an unfitted probe) or a photo listed for another reason (a random sample)."""
    if not isinstance(score, float) or not math.isfinite(score):
        return ""
    return f"{score:.{digits}f}"


class ThumbnailSource(Protocol):
    """Where the model gets thumbnails: a cache lookup and a request to load one."""

    def pixmap(self, image_id: int) -> QPixmap | None: ...

    def request(self, image_id: int, path: str, content_hash: str | None) -> None: ...


class ResultsModel(QAbstractListModel):
    """Ranked results of one search."""

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._items: list[ResultItem] = []
        self._rows: dict[int, int] = {}  # image id -> row
        self._face_rows: dict[int, int] = {}  # an event card's face (image id) -> its row
        self._judgments: dict[int, int] = {}
        self._thumbnails: ThumbnailSource | None = None
        self._show_boxes = True
        self._chosen_boxes: dict[int, int] = {}  # image id -> index of the box chosen
        self._judged_boxes: dict[int, tuple[float, float, float, float]] = {}

    def set_thumbnail_source(self, source: ThumbnailSource | None) -> None:
        self._thumbnails = source

    def set_results(self, items: list[ResultItem]) -> None:
        """Replace every row (a new search)."""
        self.beginResetModel()
        self._items = list(items)
        self._rows = {item.image_id: row for row, item in enumerate(self._items)}
        self._face_rows = {
            item.face[0]: row for row, item in enumerate(self._items) if item.face is not None
        }
        self._chosen_boxes = {}
        self.endResetModel()

    def clear(self) -> None:
        self.set_results([])

    def reorder(self, image_ids: list[int]) -> None:
        """Show the same rows in another order (sorted by one subquery's p); the selection
        and the ranks painted stay. Ids not shown are ignored; rows not named keep their
        order after the named ones."""
        named = [self._items[self._rows[i]] for i in dict.fromkeys(image_ids) if i in self._rows]
        chosen = {item.image_id for item in named}
        order = named + [item for item in self._items if item.image_id not in chosen]
        self.layoutAboutToBeChanged.emit()
        before = self._items
        self._items = order
        self._rows = {item.image_id: row for row, item in enumerate(self._items)}
        self._face_rows = {
            item.face[0]: row for row, item in enumerate(self._items) if item.face is not None
        }
        for index in self.persistentIndexList():
            if 0 <= index.row() < len(before):
                row = self._rows[before[index.row()].image_id]
                self.changePersistentIndex(index, self.index(row, 0))
        self.layoutChanged.emit()

    def item(self, row: int) -> ResultItem | None:
        return self._items[row] if 0 <= row < len(self._items) else None

    def items(self) -> list[ResultItem]:
        return list(self._items)

    def row_of(self, image_id: int) -> int | None:
        return self._rows.get(image_id)

    def set_judgments(self, judgments: dict[int, int]) -> None:
        """Replace every judgment (a query was opened); repaints the rows only."""
        self._judgments = dict(judgments)
        if self._items:
            self.dataChanged.emit(
                self.index(0, 0), self.index(len(self._items) - 1, 0), [ResultRole.Judgment]
            )

    def set_judgment(self, image_id: int, relevance: int | None) -> None:
        """Change one photo's judgment; only its row (if shown) is refreshed."""
        if relevance is None:
            self._judgments.pop(image_id, None)
        else:
            self._judgments[image_id] = int(relevance)
        row = self._rows.get(image_id)
        if row is not None:
            index = self.index(row, 0)
            self.dataChanged.emit(index, index, [ResultRole.Judgment])

    def judgment(self, image_id: int) -> int | None:
        return self._judgments.get(image_id)

    # -- detector boxes ----------------------------------------------------------------------

    def set_show_boxes(self, show: bool) -> None:
        """Draw the detector's boxes on the tiles, or not (View › Show boxes)."""
        if show != self._show_boxes:
            self._show_boxes = show
            self._repaint_all([ResultRole.Boxes])

    def show_boxes(self) -> bool:
        return self._show_boxes

    def set_judged_boxes(self, boxes: dict[int, tuple[float, float, float, float]]) -> None:
        """Replace the boxes the open query's judgments were made on (a query was opened)."""
        self._judged_boxes = dict(boxes)
        self._repaint_all([ResultRole.Boxes])

    def set_judged_box(self, image_id: int, box: tuple[float, float, float, float] | None) -> None:
        """The box a photo's judgment was made on (None: the whole frame, or no judgment)."""
        if box is None:
            self._judged_boxes.pop(image_id, None)
        else:
            self._judged_boxes[image_id] = box
        self._repaint(image_id)

    def judged_box(self, image_id: int) -> tuple[float, float, float, float] | None:
        return self._judged_boxes.get(image_id)

    def choose_box(self, image_id: int, index: int | None) -> None:
        """Make the photo's detection `index` the box the next judgment is made on (None:
        the whole frame)."""
        if index is None:
            self._chosen_boxes.pop(image_id, None)
        else:
            self._chosen_boxes[image_id] = index
        self._repaint(image_id)

    def box_index(self, image_id: int, box: tuple[float, float, float, float]) -> int | None:
        """The index among the photo's detections of the one drawn at `box` (to within a
        thousandth of the photo), None when the photo is not shown or has no such box."""
        row = self._rows.get(image_id)
        if row is None:
            return None
        for index, detection in enumerate(self._items[row].detections):
            if detection.box is not None and all(
                abs(a - b) <= 1e-3 for a, b in zip(detection.box, box, strict=True)
            ):
                return index
        return None

    def chosen_index(self, image_id: int) -> int | None:
        return self._chosen_boxes.get(image_id)

    def chosen_box(self, image_id: int) -> DetectionView | None:
        """The detection chosen on a photo for the next judgment, None when none is."""
        row, index = self._rows.get(image_id), self._chosen_boxes.get(image_id)
        if row is None or index is None:
            return None
        detections = self._items[row].detections
        return detections[index] if 0 <= index < len(detections) else None

    def cycle_box(self, image_id: int) -> DetectionView | None:
        """B: choose the photo's next box (after the last: none, the whole frame again);
        the detection chosen."""
        row = self._rows.get(image_id)
        if row is None:
            return None
        order = boxed(self._items[row].detections)
        if not order:
            return None
        current = self._chosen_boxes.get(image_id)
        following = [i for i in order if current is None or i > current]
        self.choose_box(image_id, following[0] if following else None)
        return self.chosen_box(image_id)

    def _repaint(self, image_id: int) -> None:
        row = self._rows.get(image_id)
        if row is not None:
            index = self.index(row, 0)
            self.dataChanged.emit(index, index, [ResultRole.Boxes])

    def _repaint_all(self, roles: list[int]) -> None:
        if self._items:
            self.dataChanged.emit(self.index(0, 0), self.index(len(self._items) - 1, 0), roles)

    def tile_boxes(self, item: ResultItem) -> TileBoxes | None:
        """What `item`'s tile draws over its thumbnail, None when nothing (boxes hidden, none
        found, or an event's face shown that is another frame)."""
        if item.face is not None:
            return None
        return self.photo_boxes(item)

    def photo_boxes(self, item: ResultItem) -> TileBoxes | None:
        """What is drawn over `item`'s own photo (the full view), None when nothing."""
        if not self._show_boxes or not item.detections:
            return None
        judged = None
        box, relevance = self._judged_boxes.get(item.image_id), self._judgments.get(item.image_id)
        if box is not None and relevance is not None:
            judged = (box, relevance)
        return TileBoxes(item.detections, self._chosen_boxes.get(item.image_id), judged)

    def thumbnail_ready(self, image_id: int) -> None:
        """Refresh only the row showing `image_id` (a thumbnail arrived), or the event card
        whose face it is."""
        row = self._face_rows.get(image_id, self._rows.get(image_id))
        if row is not None:
            index = self.index(row, 0)
            self.dataChanged.emit(index, index, [ResultRole.Thumbnail])

    def set_faces(self, faces: dict[int, tuple[int, str, str | None]]) -> None:
        """Event cards (by the image id of their card) show these faces: (id, path, hash) of
        the frame to show; the rows named repaint."""
        changed = []
        for image_id, face in faces.items():
            row = self._rows.get(image_id)
            if row is None:
                continue
            item = self._items[row]
            self._items[row] = replace(item, face=None if face[0] == item.image_id else face)
            self._face_rows[face[0]] = row
            changed.append(row)
        for row in changed:
            index = self.index(row, 0)
            self.dataChanged.emit(index, index, [ResultRole.Thumbnail, ResultRole.Item])

    # -- Qt model interface -----------------------------------------------------------------

    def rowCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008, N802
        return 0 if parent.isValid() else len(self._items)

    def data(
        self, index: QModelIndex | QPersistentModelIndex, role: int = Qt.ItemDataRole.DisplayRole
    ) -> Any:
        if not index.isValid() or not 0 <= index.row() < len(self._items):
            return None
        item = self._items[index.row()]
        if role == Qt.ItemDataRole.DisplayRole:
            return item.title
        if role == Qt.ItemDataRole.ToolTipRole:
            shown = score_text(item.score, 4)
            score = f"  score {shown}" if shown else ""
            frames = f"  ·  an event of {item.frames} frames" if item.frames > 1 else ""
            camera = f"\n{item.camera}" if item.camera else ""
            return f"#{item.rank}{score}{frames}\n{item.title}{camera}\n{item.path}"
        if role == ResultRole.Item:
            return item
        if role == ResultRole.ImageId:
            return item.image_id
        if role == ResultRole.Rank:
            return item.rank
        if role == ResultRole.Score:
            return item.score
        if role == ResultRole.Path:
            return item.path
        if role == ResultRole.Judgment:
            return self._judgments.get(item.image_id)
        if role == ResultRole.Boxes:
            return self.tile_boxes(item)
        if role == ResultRole.Thumbnail:
            if self._thumbnails is None:
                return None
            image_id, path, content_hash = item.face or (
                item.image_id,
                item.path,
                item.content_hash,
            )
            pixmap = self._thumbnails.pixmap(image_id)
            if pixmap is None:
                self._thumbnails.request(image_id, path, content_hash)
            return pixmap
        return None

    def setData(
        self,
        index: QModelIndex | QPersistentModelIndex,
        value: Any,
        role: int = Qt.ItemDataRole.EditRole,
    ) -> bool:  # noqa: N802
        if role != ResultRole.Judgment or not index.isValid() or index.row() >= len(self._items):
            return False
        image_id = self._items[index.row()].image_id
        if value is None:
            self._judgments.pop(image_id, None)
        else:
            self._judgments[image_id] = int(value)
        self.dataChanged.emit(index, index, [ResultRole.Judgment])
        return True

    def flags(self, index: QModelIndex | QPersistentModelIndex) -> Qt.ItemFlag:
        if not index.isValid():
            return Qt.ItemFlag.NoItemFlags
        return (
            Qt.ItemFlag.ItemIsEnabled
            | Qt.ItemFlag.ItemIsSelectable
            | Qt.ItemFlag.ItemNeverHasChildren
        )


def model_data(index: QModelIndex | QPersistentModelIndex, role: int) -> Any:
    """`index.data(role)`, asked of our Python model directly when possible.

    PySide6 6.12's `QModelIndex.data()` drops a reference to None each time a role has no
    value; a grid painting thousands of cells would crash Python 3.11 ("deallocating None").
    """
    model = index.model()
    if isinstance(model, ResultsModel):
        return model.data(index, role)
    value = index.data(role)
    return value


def toggle_rect(cell: QRect) -> QRect:
    """Where a cell's judgment toggle is: the thumbnail's top-right corner."""
    card = cell.adjusted(3, 3, -3, -3)
    thumb_right, thumb_top = card.right() - 5, card.top() + 5
    return QRect(thumb_right - TOGGLE_SIZE - 3, thumb_top + 4, TOGGLE_SIZE, TOGGLE_SIZE)


class ThumbnailDelegate(QStyledItemDelegate):
    """Paints a card: thumbnail (or placeholder), rank badge, judgment toggle, score, caption,
    and a focus frame on the current card while the grid has the keyboard focus."""

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._badge_font = QFont()
        self._badge_font.setPointSizeF(max(7.0, self._badge_font.pointSizeF() * 0.85))
        self._badge_font.setBold(True)
        self._score_font = QFont(self._badge_font)
        self._score_font.setBold(False)
        self._camera_font = QFont(self._score_font)
        self._placeholder = QColor("#e4e7ea")
        self._card = QColor("#ffffff")
        self._accent = QColor("#2f6f4f")
        self._relevant = QColor("#2e9d57")
        self._not_relevant = QColor("#c8453c")
        self._focus = QColor("#f0b429")  # amber: distinct from the judgment colours
        self.thumb_size = THUMB_SIZE

    def sizeHint(
        self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex
    ) -> QSize:  # noqa: N802
        return cell_size(self.thumb_size)

    def paint(
        self,
        painter: QPainter,
        option: QStyleOptionViewItem,
        index: QModelIndex | QPersistentModelIndex,
    ) -> None:
        painter.save()
        painter.setRenderHint(QPainter.RenderHint.Antialiasing, True)
        # The cached thumbnails are scaled to the chosen size as they are painted.
        painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform, True)
        rect = option.rect.adjusted(3, 3, -3, -3)
        selected = bool(option.state & QStyle.StateFlag.State_Selected)
        painter.setPen(QPen(self._accent, 2) if selected else QPen(QColor("#d5d9dd"), 1))
        painter.setBrush(QColor("#e8f1ec") if selected else self._card)
        painter.drawRoundedRect(rect, 6, 6)
        if option.state & QStyle.StateFlag.State_HasFocus:
            # Where R / N / U act: always visible, judged or not, selected or not.
            painter.setPen(QPen(self._focus, 3, Qt.PenStyle.SolidLine))
            painter.setBrush(Qt.BrushStyle.NoBrush)
            painter.drawRoundedRect(rect.adjusted(-1, -1, 1, 1), 7, 7)

        thumb_rect = QRect(rect.left() + 5, rect.top() + 5, rect.width() - 10, self.thumb_size)
        pixmap = model_data(index, ResultRole.Thumbnail)
        if isinstance(pixmap, QPixmap) and not pixmap.isNull():
            scaled = pixmap.size().scaled(thumb_rect.size(), Qt.AspectRatioMode.KeepAspectRatio)
            target = QRect(0, 0, scaled.width(), scaled.height())
            target.moveCenter(thumb_rect.center())
            painter.drawPixmap(target, pixmap)
            boxes = model_data(index, ResultRole.Boxes)
            if isinstance(boxes, TileBoxes):
                photo = QRectF(target)
                paint_boxes(
                    painter,
                    photo,
                    boxes.detections,
                    labels=wants_labels(photo, TILE_LABEL_MIN_SIDE),
                    font=self._score_font,
                    chosen=boxes.chosen,
                    judged=boxes.judged,
                )
        else:
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(self._placeholder)
            painter.drawRoundedRect(thumb_rect, 4, 4)

        judgment = model_data(index, ResultRole.Judgment)
        if judgment is not None:
            colour = self._relevant if judgment else self._not_relevant
            painter.setPen(QPen(colour, 4))
            painter.setBrush(Qt.BrushStyle.NoBrush)
            painter.drawRoundedRect(thumb_rect.adjusted(2, 2, -2, -2), 4, 4)
        hovered = bool(option.state & QStyle.StateFlag.State_MouseOver)
        self._paint_toggle(painter, toggle_rect(option.rect), judgment, hovered or selected)

        rank = model_data(index, ResultRole.Rank)
        painter.setFont(self._badge_font)
        metrics = QFontMetrics(self._badge_font)
        badge_text = f"{rank}"
        badge = QRect(
            thumb_rect.left() + 4,
            thumb_rect.top() + 4,
            metrics.horizontalAdvance(badge_text) + 10,
            metrics.height() + 2,
        )
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(QColor(20, 30, 25, 190))
        painter.drawRoundedRect(badge, 4, 4)
        painter.setPen(QColor("#ffffff"))
        painter.drawText(badge, Qt.AlignmentFlag.AlignCenter, badge_text)
        item = model_data(index, ResultRole.Item)
        if isinstance(item, ResultItem) and item.frames > 1:
            self._paint_frames_badge(painter, thumb_rect, item.frames)

        text_rect = QRect(
            rect.left() + 6,
            thumb_rect.bottom() + 4,
            rect.width() - 12,
            rect.bottom() - thumb_rect.bottom() - 6,
        )
        camera = item.camera if isinstance(item, ResultItem) else ""
        title_rect = text_rect
        if camera:
            # Two lines: the title (and score) on top, the camera below in the small font.
            title_rect = QRect(text_rect.left(), text_rect.top(), text_rect.width(),
                               option.fontMetrics.height())  # fmt: skip
            camera_rect = QRect(text_rect.left(), title_rect.bottom() + 1, text_rect.width(),
                                text_rect.bottom() - title_rect.bottom())  # fmt: skip
            painter.setFont(self._camera_font)
            painter.setPen(QColor("#3f5a6b"))
            painter.drawText(
                camera_rect,
                Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop,
                QFontMetrics(self._camera_font).elidedText(
                    camera, Qt.TextElideMode.ElideRight, camera_rect.width()
                ),
            )
        score = model_data(index, ResultRole.Score)
        shown_score = score_text(score)
        painter.setFont(self._score_font)
        score_width = QFontMetrics(self._score_font).horizontalAdvance(shown_score) + 6
        painter.setPen(QColor("#5b6570"))
        painter.drawText(
            title_rect, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter, shown_score
        )
        painter.setFont(option.font)
        painter.setPen(option.palette.text().color())
        title = str(model_data(index, Qt.ItemDataRole.DisplayRole) or "")
        elided = option.fontMetrics.elidedText(
            title, Qt.TextElideMode.ElideRight, title_rect.width() - score_width
        )
        painter.drawText(
            title_rect, Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter, elided
        )
        painter.restore()

    def _paint_frames_badge(self, painter: QPainter, thumb_rect: QRect, frames: int) -> None:
        """“×7” at the thumbnail's bottom left: the tile stands for an event of 7 frames."""
        text = f"×{frames}"
        metrics = QFontMetrics(self._badge_font)
        badge = QRect(0, 0, metrics.horizontalAdvance(text) + 10, metrics.height() + 2)
        badge.moveBottomLeft(QPoint(thumb_rect.left() + 4, thumb_rect.bottom() - 4))
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(QColor(20, 30, 25, 190))
        painter.drawRoundedRect(badge, 4, 4)
        painter.setPen(QColor("#ffffff"))
        painter.drawText(badge, Qt.AlignmentFlag.AlignCenter, text)

    def _paint_toggle(
        self, painter: QPainter, rect: QRect, judgment: int | None, emphasised: bool
    ) -> None:
        """A round badge: green check (relevant), red cross (not relevant), or an empty ring
        that invites a click (shown stronger on the hovered or selected card)."""
        if judgment is None:
            painter.setPen(QPen(QColor(255, 255, 255, 230 if emphasised else 150), 2))
            painter.setBrush(QColor(20, 30, 25, 110 if emphasised else 60))
            painter.drawEllipse(rect)
            return
        colour = self._relevant if judgment else self._not_relevant
        painter.setPen(QPen(QColor("#ffffff"), 2))
        painter.setBrush(colour)
        painter.drawEllipse(rect)
        pen = QPen(QColor("#ffffff"), 2.6)
        pen.setCapStyle(Qt.PenCapStyle.RoundCap)
        pen.setJoinStyle(Qt.PenJoinStyle.RoundJoin)
        painter.setPen(pen)
        painter.setBrush(Qt.BrushStyle.NoBrush)
        x, y, w = rect.left(), rect.top(), rect.width()
        path = QPainterPath()
        if judgment:
            path.moveTo(x + w * 0.27, y + w * 0.52)
            path.lineTo(x + w * 0.44, y + w * 0.68)
            path.lineTo(x + w * 0.74, y + w * 0.34)
        else:
            path.moveTo(x + w * 0.32, y + w * 0.32)
            path.lineTo(x + w * 0.68, y + w * 0.68)
            path.moveTo(x + w * 0.68, y + w * 0.32)
            path.lineTo(x + w * 0.32, y + w * 0.68)
        painter.drawPath(path)


class ResultsView(QListView):
    """The grid. Emits the current item and the context-menu requests; decides nothing."""

    currentItemChanged = Signal(object)  # ResultItem or None
    moreLikeThisRequested = Signal(object)  # ResultItem
    openFolderRequested = Signal(str)
    copyPathRequested = Signal(str)
    judgmentCycleRequested = Signal(object)  # ResultItem whose toggle was clicked
    judgmentRequested = Signal(object, object)  # ResultItem, 1 / 0 / None (context menu)
    leaveUpRequested = Signal()  # Up on the top row: back to the query bar
    thumbnailSizeChanged = Signal(int)  # pixels, after the grid reflowed

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("resultsGrid")
        self.setViewMode(QListView.ViewMode.IconMode)
        self.setResizeMode(QListView.ResizeMode.Adjust)
        self.setMovement(QListView.Movement.Static)
        self.setUniformItemSizes(True)
        self.setWrapping(True)
        self.setSpacing(4)
        self.setGridSize(cell_size(THUMB_SIZE) + QSize(4, 4))
        self.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.setVerticalScrollMode(QAbstractItemView.ScrollMode.ScrollPerPixel)
        self.verticalScrollBar().setSingleStep(24)
        self.setContextMenuPolicy(Qt.ContextMenuPolicy.DefaultContextMenu)
        self.setMouseTracking(True)  # the hovered card shows its toggle stronger
        self.delegate = ThumbnailDelegate(self)
        self.setItemDelegate(self.delegate)
        self.setDragEnabled(False)
        self._toggle_pressed: int | None = None  # row whose toggle the mouse went down on

    def setModel(self, model: QAbstractItemModel | None) -> None:  # noqa: N802
        super().setModel(model)
        if self.selectionModel() is not None:
            self.selectionModel().currentChanged.connect(self._on_current_changed)
        if model is None:  # Qt's own call when the view goes: nothing to follow
            return
        model.modelReset.connect(lambda: self.currentItemChanged.emit(None))
        # New results start at rank 1, not wherever the previous list was scrolled to.
        model.modelReset.connect(self.scrollToTop)

    # -- thumbnail size (the density of the grid) ----------------------------------------------

    def thumbnail_size(self) -> int:
        return self.delegate.thumb_size

    def set_thumbnail_size(self, size: int) -> None:
        """Show thumbnails of `size` pixels (within the slider's range): the grid reflows,
        the current photo stays in view. Painting scales the thumbnails already loaded."""
        size = clamp_thumb_size(size)
        if size == self.delegate.thumb_size:
            return
        self.delegate.thumb_size = size
        self.setGridSize(cell_size(size) + QSize(4, 4))  # lays the items out again
        self.doItemsLayout()
        if self.currentIndex().isValid():
            self.scrollTo(self.currentIndex())
        self.viewport().update()
        self.thumbnailSizeChanged.emit(size)

    def step_thumbnail_size(self, steps: int) -> None:
        """Ctrl++ / Ctrl+-: larger or smaller thumbnails by `steps` steps."""
        self.set_thumbnail_size(self.thumbnail_size() + steps * THUMB_STEP)

    def columns(self) -> int:
        """How many thumbnails one row of the grid holds at its current width."""
        step = self.gridSize().width()
        return max(1, self.viewport().width() // step) if step > 0 else 1

    def _on_current_changed(self, current: QModelIndex, _previous: QModelIndex) -> None:
        self.currentItemChanged.emit(
            model_data(current, ResultRole.Item) if current.isValid() else None
        )

    def current_item(self) -> ResultItem | None:
        index = self.currentIndex()
        return model_data(index, ResultRole.Item) if index.isValid() else None

    def select_row(self, row: int) -> None:
        """Make `row` the current, selected and visible result (if it exists)."""
        model = self.model()
        if model is None or not 0 <= row < model.rowCount():
            return
        index = model.index(row, 0)
        self.setCurrentIndex(index)
        self.scrollTo(index)

    def toggle_center(self, row: int) -> QPoint:
        """The judgment toggle's centre of a row, in viewport coordinates (for tests)."""
        return toggle_rect(self.visualRect(self.model().index(row, 0))).center()

    def enter_from_above(self) -> None:
        """Take the keyboard focus from the query bar: the current photo (else the first)
        selected and framed."""
        model = self.model()
        if model is None or model.rowCount() == 0:
            return
        index = self.currentIndex()
        self.select_row(index.row() if index.isValid() else 0)
        self.setFocus(Qt.FocusReason.OtherFocusReason)

    def _on_top_row(self, index: QModelIndex) -> bool:
        first = self.visualRect(self.model().index(0, 0))
        return self.visualRect(index).top() <= first.top()

    # -- keyboard and mouse ----------------------------------------------------------------------

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802
        index = self.currentIndex()
        if (
            event.key() == Qt.Key.Key_Up
            and event.modifiers() == Qt.KeyboardModifier.NoModifier
            and (not index.isValid() or self._on_top_row(index))
        ):
            self.leaveUpRequested.emit()
            event.accept()
            return
        super().keyPressEvent(event)

    def focusInEvent(self, event: QFocusEvent) -> None:  # noqa: N802
        super().focusInEvent(event)
        # Qt makes the first photo current on a Tab without selecting it: R would judge a
        # photo the detail pane does not show. Select what the keys act on.
        index = self.currentIndex()
        if (
            event.reason() != Qt.FocusReason.MouseFocusReason
            and index.isValid()
            and not self.selectionModel().isSelected(index)
        ):
            self.select_row(index.row())

    def _toggle_row_at(self, event: QMouseEvent) -> int | None:
        if event.button() != Qt.MouseButton.LeftButton:
            return None
        pos = event.position().toPoint()
        index = self.indexAt(pos)
        if index.isValid() and toggle_rect(self.visualRect(index)).contains(pos):
            return index.row()
        return None

    # A click on a toggle judges and nothing else: no selection change and, above all, no
    # scrolling of a half-visible card into view (the next click would land on another photo).
    def mousePressEvent(self, event: QMouseEvent) -> None:  # noqa: N802
        self._toggle_pressed = self._toggle_row_at(event)
        if self._toggle_pressed is not None:
            event.accept()
            return
        super().mousePressEvent(event)

    def mouseDoubleClickEvent(self, event: QMouseEvent) -> None:  # noqa: N802
        # The second click of a quick double click on a toggle cycles it once more.
        self._toggle_pressed = self._toggle_row_at(event)
        if self._toggle_pressed is not None:
            event.accept()
            return
        super().mouseDoubleClickEvent(event)

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:  # noqa: N802
        pressed, self._toggle_pressed = self._toggle_pressed, None
        if pressed is not None:
            event.accept()
            if self._toggle_row_at(event) == pressed:
                item = model_data(self.model().index(pressed, 0), ResultRole.Item)
                if item is not None:
                    self.judgmentCycleRequested.emit(item)
            return
        super().mouseReleaseEvent(event)

    def contextMenuEvent(self, event: QContextMenuEvent) -> None:  # noqa: N802
        index = self.indexAt(event.pos())
        if not index.isValid():
            return
        item: ResultItem = model_data(index, ResultRole.Item)
        menu = QMenu(self)
        more = QAction("More like this", menu)
        more.triggered.connect(lambda: self.moreLikeThisRequested.emit(item))
        folder = QAction("Show in folder", menu)
        folder.triggered.connect(lambda: self.openFolderRequested.emit(item.path))
        copy = QAction("Copy path", menu)
        copy.triggered.connect(lambda: self.copyPathRequested.emit(item.path))
        menu.addActions([more, folder, copy])
        menu.addSeparator()
        for label, value in (("Relevant", 1), ("Not relevant", 0), ("Clear judgment", None)):
            action = QAction(label, menu)
            action.triggered.connect(
                lambda _checked=False, v=value: self.judgmentRequested.emit(item, v)
            )
            menu.addAction(action)
        menu.exec(event.globalPos())


class ThumbnailSizeSlider(QWidget):
    """The grid's density, as digiKam and Lightroom have it: a slider of thumbnail sizes
    (small icon left, large right) kept in step with the grid both ways."""

    def __init__(self, view: ResultsView, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("thumbnailSize")
        self.view = view
        self.slider = QSlider(Qt.Orientation.Horizontal, self)
        self.slider.setRange(MIN_THUMB_SIZE, MAX_THUMB_SIZE)
        self.slider.setSingleStep(8)
        self.slider.setPageStep(THUMB_STEP)
        self.slider.setValue(view.thumbnail_size())
        self.slider.setFixedWidth(110)
        self.slider.setToolTip("Thumbnail size (Ctrl+- smaller, Ctrl++ larger)")
        self.slider.setAccessibleName("Thumbnail size")
        small, large = QLabel("▫", self), QLabel("◻", self)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(6, 0, 4, 0)
        layout.setSpacing(2)
        layout.addWidget(small)
        layout.addWidget(self.slider)
        layout.addWidget(large)
        self.slider.valueChanged.connect(view.set_thumbnail_size)
        view.thumbnailSizeChanged.connect(self._follow)

    def _follow(self, size: int) -> None:
        if self.slider.value() != size:
            self.slider.blockSignals(True)
            self.slider.setValue(size)
            self.slider.blockSignals(False)
