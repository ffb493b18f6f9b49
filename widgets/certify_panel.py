"""Judge › Certify recall…: a side panel (docked beside the grid, never over it) with a recall
target and a confidence, the plan and what it costs before it starts, where the open query
stands (its step and the photos to judge next), and, once certified, Record.

Plain data in (`CertifyView`), signals out; `app/controllers/agreement.py` (`CertifyController`)
computes the rule's state in a worker and docks the panel.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QDoubleSpinBox,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from widgets.fitting import VerticalScroll

LEAST_HEIGHT = 120  # px the dock asks for: the rest scrolls
PHASE_WORDS = {
    "census": "Step 1 of 3 — judge the ranking's top",
    "sample": "Step 2 of 3 — judge the random sample",
    "review": "Step 3 of 3 — judge the ranking on",
    "certified": "Certified",
}


@dataclass(frozen=True)
class CertifyView:
    """Where the open query stands against the target, in words."""

    phase: str  # "census", "sample", "review" or "certified"
    scope: str  # "the 812 events shown (deployment CAM01_trail (QT0001))", or "all 960 photos"
    plan: str  # what it costs, said before it starts
    summary: str  # the rule's own sentence
    next_count: int  # photos (or events) it asks to judge next
    judged: int
    expected: int  # judgments the plan costs in all, as known now
    rule: str
    recorded: str = ""  # the certificate kept with the query, if any


class CertifyPanel(QWidget):
    """Target and confidence, the plan, the step and next photos, Record; `scroller` holds it
    in its dock, scrolled rather than squeezed when the dock is short."""

    checkRequested = Signal(float, float)  # target, confidence
    judgeNextRequested = Signal()
    recordRequested = Signal()

    def __init__(
        self, target: float = 0.9, confidence: float = 0.95, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.setObjectName("certifyPanel")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 6, 8, 6)
        layout.setSpacing(6)
        self.heading = self._label("certifyHeading")
        layout.addWidget(self.heading)
        values = QHBoxLayout()
        self.target = self._share_box(target, "targetSpin")
        self.confidence = self._share_box(confidence, "confidenceSpin")
        for box in (self.target, self.confidence):
            box.editingFinished.connect(self._check)
        self.check_button = QPushButton("Check", self)
        self.check_button.setToolTip("Read the judgments again and say where the query stands")
        values.addWidget(QLabel("Target", self))
        values.addWidget(self.target)
        values.addWidget(QLabel("at", self))
        values.addWidget(self.confidence)
        values.addWidget(self.check_button)
        values.addStretch(1)
        layout.addLayout(values)
        self.phase = QLabel(self)
        self.phase.setObjectName("certifyPhase")
        font = self.phase.font()
        font.setBold(True)
        self.phase.setFont(font)
        layout.addWidget(self.phase)
        self.progress = QProgressBar(self)
        self.progress.setObjectName("certifyProgress")
        self.progress.setTextVisible(True)
        layout.addWidget(self.progress)
        self.summary = self._label("certifySummary")
        layout.addWidget(self.summary)
        buttons = QHBoxLayout()
        self.judge_button = QPushButton("Judge the next photos", self)
        self.judge_button.setObjectName("certifyJudgeNext")
        self.record_button = QPushButton("Record with the query", self)
        self.record_button.setObjectName("certifyRecord")
        buttons.addWidget(self.judge_button)
        buttons.addWidget(self.record_button)
        buttons.addStretch(1)
        layout.addLayout(buttons)
        self.plan = self._label("certifyPlan")
        layout.addWidget(self.plan)
        self.rule = self._label("certifyRule")
        self.rule.setStyleSheet("color: palette(mid)")
        layout.addWidget(self.rule)
        layout.addStretch(1)
        self.check_button.clicked.connect(self._check)
        self.judge_button.clicked.connect(lambda: self.judgeNextRequested.emit())
        self.record_button.clicked.connect(lambda: self.recordRequested.emit())
        self.judge_button.setEnabled(False)
        self.record_button.setEnabled(False)
        self.scroller = VerticalScroll(self, LEAST_HEIGHT)
        self.scroller.setObjectName("certifyScroll")

    def _label(self, name: str) -> QLabel:
        label = QLabel(self)
        label.setObjectName(name)
        label.setWordWrap(True)
        label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        return label

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

    def set_query(self, title: str) -> None:
        self.heading.setText(
            f"“{title}”: judge until the recall target is reached, with a guarantee"
        )

    def show_busy(self, text: str) -> None:
        self.phase.setText(text)
        self.judge_button.setEnabled(False)
        self.record_button.setEnabled(False)

    def show_state(self, view: CertifyView) -> None:
        self.phase.setText(PHASE_WORDS.get(view.phase, view.phase))
        self.plan.setText(view.plan)
        self.summary.setText(
            view.summary + (f"\nRecorded: {view.recorded}" if view.recorded else "")
        )
        self.progress.setRange(0, max(view.expected, view.judged, 1))
        self.progress.setValue(view.judged)
        self.progress.setFormat(
            f"{view.judged:,} of about {max(view.expected, view.judged):,} judged"
        )
        self.rule.setText(f"Rule: {view.rule}")
        self.judge_button.setEnabled(view.next_count > 0)
        self.judge_button.setText(
            f"Judge the next {view.next_count}" if view.next_count else "Nothing to judge"
        )
        self.record_button.setEnabled(view.phase == "certified" and not view.recorded)

    def show_failure(self, text: str) -> None:
        self.phase.setText("Cannot certify")
        self.summary.setText(text)
        self.judge_button.setEnabled(False)
        self.record_button.setEnabled(False)
