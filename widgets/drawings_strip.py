"""The drawings strip: what a visualize-then-retrieve search drew for the query.

Shown above the results for a VisRet run. Each drawing has a card that fills in as it is made
(a placeholder with its own progress bar, per step), a toggle to leave it out of the fusion,
and its seed; a failed drawing shows its one-line error and is left out. Above the cards: the
prompt actually used (editable), the progress over all drawings, "Draw again" and Cancel.

Plain data in (`DrawingCard`, prompt, counts), signals out; what a toggle or an edit means is
the controller's business.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QImage, QPixmap
from PySide6.QtWidgets import (
    QCheckBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

CARD_IMAGE = 96  # px: a drawing's side in its card (the grid keeps most of the height)
CARD_WIDTH = CARD_IMAGE + 14
SIDE_WIDTH = (140, 220)  # px: the progress and the run's summary beside the cards


@dataclass(frozen=True)
class DrawingCard:
    """One drawing as the strip shows it."""

    index: int
    seed: int
    image: QImage | None = None  # None: failed, or not on disk any more
    error: str = ""  # one line, when the drawing failed
    left_out: bool = False
    cached: bool = False  # taken from the cache, not drawn now
    seconds: float = 0.0


def _caption(card: DrawingCard) -> str:
    if card.error:
        return f"seed {card.seed} · failed"
    if card.cached:
        return f"seed {card.seed} · cached"
    return f"seed {card.seed} · {card.seconds:.1f} s"


class DrawingView(QFrame):
    """One card: the drawing (or its placeholder), its progress, its toggle and caption."""

    toggled = Signal(int, bool)  # index, used

    def __init__(self, index: int, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.index = index
        self.card: DrawingCard | None = None
        self.setObjectName("drawingCard")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setFixedWidth(CARD_WIDTH)
        self.image = QLabel(self)
        self.image.setObjectName("drawingImage")
        self.image.setFixedSize(CARD_IMAGE, CARD_IMAGE)
        self.image.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.image.setWordWrap(True)
        self.image.setStyleSheet("background: #e8e8e4; color: #666;")
        self.progress = QProgressBar(self)
        self.progress.setObjectName("drawingProgress")
        self.progress.setTextVisible(False)
        self.progress.setFixedHeight(6)
        self.use = QCheckBox(f"Use #{index + 1}", self)
        self.use.setObjectName("drawingUse")
        self.use.setToolTip("Untick to leave this drawing out of the ranking (no re-drawing)")
        self.use.toggled.connect(lambda on: self.toggled.emit(self.index, on))
        self.caption = QLabel(self)
        self.caption.setObjectName("drawingCaption")
        self.caption.setWordWrap(True)
        self.caption.setMaximumWidth(CARD_IMAGE)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(5, 5, 5, 5)
        layout.setSpacing(3)
        layout.addWidget(self.image, 0, Qt.AlignmentFlag.AlignHCenter)
        layout.addWidget(self.progress)
        layout.addWidget(self.use)
        layout.addWidget(self.caption)
        layout.addStretch(1)
        self.set_waiting()

    def set_waiting(self) -> None:
        """A placeholder: not drawn yet."""
        self.card = None
        self.image.setPixmap(QPixmap())
        self.image.setText("Drawing…")
        self.progress.setRange(0, 1)
        self.progress.setValue(0)
        self.progress.show()
        self.caption.setText("")
        self.caption.setToolTip("")
        self._set_use(True, enabled=False)

    def set_progress(self, done: int, total: int) -> None:
        self.progress.setRange(0, max(1, total))
        self.progress.setValue(min(done, max(1, total)))

    def set_card(self, card: DrawingCard, busy: bool) -> None:
        self.card = card
        self.progress.hide()
        if card.image is not None and not card.image.isNull():
            pixmap = QPixmap.fromImage(card.image).scaled(
                CARD_IMAGE,
                CARD_IMAGE,
                Qt.AspectRatioMode.KeepAspectRatio,
                Qt.TransformationMode.SmoothTransformation,
            )
            self.image.setPixmap(pixmap)
        else:
            self.image.setPixmap(QPixmap())
            self.image.setText("Failed" if card.error else "Not on disk")
        self.caption.setText(card.error or _caption(card))
        self.caption.setToolTip(f"{_caption(card)}\n{card.error}" if card.error else "")
        self.caption.setStyleSheet("color: #b3261e;" if card.error else "")
        self._set_use(not card.left_out and not card.error, enabled=not busy and not card.error)

    def _set_use(self, on: bool, enabled: bool) -> None:
        self.use.blockSignals(True)
        self.use.setChecked(on)
        self.use.blockSignals(False)
        self.use.setEnabled(enabled)


class DrawingsStrip(QWidget):
    """The query's drawings, with the prompt, progress, Draw again and Cancel."""

    leaveOutChanged = Signal(object)  # sorted list of the drawing indices left out
    drawAgainRequested = Signal()
    promptEdited = Signal(str)
    cancelRequested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("drawingsStrip")
        self._busy = False
        self._prompt = ""
        self.views: list[DrawingView] = []

        self.title = QLabel("Drawn from", self)
        self.title.setObjectName("drawingsTitle")
        self.prompt = QLineEdit(self)
        self.prompt.setObjectName("drawingsPrompt")
        self.prompt.setPlaceholderText("the prompt appears with the first drawing")
        self.prompt.setToolTip("The prompt the drawings were made from; edit it and press Enter "
                               "to draw again from the new prompt")  # fmt: skip
        self.prompt.returnPressed.connect(self._prompt_entered)
        self.overall = QProgressBar(self)
        self.overall.setObjectName("drawingsProgress")
        self.overall.setFormat("%v of %m drawn")
        self.status = QLabel(self)
        self.status.setObjectName("drawingsStatus")
        self.status.setWordWrap(True)
        self.status.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)
        self.status.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.status.setMinimumWidth(SIDE_WIDTH[0])
        self.status.setMaximumWidth(SIDE_WIDTH[1])
        self.overall.setMaximumWidth(SIDE_WIDTH[1])
        self.draw_again = QPushButton("Draw again", self)
        self.draw_again.setObjectName("drawAgainButton")
        self.draw_again.setToolTip("Draw new images for the query with the next seeds")
        self.draw_again.clicked.connect(self.drawAgainRequested)
        self.cancel = QPushButton("Cancel", self)
        self.cancel.setObjectName("drawingsCancel")
        self.cancel.clicked.connect(self.cancelRequested)

        header = QHBoxLayout()
        header.setSpacing(6)
        header.addWidget(self.title)
        header.addWidget(self.prompt, 1)
        header.addWidget(self.draw_again)
        header.addWidget(self.cancel)

        self._cards = QWidget(self)
        self._cards_layout = QHBoxLayout(self._cards)
        self._cards_layout.setContentsMargins(0, 0, 0, 0)
        self._cards_layout.setSpacing(6)
        self._cards_layout.addStretch(1)
        scroll = QScrollArea(self)
        scroll.setWidget(self._cards)
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        scroll.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        self._scroll = scroll

        # Beside the cards: how far the drawing is, then how the run ended.
        side = QVBoxLayout()
        side.setSpacing(4)
        side.addWidget(self.overall)
        side.addWidget(self.status, 1)
        body = QHBoxLayout()
        body.setSpacing(8)
        body.addWidget(scroll, 1)
        body.addLayout(side)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 6, 8, 6)
        layout.setSpacing(4)
        layout.addLayout(header)
        layout.addLayout(body)
        self._fit_height()
        self._set_busy(False)

    # -- what the controller hands in ---------------------------------------------------------

    def start(self, count: int, prompt: str = "", keep: bool = False) -> None:
        """A run begins: `count` placeholders (or, with `keep`, the cards shown stay while the
        ranking is made again), the progress at zero, Cancel enabled."""
        if not keep or len(self.views) != count:
            self._make_views(count)
        self.set_prompt(prompt)
        self.overall.setRange(0, max(1, count))
        self.overall.setValue(0)
        self.overall.show()
        self.status.setText("Ranking again…" if keep else "Drawing…")
        self._set_busy(True)

    def set_prompt(self, prompt: str) -> None:
        """The prompt actually used (shown as it was sent to the generator)."""
        self._prompt = prompt
        if not self.prompt.isModified():
            self.prompt.setText(prompt)
            self.prompt.setModified(False)
            self.prompt.setCursorPosition(0)

    def set_progress(self, index: int, done: int, total: int) -> None:
        """Steps of drawing `index`."""
        if 0 <= index < len(self.views):
            self.views[index].set_progress(done, total)

    def set_drawing(self, card: DrawingCard) -> None:
        """A drawing is ready (or failed)."""
        while card.index >= len(self.views):
            self._add_view()
        self.views[card.index].set_card(card, self._busy)
        self.overall.setValue(sum(v.card is not None for v in self.views))

    def show_drawings(self, prompt: str, cards: Sequence[DrawingCard], message: str = "") -> None:
        """A complete set (a finished run, or a saved one reopened)."""
        self._make_views(len(cards))
        self.set_prompt(prompt)
        self._set_busy(False)
        for card in cards:
            self.set_drawing(card)
        self.finish(message)

    def finish(self, message: str = "") -> None:
        """The run ended: Cancel off, toggles usable; `message` says how it ended."""
        self._set_busy(False)
        self.overall.hide()
        for view in self.views:
            if view.card is not None:
                view.set_card(view.card, busy=False)
            else:
                view.progress.hide()
                view.image.setText("Not drawn")
        self.status.setText(message)

    # -- what the user did ------------------------------------------------------------------------

    def left_out(self) -> list[int]:
        """The drawings the user left out, failed ones included."""
        return [v.index for v in self.views if v.card is not None and not v.use.isChecked()]

    def busy(self) -> bool:
        return self._busy

    def prompt_used(self) -> str:
        """The prompt last handed in (the field may hold an edit not sent yet)."""
        return self._prompt

    # -- inside ---------------------------------------------------------------------------------

    def _make_views(self, count: int) -> None:
        for view in self.views:
            self._cards_layout.removeWidget(view)
            view.deleteLater()
        self.views = []
        for _ in range(count):
            self._add_view()

    def _add_view(self) -> None:
        view = DrawingView(len(self.views), self._cards)
        view.toggled.connect(self._toggled)
        self._cards_layout.insertWidget(len(self.views), view)
        self.views.append(view)

    def _toggled(self, _index: int, _on: bool) -> None:
        self.leaveOutChanged.emit(self.left_out())

    def _prompt_entered(self) -> None:
        text = " ".join(self.prompt.text().split())
        self.prompt.setModified(False)
        if text and text != self._prompt and not self._busy:
            self.promptEdited.emit(text)

    def _set_busy(self, busy: bool) -> None:
        self._busy = busy
        self.cancel.setEnabled(busy)
        self.draw_again.setEnabled(not busy)
        self.prompt.setReadOnly(busy)

    def _fit_height(self) -> None:
        # Measured on a card never shown: no parent, so it goes with this function.
        card = DrawingView(0)
        card_height = card.sizeHint().height()
        del card
        bar = self._scroll.horizontalScrollBar().sizeHint().height()
        self._scroll.setFixedHeight(card_height + bar + 2)
