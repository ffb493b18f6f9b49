"""The "Where and when" tab: a choice between the results shown and the relevant photos of the
open query. Results: the map and the month histogram (filters are chosen on them). Relevant
photos: their map, months, hours of the day and commonest taxa, and "Export analyses…". The
widgets show what the analyses controller hands them; they count nothing themselves."""

from __future__ import annotations

from dataclasses import dataclass, field

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QButtonGroup,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QPushButton,
    QSizePolicy,
    QStackedWidget,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from widgets.hour_histogram import HOURS, HourHistogram
from widgets.map_view import MapPoint, MapView
from widgets.month_histogram import MonthHistogram

RESULTS, RELEVANT = 0, 1  # the pages of the choice


@dataclass
class RelevantView:
    """What the relevant-photos page shows: plain counts, worked out off the GUI thread."""

    title: str = ""
    points: list[MapPoint] = field(default_factory=list)
    without_place: int = 0
    place_note: str = ""  # places withheld or generalised, as an export would publish them
    months: list[int] = field(default_factory=lambda: [0] * 12)
    undated: int = 0
    hours: list[int] = field(default_factory=lambda: [0] * HOURS)
    no_time: int = 0
    taxa: list[tuple[str, int]] = field(default_factory=list)  # the commonest, with counts
    summary: str = "Open a query and judge photos relevant to see them here."


class RelevantPage(QWidget):
    """The relevant photos of the open query: map, months, hours, taxa, export."""

    exportRequested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("relevantPage")
        self.map_view = MapView(self)
        self.map_view.setObjectName("relevantMap")
        self.month_histogram = MonthHistogram(self)
        self.month_histogram.setObjectName("relevantMonths")
        # Months are a filter on the results, not on the judged photos: nothing to choose here.
        self.month_histogram.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)
        self.month_histogram.setToolTip("Months the relevant photos were taken, all years.")
        self.hour_histogram = HourHistogram(self)
        self.taxa = QListWidget(self)
        self.taxa.setObjectName("relevantTaxa")
        self.taxa.setToolTip("The commonest taxa among the relevant photos")
        self.summary = QLabel(self)
        self.summary.setObjectName("relevantSummary")
        self.summary.setWordWrap(True)
        self.summary.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.export_button = QPushButton("Export analyses…", self)
        self.export_button.setObjectName("exportAnalysesButton")
        self.export_button.setToolTip(
            "Write the counts by month, day, hour, taxon and place as CSV files and PNG charts"
        )
        self.export_button.clicked.connect(self.exportRequested)
        side = QVBoxLayout()
        side.setContentsMargins(0, 0, 0, 0)
        side.addWidget(self.taxa, 1)
        side.addWidget(self.export_button)
        charts = QHBoxLayout()
        charts.setContentsMargins(0, 0, 0, 0)
        charts.setSpacing(10)
        charts.addWidget(self.map_view, 2)
        charts.addWidget(self.month_histogram, 2)
        charts.addWidget(self.hour_histogram, 2)
        charts.addLayout(side, 3)  # taxon names are long
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addLayout(charts, 1)
        layout.addWidget(self.summary)
        self.show_view(RelevantView())

    def show_view(self, view: RelevantView) -> None:
        """Show these counts (and nothing of what was shown before)."""
        self.map_view.set_points(view.points, view.without_place, view.place_note)
        self.month_histogram.set_counts(view.months, view.undated)
        self.hour_histogram.set_counts(view.hours, view.no_time)
        self.taxa.clear()
        for name, count in view.taxa:
            self.taxa.addItem(f"{count:,}  {name}")
            # Long names are cut by the narrow list: the whole line on hover.
            self.taxa.item(self.taxa.count() - 1).setToolTip(f"{name}: {count:,} relevant photos")
        self.summary.setText(view.summary)
        self.export_button.setEnabled(bool(view.title))

    def taxa_shown(self) -> list[str]:
        """The taxon lines as shown, commonest first."""
        return [self.taxa.item(row).text() for row in range(self.taxa.count())]


class PlacePane(QWidget):
    """The tab's choice ("Results | Relevant photos of this query") over its two pages."""

    modeChanged = Signal(int)  # RESULTS or RELEVANT

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("placePane")
        self.map_view = MapView(self)
        self.month_histogram = MonthHistogram(self)
        results_page = QWidget(self)
        results_layout = QHBoxLayout(results_page)
        results_layout.setContentsMargins(0, 0, 0, 0)
        results_layout.setSpacing(10)
        results_layout.addWidget(self.map_view, 3)
        results_layout.addWidget(self.month_histogram, 2)
        self.relevant = RelevantPage(self)
        self.pages = QStackedWidget(self)
        self.pages.addWidget(results_page)
        self.pages.addWidget(self.relevant)
        # A segmented toggle: two checkable buttons, one always down.
        self.choice = QButtonGroup(self)
        choice_row = QHBoxLayout()
        choice_row.setContentsMargins(0, 0, 0, 0)
        choice_row.setSpacing(0)
        for mode, text in ((RESULTS, "Results"), (RELEVANT, "Relevant photos of this query")):
            # Tool buttons: a lower row than push buttons, which the short dock needs.
            button = QToolButton(self)
            button.setText(text)
            button.setCheckable(True)
            button.setObjectName("placeModeResults" if mode == RESULTS else "placeModeRelevant")
            self.choice.addButton(button, mode)
            choice_row.addWidget(button)
        choice_row.addStretch(1)
        self.choice.button(RESULTS).setChecked(True)
        self.choice.idClicked.connect(self.set_mode)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 4, 6, 4)
        layout.setSpacing(4)
        layout.addLayout(choice_row)
        layout.addWidget(self.pages, 1)

    def mode(self) -> int:
        return self.pages.currentIndex()

    def set_mode(self, mode: int) -> None:
        """Show the results' page or the relevant photos' page."""
        self.choice.button(mode).setChecked(True)
        if mode != self.pages.currentIndex():
            self.pages.setCurrentIndex(mode)
            self.modeChanged.emit(mode)
