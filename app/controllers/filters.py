"""Filters in the window: the filter bar's chips and menu, the map and the month histogram.

This controller owns the `engine.search.filters.SearchFilters` of the window. The filter bar, the map
(a drawn box) and the histogram (chosen months) only say what the user asked for; here that
becomes a new `SearchFilters` (checked by the engine: a bad value is one line in the status
line, the filters stay as they were), the chips show it, and the open search runs again with
it (the search group: the newest wins). The search puts the filters into its `MethodContext`
and saves them with the run; a saved run reopened brings its chips back, without searching.

Whenever the grid shows another ranking (a search, a reopened run), the facet counts of its
photos (for the menus), their observation months (the histogram) and places (the map) are read
in a worker, the newest ranking winning; the coastlines load once, in a worker too. Places are
shown as they would be published (`engine.search.places`): a withheld one is not drawn and
cannot centre a "within N km" filter, a generalised one is drawn, and centres it, where it
would be published.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QModelIndex, QObject, Signal

from app.controllers.install import say
from app.controllers.search import SearchController
from app.controllers.session import LibrarySession
from app.workers import READ, TaskHandle, TaskRunner
from engine.errors import BadInputError
from widgets.filter_bar import DetectionMenu, FacetChoice, FilterBar, TaxonChoice
from widgets.map_view import MapPoint, MapView, read_coastlines
from widgets.month_histogram import MonthHistogram
from widgets.results import ResultItem, ResultRole, ResultsModel, ResultsView

if TYPE_CHECKING:
    from app.controllers.application import Application
    from engine.catalog.library import Library
    from engine.search.filters import FilterNames, SearchFilters

log = logging.getLogger(__name__)

TAXON_SUGGESTIONS = 12


@dataclass
class ResultSummary:
    """What the menus, the map and the histogram show about the photos of one ranking."""

    image_ids: list[int]
    facets: dict[str, list[FacetChoice]] = field(default_factory=dict)
    months: list[int] = field(default_factory=lambda: [0] * 12)
    undated: int = 0
    # (id, lat, lon) as published: withheld places left out, generalised ones moved.
    places: list[tuple[int, float, float]] = field(default_factory=list)
    withheld: dict[int, str] = field(default_factory=dict)  # id -> why its place is withheld
    place_note: str = ""  # "2 withheld · 1 generalised"

    @property
    def without_place(self) -> int:
        """Photos with no place at all (withheld ones are counted in the note)."""
        return len(self.image_ids) - len(self.places) - len(self.withheld)

    def place_of(self, image_id: int) -> tuple[float, float] | None:
        """The place drawn for a photo, if any."""
        return next(((lat, lon) for i, lat, lon in self.places if i == image_id), None)


def summarise(library: Library, image_ids: list[int]) -> ResultSummary:
    """Facet counts, observation months and places of `image_ids`. Runs in a worker."""
    from engine.search.filters import facet_counts, month_counts
    from engine.search.places import shown_places

    catalog = library.catalog
    ids = list(image_ids)
    facets = {
        name: [FacetChoice(v.key, v.label, int(v.count)) for v in values]
        for name, values in facet_counts(catalog, ids).items()
    }
    # The library's camera deployments (photos in each, of the whole library), for the
    # Deployment menu; a library without deployments lists none.
    from engine.indexing.deployments import list_deployments

    facets["deployment"] = [
        FacetChoice(d.id, d.name or " · ".join(p for p in (d.folder, d.camera_serial) if p),
                    d.photos)
        for d in list_deployments(library)
    ]  # fmt: skip
    months = [int(c) for c in month_counts(catalog, ids)]
    shown = shown_places(catalog, ids)
    return ResultSummary(
        list(image_ids),
        facets,
        months,
        len(image_ids) - sum(months),
        shown.places,
        shown.withheld_reasons,
        shown.note(),
    )


def taxon_choices(library: Library, prefix: str) -> list[TaxonChoice]:
    """Taxa of the catalog whose name or common name starts with `prefix`. Runs in a worker."""
    from engine.search.filters import taxon_suggestions

    return [
        TaxonChoice(s.name, s.common_name, s.rank, int(s.count))
        for s in taxon_suggestions(library.catalog, prefix, limit=TAXON_SUGGESTIONS)
    ]


def detection_menu(library: Library) -> DetectionMenu:
    """What the detection filters can be set to in `library`. Runs in a worker."""
    from engine.detections.choices import detection_choices

    found = detection_choices(library.catalog)
    return DetectionMenu(
        found.threshold,
        found.looked,
        found.not_empty,
        [FacetChoice(name, name, count) for name, count in found.categories],
        [FacetChoice(name, name, count) for name, count in found.labels],
    )


def filter_menu() -> list[tuple[str, str]]:
    """The filter bar's "Add filter" entries, (label, editor), from the registry of kinds."""
    from engine.search.filter_kinds import menu_entries

    return [(entry.label, entry.editor) for entry in menu_entries()]


