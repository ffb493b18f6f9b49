"""Library › Deployments…: the cameras of the open library with their clock offsets, and the
event gap. A clock offset set here (or undone) moves every time shown, filtered and exported
for that deployment's photos, and its frames are grouped into events again; the writes run in
the write pool, the listing in the read pool, and each outcome is said in one line.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, Signal

from app.controllers.install import say
from app.controllers.session import LibrarySession
from app.workers import READ, WRITE, TaskContext, TaskHandle, TaskRunner
from engine.errors import BadInputError
from widgets.deployments_dialog import DeploymentRow, DeploymentsDialog

if TYPE_CHECKING:
    from PySide6.QtWidgets import QWidget

    from app.controllers.application import Application
    from engine.catalog.library import Library
    from engine.indexing.deployments import DeploymentInfo

# "+01:00:00", "-0:30", "+3600", "90": hours[:minutes[:seconds]] with a colon, else seconds.
_CLOCK = re.compile(r"^([+-]?)(\d{1,6})(?::([0-5]\d))?(?::([0-5]\d))?$")
_SECONDS = re.compile(r"^[+-]?\d{1,9}$")


def parse_clock_offset(text: str) -> int:
    """Seconds from "+01:00:00", "-0:30" (hours and minutes) or a whole number of seconds;
    a one-line BadInputError for anything else."""
    cleaned = text.strip().replace(" ", "")
    if _SECONDS.match(cleaned):
        return int(cleaned)
    match = _CLOCK.match(cleaned)
    if match is None or match.group(3) is None:
        raise BadInputError(
            f"a clock offset is +HH:MM:SS (e.g. +01:00:00) or seconds (e.g. -3600), got {text!r}"
        )
    sign, hours, minutes, seconds = match.groups()
    total = int(hours) * 3600 + int(minutes) * 60 + int(seconds or 0)
    return -total if sign == "-" else total


def format_clock_offset(seconds: int) -> str:
    """+HH:MM:SS, as the offset field takes it back."""
    sign = "-" if seconds < 0 else "+"
    hours, rest = divmod(abs(seconds), 3600)
    return f"{sign}{hours:02d}:{rest // 60:02d}:{rest % 60:02d}"


def _moment(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value is not None else "—"


def _row(info: DeploymentInfo) -> DeploymentRow:
    span = (
        "no capture time" if info.first is None else f"{_moment(info.first)} – {_moment(info.last)}"
    )
    return DeploymentRow(
        deployment_id=info.id,
        name=info.name,
        folder=info.folder or "(the collection's folder)",
        photos=info.photos,
        span=span,
        clock_offset=format_clock_offset(info.clock_offset_s),
        can_undo=info.previous_clock_offset_s is not None,
    )


@dataclass(frozen=True)
class _Listing:
    rows: list[DeploymentRow]
    gap: int


class DeploymentsController(QObject):
    """Lists deployments in the dialog and writes clock offsets and the event gap."""

    message = Signal(str)
    cameraDataChanged = Signal()  # times or events changed: what shows them reads them again

    def __init__(self, runner: TaskRunner, session: LibrarySession) -> None:
        super().__init__()
        self.runner = runner
        self.session = session
        self.dialog: DeploymentsDialog | None = None

    def open_dialog(self, parent: QWidget | None = None) -> DeploymentsDialog | None:
        """The dialog, its rows read in the background; None (said) with no library open."""
        if self.session.library is None:
            self.message.emit("Open a library first: deployments are its camera folders")
            return None
        dialog = self.dialog = DeploymentsDialog(parent)
        dialog.offsetRequested.connect(self.set_offset)
        dialog.undoRequested.connect(self.undo_offset)
        dialog.gapRequested.connect(self.set_gap)
        dialog.open()
        self.refresh()
        return dialog

    def refresh(self) -> TaskHandle | None:
        """Read the deployments and the event gap (read pool) into the dialog."""
        library = self.session.library
        if library is None:
            return None

        def read(ctx: TaskContext) -> _Listing:
            from engine.indexing.deployments import list_deployments
            from engine.indexing.events import event_gap

            return _Listing([_row(d) for d in list_deployments(library)], event_gap(library))

        def shown(listing: _Listing) -> None:
            if self.dialog is not None:
                self.dialog.show_deployments(listing.rows, listing.gap)

        return self.runner.submit(
            read, title="Reading the deployments", pool=READ, group="deployments",
            on_success=shown,
        )  # fmt: skip

    def _say(self, line: str) -> None:
        self.message.emit(line)
        if self.dialog is not None:
            self.dialog.show_outcome(line)

    def _write(
        self, title: str, write: Callable[[Library], Any], done_line: Callable[[Any], str]
    ) -> TaskHandle | None:
        """Run `write(library)` in the write pool; say `done_line(result)`, list again."""
        library = self.session.library
        if library is None:
            self._say("Open a library first")
            return None

        def run(ctx: TaskContext) -> tuple[Any, int]:
            from engine.indexing.events import count_events

            result = write(library)
            with library.catalog.session() as s:
                return result, count_events(s.connection())

        def done(outcome: tuple[Any, int]) -> None:
            result, events = outcome
            self._say(f"{done_line(result)}; {events:,} events")
            self.refresh()
            self.cameraDataChanged.emit()

        def failed(error: BaseException) -> None:
            from engine.errors import QuadratError

            if isinstance(error, QuadratError):  # an offset out of range, a deployment gone
                self._say(f"{title} failed: {error}")
            else:
                self.runner.report_error(error, title)

        return self.runner.submit(run, title=title, pool=WRITE, on_success=done, on_failure=failed)

    def set_offset(self, deployment_id: int, text: str) -> TaskHandle | None:
        """Set a deployment's clock offset from the text typed (refused in one line when it
        is no offset); its photos' times and events follow."""
        try:
            seconds = parse_clock_offset(text)
        except BadInputError as error:
            self._say(str(error))
            return None

        def write(library: Library) -> tuple[int, int]:
            from engine.indexing.deployments import set_clock_offset

            return set_clock_offset(library, deployment_id, seconds)

        return self._write(
            "Setting the clock offset", write, lambda r: self._offset_line(deployment_id, r)
        )

    def undo_offset(self, deployment_id: int) -> TaskHandle | None:
        """Bring back a deployment's previous clock offset."""

        def write(library: Library) -> tuple[int, int]:
            from engine.indexing.deployments import undo_clock_offset

            return undo_clock_offset(library, deployment_id)

        return self._write(
            "Undoing the clock offset", write, lambda r: self._offset_line(deployment_id, r)
        )

    def set_gap(self, seconds: int) -> TaskHandle | None:
        """Set the library's event gap; every camera's frames are grouped again."""

        def write(library: Library) -> int:
            from engine.indexing.events import set_event_gap

            return set_event_gap(library, seconds)

        return self._write("Setting the event gap", write, lambda _r: f"Event gap {seconds} s")

    @staticmethod
    def _offset_line(deployment_id: int, change: tuple[int, int]) -> str:
        before, after = change
        return (
            f"Deployment {deployment_id}: clock offset {format_clock_offset(after)} "
            f"(was {format_clock_offset(before)})"
        )


def install(app: Application) -> None:
    """Library › Deployments…: clock offsets and the event gap; times and events read again."""
    w = app.window
    deployments = app.deployments = DeploymentsController(app.runner, app.session)
    w.deploymentsRequested.connect(lambda: deployments.open_dialog(w))
    say(app, deployments.message)
