"""The main window: query bar, filter chips, results grid and status line in the centre; the
library and the saved queries (tabs) on the left, the photo's details on the right, the live
metrics and the results' map and months (tabs) below.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from PySide6.QtCore import (
    QByteArray,
    QPoint,
    QRect,
    QSettings,
    Qt,
    QTimer,
    Signal,
)
from PySide6.QtGui import (
    QAction,
    QActionGroup,
    QCloseEvent,
    QDragEnterEvent,
    QDropEvent,
    QGuiApplication,
    QKeySequence,
    QShowEvent,
)
from PySide6.QtWidgets import (
    QDockWidget,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QMainWindow,
    QMessageBox,
    QVBoxLayout,
    QWidget,
)

from widgets.agreement_dialog import JudgesActions
from widgets.detail_pane import DetailPane
from widgets.drawings_strip import DrawingsStrip
from widgets.file_dialogs import (
    FolderMemory,
    NoFolderMemory,
    existing_folder,
    open_file,
    save_file,
)
from widgets.filmstrip import Filmstrip
from widgets.filter_bar import FilterBar
from widgets.fitting import ElidedLabel, PanelStack, VerticalScroll
from widgets.library_panel import LibraryPanel
from widgets.message_banner import BANNER_MAX_HEIGHT, MessageBanner
from widgets.metrics_panel import MetricsPanel
from widgets.place_pane import PlacePane
from widgets.query_bar import QueryBar
from widgets.query_list import QueryListPanel
from widgets.results import (
    THUMB_SIZE,
    ResultsModel,
    ResultsView,
    ThumbnailSizeSlider,
    cell_size,
)
from widgets.subquery_editor import SubqueryEditor
from widgets.window_docks import SIDE, WindowDocks, first_size, rect_text

WINDOW_TITLE = "Quadrat"

# Saved dock layouts of another version are dropped (earlier ones kept the Photo pane narrow;
# version 2 had no Where and when pane; version 3 left the metrics squeezed under the grid on
# short screens).
STATE_VERSION = 4
CENTRE_MIN_WIDTH = 380  # two columns of thumbnails and the scrollbar
GRID_ROWS = 2  # rows of thumbnails the grid always shows, whatever panels are open
PANELS_LEAST_HEIGHT = 76  # px: the panels above the grid (chips, drawings, questions) scroll
DOCK_LEAST_HEIGHT = 64  # px: the Where and when pane scrolls rather than ask for more


class MainWindow(QMainWindow):
    """Lays out the widgets; controllers connect to their signals."""

    settingsRequested = Signal()
    openLogFolderRequested = Signal()
    aboutRequested = Signal()
    benchmarkRequested = Signal()
    importJudgmentsRequested = Signal()
    exportJudgmentsRequested = Signal()
    exportResultsRequested = Signal()
    exportLikelyRequested = Signal()  # photos whose probability of relevance passes a cut-off
    copyRelevantRequested = Signal()
    writeSidecarsRequested = Signal()  # Judge › Write XMP sidecars…
    exportRecordsRequested = Signal()  # Judge › Export records… (Darwin Core)
    exportFormatRequested = Signal(str)  # File › Export <a registered format>…: its name
    askQuestionRequested = Signal()  # Judge › Ask an attribute question…
    backupsRequested = Signal()  # File › Backups…
    deploymentsRequested = Signal()  # Library › Deployments… (clock offsets, event gap)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("mainWindow")
        self.setWindowTitle(WINDOW_TITLE)
        self.setAcceptDrops(True)
        # Asked before the window closes; returns False to keep it open.
        self.close_guard: Callable[[], bool] = lambda: True
        # Where each kind of file dialog was last used (the application keeps it on disk).
        self.folders: FolderMemory = NoFolderMemory()

        self.query_bar = QueryBar(self)
        self.filter_bar = FilterBar(self)
        # Add filter sits in the query row; the chips get a row of their own only when a
        # filter is set, so a window without filters loses no height to them.
        self.query_bar.add_tool(self.filter_bar.take_add_button())
        self.results_model = ResultsModel(self)
        self.results = ResultsView(self)
        self.results.setModel(self.results_model)
        self.status_line = ElidedLabel(self)
        self.status_line.setObjectName("statusLine")
        self.empty_label = QLabel(self)
        self.empty_label.setObjectName("resultsEmpty")
        self.empty_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.empty_label.setWordWrap(True)
        # What VisRet drew for the query, above its results (hidden for other methods).
        self.drawings_strip = DrawingsStrip(self)
        self.drawings_strip.hide()
        # A Reranked search's questions, context and Sort by (hidden for other methods).
        self.subquery_editor = SubqueryEditor(self)
        self.subquery_editor.hide()

        centre = QWidget(self)
        centre.setObjectName("centre")
        layout = QVBoxLayout(centre)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        layout.addWidget(self.query_bar)
        # The filter chips, VisRet's drawings and the Reranked editor scroll in what the grid
        # leaves them: the grid keeps GRID_ROWS rows and the window never grows for a panel.
        self.method_panels = PanelStack(
            [self.filter_bar, self.drawings_strip, self.subquery_editor],
            PANELS_LEAST_HEIGHT,
            centre,
        )
        self.method_panels.setObjectName("methodPanels")
        # Errors and outcomes that matter, readable whole (the status line keeps passing news).
        self.message_banner = MessageBanner(centre)
        self.message_banner.logRequested.connect(self.openLogFolderRequested)
        layout.addWidget(self.message_banner)
        layout.addWidget(self.method_panels)
        layout.addWidget(self.results, 1)
        layout.addWidget(self.empty_label, 1)
        # The status line shares its row with the grid's thumbnail size slider.
        self.thumbnail_slider = ThumbnailSizeSlider(self.results, centre)
        self.status_row = status_row = QHBoxLayout()
        status_row.setContentsMargins(0, 0, 0, 0)
        status_row.addWidget(self.status_line, 1)
        status_row.addWidget(self.thumbnail_slider)
        layout.addLayout(status_row)
        # The grid keeps two columns; the centre as a whole keeps what its layout needs (the
        # query bar whole), so no dock can be dragged over the Search button.
        self.results.setMinimumWidth(CENTRE_MIN_WIDTH)
        self._keep_grid_rows()
        self.results.thumbnailSizeChanged.connect(lambda _size: self._keep_grid_rows())
        self.setCentralWidget(centre)
        self.show_empty("Add a photo folder to the library, then type what you are looking for.")

        self.library_panel = LibraryPanel(self)
        self.library_dock = self._dock(
            "Library", "libraryDock", self.library_panel, Qt.DockWidgetArea.LeftDockWidgetArea
        )
        self.detail_pane = DetailPane(self)
        # The selected event's frames (results grouped by event), right under the photo.
        self.filmstrip = Filmstrip(self.detail_pane)
        self.detail_pane.add_under_photo(self.filmstrip)
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
        # Where and when the results were seen: a tab beside the metrics.
        # Results | Relevant photos of this query (their analyses: see widgets/place_pane).
        self.place_pane = PlacePane(self)
        self.map_view = self.place_pane.map_view
        self.month_histogram = self.place_pane.month_histogram
        # Scrolled when the dock is short, so its minimum never makes the window taller.
        self.place_scroll = VerticalScroll(self.place_pane, DOCK_LEAST_HEIGHT, self)
        self.place_dock = self._dock(
            "Where and when", "placeDock", self.place_scroll, Qt.DockWidgetArea.BottomDockWidgetArea
        )
        # Hidden until placed beside the metrics once the window is shown (widgets/window_docks).
        self.place_dock.hide()
        # The Photo pane runs the full height (it needs it most); under the grid, the metrics
        # run under the library, so the runs table and the chart get the width they need.
        self.setCorner(Qt.Corner.BottomLeftCorner, Qt.DockWidgetArea.BottomDockWidgetArea)
        self.setCorner(Qt.Corner.BottomRightCorner, Qt.DockWidgetArea.RightDockWidgetArea)
        self.dock_layout = WindowDocks(
            self,
            {
                "library": self.library_dock,
                "queries": self.queries_dock,
                "detail": self.detail_dock,
                "metrics": self.metrics_dock,
                "place": self.place_dock,
            },
            self.method_panels,
            self._centre_least_height,
            self.detail_pane.minimum_width,
            self._lay_out_panel,
        )
        self.method_panels.shownChanged.connect(self.dock_layout.panels_shown)
        self._layout_checked = False

        self.model_label = QLabel(self)
        self.model_label.setObjectName("modelLabel")
        # In the status line's row: a status bar of its own cost the grid a row of pixels.
        status_row.addWidget(self.model_label)
        self._build_menus()
        self._build_judging_actions()
        # Judge › Agreement…, Certify recall…, Double judging…, Judge blind, Metrics from ▸,
        # and who is judging, in the status row.
        self.judges = JudgesActions(self)
        self.judges.add_to(self.judge_menu, status_row)
        self.results_model.modelReset.connect(self._update_empty)
        self.place_on(self.available_area())

    def _centre_least_height(self) -> int:
        """The centre's height with a message and the panels above the grid at their least:
        what the window must hold above the metrics when they are under the grid."""
        return (
            self.query_bar.sizeHint().height()
            + BANNER_MAX_HEIGHT
            + PANELS_LEAST_HEIGHT
            + self.results.minimumHeight()
            + self.status_row.sizeHint().height()
        )

    def _lay_out_panel(self, dock: QDockWidget, column: bool, least_height: int) -> None:
        """A bottom panel laid out for a column (tall and narrow) or a band (wide and short),
        scrolling below `least_height` rather than taking less."""
        if dock is self.metrics_dock:
            self.metrics_panel.set_narrow(column)
            self.metrics_panel.scroll_area.least_height = least_height
            self.metrics_panel.scroll_area.updateGeometry()
        elif dock is self.place_dock:
            self.place_pane.set_narrow(column)
            self.place_scroll.least_height = least_height
            self.place_scroll.updateGeometry()

    def _keep_grid_rows(self) -> None:
        """The grid's least height: GRID_ROWS rows of thumbnails at their current size."""
        frame = 2 * self.results.frameWidth()
        # Rows of at most the default size: large thumbnails chosen on the slider must not
        # make the window taller than a laptop screen (the grid scrolls instead).
        row = min(self.results.gridSize().height(), cell_size(THUMB_SIZE).height() + 4)
        self.results.setMinimumHeight(GRID_ROWS * row + frame)

    def _dock(self, title: str, name: str, widget: QWidget, area: Qt.DockWidgetArea) -> QDockWidget:
        dock = QDockWidget(title, self)
        dock.setObjectName(name)
        dock.setWidget(widget)
        dock.setFeatures(
            QDockWidget.DockWidgetFeature.DockWidgetMovable
            | QDockWidget.DockWidgetFeature.DockWidgetClosable
            | QDockWidget.DockWidgetFeature.DockWidgetFloatable
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
        self.models_action = QAction("&Models…", self)
        self.models_action.setToolTip(
            "Download, import or choose the model photos are indexed with"
        )
        quit_action = QAction("&Quit", self)
        quit_action.setShortcut(QKeySequence.StandardKey.Quit)
        quit_action.triggered.connect(self.close)
        # Attaches a photo from disk to the query and searches, as dropping it would.
        self.search_by_photo_action = QAction("Search by a &photo…", self)
        self.search_by_photo_action.setShortcut(QKeySequence("Ctrl+Shift+O"))
        file_menu.addActions(
            [
                self.add_folder_action,
                self.search_by_photo_action,
                self.settings_action,
                self.models_action,
            ]
        )
        file_menu.addSeparator()
        for label, signal in (
            ("&Import queries and judgments…", self.importJudgmentsRequested),
            ("Export &judgments…", self.exportJudgmentsRequested),
            ("Export &results…", self.exportResultsRequested),
            ("&Copy relevant photos to a folder…", self.copyRelevantRequested),
            ("&Backups…", self.backupsRequested),
        ):
            action = QAction(label, self)
            action.triggered.connect(signal)
            file_menu.addAction(action)
        self._file_menu, self._backups_action = file_menu, action  # formats go before Backups…
        file_menu.addSeparator()
        file_menu.addAction(quit_action)

        view_menu = self.menuBar().addMenu("&View")
        view_menu.addAction(self.library_dock.toggleViewAction())
        view_menu.addAction(self.queries_dock.toggleViewAction())
        view_menu.addAction(self.detail_dock.toggleViewAction())
        view_menu.addAction(self.metrics_dock.toggleViewAction())
        view_menu.addAction(self.place_dock.toggleViewAction())
        focus = QAction("Focus the query", self)
        focus.setShortcut(QKeySequence("Ctrl+L"))
        focus.triggered.connect(self.query_bar.focus_query)
        view_menu.addAction(focus)
        view_menu.addSeparator()
        larger = QAction("&Larger thumbnails", self)
        larger.setShortcuts([QKeySequence(QKeySequence.StandardKey.ZoomIn), QKeySequence("Ctrl+=")])
        larger.triggered.connect(lambda: self.results.step_thumbnail_size(1))
        smaller = QAction("&Smaller thumbnails", self)
        smaller.setShortcut(QKeySequence.StandardKey.ZoomOut)
        smaller.triggered.connect(lambda: self.results.step_thumbnail_size(-1))
        view_menu.addActions([larger, smaller])
        view_menu.addSeparator()
        # Shown once the library is known to hold events (EventsController).
        self.group_events_action = QAction("&Group results by event", self)
        self.group_events_action.setShortcut(QKeySequence("Ctrl+E"))
        view_menu.addAction(self.group_events_action)
        # Shown once the library is known to hold detections (BoxesController).
        self.show_boxes_action = QAction("Show detector &boxes", self)
        self.show_boxes_action.setCheckable(True)
        self.show_boxes_action.setChecked(True)
        self.show_boxes_action.setVisible(False)
        view_menu.addAction(self.show_boxes_action)
        # What a search ranks where the library has detections: whole frames, the detector's
        # boxes (their crops), or frames with their best box's score fused in (BoxesController).
        self.rank_by_menu = view_menu.addMenu("&Rank by")
        self.rank_by_menu.menuAction().setVisible(False)
        self.rank_by_actions: dict[str, QAction] = {}
        rank_by = QActionGroup(self)
        for unit, title in (
            ("frames", "Whole &frames"),
            ("boxes", "Detector &boxes"),
            ("fused", "Frames and their best box (f&used)"),
        ):
            action = QAction(title, self)
            action.setCheckable(True)
            action.setChecked(unit == "frames")
            rank_by.addAction(action)
            self.rank_by_menu.addAction(action)
            self.rank_by_actions[unit] = action

        library_menu = self.menuBar().addMenu("&Library")
        self.deployments_action = QAction("&Deployments…", self)
        self.deployments_action.setToolTip(
            "The library's camera deployments: clock offsets and the event gap"
        )
        self.deployments_action.triggered.connect(
            lambda _checked=False: self.deploymentsRequested.emit()
        )
        library_menu.addAction(self.deployments_action)

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
        self.guide_action = QAction("&User guide", self)
        self.guide_action.triggered.connect(self.show_guide)
        help_menu.addActions([self.guide_action, shortcuts, log_action])
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
        # Space: the selected photo at full resolution (widgets/full_view.py); R / N / U work
        # there too (the controller adds these actions to it).
        self.full_view_action = QAction("&Full-size view", self)
        self.full_view_action.setShortcut(QKeySequence(Qt.Key.Key_Space))
        self.full_view_action.setShortcutContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
        self.results.addAction(self.full_view_action)
        self.detail_pane.addAction(self.full_view_action)
        self.judge_menu.addAction(self.full_view_action)
        self.judge_menu.addActions(actions[:3])
        self.judge_menu.addSeparator()
        self.judge_menu.addAction(self.undo_judgment_action)
        # B: the next detector box of the selected photo, the one R / N judge it on.
        self.next_box_action = QAction("Judge on the next &box", self)
        self.next_box_action.setShortcut(QKeySequence("B"))
        self.next_box_action.setShortcutContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
        self.next_box_action.setVisible(False)
        self.results.addAction(self.next_box_action)
        self.detail_pane.addAction(self.next_box_action)
        self.judge_menu.addAction(self.next_box_action)
        self._build_feedback_actions()

    def _build_feedback_actions(self) -> None:
        """Learning from the judgments: Refine ▾, Judge next (a mode of the grid), Sample to
        judge, Back to the run; in the Judge menu and as buttons on the metrics panel."""
        panel = self.metrics_panel
        self.judge_next_action = QAction("Judge &next", self)
        self.judge_next_action.setCheckable(True)
        self.judge_next_action.setShortcut(QKeySequence("Ctrl+J"))
        self.judge_next_action.setToolTip(
            "Show the photos whose judgment would teach the ranking most, the keys on the "
            "first; again: the next batch once these are judged, else back to the run"
        )
        self.sample_action = QAction("&Sample to judge", self)
        self.sample_action.setToolTip(
            "Show a random sample of photos below the judged ones: judging them tightens the "
            "estimate of how many relevant photos there are"
        )
        self.back_to_run_action = QAction("&Back to the run", self)
        self.back_to_run_action.setEnabled(False)
        self.export_likely_action = QAction("&Export likely relevant photos…", self)
        self.export_likely_action.setToolTip(
            "Write the photos judged relevant, and every unjudged photo whose probability of "
            "relevance, learned from the judgments, is at least a value you choose (0.9 by "
            "default), to a CSV file"
        )
        self.export_likely_action.setEnabled(False)
        self.export_likely_action.triggered.connect(
            lambda _checked=False: self.exportLikelyRequested.emit()
        )
        self.write_sidecars_action = QAction("Write &XMP sidecars…", self)
        self.write_sidecars_action.setToolTip(
            "Write the open query's judgments and attributes as keywords (Quadrat|query|relevant, "
            "Quadrat|lifeStage|juvenile) into XMP sidecars beside the judged photos, for "
            "digiKam, Lightroom, darktable and exiftool; the photos are not changed"
        )
        self.write_sidecars_action.triggered.connect(
            lambda _checked=False: self.writeSidecarsRequested.emit()
        )
        self.export_records_action = QAction("Export rec&ords…", self)
        self.export_records_action.setToolTip(
            "Write the open query's relevant photos as Darwin Core records: an archive for "
            "GBIF or a CSV, with the query, method, model and judges as provenance"
        )
        self.export_records_action.triggered.connect(
            lambda _checked=False: self.exportRecordsRequested.emit()
        )
        self.ask_question_action = QAction("Ask an attribute &question…", self)
        self.ask_question_action.setToolTip(
            "Learn a closed question (is it flowering? a juvenile?) from the attributes of the "
            "open query's judged photos, see its cross-validated accuracy, then ask it of "
            "every photo"
        )
        self.ask_question_action.triggered.connect(
            lambda _checked=False: self.askQuestionRequested.emit()
        )
        self.judge_menu.addSeparator()
        self.judge_menu.addMenu(panel.refine_menu)
        self.judge_menu.addActions(
            [
                self.judge_next_action,
                self.sample_action,
                self.back_to_run_action,
                self.export_likely_action,
                self.write_sidecars_action,
                self.export_records_action,
                self.ask_question_action,
            ]
        )
        panel.judge_next_button.setDefaultAction(self.judge_next_action)
        panel.sample_button.setDefaultAction(self.sample_action)

    # -- state shown by controllers ---------------------------------------------------------------

    def show_empty(self, message: str) -> None:
        self.empty_label.setText(message)
        self._update_empty()

    def _update_empty(self) -> None:
        empty = self.results_model.rowCount() == 0
        self.results.setVisible(not empty)
        self.empty_label.setVisible(empty)

    def set_status(self, text: str) -> None:
        """Passing news ("Searching…", "Search cancelled"); what must be read goes to
        `show_message`."""
        self.status_line.setText(text)

    def show_message(self, kind: str, title: str, text: str, *, log: bool = False) -> None:
        """An error or an outcome that matters, readable whole under the query bar until
        closed (`kind`: widgets.message_banner's ERROR, WARNING or DONE)."""
        self.message_banner.show_message(kind, title, text, log=log)

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
            ("Up", "Earlier queries (in the query bar)"),
            # As the query bar does: Down steps forward through earlier queries being browsed,
            # and otherwise moves to the results.
            ("Down", "To the results; later queries while going back through earlier ones"),
            ("Drop a photo", "Search by example (with typed words: photo and words)"),
        ]
        return sorted(set(out)) + extra

    def show_guide(self) -> QWidget:
        """Help › User guide: the guide shipped with the application, in a window of its own."""
        from widgets.guide_dialog import GuideDialog, guide_text

        dialog = GuideDialog(guide_text(), self)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.show()
        return dialog

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

    def show_notice(self, title: str, text: str) -> QMessageBox:
        """A message the status line would cut, in a dialog of its own (not modal)."""
        box = QMessageBox(self)
        box.setIcon(QMessageBox.Icon.Information)
        box.setWindowTitle(title)
        box.setText(text)
        box.open()
        return box

    def ask_yes_no(self, title: str, text: str) -> bool:
        """A modal question; tests replace this method."""
        answer = QMessageBox.question(self, title, text)
        return answer == QMessageBox.StandardButton.Yes

    def set_folder_memory(self, folders: FolderMemory) -> None:
        """Where the window's file dialogs (and the library panel's) were last used."""
        self.folders = folders
        self.library_panel.folders = folders

    # Each kind of file dialog opens where it was last used: a kind is what the dialog asks
    # for (its filter, its suggested name), stable while the caption may count photos.
    def ask_open_file(self, caption: str, file_filter: str) -> str | None:
        """A file to read, or None; tests replace this method."""
        return open_file(self, self.folders, f"open:{file_filter}", caption, file_filter)

    def add_export_formats(self, formats: Sequence[tuple[str, str]]) -> None:
        """File › Export entries for registered formats, (name, label) each, before Backups…."""
        for name, label in formats:
            action = QAction(f"Export {label}…", self)
            action.triggered.connect(
                lambda _checked=False, chosen=name: self.exportFormatRequested.emit(chosen)
            )
            self._file_menu.insertAction(self._backups_action, action)

    def ask_save_file(self, caption: str, suggested: str, file_filter: str) -> str | None:
        """A file to write, or None; tests replace this method."""
        kind = f"save:{suggested}"
        return save_file(self, self.folders, kind, caption, suggested, file_filter)

    def ask_probability(self, caption: str, label: str, value: float) -> float | None:
        """A probability between 0.5 and 0.99, or None; tests replace this method."""
        number, accepted = QInputDialog.getDouble(self, caption, label, value, 0.5, 0.99, 2)
        return float(number) if accepted else None

    def ask_folder(self, caption: str) -> str | None:
        """A folder, or None; tests replace this method."""
        return existing_folder(self, self.folders, f"folder:{caption}", caption)

    # -- geometry (the only thing kept in QSettings) --------------------------------------------

    def available_area(self) -> QRect:
        """The available geometry (without panels and task bars) of the window's screen."""
        screen = self.screen() or QGuiApplication.primaryScreen()
        return screen.availableGeometry()

    def place_on(self, area: QRect) -> None:
        """Size a first window to fit `area` (a screen's available geometry), centred, with the
        docks at their default sizes."""
        rect = QRect(QPoint(0, 0), first_size(area.size()))
        rect.moveCenter(area.center())
        self.setGeometry(rect)
        self.apply_default_docks()

    def apply_default_docks(self) -> None:
        """The docks where the window's height wants them (once shown), at sizes that are
        fractions of the window (see widgets/window_docks)."""
        self.dock_layout.arrange()
        self.dock_layout.apply_default_sizes()

    def restore_geometry(self, settings: QSettings, areas: list[QRect] | None = None) -> None:
        """The last session's window and docks, corrected where they would not fit `areas`
        (the screens' available geometries): a window off every screen is placed anew, one
        larger than its screen is shrunk into it, and a dock layout of another version is
        replaced by the default. Docks left unusably narrow are corrected once shown."""
        if areas is None:
            areas = [screen.availableGeometry() for screen in QGuiApplication.screens()]
        geometry = settings.value("window/geometry")
        state = settings.value("window/state")
        if not (isinstance(geometry, QByteArray) and self.restoreGeometry(geometry)):
            self.place_on(areas[0] if areas else self.available_area())
        elif not (self.isMaximized() or self.isFullScreen()):
            self._keep_inside(areas)
        if isinstance(state, QByteArray) and self.restoreState(state, STATE_VERSION):
            self.dock_layout.restored = True  # moved only where this window cannot hold it
        else:
            self.apply_default_docks()
        self._layout_checked = False

    def _keep_inside(self, areas: list[QRect]) -> None:
        rect = self.geometry()
        home = next((area for area in areas if area.contains(rect.center())), None)
        if home is None:  # the screen it was on is gone
            self.place_on(areas[0] if areas else self.available_area())
            return
        rect.setSize(rect.size().boundedTo(home.size()))
        rect.moveLeft(max(home.left(), min(rect.left(), home.right() + 1 - rect.width())))
        rect.moveTop(max(home.top(), min(rect.top(), home.bottom() + 1 - rect.height())))
        self.setGeometry(rect)

    def layout_problems(self, area: QRect | None = None) -> list[str]:
        """What a user of the shown window would find clipped or out of reach on a screen
        whose available geometry is `area` (default: the window's screen); empty: nothing."""
        area = area if area is not None else self.available_area()
        problems = []
        frame = self.frameGeometry()
        if not self.isFullScreen() and not area.contains(frame):
            problems.append(f"window {rect_text(frame)} outside the screen {rect_text(area)}")
        problems += self.dock_layout.problems(CENTRE_MIN_WIDTH)
        if self.detail_dock.isVisible():
            problems += self.detail_pane.clipped()
        if self.metrics_dock.isVisible():
            problems += self.metrics_panel.clipped()
        return problems

    def docks(self) -> list[QDockWidget]:
        """Every dock of the window."""
        return self.dock_layout.all()

    def show_place_pane(self) -> None:
        """Bring the map and the month histogram to the front (a tab beside the metrics)."""
        self.place_dock.show()
        self.place_dock.raise_()

    def bring_metrics_forward(self) -> None:
        """A query was opened: beside the grid, the metrics come in front of the library (of
        no use while judging), never in front of the saved queries or Where and when."""
        if self.dock_layout.placement == SIDE and not self.library_dock.visibleRegion().isEmpty():
            self.metrics_dock.raise_()

    def ensure_usable_layout(self) -> list[str]:
        """Correct a shown layout whose docks leave a pane unusable (a narrow Photo pane or
        results grid, metrics taking half the height, a floating dock off every screen):
        floating docks off screen are docked again and dock sizes go back to their defaults.
        Returns what was corrected."""
        problems = self.dock_layout.problems(CENTRE_MIN_WIDTH)
        if problems:
            self.dock_layout.dock_off_screen()
            self.apply_default_docks()
        return problems

    def save_geometry(self, settings: QSettings) -> None:
        settings.setValue("window/geometry", self.saveGeometry())
        settings.setValue("window/state", self.saveState(STATE_VERSION))

    # -- events -----------------------------------------------------------------------------------

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802
        super().showEvent(event)
        self.dock_layout.first_shown()
        if not self._layout_checked:
            self._layout_checked = True
            # Once the layout has given every dock its size.
            QTimer.singleShot(0, self, self.ensure_usable_layout)

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
