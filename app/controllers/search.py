"""Searching: the picker filled from the engine's method registry, each method's options, running
a query in the background, showing the results.

Every method of `engine.methods` (plug-ins included) appears in the picker; one that cannot run
here is greyed with its reason. The newest search wins: a new query cancels the one still
running and drops its late result.

The picker and the grid stay in step: picking a quick method (`QUICK_METHODS`) runs the query
shown again; picking another only says, under the query, whose results the grid still shows
(Enter runs the picked one); a reopened run sets the picker to its method.

A photo attached to the query (dropped, chosen with File › Search by a photo…, or "More like
this") is named from the catalog and shown with its thumbnail in the query bar, both read in
the thumbnails pool; the status line says what was searched: words, photo, or both.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from PySide6.QtCore import QObject, Qt, QTimer, Signal
from PySide6.QtGui import QImage, QPixmap

from app.controllers.install import say
from app.controllers.results import (
    QueryPhoto,
    photo_thumbnail_bytes,
    query_photo,
    result_items,
)
from app.controllers.session import LibrarySession
from app.controllers.thumbnails import ThumbnailLoader
from app.settings import QueryHistory, language_model
from app.workers import READ, THUMBNAILS, TaskContext, TaskHandle, TaskRunner
from engine.errors import BadInputError, QuadratError
from engine.judgments.runs import SavedRunParams
from engine.methods import SearchQuery
from widgets.detail_pane import DetailPane
from widgets.method_options import MethodOptionsDialog, ParamField
from widgets.query_bar import MethodChoice, QueryBar
from widgets.results import ResultItem, ResultsModel

if TYPE_CHECKING:
    # the engine loads in a worker, not with the window
    import PIL.Image

    from app.controllers.application import Application
    from app.controllers.open_query import RunState
    from engine.catalog.library import Library
    from engine.methods import MethodSpec, ModelManager, Ranking
    from engine.methods.events import MethodEvent
    from engine.methods.search import SearchResult
    from engine.search.filters import SearchFilters

log = logging.getLogger(__name__)

PREVIEW_SIZE = 1400
CHIP_THUMBNAIL_SIZE = 96  # px: made for a photo when the library has no thumbnail cache yet
PHOTO_FILTER = "Photos (*.jpg *.jpeg *.png *.webp *.tif *.tiff *.bmp *.gif *.heic);;All files (*)"

# Methods answered from the vector index (and the records' words) in well under a second on
# any indexed library, with nothing drawn and no scorer asked: picking one reruns the query
# shown at once. Any other (VisRet draws, Reranked asks a scorer about every photo, a plug-in's
# cost is unknown) only marks the grid stale until Enter, so a look at the picker never starts
# minutes of work.
QUICK_METHODS = frozenset({"text", "hybrid"})
QUICK_RERUN_DELAY_MS = 300  # arrow keys stepping through the picker run only where they stop

# Asks for a file to open: (caption, filter) -> path or None (the window's file dialog).
AskOpenFile = Callable[[str, str], str | None]

# Turns a search's photo cards into the cards the grid shows (one per event), in the search's
# worker: (library, photo cards best first) -> cards.
CollapseResults = Callable[["Library", list[ResultItem]], list[ResultItem]]

# Hears a running method's events in the search's worker: (search id, event). It must only
# turn them into plain data and emit queued signals (widgets live on the GUI thread).
MethodEventListener = Callable[[int, "MethodEvent"], None]


@dataclass(frozen=True)
class SearchRequest:
    text: str
    image: Path | None = None
    method: str = "text"
    top_k: int = 1000
    params: dict[str, Any] = field(default_factory=dict)  # the method's options (non-default)

    @property
    def query(self) -> SearchQuery:
        return SearchQuery(self.text, self.image)

    @property
    def kind(self) -> str:
        """ "text", "image" or "image+text": what the run is saved as."""
        return self.query.kind


def method_choices() -> list[MethodChoice]:
    """The registry's methods for the picker; one that cannot run here is greyed, its reason
    in the tooltip. The methods that learn from judgments are left out: they refine a saved
    query (the metrics panel's Refine) and never run from the query bar."""
    from app.controllers.feedback import learning_method_keys
    from engine.methods import method_infos

    learning = learning_method_keys()
    return [
        MethodChoice(
            info.key,
            info.label,
            info.description if info.available else f"Cannot run here: {info.reason}",
            info.available,
        )
        for info in method_infos()
        if info.key not in learning
    ]


def option_fields(method_key: str, values: dict[str, Any]) -> tuple[str, str, list[ParamField]]:
    """(label, description, fields) for the options form of a method, with `values` filled in."""
    from engine.methods import get_method, param_defaults, param_types

    method = get_method(method_key)
    defaults = param_defaults(method.Params)
    kinds = param_types(method.Params)
    fields = [
        ParamField(name, kinds[name], default, values.get(name, default))
        for name, default in defaults.items()
    ]
    return method.label, method.description, fields


@dataclass(frozen=True)
class CompanionRun:
    """A search a method stood on (e.g. the base of a reranked search), saved as its own run
    of the query unless the query has one like it already."""

    method: str
    params: SavedRunParams  # the base's parameters and what it drew or chose
    ranking: list[tuple[int, float]]


@dataclass(frozen=True)
class ShownResults:
    """What the grid shows (or the running search will show): the method's key, the run's
    label, and the words and photo searched; `ids` tells whether the grid still shows it."""

    key: str
    label: str
    text: str
    image: Path | None
    ids: frozenset[int] = frozenset()


@dataclass
class SearchOutcome:
    request: SearchRequest
    items: list[ResultItem]
    seconds: float  # engine time: encode the query and search
    total_seconds: float  # including reading the photos' details
    method_label: str = ""
    # What the run is saved with: the method's full parameters, filters, details, evidence.
    params: SavedRunParams = field(default_factory=SavedRunParams)
    missing: int = 0  # photos of the library missing from disk, so not searched
    photo: QueryPhoto | None = None  # the query photo, named (None: a text search)
    search_id: int = 0  # which search of this window (`SearchController.searchStarted`)
    # Searches the method stood on (a reranked search's base), to keep as runs of their own.
    companions: list[CompanionRun] = field(default_factory=list)
    # What the grid shows when results are grouped by event (one card per event, made in the
    # worker by `SearchController.collapse`); None: `items`, one card per photo.
    shown: list[ResultItem] | None = None
    # A box or fused search: each frame's best matching box (normalised x, y, w, h), chosen on
    # its tile so the grid shows which box matched and R / N judge the frame on it.
    boxes: dict[int, tuple[float, float, float, float]] = field(default_factory=dict)

    @property
    def searched(self) -> str:
        """What was searched, in words: “red circle”, photo “Mungos mungo #12”, or both."""
        return describe_query(self.request.text, self.photo)


def unit_label(method_label: str, unit: str) -> str:
    """A run's label with what it ranked when that was not whole frames: “Text · boxes”."""
    return method_label if unit == "frames" else f"{method_label} · {unit}"


def matched_boxes(found: SearchResult) -> dict[int, tuple[float, float, float, float]]:
    """Each frame's best box of a box or fused search (the first of the ranked boxes naming
    it); empty for a frame search."""
    boxes: dict[int, tuple[float, float, float, float]] = {}
    for hit in found.boxes:
        b = hit.box
        boxes.setdefault(hit.image_id, (b.x, b.y, b.width, b.height))
    return boxes


def describe_query(text: str, photo: QueryPhoto | None) -> str:
    """photo “NAME” + “TEXT”, photo “NAME” or “TEXT”: the status line's and run labels' words
    for what a search looked for."""
    parts = []
    if photo is not None:
        parts.append(f"photo “{photo.reference}”")
    if text.strip():
        parts.append(f"“{' '.join(text.split())}”")
    return " + ".join(parts)


def pil_to_qimage(image: PIL.Image.Image) -> QImage:
    """An RGB PIL image as a QImage that owns its pixels (safe to hand to another thread)."""
    rgb = image.convert("RGB")
    data = rgb.tobytes("raw", "RGB")
    qimage = QImage(data, rgb.width, rgb.height, 3 * rgb.width, QImage.Format.Format_RGB888)
    return qimage.copy()


def run_params(
    spec: MethodSpec,
    ranking: Ranking,
    filters: SearchFilters | None,
    keep_evidence: bool,
    unit: str = "frames",
) -> SavedRunParams:
    """The parameters a search's run is saved with: the method's, the filters it ran within
    (reopening the run shows their chips), what the method drew or chose (details, kept only
    when it said something; a box or fused search's unit among them, so its run is told apart
    from the frames') and, for methods that keep it, its evidence."""
    details = dict(ranking.details or {})
    if unit != "frames":
        details["unit"] = unit
    return SavedRunParams.for_run(
        spec.params_dict(),
        details=details or None,
        evidence=ranking.evidence if keep_evidence else None,
        filters=filters.to_params() if filters is not None else None,
    )


def companion_runs(ranking: Ranking, top_k: int) -> list[CompanionRun]:
    """The searches a method stood on (a reranked search's base), as runs to keep."""
    from engine.methods import resolve_spec

    companions = []
    for text, companion in ranking.companions:
        base = resolve_spec(text)
        params = SavedRunParams.for_run(base.params_dict(), details=companion.details or None)
        companions.append(CompanionRun(base.key, params, companion.pairs()[:top_k]))
    return companions


class SearchController(QObject):
    """Runs queries from the query bar and fills the results model and the detail pane."""

    searchFinished = Signal(object)  # SearchOutcome
    searchStarted = Signal(int, object)  # search id, SearchRequest
    searchStopped = Signal(int, str)  # search id, "failed" or "cancelled"
    message = Signal(str)
    # A stored ranking (a reopened run) replaced the grid: its cards, one per photo.
    resultsShown = Signal(object)  # list[ResultItem]
    # A method needs a model of a role ("generator") that is not set: the role and why; the
    # application opens the model chooser on that role's tab.
    modelNeeded = Signal(str, str)

    def __init__(
        self,
        runner: TaskRunner,
        session: LibrarySession,
        query_bar: QueryBar,
        model: ResultsModel,
        detail: DetailPane,
        thumbnails: ThumbnailLoader,
        history: QueryHistory,
    ) -> None:
        super().__init__()
        self.runner = runner
        self.session = session
        self.query_bar = query_bar
        self.model = model
        self.detail = detail
        self.thumbnails = thumbnails
        self.history = history
        self._pending: SearchRequest | None = None
        self.last_outcome: SearchOutcome | None = None
        self.options: dict[str, dict[str, Any]] = {}  # method key -> options the user set
        # Hear a running method's events (`add_event_listener`), each in the order added.
        self._event_listeners: list[MethodEventListener] = []
        # Called on the GUI thread with each request before it runs (the subquery editor puts
        # a Reranked search's questions, context and base into its parameters).
        self.prepare: Callable[[SearchRequest], SearchRequest] | None = None
        # Methods whose per-photo evidence is kept with a saved run under details["evidence"]
        # (a reranked run's answers, shown again when the run is reopened).
        self.evidence_kept: set[str] = set()
        # Set while results are grouped by event (`EventsController`): run in the worker.
        self.collapse: CollapseResults | None = None
        # What a search ranks (`engine.methods.units`): frames, the detector's boxes, or frames
        # fused with their best box; set by View › Rank by where the library has detections.
        self.unit = "frames"
        self._searches = 0
        self._model_manager: ModelManager | None = None  # kept: a generator loads once
        # The window's metadata filters (set by the FiltersController): every search runs
        # within them and saves them with its run.
        self.filters: SearchFilters | None = None
        self._last_request: SearchRequest | None = None  # what `rerun` runs again
        # The picker is compared with what the grid shows (or the running search will show):
        # a quick method picked reruns the query, any other marks the grid stale.
        self._shown: ShownResults | None = None
        self._running: tuple[int, ShownResults] | None = None  # (search id, what it runs)
        self._quick_rerun = QTimer(self)
        self._quick_rerun.setSingleShot(True)
        self._quick_rerun.setInterval(QUICK_RERUN_DELAY_MS)
        self._quick_rerun.timeout.connect(self._rerun_with_picked)
        query_bar.method.currentIndexChanged.connect(lambda _row: self._update_stale())
        query_bar.method.activated.connect(lambda _row: self._method_picked())
        self.searchStopped.connect(self._on_stopped)
        query_bar.set_methods(method_choices())
        query_bar.optionsRequested.connect(self.edit_options)
        query_bar.set_history(history.items)
        query_bar.searchRequested.connect(self.on_search_requested)
        query_bar.imageChanged.connect(self._name_query_photo)
        detail.moreLikeThisRequested.connect(self.more_like_this)
        model.set_thumbnail_source(thumbnails)
        thumbnails.thumbnailReady.connect(model.thumbnail_ready)
        session.readyChanged.connect(self._on_ready_changed)

    def add_event_listener(self, listener: MethodEventListener) -> None:
        """Give `listener` every event of the searches started from now on (VisRet's drawings,
        Reranked's partial rankings), in the search's worker. Each listener picks the events
        it knows by type, so controllers may be built in any order."""
        self._event_listeners.append(listener)

    def _on_ready_changed(self, ready: bool, message: str) -> None:
        self.query_bar.set_status(ready, message)
        if ready and self._pending is not None:
            request, self._pending = self._pending, None
            self.search(request)

    def on_search_requested(self, text: str, image: object, method: str) -> None:
        request = SearchRequest(
            text=text,
            # The query bar's photo: a path (a Signal carries it as an object).
            image=Path(cast("str | Path", image)) if image is not None else None,
            method=method or "text",
            top_k=self.session.settings.top_k,
            params=dict(self.options.get(method or "text", {})),
        )
        self.search(request)

    def choose_photo(self, ask: AskOpenFile) -> TaskHandle | None:
        """File › Search by a photo…: the chosen photo is attached and searched, as a drop."""
        chosen = ask("Search by a photo", PHOTO_FILTER)
        if not chosen:
            return None
        path = Path(chosen)
        if not path.is_file():
            self.message.emit(f"No photo at {path}")
            return None
        self.query_bar.set_image(path)
        self.query_bar.submit()
        return None

    def _name_query_photo(self, path: object) -> TaskHandle | None:
        """Name the photo just attached (taxon from the catalog) and load its thumbnail for the
        query bar's chip; both off the GUI thread, the newest photo wins."""
        if path is None:
            return None
        photo_path = Path(str(path))
        library = self.session.library
        cache = self.session.thumbnail_cache()

        def load(ctx: TaskContext) -> tuple[QueryPhoto, QImage | None]:
            from engine.indexing.thumbnails import make_thumbnail

            photo = (
                query_photo(library, photo_path)
                if library is not None
                else QueryPhoto(str(photo_path), photo_path.name)
            )
            ctx.check()
            if cache is not None:
                data = photo_thumbnail_bytes(cache, photo)
            else:
                try:
                    data = make_thumbnail(photo_path, CHIP_THUMBNAIL_SIZE)
                except Exception:  # an unreadable photo: the chip keeps its placeholder
                    data = None
            image = QImage.fromData(data) if data else None
            return photo, image if image is not None and not image.isNull() else None

        def loaded(result: tuple[QueryPhoto, QImage | None]) -> None:
            photo, image = result
            self.query_bar.show_image_name(photo_path, photo.name)
            if image is not None:
                self.query_bar.show_image_thumbnail(photo_path, QPixmap.fromImage(image))

        return self.runner.submit(
            load,
            title="Reading the query photo",
            pool=THUMBNAILS,
            group="query-photo",
            on_success=loaded,
            on_failure=lambda exc: log.info("query photo %s: %s", photo_path, exc),
        )

    def more_like_this(self, item: ResultItem) -> None:
        self.query_bar.set_image(Path(item.path))
        self.query_bar.set_text("")
        method = self.query_bar.method_key() or "text"
        self.search(
            SearchRequest(
                "",
                Path(item.path),
                method,
                self.session.settings.top_k,
                dict(self.options.get(method, {})),
            )
        )

    def edit_options(self, method_key: str) -> MethodOptionsDialog | None:
        """Open the options form of a method; what the user sets applies to its next searches."""
        from engine.methods import get_method, param_defaults

        if not method_key:
            return None
        label, description, fields = option_fields(method_key, self.options.get(method_key, {}))
        dialog = MethodOptionsDialog(label, description, fields, self.query_bar.window())
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)

        def accepted() -> None:
            from engine.methods.registry import spec_from_params

            defaults = param_defaults(get_method(method_key).Params)
            values = {n: v for n, v in dialog.values().items() if defaults.get(n) != v}
            try:
                spec_from_params(method_key, values)  # checks values (a template without {query})
            except BadInputError as exc:
                self.runner.report_error(exc, f"Setting {label}'s options")
                return
            self.options[method_key] = values
            self.message.emit(f"{label} options: " + (
                ", ".join(f"{n}={v}" for n, v in values.items()) or "defaults"
            ))  # fmt: skip

        dialog.accepted.connect(accepted)
        dialog.open()
        return dialog

    def search(self, request: SearchRequest) -> TaskHandle | None:
        """Run `request` in the background; the results replace the grid's."""
        asked = request
        prepared = self._request_to_run(request)
        if prepared is None:
            return None
        request, spec = prepared
        if request.text.strip():
            self.history.add(request.text)
            self.query_bar.set_history(self.history.items)
        self._last_request = asked
        return self._start(request, spec)

    def _request_to_run(self, request: SearchRequest) -> tuple[SearchRequest, MethodSpec] | None:
        """The request as it will run (after `prepare`) and its method spec; None, with the
        reason in the status line, when it cannot run now (kept for later when the model is
        still loading)."""
        from engine.methods.registry import spec_from_params

        if self.prepare is not None:
            request = self.prepare(request)
        try:
            spec = spec_from_params(request.method, request.params)
        except BadInputError as exc:
            self.runner.report_error(exc, "Searching")
            return None
        if reason := spec.method.unavailable_reason():
            self.message.emit(f"{spec.method.label} cannot run here: {reason}")
            return None
        if (needed := self._missing_model(spec)) is not None:
            role, reason = needed
            self.message.emit(reason)
            self.modelNeeded.emit(role, reason)
            return None
        if request.image is None and not request.text.strip():
            self.message.emit(
                "Type a few words describing what to find, or drop a photo on the query bar"
            )
            return None
        if (blocked := self.session.not_coming()) is not None:
            # Not kept for later: nothing will make it runnable until the user acts.
            self.message.emit(blocked.text)
            if blocked.choose_model:
                self.modelNeeded.emit("encoder", blocked.text)
            return None
        if not self.session.ready:
            self._pending = request
            self.message.emit("The search will run as soon as the model is ready…")
            return None
        return request, spec

    def _missing_model(self, spec: MethodSpec) -> tuple[str, str] | None:
        """VisRet on a library of real photos with no generator given or set: the role of the
        missing model and a sentence naming it (a demo library draws with the demo painter)."""
        from engine.models.spec import DEMO_ARCH

        if spec.key != "visret":
            return None
        given = str(getattr(spec.params, "generator", "") or "").strip()
        library = self.session.library
        if given or self.session.settings.generator.strip() or library is None:
            return None
        if (library.model_key or "").startswith(f"{DEMO_ARCH}:"):
            return None
        return (
            "generator",
            "VisRet needs an image generator, and none is set: download one (SD-Turbo runs "
            "on a laptop) or name yours in Settings",
        )

    def _start(self, request: SearchRequest, spec: MethodSpec) -> TaskHandle:
        """Submit the search as the newest of the "search" group and announce it."""
        from engine.methods import spec_label

        self._searches += 1
        search_id = self._searches
        run = self._search_task(request, spec, search_id)
        self._quick_rerun.stop()
        label = spec_label(spec.method, spec.params)
        self._running = (
            search_id,
            ShownResults(request.method, label, request.text, request.image),
        )
        self._update_stale()
        self.message.emit("Searching…")
        # Announced before it is submitted: an inline runner delivers the outcome within
        # `submit`, and listeners must see a search start before it finishes.
        self.searchStarted.emit(search_id, request)
        return self.runner.submit(
            run,
            title="Searching",
            pool=READ,
            group="search",
            on_success=self._show,
            on_failure=lambda exc: self._failed(exc, search_id),
            on_cancelled=lambda: self.searchStopped.emit(search_id, "cancelled"),
        )

    def _search_task(
        self, request: SearchRequest, spec: MethodSpec, search_id: int
    ) -> Callable[[TaskContext], SearchOutcome]:
        """The worker's function for one search: everything it needs is read here, on the GUI
        thread; a method's events go to the event listeners as they come."""
        session = self.session
        filters = self.filters if self.filters is not None and self.filters.active else None
        library = session.library
        assert library is not None  # searches are ready only once the library is open
        listeners = tuple(self._event_listeners)
        collapse = self.collapse
        unit = self.unit
        keep_evidence = request.method in self.evidence_kept
        if self._model_manager is None:
            from engine.methods import ModelManager

            self._model_manager = ModelManager()
        models = self._model_manager

        def notify(event: MethodEvent) -> None:
            for listener in listeners:
                listener(search_id, event)

        def run(ctx: TaskContext) -> SearchOutcome:
            from engine.catalog.reads import missing_photos
            from engine.methods import SearchJob, run_search, spec_label

            started = time.monotonic()
            job = SearchJob(
                library,
                request.query,
                session.ensure_encoder,
                spec,
                request.top_k,
                filters,
                generator=session.settings.generator,
                llm=language_model(session.settings),
                models=models,
                notify=notify,
                unit=unit,
            )
            found = run_search(job, ctx.progress, ctx.cancel)
            ranking, seconds, pairs = found.ranking, found.seconds, found.pairs()
            items = result_items(library, pairs, found.hits)
            photo = query_photo(library, request.image) if request.image is not None else None
            shown = collapse(library, items) if collapse is not None else None
            return SearchOutcome(
                request,
                items,
                seconds,
                time.monotonic() - started,
                unit_label(spec_label(spec.method, spec.params), unit),
                run_params(spec, ranking, filters, keep_evidence, unit),
                missing_photos(library).photos,
                photo,
                search_id,
                companion_runs(ranking, request.top_k),
                shown,
                matched_boxes(found),
            )

        return run

    def rerun(self) -> TaskHandle | None:
        """The search shown, again (the filters changed): the last search run from this
        window, or, after a saved run was reopened, what the query bar holds. Nothing when
        neither has words or a photo (the filters apply to the next search)."""
        if self._last_request is not None:
            return self.search(self._last_request)
        if self.query_bar.text().strip() or self.query_bar.image() is not None:
            self.query_bar.submit()
        return None

    def cancel(self) -> None:
        """Stop the search running (its late result is dropped)."""
        for handle in self.runner.active("search"):
            handle.cancel()
        self.message.emit("Search cancelled")

    def _show(self, outcome: SearchOutcome) -> None:
        self.last_outcome = outcome
        self.thumbnails.reset()
        self.model.set_results(outcome.items if outcome.shown is None else outcome.shown)
        for image_id, box in outcome.boxes.items():
            index = self.model.box_index(image_id, box)
            if index is not None:
                self.model.choose_box(image_id, index)
        request = outcome.request
        self._shown = ShownResults(
            request.method, outcome.method_label, request.text, request.image, self._grid_ids()
        )
        if self._running is not None and self._running[0] == outcome.search_id:
            self._running = None
        self._update_stale()
        count = len(outcome.items)
        events = len(outcome.shown) if outcome.shown is not None else None
        found = f"{count:,} result{'s' * (count != 1)}"
        if events is not None:
            found = f"{events:,} event{'s' * (events != 1)} ({count:,} photos)"
        self.message.emit(
            f"{found} for {outcome.searched}  ·  "
            f"{outcome.method_label}  ·  "
            f"search {outcome.seconds * 1000:.0f} ms"
            + ("  ·  filtered" if outcome.params.filters else "")
            + (
                f"  ·  {outcome.missing:,} photos missing from disk, not searched"
                if outcome.missing
                else ""
            )
        )
        self.searchFinished.emit(outcome)

    def show_results(
        self,
        items: list[ResultItem],
        text: str,
        image: Path | None,
        run: RunState | None = None,
    ) -> None:
        """Show a stored ranking (a reopened run) in the grid, its query in the query bar and
        its method in the picker (so the panels and the next Enter are that method's)."""
        self._last_request = None  # the filters' rerun now searches what the bar shows
        self._quick_rerun.stop()
        self.thumbnails.reset()
        self.model.set_results(items)
        self.resultsShown.emit(items)
        self.query_bar.set_text(text)
        self.query_bar.set_image(image)
        if run is None:
            self._shown = None
        else:
            # A method the picker does not offer (a refined run's) leaves it as it is: the
            # note under the query says what the grid shows.
            self.query_bar.set_method_key(run.method_key)
            self._shown = ShownResults(run.method_key, run.method, text, image, self._grid_ids())
        self._update_stale()

    # -- the picker and the results shown ------------------------------------------------------

    def _grid_ids(self) -> frozenset[int]:
        return frozenset(item.image_id for item in self.model.items())

    def shown_method(self) -> str | None:
        """The key of the method whose results the grid shows or the running search brings."""
        shown = self._running[1] if self._running is not None else self._shown
        return shown.key if shown is not None else None

    def _update_stale(self) -> None:
        """Say under the query when the grid holds another method's results than the picked
        one's, and how to get the picked one's."""
        shown = self._running[1] if self._running is not None else self._shown
        picked = self.query_bar.method_key()
        if shown is None or not picked or picked == shown.key or not self.model.rowCount():
            self.query_bar.set_stale("")
            return
        self.query_bar.set_stale(
            f"Results are from {shown.label} — press Enter to run "
            f"{self.query_bar.method_label(picked)}"
        )

    def _method_picked(self) -> None:
        """The user picked a method: a quick one runs the query shown again (once the picker
        settles), any other marks the grid stale."""
        if self._can_rerun_quickly():
            self.query_bar.set_stale("")
            self._quick_rerun.start()
        else:
            self._quick_rerun.stop()
            self._update_stale()

    def _can_rerun_quickly(self) -> bool:
        """The picked method is quick, nothing is searching, and the grid still shows the
        results of the words and photo in the bar (not a new query being typed, nor the
        photos of Judge next), from another method."""
        shown, bar = self._shown, self.query_bar
        picked = bar.method_key()
        return (
            picked in QUICK_METHODS
            and shown is not None
            and shown.key != picked
            and self._running is None
            and not self.runner.active("search")
            and self.session.ready
            and self._grid_ids() == shown.ids
            and bar.text().strip() == shown.text.strip()
            and bar.image() == shown.image
        )

    def _rerun_with_picked(self) -> None:
        if self._can_rerun_quickly():
            self.query_bar.submit()
        else:
            self._update_stale()

    def _on_stopped(self, search_id: int, how: str) -> None:
        if self._running is None or self._running[0] != search_id:
            return
        _, running = self._running
        self._running = None
        if how == "cancelled" and self._grid_ids() != (self._shown.ids if self._shown else None):
            # Cancelled after partial results were shown (Reranked): the grid holds them.
            self._shown = replace(running, ids=self._grid_ids())
        self._update_stale()

    def _failed(self, exc: BaseException, search_id: int = 0) -> None:
        self.searchStopped.emit(search_id, "failed")
        # A refused query (2,000 characters, a bad filter) is read whole in the message band,
        # as any failure is; the status line only says it failed.
        self.message.emit("The search failed")
        self.runner.report_error(exc, "Searching")

    # -- the detail pane -----------------------------------------------------------------------

    def show_item(self, item: ResultItem | None) -> TaskHandle | None:
        """Show `item`'s metadata now and load its large photo in the background."""
        self.detail.set_item(item)
        if item is None:
            return None
        path = item.path

        def load(ctx: TaskContext) -> QImage:
            from engine.indexing.thumbnails import load_preview

            return pil_to_qimage(load_preview(path, PREVIEW_SIZE))

        def shown(image: QImage) -> None:
            if self.detail.item() is item:
                self.detail.set_photo(QPixmap.fromImage(image))

        def failed(exc: BaseException) -> None:
            if self.detail.item() is item:
                reason = str(exc) if isinstance(exc, QuadratError) else type(exc).__name__
                self.detail.set_photo(None, f"Cannot show this photo: {reason}")

        return self.runner.submit(
            load,
            title="Loading the photo",
            pool=READ,
            group="preview",
            on_success=shown,
            on_failure=failed,
        )


