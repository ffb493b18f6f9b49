"""Judge › Export records…: the open query's relevant photos as Darwin Core records, a
Darwin Core Archive for GBIF or a flat Darwin Core CSV, or its judged camera-trap events as a
Camtrap DP package (a folder).

Presentation only: the dialog gathers the format, whether photos with a restricted licence
go in, the file, and for Camtrap DP the scientific name; it shows what its controller
(`app/controllers/records.py`) worked out before anything is written (`RecordsPreview`: how
many records will be written, and every record left out or written with a problem, with its
reason, in a table that can be copied), or why export waits (judging blind). `optionsChanged`
and `nameEdited` ask for the preview again; `exportRequested` hands a `RecordsRequest` on, and
`endBlindRequested` asks to end the blind round.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QAbstractItemView,
    QButtonGroup,
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QMessageBox,
    QPushButton,
    QRadioButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from widgets.file_dialogs import FolderMemory, NoFolderMemory, existing_folder, save_file

DWCA = "dwca"
DWC_CSV = "dwc-csv"
CAMTRAP_DP = "camtrap-dp"  # a folder: datapackage.json and three CSV tables
_SUFFIX = {DWCA: ".zip", DWC_CSV: ".csv", CAMTRAP_DP: ""}
_FILTER = {DWCA: "Darwin Core Archive (*.zip)", DWC_CSV: "CSV (*.csv)"}


@dataclass(frozen=True)
class RecordsRequest:
    """What to write: `fmt` DWCA, DWC_CSV or CAMTRAP_DP, restricted photos in or out, and
    where (a file, or the package's folder); for Camtrap DP, the scientific name typed."""

    fmt: str
    include_restricted: bool
    path: str
    scientific_name: str = ""  # Camtrap DP: the observations' taxon where photos name none


LEFT_OUT = "left out"
WRITTEN = "written"
STOPS = "stops the export"  # a problem the standard's readers would refuse the file for


@dataclass(frozen=True)
class RecordRow:
    """One line of the dialog's list: a photo (or a group of them), whether it is written,
    and why it is listed."""

    photo: str
    outcome: str  # LEFT_OUT, WRITTEN or STOPS
    reason: str


@dataclass(frozen=True)
class RecordsPreview:
    """What the export would write, worked out before the file is asked for: the headline
    ("18 of the 23 photos judged relevant will be written…"), how many records (observations
    for Camtrap DP) that is (none: Export stays off), each photo left out or written with a
    problem, and a hint on how to write more."""

    headline: str
    writable: int
    rows: tuple[RecordRow, ...] = ()
    hint: str = ""


class RecordsDialog(QDialog):
    """Format, restricted licences, the file, and what will be written; Export hands them on
    and closes."""

    exportRequested = Signal(object)  # RecordsRequest
    optionsChanged = Signal()  # the format or the licence choice changed
    nameEdited = Signal()  # the scientific name changed (what is written stays as shown)
    endBlindRequested = Signal()

    def __init__(
        self,
        query_title: str,
        folders: FolderMemory | None = None,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setObjectName("recordsDialog")
        self.setWindowTitle("Export records")
        self.setMinimumWidth(640)  # room for a full path to the file and the list's reasons
        self.resize(780, 560)
        self.folders = folders or NoFolderMemory()
        self.query_title = query_title
        self.intro = intro = QLabel(self)
        intro.setObjectName("recordsHeadline")
        intro.setWordWrap(True)
        # Room for three lines, whatever the headline says: the dialog keeps its height.
        intro.setMinimumHeight(intro.fontMetrics().lineSpacing() * 3 + 4)
        intro.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)
        intro.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        # Judging blind: why export waits, and the way out.
        self.end_blind_button = QPushButton("End the blind round…", self)
        self.end_blind_button.setObjectName("endBlindRound")
        self.end_blind_button.setToolTip(
            "Show every judge's marks again (Judge › Judge blind off), then check what "
            "would be written"
        )
        self.end_blind_button.clicked.connect(lambda: self.endBlindRequested.emit())
        self.end_blind_button.hide()
        # Every record left out, or written with a problem, and why: read and copied here.
        self.table = QTableWidget(0, 3, self)
        self.table.setObjectName("recordsListed")
        self.table.setHorizontalHeaderLabels(["Photo", "Written?", "Why"])
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.verticalHeader().hide()
        self.table.setWordWrap(False)
        self.table.setTextElideMode(Qt.TextElideMode.ElideMiddle)  # a path's file name shows
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Interactive)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.ResizeToContents)
        header.setStretchLastSection(True)
        self.table.setColumnWidth(0, 300)
        self.table.setMinimumHeight(120)
        self.copy_button = QPushButton("Copy list", self)
        self.copy_button.setObjectName("copyRecordsList")
        self.copy_button.setToolTip("Copy the list as tab-separated text (photo, written?, why)")
        self.copy_button.clicked.connect(self.copy_rows)
        self.hint = QLabel(self)
        self.hint.setObjectName("recordsHint")
        self.hint.setWordWrap(True)
        self._rows: tuple[RecordRow, ...] = ()
        self._writable = 0
        self.archive_button = QRadioButton("Darwin Core Archive for GBIF (.zip)", self)
        self.archive_button.setToolTip(
            "occurrence.txt, multimedia.txt, meta.xml and eml.xml, as GBIF's IPT reads them"
        )
        self.csv_button = QRadioButton("Darwin Core CSV, for R and spreadsheets (.csv)", self)
        self.formats = QButtonGroup(self)
        self.formats.addButton(self.archive_button)
        self.formats.addButton(self.csv_button)
        self.camtrap_button = QRadioButton("Camtrap DP package, for camera traps (a folder)", self)
        self.camtrap_button.setToolTip(
            "datapackage.json, deployments.csv, media.csv and observations.csv (Camtrap DP 1.0): "
            "the events of the deployments judged relevant"
        )
        self.formats.addButton(self.camtrap_button)
        self.archive_button.setChecked(True)
        self.restricted_box = QCheckBox("Include photos whose licence does not allow reuse", self)
        self.restricted_box.setToolTip(
            "All rights reserved, or no licence recorded: left out and counted unless ticked"
        )
        # Camtrap DP only: the taxon of observations whose photos name none (prefilled by the
        # controller with the one the relevant photos share, when they share one).
        self.name_label = QLabel("Scientific name:", self)
        self.name_edit = QLineEdit(self)
        self.name_edit.setObjectName("scientificName")
        self.name_edit.setPlaceholderText("e.g. Capreolus capreolus")
        self.name_label.setBuddy(self.name_edit)
        name_row = QHBoxLayout()
        name_row.addWidget(self.name_label)
        name_row.addWidget(self.name_edit, 1)
        self.name_hint = QLabel(
            "Without a name, observations whose photos name no taxon have none", self
        )
        self.name_hint.setObjectName("scientificNameHint")
        self.name_hint.setWordWrap(True)
        # Its room is kept while hidden, so the dialog never changes height under the user.
        hint_policy = self.name_hint.sizePolicy()
        hint_policy.setRetainSizeWhenHidden(True)
        self.name_hint.setSizePolicy(hint_policy)
        self.path_edit = QLineEdit(self)
        self.path_edit.setObjectName("recordsPath")
        self.path_edit.setPlaceholderText("The file to write")
        self.path_edit.setText(self._suggested(query_title))
        choose = QPushButton("Choose…", self)
        choose.clicked.connect(self._choose)
        path_row = QHBoxLayout()
        path_row.addWidget(self.path_edit, 1)
        path_row.addWidget(choose)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel, parent=self)
        self.export_button = self.buttons.addButton(
            "Export", QDialogButtonBox.ButtonRole.AcceptRole
        )
        self.buttons.accepted.connect(self._export)
        self.buttons.rejected.connect(self.reject)
        self.formats.buttonToggled.connect(lambda *_: self._match_suffix())
        self.formats.buttonToggled.connect(lambda *_: self._update_name())
        self.name_edit.textChanged.connect(lambda _text: self._update_name())
        self.path_edit.textChanged.connect(lambda _text: self._update_button())
        # What will be written depends on these: the controller checks again.
        self.formats.buttonToggled.connect(self._format_toggled)
        self.restricted_box.toggled.connect(lambda _on: self.optionsChanged.emit())
        self.name_edit.editingFinished.connect(lambda: self.nameEdited.emit())
        blind_row = QHBoxLayout()
        blind_row.addWidget(self.end_blind_button)
        blind_row.addStretch(1)
        copy_row = QHBoxLayout()
        copy_row.addStretch(1)
        copy_row.addWidget(self.copy_button)
        layout = QVBoxLayout(self)
        layout.addWidget(intro)
        layout.addLayout(blind_row)
        layout.addWidget(self.archive_button)
        layout.addWidget(self.csv_button)
        layout.addWidget(self.camtrap_button)
        layout.addWidget(self.restricted_box)
        layout.addLayout(name_row)
        layout.addWidget(self.name_hint)
        layout.addWidget(self.table, 100)
        layout.addLayout(copy_row)
        layout.addWidget(self.hint)
        layout.addStretch(1)  # takes the room while no list shows (the table takes it else)
        layout.addLayout(path_row)
        layout.addWidget(self.buttons)
        self.show_checking()
        self._update_name()

    @property
    def fmt(self) -> str:
        if self.camtrap_button.isChecked():
            return CAMTRAP_DP
        return DWCA if self.archive_button.isChecked() else DWC_CSV

    def request(self) -> RecordsRequest:
        """What the dialog shows now."""
        name = self.name_edit.text().strip() if self.fmt == CAMTRAP_DP else ""
        return RecordsRequest(
            self.fmt, self.restricted_box.isChecked(), self.path_edit.text().strip(), name
        )

    def suggest_scientific_name(self, name: str) -> None:
        """Prefill the scientific name, unless the user has typed one."""
        if name and not self.name_edit.text().strip():
            self.name_edit.setText(name)
            if self.fmt == CAMTRAP_DP:
                self.nameEdited.emit()

    # -- what will be written ------------------------------------------------------------------

    def show_checking(self) -> None:
        """While the controller works out what would be written: nothing promised yet."""
        self.intro.setText(f"Checking what would be written for “{self.query_title}”…")
        self.end_blind_button.hide()
        self._show_rows((), "")
        self._writable = 0
        self._update_button()

    def show_preview(self, preview: RecordsPreview) -> None:
        """What will be written, and every record left out or written with a problem."""
        self.intro.setText(preview.headline)
        self.end_blind_button.hide()
        self._show_rows(preview.rows, preview.hint)
        self._writable = preview.writable
        self._update_button()

    def show_waiting(self, text: str) -> None:
        """Export waits (judging blind): why, and the button that ends the blind round."""
        self.intro.setText(text)
        self.end_blind_button.show()
        self._show_rows((), "")
        self._writable = 0
        self._update_button()

    def rows(self) -> tuple[RecordRow, ...]:
        return self._rows

    def rows_text(self) -> str:
        """The list as tab-separated lines, a header first (what Copy list copies)."""
        lines = ["photo\twritten?\twhy"]
        lines += [f"{row.photo}\t{row.outcome}\t{row.reason}" for row in self._rows]
        return "\n".join(lines) + "\n"

    def copy_rows(self) -> None:
        QGuiApplication.clipboard().setText(self.rows_text())

    def _show_rows(self, rows: tuple[RecordRow, ...], hint: str) -> None:
        self._rows = tuple(rows)
        self.table.setRowCount(len(rows))
        for index, row in enumerate(rows):
            for column, text in enumerate((row.photo, row.outcome, row.reason)):
                item = QTableWidgetItem(text)
                item.setToolTip(text)
                self.table.setItem(index, column, item)
        self.table.setVisible(bool(rows))
        self.copy_button.setVisible(bool(rows))
        self.hint.setText(hint)
        self.hint.setVisible(bool(hint))

    def _format_toggled(self, _button: object, checked: bool) -> None:
        if checked:  # once per change, not for the button that went off
            self.optionsChanged.emit()

    def _update_name(self) -> None:
        camtrap = self.fmt == CAMTRAP_DP
        self.name_label.setEnabled(camtrap)
        self.name_edit.setEnabled(camtrap)
        # The hint says what an empty name means; a name given makes it moot.
        self.name_hint.setVisible(camtrap and not self.name_edit.text().strip())

    def _suggested(self, title: str) -> str:
        stem = "".join(c if c.isalnum() else "-" for c in title.lower()).strip("-") or "records"
        name = f"{stem[:60]}-records{_SUFFIX[DWCA]}"
        # A relative name would land wherever the app was started: the home folder instead.
        folder = self.folders.folder("save:records") or str(Path.home())
        return str(Path(folder) / name)

    def _match_suffix(self) -> None:
        """The file's suffix follows the format (records.zip <-> records.csv <-> the folder
        records)."""
        text = self.path_edit.text().strip()
        if text:
            path = Path(text)
            if path.suffix.lower() in (".zip", ".csv") or not path.suffix:
                self.path_edit.setText(str(path.with_suffix(_SUFFIX[self.fmt])))

    def _choose(self) -> None:
        if self.fmt == CAMTRAP_DP:
            folder = existing_folder(self, self.folders, "save:records", "Write the package into")
            if folder:
                self.path_edit.setText(folder)
            return
        path = save_file(
            self,
            self.folders,
            "save:records",
            "Export records to",
            self.path_edit.text().strip(),
            _FILTER[self.fmt],
        )
        if path:
            self.path_edit.setText(path)

    def _update_button(self) -> None:
        self.export_button.setEnabled(self._writable > 0 and bool(self.path_edit.text().strip()))

    def _export(self) -> None:
        request = self.request()
        if not request.path or self._writable <= 0:
            return
        self.exportRequested.emit(request)
        self.accept()


def show_outcome(
    parent: QWidget | None, title: str, text: str, details: str = "", failed: bool = False
) -> QMessageBox:
    """The outcome of an export, readable and left open until dismissed (modal to its window
    only); `details`: the records listed, one per line; `failed`: nothing was written."""
    box = QMessageBox(parent)
    box.setObjectName("recordsOutcome")
    box.setWindowTitle(title)
    if failed:
        box.setIcon(QMessageBox.Icon.Critical)
    else:
        box.setIcon(QMessageBox.Icon.Warning if details else QMessageBox.Icon.Information)
    box.setText(text)
    box.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    if details:
        box.setDetailedText(details)
    box.setStandardButtons(QMessageBox.StandardButton.Ok)
    box.open()
    return box
