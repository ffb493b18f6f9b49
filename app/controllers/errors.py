"""The central handler for errors of background work: log the details, show one dialog."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from PySide6.QtWidgets import QMessageBox, QWidget

from engine.errors import QuadratError

log = logging.getLogger(__name__)


def describe_error(exc: BaseException) -> str:
    """A message for the user: engine errors speak for themselves, others name their type."""
    if isinstance(exc, QuadratError):
        return str(exc)
    text = str(exc).strip()
    return f"Unexpected error: {type(exc).__name__}{': ' + text if text else ''}"


class ErrorReporter:
    """Shows a failed task's message in a dialog with the log file's path.

    The dialog is window-modal but opened without blocking (`open()`), so background work and
    tests keep running; `dialogs` holds the ones still open.
    """

    def __init__(self, parent: Callable[[], QWidget | None], log_file: Path | None) -> None:
        self._parent = parent
        self.log_file = log_file
        self.dialogs: list[QMessageBox] = []

    def __call__(self, exc: BaseException, title: str) -> None:
        self.report(exc, title)

    def report(self, exc: BaseException, title: str) -> QMessageBox:
        log.error(
            "%s failed: %s",
            title,
            describe_error(exc),
            exc_info=(type(exc), exc, exc.__traceback__),
        )
        box = QMessageBox(self._parent())
        box.setObjectName("errorDialog")
        box.setIcon(
            QMessageBox.Icon.Warning if isinstance(exc, QuadratError) else QMessageBox.Icon.Critical
        )
        box.setWindowTitle(f"Quadrat — {title} failed")
        box.setText(f"<b>{title} failed.</b>")
        box.setInformativeText(describe_error(exc))
        if self.log_file is not None:
            box.setDetailedText(f"Details are in the log file:\n{self.log_file}")
        box.setStandardButtons(QMessageBox.StandardButton.Ok)
        box.finished.connect(lambda _result: self._forget(box))
        self.dialogs.append(box)
        box.open()
        return box

    def _forget(self, box: QMessageBox) -> None:
        if box in self.dialogs:
            self.dialogs.remove(box)
        box.deleteLater()
