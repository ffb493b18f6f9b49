"""Twelve bars, January to December: in which months of the year the results were observed
(all years together), with how many results have no date under them.

Clicking a bar chooses that month, dragging across bars chooses the months between, and
Shift+click chooses from the last month clicked forwards to this one, round the year end if
need be (November, then Shift+click February: November–February). Each choice emits
`monthsChosen(first, last)` (1–12; first > last wraps round the year end).
"""

from __future__ import annotations

from PySide6.QtCore import QPointF, QRectF, QSize, Qt, Signal
from PySide6.QtGui import QColor, QMouseEvent, QPainter, QPaintEvent
from PySide6.QtWidgets import QSizePolicy, QWidget

MONTH_NAMES = (
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
)  # fmt: skip
BAR = QColor("#6f9c85")
BAR_CHOSEN = QColor("#e8a317")
CHOSEN_BACKGROUND = QColor(232, 163, 23, 40)
EMPTY_BAR = QColor("#dfe4e7")
TEXT = QColor("#3c454c")
MUTED = QColor("#6b757e")


def months_between(first: int, last: int) -> list[int]:
    """The months from `first` to `last` (1–12), round the year end when first > last."""
    count = (last - first) % 12 + 1
    return [(first - 1 + i) % 12 + 1 for i in range(count)]


def month_range_label(months: tuple[int, int]) -> str:
    """ "Jun–Aug", "Nov–Feb", or "Jun" for one month."""
    first, last = months
    if first == last:
        return MONTH_NAMES[first - 1]
    return f"{MONTH_NAMES[first - 1]}–{MONTH_NAMES[last - 1]}"


