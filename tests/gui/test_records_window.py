"""Judge › Export records… in the window: the dialog writes the open query's relevant photos
as a Darwin Core Archive (read back by python-dwca-reader) or CSV in the background, and the
outcome, a failure included, is one line in the status bar."""

from __future__ import annotations

import csv
from pathlib import Path

from dwca.read import DwCAReader
from PySide6.QtGui import QAction

from app.controllers.application import Application
from tests.gui.test_backups_window import judged, search
from tests.gui.test_window import indexed_app


def export_records_action(app: Application) -> QAction:
    return next(a for a in app.window.judge_menu.actions() if a.text() == "Export rec&ords…")


def test_the_dialog_writes_an_archive_and_a_csv_and_says_so(qtbot, make_app, photos, tmp_path):
    app: Application = indexed_app(qtbot, make_app, photos)
    search(qtbot, app, "red circle")
    model = app.window.results_model
    ids = [model.item(row).image_id for row in range(4)]
    judged(qtbot, app, {ids[0]: 1, ids[1]: 1, ids[2]: 1, ids[3]: 0})

    export_records_action(app).trigger()
    dialog = app.records.dialog
    assert dialog is not None and dialog.isVisible()
    assert dialog.archive_button.isChecked() and not dialog.restricted_box.isChecked()
    assert dialog.path_edit.text().endswith("red-circle-records.zip")
    archive = tmp_path / "records.zip"
    dialog.path_edit.setText(str(archive))
    dialog.export_button.click()
    assert not dialog.isVisible()
    status = app.window.status_line
    qtbot.waitUntil(lambda: "records written" in status.text(), timeout=10_000)
    assert status.text() == f"3 records written to {archive}"
    with DwCAReader(str(archive)) as dwca:
        assert len(dwca.rows) == 3

    # The CSV: the file's suffix follows the format chosen.
    export_records_action(app).trigger()
    dialog = app.records.dialog
    assert dialog is not None
    dialog.path_edit.setText(str(tmp_path / "table.zip"))
    dialog.csv_button.setChecked(True)
    assert dialog.path_edit.text() == str(tmp_path / "table.csv")
    dialog.export_button.click()
    qtbot.waitUntil(lambda: "table.csv" in status.text(), timeout=10_000)
    with (tmp_path / "table.csv").open(encoding="utf-8", newline="") as handle:
        assert len(list(csv.DictReader(handle))) == 3


def test_a_failed_export_is_one_line_in_the_status_bar(qtbot, make_app, photos, tmp_path):
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
    dialog = app.records.dialog
    assert dialog is not None
    dialog.path_edit.setText(str(blocker / "records.zip"))  # a folder that cannot exist
    dialog.export_button.click()
    qtbot.waitUntil(lambda: "was not written" in status.text(), timeout=10_000)
    assert "\n" not in status.text()
    assert not Path(blocker / "records.zip").exists()


def test_the_dialog_writes_a_camtrap_dp_package(qtbot, make_app, tmp_path):
    from engine.demo.camera_traps import write_camera_trap_demo

    demo = write_camera_trap_demo(tmp_path / "card")
    app: Application = indexed_app(qtbot, make_app, demo.root)
    search(qtbot, app, "a red circle")
    model = app.window.results_model
    judged(qtbot, app, {model.item(0).image_id: 1, model.item(1).image_id: 1})

    export_records_action(app).trigger()
    dialog = app.records.dialog
    assert dialog is not None
    dialog.path_edit.setText(str(tmp_path / "deer.zip"))
    dialog.camtrap_button.setChecked(True)  # a folder: the suffix goes
    assert dialog.path_edit.text() == str(tmp_path / "deer")
    dialog.restricted_box.setChecked(True)  # the demo's frames record no licence
    dialog.export_button.click()
    status = app.window.status_line
    qtbot.waitUntil(lambda: "Camtrap DP package written" in status.text(), timeout=10_000)
    assert sorted(p.name for p in (tmp_path / "deer").iterdir()) == [
        "datapackage.json", "deployments.csv", "media.csv", "observations.csv"
    ]  # fmt: skip
    with (tmp_path / "deer" / "observations.csv").open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert sum(row["observationLevel"] == "media" for row in rows) == 2
