"""An expected failure (the model hub unreachable offline) is one line on stderr and in the
log file, with no traceback; a bug keeps its traceback in both."""

from __future__ import annotations

import io
import logging
import sys
import urllib.error

from app.logs import setup_logging
from app.workers import _execute
from engine.models.hub import unavailable
from engine.progress import CancelToken


def offline_download(ctx: object) -> None:
    """What a model download raises offline: the hub's one line, the socket error its cause."""
    try:
        raise urllib.error.URLError("[Errno -2] Name or service not known")
    except urllib.error.URLError as exc:
        reason = f"huggingface.co cannot be reached ({exc.reason})"
        raise unavailable("ViT-B-32:laion2b_s34b_b79k", reason) from exc


def a_bug(ctx: object) -> None:
    raise KeyError("a key that should be there")


def run_task(fn, monkeypatch) -> tuple[str, str]:  # noqa: ANN001
    """(stderr, new log-file text) of one failing task run as the window's workers run it."""
    log_file = setup_logging()
    assert log_file is not None
    before = log_file.read_text(encoding="utf-8") if log_file.exists() else ""
    stderr = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stderr)
    outcomes: list[str] = []
    _execute(fn, CancelToken(), "Downloading the model", lambda kind, _: outcomes.append(kind))
    assert outcomes == ["failure"]
    for handler in logging.getLogger().handlers:
        handler.flush()
    return stderr.getvalue(), log_file.read_text(encoding="utf-8")[len(before) :]


def test_an_offline_download_is_one_line_without_a_traceback(monkeypatch) -> None:
    stderr, logged = run_task(offline_download, monkeypatch)
    assert "Traceback" not in stderr and "Traceback" not in logged
    (line,) = stderr.splitlines()
    assert line.startswith("WARNING: Downloading the model failed: could not download")
    assert "huggingface.co cannot be reached" in line
    assert len(logged.splitlines()) == 1


def test_a_bug_keeps_its_traceback(monkeypatch) -> None:
    stderr, logged = run_task(a_bug, monkeypatch)
    assert "Traceback" in stderr and "Traceback" in logged
    assert "KeyError" in logged


def a_bad_query(ctx: object) -> None:
    from engine.errors import BadInputError

    raise BadInputError("the query is 2000 characters long; the limit is 1000")


def test_a_bad_input_is_one_line_without_a_traceback(monkeypatch) -> None:
    """Any of engine.errors' types is expected: one warning line, no traceback anywhere (a
    refused query printed its traceback on the terminal)."""
    stderr, logged = run_task(a_bad_query, monkeypatch)
    assert "Traceback" not in stderr and "Traceback" not in logged
    (line,) = stderr.splitlines()
    assert line == (
        "WARNING: Downloading the model failed: the query is 2000 characters long; "
        "the limit is 1000"
    )
    assert len(logged.splitlines()) == 1
