"""The model chooser: which model to index and search with, and getting it onto this computer.

One tab per role a search can need: search models (CLIP encoders), image generators (VisRet's
drawings) and vision-language models (Reranked's questions). It shows the plain `ModelRow`s its
controller hands it (the offered models, each marked when it is already on disk) and emits what
the user asks for: use a model (downloading it first when
needed), use the bundled demo model, import a model file or folder, cancel a download. The
controller runs the work and reports back through `show_download`, `set_download_progress`,
`show_cancelled` and `show_failure`; the dialog itself decides nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QMenu,
    QProgressBar,
    QPushButton,
    QTabBar,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

DEMO_SPEC = "demo"
ON_DISK = "✓ on disk"
USE_ON_DISK = "Use the selected model"
USE_DOWNLOAD = "Download and use the selected model"
MODEL_FILES = "Models (*.qmodel *.zip *.tar *.safetensors *.pt *.pth *.bin *.ckpt);;All files (*)"
COLUMNS = ("Model", "Good at", "Download", "Memory", "On disk")
ROLE_TABS = (
    ("encoder", "Search models"),
    ("generator", "Image generators"),
    ("vlm", "Vision-language models"),
)


@dataclass(frozen=True)
class ModelRow:
    """One offered model, as the chooser lists it."""

    spec: str
    label: str
    download_bytes: int  # 0: nothing to download (bundled, or already on disk)
    memory_bytes: int
    good_at: str
    installed: bool
    licence: str = ""
    source: str = ""
    role: str = "encoder"  # "encoder" | "generator" | "vlm"
    use: str = ""  # once on disk, what a method takes to use it (a folder, vlm:FOLDER)


def format_bytes(size: int) -> str:
    """'151 MB', '1.7 GB'; '—' for nothing."""
    if size <= 0:
        return "—"
    if size >= 1_000_000_000:
        return f"{size / 1e9:.1f} GB"
    if size >= 10_000_000:
        return f"{size / 1e6:.0f} MB"
    return f"{size / 1e6:.1f} MB"


def format_megabytes(size: int) -> str:
    """Megabytes with one decimal ('12.5'), for 'MB of MB' progress."""
    return f"{size / 1e6:,.1f}"


class ModelChooser(QDialog):
    """Lists the offered models; emits what the user picks. Not modal: the window stays usable
    (the folder the user added is already listed in the library, waiting for a model)."""

    useRequested = Signal(str)  # a spec: use it, downloading it first when it is not on disk
    demoRequested = Signal()
    importRequested = Signal(str)  # a checkpoint file, open_clip model folder or model pack
    cancelRequested = Signal()  # stop the download in progress

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("modelChooser")
        self.setWindowTitle("Choose a model")
        self.setMinimumWidth(760)
        self._rows: list[ModelRow] = []  # every role's; the table shows the current tab's
        self._busy = False
        self._offline: str | None = None  # why nothing can be downloaded now (None: it can)

        self.tabs = QTabBar(self)
        self.tabs.setObjectName("modelRoleTabs")
        for _role, title in ROLE_TABS:
            self.tabs.addTab(title)
        self.tabs.currentChanged.connect(lambda _index: self._fill())

        self.reason = QLabel(self)
        self.reason.setObjectName("modelChooserReason")
        self.reason.setWordWrap(True)

        self.table = QTreeWidget(self)
        self.table.setObjectName("modelTable")
        self.table.setHeaderLabels(list(COLUMNS))
        self.table.setRootIsDecorated(False)
        self.table.setWordWrap(True)
        self.table.setUniformRowHeights(False)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        header = self.table.header()
        header.setStretchLastSection(False)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
        for column in (2, 3, 4):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
        self.table.itemSelectionChanged.connect(self._update_buttons)
        self.table.itemDoubleClicked.connect(lambda *_: self._use_selected())

        self.details = QLabel(self)
        self.details.setObjectName("modelDetails")
        self.details.setWordWrap(True)
        self.details.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

        self.offline_note = QLabel(self)
        self.offline_note.setObjectName("modelChooserOffline")
        self.offline_note.setWordWrap(True)
        self.offline_note.hide()

        self.status = QLabel(self)
        self.status.setObjectName("modelChooserStatus")
        self.status.setWordWrap(True)
        self.status.hide()
        self.error = QLabel(self)
        self.error.setObjectName("modelChooserError")
        self.error.setWordWrap(True)
        self.error.setStyleSheet("color: #b00020;")
        self.error.hide()

        self.progress = QProgressBar(self)
        self.progress.setObjectName("downloadProgress")
        self.progress.setRange(0, 1000)  # per mille: sizes in bytes overflow a QProgressBar
        self.progress.setTextVisible(False)
        self.progress_label = QLabel(self)
        self.progress_label.setObjectName("downloadProgressLabel")
        self.cancel_button = QPushButton("Cancel download", self)
        self.cancel_button.setObjectName("cancelDownloadButton")
        self.cancel_button.clicked.connect(self.cancelRequested)
        progress_row = QHBoxLayout()
        progress_row.addWidget(self.progress, 1)
        progress_row.addWidget(self.progress_label)
        progress_row.addWidget(self.cancel_button)
        self.progress_box = QWidget(self)
        self.progress_box.setLayout(progress_row)
        progress_row.setContentsMargins(0, 0, 0, 0)
        self.progress_box.hide()

        self.use_button = QPushButton(USE_DOWNLOAD, self)
        self.use_button.setObjectName("useModelButton")
        # As wide as its longer wording: the buttons beside it stay put whichever tab or row is
        # chosen (they moved as the text changed between "Use" and "Download and use").
        self.use_button.setMinimumWidth(self.use_button.sizeHint().width())
        self.use_button.setText(USE_ON_DISK)
        self.use_button.setDefault(True)
        self.use_button.clicked.connect(self._use_selected)
        self.demo_button = QPushButton("Use the demo model", self)
        self.demo_button.setObjectName("useDemoButton")
        self.demo_button.setToolTip(
            "The small bundled model: works offline at once; good for trying Quadrat, "
            "not for real collections"
        )
        self.demo_button.clicked.connect(self.demoRequested)
        self.import_button = QPushButton("Import a model file or folder…", self)
        self.import_button.setObjectName("importModelButton")
        menu = QMenu(self.import_button)
        menu.addAction("A model pack or checkpoint file…", self._import_file)
        menu.addAction("An open_clip model folder…", self._import_folder)
        self.import_button.setMenu(menu)
        self.close_button = QPushButton("Not now", self)
        self.close_button.setToolTip(
            "Close; the folders you added stay in the library and are indexed once a model is "
            "on disk"
        )
        self.close_button.clicked.connect(self.reject)
        buttons = QHBoxLayout()
        buttons.addWidget(self.use_button)
        buttons.addWidget(self.demo_button)
        buttons.addWidget(self.import_button)
        buttons.addStretch(1)
        buttons.addWidget(self.close_button)

        layout = QVBoxLayout(self)
        layout.addWidget(self.reason)
        layout.addWidget(self.tabs)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.details)
        layout.addWidget(self.offline_note)
        layout.addWidget(self.status)
        layout.addWidget(self.progress_box)
        layout.addWidget(self.error)
        layout.addLayout(buttons)
        self.resize(960, 400)  # fits a 1280×800 screen with the whole catalogue in view
        self._update_buttons()

    # -- contents -----------------------------------------------------------------------------

    def set_reason(self, text: str) -> None:
        """Why the chooser is open ("… needs a model to index “birds”")."""
        self.reason.setText(text)
        self.reason.setVisible(bool(text))

    def set_rows(self, rows: Sequence[ModelRow], selected: str | None = None) -> None:
        """Show `rows` (any roles), selecting `selected` on its role's tab (else the first row
        of the tab shown)."""
        keep = selected or self.selected_spec()
        self._rows = list(rows)
        role = next((row.role for row in self._rows if row.spec == keep), None)
        if role is not None:
            self.set_role(role, keep)
        else:
            self._fill(keep)
        if self._offline is not None:
            self._prefer_local()

    def set_offline(self, reason: str | None) -> None:
        """Whether models can be downloaded now: None when they can (or it is not known yet),
        else why not. Offline, Enter uses something on this computer (a model already on
        disk, else the demo model), never a download that cannot start."""
        self._offline = reason
        self.offline_note.setText(
            f"No connection to the model hub ({reason}). Use a model on this computer or the "
            "demo model, or import a model file, folder or pack."
            if reason
            else ""
        )
        self.offline_note.setVisible(bool(reason))
        if reason is not None:
            self._prefer_local()
        self._update_buttons()

    def offline(self) -> str | None:
        return self._offline

    def _prefer_local(self) -> None:
        """Offline with a download selected: select a search model already on disk instead
        (the bundled demo model is its own button)."""
        row = self._selected_row()
        if self._busy or self.role() != "encoder" or row is None or row.installed:
            return
        local = next((r for r in self.rows() if r.installed and r.spec != DEMO_SPEC), None)
        if local is not None:
            self.select(local.spec)

    def role(self) -> str:
        """The role whose tab is shown."""
        return ROLE_TABS[max(0, self.tabs.currentIndex())][0]

    def set_role(self, role: str, selected: str | None = None) -> None:
        """Show the tab of `role` ("encoder", "generator", "vlm")."""
        index = next((i for i, (name, _title) in enumerate(ROLE_TABS) if name == role), 0)
        if index == self.tabs.currentIndex():
            self._fill(selected)
        else:
            self.tabs.blockSignals(True)
            self.tabs.setCurrentIndex(index)
            self.tabs.blockSignals(False)
            self._fill(selected)

    def _fill(self, keep: str | None = None) -> None:
        self.table.clear()
        for row in self.rows():
            item = QTreeWidgetItem(
                [
                    row.label,
                    row.good_at,
                    "bundled" if row.spec == DEMO_SPEC else format_bytes(row.download_bytes),
                    format_bytes(row.memory_bytes),
                    ON_DISK if row.installed else "",
                ]
            )
            item.setData(0, Qt.ItemDataRole.UserRole, row.spec)
            item.setToolTip(0, row.spec)
            item.setToolTip(1, row.good_at)
            for column in (2, 3):
                item.setTextAlignment(
                    column, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
                )
            self.table.addTopLevelItem(item)
            if row.spec == keep:
                item.setSelected(True)
        first = self.table.topLevelItem(0)
        if not self.table.selectedItems() and first is not None:
            first.setSelected(True)
        self._update_buttons()

    def rows(self) -> list[ModelRow]:
        """The rows of the tab shown."""
        role = self.role()
        return [row for row in self._rows if row.role == role]

    def selected_spec(self) -> str | None:
        items = self.table.selectedItems()
        return str(items[0].data(0, Qt.ItemDataRole.UserRole)) if items else None

    def select(self, spec: str) -> None:
        for index in range(self.table.topLevelItemCount()):
            item = self.table.topLevelItem(index)
            if item is not None:
                item.setSelected(item.data(0, Qt.ItemDataRole.UserRole) == spec)

    def _selected_row(self) -> ModelRow | None:
        spec = self.selected_spec()
        return next((r for r in self._rows if r.spec == spec), None)

    def _update_buttons(self) -> None:
        row = self._selected_row()
        if row is None:
            self.details.clear()
        else:
            facts = [f"<b>{row.label}</b> — {row.good_at}"]
            if row.licence:
                facts.append(f"Licence: {row.licence}")
            if row.source:
                facts.append(f"From: {row.source}")
            if row.installed and row.use and row.use != row.spec:
                facts.append(f"Use it as: {row.use}")
            self.details.setText("<br>".join(facts))
        needs_download = row is not None and not row.installed
        self.use_button.setText(USE_DOWNLOAD if needs_download else USE_ON_DISK)
        self.use_button.setEnabled(row is not None and not self._busy)
        encoders = self.role() == "encoder"  # the demo and imports are search models
        # Enter never starts a download that cannot start: offline, it takes the demo model.
        local_default = self._offline is not None and needs_download and encoders
        self.use_button.setDefault(not local_default)
        self.demo_button.setDefault(local_default)
        self.demo_button.setEnabled(not self._busy and encoders)
        self.import_button.setEnabled(not self._busy and encoders)
        self.table.setEnabled(not self._busy)
        self.tabs.setEnabled(not self._busy)

    # -- what the controller reports ----------------------------------------------------------

    def set_busy(self, busy: bool) -> None:
        """While a download or import runs, only Cancel (and closing) stay available."""
        self._busy = busy
        self._update_buttons()

    def show_download(self, label: str) -> None:
        """A download of `label` starts: show the bar and the Cancel button."""
        self.error.hide()
        self.status.setText(f"Downloading {label}…")
        self.status.show()
        self.progress.setValue(0)
        self.progress_label.setText("starting…")
        self.cancel_button.setEnabled(True)
        self.progress_box.show()
        self.set_busy(True)

    def set_download_progress(self, done: int, total: int) -> None:
        """`done` of `total` bytes (total 0: not known yet)."""
        if total > 0:
            self.progress.setRange(0, 1000)
            self.progress.setValue(min(1000, int(1000 * done / total)))
            self.progress_label.setText(f"{format_megabytes(done)} of {format_megabytes(total)} MB")
        else:
            self.progress.setRange(0, 0)  # busy indicator until the size is known
            self.progress_label.setText(f"{format_megabytes(done)} MB")

    def show_working(self, text: str, *, cancellable: bool = False) -> None:
        """Work without a byte count (importing a model, exporting it to ONNX): a busy bar and
        what is happening; Cancel enabled when the work can stop."""
        self.error.hide()
        self.status.setText(text)
        self.status.show()
        self.progress.setRange(0, 0)
        self.progress_label.clear()
        self.cancel_button.setEnabled(cancellable)
        self.progress_box.show()
        self.set_busy(True)

    def show_cancelled(self, text: str) -> None:
        self._idle()
        self.status.setText(text)
        self.status.show()

    def show_failure(self, sentence: str) -> None:
        """One sentence on what failed; every other choice stays open."""
        self._idle()
        self.status.hide()
        self.error.setText(sentence)
        self.error.show()
        self.demo_button.setFocus()

    def _idle(self) -> None:
        self.progress_box.hide()
        self.progress.setRange(0, 1000)
        self.set_busy(False)

    # -- requests -----------------------------------------------------------------------------

    def _use_selected(self) -> None:
        spec = self.selected_spec()
        if spec is not None and not self._busy:
            self.useRequested.emit(spec)

    def _import_file(self) -> None:
        path = self.ask_import_file()
        if path:
            self.importRequested.emit(path)

    def _import_folder(self) -> None:
        path = self.ask_import_folder()
        if path:
            self.importRequested.emit(path)

    def ask_import_file(self) -> str | None:
        """A model pack or checkpoint file, or None; tests replace this method."""
        path, _ = QFileDialog.getOpenFileName(self, "Import a model", "", MODEL_FILES)
        return path or None

    def ask_import_folder(self) -> str | None:
        """An open_clip model folder, or None; tests replace this method."""
        return QFileDialog.getExistingDirectory(self, "Import an open_clip model folder") or None
