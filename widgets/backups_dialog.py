"""File › Backups…: the library's catalog backups, newest first, and restoring one.

Presentation only: the rows are plain `BackupRow`s the backups controller
(`app/controllers/backups.py`) builds from the engine's list; the buttons emit requests, and
the controller asks for confirmation, restores in a worker and says how it went.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFont
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QProgressBar,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

COLUMNS = ("Taken", "Judgments", "Saved queries", "Size", "Kind")


@dataclass(frozen=True)
class BackupRow:
    """One backup as the list shows it (texts ready to show; `path` identifies it)."""

    path: str
    taken: str  # local time
    judgments: str
    queries: str
    size: str
    kind: str  # "full", "judgments only", with why it was taken
    undo: bool = False  # the newest before-restore backup: restoring it undoes the restore


class BackupsDialog(QDialog):
    """The list, Restore…, Back up now, and a progress line while one runs."""

    restoreRequested = Signal(str)  # the chosen backup's path
    backupRequested = Signal()

    def __init__(self, folder: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("backupsDialog")
        self.setWindowTitle("Backups")
        self.resize(720, 420)
        intro = QLabel(
            "Copies of the catalog — your saved queries, runs and judgments — kept in "
            f"{folder}. Restoring one replaces them all; the catalog as it is now is backed "
            "up first, so a restore is undone by restoring that backup (listed first).",
            self,
        )
        intro.setWordWrap(True)
        intro.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.table = QTableWidget(0, len(COLUMNS), self)
        self.table.setObjectName("backupsTable")
        self.table.setHorizontalHeaderLabels(list(COLUMNS))
        self.table.verticalHeader().hide()
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(len(COLUMNS) - 1, QHeaderView.ResizeMode.Stretch)
        self.table.itemSelectionChanged.connect(self._update_buttons)
        self.table.itemDoubleClicked.connect(lambda _item: self._restore())
        self.empty_label = QLabel("No backups yet.", self)
        self.empty_label.hide()
        self.status = QLabel(self)
        self.status.setObjectName("backupsStatus")
        self.status.setWordWrap(True)
        self.progress = QProgressBar(self)
        self.progress.setRange(0, 0)  # a restore reports no steps: busy until done
        self.progress.setTextVisible(False)
        self.progress.setMaximumHeight(10)
        self.progress.hide()

        self.restore_button = QPushButton("&Restore…", self)
        self.restore_button.setToolTip("Put back the queries and judgments of the chosen backup")
        self.restore_button.clicked.connect(self._restore)
        self.backup_button = QPushButton("&Back up now", self)
        self.backup_button.clicked.connect(self.backupRequested)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close, self)
        buttons.rejected.connect(self.reject)
        row = QHBoxLayout()
        row.addWidget(self.backup_button)
        row.addStretch(1)
        row.addWidget(self.restore_button)
        row.addWidget(buttons)

        layout = QVBoxLayout(self)
        layout.addWidget(intro)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.empty_label)
        layout.addWidget(self.status)
        layout.addWidget(self.progress)
        layout.addLayout(row)
        self._rows: list[BackupRow] = []
        self._busy = False
        self._update_buttons()

    # -- shown by the controller ------------------------------------------------------------

    def set_rows(self, rows: list[BackupRow]) -> None:
        """Show `rows` (newest first); the first is selected."""
        self._rows = list(rows)
        self.table.setRowCount(len(rows))
        for number, row in enumerate(rows):
            kind = f"{row.kind} — restore it to undo the last restore" if row.undo else row.kind
            cells = (row.taken, row.judgments, row.queries, row.size, kind)
            for column, text in enumerate(cells):
                cell = QTableWidgetItem(text)
                cell.setToolTip(row.path)
                if 1 <= column <= 3:
                    cell.setTextAlignment(
                        Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
                    )
                if row.undo:
                    font = QFont(cell.font())
                    font.setBold(True)
                    cell.setFont(font)
                self.table.setItem(number, column, cell)
        self.table.setVisible(bool(rows))
        self.empty_label.setVisible(not rows)
        if rows:
            self.table.selectRow(0)
        self._update_buttons()

    def rows(self) -> list[BackupRow]:
        return list(self._rows)

    def select_path(self, path: str) -> None:
        for number, row in enumerate(self._rows):
            if row.path == path:
                self.table.selectRow(number)

    def selected(self) -> BackupRow | None:
        chosen = self.table.selectionModel().selectedRows()
        if not chosen:
            return None
        number = chosen[0].row()
        return self._rows[number] if 0 <= number < len(self._rows) else None

    def set_busy(self, text: str | None) -> None:
        """A line and a busy bar while a restore or a backup runs (None: done)."""
        self._busy = text is not None
        self.progress.setVisible(self._busy)
        if text is not None:
            self.status.setText(text)
        self._update_buttons()

    def set_status(self, text: str) -> None:
        self.status.setText(text)

    # -- internals ------------------------------------------------------------------------------

    def _update_buttons(self) -> None:
        self.restore_button.setEnabled(not self._busy and self.selected() is not None)
        self.backup_button.setEnabled(not self._busy)

    def _restore(self) -> None:
        row = self.selected()
        if row is not None and not self._busy:
            self.restoreRequested.emit(row.path)
