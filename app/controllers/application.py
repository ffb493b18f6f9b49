"""Builds one running Quadrat: the window, the shared task runner, the library session and the
open query, then installs the features (the composition root).

Each feature installs itself (`install(app)` beside its controller, listed in
app/controllers/features.py): it makes its controller and connects its own actions, menus and
signals; a new feature is a module and one line in that list.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QSettings

from app import paths
from app.controllers.errors import ErrorReporter
from app.controllers.library import WAITING_FOR_MODEL
from app.controllers.models import model_choices, reindex_question
from app.controllers.open_query import OpenQuery
from app.controllers.session import EncoderLoader, LibrarySession
from app.controllers.thumbnails import ThumbnailLoader
from app.settings import (
    DEVICES,
    MAX_BATCH_SIZE,
    RecentFolders,
    Settings,
    load_settings,
    save_settings,
)
from app.workers import WRITE, TaskRunner
from engine.errors import QuadratError
from widgets.library_panel import RUNNING, WAITING
from widgets.main_window import WINDOW_TITLE, MainWindow
from widgets.settings_dialog import SettingsChoices, SettingsDialog, SettingsValues

if TYPE_CHECKING:
    from app.controllers.agreement import AgreementController
    from app.controllers.analyses import AnalysesController
    from app.controllers.attribute_questions import AttributeQuestionsController
    from app.controllers.attributes import AttributesController
    from app.controllers.backups import BackupsController
    from app.controllers.benchmark import BenchmarkController
    from app.controllers.boxes import BoxesController
    from app.controllers.camtrap_open import CamtrapOpenController
    from app.controllers.certify import CertifyController
    from app.controllers.deployments import DeploymentsController
    from app.controllers.events import EventsController
    from app.controllers.feedback import FeedbackController
    from app.controllers.filters import FiltersController
    from app.controllers.full_view import FullViewController
    from app.controllers.install import Install
    from app.controllers.judging import JudgingController
    from app.controllers.library import LibraryController
    from app.controllers.models import ModelsController
    from app.controllers.queries import SavedQueriesController
    from app.controllers.records import RecordsController
    from app.controllers.rerank import RerankController
    from app.controllers.search import SearchController
    from app.controllers.sidecars import SidecarsController
    from app.controllers.transfer import TransferController
    from app.controllers.visret import VisRetController
    from engine.models.store import ModelStore
    from widgets.benchmark_view import BenchmarkDialog

log = logging.getLogger(__name__)

DEMO_MODEL = "demo"


def _edited(settings: Settings, values: SettingsValues | None) -> Settings | None:
    """`settings` with the values edited in the settings dialog (None: cancelled)."""
    return None if values is None else replace(settings, **asdict(values))


def _problems(settings: Settings, values: SettingsValues) -> list[str]:
    """What is wrong with the values edited in the settings dialog (empty: nothing)."""
    return replace(settings, **asdict(values)).problems()


def _window_settings() -> QSettings:
    """Window geometry only, in an INI file beside the settings (never the registry)."""
    return QSettings(str(paths.config_dir() / "window.ini"), QSettings.Format.IniFormat)


class Application:
    """The window, the controllers and the shared task runner of one running Quadrat."""

    # The features' controllers, each set by its feature's `install`.
    library: LibraryController
    camtrap_open: CamtrapOpenController
    models: ModelsController
    search: SearchController
    judging: JudgingController
    attributes: AttributesController
    transfers: TransferController
    questions: AttributeQuestionsController
    sidecars: SidecarsController
    backups: BackupsController
    deployments: DeploymentsController
    full_view: FullViewController
    visret: VisRetController
    rerank: RerankController
    queries: SavedQueriesController
    filters: FiltersController
    feedback: FeedbackController
    agreement: AgreementController
    records: RecordsController
    certify: CertifyController
    analyses: AnalysesController
    events: EventsController
    boxes: BoxesController
    benchmark: BenchmarkController

    def __init__(
        self,
        *,
        folder: Path | None = None,
        demo: bool = False,
        settings: Settings | None = None,
        log_file: Path | None = None,
        encoder_loader: EncoderLoader | None = None,
        model_store: ModelStore | None = None,
        features: Sequence[Install] | None = None,
    ) -> None:
        problems: list[str] = []
        if settings is None:
            loaded = load_settings()
            settings, problems = loaded.settings, loaded.problems
        self.settings = settings
        self.demo = demo
        self.folder = folder
        self.model_store = model_store
        self.window = MainWindow()
        self.window.set_folder_memory(RecentFolders())  # dialogs open where last used
        self.log_file = log_file
        # Every failure of background work: logged, and said in the window's message band.
        self.errors = ErrorReporter(self.window.show_message, log_file)
        self.runner = TaskRunner(error_handler=self.errors)
        self.library_dir = paths.demo_library_dir() if demo else settings.library_path()
        self.session = LibrarySession(
            self.runner,
            self.library_dir,
            settings,
            fixed_model=DEMO_MODEL if demo else None,
            encoder_loader=encoder_loader,
        )
        self.thumbnails = ThumbnailLoader(self.runner, self.session.thumbnail_cache)
        # The open query: its id, title, runs and judgments (read by most features).
        self.open_query = OpenQuery()
        self._startup_problems = problems
        self._closed = False
        self._indexed_once = False
        if features is None:
            from app.controllers.features import FEATURES

            features = FEATURES
        for install in features:
            install(self)
        self.window.close_guard = self.confirm_close
        self.window.setWindowTitle(
            f"{WINDOW_TITLE} — demo collection" if demo else f"{WINDOW_TITLE} — {self.library_dir}"
        )

    # -- life cycle -------------------------------------------------------------------------------

    def show(self) -> None:
        self.window.restore_geometry(_window_settings())
        self.window.show()
        self.window.query_bar.edit.setFocus()
        self.window.activateWindow()

    def start(self) -> None:
        """Begin loading in the background (call once the window is shown)."""
        self.session.start()
        if self.demo:
            self.library.open_demo()
        elif self.folder is not None:
            self.library.add_folder(self.folder)
        if self._startup_problems:
            self.errors.report(
                QuadratError("\n".join(self._startup_problems)), "Reading the settings"
            )

    def _on_opened(self) -> None:
        """Say in the empty results area what the user can do now (or how indexing goes)."""
        if self.session.model_key is not None:
            if self.window.results_model.rowCount() == 0:
                self.window.show_empty("Type what you are looking for and press Enter.")
            return
        self.window.show_empty(self._nothing_to_search_yet())

    def _say_how_indexing_goes(self) -> None:
        """A run's progress or the counts changed: the results area follows while there is
        nothing to search yet (afterwards it keeps what the last search said)."""
        if self.session.model_key is None:
            self.window.show_empty(self._nothing_to_search_yet())

    def _nothing_to_search_yet(self) -> str:
        """What the results area says while the library has no vectors: the folder being
        indexed and how far, one waiting for a model, an unfinished one, or an empty library."""
        runs = self.window.library_panel.runs()
        going = [r for r in runs if r.state == RUNNING] + [r for r in runs if r.state == WAITING]
        if going:
            row = going[0]
            if row.text == WAITING_FOR_MODEL:
                return (
                    f"“{row.name}” is waiting for a model: choose one (File › Models…) to index "
                    "it and search it."
                )
            return f"Indexing “{row.name}”… {row.text}\nYou can search once it is indexed."
        first_run_pending = (self.demo or self.folder is not None) and not self._indexed_once
        if self.session.indexing or first_run_pending:
            return "Indexing… you can search once the first folder is indexed."
        unfinished = self.window.library_panel.unfinished()
        if unfinished:
            return (
                f"“{unfinished[0].name}” is not indexed yet: Resume indexing (Library pane) to "
                "index it; then type what you are looking for."
            )
        return (
            "The library is empty. Add a photo folder (File › Add folder…, or drop a folder on "
            "the window) to index it; then type what you are looking for."
        )

    def _on_indexing_finished(self, _outcome: object) -> None:
        self._indexed_once = True
        self._on_opened()

    def confirm_close(self) -> bool:
        """Closing while indexing asks first, then stops the run cleanly."""
        if self.library.indexing and not self.window.ask_yes_no(
            "Indexing is running",
            "Stop indexing and quit?\n\nPhotos indexed so far are kept; the rest are "
            "indexed when you resume indexing (Library pane).",
        ):
            return False
        self.shutdown()
        return True

    def shutdown(self, timeout_s: float = 30.0) -> None:
        """Cancel running work, wait for the workers, close the library. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self.library.cancel_indexing()
        self.window.query_list.flush_notes()
        self.benchmark.cancel()
        self.runner.cancel_all()
        if not self.runner.wait(timeout_s):
            log.warning("background work still running at shutdown")
        self.window.save_geometry(_window_settings())
        self.session.close()

    # -- public entry points kept on the application (the features own the work) --------------

    def open_benchmark(self) -> BenchmarkDialog:
        """Tools › Benchmark… (app/controllers/benchmark.py)."""
        from app.controllers.benchmark import open_benchmark

        return open_benchmark(self)

    def export_judgments(self) -> None:
        """File › Export judgments… (app/controllers/transfer.py)."""
        from app.controllers.transfer import export_judgments

        export_judgments(self)

    # -- settings ---------------------------------------------------------------------------------

    def open_settings(self) -> SettingsDialog:
        current = self.settings
        dialog = SettingsDialog(
            SettingsValues(
                model=current.model,
                device=current.device,
                runtime=current.runtime,
                batch_size=current.batch_size,
                top_k=current.top_k,
                library_dir=current.library_dir,
                generator=current.generator,
                llm_url=current.llm_url,
                llm_model=current.llm_model,
                index_memory_gb=current.index_memory_gb,
                root_map=current.root_map,
                judge_name=current.judge_name,
            ),
            SettingsChoices(
                models=model_choices(self), devices=DEVICES, max_batch_size=MAX_BATCH_SIZE
            ),
            validate=lambda values: _problems(current, values),
            detected_device=self.session.detected_device,
            default_library=str(paths.default_library_dir()),
            parent=self.window,
            library_model=self.session.library_spec,
            demo=self.demo,
        )
        dialog.accepted.connect(
            lambda: self.apply_settings(_edited(current, dialog.accepted_values()))
        )
        dialog.open()
        return dialog

    def about_lines(self) -> list[tuple[str, str]]:
        """What About Quadrat says: version, model, device, the library and data folders."""
        from engine import quadrat_version

        session = self.session
        return [
            ("Version", quadrat_version()),
            ("Model", session.search_model()),
            ("Device", self.settings.device),
            ("Library", str(session.library_dir)),
            ("Backups", str(session.library_dir / "backups")),
            ("Settings", str(paths.config_dir())),
            ("Log file", str(self.log_file) if self.log_file else "none"),
        ]

    def show_about(self) -> None:
        self.window.show_about(self.about_lines())

    def remember(self, **changes: Any) -> None:
        """Keep `changes` to the settings for the next session (written off the GUI thread)."""
        new = replace(self.settings, **changes)
        self.settings = new
        self.runner.submit(lambda ctx: save_settings(new), title="Saving the settings", pool=WRITE)

    def show_restored(self, summary: str) -> None:
        """A backup was restored and the library is opening again: the grid, the open query
        and the thumbnails by photo id go (those ids may now name other photos)."""
        self.full_view.close()
        self.judging.new_ranking(None)
        self.window.results_model.clear()
        self.thumbnails.clear()
        self.window.show_empty(summary)

    def apply_settings(self, new: Settings | None) -> None:
        if new is None:
            return
        old = self.settings
        try:
            save_settings(new)
        except QuadratError as exc:
            self.errors.report(exc, "Saving the settings")
            return
        self.settings = new
        self.session.apply_settings(new)
        if new.library_dir != old.library_dir and not self.demo:
            self.window.set_status("The new library folder is used the next time Quadrat starts")
        model_changed = new.model != old.model and not self.demo
        if (
            model_changed
            and self.session.model_key is not None
            and new.model != self.session.library_spec
            and self.window.ask_yes_no(
                "Re-index with the new model?", reindex_question(self, new.model)
            )
        ):
            # Downloads it first (the chooser) when it is not on disk; then `use_model` (app/controllers/models.py).
            self.models.ensure(new.model, lambda: None, approved=True)


