"""Learning from the open query's judgments in the window: Refine, Judge next, the recall
estimate and a sample to judge.

- **Refine ▾** (metrics panel, Judge menu): a learning method (`engine.methods.feedback`:
  Rocchio, the probe, More like these) refines the open query from the judgments shown, in a
  worker; the ranking is saved as a new run that names the run it came from, and the query is
  opened again on it, so the metrics panel lists both runs on the same judgments.
- **Judge next** (a mode of the grid): the photos whose judgment would teach the probe most,
  never judged ones, replace the grid until the mode is left, which brings the run back.
  **Sample to judge** shows, the same way, the random sample of score bands that tightens
  the recall estimate.
- **The recall estimate** ("found 37 of about 45 (90 %: 40–55)") beside the stop rule, computed
  in a worker a moment after the judgments change (newest wins).
- **Export likely relevant photos…** (Judge menu): the photos judged relevant and every unjudged
  photo whose calibrated probability of relevance (the probe's, Platt-scaled on held-out
  judgments) reaches a cut-off the user chooses, found first (so the window can say why nothing
  would be written before asking where to save), then written to a CSV with that probability.

The learning methods never appear where a method is picked for a search, a benchmark or a
reranker's base (`learning_method_keys`): they run on a saved query's judgments only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, QTimer, Signal
from PySide6.QtGui import QAction

from app.controllers.install import announce, say
from app.controllers.judging import JudgingController
from app.controllers.results import result_items
from app.controllers.session import LibrarySession
from app.controllers.thumbnails import ThumbnailLoader
from app.workers import READ, WRITE, TaskContext, TaskHandle, TaskRunner
from engine.errors import BadInputError
from widgets.metrics_panel import MetricsPanel, MetricsView
from widgets.results import ResultItem, ResultsModel, ResultsView

if TYPE_CHECKING:
    from app.controllers.application import Application
    from engine.catalog.library import Library
    from engine.judgments.learning import RecallEstimate
    from engine.methods.feedback import LikelyRelevant, Refinement
    from engine.search.filters import SearchFilters

log = logging.getLogger(__name__)

JUDGE_NEXT_COUNT = 12  # photos per "Judge next" batch: one screenful of the grid
SAMPLE_COUNT = 12  # photos per "Sample to judge"
ESTIMATE_DELAY_MS = 600  # the estimate waits this long after the last judgment
NO_JUDGMENTS = "Judge a few photos of the open query first (R / N): Refine learns from them"
NO_QUERY = "Run a search or open a saved query first"

# Opens a saved query on one of its runs: (query id, run id) (SavedQueriesController.open_query).
OpenRun = Callable[[int, int], object]


def learning_method_keys() -> set[str]:
    """The keys of the registry's methods that learn from judgments (`needs_judgments`)."""
    from engine.methods.registry import methods

    return {key for key, method in methods().items() if method.needs_judgments}


def refine_choices() -> list[tuple[str, str, str]]:
    """(key, label, description) of each learning method that can run here, for Refine ▾."""
    from engine.methods import method_infos

    learning = learning_method_keys()
    return [
        (info.key, info.label, info.description)
        for info in method_infos()
        if info.key in learning and info.available
    ]


@dataclass(frozen=True)
class JudgingList:
    """Photos shown in the grid for judging instead of the run: what they are ("judge next"
    or "sample"), their cards, and a line about them."""

    kind: str
    query_id: int
    items: list[ResultItem]
    note: str


