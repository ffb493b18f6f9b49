"""Builds the window and its controllers and wires them together (the composition root)."""

from __future__ import annotations

import logging
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QSettings, QTimer, QUrl
from PySide6.QtGui import QDesktopServices, QGuiApplication

from app import paths
from app.controllers.agreement import AgreementController
from app.controllers.analyses import AnalysesController
from app.controllers.attribute_questions import AttributeQuestionsController
from app.controllers.attributes import AttributesController
from app.controllers.backups import BackupsController
from app.controllers.benchmark import BenchmarkController
from app.controllers.certify import CertifyController
from app.controllers.deployments import DeploymentsController
from app.controllers.errors import ErrorReporter
from app.controllers.events import EventsController
from app.controllers.feedback import FeedbackController
from app.controllers.filters import FiltersController
from app.controllers.full_view import FullViewController
from app.controllers.judging import JudgingController
from app.controllers.library import WAITING_FOR_MODEL, LibraryController
from app.controllers.models import ModelsController, estimate_reindex
from app.controllers.queries import SavedQueriesController
from app.controllers.records import RecordsController
from app.controllers.rerank import RerankController
from app.controllers.search import SearchController
from app.controllers.session import EncoderLoader, LibrarySession
from app.controllers.sidecars import SidecarsController
from app.controllers.thumbnails import ThumbnailLoader
from app.controllers.transfer import TransferController
from app.controllers.visret import VisRetController
from app.settings import (
    DEVICES,
    MAX_BATCH_SIZE,
    QueryHistory,
    RecentFolders,
    Settings,
    load_settings,
    save_settings,
)
from app.workers import WRITE, TaskRunner
from engine.errors import QuadratError
from widgets.library_panel import RUNNING, WAITING
from widgets.main_window import WINDOW_TITLE, MainWindow
from widgets.message_banner import DONE
from widgets.metrics_panel import K_CHOICES
from widgets.settings_dialog import ModelChoice, SettingsChoices, SettingsDialog, SettingsValues