class MonthHistogram(QWidget):
    """Counts per month of the year as bars; click or drag to choose months."""

    monthsChosen = Signal(int, int)  # first, last (1-12)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("monthHistogram")
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self.setToolTip(
            "Observation months of the results, all years together. Click a month or drag "
            "across months to keep only those; Shift+click runs on round the year end."
        )
        self._counts = [0] * 12
        self._undated = 0
        self._chosen: tuple[int, int] | None = None
        self._anchor: int | None = None  # the month a drag started on, or last clicked
        self._dragging: int | None = None  # the month under the pointer while dragging

    # -- data --------------------------------------------------------------------------------

    def set_counts(self, counts: list[int], undated: int = 0) -> None:
        """Twelve counts, January first, and how many results have no date."""
        if len(counts) != 12:
            raise ValueError("twelve month counts are needed")
        self._counts = [int(c) for c in counts]
        self._undated = int(undated)
        self.update()

    def counts(self) -> list[int]:
        return list(self._counts)

    def undated(self) -> int:
        return self._undated

    def set_chosen(self, months: tuple[int, int] | None) -> None:
        """The months filter to highlight (first, last), or None."""
        self._chosen = tuple(months) if months is not None else None  # type: ignore[assignment]
        self.update()

    def chosen_months(self) -> list[int]:
        if self._chosen is None:
            return []
        return months_between(*self._chosen)

    def footer(self) -> str:
        """The line under the bars."""
        return f"{self._undated:,} without a date"

    # -- geometry ----------------------------------------------------------------------------

    def _plot(self) -> QRectF:
        line = self.fontMetrics().height()
        # Room above for the counts, below for the month names and the footer.
        return QRectF(4, line + 2, self.width() - 8, self.height() - 3 * line - 8)

    def bar_slot(self, month: int) -> QRectF:
        """The column of `month` (1-12): where its bar stands and where it is clicked."""
        plot = self._plot()
        width = plot.width() / 12
        return QRectF(plot.left() + (month - 1) * width, plot.top(), width, plot.height())

    def bar_rect(self, month: int) -> QRectF:
        """The bar of `month` (1-12) as painted (zero height when no result is from then)."""
        slot = self.bar_slot(month)
        highest = max(self._counts) or 1
        height = slot.height() * self._counts[month - 1] / highest
        gap = max(1.0, slot.width() * 0.15)
        return QRectF(slot.left() + gap / 2, slot.bottom() - height, slot.width() - gap, height)

    def month_at(self, x: float) -> int:
        """The month whose column holds x (clamped to January and December)."""
        plot = self._plot()
        index = int((x - plot.left()) / max(plot.width() / 12, 1e-6))
        return max(1, min(12, index + 1))

    # -- painting ----------------------------------------------------------------------------

    def sizeHint(self) -> QSize:  # noqa: N802
        return QSize(300, 170)

    def minimumSizeHint(self) -> QSize:  # noqa: N802
        line = self.fontMetrics().height()
        return QSize(12 * 14, 4 * line + 30)

    def _shown_choice(self) -> list[int]:
        if self._dragging is not None and self._anchor is not None:
            first, last = sorted((self._anchor, self._dragging))
            return months_between(first, last)
        return self.chosen_months()

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        metrics = self.fontMetrics()
        line = metrics.height()
        chosen = set(self._shown_choice())
        plot = self._plot()
        painter.setPen(QColor("#c3cad0"))
        painter.drawLine(QPointF(plot.left(), plot.bottom()), QPointF(plot.right(), plot.bottom()))
        slot_width = plot.width() / 12
        # Three-letter names when they fit, else initials.
        short = metrics.horizontalAdvance("May") + 4 > slot_width
        for month in range(1, 13):
            slot, bar = self.bar_slot(month), self.bar_rect(month)
            count = self._counts[month - 1]
            colour = BAR_CHOSEN if month in chosen else BAR
            painter.setPen(Qt.PenStyle.NoPen)
            if month in chosen:  # the chosen months' columns, empty ones included
                painter.setBrush(CHOSEN_BACKGROUND)
                painter.drawRect(slot)
            painter.setBrush(colour if count else EMPTY_BAR)
            painter.drawRect(
                bar if count else QRectF(bar.left(), slot.bottom() - 2, bar.width(), 2)
            )
            painter.setPen(TEXT)
            count_text = f"{count:,}"
            if metrics.horizontalAdvance(count_text) <= slot_width + 2:
                painter.drawText(
                    QRectF(slot.left() - 4, bar.top() - line - 1, slot.width() + 8, line),
                    int(Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignBottom),
                    count_text,
                )
            name = MONTH_NAMES[month - 1]
            painter.setPen(TEXT if month in chosen or not chosen else MUTED)
            painter.drawText(
                QRectF(slot.left() - 4, plot.bottom() + 2, slot.width() + 8, line),
                int(Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignTop),
                name[0] if short else name,
            )
        painter.setPen(MUTED)
        painter.drawText(
            QRectF(plot.left(), plot.bottom() + line + 4, plot.width(), line + 2),
            int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop),
            self.footer(),
        )

    # -- mouse -------------------------------------------------------------------------------

    def mousePressEvent(self, event: QMouseEvent) -> None:  # noqa: N802
        if event.button() != Qt.MouseButton.LeftButton:
            return
        month = self.month_at(event.position().x())
        if event.modifiers() & Qt.KeyboardModifier.ShiftModifier and self._anchor is not None:
            # Forwards from the last month clicked, round the year end if need be.
            self.monthsChosen.emit(self._anchor, month)
            self._dragging = None
            return
        self._anchor = month
        self._dragging = month
        self.update()

    def mouseMoveEvent(self, event: QMouseEvent) -> None:  # noqa: N802
        if self._dragging is not None:
            self._dragging = self.month_at(event.position().x())
            self.update()

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:  # noqa: N802
        if self._dragging is None or self._anchor is None:
            return
        end = self.month_at(event.position().x())
        self._dragging = None
        first, last = sorted((self._anchor, end))
        self.update()
        self.monthsChosen.emit(first, last)
