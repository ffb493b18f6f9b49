"""Saved queries: every search becomes a run of one; the query list opens, renames, annotates
and deletes them.

Opening a query (from the list, a run picked in the metrics panel, or the search just saved)
reads its runs and judgments in the write pool, after every judgment queued before, and hands
them to the `JudgingController`; the query bar shows what the shown run searched (its words,
its photo, or both) and the filter bar the run's filters (`runFiltersShown`). The newest search
or open wins.

Query photos are named by their taxon where the catalog knows them (else the file name), in run
labels, titles and the list; the list's thumbnails load in the thumbnails pool.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QImage, QPixmap

from app.controllers.install import asker, say
from app.controllers.judging import JudgingController
from app.controllers.open_query import QueryState, RunState
from app.controllers.results import QueryPhoto, photo_thumbnail_bytes, query_photo, result_items
from app.controllers.session import LibrarySession
from app.workers import THUMBNAILS, WRITE, TaskContext, TaskHandle, TaskRunner
from widgets.query_list import QueryListPanel, QueryRow
from widgets.results import ResultItem

if TYPE_CHECKING:
    from app.controllers.application import Application
    from app.controllers.search import SearchOutcome
    from engine.catalog.library import Library
    from engine.judgments.queries import QueryInfo, QueryStore, RunInfo
    from engine.judgments.runs import SavedRunParams
    from engine.search.filters import FilterNames

log = logging.getLogger(__name__)


# Shows a stored run in the grid: (cards, query text, query image, the run or None).
ShowResults = Callable[[list[ResultItem], str, Path | None, RunState | None], None]


@dataclass
class _Loaded:
    """What a worker read about a query (after saving a run or to reopen it)."""

    query: QueryState
    text: str  # what the shown run searched: its words ("" for a photo-only run)
    image_path: str | None  # and its photo
    queries: list[QueryRow]  # the whole list
    items: list[ResultItem] | None = None  # set when the grid must show a stored run
    filters: dict[str, Any] | None = None  # the shown run's metadata filters (its params')


def _local_time(moment: datetime) -> str:
    if moment.tzinfo is None:  # the catalog stores UTC without a zone
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone().strftime("%H:%M")


class PhotoNames:
    """Names query photos from the catalog, each path read once. Used in a worker."""

    def __init__(self, library: Library | None) -> None:
        self.library = library
        self._known: dict[str, QueryPhoto] = {}
        self._filters: FilterNames | None = None

    def filters(self) -> FilterNames | None:
        """How run labels name collections and deployments (read once, when first asked)."""
        if self._filters is None and self.library is not None:
            from engine.search.filters import filter_names

            self._filters = filter_names(self.library.catalog)
        return self._filters

    def __call__(self, path: str) -> QueryPhoto:
        photo = self._known.get(path)
        if photo is None:
            photo = self._known[path] = query_photo(self.library, path)
        return photo


def _run_label(run: RunInfo, names: PhotoNames) -> str:
    """The method with its non-default options and the query kind ("Text · image"), the
    photo searched with (its taxon, else its file name), and the time."""
    from engine.methods.registry import run_label

    saved = run.saved
    image = saved.image
    label = run_label(run.method, run.params, run.kind, _named(run, names))
    what = f"{label} · {names(image).reference}" if image else label
    if saved.filters and not saved.filters_label():
        # A filtered run ranks fewer photos: its metrics must not pass for the unfiltered one's
        # (the label names the filters it can read; others are only said to be there).
        what += " · filtered"
    return f"{what} · {_local_time(run.created_at)}"


def _named(run: RunInfo, names: PhotoNames) -> FilterNames | None:
    """The names a run's label needs: only a run filtered by collection or deployment reads
    them."""
    filters = run.saved.filters or {}
    return (
        names.filters() if filters.get("collection_ids") or filters.get("deployment_ids") else None
    )


def _query_title(info: QueryInfo, names: PhotoNames) -> str:
    """The name, else the words, else “photo NAME”: never a bare file path."""
    if info.name or info.text:
        return str(info.name or info.text)
    return f"photo “{names(info.image_path).reference}”" if info.image_path else ""


def query_rows(store: QueryStore, names: PhotoNames | None = None) -> list[QueryRow]:
    """Every saved query as the list shows it, with the labels of its runs (what tells two
    queries with the same words apart). Runs in a worker."""
    from engine.judgments.queries import saved_runs
    from engine.methods.registry import run_label

    names = names or PhotoNames(store.library)
    methods: dict[int, list[str]] = {}
    for run in saved_runs(store.library):
        label = run_label(run.method, run.params, run.kind, _named(run, names))
        labels = methods.setdefault(run.query_id, [])
        if label not in labels:
            labels.append(label)
    return [
        QueryRow(
            id=info.id,
            title=_query_title(info, names),
            text=info.text,
            image_path=info.image_path,
            photo_name=names(info.image_path).name if info.image_path else None,
            methods=", ".join(methods.get(info.id, [])),
            notes=info.notes,
            runs=info.runs,
            relevant=info.relevant,
            judged=info.judged,
        )
        for info in store.list_queries()
    ]


def read_query(store: QueryStore, query_id: int, run_id: int | None) -> _Loaded:
    """A saved query with the latest run of each method (and run `run_id`, if older); its
    judgments; the whole query list. Runs in a worker."""
    from engine.methods.registry import run_label

    names = PhotoNames(store.library)
    infos = store.list_queries()
    info = next((q for q in infos if q.id == query_id), None)
    latest = store.latest_runs_by_method(query_id)
    runs = sorted(latest.values(), key=lambda r: r.id)
    if run_id is not None and all(r.id != run_id for r in runs):
        # An older run of a method was asked for: show it beside the latest of the others.
        older = next((r for r in store.runs_for(query_id) if r.id == run_id), None)
        if older is not None:
            runs = sorted(
                [r for r in runs if r.signature != older.signature] + [older],
                key=lambda r: r.id,
            )
    if run_id is None and runs:
        run_id = runs[-1].id
    shown = next((r for r in runs if r.id == run_id), None)
    text = info.text if info else ""
    image_path = info.image_path if info else None
    filters = shown.saved.filters if shown is not None else None
    if shown is not None:
        # The query bar shows what the shown run searched: a "More like this" run of a text
        # query searched its photo alone.
        image_path = shown.saved.image or image_path
        if shown.kind == "image":
            text = ""
        elif shown.kind == "text":
            image_path = None
    return _Loaded(
        query=QueryState(
            query_id=query_id,
            title=_query_title(info, names) if info else "",
            run_id=run_id,
            runs=[
                RunState(
                    r.id,
                    run_label(r.method, r.params, r.kind, _named(r, names)),
                    _run_label(r, names),
                    list(r.ranking),
                    r.method,
                )
                for r in runs
            ],
            judgments=store.judgments(query_id),
            judged_boxes={
                image_id: (b.x, b.y, b.width, b.height)
                for image_id, b in store.judged_boxes(query_id).items()
            },
        ),
        text=text,
        image_path=image_path,
        queries=query_rows(store, names),
        filters=filters,
    )


class SavedQueriesController(QObject):
    """Saves searches as runs, opens saved queries and their runs, and serves the query list
    (rename, notes, delete)."""

    message = Signal(str)
    # A saved run was reopened: its metadata filters (None: it had none), to show as chips.
    runFiltersShown = Signal(object)

    def __init__(
        self,
        runner: TaskRunner,
        session: LibrarySession,
        judging: JudgingController,
        panel: QueryListPanel,
        show_results: ShowResults,
        ask_yes_no: Callable[[str, str], bool],
    ) -> None:
        super().__init__()
        self.runner = runner
        self.session = session
        self.judging = judging
        self.panel = panel
        self.show_results = show_results
        self.ask_yes_no = ask_yes_no
        self._more_like_this: tuple[str, int] | None = None  # (photo path, query id)
        self._generation = 0  # the newest search or open wins
        self._photos: dict[str, QPixmap] = {}  # query photo path -> thumbnail shown in the list

        session.opened.connect(self.refresh)
        judging.countsChanged.connect(panel.update_counts)
        panel.openRequested.connect(self.open_query)
        panel.renameRequested.connect(self.rename_query)
        panel.deleteRequested.connect(self.delete_query)
        panel.notesEdited.connect(self.set_notes)

    def refresh(self) -> TaskHandle | None:
        """Read the query list again."""
        store = self.session.query_store()
        if store is None:
            return None
        return self.runner.submit(
            lambda ctx: query_rows(store),
            title="Reading the saved queries",
            pool=WRITE,
            on_success=self._show_list,
        )

    def _show_list(self, rows: list[QueryRow]) -> None:
        self._set_rows(rows)
        self.panel.set_current(self.judging.query_id)

    def _set_rows(self, rows: list[QueryRow]) -> None:
        self.panel.set_queries(rows)
        self._load_photos(rows)

    def _load_photos(self, rows: list[QueryRow]) -> TaskHandle | None:
        """Thumbnails of the queries' photos for the list: those already loaded at once, the
        others in the thumbnails pool (a newer list wins)."""
        wanted: dict[str, list[int]] = {}
        for row in rows:
            if row.image_path is None:
                continue
            pixmap = self._photos.get(row.image_path)
            if pixmap is not None:
                self.panel.set_photo(row.id, pixmap)
            else:
                wanted.setdefault(row.image_path, []).append(row.id)
        cache, library = self.session.thumbnail_cache(), self.session.library
        if not wanted or cache is None:
            return None

        def load(ctx: TaskContext) -> dict[str, QImage]:
            out = {}
            for path in wanted:
                ctx.check()
                data = photo_thumbnail_bytes(cache, query_photo(library, path))
                image = QImage.fromData(data) if data else None
                if image is not None and not image.isNull():
                    out[path] = image
            return out

        def loaded(images: dict[str, QImage]) -> None:
            for path, image in images.items():
                pixmap = self._photos[path] = QPixmap.fromImage(image)
                for query_id in wanted[path]:
                    self.panel.set_photo(query_id, pixmap)

        return self.runner.submit(
            load,
            title="Loading the query photos",
            pool=THUMBNAILS,
            group="query-list-photos",
            on_success=loaded,
            on_failure=lambda exc: log.info("query photos: %s", exc),
        )

    # -- searches become runs --------------------------------------------------------------------

    def note_more_like_this(self, item: ResultItem) -> None:
        """A "more like this" while a query is open becomes another method of that query."""
        if self.judging.query_id is not None:
            self._more_like_this = (item.path, self.judging.query_id)

    def on_search_finished(self, outcome: SearchOutcome) -> TaskHandle | None:
        """Save the search as a run of its query and load that query's judgments."""
        store = self.session.query_store()
        if store is None:
            return None
        request = outcome.request
        image = str(request.image) if request.image is not None else None
        attach_to: int | None = None
        method = request.method
        params = replace(
            outcome.params,
            top_k=request.top_k if outcome.params.top_k is None else outcome.params.top_k,
            image=image if image is not None else outcome.params.image,
        )
        pending, self._more_like_this = self._more_like_this, None
        if pending is not None and image == pending[0] and not request.text.strip():
            attach_to = pending[1]  # saved as an image run of the open query
        # The grid now shows a new ranking: judgments of the previous query must not show on it.
        self._generation += 1
        generation = self._generation
        self.judging.new_ranking(attach_to)
        ranking = [(item.image_id, item.score) for item in outcome.items]
        model_key = self.session.model_key

        companions = list(outcome.companions)

        def save(ctx: TaskContext) -> _Loaded:
            query_id = (
                attach_to
                if attach_to is not None
                else store.find_or_create_query(request.text, image)
            )
            # The searches this one stood on first (a reranked search's base), so the metrics
            # compare them on the same judgments; the shown run stays the newest.
            have = [(r.method, _comparable(r.saved)) for r in store.runs_for(query_id)]
            for companion in companions:
                if (companion.method, _comparable(companion.params)) in have:
                    continue
                store.save_run(
                    query_id,
                    companion.method,
                    companion.ranking,
                    model_key=model_key,
                    params=replace(companion.params, top_k=request.top_k),
                    kind=request.kind,
                )
            run_id = store.save_run(
                query_id,
                method,
                ranking,
                model_key=model_key,
                params=params,
                duration_ms=outcome.seconds * 1000.0,
                kind=request.kind,
            )
            return read_query(store, query_id, run_id)

        return self.runner.submit(
            save,
            title="Saving the search",
            pool=WRITE,
            on_success=lambda loaded: self._apply(loaded, generation),
        )

    # -- opening queries and runs ------------------------------------------------------------------

    def open_query(self, query_id: int, run_id: int | None = None) -> TaskHandle | None:
        """Show a saved query's run (default: its newest) with its judgments."""
        store, library = self.session.query_store(), self.session.library
        if store is None or library is None:  # a store only exists for an open library
            return None
        self._generation += 1
        generation = self._generation

        def load(ctx: TaskContext) -> _Loaded:
            loaded = read_query(store, query_id, run_id)
            query = loaded.query
            run = next((r for r in query.runs if r.run_id == query.run_id), None)
            loaded.items = result_items(library, run.ranking if run else [])
            return loaded

        return self.runner.submit(
            load,
            title="Opening the query",
            pool=WRITE,
            on_success=lambda loaded: self._apply(loaded, generation),
        )

    def show_run(self, run_id: int) -> TaskHandle | None:
        """Show another run of the open query in the grid (the judgments stay)."""
        if self.judging.query_id is None or run_id == self.judging.run_id:
            return None
        return self.open_query(self.judging.query_id, run_id)

    def reopen(self, query_ids: set[int] | None = None) -> TaskHandle | None:
        """Read the open query again when it is among `query_ids` (None: in any case), else
        just the list: after judgments were added behind the window's back (an import)."""
        query_id = self.judging.query_id
        if query_id is not None and (query_ids is None or query_id in query_ids):
            return self.open_query(query_id, self.judging.run_id)
        return self.refresh()

    def _apply(self, loaded: _Loaded, generation: int) -> None:
        if generation != self._generation:
            return  # a newer search or open replaced this one
        query = loaded.query
        if loaded.items is not None:
            image = Path(loaded.image_path) if loaded.image_path else None
            shown = next((r for r in query.runs if r.run_id == query.run_id), None)
            self.show_results(loaded.items, loaded.text, image, shown)
            self.runFiltersShown.emit(loaded.filters)
        self._set_rows(loaded.queries)
        self.panel.set_current(query.query_id)
        self.panel.select(query.query_id)  # its notes are the ones shown for editing
        if loaded.items is not None:
            run = next((r for r in query.runs if r.run_id == query.run_id), None)
            self.message.emit(
                f"Opened “{query.title}”: {run.label if run else 'no runs yet'}  ·  "
                f"{len(query.judgments)} judged"
            )
        self.judging.show_query(query)

    # -- the query list ----------------------------------------------------------------------------

    def rename_query(self, query_id: int, name: str) -> TaskHandle | None:
        store = self.session.query_store()
        if store is None:
            return None

        def rename(ctx: TaskContext) -> list[QueryRow]:
            store.rename_query(query_id, name)
            return query_rows(store)

        def renamed(infos: list[QueryRow]) -> None:
            self._show_list(infos)
            info = next((q for q in infos if q.id == query_id), None)
            if info is not None:
                self.judging.retitle(query_id, info.title)

        return self.runner.submit(
            rename, title="Renaming the query", pool=WRITE, on_success=renamed
        )

    def set_notes(self, query_id: int, notes: str) -> TaskHandle | None:
        store = self.session.query_store()
        if store is None:
            return None
        return self.runner.submit(
            lambda ctx: store.set_notes(query_id, notes),
            title="Saving the notes",
            pool=WRITE,
            on_success=lambda _r: self.panel.note_saved(query_id, notes),
        )

    def delete_query(self, query_id: int) -> TaskHandle | None:
        store = self.session.query_store()
        if store is None:
            return None
        info = self.panel.item_for(query_id)
        title = info.text(0) if info is not None else str(query_id)
        if not self.ask_yes_no(
            "Delete the query?",
            f"Delete “{title}” with its runs and judgments? This cannot be undone.",
        ):
            return None

        def delete(ctx: TaskContext) -> list[QueryRow]:
            store.delete_query(query_id)
            return query_rows(store)

        def deleted(infos: list[QueryRow]) -> None:
            self.judging.forget_query(query_id)
            self._show_list(infos)
            self.message.emit(f"Deleted the query “{title}”")

        return self.runner.submit(
            delete, title="Deleting the query", pool=WRITE, on_success=deleted
        )


def _comparable(params: SavedRunParams) -> str:
    """A run's parameters without what does not change its ranking's method (what it drew or
    scored, how many it kept, the photo path): two runs alike here are the same search."""
    return json.dumps(params.search_params(), sort_keys=True, default=str)


def install(app: Application) -> None:
    """The saved queries pane: a search is saved as a run, a run shown again, notes kept."""
    w = app.window
    queries = app.queries = SavedQueriesController(
        app.runner,
        app.session,
        app.judging,
        w.query_list,
        app.search.show_results,
        asker(app),
    )
    app.search.searchFinished.connect(queries.on_search_finished)
    w.results.moreLikeThisRequested.connect(queries.note_more_like_this)
    w.detail_pane.moreLikeThisRequested.connect(queries.note_more_like_this)
    w.metrics_panel.runSelected.connect(queries.show_run)
    app.transfers.imported.connect(queries.reopen)
    say(app, queries.message)
