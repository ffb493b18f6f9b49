"""The filmstrip: the frames of the event selected in a grid grouped by event, in time order,
shown under the photo in the detail pane. Clicking a frame shows it; its context menu sets it
apart from its event (then it is judged alone)."""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtGui import QContextMenuEvent, QIcon, QPixmap
from PySide6.QtWidgets import (
    QLabel,
    QListView,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QVBoxLayout,
    QWidget,
)

from widgets.results import ResultItem, ThumbnailSource

FRAME_SIZE = 72  # px: a burst of 10 frames fits a scroll or two of the pane's width
ITEM_ROLE = Qt.ItemDataRole.UserRole + 1


class FrameList(QListWidget):
    """One row of frame thumbnails; right-click offers to set a frame apart."""

    setApartRequested = Signal(object)  # ResultItem

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("filmstripFrames")
        self.setViewMode(QListView.ViewMode.IconMode)
        self.setFlow(QListView.Flow.LeftToRight)
        self.setWrapping(False)
        self.setMovement(QListView.Movement.Static)
        self.setIconSize(QSize(FRAME_SIZE, FRAME_SIZE))
        self.setSpacing(2)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        # Room for the icons, their captions and a horizontal scrollbar.
        self.setFixedHeight(FRAME_SIZE + 48)

    def contextMenuEvent(self, event: QContextMenuEvent) -> None:  # noqa: N802
        entry = self.itemAt(event.pos())
        frame = entry.data(ITEM_ROLE) if entry is not None else None
        if not isinstance(frame, ResultItem):
            return
        menu = QMenu(self)
        apart = menu.addAction("Set this frame apart (judge it alone)")
        apart.triggered.connect(lambda: self.setApartRequested.emit(frame))
        menu.exec(event.globalPos())


class Filmstrip(QWidget):
    """A caption ("Event of 7 frames") over the frames; hidden when no event is selected."""

    frameClicked = Signal(object)  # ResultItem: show this frame in the detail pane
    setApartRequested = Signal(object)  # ResultItem

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("filmstrip")
        self.caption = QLabel(self)
        self.caption.setObjectName("filmstripCaption")
        self.caption.setWordWrap(True)
        self.frames = FrameList(self)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 4, 0, 4)
        layout.setSpacing(2)
        layout.addWidget(self.caption)
        layout.addWidget(self.frames)
        self._source: ThumbnailSource | None = None
        self._items: list[ResultItem] = []
        self.frames.itemClicked.connect(self._clicked)
        self.frames.setApartRequested.connect(self.setApartRequested)
        self.setVisible(False)

    def set_thumbnail_source(self, source: ThumbnailSource | None) -> None:
        self._source = source

    def set_frames(self, frames: list[ResultItem], shown_id: int | None = None) -> None:
        """Show these frames (time order); `shown_id` is marked as the one the pane shows.
        Fewer than two frames: hidden, there is no event to look through."""
        self._items = list(frames)
        self.frames.clear()
        if len(frames) < 2:
            self.setVisible(False)
            return
        self.caption.setText(f"Event of {len(frames)} frames, in time order")
        self.caption.setToolTip("Click a frame to see it; right-click to set it apart")
        for number, frame in enumerate(frames, start=1):
            entry = QListWidgetItem(f"{number}", self.frames)
            entry.setData(ITEM_ROLE, frame)
            entry.setToolTip(f"Frame {number} of {len(frames)}\n{frame.path}")
            entry.setSizeHint(QSize(FRAME_SIZE + 8, FRAME_SIZE + 22))
            self._set_icon(entry, frame)
            if frame.image_id == shown_id:
                self.frames.setCurrentItem(entry)
        self.setVisible(True)

    def clear(self) -> None:
        self.set_frames([])

    def items(self) -> list[ResultItem]:
        return list(self._items)

    def thumbnail_ready(self, image_id: int) -> None:
        """A thumbnail the grid's loader made: put it on the frame that waits for it."""
        for row in range(self.frames.count()):
            entry = self.frames.item(row)
            frame = entry.data(ITEM_ROLE)
            if isinstance(frame, ResultItem) and frame.image_id == image_id:
                self._set_icon(entry, frame)

    def _set_icon(self, entry: QListWidgetItem, frame: ResultItem) -> None:
        if self._source is None:
            return
        pixmap = self._source.pixmap(frame.image_id)
        if pixmap is None:
            self._source.request(frame.image_id, frame.path, frame.content_hash)
            pixmap = QPixmap(FRAME_SIZE, FRAME_SIZE)
            pixmap.fill(Qt.GlobalColor.lightGray)
        entry.setIcon(QIcon(pixmap))

    def _clicked(self, entry: QListWidgetItem) -> None:
        frame = entry.data(ITEM_ROLE)
        if isinstance(frame, ResultItem):
            self.frameClicked.emit(frame)
