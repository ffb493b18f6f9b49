"""The benchmark view: pick a queries file and a judgments file, the methods, k and the
protocol; run with progress and Cancel; read the tables per query and per category; export.

A non-modal dialog that shows a `BenchmarkTables` it is given and emits requests; the benchmark
controller runs the work.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QFormLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QTabWidget,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from widgets.file_dialogs import FolderMemory, NoFolderMemory, open_file, save_file

K_CHOICES = (10, 20, 50, 100)
FILE_FILTER = "Benchmark files (*.csv *.txt *.qrels);;All files (*)"
AUTOMATIC = ""  # the collection choice: the one holding every judged photo, else all
ALL = "all"


@dataclass(frozen=True)
class BenchmarkRequest:
    queries: str
    judgments: str
    methods: tuple[str, ...]
    k: int
    protocol: str
    collection: str = AUTOMATIC  # AUTOMATIC, ALL, or a collection key from `set_collections`


@dataclass(frozen=True)
class CollectionItem:
    """A collection the benchmark can rank alone: the key a request carries, the label shown."""

    key: str
    label: str


@dataclass(frozen=True)
class SummaryRow:
    method: str
    queries: int  # queries with R > 0, over which the means are taken
    mAP: float
    mean_nDCG: float
    MRR: float
    judged: float = 0.0  # mean judged@k: the share of the top k that carries a judgment
    # Against the first method (paired over queries); None for the first method itself.
    delta: float | None = None
    ci95: tuple[float, float] | None = None
    p: float | None = None


@dataclass(frozen=True)
class QueryRow:
    query_id: str
    text: str
    method: str
    AP: float
    nDCG: float
    RR: float
    R: int
    judged: float = 0.0  # judged@k
    unjudged: int = 0  # photos of the top k without a judgment


@dataclass(frozen=True)
class CategoryRow:
    column: str
    value: str
    method: str
    queries: int
    mAP: float
    mean_nDCG: float


@dataclass(frozen=True)
class BenchmarkTables:
    k: int
    protocol: str
    summary: list[SummaryRow] = field(default_factory=list)
    per_query: list[QueryRow] = field(default_factory=list)
    per_category: list[CategoryRow] = field(default_factory=list)
    note: str = ""
    collections: str = ""  # which collections were ranked, and why
    # The judgments list only relevant photos (INQUIRE's exhaustive labelling: every photo not
    # listed is not relevant), so every photo is judged and judged@k / unjudged say nothing.
    exhaustive: bool = False


SIGNIFICANCE_LEVEL = 0.05  # the usual threshold; the legend says so rather than hiding it

LEGEND = (
    "Each later method is compared with the first, query by query. ΔmAP: its mean AP minus "
    "the first's; 95% CI: where that difference lies with 95% confidence (bootstrap over "
    "queries). p: how often a difference at least this large would arise by chance if both "
    "methods were equally good (paired randomisation test). Below {level} it is usually "
    "called significant; with few queries, even a large Δ may not be."
)

HEADER_TIPS = {
    "Queries": "Queries with at least one relevant photo; the means are taken over these.",
    "ΔmAP vs first": "This method's mAP minus the first method's, paired over queries.",
    "95% CI": "95% bootstrap interval of the difference; one that excludes 0 says the "
    "difference is unlikely to be chance (it and p usually agree).",
    "p": "Paired randomisation test: the chance of a difference this large if the two "
    "methods were equally good. Below 0.05 is usually called significant.",
    "Verdict": "Better or worse than the first method at p < 0.05, else no clear difference.",
    "R": "Relevant photos the judgments name for this query.",
}


def _signed(value: float | None) -> str:
    return "" if value is None else f"{value:+.3f}"


def _interval(ci: tuple[float, float] | None) -> str:
    return "" if ci is None else f"[{ci[0]:+.3f}, {ci[1]:+.3f}]"


def _p(value: float | None) -> str:
    return "" if value is None else f"{value:.4f}"


def verdict(delta: float | None, p: float | None) -> str:
    """What a comparison with the first method says, in words."""
    if delta is None or p is None:
        return ""
    if p >= SIGNIFICANCE_LEVEL:
        return "no clear difference"
    return f"{'better' if delta > 0 else 'worse'} (p < {SIGNIFICANCE_LEVEL:g})"


def summary_headers(k: int, compared: bool, exhaustive: bool) -> list[str]:
    """The summary table's columns: the comparison's only when there is one."""
    return (
        ["Method", "Queries", f"mAP@{k}", f"nDCG@{k}", f"MRR@{k}"]
        + (["ΔmAP vs first", "95% CI", "p", "Verdict"] if compared else [])
        + ([] if exhaustive else [f"judged@{k}"])
    )


def query_headers(k: int, exhaustive: bool) -> list[str]:
    return ["Query", "Text", "Method", f"AP@{k}", f"nDCG@{k}", f"RR@{k}", "R"] + (
        [] if exhaustive else [f"judged@{k}", f"Unjudged in top {k}"]
    )


def category_headers(k: int, methods: Sequence[str]) -> list[str]:
    """One row per category, the methods side by side: every method's mAP, then its nDCG."""
    return (
        ["Column", "Value", "Queries"]
        + [f"mAP@{k} {m}" for m in methods]
        + [f"nDCG@{k} {m}" for m in methods]
    )


