"""The settings dialog: model, device, runtime, batch size, library folder, results per search,
and the image generator VisRet draws with.

It edits plain `SettingsValues` and offers the `SettingsChoices` it is given; checking the
values is the caller's (`validate`), so the dialog knows nothing of the settings file.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMenu,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

LOCAL_CHECKPOINT = "__local_checkpoint__"
NOT_DOWNLOADED = "not downloaded"  # how an offered model not on this computer is marked
RUNTIME_LABELS = {
    "auto": "auto (ONNX on the CPU when the model has an export, else torch)",
    "torch": "torch",
    "onnx": "ONNX Runtime (CPU)",
}


@dataclass(frozen=True)
class SettingsValues:
    """What the dialog edits."""

    model: str
    device: str
    batch_size: int
    top_k: int
    library_dir: str  # empty: the default library folder
    generator: str = ""  # VisRet's text-to-image model: a folder, a file or a hub id; empty: none
    llm_url: str = ""  # an OpenAI-compatible chat endpoint; empty: none
    llm_model: str = ""
    # Memory the search index may hold before it is compressed (GB).
    index_memory_gb: float = 4.0
    # Where this workstation sees a shared catalog's folders: "CATALOG_ROOT=FOLDER_HERE" pairs,
    # one per line or separated by ";".
    root_map: str = ""
    # What encodes on the CPU: "auto" (ONNX when the model has an export), "torch" or "onnx".
    runtime: str = "auto"
    judge_name: str = ""  # who is judging; empty: the server login, else the OS user


@dataclass(frozen=True)
class ModelChoice:
    """A model the dialog offers (any other spec may be typed in)."""

    spec: str
    label: str
    installed: bool = False  # on this computer: no download needed
    note: str = ""  # what it is good at


@dataclass(frozen=True)
class SettingsChoices:
    """What the dialog offers."""

    models: Sequence[ModelChoice]
    devices: Sequence[str]
    max_batch_size: int
    max_top_k: int = 100_000
    runtimes: Sequence[str] = ("auto", "torch", "onnx")


class SettingsDialog(QDialog):
    """Edits a copy of `values`; OK runs `validate` (problems, one per line) and refuses bad
    values with its message."""

    def __init__(
        self,
        values: SettingsValues,
        choices: SettingsChoices,
        validate: Callable[[SettingsValues], list[str]] = lambda _values: [],
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
        self._original = values
        self._validate = validate
        self._result: SettingsValues | None = None

        self.model = QComboBox(self)
        self.model.setObjectName("modelCombo")
        self.model.setEditable(True)
        self.model.setInsertPolicy(QComboBox.InsertPolicy.NoInsert)
        # The list shows names, marked when on disk; the field shows the spec chosen.
        for choice in choices.models:
            mark = "✓ on disk" if choice.installed else NOT_DOWNLOADED
            self.model.addItem(f"{choice.label}  ({mark})", choice.spec)
            self.model.setItemData(
                self.model.count() - 1,
                f"{choice.spec}: {choice.note}" if choice.note else choice.spec,
                Qt.ItemDataRole.ToolTipRole,
            )
        self.model.addItem("Local checkpoint file…", LOCAL_CHECKPOINT)
        self.model.activated.connect(self._model_chosen)
        self.model.setEditText(values.model)
        # The field shows a spec, so whether that model is here is said beside it: a model
        # never downloaded read as if it were the one in use.
        self._installed = {choice.spec: choice.installed for choice in choices.models}
        self.model_state = QLabel(self)
        self.model_state.setObjectName("modelState")
        self.model_state.setWordWrap(True)
        self.model.editTextChanged.connect(lambda _text: self._show_model_state())
        self._show_model_state()
        self.model.setToolTip(
            "demo, ARCH:PRETRAINED (e.g. ViT-B-32:laion2b_s34b_b79k), hf-hub:ORG/NAME, or ARCH:/path/to/checkpoint"
        )

        self.device = QComboBox(self)
        self.device.setObjectName("deviceCombo")
        for device in choices.devices:
            label = (
                f"auto (detected: {detected_device})"
                if device == "auto" and detected_device
                else device
            )
            self.device.addItem(label, device)
        self.device.setCurrentIndex(max(0, self.device.findData(values.device)))

        self.runtime = QComboBox(self)
        self.runtime.setObjectName("runtimeCombo")
        for runtime in choices.runtimes:
            self.runtime.addItem(RUNTIME_LABELS.get(runtime, runtime), runtime)
        self.runtime.setCurrentIndex(max(0, self.runtime.findData(values.runtime)))
        self.runtime.setToolTip(
            "What encodes photos and queries on the CPU. ONNX Runtime is faster than torch "
            "and gives the same vectors (no re-indexing); a model runs there once its export "
            "is in the model store (made when it is downloaded or imported). "
            "GPUs always use torch."
        )

        self.batch_size = QSpinBox(self)
        self.batch_size.setObjectName("batchSpin")
        self.batch_size.setRange(1, choices.max_batch_size)
        self.batch_size.setValue(values.batch_size)
        self.batch_size.setToolTip(
            "Photos encoded together; larger is faster on a GPU but needs more memory"
        )

        self.index_memory = QDoubleSpinBox(self)
        self.index_memory.setObjectName("indexMemorySpin")
        self.index_memory.setRange(0.25, 4096.0)
        self.index_memory.setDecimals(2)
        self.index_memory.setSingleStep(1.0)
        self.index_memory.setSuffix(" GB")
        self.index_memory.setValue(values.index_memory_gb)
        self.index_memory.setToolTip(
            "Memory the search index may take. A library whose exact index would need more is "
            "searched through a compressed index (8-bit codes, re-ranked exactly from a vector "
            "file on disk); 4 GB serves about 1.6 million ViT-B photos uncompressed and 6 "
            "million compressed. Takes effect at the next indexing run or start."
        )

        self.top_k = QSpinBox(self)
        self.top_k.setRange(1, choices.max_top_k)
        self.top_k.setSingleStep(100)
        self.top_k.setValue(values.top_k)

        self.library = QLineEdit(values.library_dir, self)
        self.library.setObjectName("libraryEdit")
        self.library.setPlaceholderText(default_library or "default")
        browse = QPushButton("Browse…", self)
        browse.clicked.connect(self._browse_library)
        library_row = QHBoxLayout()
        library_row.addWidget(self.library, 1)
        library_row.addWidget(browse)

        self.generator = QLineEdit(values.generator, self)
        self.generator.setObjectName("generatorEdit")
        self.generator.setPlaceholderText("none (the demo painter draws on the demo library)")
        self.generator.setToolTip(
            "The text-to-image model VisRet draws the query with: a diffusers folder, a "
            ".safetensors or .ckpt file, or a hub id (hf-hub:ORG/NAME); demo-painter for the "
            "built-in painter"
        )
        generator_browse = QPushButton("Browse…", self)
        generator_browse.setObjectName("generatorBrowse")
        menu = QMenu(generator_browse)
        menu.addAction("A diffusers folder…", self._browse_generator_folder)
        menu.addAction("A checkpoint file…", self._browse_generator_file)
        generator_browse.setMenu(menu)
        generator_row = QHBoxLayout()
        generator_row.addWidget(self.generator, 1)
        generator_row.addWidget(generator_browse)

        self.error = QLabel(self)
        self.error.setObjectName("settingsError")
        self.error.setWordWrap(True)
        self.error.hide()

        form = QFormLayout()
        form.addRow("Model:", self.model)
        form.addRow("", self.model_state)
        form.addRow("Device:", self.device)
        form.addRow("Runtime:", self.runtime)
        form.addRow("Batch size:", self.batch_size)
        form.addRow("Results per search:", self.top_k)
        form.addRow("Index memory:", self.index_memory)
        form.addRow("Library folder:", library_row)
        form.addRow("Image generator:", generator_row)
        self.llm_url = QLineEdit(values.llm_url, self)
        self.llm_url.setObjectName("llmUrlEdit")
        self.llm_url.setPlaceholderText("none (e.g. http://localhost:11434/v1 for Ollama)")
        self.llm_url.setToolTip(
            "An OpenAI-compatible chat endpoint (llama.cpp, Ollama, vLLM or a hosted one) that "
            "methods may ask, e.g. VisRet's prompt rewriting. Its API key, if it needs one, is "
            "read from the QUADRAT_LLM_API_KEY environment variable."
        )
        self.llm_model = QLineEdit(values.llm_model, self)
        self.llm_model.setObjectName("llmModelEdit")
        self.llm_model.setPlaceholderText("the endpoint's model name, e.g. llama3.1:8b")
        form.addRow("Language model endpoint:", self.llm_url)
        form.addRow("Language model:", self.llm_model)
        # One line (pairs joined by ";"), so the dialog fits a laptop screen.
        self.root_map = QLineEdit("; ".join(values.root_map.split("\n")).strip("; "), self)
        self.root_map.setObjectName("rootMapEdit")
        self.root_map.setPlaceholderText(r"none (e.g. Z:\photos=/mnt/photos)")
        self.root_map.setToolTip(
            "For a catalog shared by several workstations: where this one sees folders that "
            "the catalog records under another path, as CATALOG_ROOT=FOLDER_HERE pairs "
            "separated by ';'. Search results, the detail pane, copies and re-scans then open "
            "the folder here."
        )
        form.addRow("Shared folders here:", self.root_map)
        self.judge_name = QLineEdit(values.judge_name, self)
        self.judge_name.setObjectName("judgeNameEdit")
        self.judge_name.setPlaceholderText("your login (the server's on a shared catalog)")
        self.judge_name.setToolTip(
            "Who is judging: judgments and attributes are kept under this name, so several "
            "judges' marks can be compared and adjudicated (Judge › Agreement…)."
        )
        form.addRow("Judge:", self.judge_name)
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

    def _show_model_state(self) -> None:
        """Under the model: "not downloaded yet" for an offered model that is not on disk."""
        spec = self._model_spec()
        missing = self._installed.get(spec) is False
        self.model_state.setText(
            f"{spec} is {NOT_DOWNLOADED} yet: it is downloaded when first used, or now from "
            "File › Models…"
            if missing
            else ""
        )
        self.model_state.setVisible(missing)

    def _model_chosen(self, row: int) -> None:
        if self.model.itemData(row) != LOCAL_CHECKPOINT:
            self.model.setEditText(str(self.model.itemData(row)))
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

    def _browse_generator_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(
            self, "A diffusers model folder", self.generator.text()
        )
        if folder:
            self.generator.setText(folder)

    def _browse_generator_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self,
            "A Stable Diffusion checkpoint",
            self.generator.text(),
            "Checkpoints (*.safetensors *.ckpt)",
        )
        if path:
            self.generator.setText(path)

    def _model_spec(self) -> str:
        """The model field's spec (a name picked from the list stands for its spec)."""
        text = self.model.currentText().strip()
        row = self.model.findText(text)
        if row >= 0 and self.model.itemData(row) != LOCAL_CHECKPOINT:
            text = str(self.model.itemData(row))
        return text

    def edited_values(self) -> SettingsValues:
        """The values as currently edited (not validated)."""
        text = self._model_spec()
        library = self.library.text().strip()
        return replace(
            self._original,
            model=text,
            device=str(self.device.currentData()),
            runtime=str(self.runtime.currentData()),
            batch_size=self.batch_size.value(),
            top_k=self.top_k.value(),
            library_dir=str(Path(library).expanduser()) if library else "",
            generator=self.generator.text().strip(),
            llm_url=self.llm_url.text().strip(),
            llm_model=self.llm_model.text().strip(),
            index_memory_gb=round(self.index_memory.value(), 2),
            root_map="\n".join(
                pair.strip() for pair in self.root_map.text().split(";") if pair.strip()
            ),
            judge_name=self.judge_name.text().strip(),
        )

    def accepted_values(self) -> SettingsValues | None:
        """The accepted values, or None when cancelled."""
        return self._result

    def accept(self) -> None:
        edited = self.edited_values()
        problems = self._validate(edited)
        if problems:
            self.error.setText("\n".join(problems))
            self.error.show()
            return
        self._result = edited
        super().accept()