if TYPE_CHECKING:
    from engine.methods.feedback import LikelyRelevant
    from engine.models.store import ModelStore

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

    def __init__(
        self,
        *,
        folder: Path | None = None,
        demo: bool = False,
        settings: Settings | None = None,
        log_file: Path | None = None,
        encoder_loader: EncoderLoader | None = None,
        model_store: ModelStore | None = None,
    ) -> None:
        problems: list[str] = []
        if settings is None:
            loaded = load_settings()
            settings, problems = loaded.settings, loaded.problems
        self.settings = settings
        self.demo = demo
        self.folder = folder
        self.window = MainWindow()
        self.window.set_folder_memory(RecentFolders())  # dialogs open where last used
        self.log_file = log_file
        # Every failure of background work: logged, and said in the window's message band.
        self.errors = ErrorReporter(self.window.show_message, log_file)
        self.runner = TaskRunner(error_handler=self.errors)
        library_dir = paths.demo_library_dir() if demo else settings.library_path()
        self.session = LibrarySession(
            self.runner,
            library_dir,
            settings,
            fixed_model=DEMO_MODEL if demo else None,
            encoder_loader=encoder_loader,
        )
        self.thumbnails = ThumbnailLoader(self.runner, self.session.thumbnail_cache)
        w = self.window
        self.library = LibraryController(
            self.runner,
            self.session,
            w.library_panel,
            lambda title, text: w.ask_yes_no(title, text),
        )
        # Before indexing or searching needs a model that is not on disk, the chooser opens.
        self.models = ModelsController(
            self.runner,
            self.session,
            w,
            store=model_store,
            confirm=self._confirm_model,
            refresh_library=self.library.refresh,
        )
        self.library.model_gate = self.models.gate
        self.models.modelChosen.connect(self._use_model)
        self.models.roleModelChosen.connect(self._use_role_model)
        self.models.message.connect(w.set_status)
        w.models_action.triggered.connect(self.open_models)
        self.search = SearchController(
            self.runner,
            self.session,
            w.query_bar,
            w.results_model,
            w.detail_pane,
            self.thumbnails,
            QueryHistory(),
        )
        w.results.currentItemChanged.connect(self.search.show_item)
        self.search.modelNeeded.connect(self.models.open_for_role)
        w.results.moreLikeThisRequested.connect(self.search.more_like_this)
        w.search_by_photo_action.triggered.connect(
            lambda: self.search.choose_photo(w.ask_open_file)
        )
        # Down from the query bar into the grid, Up from its top row back.
        w.query_bar.resultsFocusRequested.connect(w.results.enter_from_above)
        w.results.leaveUpRequested.connect(lambda: w.query_bar.edit.setFocus())
        w.results.openFolderRequested.connect(
            lambda p: QDesktopServices.openUrl(QUrl.fromLocalFile(str(Path(p).parent)))
        )
        w.results.copyPathRequested.connect(lambda p: QGuiApplication.clipboard().setText(p))
        w.results.activated.connect(lambda _index: w.detail_dock.show())
        self.judging = JudgingController(
            self.runner,
            self.session.query_store,
            w.results_model,
            w.results,
            w.detail_pane,
            w.metrics_panel,
        )
        # What the shown photo shows (Darwin Core attributes), edited in the detail pane.
        self.attributes = AttributesController(self.runner, self.judging, w.detail_pane)
        self.queries = SavedQueriesController(
            self.runner,
            self.session,
            self.judging,
            w.query_list,
            self.search.show_results,
            lambda title, text: w.ask_yes_no(title, text),
        )
        self.transfers = TransferController(self.runner, self.session, self.judging)
        # Judge › Export records…: the open query's relevant photos as Darwin Core records.
        self.records = RecordsController(
            self.runner,
            self.session,
            self.judging,
            w.folders,
            action=w.export_records_action,
            end_blind=lambda: w.judges.blind_action.setChecked(False),
            confirm=lambda title, text: w.ask_yes_no(title, text),
        )
        # Judge › Ask an attribute question…: learnt from the judged photos' attributes.
        self.questions = AttributeQuestionsController(self.runner, self.session, self.judging)
        self.sidecars = SidecarsController(
            self.runner, self.session, self.judging, lambda title, text: w.ask_yes_no(title, text)
        )
        # File › Backups…: list, back up now, restore (then the library is opened again).
        self.backups = BackupsController(
            self.runner, self.session, lambda title, text: w.ask_yes_no(title, text)
        )
        w.backupsRequested.connect(lambda: self.backups.open_dialog(w))
        # Library › Deployments…: clock offsets and the event gap; times and events read again.
        self.deployments = DeploymentsController(self.runner, self.session)
        w.deploymentsRequested.connect(lambda: self.deployments.open_dialog(w))
        self.backups.restored.connect(self._show_restored)
        # Space: the selected photo at full resolution, judged with the same keys.
        self.full_view = FullViewController(
            self.runner,
            w.results,
            self.judging,
            [
                w.relevant_action,
                w.not_relevant_action,
                w.clear_judgment_action,
                w.undo_judgment_action,
            ],
            w,
        )
        w.full_view_action.triggered.connect(self.full_view.open)
        # VisRet's drawings above the results: filled while a search draws, back with a run.
        self.visret = VisRetController(self.runner, self.search, self.judging, w.drawings_strip)
        # Reranked searches: the subquery editor, partial results, answers per photo. After
        # VisRet: its worker hook passes VisRet's events on.
        self.rerank = RerankController(
            self.runner,
            self.session,
            self.search,
            self.judging,
            w.subquery_editor,
            w.results,
            w.detail_pane,
        )
        # Filters: the chips under the query bar, the map and the month histogram.
        self.filters = FiltersController(
            self.runner,
            self.session,
            self.search,
            w.filter_bar,
            w.map_view,
            w.month_histogram,
            w.results_model,
            w.results,
            open_query=lambda: self.judging.query_id,
            show_place_pane=w.show_place_pane,
        )
        # Learning from the judgments: Refine ▾, Judge next, Sample to judge, the estimate.
        self.feedback = FeedbackController(
            self.runner,
            self.session,
            self.judging,
            self.queries.open_query,
            w.results_model,
            w.results,
            self.thumbnails,
            w.metrics_panel,
            w.judge_next_action,
            w.sample_action,
            w.back_to_run_action,
            export_likely_action=w.export_likely_action,
            filters=lambda: (
                self.search.filters
                if self.search.filters is not None and self.search.filters.active
                else None
            ),
        )
        # Several judges: who is judging, blind double judging, the metrics' judgments,
        # Judge › Agreement… (adjudication) and Judge › Certify recall….
        self.agreement = AgreementController(
            self.runner, self.session, self.judging, self.feedback, self.queries.reopen,
            w.judges, w, thumbnails=self.thumbnails,
        )  # fmt: skip
        # Certify recall over what is shown: the filters' photos, events when grouped.
        self.certify = CertifyController(
            self.runner, self.session, self.judging, self.feedback, w.judges, w,
            filters=lambda: self.search.filters, grouped=lambda: self.events.grouped,
            names=lambda: self.filters.names,
        )  # fmt: skip
        self.filters.filtersChanged.connect(self.certify.scope_changed)
        # Export records waits while judging blind (after the agreement controller has set
        # the store blind or not).
        w.judges.blindToggled.connect(self.records.blind_changed)
        # "Where and when" › Relevant photos of this query: their analyses, and their export.
        self.analyses = AnalysesController(
            self.runner, self.session, self.judging, w.place_pane, lambda c: w.ask_folder(c)
        )
        self.analyses.message.connect(w.set_status)
        self.queries.runFiltersShown.connect(self.filters.restore)
        self.judging.queryOpened.connect(self.filters.query_opened)
        self.search.searchFinished.connect(self.queries.on_search_finished)
        w.results.moreLikeThisRequested.connect(self.queries.note_more_like_this)
        w.detail_pane.moreLikeThisRequested.connect(self.queries.note_more_like_this)
        w.metrics_panel.runSelected.connect(self.queries.show_run)
        if self.settings.metrics_k in K_CHOICES:
            self.judging.set_k(self.settings.metrics_k)
        w.metrics_panel.kChanged.connect(self._remember_metrics_k)
        # The grid's density, kept across sessions (saved once the slider rests).
        w.results.set_thumbnail_size(self.settings.thumbnail_size)
        self._save_thumbnail_size = QTimer(w)
        self._save_thumbnail_size.setSingleShot(True)
        self._save_thumbnail_size.setInterval(500)
        self._save_thumbnail_size.timeout.connect(self._remember_thumbnail_size)
        w.results.thumbnailSizeChanged.connect(lambda _size: self._save_thumbnail_size.start())
        self.transfers.imported.connect(self.queries.reopen)
        # Results grouped by event (View › Group results by event), kept across sessions.
        self.events = EventsController(
            self.runner,
            self.session,
            self.search,
            self.judging,
            w.results_model,
            w.results,
            w.filmstrip,
            w.group_events_action,
            self.settings.group_by_event,
            self._remember_group_by_event,
        )
        self.events.groupedChanged.connect(self.certify.scope_changed)
        # A clock offset or event gap moved the events: the toggle and per-event metrics follow.
        self.deployments.cameraDataChanged.connect(self.events.check_library)
        self.deployments.cameraDataChanged.connect(self.events.refresh_units)
        w.relevant_action.triggered.connect(lambda: self.judging.judge_current(1))
        w.not_relevant_action.triggered.connect(lambda: self.judging.judge_current(0))
        w.clear_judgment_action.triggered.connect(lambda: self.judging.judge_current(None))
        w.undo_judgment_action.triggered.connect(self.judging.undo)
        self.benchmark = BenchmarkController(self.runner, self.session)
        w.benchmarkRequested.connect(self.open_benchmark)
        w.importJudgmentsRequested.connect(self.import_judgments)
        w.exportJudgmentsRequested.connect(self.export_judgments)
        w.exportResultsRequested.connect(self.export_results)
        w.exportLikelyRequested.connect(self.export_likely)
        w.copyRelevantRequested.connect(self.copy_relevant)
        w.writeSidecarsRequested.connect(self.sidecars.write_sidecars)
        w.exportRecordsRequested.connect(lambda: self.records.open_dialog(w))
        w.add_export_formats(self.transfers.menu_formats())  # the export registry's files
        w.exportFormatRequested.connect(lambda name: self.transfers.ask_export(name, w))
        w.askQuestionRequested.connect(lambda: self.questions.open_dialog(w))
        for source in (
            self.library.message,
            self.search.message,
            self.judging.message,
            self.queries.message,
            self.transfers.message,
            self.records.message,
            self.questions.message,
            self.sidecars.message,
            self.visret.message,
            self.rerank.message,
            self.filters.message,
            self.events.message,
            self.feedback.message,
            self.thumbnails.problem,
            self.backups.message,
            self.deployments.message,
            self.full_view.message,
            self.attributes.message,
            self.agreement.message,
            self.certify.message,
        ):
            source.connect(w.set_status)
        # Outcomes that matter (files written, judgments imported): read whole in the message
        # band, and echoed in the status line.
        for outcome in (
            self.transfers.outcome,
            self.analyses.outcome,
            self.feedback.outcome,
            self.sidecars.outcome,
        ):
            outcome.connect(w.set_status)
            outcome.connect(lambda text: w.show_message(DONE, "", text))
        self.library.indexingFinished.connect(self._on_indexing_finished)
        # Until the library has vectors, the results area says how indexing is going.
        self.library.runChanged.connect(lambda _row: self._say_how_indexing_goes())
        self.library.statsChanged.connect(lambda _stats: self._say_how_indexing_goes())
        self.search.searchFinished.connect(
            lambda outcome: w.show_empty("No photo matched." if not outcome.items else "")
        )
        # A search that ran says the last refusal no longer holds.
        self.search.searchFinished.connect(
            lambda _outcome: w.message_banner.dismiss_titled("Searching failed")
        )
        # Beside the grid, the metrics come in front of the library once a query is open.
        self.judging.queryOpened.connect(lambda _query_id: w.bring_metrics_forward())
        self.session.modelChanged.connect(lambda spec: w.set_model_name(f"Model: {spec}"))
        self.session.opened.connect(self._on_opened)
        w.settingsRequested.connect(self.open_settings)
        w.aboutRequested.connect(self.show_about)
        w.openLogFolderRequested.connect(
            lambda: QDesktopServices.openUrl(QUrl.fromLocalFile(str(paths.log_dir())))
        )
        w.close_guard = self.confirm_close
        w.setWindowTitle(
            f"{WINDOW_TITLE} — demo collection" if demo else f"{WINDOW_TITLE} — {library_dir}"
        )
        self._startup_problems = problems
        self._closed = False
        self._indexed_once = False

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

    # -- benchmark, import and export ------------------------------------------------------------

    def open_benchmark(self) -> object:
        dialog = self.benchmark.open_dialog(self.window)
        if self.demo and not dialog.queries_edit.text():
            # The demo collection ships INQUIRE-style benchmark files: offer them.
            root = paths.demo_collection_dir()
            if (root / "queries.csv").is_file():
                dialog.set_files(str(root / "queries.csv"), str(root / "judgments.csv"))
        return dialog

    def import_judgments(self) -> None:
        queries = self.window.ask_open_file(
            "Benchmark queries to import (INQUIRE CSV); cancel to import judgments "
            "exported from Quadrat",
            "CSV (*.csv);;All files (*)",
        )
        judgments = self.window.ask_open_file(
            "Their judgments (INQUIRE CSV or TREC qrels)"
            + ("; cancel to import only the queries" if queries else ""),
            "Judgments (*.csv *.txt *.qrels);;All files (*)",
        )
        if queries or judgments:
            self.transfers.import_judgments(queries or None, judgments or None)

    def export_judgments(self) -> None:
        path = self.window.ask_save_file(
            "Export the judgments of every query",
            "judgments.csv",
            "INQUIRE-style CSV (*.csv);;TREC qrels (*.qrels *.txt)",
        )
        if path:
            self.transfers.export_judgments(path)

    def export_results(self) -> None:
        path = self.window.ask_save_file(
            "Export the results shown, with judgments and metadata", "results.csv", "CSV (*.csv)"
        )
        if path:
            self.transfers.export_results(path)

    def export_likely(self) -> None:
        """Judge › Export likely relevant photos…: a probability cut-off; then, once the photos
        are found, either why nothing would be written (a dialog, before any save dialog) or
        where to save them."""
        min_p = self.window.ask_probability(
            "Export likely relevant photos",
            "The photos judged relevant, and every unjudged photo whose probability of "
            "relevance, learned from this query's judgments, is at least:",
            0.9,
        )
        if min_p is not None:
            self.feedback.find_likely(min_p, self._save_likely)

    def _save_likely(self, likely: LikelyRelevant) -> None:
        title = "Export likely relevant photos"
        if not len(likely):
            self.window.show_notice(title, f"Nothing would be written. {likely.summary()}.")
            return
        path = self.window.ask_save_file(
            f"Export {len(likely):,} photos: {likely.summary()}",
            "likely-relevant.csv",
            "CSV (*.csv)",
        )
        if path:
            self.feedback.write_likely(likely, path)

    def copy_relevant(self) -> None:
        folder = self.window.ask_folder("Copy the photos judged relevant to…")
        if folder:
            self.transfers.copy_relevant(folder)

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
                models=self.model_choices(), devices=DEVICES, max_batch_size=MAX_BATCH_SIZE
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

    def _remember_group_by_event(self, grouped: bool) -> None:
        """Keep View › Group results by event for the next session (written off the GUI
        thread)."""
        new = replace(self.settings, group_by_event=grouped)
        self.settings = new
        self.runner.submit(lambda ctx: save_settings(new), title="Saving the settings", pool=WRITE)

    def _remember_thumbnail_size(self) -> None:
        """Keep the grid's thumbnail size for the next session (written off the GUI thread)."""
        size = self.window.results.thumbnail_size()
        if size == self.settings.thumbnail_size:
            return
        new = replace(self.settings, thumbnail_size=size)
        self.settings = new
        self.runner.submit(lambda ctx: save_settings(new), title="Saving the settings", pool=WRITE)

    def _show_restored(self, summary: str) -> None:
        """A backup was restored and the library is opening again: the grid, the open query
        and the thumbnails by photo id go (those ids may now name other photos)."""
        self.full_view.close()
        self.judging.new_ranking(None)
        self.window.results_model.clear()
        self.thumbnails.clear()
        self.window.show_empty(summary)

    def _remember_metrics_k(self, k: int) -> None:
        """Keep the metrics panel's k for the next session (written off the GUI thread)."""
        if k == self.settings.metrics_k:
            return
        new = replace(self.settings, metrics_k=k)
        self.settings = new
        self.runner.submit(lambda ctx: save_settings(new), title="Saving the settings", pool=WRITE)

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
                "Re-index with the new model?", self.reindex_question(new.model)
            )
        ):
            # Downloads it first (the chooser) when it is not on disk; then `_use_model`.
            self.models.ensure(new.model, lambda: None, approved=True)

    # -- models -----------------------------------------------------------------------------------

    def open_models(self) -> None:
        """File › Models…: the chooser, with the model searches use selected."""
        self.models.open_chooser(
            self.session.search_model(),
            "Choose the model photos are indexed and searched with, download one, or import a "
            "model file, folder or pack. The other tabs offer an image generator for VisRet "
            "and vision-language models for Reranked.",
        )

    def model_choices(self) -> list[ModelChoice]:
        """The settings dialog's models: the chooser's offers, marked when on disk."""
        return [
            ModelChoice(row.spec, row.label, row.installed, row.good_at)
            for row in self.models.rows()
        ]

    def reindex_question(self, spec: str) -> str:
        """What changing the library's model means, with how long re-indexing will take."""
        session = self.session
        photos = sum(s.indexed + s.pending for s in self.library.stats)
        report = self.library.last_report
        measured = (
            (session.library_spec, report.indexed, report.seconds)
            if report is not None and session.library_spec and not report.cancelled
            else None
        )
        device = self.settings.device
        if device == "auto":
            device = session.detected_device or "cpu"
        label = self.models.label(spec)
        estimate = estimate_reindex(photos, spec, device, measured)
        return (
            f"This library is indexed with {session.library_spec}. Searching with {label} needs "
            f"every collection re-indexed with it.\n\n{estimate.sentence(label)}\n\n"
            "Re-index now? (Until it is done, searches use the model the library was indexed "
            "with.)"
        )

    def _confirm_model(self, spec: str) -> bool:
        """Asked before a model picked in the chooser replaces the library's model."""
        session = self.session
        if self.demo or session.model_key is None or spec == session.library_spec:
            return True
        return self.window.ask_yes_no("Re-index with another model?", self.reindex_question(spec))

    def _use_role_model(self, role: str, use: str) -> None:
        """A generator downloaded in the chooser becomes VisRet's generator (the settings');
        a VLM is named in the status line (the Reranked options take it as their scorer)."""
        if role == "generator" and use and use != self.settings.generator and not self.demo:
            new = replace(self.settings, generator=use)
            self.settings = new
            self.session.apply_settings(new)
            self.runner.submit(
                lambda ctx: save_settings(new), title="Saving the settings", pool=WRITE
            )
            self.window.set_status(f"VisRet now draws with {use}")
        elif role == "vlm" and use:
            self.window.set_status(f"Reranked can ask this model: choose the scorer {use}")

    def _use_model(self, spec: str) -> None:
        """A model is on disk and chosen: remember it, and re-index a library indexed with
        another model (the waiting folders are indexed after that)."""
        if self.demo:
            return
        if spec != self.settings.model:
            new = replace(self.settings, model=spec)
            self.settings = new
            self.session.apply_settings(new)
            self.runner.submit(
                lambda ctx: save_settings(new), title="Saving the settings", pool=WRITE
            )
        if self.session.model_key is not None and spec != self.session.library_spec:
            self.session.target_model = spec
            self.library.reindex_all()
