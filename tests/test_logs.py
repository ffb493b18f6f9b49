"""Logging set-up: warnings reach the current stderr, details reach the log file."""

from __future__ import annotations

import io
import logging
import sys

from app.logs import setup_logging


def test_warnings_follow_stderr_when_it_is_replaced_and_details_reach_the_file(monkeypatch):
    log_file = setup_logging()
    replacement = io.StringIO()
    monkeypatch.setattr(sys, "stderr", replacement)  # e.g. a host program redirecting stderr
    logging.getLogger("quadrat.test").warning("disk almost full")
    logging.getLogger("quadrat.test").debug("a detail for the log file only")
    assert "WARNING: disk almost full" in replacement.getvalue()
    assert "detail" not in replacement.getvalue()
    for handler in logging.getLogger().handlers:
        handler.flush()
    assert log_file is not None and "a detail for the log file only" in log_file.read_text()
