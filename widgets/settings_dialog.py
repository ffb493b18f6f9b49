"""The settings dialog: model, device, batch size, library folder, results per search."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.settings import COMMON_MODELS, DEVICES, MAX_BATCH_SIZE, Settings

LOCAL_CHECKPOINT = "__local_checkpoint__"


class SettingsDialog(QDialog):
    """Edits a copy of `Settings`; OK validates and refuses bad values with a message."""

    def __init__(
        self,
        settings: Settings,
        detected_device: str | None = None,
        default_library: str = "",
        parent: QWidget | None = None,
        library_model: str | None = None,
        demo: bool = False,
    ) -> None:
        super().__init__(parent)
        self.setObjectName("settingsDialog")
        self.setWindowTitle("Quadrat settings")
        self.setMinimumWidth(560)
        self._original = settings
        self._result: Settings | None = None

        self.model = QComboBox(self)
        self.model.setObjectName("modelCombo")
        self.model.setEditable(True)
        self.model.setInsertPolicy(QComboBox.InsertPolicy.NoInsert)
        for spec, description in COMMON_MODELS:
            self.model.addItem(spec, spec)
            self.model.setItemData(self.model.count() - 1, description, Qt.ItemDataRole.ToolTipRole)
        self.model.addItem("Local checkpoint file…", LOCAL_CHECKPOINT)
        self.model.activated.connect(self._model_chosen)
        self.model.setEditText(settings.model)
        self.model.setToolTip(
            "demo, ARCH:PRETRAINED (e.g. ViT-B-32:laion2b_s34b_b79k), hf-hub:ORG/NAME, or ARCH:/path/to/checkpoint"
        )

        self.device = QComboBox(self)
        self.device.setObjectName("deviceCombo")
        for device in DEVICES:
            label = (
                f"auto (detected: {detected_device})"
                if device == "auto" and detected_device
                else device
            )
            self.device.addItem(label, device)
        self.device.setCurrentIndex(max(0, self.device.findData(settings.device)))

        self.batch_size = QSpinBox(self)
        self.batch_size.setObjectName("batchSpin")
        self.batch_size.setRange(1, MAX_BATCH_SIZE)
        self.batch_size.setValue(settings.batch_size)
        self.batch_size.setToolTip(
            "Photos encoded together; larger is faster on a GPU but needs more memory"
        )

        self.top_k = QSpinBox(self)
        self.top_k.setRange(1, 100_000)
        self.top_k.setSingleStep(100)
        self.top_k.setValue(settings.top_k)

        self.library = QLineEdit(settings.library_dir, self)
        self.library.setObjectName("libraryEdit")
        self.library.setPlaceholderText(default_library or "default")
        browse = QPushButton("Browse…", self)
        browse.clicked.connect(self._browse_library)
        library_row = QHBoxLayout()
        library_row.addWidget(self.library, 1)
        library_row.addWidget(browse)

        self.error = QLabel(self)
        self.error.setObjectName("settingsError")
        self.error.setWordWrap(True)
        self.error.hide()

        form = QFormLayout()
        form.addRow("Model:", self.model)
        form.addRow("Device:", self.device)
        form.addRow("Batch size:", self.batch_size)
        form.addRow("Results per search:", self.top_k)
        form.addRow("Library folder:", library_row)
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel, self
        )
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        self.buttons = buttons
        if demo:
            text = (
                "The demo collection always uses the bundled demo model; the model chosen here "
                "is for your own library."
            )
        elif library_model:
            text = (
                f"This library is indexed with {library_model}. "
                "Changing the model means re-indexing your collections."
            )
        else:
            text = "Changing the model means re-indexing your collections."
        note = QLabel(text, self)
        note.setWordWrap(True)
        note.setObjectName("settingsNote")
        self.note = note
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(note)
        layout.addWidget(self.error)
        layout.addWidget(buttons)

    def _model_chosen(self, row: int) -> None:
        if self.model.itemData(row) != LOCAL_CHECKPOINT:
            return
        previous = self._original.model
        path, _ = QFileDialog.getOpenFileName(
            self,
            "Choose a model checkpoint",
            "",
            "Checkpoints (*.safetensors *.pt *.pth *.bin *.ckpt)",
        )
        if not path:
            self.model.setEditText(previous)
            return
        arch = previous.split(":", 1)[0] if ":" in previous and previous != "demo" else "ViT-B-32"
        self.model.setEditText(f"{arch}:{path}")

    def _browse_library(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Library folder", self.library.text())
        if folder:
            self.library.setText(folder)

    def edited_settings(self) -> Settings:
        """The settings as currently edited (not validated)."""
        text = self.model.currentText().strip()
        library = self.library.text().strip()
        return replace(
            self._original,
            model=text,
            device=str(self.device.currentData()),
            batch_size=self.batch_size.value(),
            top_k=self.top_k.value(),
            library_dir=str(Path(library).expanduser()) if library else "",
        )

    def result_settings(self) -> Settings | None:
        """The accepted settings, or None when cancelled."""
        return self._result

    def accept(self) -> None:
        edited = self.edited_settings()
        problems = edited.problems()
        if problems:
            self.error.setText("\n".join(problems))
            self.error.show()
            return
        self._result = edited
        super().accept()
