"""Judge › Write XMP sidecars…: the open query's judgments and attributes written as keywords
into the judged photos' XMP sidecars (`engine.io.xmp.write_sidecars`), in the write pool so
every judgment clicked before it is in them; the photos themselves are never written. A write
the system refuses (a full disk, a read-only mirror) stops the run; its one line (how many
sidecars were written and how many not) reaches the message band through the central error
handler, as an expected failure."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal

from app.controllers.install import announce, asker, say
from app.controllers.open_query import OpenQuery
from app.controllers.session import LibrarySession
from app.workers import WRITE, TaskContext, TaskHandle, TaskRunner

if TYPE_CHECKING:
    from app.controllers.application import Application
    from engine.io.xmp import SidecarReport


class SidecarsController(QObject):
    """Writes the open query's sidecars after asking (`ask(title, text) -> bool`)."""

    message = Signal(str)
    outcome = Signal(str)  # what was written: the message band and the status line
    written = Signal(object)  # the SidecarReport of a finished write

    def __init__(
        self,
        runner: TaskRunner,
        session: LibrarySession,
        query: OpenQuery,
        ask: Callable[[str, str], bool],
    ) -> None:
        super().__init__()
        self.runner = runner
        self.session = session
        self.query = query  # read only: the open query and how many photos it judged
        self.ask = ask

    def write_sidecars(self) -> TaskHandle | None:
        """Ask, then write in a worker; the outcome is said in the message band."""
        library, query_id = self.session.library, self.query.query_id
        if library is None or query_id is None:
            self.message.emit("Open a saved query first: its judgments go into the sidecars")
            return None
        judged = len(self.query.judgments)
        if not judged:
            self.message.emit("Judge some photos first: there is nothing to write")
            return None
        if not self.ask(
            "Write XMP sidecars",
            f"Write this query's judgments and attributes as keywords into the XMP sidecars "
            f"of its {judged:,} judged photos (photo.jpg.xmp beside each photo; an existing "
            "sidecar is updated and keeps its content)? The photos are not changed.",
        ):
            return None

        def write(ctx: TaskContext) -> SidecarReport:
            from engine.io.xmp import write_sidecars

            return write_sidecars(library, query_id, progress=ctx.progress, cancel=ctx.cancel)

        return self.runner.submit(
            write,
            title="Writing XMP sidecars",
            pool=WRITE,  # after every judgment queued before it
            on_success=self._finished,
        )

    def _finished(self, report: SidecarReport) -> None:
        self.written.emit(report)
        self.outcome.emit("; ".join(report.lines()))


def install(app: Application) -> None:
    """Judge › Write XMP sidecars…"""
    sidecars = app.sidecars = SidecarsController(
        app.runner, app.session, app.open_query, asker(app)
    )
    app.window.writeSidecarsRequested.connect(sidecars.write_sidecars)
    say(app, sidecars.message)
    announce(app, sidecars.outcome)
