"""The detection filters in the window: the Add filter menu offers empty frames, the detector
categories and the classifier labels a library holds (nothing where it holds no detections),
and choosing one keeps the photos the command line's --empty, --detected and --label keep."""

from __future__ import annotations

from PySide6.QtGui import QAction
from sqlalchemy import select

from app.controllers.application import Application
from engine.catalog import Image
from engine.detections.records import Box, DetectionRecord, FrameRecord
from engine.detections.store import replace_source, write_frames
from tests.gui.test_filters_gui import _rerun, _shown, _summarised
from tests.gui.test_judging import open_search
from tests.gui.test_window import indexed_app

FOX = DetectionRecord(Box(0.25, 0.25, 0.5, 0.5), "animal", 0.9, "red fox", 0.8)
HARE = DetectionRecord(Box(0.05, 0.05, 0.2, 0.2), "animal", 0.6, "brown hare", 0.7)
CAR = DetectionRecord(Box(0.5, 0.5, 0.4, 0.3), "vehicle", 0.7)
FAINT = DetectionRecord(Box(0.6, 0.6, 0.3, 0.3), "animal", 0.1)  # below the default 0.2


def _library_ids(app: Application) -> list[int]:
    library = app.session.library
    assert library is not None
    with library.catalog.session() as s:
        return sorted(s.scalars(select(Image.id)))


def _add(app: Application, frames: list[FrameRecord]) -> None:
    library = app.session.library
    assert library is not None
    with library.catalog.session() as s:
        write_frames(s, replace_source(s, "megadetector", "/md.json", model="MDV5A"), frames)


def _entries(app: Application) -> list[str]:
    bar = app.window.filter_bar
    bar.menu_actions("Taxon")  # builds the menu as it is when opened
    return [a.text() for a in bar.menu.actions() if not a.isSeparator()]


def _actions(app: Application, title: str) -> dict[str, QAction]:
    actions = app.window.filter_bar.menu_actions(title)
    return {a.text(): a for a in actions if not a.isSeparator()}


def test_the_detection_entries_filter_the_grid_like_the_command_line(
    qtbot, make_app, photos
) -> None:
    app = indexed_app(qtbot, make_app, photos)
    qtbot.waitUntil(app.runner.idle, timeout=10_000)
    entries = _entries(app)
    assert "Empty frames" not in entries  # no detections: nothing to offer
    assert "Classifier label" not in entries

    ids = _library_ids(app)
    foxes, hares, cars = ids[0:4], ids[4:7], ids[7:9]
    empty = ids[9:12]  # looked at: nothing, or only a box below the threshold
    _add(
        app,
        [FrameRecord(i, (FOX,)) for i in foxes]
        + [FrameRecord(i, (HARE,)) for i in hares]
        + [FrameRecord(i, (CAR,)) for i in cars]
        + [FrameRecord(empty[0]), FrameRecord(empty[1]), FrameRecord(empty[2], (FAINT,))]
        + [FrameRecord(ids[12], failure="unreadable")],  # unknown: neither empty nor not
    )
    app.filters.load_detections()
    qtbot.waitUntil(lambda: "Empty frames" in _entries(app), timeout=10_000)
    assert [e for e in _entries(app) if e not in entries] == [
        "Empty frames", "Detected category", "Classifier label"
    ]  # fmt: skip

    open_search(qtbot, app, "red circle")
    _summarised(qtbot, app)
    everything = {item.image_id for item in _shown(app)}
    assert len(everything) > len(empty)

    # Empty frames: only the frames looked at with nothing at 0.2 or above.
    menu = _actions(app, "Empty frames")
    assert list(menu) == ["Empty frames (3)", "Frames with a detection (9)", "Either"]
    _rerun(qtbot, app, menu["Empty frames (3)"].trigger)
    assert app.filters.filters.empty == 0.2 and app.filters.filters.not_empty is None
    assert {item.image_id for item in _shown(app)} == set(empty)
    assert app.window.filter_bar.chip_labels() == ["empty at 0.2"]
    assert _actions(app, "Empty frames")["Empty frames (3)"].isChecked()

    # Its × brings every photo back.
    chip = app.window.filter_bar.chip("empty")
    assert chip is not None
    _rerun(qtbot, app, chip.clear_button.click)
    assert {item.image_id for item in _shown(app)} == everything

    # A classifier label, most frequent first.
    labels = _actions(app, "Classifier label")
    assert list(labels) == ["red fox (4)", "brown hare (3)", "Type a label…"]
    _rerun(qtbot, app, labels["brown hare (3)"].trigger)
    assert app.filters.filters.detection_label == "brown hare"
    assert {item.image_id for item in _shown(app)} == set(hares)

    # A detector category (the label filter stays: both apply).
    categories = _actions(app, "Detected category")
    assert list(categories) == ["animal (7)", "vehicle (2)", "Any"]
    _rerun(qtbot, app, lambda: app.filters.remove("detection_label"))
    _rerun(qtbot, app, _actions(app, "Detected category")["vehicle (2)"].trigger)
    assert app.filters.filters.detected == "vehicle"
    assert {item.image_id for item in _shown(app)} == set(cars)


def test_a_label_typed_in_the_editor_sets_the_filter(qtbot, make_app, photos) -> None:
    app = indexed_app(qtbot, make_app, photos)
    ids = _library_ids(app)
    _add(app, [FrameRecord(i, (FOX,)) for i in ids[:2]])
    app.filters.load_detections()
    qtbot.waitUntil(lambda: "Classifier label" in _entries(app), timeout=10_000)
    open_search(qtbot, app, "red circle")
    _summarised(qtbot, app)
    editor = app.window.filter_bar.open_label_editor()
    assert editor.completer.model().rowCount() == 1  # the labels present, for completion
    editor.edit.setText("  Red Fox ")
    with qtbot.waitSignal(app.search.searchFinished, timeout=20_000):
        editor.accept()
    assert app.filters.filters.detection_label == "Red Fox"
    assert {item.image_id for item in _shown(app)} == set(ids[:2])
