"""The full-size view of one photo (Space in the grid): fine detail for judging.

A window of its own over the main one: the photo fitted to the window (never enlarged), or at
its real pixels (1:1) with the `1` key or a click, panned by dragging. Esc or Space closes it;
Left / Right step through the results. The judging keys are the main window's actions, added
here by the controller, so R / N / U judge the photo shown and the grid moves on to the next.
Layout and painting only: what to show, and loading it off the GUI thread, is
`app/controllers/full_view.py`'s.
"""

from __future__ import annotations

from PySide6.QtCore import QPoint, QPointF, QRectF, QSize, Qt, Signal
from PySide6.QtGui import (
    QColor,
    QFont,
    QImage,
    QKeyEvent,
    QMouseEvent,
    QPainter,
    QPaintEvent,
    QPixmap,
    QResizeEvent,
)
from PySide6.QtWidgets import QDialog, QLabel, QVBoxLayout, QWidget

from widgets.boxes import DetectionView, box_at, paint_boxes

CLICK_SLOP = 4  # pixels a press may move and still count as a click (not a pan)


class PhotoCanvas(QWidget):
    """Paints one photo fitted to the widget or at 1:1 (`actual`), panned by dragging."""

    zoomChanged = Signal()
    boxClicked = Signal(int)  # the index of the detector box clicked

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("fullViewCanvas")
        self.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        self.setMinimumSize(QSize(160, 120))
        self.setCursor(Qt.CursorShape.PointingHandCursor)
        self._pixmap: QPixmap | None = None
        self._message = ""
        self.actual = False  # 1:1, else fitted
        self._centre = QPointF()  # the photo point (pixels) at the widget's centre when 1:1
        self._press: QPoint | None = None
        self._dragged = False
        self._detections: tuple[DetectionView, ...] = ()
        self._chosen: int | None = None
        self._judged: tuple[tuple[float, float, float, float], int] | None = None
        self._box_font = QFont()

    # -- what is shown ------------------------------------------------------------------------

    def set_image(self, image: QImage) -> None:
        """Show `image` fitted (a new photo starts fitted)."""
        self._pixmap = QPixmap.fromImage(image)
        self._message = ""
        self.actual = False
        self._centre = QPointF(image.width() / 2, image.height() / 2)
        self.update()
        self.zoomChanged.emit()

    def set_message(self, text: str) -> None:
        """No photo, a line instead (loading…, or why it cannot be shown)."""
        self._pixmap = None
        self._message = text
        self.update()
        self.zoomChanged.emit()

    def message(self) -> str:
        return self._message

    def set_boxes(
        self,
        detections: tuple[DetectionView, ...],
        chosen: int | None = None,
        judged: tuple[tuple[float, float, float, float], int] | None = None,
    ) -> None:
        """Draw these detector boxes over the photo (none: an empty tuple), the `chosen` one
        framed, the `judged` one (box, relevance) in the judgment's colour."""
        self._detections, self._chosen, self._judged = detections, chosen, judged
        self.update()

    def detections(self) -> tuple[DetectionView, ...]:
        return self._detections

    def image_size(self) -> QSize:
        """The shown photo's size in pixels (empty when none)."""
        return QSize() if self._pixmap is None else self._pixmap.size()

    def scale(self) -> float:
        """Screen pixels per photo pixel: 1 at 1:1, at most 1 fitted (never enlarged)."""
        if self._pixmap is None or self._pixmap.isNull():
            return 1.0
        if self.actual:
            return 1.0
        size = self._pixmap.size()
        return min(1.0, self.width() / size.width(), self.height() / size.height())

    def shown_rect(self) -> QRectF:
        """Where the photo is painted, in widget coordinates."""
        if self._pixmap is None:
            return QRectF()
        scale = self.scale()
        size = self._pixmap.size()
        width, height = size.width() * scale, size.height() * scale
        if not self.actual:
            return QRectF((self.width() - width) / 2, (self.height() - height) / 2, width, height)
        left = self.width() / 2 - self._centre.x()
        top = self.height() / 2 - self._centre.y()
        return QRectF(left, top, width, height)

    # -- zoom and pan -------------------------------------------------------------------------

    def show_actual(self, at: QPointF | None = None) -> None:
        """1:1, with the photo point under `at` (widget coordinates; default: the centre)
        brought to the middle."""
        if self._pixmap is None:
            return
        if at is not None:
            shown, scale = self.shown_rect(), self.scale()
            self._centre = QPointF((at.x() - shown.x()) / scale, (at.y() - shown.y()) / scale)
        self.actual = True
        self._clamp_centre()
        self.update()
        self.zoomChanged.emit()

    def show_fitted(self) -> None:
        self.actual = False
        self.update()
        self.zoomChanged.emit()

    def toggle_zoom(self, at: QPointF | None = None) -> None:
        if self.actual:
            self.show_fitted()
        else:
            self.show_actual(at)

    def pan(self, dx: float, dy: float) -> None:
        """Move the photo by (dx, dy) screen pixels (1:1 only)."""
        if not self.actual:
            return
        self._centre -= QPointF(dx, dy)
        self._clamp_centre()
        self.update()

    def _clamp_centre(self) -> None:
        """Keep the photo on screen: no panning past its edges (a small side stays centred)."""
        if self._pixmap is None:
            return
        size = self._pixmap.size()
        half_w, half_h = self.width() / 2, self.height() / 2
        x, y = self._centre.x(), self._centre.y()
        x = (
            size.width() / 2
            if size.width() <= self.width()
            else min(max(x, half_w), size.width() - half_w)
        )
        y = (
            size.height() / 2
            if size.height() <= self.height()
            else min(max(y, half_h), size.height() - half_h)
        )
        self._centre = QPointF(x, y)

    # -- events -------------------------------------------------------------------------------

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802
        painter = QPainter(self)
        painter.fillRect(self.rect(), QColor("#1b1f23"))
        if self._pixmap is None:
            painter.setPen(QColor("#d5d9dd"))
            painter.drawText(self.rect(), Qt.AlignmentFlag.AlignCenter, self._message)
            return
        painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform, not self.actual)
        shown = self.shown_rect()
        painter.drawPixmap(shown, self._pixmap, QRectF(self._pixmap.rect()))
        if self._detections:
            paint_boxes(
                painter,
                shown,
                self._detections,
                labels=True,
                font=self._box_font,
                chosen=self._chosen,
                judged=self._judged,
                width=2.0,
            )

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802
        super().resizeEvent(event)
        self._clamp_centre()

    def mousePressEvent(self, event: QMouseEvent) -> None:  # noqa: N802
        if event.button() == Qt.MouseButton.LeftButton:
            self._press = event.position().toPoint()
            self._dragged = False
        super().mousePressEvent(event)

    def mouseMoveEvent(self, event: QMouseEvent) -> None:  # noqa: N802
        if self._press is not None:
            now = event.position().toPoint()
            delta = now - self._press
            if self._dragged or delta.manhattanLength() > CLICK_SLOP:
                self._dragged = True
                self.pan(delta.x(), delta.y())
                self._press = now
        super().mouseMoveEvent(event)

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:  # noqa: N802
        if event.button() == Qt.MouseButton.LeftButton and self._press is not None:
            box = None
            if not self._dragged and self._pixmap is not None:
                box = box_at(self._detections, self.shown_rect(), event.position())
            if box is not None:  # a click on a box: the box the next judgment is made on
                self.boxClicked.emit(box)
            elif not self._dragged:  # a click: 1:1 at the point clicked, or back to fitted
                self.toggle_zoom(event.position())
            self._press = None
        super().mouseReleaseEvent(event)


