"""The main window: query bar, results grid and status line in the centre; the library and the
saved queries (tabs) on the left, the photo's details on the right, the live metrics below.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QByteArray, QSettings, Qt, Signal
from PySide6.QtGui import QAction, QCloseEvent, QDragEnterEvent, QDropEvent, QKeySequence
from PySide6.QtWidgets import (
    QDockWidget,
    QFileDialog,
    QLabel,
    QMainWindow,
    QMessageBox,
    QVBoxLayout,
    QWidget,
)

from widgets.detail_pane import DetailPane
from widgets.library_panel import LibraryPanel
from widgets.metrics_panel import MetricsPanel
from widgets.query_bar import QueryBar
from widgets.query_list import QueryListPanel
from widgets.results import ResultsModel, ResultsView

WINDOW_TITLE = "Quadrat"


class MainWindow(QMainWindow):
    """Lays out the widgets; controllers connect to their signals."""

    settingsRequested = Signal()
    openLogFolderRequested = Signal()
    aboutRequested = Signal()
    benchmarkRequested = Signal()
    importJudgmentsRequested = Signal()
    exportJudgmentsRequested = Signal()
    exportResultsRequested = Signal()
    copyRelevantRequested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("mainWindow")
        self.setWindowTitle(WINDOW_TITLE)
        self.setAcceptDrops(True)
        self.resize(1360, 860)
        # Asked before the window closes; returns False to keep it open.
        self.close_guard: Callable[[], bool] = lambda: True

        self.query_bar = QueryBar(self)
        self.results_model = ResultsModel(self)
        self.results = ResultsView(self)
        self.results.setModel(self.results_model)
        self.status_line = QLabel(self)
        self.status_line.setObjectName("statusLine")
        self.empty_label = QLabel(self)
        self.empty_label.setObjectName("resultsEmpty")
        self.empty_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.empty_label.setWordWrap(True)

        centre = QWidget(self)
        centre.setObjectName("centre")
        layout = QVBoxLayout(centre)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        layout.addWidget(self.query_bar)
        layout.addWidget(self.results, 1)
        layout.addWidget(self.empty_label, 1)
        layout.addWidget(self.status_line)
        self.setCentralWidget(centre)
        self.show_empty("Add a photo folder to the library, then type what you are looking for.")

        self.library_panel = LibraryPanel(self)
        self.library_dock = self._dock(
            "Library", "libraryDock", self.library_panel, Qt.DockWidgetArea.LeftDockWidgetArea
        )
        self.detail_pane = DetailPane(self)
        self.detail_dock = self._dock(
            "Photo", "detailDock", self.detail_pane, Qt.DockWidgetArea.RightDockWidgetArea
        )
        self.query_list = QueryListPanel(self)
        self.queries_dock = self._dock(
            "Queries", "queriesDock", self.query_list, Qt.DockWidgetArea.LeftDockWidgetArea
        )
        self.tabifyDockWidget(self.library_dock, self.queries_dock)
        self.library_dock.raise_()
        self.metrics_panel = MetricsPanel(self)
        self.metrics_dock = self._dock(
            "Metrics", "metricsDock", self.metrics_panel, Qt.DockWidgetArea.BottomDockWidgetArea
        )
        self.setCorner(Qt.Corner.BottomLeftCorner, Qt.DockWidgetArea.LeftDockWidgetArea)
        self.setCorner(Qt.Corner.BottomRightCorner, Qt.DockWidgetArea.RightDockWidgetArea)
        self.resizeDocks(
            [self.library_dock, self.detail_dock], [330, 380], Qt.Orientation.Horizontal
        )
        self.resizeDocks([self.metrics_dock], [230], Qt.Orientation.Vertical)

        self.model_label = QLabel(self)
        self.model_label.setObjectName("modelLabel")
        self.statusBar().addPermanentWidget(self.model_label)
        self._build_menus()
        self._build_judging_actions()
        self.results_model.modelReset.connect(self._update_empty)

    def _dock(self, title: str, name: str, widget: QWidget, area: Qt.DockWidgetArea) -> QDockWidget:
        dock = QDockWidget(title, self)
        dock.setObjectName(name)
        dock.setWidget(widget)
        dock.setFeatures(
            QDockWidget.DockWidgetFeature.DockWidgetMovable
            | QDockWidget.DockWidgetFeature.DockWidgetClosable
        )
        self.addDockWidget(area, dock)
        return dock

    def _build_menus(self) -> None:
        file_menu = self.menuBar().addMenu("&File")
        self.add_folder_action = QAction("&Add folder…", self)
        self.add_folder_action.setShortcut(QKeySequence("Ctrl+O"))
        self.add_folder_action.triggered.connect(self.library_panel.choose_folder)
        self.settings_action = QAction("&Settings…", self)
        self.settings_action.setShortcut(QKeySequence.StandardKey.Preferences)
        self.settings_action.triggered.connect(self.settingsRequested)
        quit_action = QAction("&Quit", self)
        quit_action.setShortcut(QKeySequence.StandardKey.Quit)
        quit_action.triggered.connect(self.close)
        file_menu.addActions([self.add_folder_action, self.settings_action])
        file_menu.addSeparator()
        for label, signal in (
            ("&Import queries and judgments…", self.importJudgmentsRequested),
            ("Export &judgments…", self.exportJudgmentsRequested),
            ("Export &results…", self.exportResultsRequested),
            ("&Copy relevant photos to a folder…", self.copyRelevantRequested),
        ):
            action = QAction(label, self)
            action.triggered.connect(signal)
            file_menu.addAction(action)
        file_menu.addSeparator()
        file_menu.addAction(quit_action)

        view_menu = self.menuBar().addMenu("&View")
        view_menu.addAction(self.library_dock.toggleViewAction())
        view_menu.addAction(self.queries_dock.toggleViewAction())
        view_menu.addAction(self.detail_dock.toggleViewAction())
        view_menu.addAction(self.metrics_dock.toggleViewAction())
        focus = QAction("Focus the query", self)
        focus.setShortcut(QKeySequence("Ctrl+L"))
        focus.triggered.connect(lambda: self.query_bar.edit.setFocus())
        view_menu.addAction(focus)

        self.judge_menu = self.menuBar().addMenu("&Judge")
        tools_menu = self.menuBar().addMenu("&Tools")
        benchmark = QAction("&Benchmark…", self)
        benchmark.triggered.connect(self.benchmarkRequested)
        tools_menu.addAction(benchmark)

        help_menu = self.menuBar().addMenu("&Help")
        shortcuts = QAction("&Keyboard shortcuts", self)
        shortcuts.setShortcut(QKeySequence("F1"))
        shortcuts.triggered.connect(self.show_shortcuts)
        log_action = QAction("Open the log folder", self)
        log_action.triggered.connect(self.openLogFolderRequested)
        about = QAction("&About Quadrat", self)
        about.triggered.connect(self.aboutRequested)
        help_menu.addActions([shortcuts, log_action])
        help_menu.addSeparator()
        help_menu.addAction(about)

    def _build_judging_actions(self) -> None:
        """R / N / U / Ctrl+Z act where photos are looked at (the grid and the detail pane),
        so typing in the query bar or the notes never judges a photo."""
        self.relevant_action = QAction("Mark &relevant", self)
        self.relevant_action.setShortcut(QKeySequence("R"))
        self.not_relevant_action = QAction("Mark &not relevant", self)
        self.not_relevant_action.setShortcut(QKeySequence("N"))
        self.clear_judgment_action = QAction("&Clear the judgment", self)
        self.clear_judgment_action.setShortcut(QKeySequence("U"))
        self.undo_judgment_action = QAction("&Undo the last judgment", self)
        self.undo_judgment_action.setShortcut(QKeySequence.StandardKey.Undo)
        actions = [
            self.relevant_action,
            self.not_relevant_action,
            self.clear_judgment_action,
            self.undo_judgment_action,
        ]
        for action in actions:
            action.setShortcutContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
        self.results.addActions(actions)
        self.detail_pane.addActions(actions)
        self.judge_menu.addActions(actions[:3])
        self.judge_menu.addSeparator()
        self.judge_menu.addAction(self.undo_judgment_action)

    # -- state shown by controllers ---------------------------------------------------------------

    def show_empty(self, message: str) -> None:
        self.empty_label.setText(message)
        self._update_empty()

    def _update_empty(self) -> None:
        empty = self.results_model.rowCount() == 0
        self.results.setVisible(not empty)
        self.empty_label.setVisible(empty)

    def set_status(self, text: str) -> None:
        self.status_line.setText(text)

    def set_model_name(self, text: str) -> None:
        self.model_label.setText(text)

    def shortcut_lines(self) -> list[tuple[str, str]]:
        """(keys, what they do) for every action of the window that has a shortcut."""
        out = []
        for action in self.findChildren(QAction):
            keys = action.shortcut().toString(QKeySequence.SequenceFormat.NativeText)
            if keys:
                out.append((keys, action.text().replace("&", "").rstrip("…")))
        extra = [
            ("Enter", "Search (in the query bar)"),
            ("Up / Down", "Earlier and later queries (in the query bar)"),
            ("Drop a photo", "Search by example (with typed words: photo and words)"),
        ]
        return sorted(set(out)) + extra

    def show_shortcuts(self) -> QMessageBox:
        rows = "".join(
            f"<tr><td><b>{keys}</b></td><td>&nbsp;&nbsp;{what}</td></tr>"
            for keys, what in self.shortcut_lines()
        )
        box = QMessageBox(self)
        box.setWindowTitle("Keyboard shortcuts")
        box.setTextFormat(Qt.TextFormat.RichText)
        box.setText(f"<table>{rows}</table>")
        box.open()
        return box

    def show_about(self, lines: list[tuple[str, str]]) -> QMessageBox:
        """About Quadrat: the facts the controller hands over (version, model, folders)."""
        rows = "".join(
            f"<tr><td>{name}</td><td>&nbsp;&nbsp;{value}</td></tr>" for name, value in lines
        )
        box = QMessageBox(self)
        box.setWindowTitle("About Quadrat")
        box.setTextFormat(Qt.TextFormat.RichText)
        box.setText(
            "<b>Quadrat</b> — expert image search over local natural-world photo collections"
            f"<br><br><table>{rows}</table>"
        )
        box.open()
        return box

    def ask_yes_no(self, title: str, text: str) -> bool:
        """A modal question; tests replace this method."""
        answer = QMessageBox.question(self, title, text)
        return answer == QMessageBox.StandardButton.Yes

    def ask_open_file(self, caption: str, file_filter: str) -> str | None:
        """A file to read, or None; tests replace this method."""
        path, _ = QFileDialog.getOpenFileName(self, caption, "", file_filter)
        return path or None

    def ask_save_file(self, caption: str, suggested: str, file_filter: str) -> str | None:
        """A file to write, or None; tests replace this method."""
        path, _ = QFileDialog.getSaveFileName(self, caption, suggested, file_filter)
        return path or None

    def ask_folder(self, caption: str) -> str | None:
        """A folder, or None; tests replace this method."""
        return QFileDialog.getExistingDirectory(self, caption) or None

    # -- geometry (the only thing kept in QSettings) --------------------------------------------

    def restore_geometry(self, settings: QSettings) -> None:
        geometry = settings.value("window/geometry")
        state = settings.value("window/state")
        if isinstance(geometry, QByteArray):
            self.restoreGeometry(geometry)
        if isinstance(state, QByteArray):
            self.restoreState(state)

    def save_geometry(self, settings: QSettings) -> None:
        settings.setValue("window/geometry", self.saveGeometry())
        settings.setValue("window/state", self.saveState())

    # -- events -----------------------------------------------------------------------------------

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802
        if self.close_guard():
            event.accept()
        else:
            event.ignore()

    # A folder dropped anywhere on the window is added as if dropped on the library panel.
    def dragEnterEvent(self, event: QDragEnterEvent) -> None:  # noqa: N802
        self.library_panel.dragEnterEvent(event)

    def dropEvent(self, event: QDropEvent) -> None:  # noqa: N802
        self.library_panel.dropEvent(event)