def _empty_filters() -> SearchFilters:
    from engine.search.filters import SearchFilters

    return SearchFilters()


class FiltersController(QObject):
    """Owns the window's filters; see the module docstring."""

    message = Signal(str)
    filtersChanged = Signal(object)  # SearchFilters, after every change

    def __init__(
        self,
        runner: TaskRunner,
        session: LibrarySession,
        search: SearchController,
        bar: FilterBar,
        map_view: MapView,
        histogram: MonthHistogram,
        model: ResultsModel,
        view: ResultsView,
        open_query: Callable[[], int | None],
        show_place_pane: Callable[[], None] = lambda: None,
    ) -> None:
        super().__init__()
        self.runner = runner
        self.session = session
        self.search = search
        self.bar = bar
        self.map = map_view
        self.histogram = histogram
        self.model = model
        self.view = view
        self.open_query = open_query  # the id of the query open in the window, if any
        self.show_place_pane = show_place_pane
        self.filters = _empty_filters()
        self.summary: ResultSummary | None = None  # of the ranking shown
        # How chips name collections and deployments (read in a worker; None until then).
        self.names: FilterNames | None = None
        self._names_wanted: tuple[tuple[int, ...], tuple[int, ...]] | None = None

        bar.set_menu(filter_menu())
        bar.filtersEdited.connect(self.edit)
        bar.chipRemoved.connect(self.remove)
        bar.clearRequested.connect(self.clear)
        bar.taxonTyped.connect(self.suggest_taxa)
        bar.placeBoxRequested.connect(self._ask_for_box)
        bar.nearRequested.connect(self.near_selected)
        map_view.boxDrawn.connect(lambda bbox: self.edit({"bbox": list(bbox)}))
        map_view.pointClicked.connect(self._select_photo)
        histogram.monthsChosen.connect(lambda first, last: self.edit({"months": [first, last]}))
        model.modelReset.connect(self.refresh_results)
        model.dataChanged.connect(self._judgments_changed)
        view.currentItemChanged.connect(self._current_changed)
        session.opened.connect(self.load_names)
        session.opened.connect(self.load_detections)
        self._show()
        self.load_coastlines()

    # -- the filters -------------------------------------------------------------------------

    def set_filters(self, filters: SearchFilters, rerun: bool = True) -> None:
        """Make `filters` the window's; the open search runs again with them if `rerun`."""
        self.filters = filters
        self.search.filters = filters
        self._show()
        self.filtersChanged.emit(filters)
        if rerun:
            self.search.rerun()

    def edit(self, changes: dict[str, Any]) -> None:
        """Set the fields in `changes` (`to_params()` names; None removes one)."""
        from engine.search.filters import SearchFilters

        params = dict(self.filters.to_params())
        for name, value in changes.items():
            if value is None or value == []:
                params.pop(name, None)
            else:
                params[name] = value
        if "judged" in changes:
            if changes["judged"] is None:
                params.pop("judged_query_id", None)
            else:
                query_id = self.open_query()
                if query_id is None:
                    self.message.emit("Open or run a query first: judged is per query")
                    return
                params["judged_query_id"] = query_id
        try:
            filters = SearchFilters.from_params(params)
        except BadInputError as exc:
            self.runner.report_error(exc, "Setting the filter")
            return
        if filters == self.filters:
            return
        self.set_filters(filters)

    def remove(self, key: str) -> None:
        """The chip `key` was closed."""
        self.set_filters(self.filters.without(key))

    def clear(self) -> None:
        if self.filters.active:
            self.set_filters(_empty_filters())

    def restore(self, params: dict[str, Any] | None) -> None:
        """A saved run was reopened: its filters (None: it had none) become the chips, without
        searching again (the run's ranking is shown as it was saved)."""
        from engine.search.filters import SearchFilters

        try:
            filters = SearchFilters.from_params(params or {})
        except BadInputError as exc:  # a run saved by a later version, or edited by hand
            log.warning("the run's filters cannot be read: %s", exc)
            filters = _empty_filters()
        self.set_filters(filters, rerun=False)

    def _show(self) -> None:
        filters = self.filters
        self.bar.set_filters(list(filters.describe(self.names)), dict(filters.to_params()))
        wanted = (filters.collection_ids, filters.deployment_ids)
        if (
            any(wanted)
            and (self.names is None or not self.names.knows(filters))
            and wanted != self._names_wanted  # asked once per set of ids: one may be gone
        ):
            self._names_wanted = wanted
            self.load_names()
        self.map.set_box(filters.bbox)
        self.map.set_near(filters.near)
        self.histogram.set_chosen(filters.months)

    def _ask_for_box(self) -> None:
        self.show_place_pane()
        self.message.emit("Drag a box on the map to keep only photos from there")

    def near_selected(self, km: float) -> None:
        """Photos within `km` of the selected photo's place, as it would be published (a
        generalised place centres the filter where it is drawn; a withheld one cannot)."""
        item = self.view.current_item()
        summary = self.summary
        if item is not None and summary is not None and item.image_id in summary.withheld:
            self.message.emit(
                f"This photo's place is withheld ({summary.withheld[item.image_id]}): select "
                "another photo to centre the filter"
            )
            return
        place = summary.place_of(item.image_id) if item and summary else None
        if place is None:
            self.message.emit("Select a photo with a place first")
            return
        self.edit({"near": [place[0], place[1], float(km)]})

    # -- what the results hold ---------------------------------------------------------------

    def refresh_results(self) -> TaskHandle | None:
        """Read the facets, months and places of the ranking the grid shows (newest wins)."""
        ids = [item.image_id for item in self.model.items()]
        library = self.session.library
        if library is None or not ids:
            for handle in self.runner.active("result-summary"):
                handle.cancel()  # a late summary of an earlier ranking must not land
            self._show_summary(ResultSummary(ids))
            return None
        return self.runner.submit(
            lambda ctx: summarise(library, ids),
            title="Reading the results' places and dates",
            pool=READ,
            group="result-summary",
            on_success=self._show_summary,
            on_failure=lambda exc: self.runner.report_error(exc, "Reading the results' places"),
        )

    def _show_summary(self, summary: ResultSummary) -> None:
        self.summary = summary
        self.bar.set_facets(summary.facets)
        self.histogram.set_counts(summary.months, summary.undated)
        judgment = self.model.judgment
        self.map.set_points(
            [MapPoint(i, lat, lon, judgment(i)) for i, lat, lon in summary.places],
            summary.without_place,
            summary.place_note,
        )
        self._current_changed(self.view.current_item())

    def _judgments_changed(self, first: QModelIndex, last: QModelIndex, roles: list[int]) -> None:
        if roles and ResultRole.Judgment not in roles:
            return  # a thumbnail arrived
        judgment = self.model.judgment
        judged = {
            p.image_id: j for p in self.map.points() if (j := judgment(p.image_id)) is not None
        }
        self.map.set_judgments(judged)

    def _current_changed(self, item: ResultItem | None) -> None:
        self.map.set_current(item.image_id if item is not None else None)
        # Only a place drawn on the map (as it would be published) can centre a filter.
        summary = self.summary
        has_place = item is not None and summary is not None and summary.place_of(item.image_id)
        self.bar.set_selected_photo(item.title if item is not None and has_place else None)
        self.bar.set_judged_available(self.open_query() is not None)

    def query_opened(self, _query_id: int) -> None:
        """A query is open: judged / not judged for it can be asked for."""
        self.bar.set_judged_available(True)

    def _select_photo(self, image_id: int) -> None:
        row = self.model.row_of(image_id)
        if row is not None:
            self.view.select_row(row)

    # -- workers -----------------------------------------------------------------------------

    def suggest_taxa(self, prefix: str) -> TaskHandle | None:
        """Completions for the taxon being typed (newest wins)."""
        library = self.session.library
        if library is None or not prefix:
            self.bar.set_taxon_suggestions([])
            return None
        return self.runner.submit(
            lambda ctx: taxon_choices(library, prefix),
            title="Finding taxa",
            pool=READ,
            group="taxon-suggestions",
            on_success=self.bar.set_taxon_suggestions,
            on_failure=lambda exc: log.info("taxon suggestions for %r: %s", prefix, exc),
        )

    def load_names(self) -> TaskHandle | None:
        """The names of the library's collections and deployments, for the chips."""
        library = self.session.library
        if library is None:
            return None

        def read(ctx: object) -> FilterNames:
            from engine.search.filters import filter_names

            return filter_names(library.catalog)

        def shown(names: FilterNames) -> None:
            if library is self.session.library:
                self.names = names
                self._show()

        return self.runner.submit(
            read,
            title="Reading the collections' and deployments' names",
            pool=READ,
            group="filter-names",
            on_success=shown,
            on_failure=lambda exc: log.warning("the chips' names cannot be read: %s", exc),
        )

    def load_detections(self) -> TaskHandle | None:
        """What the library's detections offer the Add filter menu (empty frames, the
        categories and labels present); without detections those entries are left out."""
        library = self.session.library
        if library is None:
            self.bar.set_detections(None)
            return None

        def shown(menu: DetectionMenu) -> None:
            if library is self.session.library:
                self.bar.set_detections(menu)

        return self.runner.submit(
            lambda ctx: detection_menu(library),
            title="Reading the detections' categories and labels",
            pool=READ,
            group="filter-detections",
            on_success=shown,
            on_failure=lambda exc: log.warning("the detection filters cannot be read: %s", exc),
        )

    def load_coastlines(self) -> TaskHandle | None:
        """The map's land, read once from the package's resources."""
        if self.map.has_coastlines():
            return None
        return self.runner.submit(
            lambda ctx: read_coastlines(),
            title="Reading the map",
            pool=READ,
            group="coastlines",
            on_success=self.map.set_coastlines,
            on_failure=lambda exc: log.warning("the map's coastlines cannot be read: %s", exc),
        )


def install(app: Application) -> None:
    """Filters: the chips under the query bar, the map and the month histogram."""
    w = app.window
    open_query = app.open_query
    filters = app.filters = FiltersController(
        app.runner,
        app.session,
        app.search,
        w.filter_bar,
        w.map_view,
        w.month_histogram,
        w.results_model,
        w.results,
        open_query=lambda: open_query.query_id,
        show_place_pane=w.show_place_pane,
    )
    app.queries.runFiltersShown.connect(filters.restore)
    open_query.opened.connect(filters.query_opened)
    say(app, filters.message)
