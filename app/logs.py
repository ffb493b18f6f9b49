"""Logging set-up shared by the CLI and the GUI: a rotating file with details, terse stderr."""

from __future__ import annotations

import contextlib
import logging
import logging.handlers
import sys
from pathlib import Path
from typing import TextIO

from app.paths import log_dir

log = logging.getLogger("quadrat")


class _CurrentStderrHandler(logging.StreamHandler[TextIO]):
    """Writes to whatever `sys.stderr` is at the time of the message (it may be replaced)."""

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, _value: object) -> None:
        pass


def expected_failure(exc: BaseException) -> bool:
    """A failure that is part of normal use and that its one-line message says in full: any
    of Quadrat's own errors (`engine.errors`: bad input, a full disk, the model hub or a
    language-model endpoint not answering, ...). Logged without a traceback; everything else
    (a bug) keeps its traceback, in the log file and on stderr."""
    from engine.errors import QuadratError

    return isinstance(exc, QuadratError)


_LOGGED = "_quadrat_logged"  # set on an exception once it has been logged


def log_failure(exc: BaseException, title: str) -> None:
    """Log the failure of `title` ("Searching") once, however many handlers see it: a warning
    line for an expected failure, the traceback for a bug."""
    if getattr(exc, _LOGGED, False):
        return
    if expected_failure(exc):
        log.warning("%s failed: %s", title, exc)
    else:
        log.error("%s failed", title, exc_info=(type(exc), exc, exc.__traceback__))
    with contextlib.suppress(AttributeError):  # an exception type without a __dict__
        setattr(exc, _LOGGED, True)


class _Formatter(logging.Formatter):
    """A formatter that writes an expected failure (see `expected_failure`) as its one line."""

    def format(self, record: logging.LogRecord) -> str:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is None or not expected_failure(exc):
            return super().format(record)
        # The record is shared by every handler: hide its traceback only while formatting.
        saved = record.exc_info, record.exc_text
        record.exc_info, record.exc_text = None, None
        try:
            return super().format(record)
        finally:
            record.exc_info, record.exc_text = saved


def setup_logging(stderr_level: int = logging.WARNING) -> Path | None:
    """Log everything to the log file and warnings to stderr. Returns the log file path."""
    root = logging.getLogger()
    root.setLevel(logging.DEBUG)
    for handler in list(root.handlers):
        if getattr(handler, "_quadrat", False):
            root.removeHandler(handler)
    console = _CurrentStderrHandler()
    console.setLevel(stderr_level)
    console.setFormatter(_Formatter("%(levelname)s: %(message)s"))
    console._quadrat = True  # type: ignore[attr-defined]
    root.addHandler(console)
    path: Path | None = None
    try:
        log_dir().mkdir(parents=True, exist_ok=True)
        path = log_dir() / "quadrat.log"
        file_handler = logging.handlers.RotatingFileHandler(
            path, maxBytes=5_000_000, backupCount=3, encoding="utf-8"
        )
        file_handler.setLevel(logging.DEBUG)
        file_handler.setFormatter(
            _Formatter("%(asctime)s %(levelname)s %(threadName)s %(name)s: %(message)s")
        )
        file_handler._quadrat = True  # type: ignore[attr-defined]
        root.addHandler(file_handler)
    except OSError:
        path = None  # a read-only home must not stop the program
    for noisy in ("PIL", "urllib3", "httpx", "filelock", "alembic", "sqlalchemy", "matplotlib"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    return path
