"""The full-size view of the selected photo (Space): loading it off the GUI thread, following
the grid's selection, and judging in it.

The view (`widgets/full_view.py`) shows whatever photo is current in the grid. The photo is
decoded in a read worker (the indexer's safe decoder: EXIF orientation, the decode memory
budget), newest wins, and handed over as a `QImage`. The judging keys are the main window's own
actions, added to the view, so R / N / U go through `JudgingController.judge_current` exactly
as in the grid: the photo is judged and the grid moves on to the next, which the view then shows.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QModelIndex, QObject, Qt, Signal
from PySide6.QtGui import QAction, QImage
from PySide6.QtWidgets import QWidget

from app.controllers.install import say
from app.controllers.judging import JudgingController
from app.workers import READ, TaskContext, TaskRunner
from widgets.full_view import FullView
from widgets.results import ResultItem, ResultRole, ResultsView

if TYPE_CHECKING:
    from app.controllers.application import Application

log = logging.getLogger(__name__)


def decode_for_view(path: str) -> QImage:
    """The photo at `path` as an upright RGB `QImage` at its full resolution. Blocks: call
    from a worker. Raises `BadImageError` (one line) when it cannot be shown."""
    from engine.indexing.decode import decode_image

    decoded = decode_image(Path(path))
    rgb = decoded.image.convert("RGB") if decoded.image.mode != "RGB" else decoded.image
    width, height = rgb.size
    data = rgb.tobytes("raw", "RGB")
    # QImage does not own `data`: copy before the bytes go.
    return QImage(data, width, height, 3 * width, QImage.Format.Format_RGB888).copy()


class FullViewController(QObject):
    """Opens the full-size view on the grid's current photo and keeps it in step."""

    message = Signal(str)

    def __init__(
        self,
        runner: TaskRunner,
        results: ResultsView,
        judging: JudgingController,
        judging_actions: list[QAction],
        parent_window: QWidget,
    ) -> None:
        super().__init__()
        self.runner = runner
        self.results = results
        self.judging = judging
        self.actions = judging_actions
        self.parent_window = parent_window
        self.view: FullView | None = None
        self._shown: int | None = None  # image id of the photo shown or loading
        results.currentItemChanged.connect(self._follow)
        judging.model.dataChanged.connect(self._judgments_changed)
        judging.model.dataChanged.connect(self._boxes_changed)

    def shown_id(self) -> int | None:
        """The image id of the photo the view shows (or is loading); None when closed."""
        return self._shown if self.is_open() else None

    def is_open(self) -> bool:
        return self.view is not None and self.view.isVisible()

    def open(self) -> FullView | None:
        """Space: show the grid's current photo at full size (None when no photo is selected)."""
        item = self.results.current_item()
        if item is None:
            self.message.emit("Select a photo to see it at full size")
            return None
        view = self.view
        if view is None:
            view = self.view = FullView(self.parent_window)
            view.addActions(self.actions)  # R / N / U / Ctrl+Z judge the photo shown
            view.nextRequested.connect(lambda: self._step(1))
            view.previousRequested.connect(lambda: self._step(-1))
            view.closed.connect(self._closed)
            view.canvas.boxClicked.connect(self._box_clicked)
        if view.isVisible():
            view.raise_()
        else:
            # As large as the main window, and never past its screen.
            area = self.parent_window.screen().availableGeometry()
            view.setGeometry(self.parent_window.geometry().intersected(area))
            view.show()
        view.activateWindow()
        view.canvas.setFocus()
        self._load(item)
        return view

    def close(self) -> None:
        if self.view is not None:
            self.view.close()

    def _closed(self) -> None:
        self._shown = None
        # The keys go back to the grid, on the photo shown last.
        self.parent_window.activateWindow()
        self.results.setFocus(Qt.FocusReason.OtherFocusReason)

    def _step(self, steps: int) -> None:
        index = self.results.currentIndex()
        if index.isValid():
            self.results.select_row(index.row() + steps)

    def _follow(self, item: ResultItem | None) -> None:
        """The grid's current photo changed (a judgment moved on, a click): show it."""
        if not self.is_open():
            return
        if item is None:
            assert self.view is not None
            self._shown = None
            self.view.show_nothing("No photo selected")
            return
        self._load(item)

    def _load(self, item: ResultItem) -> None:
        view = self.view
        assert view is not None
        if self._shown == item.image_id and not view.canvas.image_size().isEmpty():
            self._show_judgment(item)
            self._show_boxes(item)
            return
        self._shown = item.image_id
        view.show_loading(item.title)
        self._show_judgment(item)
        self._show_boxes(item)
        image_id = item.image_id

        def load(ctx: TaskContext) -> QImage:
            ctx.check()  # another photo was asked for meanwhile
            return decode_for_view(item.path)

        def loaded(image: QImage) -> None:
            if self.view is not None and self._shown == image_id:
                self.view.show_photo(item.title, image)

        def failed(exc: BaseException) -> None:
            from engine.errors import QuadratError

            if self.view is None or self._shown != image_id:
                return
            if not isinstance(exc, QuadratError):
                self.runner.report_error(exc, "Showing the photo")
            reason = getattr(exc, "reason", None) or str(exc)
            self.view.show_failure(item.title, reason)

        self.runner.submit(
            load,
            title="Loading the photo at full size",
            pool=READ,
            group="full-view",
            on_success=loaded,
            on_failure=failed,
        )

    def _show_judgment(self, item: ResultItem) -> None:
        if self.view is not None:
            self.view.set_judgment(
                self.judging.judgments.get(item.image_id), self.judging.query_id is not None
            )

    def _show_boxes(self, item: ResultItem) -> None:
        """The detector's boxes over the photo shown (unless View › Show boxes is off)."""
        if self.view is None:
            return
        boxes = self.judging.model.photo_boxes(item)
        if boxes is None:
            self.view.canvas.set_boxes(())
        else:
            self.view.canvas.set_boxes(boxes.detections, boxes.chosen, boxes.judged)
        chosen = self.judging.model.chosen_box(item.image_id)
        self.view.set_box_note(f"R / N on the box {chosen.caption}" if chosen else "")

    def _box_clicked(self, index: int) -> None:
        """A box clicked in the view: R / N judge the photo on it (clicked again: the whole
        frame)."""
        item = self.results.current_item()
        if item is None or item.image_id != self._shown:
            return
        model = self.judging.model
        same = model.chosen_index(item.image_id) == index
        model.choose_box(item.image_id, None if same else index)
        shown = model.chosen_box(item.image_id)
        self.message.emit(
            f"R / N judge the photo on the box {shown.caption}"
            if shown is not None
            else "R / N judge the whole frame"
        )

    def _boxes_changed(self, first: QModelIndex, last: QModelIndex, roles: object = ()) -> None:
        item = self.results.current_item()
        if (
            self.is_open()
            and item is not None
            and (not roles or ResultRole.Boxes in roles)  # type: ignore[operator]
            and first.row() <= self.results.currentIndex().row() <= last.row()
        ):
            self._show_boxes(item)

    def _judgments_changed(self, first: QModelIndex, last: QModelIndex, *_roles: object) -> None:
        item = self.results.current_item()
        if (
            self.is_open()
            and item is not None
            and first.row() <= self.results.currentIndex().row() <= last.row()
        ):
            self._show_judgment(item)


def install(app: Application) -> None:
    """Space: the selected photo at full resolution, judged with the same keys."""
    w = app.window
    full_view = app.full_view = FullViewController(
        app.runner,
        w.results,
        app.judging,
        [
            w.relevant_action,
            w.not_relevant_action,
            w.clear_judgment_action,
            w.undo_judgment_action,
            w.next_box_action,
        ],
        w,
    )
    w.full_view_action.triggered.connect(full_view.open)
    say(app, full_view.message)
