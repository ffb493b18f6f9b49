"""The saved queries: reopen, rename (F2 or the Rename button), delete, and notes.

The panel shows the `QueryRow`s it is given (each with its methods, and the query photo's name
and thumbnail when it has one, so two queries with the same words can be told apart) and emits
what the user asks for; the saved-queries controller (app/controllers/queries.py) acts and
hands over thumbnails once loaded (`set_photo`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from PySide6.QtCore import QSize, Qt, QTimer, Signal
from PySide6.QtGui import QColor, QFont, QIcon, QPixmap, QResizeEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

NOTES_SAVE_DELAY_MS = 600
ID_ROLE = Qt.ItemDataRole.UserRole
ROW_ICON = 28  # px: the query photo's thumbnail in its row
METHODS_COLUMN = 3
HEADERS = ("Query", "Runs", "R / judged", "Methods")
HEADER_TIPS = ("", "Runs of this query", "Photos judged relevant / judged in all", "")
# The query's text needs the room most: Methods (whole in the row's tooltip) is shown only on
# a list at least this wide, and then takes at most this share of it.
METHODS_SHOWN_FROM = 520  # px
METHODS_SHARE = 0.3


@dataclass(frozen=True)
class QueryRow:
    """One saved query as the list shows it."""

    id: int
    title: str  # the name, else the text, else “photo NAME”
    text: str
    image_path: str | None
    photo_name: str | None  # the query photo's taxon or file name
    methods: str  # the labels of its runs, e.g. "Text · image+text"
    notes: str | None
    runs: int
    relevant: int
    judged: int


def _placeholder_icon() -> QIcon:
    pixmap = QPixmap(ROW_ICON, ROW_ICON)
    pixmap.fill(QColor("#d5d9dd"))
    return QIcon(pixmap)


class _QueryTree(QTreeWidget):
    """The list; tells its panel when its width changes, so the columns are fitted again."""

    resized = Signal()

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802
        super().resizeEvent(event)
        self.resized.emit()


class QueryListPanel(QWidget):
    """Saved queries with their runs and judgment counts."""

    openRequested = Signal(int)
    renameRequested = Signal(int, str)
    deleteRequested = Signal(int)
    notesEdited = Signal(int, str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("queryListPanel")
        self._infos: dict[int, QueryRow] = {}
        self._current: int | None = None
        self._filling = False
        self._notes_for: int | None = None

        self.tree = _QueryTree(self)
        self.tree.setObjectName("queryList")
        self.tree.setHeaderLabels(list(HEADERS))
        header_item = self.tree.headerItem()
        for column, tip in enumerate(HEADER_TIPS):
            header_item.setToolTip(column, tip)
        self.tree.setRootIsDecorated(False)
        self.tree.setUniformRowHeights(True)
        self.tree.setIconSize(QSize(ROW_ICON, ROW_ICON))
        self.tree.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.tree.setEditTriggers(QAbstractItemView.EditTrigger.EditKeyPressed)
        header = self.tree.header()
        header.setStretchLastSection(False)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for column in (1, 2):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(METHODS_COLUMN, QHeaderView.ResizeMode.Interactive)
        self.tree.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.tree.resized.connect(self._fit_columns)
        self.tree.itemActivated.connect(lambda item, _col: self._open(item))
        self.tree.itemChanged.connect(self._item_renamed)
        self.tree.itemSelectionChanged.connect(self._selection_changed)

        self.open_button = QPushButton("Open", self)
        self.open_button.clicked.connect(lambda: self._open(self.tree.currentItem()))
        self.rename_button = QPushButton("Rename", self)
        self.rename_button.clicked.connect(self.start_rename)
        self.delete_button = QPushButton("Delete", self)
        self.delete_button.clicked.connect(self._delete)
        buttons = QHBoxLayout()
        for button in (self.open_button, self.rename_button, self.delete_button):
            # Narrower than the style's least push button when the column is (beside the
            # metrics on a small screen), never narrower than the word.
            button.setMinimumWidth(button.fontMetrics().horizontalAdvance(button.text()) + 20)
            buttons.addWidget(button)
        buttons.addStretch(1)

        self.notes = QPlainTextEdit(self)
        self.notes.setObjectName("queryNotes")
        self.notes.setPlaceholderText("Notes about the selected query (saved as you type)")
        self.notes.setMaximumHeight(90)
        self.notes.textChanged.connect(self._notes_changed)
        self._notes_timer = QTimer(self)
        self._notes_timer.setSingleShot(True)
        self._notes_timer.setInterval(NOTES_SAVE_DELAY_MS)
        self._notes_timer.timeout.connect(self._save_notes)

        self.hint = QLabel("Every search is saved here with its judgments.", self)
        self.hint.setObjectName("queryListHint")
        self.hint.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addWidget(self.tree, 1)
        layout.addLayout(buttons)
        layout.addWidget(self.notes)
        layout.addWidget(self.hint)
        self._update_buttons()

    # -- shown state ---------------------------------------------------------------------------

    def set_queries(self, infos: Sequence[QueryRow]) -> None:
        """Show `infos`, keeping the selection. A query with a photo shows a placeholder
        until `set_photo` hands over its thumbnail."""
        self.flush_notes()
        selected = self.selected_id()
        self._filling = True
        self.tree.clear()
        self._infos = {info.id: info for info in infos}
        for info in infos:
            item = QTreeWidgetItem(
                [info.title, str(info.runs), f"{info.relevant} / {info.judged}", info.methods]
            )
            item.setData(0, ID_ROLE, info.id)
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsEditable)
            lines = [f"“{info.text}”"] if info.text else []
            if info.photo_name:
                lines.append(f"photo: {info.photo_name}")
                item.setIcon(0, _placeholder_icon())
            if info.methods:
                lines.append(f"methods: {info.methods}")
            tooltip = "\n".join(lines)
            if info.notes:
                tooltip += f"\n\n{info.notes}"
            item.setToolTip(0, tooltip)
            for column in (1, 2):
                item.setTextAlignment(column, Qt.AlignmentFlag.AlignRight)
            self.tree.addTopLevelItem(item)
            if info.id == selected:
                item.setSelected(True)
                self.tree.setCurrentItem(item)
        self._filling = False
        self.set_current(self._current)
        self._selection_changed()
        self._fit_columns()

    def _fit_columns(self) -> None:
        """Methods only on a wide list, and then at most METHODS_SHARE of it: the Query
        column takes the rest (on a narrow list, Methods took it all and the queries read
        “a…”, “r…”)."""
        width = self.tree.viewport().width()
        narrow = width < METHODS_SHOWN_FROM
        self.tree.setColumnHidden(METHODS_COLUMN, narrow)
        if not narrow:
            wanted = max(
                self.tree.sizeHintForColumn(METHODS_COLUMN),
                self.tree.header().sectionSizeHint(METHODS_COLUMN),
            )
            self.tree.setColumnWidth(METHODS_COLUMN, min(wanted, round(width * METHODS_SHARE)))

    def set_current(self, query_id: int | None) -> None:
        """Show which query is open (bold)."""
        self._current = query_id
        self._filling = True
        for row in range(self.tree.topLevelItemCount()):
            item = self.tree.topLevelItem(row)
            if item is None:
                continue
            font = QFont(self.tree.font())
            font.setBold(item.data(0, ID_ROLE) == query_id)
            item.setFont(0, font)
        self._filling = False

    def set_photo(self, query_id: int, pixmap: QPixmap) -> None:
        """Show the thumbnail of query `query_id`'s photo in its row."""
        item = self.item_for(query_id)
        if item is not None and not pixmap.isNull():
            self._filling = True
            item.setIcon(0, QIcon(pixmap))
            self._filling = False

    def row(self, query_id: int) -> QueryRow | None:
        """What the list shows for a query."""
        return self._infos.get(query_id)

    def update_counts(self, query_id: int, runs: int, relevant: int, judged: int) -> None:
        """Refresh one row's counts (after a judgment) without rebuilding the list."""
        item = self.item_for(query_id)
        if item is None:
            return
        self._filling = True
        item.setText(1, str(runs))
        item.setText(2, f"{relevant} / {judged}")
        self._filling = False

    def note_saved(self, query_id: int, notes: str) -> None:
        """Remember saved notes so reselecting the query shows them."""
        info = self._infos.get(query_id)
        if info is not None:
            self._infos[query_id] = replace(info, notes=notes or None)

    def item_for(self, query_id: int) -> QTreeWidgetItem | None:
        for row in range(self.tree.topLevelItemCount()):
            item = self.tree.topLevelItem(row)
            if item is not None and item.data(0, ID_ROLE) == query_id:
                return item
        return None

    def selected_id(self) -> int | None:
        item = self.tree.currentItem()
        return None if item is None else int(item.data(0, ID_ROLE))

    def select(self, query_id: int) -> None:
        item = self.item_for(query_id)
        if item is not None:
            self.tree.setCurrentItem(item)

    # -- user actions --------------------------------------------------------------------------

    def start_rename(self) -> None:
        item = self.tree.currentItem()
        if item is not None:
            self.tree.editItem(item, 0)

    def _open(self, item: QTreeWidgetItem | None) -> None:
        if item is not None:
            self.openRequested.emit(int(item.data(0, ID_ROLE)))

    def _delete(self) -> None:
        query_id = self.selected_id()
        if query_id is not None:
            self.deleteRequested.emit(query_id)

    def _item_renamed(self, item: QTreeWidgetItem, column: int) -> None:
        if self._filling or column != 0:
            return
        query_id = int(item.data(0, ID_ROLE))
        info = self._infos.get(query_id)
        name = item.text(0).strip()
        if info is not None and name == info.title:
            return
        # An empty name (or the query's own text) means "no name": show the text again.
        self.renameRequested.emit(query_id, "" if info and name == info.text else name)

    def _selection_changed(self) -> None:
        self.flush_notes()
        query_id = self.selected_id()
        info = self._infos.get(query_id) if query_id is not None else None
        self.notes.blockSignals(True)
        self.notes.setPlainText(info.notes or "" if info is not None else "")
        self.notes.blockSignals(False)
        self._notes_for = query_id
        self._update_buttons()

    def _notes_changed(self) -> None:
        if self._notes_for is not None:
            self._notes_timer.start()

    def flush_notes(self) -> None:
        """Save notes still waiting for the typing pause."""
        if self._notes_timer.isActive():
            self._notes_timer.stop()
            self._save_notes()

    def _save_notes(self) -> None:
        if self._notes_for is not None:
            self.notesEdited.emit(self._notes_for, self.notes.toPlainText())

    def _update_buttons(self) -> None:
        has = self.tree.currentItem() is not None
        for widget in (self.open_button, self.rename_button, self.delete_button, self.notes):
            widget.setEnabled(has)
