"""The library panel: collections with their counts, add/remove/re-scan, indexing progress.

A collection with photos not indexed yet (a run stopped, or the window closed mid-run) reads
"unfinished" on its row, and "Resume indexing" beside the summary resumes every such
collection without a row being selected first."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QDragEnterEvent, QDropEvent, QResizeEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QDialogButtonBox,
    QGridLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QProgressBar,
    QPushButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from widgets.file_dialogs import FolderMemory, NoFolderMemory, existing_folder

SHOW_DELAY_MS = 500
_ROOT_ROLE = Qt.ItemDataRole.UserRole + 1  # the folder of a row (a collection's root)

# States of a folder's indexing run, as its row in the collections list shows it.
WAITING = "waiting"  # queued, or waiting for the library or a model
RUNNING = "running"
STOPPED = "stopped"  # cancelled: the photos committed so far are kept
FAILED = "failed"
DONE = "done"  # finished; the row becomes the plain collection row at the next counts


@dataclass(frozen=True)
class IndexingRow:
    """A folder being indexed, or whose last run stopped or failed: `text` is what its row says
    ("waiting…", "340 of 960", "stopped at 340 of 960 — Resume indexing to go on", the error)."""

    root: str
    name: str
    state: str
    text: str


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def dropped_folders(event: QDragEnterEvent | QDropEvent) -> list[Path]:
    mime = event.mimeData()
    if not mime.hasUrls():
        return []
    return [
        Path(url.toLocalFile())
        for url in mime.urls()
        if url.isLocalFile() and Path(url.toLocalFile()).is_dir()
    ]


class IndexProgress(QWidget):
    """Progress of one indexing run: bar, images/s, ETA, Cancel. Appears only after 0.5 s,
    so quick runs do not flicker."""

    cancelRequested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("indexProgress")
        self.title = QLabel(self)
        self.title.setObjectName("indexTitle")
        self.bar = QProgressBar(self)
        self.bar.setTextVisible(True)
        self.detail = QLabel(self)
        self.detail.setObjectName("indexDetail")
        self.cancel_button = QPushButton("Cancel", self)
        self.cancel_button.clicked.connect(self._cancel)
        row = QHBoxLayout()
        row.addWidget(self.bar, 1)
        row.addWidget(self.cancel_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 6, 8, 6)
        layout.addWidget(self.title)
        layout.addLayout(row)
        layout.addWidget(self.detail)
        self._show_timer = QTimer(self)
        self._show_timer.setSingleShot(True)
        self._show_timer.timeout.connect(self.show)
        self.running = False
        self.hide()

    def start(self, title: str) -> None:
        self.running = True
        self.title.setText(title)
        self.bar.setRange(0, 0)  # busy until the total is known
        self.detail.setText("Scanning the folder…")
        self.cancel_button.setEnabled(True)
        self.cancel_button.setText("Cancel")
        if not self.isVisible():
            self._show_timer.start(SHOW_DELAY_MS)

    def update_progress(
        self, done: int, total: int, rate: float, eta: float | None, message: str = ""
    ) -> None:
        if total > 0:
            self.bar.setRange(0, total)
            self.bar.setValue(min(done, total))
            self.bar.setFormat(f"{done:,} / {total:,}")
            self.detail.setText(
                f"{rate:,.1f} images/s  ·  {format_duration(eta)} left"
                if rate > 0
                else (message or "Starting…")
            )
        elif message:
            self.detail.setText(message[:1].upper() + message[1:] + "…")

    def finish(self) -> None:
        self.running = False
        self._show_timer.stop()
        self.hide()

    def _cancel(self) -> None:
        self.cancel_button.setEnabled(False)
        self.cancel_button.setText("Stopping…")
        self.cancelRequested.emit()


class SkippedFile(Protocol):
    """A file that could not be indexed, as the skipped-files dialog lists it."""

    @property
    def rel_path(self) -> str: ...
    @property
    def reason(self) -> str: ...


class CollectionCounts(Protocol):
    """What the panel shows of a collection (the engine's collection stats fit it)."""

    @property
    def id(self) -> int: ...
    @property
    def name(self) -> str: ...
    @property
    def root(self) -> str: ...
    @property
    def indexed(self) -> int: ...
    @property
    def skipped(self) -> int: ...
    @property
    def pending(self) -> int: ...
    @property
    def folder_missing(self) -> bool: ...
    @property
    def missing(self) -> int: ...
    @property
    def skipped_photos(self) -> tuple[SkippedFile, ...]: ...


class SkippedDialog(QDialog):
    """The files of one collection that could not be indexed, with the reasons."""

    def __init__(
        self, name: str, skipped: list[tuple[str, str]], parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle(f"Skipped photos — {name}")
        self.resize(640, 380)
        tree = QTreeWidget(self)
        tree.setHeaderLabels(["File", "Reason"])
        tree.setRootIsDecorated(False)
        tree.setAlternatingRowColors(True)
        for rel_path, reason in skipped:
            tree.addTopLevelItem(QTreeWidgetItem([rel_path, reason]))
        tree.header().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        tree.header().setSectionResizeMode(1, QHeaderView.ResizeMode.ResizeToContents)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close, self)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel(f"{len(skipped):,} files could not be indexed:", self))
        layout.addWidget(tree)
        layout.addWidget(buttons)
        self.tree = tree


