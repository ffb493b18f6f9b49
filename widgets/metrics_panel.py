"""The live metrics panel: the current run's P@k, R@k, AP@k, nDCG@k, RR and judged@k, every
run of the query side by side, a precision-at-rank chart and the stop-rule indicator.

The panel only shows numbers it is given (`MetricsView`); the judging controller computes them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from PySide6.QtCore import QEvent, QPointF, QRectF, QSize, Qt, Signal
from PySide6.QtGui import (
    QColor,
    QFont,
    QFontMetrics,
    QHelpEvent,
    QPainter,
    QPainterPath,
    QPaintEvent,
    QPen,
    QResizeEvent,
)
from PySide6.QtWidgets import (
    QAbstractItemView,
    QBoxLayout,
    QComboBox,
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QMenu,
    QSizePolicy,
    QToolButton,
    QToolTip,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from widgets.fitting import ElidedLabel, VerticalScroll

K_CHOICES = (10, 20, 50, 100)
# (key in RunMetrics.values, label before "@k" or alone, shown as a percentage?)
METRICS: tuple[tuple[str, str, bool], ...] = (
    ("P", "P@{k}", False),
    ("R_at_k", "R@{k}", False),
    ("AP", "AP@{k}", False),
    ("nDCG", "nDCG@{k}", False),
    ("RR", "RR@{k}", False),
    ("judged", "judged@{k}", True),
)
LEGEND_SHARE = 0.45  # of the chart's width at most, so the curves keep the rest
LEGEND_BELOW_SHARE = 0.45  # of its height at most, for a legend under the curves (in a column)
NARROW_CHART_HEIGHT = 220  # px: a chart with its legend under it, in a column
LEGEND_MIN_TEXT = 90  # px; a legend's text is never narrower
LEGEND_LINES = 4  # a run label wraps onto this many lines before it is elided
LEGEND_SWATCH = 26  # px before the text: the line sample and its gap
RUN_NAME_MIN = 90  # px: the Run column's least width (the name elided in the middle)
NARROW_RUN_NAME_MIN = 64  # px: the same in a column beside the grid
RUN_LABEL_MAX = 240  # px: the most the Run column asks for
CHART_MIN = QSize(180, 120)  # px
PANEL_LEAST_HEIGHT = 64  # px: the panel scrolls rather than ask the window for more
WIDE_PANEL = 800  # px; narrower panels show the metric tiles in two columns, not three
NARROW_THREE = 230  # px: in a column, the tiles in three columns from this width
TABLE_COLUMNS = ("AP", "nDCG", "P", "judged")  # the runs table keeps to what fits beside the chart
NARROW_TABLE_COLUMNS = ("AP", "nDCG", "P")  # in a column (judged@k is a tile above it)
NARROW_TABLE_ROWS = 5  # runs the table shows in a column before it scrolls
RUN_COLOURS = ("#2f6f4f", "#c0392b", "#2b6cb0", "#b7791f", "#6b46c1", "#2c7a7b")


def legend_lines(label: str, metrics: QFontMetrics, width: int, max_lines: int) -> list[str]:
    """`label` wrapped at spaces into at most `max_lines` lines of `width` px. A word longer
    than a line, or what is left for the last line, is elided in the middle (both ends of a
    file name or a time say more than its middle)."""
    words: list[str] = []
    for word in label.split(" "):
        if word == "·" and words:
            words[-1] += " ·"  # a line may end with the separator, never start with it
        elif word:
            words.append(word)
    lines: list[str] = []
    current = ""
    number = 0
    while number < len(words):
        if len(lines) == max_lines - 1:
            rest = " ".join(([current] if current else []) + words[number:])
            lines.append(metrics.elidedText(rest, Qt.TextElideMode.ElideMiddle, width))
            return lines
        candidate = f"{current} {words[number]}" if current else words[number]
        if metrics.horizontalAdvance(candidate) <= width:
            current, number = candidate, number + 1
        elif current:  # the word starts the next line
            lines.append(current)
            current = ""
        else:  # a word longer than a line
            lines.append(metrics.elidedText(candidate, Qt.TextElideMode.ElideMiddle, width))
            number += 1
    if current:
        lines.append(current)
    return lines


def format_metric(value: float, percent: bool = False) -> str:
    return f"{value:.0%}" if percent else f"{value:.3f}"


NOT_YET = "—"
"""What a metric shows while nothing of the query is judged: 0.000 would read as a result."""


def shown_metric(key: str, value: float, percent: bool, judged: int) -> str:
    """A metric as the panel shows it: "—" until a photo of the query is judged (judged@k
    itself is a plain fact even then: 0 %)."""
    if judged == 0 and key != "judged":
        return NOT_YET
    return format_metric(value, percent)


@dataclass(frozen=True)
class RunMetrics:
    """One run's numbers at the panel's k."""

    run_id: int
    method: str
    label: str  # e.g. "text · 14:03"
    values: dict[str, float]  # keys of METRICS
    curve: list[float]  # P@i for i = 1..min(k, len(run))
    trailing_nonrelevant: int
    last_relevant_rank: int | None


@dataclass(frozen=True)
class MetricsView:
    """Everything the panel shows, for one query."""

    title: str
    k: int
    relevant: int  # R: judged relevant under any method
    judged: int
    current_run_id: int | None
    runs: list[RunMetrics] = field(default_factory=list)
    judgments_note: str = ""  # whose judgments the numbers use ("newest judgment per photo")

    @property
    def current(self) -> RunMetrics | None:
        return next((r for r in self.runs if r.run_id == self.current_run_id), None)


class PrecisionChart(QWidget):
    """Precision at rank 1..k, one line per run (plain QPainter)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("precisionChart")
        self.setMinimumSize(CHART_MIN)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self._runs: list[RunMetrics] = []
        self._current: int | None = None
        self._k = 10
        self._legend_rects: list[tuple[QRectF, str]] = []  # where each label was painted
        # Under the curves rather than beside them: in a column the chart is tall and narrow.
        self.legend_below = False

    def set_runs(self, runs: Sequence[RunMetrics], current: int | None, k: int) -> None:
        self._runs, self._current, self._k = list(runs), current, k
        self.update()

    def runs(self) -> list[RunMetrics]:
        return list(self._runs)

    def sizeHint(self) -> QSize:  # noqa: N802
        return QSize(420, 170)

    def _chart_font(self, bold: bool = False) -> QFont:
        font = QFont(self.font())
        font.setPointSizeF(max(7.0, font.pointSizeF() * 0.85))
        font.setBold(bold)
        return font

    def legend(self) -> list[list[str]]:
        """Each run's label as the legend shows it at the chart's current size: wrapped onto
        up to two lines, elided in the middle only where it still does not fit (the whole
        label is the legend entry's tooltip)."""
        metrics = QFontMetrics(self._chart_font(bold=True))  # the current run's is bold
        natural = max((metrics.horizontalAdvance(r.label) for r in self._runs), default=0)
        line_height = metrics.height()
        if self.legend_below:
            room = max(LEGEND_MIN_TEXT, self.width() - LEGEND_SWATCH - 16)
            height = round(self.height() * LEGEND_BELOW_SHARE)
        else:
            room = max(LEGEND_MIN_TEXT, round(self.width() * LEGEND_SHARE) - LEGEND_SWATCH)
            height = self.height() - 8 - line_height - 8
        width = min(natural, room)
        for max_lines in range(LEGEND_LINES, 0, -1):
            entries = [legend_lines(r.label, metrics, width, max_lines) for r in self._runs]
            used = sum(len(lines) * line_height + 4 for lines in entries)
            if used <= height:
                break
        return entries

    def event(self, event: QEvent) -> bool:
        if event.type() == QEvent.Type.ToolTip and isinstance(event, QHelpEvent):
            label = next((t for r, t in self._legend_rects if r.contains(event.pos())), "")
            if label:
                QToolTip.showText(event.globalPos(), label, self)
            else:
                QToolTip.hideText()
                event.ignore()
            return True
        return super().event(event)

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing, True)
        painter.fillRect(self.rect(), QColor("#ffffff"))
        font = self._chart_font()
        painter.setFont(font)
        metrics = painter.fontMetrics()
        left, top = metrics.horizontalAdvance("1.0") + 10, 8
        bottom = metrics.height() + 8
        entries = self.legend()
        widest = QFontMetrics(self._chart_font(bold=True))
        legend_w = max(
            (widest.horizontalAdvance(t) + LEGEND_SWATCH for lines in entries for t in lines),
            default=0,
        )
        self._legend_rects = []
        if self.legend_below:
            used = sum(len(lines) * metrics.height() + 4 for lines in entries)
            below = min(used, round(self.height() * LEGEND_BELOW_SHARE))
            plot = QRectF(
                left,
                top,
                max(10.0, self.width() - left - 12),
                max(10.0, self.height() - top - bottom - below - 6),
            )
        else:
            plot = QRectF(
                left,
                top,
                max(10.0, self.width() - left - legend_w - 14),
                self.height() - top - bottom,
            )
        axis = QColor("#9aa3ab")
        painter.setPen(QPen(QColor("#e6e9ec"), 1))
        for fraction in (0.25, 0.5, 0.75, 1.0):
            y = plot.bottom() - fraction * plot.height()
            painter.drawLine(QPointF(plot.left(), y), QPointF(plot.right(), y))
        painter.setPen(QPen(axis, 1))
        painter.drawLine(plot.bottomLeft(), plot.bottomRight())
        painter.drawLine(plot.bottomLeft(), plot.topLeft())
        painter.setPen(QColor("#5b6570"))
        for fraction, text in ((0.0, "0"), (0.5, ".5"), (1.0, "1.0")):
            y = plot.bottom() - fraction * plot.height()
            painter.drawText(
                QRectF(0, y - metrics.height() / 2, left - 4, metrics.height()),
                Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter,
                text,
            )
        k = max(1, self._k)

        def x_of(rank: int) -> float:
            return plot.left() + (rank - 1) / max(1, k - 1) * plot.width()

        for rank in sorted({1, (k + 1) // 2, k}):
            x = x_of(rank)
            painter.drawText(
                QRectF(x - 20, plot.bottom() + 2, 40, metrics.height()),
                Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignTop,
                str(rank),
            )
        if not self._runs:
            painter.drawText(plot, Qt.AlignmentFlag.AlignCenter, "precision at rank")
            return
        y = float(top) if not self.legend_below else plot.bottom() + bottom + 2
        legend_full = False
        for number, run in enumerate(self._runs):
            colour = QColor(RUN_COLOURS[number % len(RUN_COLOURS)])
            current = run.run_id == self._current
            painter.setPen(QPen(colour, 2.4 if current else 1.4))
            path = QPainterPath()
            for rank, precision in enumerate(run.curve[:k], start=1):
                point = QPointF(x_of(rank), plot.bottom() - precision * plot.height())
                if rank == 1:
                    path.moveTo(point)
                else:
                    path.lineTo(point)
            painter.setBrush(Qt.BrushStyle.NoBrush)
            painter.drawPath(path)
            if legend_full:
                continue
            lx = plot.right() + 12 if not self.legend_below else 8.0
            height = len(entries[number]) * metrics.height()
            later = len(self._runs) - number - 1
            if y + height + (metrics.height() if later else 0) > self.height() - 4:
                # No room for every entry (a dozen runs): the rest are named in a tooltip
                # rather than painted past the chart's edge.
                rest = [r.label for r in self._runs[number:]]
                painter.setPen(QColor("#5b6570"))
                painter.drawText(QPointF(lx, y + metrics.ascent()), f"+ {len(rest)} more")
                more = QRectF(lx, y, legend_w, metrics.height())
                self._legend_rects.append((more, "\n".join(rest)))
                legend_full = True
                continue
            painter.drawLine(
                QPointF(lx, y + metrics.height() / 2), QPointF(lx + 14, y + metrics.height() / 2)
            )
            painter.setPen(QColor("#2c3338"))
            bold = QFont(font)
            bold.setBold(current)
            painter.setFont(bold)
            for line_number, text in enumerate(entries[number]):
                baseline = y + line_number * metrics.height() + metrics.ascent()
                painter.drawText(QPointF(lx + 18, baseline), text)
            painter.setFont(font)
            self._legend_rects.append((QRectF(lx, y, legend_w, height), run.label))
            y += height + 4


class _RunsTable(QTreeWidget):
    """The runs table: it would like `preferred_width` (set as it is filled) and takes less."""

    preferred_width = 0

    def sizeHint(self) -> QSize:  # noqa: N802
        hint = super().sizeHint()
        return QSize(max(self.minimumWidth(), self.preferred_width), hint.height())


class MetricsPanel(QWidget):
    """Shows a `MetricsView`. Emits the user's choice of k and of the run to show."""

    kChanged = Signal(int)
    runSelected = Signal(int)  # run id
    refineRequested = Signal(str)  # the key of a method that learns from judgments

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("metricsPanel")
        self._view: MetricsView | None = None

        # A query of any length is one line here (elided, whole in the tooltip): its whole
        # text made the panel, and so the window, as wide as the query.
        self.title = ElidedLabel(self)
        self.title.setObjectName("metricsTitle")
        title_font = QFont(self.title.font())
        title_font.setBold(True)
        self.title.setFont(title_font)
        self.k_combo = QComboBox(self)
        self.k_combo.setObjectName("metricsK")
        for k in K_CHOICES:
            self.k_combo.addItem(f"k = {k}", k)
        self.k_combo.setToolTip("Cut-off rank of every metric")
        self.k_combo.currentIndexChanged.connect(
            lambda _row: self.kChanged.emit(int(self.k_combo.currentData()))
        )
        # R, judged, runs and whose judgments (per event, newest per photo, ...): one line,
        # elided, whole in its tooltip, so a long note never widens the panel.
        self.summary = ElidedLabel(self)
        self.summary.setObjectName("metricsSummary")
        # Learning from the judgments: Refine ▾ (one entry per learning method), and the
        # buttons of the window's Judge next and Sample to judge actions (set by the window).
        self.refine_menu = QMenu("&Refine", self)
        self.refine_menu.setObjectName("refineMenu")
        self.refine_button = QToolButton(self)
        self.refine_button.setObjectName("refineButton")
        self.refine_button.setText("Refine")
        self.refine_button.setMenu(self.refine_menu)
        self.refine_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.judge_next_button = QToolButton(self)
        self.judge_next_button.setObjectName("judgeNextButton")
        self.sample_button = QToolButton(self)
        self.sample_button.setObjectName("sampleButton")
        self.set_refine_methods([])
        # The header's rows: one in a band under the grid, four in a column beside it.
        self._header_rows = [QHBoxLayout() for _row in range(4)]
        header = QVBoxLayout()
        header.setSpacing(2)
        for row in self._header_rows:
            header.addLayout(row)

        self.tiles = tiles = QGridLayout()
        tiles.setHorizontalSpacing(14)
        tiles.setVerticalSpacing(2)
        self._tile_columns = 3
        value_font = QFont(self.font())
        value_font.setPointSizeF(value_font.pointSizeF() * 1.45)
        value_font.setBold(True)
        self.names: dict[str, QLabel] = {}
        self.values: dict[str, QLabel] = {}
        for key, _label, _percent in METRICS:
            name = QLabel(self)
            name.setObjectName(f"metricName_{key}")
            name.setStyleSheet("color: #5b6570;")
            value = QLabel("—", self)
            value.setObjectName(f"metric_{key}")
            value.setFont(value_font)
            self.names[key], self.values[key] = name, value
        self._arrange_tiles(3)
        self.stop_rule = QLabel(self)
        self.stop_rule.setObjectName("stopRule")
        self.stop_rule.setWordWrap(True)
        # How many relevant photos the collection holds (from the judgments), beside the stop
        # rule: the two answers to "may I stop?".
        self.recall_estimate = QLabel(self)
        self.recall_estimate.setObjectName("recallEstimate")
        self.recall_estimate.setWordWrap(True)
        self.recall_estimate.hide()
        left = QVBoxLayout()
        left.addLayout(tiles)
        left.addWidget(self.stop_rule)
        left.addWidget(self.recall_estimate)
        left.addStretch(1)

        self.runs = _RunsTable(self)
        self.runs.setObjectName("runsTable")
        self.runs.setRootIsDecorated(False)
        self.runs.setUniformRowHeights(True)
        self.runs.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.runs.setToolTip(
            "Every method run for this query, on the same judgments; click to show"
        )
        self.runs.itemClicked.connect(self._run_clicked)
        self.runs.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.chart = PrecisionChart(self)

        # Everything scrolls up and down inside the dock, so a short dock cuts no line (the
        # stop rule and the estimate wrap) and the panel asks the window for no height.
        contents = QWidget(self)
        contents.setObjectName("metricsContents")
        # Side by side in a band; one above the other in a column (`set_narrow`).
        self.body = body = QBoxLayout(QBoxLayout.Direction.LeftToRight)
        body.addLayout(left, 0)
        self._line = QFrame(self)
        self._line.setFrameShape(QFrame.Shape.VLine)
        body.addWidget(self._line)
        # The table keeps the width its columns need; the chart takes the rest.
        body.addWidget(self.runs, 0)
        body.addWidget(self.chart, 1)
        layout = QVBoxLayout(contents)
        layout.setContentsMargins(8, 6, 8, 6)
        layout.addLayout(header)
        layout.addLayout(body, 1)
        self.scroll_area = VerticalScroll(contents, PANEL_LEAST_HEIGHT, self)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(self.scroll_area)
        self.narrow = False
        self._arrange_header()
        self.set_k_choice(K_CHOICES[0])
        self.show_metrics(None)

    def set_narrow(self, narrow: bool) -> None:
        """Lay the panel out for a column beside the grid (True: header on three rows, tiles,
        table and chart one above the other) or a band under it (False: side by side)."""
        if narrow == self.narrow:
            return
        self.narrow = narrow
        self.body.setDirection(
            QBoxLayout.Direction.TopToBottom if narrow else QBoxLayout.Direction.LeftToRight
        )
        self._line.setVisible(not narrow)
        self.chart.legend_below = narrow
        self.chart.setMinimumHeight(NARROW_CHART_HEIGHT if narrow else CHART_MIN.height())
        self._arrange_header()
        self._arrange_tiles(self._columns_for(self.width()))
        self._fill_runs(self._view)

    def _arrange_header(self) -> None:
        top, middle, third, fourth = self._header_rows
        for row in self._header_rows:
            while row.count():
                row.takeAt(0)
        buttons = [self.refine_button, self.judge_next_button, self.sample_button]
        if self.narrow:  # the three buttons in one row need more than the column's width
            top.addWidget(self.title, 1)
            top.addWidget(self.k_combo)
            middle.addWidget(self.summary, 1)
            for row, placed in ((third, buttons[:2]), (fourth, buttons[2:])):
                for button in placed:
                    row.addWidget(button)
                row.addStretch(1)
        else:
            top.addWidget(self.title, 1)
            top.addWidget(self.summary, 2)
            for button in buttons:
                top.addWidget(button)
            top.addWidget(self.k_combo)

    def _columns_for(self, width: int) -> int:
        return 3 if width >= (NARROW_THREE if self.narrow else WIDE_PANEL) else 2

    def _arrange_tiles(self, columns: int) -> None:
        """The metric tiles in `columns` columns (two on narrow panels, three on wide)."""
        self._tile_columns = columns
        for number, (key, _label, _percent) in enumerate(METRICS):
            row = number // columns * 2
            self.tiles.addWidget(self.names[key], row, number % columns)
            self.tiles.addWidget(self.values[key], row + 1, number % columns)

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802
        super().resizeEvent(event)
        columns = self._columns_for(event.size().width())
        if columns != self._tile_columns:
            self._arrange_tiles(columns)

    def clipped(self) -> list[str]:
        """Run labels the chart's legend cannot show whole at its current size."""
        return [
            f"legend “{run.label}” shown as “{' '.join(lines)}”"
            for run, lines in zip(self.chart.runs(), self.chart.legend(), strict=True)
            if "…" in "".join(lines)
        ]

    def k(self) -> int:
        return int(self.k_combo.currentData())

    def set_refine_methods(self, choices: Sequence[tuple[str, str, str]]) -> None:
        """The Refine menu: one entry per (key, label, description); choosing one emits
        `refineRequested(key)`."""
        self.refine_menu.clear()
        for key, label, description in choices:
            action = self.refine_menu.addAction(label)
            action.setToolTip(description)
            action.setData(key)
            action.triggered.connect(lambda _checked=False, k=key: self.refineRequested.emit(k))
        self.refine_menu.setToolTipsVisible(True)
        self.refine_button.setVisible(bool(choices))

    def set_refine_enabled(self, enabled: bool, tooltip: str) -> None:
        """Refine can run (the open query has judgments), or why not, in the tooltip."""
        self.refine_button.setEnabled(enabled)
        self.refine_menu.menuAction().setEnabled(enabled)
        self.refine_button.setToolTip(tooltip)

    def set_recall_estimate(self, text: str, tooltip: str = "") -> None:
        """The recall estimate ("found 37 of about 45 (90 %: 40–55)"); "" hides it."""
        self.recall_estimate.setText(f"Estimate: {text}" if text else "")
        self.recall_estimate.setToolTip(tooltip)
        self.recall_estimate.setVisible(bool(text))

    def set_k_choice(self, k: int) -> None:
        row = self.k_combo.findData(k)
        if row >= 0 and row != self.k_combo.currentIndex():
            self.k_combo.blockSignals(True)
            self.k_combo.setCurrentIndex(row)
            self.k_combo.blockSignals(False)

    def view(self) -> MetricsView | None:
        return self._view

    def show_metrics(self, view: MetricsView | None) -> None:
        """Show `view` (None: no query open)."""
        self._view = view
        k = view.k if view is not None else self.k()
        for key, label, _percent in METRICS:
            self.names[key].setText(label.format(k=k))
        current = view.current if view is not None else None
        if view is None:
            self.title.setText("No query open — search, then mark photos with R / N / U")
            self.summary.setText("")
        else:
            self.title.setText(f"“{view.title}”")
            self.summary.setText(
                f"R = {view.relevant} relevant  ·  {view.judged} judged  ·  "
                f"{len(view.runs)} run{'s' * (len(view.runs) != 1)}"
                + (f"  ·  {view.judgments_note}" if view.judgments_note else "")
            )
        judged = view.judged if view is not None else 0
        for key, _label, percent in METRICS:
            self.values[key].setText(
                shown_metric(key, current.values[key], percent, judged)
                if current is not None
                else NOT_YET
            )
        self.stop_rule.setText(self._stop_rule_text(current))
        self._fill_runs(view)
        self.chart.set_runs(view.runs if view else [], view.current_run_id if view else None, k)

    @staticmethod
    def _stop_rule_text(run: RunMetrics | None) -> str:
        if run is None:
            return ""
        if run.last_relevant_rank is None:
            return "Stop rule: no relevant photo judged in this run yet"
        n = run.trailing_nonrelevant
        return (
            f"Stop rule: {n} non-relevant in a row after the last relevant "
            f"(rank {run.last_relevant_rank})"
        )

    def _fill_runs(self, view: MetricsView | None) -> None:
        self.runs.blockSignals(True)
        self.runs.clear()
        k = view.k if view is not None else self.k()
        labels = {key: label.format(k=k) for key, label, _p in METRICS}
        percent = {key: p for key, _label, p in METRICS}
        columns = NARROW_TABLE_COLUMNS if self.narrow else TABLE_COLUMNS
        # In a column the k is left out of the headings (it is in the tiles and the k box).
        headings = [labels[key].split("@")[0] if self.narrow else labels[key] for key in columns]
        self.runs.setColumnCount(1 + len(headings))
        self.runs.setHeaderLabels(["Run", *headings])
        header_item = self.runs.headerItem()
        for column, key in enumerate(columns, start=1):
            header_item.setToolTip(column, labels[key])
        if view is not None:
            for number, run in enumerate(view.runs):
                cells = [run.method] + [
                    shown_metric(key, run.values[key], percent[key], view.judged) for key in columns
                ]
                item = QTreeWidgetItem(cells)
                item.setToolTip(0, run.label)
                item.setData(0, Qt.ItemDataRole.UserRole, run.run_id)
                item.setForeground(0, QColor(RUN_COLOURS[number % len(RUN_COLOURS)]))
                for column in range(1, len(cells)):
                    item.setTextAlignment(column, Qt.AlignmentFlag.AlignRight)
                self.runs.addTopLevelItem(item)
                if run.run_id == view.current_run_id:
                    font = QFont(self.runs.font())
                    font.setBold(True)
                    for column in range(len(cells)):
                        item.setFont(column, font)
                    item.setSelected(True)
        header = self.runs.header()
        header.setStretchLastSection(False)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for column in range(1, self.runs.columnCount()):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
        # It would like every column's text (the Run column at most RUN_LABEL_MAX) and takes
        # what the chart leaves, down to the numbers plus RUN_NAME_MIN for the name: a long run
        # label (a method with many options) is elided in the middle, whole in its tooltip,
        # and never widens the panel or the window.
        widths = [
            max(self.runs.sizeHintForColumn(column), header.sectionSizeHint(column))
            for column in range(self.runs.columnCount())
        ]
        frame = 2 * self.runs.frameWidth() + self.runs.verticalScrollBar().sizeHint().width()
        numbers = sum(widths[1:]) + frame
        least = NARROW_RUN_NAME_MIN if self.narrow else RUN_NAME_MIN
        self.runs.setMinimumWidth(numbers + least)
        self.runs.preferred_width = numbers + max(least, min(widths[0], RUN_LABEL_MAX))
        if self.narrow:  # a few rows above the chart, the rest scrolled
            rows = min(max(1, self.runs.topLevelItemCount()), NARROW_TABLE_ROWS)
            first = self.runs.topLevelItem(0)
            row = self.runs.visualItemRect(first).height() if first is not None else 0
            row = row or self.runs.fontMetrics().height() + 6
            height = header.sizeHint().height() + rows * row + 2 * self.runs.frameWidth() + 2
            self.runs.setFixedHeight(height)
        else:
            self.runs.setMinimumHeight(0)
            self.runs.setMaximumHeight(16_777_215)
        self.runs.updateGeometry()
        self.runs.blockSignals(False)

    def _run_clicked(self, item: QTreeWidgetItem, _column: int) -> None:
        run_id = item.data(0, Qt.ItemDataRole.UserRole)
        if run_id is not None:
            self.runSelected.emit(int(run_id))
