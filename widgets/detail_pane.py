"""The detail pane: the selected photo large, its path, taxonomy, date, place, licence, score,
and, for a reranked run, the photo's answer and p(yes) to each subquery."""

from __future__ import annotations

import html
import re
from datetime import datetime
from pathlib import Path

from PySide6.QtCore import QPoint, QRect, QRectF, QSize, Qt, QUrl, Signal
from PySide6.QtGui import (
    QDesktopServices,
    QGuiApplication,
    QPainter,
    QPaintEvent,
    QPixmap,
    QResizeEvent,
    QShowEvent,
)
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFormLayout,
    QFrame,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from widgets.boxes import DetectionView, JudgedBox, paint_boxes, wants_labels
from widgets.photo_view import PhotoView
from widgets.results import ResultItem, score_text


def format_coordinates(lat: float | None, lon: float | None, uncertainty: float | None) -> str:
    if lat is None or lon is None:
        return "—"
    ns = "N" if lat >= 0 else "S"
    ew = "E" if lon >= 0 else "W"
    text = f"{abs(lat):.5f}° {ns}, {abs(lon):.5f}° {ew}"
    if uncertainty:
        text += f"  (± {uncertainty:,.0f} m)"
    return text


def format_date(value: datetime | None) -> str:
    if value is None:
        return "—"
    if value.hour == value.minute == value.second == 0:
        return value.strftime("%Y-%m-%d")
    return value.strftime("%Y-%m-%d %H:%M")


PHOTO_MIN = QSize(160, 120)
"""The smallest the photo is shown; below it the pane scrolls rather than shrinking it."""
DETAIL_MIN_WIDTH = 300
"""The pane is never narrower (px); its content may ask for more (see `minimum_width`)."""


BREAK = "\u200b"  # zero-width space: a place a line may break, invisible otherwise
_BREAK_AFTER = re.compile(r"([/\\_.\-]|[^/\\_.\-]{16})")


def breakable(path: str) -> str:
    """`path` with places to break a line after separators and inside long runs of letters,
    so a narrow pane wraps it instead of cutting it (Qt breaks lines only at spaces)."""
    return _BREAK_AFTER.sub(lambda match: match.group(0) + BREAK, path)


