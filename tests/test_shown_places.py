"""The places the window draws are those an export would publish (issue 34): a withheld place
is not drawn, a sensitive taxon's is drawn at its generalised place, others as recorded."""

from __future__ import annotations

import math

import pytest
from sqlalchemy import select, update

from engine.catalog import Image
from engine.catalog.library import Library
from engine.catalog.models import Taxon
from engine.catalog.privacy import (
    ACTION_GENERALISE,
    ACTION_WITHHOLD,
    PlacePolicy,
    SensitiveRule,
    set_sensitive_taxa,
)
from engine.catalog.reads import photo_details
from engine.search.places import published_place_of, shown_places
from tests.catalogs import add_plain_photos, folder_url


@pytest.fixture
def library(tmp_path, catalog_url, monkeypatch):
    """Five placed photos on SQLite and on a PostgreSQL server: an open one, one whose record
    keeps its place private, one of a genus the lab generalises to 50 km, one of a species it
    withholds, one with no place at all."""
    postgres = catalog_url.startswith("postgresql")
    database_url = folder_url(catalog_url, monkeypatch) if postgres else None
    with Library.open(tmp_path / "lib", database_url=database_url) as lib:
        add_plain_photos(lib, tmp_path / "photos", 5)
        with lib.catalog.session() as s:
            ids = list(s.scalars(select(Image.id).order_by(Image.id)))
            lynx = Taxon(key="Lynx lynx", name="Lynx lynx", genus="Lynx", specific_epithet="lynx")
            owl = Taxon(key="Bubo bubo", name="Bubo bubo", genus="Bubo", specific_epithet="bubo")
            s.add_all([lynx, owl])
            s.flush()
            places = [(51.2345, 4.4321, None)] * 4 + [(None, None, None)]
            for image_id, (lat, lon, _) in zip(ids, places, strict=True):
                s.execute(
                    update(Image).where(Image.id == image_id).values(latitude=lat, longitude=lon)
                )
            s.execute(update(Image).where(Image.id == ids[1]).values(geoprivacy="private"))
            s.execute(update(Image).where(Image.id == ids[2]).values(taxon_id=lynx.id))
            s.execute(update(Image).where(Image.id == ids[3]).values(taxon_id=owl.id))
        set_sensitive_taxa(
            lib.catalog,
            [
                SensitiveRule("Lynx", ACTION_GENERALISE, 50.0),  # a genus: its species match
                SensitiveRule("Bubo bubo", ACTION_WITHHOLD),
            ],
        )
        yield lib


def ids_of(library: Library) -> list[int]:
    with library.catalog.session() as s:
        return list(s.scalars(select(Image.id).order_by(Image.id)))


def test_the_map_draws_places_as_they_would_be_published(library):
    open_, private, lynx, owl, unplaced = ids_of(library)
    shown = shown_places(library.catalog, [unplaced, owl, lynx, private, open_, lynx])
    # A 50 km grid: cells of 50 / 111.32 degrees, the point moved to its cell's centre.
    cell = 50 / 111.32
    centre_lat = round((math.floor(51.2345 / cell) + 0.5) * cell, 6)
    centre_lon = round((math.floor(4.4321 / cell) + 0.5) * cell, 6)
    assert (centre_lat, centre_lon) == (51.428315, 4.266978)
    assert shown.places == [(lynx, centre_lat, centre_lon), (open_, 51.2345, 4.4321)]
    assert shown.withheld == 2 and shown.generalised == 1
    assert shown.withheld_reasons == {
        owl: "sensitive taxon Bubo bubo: place withheld",
        private: "place withheld by its record",
    }
    assert shown.generalised_reasons == {lynx: "sensitive taxon Lynx: generalised to 50 km"}
    assert shown.note() == "2 withheld · 1 generalised"
    assert shown.without_place(5) == 1  # only the photo with no place at all

    # The same answer from a photo's details (the relevant photos' page reads those).
    policy = PlacePolicy.of(library.catalog)
    details = photo_details(library, [lynx, owl])
    assert published_place_of(policy, details[lynx]).latitude == centre_lat
    assert published_place_of(policy, details[owl]).latitude is None
