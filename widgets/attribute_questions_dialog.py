"""Judge › Ask an attribute question…: "is it flowering?" learnt from the open query's judged
photos, its cross-validated accuracy shown first, then the photos most likely to answer yes.

Presentation only: the dialog gathers the term and value and shows what the controller
(`app/controllers/attribute_questions.py`) hands it as plain data; `askRequested`,
`acceptRequested` and `rejectRequested` go to it, which runs the engine in workers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

_ID_ROLE = Qt.ItemDataRole.UserRole


@dataclass(frozen=True)
class SuggestionRow:
    """One suggested photo as the dialog lists it."""

    image_id: int
    probability: float
    name: str  # the file name
    path: str  # shown as the row's tooltip


class AttributeQuestionDialog(QDialog):
    """TERM and VALUE, Ask; the check; the suggestions, with Yes and No for the selected ones."""

    askRequested = Signal(str, str)  # term, value
    acceptRequested = Signal(object)  # list of image ids
    rejectRequested = Signal(object)  # list of image ids

    def __init__(
        self,
        query_title: str,
        terms: Sequence[tuple[str, str]],
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setObjectName("attributeQuestionDialog")
        self.setWindowTitle("Ask an attribute question")
        self.resize(640, 520)
        intro = QLabel(
            f"A closed question learnt from the attributes of the photos judged for "
            f"“{query_title}”: yes where the term holds the value, no where it holds "
            "“not value” or (for life stage, sex, reproductive condition, vitality) another "
            "value. Its accuracy is checked on those photos before the collection is asked.",
            self,
        )
        intro.setWordWrap(True)
        self.term_box = QComboBox(self)
        self.term_box.setObjectName("questionTerm")
        for term, caption in terms:  # (Darwin Core term, how the window names it)
            self.term_box.addItem(caption, term)
        self.value_edit = QLineEdit(self)
        self.value_edit.setObjectName("questionValue")
        self.value_edit.setPlaceholderText("value, e.g. flowering")
        self.ask_button = QPushButton("Ask", self)
        self.ask_button.setObjectName("askQuestion")
        self.ask_button.setDefault(True)
        question_row = QHBoxLayout()
        question_row.addWidget(QLabel("Is its", self))
        question_row.addWidget(self.term_box)
        question_row.addWidget(self.value_edit, 1)
        question_row.addWidget(self.ask_button)
        self.check_label = QLabel("", self)
        self.check_label.setObjectName("questionCheck")
        self.check_label.setWordWrap(True)
        self.check_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.table = QTableWidget(0, 2, self)
        self.table.setObjectName("questionSuggestions")
        self.table.setHorizontalHeaderLabels(["p(yes)", "photo"])
        self.table.verticalHeader().setVisible(False)
        self.table.horizontalHeader().setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.yes_button = QPushButton("Yes, it is", self)
        self.yes_button.setToolTip("Set the value on the selected photos")
        self.no_button = QPushButton("No, it is not", self)
        self.no_button.setToolTip("Record “not value” on the selected photos: a no to learn from")
        close = QDialogButtonBox(QDialogButtonBox.StandardButton.Close, parent=self)
        close.rejected.connect(self.reject)
        answer_row = QHBoxLayout()
        answer_row.addWidget(self.yes_button)
        answer_row.addWidget(self.no_button)
        answer_row.addStretch(1)
        answer_row.addWidget(close)
        layout = QVBoxLayout(self)
        layout.addWidget(intro)
        layout.addLayout(question_row)
        layout.addWidget(self.check_label)
        layout.addWidget(self.table, 1)
        layout.addLayout(answer_row)
        self.ask_button.clicked.connect(self._ask)
        self.value_edit.returnPressed.connect(self._ask)
        self.value_edit.textChanged.connect(lambda _text: self._update_buttons())
        self.table.itemSelectionChanged.connect(self._update_buttons)
        self.yes_button.clicked.connect(lambda: self.acceptRequested.emit(self.selected_ids()))
        self.no_button.clicked.connect(lambda: self.rejectRequested.emit(self.selected_ids()))
        self._busy = False
        self._update_buttons()

    # -- what the controller shows --------------------------------------------------------------

    def show_busy(self, text: str) -> None:
        """A question is being learnt or asked: say so, and wait."""
        self._busy = True
        self.check_label.setText(text)
        self._update_buttons()

    def show_check(self, text: str) -> None:
        """The cross-validation (and learning curve), before the suggestions arrive."""
        self.check_label.setText(text)

    def show_suggestions(self, check: str, rows: Sequence[SuggestionRow]) -> None:
        self._busy = False
        self.check_label.setText(check)
        self.table.setRowCount(len(rows))
        for r, row in enumerate(rows):
            p_item = QTableWidgetItem(f"{row.probability:.3f}")
            p_item.setData(_ID_ROLE, row.image_id)
            p_item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            name_item = QTableWidgetItem(row.name)
            name_item.setToolTip(row.path)
            self.table.setItem(r, 0, p_item)
            self.table.setItem(r, 1, name_item)
        self.table.resizeColumnToContents(0)
        self._update_buttons()

    def show_failure(self, text: str) -> None:
        self._busy = False
        self.check_label.setText(text)
        self._update_buttons()

    def mark_answered(self, image_ids: Sequence[int], answer: str) -> None:
        """The photos answered (yes or no): their rows say so and are not offered again."""
        wanted = set(image_ids)
        for r in range(self.table.rowCount()):
            item = self.table.item(r, 0)
            if item is not None and item.data(_ID_ROLE) in wanted:
                name = self.table.item(r, 1)
                if name is not None and not name.text().endswith(")"):
                    name.setText(f"{name.text()}  ({answer})")
                for c in range(self.table.columnCount()):
                    cell = self.table.item(r, c)
                    if cell is not None:
                        cell.setFlags(cell.flags() & ~Qt.ItemFlag.ItemIsSelectable)
        self.table.clearSelection()
        self._update_buttons()

    # -- reading it -------------------------------------------------------------------------------

    def question(self) -> tuple[str, str]:
        return str(self.term_box.currentData() or ""), self.value_edit.text().strip()

    def selected_ids(self) -> list[int]:
        rows = sorted({index.row() for index in self.table.selectedIndexes()})
        ids = []
        for r in rows:
            item = self.table.item(r, 0)
            if item is not None:
                ids.append(int(item.data(_ID_ROLE)))
        return ids

    def _ask(self) -> None:
        term, value = self.question()
        if value and not self._busy:
            self.askRequested.emit(term, value)

    def _update_buttons(self) -> None:
        self.ask_button.setEnabled(bool(self.value_edit.text().strip()) and not self._busy)
        chosen = bool(self.selected_ids()) and not self._busy
        self.yes_button.setEnabled(chosen)
        self.no_button.setEnabled(chosen)