class _PhotoLabel(QLabel):
    """Shows the whole photo scaled to fit, aspect kept: painted, not set as the label's pixmap,
    so a large photo never widens the pane (a QLabel's minimum size is its pixmap's)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._pixmap: QPixmap | None = None
        self._scaled: QPixmap | None = None
        # The detector's boxes drawn over the photo: detections, chosen index, judged box.
        self.boxes: tuple[tuple[DetectionView, ...], int | None, JudgedBox | None] = (
            (),
            None,
            None,
        )
        self.setObjectName("detailPhoto")
        self.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.setWordWrap(True)
        self.setMinimumSize(PHOTO_MIN)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Expanding)

    def set_photo(self, pixmap: QPixmap | None, placeholder: str = "") -> None:
        self._pixmap = pixmap if pixmap is not None and not pixmap.isNull() else None
        self._scaled = None
        self.setText("" if self._pixmap is not None else placeholder)
        self._fit_height()
        self.update()

    def photo(self) -> QPixmap | None:
        return self._pixmap

    def sizeHint(self) -> QSize:  # noqa: N802
        return QSize(320, 300)

    def minimumSizeHint(self) -> QSize:  # noqa: N802
        return PHOTO_MIN

    def photo_rect(self) -> QRect:
        """Where the photo is drawn: the largest rectangle of its aspect inside the label."""
        if self._pixmap is None:
            return QRect()
        area = self.contentsRect()
        size = self._pixmap.size().scaled(area.size(), Qt.AspectRatioMode.KeepAspectRatio)
        rect = QRect(QPoint(0, 0), size)
        rect.moveCenter(area.center())
        return rect

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802
        super().resizeEvent(event)
        self._fit_height()

    def _fit_height(self) -> None:
        # No taller than the photo is at this width: the space below goes to its data, and a
        # tall pane shows no grey bands above and below a landscape photo.
        width = max(1, self.contentsRect().width())
        if self._pixmap is not None:
            ideal = round(width * self._pixmap.height() / max(1, self._pixmap.width()))
        else:
            ideal = round(width * 0.75)
        margins = self.height() - self.contentsRect().height()
        height = max(PHOTO_MIN.height(), ideal + margins)
        if height != self.maximumHeight():
            self.setMaximumHeight(height)

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802
        super().paintEvent(event)  # background and the placeholder text
        rect = self.photo_rect()
        if self._pixmap is None or rect.isEmpty():
            return
        if self._scaled is None or self._scaled.size() != rect.size():
            self._scaled = self._pixmap.scaled(
                rect.size(),
                Qt.AspectRatioMode.KeepAspectRatio,
                Qt.TransformationMode.SmoothTransformation,
            )
        painter = QPainter(self)
        painter.drawPixmap(rect.topLeft(), self._scaled)
        detections, chosen, judged = self.boxes
        if detections:
            photo = QRectF(rect)
            paint_boxes(
                painter,
                photo,
                detections,
                labels=wants_labels(photo),
                font=self.font(),
                chosen=chosen,
                judged=judged,
            )


class DetailPane(QWidget):
    """Everything known about the selected result. Emits requests; decides nothing."""

    moreLikeThisRequested = Signal(object)  # ResultItem
    judgmentRequested = Signal(object)  # 1 relevant, 0 not relevant, None clear

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("detailPane")
        self._item: ResultItem | None = None

        self.photo = _PhotoLabel(self)
        self.title = QLabel(self)
        self.title.setObjectName("detailTitle")
        self.title.setWordWrap(True)
        self.subtitle = QLabel(self)
        self.subtitle.setObjectName("detailSubtitle")
        self.subtitle.setWordWrap(True)

        self.fields: dict[str, QLabel] = {}
        form = QFormLayout()
        form.setLabelAlignment(Qt.AlignmentFlag.AlignRight)
        form.setHorizontalSpacing(10)
        form.setVerticalSpacing(4)
        for key, label in (
            ("score", "Rank / score"),
            ("taxonomy", "Taxonomy"),
            ("observed", "Observed"),
            ("place", "Coordinates"),
            ("license", "Licence"),
            ("rights", "Rights holder"),
            ("size", "Size"),
            ("collection", "Collection"),
            ("detections", "Detections"),
            ("path", "Path"),
        ):
            value = QLabel("—", self)
            value.setObjectName(f"detail_{key}")
            value.setWordWrap(True)
            value.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            value.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
            form.addRow(f"{label}:", value)
            self.fields[key] = value
        self._form = form
        path_label = self.fields["path"]
        path_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextBrowserInteraction)
        path_label.setToolTip("Click to show the photo's folder")
        path_label.linkActivated.connect(lambda _link: self.open_folder())

        # A reranked run: question -> answer -> p for the selected photo (hidden otherwise).
        self.answers = QTableWidget(0, 3, self)
        self.answers.setObjectName("detailAnswers")
        self.answers.setHorizontalHeaderLabels(["Subquery", "Answer", "p(yes)"])
        self.answers.verticalHeader().hide()
        self.answers.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.answers.setWordWrap(True)
        header = self.answers.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(2, QHeaderView.ResizeMode.ResizeToContents)
        self.answers.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
        self.answers_note = QLabel(self)
        self.answers_note.setObjectName("detailAnswersNote")
        self.answers_note.setWordWrap(True)

        self.more_button = QPushButton("More like this", self)
        self.more_button.clicked.connect(self._more_like_this)
        self.copy_button = QPushButton("Copy path", self)
        self.copy_button.clicked.connect(self.copy_path)
        self.folder_button = QPushButton("Show in folder", self)
        self.folder_button.clicked.connect(self.open_folder)
        buttons = QHBoxLayout()
        buttons.addWidget(self.more_button)
        buttons.addWidget(self.copy_button)
        buttons.addWidget(self.folder_button)
        buttons.addStretch(1)

        self.relevant_button = QPushButton("✓ Relevant  (R)", self)
        self.relevant_button.setObjectName("judgeRelevant")
        self.not_relevant_button = QPushButton("✗ Not relevant  (N)", self)
        self.not_relevant_button.setObjectName("judgeNotRelevant")
        self.clear_button = QPushButton("Clear  (U)", self)
        self.clear_button.setObjectName("judgeClear")
        self.judgment_label = QLabel(self)
        self.judgment_label.setObjectName("detailJudgment")
        self.judgment_label.setWordWrap(True)  # never widens the pane past its minimum
        judging = QHBoxLayout()
        for button, judgment in (
            (self.relevant_button, 1),
            (self.not_relevant_button, 0),
            (self.clear_button, None),
        ):
            button.clicked.connect(
                lambda _checked=False, v=judgment: self.judgmentRequested.emit(v)
            )
            judging.addWidget(button)
        for button in (self.relevant_button, self.not_relevant_button):
            button.setCheckable(True)
        judging.addStretch(1)

        body = QWidget(self)
        body.setObjectName("detailBody")
        inner = QVBoxLayout(body)
        inner.setContentsMargins(10, 10, 10, 10)
        inner.addWidget(self.photo, 1)
        inner.addLayout(judging)
        inner.addWidget(self.judgment_label)
        inner.addWidget(self.title)
        inner.addWidget(self.subtitle)
        line = QFrame(body)
        line.setFrameShape(QFrame.Shape.HLine)
        line.setObjectName("detailRule")
        inner.addWidget(line)
        inner.addLayout(form)
        inner.addWidget(self.answers_note)
        inner.addWidget(self.answers)
        inner.addLayout(buttons)
        inner.addStretch(0)  # what the photo (capped at its own height) leaves
        # Only ever scrolls vertically: the pane's minimum width (below) keeps every line whole,
        # where a horizontal scrollbar would hide the right of the photo and cut words.
        # Not `self.scroll`: that would hide QWidget.scroll(dx, dy).
        self.scroll_area = QScrollArea(self)
        self.scroll_area.setWidgetResizable(True)
        self.scroll_area.setFrameShape(QFrame.Shape.NoFrame)
        self.scroll_area.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.scroll_area.setWidget(body)
        self._body = body
        self._inner = inner
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(self.scroll_area)
        self.set_item(None)
        self.setMinimumWidth(self.minimum_width())

    def add_under_photo(self, widget: QWidget) -> None:
        """Show `widget` (the event's filmstrip) right under the photo."""
        self._inner.insertWidget(self._inner.indexOf(self.photo) + 1, widget)

    def add_section(self, widget: QWidget) -> None:
        """Show `widget` (the attributes editor) below the photo's facts, above its buttons."""
        self._inner.insertWidget(self._inner.indexOf(self.answers) + 1, widget)
        self.setMinimumWidth(self.minimum_width())

    def minimum_width(self) -> int:
        """The narrowest the pane can be with every button's text whole and room for the
        vertical scrollbar; layouts (the dock) respect it."""
        scrollbar = self.scroll_area.verticalScrollBar().sizeHint().width()
        return max(DETAIL_MIN_WIDTH, self._body.minimumSizeHint().width() + scrollbar)

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802
        # The style sheet and fonts are final once shown; the buttons' width may have changed.
        self.setMinimumWidth(self.minimum_width())
        super().showEvent(event)

    def clipped(self) -> list[str]:
        """What the pane shows only in part at its current size (empty: nothing): a line
        wider than the pane, the photo not whole, a button's text cut."""
        problems = []
        viewport = self.scroll_area.viewport()
        body = self._body
        if body.width() > viewport.width():
            problems.append(f"Photo pane content {body.width()} px wide in {viewport.width()} px")
        shown = self.photo.photo_rect()
        if not shown.isEmpty():
            on_view = shown.translated(self.photo.mapTo(viewport, QPoint(0, 0)))
            if not viewport.rect().contains(on_view):
                problems.append("the photo is not shown whole")
        for button in self.findChildren(QPushButton):
            if button.isVisible() and button.width() < button.sizeHint().width():
                problems.append(f"button “{button.text()}” cut to {button.width()} px")
        return problems

    def item(self) -> ResultItem | None:
        return self._item

    def set_boxes(
        self,
        detections: tuple[DetectionView, ...],
        chosen: int | None = None,
        judged: JudgedBox | None = None,
    ) -> None:
        """Draw these detector boxes over the photo (an empty tuple: none)."""
        self.photo.boxes = (detections, chosen, judged)
        self.photo.update()

    def set_item(self, item: ResultItem | None) -> None:
        """Show `item`'s metadata at once; the large photo follows via `set_photo`."""
        self._item = item
        self.set_boxes(())
        self.set_answers(None)
        for button in (
            self.more_button,
            self.copy_button,
            self.folder_button,
            self.relevant_button,
            self.not_relevant_button,
            self.clear_button,
        ):
            button.setEnabled(item is not None)
        if item is None:
            self.photo.set_photo(None, "Select a result to see it here")
            self.title.setText("No photo selected")
            self.subtitle.setText("")
            for label in self.fields.values():
                label.setText("—")
            self._form.setRowVisible(self.fields["detections"], False)
            # The last photo's judgment must not linger over "No photo selected".
            self.set_judgment(None, can_judge=False)
            return
        self.photo.set_photo(None, "Loading…")
        # No catalog row (a photo removed since its search): only the path and score are known.
        d = item.details if item.details is not None else PhotoView()
        common, taxon, lineage = d.common_name, d.taxon, d.lineage
        self.title.setText(common or taxon or Path(item.path).name)
        self.subtitle.setText(f"<i>{html.escape(taxon)}</i>" if taxon and common else "")
        shown = score_text(item.score, 4)  # none for a probability not known yet
        self.fields["score"].setText(f"#{item.rank}  ·  {shown}" if shown else f"#{item.rank}")
        self.fields["taxonomy"].setText(" › ".join(name for _rank, name in lineage) or "—")
        self.fields["taxonomy"].setToolTip(
            "\n".join(f"{rank}: {name}" for rank, name in lineage) if lineage else ""
        )
        self.fields["observed"].setText(format_date(d.observed_at))
        self.fields["place"].setText(
            format_coordinates(d.latitude, d.longitude, d.location_uncertainty)
        )
        self.fields["license"].setText(d.license or "—")
        self.fields["rights"].setText(d.rights_holder or "—")
        width, height = d.width, d.height
        self.fields["size"].setText(f"{width} × {height} px" if width and height else "—")
        self.fields["collection"].setText(d.collection or "—")
        # The detector's and classifier's findings, one line each; the row only where any.
        lines = [x.line for x in item.detections]
        bullet = "• " if len(lines) > 1 else ""  # wrapped lines still read as one each
        self.fields["detections"].setText("\n".join(bullet + line for line in lines))
        self._form.setRowVisible(self.fields["detections"], bool(item.detections))
        self.fields["path"].setText(
            f'<a href="{html.escape(item.path)}">{html.escape(breakable(item.path))}</a>'
        )

    def set_answers(self, rows: list[tuple[str, str, float]] | None, note: str = "") -> None:
        """The selected photo's answers to a reranked run's subqueries, (question, answer,
        p(yes)) in the order asked; None hides the table (not a reranked run). `note` says
        e.g. the photo's score and base rank, or that it was not reranked."""
        self.answers_note.setText(note)
        self.answers_note.setVisible(bool(note) and rows is not None)
        if rows is None:
            self.answers.setRowCount(0)
            self.answers.hide()
            return
        self.answers.setRowCount(len(rows))
        for row, (question, answer, p) in enumerate(rows):
            cells = (question, answer or "—", f"{p:.3f}")
            for column, text in enumerate(cells):
                cell = QTableWidgetItem(text)
                cell.setToolTip(text)
                if column == 2:
                    cell.setTextAlignment(
                        Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
                    )
                self.answers.setItem(row, column, cell)
        self.answers.resizeRowsToContents()
        frame = 2 * self.answers.frameWidth()
        height = self.answers.horizontalHeader().height() + frame
        height += sum(self.answers.rowHeight(r) for r in range(len(rows)))
        self.answers.setFixedHeight(height)
        self.answers.setVisible(bool(rows))

    def answer_rows(self) -> list[tuple[str, str, str]]:
        """The answers table as shown: (question, answer, p) text per row."""

        def cell(row: int, column: int) -> str:
            item = self.answers.item(row, column)
            return item.text() if item is not None else ""

        return [(cell(r, 0), cell(r, 1), cell(r, 2)) for r in range(self.answers.rowCount())]

    def set_judgment(self, relevance: int | None, can_judge: bool = True) -> None:
        """Show the selected photo's judgment for the open query."""
        self.relevant_button.setChecked(relevance is not None and relevance > 0)
        self.not_relevant_button.setChecked(relevance == 0)
        for button in (self.relevant_button, self.not_relevant_button, self.clear_button):
            button.setEnabled(self._item is not None and can_judge)
        if self._item is None:
            self.judgment_label.setText("")
        elif relevance is None:
            self.judgment_label.setText("Not judged for this query")
        else:
            self.judgment_label.setText(
                "Judged relevant for this query" if relevance else "Judged not relevant"
            )

    def set_photo(self, pixmap: QPixmap | None, error: str = "") -> None:
        self.photo.set_photo(pixmap, error or "No preview")

    def copy_path(self) -> None:
        if self._item is not None:
            QGuiApplication.clipboard().setText(self._item.path)

    def open_folder(self) -> None:
        if self._item is not None:
            QDesktopServices.openUrl(QUrl.fromLocalFile(str(Path(self._item.path).parent)))

    def _more_like_this(self) -> None:
        if self._item is not None:
            self.moreLikeThisRequested.emit(self._item)
