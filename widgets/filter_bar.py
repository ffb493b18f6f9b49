"""The filter bar under the query bar: one chip per active filter (× removes it) and an
"Add filter ▾" menu (taxon with completion, date range, months of the year, place, licence,
collection, judged or not for the open query, ...), whose entries the controller gives from
the registry of filter kinds (`set_menu`; the editors and submenus they open are here).

The bar shows plain data and says what the user asked for; the controller owns the filters:
- `filtersEdited(dict)`: filter fields to set, named as the engine's `to_params()` names them
  ("taxon", "date_from", "months", "licenses", ...); a value of None removes that filter;
- `chipRemoved(key)`: the × of the chip for `key` (a field name, as `describe()` gives it);
- `clearRequested()`, `taxonTyped(prefix)` (completions wanted), `placeBoxRequested()`
  ("draw a box on the map"), `nearRequested(km)` (around the selected photo).
Counts for the current results (`set_facets`) are shown in the menus.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any

from PySide6.QtCore import (
    QDate,
    QMargins,
    QPoint,
    QRect,
    QSize,
    QStringListModel,
    Qt,
    QTimer,
    Signal,
)
from PySide6.QtGui import QAction, QActionGroup, QFont, QFontMetrics
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QCompleter,
    QDateEdit,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QFrame,
    QHBoxLayout,
    QLabel,
    QLayout,
    QLayoutItem,
    QLineEdit,
    QMenu,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

MONTH_NAMES = (
    "January", "February", "March", "April", "May", "June", "July", "August", "September",
    "October", "November", "December",
)  # fmt: skip
CHIP_LABEL_MAX = 260  # px: a long taxon name is elided (whole in the tooltip)
TAXON_DELAY_MS = 120  # typing pauses this long before completions are asked for
NEAR_DEFAULT_KM = 25.0
# px a title bar takes beside its title: icon, minimise / maximise / close, margins (generous:
# title bar fonts are often larger than the window's).
TITLE_BAR_EXTRA = 180
TAXA_IN_MENU = 10  # the commonest taxa among the results, listed in the Taxon menu
LABELS_IN_MENU = 12  # the commonest classifier labels, listed in the Classifier label menu
# The entries offered only where the library holds detections (`set_detections`).
DETECTION_EDITORS = frozenset({"empty", "detected", "detection_label"})

STYLE = """
#filterBar { background: #ffffff; border-bottom: 1px solid #e3e6e9; }
#filterChip { border: 1px solid #b9c9bf; border-radius: 10px; background: #eef5f0; }
#filterChipLabel { color: #1f2629; padding-left: 2px; }
#filterChipClear { border: none; padding: 0 2px; color: #4a545b; }
#filterChipClear:hover { color: #b3261e; }
"""


@dataclass(frozen=True)
class FacetChoice:
    """One value of a facet (a licence, a collection, a month) with its count among the
    current results."""

    key: Any  # what a filter stores: the licence text, the collection id, the month number
    label: str
    count: int


@dataclass(frozen=True)
class TaxonChoice:
    """A taxon offered while typing: its name, common name, rank and photo count."""

    name: str
    common_name: str | None
    rank: str
    count: int

    @property
    def text(self) -> str:
        """ "Anura — frogs and toads (1,204)"."""
        name = self.name
        if self.common_name and self.common_name.casefold() != self.name.casefold():
            name = f"{self.name} — {self.common_name}"
        return f"{name} ({self.count:,})"


@dataclass(frozen=True)
class DetectionMenu:
    """What the detection entries offer: the confidence a box needs, how many photos were
    found empty or not at it, and the categories and labels present with their photo counts
    (most first). `looked` is 0 where no detector looked at a photo."""

    threshold: float
    looked: int
    not_empty: int
    categories: Sequence[FacetChoice] = ()
    labels: Sequence[FacetChoice] = ()

    @property
    def available(self) -> bool:
        return self.looked > 0 or bool(self.labels)


class FlowLayout(QLayout):
    """Lays its items out left to right, onto a new line when a line is full."""

    def __init__(self, parent: QWidget | None = None, spacing: int = 6) -> None:
        super().__init__(parent)
        self._items: list[QLayoutItem] = []
        self._spacing = spacing

    def addItem(self, item: QLayoutItem) -> None:  # noqa: N802
        self._items.append(item)

    def count(self) -> int:
        return len(self._items)

    def itemAt(self, index: int) -> QLayoutItem | None:  # noqa: N802
        return self._items[index] if 0 <= index < len(self._items) else None

    def takeAt(self, index: int) -> QLayoutItem | None:  # noqa: N802
        return self._items.pop(index) if 0 <= index < len(self._items) else None

    def expandingDirections(self) -> Qt.Orientation:  # noqa: N802
        return Qt.Orientation(0)

    def hasHeightForWidth(self) -> bool:  # noqa: N802
        return True

    def heightForWidth(self, width: int) -> int:  # noqa: N802
        return self._arrange(QRect(0, 0, width, 0), move=False)

    def setGeometry(self, rect: QRect) -> None:  # noqa: N802
        super().setGeometry(rect)
        self._arrange(rect, move=True)

    def sizeHint(self) -> QSize:  # noqa: N802
        return self.minimumSize()

    def minimumSize(self) -> QSize:  # noqa: N802
        size = QSize()
        for item in self._items:
            size = size.expandedTo(item.minimumSize())
        margins = self.contentsMargins()
        return size + QSize(margins.left() + margins.right(), margins.top() + margins.bottom())

    def _arrange(self, rect: QRect, move: bool) -> int:
        margins = self.contentsMargins()
        area = rect.marginsRemoved(QMargins(margins))
        x, y, line = area.x(), area.y(), 0
        for item in self._items:
            widget = item.widget()
            if widget is not None and widget.isHidden():
                continue
            hint = item.sizeHint()
            if x > area.x() and x + hint.width() > area.right() + 1:
                x, y, line = area.x(), y + line + self._spacing, 0
            if move:
                item.setGeometry(QRect(QPoint(x, y), hint))
            x += hint.width() + self._spacing
            line = max(line, hint.height())
        return y + line - rect.y() + margins.bottom()


class FilterChip(QFrame):
    """One active filter: its label and a × that removes it."""

    removeClicked = Signal(str)

    def __init__(self, key: str, label: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("filterChip")
        self.key = key
        self.label = QLabel(self)
        self.label.setObjectName("filterChipLabel")
        metrics = self.label.fontMetrics()
        self.label.setText(metrics.elidedText(label, Qt.TextElideMode.ElideRight, CHIP_LABEL_MAX))
        self.label.setToolTip(label)
        self.full_label = label
        self.clear_button = QToolButton(self)
        self.clear_button.setObjectName("filterChipClear")
        self.clear_button.setText("×")
        self.clear_button.setAutoRaise(True)
        self.clear_button.setToolTip(f"Remove the filter “{label}”")
        self.clear_button.setAccessibleName(f"Remove the filter {label}")
        self.clear_button.clicked.connect(lambda: self.removeClicked.emit(self.key))
        layout = QHBoxLayout(self)
        layout.setContentsMargins(8, 1, 3, 1)
        layout.setSpacing(2)
        layout.addWidget(self.label)
        layout.addWidget(self.clear_button)


class _FormDialog(QDialog):
    """A small form with OK / Cancel, opened with `open()` (never `exec()`: the event loop
    goes on); its `accepted` signal carries the values on."""

    def __init__(self, title: str, parent: QWidget | None) -> None:
        super().__init__(parent)
        self.setWindowTitle(title)
        # A narrow form would cut its own title in the title bar: make room for the title in
        # a bold face, plus the bar's icon and buttons.
        bold = QFont(self.font())
        bold.setBold(True)
        title_width = QFontMetrics(bold).horizontalAdvance(title)
        self.setMinimumWidth(title_width + TITLE_BAR_EXTRA)
        self.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.form = QFormLayout()
        self.note = QLabel(self)
        self.note.setWordWrap(True)
        self.note.setObjectName("settingsNote")
        self.note.hide()
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel, self
        )
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        self.ok_button = buttons.button(QDialogButtonBox.StandardButton.Ok)
        layout = QVBoxLayout(self)
        layout.addLayout(self.form)
        layout.addWidget(self.note)
        layout.addWidget(buttons)

    def set_note(self, text: str) -> None:
        self.note.setText(text)
        self.note.setVisible(bool(text))


class TaxonEditor(_FormDialog):
    """A taxon name with completion from the catalog (the controller supplies suggestions)."""

    typed = Signal(str)

    def __init__(self, current: str, parent: QWidget | None) -> None:
        super().__init__("Filter by taxon", parent)
        self.edit = QLineEdit(current, self)
        self.edit.setObjectName("taxonEdit")
        self.edit.setPlaceholderText("A scientific or common name, at any rank")
        self.edit.setMinimumWidth(320)
        self._choices: dict[str, TaxonChoice] = {}
        self.model = QStringListModel(self)
        self.completer = QCompleter(self.model, self)
        # The controller has already matched the prefix (names and common names, any rank).
        self.completer.setCompletionMode(QCompleter.CompletionMode.UnfilteredPopupCompletion)
        self.completer.setCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)
        self.completer.setWidget(self.edit)
        self.completer.activated.connect(self._chosen)
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(TAXON_DELAY_MS)
        self._timer.timeout.connect(lambda: self.typed.emit(self.edit.text().strip()))
        self.edit.textEdited.connect(lambda _text: self._timer.start())
        self.form.addRow("Taxon", self.edit)
        self.set_note(
            "Photos of this taxon and everything below it (a genus includes its species)."
        )

    def set_suggestions(self, choices: Sequence[TaxonChoice]) -> None:
        """Completions for what is typed now; shown as a list under the field."""
        self._choices = {choice.text: choice for choice in choices}
        self.model.setStringList(list(self._choices))
        if choices and (self.edit.hasFocus() or self.isActiveWindow()):
            self.completer.complete()

    def suggestions(self) -> list[str]:
        return list(self._choices)

    def _chosen(self, text: str) -> None:
        choice = self._choices.get(text)
        if choice is not None:
            # The field holds the name itself, not the label with its count.
            QTimer.singleShot(0, lambda: self.edit.setText(choice.name))

    def value(self) -> str:
        text = self.edit.text().strip()
        choice = self._choices.get(text)
        return choice.name if choice is not None else text


class KeywordEditor(_FormDialog):
    """One keyword, as digiKam, Lightroom or exiftool wrote it into a sidecar or the photo."""

    def __init__(self, current: str, parent: QWidget | None) -> None:
        super().__init__("Filter by keyword", parent)
        self.edit = QLineEdit(current, self)
        self.edit.setObjectName("keywordEdit")
        self.edit.setPlaceholderText("juvenile, Places|Coast, …")
        self.edit.setMinimumWidth(320)
        self.form.addRow("Keyword", self.edit)
        self.set_note(
            "Photos with this keyword in their XMP sidecar or embedded XMP/IPTC, any case: a "
            "whole keyword or whole levels of a hierarchical one."
        )

    def value(self) -> str:
        return self.edit.text().strip()


class LabelEditor(_FormDialog):
    """A classifier label typed, completed from the labels the library holds."""

    def __init__(self, current: str, labels: Sequence[str], parent: QWidget | None) -> None:
        super().__init__("Filter by classifier label", parent)
        self.edit = QLineEdit(current, self)
        self.edit.setObjectName("labelEdit")
        self.edit.setPlaceholderText("red fox, Vulpes vulpes, …")
        self.edit.setMinimumWidth(320)
        self.completer = QCompleter(list(labels), self)
        self.completer.setCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)
        self.completer.setFilterMode(Qt.MatchFlag.MatchContains)
        self.edit.setCompleter(self.completer)
        self.form.addRow("Label", self.edit)
        self.set_note("Photos a classifier labelled so: a common or scientific name, any case.")

    def value(self) -> str:
        return self.edit.text().strip()


class DateRangeEditor(_FormDialog):
    """From and/or to, each optional."""

    def __init__(self, date_from: date | None, date_to: date | None, parent: QWidget | None):
        super().__init__("Filter by date", parent)
        today = QDate.currentDate()
        self.use_from = QCheckBox("From", self)
        self.from_edit = QDateEdit(self)
        self.use_to = QCheckBox("To", self)
        self.to_edit = QDateEdit(self)
        for check, edit, value in (
            (self.use_from, self.from_edit, date_from),
            (self.use_to, self.to_edit, date_to),
        ):
            edit.setCalendarPopup(True)
            edit.setDisplayFormat("yyyy-MM-dd")
            edit.setDate(QDate(value.year, value.month, value.day) if value else today)
            check.setChecked(value is not None)
            edit.setEnabled(value is not None)
            check.toggled.connect(edit.setEnabled)
            self.form.addRow(check, edit)
        self.set_note("Photos observed on these days or between them (both days included).")

    def values(self) -> dict[str, str | None]:
        def iso(check: QCheckBox, edit: QDateEdit) -> str | None:
            return edit.date().toString("yyyy-MM-dd") if check.isChecked() else None

        return {
            "date_from": iso(self.use_from, self.from_edit),
            "date_to": iso(self.use_to, self.to_edit),
        }


class MonthsEditor(_FormDialog):
    """The first and last month of a season, any year (wraps round the year end)."""

    def __init__(
        self, months: tuple[int, int] | None, counts: Sequence[int], parent: QWidget | None
    ) -> None:
        super().__init__("Filter by months of the year", parent)
        self.first = QComboBox(self)
        self.last = QComboBox(self)
        for combo in (self.first, self.last):
            for number, name in enumerate(MONTH_NAMES, start=1):
                count = counts[number - 1] if len(counts) == 12 else None
                combo.addItem(name if count is None else f"{name} ({count:,})", number)
        first, last = months or (6, 8)
        self.first.setCurrentIndex(first - 1)
        self.last.setCurrentIndex(last - 1)
        self.form.addRow("From", self.first)
        self.form.addRow("To", self.last)
        self.set_note(
            "Of any year. A first month after the last runs round the year end "
            "(November to February). Counts are of the results shown."
        )

    def values(self) -> dict[str, list[int]]:
        return {"months": [int(self.first.currentData()), int(self.last.currentData())]}


class HoursEditor(_FormDialog):
    """The first and last hour of the day (local time), wrapping midnight: diel activity."""

    def __init__(self, hours: tuple[int, int] | None, parent: QWidget | None) -> None:
        super().__init__("Filter by hour of day", parent)
        self.first = QComboBox(self)
        self.last = QComboBox(self)
        for combo, suffix in ((self.first, "00"), (self.last, "59")):
            for hour in range(24):
                combo.addItem(f"{hour:02d}:{suffix}", hour)
        first, last = hours or (20, 5)  # the night: camera traps' commonest question
        self.first.setCurrentIndex(first)
        self.last.setCurrentIndex(last)
        self.form.addRow("From", self.first)
        self.form.addRow("To", self.last)
        self.set_note(
            "The photo's local time, any day. A first hour after the last runs across "
            "midnight (20:00 to 05:59 is the night)."
        )

    def values(self) -> dict[str, list[int]]:
        return {"hours": [int(self.first.currentData()), int(self.last.currentData())]}


class NearEditor(_FormDialog):
    """A radius around the selected photo."""

    def __init__(self, photo: str, km: float, parent: QWidget | None) -> None:
        super().__init__("Filter by distance", parent)
        self.km = QDoubleSpinBox(self)
        self.km.setRange(0.1, 20000.0)
        self.km.setDecimals(1)
        self.km.setSuffix(" km")
        self.km.setValue(km)
        self.form.addRow("Within", self.km)
        self.set_note(f"of the place of {photo}." if photo else "of the selected photo's place.")


class FilterBar(QWidget):
    """Chips for the active filters and the Add filter menu; see the module docstring."""

    filtersEdited = Signal(dict)
    chipRemoved = Signal(str)
    clearRequested = Signal()
    taxonTyped = Signal(str)
    placeBoxRequested = Signal()
    nearRequested = Signal(float)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("filterBar")
        self.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
        self.setStyleSheet(STYLE)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self._facets: dict[str, list[FacetChoice]] = {}
        self._params: dict[str, Any] = {}  # the filters shown, as `to_params()` gives them
        self._judged_available = False
        self._near_km = NEAR_DEFAULT_KM
        self._selected_photo: str | None = None  # the selected photo's name, if it has a place
        self.chips: list[FilterChip] = []
        self.editor: _FormDialog | None = None  # the editor open now, if any
        self._menu_entries: list[tuple[str, str]] = []  # (label, editor): `set_menu`
        self._detections: DetectionMenu | None = None  # `set_detections`

        self.add_button = QToolButton(self)
        self.add_button.setObjectName("addFilterButton")
        self.add_button.setText("Add filter ▾")
        self.add_button.setToolTip("Keep only photos of a taxon, a season, a place, a licence…")
        self.add_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        # The text has its ▾; no second arrow (set on the button: it may live in another bar).
        self.add_button.setStyleSheet("QToolButton::menu-indicator { image: none; width: 0; }")
        self.menu = QMenu(self)
        self.add_button.setMenu(self.menu)
        self.menu.aboutToShow.connect(self._fill_menu)

        self.flow = FlowLayout(spacing=6)
        self.flow.setContentsMargins(8, 3, 8, 4)
        self.setLayout(self.flow)
        self.flow.addWidget(self.add_button)
        self._button_elsewhere = False

    # -- state shown -----------------------------------------------------------------------

    def set_filters(self, chips: list[tuple[str, str]], params: dict[str, Any]) -> None:
        """The active filters: (key, label) chips as `describe()` gives them, and the
        filters' `to_params()` (what the menus show as checked)."""
        for chip in self.chips:
            self.flow.removeWidget(chip)
            chip.deleteLater()
        self.chips = []
        for key, label in chips:
            chip = FilterChip(key, label, self)
            chip.removeClicked.connect(self.chipRemoved)
            self.flow.addWidget(chip)
            chip.show()
            self.chips.append(chip)
        self._params = dict(params)
        if self._button_elsewhere:
            self.setVisible(bool(self.chips))
        self.updateGeometry()

    def take_add_button(self) -> QToolButton:
        """The Add filter button, for the window to place in another row (the query row);
        the bar then shows only while a filter is set."""
        self.flow.removeWidget(self.add_button)
        self._button_elsewhere = True
        self.setVisible(bool(self.chips))
        return self.add_button

    def chip_labels(self) -> list[str]:
        return [chip.full_label for chip in self.chips]

    def chip(self, key: str) -> FilterChip | None:
        return next((c for c in self.chips if c.key == key), None)

    def set_facets(self, facets: dict[str, list[FacetChoice]]) -> None:
        """Counts per facet value among the current results ("license", "collection",
        "month", "year"); shown in the menus."""
        self._facets = dict(facets)

    def set_judged_available(self, available: bool) -> None:
        """Whether a query is open (the judged / not judged filter needs one)."""
        self._judged_available = available

    def set_selected_photo(self, name: str | None) -> None:
        """The selected photo's name when it has a place (None: no such photo); the "within
        N km" filter is measured from it."""
        self._selected_photo = name

    def set_detections(self, detections: DetectionMenu | None) -> None:
        """What the library's detections offer (None, or nothing looked at: the detection
        entries are left out of the menu)."""
        self._detections = detections if detections is not None and detections.available else None

    def set_taxon_suggestions(self, choices: Sequence[TaxonChoice]) -> None:
        if isinstance(self.editor, TaxonEditor):
            self.editor.set_suggestions(choices)

    # -- the menu --------------------------------------------------------------------------

    def set_menu(self, entries: Sequence[tuple[str, str]]) -> None:
        """The "Add filter" menu's entries, in order: (label, editor) per filter kind, as the
        controller reads them from the registry of kinds; an editor is one of `_ENTRIES`."""
        self._menu_entries = [(label, editor) for label, editor in entries if editor in _ENTRIES]

    def _fill_menu(self) -> None:
        """Built when shown, so the counts are those of the results shown now."""
        menu = self.menu
        for submenu in menu.findChildren(QMenu):
            submenu.deleteLater()  # clear() drops the actions, not the submenus made before
        menu.clear()
        for label, editor in self._menu_entries:
            if editor in DETECTION_EDITORS and self._detections is None:
                continue  # the library holds no detections: nothing to filter by
            _ENTRIES[editor](self, menu, label)
        menu.addSeparator()
        clear = menu.addAction("Remove every filter", lambda: self.clearRequested.emit())
        clear.setEnabled(bool(self.chips))

    def _taxon_menu(self, menu: QMenu, label: str) -> None:
        taxa = menu.addMenu(label)
        taxa.addAction("Type a name…", lambda: self.open_taxon_editor())
        # The commonest taxa among the results, a click away.
        shown = [c for c in self._facets.get("taxon", []) if c.key not in ("", None)]
        if shown:
            taxa.addSeparator()
        for choice in shown[:TAXA_IN_MENU]:
            action = taxa.addAction(f"{choice.label} ({choice.count:,})")
            action.setCheckable(True)
            action.setChecked(self._params.get("taxon") == choice.key)
            action.triggered.connect(
                lambda _checked=False, name=choice.key: self.filtersEdited.emit({"taxon": name})
            )

    def _place_menu(self, menu: QMenu, label: str) -> None:
        place = menu.addMenu(label)
        place.addAction("Draw a box on the map", lambda: self.placeBoxRequested.emit())
        near = place.addAction(
            "Within N km of the selected photo…", lambda: self.open_near_editor()
        )
        near.setEnabled(self._selected_photo is not None)
        if self._selected_photo is None:
            near.setToolTip("Select a photo with a place first")

    def _judged_menu(self, menu: QMenu, label: str) -> None:
        judged = menu.addMenu(label)
        judged.setEnabled(self._judged_available)
        group = QActionGroup(judged)
        current = self._params.get("judged")
        for text, value in (
            ("Judged only", "judged"),
            ("Not judged only", "unjudged"),
            ("Either", None),
        ):
            action = judged.addAction(text)
            action.setCheckable(True)
            action.setChecked(current == value)
            group.addAction(action)
            action.triggered.connect(
                lambda _checked=False, v=value: self.filtersEdited.emit({"judged": v})
            )

    def _choice_menu(self, menu: QMenu, rows: Sequence[tuple[str, dict[str, Any], bool]]) -> None:
        """Exclusive checkable entries: (text, the fields it sets, checked now)."""
        group = QActionGroup(menu)
        for text, changes, on in rows:
            action = menu.addAction(text)
            action.setCheckable(True)
            action.setChecked(on)
            group.addAction(action)
            action.triggered.connect(
                lambda _checked=False, c=changes: self.filtersEdited.emit(dict(c))
            )

    def _empty_menu(self, menu: QMenu, label: str) -> None:
        found = self._detections
        assert found is not None
        at = found.threshold
        empty, not_empty = self._params.get("empty"), self._params.get("not_empty")
        self._choice_menu(
            menu.addMenu(label),
            [
                (f"Empty frames ({found.looked - found.not_empty:,})",
                 {"empty": at, "not_empty": None}, empty is not None and not_empty is None),
                (f"Frames with a detection ({found.not_empty:,})",
                 {"empty": None, "not_empty": at}, not_empty is not None and empty is None),
                ("Either", {"empty": None, "not_empty": None}, empty is None and not_empty is None),
            ],
        )  # fmt: skip

    def _detected_menu(self, menu: QMenu, label: str) -> None:
        found = self._detections
        assert found is not None
        current = self._params.get("detected")
        submenu = menu.addMenu(label)
        if not found.categories and not current:
            submenu.addAction("No boxes at this confidence").setEnabled(False)
            return
        rows = [
            (f"{c.label} ({c.count:,})", {"detected": c.key}, current == c.key)
            for c in found.categories
        ]
        if current and current not in {c.key for c in found.categories}:
            rows.append((str(current), {"detected": current}, True))
        rows.append(("Any", {"detected": None}, not current))
        self._choice_menu(submenu, rows)

    def _label_menu(self, menu: QMenu, label: str) -> None:
        found = self._detections
        assert found is not None
        current = self._params.get("detection_label")
        submenu = menu.addMenu(label)
        shown = list(found.labels[:LABELS_IN_MENU])
        rows = [
            (f"{c.label} ({c.count:,})", {"detection_label": c.key},
             str(current or "").casefold() == str(c.key).casefold())
            for c in shown
        ]  # fmt: skip
        if current and not any(on for _t, _c, on in rows):
            rows.append((str(current), {"detection_label": current}, True))
        self._choice_menu(submenu, rows)
        if rows:
            submenu.addSeparator()
        submenu.addAction("Type a label…", lambda: self.open_label_editor())

    def _checkable_menu(self, menu: QMenu, facet: str, field: str, kind: type) -> None:
        """One checkable entry per value with its count; checking edits the field's list."""
        # Photos without a value ("" keys) cannot be asked for: left out of the list.
        choices = [c for c in self._facets.get(facet, []) if c.key not in ("", None)]
        chosen = [kind(v) for v in self._params.get(field) or ()]
        keys = {kind(c.key) for c in choices}
        # Values chosen earlier but absent from these results stay listed, with no count.
        rows: list[tuple[Any, str, int | None]] = [(kind(c.key), c.label, c.count) for c in choices]
        rows += [(v, str(v), None) for v in chosen if v not in keys]
        if not rows:
            menu.addAction("None among the results").setEnabled(False)
            return
        for key, label, count in rows:
            text = label if count is None else f"{label} ({count:,})"
            action = menu.addAction(text)
            action.setCheckable(True)
            action.setChecked(key in chosen)
            action.setData(key)
            action.toggled.connect(lambda on, k=key: self._toggle_value(field, kind, k, on))

    def _toggle_value(self, field: str, kind: type, key: Any, on: bool) -> None:
        chosen = [kind(v) for v in self._params.get(field) or ()]
        if on and key not in chosen:
            chosen.append(key)
        elif not on and key in chosen:
            chosen.remove(key)
        self.filtersEdited.emit({field: chosen})

    def menu_actions(self, title: str) -> list[QAction]:
        """The actions of the submenu `title` ("Licence", ...) as built now (for tests and
        keyboard users' sake, the menu is built afresh each time it opens)."""
        self._fill_menu()
        for action in self.menu.actions():
            submenu = action.menu()
            if isinstance(submenu, QMenu) and action.text() == title:
                return list(submenu.actions())
        return []

    # -- editors -----------------------------------------------------------------------------

    def _open(self, editor: _FormDialog) -> _FormDialog:
        if self.editor is not None:
            self.editor.close()
        self.editor = editor
        editor.destroyed.connect(lambda: self._forget(editor))
        editor.adjustSize()
        # Under the Add filter button, its right edge on the button's, and on the screen.
        button = self.add_button
        corner = button.mapToGlobal(QPoint(button.width() - editor.width(), button.height() + 2))
        screen = button.screen().availableGeometry()
        x = max(screen.left(), min(corner.x(), screen.right() + 1 - editor.width()))
        y = max(screen.top(), min(corner.y(), screen.bottom() + 1 - editor.height()))
        editor.move(x, y)
        editor.open()
        return editor

    def _forget(self, editor: _FormDialog) -> None:
        if self.editor is editor:
            self.editor = None

    def open_taxon_editor(self) -> TaxonEditor:
        editor = TaxonEditor(str(self._params.get("taxon") or ""), self.window())
        editor.typed.connect(self.taxonTyped)
        editor.accepted.connect(lambda: self.filtersEdited.emit({"taxon": editor.value() or None}))
        self._open(editor)
        return editor

    def open_keyword_editor(self) -> KeywordEditor:
        editor = KeywordEditor(str(self._params.get("keyword") or ""), self.window())
        editor.accepted.connect(
            lambda: self.filtersEdited.emit({"keyword": editor.value() or None})
        )
        self._open(editor)
        return editor

    def open_label_editor(self) -> LabelEditor:
        labels = [str(c.key) for c in self._detections.labels] if self._detections else []
        editor = LabelEditor(str(self._params.get("detection_label") or ""), labels, self.window())
        editor.accepted.connect(
            lambda: self.filtersEdited.emit({"detection_label": editor.value() or None})
        )
        self._open(editor)
        return editor

    def open_date_editor(self) -> DateRangeEditor:
        editor = DateRangeEditor(
            _date(self._params.get("date_from")), _date(self._params.get("date_to")), self.window()
        )
        editor.accepted.connect(lambda: self.filtersEdited.emit(editor.values()))
        self._open(editor)
        return editor

    def open_months_editor(self) -> MonthsEditor:
        months = self._params.get("months")
        by_month = {str(c.key): c.count for c in self._facets.get("month", [])}
        counts = [by_month.get(str(m), 0) for m in range(1, 13)] if by_month else []
        first_last = (int(months[0]), int(months[1])) if months else None
        editor = MonthsEditor(first_last, counts, self.window())
        editor.accepted.connect(lambda: self.filtersEdited.emit(editor.values()))
        self._open(editor)
        return editor

    def open_hours_editor(self) -> HoursEditor:
        hours = self._params.get("hours")
        editor = HoursEditor((int(hours[0]), int(hours[1])) if hours else None, self.window())
        editor.accepted.connect(lambda: self.filtersEdited.emit(editor.values()))
        self._open(editor)
        return editor

    def open_near_editor(self) -> NearEditor:
        near = self._params.get("near")
        km = float(near[2]) if near else self._near_km
        editor = NearEditor(self._selected_photo or "", km, self.window())

        def accepted() -> None:
            self._near_km = editor.km.value()
            self.nearRequested.emit(self._near_km)

        editor.accepted.connect(accepted)
        self._open(editor)
        return editor


