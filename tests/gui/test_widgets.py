"""Widgets on their own: the results model (qtmodeltester), query history, GUI responsiveness."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, QTimer

from widgets.query_bar import QueryBar
from widgets.results import ResultItem, ResultRole, ResultsModel


def items(n: int) -> list[ResultItem]:
    return [
        ResultItem(i + 1, 1.0 - i / 1000, 100 + i, f"/p/{i}.jpg", f"photo {i}") for i in range(n)
    ]


def test_results_model_passes_the_model_tester(qtmodeltester) -> None:
    model = ResultsModel()
    model.set_results(items(50))
    qtmodeltester.check(model, force_py=True)
    assert model.rowCount() == 50
    index = model.index(3, 0)
    assert model.data(index, ResultRole.Rank) == 4
    assert model.data(index, ResultRole.ImageId) == 103
    assert model.data(index, ResultRole.Judgment) is None
    # The judgment role is where relevance marking will live: only that row changes.
    changed: list[int] = []
    model.dataChanged.connect(lambda top, bottom, roles: changed.append(top.row()))
    assert model.setData(index, 1, ResultRole.Judgment)
    assert model.data(index, ResultRole.Judgment) == 1
    assert changed == [3]
    model.thumbnail_ready(107)
    assert changed == [3, 7]


def test_query_history_steps_with_up_and_down(qtbot) -> None:
    bar = QueryBar()
    qtbot.addWidget(bar)
    bar.set_history(["godwit feeding", "red circle"])
    bar.edit.setText("draft")
    qtbot.keyClick(bar.edit, Qt.Key.Key_Up)
    assert bar.text() == "red circle"
    qtbot.keyClick(bar.edit, Qt.Key.Key_Up)
    assert bar.text() == "godwit feeding"
    qtbot.keyClick(bar.edit, Qt.Key.Key_Up)
    assert bar.text() == "godwit feeding"
    qtbot.keyClick(bar.edit, Qt.Key.Key_Down)
    qtbot.keyClick(bar.edit, Qt.Key.Key_Down)
    assert bar.text() == "draft"
    with qtbot.waitSignal(bar.searchRequested) as blocker:
        qtbot.keyClick(bar.edit, Qt.Key.Key_Return)
    assert blocker.args == ["draft", None, ""]


def test_history_is_kept_between_sessions(qtbot, make_app, photos) -> None:
    from app.settings import QueryHistory
    from tests.gui.test_window import indexed_app, search

    app = indexed_app(qtbot, make_app, photos)
    search(qtbot, app, "yellow   square")
    assert QueryHistory().items == ["yellow square"]


def test_gui_stays_responsive_while_indexing(qtbot, make_app, demo_collection, monkeypatch) -> None:
    # The full demo collection (960 photos, only read): long enough to watch. The GUI thread's
    # timer keeps ticking while the run goes on, and each tick sees the progress bar moved on:
    # indexing on the GUI thread would let no tick in between (the freeze in milliseconds is
    # a benchmark: tests/bench/bench_responsiveness.py).
    monkeypatch.setenv("QUADRAT_CHECKPOINT_EVERY", "16")
    app = make_app()
    qtbot.waitUntil(lambda: app.session.library is not None, timeout=20_000)
    bar = app.window.library_panel.progress.bar
    seen: list[int] = []
    timer = QTimer()
    timer.setInterval(10)
    timer.timeout.connect(lambda: seen.append(bar.value()))
    timer.start()
    try:
        with qtbot.waitSignal(app.library.indexingFinished, timeout=120_000) as blocker:
            app.library.add_folder(demo_collection.root)
    finally:
        timer.stop()
    assert blocker.args[0].report.indexed == demo_collection.image_count
    midway = {value for value in seen if 0 < value < demo_collection.image_count}
    assert len(midway) >= 5, f"the window saw the progress at {sorted(midway)} only"


def drop_event(path: Path):  # -> QDropEvent
    """A drop of one local file or folder, as the window system delivers it."""
    from PySide6.QtCore import QMimeData, QPointF, QUrl
    from PySide6.QtGui import QDropEvent

    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(path))])
    event = QDropEvent(
        QPointF(10, 10),
        Qt.DropAction.CopyAction,
        mime,
        Qt.MouseButton.LeftButton,
        Qt.KeyboardModifier.NoModifier,
    )
    event._mime = mime  # the event does not own its mime data: keep it alive with the event
    return event


def test_dropping_an_image_searches_by_image(
    qtbot, make_app, photos, small_demo_collection
) -> None:

    from tests.gui.test_window import indexed_app

    app = indexed_app(qtbot, make_app, photos)
    query = next(p for p, label in small_demo_collection.labels.items() if label == "blue triangle")
    bar = app.window.query_bar
    event = drop_event(photos / query)
    with qtbot.waitSignal(app.search.searchFinished, timeout=20_000):
        bar.dropEvent(event)
    assert bar.image() == photos / query
    top = app.window.results_model.item(0)
    assert Path(top.path) == photos / query  # the photo itself is its own best match
    assert app.window.results_model.item(1).title == "blue triangle"


def test_void_qt_calls_cannot_use_up_none(qtbot) -> None:
    # PySide6 wheels built for Python >= 3.12 drop a reference to None per void call on 3.11,
    # and Python aborts ("deallocating None") once None's few thousand references are gone;
    # widgets/qtcompat.py guards against it. Measure what void calls cost None here, and check
    # None can pay that for far longer than any session.
    import sys

    from PySide6.QtGui import QColor, QImage, QPainter, QPen

    from widgets.qtcompat import NONE_RESERVE, none_guarded

    # Fewer calls than None's usual count (~5,000): an unguarded leaking wheel fails the
    # assertion below instead of aborting Python.
    rounds = 1_000
    image = QImage(8, 8, QImage.Format.Format_RGB32)
    painter = QPainter(image)
    pen = QPen(QColor(10, 20, 30))
    before = sys.getrefcount(None)
    for _ in range(rounds):
        painter.save()
        painter.setPen(pen)
        painter.restore()
    after = sys.getrefcount(None)
    painter.end()
    lost_per_call = max(0, before - after) / (3 * rounds)
    session_calls = 10**11  # 50 void calls a frame at 60 frames a second, for a year
    assert after > lost_per_call * session_calls + 1_000, (
        f"None lost {before - after} references in {3 * rounds} void calls; {after} left"
    )
    # The guard is in place whatever this wheel does (no-op where None is immortal, 3.12+).
    assert none_guarded()
    if sys.version_info < (3, 12):
        assert after >= NONE_RESERVE


def test_a_folder_dropped_on_the_window_is_added_to_the_library(qtbot, tmp_path) -> None:

    from widgets.main_window import MainWindow

    window = MainWindow()
    qtbot.addWidget(window)
    folder = tmp_path / "photos"
    folder.mkdir()
    event = drop_event(folder)
    with qtbot.waitSignal(window.library_panel.addFolderRequested) as blocker:
        window.dropEvent(event)
    assert blocker.args == [str(folder)]
