"""The query bar: a method picker with its options button, the query text, an optional query
photo (a chip with its thumbnail, name and ×), and history.

Emits `searchRequested(text, image_path_or_None, method_key)`; it decides nothing about how a
search runs. Methods are given as `MethodChoice`s, so new ones only add an entry. The chip
shows the file name until the controller hands over the photo's name and thumbnail
(`show_image_name`, `show_image_thumbnail`): the bar never reads a photo itself.

Keys in the query field: Enter searches; Up / Down step through earlier queries; Down when not
stepping through them asks for the results (`resultsFocusRequested`); Esc, or Backspace in an
empty field, removes an attached photo.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import cast

from PySide6.QtCore import QEvent, QObject, Qt, Signal
from PySide6.QtGui import QDragEnterEvent, QDropEvent, QKeyEvent, QPixmap
from PySide6.QtWidgets import (
    QComboBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from widgets.fitting import ElidedLabel

IMAGE_SUFFIXES = frozenset(
    {".jpg", ".jpeg", ".png", ".webp", ".tif", ".tiff", ".bmp", ".gif", ".heic"}
)
CHIP_THUMB = 28  # px: the query photo's thumbnail in the chip
CHIP_NAME_MAX = 420  # px: the chip's name is elided beyond this (full name in the tooltip)
EDIT_MIN = 180  # px: the query field stays usable with a photo attached
# What the empty field says once searches can run, longest first: the longest that fits is
# shown (at 1280 px the field is about 330 px wide).
READY_HINTS = (
    "Describe what to find, e.g. “a red circle”, or drop a photo here",
    "What to find, e.g. “a red circle”, or drop a photo",
    "What to find, e.g. “a red circle”",
    "Find, e.g. “a red circle”",
    "What to find",
)
PLACEHOLDER_SPARE = 30  # px of an empty field that is not text: frame and padding
CHIP_NAME_CHARS = 60

# Buttons styled flat by the application's style sheet draw no focus of their own; keyboard
# users must see where Tab went (a rule here, so it holds whatever the sheet says).
FOCUS_STYLE = """
#searchButton:focus { border: 2px solid #f0b429; }
QToolButton:focus { border: 2px solid #2f6f4f; border-radius: 4px; }
"""


def elided(text: str, limit: int = CHIP_NAME_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True)
class MethodChoice:
    key: str
    label: str
    tooltip: str = ""
    enabled: bool = True


def _dropped_image(event: QDragEnterEvent | QDropEvent) -> Path | None:
    mime = event.mimeData()
    if not mime.hasUrls():
        return None
    for url in mime.urls():
        if url.isLocalFile():
            path = Path(url.toLocalFile())
            if path.suffix.lower() in IMAGE_SUFFIXES and path.is_file():
                return path
    return None


class QueryBar(QWidget):
    searchRequested = Signal(str, object, str)  # text, image path or None, method key
    optionsRequested = Signal(str)  # method key
    imageChanged = Signal(object)  # the attached photo's path, or None when removed
    resultsFocusRequested = Signal()  # Down in the query field, not stepping through history

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("queryBar")
        self.setAcceptDrops(True)
        self._history: list[str] = []
        self._history_pos: int | None = None
        self._draft = ""
        self._image: Path | None = None

        self.method = QComboBox(self)
        self.method.setObjectName("methodPicker")
        self.method.setToolTip("Search method")
        self.method.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)

        self.options_button = QToolButton(self)
        self.options_button.setObjectName("methodOptionsButton")
        self.options_button.setText("⚙")
        self.options_button.setToolTip("Options of the chosen search method")
        self.options_button.clicked.connect(
            lambda: self.optionsRequested.emit(self.method_key() or "")
        )

        # The attached photo: thumbnail, name, and × to remove it.
        self.image_chip = QFrame(self)
        self.image_chip.setObjectName("imageChip")
        self.image_thumb = QLabel(self.image_chip)
        self.image_thumb.setObjectName("imageChipThumb")
        self.image_thumb.setFixedSize(CHIP_THUMB, CHIP_THUMB)
        self.image_thumb.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.image_name = QLabel(self.image_chip)
        self.image_name.setObjectName("imageChipName")
        # A long taxon name must not squeeze the query field to nothing on a small screen.
        self.image_name.setMaximumWidth(CHIP_NAME_MAX)
        self.image_clear = QToolButton(self.image_chip)
        self.image_clear.setObjectName("imageChipClear")
        self.image_clear.setText("×")
        self.image_clear.setAutoRaise(True)
        self.image_clear.setToolTip("Remove the photo from the query (Esc)")
        self.image_clear.setAccessibleName("Remove the query photo")
        self.image_clear.clicked.connect(self.clear_image)
        chip_layout = QHBoxLayout(self.image_chip)
        chip_layout.setContentsMargins(3, 2, 2, 2)
        chip_layout.setSpacing(5)
        chip_layout.addWidget(self.image_thumb)
        chip_layout.addWidget(self.image_name)
        chip_layout.addWidget(self.image_clear)
        self.image_chip.hide()

        self.edit = QLineEdit(self)
        self.edit.setObjectName("queryEdit")
        self.edit.setClearButtonEnabled(True)
        self.edit.setPlaceholderText("Loading…")
        self._status = (False, "Loading…")  # (ready, message): what the placeholder says
        self.edit.setMinimumWidth(EDIT_MIN)
        self.edit.returnPressed.connect(self.submit)
        self.edit.installEventFilter(self)
        self.edit.setAcceptDrops(False)  # a dropped photo is a query image, not text
        self.setFocusProxy(self.edit)

        self.search_button = QPushButton("Search", self)
        self.search_button.setObjectName("searchButton")
        self.search_button.setDefault(True)
        self.search_button.clicked.connect(self.submit)

        self.hint = QLabel(self)
        self.hint.setObjectName("queryHint")
        # Says when the grid shows another method's results than the picker names (its own
        # row, shown only then; elided, so it never widens the window).
        self.stale_note = ElidedLabel(self)
        self.stale_note.setObjectName("staleResultsNote")
        self.stale_note.hide()
        self.setStyleSheet(FOCUS_STYLE)

        row = self._row = QHBoxLayout()
        row.setSpacing(6)
        row.addWidget(self.method)
        row.addWidget(self.options_button)
        row.addWidget(self.edit, 1)
        row.addWidget(self.search_button)
        row.addWidget(self.hint)
        # The attached photo gets a row of its own under the query, so it never squeezes the
        # text field on a small screen and stays plainly visible.
        chip_row = QHBoxLayout()
        chip_row.setSpacing(6)
        chip_row.addWidget(self.image_chip)
        chip_row.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 8, 8, 8)
        layout.setSpacing(4)
        layout.addLayout(row)
        layout.addLayout(chip_row)
        layout.addWidget(self.stale_note)

    def add_tool(self, widget: QWidget) -> None:
        """Put `widget` (a button of another bar: Add filter) in the query row, after Search."""
        self._row.insertWidget(self._row.indexOf(self.search_button) + 1, widget)

    # -- configuration ------------------------------------------------------------------------

    def set_methods(self, methods: list[MethodChoice]) -> None:
        current = self.method.currentData()
        self.method.clear()
        for choice in methods:
            self.method.addItem(choice.label, choice.key)
            row = self.method.count() - 1
            self.method.setItemData(row, choice.tooltip, Qt.ItemDataRole.ToolTipRole)
            if not choice.enabled:
                item = self.method.model().item(row)  # type: ignore[attr-defined]
                item.setEnabled(False)
        if current is not None and (row := self.method.findData(current)) >= 0:
            self.method.setCurrentIndex(row)

    def set_method_key(self, key: str) -> bool:
        """Pick the method `key` without asking for a search; False (the picker unchanged)
        when it is not offered or cannot run here."""
        row = self.method.findData(key)
        item = self.method.model().item(row) if row >= 0 else None  # type: ignore[attr-defined]
        if item is None or not item.isEnabled():
            return False
        self.method.setCurrentIndex(row)
        return True

    def method_label(self, key: str) -> str:
        """The picker's name for the method `key` (the key itself when it is not offered)."""
        row = self.method.findData(key)
        return self.method.itemText(row) if row >= 0 else key

    def set_stale(self, text: str) -> None:
        """Say under the query that the results shown are not the picked method's ("" hides
        it)."""
        self.stale_note.setText(text)
        self.stale_note.setVisible(bool(text))

    def set_history(self, history: list[str]) -> None:
        self._history = list(history)
        self._history_pos = None

    def set_status(self, ready: bool, message: str) -> None:
        """Show whether searches can run yet (e.g. "Loading the model…")."""
        self._status = (ready, message)
        self.hint.setText("" if ready else message)
        self.hint.setVisible(False)  # the placeholder says it; kept for tests and tooltips
        self.edit.setToolTip(READY_HINTS[0] if ready else message)
        self._fit_placeholder()

    def _fit_placeholder(self) -> None:
        """The longest ready hint that fits the field (a laptop screen leaves it narrow), or
        the status message elided; the tooltip holds it whole."""
        ready, message = self._status
        metrics = self.edit.fontMetrics()
        # The text area: the field less its frame, padding and the clear button.
        room = self.edit.width() - PLACEHOLDER_SPARE
        if ready:
            fitting = [h for h in READY_HINTS if metrics.horizontalAdvance(h) <= room]
            text = fitting[0] if fitting else READY_HINTS[-1]
        else:
            text = metrics.elidedText(message, Qt.TextElideMode.ElideRight, max(room, 0))
        if text != self.edit.placeholderText():
            self.edit.setPlaceholderText(text)

    # -- query --------------------------------------------------------------------------------

    def text(self) -> str:
        return self.edit.text()

    def set_text(self, text: str) -> None:
        self.edit.setText(text)

    def method_key(self) -> str:
        return str(self.method.currentData() or "")

    def image(self) -> Path | None:
        return self._image

    def set_image(self, path: Path | None) -> None:
        """Attach `path` as the query photo (None: remove it). The chip shows the file name
        and a placeholder until `show_image_name` / `show_image_thumbnail` are called.
        Emits `imageChanged` when the photo changes."""
        if path == self._image:
            return
        self._image = path
        self.image_thumb.clear()
        if path is None:
            self.image_chip.hide()
        else:
            self.show_image_name(path, path.name)
            self.image_chip.show()
        self.imageChanged.emit(path)

    def show_image_name(self, path: Path, name: str) -> None:
        """Name the attached photo `path` in the chip (e.g. its taxon); ignored if another
        photo is attached by now."""
        if path != self._image:
            return
        self.image_name.setText(elided(name))
        self.image_chip.setToolTip(f"Query photo: {name}\n{path}")

    def show_image_thumbnail(self, path: Path, pixmap: QPixmap | None) -> None:
        """Show the thumbnail of the attached photo `path` (loaded by the controller)."""
        if path != self._image or pixmap is None or pixmap.isNull():
            return
        self.image_thumb.setPixmap(
            pixmap.scaled(
                CHIP_THUMB,
                CHIP_THUMB,
                Qt.AspectRatioMode.KeepAspectRatio,
                Qt.TransformationMode.SmoothTransformation,
            )
        )

    def image_label(self) -> str:
        """The name the chip shows (empty without a photo)."""
        return self.image_name.text() if self._image is not None else ""

    def clear_image(self) -> None:
        self.set_image(None)

    def focus_query(self) -> None:
        """Ctrl+L: the query field focused with its text selected, so what is typed next
        replaces the old query rather than joining it."""
        self.edit.setFocus(Qt.FocusReason.ShortcutFocusReason)
        self.edit.selectAll()

    def submit(self) -> None:
        self._history_pos = None
        self.searchRequested.emit(self.edit.text(), self._image, self.method_key())

    # -- history (Up/Down) and drops -------------------------------------------------------------

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802
        if watched is self.edit and event.type() == QEvent.Type.Resize:
            self._fit_placeholder()  # the field's width decides which hint fits
        if watched is self.edit and event.type() == QEvent.Type.KeyPress:
            # PySide hands a key press over as a QKeyEvent; the copy covers a bare QEvent.
            key = (
                event.key()
                if isinstance(event, QKeyEvent)
                else QKeyEvent(cast(QKeyEvent, event)).key()
            )
            if key == Qt.Key.Key_Up:
                self._step_history(-1)
                return True
            if key == Qt.Key.Key_Down:
                if self._history_pos is None:
                    self.resultsFocusRequested.emit()
                else:
                    self._step_history(1)
                return True
            if self._image is not None and (
                key == Qt.Key.Key_Escape or (key == Qt.Key.Key_Backspace and not self.edit.text())
            ):
                self.clear_image()
                return True
        return super().eventFilter(watched, event)

    def _step_history(self, step: int) -> None:
        if not self._history:
            return
        if self._history_pos is None:
            if step > 0:
                return
            self._draft = self.edit.text()
            self._history_pos = len(self._history)
        pos = self._history_pos + step
        if pos >= len(self._history):
            self._history_pos = None
            self.edit.setText(self._draft)
            return
        self._history_pos = max(0, pos)
        self.edit.setText(self._history[self._history_pos])

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:  # noqa: N802
        if _dropped_image(event) is not None:
            event.acceptProposedAction()
        else:
            event.ignore()

    def dropEvent(self, event: QDropEvent) -> None:  # noqa: N802
        path = _dropped_image(event)
        if path is None:
            event.ignore()
            return
        event.acceptProposedAction()
        self.set_image(path)
        self.submit()
