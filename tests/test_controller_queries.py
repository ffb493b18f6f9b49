"""The catalog reads the window's controllers use, as engine functions (no Qt, no SQL in the
controllers), and the plain photo record the detail pane shows."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

import pytest
from sqlalchemy import select

from engine.catalog import Collection, Image, Taxon
from engine.catalog.library import Library
from engine.catalog.reads import image_id_at, photo_details
from engine.judgments.queries import QueryStore, saved_runs
from tests.catalogs import add_plain_photos, folder_url


@pytest.fixture
def library(tmp_path, catalog_url, monkeypatch):
    """Four catalog photos (no files, no vectors), on SQLite and on PostgreSQL."""
    postgres = catalog_url.startswith("postgresql")
    database_url = folder_url(catalog_url, monkeypatch) if postgres else None
    with Library.open(tmp_path / "lib", database_url=database_url) as lib:
        add_plain_photos(lib, tmp_path / "photos", 4)
        yield lib


def _ids(library: Library) -> list[int]:
    with library.catalog.session() as s:
        return list(s.scalars(select(Image.id).order_by(Image.id)))


def test_saved_runs_are_every_querys_runs_oldest_first_without_rankings(library):
    store = QueryStore(library)
    ids = _ids(library)
    frogs = store.find_or_create_query("water frogs")
    store.save_run(frogs, "text", [(ids[0], 0.9), (ids[1], 0.8)], model_key="demo")
    owls = store.find_or_create_query("owls at dusk")
    store.save_run(owls, "text", [(ids[2], 0.5)], params={"filters": {"taxon": ["Strix"]}})
    store.save_run(frogs, "visret", [(ids[1], 0.7)], kind="image+text")
    store.find_or_create_query("never searched")

    runs = saved_runs(library)

    full = {run.id: run for q in (frogs, owls) for run in store.runs_for(q)}
    assert [run.id for run in runs] == sorted(full)  # oldest first, no run twice or missing
    assert [(run.query_id, run.method, run.kind) for run in runs] == [
        (frogs, "text", "text"),
        (owls, "text", "text"),
        (frogs, "visret", "image+text"),
    ]
    assert all(run.ranking == [] for run in runs)
    for run in runs:  # all else as the store reads it with the ranking
        assert replace(run, ranking=full[run.id].ranking) == full[run.id]


def test_query_list_names_each_querys_methods_once(library):
    """The query list's methods column, from the engine's runs and the registry's labels."""
    pytest.importorskip("PySide6")
    from app.controllers.queries import query_rows
    from engine.methods.registry import run_label

    store = QueryStore(library)
    ids = _ids(library)
    frogs = store.find_or_create_query("water frogs")
    store.save_run(frogs, "text", [(ids[0], 0.9)])
    store.save_run(frogs, "text", [(ids[1], 0.8)])  # the same search again: named once
    store.save_run(frogs, "visret", [(ids[1], 0.7)])
    plain = store.find_or_create_query("never searched")

    rows = {row.id: row for row in query_rows(store)}

    assert rows[frogs].methods == f"{run_label('text', {})}, {run_label('visret', {})}"
    assert rows[plain].methods == ""


def test_image_id_at_finds_a_library_photo_by_its_path(library, tmp_path):
    ids = _ids(library)
    other = tmp_path / "other"
    add_plain_photos(library, other, 2)  # a second collection with the same file names

    assert image_id_at(library, tmp_path / "photos" / "p2.jpg") == ids[2]
    assert image_id_at(library, str(tmp_path / "photos" / "p0.jpg")) == ids[0]
    second = image_id_at(library, other / "p0.jpg")
    assert second is not None and second not in ids
    assert image_id_at(library, tmp_path / "photos" / "p9.jpg") is None  # not in the catalog
    assert image_id_at(library, tmp_path / "elsewhere" / "p0.jpg") is None  # not the library's


def test_result_cards_carry_the_detail_panes_photo_view(library, tmp_path):
    """A card's details are the plain view the pane shows, copied from the catalog's record."""
    pytest.importorskip("PySide6")
    from app.controllers.results import result_items
    from widgets.photo_view import PhotoView

    ids = _ids(library)
    with library.catalog.session() as s:
        taxon = Taxon(key="m", name="Mungos mungo", common_name="banded mongoose", genus="Mungos")
        s.add(taxon)
        s.flush()
        image = s.get(Image, ids[1])
        assert image is not None
        image.taxon_id = taxon.id
        image.width, image.height = 640, 480
        image.latitude, image.longitude, image.location_uncertainty = -1.5, 36.25, 30.0
        image.license, image.rights_holder = "CC-BY", "A. Naturalist"
        image.observed_at = datetime(2021, 5, 4, 7, 30)
        collection = s.scalar(select(Collection.name))

    cards = result_items(library, [(ids[1], 0.75), (ids[0], 0.5)])

    record = photo_details(library, [ids[1]])[ids[1]]
    view = cards[0].details
    assert isinstance(view, PhotoView)
    assert view == PhotoView(
        taxon="Mungos mungo",
        common_name="banded mongoose",
        lineage=record.lineage,
        observed_at=record.observed_at,
        latitude=-1.5,
        longitude=36.25,
        location_uncertainty=30.0,
        license="CC BY 4.0 (version assumed)",  # read through the licence table
        rights_holder="A. Naturalist",
        width=640,
        height=480,
        collection=collection,
    )
    assert cards[0].title == "banded mongoose"
    assert cards[1].details == PhotoView(collection=collection)  # no taxon, size or place


def test_detail_pane_shows_the_photo_view(qtbot):
    """The pane reads the plain view: every field filled from it, and "—" where unknown."""
    from widgets.detail_pane import DetailPane
    from widgets.photo_view import PhotoView
    from widgets.results import ResultItem

    pane = DetailPane()
    qtbot.addWidget(pane)
    view = PhotoView(
        taxon="Mungos mungo",
        common_name="banded mongoose",
        lineage=(("kingdom", "Animalia"), ("genus", "Mungos")),
        observed_at=datetime(2021, 5, 4, 7, 30),
        latitude=-1.5,
        longitude=36.25,
        location_uncertainty=30.0,
        license="CC-BY",
        rights_holder="A. Naturalist",
        width=640,
        height=480,
        collection="Serengeti",
    )
    pane.set_item(ResultItem(2, 0.75, 7, "/photos/m.jpg", "banded mongoose", details=view))
    shown = {key: label.text() for key, label in pane.fields.items()}
    assert pane.title.text() == "banded mongoose"
    assert "Mungos mungo" in pane.subtitle.text()
    assert shown["score"] == "#2  ·  0.7500"
    assert shown["taxonomy"] == "Animalia › Mungos"
    assert shown["observed"] == "2021-05-04 07:30"
    assert shown["place"] == "1.50000° S, 36.25000° E  (± 30 m)"
    assert (shown["license"], shown["rights"]) == ("CC-BY", "A. Naturalist")
    assert (shown["size"], shown["collection"]) == ("640 × 480 px", "Serengeti")

    pane.set_item(ResultItem(1, 0.5, 8, "/photos/gone.jpg", "gone.jpg"))  # no catalog row
    assert pane.title.text() == "gone.jpg"
    assert pane.subtitle.text() == ""
    for key in ("taxonomy", "observed", "place", "license", "rights", "size", "collection"):
        assert pane.fields[key].text() == "—"
