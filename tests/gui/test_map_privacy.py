"""The "Where and when" maps and the place filter show places as an export would publish them
(issue 34): a withheld place is not drawn and cannot centre a "within N km" filter; a sensitive
taxon's place is drawn, and centres the filter, at its generalised place; the map says so."""

from __future__ import annotations

import math

from PySide6.QtCore import Qt
from sqlalchemy import select, update

from app.controllers.application import Application
from engine.catalog.models import Image, Taxon
from engine.catalog.privacy import ACTION_GENERALISE, SensitiveRule, set_sensitive_taxa
from tests.gui.test_filters_gui import _summarised
from tests.gui.test_judging import open_search
from tests.gui.test_window import indexed_app
from widgets.map_view import PUBLISHED_LEGEND

PLACE = (51.2345, 4.4321)
# The lab's 50 km grid: cells of 50 / 111.32 degrees, a place moved to its cell's centre.
_CELL = 50 / 111.32
GENERALISED = tuple(round((math.floor(v / _CELL) + 0.5) * _CELL, 6) for v in PLACE)


def test_the_maps_and_the_near_filter_show_places_as_published(qtbot, make_app, photos) -> None:
    app: Application = indexed_app(qtbot, make_app, photos)
    library = app.session.library
    assert library is not None
    with library.catalog.session() as s:
        private, lynx = list(s.scalars(select(Image.id).order_by(Image.id).limit(2)))
        taxon = Taxon(key="Lynx lynx", name="Lynx lynx", genus="Lynx", specific_epithet="lynx")
        s.add(taxon)
        s.flush()
        # The record asks for its place to stay private; the catalog still holds it.
        s.execute(update(Image).where(Image.id == private).values(geoprivacy="private"))
        s.execute(
            update(Image)
            .where(Image.id == lynx)
            .values(taxon_id=taxon.id, latitude=PLACE[0], longitude=PLACE[1])
        )
    set_sensitive_taxa(library.catalog, [SensitiveRule("Lynx lynx", ACTION_GENERALISE, 50.0)])

    open_search(qtbot, app, "red circle")
    _summarised(qtbot, app)
    shown = app.window.results_model.items()
    assert {private, lynx} <= {item.image_id for item in shown}
    map_view = app.window.map_view
    drawn = {p.image_id: (p.lat, p.lon) for p in map_view.points()}
    assert private not in drawn
    assert drawn[lynx] == GENERALISED
    assert len(drawn) == len(shown) - 1  # every other demo photo has a place, drawn as recorded
    assert map_view.caption() == "1 withheld · 1 generalised"
    assert PUBLISHED_LEGEND in map_view.toolTip()

    # The relevant photos' page: the same rule on its map.
    for image_id in (private, lynx):
        with qtbot.waitSignal(app.judging.judgmentSaved, timeout=5_000):
            app.judging.judge(image_id, 1)
    pane = app.window.place_pane
    app.window.show_place_pane()
    qtbot.mouseClick(pane.choice.button(1), Qt.MouseButton.LeftButton)
    page = pane.relevant
    qtbot.waitUntil(lambda: app.analyses.found is not None, timeout=10_000)
    qtbot.waitUntil(
        lambda: (
            [(p.image_id, (p.lat, p.lon)) for p in page.map_view.points()] == [(lynx, GENERALISED)]
        ),
        timeout=10_000,
    )
    assert page.map_view.caption() == "1 withheld · 1 generalised"
    # Counted by place as published too: the withheld photo in no place cell.
    places = app.analyses.found.analyses.by_place
    assert sum(places.values()) == 1

    # Within N km of the selected photo: not of a withheld place; of a generalised one, its
    # published place (the chip and the circle show that place).
    pane.set_mode(0)
    app.window.results.select_row(app.window.results_model.row_of(private))
    assert app.window.filter_bar._selected_photo is None
    app.filters.near_selected(5.0)
    assert "place is withheld (place withheld by its record)" in app.window.status_line.text()
    assert app.filters.filters.near is None
    app.window.results.select_row(app.window.results_model.row_of(lynx))
    assert app.window.filter_bar._selected_photo is not None
    with qtbot.waitSignal(app.search.searchFinished, timeout=20_000):
        app.filters.near_selected(5.0)
    assert tuple(app.filters.filters.near) == (*GENERALISED, 5.0)
