"""A form for a search method's parameters, built from plain descriptions of its fields (the
controller turns the method's Params dataclass into `ParamField`s; the form knows no engine)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)


@dataclass(frozen=True)
class ParamField:
    """One parameter: its name, Python type (str, int, float or bool), default and value."""

    name: str
    kind: type
    default: Any
    value: Any


class MethodOptionsDialog(QDialog):
    """Edit one method's parameters; `values()` gives name -> value after Accept."""

    def __init__(
        self,
        method_label: str,
        description: str,
        fields: list[ParamField],
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle(f"{method_label} options")
        self.setObjectName("methodOptions")
        self._editors: dict[str, QWidget] = {}
        self._fields = {f.name: f for f in fields}
        form = QFormLayout()
        for f in fields:
            editor = self._editor(f)
            editor.setToolTip(f"default: {f.default!r}")
            self._editors[f.name] = editor
            form.addRow(f.name.replace("_", " ") + ":", editor)
        intro = QLabel(description or method_label, self)
        intro.setWordWrap(True)
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok
            | QDialogButtonBox.StandardButton.Cancel
            | QDialogButtonBox.StandardButton.RestoreDefaults,
            self,
        )
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        restore = buttons.button(QDialogButtonBox.StandardButton.RestoreDefaults)
        restore.clicked.connect(self.restore_defaults)
        layout = QVBoxLayout(self)
        layout.addWidget(intro)
        if not fields:
            layout.addWidget(QLabel("This method has no options.", self))
        layout.addLayout(form)
        layout.addWidget(buttons)

    def _editor(self, f: ParamField) -> QWidget:
        if f.kind is bool:
            box = QCheckBox(self)
            box.setChecked(bool(f.value))
            return box
        if f.kind is int:
            spin = QSpinBox(self)
            spin.setRange(-1_000_000, 1_000_000)
            spin.setValue(int(f.value))
            return spin
        if f.kind is float:
            dspin = QDoubleSpinBox(self)
            dspin.setRange(-1e6, 1e6)
            dspin.setDecimals(3)
            dspin.setSingleStep(0.05)
            dspin.setValue(float(f.value))
            return dspin
        line = QLineEdit(str(f.value), self)
        line.setMinimumWidth(260)
        return line

    def _set(self, name: str, value: Any) -> None:
        editor = self._editors[name]
        if isinstance(editor, QCheckBox):
            editor.setChecked(bool(value))
        elif isinstance(editor, QSpinBox):
            editor.setValue(int(value))
        elif isinstance(editor, QDoubleSpinBox):
            editor.setValue(float(value))
        elif isinstance(editor, QLineEdit):
            editor.setText(str(value))

    def restore_defaults(self) -> None:
        for name, f in self._fields.items():
            self._set(name, f.default)

    def values(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, editor in self._editors.items():
            if isinstance(editor, QCheckBox):
                out[name] = editor.isChecked()
            elif isinstance(editor, QSpinBox | QDoubleSpinBox):
                out[name] = editor.value()
            elif isinstance(editor, QLineEdit):
                out[name] = editor.text()
        return out