class LibraryPanel(QWidget):
    """Collections of the library. Emits what the user asks for; the controller acts."""

    addFolderRequested = Signal(str)
    rescanRequested = Signal(int)
    removeRequested = Signal(int)
    forgetMissingRequested = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("libraryPanel")
        self.setAcceptDrops(True)
        self._stats: dict[int, CollectionCounts] = {}
        self._stats_list: list[CollectionCounts] = []
        self._runs: dict[str, IndexingRow] = {}  # by folder (the collection's root)
        self._busy = False
        self.folders: FolderMemory = NoFolderMemory()  # Add folder… opens at the last one

        self.tree = QTreeWidget(self)
        self.tree.setObjectName("collectionList")
        self.tree.setHeaderLabels(["Collection", "Indexed", "Skipped", "Pending", "Missing"])
        self.tree.setRootIsDecorated(False)
        self.tree.setUniformRowHeights(True)
        self.tree.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        header = self.tree.header()
        header.setStretchLastSection(False)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for column in (1, 2, 3, 4):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
            self.tree.headerItem().setTextAlignment(column, Qt.AlignmentFlag.AlignRight)
        self.tree.headerItem().setToolTip(
            4, "Photos whose files are gone from disk; kept with their judgments until forgotten"
        )
        self.tree.setColumnHidden(4, True)  # shown only while some photo is missing
        self.tree.itemSelectionChanged.connect(self._update_buttons)
        self.tree.itemDoubleClicked.connect(lambda *_: self.show_skipped())

        self.add_button = QPushButton("Add folder…", self)
        self.add_button.setObjectName("addFolderButton")
        self.add_button.clicked.connect(self.choose_folder)
        self.rescan_button = QPushButton("Re-scan", self)
        self.rescan_button.clicked.connect(self._rescan)
        self.remove_button = QPushButton("Remove", self)
        self.remove_button.clicked.connect(self._remove)
        self.skipped_button = QPushButton("Skipped…", self)
        self.skipped_button.clicked.connect(self.show_skipped)
        self.forget_button = QPushButton("Forget missing…", self)
        self.forget_button.setObjectName("forgetMissingButton")
        self.forget_button.setToolTip(
            "Forget the photos of this collection whose files are gone, with their judgments"
        )
        self.forget_button.clicked.connect(self._forget_missing)
        self.forget_button.setVisible(False)
        self.resume_button = QPushButton("Resume indexing", self)
        self.resume_button.setObjectName("resumeIndexingButton")
        self.resume_button.setToolTip(
            "Index the photos not indexed yet in every unfinished collection; the photos "
            "indexed already are kept"
        )
        self.resume_button.clicked.connect(self.resume)
        self.resume_button.setVisible(False)
        # One row of buttons where the pane is wide enough, two rows where it is not, so the
        # buttons never hold the Library pane (and the results beside it) wider on small screens.
        self._buttons = QGridLayout()
        self._buttons.setSpacing(4)
        self._button_columns = 0
        self._arrange_buttons(4)
        buttons = self._buttons

        self.summary = QLabel(self)
        self.summary.setObjectName("librarySummary")
        self.summary.setWordWrap(True)
        self.empty_hint = QLabel("Add a photo folder (or drop one here) to index it.", self)
        self.empty_hint.setObjectName("emptyHint")
        self.empty_hint.setWordWrap(True)
        self.progress = IndexProgress(self)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addLayout(buttons)
        layout.addWidget(self.tree, 1)
        layout.addWidget(self.empty_hint)
        # The forget button sits by the summary that counts the missing photos, so the button
        # row (and with it the panel's minimum width) stays as it was.
        summary_row = QHBoxLayout()
        summary_row.addWidget(self.summary, 1)
        summary_row.addWidget(self.forget_button, 0, Qt.AlignmentFlag.AlignTop)
        summary_row.addWidget(self.resume_button, 0, Qt.AlignmentFlag.AlignTop)
        layout.addLayout(summary_row)
        layout.addWidget(self.progress)
        # An explicit minimum keeps the layout from pinning the pane to the one-row width.
        self.setMinimumWidth(self._two_rows_width())
        self._update_buttons()

    # -- contents -----------------------------------------------------------------------------

    def set_collections(self, stats: Sequence[CollectionCounts]) -> None:
        """Show `stats` (objects with id, name, root, indexed, skipped, pending, ...)."""
        self._stats = {s.id: s for s in stats}
        self._stats_list = list(stats)
        self._render()

    def set_run(self, row: IndexingRow) -> None:
        """List a folder being indexed (or stopped, failed) with its state, at once: on the
        row of its collection when it has one, else on a row of its own."""
        self._runs[row.root] = row
        item = self._item_for_root(row.root)
        if item is None:
            self._render()
            return
        self._show_run_on(item, row)
        self._update_buttons()

    def clear_run(self, root: str) -> None:
        """The folder's run is over: its row is the plain collection row again (or gone)."""
        if self._runs.pop(root, None) is not None:
            self._render()

    def run(self, root: str) -> IndexingRow | None:
        return self._runs.get(root)

    def runs(self) -> list[IndexingRow]:
        return list(self._runs.values())

    def _render(self) -> None:
        selected = self._selected_root()
        self.tree.clear()
        stats = self._stats_list
        for s in stats:
            missing = getattr(s, "missing", 0)
            item = QTreeWidgetItem(
                [s.name, f"{s.indexed:,}", f"{s.skipped:,}", f"{s.pending:,}", f"{missing:,}"]
            )
            item.setData(0, Qt.ItemDataRole.UserRole, s.id)
            item.setData(0, _ROOT_ROLE, s.root)
            tip = s.root + (
                "\nThe folder is missing (drive disconnected?)"
                if getattr(s, "folder_missing", False)
                else ""
            )
            if missing:
                tip += (
                    f"\n{missing:,} photos are missing from disk: left out of search, kept with "
                    "their judgments; they come back when the files do"
                )
            item.setToolTip(0, tip)
            for column in (1, 2, 3, 4):
                item.setTextAlignment(
                    column, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
                )
            if getattr(s, "folder_missing", False):
                item.setText(0, f"{s.name} (missing)")
            self.tree.addTopLevelItem(item)
        roots = {s.root for s in stats}
        for row in self._runs.values():
            if row.root not in roots:
                # Not a collection yet (its first run): a row of its own, the state across it.
                item = QTreeWidgetItem([row.name])
                item.setData(0, _ROOT_ROLE, row.root)
                self.tree.addTopLevelItem(item)
                item.setFirstColumnSpanned(True)
        unfinished = {s.id for s in self.unfinished()}
        for item in self._items():
            run = self._runs.get(item.data(0, _ROOT_ROLE))
            collection_id = item.data(0, Qt.ItemDataRole.UserRole)
            if run is not None:
                self._show_run_on(item, run)
            elif collection_id in unfinished:
                self._show_unfinished_on(item, self._stats[collection_id])
            if selected is not None and item.data(0, _ROOT_ROLE) == selected:
                item.setSelected(True)
        if self.tree.selectedItems() == [] and self.tree.topLevelItemCount() == 1:
            self._items()[0].setSelected(True)
        total = sum(s.indexed for s in stats)
        missing = sum(getattr(s, "missing", 0) for s in stats)
        self.tree.setColumnHidden(4, not missing)
        summary = (
            f"{total:,} photos indexed in {len(stats)} collection{'s' * (len(stats) != 1)}"
            if stats
            else ""
        )
        if missing:
            summary += f"; {missing:,} missing from disk (judgments kept)"
        # Said here too, beside Resume: on a narrow pane the row's own text is cut short.
        to_index = [s for s in stats if s.id in unfinished]
        if len(to_index) == 1:
            summary += f"; “{to_index[0].name}” unfinished ({to_index[0].pending:,} to index)"
        elif to_index:
            waiting = sum(s.pending for s in to_index)
            summary += f"; {len(to_index)} collections unfinished ({waiting:,} to index)"
        self.summary.setText(summary)
        self.empty_hint.setVisible(not stats and not self._runs)
        self._update_buttons()

    def unfinished(self) -> list[CollectionCounts]:
        """Collections with photos not indexed yet and no run of their own going (nor a
        missing folder): what Resume indexes."""
        active = {r.root for r in self._runs.values() if r.state in (WAITING, RUNNING)}
        return [
            s
            for s in self._stats_list
            if s.pending > 0 and s.root not in active and not getattr(s, "folder_missing", False)
        ]

    def _show_unfinished_on(self, item: QTreeWidgetItem, stats: CollectionCounts) -> None:
        done = stats.indexed + stats.skipped
        text = f"unfinished: {done:,} of {done + stats.pending:,} indexed"
        item.setText(0, f"{stats.name} — {text}")
        item.setToolTip(0, f"{stats.root}\n{text} — Resume indexing to index the rest")

    def _show_run_on(self, item: QTreeWidgetItem, run: IndexingRow) -> None:
        stats = self._stats.get(item.data(0, Qt.ItemDataRole.UserRole))
        name = stats.name if stats is not None else run.name
        item.setText(0, f"{name} — {run.text}")
        item.setToolTip(0, f"{run.root}\n{run.text}")
        font = item.font(0)
        font.setItalic(run.state in (WAITING, RUNNING))
        item.setFont(0, font)

    def _items(self) -> list[QTreeWidgetItem]:
        """The rows, top to bottom."""
        rows = (self.tree.topLevelItem(r) for r in range(self.tree.topLevelItemCount()))
        return [item for item in rows if item is not None]

    def _item_for_root(self, root: str) -> QTreeWidgetItem | None:
        for item in self._items():
            if item.data(0, _ROOT_ROLE) == root:
                return item
        return None

    def row_texts(self) -> list[str]:
        """What the first column of each row says, top to bottom."""
        return [item.text(0) for item in self._items()]

    def stats(self, collection_id: int) -> CollectionCounts | None:
        return self._stats.get(collection_id)

    def selected_id(self) -> int | None:
        """The collection of the selected row (None for a folder not yet a collection)."""
        items = self.tree.selectedItems()
        data = items[0].data(0, Qt.ItemDataRole.UserRole) if items else None
        return int(data) if data is not None else None

    def _selected_root(self) -> str | None:
        items = self.tree.selectedItems()
        return items[0].data(0, _ROOT_ROLE) if items else None

    def _selected_run_only(self) -> IndexingRow | None:
        """The run of the selected row when that row is no collection (yet)."""
        root = self._selected_root()
        return self._runs.get(root) if root and self.selected_id() is None else None

    def select(self, collection_id: int) -> None:
        for item in self._items():
            item.setSelected(item.data(0, Qt.ItemDataRole.UserRole) == collection_id)

    def _update_buttons(self) -> None:
        selected = self.selected_id()
        has = selected is not None
        # A folder whose first run stopped or failed: Re-scan runs it again, Remove unlists it.
        run = self._selected_run_only()
        over = run is not None and run.state in (STOPPED, FAILED)
        self.rescan_button.setEnabled(has or over)
        self.remove_button.setEnabled((has and not self._busy) or over)
        stats = self._stats.get(selected) if selected is not None else None
        self.skipped_button.setEnabled(bool(stats and stats.skipped))
        missing = getattr(stats, "missing", 0) if stats else 0
        self.forget_button.setVisible(bool(missing))
        self.forget_button.setText(f"Forget {missing:,} missing…")
        # Offered without a selection: after a quit mid-run the user should not have to find
        # the row (nor know that Re-scan resumes).
        resumable = bool(self.unfinished()) or any(r.state == STOPPED for r in self._runs.values())
        self.resume_button.setVisible(resumable)
        self.resume_button.setEnabled(resumable and not self._busy)

    # -- requests -----------------------------------------------------------------------------

    def _arrange_buttons(self, columns: int) -> None:
        if columns == self._button_columns:
            return
        self._button_columns = columns
        row_buttons = (self.add_button, self.rescan_button, self.remove_button, self.skipped_button)
        for button in row_buttons:
            self._buttons.removeWidget(button)
        for index, button in enumerate(row_buttons):
            self._buttons.addWidget(button, index // columns, index % columns)
        for column in range(4):
            self._buttons.setColumnStretch(column, 0)
        self._buttons.setColumnStretch(4, 1)

    def _one_row_width(self) -> int:
        buttons = (self.add_button, self.rescan_button, self.remove_button, self.skipped_button)
        layout = self.layout()
        margins = layout.contentsMargins() if layout is not None else None
        edge = margins.left() + margins.right() if margins else 12
        return sum(b.sizeHint().width() for b in buttons) + 3 * self._buttons.spacing() + edge

    def _two_rows_width(self) -> int:
        return (
            max(self.add_button.sizeHint().width(), self.remove_button.sizeHint().width())
            + max(self.rescan_button.sizeHint().width(), self.skipped_button.sizeHint().width())
            + self._buttons.spacing()
            + 12
        )

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt override
        self._arrange_buttons(4 if event.size().width() >= self._one_row_width() else 2)
        super().resizeEvent(event)

    def choose_folder(self) -> None:
        folder = existing_folder(self, self.folders, "add-folder", "Add a photo folder")
        if folder:
            self.addFolderRequested.emit(folder)

    def _rescan(self) -> None:
        if (selected := self.selected_id()) is not None:
            self.rescanRequested.emit(selected)
        elif (run := self._selected_run_only()) is not None:
            self.addFolderRequested.emit(run.root)  # resume: photos kept are not redone

    def resume(self) -> None:
        """Resume indexing every unfinished collection, and every folder whose first run
        stopped (the photos indexed already are not redone)."""
        if self._busy:
            return
        for stats in self.unfinished():
            self.rescanRequested.emit(stats.id)
        collections = {s.root for s in self._stats_list}
        for run in list(self._runs.values()):
            if run.state == STOPPED and run.root not in collections:
                self.addFolderRequested.emit(run.root)

    def _remove(self) -> None:
        if (selected := self.selected_id()) is not None:
            self.removeRequested.emit(selected)
        elif (run := self._selected_run_only()) is not None:
            self.clear_run(run.root)  # nothing of it is in the library: only the row goes

    def _forget_missing(self) -> None:
        if (selected := self.selected_id()) is not None:
            self.forgetMissingRequested.emit(selected)

    def show_skipped(self) -> SkippedDialog | None:
        selected = self.selected_id()
        stats = self._stats.get(selected) if selected is not None else None
        if not stats or not stats.skipped:
            return None
        dialog = SkippedDialog(
            stats.name, [(p.rel_path, p.reason) for p in stats.skipped_photos], self
        )
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.open()
        return dialog

    def set_busy(self, busy: bool) -> None:
        """While indexing, changing the list of collections waits."""
        self._busy = busy
        self._update_buttons()

    # -- drag and drop --------------------------------------------------------------------------

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:  # noqa: N802
        if dropped_folders(event):
            event.acceptProposedAction()
        else:
            event.ignore()

    def dropEvent(self, event: QDropEvent) -> None:  # noqa: N802
        folders = dropped_folders(event)
        if not folders:
            event.ignore()
            return
        event.acceptProposedAction()
        for folder in folders:
            self.addFolderRequested.emit(str(folder))