def category_table(tables: BenchmarkTables) -> list[tuple[object, ...]]:
    """The per-category rows with the methods side by side (methods in the summary's order)."""
    methods = list(dict.fromkeys(r.method for r in tables.summary)) or list(
        dict.fromkeys(r.method for r in tables.per_category)
    )
    groups: dict[tuple[str, str], dict[str, CategoryRow]] = {}
    for row in tables.per_category:
        groups.setdefault((row.column, row.value), {})[row.method] = row
    rows: list[tuple[object, ...]] = []
    for (column, value), by_method in groups.items():
        queries = max(r.queries for r in by_method.values())
        maps = tuple(by_method[m].mAP if m in by_method else "" for m in methods)
        ndcgs = tuple(by_method[m].mean_nDCG if m in by_method else "" for m in methods)
        rows.append((column, value, queries, *maps, *ndcgs))
    return rows


def _tree(headers: Sequence[str], name: str, parent: QWidget) -> QTreeWidget:
    tree = QTreeWidget(parent)
    tree.setObjectName(name)
    tree.setHeaderLabels(list(headers))
    tree.setRootIsDecorated(False)
    tree.setUniformRowHeights(True)
    tree.setAlternatingRowColors(True)
    return tree


def _fill(tree: QTreeWidget, headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    tree.clear()
    # Set the count first: a tree keeps a wider header's extra columns (Qt's default "1", "2"…).
    tree.setColumnCount(len(headers))
    tree.setHeaderLabels(list(headers))
    header_item = tree.headerItem()
    for column, name in enumerate(headers):
        header_item.setToolTip(column, HEADER_TIPS.get(name, ""))
    for row in rows:
        item = QTreeWidgetItem()
        for column, value in enumerate(row):
            if isinstance(value, float):
                item.setText(column, f"{value:.3f}")
                item.setData(column, Qt.ItemDataRole.UserRole, value)
                item.setTextAlignment(column, Qt.AlignmentFlag.AlignRight)
            elif isinstance(value, int):
                item.setText(column, str(value))
                item.setTextAlignment(column, Qt.AlignmentFlag.AlignRight)
            else:
                item.setText(column, str(value))
        tree.addTopLevelItem(item)
    header = tree.header()
    header.setStretchLastSection(False)
    for column in range(len(headers)):
        header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)


