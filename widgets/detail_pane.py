"""The detail pane: the selected photo large, its path, taxonomy, date, place, licence, score."""

from __future__ import annotations

import html
from datetime import datetime
from pathlib import Path
from typing import Any

from PySide6.QtCore import QSize, Qt, QUrl, Signal
from PySide6.QtGui import QDesktopServices, QGuiApplication, QPixmap, QResizeEvent
from PySide6.QtWidgets import (
    QFormLayout,
    QFrame,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from widgets.results import ResultItem


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


class _PhotoLabel(QLabel):
    """Shows a pixmap scaled to fit, keeping its aspect ratio, re-scaled on resize."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._pixmap: QPixmap | None = None
        self.setObjectName("detailPhoto")
        self.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.setMinimumSize(200, 200)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)

    def set_photo(self, pixmap: QPixmap | None, placeholder: str = "") -> None:
        self._pixmap = pixmap
        if pixmap is None:
            self.setPixmap(QPixmap())
            self.setText(placeholder)
        else:
            self.setText("")
            self._rescale()

    def photo(self) -> QPixmap | None:
        return self._pixmap

    def sizeHint(self) -> QSize:  # noqa: N802
        return QSize(320, 300)

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802
        super().resizeEvent(event)
        self._rescale()

    def _rescale(self) -> None:
        if self._pixmap is not None and not self._pixmap.isNull():
            size = self.size().boundedTo(QSize(self.width(), max(200, self.width())))
            self.setPixmap(
                self._pixmap.scaled(
                    size,
                    Qt.AspectRatioMode.KeepAspectRatio,
                    Qt.TransformationMode.SmoothTransformation,
                )
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
            ("path", "Path"),
        ):
            value = QLabel("—", self)
            value.setObjectName(f"detail_{key}")
            value.setWordWrap(True)
            value.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            value.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
            form.addRow(f"{label}:", value)
            self.fields[key] = value
        path_label = self.fields["path"]
        path_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextBrowserInteraction)
        path_label.setToolTip("Click to show the photo's folder")
        path_label.linkActivated.connect(lambda _link: self.open_folder())

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
        judging = QHBoxLayout()
        for button, value in (
            (self.relevant_button, 1),
            (self.not_relevant_button, 0),
            (self.clear_button, None),
        ):
            button.clicked.connect(lambda _checked=False, v=value: self.judgmentRequested.emit(v))
            judging.addWidget(button)
        for button in (self.relevant_button, self.not_relevant_button):
            button.setCheckable(True)
        judging.addStretch(1)

        body = QWidget(self)
        inner = QVBoxLayout(body)
        inner.setContentsMargins(10, 10, 10, 10)
        inner.addWidget(self.photo)
        inner.addLayout(judging)
        inner.addWidget(self.judgment_label)
        inner.addWidget(self.title)
        inner.addWidget(self.subtitle)
        line = QFrame(body)
        line.setFrameShape(QFrame.Shape.HLine)
        line.setObjectName("detailRule")
        inner.addWidget(line)
        inner.addLayout(form)
        inner.addLayout(buttons)
        inner.addStretch(1)
        scroll = QScrollArea(self)
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        scroll.setWidget(body)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(scroll)
        self.set_item(None)

    def item(self) -> ResultItem | None:
        return self._item

    def set_item(self, item: ResultItem | None) -> None:
        """Show `item`'s metadata at once; the large photo follows via `set_photo`."""
        self._item = item
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
            return
        self.photo.set_photo(None, "Loading…")
        d: Any = item.details
        common = getattr(d, "common_name", None)
        taxon = getattr(d, "taxon", None)
        self.title.setText(common or taxon or Path(item.path).name)
        self.subtitle.setText(f"<i>{html.escape(taxon)}</i>" if taxon and common else "")
        lineage = getattr(d, "lineage", ()) or ()
        self.fields["score"].setText(f"#{item.rank}  ·  {item.score:.4f}")
        self.fields["taxonomy"].setText(" › ".join(name for _rank, name in lineage) or "—")
        self.fields["taxonomy"].setToolTip(
            "\n".join(f"{rank}: {name}" for rank, name in lineage) if lineage else ""
        )
        self.fields["observed"].setText(format_date(getattr(d, "observed_at", None)))
        self.fields["place"].setText(
            format_coordinates(
                getattr(d, "latitude", None),
                getattr(d, "longitude", None),
                getattr(d, "location_uncertainty", None),
            )
        )
        self.fields["license"].setText(getattr(d, "license", None) or "—")
        self.fields["rights"].setText(getattr(d, "rights_holder", None) or "—")
        width, height = getattr(d, "width", None), getattr(d, "height", None)
        self.fields["size"].setText(f"{width} × {height} px" if width and height else "—")
        self.fields["collection"].setText(getattr(d, "collection", None) or "—")
        self.fields["path"].setText(f'<a href="folder">{html.escape(item.path)}</a>')

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
