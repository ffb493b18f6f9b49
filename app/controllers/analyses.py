"""The relevant photos of the open query in the "Where and when" tab: their places, months,
hours of the day and commonest taxa, counted by `engine.io.analyses` in the read pool and read
again when a judgment is saved or another query opens (only while that page is shown); and
"Export analyses…", which writes the CSV files and charts in the write pool. Places, on the map
and in the counts and files by place, are as they would be published (`engine.search.places`):
a withheld place is neither drawn nor counted, a generalised one where it would be published."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal

from app.controllers.install import announce
from app.controllers.open_query import OpenQuery
from app.controllers.session import LibrarySession
from app.workers import READ, WRITE, TaskContext, TaskHandle, TaskRunner
from widgets.hour_histogram import HOURS
from widgets.map_view import MapPoint
from widgets.place_pane import RELEVANT, PlacePane, RelevantView

if TYPE_CHECKING:
    from app.controllers.application import Application
    from engine.catalog.library import Library
    from engine.io.analyses import FoundSetAnalyses

TAXA_SHOWN = 10  # the commonest taxa listed in the tab (the exported CSV lists all)


@dataclass
class FoundSet:
    """A query's relevant photos: their counts and where each was seen (as published)."""

    title: str
    analyses: FoundSetAnalyses
    points: list[MapPoint]
    withheld: int = 0  # places withheld (not drawn, not counted by place)
    generalised: int = 0  # places drawn where they would be published

    def place_note(self) -> str:
        parts = []
        if self.withheld:
            parts.append(f"{self.withheld:,} withheld")
        if self.generalised:
            parts.append(f"{self.generalised:,} generalised")
        return " · ".join(parts)


def query_title(library: Library, query_id: int) -> str:
    """The query's name, else its text, else "query N" (titles the charts)."""
    from engine.judgments.queries import QueryStore

    info = next((q for q in QueryStore(library).list_queries() if q.id == query_id), None)
    if info is None:
        return f"query {query_id}"
    return info.name or info.text or f"query {query_id}"


def read_found_set(library: Library, query_id: int) -> FoundSet:
    """Count the query's relevant photos, each place as it would be published (runs in a
    worker)."""
    from dataclasses import replace

    from engine.catalog.privacy import GENERALISED, WITHHELD, PlacePolicy
    from engine.catalog.reads import photo_details
    from engine.io.analyses import analyse_photos
    from engine.judgments.queries import QueryStore
    from engine.search.places import published_place_of

    judgments = QueryStore(library).judgments(query_id)
    relevant = sorted(image_id for image_id, value in judgments.items() if value > 0)
    details = photo_details(library, relevant)
    policy = PlacePolicy.of(library.catalog)
    photos = []
    withheld = generalised = 0
    for image_id in relevant:
        if image_id not in details:
            continue
        place = published_place_of(policy, details[image_id])
        withheld += place.decision == WITHHELD
        generalised += place.decision == GENERALISED
        photos.append(
            replace(details[image_id], latitude=place.latitude, longitude=place.longitude)
        )
    points = [
        MapPoint(p.image_id, p.latitude, p.longitude, 1)
        for p in photos
        if p.latitude is not None and p.longitude is not None
    ]
    return FoundSet(
        query_title(library, query_id), analyse_photos(photos), points, withheld, generalised
    )


def relevant_view(found: FoundSet) -> RelevantView:
    """The plain counts the tab shows (months of all years together, the top taxa)."""
    a = found.analyses
    months = [0] * 12
    for (_year, month), count in a.by_month.items():
        months[month - 1] += count
    taxa = [
        (f"{name} ({common})" if common else name, count)
        for (name, common), count in a.by_taxon.most_common(TAXA_SHOWN)
    ]
    return RelevantView(
        title=found.title,
        points=found.points,
        without_place=a.no_place - found.withheld,
        place_note=found.place_note(),
        months=months,
        undated=a.no_date,
        hours=[a.by_hour.get(hour, 0) for hour in range(HOURS)],
        no_time=a.no_time,
        taxa=taxa,
        summary=a.summary() if a.relevant else "No photo is judged relevant to this query yet.",
    )


class AnalysesController(QObject):
    """Fills the tab's relevant-photos page; see the module docstring."""

    message = Signal(str)
    outcome = Signal(str)  # a file written: the message band and the status line

    def __init__(
        self,
        runner: TaskRunner,
        session: LibrarySession,
        query: OpenQuery,
        pane: PlacePane,
        ask_folder: Callable[[str], str | None],
    ) -> None:
        super().__init__()
        self.runner = runner
        self.session = session
        self.query = query
        self.pane = pane
        self.ask_folder = ask_folder
        self.found: FoundSet | None = None  # what the page shows
        pane.modeChanged.connect(lambda _mode: self.refresh())
        pane.relevant.exportRequested.connect(self.export)
        query.opened.connect(lambda _query_id: self.refresh())
        query.judgmentSaved.connect(self._judgment_saved)

    def _judgment_saved(self, query_id: int, _image_id: int, _relevance: object) -> None:
        if query_id == self.query.query_id:
            self.refresh()

    def refresh(self) -> TaskHandle | None:
        """Count the open query's relevant photos again (newest wins); nothing while the
        results' page is shown (it is counted when the page is chosen)."""
        if self.pane.mode() != RELEVANT:
            return None
        library, query_id = self.session.library, self.query.query_id
        if library is None or query_id is None:
            for handle in self.runner.active("found-set-analyses"):
                handle.cancel()  # a late count of an earlier query must not land
            self.found = None
            self.pane.relevant.show_view(RelevantView())
            return None
        return self.runner.submit(
            lambda ctx: read_found_set(library, query_id),
            title="Counting the relevant photos",
            pool=READ,
            group="found-set-analyses",
            on_success=self._show,
            on_failure=lambda exc: self.runner.report_error(exc, "Counting the relevant photos"),
        )

    def _show(self, found: FoundSet) -> None:
        self.found = found
        self.pane.relevant.show_view(relevant_view(found))

    def export(self) -> TaskHandle | None:
        """Ask for a folder and write the analyses' CSV files and charts there."""
        library, query_id = self.session.library, self.query.query_id
        if library is None or query_id is None:
            self.message.emit("Open a query first")
            return None
        folder = self.ask_folder("Export analyses to folder")
        if not folder:
            return None

        def write(ctx: TaskContext) -> list[Path]:
            from engine.io.analyses import write_analyses

            found = read_found_set(library, query_id)  # what is judged now, not what was shown
            return write_analyses(found.analyses, folder, found.title)

        return self.runner.submit(
            write,
            title="Exporting the analyses",
            pool=WRITE,
            on_success=lambda paths: self.outcome.emit(
                f"Wrote {len(paths)} analysis files to {folder}"
            ),
            on_failure=lambda exc: self.runner.report_error(exc, "Exporting the analyses"),
        )


def install(app: Application) -> None:
    """ "Where and when" › Relevant photos of this query: their analyses, and their export."""
    w = app.window
    analyses = app.analyses = AnalysesController(
        app.runner, app.session, app.open_query, w.place_pane, lambda c: w.ask_folder(c)
    )
    analyses.message.connect(w.set_status)
    announce(app, analyses.outcome)
