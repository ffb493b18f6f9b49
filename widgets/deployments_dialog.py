"""Library › Deployments…: each camera deployment (name and serial, folder, photos, first and
last capture time, clock offset), a field to set the selected deployment's clock offset, Undo,
and the library's event gap.

Presentation only: the rows come ready to show (`DeploymentRow`); the buttons emit what the
user asked for, and the deployments controller (`app/controllers/deployments.py`) parses,
writes in a worker and hands back the rows and a one-line outcome.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

MAX_GAP_S = 24 * 3600  # as the engine allows: a day
_COLUMNS = ("Deployment", "Folder", "Photos", "First – last capture", "Clock offset")


@dataclass(frozen=True)
class DeploymentRow:
    """One deployment as the table shows it."""

    deployment_id: int
    name: str
    folder: str
    photos: int
    span: str
    clock_offset: str  # +HH:MM:SS
    can_undo: bool


class DeploymentsDialog(QDialog):
    """The deployments table, the clock offset of the selected one, and the event gap."""

    offsetRequested = Signal(int, str)  # deployment id, the offset as typed
    undoRequested = Signal(int)  # deployment id
    gapRequested = Signal(int)  # seconds

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("deploymentsDialog")
        self.setWindowTitle("Deployments")
        self.resize(900, 420)
        self.rows: list[DeploymentRow] = []
        intro = QLabel(
            "Cameras found by their serial, or folders marked as deployments. When a camera's "
            "clock was wrong, give its offset: every time shown, filtered and exported moves.",
            self,
        )
        intro.setWordWrap(True)
        self.table = QTableWidget(0, len(_COLUMNS), self)
        self.table.setObjectName("deploymentsTable")
        self.table.setHorizontalHeaderLabels(list(_COLUMNS))
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().setVisible(False)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
        self.table.itemSelectionChanged.connect(self._selection_changed)

        self.offset_edit = QLineEdit(self)
        self.offset_edit.setObjectName("clockOffset")
        self.offset_edit.setPlaceholderText("+01:00:00 or seconds")
        self.offset_edit.setToolTip(
            "Added to the camera's clock: +01:00:00 when it ran an hour behind, or seconds"
        )
        self.offset_edit.returnPressed.connect(self._ask_offset)
        self.set_offset_button = QPushButton("Set offset", self)
        self.set_offset_button.clicked.connect(self._ask_offset)
        self.undo_button = QPushButton("Undo", self)
        self.undo_button.setToolTip("Bring back the deployment's previous clock offset")
        self.undo_button.clicked.connect(self._ask_undo)
        offset_row = QHBoxLayout()
        offset_row.addWidget(QLabel("Clock offset of the selected deployment:", self))
        offset_row.addWidget(self.offset_edit, 1)
        offset_row.addWidget(self.set_offset_button)
        offset_row.addWidget(self.undo_button)

        self.gap_spin = QSpinBox(self)
        self.gap_spin.setObjectName("eventGap")
        self.gap_spin.setRange(0, MAX_GAP_S)
        self.gap_spin.setSuffix(" s")
        self.gap_spin.setToolTip(
            "Frames of one camera at most this far apart form one event (the independence interval)"
        )
        self.set_gap_button = QPushButton("Set gap", self)
        self.set_gap_button.clicked.connect(lambda: self.gapRequested.emit(self.gap_spin.value()))
        gap_row = QHBoxLayout()
        gap_row.addWidget(QLabel("Event gap for the library:", self))
        gap_row.addWidget(self.gap_spin)
        gap_row.addWidget(self.set_gap_button)
        gap_row.addStretch(1)

        self.outcome = QLabel("Reading the deployments…", self)
        self.outcome.setObjectName("deploymentsOutcome")
        self.outcome.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close, parent=self)
        buttons.rejected.connect(self.reject)

        layout = QVBoxLayout(self)
        layout.addWidget(intro)
        layout.addWidget(self.table, 1)
        layout.addLayout(offset_row)
        layout.addLayout(gap_row)
        layout.addWidget(self.outcome)
        layout.addWidget(buttons)
        self._selection_changed()

    # -- filled by the controller --------------------------------------------------------------

    def show_deployments(self, rows: list[DeploymentRow], gap: int) -> None:
        """Show `rows` (the selected deployment stays selected) and the event gap."""
        selected = self.selected_id()
        self.rows = rows
        self.table.setRowCount(len(rows))
        for index, row in enumerate(rows):
            cells = (row.name, row.folder, f"{row.photos:,}", row.span, row.clock_offset)
            for column, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if column in (2, 4):
                    item.setTextAlignment(
                        Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
                    )
                self.table.setItem(index, column, item)
        self.gap_spin.setValue(gap)
        if self.outcome.text() == "Reading the deployments…":
            self.outcome.setText(
                f"{len(rows)} deployment{'s' * (len(rows) != 1)}"
                if rows
                else "No deployments: no photo here names a camera serial"
            )
        ids = [row.deployment_id for row in rows]
        if rows:
            self.table.selectRow(ids.index(selected) if selected in ids else 0)
        self._selection_changed()

    def show_outcome(self, line: str) -> None:
        self.outcome.setText(line)

    # -- what the user asks --------------------------------------------------------------------

    def select_deployment(self, deployment_id: int) -> None:
        ids = [row.deployment_id for row in self.rows]
        self.table.selectRow(ids.index(deployment_id))

    def selected_row(self) -> DeploymentRow | None:
        chosen = self.table.selectionModel().selectedRows()
        return self.rows[chosen[0].row()] if chosen and chosen[0].row() < len(self.rows) else None

    def selected_id(self) -> int | None:
        row = self.selected_row()
        return row.deployment_id if row is not None else None

    def _selection_changed(self) -> None:
        row = self.selected_row()
        for widget in (self.offset_edit, self.set_offset_button):
            widget.setEnabled(row is not None)
        self.undo_button.setEnabled(row is not None and row.can_undo)
        if row is not None:
            self.offset_edit.setText(row.clock_offset)

    def _ask_offset(self) -> None:
        row = self.selected_row()
        if row is not None:
            self.offsetRequested.emit(row.deployment_id, self.offset_edit.text())

    def _ask_undo(self) -> None:
        row = self.selected_row()
        if row is not None and row.can_undo:
            self.undoRequested.emit(row.deployment_id)
