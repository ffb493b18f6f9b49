"""Judge › Agreement…: how far the open query's judges agree (kappa and alpha with their
intervals, each pair's confusion table) and the photos they disagree on, side by side, each
with buttons that record the adjudicated judgment. A picker switches from relevance to a
Darwin Core attribute two judges gave values for (lifeStage, sex, ...): the same statistics
over the values, and the photos with differing values (nothing to adjudicate there). Also the judges' entries of the Judge menu
and the status bar's "Judge: NAME" (`JudgesActions`).

Plain data in (`AgreementReport`), signals out; `app/controllers/agreement.py` does the rest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtGui import QAction, QActionGroup, QIcon, QPixmap
from PySide6.QtWidgets import (
    QAbstractItemView,
    QAbstractScrollArea,
    QBoxLayout,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QMenu,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

ROW_THUMB = 64  # px: a disagreement's photo beside its name


@dataclass(frozen=True)
class PairView:
    """Two judges' confusion table: rows the first judge's marks, columns the second's."""

    title: str  # "ann / bob: 12 photos, Cohen's kappa 0.61 (0.32 to 0.86)"
    categories: tuple[str, ...]  # "not relevant", "relevant"
    first: str
    second: str
    table: tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class DisagreementRow:
    """A photo its judges disagree on: each judge's mark (and note), the adjudication if any,
    and where the photo is (its thumbnail in the row; a double click opens it)."""

    image_id: int
    photo: str  # as the window names it: taxon or file name, number, camera
    marks: dict[str, str]  # judge -> "relevant (note)"
    adjudicated: str  # "" when not settled
    path: str = ""
    content_hash: str | None = None


@dataclass(frozen=True)
class AgreementReport:
    """Everything the dialog shows for one query."""

    title: str
    statistics: list[tuple[str, str]]  # (name, "0.61 (0.32 to 0.86)")
    note: str
    pairs: list[PairView] = field(default_factory=list)
    judges: list[str] = field(default_factory=list)
    disagreements: list[DisagreementRow] = field(default_factory=list)
    term: str = ""  # the attribute measured; "" for relevance
    terms: list[str] = field(default_factory=list)  # attributes with two judges' values
    captions: dict[str, str] = field(default_factory=dict)  # term -> how the window names it


