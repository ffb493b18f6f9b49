"""The query bar: a method picker with its options button, the query text, an optional query
image, and history.

Emits `searchRequested(text, image_path_or_None, method_key)`; it decides nothing about how a
search runs. Methods are given as `MethodChoice`s, so new ones only add an entry.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QEvent, QObject, Qt, Signal
from PySide6.QtGui import QDragEnterEvent, QDropEvent, QKeyEvent, QPixmap
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QToolButton,
    QWidget,
)

IMAGE_SUFFIXES = frozenset(
    {".jpg", ".jpeg", ".png", ".webp", ".tif", ".tiff", ".bmp", ".gif", ".heic"}
)


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

        self.image_chip = QToolButton(self)
        self.image_chip.setObjectName("imageChip")
        self.image_chip.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.image_chip.setToolTip("Query image: click to remove")
        self.image_chip.clicked.connect(self.clear_image)
        self.image_chip.hide()

        self.edit = QLineEdit(self)
        self.edit.setObjectName("queryEdit")
        self.edit.setClearButtonEnabled(True)
        self.edit.setPlaceholderText("Loading…")
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

        layout = QHBoxLayout(self)
        layout.setContentsMargins(8, 8, 8, 8)
        layout.setSpacing(6)
        layout.addWidget(self.method)
        layout.addWidget(self.options_button)
        layout.addWidget(self.image_chip)
        layout.addWidget(self.edit, 1)
        layout.addWidget(self.search_button)
        layout.addWidget(self.hint)

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

    def set_history(self, history: list[str]) -> None:
        self._history = list(history)
        self._history_pos = None

    def set_status(self, ready: bool, message: str) -> None:
        """Show whether searches can run yet (e.g. "Loading the model…")."""
        self.edit.setPlaceholderText(
            message
            if not ready
            else "Describe what to find, e.g. “a red circle”, or drop a photo here"
        )
        self.hint.setText("" if ready else message)
        self.hint.setVisible(False)  # the placeholder says it; kept for tests and tooltips
        self.edit.setToolTip("" if ready else message)

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
        self._image = path
        if path is None:
            self.image_chip.hide()
            return
        pixmap = QPixmap(str(path))
        if not pixmap.isNull():
            self.image_chip.setIcon(pixmap.scaled(28, 28, Qt.AspectRatioMode.KeepAspectRatio))
        name = path.name if len(path.name) <= 24 else path.name[:21] + "…"
        self.image_chip.setText(f"{name}  ✕")
        self.image_chip.show()

    def clear_image(self) -> None:
        self.set_image(None)

    def submit(self) -> None:
        self._history_pos = None
        self.searchRequested.emit(self.edit.text(), self._image, self.method_key())

    # -- history (Up/Down) and drops -------------------------------------------------------------

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802
        if watched is self.edit and event.type() == QEvent.Type.KeyPress:
            key = QKeyEvent(event).key() if not isinstance(event, QKeyEvent) else event.key()
            if key == Qt.Key.Key_Up:
                self._step_history(-1)
                return True
            if key == Qt.Key.Key_Down:
                self._step_history(1)
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
