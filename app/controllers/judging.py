"""Relevance judgments on the open query, with undo and live metrics.

The user marks photos relevant (R), not relevant (N) or clears them (U), from the keyboard, the
thumbnail toggle or the detail pane; Ctrl+Z undoes. A judgment belongs to the query, so it shows
under every method's run. The undo stack also holds the attribute edits of the detail pane
(`AttributesController` records them with `record_attribute_change`) and the query's presets
given to the photos judged before them (`record_preset_fill`, one step), so Ctrl+Z takes back
the last act of any kind; undoing a judgment puts back the attribute values its query's presets
filled or took back with it (`QueryStore.undo`).

A judgment is shown at once (the model, the detail pane and the metrics panel change on the
GUI thread, in the same event) and written in the single-thread "write" pool, which commits it
before the next write starts; if the write fails the display is put back and the error
reported. Which query is open is decided by `SavedQueriesController` (app/controllers/queries.py):
it hands this controller a `QueryState` read from the catalog, which becomes the window's
`OpenQuery` (app/controllers/open_query.py), the state other controllers read.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Qt, Signal, SignalInstance

from app.controllers.install import say
from app.controllers.open_query import OpenQuery, QueryState, RunState
from app.workers import WRITE, TaskContext, TaskHandle, TaskRunner
from widgets.detail_pane import DetailPane
from widgets.metrics_panel import MetricsPanel, MetricsView, RunMetrics
from widgets.results import ResultItem, ResultsModel, ResultsView

if TYPE_CHECKING:
    from app.controllers.application import Application
    from engine.detections.records import Box
    from engine.judgments.attributes import AttributeChange, PresetFill
    from engine.judgments.queries import JudgmentChange, QueryStore

    UndoEntry = JudgmentChange | AttributeChange | PresetFill

log = logging.getLogger(__name__)

NEXT_IN_CYCLE: dict[int | None, int | None] = {None: 1, 1: 0, 0: None}

BoxTuple = tuple[float, float, float, float]  # a normalised box as the widgets draw it


def engine_box(box: BoxTuple | None) -> Box | None:
    """A box the widgets hold as the engine's `Box` (None stays None)."""
    from engine.detections.records import Box

    return Box.checked(*box) if box is not None else None


def box_tuple(box: Box | None) -> BoxTuple | None:
    return (box.x, box.y, box.width, box.height) if box is not None else None


StoreProvider = Callable[[], "QueryStore | None"]  # the library's, once it is open


@dataclass(frozen=True)
class EventJudgment:
    """An event judged at once (results grouped by event): one judgment per frame, taken
    back by one undo. `image_id` is the frame the grid shows for it."""

    query_id: int
    image_id: int
    changes: tuple[JudgmentChange, ...]


