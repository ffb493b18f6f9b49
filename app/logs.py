"""Logging set-up shared by the CLI and the GUI: a rotating file with details, terse stderr."""

from __future__ import annotations

import logging
import logging.handlers
import sys
from pathlib import Path
from typing import TextIO

from app.paths import log_dir


class _CurrentStderrHandler(logging.StreamHandler[TextIO]):
    """Writes to whatever `sys.stderr` is at the time of the message (it may be replaced)."""

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, _value: object) -> None:
        pass


def setup_logging(stderr_level: int = logging.WARNING) -> Path | None:
    """Log everything to the log file and warnings to stderr. Returns the log file path."""
    root = logging.getLogger()
    root.setLevel(logging.DEBUG)
    for handler in list(root.handlers):
        if getattr(handler, "_quadrat", False):
            root.removeHandler(handler)
    console = _CurrentStderrHandler()
    console.setLevel(stderr_level)
    console.setFormatter(logging.Formatter("%(levelname)s: %(message)s"))
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
            logging.Formatter("%(asctime)s %(levelname)s %(threadName)s %(name)s: %(message)s")
        )
        file_handler._quadrat = True  # type: ignore[attr-defined]
        root.addHandler(file_handler)
    except OSError:
        path = None  # a read-only home must not stop the program
    for noisy in ("PIL", "urllib3", "httpx", "filelock", "alembic", "sqlalchemy", "matplotlib"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    return path
