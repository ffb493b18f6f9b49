"""Library › Deployments… in the window: the dialog lists the cameras of a library of camera
photos, a clock offset typed there moves their photos' times (in the catalog and in the table)
and is undone, a bad offset is refused in one line, and the event gap regroups the frames.
Judge › Export records…: the Camtrap DP choice takes a scientific name (prefilled with the
taxon the relevant photos share) that lands in observations.csv."""

from __future__ import annotations

import csv
from datetime import datetime
from pathlib import Path

import pytest

from app.controllers.application import Application
from tests.gui.test_backups_window import judged, search
from tests.gui.test_records_window import export_records_action
from tests.gui.test_window import index, indexed_app, wait_ready
from tests.test_exif_camera import camera_jpeg


@pytest.fixture
def card(tmp_path: Path) -> Path:
    """Camera A: a burst of three frames and one an hour later; camera B: a burst of two;
    one photo with no capture time: 4 events with the 60 s gap, 7 with a gap of 0 s."""
    root = tmp_path / "card"
    for name, moment in (
        ("a1.jpg", "2024:06:30 22:00:00"),
        ("a2.jpg", "2024:06:30 22:00:05"),
        ("a3.jpg", "2024:06:30 22:00:10"),
        ("a4.jpg", "2024:06:30 23:00:00"),
    ):
        camera_jpeg(root / "site1" / name, original=moment, serial="CAM-A")
    camera_jpeg(root / "site2" / "b1.jpg", original="2024:06:30 22:00:02", serial="CAM-B")
    camera_jpeg(root / "site2" / "b2.jpg", original="2024:06:30 22:00:20", serial="CAM-B")
    camera_jpeg(root / "walk" / "undated.jpg")
    return root


def observed(app: Application, name: str) -> datetime | None:
    from engine.catalog.models import Image

    library = app.session.library
    assert library is not None
    with library.catalog.session() as s:
        image = next(i for i in s.query(Image) if Path(i.rel_path).name == name)
        return image.observed_at


def cells(dialog, column: int) -> list[str]:  # noqa: ANN001
    return [dialog.table.item(row, column).text() for row in range(dialog.table.rowCount())]


def test_the_dialog_sets_and_undoes_a_clock_offset_and_the_event_gap(
    qtbot, make_app, card: Path
) -> None:
    app: Application = make_app()
    app.window.resize(1280, 800)
    wait_ready(qtbot, app)
    index(qtbot, app, card)
    qtbot.waitUntil(lambda: app.session.ready, timeout=20_000)

    app.window.deployments_action.trigger()
    dialog = app.deployments.dialog
    assert dialog is not None
    qtbot.waitUntil(lambda: dialog.table.rowCount() == 2, timeout=10_000)
    assert cells(dialog, 0) == ["site1 (CAM-A)", "site2 (CAM-B)"]
    assert cells(dialog, 2) == ["4", "2"]
    assert cells(dialog, 3)[1] == "2024-06-30 22:00:02 – 2024-06-30 22:00:20"
    assert cells(dialog, 4) == ["+00:00:00", "+00:00:00"]
    assert dialog.gap_spin.value() == 60
    assert not dialog.undo_button.isEnabled()  # nothing to undo yet

    # Camera B ran an hour and a half behind.
    camera_b = dialog.rows[1].deployment_id
    dialog.select_deployment(camera_b)
    dialog.offset_edit.setText("+01:30:00")
    dialog.set_offset_button.click()
    qtbot.waitUntil(lambda: cells(dialog, 4)[1] == "+01:30:00", timeout=10_000)
    assert dialog.outcome.text() == (
        f"Deployment {camera_b}: clock offset +01:30:00 (was +00:00:00); 4 events"
    )
    assert cells(dialog, 3)[1] == "2024-06-30 23:30:02 – 2024-06-30 23:30:20"
    assert observed(app, "b1.jpg") == datetime(2024, 6, 30, 23, 30, 2)
    assert observed(app, "a1.jpg") == datetime(2024, 6, 30, 22, 0, 0)  # not camera B
    assert app.window.status_line.text() == dialog.outcome.text()

    # A bad offset: one line, nothing written.
    dialog.offset_edit.setText("half past nine")
    dialog.set_offset_button.click()
    assert dialog.outcome.text().startswith("a clock offset is +HH:MM:SS")
    assert "\n" not in dialog.outcome.text()
    assert observed(app, "b1.jpg") == datetime(2024, 6, 30, 23, 30, 2)

    # Undo brings the camera's own clock back.
    assert dialog.undo_button.isEnabled()
    dialog.undo_button.click()
    qtbot.waitUntil(lambda: cells(dialog, 4)[1] == "+00:00:00", timeout=10_000)
    assert observed(app, "b1.jpg") == datetime(2024, 6, 30, 22, 0, 2)
    assert cells(dialog, 3)[1] == "2024-06-30 22:00:02 – 2024-06-30 22:00:20"

    # A gap of 0 s: every frame is an event of its own.
    dialog.gap_spin.setValue(0)
    dialog.set_gap_button.click()
    qtbot.waitUntil(lambda: dialog.outcome.text() == "Event gap 0 s; 7 events", timeout=10_000)


