"""The attributes of the shown photo for the open query (Darwin Core terms), edited in the
detail pane, and the query's presets in a small dialog. Both show what their controller
(app/controllers/attributes.py) hands them and emit edits; neither decides anything."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMessageBox,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

# A value outside its vocabulary: kept, but marked so the user sees it is not a standard one.
_FLAGGED_STYLE = "border: 1px solid #c98a00; border-radius: 3px;"


@dataclass(frozen=True)
class AttributeField:
    """One editable term: its Darwin Core name, its label, the suggested values (none: free
    text) and a hint shown while it is empty."""

    term: str
    label: str
    suggestions: tuple[str, ...] = ()
    hint: str = ""
    tooltip: str = ""


class AttributeForm(QWidget):
    """One input per term: an editable combo box with the suggestions, or a line of text.
    Emits `edited(term, text)` when the user finishes an edit that changed the text."""

    edited = Signal(str, str)

    def __init__(self, fields: Sequence[AttributeField], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._inputs: dict[str, QComboBox | QLineEdit] = {}
        self._shown: dict[str, str] = {}
        self._tooltips: dict[str, str] = {}
        form = QFormLayout(self)
        form.setContentsMargins(0, 0, 0, 0)
        form.setLabelAlignment(Qt.AlignmentFlag.AlignRight)
        form.setHorizontalSpacing(10)
        form.setVerticalSpacing(4)
        for spec in fields:
            box: QComboBox | QLineEdit
            if spec.suggestions:
                box = QComboBox(self)
                box.setEditable(True)
                box.setInsertPolicy(QComboBox.InsertPolicy.NoInsert)
                box.addItems(["", *spec.suggestions])
                line = box.lineEdit()
                assert line is not None  # editable
                line.setPlaceholderText(spec.hint)
                box.activated.connect(lambda _i, t=spec.term: self._finished(t))
                line.editingFinished.connect(lambda t=spec.term: self._finished(t))
            else:
                box = QLineEdit(self)
                box.setPlaceholderText(spec.hint)
                box.editingFinished.connect(lambda t=spec.term: self._finished(t))
            box.setObjectName(f"attribute_{spec.term}")
            box.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
            box.setToolTip(spec.tooltip)
            self._tooltips[spec.term] = spec.tooltip
            form.addRow(self._label(spec.label), box)
            self._inputs[spec.term] = box

    def _label(self, caption: str) -> QLabel:
        """A row's label: the caption, the Darwin Core term it names in brackets on a line of
        its own, so a narrow pane keeps its fields wide."""
        label = QLabel(caption.replace(" (", "\n(", 1), self)
        label.setObjectName("attributeLabel")
        label.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignTop)
        return label

    def label(self, term: str) -> str:
        """The caption a term's row shows, on one line."""
        form = self.layout()
        assert isinstance(form, QFormLayout)
        shown = form.labelForField(self._inputs[term])
        return " ".join(shown.text().split()) if isinstance(shown, QLabel) else ""

    def input(self, term: str) -> QComboBox | QLineEdit:
        return self._inputs[term]

    def text(self, term: str) -> str:
        box = self._inputs[term]
        return box.currentText() if isinstance(box, QComboBox) else box.text()

    def values(self) -> dict[str, str]:
        """term -> text as shown (blank: none)."""
        return {term: self.text(term).strip() for term in self._inputs}

    def set_values(self, values: dict[str, str], flagged: dict[str, str] | None = None) -> None:
        """Show these values (terms left out: empty); `flagged` term -> why it is marked."""
        flagged = flagged or {}
        for term, box in self._inputs.items():
            value = values.get(term, "")
            self._shown[term] = value
            if isinstance(box, QComboBox):
                box.setEditText(value)
            else:
                box.setText(value)
                box.setCursorPosition(0)
            why = flagged.get(term)
            box.setStyleSheet(_FLAGGED_STYLE if why else "")
            box.setToolTip("\n".join(t for t in (self._tooltips[term], why or "") if t))
            box.setProperty("offVocabulary", bool(why))

    def _finished(self, term: str) -> None:
        text = self.text(term).strip()
        if text != self._shown.get(term, ""):
            self._shown[term] = text
            self.edited.emit(term, text)


