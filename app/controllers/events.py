"""Results grouped by event (View › Group results by event): one card per event — its best
frame, scored as the event, with a "×7" frame-count badge, showing the event's face (its
sharpest frame with something in it, `engine.indexing.event_faces`, chosen for the first cards
in a worker and cached) —, the selected event's frames in a
filmstrip under the photo, judging an event's card judging all its frames, a frame set apart
from its event, and the metrics panel counting events rather than photos.

The engine groups frames into events when it indexes (`engine.indexing.events`); this
controller only asks it, always in a worker: collapsing a ranking (in the search's own worker
for a new search, in the `read` pool when the toggle changes), listing an event's frames, each
photo's event for the metrics, setting a frame apart (the `write` pool). The toggle shows only
on a library whose events hold two frames or more, and its state is kept in the settings.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QAction

from app.controllers.install import say
from app.controllers.results import result_items
from app.workers import READ, WRITE, TaskContext, TaskHandle, TaskRunner
from widgets.filmstrip import Filmstrip
from widgets.results import ResultItem, ResultsModel, ResultsView

log = logging.getLogger(__name__)

FACE_CARDS = 120  # event cards whose faces are chosen, from the top (a grid's first pages)

if TYPE_CHECKING:
    from app.controllers.application import Application
    from app.controllers.judging import JudgingController
    from app.controllers.search import SearchController, SearchOutcome
    from app.controllers.session import LibrarySession
    from engine.catalog.library import Library
    from engine.indexing.event_faces import LookCache, ThumbnailSource


def event_cards(library: Library, items: list[ResultItem]) -> list[ResultItem]:
    """One card per event of a ranking of photo cards (best first): the event's best frame
    with its score, numbered again from 1, with the event's frames in time order. Runs in a
    worker (it reads the catalog)."""
    from engine.search.events import collapse_ranking, event_ids_of, frames_of_events

    pairs = [(item.image_id, item.score) for item in items]
    collapsed = collapse_ranking(pairs, event_ids_of(library, [i for i, _ in pairs]))
    frames = frames_of_events(library, [event for event, *_ in collapsed])
    by_id = {item.image_id: item for item in items}
    return [
        replace(
            by_id[best],
            rank=rank,
            event_id=event,
            frame_ids=tuple(frames.get(event) or (best,)),
        )
        for rank, (event, best, _score, _matched) in enumerate(collapsed, start=1)
    ]


def card_faces(
    library: Library,
    thumbnails: ThumbnailSource,
    cards: list[ResultItem],
    judgments: dict[int, int],
    looks: LookCache,
    check: Callable[[], None] = lambda: None,
) -> dict[int, tuple[int, str, str | None]]:
    """Card (its image id) -> the face to show (id, path, content hash): the sharpest frame
    with something in it (`engine.indexing.event_faces`). Runs in a worker: it reads the
    catalog and the frames' thumbnails (`check` between events, to give way to a newer
    ranking)."""
    from engine.catalog.reads import photo_details
    from engine.indexing.event_faces import Frame, choose_face, event_looks

    details = photo_details(library, [f for card in cards for f in card.frame_ids])
    faces: dict[int, tuple[int, str, str | None]] = {}
    for card in cards:
        check()
        frames = [Frame(f, d.path, d.content_hash) for f in card.frame_ids if (d := details.get(f))]
        face = choose_face(event_looks(thumbnails, frames, looks), card.image_id, judgments)
        chosen = next((f for f in frames if f.image_id == face), None)
        if chosen is not None and face != card.image_id:
            faces[card.image_id] = (chosen.image_id, chosen.path, chosen.content_hash)
    return faces


class EventsController(QObject):
    """The "Group results by event" toggle and everything that follows it."""

    message = Signal(str)
    groupedChanged = Signal(bool)  # the grid now shows events (True) or photos

    def __init__(
        self,
        runner: TaskRunner,
        session: LibrarySession,
        search: SearchController,
        judging: JudgingController,
        model: ResultsModel,
        view: ResultsView,
        filmstrip: Filmstrip,
        action: QAction,
        grouped: bool,
        remember: Callable[[bool], None],
    ) -> None:
        super().__init__()
        self.runner = runner
        self.session = session
        self.search = search
        self.judging = judging
        self.model = model
        self.view = view
        self.filmstrip = filmstrip
        self.action = action
        self._remember = remember
        self.grouped = grouped
        # The photo cards of the last search (what the grid shows when not grouped, and what
        # grouping collapses).
        self._photos: list[ResultItem] = []
        self._looks: LookCache | None = None  # the frames' looks, for the cards' faces
        action.setCheckable(True)
        action.setChecked(grouped)
        action.setVisible(False)  # until the library is known to hold events
        action.toggled.connect(self.set_grouped)
        filmstrip.set_thumbnail_source(search.thumbnails)
        search.thumbnails.thumbnailReady.connect(filmstrip.thumbnail_ready)
        filmstrip.frameClicked.connect(self.search.show_item)
        filmstrip.setApartRequested.connect(self.set_apart)
        view.currentItemChanged.connect(self.show_frames)
        search.searchFinished.connect(self._on_search_finished)
        search.resultsShown.connect(self._on_results_shown)
        session.readyChanged.connect(lambda ready, _message: ready and self.check_library())
        judging.queryOpened.connect(lambda _query_id: self.refresh_units())
        self._apply_hooks()

    # -- the toggle ------------------------------------------------------------------------------

    def check_library(self) -> TaskHandle | None:
        """Show the toggle when the open library has events of two frames or more."""
        library = self.session.library
        if library is None:
            return None

        def check(ctx: TaskContext) -> bool:
            from engine.search.events import has_events

            return has_events(library)

        return self.runner.submit(
            check,
            title="Reading the events",
            pool=READ,
            group="events-check",
            on_success=self._set_available,
        )

    def _set_available(self, available: bool) -> None:
        # A grid already grouped keeps its toggle, so it can be turned off.
        self.action.setVisible(available or self.grouped)

    def set_grouped(self, grouped: bool) -> TaskHandle | None:
        """Group the results by event (or show every photo again), remember the choice, and
        count the metrics in the same unit."""
        if grouped == self.grouped:
            return None
        self.grouped = grouped
        if self.action.isChecked() != grouped:
            self.action.setChecked(grouped)
        self._remember(grouped)
        self._apply_hooks()
        self.groupedChanged.emit(grouped)
        self.refresh_units()
        if not grouped:
            self.filmstrip.clear()
            if self._photos:
                self.model.set_results(self._photos)
            return None
        return self._show_collapsed()

    def _apply_hooks(self) -> None:
        """New searches collapse in their worker; a judgment of an event's card judges its
        frames."""
        self.search.collapse = event_cards if self.grouped else None
        self.judging.frames_of = self._frames_of if self.grouped else None

    def _frames_of(self, image_id: int) -> list[int] | None:
        row = self.model.row_of(image_id)
        item = self.model.item(row) if row is not None else None
        return list(item.frame_ids) if item is not None and item.event_id is not None else None

    def _on_search_finished(self, outcome: SearchOutcome) -> None:
        self._photos = list(outcome.items)
        self.filmstrip.clear()
        if outcome.shown is None and self.grouped:
            self._show_collapsed()  # toggled on while the search ran
        elif outcome.shown is not None and self.grouped:
            self.find_faces(list(outcome.shown))
        elif outcome.shown is not None:
            self.model.set_results(self._photos)  # toggled off while the search ran

    def _on_results_shown(self, items: list[ResultItem]) -> None:
        """A reopened run's photos: grouped like a search's when the toggle is on."""
        self._photos = list(items)
        self.filmstrip.clear()
        if self.grouped:
            self._show_collapsed()

    def _show_collapsed(self) -> TaskHandle | None:
        """Collapse the photos of the last search in the `read` pool and show the events."""
        library, photos = self.session.library, self._photos
        if library is None or not photos:
            return None
        current = self.view.current_item()

        def collapse(ctx: TaskContext) -> list[ResultItem]:
            return event_cards(library, photos)

        def shown(cards: list[ResultItem]) -> None:
            if not self.grouped or photos is not self._photos:
                return  # toggled off, or another search came meanwhile
            self.model.set_results(cards)
            if current is not None:
                # The same photo selected again, now as (a frame of) its event's card.
                row = next(
                    (r for r, card in enumerate(cards) if current.image_id in card.frame_ids),
                    None,
                )
                if row is not None:
                    self.view.select_row(row)
            self.message.emit(f"{len(cards):,} events ({len(photos):,} photos)")
            self.find_faces(cards)

        return self.runner.submit(
            collapse, title="Grouping by event", pool=READ, group="events", on_success=shown
        )

    def find_faces(self, cards: list[ResultItem]) -> TaskHandle | None:
        """The faces of the first `FACE_CARDS` event cards, found in the `read` pool (newest
        wins) and shown as they come."""
        from engine.indexing.event_faces import LookCache

        library, thumbnails = self.session.library, self.session.thumbnail_cache()
        wanted = [card for card in cards[:FACE_CARDS] if card.frames > 1]
        if library is None or thumbnails is None or not wanted:
            return None
        looks = self._looks = self._looks or LookCache()
        judgments = dict(self.judging.judgments)

        def work(ctx: TaskContext) -> dict[int, tuple[int, str, str | None]]:
            return card_faces(library, thumbnails, wanted, judgments, looks, ctx.check)

        def shown(faces: dict[int, tuple[int, str, str | None]]) -> None:
            if self.grouped and faces:
                self.model.set_faces(faces)  # cards no longer shown are skipped

        return self.runner.submit(
            work, title="Choosing the events' faces", pool=READ, group="event-faces",
            on_success=shown,
            on_failure=lambda exc: log.info("the events' faces could not be chosen: %s", exc),
        )  # fmt: skip

    # -- metrics per event -----------------------------------------------------------------------

    def refresh_units(self) -> TaskHandle | None:
        """Metrics per event (each ranked or judged photo's event read in a worker) when
        grouped, else per photo."""
        library = self.session.library
        if not self.grouped or library is None:
            self.judging.set_event_units(None)
            return None
        ids = {image_id for run in self.judging.runs for image_id in run.ids}
        ids.update(self.judging.judgments)
        wanted = sorted(ids)

        def read(ctx: TaskContext) -> dict[int, int]:
            from engine.search.events import event_ids_of

            return event_ids_of(library, wanted)

        def shown(event_of: dict[int, int]) -> None:
            if self.grouped:
                self.judging.set_event_units(event_of)

        return self.runner.submit(
            read, title="Reading the events", pool=READ, group="event-units", on_success=shown
        )

    # -- the filmstrip ---------------------------------------------------------------------------

    def show_frames(self, item: ResultItem | None) -> TaskHandle | None:
        """The selected event's frames in the filmstrip (their cards read in a worker)."""
        library = self.session.library
        if item is None or item.frames < 2 or library is None:
            self.filmstrip.clear()
            return None
        scores = {photo.image_id: photo.score for photo in self._photos}
        ranking = [(frame, scores.get(frame, float("nan"))) for frame in item.frame_ids]

        def load(ctx: TaskContext) -> list[ResultItem]:
            return result_items(library, ranking)

        def shown(frames: list[ResultItem]) -> None:
            if self.view.current_item() is item:
                self.filmstrip.set_frames(frames, item.image_id)

        return self.runner.submit(
            load, title="Reading the event's frames", pool=READ, group="filmstrip",
            on_success=shown,
        )  # fmt: skip

    def set_apart(self, frame: ResultItem) -> TaskHandle | None:
        """Set a frame apart from its event: its own event from now on, judged alone; the
        grid is grouped again."""
        library = self.session.library
        if library is None:
            return None

        def write(ctx: TaskContext) -> int:
            from engine.indexing.events import set_apart

            return set_apart(library, frame.image_id)

        def done(_event_id: int) -> None:
            self.message.emit(f"{frame.title} (#{frame.image_id}) is an event of its own now")
            self.refresh_units()
            if self.grouped:
                self._show_collapsed()

        def failed(exc: BaseException) -> None:
            self.runner.report_error(exc, "Setting the frame apart")

        return self.runner.submit(
            write, title="Setting the frame apart", pool=WRITE, on_success=done,
            on_failure=failed,
        )  # fmt: skip


def install(app: Application) -> None:
    """Results grouped by event (View › Group results by event), kept across sessions."""
    w = app.window
    events = app.events = EventsController(
        app.runner,
        app.session,
        app.search,
        app.judging,
        w.results_model,
        w.results,
        w.filmstrip,
        w.group_events_action,
        app.settings.group_by_event,
        lambda grouped: app.remember(group_by_event=grouped),
    )
    events.groupedChanged.connect(app.certify.scope_changed)
    # A clock offset or event gap moved the events: the toggle and per-event metrics follow.
    app.deployments.cameraDataChanged.connect(events.check_library)
    app.deployments.cameraDataChanged.connect(events.refresh_units)
    say(app, events.message)
