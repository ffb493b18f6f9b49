"""Judge › Certify recall…: the rule's state for the open query over what the window shows (the
filter chips' photos, as events when results are grouped by event), in a side panel docked
beside the grid (`widgets/certify_panel.py`), never over it.

The state is computed in the `read` pool (`engine.methods.certify.certify_for_query`: the query
encoded, the scope ranked, the rule applied), again a moment after each judgment, when the
filters or the grouping change, or when another query opens; the newest wins. "Judge the next"
shows the photos (or event cards) the rule asks for in the grid as a judging list; Record keeps a
certified result with the query in the `write` pool.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Qt, QTimer, Signal
from PySide6.QtWidgets import QDockWidget, QMainWindow

from app.controllers.feedback import FeedbackController, JudgingList
from app.controllers.install import say
from app.controllers.open_query import OpenQuery
from app.controllers.results import result_items
from app.controllers.session import LibrarySession
from app.workers import READ, WRITE, TaskContext, TaskHandle, TaskRunner
from engine.errors import BadInputError
from widgets.agreement_dialog import JudgesActions
from widgets.certify_panel import CertifyPanel, CertifyView

if TYPE_CHECKING:
    from app.controllers.application import Application
    from engine.catalog.library import Library
    from engine.methods.certify import ScopedCertification
    from engine.search.filters import FilterNames, SearchFilters

log = logging.getLogger(__name__)

NO_QUERY = "Open a saved query first (search, or pick one in the query list)"
RECHECK_MS = 600  # judging quickly: one check after the last judgment of a burst
WHERE = {"census": "the ranking's top", "sample": "the random sample", "review": "the ranking"}


@dataclass(frozen=True)
class _Checked:
    query_id: int
    scoped: ScopedCertification
    recorded: str
    events: bool


class CertifyController(QObject):
    """The Certify recall panel and the rule's state behind it."""

    message = Signal(str)

    def __init__(
        self,
        runner: TaskRunner,
        session: LibrarySession,
        query: OpenQuery,
        feedback: FeedbackController,
        actions: JudgesActions,
        window: QMainWindow,
        filters: Callable[[], SearchFilters | None] = lambda: None,
        grouped: Callable[[], bool] = lambda: False,
        names: Callable[[], FilterNames | None] = lambda: None,
    ) -> None:
        super().__init__()
        self.runner = runner
        self.session = session
        self.query = query
        self.feedback = feedback
        self.window = window
        self.filters = filters
        self.grouped = grouped
        self.names = names
        self.dock: QDockWidget | None = None
        self.panel: CertifyPanel | None = None
        self.checked: _Checked | None = None
        self._recheck = QTimer(self)
        self._recheck.setSingleShot(True)
        self._recheck.setInterval(RECHECK_MS)
        self._recheck.timeout.connect(self.check)
        actions.certifyRequested.connect(self.open_panel)
        query.judgmentSaved.connect(self._judgment_saved)
        query.opened.connect(self._query_opened)

    # -- the panel ---------------------------------------------------------------------------------

    def is_open(self) -> bool:
        return self.dock is not None and self.dock.isVisible()

    def open_panel(self) -> CertifyPanel | None:
        """Show the panel beside the grid (under the photo pane) and check the open query."""
        if self.session.library is None or self.query.query_id is None:
            self.message.emit(NO_QUERY)
            return None
        if self.dock is None or self.panel is None:
            self.panel = CertifyPanel(parent=None)
            self.panel.checkRequested.connect(lambda _t, _c: self.check())
            self.panel.judgeNextRequested.connect(self.judge_next)
            self.panel.recordRequested.connect(self.record)
            dock = self.dock = QDockWidget("Certify recall", self.window)
            dock.setObjectName("certifyDock")
            dock.setWidget(self.panel.scroller)
            detail = getattr(self.window, "detail_dock", None)
            area = Qt.DockWidgetArea.RightDockWidgetArea
            if isinstance(detail, QDockWidget) and not detail.isFloating():
                area = self.window.dockWidgetArea(detail)
            # Under the photo pane's column, with the larger share of it: added to the area
            # below what is there, not split from the pane (beside a small window the pane is
            # tabbed with Where and when, and a split would only add a third tab).
            self.window.addDockWidget(area, dock, Qt.Orientation.Vertical)
            if isinstance(detail, QDockWidget) and not detail.isFloating():
                height = max(detail.height(), 400)
                self.window.resizeDocks(
                    [detail, dock], [height * 2 // 5, height * 3 // 5], Qt.Orientation.Vertical
                )
        self.panel.set_query(self.query.title)
        self.dock.show()
        self.dock.raise_()
        self.check()
        return self.panel

    def scope_changed(self, *_args: object) -> None:
        """The filters or the grouping changed: what is certified changed too."""
        if self.is_open():
            self.check()

    def _judgment_saved(self, query_id: int, _image_id: int, _relevance: object) -> None:
        if self.is_open() and query_id == self.query.query_id:
            self._recheck.start()

    def _query_opened(self, _query_id: int) -> None:
        if self.is_open() and self.panel is not None:
            self.panel.set_query(self.query.title)
            self.check()

    # -- the rule's state ------------------------------------------------------------------------

    def check(self) -> TaskHandle | None:
        """Where the open query stands over the shown scope (the rule's state, in a worker)."""
        library, query_id, panel = self.session.library, self.query.query_id, self.panel
        if library is None or query_id is None or panel is None:
            return None
        target, confidence = panel.values()
        filters, events, names = self.filters(), self.grouped(), self.names()
        encoder = self.session.ensure_encoder
        judgments = dict(self.query.judgments)
        panel.show_busy("Checking…")

        def work(ctx: TaskContext) -> _Checked:
            from engine.judgments.adjudication import certificates
            from engine.methods.certify import certify_for_query

            scoped = certify_for_query(
                library, encoder, query_id, target=target, confidence=confidence,
                judgments=judgments, filters=filters, events=events, names=names,
            )  # fmt: skip
            kept = certificates(library, [query_id]).get(query_id)
            same = kept is not None and (kept.target, kept.confidence) == (target, confidence)
            return _Checked(query_id, scoped, kept.text() if kept and same else "", events)

        return self.runner.submit(
            work,
            title="Checking the recall target",
            pool=READ,
            group="certify",
            on_success=self._show,
            on_failure=self._failed,
        )

    def _failed(self, exc: BaseException) -> None:
        if isinstance(exc, BadInputError) and self.panel is not None:
            self.panel.show_failure(str(exc))
            return
        self.runner.report_error(exc, "Checking the recall target")

    def _show(self, checked: _Checked) -> None:
        if checked.query_id != self.query.query_id or self.panel is None:
            return
        self.checked = checked
        state = checked.scoped.state
        units = f"{state.population:,} {state.unit}{'s' * (state.population != 1)}"
        self.panel.show_state(
            CertifyView(
                state.phase, state.scope or f"all {units}", state.plan(), state.summary(),
                len(state.next_ids), state.judged, state.expected, state.rule, checked.recorded,
            )
        )  # fmt: skip

    def judge_next(self) -> TaskHandle | None:
        """The photos (or events) the rule asks for next, in the grid to judge."""
        checked = self.checked
        if checked is None or checked.query_id != self.query.query_id:
            return None
        state = checked.scoped.state
        photos = checked.scoped.photos(list(state.next_ids))
        where = WHERE.get(state.phase, "the ranking")
        events = checked.events

        def make(library: Library, query_id: int, _judgments: dict[int, int]) -> JudgingList:
            from app.controllers.events import event_cards

            items = result_items(library, [(i, float("nan")) for i in photos])
            if events:
                items = event_cards(library, items)
            what = "events" if events else "photos"
            note = f"Certify recall: {len(items)} {what} of {where} to judge"
            return JudgingList("certify", query_id, items, note)

        return self.feedback.show_judging_list(make, "Opening the photos to judge")

    def record(self) -> TaskHandle | None:
        """Keep the certified result with the query."""
        checked, library, store = self.checked, self.session.library, self.session.query_store()
        if checked is None or library is None or store is None:
            return None
        state, query_id = checked.scoped.state, checked.query_id

        def write(ctx: TaskContext) -> str:
            from engine.judgments.adjudication import record_certificate

            return record_certificate(library, query_id, state, store.user).text()

        def done(text: str) -> None:
            self.message.emit(f"Recorded with the query: {text}")
            self.check()

        return self.runner.submit(
            write,
            title="Recording the certified recall",
            pool=WRITE,
            on_success=done,
            on_failure=lambda exc: self.message.emit(f"Could not record it: {exc}"),
        )


def install(app: Application) -> None:
    """Judge › Certify recall…, over what is shown: the filters' photos, events when
    grouped."""
    w = app.window
    certify = app.certify = CertifyController(
        app.runner, app.session, app.open_query, app.feedback, w.judges, w,
        filters=lambda: app.search.filters, grouped=lambda: app.events.grouped,
        names=lambda: app.filters.names,
    )  # fmt: skip
    app.filters.filtersChanged.connect(certify.scope_changed)
    say(app, certify.message)