class FeedbackController(QObject):
    """Wires Refine, Judge next, Sample to judge and the recall estimate to the engine."""

    message = Signal(str)
    outcome = Signal(str)  # a file written: the message band and the status line
    refined = Signal(int, int)  # query id, the new run's id (saved; opened next)
    judgingListShown = Signal(object)  # JudgingList
    estimateShown = Signal(str)  # the estimate's summary ("" when none)

    def __init__(
        self,
        runner: TaskRunner,
        session: LibrarySession,
        judging: JudgingController,
        open_run: OpenRun,
        model: ResultsModel,
        view: ResultsView,
        thumbnails: ThumbnailLoader,
        panel: MetricsPanel,
        judge_next_action: QAction,  # checkable: the mode is on
        sample_action: QAction,
        back_action: QAction,
        filters: Callable[[], SearchFilters | None] = lambda: None,  # the window's active ones
        export_likely_action: QAction | None = None,  # Export likely relevant photos…
    ) -> None:
        super().__init__()
        self.runner = runner
        self.session = session
        self.judging = judging
        self.open_run = open_run
        self.model = model
        self.view = view
        self.thumbnails = thumbnails
        self.panel = panel
        self.judge_next_action = judge_next_action
        self.sample_action = sample_action
        self.back_action = back_action
        self.filters = filters
        self.export_likely_action = export_likely_action
        self.mode: JudgingList | None = None  # the list shown instead of the run
        self._run_items: list[ResultItem] = []  # the run's cards, back when the mode ends
        self._run_row = 0
        self._estimated: tuple[int, frozenset[tuple[int, int]]] | None = None
        self.estimate: RecallEstimate | None = None  # the newest shown
        self._estimate_timer = QTimer(self)
        self._estimate_timer.setSingleShot(True)
        self._estimate_timer.setInterval(ESTIMATE_DELAY_MS)
        self._estimate_timer.timeout.connect(self.update_estimate)
        self._batch_offered = False  # the shown list is judged and the next batch was offered

        panel.set_refine_methods(refine_choices())
        panel.refineRequested.connect(self.refine)
        judge_next_action.triggered.connect(self._judge_next_toggled)
        sample_action.triggered.connect(lambda _checked=False: self.show_sample())
        back_action.triggered.connect(lambda _checked=False: self.leave_mode())
        judging.metricsUpdated.connect(self._judgments_changed)
        # A new search or another query replaces the grid: the mode ends without restoring.
        judging.queryOpened.connect(lambda _query_id: self._end_mode())
        self._judgments_changed(judging.metrics_view())

    # -- state ------------------------------------------------------------------------------------

    def _judgments_changed(self, view: MetricsView | None) -> None:
        """Enable what can run now; recompute the estimate a moment after the last change."""
        query_id = self.judging.query_id
        open_query = query_id is not None
        judged = bool(self.judging.judgments)
        self.panel.set_refine_enabled(
            open_query and judged,
            "Refine the query from its judgments: the new ranking is saved as a run"
            if open_query and judged
            else (NO_JUDGMENTS if open_query else NO_QUERY),
        )
        for action in (self.judge_next_action, self.sample_action):
            action.setEnabled(open_query)
        if self.export_likely_action is not None:
            self.export_likely_action.setEnabled(open_query and judged)
        if self.mode is not None and self.mode.query_id != self.judging.query_id:
            self._end_mode()
        self._offer_next_batch()
        if query_id is None:
            self._estimated = None
            self.estimate = None
            self._estimate_timer.stop()
            self._cancel("recall-estimate")
            self._show_estimate("", "")
            return
        key = (query_id, frozenset(self.judging.judgments.items()))
        if key != self._estimated:  # not for a change of k alone
            self._estimate_timer.start()

    def _cancel(self, group: str) -> None:
        for handle in self.runner.active(group):
            handle.cancel()

    def _can_learn(self) -> bool:
        """A query is open with judgments to learn from; else say what is missing."""
        if self.judging.query_id is None or self.session.library is None:
            self.message.emit(NO_QUERY)
            return False
        if not self.judging.judgments:
            self.message.emit(NO_JUDGMENTS)
            return False
        return True

    # -- refine -----------------------------------------------------------------------------------

    def refine(self, method: str) -> TaskHandle | None:
        """Refine the open query with the learning method `method` from the judgments shown;
        the ranking is saved as a new run and the query opened on it."""
        judging, library = self.judging, self.session.library
        query_id = judging.query_id
        if not self._can_learn() or library is None or query_id is None:
            return None
        judgments = dict(judging.judgments)
        from_run = judging.run_id if judging.current_run() is not None else None
        top_k = self.session.settings.top_k
        filters = self.filters()
        encoder = self.session.ensure_encoder

        def work(ctx: TaskContext) -> Refinement:
            from engine.methods.feedback import refine_query

            return refine_query(
                library,
                encoder,
                query_id,
                method,
                from_run=from_run,
                top_k=top_k,
                k=judging.k,
                filters=filters,
                judgments=judgments,
            )

        self.message.emit("Refining the query from its judgments…")
        return self.runner.submit(
            work,
            title="Refining the query",
            pool=READ,
            group="refine",
            on_success=self._refined,
            on_failure=lambda exc: self._failed(exc, "Refining the query"),
        )

    def _refined(self, refinement: Refinement) -> None:
        new, old = refinement.metrics, refinement.from_metrics
        k = new.k
        gain = f"AP@{k} {old.metrics.AP:.3f} → {new.metrics.AP:.3f}" if old is not None else ""
        notes = "  ·  ".join(refinement.notes)
        line = (
            f"Refined with {refinement.method}: run {refinement.run_id} from run "
            f"{refinement.from_run}"
            + (f"  ·  {gain}" if gain else "")
            + (f"  ·  {notes}" if notes else "")
        )
        self.message.emit(line)
        if self.judging.query_id == refinement.query_id:
            handle = self.open_run(refinement.query_id, refinement.run_id)
            if isinstance(handle, TaskHandle):
                # Said again once the run is shown ("Opened …" would hide it otherwise).
                handle.succeeded.connect(lambda _loaded: self.message.emit(line))
        self.refined.emit(refinement.query_id, refinement.run_id)

    # -- a list to export by probability --------------------------------------------------------

    def find_likely(
        self, min_p: float, found: Callable[[LikelyRelevant], object]
    ) -> TaskHandle | None:
        """Find, in a worker, what an export at `min_p` would write: the photos judged relevant
        (known) and the unjudged ones whose calibrated probability of relevance reaches it. The
        window asks where to save only then, so it can say first when nothing would be written;
        `found` gets the list on the GUI thread, unless another query was opened meanwhile."""
        judging, library = self.judging, self.session.library
        query_id = judging.query_id
        if not self._can_learn() or library is None or query_id is None:
            return None
        judgments = dict(judging.judgments)
        filters = self.filters()
        encoder = self.session.ensure_encoder

        def work(ctx: TaskContext) -> LikelyRelevant:
            from engine.methods.feedback import photos_above

            return photos_above(
                library, encoder, query_id, min_p, filters=filters, judgments=judgments
            )

        def shown(likely: LikelyRelevant) -> None:
            if self.judging.query_id != query_id:
                return  # another query is open: its export is another list
            self.message.emit(f"p ≥ {min_p:g}: {likely.summary()}")
            found(likely)

        self.message.emit(f"Finding the photos with p ≥ {min_p:g}…")
        return self.runner.submit(
            work,
            title="Finding the likely relevant photos",
            pool=WRITE,  # after every judgment queued before it, as other exports
            on_success=shown,
            on_failure=lambda exc: self._failed(exc, "Finding the likely relevant photos"),
        )

    def write_likely(self, likely: LikelyRelevant, path: str | Path) -> TaskHandle | None:
        """Write `likely` (from `find_likely`) to a CSV at `path`, best first: the judged photos
        (their judgment column 1, p 1), then the others with their calibrated p."""
        library = self.session.library
        if library is None or not len(likely):
            return None
        judgments = dict(self.judging.judgments)
        path = Path(path)

        def work(ctx: TaskContext) -> int:
            from engine.io.export import export_results_csv

            return export_results_csv(
                library, path, likely.ranking, judgments, probabilities=likely.probabilities
            )

        def written(count: int) -> None:
            self.outcome.emit(f"Wrote {count:,} photos ({likely.summary()}) to {path}")

        return self.runner.submit(
            work,
            title="Exporting the likely relevant photos",
            pool=WRITE,
            on_success=written,
            on_failure=lambda exc: self._failed(exc, "Exporting the likely relevant photos"),
        )

    def export_likely(self, path: str | Path, min_p: float) -> TaskHandle | None:
        """`find_likely`, then `write_likely` to `path` when there is anything to write (else
        the reason, in the status line): the export without the window's questions."""
        return self.find_likely(min_p, lambda likely: self.write_likely(likely, path))

    # -- judge next and the sample ----------------------------------------------------------------

    def _judge_next_toggled(self, checked: bool) -> None:
        # Once every photo shown is judged, Judge next (Ctrl+J) continues with the next batch
        # instead of leaving the mode: the judging loop needs no other key.
        if checked or self._batch_judged():
            self.judge_next()
        else:
            self.leave_mode()

    def _batch_judged(self) -> bool:
        """A judging list is shown and every photo in it is judged."""
        return self.mode is not None and not self.judging.unjudged_rows()

    def judge_next(self, n: int = JUDGE_NEXT_COUNT) -> TaskHandle | None:
        """Show the `n` unjudged photos whose judgment teaches the probe most."""
        encoder = self.session.ensure_encoder

        filters = self.filters()  # read here: the worker must not touch the controller

        def work(library: Library, query_id: int, judgments: dict[int, int]) -> JudgingList:
            from engine.methods.feedback import judge_next_for_query

            proposal = judge_next_for_query(
                library, encoder, query_id, n, filters=filters, judgments=judgments
            )
            pairs = [(i, proposal.probabilities.get(i, float("nan"))) for i in proposal.ids]
            note = (
                f"Judge next: {len(pairs)} photos whose judgment teaches the ranking most "
                f"({proposal.note})"
            )
            return JudgingList("judge-next", query_id, result_items(library, pairs), note)

        return self._show_list(work, "Finding the photos to judge next")

    def show_sample(self, n: int = SAMPLE_COUNT) -> TaskHandle | None:
        """Show the `n` photos whose judgment tightens the recall estimate most."""
        encoder = self.session.ensure_encoder

        def work(library: Library, query_id: int, judgments: dict[int, int]) -> JudgingList:
            from engine.methods.feedback import sample_for_query

            ids = sample_for_query(library, encoder, query_id, n, judgments=judgments)
            note = (
                f"Sample to judge: {len(ids)} photos drawn at random from the score bands "
                "below the judged ones; judging them tightens the estimate"
            )
            # A random sample has no score of its own: the cards show none (NaN), not 0.
            pairs = [(i, float("nan")) for i in ids]
            return JudgingList("sample", query_id, result_items(library, pairs), note)

        return self._show_list(work, "Drawing a sample to judge")

    def show_judging_list(
        self, make: Callable[[Library, int, dict[int, int]], JudgingList], title: str
    ) -> TaskHandle | None:
        """Show a list another controller makes (a double-judging sample, the photos a recall
        certificate asks for) in the grid, as Judge next shows its batches."""
        return self._show_list(make, title)

    def _show_list(
        self, make: Callable[[Library, int, dict[int, int]], JudgingList], title: str
    ) -> TaskHandle | None:
        library, query_id = self.session.library, self.judging.query_id
        if query_id is None or library is None:
            self._set_checked(self.mode is not None)
            self.message.emit(NO_QUERY)
            return None
        judgments = dict(self.judging.judgments)
        self.message.emit(f"{title}…")
        return self.runner.submit(
            lambda ctx: make(library, query_id, judgments),
            title=title,
            pool=READ,
            group="judging-list",
            on_success=self._enter_mode,
            on_failure=lambda exc: self._list_failed(exc, title),
        )

    def _enter_mode(self, shown: JudgingList) -> None:
        if shown.query_id != self.judging.query_id:
            self._set_checked(self.mode is not None)
            return  # another query was opened meanwhile
        if not shown.items:
            # Nothing to judge: the grid keeps what it shows (the run, or a judged batch).
            self._set_checked(self.mode is not None)
            self.judging.focus_next_unjudged(max(0, self.view.currentIndex().row()))
            self.message.emit("Nothing left to judge here: every photo near the top is judged")
            self.judgingListShown.emit(shown)
            return
        if self.mode is None:  # keep the run's cards to bring them back
            self._run_items = self.model.items()
            self._run_row = max(0, self.view.currentIndex().row())
        self.mode = shown
        self._batch_offered = False
        self._set_checked(True)
        self.back_action.setEnabled(True)
        self.thumbnails.reset()
        self.model.set_results(shown.items)
        self.model.set_judgments(self.judging.judgments)
        # The keys go to the grid whatever had them (the query list after reopening a query).
        self.judging.focus_next_unjudged()
        self.message.emit(f"{shown.note}. Back to the run: Judge › Back to the run")
        self.judgingListShown.emit(shown)

    def leave_mode(self) -> None:
        """Leave Judge next (or the sample): the run comes back, with the judgments made."""
        if self.mode is None:
            self._set_checked(False)
            return
        items, row = self._run_items, self._run_row
        self._end_mode()
        self.thumbnails.reset()
        self.model.set_results(items)
        self.model.set_judgments(self.judging.judgments)
        if items:
            self.judging.focus_next_unjudged(min(row, len(items) - 1))
        self.message.emit("Back to the run")

    def _offer_next_batch(self) -> None:
        """Once the last photo of the list shown is judged, say how to go on (once a list)."""
        if not self._batch_judged():
            self._batch_offered = False
            return
        if self._batch_offered or self.mode is None:
            return
        self._batch_offered = True
        # Short: the status line is narrow on a laptop screen, and Ctrl+J must be read first.
        self.message.emit(
            f"All judged: Ctrl+J shows the next {JUDGE_NEXT_COUNT} photos  ·  "
            "Judge › Back to the run"
        )

    def _end_mode(self) -> None:
        self._cancel("judging-list")
        self.mode = None
        self._run_items = []
        self._set_checked(False)
        self.back_action.setEnabled(False)

    def _set_checked(self, checked: bool) -> None:
        self.judge_next_action.blockSignals(True)
        self.judge_next_action.setChecked(checked)
        self.judge_next_action.blockSignals(False)

    def _list_failed(self, exc: BaseException, title: str) -> None:
        self._set_checked(self.mode is not None)
        self._failed(exc, title)

    # -- the recall estimate ----------------------------------------------------------------------

    def update_estimate(self) -> TaskHandle | None:
        """Estimate, in a worker, how many relevant photos the open query has (newest wins)."""
        library, query_id = self.session.library, self.judging.query_id
        if query_id is None or library is None or self.session.model_key is None:
            return None
        judgments = dict(self.judging.judgments)
        key = (query_id, frozenset(judgments.items()))
        encoder = self.session.ensure_encoder

        def work(ctx: TaskContext) -> RecallEstimate:
            from engine.methods.feedback import estimate_for_query

            return estimate_for_query(library, encoder, query_id, judgments=judgments)

        def shown(estimate: RecallEstimate) -> None:
            if self.judging.query_id != query_id:
                return
            self._estimated = key
            self.estimate = estimate
            tooltip = (
                "Judged relevant, and how many the whole collection holds: the judged top of "
                "the query's ranking counted, the bands below estimated from random samples "
                "(Sample to judge adds to them). " + (estimate.note or "")
            ).strip()
            # Until every band below the judged top has a judged sample there is no estimate:
            # say so briefly (the note, in the tooltip, says how many photos that leaves).
            text = (
                estimate.summary()
                if estimate.complete
                else f"found {estimate.found}; Sample to judge to estimate how many remain"
            )
            self._show_estimate(text, tooltip)

        return self.runner.submit(
            work,
            title="Estimating how many relevant photos there are",
            pool=READ,
            group="recall-estimate",
            on_success=shown,
            on_failure=lambda exc: self._estimate_failed(exc, query_id),
        )

    def _show_estimate(self, text: str, tooltip: str) -> None:
        self.panel.set_recall_estimate(text, tooltip)
        self.estimateShown.emit(text)

    def _estimate_failed(self, exc: BaseException, query_id: int) -> None:
        if isinstance(exc, BadInputError):
            if self.judging.query_id == query_id:
                self._show_estimate(f"none yet ({exc})", str(exc))
            return
        log.warning("recall estimate failed: %s", exc)
        self.runner.report_error(exc, "Estimating how many relevant photos there are")

    # -- failures ---------------------------------------------------------------------------------

    def _failed(self, exc: BaseException, title: str) -> None:
        # A one-line reason (judgments of one kind, a full disk, ...) is read in the message
        # band; the status line only says it failed.
        self.message.emit(f"{title} failed")
        self.runner.report_error(exc, title)


