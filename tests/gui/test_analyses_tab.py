"""The "Where and when" tab's "Relevant photos of this query": the months, hours and taxa of the
photos judged relevant (checked against the demo's metadata), updated when one more photo is
judged, and "Export analyses…" writing the CSV files and charts."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from PySide6.QtCore import Qt

from app.controllers.application import Application
from engine.catalog.reads import photo_details
from tests.gui.test_judging import open_search
from tests.gui.test_window import indexed_app


def _expected(photos: Path, app: Application, ids: list[int]) -> tuple[list, list, Counter]:
    """Months and hours (12 and 24 counts) and taxa of these photos, read from the demo's
    metadata file, not from the catalog."""
    records = {
        r["file_name"]: r
        for r in json.loads((photos / "metadata.json").read_text(encoding="utf-8"))["images"]
    }
    details = photo_details(app.session.library, ids)
    months, hours, taxa = [0] * 12, [0] * 24, Counter[str]()
    for image_id in ids:
        rel_path = details[image_id].rel_path
        record = records[rel_path]
        date = record["date"]  # "2022-08-11 08:43:53+00:00": the photographer's clock
        months[int(date[5:7]) - 1] += 1
        if date[11:19] != "00:00:00":
            hours[int(date[11:13])] += 1
        # ".../00000_Plantae_..._Circulus_ruber/x.jpg": the species is the folder's last two
        taxa[" ".join(rel_path.split("/")[-2].split("_")[-2:])] += 1
    return months, hours, taxa


def _judge(qtbot, app: Application, image_id: int) -> None:
    with qtbot.waitSignal(app.judging.judgmentSaved, timeout=5_000):
        app.judging.judge(image_id, 1)


def test_relevant_photos_show_their_months_hours_and_taxa_and_export(
    qtbot, make_app, photos: Path, tmp_path: Path
) -> None:
    app = indexed_app(qtbot, make_app, photos)
    open_search(qtbot, app, "red circle")
    ids = [item.image_id for item in app.window.results_model.items()]
    # The first photos of the ranking and one from far down it (likely another taxon).
    judged = [*ids[:4], ids[-1]]
    for image_id in judged:
        _judge(qtbot, app, image_id)

    pane = app.window.place_pane
    app.window.show_place_pane()
    page = pane.relevant
    # The results' months are shown until the user chooses the relevant photos.
    assert sum(pane.month_histogram.counts()) == len(ids)
    qtbot.mouseClick(pane.choice.button(1), Qt.MouseButton.LeftButton)
    assert pane.pages.currentWidget() is page

    months, hours, taxa = _expected(photos, app, judged)
    qtbot.waitUntil(lambda: page.month_histogram.counts() == months, timeout=10_000)
    assert page.hour_histogram.counts() == hours
    assert page.hour_histogram.no_time() == len(judged) - sum(hours)
    assert len(page.map_view.points()) == len(judged)  # every demo photo has a place
    lines = page.taxa_shown()
    assert len(lines) == len(taxa)
    for name, count in taxa.items():
        assert any(line.startswith(f"{count}  {name}") for line in lines), (name, lines)
    assert page.summary.text().startswith(f"{len(judged)} relevant photos")
    # The results' own histogram still counts the results.
    assert sum(pane.month_histogram.counts()) == len(ids)

    # One more photo judged relevant: the page counts it.
    one_more = ids[4]
    _judge(qtbot, app, one_more)
    months, hours, taxa = _expected(photos, app, [*judged, one_more])
    qtbot.waitUntil(lambda: page.month_histogram.counts() == months, timeout=10_000)
    assert page.hour_histogram.counts() == hours
    assert page.summary.text().startswith(f"{len(judged) + 1} relevant photos")

    # Export analyses…: the CSV files and the charts land in the folder chosen.
    out = tmp_path / "analyses"
    out.mkdir()
    app.window.ask_folder = lambda caption: str(out)  # type: ignore[method-assign]
    qtbot.mouseClick(page.export_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "analysis files" in app.window.status_line.text(), timeout=10_000)
    written = sorted(p.name for p in out.iterdir())
    assert "diel.csv" in written and "diel.png" in written and "taxa.csv" in written
    assert f"Wrote {len(written)} analysis files" in app.window.status_line.text()
    diel = (out / "diel.csv").read_text(encoding="utf-8").splitlines()
    assert len(diel) > 1


def test_the_relevant_photos_map_draws_the_coastlines(qtbot) -> None:
    """The relevant photos' map had dots on a blank rectangle: it draws the coastlines the
    window reads once for the results' map."""
    from widgets.map_view import LAND, OCEAN, read_coastlines
    from widgets.place_pane import RELEVANT, PlacePane

    pane = PlacePane()
    qtbot.addWidget(pane)
    pane.resize(900, 300)
    pane.show()
    pane.set_mode(RELEVANT)
    relevant_map = pane.relevant.map_view
    congo = relevant_map.to_pixel(5.0, 20.0)
    assert relevant_map.grab().toImage().pixelColor(congo.toPoint()) == OCEAN
    pane.map_view.set_coastlines(read_coastlines())  # as the filters controller does, once
    assert relevant_map.has_coastlines()
    assert relevant_map.grab().toImage().pixelColor(congo.toPoint()) == LAND