class AttributesEditor(QWidget):
    """The detail pane's section: a heading, the form, a line on the query's presets and a
    button to edit them."""

    attributeEdited = Signal(str, str)  # term, text ("" clears)
    presetsRequested = Signal()

    def __init__(self, fields: Sequence[AttributeField], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("attributesEditor")
        self.heading = QLabel("What the photo shows", self)
        self.heading.setObjectName("attributesHeading")
        font = self.heading.font()
        font.setBold(True)
        self.heading.setFont(font)
        self.note = QLabel(self)
        self.note.setObjectName("attributesNote")
        self.note.setWordWrap(True)
        self.form = AttributeForm(fields, self)
        self.form.edited.connect(self.attributeEdited)
        self.presets_label = QLabel(self)
        self.presets_label.setObjectName("attributesPresets")
        self.presets_label.setWordWrap(True)
        self.presets_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.presets_button = QPushButton("Query presets…", self)
        self.presets_button.setObjectName("attributesPresetsButton")
        self.presets_button.setToolTip(
            "Values every photo judged relevant for this query gets (no extra keys)"
        )
        self.presets_button.clicked.connect(self.presetsRequested)
        presets = QHBoxLayout()
        presets.addWidget(self.presets_label, 1)
        presets.addWidget(self.presets_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 6, 0, 0)
        layout.addWidget(self.heading)
        layout.addWidget(self.note)
        layout.addWidget(self.form)
        layout.addLayout(presets)
        self.set_editable(False, "")

    def set_editable(self, editable: bool, note: str) -> None:
        """Whether the form takes edits (a photo of an open query is shown); `note` says why
        not, or is empty."""
        self.form.setEnabled(editable)
        self.presets_button.setEnabled(editable)
        self.note.setText(note)
        self.note.setVisible(bool(note))

    def set_values(self, values: dict[str, str], flagged: dict[str, str] | None = None) -> None:
        self.form.set_values(values, flagged)

    def set_presets_text(self, text: str) -> None:
        self.presets_label.setText(text)


class PresetsDialog(QDialog):
    """A query's presets: the same form, OK to keep them."""

    def __init__(
        self,
        fields: Sequence[AttributeField],
        title: str,
        values: dict[str, str],
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("Query presets")
        self.setObjectName("presetsDialog")
        intro = QLabel(
            f"Each photo you judge relevant for “{title}” from now on gets these values "
            "where it has none of its own; marking it not relevant takes back the values it "
            "got this way. After OK, the photos already judged relevant are offered them.",
            self,
        )
        intro.setWordWrap(True)
        self.form = AttributeForm(fields, self)
        self.form.set_values(values)
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel, self
        )
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(intro)
        layout.addWidget(self.form)
        layout.addWidget(buttons)
        self.setMinimumWidth(420)

    def values(self) -> dict[str, str]:
        return self.form.values()


def ask_to_fill_presets(parent: QWidget | None, question: str, photos: int) -> bool:
    """Whether to give the presets to the photos judged before (`question` says what happens,
    from the controller): a button that counts them, and one that leaves them as they are."""
    box = QMessageBox(parent)
    box.setObjectName("fillPresetsQuestion")
    box.setWindowTitle("Query presets")
    box.setIcon(QMessageBox.Icon.Question)
    box.setText(question)
    apply = box.addButton(
        f"Apply to {photos:,} {'photo' if photos == 1 else 'photos'}",
        QMessageBox.ButtonRole.AcceptRole,
    )
    box.addButton("Only photos judged from now on", QMessageBox.ButtonRole.RejectRole)
    box.setDefaultButton(apply)
    box.exec()
    return box.clickedButton() is apply
