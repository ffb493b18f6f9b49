"""Twenty-four bars, midnight to 23:00: at which hours of the day (the observer's local clock)
photos were taken, with how many have no time of day under them. A plain chart: it chooses
nothing (the hour is no search filter)."""

from __future__ import annotations

from PySide6.QtCore import QPointF, QRectF, QSize, Qt
from PySide6.QtGui import QPainter, QPaintEvent
from PySide6.QtWidgets import QSizePolicy, QWidget

from widgets.month_histogram import BAR, EMPTY_BAR, MUTED, TEXT

HOURS = 24
LABELLED_HOURS = (0, 6, 12, 18)  # the hours named under the axis (every hour would not fit)


class HourHistogram(QWidget):
    """Counts per hour of the day as bars (diel activity)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("hourHistogram")
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self.setToolTip(
            "Hours of the day the relevant photos were taken (the photographer's clock)."
        )
        self._counts = [0] * HOURS
        self._no_time = 0

    def set_counts(self, counts: list[int], no_time: int = 0) -> None:
        """Twenty-four counts, midnight first, and how many photos have no time of day."""
        if len(counts) != HOURS:
            raise ValueError("twenty-four hour counts are needed")
        self._counts = [int(c) for c in counts]
        self._no_time = int(no_time)
        self.update()

    def counts(self) -> list[int]:
        return list(self._counts)

    def no_time(self) -> int:
        return self._no_time

    def footer(self) -> str:
        """The line under the bars."""
        return f"{self._no_time:,} without a time of day"

    def _plot(self) -> QRectF:
        line = self.fontMetrics().height()
        # Room above for the highest count, below for the hour names and the footer.
        return QRectF(4, line + 2, self.width() - 8, self.height() - 3 * line - 8)

    def bar_rect(self, hour: int) -> QRectF:
        """The bar of `hour` (0-23) as painted (zero height when no photo is from then)."""
        plot = self._plot()
        width = plot.width() / HOURS
        highest = max(self._counts) or 1
        height = plot.height() * self._counts[hour] / highest
        gap = max(1.0, width * 0.15)
        left = plot.left() + hour * width + gap / 2
        return QRectF(left, plot.bottom() - height, width - gap, height)

    def sizeHint(self) -> QSize:  # noqa: N802
        return QSize(260, 170)

    def minimumSizeHint(self) -> QSize:  # noqa: N802
        line = self.fontMetrics().height()
        return QSize(HOURS * 6, 4 * line + 30)

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        line = self.fontMetrics().height()
        plot = self._plot()
        width = plot.width() / HOURS
        painter.setPen(MUTED)
        painter.drawLine(QPointF(plot.left(), plot.bottom()), QPointF(plot.right(), plot.bottom()))
        highest = max(self._counts)
        for hour, count in enumerate(self._counts):
            bar = self.bar_rect(hour)
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(BAR if count else EMPTY_BAR)
            painter.drawRect(
                bar if count else QRectF(bar.left(), plot.bottom() - 2, bar.width(), 2)
            )
            if count and count == highest:  # only the peak is labelled: 24 counts crowd
                painter.setPen(TEXT)
                painter.drawText(
                    QRectF(bar.center().x() - 30, bar.top() - line - 1, 60, line),
                    int(Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignBottom),
                    f"{count:,}",
                )
        painter.setPen(TEXT)
        for hour in LABELLED_HOURS:
            painter.drawText(
                QRectF(plot.left() + hour * width - 2, plot.bottom() + 2, 5 * width, line),
                int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop),
                f"{hour:02d}h",
            )
        painter.setPen(MUTED)
        painter.drawText(
            QRectF(plot.left(), plot.bottom() + line + 4, plot.width(), line + 2),
            int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop),
            self.footer(),
        )
