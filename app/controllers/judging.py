"""Saved queries, runs and relevance judgments, with live metrics.

Every search becomes a run of a saved query. The user marks photos relevant (R), not relevant
(N) or clears them (U), from the keyboard, the thumbnail toggle or the detail pane; Ctrl+Z
undoes. A judgment belongs to the query, so it shows under every method's run.

A judgment is shown at once (the model, the detail pane and the metrics panel change on the
GUI thread, in the same event) and written in the single-thread "write" pool, which commits it
before the next write starts; if the write fails the display is put back and the error
reported. Reads that must see every earlier judgment (opening a query, exports) also go
through the write pool, so they run after the writes queued before them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal

from app.controllers.session import LibrarySession
from app.controllers.thumbnails import ThumbnailLoader
from app.workers import WRITE, TaskContext, TaskHandle, TaskRunner
from widgets.detail_pane import DetailPane
from widgets.metrics_panel import MetricsPanel, MetricsView, RunMetrics
from widgets.query_bar import QueryBar
from widgets.query_list import QueryListPanel
from widgets.results import ResultItem, ResultsModel, ResultsView

log = logging.getLogger(__name__)

MORE_LIKE_THIS_METHOD = "image"
NEXT_IN_CYCLE: dict[int | None, int | None] = {None: 1, 1: 0, 0: None}


@dataclass(frozen=True)
class RunState:
    """One run of the open query, as the metrics panel needs it."""

    run_id: int
    method: str
    label: str
    ranking: list[tuple[int, float]]

    @property
    def ids(self) -> list[int]:
        return [image_id for image_id, _ in self.ranking]


@dataclass
class _Loaded:
    """What a worker read about a query (after saving a run or to reopen it)."""

    query_id: int
    title: str
    text: str
    image_path: str | None
    run_id: int | None
    runs: list[RunState]
    judgments: dict[int, int]
    queries: list[Any]
    items: list[ResultItem] | None = None  # set when the grid must show a stored run
    notes: list[str] = field(default_factory=list)


def _local_time(moment: datetime) -> str:
    if moment.tzinfo is None:  # the catalog stores UTC without a zone
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone().strftime("%H:%M")


def _run_label(run: Any) -> str:
    image = (run.params or {}).get("image")
    what = f"{run.method} · {Path(image).name}" if image else run.method
    return f"{what} · {_local_time(run.created_at)}"


def items_for_ranking(library: Any, ranking: Sequence[tuple[int, float]]) -> list[ResultItem]:
    """Result cards for a stored ranking (photos no longer in the catalog are left out)."""
    from engine.collections import photo_details

    details = photo_details(library, [image_id for image_id, _ in ranking])
    items = []
    for image_id, score in ranking:
        d = details.get(image_id)
        if d is None:
            continue
        items.append(
            ResultItem(
                rank=len(items) + 1,
                score=float(score),
                image_id=image_id,
                path=d.path,
                title=d.common_name or d.taxon or Path(d.path).name,
                content_hash=d.content_hash,
                details=d,
            )
        )
    return items


class JudgingController(QObject):
    """Owns the open query, its runs and judgments, the undo stack and the live metrics."""

    message = Signal(str)
    queryOpened = Signal(int)  # query id; its runs and judgments are loaded
    judgmentSaved = Signal(int, int, object)  # query id, image id, relevance: now durable
    metricsUpdated = Signal(object)  # MetricsView

    def __init__(
        self,
        runner: TaskRunner,
        session: LibrarySession,
        model: ResultsModel,
        view: ResultsView,
        detail: DetailPane,
        metrics: MetricsPanel,
        queries: QueryListPanel,
        query_bar: QueryBar,
        thumbnails: ThumbnailLoader,
        ask_yes_no: Callable[[str, str], bool],
    ) -> None:
        super().__init__()
        self.runner = runner
        self.session = session
        self.model = model
        self.view = view
        self.detail = detail
        self.metrics = metrics
        self.queries = queries
        self.query_bar = query_bar
        self.thumbnails = thumbnails
        self.ask_yes_no = ask_yes_no
        self._store: Any | None = None
        self.query_id: int | None = None
        self.query_title = ""
        self.runs: list[RunState] = []
        self.run_id: int | None = None
        self.judgments: dict[int, int] = {}
        self.k = metrics.k()
        self._undo: dict[int, list[Any]] = {}  # query id -> JudgmentChange stack
        self._more_like_this: tuple[str, int] | None = None  # (photo path, query id)
        self._generation = 0  # the newest search or open wins

        session.opened.connect(self._on_library_opened)
        view.currentItemChanged.connect(self._show_item_judgment)
        view.judgmentCycleRequested.connect(self.cycle)
        view.judgmentRequested.connect(lambda item, v: self.judge_item(item, v, advance=False))
        view.moreLikeThisRequested.connect(self._note_more_like_this)
        detail.moreLikeThisRequested.connect(self._note_more_like_this)
        detail.judgmentRequested.connect(lambda v: self.judge_current(v))
        metrics.kChanged.connect(self.set_k)
        metrics.runSelected.connect(self.show_run)
        queries.openRequested.connect(self.open_query)
        queries.renameRequested.connect(self.rename_query)
        queries.deleteRequested.connect(self.delete_query)
        queries.notesEdited.connect(self.set_notes)

    # -- the store -----------------------------------------------------------------------------

    @property
    def store(self) -> Any | None:
        if self._store is None and self.session.library is not None:
            from engine.queries import QueryStore

            self._store = QueryStore(self.session.library)
        return self._store

    def _on_library_opened(self) -> None:
        self.refresh_queries()

    def refresh_queries(self) -> TaskHandle | None:
        store = self.store
        if store is None:
            return None
        return self.runner.submit(
            lambda ctx: store.list_queries(),
            title="Reading the saved queries",
            pool=WRITE,
            on_success=self._show_queries,
        )

    def _show_queries(self, infos: list[Any]) -> None:
        self.queries.set_queries(infos)
        self.queries.set_current(self.query_id)

    # -- searches become runs --------------------------------------------------------------------

    def _note_more_like_this(self, item: ResultItem) -> None:
        # "More like this" while a query is open is another method for the same query.
        if self.query_id is not None:
            self._more_like_this = (item.path, self.query_id)

    def on_search_finished(self, outcome: Any) -> TaskHandle | None:
        """Save the search as a run of its query and load that query's judgments."""
        store = self.store
        if store is None:
            return None
        request = outcome.request
        image = str(request.image) if request.image is not None else None
        attach_to: int | None = None
        method = request.method
        params: dict[str, Any] = dict(outcome.params or {})
        params.setdefault("top_k", request.top_k)
        if image is not None:
            params["image"] = image
        pending, self._more_like_this = self._more_like_this, None
        if pending is not None and image == pending[0] and not request.text.strip():
            attach_to, method = pending[1], MORE_LIKE_THIS_METHOD
        # The grid now shows a new ranking: judgments of the previous query must not show on it.
        self._generation += 1
        generation = self._generation
        self.model.set_judgments(self.judgments if attach_to == self.query_id else {})
        if attach_to != self.query_id:
            self.query_id, self.runs, self.run_id, self.judgments = None, [], None, {}
            self._refresh_metrics()
        ranking = [(item.image_id, item.score) for item in outcome.items]
        model_key = self.session.model_key

        def save(ctx: TaskContext) -> _Loaded:
            query_id = (
                attach_to
                if attach_to is not None
                else store.find_or_create_query(request.text, image)
            )
            run_id = store.save_run(
                query_id,
                method,
                ranking,
                model_key=model_key,
                params=params,
                duration_ms=outcome.seconds * 1000.0,
            )
            return self._read_query(store, query_id, run_id)

        return self.runner.submit(
            save,
            title="Saving the search",
            pool=WRITE,
            on_success=lambda loaded: self._apply(loaded, generation),
        )

    @staticmethod
    def _read_query(store: Any, query_id: int, run_id: int | None) -> _Loaded:
        infos = store.list_queries()
        info = next((q for q in infos if q.id == query_id), None)
        latest = store.latest_runs_by_method(query_id)
        runs = sorted(latest.values(), key=lambda r: r.id)
        if run_id is not None and all(r.id != run_id for r in runs):
            # An older run of a method was asked for: show it beside the latest of the others.
            older = next((r for r in store.runs_for(query_id) if r.id == run_id), None)
            if older is not None:
                runs = sorted(
                    [r for r in runs if r.method != older.method] + [older], key=lambda r: r.id
                )
        if run_id is None and runs:
            run_id = runs[-1].id
        return _Loaded(
            query_id=query_id,
            title=info.title if info else "",
            text=info.text if info else "",
            image_path=info.image_path if info else None,
            run_id=run_id,
            runs=[RunState(r.id, r.method, _run_label(r), list(r.ranking)) for r in runs],
            judgments=store.judgments(query_id),
            queries=infos,
        )

    def _apply(self, loaded: _Loaded, generation: int) -> None:
        if generation != self._generation:
            return  # a newer search or open replaced this one
        if loaded.items is not None:
            self.thumbnails.reset()
            self.model.set_results(loaded.items)
            self.query_bar.set_text(loaded.text)
            self.query_bar.set_image(Path(loaded.image_path) if loaded.image_path else None)
        self.query_id = loaded.query_id
        self.query_title = loaded.title
        self.runs = loaded.runs
        self.run_id = loaded.run_id
        self.judgments = dict(loaded.judgments)
        self.model.set_judgments(self.judgments)
        self._show_queries(loaded.queries)
        self.queries.select(loaded.query_id)  # its notes are the ones shown for editing
        self._show_item_judgment(self.view.current_item())
        self._refresh_metrics()
        if loaded.items is not None:
            run = self._run(loaded.run_id)
            self.message.emit(
                f"Opened “{loaded.title}”: {run.label if run else 'no runs yet'}  ·  "
                f"{len(self.judgments)} judged"
            )
        self.queryOpened.emit(loaded.query_id)

    # -- opening queries and runs ------------------------------------------------------------------

    def open_query(self, query_id: int, run_id: int | None = None) -> TaskHandle | None:
        """Show a saved query's run (default: its newest) with its judgments."""
        store, library = self.store, self.session.library
        if store is None:
            return None
        self._generation += 1
        generation = self._generation

        def load(ctx: TaskContext) -> _Loaded:
            loaded = self._read_query(store, query_id, run_id)
            run = next((r for r in loaded.runs if r.run_id == loaded.run_id), None)
            loaded.items = items_for_ranking(library, run.ranking if run else [])
            return loaded

        return self.runner.submit(
            load,
            title="Opening the query",
            pool=WRITE,
            on_success=lambda loaded: self._apply(loaded, generation),
        )

    def show_run(self, run_id: int) -> TaskHandle | None:
        """Show another run of the open query in the grid (the judgments stay)."""
        if self.query_id is None or run_id == self.run_id:
            return None
        return self.open_query(self.query_id, run_id)

    def _run(self, run_id: int | None) -> RunState | None:
        return next((r for r in self.runs if r.run_id == run_id), None)

    # -- the query list ----------------------------------------------------------------------------

    def rename_query(self, query_id: int, name: str) -> TaskHandle | None:
        store = self.store
        if store is None:
            return None

        def rename(ctx: TaskContext) -> list[Any]:
            store.rename_query(query_id, name)
            return store.list_queries()

        def renamed(infos: list[Any]) -> None:
            self._show_queries(infos)
            if query_id == self.query_id:
                info = next((q for q in infos if q.id == query_id), None)
                self.query_title = info.title if info else self.query_title
                self._refresh_metrics()

        return self.runner.submit(
            rename, title="Renaming the query", pool=WRITE, on_success=renamed
        )

    def set_notes(self, query_id: int, notes: str) -> TaskHandle | None:
        store = self.store
        if store is None:
            return None
        return self.runner.submit(
            lambda ctx: store.set_notes(query_id, notes),
            title="Saving the notes",
            pool=WRITE,
            on_success=lambda _r: self.queries.note_saved(query_id, notes),
        )

    def delete_query(self, query_id: int) -> TaskHandle | None:
        store = self.store
        if store is None:
            return None
        info = self.queries.item_for(query_id)
        title = info.text(0) if info is not None else str(query_id)
        if not self.ask_yes_no(
            "Delete the query?",
            f"Delete “{title}” with its runs and judgments? This cannot be undone.",
        ):
            return None

        def delete(ctx: TaskContext) -> list[Any]:
            store.delete_query(query_id)
            return store.list_queries()

        def deleted(infos: list[Any]) -> None:
            self._undo.pop(query_id, None)
            if query_id == self.query_id:
                self.query_id, self.runs, self.run_id, self.judgments = None, [], None, {}
                self.model.set_judgments({})
                self._show_item_judgment(self.view.current_item())
                self._refresh_metrics()
            self._show_queries(infos)
            self.message.emit(f"Deleted the query “{title}”")

        return self.runner.submit(
            delete, title="Deleting the query", pool=WRITE, on_success=deleted
        )

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

    def judge_item(self, item: ResultItem, relevance: int | None, advance: bool = False) -> None:
        if self.judge(item.image_id, relevance) is not None and advance:
            row = self.model.row_of(item.image_id)
            if row is not None:
                self.view.select_row(row + 1)

    def judge(self, image_id: int, relevance: int | None) -> TaskHandle | None:
        """Mark a photo for the open query; shown now, committed by the write pool."""
        store = self.store
        if store is None or self.query_id is None:
            self.message.emit("Run a search (or open a saved query) before judging photos")
            return None
        from engine.queries import JudgmentChange

        query_id = self.query_id
        previous = self.judgments.get(image_id)
        change = JudgmentChange(query_id, image_id, previous, relevance)
        self._undo.setdefault(query_id, []).append(change)
        self._show_judgment(query_id, image_id, relevance)
        return self._write(change, lambda: self._forget_change(change))

    def undo(self) -> TaskHandle | None:
        """Put back the judgment the last R / N / U of the open query replaced."""
        stack = self._undo.get(self.query_id) if self.query_id is not None else None
        if not stack:
            self.message.emit("Nothing to undo")
            return None
        from engine.queries import JudgmentChange

        change = stack.pop()
        back = JudgmentChange(change.query_id, change.image_id, change.current, change.previous)
        self._show_judgment(change.query_id, change.image_id, change.previous)
        row = self.model.row_of(change.image_id)
        if row is not None:
            self.view.select_row(row)
        return self._write(back, lambda: stack.append(change))

    def _write(self, change: Any, on_reverted: Callable[[], None]) -> TaskHandle:
        store = self.store
        assert store is not None

        def write(ctx: TaskContext) -> Any:
            return store.judge(change.query_id, change.image_id, change.current)

        def saved(_result: Any) -> None:
            self.judgmentSaved.emit(change.query_id, change.image_id, change.current)

        def failed(exc: BaseException) -> None:
            # Not in the database: show what is stored, say why.
            if self.judgments.get(change.image_id) == change.current:
                self._show_judgment(change.query_id, change.image_id, change.previous)
            on_reverted()
            if self.runner.error_handler is not None:
                self.runner.error_handler(exc, "Saving the judgment")

        # Never cancelled or superseded: every judgment must reach the database, in order.
        return self.runner.submit(
            write, title="Saving the judgment", pool=WRITE, on_success=saved, on_failure=failed
        )

    def _forget_change(self, change: Any) -> None:
        stack = self._undo.get(change.query_id, [])
        if change in stack:
            stack.remove(change)

    def _show_judgment(self, query_id: int, image_id: int, relevance: int | None) -> None:
        if query_id != self.query_id:
            return
        if relevance is None:
            self.judgments.pop(image_id, None)
        else:
            self.judgments[image_id] = relevance
        self.model.set_judgment(image_id, relevance)
        current = self.detail.item()
        if current is not None and current.image_id == image_id:
            self.detail.set_judgment(relevance, True)
        relevant = sum(1 for v in self.judgments.values() if v > 0)
        self.queries.update_counts(query_id, len(self.runs), relevant, len(self.judgments))
        self._refresh_metrics()

    def _show_item_judgment(self, item: ResultItem | None) -> None:
        if item is not None:
            self.detail.set_judgment(self.judgments.get(item.image_id), self.query_id is not None)

    # -- metrics -----------------------------------------------------------------------------------

    def set_k(self, k: int) -> None:
        self.k = k
        self.metrics.set_k_choice(k)
        self._refresh_metrics()

    def metrics_view(self) -> MetricsView | None:
        """The numbers the panel shows, computed from the runs and judgments in memory."""
        store = self.store
        if store is None or self.query_id is None:
            return None
        rows = []
        for run in self.runs:
            ids = run.ids
            live = store.live_metrics(ids, self.judgments, self.k, run.run_id)
            m = live.metrics
            last_relevant = max(
                (rank for rank, i in enumerate(ids, start=1) if self.judgments.get(i, 0) > 0),
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
            relevant=sum(1 for v in self.judgments.values() if v > 0),
            judged=len(self.judgments),
            current_run_id=self.run_id,
            runs=rows,
        )

    def _refresh_metrics(self) -> None:
        view = self.metrics_view()
        self.metrics.show_metrics(view)
        self.metricsUpdated.emit(view)

    # -- import and export -------------------------------------------------------------------------

    def export_judgments(self, path: str | Path, all_queries: bool = True) -> TaskHandle | None:
        """Judgments as INQUIRE-style CSV, or TREC qrels when the file ends in .qrels/.txt."""
        library = self.session.library
        if library is None:
            return None
        path = Path(path)
        fmt = "qrels" if path.suffix.lower() in (".qrels", ".txt") else "csv"
        query_ids = None if all_queries or self.query_id is None else [self.query_id]

        def export(ctx: TaskContext) -> int:
            from engine.export import export_judgments

            return export_judgments(library, path, query_ids, fmt)

        return self.runner.submit(
            export,
            title="Exporting the judgments",
            pool=WRITE,  # after every judgment queued before it
            on_success=lambda n: self.message.emit(f"Wrote {n:,} judgments to {path}"),
        )

    def export_results(self, path: str | Path) -> TaskHandle | None:
        """The shown run with judgments and metadata as CSV."""
        library = self.session.library
        run = self._run(self.run_id)
        if library is None or run is None:
            self.message.emit("Run a search first: there are no results to export")
            return None
        ranking, judgments = list(run.ranking), dict(self.judgments)

        def export(ctx: TaskContext) -> int:
            from engine.export import export_results_csv

            return export_results_csv(library, path, ranking, judgments)

        return self.runner.submit(
            export,
            title="Exporting the results",
            pool=WRITE,
            on_success=lambda n: self.message.emit(f"Wrote {n:,} results to {path}"),
        )

    def import_judgments(
        self, queries_file: str | Path | None, judgments_file: str | Path | None
    ) -> TaskHandle | None:
        """Benchmark queries become saved queries, their judgments attached; without a queries
        file, judgments attach to saved queries by id (a Quadrat export read back)."""
        library = self.session.library
        if library is None:
            return None

        def do_import(ctx: TaskContext) -> Any:
            from engine.export import import_benchmark

            return import_benchmark(library, queries_file, judgments_file)

        def imported(report: Any) -> None:
            note = (
                f", {report.unresolved:,} name photos not in the library"
                if report.unresolved
                else ""
            )
            self.message.emit(
                f"Imported {report.queries:,} queries and {report.judgments:,} judgments{note}"
            )
            if self.query_id is not None and self.query_id in report.query_ids.values():
                self.open_query(self.query_id, self.run_id)
            else:
                self.refresh_queries()

        return self.runner.submit(
            do_import, title="Importing judgments", pool=WRITE, on_success=imported
        )

    def copy_relevant(self, dest: str | Path) -> TaskHandle | None:
        """Copy the photos judged relevant for the open query into `dest`."""
        library, query_id = self.session.library, self.query_id
        if library is None or query_id is None:
            self.message.emit("Open a query first")
            return None

        def copy(ctx: TaskContext) -> list[Path]:
            from engine.export import copy_relevant_photos

            return copy_relevant_photos(library, query_id, dest)

        return self.runner.submit(
            copy,
            title="Copying the relevant photos",
            pool=WRITE,
            on_success=lambda paths: self.message.emit(_copied_message(paths, dest)),
        )


def _copied_message(paths: list[Path], dest: str | Path) -> str:
    missing = getattr(paths, "missing", 0)
    gone = f"; {missing:,} are missing from disk and were not copied" if missing else ""
    return f"Copied {len(paths):,} photos to {dest}{gone}"
