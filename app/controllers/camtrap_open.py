"""File › Open Camtrap DP package…: a package's folder indexed as a collection with its
deployments, media times, places and licence, and its observations as detections
(`engine.io.camtrap_read.open_camtrap_package`), in the write pool like any indexing run. A
package whose media are URLs is refused in one line through the central error handler."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QAction

from app.controllers.install import announce, menu, say
from app.controllers.session import LibrarySession
from app.workers import WRITE, TaskContext, TaskHandle, TaskRunner

if TYPE_CHECKING:
    from app.controllers.application import Application
    from engine.io.camtrap_read import CamtrapOpenReport

ACTION_TEXT = "Open Camtrap DP package…"
_FILTER = "Camtrap DP package (datapackage.json)"


class CamtrapOpenController(QObject):
    """Opens a package in a worker; says what it did."""

    message = Signal(str)
    outcome = Signal(str)  # the package's lines: the message band and the status line
    opened = Signal(object)  # the CamtrapOpenReport of a finished open

    def __init__(self, runner: TaskRunner, session: LibrarySession) -> None:
        super().__init__()
        self.runner = runner
        self.session = session

    def open_package(self, path: str | Path) -> TaskHandle | None:
        """Index and read the package at `path` (its folder or its datapackage.json)."""
        session = self.session
        if session.library is None:
            self.message.emit("The library is still opening: open the package once it is")
            return None
        batch_size, decode = session.settings.batch_size, session.settings.decode

        def run(ctx: TaskContext) -> CamtrapOpenReport:
            from engine.indexing.indexer import Indexer
            from engine.io.camtrap_read import open_camtrap_package

            library = session.library
            assert library is not None
            encoder = session.model_encoder()  # both towers: photos are encoded
            indexer = Indexer(library, encoder, batch_size=batch_size, decode=decode)
            return open_camtrap_package(indexer, path, ctx.progress, ctx.cancel)

        self.message.emit(f"Opening the Camtrap DP package {Path(path).name}…")
        return self.runner.submit(
            run, title="Opening a Camtrap DP package", pool=WRITE, on_success=self._finished
        )

    def _finished(self, report: CamtrapOpenReport) -> None:
        library = self.session.library
        if library is not None:
            self.session.note_library_model(library.model_key, library.model_spec)
        self.opened.emit(report)
        self.outcome.emit("; ".join(report.lines()[:3]))


def install(app: Application) -> None:
    """File › Open Camtrap DP package… (after Add folder…); the Library pane counts again."""
    controller = app.camtrap_open = CamtrapOpenController(app.runner, app.session)
    window = app.window
    action = QAction(ACTION_TEXT, window)

    def choose() -> None:
        chosen = window.ask_open_file("Open a Camtrap DP package", _FILTER)
        if chosen:
            controller.open_package(chosen)

    action.triggered.connect(lambda _checked=False: choose())
    file_menu = menu(window, "File")
    actions = file_menu.actions()
    after = (
        actions.index(window.add_folder_action) + 1 if window.add_folder_action in actions else 0
    )
    if after < len(actions):
        file_menu.insertAction(actions[after], action)
    else:
        file_menu.addAction(action)
    controller.opened.connect(lambda _report: app.library.refresh())
    say(app, controller.message)
    announce(app, controller.outcome)
