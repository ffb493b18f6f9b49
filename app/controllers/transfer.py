"""Judgments and results in and out of the library: INQUIRE CSV / TREC qrels export and
import, the shown run as CSV, the photos judged relevant copied to a folder, and the open
query in any registered export format that writes one file (`engine/io/formats.py`).

Every task runs in the write pool, so an export sees every judgment queued before it.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal

from app.controllers.install import announce, say
from app.controllers.open_query import OpenQuery
from app.controllers.session import LibrarySession
from app.workers import WRITE, TaskContext, TaskHandle, TaskRunner

if TYPE_CHECKING:
    from app.controllers.application import Application
    from engine.io.export import ImportReport
    from engine.io.formats import ExportReport
    from widgets.main_window import MainWindow

log = logging.getLogger(__name__)


class TransferController(QObject):
    """Imports and exports judgments and results of the library (the open query's, or all)."""

    message = Signal(str)
    # An outcome that matters (a file written, what was imported): the message band, and
    # the status line (application wiring).
    outcome = Signal(str)
    imported = Signal(object)  # set of the query ids that received queries or judgments

    def __init__(self, runner: TaskRunner, session: LibrarySession, query: OpenQuery) -> None:
        super().__init__()
        self.runner = runner
        self.session = session
        self.query = query  # read only: the open query, its shown run and judgments

    def export_judgments(self, path: str | Path, all_queries: bool = True) -> TaskHandle | None:
        """Judgments as INQUIRE-style CSV, or TREC qrels when the file ends in .qrels/.txt."""
        library = self.session.library
        if library is None:
            return None
        path = Path(path)
        fmt = "qrels" if path.suffix.lower() in (".qrels", ".txt") else "csv"
        open_id = self.query.query_id
        query_ids = None if all_queries or open_id is None else [open_id]

        def export(ctx: TaskContext) -> int:
            from engine.io.export import export_judgments

            return export_judgments(library, path, query_ids, fmt)

        return self.runner.submit(
            export,
            title="Exporting the judgments",
            pool=WRITE,  # after every judgment queued before it
            on_success=lambda n: self.outcome.emit(f"Wrote {n:,} judgments to {path}"),
        )

    def export_results(self, path: str | Path) -> TaskHandle | None:
        """The shown run with judgments and metadata as CSV."""
        library = self.session.library
        run = self.query.current_run()
        if library is None or run is None:
            self.message.emit("Run a search first: there are no results to export")
            return None
        ranking, judgments = list(run.ranking), dict(self.query.judgments)

        def export(ctx: TaskContext) -> int:
            from engine.io.export import export_results_csv

            return export_results_csv(library, path, ranking, judgments)

        return self.runner.submit(
            export,
            title="Exporting the results",
            pool=WRITE,
            on_success=lambda n: self.outcome.emit(f"Wrote {n:,} results to {path}"),
        )

    def menu_formats(self) -> list[tuple[str, str]]:
        """The registered formats File › Export offers: those with a label whose writer writes
        one file (name, label)."""
        from engine.io.formats import FILE, export_formats

        return [
            (f.name, f.label)
            for f in export_formats()
            if f.label and f.write is not None and f.target == FILE
        ]

    def ask_export(self, name: str, window: MainWindow) -> TaskHandle | None:
        """File › Export <format>…: a file to write, then the open query in that format."""
        from engine.io.formats import get_format

        if self.session.library is None or self.query.query_id is None:
            self.message.emit("Open a query first")
            return None
        chosen = get_format(name)
        label = (chosen.label or name).replace("&", "")
        path = window.ask_save_file(
            f"Export {label}", f"relevant{chosen.suffix}", f"{label} (*{chosen.suffix})"
        )
        return self.export_format(name, path) if path else None

    def export_format(self, name: str, path: str | Path) -> TaskHandle | None:
        """The open query in the registered format `name`, written to `path`."""
        library, query_id = self.session.library, self.query.query_id
        if library is None or query_id is None:
            self.message.emit("Open a query first")
            return None

        def export(ctx: TaskContext) -> ExportReport:
            from engine.io.formats import get_format

            return get_format(name).run(library, query_id, Path(path))

        return self.runner.submit(
            export,
            title=f"Exporting {name}",
            pool=WRITE,  # after every judgment queued before it
            on_success=lambda report: self.outcome.emit(report.summary()),
        )

    def import_judgments(
        self, queries_file: str | Path | None, judgments_file: str | Path | None
    ) -> TaskHandle | None:
        """Benchmark queries become saved queries, their judgments attached; without a queries
        file, judgments attach to saved queries by id (a Quadrat export read back). Emits
        `imported` with the query ids that changed."""
        library = self.session.library
        if library is None:
            return None

        def do_import(ctx: TaskContext) -> ImportReport:
            from engine.io.export import import_benchmark

            return import_benchmark(library, queries_file, judgments_file)

        def done(report: ImportReport) -> None:
            note = (
                f", {report.unresolved:,} name photos not in the library"
                if report.unresolved
                else ""
            )
            self.outcome.emit(
                f"Imported {report.queries:,} queries and {report.judgments:,} judgments{note}"
            )
            self.imported.emit(set(report.query_ids.values()))

        return self.runner.submit(
            do_import, title="Importing judgments", pool=WRITE, on_success=done
        )

    def copy_relevant(self, dest: str | Path) -> TaskHandle | None:
        """Copy the photos judged relevant for the open query into `dest`."""
        library, query_id = self.session.library, self.query.query_id
        if library is None or query_id is None:
            self.message.emit("Open a query first")
            return None

        def copy(ctx: TaskContext) -> list[Path]:
            from engine.io.export import copy_relevant_photos

            return copy_relevant_photos(library, query_id, dest)

        return self.runner.submit(
            copy,
            title="Copying the relevant photos",
            pool=WRITE,
            on_success=lambda paths: self.outcome.emit(_copied_message(paths, dest)),
        )


def _copied_message(paths: list[Path], dest: str | Path) -> str:
    missing = getattr(paths, "missing", 0)
    gone = f"; {missing:,} are missing from disk and were not copied" if missing else ""
    return f"Copied {len(paths):,} photos to {dest}{gone}"


def install(app: Application) -> None:
    """File › Import queries and judgments…, Export judgments…, Export results…, Copy
    relevant photos to a folder…"""
    transfers = app.transfers = TransferController(app.runner, app.session, app.open_query)
    say(app, transfers.message)
    announce(app, transfers.outcome)
    w = app.window
    w.importJudgmentsRequested.connect(lambda: import_judgments(app))
    w.exportJudgmentsRequested.connect(lambda: export_judgments(app))
    w.exportResultsRequested.connect(lambda: export_results(app))
    w.copyRelevantRequested.connect(lambda: copy_relevant(app))
    w.add_export_formats(transfers.menu_formats())  # the export registry's files
    w.exportFormatRequested.connect(lambda name: transfers.ask_export(name, w))


def import_judgments(app: Application) -> None:
    window = app.window
    queries = window.ask_open_file(
        "Benchmark queries to import (INQUIRE CSV); cancel to import judgments "
        "exported from Quadrat",
        "CSV (*.csv);;All files (*)",
    )
    judgments = window.ask_open_file(
        "Their judgments (INQUIRE CSV or TREC qrels)"
        + ("; cancel to import only the queries" if queries else ""),
        "Judgments (*.csv *.txt *.qrels);;All files (*)",
    )
    if queries or judgments:
        app.transfers.import_judgments(queries or None, judgments or None)


def export_judgments(app: Application) -> None:
    path = app.window.ask_save_file(
        "Export the judgments of every query",
        "judgments.csv",
        "INQUIRE-style CSV (*.csv);;TREC qrels (*.qrels *.txt)",
    )
    if path:
        app.transfers.export_judgments(path)


def export_results(app: Application) -> None:
    path = app.window.ask_save_file(
        "Export the results shown, with judgments and metadata", "results.csv", "CSV (*.csv)"
    )
    if path:
        app.transfers.export_results(path)


def copy_relevant(app: Application) -> None:
    folder = app.window.ask_folder("Copy the photos judged relevant to…")
    if folder:
        app.transfers.copy_relevant(folder)
