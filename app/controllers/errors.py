"""The central handler for errors of background work: log them as their kind deserves and show
one readable message in the window's message band (widgets/message_banner.py).

An expected failure (one of `engine.errors`' types: bad input, a full disk, a model that cannot
be had) is said in its own words and logged as one warning line, without a traceback; anything
else is a bug: its traceback goes to the log file (and stderr), and the message names the log
file. The workers log a task's failure as it happens (`app.workers`); a failure reported here
that they did not see is logged here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from app.logs import log_failure
from engine.errors import QuadratError
from widgets.message_banner import ERROR, WARNING


def describe_error(exc: BaseException) -> str:
    """A message for the user: engine errors speak for themselves, others name their type."""
    if isinstance(exc, QuadratError):
        return str(exc)
    text = str(exc).strip()
    return f"Unexpected error: {type(exc).__name__}{': ' + text if text else ''}"


@dataclass(frozen=True)
class Reported:
    """A failure as the window showed it."""

    title: str  # "Searching failed"
    text: str  # what went wrong, readable whole
    kind: str  # widgets.message_banner's ERROR (a bug) or WARNING (an expected failure)


ShowMessage = Callable[..., None]  # (kind, title, text, *, log=bool): MainWindow.show_message


class ErrorReporter:
    """Logs a failed task and shows its message in the window (`show`, the window's
    `show_message`); `reported` keeps what was shown, newest last."""

    def __init__(self, show: ShowMessage, log_file: Path | None) -> None:
        self._show = show
        self.log_file = log_file
        self.reported: list[Reported] = []

    def __call__(self, exc: BaseException, title: str) -> None:
        self.report(exc, title)

    def report(self, exc: BaseException, title: str) -> Reported:
        log_failure(exc, title)
        expected = isinstance(exc, QuadratError)
        text = describe_error(exc)
        if not expected and self.log_file is not None:
            text += f"\nDetails are in the log file: {self.log_file}"
        shown = Reported(f"{title} failed", text, WARNING if expected else ERROR)
        self.reported.append(shown)
        self._show(shown.kind, shown.title, shown.text, log=not expected)
        return shown
