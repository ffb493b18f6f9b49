"""Location privacy: a place an iNaturalist-format record withholds is never filled from the
photo's EXIF GPS; obscured, private and sensitive places are published only as allowed."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from sqlalchemy import select

from engine.catalog import Image
from engine.catalog.library import Library
from engine.catalog.privacy import (
    ACTION_GENERALISE,
    ACTION_WITHHOLD,
    GENERALISED,
    NO_PLACE,
    OPEN,
    WITHHELD,
    PlaceFacts,
    PlacePolicy,
    SensitiveRule,
    checked_rule,
    place_summary,
    remove_sensitive_taxa,
    sensitive_rules,
    set_sensitive_taxa,
    snap_to_grid,
)
from engine.errors import BadInputError
from engine.indexing.indexer import Indexer
from tests.test_exif_camera import camera_jpeg

# Where every photo's camera says it was: a precise place the records below may withhold.
CAMERA_GPS = (51.123456, 4.654321)


def inat_collection(root: Path) -> Path:
    """Five photos, each with EXIF GPS, and an iNaturalist-format metadata file: an open record,
    one whose coordinates are null (withheld), one obscured by iNaturalist, one private, and a
    photo the file does not list."""
    names = ["open.jpg", "nulled.jpg", "obscured.jpg", "private.jpg", "unlisted.jpg"]
    for name in names:
        camera_jpeg(root / name, original="2023:05:01 10:00:00", gps=CAMERA_GPS)
    images = [
        {"id": 1, "file_name": "open.jpg", "latitude": 50.5, "longitude": 4.5,
         "location_uncertainty": 30, "geoprivacy": "open"},
        {"id": 2, "file_name": "nulled.jpg", "latitude": None, "longitude": None},
        {"id": 3, "file_name": "obscured.jpg", "latitude": 50.71, "longitude": 4.33,
         "coordinates_obscured": True, "taxon_geoprivacy": "obscured",
         "positional_accuracy": 106_807_033, "public_positional_accuracy": 24_000},
        {"id": 4, "file_name": "private.jpg", "geoprivacy": "Private"},
    ]  # fmt: skip
    (root / "metadata.json").write_text(json.dumps({"images": images}), encoding="utf-8")
    return root


@pytest.fixture
def indexed_places(tmp_path: Path, demo_encoder) -> dict[str, Image]:
    photos = inat_collection(tmp_path / "photos")
    with Library.open(tmp_path / "lib") as library:
        report = Indexer(library, demo_encoder).run(photos)
        assert report.indexed == 5
        with library.catalog.session() as s:
            rows = {img.rel_path: img for img in s.scalars(select(Image))}
            for img in rows.values():
                s.expunge(img)
    return rows


def test_a_withheld_place_is_never_filled_from_exif(indexed_places):
    nulled, private = indexed_places["nulled.jpg"], indexed_places["private.jpg"]
    assert (nulled.latitude, nulled.longitude) == (None, None)
    assert nulled.location_withheld
    assert (private.latitude, private.longitude) == (None, None)
    assert private.location_withheld and private.geoprivacy == "private"


def test_records_that_give_a_place_or_none_at_all_keep_their_sources(indexed_places):
    assert (indexed_places["open.jpg"].latitude, indexed_places["open.jpg"].longitude) == (
        50.5,
        4.5,
    )
    unlisted = indexed_places["unlisted.jpg"]  # no record: the camera's GPS is all there is
    assert unlisted.latitude == pytest.approx(CAMERA_GPS[0])
    assert not unlisted.location_withheld


def test_obscuring_is_kept_from_the_record(indexed_places):
    obscured = indexed_places["obscured.jpg"]
    assert (obscured.latitude, obscured.longitude) == (50.71, 4.33)  # iNat's, not the EXIF's
    assert obscured.coordinates_obscured and obscured.taxon_geoprivacy == "obscured"
    assert obscured.location_uncertainty == 106_807_033  # kept as given; never published
    assert obscured.public_location_uncertainty == 24_000


# --- publishing -------------------------------------------------------------------------------

POLICY = PlacePolicy()


def test_open_places_are_published_as_they_are():
    place = POLICY.publish(50.5, 4.5, 30.0, PlaceFacts(geoprivacy="open"))
    assert (place.latitude, place.longitude, place.uncertainty_m) == (50.5, 4.5, 30.0)
    assert place.decision == OPEN and not place.information_withheld


def test_private_and_withheld_places_leave_no_coordinates():
    for facts in (PlaceFacts(location_withheld=True), PlaceFacts(geoprivacy="private")):
        place = POLICY.publish(50.5, 4.5, 30.0, facts)
        assert (place.latitude, place.longitude, place.uncertainty_m) == (None, None, None)
        assert place.decision == WITHHELD and place.information_withheld


def test_obscured_coordinates_are_published_with_the_cells_uncertainty():
    # iNat moves an obscured point within a 0.2° cell: at 50.71° N the cell is 22.3 km north to
    # south and 14.1 km east to west, so the centre-to-corner distance is 13.2 km.
    place = POLICY.publish(
        50.71,
        4.33,
        106_807_033.0,
        PlaceFacts(coordinates_obscured=True, public_location_uncertainty=24_000.0),
    )
    assert (place.latitude, place.longitude) == (50.71, 4.33)
    assert place.uncertainty_m == 24_000.0  # the source's own, larger than the cell's 13.2 km
    assert place.decision == GENERALISED and "obscured" in place.data_generalizations
    assert place.uncertainty_dropped == 106_807_033.0  # implausible: left out, not published


def test_obscured_geoprivacy_with_possibly_true_coordinates_is_generalised_here():
    place = POLICY.publish(51.123456, 4.654321, 10.0, PlaceFacts(geoprivacy="obscured"))
    # The centre of the 0.2° cell [51.0, 51.2) x [4.6, 4.8).
    assert place.latitude == pytest.approx(51.1) and place.longitude == pytest.approx(4.7)
    half_diagonal = math.hypot(22_264, 22_264 * math.cos(math.radians(51.1))) / 2
    assert place.uncertainty_m == pytest.approx(half_diagonal + 10.0, abs=2.0)


def test_snap_to_grid_worked_example():
    assert snap_to_grid(-33.87, 151.21, 0.1) == pytest.approx((-33.85, 151.25))
    assert snap_to_grid(89.99, 179.99, 1.0) == (89.5, 179.5)


def test_sensitive_taxa_generalise_or_withhold_at_any_rank():
    policy = PlacePolicy(
        [
            SensitiveRule("Bufonidae", ACTION_GENERALISE, 10.0),
            SensitiveRule("Epidalea calamita", ACTION_WITHHOLD),
        ]
    )
    toad = ("Animalia", "Chordata", "Amphibia", "Anura", "Bufonidae", "Bufo", "Bufo bufo")
    place = policy.publish(51.123456, 4.654321, 5.0, PlaceFacts(), toad)
    assert place.decision == GENERALISED and "Bufonidae" in place.data_generalizations
    cell = 10.0 / 111.32
    assert place.latitude == pytest.approx((math.floor(51.123456 / cell) + 0.5) * cell, abs=1e-6)
    assert place.uncertainty_m is not None and place.uncertainty_m > 5_000
    natterjack = (*toad[:5], "Epidalea", "epidalea CALAMITA")  # names compare without case
    withheld = policy.publish(51.1, 4.6, 5.0, PlaceFacts(), natterjack)
    assert withheld.decision == WITHHELD and withheld.latitude is None
    assert "sensitive taxon" in withheld.information_withheld


def test_a_coarser_lab_rule_wins_over_the_records_obscuring():
    policy = PlacePolicy([SensitiveRule("Lynx lynx", ACTION_GENERALISE, 50.0)])
    place = policy.publish(
        47.0, 8.0, None, PlaceFacts(coordinates_obscured=True), ("Felidae", "Lynx lynx")
    )
    assert place.uncertainty_m is not None and place.uncertainty_m > 30_000
    assert "Lynx lynx" in place.data_generalizations


def test_no_place_and_the_summary_line():
    places = [
        POLICY.publish(None, None, None, PlaceFacts()),
        POLICY.publish(1.0, 1.0, None, PlaceFacts(geoprivacy="private")),
        POLICY.publish(1.0, 1.0, 9e9, PlaceFacts(geoprivacy="obscured")),
        POLICY.publish(1.0, 1.0, 3.0, PlaceFacts()),
    ]
    assert places[0].decision == NO_PLACE
    assert place_summary(places) == (
        "1 place generalised, 1 withheld, 1 implausible uncertainties left out"
    )
    assert place_summary(places[3:]) == ""


def test_the_labs_list_is_kept_in_the_catalog(tmp_path: Path):
    with Library.open(tmp_path / "lib") as library:
        catalog = library.catalog
        written = set_sensitive_taxa(
            catalog,
            [
                checked_rule("  Lynx   lynx ", ACTION_GENERALISE, 25.0),
                checked_rule("Bufonidae", ACTION_WITHHOLD, 3.0),
            ],
            added_by="Ada",
        )
        assert written == 2
        set_sensitive_taxa(catalog, [checked_rule("lynx LYNX", ACTION_WITHHOLD)])
        rules = {rule.name: rule for rule in sensitive_rules(catalog)}
        assert set(rules) == {"Bufonidae", "lynx LYNX"}  # replaced, not doubled
        assert rules["Bufonidae"].grid_km is None and rules["Bufonidae"].added_by == "Ada"
        assert remove_sensitive_taxa(catalog, ["bufonidae", "Nothing"]) == 1
        assert [rule.name for rule in sensitive_rules(catalog)] == ["lynx LYNX"]


@pytest.mark.parametrize(
    ("name", "action", "grid", "message"),
    [
        ("", ACTION_WITHHOLD, None, "scientific name"),
        ("Lynx", "hide", None, "must be one of"),
        ("Lynx", ACTION_GENERALISE, 0.0, "above 0"),
        ("Lynx", ACTION_GENERALISE, 5000.0, "at most"),
        ("x" * 5000, ACTION_WITHHOLD, None, "characters"),
    ],
)
def test_bad_rules_are_refused_in_one_line(name, action, grid, message):
    with pytest.raises(BadInputError, match=message):
        checked_rule(name, action, grid)


def test_the_list_from_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    from app.cli import main

    lib = str(tmp_path / "lib")
    assert main(["sensitive-taxa", "add", "Lynx lynx", "Felis silvestris", "--grid", "25",
                 "--library", lib]) == 0  # fmt: skip
    table = tmp_path / "list.csv"
    table.write_text(
        "name,action,grid_km,note\nBufonidae,withhold,,breeding sites\nLynx lynx,generalise,50,\n",
        encoding="utf-8",
    )
    assert main(["sensitive-taxa", "import", str(table), "--library", lib]) == 0
    capsys.readouterr()
    assert main(["sensitive-taxa", "list", "--library", lib]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "Bufonidae: withheld (breeding sites)",
        "Felis silvestris: generalised to 25 km",
        "Lynx lynx: generalised to 50 km",
    ]
    table.write_text("name,action,grid_km\nOrchis,generalise,0\n", encoding="utf-8")
    assert main(["sensitive-taxa", "import", str(table), "--library", lib]) == 2
    assert "line 2" in capsys.readouterr().err
    assert main(["sensitive-taxa", "remove", "lynx lynx", "--library", lib]) == 0
    assert main(["sensitive-taxa", "list", "--json", "--library", lib]) == 0
    listed = json.loads(capsys.readouterr().out.splitlines()[-1])["sensitive_taxa"]
    assert [entry["name"] for entry in listed] == ["Bufonidae", "Felis silvestris"]
