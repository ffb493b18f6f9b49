"""Several judges in the window: who is judging, blind double judging, agreement and
adjudication (`AgreementController`; certified recall is `app/controllers/certify.py`'s).

- **Who is judging**: the status bar says "Judge: NAME" (the Settings name, else the server
  login on PostgreSQL, else the OS user: `QueryStore.user`, read in a worker since a server is
  asked), with "blind" while Judge › Judge blind is on.
- **Judge blind**: the session's store reads only this judge's own marks (`QueryStore.blind`),
  and the open query is read again, so the grid shows no other judge's relevance badge.
- **Double judging…**: a sample of the open query's judged photos (a number, or all judged so
  far) is offered blind (`offer_double_judging`, stored in the catalog for every workstation),
  blind mode goes on and the sample replaces the grid, as Judge next's batches do.
- **Metrics from ▸**: the metrics panel's numbers from the newest judgment per photo (the
  default; adjudicated where settled), the judges' majority, the adjudicated photos only, or one
  judge's own; the panel says which.
- **Agreement…**: kappa and alpha with intervals, the confusion tables, the disagreements side by
  side with buttons that adjudicate (`adjudicate`, in the write pool).

Reads run in the read pool, writes in the write pool: the GUI thread never waits on the catalog.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, QSize, Signal
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QInputDialog, QWidget

from app.controllers.feedback import FeedbackController, JudgingList
from app.controllers.full_view import decode_for_view
from app.controllers.install import say
from app.controllers.judging import JudgingController
from app.controllers.results import photo_reference, result_items
from app.controllers.session import LibrarySession
from app.workers import READ, WRITE, TaskContext, TaskHandle, TaskRunner
from widgets.agreement_dialog import (
    AgreementDialog,
    AgreementReport,
    DisagreementRow,
    JudgesActions,
    PairView,
)
from widgets.full_view import FullView

if TYPE_CHECKING:
    from app.controllers.application import Application
    from app.controllers.thumbnails import ThumbnailLoader
    from engine.catalog.library import Library
    from engine.catalog.reads import PhotoDetails
    from engine.judgments.agreement import PairTable

log = logging.getLogger(__name__)

NO_QUERY = "Open a saved query first (search, or pick one in the query list)"
NEWEST = "newest"  # engine.judgments.adjudication.NEWEST, without importing it here


def mark_word(relevance: int | None) -> str:
    if relevance is None:
        return "unjudged"
    return "relevant" if relevance > 0 else "not relevant"


@dataclass(frozen=True)
class _ViewRead:
    query_id: int
    view: str
    note: str
    judgments: dict[int, int] | None  # None: the judgments shown
    judges: list[str]


class AgreementController(QObject):
    """Judges, blind double judging, the metrics' judgments, agreement and adjudication."""

    message = Signal(str)

    def __init__(
        self,
        runner: TaskRunner,
        session: LibrarySession,
        judging: JudgingController,
        feedback: FeedbackController,
        reopen: Callable[[], object],  # reads the open query again (its judgments)
        actions: JudgesActions,
        parent: QWidget | None = None,
        thumbnails: ThumbnailLoader | None = None,
    ) -> None:
        super().__init__()
        self.runner = runner
        self.session = session
        self.judging = judging
        self.feedback = feedback
        self.reopen = reopen
        self.actions = actions
        self.parent_widget = parent
        self.thumbnails = thumbnails
        self.view = NEWEST
        self.dialog: AgreementDialog | None = None
        self.viewer: FullView | None = None  # a disagreement's photo at full size
        self._viewed: int | None = None
        if thumbnails is not None:
            thumbnails.thumbnailReady.connect(self._thumbnail_ready)
        self.term = ""  # the attribute the dialog measures; "" for relevance
        actions.agreementRequested.connect(self.open_dialog)
        actions.offerRequested.connect(self.ask_offer)
        actions.blindToggled.connect(self.set_blind)
        actions.viewChosen.connect(self.choose_view)
        self._pending_sample: list[int] | None = None  # shown once blind mode reopened the query
        judging.queryOpened.connect(self._query_opened)
        judging.judgmentSaved.connect(self._judgment_saved)
        session.opened.connect(self.show_judge)
        session.modelChanged.connect(lambda _spec: self.show_judge())  # settings applied

    # -- who is judging ---------------------------------------------------------------------------

    def show_judge(self) -> TaskHandle | None:
        """Say in the status bar who is judging (read in a worker: a server may be asked)."""
        store = self.session.query_store()
        if store is None:
            self.actions.set_judge("")
            return None
        blind = store.blind
        return self.runner.submit(
            lambda ctx: store.user,
            title="Reading who is judging",
            pool=READ,
            group="judge-name",
            on_success=lambda name: self.actions.set_judge(
                f"Judge: {name}" + (" (blind)" if blind else "")
            ),
        )

    def set_blind(self, on: bool) -> None:
        """Judge blind: only this judge's own marks show (the open query is read again)."""
        store = self.session.query_store()
        if store is None:
            return
        store.blind = on
        self.show_judge()
        if self.judging.query_id is not None:
            self.reopen()
        self.message.emit(
            "Judging blind: only your own marks show; other judges' are hidden"
            if on
            else "Judging openly: the newest judgment of each photo shows"
        )

    # -- whose judgments the metrics use ------------------------------------------------------

    def choose_view(self, view: str) -> TaskHandle | None:
        self.view = view
        return self.read_view()

    def read_view(self) -> TaskHandle | None:
        """Read the judges of the open query and the chosen view's judgments, for the panel."""
        library, query_id, store = (
            self.session.library,
            self.judging.query_id,
            self.session.query_store(),
        )
        if library is None or query_id is None or store is None:
            return None
        view, blind = self.view, store.blind

        def read(ctx: TaskContext) -> _ViewRead:
            from engine.judgments.adjudication import judges_of, judgment_view

            judges = judges_of(library, query_id)
            if blind:
                return _ViewRead(query_id, view, "your own (blind)", None, judges)
            chosen = (
                view if view in (NEWEST, "majority", "adjudicated") or view in judges else NEWEST
            )
            shown = judgment_view(library, query_id, chosen)
            judgments = None if chosen == NEWEST else shown.judgments
            return _ViewRead(query_id, chosen, shown.label, judgments, judges)

        return self.runner.submit(
            read,
            title="Reading the judges",
            pool=READ,
            group="judgment-view",
            on_success=self._show_view,
            on_failure=lambda exc: self.message.emit(f"Could not read the judges: {exc}"),
        )

    def _query_opened(self, _query_id: int) -> None:
        self.read_view()
        sample, self._pending_sample = self._pending_sample, None
        if sample is not None:
            self.show_sample(sample)

    def _show_view(self, read: _ViewRead) -> None:
        if read.query_id != self.judging.query_id:
            return  # another query was opened meanwhile
        self.view = read.view
        self.actions.set_judges(read.judges, read.view)
        self.judging.set_metrics_source(read.note, read.judgments)

    def _judgment_saved(self, query_id: int, _image_id: int, _relevance: object) -> None:
        # A judgment changes the newest view in memory already; other views are read again.
        if query_id == self.judging.query_id and (self.view != NEWEST or self.dialog is not None):
            self.read_view()

    # -- blind double judging -----------------------------------------------------------------

    def ask_offer(self) -> TaskHandle | None:
        """Ask how many judged photos to offer blind (0: all judged so far), then offer them."""
        if self.judging.query_id is None:
            self.message.emit(NO_QUERY)
            return None
        size, ok = QInputDialog.getInt(
            self.parent_widget,
            "Double judging",
            "Photos to offer a second judge, blind (0: all judged so far):",
            20,
            0,
            100_000,
        )
        if not ok:
            return None
        return self.offer(size or None)

    def offer(self, size: int | None) -> TaskHandle | None:
        """Offer `size` judged photos (None: all) of the open query for blind double judging;
        blind mode goes on and the sample replaces the grid to judge."""
        library, query_id, store = (
            self.session.library,
            self.judging.query_id,
            self.session.query_store(),
        )
        if library is None or query_id is None or store is None:
            self.message.emit(NO_QUERY)
            return None

        def write(ctx: TaskContext) -> list[int]:
            from engine.judgments.adjudication import offer_double_judging

            return offer_double_judging(library, query_id, size, store.user)

        def offered(sample: list[int]) -> None:
            if store.blind:
                self.show_sample(sample)
                return
            # Blind first: the query is read again with only this judge's marks, and the
            # sample replaces the grid once it is open (`_query_opened`).
            self._pending_sample = sample
            self.actions.blind_action.setChecked(True)

        return self.runner.submit(
            write,
            title="Offering photos for double judging",
            pool=WRITE,
            on_success=offered,
            on_failure=lambda exc: self.message.emit(f"Could not offer the photos: {exc}"),
        )

    def show_sample(self, sample: list[int]) -> TaskHandle | None:
        """The double-judging sample in the grid, to judge blind."""

        def make(library: Library, query_id: int, _judgments: dict[int, int]) -> JudgingList:
            items = result_items(library, [(i, float("nan")) for i in sample])
            note = f"Double judging: {len(items)} photos, judged blind (other judges' marks hidden)"
            return JudgingList("double-judging", query_id, items, note)

        return self.feedback.show_judging_list(make, "Opening the double-judging sample")

    # -- agreement and adjudication -------------------------------------------------------------

    def open_dialog(self) -> AgreementDialog | None:
        if self.session.library is None or self.judging.query_id is None:
            self.message.emit(NO_QUERY)
            return None
        dialog = self.dialog = AgreementDialog(self.parent_widget)
        dialog.adjudicateRequested.connect(self.adjudicate)
        dialog.refreshRequested.connect(self.read_agreement)
        dialog.termChosen.connect(self.choose_term)
        dialog.photoOpenRequested.connect(self.open_photo)
        self.term = ""
        dialog.finished.connect(lambda _result: self._dialog_closed(dialog))
        dialog.open()
        self.read_agreement()
        return dialog

    def choose_term(self, term: str) -> TaskHandle | None:
        """Measure agreement on an attribute's values ("": on relevance)."""
        self.term = term
        return self.read_agreement()

    def _dialog_closed(self, dialog: AgreementDialog) -> None:
        if self.dialog is dialog:
            self.dialog = None

    def read_agreement(self) -> TaskHandle | None:
        library, query_id = self.session.library, self.judging.query_id
        if library is None or query_id is None or self.dialog is None:
            return None
        title, term = self.judging.query_title, self.term

        def read(ctx: TaskContext) -> AgreementReport:
            return agreement_report(library, query_id, title, term)

        return self.runner.submit(
            read,
            title="Measuring agreement",
            pool=READ,
            group="agreement",
            on_success=self._show_report,
            on_failure=lambda exc: self.message.emit(f"Could not measure agreement: {exc}"),
        )

    def _show_report(self, report: AgreementReport) -> None:
        if self.dialog is None:
            return
        self.dialog.show_report(report)
        loader = self.thumbnails
        if loader is None:
            return
        for row in report.disagreements:
            if not row.path:
                continue
            pixmap = loader.pixmap(row.image_id)
            if pixmap is not None:
                self.dialog.set_thumbnail(row.image_id, pixmap)
            else:
                loader.request(row.image_id, row.path, row.content_hash)

    def _thumbnail_ready(self, image_id: int) -> None:
        if self.dialog is not None and self.thumbnails is not None:
            pixmap = self.thumbnails.pixmap(image_id)
            if pixmap is not None:
                self.dialog.set_thumbnail(image_id, pixmap)

    def open_photo(self, image_id: int) -> FullView | None:
        """A disagreement's photo at full size, over the dialog (Left / Right: the next rows)."""
        dialog = self.dialog
        row = next((r for r in dialog.rows if r.image_id == image_id), None) if dialog else None
        if dialog is None or row is None or not row.path:
            return None
        viewer = self.viewer
        if viewer is None:
            viewer = self.viewer = FullView(dialog)
            viewer.nextRequested.connect(lambda: self._step_photo(1))
            viewer.previousRequested.connect(lambda: self._step_photo(-1))
            viewer.closed.connect(lambda: setattr(self, "_viewed", None))
            viewer.resize(dialog.size().expandedTo(QSize(800, 600)))
        if viewer.isVisible():
            viewer.raise_()
        else:
            viewer.show()
        viewer.activateWindow()
        self._viewed = image_id
        viewer.show_loading(row.photo)
        path, title = row.path, row.photo

        def load(ctx: TaskContext) -> QImage:
            ctx.check()
            return decode_for_view(path)

        def loaded(image: QImage) -> None:
            if self.viewer is not None and self._viewed == image_id:
                self.viewer.show_photo(title, image)

        def failed(exc: BaseException) -> None:
            if self.viewer is not None and self._viewed == image_id:
                self.viewer.show_failure(title, getattr(exc, "reason", None) or str(exc))

        self.runner.submit(
            load, title="Loading the photo at full size", pool=READ, group="agreement-photo",
            on_success=loaded, on_failure=failed,
        )  # fmt: skip
        return viewer

    def _step_photo(self, steps: int) -> None:
        if self.dialog is not None and self._viewed is not None:
            image_id = self.dialog.step_row(self._viewed, steps)
            if image_id is not None:
                self.open_photo(image_id)

    def adjudicate(self, image_id: int, relevance: int | None) -> TaskHandle | None:
        """Record the judgment that settles a photo, then show it everywhere."""
        library, query_id, store = (
            self.session.library,
            self.judging.query_id,
            self.session.query_store(),
        )
        if library is None or query_id is None or store is None:
            return None

        def write(ctx: TaskContext) -> str:
            from engine.catalog.reads import photo_details
            from engine.judgments.adjudication import adjudicate

            adjudicate(library, query_id, image_id, relevance, store.user)
            return photo_reference(photo_details(library, [image_id]).get(image_id), image_id)

        def done(photo: str) -> None:
            # The outcome first: a long name is what a narrow status line cuts.
            self.message.emit(f"Adjudicated {mark_word(relevance)}: {photo}")
            if not store.blind:  # the grid shows the adjudicated judgment
                self.reopen()
            self.read_view()
            self.read_agreement()

        return self.runner.submit(
            write,
            title="Recording the adjudication",
            pool=WRITE,
            on_success=done,
            on_failure=lambda exc: self.message.emit(f"Could not adjudicate: {exc}"),
        )


