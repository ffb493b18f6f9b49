"""The library panel: collections with their counts, add/remove/re-scan, indexing progress."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
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

SHOW_DELAY_MS = 500


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
        self._stats: dict[int, Any] = {}

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
        buttons = QHBoxLayout()
        buttons.setSpacing(4)
        for button in (
            self.add_button,
            self.rescan_button,
            self.remove_button,
            self.skipped_button,
        ):
            buttons.addWidget(button)
        buttons.addStretch(1)

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
        layout.addLayout(summary_row)
        layout.addWidget(self.progress)
        self._update_buttons()

    # -- contents -----------------------------------------------------------------------------

    def set_collections(self, stats: list[Any]) -> None:
        """Show `stats` (objects with id, name, root, indexed, skipped, pending, ...)."""
        selected = self.selected_id()
        self.tree.clear()
        self._stats = {s.id: s for s in stats}
        for s in stats:
            missing = getattr(s, "missing", 0)
            item = QTreeWidgetItem(
                [s.name, f"{s.indexed:,}", f"{s.skipped:,}", f"{s.pending:,}", f"{missing:,}"]
            )
            item.setData(0, Qt.ItemDataRole.UserRole, s.id)
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
            if s.id == selected:
                item.setSelected(True)
        if self.tree.selectedItems() == [] and self.tree.topLevelItemCount() == 1:
            self.tree.topLevelItem(0).setSelected(True)
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
        self.summary.setText(summary)
        self.empty_hint.setVisible(not stats)
        self._update_buttons()

    def stats(self, collection_id: int) -> Any:
        return self._stats.get(collection_id)

    def selected_id(self) -> int | None:
        items = self.tree.selectedItems()
        return int(items[0].data(0, Qt.ItemDataRole.UserRole)) if items else None

    def select(self, collection_id: int) -> None:
        for row in range(self.tree.topLevelItemCount()):
            item = self.tree.topLevelItem(row)
            item.setSelected(item.data(0, Qt.ItemDataRole.UserRole) == collection_id)

    def _update_buttons(self) -> None:
        selected = self.selected_id()
        has = selected is not None
        self.rescan_button.setEnabled(has)
        self.remove_button.setEnabled(has)
        stats = self._stats.get(selected) if has else None
        self.skipped_button.setEnabled(bool(stats and stats.skipped))
        missing = getattr(stats, "missing", 0) if stats else 0
        self.forget_button.setVisible(bool(missing))
        self.forget_button.setText(f"Forget {missing:,} missing…")

    # -- requests -----------------------------------------------------------------------------

    def choose_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Add a photo folder")
        if folder:
            self.addFolderRequested.emit(folder)

    def _rescan(self) -> None:
        if (selected := self.selected_id()) is not None:
            self.rescanRequested.emit(selected)

    def _remove(self) -> None:
        if (selected := self.selected_id()) is not None:
            self.removeRequested.emit(selected)

    def _forget_missing(self) -> None:
        if (selected := self.selected_id()) is not None:
            self.forgetMissingRequested.emit(selected)

    def show_skipped(self) -> SkippedDialog | None:
        stats = self._stats.get(self.selected_id()) if self.selected_id() is not None else None
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
        self.remove_button.setEnabled(not busy and self.selected_id() is not None)

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
