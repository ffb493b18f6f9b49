"""Judge › Export records…: the open query's relevant photos as Darwin Core records, a
Darwin Core Archive for GBIF or a flat Darwin Core CSV, or its judged camera-trap events as a
Camtrap DP package (a folder).

Presentation only: the dialog gathers the format, whether photos with a restricted licence
go in, the file, and for Camtrap DP the scientific name; `exportRequested` hands a `RecordsRequest` to the records controller
(`app/controllers/records.py`), which writes in a worker and says the outcome in one line.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QButtonGroup,
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QRadioButton,
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


class RecordsDialog(QDialog):
    """Format, restricted licences, the file; Export hands them on and closes."""

    exportRequested = Signal(object)  # RecordsRequest

    def __init__(
        self,
        query_title: str,
        relevant: int,
        folders: FolderMemory | None = None,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setObjectName("recordsDialog")
        self.setWindowTitle("Export records")
        self.setMinimumWidth(520)  # room for a full path to the file
        self.folders = folders or NoFolderMemory()
        intro = QLabel(
            f"The {relevant:,} photos judged relevant for “{query_title}”, one Darwin Core "
            "record each, with the query, search method, model and judges as provenance.",
            self,
        )
        intro.setWordWrap(True)
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
        layout = QVBoxLayout(self)
        layout.addWidget(intro)
        layout.addWidget(self.archive_button)
        layout.addWidget(self.csv_button)
        layout.addWidget(self.camtrap_button)
        layout.addWidget(self.restricted_box)
        layout.addLayout(name_row)
        layout.addWidget(self.name_hint)
        layout.addLayout(path_row)
        layout.addWidget(self.buttons)
        self.export_button.setEnabled(relevant > 0)
        self._relevant = relevant
        self._update_button()
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
        self.export_button.setEnabled(self._relevant > 0 and bool(self.path_edit.text().strip()))

    def _export(self) -> None:
        request = self.request()
        if not request.path or self._relevant <= 0:
            return
        self.exportRequested.emit(request)
        self.accept()