def install(app: Application) -> None:
    """Learning from the judgments: Refine ▾, Judge next, Sample to judge, the estimate, and
    Judge › Export likely relevant photos…"""
    w = app.window
    search = app.search
    feedback = app.feedback = FeedbackController(
        app.runner,
        app.session,
        app.judging,
        app.queries.open_query,
        w.results_model,
        w.results,
        app.thumbnails,
        w.metrics_panel,
        w.judge_next_action,
        w.sample_action,
        w.back_to_run_action,
        export_likely_action=w.export_likely_action,
        filters=lambda: (
            search.filters if search.filters is not None and search.filters.active else None
        ),
    )
    w.exportLikelyRequested.connect(lambda: export_likely(app))
    say(app, feedback.message)
    announce(app, feedback.outcome)


def export_likely(app: Application) -> None:
    """Judge › Export likely relevant photos…: a probability cut-off; then, once the photos
    are found, either why nothing would be written (a dialog, before any save dialog) or
    where to save them."""
    min_p = app.window.ask_probability(
        "Export likely relevant photos",
        "The photos judged relevant, and every unjudged photo whose probability of "
        "relevance, learned from this query's judgments, is at least:",
        0.9,
    )
    if min_p is not None:
        app.feedback.find_likely(min_p, lambda likely: _save_likely(app, likely))


def _save_likely(app: Application, likely: LikelyRelevant) -> None:
    title = "Export likely relevant photos"
    if not len(likely):
        app.window.show_notice(title, f"Nothing would be written. {likely.summary()}.")
        return
    path = app.window.ask_save_file(
        f"Export {len(likely):,} photos: {likely.summary()}",
        "likely-relevant.csv",
        "CSV (*.csv)",
    )
    if path:
        app.feedback.write_likely(likely, path)
