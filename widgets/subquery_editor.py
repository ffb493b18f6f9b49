"""The subquery editor of a Reranked search: the base method it stands on, the yes/no questions
of the open query (add, remove, reorder, edit), the expert context, the cost of the next run,
its progress with Cancel, and which question the grid is sorted by.

Plain data in (`QuestionRow`s, method choices, lines of text), signals out; the controller
decides what the questions mean and where they are saved.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPlainTextEdit,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

SOURCE_NAMES = {
    "user": "yours",
    "builtin": "built-in",
    "llm": "language model",
    "baseline": "INQUIRE baseline",
}
SORT_BY_RANK = -1  # the "Sort by" entry that restores the run's own order


@dataclass(frozen=True)
class QuestionRow:
    """One question as the editor shows it: its words and where it came from."""

    text: str
    source: str = "user"  # "user" | "builtin" | "llm"


class SubqueryEditor(QWidget):
    """Edit the questions a Reranked search asks of every photo. Emits requests; decides
    nothing."""

    questionsEdited = Signal()  # the list changed by the user (added, removed, moved, typed)
    baseChanged = Signal(str)  # the base method's key
    contextEdited = Signal()
    suggestRequested = Signal()
    draftContextRequested = Signal()
    sortRequested = Signal(int)  # question index, or SORT_BY_RANK
    cancelRequested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("subqueryEditor")
        self._loading = False  # True while the controller fills the list: not a user edit

        self.base = QComboBox(self)
        self.base.setObjectName("rerankBase")
        self.base.setToolTip("The method whose top photos are reranked")
        self.base.currentIndexChanged.connect(self._on_base)

        self.list = QListWidget(self)
        self.list.setObjectName("subqueryList")
        self.list.setDragDropMode(QAbstractItemView.DragDropMode.InternalMove)
        self.list.setEditTriggers(
            QAbstractItemView.EditTrigger.DoubleClicked
            | QAbstractItemView.EditTrigger.EditKeyPressed
            | QAbstractItemView.EditTrigger.SelectedClicked
        )
        self.list.setMaximumHeight(84)  # three questions; the grid keeps the height
        self.list.itemChanged.connect(self._on_item_changed)
        self.list.model().rowsMoved.connect(lambda *_args: self._edited())

        self.add_button = QPushButton("Add", self)
        self.add_button.setToolTip("Add a yes/no question (double-click a question to edit it)")
        self.add_button.clicked.connect(lambda: self.add_question(""))
        self.remove_button = QPushButton("Remove", self)
        self.remove_button.clicked.connect(self.remove_current)
        self.up_button = QPushButton("↑", self)
        self.up_button.setToolTip("Ask this question earlier")
        self.up_button.clicked.connect(lambda: self.move_current(-1))
        self.down_button = QPushButton("↓", self)
        self.down_button.setToolTip("Ask this question later")
        self.down_button.clicked.connect(lambda: self.move_current(1))
        self.suggest_button = QPushButton("Suggest", self)
        self.suggest_button.setToolTip(
            "Questions for the query, built in or from the language model"
        )
        self.suggest_button.clicked.connect(self.suggestRequested)

        self.context = QPlainTextEdit(self)
        self.context.setObjectName("subqueryContext")
        self.context.setPlaceholderText(
            "Expert context of this query (optional): what an expert knows that the photo "
            "does not say; it is put before every question of this query only"
        )
        self.context.setMaximumHeight(44)
        self.context.textChanged.connect(self._on_context)
        self.draft_button = QPushButton("Draft", self)
        self.draft_button.setToolTip("Let the language model draft the context")
        self.draft_button.clicked.connect(self.draftContextRequested)

        # One line each, cut at the pane's edge (whole in the tooltip): wrapped, they made the
        # editor so tall that the window outgrew a 1280×800 screen.
        self.cost = _OneLineLabel(self)
        self.cost.setObjectName("subqueryCost")
        self.progress = _OneLineLabel(self)
        self.progress.setObjectName("subqueryProgress")
        self.cancel_button = QPushButton("Cancel", self)
        self.cancel_button.setToolTip("Stop scoring; the photos scored so far are kept")
        self.cancel_button.clicked.connect(self.cancelRequested)
        self.cancel_button.hide()
        self.sort = QComboBox(self)
        self.sort.setObjectName("rerankSort")
        self.sort.setToolTip("Order the grid by one question's p(yes)")
        self.sort.setSizeAdjustPolicy(
            QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon
        )
        self.sort.setMinimumContentsLength(18)
        self.sort.currentIndexChanged.connect(self._on_sort)

        self.context_button = QPushButton("Context…", self)
        self.context_button.setObjectName("subqueryContextButton")
        self.context_button.setCheckable(True)
        self.context_button.setToolTip("Show the expert context put before every question")
        self.context_button.toggled.connect(self._show_context)
        top = QHBoxLayout()
        top.addWidget(QLabel("Rerank:", self))
        top.addWidget(self.base)
        top.addWidget(self.context_button)
        top.addStretch(1)
        top.addWidget(QLabel("Sort by:", self))
        top.addWidget(self.sort)
        buttons = QGridLayout()
        buttons.setSpacing(2)
        buttons.addWidget(self.add_button, 0, 0)
        buttons.addWidget(self.remove_button, 0, 1)
        buttons.addWidget(self.up_button, 1, 0)
        buttons.addWidget(self.down_button, 1, 1)
        buttons.addWidget(self.suggest_button, 2, 0, 1, 2)
        buttons.setRowStretch(3, 1)
        questions = QHBoxLayout()
        questions.addWidget(self.list, 1)
        questions.addLayout(buttons)
        context = QHBoxLayout()
        context.addWidget(self.context, 1)
        context.addWidget(self.draft_button, 0, Qt.AlignmentFlag.AlignTop)
        # Shown on demand, or whenever there is context: the grid keeps the height otherwise.
        self.context.setVisible(False)
        self.draft_button.setVisible(False)
        status = QHBoxLayout()
        status.addWidget(self.cost, 3)
        status.addWidget(self.progress, 2)
        status.addWidget(self.cancel_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 4, 8, 4)
        layout.setSpacing(4)
        layout.addLayout(top)
        layout.addLayout(questions)
        layout.addLayout(context)
        layout.addLayout(status)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Maximum)
        self.set_sort_choices([])

    def _show_context(self, shown: bool) -> None:
        self.context.setVisible(shown)
        self.draft_button.setVisible(shown)

    # -- what the controller sets -----------------------------------------------------------------

    def set_bases(self, choices: list[tuple[str, str]], current: str) -> None:
        """The methods a rerank may stand on, (key, label), with `current` chosen."""
        self._loading = True
        self.base.clear()
        for key, label in choices:
            self.base.addItem(label, key)
        row = self.base.findData(current)
        self.base.setCurrentIndex(max(row, 0))
        self._loading = False

    def set_questions(self, rows: list[QuestionRow]) -> None:
        """Replace the list (a query opened, a suggestion taken); not a user edit."""
        self._loading = True
        self.list.clear()
        for row in rows:
            self._append(row)
        self._loading = False

    def set_context(self, text: str) -> None:
        self._loading = True
        self.context.setPlainText(text)
        self._loading = False
        if text.strip():
            self.context_button.setChecked(True)  # context there is always shown

    def set_cost(self, text: str) -> None:
        self.cost.setText(text)

    def set_running(self, running: bool, text: str = "") -> None:
        """A run in progress shows its progress and Cancel; `text` stays after it ends."""
        self.progress.setText(text)
        self.cancel_button.setVisible(running)

    def set_can_draft(self, can: bool, reason: str = "") -> None:
        self.draft_button.setEnabled(can)
        self.draft_button.setToolTip("Let the language model draft the context" if can else reason)

    def set_sort_choices(self, questions: list[str], current: int = SORT_BY_RANK) -> None:
        """The questions the grid may be sorted by (empty: only the run's order)."""
        self._loading = True
        self.sort.clear()
        self.sort.addItem("Rank", SORT_BY_RANK)
        for index, text in enumerate(questions):
            self.sort.addItem(f"Q{index + 1}: {text}", index)
        self.sort.setCurrentIndex(max(self.sort.findData(current), 0))
        self.sort.setEnabled(bool(questions))
        self._loading = False

    # -- what the user does -----------------------------------------------------------------------

    def questions(self) -> list[QuestionRow]:
        """The questions in order, blank ones left out."""
        rows = []
        for row in range(self.list.count()):
            item = self.list.item(row)
            text = " ".join(item.text().split())
            if text:
                rows.append(QuestionRow(text, str(item.data(Qt.ItemDataRole.UserRole) or "user")))
        return rows

    def context_text(self) -> str:
        return self.context.toPlainText().strip()

    def base_key(self) -> str:
        return str(self.base.currentData() or "")

    def add_question(self, text: str = "") -> QListWidgetItem:
        """Append a question and, when it is blank, open it for typing."""
        item = self._append(QuestionRow(text))
        self.list.setCurrentItem(item)
        if not text:
            self.list.editItem(item)
        else:
            self._edited()
        return item

    def remove_current(self) -> None:
        row = self.list.currentRow()
        if row >= 0:
            self.list.takeItem(row)
            self._edited()

    def move_current(self, step: int) -> None:
        row = self.list.currentRow()
        target = row + step
        if row < 0 or not 0 <= target < self.list.count():
            return
        item = self.list.takeItem(row)
        self.list.insertItem(target, item)
        self.list.setCurrentRow(target)
        self._edited()

    # -- internals --------------------------------------------------------------------------------

    def _append(self, row: QuestionRow) -> QListWidgetItem:
        item = QListWidgetItem(row.text)
        item.setFlags(item.flags() | Qt.ItemFlag.ItemIsEditable | Qt.ItemFlag.ItemIsDragEnabled)
        item.setData(Qt.ItemDataRole.UserRole, row.source)
        item.setToolTip(f"From: {SOURCE_NAMES.get(row.source, row.source)}")
        self.list.addItem(item)
        return item

    def _on_item_changed(self, item: QListWidgetItem) -> None:
        if self._loading:
            return
        # A question the user typed over is theirs now.
        if item.data(Qt.ItemDataRole.UserRole) != "user":
            self._loading = True
            item.setData(Qt.ItemDataRole.UserRole, "user")
            item.setToolTip(f"From: {SOURCE_NAMES['user']}")
            self._loading = False
        self._edited()

    def _edited(self) -> None:
        if not self._loading:
            self.questionsEdited.emit()

    def _on_base(self, _row: int) -> None:
        if not self._loading:
            self.baseChanged.emit(self.base_key())

    def _on_context(self) -> None:
        if not self._loading:
            self.contextEdited.emit()

    def _on_sort(self, _row: int) -> None:
        if not self._loading:
            data = self.sort.currentData()
            self.sortRequested.emit(int(data) if data is not None else SORT_BY_RANK)


class _OneLineLabel(QLabel):
    """A label on one line that never asks for more width than it gets: the text is cut with
    "…" at the edge and shown whole in the tooltip."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._full = ""
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)

    def setText(self, text: str) -> None:  # noqa: N802 - Qt's name
        self._full = text
        self.setToolTip(text)
        self._elide()

    def text(self) -> str:
        return self._full

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)
        self._elide()

    def _elide(self) -> None:
        shown = self.fontMetrics().elidedText(
            self._full, Qt.TextElideMode.ElideRight, max(self.width(), 40)
        )
        super().setText(shown)