def test_camtrap_dp_export_takes_the_scientific_name_typed(qtbot, make_app, tmp_path) -> None:
    from engine.demo.camera_traps import write_camera_trap_demo

    demo = write_camera_trap_demo(tmp_path / "card")
    app: Application = indexed_app(qtbot, make_app, demo.root)
    search(qtbot, app, "a red circle")
    model = app.window.results_model
    judged(qtbot, app, {model.item(0).image_id: 1, model.item(1).image_id: 1})

    export_records_action(app).trigger()
    dialog = app.records.dialog
    assert dialog is not None
    assert not dialog.name_edit.isEnabled()  # a Darwin Core format: no field to fill
    dialog.path_edit.setText(str(tmp_path / "deer"))
    dialog.camtrap_button.setChecked(True)
    assert dialog.name_edit.isEnabled()
    assert dialog.name_edit.text() == ""  # the demo's photos name no taxon
    assert dialog.name_hint.isVisibleTo(dialog)
    dialog.name_edit.setText("Capreolus capreolus")
    assert not dialog.name_hint.isVisibleTo(dialog)
    dialog.restricted_box.setChecked(True)  # the demo's frames record no licence
    qtbot.waitUntil(dialog.export_button.isEnabled, timeout=10_000)  # checked: something to write
    # Leaving the name field (as a click on Export does) checks again, Export still pressable.
    dialog.name_edit.editingFinished.emit()
    assert dialog.export_button.isEnabled()
    dialog.export_button.click()
    status = app.window.status_line
    qtbot.waitUntil(lambda: "Camtrap DP package written" in status.text(), timeout=10_000)
    assert "without a scientific name" not in status.text()
    with (tmp_path / "deer" / "observations.csv").open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    animals = [row for row in rows if row["observationType"] == "animal"]
    assert sum(row["observationLevel"] == "media" for row in animals) == 2  # the two judged
    assert {row["scientificName"] for row in animals} == {"Capreolus capreolus"}


def test_the_scientific_name_is_prefilled_with_the_taxon_relevant_photos_share(
    qtbot, make_app, tmp_path
) -> None:
    from sqlalchemy import update

    from engine.catalog.models import Image, Taxon
    from engine.demo.camera_traps import write_camera_trap_demo

    demo = write_camera_trap_demo(tmp_path / "card")
    app: Application = indexed_app(qtbot, make_app, demo.root)
    search(qtbot, app, "a red circle")
    model = app.window.results_model
    relevant = [model.item(0).image_id, model.item(1).image_id]
    judged(qtbot, app, dict.fromkeys(relevant, 1))
    library = app.session.library
    assert library is not None
    with library.catalog.session() as s:
        taxon = Taxon(key="Vulpes vulpes", name="Vulpes vulpes")
        s.add(taxon)
        s.flush()
        s.execute(update(Image).where(Image.id.in_(relevant)).values(taxon_id=taxon.id))

    export_records_action(app).trigger()
    dialog = app.records.dialog
    assert dialog is not None
    qtbot.waitUntil(lambda: dialog.name_edit.text() == "Vulpes vulpes", timeout=10_000)