def install_window(app: Application) -> None:
    """The window's own wiring, installed last: what the empty results area says, the grid's
    density (kept across sessions), the metrics brought forward, Settings, About, the log."""
    from PySide6.QtCore import QTimer, QUrl
    from PySide6.QtGui import QDesktopServices

    w = app.window
    app.thumbnails.problem.connect(w.set_status)
    w.results.set_thumbnail_size(app.settings.thumbnail_size)
    save_size = QTimer(w)  # saved once the slider rests
    save_size.setSingleShot(True)
    save_size.setInterval(500)

    def remember_size() -> None:
        size = w.results.thumbnail_size()
        if size != app.settings.thumbnail_size:
            app.remember(thumbnail_size=size)

    save_size.timeout.connect(remember_size)
    w.results.thumbnailSizeChanged.connect(lambda _size: save_size.start())
    app.library.indexingFinished.connect(app._on_indexing_finished)
    # Until the library has vectors, the results area says how indexing is going.
    app.library.runChanged.connect(lambda _row: app._say_how_indexing_goes())
    app.library.statsChanged.connect(lambda _stats: app._say_how_indexing_goes())
    app.search.searchFinished.connect(
        lambda outcome: w.show_empty("No photo matched." if not outcome.items else "")
    )
    # A search that ran says the last refusal no longer holds.
    app.search.searchFinished.connect(
        lambda _outcome: w.message_banner.dismiss_titled("Searching failed")
    )
    # Beside the grid, the metrics come in front of the library once a query is open.
    app.open_query.opened.connect(lambda _query_id: w.bring_metrics_forward())
    app.session.modelChanged.connect(lambda spec: w.set_model_name(f"Model: {spec}"))
    app.session.opened.connect(app._on_opened)
    w.settingsRequested.connect(app.open_settings)
    w.aboutRequested.connect(app.show_about)
    w.openLogFolderRequested.connect(
        lambda: QDesktopServices.openUrl(QUrl.fromLocalFile(str(paths.log_dir())))
    )
