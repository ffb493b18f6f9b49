"""Judge › Export records… in the window: before the file is asked for, the dialog shows what
would be written (the count, and every photo left out or written with a problem, with its
reason); it writes the open query's relevant photos as a Darwin Core Archive (read back by
python-dwca-reader), a CSV or a Camtrap DP package in the background; the outcome, a failure
included, is a readable message and one line in the status bar; while judging blind, export
waits and says why."""

from __future__ import annotations

import csv
from pathlib import Path

from dwca.read import DwCAReader
from PySide6.QtGui import QAction

from app.controllers.application import Application
from tests.gui.test_backups_window import judged, search
from tests.gui.test_window import indexed_app
from widgets.records_dialog import LEFT_OUT, WRITTEN, RecordRow, RecordsDialog


def export_records_action(app: Application) -> QAction:
    return app.window.export_records_action


def checked(qtbot, app: Application) -> RecordsDialog:
    """The open dialog, once it shows what would be written."""
    dialog = app.records.dialog
    assert dialog is not None and dialog.isVisible()
    qtbot.waitUntil(lambda: app.records.check is not None, timeout=10_000)
    qtbot.waitUntil(lambda: "Checking" not in dialog.intro.text(), timeout=10_000)
    return dialog


def test_the_dialog_writes_an_archive_and_a_csv_and_says_so(qtbot, make_app, photos, tmp_path):
    app: Application = indexed_app(qtbot, make_app, photos)
    search(qtbot, app, "red circle")
    model = app.window.results_model
    ids = [model.item(row).image_id for row in range(4)]
    judged(qtbot, app, {ids[0]: 1, ids[1]: 1, ids[2]: 1, ids[3]: 0})

    export_records_action(app).trigger()
    dialog = checked(qtbot, app)
    assert dialog.archive_button.isChecked() and not dialog.restricted_box.isChecked()
    assert dialog.intro.text().startswith("All 3 photos judged relevant for “red circle” will")
    assert dialog.rows() == ()
    assert "Note: 3 photo identifiers are file: URIs" in dialog.intro.text()
    assert dialog.path_edit.text().endswith("red-circle-records.zip")
    archive = tmp_path / "records.zip"
    dialog.path_edit.setText(str(archive))
    dialog.export_button.click()
    assert not dialog.isVisible()
    status = app.window.status_line
    qtbot.waitUntil(lambda: "records written" in status.text(), timeout=10_000)
    assert status.text() == f"3 records written to {archive}"
    box = app.records.outcome_box
    assert box is not None and box.isVisible() and box.text() == status.text()
    with DwCAReader(str(archive)) as dwca:
        assert len(dwca.rows) == 3

    # The CSV: the file's suffix follows the format chosen.
    export_records_action(app).trigger()
    dialog = checked(qtbot, app)
    dialog.path_edit.setText(str(tmp_path / "table.zip"))
    dialog.csv_button.setChecked(True)
    assert dialog.path_edit.text() == str(tmp_path / "table.csv")
    dialog = checked(qtbot, app)
    dialog.export_button.click()
    qtbot.waitUntil(lambda: "table.csv" in status.text(), timeout=10_000)
    with (tmp_path / "table.csv").open(encoding="utf-8", newline="") as handle:
        assert len(list(csv.DictReader(handle))) == 3


def test_a_failed_export_is_said_in_a_message_without_a_traceback(
    qtbot, make_app, photos, tmp_path, caplog
):
    app: Application = indexed_app(qtbot, make_app, photos)
    status = app.window.status_line
    export_records_action(app).trigger()  # no query open: said, no dialog
    assert app.records.dialog is None
    assert status.text().startswith("Open a query")

    search(qtbot, app, "red circle")
    first = app.window.results_model.item(0).image_id
    judged(qtbot, app, {first: 1})
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    export_records_action(app).trigger()
    dialog = checked(qtbot, app)
    dialog.path_edit.setText(str(blocker / "records.zip"))  # a folder that cannot exist
    caplog.clear()
    dialog.export_button.click()
    qtbot.waitUntil(lambda: "was not written" in status.text(), timeout=10_000)
    assert "\n" not in status.text()
    assert not Path(blocker / "records.zip").exists()
    box = app.records.outcome_box
    assert box is not None and box.isVisible()
    assert box.text() == status.text() and box.text().startswith("The Darwin Core archive was")
    # An expected failure: no traceback anywhere (the terminal shows what the log records).
    assert not [r for r in caplog.records if r.exc_info], [r.getMessage() for r in caplog.records]


