"""The window's one place for messages a person must be able to read: a band under the query
bar for errors and for outcomes that matter (a file written, an export refused), wrapped and
never cut, until it is closed or replaced. The status line keeps the passing news ("Searching…").
"""

from __future__ import annotations

from PySide6.QtCore import QRect, Qt, Signal
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

ERROR, WARNING, DONE = "error", "warning", "done"  # what a message is; its colours follow
BANNER_LINES = 3  # lines of text shown at most; a longer message scrolls inside the band
# The most height the band takes (title, three lines, margins): the window plans room for it.
BANNER_MAX_HEIGHT = 96


class MessageBanner(QFrame):
    """Shows one message (kind, title, text) at a time; × closes it. The text is plain,
    wrapped, selectable and scrolls when longer than `BANNER_LINES` lines, so a 2,000-character
    query or a path on a full disk is read whole rather than cut at the window's edge."""

    closed = Signal()
    logRequested = Signal()  # "Open the log folder" (an unexpected error's details are there)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("messageBanner")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Maximum)
        self._kind = DONE
        self.title = QLabel(self)
        self.title.setObjectName("messageTitle")
        self.title.setWordWrap(True)
        self.text = QPlainTextEdit(self)
        self.text.setObjectName("messageText")
        self.text.setReadOnly(True)
        self.text.setFrameShape(QFrame.Shape.NoFrame)
        self.text.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.text.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)
        self.text.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.text.viewport().setAutoFillBackground(False)
        self.log_button = QToolButton(self)
        self.log_button.setObjectName("messageLogButton")
        self.log_button.setText("Log…")
        self.log_button.setToolTip("Open the log folder: the details of this error are there")
        self.log_button.clicked.connect(self.logRequested)
        self.close_button = QToolButton(self)
        self.close_button.setObjectName("messageCloseButton")
        self.close_button.setText("×")
        self.close_button.setToolTip("Close this message")
        self.close_button.clicked.connect(self.dismiss)
        words = QVBoxLayout()
        words.setContentsMargins(0, 0, 0, 0)
        words.setSpacing(0)
        words.addWidget(self.title)
        words.addWidget(self.text)
        row = QHBoxLayout(self)
        row.setContentsMargins(8, 4, 4, 4)
        row.addLayout(words, 1)
        row.addWidget(self.log_button, 0, Qt.AlignmentFlag.AlignTop)
        row.addWidget(self.close_button, 0, Qt.AlignmentFlag.AlignTop)
        self.setMaximumHeight(BANNER_MAX_HEIGHT)
        self.hide()

    def kind(self) -> str:
        return self._kind

    def message(self) -> str:
        """The whole text of the message shown ("" when none is)."""
        return self.text.toPlainText() if not self.isHidden() else ""

    def show_message(self, kind: str, title: str, text: str, *, log: bool = False) -> None:
        """Show `text` under `title` (either may be ""), replacing any message shown; `log`
        offers the log folder (an unexpected error)."""
        self._kind = kind
        self.setProperty("kind", kind)  # the style sheet colours the band by kind
        self.style().unpolish(self)
        self.style().polish(self)
        self.title.setText(title)
        self.title.setVisible(bool(title))
        self.text.setPlainText(text)
        self.text.setVisible(bool(text))
        self.log_button.setVisible(log)
        self.show()
        self._fit_text()

    def dismiss_titled(self, title: str) -> None:
        """Close the message if it is the one titled `title` (it no longer holds)."""
        if self.title.text() == title:
            self.dismiss()

    def dismiss(self) -> None:
        if not self.isHidden():
            self.hide()
            self.closed.emit()

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802
        super().resizeEvent(event)
        self._fit_text()

    def _fit_text(self) -> None:
        """The text field as tall as its wrapped lines, up to `BANNER_LINES` (then it scrolls)."""
        metrics = self.text.fontMetrics()
        margin = round(self.text.document().documentMargin())
        width = max(40, self.text.viewport().width() - 2 * margin)
        wrapped = metrics.boundingRect(
            QRect(0, 0, width, 1_000_000),
            int(Qt.TextFlag.TextWordWrap | Qt.TextFlag.TextWrapAnywhere),
            self.text.toPlainText(),
        )
        line = metrics.lineSpacing()
        lines = max(1, min(BANNER_LINES, -(-wrapped.height() // line)))
        # The top margin and whole lines: no sliver of a next line shows under the last.
        self.text.setFixedHeight(margin + lines * line + 1)
