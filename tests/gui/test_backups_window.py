"""File › Backups… in the window: the list shows the backups made here (time, size, judgments,
queries); a restore, once confirmed, brings back judgments deleted after the backup, leaves a
before-restore backup listed first (the undo), and the window opens the restored catalog."""

from __future__ import annotations

from datetime import datetime

from app.controllers.application import Application
from app.controllers.backups import size_text
from engine.catalog.backup import backup_catalog, list_backups
from tests.gui.test_window import indexed_app


def search(qtbot, app: Application, text: str) -> None:
    """Search and wait until the query is saved and open (judgeable)."""
    app.window.query_bar.edit.setText(text)
    with qtbot.waitSignal(app.judging.queryOpened, timeout=20_000):
        app.window.query_bar.submit()


def judged(qtbot, app: Application, judgments: dict[int, int | None]) -> None:
    """Judge photos of the open query and wait until the catalog holds them."""
    for image_id, relevance in judgments.items():
        assert app.judging.judge(image_id, relevance) is not None
    store, query_id = app.judging.store, app.judging.query_id
    expected = dict(app.judging.judgments)
    qtbot.waitUntil(lambda: store.judgments(query_id) == expected, timeout=5_000)


def open_backups(qtbot, app: Application, count: int):  # noqa: ANN201
    """File › Backups…, waited for until its list shows `count` backups."""
    action = next(a for a in app.window.findChildren(type(app.window.relevant_action))
                  if a.text() == "&Backups…")  # fmt: skip
    action.trigger()
    dialog = app.backups.dialog
    assert dialog is not None
    qtbot.waitUntil(lambda: len(dialog.rows()) == count, timeout=5_000)
    return dialog


def test_the_list_shows_the_backups_made_here(qtbot, make_app, photos) -> None:
    app: Application = indexed_app(qtbot, make_app, photos)
    search(qtbot, app, "red circle")
    model = app.window.results_model
    ids = [model.item(row).image_id for row in range(3)]
    judged(qtbot, app, {ids[0]: 1, ids[1]: 0})
    library = app.session.library
    first = backup_catalog(library.root, library.catalog.engine.url, reason="manual")

    dialog = open_backups(qtbot, app, 1)
    row = dialog.rows()[0]
    assert (row.judgments, row.queries) == ("2", "1")
    assert row.size == size_text(first.stat().st_size)
    taken = datetime.strptime(row.taken, "%Y-%m-%d %H:%M:%S")
    assert abs((datetime.now() - taken).total_seconds()) < 120  # local time, just now
    assert dialog.table.item(0, 1).text() == "2"

    # Back up now: a second backup, newest first, holding the third judgment.
    judged(qtbot, app, {ids[2]: 1})
    dialog.backup_button.click()
    qtbot.waitUntil(lambda: len(dialog.rows()) == 2, timeout=10_000)
    assert [r.judgments for r in dialog.rows()] == ["3", "2"]
    assert [r.path for r in dialog.rows()] == [str(b.path) for b in list_backups(library.root)]
    assert dialog.table.rowCount() == 2


def test_a_confirmed_restore_brings_back_deleted_judgments(qtbot, make_app, photos) -> None:
    app: Application = indexed_app(qtbot, make_app, photos)
    search(qtbot, app, "red circle")
    model = app.window.results_model
    ids = [model.item(row).image_id for row in range(3)]
    judged(qtbot, app, {ids[0]: 1, ids[1]: 0, ids[2]: 1})
    query_id = app.judging.query_id
    library = app.session.library
    backup = backup_catalog(library.root, library.catalog.engine.url, reason="manual")
    judged(qtbot, app, {ids[0]: None, ids[2]: None})  # deleted after the backup
    assert app.judging.store.judgments(query_id) == {ids[1]: 0}

    questions: list[str] = []
    answers = [False, True]

    def ask(_title: str, text: str) -> bool:
        questions.append(text)
        return answers.pop(0)

    app.window.ask_yes_no = ask
    dialog = open_backups(qtbot, app, 1)
    dialog.table.selectRow(0)

    dialog.restore_button.click()  # answered No: nothing changes
    assert "3 judgments" in questions[0]
    assert len(list_backups(library.root)) == 1
    assert app.session.library is library

    dialog.restore_button.click()  # Yes
    # It runs in a worker: the dialog says so, busy, while the window stays responsive.
    assert dialog.progress.isVisible() and "Restoring the backup" in dialog.status.text()
    qtbot.waitUntil(lambda: app.session.library is not None and app.session.library is not library,
                    timeout=20_000)  # fmt: skip
    store = app.session.query_store()
    assert store.judgments(query_id) == {ids[0]: 1, ids[1]: 0, ids[2]: 1}
    assert "judgments 1 → 3" in dialog.status.text()
    assert not dialog.progress.isVisible()

    # The catalog as it was is backed up first, listed first as the restore's undo.
    backups = list_backups(library.root)
    assert [b.reason for b in backups] == ["before-restore", "manual"]
    assert backups[0].judgments == 1 and backups[1].path == backup
    qtbot.waitUntil(lambda: len(dialog.rows()) == 2, timeout=5_000)
    assert dialog.rows()[0].undo and "undo" in dialog.table.item(0, 4).text()

    # The window shows the restored judgments when the query is opened again.
    qtbot.waitUntil(lambda: app.session.ready, timeout=20_000)
    with qtbot.waitSignal(app.judging.queryOpened, timeout=10_000):
        app.queries.open_query(query_id)
    assert app.judging.judgments == {ids[0]: 1, ids[1]: 0, ids[2]: 1}
