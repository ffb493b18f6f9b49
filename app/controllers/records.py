"""Judge › Export records…: the open query's relevant photos as Darwin Core records (a Darwin
Core Archive for GBIF or a flat CSV; engine/io/dwc.py) or its judged camera-trap events as a
Camtrap DP package (engine/io/camtrap_dp.py).

Before the file is asked for, the dialog shows what would be written: the count, and every
record left out or written with a problem, with its reason (`check_records`, in the read pool,
again whenever the format, the licence choice, the scientific name or a judgment changes).
Export writes in the write pool, after every judgment queued before it, and the outcome is one
readable message (and the status line's one line); an expected failure is said there too,
with no traceback. While judging blind, export waits: the dialog and the menu say why, and
offer to end the blind round (after a confirmation).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal

from app.controllers.install import asker, say
from app.controllers.open_query import OpenQuery
from app.controllers.session import LibrarySession
from app.workers import READ, WRITE, TaskContext, TaskHandle, TaskRunner
from widgets.file_dialogs import FolderMemory
from widgets.records_dialog import (
    CAMTRAP_DP,
    DWCA,
    LEFT_OUT,
    STOPS,
    WRITTEN,
    RecordRow,
    RecordsDialog,
    RecordsPreview,
    RecordsRequest,
    show_outcome,
)

if TYPE_CHECKING:
    from PySide6.QtGui import QAction
    from PySide6.QtWidgets import QMessageBox, QWidget

    from app.controllers.application import Application
    from engine.catalog.library import Library
    from engine.io.camtrap_check import Problem
    from engine.io.camtrap_dp import CamtrapReport
    from engine.io.dwc import DwcReport
    from engine.io.dwc_checks import Problem as DwcProblem

log = logging.getLogger(__name__)

INCLUDE_BOX = "Include photos whose licence does not allow reuse"
WINDOW_HINT = f"tick “{INCLUDE_BOX}” to include them"
# Where the window's Camtrap DP export takes observations' taxon from, when photos name none.
NAME_HINT = "type one in Export records' Scientific name field"
# The window has no time zone field: the command line gives frames without an offset theirs.
ZONE_HINT = "quadrat export camtrap-dp --timezone gives their time zone"
EXPORT_TEXT = "Export rec&ords…"
EXPORT_TIP = (
    "Write the open query's relevant photos as Darwin Core records: an archive for GBIF or a "
    "CSV, with the query, method, model and judges as provenance"
)
WAITING_TEXT = "Export rec&ords… (waits: judging blind)"
WAITING = (
    "Export waits while you judge blind: the records would carry every judge's marks, which "
    "judging blind hides from you. End the blind round to see what would be written."
)
END_BLIND_QUESTION = (
    "End the blind round? Every judge's marks show again in the grid and the metrics; the "
    "photos offered for double judging stay offered, and Judge › Judge blind starts judging "
    "blind again."
)

OutcomeShower = Callable[[str, str, str, bool], object]  # title, text, details, failed


@dataclass(frozen=True)
class Listed:
    """A photo (or a group of them) the check names, and why."""

    photo: str
    reason: str


@dataclass(frozen=True)
class RecordsCheck:
    """What an export would write, whichever writer: photos judged relevant, records
    (observations for Camtrap DP) to be written, those left out and those written with a
    problem, each with its reason; problems that stop the export (nothing would be written);
    how many places are generalised or withheld; `error` when the check itself failed."""

    fmt: str
    relevant: int
    writable: int
    left_out: tuple[Listed, ...] = ()
    problems: tuple[Listed, ...] = ()
    package: str = ""  # Camtrap DP: what the package holds, in words
    error: str = ""
    stops: tuple[Listed, ...] = ()  # errors a reader of the standard would refuse it for
    places: str = ""  # "2 places generalised, 1 withheld"
    notes: tuple[str, ...] = ()  # about the export as a whole, said under the headline


@dataclass(frozen=True)
class _Failed:
    """An expected failure of a write (a full disk, a query gone), said in one line."""

    message: str


# -- what would be written: today's writers behind one adapter --------------------------------


def check_records(library: Library, query_id: int, request: RecordsRequest) -> RecordsCheck:
    """What exporting the query as `request` says would write (runs in a worker). Expected
    failures become `error`, never an exception."""
    from engine.errors import QuadratError

    try:
        if request.fmt == CAMTRAP_DP:
            return _check_camtrap(
                library, query_id, request.scientific_name, request.include_restricted
            )
        return _check_dwc(library, query_id, request.fmt, request.include_restricted)
    except QuadratError as exc:
        return RecordsCheck(request.fmt, 0, 0, error=str(exc))


def _check_dwc(library: Library, query_id: int, fmt: str, include: bool) -> RecordsCheck:
    """The Darwin Core pre-flight check (engine/io/dwc.py `check_records`; nothing written):
    its errors stop the export, the photos it leaves out are listed with the reason, its
    warnings and incomplete records are written with a note."""
    from engine.io.dwc import check_records as check_dwc

    check = check_dwc(library, query_id, fmt, include_restricted=include)

    def named(problem: DwcProblem) -> Listed:
        where = problem.path or "the whole export"
        return Listed(
            where, f"{problem.term}: {problem.message}" if problem.term else problem.message
        )

    restricted = tuple(Listed(p.path, p.reason) for p in check.restricted)
    incomplete = tuple(Listed(p.path, f"incomplete: {p.reason}") for p in check.incomplete)
    # Warnings about the whole export go under the headline; the table lists photos.
    warnings = tuple(named(p) for p in check.warnings if p.path)
    notes = tuple(p.message for p in check.warnings if not p.path)
    stops = tuple(named(p) for p in check.errors)
    if include:
        included = tuple(Listed(p.photo, f"{p.reason}, included as asked") for p in restricted)
        return RecordsCheck(
            fmt, check.written, check.written, (), included + incomplete + warnings,
            stops=stops, places=check.places, notes=notes,
        )  # fmt: skip
    left_out = tuple(Listed(p.photo, f"{p.reason}, which does not allow reuse") for p in restricted)
    return RecordsCheck(
        fmt, check.written + len(left_out), check.written, left_out, incomplete + warnings,
        stops=stops, places=check.places, notes=notes,
    )  # fmt: skip


def _check_camtrap(
    library: Library, query_id: int, scientific_name: str, include: bool
) -> RecordsCheck:
    """The Camtrap DP package's pre-flight check (engine/io/camtrap_dp.py; nothing written):
    its errors stop the export, the photos and deployments it leaves out are listed with the
    reason, its warnings and generalised places are written with a note."""
    from engine.io.camtrap_dp import NOTHING_TO_PUBLISH, check_camtrap_dp

    check = check_camtrap_dp(
        library, query_id, scientific_name=scientific_name or None, include_restricted=include
    )
    report = check.report

    def named(problem: Problem) -> Listed:
        where = problem.photo or f"{problem.table} {problem.record}".strip()
        return Listed(
            where, f"{problem.column}: {problem.message}" if problem.column else problem.message
        )

    stops = tuple(named(p) for p in check.errors if not p.message.startswith(NOTHING_TO_PUBLISH))
    left_out: list[Listed] = []
    problems: list[Listed] = []
    if include:
        problems += [Listed(p.path, f"{p.reason}, included as asked") for p in check.restricted]
    else:
        left_out += [
            Listed(p.path, f"{p.reason}, which does not allow reuse") for p in check.restricted
        ]
    left_out += [
        Listed(f"deployment {d.name} ({_photos(d.photos, '')})", d.reason) for d in check.withheld
    ]
    left_out += [Listed(p.path, "in no camera deployment") for p in check.outside]
    left_out += [Listed(p.path, "no capture time, which media need") for p in check.undated]
    problems += [Listed(f"deployment {d.name}", d.reason) for d in check.generalised]
    problems += [named(p) for p in check.warnings]
    package = (
        f"{report.deployments:,} deployments, {report.media:,} media and "
        f"{report.observations:,} observations ({report.events:,} events)"
    )
    places = (
        f"{report.generalised:,} deployment places generalised, {report.withheld:,} withheld"
        if report.generalised or report.withheld
        else ""
    )
    return RecordsCheck(
        CAMTRAP_DP,
        _relevant_count(library, query_id),
        report.observations,
        tuple(left_out),
        tuple(problems),
        package,
        stops=stops,
        places=places,
    )


def _relevant_count(library: Library, query_id: int) -> int:
    from engine.judgments.queries import QueryStore

    return sum(1 for value in QueryStore(library).judgments(query_id).values() if value > 0)


def _photos(count: int, kind: str) -> str:
    """ "3 relevant photos", "1 photo of the deployments"."""
    noun = "photo" if count == 1 else "photos"
    if kind == "deployment":
        return f"{count:,} {noun} of the deployments"
    return f"{count:,} {kind + ' ' if kind else ''}{noun}"


def records_preview(check: RecordsCheck, title: str) -> RecordsPreview:
    """What the dialog says about a check: the headline, the listed rows and a hint."""
    rows = (
        tuple(RecordRow(item.photo, STOPS, item.reason) for item in check.stops)
        + tuple(RecordRow(item.photo, LEFT_OUT, item.reason) for item in check.left_out)
        + tuple(RecordRow(item.photo, WRITTEN, item.reason) for item in check.problems)
    )
    if check.error:
        return RecordsPreview(f"Nothing can be written: {check.error}", 0)
    if check.stops:
        n = len(check.stops)
        what = "package" if check.fmt == CAMTRAP_DP else "records"
        return RecordsPreview(
            f"The {what} for “{title}” would not be written: {n:,} "
            f"{'problem' if n == 1 else 'problems'} would make them refused, listed below.",
            0,
            rows,
        )
    if check.fmt == CAMTRAP_DP:
        if check.writable == 0:
            headline = (
                f"No photo judged relevant for “{title}” is in a camera deployment: the "
                "package would hold no observation, so there is nothing to write."
            )
        else:
            headline = f"A Camtrap DP package of {check.package} will be written for “{title}”."
        return RecordsPreview(headline + _listed_note(check), check.writable, rows)
    n, relevant = check.writable, check.relevant
    if relevant == 0:
        headline = f"No photo is judged relevant for “{title}”: there is nothing to write."
    elif n == 0:
        headline = (
            f"None of the {relevant:,} photos judged relevant for “{title}” would be "
            "written: each is listed below with the reason."
        )
    elif n == relevant:
        headline = (
            f"{'The one photo' if n == 1 else f'All {n:,} photos'} judged relevant for "
            f"“{title}” will be written, one Darwin Core record each, with the query, "
            "search method, model and judges as provenance."
        )
    else:
        left = relevant - n
        listed = (
            "the one left out is listed below with the reason"
            if left == 1
            else f"the {left:,} left out are listed below with the reason"
        )
        headline = (
            f"{n:,} of the {relevant:,} photos judged relevant for “{title}” will be "
            f"written, one Darwin Core record each; {listed}."
        )
    licence = sum("does not allow reuse" in item.reason for item in check.left_out)
    hint = (
        f"Tick “{INCLUDE_BOX}” to write the {licence:,} left out for their licence too, "
        "if you may publish them."
        if licence
        else ""
    )
    return RecordsPreview(headline + _listed_note(check), n, rows, hint)


def _listed_note(check: RecordsCheck) -> str:
    """What the headline adds: the places generalised or withheld, the notes listed."""
    note = f" Places as published: {check.places}." if check.places else ""
    if check.problems:
        n = len(check.problems)
        note += f" {n:,} {'is' if n == 1 else 'are'} written with a note, listed below."
    for line in check.notes:
        note += f" Note: {line[:1].upper()}{line[1:]}."
    return note


# -- the outcome ---------------------------------------------------------------------------------


def dwc_details(report: DwcReport) -> str:
    """The photos a Darwin Core export left out or wrote with a problem, one per line."""
    lines = [
        f"{'included' if report.restricted_included else 'left out'}\t{p.path}\t{p.reason}"
        for p in report.restricted
    ]
    lines += [f"incomplete\t{p.path}\t{p.reason}" for p in report.incomplete]
    return "\n".join(lines)


class RecordsController(QObject):
    """Opens the dialog for the open query, checks what would be written and writes it."""

    message = Signal(str)
    exported = Signal(object)  # the DwcReport or CamtrapReport of a finished export
    checked = Signal(object)  # the RecordsCheck the dialog shows

    def __init__(
        self,
        runner: TaskRunner,
        session: LibrarySession,
        query: OpenQuery,
        folders: FolderMemory | None = None,
        *,
        action: QAction | None = None,
        end_blind: Callable[[], None] | None = None,
        confirm: Callable[[str, str], bool] | None = None,
        outcome: OutcomeShower | None = None,
    ) -> None:
        super().__init__()
        self.runner = runner
        self.session = session
        self.query = query  # read only: the open query and its judgments
        self.folders = folders
        self.action = action  # Judge › Export records…, told while export waits
        self._end_blind = end_blind
        self._confirm = confirm or (lambda _title, _text: False)
        self._outcome = outcome or self._outcome_box
        self.dialog: RecordsDialog | None = None
        self.check: RecordsCheck | None = None  # what the dialog shows
        self.outcome_box: QMessageBox | None = None
        self._parent: QWidget | None = None
        query.judgmentSaved.connect(self._judgment_saved)

    # -- the dialog -----------------------------------------------------------------------------

    def open_dialog(self, parent: QWidget | None = None) -> RecordsDialog | None:
        """The dialog for the open query, or None (said in one line) when no query is open."""
        if self.session.library is None or self.query.query_id is None:
            self.message.emit(
                "Open a query and judge its photos first: records are its relevant photos"
            )
            return None
        self._parent = parent
        self.check = None
        dialog = self.dialog = RecordsDialog(self.query.title, self.folders, parent)
        dialog.exportRequested.connect(self.export)
        dialog.optionsChanged.connect(self.refresh)
        # A name changes only which observations are listed as unnamed: the count shown
        # stays, and Export stays pressable while it is checked again.
        dialog.nameEdited.connect(lambda: self.refresh(keep_shown=True))
        dialog.endBlindRequested.connect(self.end_blind_round)
        dialog.open()
        self._suggest_scientific_name(dialog)
        self.refresh()
        return dialog

    def blinded(self) -> bool:
        store = self.session.query_store()
        return store is not None and store.blind

    def refresh(self, keep_shown: bool = False) -> TaskHandle | None:
        """Work out again what the open dialog's choices would write (in the read pool,
        newest wins); while judging blind, say why export waits instead. `keep_shown`: the
        change cannot alter the count, so what is shown stays until the new check lands."""
        dialog, library, query_id = self.dialog, self.session.library, self.query.query_id
        if dialog is None or not dialog.isVisible() or library is None or query_id is None:
            return None
        for handle in self.runner.active("records-check"):
            handle.cancel()  # a late check of other choices must not land
        if self.blinded():
            self.check = None
            dialog.show_waiting(WAITING)
            return None
        if not (keep_shown and self.check is not None):
            self.check = None
            dialog.show_checking()
        request = dialog.request()
        title = self.query.title

        def shown(check: RecordsCheck) -> None:
            if self.dialog is not dialog or self.blinded():
                return
            self.check = check
            dialog.show_preview(records_preview(check, title))
            self.checked.emit(check)

        return self.runner.submit(
            lambda ctx: check_records(library, query_id, request),
            title="Checking what the export would write",
            pool=READ,
            group="records-check",
            on_success=shown,
            on_failure=lambda exc: self.runner.report_error(exc, "Checking the export"),
        )

    def _judgment_saved(self, query_id: int, _image_id: int, _relevance: object) -> None:
        # The count shown must never promise a photo a judgment has just taken away.
        if query_id == self.query.query_id and self.dialog is not None:
            self.refresh()

    # -- judging blind ------------------------------------------------------------------------

    def blind_changed(self, on: bool) -> None:
        """Judge blind went on or off: the menu entry says whether export waits, and an open
        dialog shows why (or what would be written)."""
        if self.action is not None:
            self.action.setText(WAITING_TEXT if on else EXPORT_TEXT)
            self.action.setToolTip(WAITING if on else EXPORT_TIP)
            self.action.setStatusTip(WAITING if on else EXPORT_TIP)
        self.refresh()

    def end_blind_round(self) -> bool:
        """Asked from the dialog: end the blind round (confirmed first). True if it ended."""
        if self._end_blind is None or not self._confirm("End the blind round", END_BLIND_QUESTION):
            return False
        self._end_blind()  # Judge blind goes off: the query is read again, `blind_changed` follows
        return True

    # -- the scientific name (Camtrap DP) -----------------------------------------------------------

    def _suggest_scientific_name(self, dialog: RecordsDialog) -> TaskHandle | None:
        """Prefill the dialog's scientific name with the taxon every relevant photo that
        names one shares (read in the read pool); nothing when they name two or none."""
        library = self.session.library
        relevant = sorted(i for i, value in self.query.judgments.items() if value > 0)
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

    # -- writing ----------------------------------------------------------------------------------

    def export(self, request: RecordsRequest) -> TaskHandle | None:
        """Write the open query's records as `request` says, in the write pool."""
        library, query_id = self.session.library, self.query.query_id
        if library is None or query_id is None:
            self.message.emit("Open a query first")
            return None
        if self.blinded():
            self.message.emit("Export waits while you judge blind")
            return None
        path = Path(request.path).expanduser()
        include = request.include_restricted
        what = {DWCA: "Darwin Core archive", CAMTRAP_DP: "Camtrap DP package"}.get(
            request.fmt, "Darwin Core CSV"
        )

        def write(ctx: TaskContext) -> DwcReport | CamtrapReport | _Failed:
            from engine.errors import QuadratError
            from engine.io.camtrap_dp import export_camtrap_dp
            from engine.io.dwc import export_dwc_csv, export_dwca

            try:
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
            except QuadratError as exc:  # a full or read-only disk, a query gone: one line
                log.info("the %s was not written: %s", what, exc)
                return _Failed(str(exc))

        def done(result: DwcReport | CamtrapReport | _Failed) -> None:
            from engine.io.dwc import DwcReport

            if isinstance(result, _Failed):
                text = f"The {what} was not written: {result.message}"
                self.message.emit(text)
                self._outcome(f"Export records: the {what}", text, "", True)
                return
            if isinstance(result, DwcReport):
                line, details = result.summary(WINDOW_HINT), dwc_details(result)
            else:
                line, details = result.summary(NAME_HINT, WINDOW_HINT, ZONE_HINT), ""
            self.message.emit(line)
            self._outcome(f"Export records: the {what}", line, details, False)
            self.exported.emit(result)

        return self.runner.submit(
            write,
            title=f"Exporting the {what}",
            pool=WRITE,  # after every judgment queued before it
            on_success=done,
        )

    def _outcome_box(self, title: str, text: str, details: str, failed: bool) -> None:
        if self.outcome_box is not None:
            self.outcome_box.close()
        self.outcome_box = show_outcome(self._parent, title, text, details, failed)


def install(app: Application) -> None:
    """Judge › Export records…: the open query's relevant photos as Darwin Core records.
    After the agreement controller: export waits while judging blind, once that controller
    has set the store blind or not."""
    w = app.window
    records = app.records = RecordsController(
        app.runner,
        app.session,
        app.open_query,
        w.folders,
        action=w.export_records_action,
        end_blind=lambda: w.judges.blind_action.setChecked(False),
        confirm=asker(app),
    )
    w.judges.blindToggled.connect(records.blind_changed)
    w.exportRecordsRequested.connect(lambda: records.open_dialog(w))
    say(app, records.message)
