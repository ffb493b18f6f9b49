"""The detector's boxes in the window: View › Show detector boxes (kept in the settings), the
confidence from which they are shown (the setting `box_threshold`), B, which chooses the
selected photo's next box for R / N to judge it on, and View › Rank by: whole frames, the boxes
(their crops) or frames fused with their best box. Ranking by boxes first encodes the crops the
library's model has not seen (in the `write` pool, cancellable, what is done is kept); a box
or fused search then chooses each frame's best matching box on its tile.

The boxes themselves travel with the results (`app/controllers/results.py` `result_items`
reads them in the `read` pool); the grid (`widgets/results.py`) and the full view
(`widgets/full_view.py`) draw them, the detail pane lists them. A judgment made while a box is
chosen judges the frame and keeps the box (`JudgingController.judge`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QAction

from app.controllers.install import say
from app.controllers.results import set_box_threshold
from app.workers import READ, WRITE, TaskContext, TaskHandle, TaskRunner
from widgets.detail_pane import DetailPane
from widgets.results import ResultsModel, ResultsView

if TYPE_CHECKING:
    from collections.abc import Callable

    from app.controllers.application import Application
    from app.controllers.session import LibrarySession


class BoxesController(QObject):
    """Shows or hides the boxes, offers the toggle where the library has detections, and
    chooses a photo's box for the next judgment."""

    message = Signal(str)

    def __init__(
        self,
        runner: TaskRunner,
        session: LibrarySession,
        model: ResultsModel,
        view: ResultsView,
        toggle: QAction,
        next_box: QAction,
        show: bool,
        remember: Callable[[bool], None],
    ) -> None:
        super().__init__()
        self.runner = runner
        self.session = session
        self.model = model
        self.view = view
        self.toggle = toggle
        self.next_box = next_box
        self._remember = remember
        toggle.setChecked(show)
        model.set_show_boxes(show)
        toggle.toggled.connect(self.set_shown)
        next_box.triggered.connect(self.cycle)
        self.detail: DetailPane | None = None
        self.rank_by: dict[str, QAction] = {}
        self.rank_menu: QAction | None = None
        self._set_unit: Callable[[str], None] = lambda _unit: None

    def offer_ranking(
        self, actions: dict[str, QAction], menu: QAction, set_unit: Callable[[str], None]
    ) -> None:
        """View › Rank by: `set_unit` makes the searches rank that unit and searches again."""
        self.rank_by, self.rank_menu, self._set_unit = actions, menu, set_unit
        for unit, action in actions.items():
            action.triggered.connect(lambda _checked=False, u=unit: self.rank(u))

    def rank(self, unit: str) -> TaskHandle | None:
        """Rank by `unit`; boxes and fused first encode the crops not yet encoded."""
        if unit in self.rank_by and not self.rank_by[unit].isChecked():
            self.rank_by[unit].setChecked(True)
        if unit == "frames":
            self._set_unit(unit)
            return None
        library = self.session.library
        if library is None:
            return None
        session = self.session

        def encode(ctx: TaskContext) -> tuple[str, int]:
            from engine.detections.crops import encode_crops

            encoder = session.ensure_encoder()
            report = encode_crops(library, encoder, progress=ctx.progress, cancel=ctx.cancel)
            return encoder.model_key, report.encoded

        def encoded(result: tuple[str, int]) -> None:
            _model_key, count = result
            if count:
                self.message.emit(f"{count:,} detector boxes encoded for searching")
            if self.rank_by.get(unit) is None or self.rank_by[unit].isChecked():
                self._set_unit(unit)

        return self.runner.submit(
            encode,
            title="Encoding the detector's boxes",
            pool=WRITE,
            group="crops-encode",
            on_success=encoded,
        )

    def follow_in(self, detail: DetailPane) -> None:
        """Draw the selected photo's boxes over the detail pane's photo too."""
        self.detail = detail
        self.view.currentItemChanged.connect(self._show_in_detail)
        self.model.dataChanged.connect(lambda *_args: self._show_in_detail())

    def _show_in_detail(self, *_args: object) -> None:
        item = self.view.current_item()
        if self.detail is None or item is None or self.detail.item() is not item:
            return
        boxes = self.model.photo_boxes(item)
        if boxes is None:
            self.detail.set_boxes(())
        else:
            self.detail.set_boxes(boxes.detections, boxes.chosen, boxes.judged)

    def set_shown(self, show: bool) -> None:
        """Draw the boxes (or not) on the tiles and in the full view; remembered."""
        if self.toggle.isChecked() != show:
            self.toggle.setChecked(show)
        if show != self.model.show_boxes():
            self.model.set_show_boxes(show)
            self._remember(show)

    def check_library(self) -> TaskHandle | None:
        """Offer the toggle and B where the open library holds detections."""
        library = self.session.library
        if library is None:
            return None

        def check(ctx: TaskContext) -> bool:
            from engine.detections.shown import has_detections

            return has_detections(library)

        return self.runner.submit(
            check,
            title="Reading the detections",
            pool=READ,
            group="boxes-check",
            on_success=self._set_available,
        )

    def _set_available(self, available: bool) -> None:
        self.toggle.setVisible(available)
        self.next_box.setVisible(available)
        if self.rank_menu is not None:
            self.rank_menu.setVisible(available)
        if not available and "frames" in self.rank_by and not self.rank_by["frames"].isChecked():
            self.rank("frames")  # another library, without boxes

    def cycle(self) -> None:
        """B: the selected photo's next box (after its last: the whole frame again)."""
        item = self.view.current_item()
        if item is None:
            self.message.emit("Select a photo to choose one of its boxes")
            return
        if not any(d.box is not None for d in item.detections):
            self.message.emit("This photo has no detector box above the threshold")
            return
        if not self.model.show_boxes():
            self.set_shown(True)
        chosen = self.model.cycle_box(item.image_id)
        self.message.emit(
            f"R / N judge the photo on the box {chosen.caption}"
            if chosen is not None
            else "R / N judge the whole frame"
        )


def install(app: Application) -> None:
    """View › Show detector boxes, B, and the box threshold from the settings."""
    w = app.window
    set_box_threshold(app.settings.box_threshold)
    boxes = app.boxes = BoxesController(
        app.runner,
        app.session,
        w.results_model,
        w.results,
        w.show_boxes_action,
        w.next_box_action,
        app.settings.show_boxes,
        lambda show: app.remember(show_boxes=show),
    )
    boxes.follow_in(w.detail_pane)

    def rank_unit(unit: str) -> None:
        app.search.unit = unit
        app.search.rerun()

    boxes.offer_ranking(w.rank_by_actions, w.rank_by_menu.menuAction(), rank_unit)
    app.session.readyChanged.connect(lambda ready, _message: ready and boxes.check_library())
    say(app, boxes.message)
