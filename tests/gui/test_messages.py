"""Messages a person can read: a refused 2,000-character query and a full disk are read whole
in the window's message band (the status line cut them at 1280 px), an export's outcome too;
expected failures leave no traceback in the log file."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QRect

from app.controllers.application import Application
from tests.gui.test_window import indexed_app
from widgets.message_banner import DONE, WARNING


def _search(qtbot, app: Application, text: str) -> None:
    bar = app.window.query_bar
    bar.set_text(text)
    before = len(app.errors.reported)
    with qtbot.waitSignal(app.search.searchStopped, timeout=20_000):
        bar.submit()
    qtbot.waitUntil(lambda: len(app.errors.reported) > before, timeout=5_000)


def _tracebacks(caplog: pytest.LogCaptureFixture) -> list[str]:
    """Log records that carry a traceback (what the log file and stderr would print)."""
    return [r.getMessage() for r in caplog.records if r.exc_info]


def test_a_2000_character_query_is_read_whole(qtbot, make_app, photos, caplog) -> None:
    app = indexed_app(qtbot, make_app, photos)
    window = app.window
    window.place_on(QRect(0, 0, 1280, 800))
    query = ("a red circle beside a blue square " * 60)[:2000]
    _search(qtbot, app, query)

    banner = window.message_banner
    assert banner.isVisible() and banner.kind() == WARNING  # bad input, not a bug
    assert banner.title.text() == "Searching failed"
    text = banner.message()
    assert "2000 characters" in text or "2,000 characters" in text
    assert "the limit is 1000" in text or "the limit is 1,000" in text
    # Readable whole: wrapped in the band (scrolling past three lines), never wider than it.
    assert banner.width() <= window.centralWidget().width()
    assert not banner.text.horizontalScrollBar().isVisible()
    assert banner.height() <= 100
    assert window.status_line.text() == "The search failed"
    assert _tracebacks(caplog) == []
    assert any("Searching failed: the query is 2000" in r.getMessage() for r in caplog.records)

    # The next search that runs closes the refusal; × closes any message.
    with qtbot.waitSignal(app.search.searchFinished, timeout=20_000):
        window.query_bar.set_text("red circle")
        window.query_bar.submit()
    assert not banner.isVisible()
    window.show_message(DONE, "", "Wrote 3 files")
    banner.close_button.click()
    assert not banner.isVisible()


def test_a_full_disk_is_read_whole_without_a_traceback(
    qtbot, make_app, photos, tmp_path: Path, caplog
) -> None:
    from tests.small_disk import small_tmpfs
    from tests.test_thumbnails import fill_disk

    app = indexed_app(qtbot, make_app, photos)
    with qtbot.waitSignal(app.judging.queryOpened, timeout=20_000):
        app.window.query_bar.set_text("red circle")
        app.window.query_bar.submit()
    with small_tmpfs(tmp_path / "small-disk", "64k") as disk:
        fill_disk(disk)
        target = disk / ("a folder with a long name for the results of " * 3).strip() / "r.csv"
        target.parent.mkdir()
        before = len(app.errors.reported)
        app.transfers.export_results(target)
        qtbot.waitUntil(lambda: len(app.errors.reported) > before, timeout=10_000)
        assert app.runner.wait(10)

    banner = app.window.message_banner
    assert banner.isVisible() and banner.kind() == WARNING
    assert banner.title.text() == "Exporting the results failed"
    assert "space" in banner.message().lower() or "full" in banner.message().lower()
    assert not banner.log_button.isVisible()  # nothing more to read in the log
    assert _tracebacks(caplog) == []
    assert any("Exporting the results failed" in r.getMessage() for r in caplog.records)
    assert not target.exists()


def test_an_export_says_where_it_wrote_in_the_band(qtbot, make_app, photos, tmp_path) -> None:
    app = indexed_app(qtbot, make_app, photos)
    with qtbot.waitSignal(app.judging.queryOpened, timeout=20_000):
        app.window.query_bar.set_text("red circle")
        app.window.query_bar.submit()
    target = tmp_path / "out" / "results.csv"
    target.parent.mkdir()
    app.transfers.export_results(target)
    banner = app.window.message_banner
    qtbot.waitUntil(banner.isVisible, timeout=10_000)
    assert banner.kind() == DONE
    assert banner.message().startswith("Wrote ") and str(target) in banner.message()
    assert target.is_file()