class FullView(QDialog):
    """The window around the canvas: a one-line header (title, judgment, size, zoom)."""

    nextRequested = Signal()
    previousRequested = Signal()
    closed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("fullView")
        self.setWindowTitle("Full-size view")
        self.setModal(False)
        self.header = QLabel(self)
        self.header.setObjectName("fullViewHeader")
        self.header.setTextFormat(Qt.TextFormat.PlainText)
        self.hint = QLabel(
            "R relevant · N not relevant · U clear · click a box or B: judge on it · "
            "click or 1: real pixels · F: fit · ← →: previous, next · Esc or Space: close",
            self,
        )
        self.hint.setObjectName("fullViewHint")
        self.hint.setWordWrap(True)
        self.canvas = PhotoCanvas(self)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.setSpacing(4)
        layout.addWidget(self.header)
        layout.addWidget(self.canvas, 1)
        layout.addWidget(self.hint)
        self.canvas.zoomChanged.connect(self._update_header)
        self._title = ""
        self._judgment: int | None = None
        self._judging = False
        self._box_note = ""

    def show_loading(self, title: str) -> None:
        self._title = title
        self.canvas.set_message(f"Loading {title}…")

    def show_photo(self, title: str, image: QImage) -> None:
        self._title = title
        self.canvas.set_image(image)

    def show_failure(self, title: str, reason: str) -> None:
        self._title = title
        self.canvas.set_message(f"Cannot show this photo: {reason}")

    def show_nothing(self, text: str) -> None:
        """No photo to show (the grid has none selected)."""
        self._title = ""
        self.canvas.set_message(text)

    def set_judgment(self, relevance: int | None, judging: bool) -> None:
        """The shown photo's judgment (`judging`: a query is open to judge it for)."""
        self._judgment, self._judging = relevance, judging
        self._update_header()

    def set_box_note(self, text: str) -> None:
        """What the header says of the detector's box chosen for the next judgment ("" none)."""
        self._box_note = text
        self._update_header()

    def header_text(self) -> str:
        return self.header.text()

    def _update_header(self) -> None:
        parts = [self._title]
        if self._judging:
            parts.append(
                {None: "not judged", 1: "relevant", 0: "not relevant"}.get(self._judgment, "judged")
            )
        if self._box_note:
            parts.append(self._box_note)
        size = self.canvas.image_size()
        if not size.isEmpty():
            zoom = "1:1" if self.canvas.actual else f"fitted, {self.canvas.scale():.0%}"
            parts.append(f"{size.width()} × {size.height()} px ({zoom})")
        self.header.setText("  ·  ".join(part for part in parts if part))

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802
        key, plain = event.key(), event.modifiers() == Qt.KeyboardModifier.NoModifier
        if plain and key == Qt.Key.Key_Space:
            self.close()
        elif plain and key == Qt.Key.Key_1:
            self.canvas.show_actual()
        elif plain and key == Qt.Key.Key_F:
            self.canvas.show_fitted()
        elif plain and key in (Qt.Key.Key_Right, Qt.Key.Key_PageDown):
            self.nextRequested.emit()
        elif plain and key in (Qt.Key.Key_Left, Qt.Key.Key_PageUp):
            self.previousRequested.emit()
        else:
            super().keyPressEvent(event)  # Esc closes
            return
        event.accept()

    def done(self, result: int) -> None:  # Esc comes here (reject)
        super().done(result)
        self.closed.emit()