def install(app: Application) -> None:
    """The query bar, the grid's search actions (More like this, Search by a photo…) and the
    keyboard path between the query bar and the grid."""
    from PySide6.QtCore import QUrl
    from PySide6.QtGui import QDesktopServices, QGuiApplication

    from app.settings import QueryHistory

    w = app.window
    search = app.search = SearchController(
        app.runner,
        app.session,
        w.query_bar,
        w.results_model,
        w.detail_pane,
        app.thumbnails,
        QueryHistory(),
    )
    w.results.currentItemChanged.connect(search.show_item)
    search.modelNeeded.connect(app.models.open_for_role)
    w.results.moreLikeThisRequested.connect(search.more_like_this)
    w.search_by_photo_action.triggered.connect(lambda: search.choose_photo(w.ask_open_file))
    # Down from the query bar into the grid, Up from its top row back.
    w.query_bar.resultsFocusRequested.connect(w.results.enter_from_above)
    w.results.leaveUpRequested.connect(lambda: w.query_bar.edit.setFocus())
    w.results.openFolderRequested.connect(
        lambda p: QDesktopServices.openUrl(QUrl.fromLocalFile(str(Path(p).parent)))
    )
    w.results.copyPathRequested.connect(lambda p: QGuiApplication.clipboard().setText(p))
    w.results.activated.connect(lambda _index: w.detail_dock.show())
    say(app, search.message)