def test_the_dialog_writes_a_camtrap_dp_package(qtbot, make_app, tmp_path):
    from engine.demo.camera_traps import write_camera_trap_demo

    demo = write_camera_trap_demo(tmp_path / "card")
    app: Application = indexed_app(qtbot, make_app, demo.root)
    search(qtbot, app, "a red circle")
    model = app.window.results_model
    judged(qtbot, app, {model.item(0).image_id: 1, model.item(1).image_id: 1})

    export_records_action(app).trigger()
    dialog = checked(qtbot, app)
    dialog.path_edit.setText(str(tmp_path / "deer.zip"))
    dialog.camtrap_button.setChecked(True)  # a folder: the suffix goes
    assert dialog.path_edit.text() == str(tmp_path / "deer")
    dialog.restricted_box.setChecked(True)  # the demo's frames record no licence
    qtbot.waitUntil(
        lambda: (
            app.records.check is not None
            and app.records.check.fmt == "camtrap-dp"
            and app.records.check.writable > 0
        ),
        timeout=10_000,
    )
    dialog = checked(qtbot, app)
    assert dialog.intro.text().startswith("A Camtrap DP package of ")
    dialog.export_button.click()
    status = app.window.status_line
    qtbot.waitUntil(lambda: "Camtrap DP package written" in status.text(), timeout=10_000)
    assert sorted(p.name for p in (tmp_path / "deer").iterdir()) == [
        "datapackage.json", "deployments.csv", "media.csv", "observations.csv"
    ]  # fmt: skip
    with (tmp_path / "deer" / "observations.csv").open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert sum(row["observationLevel"] == "media" for row in rows) == 2


def without_licence(app: Application, image_ids: list[int]) -> None:
    """As for photos whose record names no licence: their licence unknown in the catalog."""
    from sqlalchemy import update

    from engine.catalog.models import Image

    library = app.session.library
    assert library is not None
    with library.catalog.session() as s:
        s.execute(update(Image).where(Image.id.in_(image_ids)).values(license=None))


def test_the_dialog_lists_every_photo_left_out_before_the_file_is_asked_for(
    qtbot, make_app, photos, tmp_path
):
    """Issue 34: Export records… said 23 photos and wrote an empty archive (every photo's
    licence unknown), the reason only on the command line. Now the dialog counts what will be
    written and lists each photo left out with its reason before the file is asked for; with
    none to write, Export stays off."""
    app: Application = indexed_app(qtbot, make_app, photos)
    search(qtbot, app, "red circle")
    model = app.window.results_model
    ids = [model.item(row).image_id for row in range(3)]
    judged(qtbot, app, dict.fromkeys(ids, 1))
    without_licence(app, ids[:2])
    from engine.catalog.reads import photo_details

    paths = {i: d.path for i, d in photo_details(app.session.library, ids).items()}

    export_records_action(app).trigger()
    dialog = checked(qtbot, app)
    assert dialog.intro.text().startswith(
        "1 of the 3 photos judged relevant for “red circle” will be written"
    )
    reason = "licence: unknown, which does not allow reuse"
    assert set(dialog.rows()) == {RecordRow(paths[i], LEFT_OUT, reason) for i in ids[:2]}
    assert dialog.table.isVisibleTo(dialog) and dialog.table.rowCount() == 2
    assert "write the 2 left out for their licence too" in dialog.hint.text()
    assert dialog.export_button.isEnabled()
    # The list can be copied as text, one photo per line.
    dialog.copy_button.click()
    from PySide6.QtGui import QGuiApplication

    copied = QGuiApplication.clipboard().text().splitlines()
    assert copied[0] == "photo\twritten?\twhy" and len(copied) == 3
    assert f"{paths[ids[0]]}\tleft out\t{reason}" in copied
    dialog.reject()

    # Every licence unknown: nothing would be written, and Export cannot be pressed.
    without_licence(app, ids[2:])
    export_records_action(app).trigger()
    dialog = checked(qtbot, app)
    assert dialog.intro.text().startswith(
        "None of the 3 photos judged relevant for “red circle” would be written"
    )
    assert len(dialog.rows()) == 3 and not dialog.export_button.isEnabled()

    # Including restricted licences: all three, listed as written with their licence.
    dialog.restricted_box.setChecked(True)
    qtbot.waitUntil(
        lambda: app.records.check is not None and app.records.check.writable == 3,
        timeout=10_000,
    )
    dialog = checked(qtbot, app)
    assert dialog.intro.text().startswith("All 3 photos judged relevant")
    assert {row.outcome for row in dialog.rows()} == {WRITTEN}
    archive = tmp_path / "all.zip"
    dialog.path_edit.setText(str(archive))
    dialog.export_button.click()
    box_shown = lambda: app.records.outcome_box is not None  # noqa: E731
    qtbot.waitUntil(box_shown, timeout=10_000)
    box = app.records.outcome_box
    assert box.text().startswith(f"3 records written to {archive}; 3 with a restricted licence")
    assert box.detailedText().count("included\t") == 3
    with DwCAReader(str(archive)) as dwca:
        assert len(dwca.rows) == 3


