"""`quadrat export geojson`: a query's relevant photos as GeoJSON points, only the places that
may be published (the same rule as the Darwin Core export), added as a format of the export
registry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.cli import build_parser, main
from engine.catalog.library import Library
from engine.errors import BadInputError
from engine.io.formats import format_names, get_format
from engine.io.geojson import export_geojson
from tests.places import CAMERA_GPS, QUERY, Places, build_places


@pytest.fixture
def places(tmp_path: Path, demo_encoder) -> Places:
    return build_places(tmp_path, demo_encoder)


def _features(path: Path) -> dict[str, dict]:
    """The file as a GeoJSON reader checks it, its features by file name."""
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["type"] == "FeatureCollection"
    out = {}
    for feature in data["features"]:
        assert feature["type"] == "Feature"
        assert feature["geometry"]["type"] == "Point"
        lon, lat = feature["geometry"]["coordinates"]
        assert -180 <= lon <= 180 and -90 <= lat <= 90
        assert feature["id"] == feature["properties"]["id"]
        out[Path(feature["properties"]["path"]).name] = feature
    return out


def test_only_places_that_may_be_published_are_written(places, tmp_path):
    out = tmp_path / "relevant.geojson"
    with Library.open(places.root) as library:
        report = export_geojson(library, places.query_id, out)
    features = _features(out)
    # Withheld places (null coordinates, private) are not written at all.
    assert sorted(features) == ["lynx.jpg", "obscured.jpg", "open.jpg"]
    assert (report.written, report.generalised, report.withheld) == (3, 2, 3)
    assert "3 photos written" in report.summary() and "3 withheld" in report.summary()
    # RFC 7946: longitude first. The open record is where its record says.
    assert features["open.jpg"]["geometry"]["coordinates"] == [4.5, 50.5]
    assert features["open.jpg"]["properties"]["place"] == "open"
    # Obscured by its source: as the source publishes it, said to be generalised.
    assert features["obscured.jpg"]["geometry"]["coordinates"] == [4.33, 50.71]
    assert features["obscured.jpg"]["properties"]["place"] == "generalised"
    # The sensitive lynx: moved to its grid cell's centre, within 10 km, never its true place.
    lon, lat = features["lynx.jpg"]["geometry"]["coordinates"]
    assert (lon, lat) != (8.5678, 47.1234)
    assert abs(lat - 47.1234) < 0.1 and abs(lon - 8.5678) < 0.15
    assert features["lynx.jpg"]["properties"]["place"] == "generalised"
    # The camera's own GPS (which the withheld records also carry) appears nowhere.
    text = out.read_text(encoding="utf-8")
    assert str(CAMERA_GPS[0]) not in text and str(CAMERA_GPS[1]) not in text
    # Each point says what it is and how it was decided.
    props = features["open.jpg"]["properties"]
    assert props["id"] == places.ids["open.jpg"]
    assert props["taxon"] == "Bufo bufo"
    assert props["date"].startswith("2023-05-01T10:00:00")
    assert props["judgment"] == "relevant"
    assert "p_relevant" in props


def test_without_the_sensitive_list_the_lynx_keeps_its_place(places, tmp_path):
    out = tmp_path / "relevant.geojson"
    with Library.open(places.root) as library:
        export_geojson(library, places.query_id, out, sensitive_taxa=False)
    features = _features(out)
    assert features["lynx.jpg"]["geometry"]["coordinates"] == [8.5678, 47.1234]
    assert sorted(features) == ["lynx.jpg", "obscured.jpg", "open.jpg"]  # records still rule


def test_quadrat_export_geojson(places, tmp_path, capsys):
    out = tmp_path / "map.geojson"
    code = main(["export", "geojson", str(out), "--query", QUERY, "--library", str(places.root)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert f"3 photos written to {out}" in captured.out
    assert sorted(_features(out)) == ["lynx.jpg", "obscured.jpg", "open.jpg"]
    code = main(["export", "geojson", str(out), "--query", QUERY, "--library",
                 str(places.root), "--no-sensitive-taxa"])  # fmt: skip
    assert code == 0
    assert _features(out)["lynx.jpg"]["geometry"]["coordinates"] == [8.5678, 47.1234]


def test_export_geojson_needs_a_query_and_out(places, tmp_path, capsys):
    assert main(["export", "geojson", "--query", QUERY, "--library", str(places.root)]) == 2
    assert "needs OUT" in capsys.readouterr().err
    out = tmp_path / "map.geojson"
    assert main(["export", "geojson", str(out), "--library", str(places.root)]) == 2
    assert capsys.readouterr().err.startswith("error:")
    assert not out.exists()


def test_the_format_is_a_registry_entry_the_command_line_reads():
    assert format_names()[-1] == "geojson"
    assert get_format("geojson").suffix == ".geojson"
    export = build_parser()._subparsers._group_actions[0].choices["export"]  # type: ignore[union-attr]
    what = next(a for a in export._actions if a.dest == "what")
    assert list(what.choices) == format_names()
    with pytest.raises(BadInputError, match="unknown export format"):
        get_format("kml")