class JudgingController(QObject):
    """Judges the open query's photos (shown at once, committed in order), with the undo stack
    and the live metrics; the open query's state itself is `open_query`."""

    message = Signal(str)
    metricsUpdated = Signal(object)  # MetricsView
    countsChanged = Signal(int, int, int, int)  # query id, runs, relevant, judged
    attributesRestored = Signal(int, int)  # query id, image id: an attribute edit was undone

    def __init__(
        self,
        runner: TaskRunner,
        stores: StoreProvider,
        model: ResultsModel,
        view: ResultsView,
        detail: DetailPane,
        metrics: MetricsPanel,
        open_query: OpenQuery | None = None,
    ) -> None:
        super().__init__()
        self.open_query = open_query if open_query is not None else OpenQuery(self)
        # The first listener: the grid, the detail pane and the metrics show the query
        # before any other controller hears that it opened.
        self.open_query.opened.connect(self._query_shown)
        self.runner = runner
        self._stores = stores
        self.model = model
        self.view = view
        self.detail = detail
        self.metrics = metrics
        self.k = metrics.k()
        self._undo: dict[int, list[UndoEntry | EventJudgment]] = {}  # query id -> its undo stack
        # Whose judgments the metrics use (Judge › Metrics from, `AgreementController`): None
        # the ones shown (the newest per photo, or a blind judge's own), else a view read
        # from the catalog; the note says which on the panel.
        self.metrics_judgments: dict[int, int] | None = None
        self.metrics_note = "newest per photo"
        # Results grouped by event (`EventsController`): the frames a judgment of a shown
        # event's tile judges, and each photo's event, for metrics per event (None: per photo).
        self.frames_of: Callable[[int], list[int] | None] | None = None
        self.event_of: dict[int, int] | None = None

        view.currentItemChanged.connect(self._show_item_judgment)
        view.judgmentCycleRequested.connect(self.cycle)
        view.judgmentRequested.connect(lambda item, v: self.judge_item(item, v, advance=False))
        detail.judgmentRequested.connect(lambda v: self.judge_current(v))
        metrics.kChanged.connect(self.set_k)

    @property
    def store(self) -> QueryStore | None:
        return self._stores()

    # The open query's state, read through (it lives in `open_query`).

    @property
    def queryOpened(self) -> SignalInstance:  # noqa: N802 (a Qt signal's name)
        """Query id: its runs and judgments are loaded (`OpenQuery.opened`)."""
        return self.open_query.opened

    @property
    def judgmentSaved(self) -> SignalInstance:  # noqa: N802 (a Qt signal's name)
        """Query id, image id, relevance: now durable (`OpenQuery.judgmentSaved`)."""
        return self.open_query.judgmentSaved

    @property
    def query_id(self) -> int | None:
        return self.open_query.query_id

    @property
    def query_title(self) -> str:
        return self.open_query.title

    @property
    def runs(self) -> list[RunState]:
        return self.open_query.runs

    @property
    def run_id(self) -> int | None:
        return self.open_query.run_id

    @property
    def judgments(self) -> dict[int, int]:
        return self.open_query.judgments

    # -- which query is open -------------------------------------------------------------------

    def show_query(self, query: QueryState) -> None:
        """Make `query` the open one: its judgments on the grid and the detail pane, its
        runs in the metrics panel. Emits `queryOpened`."""
        self.open_query.open(query)

    def _query_shown(self, _query_id: int) -> None:
        self.model.set_judgments(self.judgments)
        self.model.set_judged_boxes(self.open_query.judged_boxes)
        self._show_item_judgment(self.view.current_item())
        self._refresh_metrics()

    def new_ranking(self, query_id: int | None) -> None:
        """The grid is about to show a new ranking for `query_id` (None: a query not saved yet):
        judgments of another query must not show on it."""
        same = query_id == self.query_id
        self.model.set_judgments(self.judgments if same else {})
        self.model.set_judged_boxes(self.open_query.judged_boxes if same else {})
        if query_id != self.query_id:
            self._close_query()

    def retitle(self, query_id: int, title: str) -> None:
        """The saved query `query_id` was renamed."""
        if self.open_query.retitle(query_id, title):
            self._refresh_metrics()

    def forget_query(self, query_id: int) -> None:
        """The saved query `query_id` was deleted with its runs and judgments."""
        self._undo.pop(query_id, None)
        if query_id == self.query_id:
            self._close_query()
            self.model.set_judgments({})
            self._show_item_judgment(self.view.current_item())

    def current_run(self) -> RunState | None:
        """The run shown in the grid."""
        return self.open_query.current_run()

    def _close_query(self) -> None:
        self.open_query.close()
        self._refresh_metrics()

    # -- judging -----------------------------------------------------------------------------------

    def judge_current(self, relevance: int | None, advance: bool = True) -> None:
        """Judge the selected photo (keys R / N / U), then select the next one."""
        item = self.view.current_item()
        if item is None:
            self.message.emit("Select a photo to judge it")
            return
        self.judge_item(item, relevance, advance=advance)

    def cycle(self, item: ResultItem) -> None:
        """The thumbnail toggle: not judged -> relevant -> not relevant -> cleared."""
        self.judge_item(item, NEXT_IN_CYCLE[self.judgments.get(item.image_id)], advance=False)

    def unjudged_rows(self) -> list[int]:
        """The grid's rows whose photo the open query has no judgment for, top first."""
        items = self.model.items()
        return [row for row, item in enumerate(items) if item.image_id not in self.judgments]

    def focus_next_unjudged(self, from_row: int = 0) -> bool:
        """Give the grid the keyboard focus with the first photo not judged yet at or after
        `from_row` (else the first above it) selected, so R / N / U judge it whatever had
        the keys before (the query list, a button). Every photo judged: the grid still takes
        the keys, at `from_row`, and False is returned."""
        rows = self.unjudged_rows()
        target = next((row for row in rows if row >= from_row), rows[0] if rows else None)
        count = self.model.rowCount()
        if count:
            self.view.select_row(target if target is not None else min(from_row, count - 1))
            self.view.setFocus(Qt.FocusReason.OtherFocusReason)
        return target is not None

    def judge_item(self, item: ResultItem, relevance: int | None, advance: bool = False) -> None:
        if self.judge(item.image_id, relevance) is not None and advance:
            row = self.model.row_of(item.image_id)
            if row is not None:
                self.view.select_row(row + 1)

    def judge(self, image_id: int, relevance: int | None) -> TaskHandle | None:
        """Mark a photo for the open query; shown now, committed by the write pool. A
        detector's box chosen on the photo (B, or a click in the full view) is kept with the
        judgment; the judgment is the frame's."""
        store = self.store
        if store is None or self.query_id is None:
            self.message.emit("Run a search (or open a saved query) before judging photos")
            return None
        from engine.judgments.queries import JudgmentChange

        frames = self.frames_of(image_id) if self.frames_of is not None else None
        if frames is not None and len(frames) > 1:
            return self._judge_event(image_id, frames, relevance)
        query_id = self.query_id
        previous = self.judgments.get(image_id)
        chosen = self.model.chosen_box(image_id)
        box = chosen.box if chosen is not None and relevance is not None else None
        change = JudgmentChange(
            query_id,
            image_id,
            previous,
            relevance,
            box=engine_box(box),
            previous_box=engine_box(self.open_query.judged_boxes.get(image_id)),
        )
        self._undo.setdefault(query_id, []).append(change)
        self._show_judgment(query_id, image_id, relevance, box)
        return self._write(change, lambda: self._forget_change(change))

    def _judge_event(
        self, shown_id: int, frames: list[int], relevance: int | None
    ) -> TaskHandle | None:
        """Judge every frame of an event alike: shown now, written in one task of the write
        pool, one step on the undo stack."""
        from engine.judgments.queries import JudgmentChange

        store, query_id = self.store, self.query_id
        assert store is not None and query_id is not None
        # A box belongs to one frame: the event's frames are judged whole.
        changes = tuple(
            JudgmentChange(
                query_id,
                frame,
                self.judgments.get(frame),
                relevance,
                previous_box=engine_box(self.open_query.judged_boxes.get(frame)),
            )
            for frame in frames
        )
        entry = EventJudgment(query_id, shown_id, changes)
        if self.event_of is not None:
            # Frames below the ranking's cut-off are of this event too, for the metrics.
            event = self.event_of.get(shown_id, shown_id)
            self.event_of.update(dict.fromkeys(frames, event))
        self._undo.setdefault(query_id, []).append(entry)
        for change in changes:
            self._show_judgment(query_id, change.image_id, relevance)
        return self._write_event(entry, undo=False, on_reverted=lambda: self._forget_change(entry))

    def _write_event(
        self, entry: EventJudgment, undo: bool, on_reverted: Callable[[], None]
    ) -> TaskHandle:
        """Commit (or, `undo`, take back) an event's judgments in one task, in order."""
        store = self.store
        assert store is not None

        def write(ctx: TaskContext) -> None:
            if undo:
                for change in reversed(entry.changes):
                    store.undo(change)
            else:
                for change in entry.changes:
                    store.judge(change.query_id, change.image_id, change.current, box=change.box)

        def saved(_result: None) -> None:
            for change in entry.changes:
                value = change.previous if undo else change.current
                self.judgmentSaved.emit(change.query_id, change.image_id, value)

        def failed(exc: BaseException) -> None:
            for change in entry.changes:
                self._show_judgment(
                    change.query_id,
                    change.image_id,
                    change.current if undo else change.previous,
                    box_tuple(change.box if undo else change.previous_box),
                )
            on_reverted()
            self.runner.report_error(exc, "Saving the event's judgments")

        return self.runner.submit(
            write, title="Saving the judgments", pool=WRITE, on_success=saved, on_failure=failed
        )

    def record_attribute_change(self, change: AttributeChange) -> None:
        """An attribute edit was made (shown, its write queued): Ctrl+Z takes it back like a
        judgment, even before the write is done (the undo is written after it)."""
        self._undo.setdefault(change.query_id, []).append(change)

    def replace_attribute_change(
        self, change: AttributeChange, stored: AttributeChange | None
    ) -> None:
        """What the catalog did for `change` (its values as stored) replaces it on the undo
        stack; None, or a change that changed nothing, takes it off."""
        stack = self._undo.get(change.query_id, [])
        if change not in stack:
            return  # undone meanwhile
        if stored is None or not stored.changed:
            stack.remove(change)
        else:
            stack[stack.index(change)] = stored

    def record_preset_fill(self, fill: PresetFill) -> None:
        """The query's presets were given to the photos judged before (stored): Ctrl+Z takes
        them all back as one step."""
        if fill.changed:
            self._undo.setdefault(fill.query_id, []).append(fill)

    def undo(self) -> TaskHandle | None:
        """Put back what the last R / N / U, attribute edit or preset fill of the open query
        replaced."""
        stack = self._undo.get(self.query_id) if self.query_id is not None else None
        if not stack:
            self.message.emit("Nothing to undo")
            return None
        from engine.judgments.attributes import AttributeChange, PresetFill
        from engine.judgments.queries import JudgmentChange

        change = stack.pop()
        if isinstance(change, PresetFill):
            return self._undo_preset_fill(change, lambda: stack.append(change))
        row = self.model.row_of(change.image_id)
        if row is not None:
            self.view.select_row(row)
        if isinstance(change, AttributeChange):
            return self._undo_attributes(change, lambda: stack.append(change))
        if isinstance(change, EventJudgment):
            for frame in change.changes:
                self._show_judgment(
                    frame.query_id, frame.image_id, frame.previous, box_tuple(frame.previous_box)
                )
            return self._write_event(change, undo=True, on_reverted=lambda: stack.append(change))
        back = JudgmentChange(
            change.query_id,
            change.image_id,
            change.current,
            change.previous,
            box=change.previous_box,
            previous_box=change.box,
        )
        self._show_judgment(
            change.query_id, change.image_id, change.previous, box_tuple(change.previous_box)
        )
        return self._write(back, lambda: stack.append(change), undoing=change)

    def _undo_attributes(
        self, change: AttributeChange, on_reverted: Callable[[], None]
    ) -> TaskHandle | None:
        store = self.store
        if store is None:
            on_reverted()
            return None

        def write(ctx: TaskContext) -> AttributeChange:
            from engine.judgments.attributes import undo_attributes

            return undo_attributes(store.library, change, store.user)

        def failed(exc: BaseException) -> None:
            on_reverted()
            self.runner.report_error(exc, "Undoing the attribute change")

        return self.runner.submit(
            write,
            title="Undoing the attribute change",
            pool=WRITE,
            on_success=lambda _r: self.attributesRestored.emit(change.query_id, change.image_id),
            on_failure=failed,
        )

    def _undo_preset_fill(
        self, fill: PresetFill, on_reverted: Callable[[], None]
    ) -> TaskHandle | None:
        store = self.store
        if store is None:
            on_reverted()
            return None

        def write(ctx: TaskContext) -> PresetFill:
            from engine.judgments.attributes import undo_preset_fill

            return undo_preset_fill(store.library, fill, store.user)

        def undone(_result: PresetFill) -> None:
            self.message.emit(
                f"Took the query's presets back from {fill.photos:,} "
                f"{'photo' if fill.photos == 1 else 'photos'}"
            )
            for change in fill.changes:
                self.attributesRestored.emit(change.query_id, change.image_id)

        def failed(exc: BaseException) -> None:
            on_reverted()
            self.runner.report_error(exc, "Undoing the presets")

        return self.runner.submit(
            write, title="Undoing the presets", pool=WRITE, on_success=undone, on_failure=failed
        )

    def _write(
        self,
        change: JudgmentChange,
        on_reverted: Callable[[], None],
        undoing: JudgmentChange | None = None,
    ) -> TaskHandle:
        """Commit `change` in the write pool; `undoing`: the change it takes back (its
        preset-filled attribute values are put back with it)."""
        store = self.store
        assert store is not None

        def write(ctx: TaskContext) -> JudgmentChange:
            if undoing is not None:
                return store.undo(undoing)
            return store.judge(change.query_id, change.image_id, change.current, box=change.box)

        def saved(result: JudgmentChange) -> None:
            # What the catalog did (with the attribute values presets changed) replaces the
            # change shown, so that undoing it puts those values back too.
            stack = self._undo.get(change.query_id, [])
            if undoing is None and change in stack:
                stack[stack.index(change)] = result
            self.judgmentSaved.emit(change.query_id, change.image_id, change.current)

        def failed(exc: BaseException) -> None:
            # Not in the database: show what is stored, say why.
            if self.judgments.get(change.image_id) == change.current:
                self._show_judgment(
                    change.query_id,
                    change.image_id,
                    change.previous,
                    box_tuple(change.previous_box),
                )
            on_reverted()
            self.runner.report_error(exc, "Saving the judgment")

        # Never cancelled or superseded: every judgment must reach the database, in order.
        return self.runner.submit(
            write, title="Saving the judgment", pool=WRITE, on_success=saved, on_failure=failed
        )

    def set_event_units(self, event_of: dict[int, int] | None) -> None:
        """Metrics per event (each photo's event id) or, None, per photo."""
        self.event_of = event_of
        self._refresh_metrics()

    def _forget_change(self, change: JudgmentChange | EventJudgment) -> None:
        stack = self._undo.get(change.query_id, [])
        if change in stack:
            stack.remove(change)

    def _show_judgment(
        self,
        query_id: int,
        image_id: int,
        relevance: int | None,
        box: BoxTuple | None = None,
    ) -> None:
        """Show a photo's judgment (None: cleared) and the box it was made on (None: the
        whole frame)."""
        if not self.open_query.set_judgment(query_id, image_id, relevance):
            return
        if box is None or relevance is None:
            self.open_query.judged_boxes.pop(image_id, None)
            box = None
        else:
            self.open_query.judged_boxes[image_id] = box
        self.model.set_judged_box(image_id, box)
        self.model.set_judgment(image_id, relevance)
        current = self.detail.item()
        if current is not None and current.image_id == image_id:
            self.detail.set_judgment(relevance, True)
        relevant = self.open_query.relevant()
        self.countsChanged.emit(query_id, len(self.runs), relevant, len(self.judgments))
        self._refresh_metrics()

    def _show_item_judgment(self, item: ResultItem | None) -> None:
        if item is not None:
            self.detail.set_judgment(self.judgments.get(item.image_id), self.query_id is not None)

    # -- metrics -----------------------------------------------------------------------------------

    def set_k(self, k: int) -> None:
        self.k = k
        self.metrics.set_k_choice(k)
        self._refresh_metrics()

    def set_metrics_source(self, note: str, judgments: dict[int, int] | None) -> None:
        """Compute the metrics from `judgments` (None: the judgments shown), said as `note`."""
        self.metrics_note, self.metrics_judgments = note, judgments
        self._refresh_metrics()

    def metrics_view(self) -> MetricsView | None:
        """The numbers the panel shows, computed from the runs and judgments in memory."""
        store = self.store
        if store is None or self.query_id is None:
            return None
        from engine.evaluation.live import live_metrics

        shown = self.judgments
        if self.metrics_judgments is not None:
            shown = self.metrics_judgments
        rows = []
        photo_judgments = shown
        note = self.metrics_note
        if self.event_of is not None:
            from engine.evaluation.units import to_event_units

            _, shown = to_event_units([], photo_judgments, self.event_of)
            current = self.current_run()
            events = len(to_event_units(current.ids, {}, self.event_of)[0]) if current else 0
            note = f"per event ({events:,} events)  ·  {note}"
        for run in self.runs:
            ids = run.ids
            if self.event_of is not None:
                ids = to_event_units(ids, {}, self.event_of)[0]
            live = live_metrics(ids, shown, self.k, run.run_id)
            m = live.metrics
            last_relevant = max(
                (rank for rank, i in enumerate(ids, start=1) if shown.get(i, 0) > 0),
                default=None,
            )
            rows.append(
                RunMetrics(
                    run.run_id,
                    run.method,
                    run.label,
                    {
                        "P": m.P,
                        "R_at_k": m.R_at_k,
                        "AP": m.AP,
                        "nDCG": m.nDCG,
                        "RR": m.RR,
                        "judged": m.judged,
                    },
                    live.precision_curve,
                    live.trailing_nonrelevant,
                    last_relevant,
                )
            )
        return MetricsView(
            title=self.query_title,
            k=self.k,
            relevant=sum(1 for v in shown.values() if v > 0),
            judged=len(shown),
            current_run_id=self.run_id,
            runs=rows,
            judgments_note=note,
        )

    def _refresh_metrics(self) -> None:
        view = self.metrics_view()
        self.metrics.show_metrics(view)
        self.metricsUpdated.emit(view)


def install(app: Application) -> None:
    """R / N / U / Ctrl+Z on the open query, and the metrics panel's k (kept across
    sessions)."""
    w = app.window
    judging = app.judging = JudgingController(
        app.runner,
        app.session.query_store,
        w.results_model,
        w.results,
        w.detail_pane,
        w.metrics_panel,
        app.open_query,
    )
    w.relevant_action.triggered.connect(lambda: judging.judge_current(1))
    w.not_relevant_action.triggered.connect(lambda: judging.judge_current(0))
    w.clear_judgment_action.triggered.connect(lambda: judging.judge_current(None))
    w.undo_judgment_action.triggered.connect(judging.undo)
    from widgets.metrics_panel import K_CHOICES

    if app.settings.metrics_k in K_CHOICES:
        judging.set_k(app.settings.metrics_k)

    def remember_k(k: int) -> None:
        if k != app.settings.metrics_k:
            app.remember(metrics_k=k)

    w.metrics_panel.kChanged.connect(remember_k)
    say(app, judging.message)
