"""The window when photos go missing or a collection folder moves: counts shown, forgetting
asked for, a moved folder offered as the same collection."""

from __future__ import annotations

import logging
from pathlib import Path

from tests.gui.test_window import index, indexed_app, search


def test_missing_photos_are_shown_and_forgotten_only_when_confirmed(
    qtbot, make_app, photos
) -> None:
    app = indexed_app(qtbot, make_app, photos)
    qtbot.waitUntil(lambda: bool(app.library.stats), timeout=10_000)
    panel = app.window.library_panel
    for path in sorted(photos.rglob("*.jpg"))[:3]:
        path.unlink()
    questions: list[str] = []
    answers = [False, True]

    def ask(title: str, text: str) -> bool:
        questions.append(text)
        return answers.pop(0)

    app.window.ask_yes_no = ask
    with qtbot.waitSignal(app.library.indexingFinished, timeout=60_000) as blocker:
        app.library.rescan(app.library.stats[0].id)
    assert blocker.args[0].report.missing == 3
    qtbot.waitUntil(lambda: "3 missing from disk (judgments kept)" in app.window.status_line.text())
    qtbot.waitUntil(lambda: app.library.stats[0].missing == 3, timeout=10_000)
    assert not panel.tree.isColumnHidden(4)
    assert panel.tree.topLevelItem(0).text(4) == "3"
    assert "missing from disk" in panel.summary.text()
    messages: list[str] = []
    app.search.message.connect(messages.append)
    search(qtbot, app, "red circle")
    assert app.window.results_model.rowCount() == 108 - 3
    assert "3 photos missing from disk, not searched" in messages[-1]
    panel.select(app.library.stats[0].id)
    assert panel.forget_button.isVisibleTo(panel)
    assert panel.forget_button.text() == "Forget 3 missing…"

    # The first answer is No: nothing is forgotten.
    panel.forget_button.click()
    qtbot.waitUntil(lambda: len(questions) == 1, timeout=10_000)
    assert "Forget 3 photos" in questions[0]
    qtbot.wait(200)
    assert app.library.stats[0].missing == 3

    with qtbot.waitSignal(
        app.library.statsChanged, timeout=20_000, check_params_cb=lambda s: s[0].missing == 0
    ):
        panel.forget_button.click()
    assert panel.tree.isColumnHidden(4)
    assert not panel.forget_button.isVisibleTo(panel)


def test_a_moved_folder_is_offered_as_the_same_collection(
    qtbot, make_app, photos, tmp_path: Path
) -> None:
    app = indexed_app(qtbot, make_app, photos)
    qtbot.waitUntil(lambda: bool(app.library.stats), timeout=10_000)
    questions: list[str] = []
    app.window.ask_yes_no = lambda title, text: questions.append(text) or True
    moved = tmp_path / "renamed-folder"
    photos.rename(moved)

    with qtbot.waitSignal(app.library.indexingFinished, timeout=60_000) as blocker:
        app.library.add_folder(moved)
    report = blocker.args[0].report
    assert report.relocated_from == str(photos)
    assert (report.indexed, report.unchanged) == (0, 108)
    assert len(questions) == 1 and "renamed-folder" in questions[0]
    qtbot.waitUntil(
        lambda: [s.root for s in app.library.stats] == [str(moved.resolve())], timeout=10_000
    )
    assert app.library.stats[0].indexed == 108


def test_a_new_folder_is_indexed_without_questions(qtbot, make_app, photos) -> None:
    app = make_app()
    qtbot.waitUntil(lambda: app.session.library is not None, timeout=20_000)
    app.window.ask_yes_no = lambda title, text: (_ for _ in ()).throw(AssertionError(text))
    index(qtbot, app, photos)


def test_a_photo_gone_from_disk_gets_a_placeholder_not_a_warning(
    qtbot, make_app, photos, caplog
) -> None:
    app = indexed_app(qtbot, make_app, photos)
    caplog.set_level(logging.INFO)
    thumbnails = app.thumbnails
    thumbnails.request(987654, str(photos / "gone.jpg"), None)
    qtbot.waitUntil(lambda: 987654 not in thumbnails._pending, timeout=10_000)
    assert thumbnails.pixmap(987654) is None
    assert 987654 in thumbnails._failed  # not asked for again while the grid repaints
    loud = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert loud == [], [r.getMessage() for r in loud]