def agreement_report(
    library: Library, query_id: int, title: str, term: str = ""
) -> AgreementReport:
    """The dialog's data for one query, on relevance or on an attribute's values (`term`);
    runs in a worker: it reads the catalog."""
    from engine.catalog.reads import photo_details
    from engine.judgments.adjudication import disagreements
    from engine.judgments.agreement import (
        attribute_ratings_by_term,
        judge_ratings,
        measure_agreement,
    )
    from engine.judgments.dwc_terms import caption

    by_term = attribute_ratings_by_term(library, query_id)
    terms = sorted(
        name for name, ratings in by_term.items() if any(len(m) >= 2 for m in ratings.values())
    )
    if term:
        ratings = by_term.get(term, {})
        agreement = measure_agreement(ratings, seed=query_id)
        differing = [i for i, marks in sorted(ratings.items()) if len(set(marks.values())) > 1]
        details = photo_details(library, differing)
        rows = [_row(i, details.get(i), dict(ratings[i]), "") for i in differing]
    else:
        agreement = measure_agreement(judge_ratings(library, query_id), seed=query_id)
        split = disagreements(library, query_id)
        details = photo_details(library, [d.image_id for d in split])
        rows = []
        for d in split:
            marks = {
                m.judge: mark_word(m.relevance) + (f" ({m.note})" if m.note else "")
                for m in d.marks
            }
            settled = "" if d.adjudicated is None else mark_word(d.adjudicated)
            rows.append(_row(d.image_id, details.get(d.image_id), marks, settled))
    percent = round(agreement.level * 100)
    statistics = []
    if agreement.photos:
        statistics = [
            ("Photos judged twice or more", str(agreement.photos)),
            ("Raw agreement", agreement.raw.text()),
            ("Fleiss' kappa", agreement.fleiss_kappa.text()),
            ("Krippendorff's alpha", agreement.krippendorff_alpha.text()),
            ("Intervals", f"{percent} % bootstrap over photos"),
        ]
    note = agreement.note or f"{len(agreement.judges)} judges: {', '.join(agreement.judges)}"
    if term:
        note = f"{caption(term)}: {note}"
    return AgreementReport(
        title,
        statistics,
        note,
        [_pair_view(pair) for pair in agreement.pairs],
        list(agreement.judges),
        rows,
        term,
        terms,
        {name: caption(name) for name in {*terms, term} if name},
    )


def _row(
    image_id: int, details: PhotoDetails | None, marks: dict[str, str], settled: str
) -> DisagreementRow:
    """A disagreement as the dialog lists it: the photo named as the window names it, and
    where it is (for its thumbnail and the full view)."""
    return DisagreementRow(
        image_id,
        photo_reference(details, image_id),
        marks,
        settled,
        details.path if details is not None else "",
        details.content_hash if details is not None else None,
    )


def _pair_view(pair: PairTable) -> PairView:
    return PairView(
        f"{pair.first} / {pair.second}: {pair.photos} photos, Cohen's kappa {pair.kappa.text()}",
        tuple(c if isinstance(c, str) else mark_word(c) for c in pair.categories),
        pair.first,
        pair.second,
        pair.table,
    )


def install(app: Application) -> None:
    """Several judges: who is judging, blind double judging, the metrics' judgments,
    Judge › Agreement… (adjudication)."""
    w = app.window
    app.agreement = AgreementController(
        app.runner, app.session, app.judging, app.feedback, app.queries.reopen,
        w.judges, w, thumbnails=app.thumbnails,
    )  # fmt: skip
    say(app, app.agreement.message)
