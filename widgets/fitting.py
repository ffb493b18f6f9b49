"""Widgets that never make their window grow: a one-line label elided to the width it gets
(whole in its tooltip), and a scroll area that lends its contents height rather than asking
the window for it."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, QSize, Qt, Signal
from PySide6.QtGui import QPainter, QPaintEvent, QResizeEvent
from PySide6.QtWidgets import QFrame, QLabel, QScrollArea, QSizePolicy, QVBoxLayout, QWidget


class ElidedLabel(QLabel):
    """One line that never widens its layout: elided (at the right, or where `mode` says)
    when too long, the whole text in its tooltip. `text()` stays the whole text."""

    def __init__(
        self,
        parent: QWidget | None = None,
        mode: Qt.TextElideMode = Qt.TextElideMode.ElideRight,
    ) -> None:
        super().__init__(parent)
        self._mode = mode
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)

    def setText(self, text: str) -> None:  # noqa: N802
        super().setText(text)
        self.setToolTip(text)

    def minimumSizeHint(self) -> QSize:  # noqa: N802
        return QSize(0, super().minimumSizeHint().height())

    def shown_text(self) -> str:
        """The text as painted at the label's current width."""
        return self.fontMetrics().elidedText(self.text(), self._mode, self.contentsRect().width())

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802
        # QLabel would paint the whole text clipped; paint the elided one instead.
        painter = QPainter(self)
        painter.setPen(self.palette().color(self.foregroundRole()))
        painter.drawText(
            self.contentsRect(),
            int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter),
            self.shown_text(),
        )


class VerticalScroll(QScrollArea):
    """Its contents at full width, scrolled up and down when the window has less height than
    they would like: it asks for their minimum width (so nothing is cut at the side) but at
    most `least_height` pixels of height, and never more height than they would like at the
    width they have (a row of chips that wraps onto two lines wants two lines, not the six it
    would need at its narrowest)."""

    def __init__(self, contents: QWidget, least_height: int, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.least_height = least_height
        self._wanted = -1
        self.setWidget(contents)
        # The contents are sized here (`_place_contents`): Qt's resizable scroll area gives
        # contents that wrap text their preferred height, scrolling a pane that would fit.
        self.setWidgetResizable(False)
        contents.installEventFilter(self)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)

    def _scrollbar_width(self) -> int:
        return self.verticalScrollBar().sizeHint().width()

    def wanted_height(self) -> int:
        """The height the contents would like at the width they have now."""
        contents = self.widget()
        if contents is None:
            return 0
        width = self.viewport().width()
        if contents.hasHeightForWidth() and width > 0 and self.isVisible():
            return max(0, contents.heightForWidth(width))
        return contents.sizeHint().height()

    def minimumSizeHint(self) -> QSize:  # noqa: N802
        contents = self.widget()
        width = contents.minimumSizeHint().width() if contents is not None else 0
        return QSize(width + self._scrollbar_width(), min(self.least_height, self.wanted_height()))

    def sizeHint(self) -> QSize:  # noqa: N802
        contents = self.widget()
        if contents is None:
            return QSize(0, 0)
        hint = contents.sizeHint()
        return QSize(hint.width() + self._scrollbar_width(), self.wanted_height())

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802
        super().resizeEvent(event)
        self._place_contents()
        wanted = self.wanted_height()
        if wanted != self._wanted:  # wrapped onto more or fewer lines at the new width
            self._wanted = wanted
            self.updateGeometry()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802
        if watched is self.widget() and event.type() == QEvent.Type.LayoutRequest:
            self._place_contents()
        return super().eventFilter(watched, event)

    def _place_contents(self) -> None:
        """The contents at the viewport's width and its height, or their least height at that
        width when that is more (then they scroll)."""
        contents = self.widget()
        if contents is None:
            return
        width = max(self.viewport().width(), contents.minimumSizeHint().width())
        layout = contents.layout()
        if layout is not None and layout.hasHeightForWidth():
            least = layout.totalMinimumHeightForWidth(width)
        else:
            least = contents.minimumSizeHint().height()
        height = max(self.viewport().height(), least)
        if contents.size() != QSize(width, height):
            contents.resize(width, height)


class PanelStack(VerticalScroll):
    """Panels one above the other that scroll together (see `VerticalScroll`), shown only while
    one of them is: a panel's own `show()` / `hide()` says whether it is wanted."""

    shownChanged = Signal(bool)  # the stack appeared (True) or went (False)

    def __init__(self, panels: list[QWidget], least_height: int, parent: QWidget | None = None):
        contents = QWidget()
        contents.setObjectName("panelStackContents")
        layout = QVBoxLayout(contents)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        for panel in panels:
            layout.addWidget(panel)
        layout.addStretch(1)
        super().__init__(contents, least_height, parent)
        self._panels = panels
        for panel in panels:
            panel.installEventFilter(self)
        self._follow_panels()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802
        panels = getattr(self, "_panels", [])  # QScrollArea filters its contents' events too
        if watched in panels and event.type() in (
            QEvent.Type.ShowToParent,
            QEvent.Type.HideToParent,
        ):
            self._follow_panels()
        return super().eventFilter(watched, event)

    def _follow_panels(self) -> None:
        wanted = any(not panel.isHidden() for panel in self._panels)
        changed = wanted == self.isHidden()
        self.setVisible(wanted)
        self.updateGeometry()
        if changed:
            self.shownChanged.emit(wanted)