class AgreementDialog(QDialog):
    """The agreement of the open query's judges, and adjudication of their disagreements."""

    adjudicateRequested = Signal(int, object)  # image id, relevance (None: take it back)
    refreshRequested = Signal()
    termChosen = Signal(str)  # an attribute's Darwin Core term; "" for relevance
    photoOpenRequested = Signal(int)  # a row's photo, to see at full size

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("agreementDialog")
        self.setWindowTitle("Agreement among judges")
        self.resize(760, 560)
        layout = QVBoxLayout(self)
        picker_row = QHBoxLayout()
        picker_row.addWidget(QLabel("Agreement on:", self))
        self.term_picker = QComboBox(self)
        self.term_picker.setObjectName("agreementTerm")
        self.term_picker.setToolTip(
            "Relevance, or an attribute (Darwin Core term) that two judges gave values for"
        )
        self.term_picker.addItem("Relevance", "")
        self.term_picker.currentIndexChanged.connect(
            lambda _i: self.termChosen.emit(self.term_picker.currentData() or "")
        )
        picker_row.addWidget(self.term_picker)
        picker_row.addStretch(1)
        layout.addLayout(picker_row)
        self.title = QLabel(self)
        self.title.setObjectName("agreementTitle")
        self.title.setWordWrap(True)
        layout.addWidget(self.title)
        self.statistics = QLabel(self)
        self.statistics.setObjectName("agreementStatistics")
        self.statistics.setTextFormat(Qt.TextFormat.RichText)
        self.statistics.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.statistics)
        self.pairs = QWidget(self)
        self.pairs_layout = QHBoxLayout(self.pairs)
        self.pairs_layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.pairs)
        self.disagreements_label = QLabel(self)
        layout.addWidget(self.disagreements_label)
        self.table = QTableWidget(self)
        self.table.setObjectName("disagreementsTable")
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().hide()
        self.table.setIconSize(QSize(ROW_THUMB, ROW_THUMB))
        self.table.verticalHeader().setDefaultSectionSize(ROW_THUMB + 8)
        self.table.cellDoubleClicked.connect(lambda row, _column: self._open_row(row))
        layout.addWidget(self.table, 1)
        self.rows: list[DisagreementRow] = []
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close, self)
        refresh = buttons.addButton("Refresh", QDialogButtonBox.ButtonRole.ActionRole)
        refresh.clicked.connect(lambda: self.refreshRequested.emit())
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)
        self.show_loading()

    def show_loading(self) -> None:
        self.title.setText("Reading the judgments…")

    def set_thumbnail(self, image_id: int, pixmap: QPixmap) -> None:
        """A row's photo arrived: shown beside its name."""
        for r, row in enumerate(self.rows):
            item = self.table.item(r, 0)
            if row.image_id == image_id and item is not None:
                item.setIcon(QIcon(pixmap))

    def _open_row(self, row: int) -> None:
        if 0 <= row < len(self.rows):
            self.photoOpenRequested.emit(self.rows[row].image_id)

    def step_row(self, image_id: int, steps: int) -> int | None:
        """The photo `steps` rows from `image_id`'s (selected), for stepping in the full view."""
        ids = [row.image_id for row in self.rows]
        if image_id not in ids:
            return None
        row = ids.index(image_id) + steps
        if not 0 <= row < len(ids):
            return None
        self.table.selectRow(row)
        return ids[row]

    def _photo_item(self, row: DisagreementRow) -> QTableWidgetItem:
        item = QTableWidgetItem(row.photo)
        item.setToolTip(f"{row.photo}\n{row.path}\nDouble-click to see it at full size")
        return item

    def show_report(self, report: AgreementReport) -> None:
        """Show one query's agreement and disagreements."""
        self.title.setText(f"“{report.title}”: {report.note}" if report.note else report.title)
        self._show_terms(report)
        rows = "".join(
            f"<tr><td>{name}</td><td style='padding-left:12px'>{value}</td></tr>"
            for name, value in report.statistics
        )
        self.statistics.setText(f"<table>{rows}</table>" if rows else "")
        self._show_pairs(report.pairs)
        self._show_disagreements(report)

    def _show_terms(self, report: AgreementReport) -> None:
        """Relevance and the attributes there are, the measured one chosen (no signal)."""
        terms = list(report.terms)
        if report.term and report.term not in terms:
            terms.append(report.term)
        self.term_picker.blockSignals(True)
        self.term_picker.clear()
        self.term_picker.addItem("Relevance", "")
        for term in terms:
            self.term_picker.addItem(report.captions.get(term, term), term)
        self.term_picker.setCurrentIndex(max(self.term_picker.findData(report.term), 0))
        self.term_picker.blockSignals(False)

    def _show_pairs(self, pairs: Sequence[PairView]) -> None:
        while self.pairs_layout.count():
            item = self.pairs_layout.takeAt(0)
            widget = item.widget() if item is not None else None
            if widget is not None:
                widget.deleteLater()
        for pair in pairs[:3]:  # more pairs than fit: `quadrat agreement` lists them all
            box = QWidget(self.pairs)
            column = QVBoxLayout(box)
            column.setContentsMargins(0, 0, 0, 0)
            caption = QLabel(pair.title, box)
            caption.setWordWrap(True)
            column.addWidget(caption)
            grid = QTableWidget(len(pair.categories), len(pair.categories), box)
            grid.setObjectName("confusionTable")
            grid.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
            grid.setVerticalHeaderLabels([f"{pair.first}: {c}" for c in pair.categories])
            grid.setHorizontalHeaderLabels([f"{pair.second}: {c}" for c in pair.categories])
            for r, row in enumerate(pair.table):
                for c, count in enumerate(row):
                    cell = QTableWidgetItem(str(count))
                    cell.setTextAlignment(Qt.AlignmentFlag.AlignCenter)
                    grid.setItem(r, c, cell)
            grid.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
            grid.setMaximumHeight(30 + 30 * len(pair.categories))
            grid.resizeColumnsToContents()
            # Wide enough for every column: attribute values make longer headers than marks.
            frame = 2 * grid.frameWidth() + 4
            grid.setMinimumWidth(
                grid.verticalHeader().sizeHint().width()
                + sum(grid.columnWidth(c) for c in range(len(pair.categories)))
                + frame
            )
            grid.setSizeAdjustPolicy(QAbstractScrollArea.SizeAdjustPolicy.AdjustToContents)
            column.addWidget(grid)
            self.pairs_layout.addWidget(box)
        self.pairs_layout.addStretch(1)  # the tables keep their own width, on the left

    def _show_disagreements(self, report: AgreementReport) -> None:
        rows = self.rows = list(report.disagreements)
        if report.term:  # values differ: shown side by side, nothing to adjudicate
            self.disagreements_label.setText(
                f"{len(rows)} photo{'s' * (len(rows) != 1)} with different values of "
                f"{report.captions.get(report.term, report.term)}"
            )
            self.table.clear()
            self.table.setColumnCount(1 + len(report.judges))
            self.table.setHorizontalHeaderLabels(["Photo", *report.judges])
            self.table.setRowCount(len(rows))
            for r, row in enumerate(rows):
                self.table.setItem(r, 0, self._photo_item(row))
                for c, judge in enumerate(report.judges, start=1):
                    self.table.setItem(r, c, QTableWidgetItem(row.marks.get(judge, "—")))
            self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
            return
        self.disagreements_label.setText(
            f"{len(rows)} photo{'s' * (len(rows) != 1)} the judges disagree on"
            + (
                ": settle each with Relevant or Not relevant (double-click to see it)"
                if rows
                else ""
            )
        )
        headers = ["Photo", *report.judges, "Adjudicated", "", ""]
        self.table.clear()
        self.table.setColumnCount(len(headers))
        self.table.setHorizontalHeaderLabels(headers)
        self.table.setRowCount(len(rows))
        last = len(headers) - 1
        for r, row in enumerate(rows):
            self.table.setItem(r, 0, self._photo_item(row))
            for c, judge in enumerate(report.judges, start=1):
                self.table.setItem(r, c, QTableWidgetItem(row.marks.get(judge, "—")))
            self.table.setItem(r, last - 2, QTableWidgetItem(row.adjudicated or "not yet"))
            for column, (text, relevance) in (
                (last - 1, ("Relevant", 1)),
                (last, ("Not relevant", 0)),
            ):
                button = QPushButton(text, self.table)
                button.setObjectName(f"adjudicate{relevance}")
                button.clicked.connect(
                    lambda _c=False, i=row.image_id, v=relevance: self.adjudicateRequested.emit(
                        i, v
                    )
                )
                self.table.setCellWidget(r, column, button)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)


