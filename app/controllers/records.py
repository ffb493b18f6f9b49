"""Judge › Export records…: the open query's relevant photos as Darwin Core records (a Darwin
Core Archive for GBIF or a flat CSV; engine/io/dwc.py) or its judged camera-trap events as a
Camtrap DP package (engine/io/camtrap_dp.py), written in the write pool, after every
judgment queued before it, with the outcome said in one line.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal

from app.controllers.judging import JudgingController
from app.controllers.session import LibrarySession
from app.workers import READ, WRITE, TaskContext, TaskHandle, TaskRunner
from widgets.file_dialogs import FolderMemory
from widgets.records_dialog import CAMTRAP_DP, DWCA, RecordsDialog, RecordsRequest

if TYPE_CHECKING:
    from PySide6.QtWidgets import QWidget

    from engine.io.camtrap_dp import CamtrapReport
    from engine.io.dwc import DwcReport

log = logging.getLogger(__name__)

WINDOW_HINT = "tick “Include photos whose licence does not allow reuse” to include them"
# Where the window's Camtrap DP export takes observations' taxon from, when photos name none.
NAME_HINT = "type one in Export records' Scientific name field"


class RecordsController(QObject):
    """Opens the dialog for the open query and writes what it asks for."""

    message = Signal(str)
    exported = Signal(object)  # the DwcReport of a finished export

    def __init__(
        self,
        runner: TaskRunner,
        session: LibrarySession,
        judging: JudgingController,
        folders: FolderMemory | None = None,
    ) -> None:
        super().__init__()
        self.runner = runner
        self.session = session
        self.judging = judging  # read only: the open query and its judgments
        self.folders = folders
        self.dialog: RecordsDialog | None = None

    def open_dialog(self, parent: QWidget | None = None) -> RecordsDialog | None:
        """The dialog for the open query, or None (said in one line) when no query is open."""
        if self.session.library is None or self.judging.query_id is None:
            self.message.emit(
                "Open a query and judge its photos first: records are its relevant photos"
            )
            return None
        relevant = sum(1 for value in self.judging.judgments.values() if value > 0)
        dialog = self.dialog = RecordsDialog(
            self.judging.query_title, relevant, self.folders, parent
        )
        dialog.exportRequested.connect(self.export)
        dialog.open()
        self._suggest_scientific_name(dialog)
        return dialog

    def _suggest_scientific_name(self, dialog: RecordsDialog) -> TaskHandle | None:
        """Prefill the dialog's scientific name with the taxon every relevant photo that
        names one shares (read in the read pool); nothing when they name two or none."""
        library = self.session.library
        relevant = sorted(i for i, value in self.judging.judgments.items() if value > 0)
        if library is None or not relevant:
            return None

        def read(ctx: TaskContext) -> str:
            from sqlalchemy import select

            from engine.catalog.models import Image, Taxon

            names: set[str] = set()
            with library.catalog.session() as s:
                for start in range(0, len(relevant), 500):  # SQLite's bound-parameter limit
                    chunk = relevant[start : start + 500]
                    names.update(
                        s.scalars(
                            select(Taxon.name)
                            .join(Image, Image.taxon_id == Taxon.id)
                            .where(Image.id.in_(chunk))
                            .distinct()
                        )
                    )
                    if len(names) > 1:
                        return ""
            return next(iter(names), "")

        def shown(name: str) -> None:
            if self.dialog is dialog:
                dialog.suggest_scientific_name(name)

        return self.runner.submit(
            read, title="Reading the relevant photos' taxa", pool=READ, group="records-taxon",
            on_success=shown,
        )  # fmt: skip

    def export(self, request: RecordsRequest) -> TaskHandle | None:
        """Write the open query's records as `request` says, in the write pool."""
        library, query_id = self.session.library, self.judging.query_id
        if library is None or query_id is None:
            self.message.emit("Open a query first")
            return None
        path = Path(request.path).expanduser()
        include = request.include_restricted
        what = {DWCA: "Darwin Core archive", CAMTRAP_DP: "Camtrap DP package"}.get(
            request.fmt, "Darwin Core CSV"
        )

        def write(ctx: TaskContext) -> DwcReport | CamtrapReport:
            from engine.io.camtrap_dp import export_camtrap_dp
            from engine.io.dwc import export_dwc_csv, export_dwca

            if request.fmt == CAMTRAP_DP:
                return export_camtrap_dp(
                    library,
                    query_id,
                    path,
                    scientific_name=request.scientific_name or None,
                    include_restricted=include,
                )
            writer = export_dwca if request.fmt == DWCA else export_dwc_csv
            return writer(library, query_id, path, include_restricted=include)

        def done(report: DwcReport | CamtrapReport) -> None:
            self.message.emit(
                report.summary(NAME_HINT if request.fmt == CAMTRAP_DP else WINDOW_HINT)
            )
            self.exported.emit(report)

        def failed(error: BaseException) -> None:
            from engine.errors import QuadratError

            if isinstance(error, QuadratError):  # a full or read-only disk, a query gone
                self.message.emit(f"The {what} was not written: {error}")
            else:
                self.runner.report_error(error, f"Exporting the {what}")

        return self.runner.submit(
            write,
            title=f"Exporting the {what}",
            pool=WRITE,  # after every judgment queued before it
            on_success=done,
            on_failure=failed,
        )