class BenchmarkDialog(QDialog):
    """Runs benchmark files against the library. Emits requests; decides nothing."""

    runRequested = Signal(object)  # BenchmarkRequest
    cancelRequested = Signal()
    exportRequested = Signal(str)  # path
    judgmentsChanged = Signal(str)  # path: the controller says which collections it matches
    quitRequested = Signal()  # Ctrl+Q here quits Quadrat, as it does in the main window

    def __init__(self, methods: Sequence[str], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("benchmarkDialog")
        self.setWindowTitle("Quadrat — benchmark")
        self.resize(900, 640)
        self.tables: BenchmarkTables | None = None
        # Where its file dialogs were last used (the controller hands in the kept folders).
        self.folders: FolderMemory = NoFolderMemory()

        self.queries_edit = QLineEdit(self)
        self.queries_edit.setObjectName("benchmarkQueries")
        self.queries_edit.setPlaceholderText("queries CSV (INQUIRE format)")
        self.judgments_edit = QLineEdit(self)
        self.judgments_edit.setObjectName("benchmarkJudgments")
        self.judgments_edit.setPlaceholderText("judgments: INQUIRE CSV or TREC qrels")
        self.judgments_edit.editingFinished.connect(self._judgments_changed)
        self.collection_combo = QComboBox(self)
        self.collection_combo.setObjectName("benchmarkCollection")
        self.collection_combo.setToolTip(
            "What is ranked. Unjudged photos in other collections (copies, say) push judged "
            "ones down and lower every metric; by default only the collection holding every "
            "judged photo is ranked, when exactly one does."
        )
        self.collection_combo.setSizeAdjustPolicy(
            QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon
        )
        self.collection_combo.setMinimumContentsLength(24)
        self.collection_combo.addItem("The collection of the judged photos", AUTOMATIC)
        self.collection_combo.addItem("All collections", ALL)
        self.collection_note = QLabel(self)
        self.collection_note.setObjectName("benchmarkCollectionNote")
        self.collection_note.setWordWrap(True)
        self.method_boxes: dict[str, QCheckBox] = {}
        methods_row = QHBoxLayout()
        for index, method in enumerate(methods):
            box = QCheckBox(method, self)
            # Only the first (the baseline) runs by default: a slow method (drawing, reranking)
            # over every query is something to ask for, not a surprise.
            box.setChecked(index == 0)
            self.method_boxes[method] = box
            methods_row.addWidget(box)
        # Methods with options, to compare one method under several settings.
        self.more_methods = QLineEdit(self)
        self.more_methods.setObjectName("benchmarkMoreMethods")
        self.more_methods.setPlaceholderText("also: KEY:NAME=VALUE; … e.g. text:template=ensemble")
        self.more_methods.setToolTip(
            "More methods with options, separated by ';'. Each later method is compared with "
            "the first (paired randomisation test over queries)."
        )
        methods_row.addWidget(self.more_methods, 1)
        self.k_combo = QComboBox(self)
        for k in K_CHOICES:
            self.k_combo.addItem(str(k), k)
        self.k_combo.setCurrentIndex(self.k_combo.findData(50))
        self.protocol = QComboBox(self)
        self.protocol.addItem("fullrank (rank the whole library)", "fullrank")
        self.protocol.addItem("rerank (reorder the text method's top 100)", "rerank")

        form = QFormLayout()
        form.addRow("Queries:", self._file_row(self.queries_edit, "Choose a queries file"))
        form.addRow("Judgments:", self._file_row(self.judgments_edit, "Choose a judgments file"))
        form.addRow("Collections:", self.collection_combo)
        form.addRow("", self.collection_note)
        form.addRow("Methods:", methods_row)
        options = QHBoxLayout()
        options.addWidget(QLabel("k:", self))
        options.addWidget(self.k_combo)
        options.addSpacing(16)
        options.addWidget(QLabel("Protocol:", self))
        options.addWidget(self.protocol)
        options.addStretch(1)
        form.addRow("", options)

        self.run_button = QPushButton("Run", self)
        self.run_button.setObjectName("benchmarkRun")
        self.run_button.setDefault(True)
        self.run_button.clicked.connect(self._run)
        self.cancel_button = QPushButton("Cancel", self)
        self.cancel_button.clicked.connect(self.cancelRequested)
        self.cancel_button.setEnabled(False)
        self.progress = QProgressBar(self)
        self.progress.setTextVisible(True)
        self.progress.setRange(0, 1)
        self.progress.setValue(0)
        self.export_button = QPushButton("Export CSV…", self)
        self.export_button.setEnabled(False)
        self.export_button.clicked.connect(self._export)
        run_row = QHBoxLayout()
        run_row.addWidget(self.run_button)
        run_row.addWidget(self.cancel_button)
        run_row.addWidget(self.progress, 1)
        run_row.addWidget(self.export_button)

        self.status = QLabel(self)
        self.status.setObjectName("benchmarkStatus")
        self.status.setWordWrap(True)
        k = int(self.k_combo.currentData())
        # Empty tables name their columns already (an unnamed one reads "1").
        self.summary = _tree(summary_headers(k, False, False), "benchmarkSummary", self)
        self.summary.setMaximumHeight(110)
        self.legend = QLabel(LEGEND.format(level=f"{SIGNIFICANCE_LEVEL:g}"), self)
        self.legend.setObjectName("benchmarkLegend")
        self.legend.setWordWrap(True)
        self.legend.setVisible(False)  # shown once a table compares methods
        self.per_query = _tree(query_headers(k, False), "benchmarkPerQuery", self)
        self.per_category = _tree(category_headers(k, []), "benchmarkPerCategory", self)
        # A dialog is a window of its own: the main window's Quit shortcut does not reach here.
        quit_action = QAction("Quit", self)
        # Spelled out: the platform's standard Quit is empty on Windows and some X11 themes.
        quit_action.setShortcut(QKeySequence("Ctrl+Q"))
        quit_action.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
        quit_action.triggered.connect(self.quitRequested)
        self.addAction(quit_action)
        tabs = QTabWidget(self)
        tabs.addTab(self.per_query, "Per query")
        tabs.addTab(self.per_category, "Per category")
        self.tabs = tabs

        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addLayout(run_row)
        layout.addWidget(self.status)
        layout.addWidget(self.summary)
        layout.addWidget(self.legend)
        layout.addWidget(tabs, 1)

    def _file_row(self, edit: QLineEdit, caption: str) -> QHBoxLayout:
        browse = QPushButton("Browse…", self)
        browse.clicked.connect(lambda: self._browse(edit, caption))
        row = QHBoxLayout()
        row.addWidget(edit, 1)
        row.addWidget(browse)
        return row

    def _browse(self, edit: QLineEdit, caption: str) -> None:
        path = open_file(self, self.folders, "benchmark-files", caption, FILE_FILTER, edit.text())
        if path:
            edit.setText(path)
            if edit is self.judgments_edit:
                self._judgments_changed()

    def set_files(self, queries: str, judgments: str) -> None:
        self.queries_edit.setText(queries)
        self.judgments_edit.setText(judgments)
        self._judgments_changed()

    def _judgments_changed(self) -> None:
        self.judgmentsChanged.emit(self.judgments_edit.text().strip())

    def set_collections(
        self, items: Sequence[CollectionItem], matching: str | None = None, note: str = ""
    ) -> None:
        """List the collections to choose from; `matching` names the one holding every judged
        photo (the automatic choice says so). The user's choice stays when still listed."""
        combo = self.collection_combo
        current = combo.currentData()
        combo.blockSignals(True)
        combo.clear()
        label = {item.key: item.label for item in items}.get(matching or "")
        combo.addItem(
            f"The collection of the judged photos: {label}"
            if label
            else "The collection of the judged photos",
            AUTOMATIC,
        )
        combo.addItem(f"All collections ({len(items)})", ALL)
        for item in items:
            combo.addItem(item.label, item.key)
        index = combo.findData(current)
        combo.setCurrentIndex(max(0, index))
        combo.blockSignals(False)
        self.collection_note.setText(note)

    def request(self) -> BenchmarkRequest:
        return BenchmarkRequest(
            self.queries_edit.text().strip(),
            self.judgments_edit.text().strip(),
            tuple(m for m, box in self.method_boxes.items() if box.isChecked())
            + tuple(m.strip() for m in self.more_methods.text().split(";") if m.strip()),
            int(self.k_combo.currentData()),
            str(self.protocol.currentData()),
            str(self.collection_combo.currentData() or AUTOMATIC),
        )

    def _run(self) -> None:
        self.runRequested.emit(self.request())

    def _export(self) -> None:
        path = save_file(
            self,
            self.folders,
            "benchmark-export",
            "Export the benchmark tables",
            "benchmark.csv",
            "CSV (*.csv)",
        )
        if path:
            self.exportRequested.emit(path)

    # -- state shown by the controller ----------------------------------------------------------

    def set_running(self, running: bool, message: str = "") -> None:
        self.run_button.setEnabled(not running)
        self.cancel_button.setEnabled(running)
        self.export_button.setEnabled(not running and self.tables is not None)
        if running:
            self.progress.setRange(0, 0)
        self.status.setText(message)

    def set_progress(self, done: int, total: int, message: str = "") -> None:
        self.progress.setRange(0, max(1, total))
        self.progress.setValue(min(done, total))
        self.progress.setFormat(f"{done} / {total}")
        if message:
            self.status.setText(message)

    def show_tables(self, tables: BenchmarkTables) -> None:
        self.tables = tables
        k = tables.k
        compared = any(r.delta is not None for r in tables.summary)
        exhaustive = tables.exhaustive
        _fill(
            self.summary,
            summary_headers(k, compared, exhaustive),
            [
                (r.method, r.queries, r.mAP, r.mean_nDCG, r.MRR)
                + ((_signed(r.delta), _interval(r.ci95), _p(r.p), verdict(r.delta, r.p))
                   if compared else ())
                + (() if exhaustive else (r.judged,))
                for r in tables.summary
            ],
        )  # fmt: skip
        self.legend.setVisible(compared)
        _fill(
            self.per_query,
            query_headers(k, exhaustive),
            [
                (r.query_id, r.text, r.method, r.AP, r.nDCG, r.RR, r.R)
                + (() if exhaustive else (r.judged, r.unjudged))
                for r in tables.per_query
            ],
        )
        methods = list(dict.fromkeys(r.method for r in tables.summary))
        _fill(self.per_category, category_headers(k, methods), category_table(tables))
        self.export_button.setEnabled(True)
        self.status.setText(tables.note)
        if tables.collections:
            self.collection_note.setText(tables.collections)
