"""Collections: listing their counts, adding (indexing), re-scanning, removing; the demo.

Indexing and removals run on the single write pool, one after another; the counts are read
on the read pool. One indexing run is active at a time; more folders queue behind it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal

from app import paths
from app.controllers.install import asker, say
from app.controllers.session import LibrarySession
from app.workers import READ, WRITE, TaskContext, TaskHandle, TaskRunner
from engine.indexing.coco import READING_METADATA
from engine.progress import Progress
from widgets.library_panel import (
    DONE,
    FAILED,
    RUNNING,
    STOPPED,
    WAITING,
    IndexingRow,
    LibraryPanel,
)

if TYPE_CHECKING:
    from app.controllers.application import Application
    from engine.catalog.library import Library
    from engine.catalog.reads import MissingPhotos
    from engine.indexing.collections import CollectionStats, MovedCollection
    from engine.indexing.report import IndexReport

log = logging.getLogger(__name__)

WAITING_FOR_MODEL = "waiting for a model"  # a folder's row while the model gate holds it


@dataclass(frozen=True)
class IndexOutcome:
    report: IndexReport
    model_key: str | None
    model_spec: str | None


class LibraryController(QObject):
    """Connects the library panel to the engine."""

    indexingStarted = Signal(str)
    indexingFinished = Signal(object)  # IndexOutcome, or None when it failed
    runChanged = Signal(object)  # the IndexingRow of a folder whose run state or progress changed
    statsChanged = Signal(list)
    message = Signal(str)  # for the status line

    def __init__(
        self,
        runner: TaskRunner,
        session: LibrarySession,
        panel: LibraryPanel,
        ask: Callable[[str, str], bool],
    ) -> None:
        super().__init__()
        self.runner = runner
        self.session = session
        self.panel = panel
        self._ask = ask  # (title, text) -> bool
        self._index_tasks: list[TaskHandle] = []
        # Asked before an indexing run starts: (folder, start) -> True to start now; False when
        # the model is not on disk and `start` runs once one is (the models controller).
        self.model_gate: Callable[[Path, Callable[[], object]], bool] | None = None
        self.last_report: IndexReport | None = None
        self.stats: list[CollectionStats] = []
        panel.addFolderRequested.connect(self.add_folder)
        panel.rescanRequested.connect(self.rescan)
        panel.removeRequested.connect(self.remove)
        panel.forgetMissingRequested.connect(self.forget_missing)
        panel.progress.cancelRequested.connect(self.cancel_indexing)
        session.opened.connect(self.refresh)

    # -- counts -----------------------------------------------------------------------------------

    def refresh(self) -> TaskHandle | None:
        library = self.session.library
        if library is None:
            return None

        def read(ctx: TaskContext) -> list[CollectionStats]:
            from engine.indexing.collections import collection_stats

            return collection_stats(library, self.session.model_key, scan_disk=True)

        return self.runner.submit(
            read,
            title="Counting photos",
            pool=READ,
            group="collection-stats",
            on_success=self._show_stats,
        )

    def _show_stats(self, stats: list[CollectionStats]) -> None:
        self.stats = stats
        for run in self.panel.runs():
            if run.state == DONE:  # kept until now so the row never blinks out
                self.panel.clear_run(run.root)
        self.panel.set_collections(stats)
        self.statsChanged.emit(stats)

    # -- indexing ----------------------------------------------------------------------------------

    @property
    def indexing(self) -> bool:
        return any(not h.done for h in self._index_tasks)

    def add_folder(self, folder: str | Path) -> TaskHandle | None:
        """Index a folder the user added. If it looks like a collection whose folder was moved
        or renamed, ask whether it is that collection (its judgments follow) or a new one."""
        folder = Path(folder).expanduser()
        if not folder.is_dir():
            self.message.emit(f"Not a folder: {folder}")
            return None
        self.show_waiting(folder)  # listed at once, before anything is read
        library = self.session.library
        if library is None:
            return self.index_folder(folder)

        def look(ctx: TaskContext) -> MovedCollection | None:
            from engine.indexing.collections import find_moved_collection

            return find_moved_collection(library, folder)

        def failed(exc: BaseException) -> None:
            self._set_run(folder, FAILED, f"failed: {_one_line(exc)}")
            self.runner.report_error(exc, f"Adding {folder.name}")

        return self.runner.submit(
            look,
            title=f"Looking at {folder.name}",
            pool=READ,
            on_success=lambda moved: self._index_added(folder, moved),
            on_failure=failed,
        )

    def _index_added(self, folder: Path, moved: MovedCollection | None) -> None:
        if moved is None:
            self.index_folder(folder)
            return
        same = self._ask(
            "A moved collection?",
            f"“{folder.name}” holds {moved.matched:,} photos of the collection “{moved.name}”, "
            f"whose folder {moved.old_root} is gone.\n\nTreat it as that collection, moved "
            "here? Its photos keep their judgments and appear once in results.\n\n"
            "Choose No to add it as a new collection.",
        )
        self.index_folder(folder, relocate=same)

    def rescan(self, collection_id: int) -> TaskHandle | None:
        stats = self.panel.stats(collection_id)
        return self.index_folder(Path(stats.root)) if stats is not None else None

    def index_folder(
        self,
        folder: Path,
        *,
        reindex: bool = False,
        metadata: Path | None = None,
        relocate: bool = True,
    ) -> TaskHandle | None:
        """Index `folder` (new photos, changes, removals); progress shows in the panel and on
        the folder's row, listed from now on. None: the run waits (for the library to open, or
        for a model on disk) and starts by itself."""
        session = self.session
        self.show_waiting(folder)
        batch_size, decode = session.settings.batch_size, session.settings.decode

        def run(ctx: TaskContext) -> IndexOutcome:
            from engine.indexing.indexer import Indexer

            ctx.progress(Progress(0, 0, message="loading the model"))
            encoder = session.model_encoder()  # both towers: photos are encoded
            library = session.library
            assert library is not None
            indexer = Indexer(library, encoder, batch_size=batch_size, decode=decode)
            report = indexer.run(
                folder,
                metadata=metadata,
                reindex=reindex,
                relocate=relocate,
                progress=ctx.progress,
                cancel=ctx.cancel,
            )
            return IndexOutcome(report, library.model_key, library.model_spec)

        def when_library_open() -> TaskHandle | None:
            gate = self.model_gate
            if gate is not None and not gate(folder, lambda: self._submit_index(run, folder)):
                return None  # waits for a model on disk
            return self._submit_index(run, folder)

        if session.library is None:
            # Still opening: queue behind the start-up (the write pool runs tasks in order).
            holder: list[TaskHandle | None] = []

            def start() -> None:
                session.opened.disconnect(start)
                holder.append(self._waiting_for_model(folder, when_library_open()))

            session.opened.connect(start)
            self.message.emit(f"{folder.name} will be indexed once the library is open")
            self.show_waiting(folder, "waiting for the library to open…")
            return None
        return self._waiting_for_model(folder, when_library_open())

    def _waiting_for_model(self, folder: Path, handle: TaskHandle | None) -> TaskHandle | None:
        """No task: the model gate keeps the folder until a model is on disk; its row says so."""
        if handle is None:
            self.show_waiting(folder, WAITING_FOR_MODEL)
        return handle

    def _submit_index(self, run: Callable[[TaskContext], IndexOutcome], folder: Path) -> TaskHandle:
        name = folder.name or str(folder)
        handle = self.runner.submit(
            run,
            title=f"Indexing {name}",
            pool=WRITE,
            on_success=lambda outcome: self._index_done(outcome, folder),
            on_failure=lambda exc: self._index_failed(exc, name, folder),
            on_progress=lambda p: self._index_progress(p, folder),
            on_cancelled=lambda: self._index_done(None, folder),
        )
        handle.started_title = f"Indexing {name}"  # type: ignore[attr-defined]
        self._index_tasks.append(handle)
        if len([h for h in self._index_tasks if not h.done]) == 1:
            self.panel.progress.start(f"Indexing {name}")
        self.panel.set_busy(True)
        self.session.indexing = True
        self.session.update_ready()
        self.indexingStarted.emit(name)
        self.message.emit(f"Indexing {name}…")
        return handle

    def _index_progress(self, p: Progress, folder: Path | None = None) -> None:
        if p.message == READING_METADATA:  # bytes of the metadata file: shown in MB
            megabytes = p.done // 1_000_000, p.total // 1_000_000
            self.panel.progress.update_progress(*megabytes, 0.0, None, "reading metadata (MB)")
        else:
            self.panel.progress.update_progress(p.done, p.total, p.rate, p.eta_seconds, p.message)
        if folder is not None:
            self._set_run(folder, RUNNING, _progress_text(p))

    # -- the folder's row while it is indexed ---------------------------------------------------

    def show_waiting(self, folder: Path, text: str = "waiting…") -> None:
        """List `folder` with a waiting state (queued, or held for a model: "waiting for a
        model"); the run's progress replaces it."""
        self._set_run(folder, WAITING, text)

    def _set_run(self, folder: Path, state: str, text: str) -> None:
        root = _root_of(folder)
        row = IndexingRow(root, Path(root).name or root, state, text)
        self.panel.set_run(row)
        self.runChanged.emit(row)

    def _finish_one(self) -> None:
        self._index_tasks = [h for h in self._index_tasks if not h.done]
        if self._index_tasks:
            self.panel.progress.start(getattr(self._index_tasks[0], "started_title", "Indexing"))
        else:
            self.panel.progress.finish()
            self.panel.set_busy(False)
            self.session.indexing = False

    def _index_done(self, outcome: IndexOutcome | None, folder: Path | None = None) -> None:
        self._finish_one()
        if folder is not None:
            self._show_end(folder, outcome.report if outcome is not None else None)
        if outcome is None:
            self.session.update_ready()
        if outcome is not None:
            self.last_report = outcome.report
            report = outcome.report
            self.session.note_library_model(outcome.model_key, outcome.model_spec)
            text = report.status_line()
            self.message.emit(f"{Path(report.collection).name}: {text}")
        self.refresh()
        self.indexingFinished.emit(outcome)

    def _show_end(self, folder: Path, report: IndexReport | None) -> None:
        """A finished run's row turns plain at the next counts; a stopped one stays listed."""
        if report is None:  # cancelled before it began
            self._set_run(folder, STOPPED, "not indexed (stopped) — Resume indexing to go on")
        elif report.cancelled:
            done = report.catalog_indexed + report.catalog_skipped
            self._set_run(
                folder,
                STOPPED,
                f"stopped at {done:,} of {report.total_files:,} — Resume indexing to go on",
            )
        else:
            self._set_run(folder, DONE, "done")

    def _index_failed(self, exc: BaseException, name: str, folder: Path | None = None) -> None:
        if folder is not None:
            self._set_run(folder, FAILED, f"failed: {_one_line(exc)}")
        self._finish_one()
        self.session.update_ready()
        self.refresh()
        self.indexingFinished.emit(None)
        self.message.emit(f"Indexing {name} failed")
        self.runner.report_error(exc, f"Indexing {name}")

    def cancel_indexing(self) -> None:
        """Stop the running and queued indexing runs; committed photos are kept."""
        for handle in self._index_tasks:
            handle.token.cancel()  # not `cancel()`: the report of a cancelled run still counts
        self.message.emit("Stopping…")

    def reindex_all(self) -> None:
        """Re-encode every collection with the session's search model (after a model change)."""
        roots = [Path(s.root) for s in self.stats]
        for number, root in enumerate(roots):
            self.index_folder(root, reindex=number == 0)

    # -- removal ---------------------------------------------------------------------------------

    def remove(self, collection_id: int, *, confirm: bool = True) -> TaskHandle | None:
        stats = self.panel.stats(collection_id)
        if stats is None:
            return None
        if self.indexing:
            self.message.emit(
                "Wait for indexing to finish (or cancel it) before removing a collection"
            )
            return None
        if confirm and not self._ask(
            "Remove collection",
            f"Remove “{stats.name}” from the library?\n\n{stats.indexed:,} indexed photos will be "
            "forgotten. The photo files themselves are not touched.",
        ):
            return None
        library = self.session.library
        if library is None:  # not open yet: nothing is listed to remove
            return None

        def run(ctx: TaskContext) -> tuple[int, str | None, str | None]:
            from engine.indexing.collections import remove_collection

            removed = remove_collection(library, collection_id)
            return removed, library.model_key, library.model_spec

        def done(result: tuple[int, str | None, str | None]) -> None:
            removed, key, spec = result
            self.message.emit(f"Removed {stats.name} ({removed:,} photos)")
            self.session.note_library_model(key, spec)
            self.refresh()

        return self.runner.submit(run, title=f"Removing {stats.name}", pool=WRITE, on_success=done)

    def forget_missing(self, collection_id: int, *, confirm: bool = True) -> TaskHandle | None:
        """Forget the photos of a collection whose files are gone, after the user confirms."""
        stats = self.panel.stats(collection_id)
        library = self.session.library
        if stats is None or library is None or not getattr(stats, "missing", 0):
            return None
        if self.indexing:
            self.message.emit("Wait for indexing to finish (or cancel it) before forgetting photos")
            return None

        def count(ctx: TaskContext) -> tuple[MissingPhotos, str | None]:
            from engine.catalog.reads import missing_photos, unmounted_reason

            return missing_photos(library, collection_id), unmounted_reason(library, collection_id)

        def ask(counted: tuple[MissingPhotos, str | None]) -> None:
            found, unmounted = counted
            if not found.photos:
                self.refresh()
                return
            judged = (
                f"\n\n{found.judgments:,} judgments on them will be deleted too."
                if found.judgments
                else ""
            )
            if confirm and not self._ask(
                "Forget missing photos",
                f"Forget {found.photos:,} photos of “{stats.name}” whose files are gone from "
                f"disk?{judged}\n\nIf the files come back later (a drive reconnected), they "
                "will be new photos without these judgments. A backup of the catalog is made "
                "first.",
            ):
                return
            # A folder that looks unmounted is forgotten only on a second, explicit answer
            # (without a dialog, the engine refuses it).
            anyway = bool(unmounted) and confirm
            reason = unmounted or ""
            if anyway and not self._ask(
                "Forget photos of a folder that looks unmounted?",
                f"{reason[0].upper()}{reason[1:]}.\n\nMount it and rescan instead, unless "
                f"the files are really gone. Forget the {found.photos:,} photos anyway?",
            ):
                return
            self._forget(library, collection_id, stats.name, even_if_unmounted=anyway)

        return self.runner.submit(count, title="Counting missing photos", pool=READ, on_success=ask)

    def _forget(
        self, library: Library, collection_id: int, name: str, *, even_if_unmounted: bool = False
    ) -> TaskHandle:
        def run(ctx: TaskContext) -> MissingPhotos:
            from engine.indexing.collections import forget_missing

            return forget_missing(library, collection_id, even_if_unmounted=even_if_unmounted)

        def done(forgotten: MissingPhotos) -> None:
            self.message.emit(
                f"Forgot {forgotten.photos:,} missing photos of {name} "
                f"({forgotten.judgments:,} judgments)"
            )
            self.refresh()

        return self.runner.submit(run, title=f"Forgetting missing photos of {name}", pool=WRITE,
                                  on_success=done)  # fmt: skip

    # -- the demo collection -----------------------------------------------------------------------

    def open_demo(self) -> TaskHandle:
        """Write the demo collection on first use, then index it (incremental afterwards)."""
        dest = paths.demo_collection_dir()

        def write(ctx: TaskContext) -> Path:
            from engine.demo.collection import write_demo_collection

            return write_demo_collection(dest, progress=ctx.progress).root

        def written(root: Path) -> None:
            self.panel.progress.finish()
            self.index_folder(Path(root))

        def failed(exc: BaseException) -> None:
            self.panel.progress.finish()
            self._set_run(dest, FAILED, f"failed: {_one_line(exc)}")
            self.runner.report_error(exc, "Writing the demo collection")

        self.panel.progress.start("Preparing the demo collection")
        self.show_waiting(dest, "preparing the demo collection…")
        return self.runner.submit(
            write,
            title="Writing the demo collection",
            pool=WRITE,
            on_success=written,
            on_progress=self._index_progress,
            on_failure=failed,
        )


def _root_of(folder: Path) -> str:
    """The folder as the collection's root reads (the indexer resolves it the same way)."""
    try:
        return str(Path(folder).expanduser().resolve())
    except OSError:
        return str(Path(folder).expanduser().absolute())


def _progress_text(p: Progress) -> str:
    """What a folder's row says during its run: photos done of total, or the step."""
    if p.message == "loading the model":
        return "waiting for the model to load…"
    if p.message == "scanning folder":
        return "looking for photos…"
    if p.message == "building the search index":
        return "building the search index…"
    if p.message == READING_METADATA and p.total > 0:
        return (
            f"reading metadata: {p.done / 1e6:,.0f} of {p.total / 1e6:,.0f} MB "
            f"({100 * p.done // p.total} %)"
        )
    if p.total > 0:
        return f"{p.done:,} of {p.total:,} photos ({100 * p.done // p.total} %)"
    return "checking for changes…"


def _one_line(exc: BaseException) -> str:
    """The first line of an error, short enough for a row."""
    text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return text if len(text) <= 160 else text[:157] + "…"


def install(app: Application) -> None:
    """The Library pane: folders, indexing runs and their progress."""
    app.library = LibraryController(app.runner, app.session, app.window.library_panel, asker(app))
    say(app, app.library.message)