def _date(value: Any) -> date | None:
    if isinstance(value, date):
        return value
    if isinstance(value, str) and value:
        try:
            return date.fromisoformat(value[:10])
        except ValueError:
            return None
    return None


# What each editor name of `FilterBar.set_menu` adds to the "Add filter" menu.
_ENTRIES: dict[str, Callable[[FilterBar, QMenu, str], object]] = {
    "taxon": FilterBar._taxon_menu,
    "dates": lambda bar, menu, label: menu.addAction(label, lambda: bar.open_date_editor()),
    "months": lambda bar, menu, label: menu.addAction(label, lambda: bar.open_months_editor()),
    "hours": lambda bar, menu, label: menu.addAction(label, lambda: bar.open_hours_editor()),
    "keyword": lambda bar, menu, label: menu.addAction(label, lambda: bar.open_keyword_editor()),
    "place": FilterBar._place_menu,
    "licenses": lambda bar, menu, label: bar._checkable_menu(
        menu.addMenu(label), "license", "licenses", str
    ),
    "collections": lambda bar, menu, label: bar._checkable_menu(
        menu.addMenu(label), "collection", "collection_ids", int
    ),
    "deployments": lambda bar, menu, label: bar._checkable_menu(
        menu.addMenu(label), "deployment", "deployment_ids", int
    ),
    "judged": FilterBar._judged_menu,
    "empty": FilterBar._empty_menu,
    "detected": FilterBar._detected_menu,
    "detection_label": FilterBar._label_menu,
}
