"""Judge › Certify recall…: a recall target and a confidence, where the open query stands
against them by the stopping rule (its phase and the photos to judge next), and, once
certified, the result recorded with the query.

Plain data in (`CertifyView`), signals out; `app/controllers/agreement.py` (`CertifyController`)
computes the rule's state in a worker.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QLabel,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

PHASE_WORDS = {
    "sample": "1 of 2 — judge the random sample",
    "review": "2 of 2 — judge the ranking's top",
    "certified": "certified",
}


@dataclass(frozen=True)
class CertifyView:
    """Where the open query stands against the target."""

    phase: str  # "sample", "review" or "certified"
    summary: str  # the rule's own sentence
    next_count: int  # photos it asks to judge next
    rule: str
    recorded: str = ""  # the certificate kept with the query, if any


class CertifyDialog(QDialog):
    """Target and confidence fields, the rule's phase and next photos, Record."""

    checkRequested = Signal(float, float)  # target, confidence
    judgeNextRequested = Signal()
    recordRequested = Signal()

    def __init__(
        self,
        title: str,
        target: float = 0.9,
        confidence: float = 0.95,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setObjectName("certifyDialog")
        self.setWindowTitle("Certify recall")
        self.resize(560, 320)
        layout = QVBoxLayout(self)
        heading = QLabel(
            f"“{title}”: judge until the recall target is reached with a guarantee", self
        )
        heading.setWordWrap(True)
        layout.addWidget(heading)
        form = QFormLayout()
        self.target = self._share_box(target, "targetSpin")
        self.confidence = self._share_box(confidence, "confidenceSpin")
        form.addRow("Target recall:", self.target)
        form.addRow("Confidence:", self.confidence)
        layout.addLayout(form)
        self.phase = QLabel(self)
        self.phase.setObjectName("certifyPhase")
        layout.addWidget(self.phase)
        self.summary = QLabel(self)
        self.summary.setObjectName("certifySummary")
        self.summary.setWordWrap(True)
        layout.addWidget(self.summary)
        self.rule = QLabel(self)
        self.rule.setWordWrap(True)
        self.rule.setStyleSheet("color: palette(mid)")
        layout.addWidget(self.rule)
        layout.addStretch(1)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close, self)
        self.check_button = QPushButton("Check", self)
        self.judge_button = QPushButton("Judge the next photos", self)
        self.judge_button.setObjectName("certifyJudgeNext")
        self.record_button = QPushButton("Record with the query", self)
        self.record_button.setObjectName("certifyRecord")
        for button in (self.check_button, self.judge_button, self.record_button):
            buttons.addButton(button, QDialogButtonBox.ButtonRole.ActionRole)
        self.check_button.clicked.connect(self._check)
        self.judge_button.clicked.connect(lambda: self.judgeNextRequested.emit())
        self.record_button.clicked.connect(lambda: self.recordRequested.emit())
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)
        self.judge_button.setEnabled(False)
        self.record_button.setEnabled(False)

    def _share_box(self, value: float, name: str) -> QDoubleSpinBox:
        box = QDoubleSpinBox(self)
        box.setObjectName(name)
        box.setRange(50.0, 99.9)
        box.setDecimals(1)
        box.setSuffix(" %")
        box.setValue(value * 100)
        return box

    def values(self) -> tuple[float, float]:
        return self.target.value() / 100, self.confidence.value() / 100

    def _check(self) -> None:
        self.checkRequested.emit(*self.values())

    def show_busy(self, text: str) -> None:
        self.phase.setText(text)
        self.judge_button.setEnabled(False)
        self.record_button.setEnabled(False)

    def show_state(self, view: CertifyView) -> None:
        self.phase.setText(f"Phase {PHASE_WORDS.get(view.phase, view.phase)}")
        self.summary.setText(
            view.summary + (f"\nRecorded: {view.recorded}" if view.recorded else "")
        )
        self.rule.setText(f"Rule: {view.rule}")
        self.judge_button.setEnabled(view.next_count > 0)
        self.judge_button.setText(
            f"Judge the next {view.next_count} photos" if view.next_count else "Nothing to judge"
        )
        self.record_button.setEnabled(view.phase == "certified" and not view.recorded)
