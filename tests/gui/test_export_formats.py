"""File › Export reads the export registry: a registered format that writes one file (GeoJSON)
is a menu entry that writes the open query's relevant photos."""

from __future__ import annotations

import json

from PySide6.QtCore import Qt

from tests.gui.test_judging import focus_grid, open_search
from tests.gui.test_window import indexed_app
from widgets.message_banner import DONE


def test_file_menu_writes_a_registered_format_of_the_open_query(
    qtbot, make_app, photos, tmp_path
) -> None:
    app = indexed_app(qtbot, make_app, photos)
    open_search(qtbot, app, "red circle")
    focus_grid(qtbot, app, 0)
    qtbot.keyClick(app.window.results, Qt.Key.Key_R)  # the top photo judged relevant
    target = tmp_path / "map.geojson"
    asked: list[str] = []

    def ask_save_file(caption: str, suggested: str, file_filter: str) -> str:
        asked.append(file_filter)
        return str(target)

    app.window.ask_save_file = ask_save_file  # type: ignore[method-assign]
    file_menu = next(a.menu() for a in app.window.menuBar().actions() if a.text() == "&File")
    entry = next(
        a for a in file_menu.actions() if a.text() == "Export relevant photos as &GeoJSON…"
    )
    entry.trigger()
    banner = app.window.message_banner
    qtbot.waitUntil(lambda: banner.isVisible() and banner.kind() == DONE, timeout=20_000)
    assert asked == ["relevant photos as GeoJSON (*.geojson)"]
    assert banner.message().startswith("1 photos written to ") and str(target) in banner.message()
    data = json.loads(target.read_text(encoding="utf-8"))
    assert data["type"] == "FeatureCollection" and len(data["features"]) == 1
    lon, lat = data["features"][0]["geometry"]["coordinates"]
    assert -180 <= lon <= 180 and -90 <= lat <= 90