def test_a_judgment_taken_back_while_the_dialog_is_open_is_counted(qtbot, make_app, photos):
    app: Application = indexed_app(qtbot, make_app, photos)
    search(qtbot, app, "red circle")
    model = app.window.results_model
    ids = [model.item(row).image_id for row in range(2)]
    judged(qtbot, app, dict.fromkeys(ids, 1))
    export_records_action(app).trigger()
    checked(qtbot, app)
    assert app.records.check.writable == 2
    judged(qtbot, app, {ids[1]: 0})
    qtbot.waitUntil(
        lambda: app.records.check is not None and app.records.check.writable == 1,
        timeout=10_000,
    )


def test_while_judging_blind_export_says_why_it_waits_and_ends_the_round_when_asked(
    qtbot, make_app, photos
):
    """Issue 34: with blind judging on, Export records saw 0 relevant photos and was disabled
    without a word. Now the menu and the dialog say why export waits, and the dialog offers
    to end the blind round after a confirmation."""
    app: Application = indexed_app(qtbot, make_app, photos)
    search(qtbot, app, "red circle")
    model = app.window.results_model
    ids = [model.item(row).image_id for row in range(2)]
    judged(qtbot, app, dict.fromkeys(ids, 1))
    blind = app.window.judges.blind_action
    blind.setChecked(True)
    action = export_records_action(app)
    assert "waits: judging blind" in action.text()
    assert action.toolTip().startswith("Export waits while you judge blind")

    action.trigger()
    dialog = app.records.dialog
    assert dialog is not None and dialog.isVisible()
    assert dialog.intro.text().startswith("Export waits while you judge blind")
    assert dialog.end_blind_button.isVisibleTo(dialog)
    assert not dialog.export_button.isEnabled() and dialog.rows() == ()

    asked: list[str] = []
    answers = iter([False, True])

    def ask(title: str, text: str) -> bool:
        asked.append(text)
        return next(answers)

    app.window.ask_yes_no = ask
    dialog.end_blind_button.click()  # not confirmed: still blind, still waiting
    assert blind.isChecked() and dialog.intro.text().startswith("Export waits")
    dialog.end_blind_button.click()
    assert asked[0].startswith("End the blind round?") and len(asked) == 2
    assert not blind.isChecked() and not app.session.query_store().blind
    assert action.text() == "Export rec&ords…"
    dialog = checked(qtbot, app)
    assert dialog.intro.text().startswith("All 2 photos judged relevant")
    assert not dialog.end_blind_button.isVisibleTo(dialog)
    assert dialog.export_button.isEnabled()


def test_the_preview_never_promises_a_record_a_problem_or_a_rule_takes_away():
    """What the dialog says for a check (plain data, as the pre-flight gives it): errors that
    stop the export leave nothing to write; places generalised or withheld are said."""
    from app.controllers.records import Listed, RecordsCheck, records_preview
    from widgets.records_dialog import STOPS

    stopped = RecordsCheck(
        "dwca", 4, 4, stops=(Listed("a.jpg", "eventDate: not an ISO 8601 date"),)
    )
    preview = records_preview(stopped, "owls")
    assert preview.writable == 0
    assert preview.headline.startswith("The records for “owls” would not be written: 1 problem")
    assert preview.rows == (RecordRow("a.jpg", STOPS, "eventDate: not an ISO 8601 date"),)

    placed = RecordsCheck(
        "dwca", 3, 2,
        left_out=(Listed("b.jpg", "licence: unknown, which does not allow reuse"),),
        places="1 place generalised, 1 withheld",
    )  # fmt: skip
    preview = records_preview(placed, "owls")
    assert preview.writable == 2
    assert preview.headline == (
        "2 of the 3 photos judged relevant for “owls” will be written, one Darwin Core record "
        "each; the one left out is listed below with the reason. Places as published: 1 place "
        "generalised, 1 withheld."
    )