class JudgesActions(QWidget):
    """The judges' entries of the Judge menu and the status bar's judge name; the window adds
    them (`add_to`), a controller fills and answers them."""

    agreementRequested = Signal()
    certifyRequested = Signal()
    offerRequested = Signal()  # offer a sample for blind double judging
    blindToggled = Signal(bool)
    viewChosen = Signal(str)  # "newest", "majority", "adjudicated" or a judge's name

    FIXED_VIEWS = (
        ("newest", "&Newest judgment per photo"),
        ("majority", "&Majority of judges"),
        ("adjudicated", "&Adjudicated only"),
    )

    def __init__(self, parent: QWidget) -> None:
        super().__init__(parent)
        self.hide()  # holds actions only
        self.agreement_action = QAction("A&greement…", parent)
        self.agreement_action.setToolTip(
            "How far the open query's judges agree (Cohen's and Fleiss' kappa, Krippendorff's "
            "alpha with intervals, confusion tables), and the photos to adjudicate"
        )
        self.agreement_action.triggered.connect(lambda: self.agreementRequested.emit())
        self.certify_action = QAction("&Certify recall…", parent)
        self.certify_action.setToolTip(
            "Judge until a recall target (e.g. 90 % at 95 % confidence) is reached with a "
            "guarantee, over the photos shown (the filters; events when grouped): a side panel "
            "says what it costs before it starts"
        )
        self.certify_action.triggered.connect(lambda: self.certifyRequested.emit())
        self.offer_action = QAction("&Double judging…", parent)
        self.offer_action.setToolTip(
            "Offer a sample of the open query's judged photos to a second judge, whose marks "
            "are made blind (the first judge's hidden)"
        )
        self.offer_action.triggered.connect(lambda: self.offerRequested.emit())
        self.blind_action = QAction("Judge &blind", parent)
        self.blind_action.setCheckable(True)
        self.blind_action.setToolTip("Show only your own marks: other judges' are hidden")
        self.blind_action.toggled.connect(self.blindToggled.emit)
        self.views_menu = QMenu("Metrics &from", parent)
        self.views_menu.setObjectName("metricsFromMenu")
        self._views = QActionGroup(self)
        self.set_judges([])
        self.judge_label = QLabel(parent)
        self.judge_label.setObjectName("judgeLabel")
        self.judge_label.setContentsMargins(12, 0, 0, 0)  # apart from the model's name
        self.judge_label.setToolTip("Who is judging: set in Settings (Judge)")

    def add_to(self, menu: QMenu, status_row: QBoxLayout) -> None:
        """Append the entries to the Judge menu and the judge's name to the status row."""
        menu.addSeparator()
        menu.addActions([self.agreement_action, self.certify_action, self.offer_action])
        menu.addAction(self.blind_action)
        menu.addMenu(self.views_menu)
        status_row.addWidget(self.judge_label)

    def set_judges(self, judges: Sequence[str], chosen: str = "newest") -> None:
        """The views offered under Metrics from: the fixed ones and one per judge."""
        self.views_menu.clear()
        for action in self._views.actions():
            self._views.removeAction(action)
        entries = [*self.FIXED_VIEWS, *((name, f"Judge {name}") for name in judges)]
        for key, label in entries:
            action = QAction(label, self.views_menu)
            action.setCheckable(True)
            action.setChecked(key == chosen)
            action.setData(key)
            action.triggered.connect(lambda _c=False, k=key: self.viewChosen.emit(k))
            self._views.addAction(action)
            self.views_menu.addAction(action)

    def set_judge(self, text: str) -> None:
        self.judge_label.setText(text)
