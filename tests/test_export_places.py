"""Places that leave the workstation: an iNaturalist-format collection with open, withheld,
private, obscured and sensitive records exports only what may be published, in every export
that carries places (Darwin Core archive and CSV, the results CSV, the analyses' place files,
the copies of the relevant photos)."""

from __future__ import annotations

import csv
import zipfile
from pathlib import Path

import numpy as np
import pytest
from dwca.read import DwCAReader
from PIL import ExifTags, Image

from app.cli import main
from engine.catalog.library import Library
from engine.io.analyses import analyse_query, csv_files
from engine.io.dwc import export_dwc_csv, export_dwca
from engine.io.export import copy_relevant_photos, export_results_csv
from engine.io.photo_gps import has_gps
from tests.places import QUERY, Places, build_places

DWC = "http://rs.tdwg.org/dwc/terms/"
DC = "http://purl.org/dc/terms/"


@pytest.fixture
def places(tmp_path: Path, demo_encoder) -> Places:
    return build_places(tmp_path, demo_encoder)


def _core_by_file(archive: Path) -> dict[str, dict[str, str]]:
    """The core rows a third-party reader sees, by the photo's file name."""
    out = {}
    with DwCAReader(str(archive)) as dwca:
        for row in dwca:
            media = [e.data for e in row.extensions if e.rowtype.endswith("/Multimedia")]
            out[media[0][DC + "identifier"].rsplit("/", 1)[1]] = row.data
    return out


def test_an_inat_collection_exports_only_what_may_be_published(places, tmp_path):
    out = tmp_path / "records.zip"
    with Library.open(places.root) as library:
        report = export_dwca(library, places.query_id, out)
    assert report.written == 6
    assert report.places == "2 places generalised, 3 withheld, 1 implausible uncertainties left out"
    assert report.places in report.summary()
    rows = _core_by_file(out)

    def place(name: str) -> tuple[str, str, str, str]:
        row = rows[name]
        return (row[DWC + "decimalLatitude"], row[DWC + "decimalLongitude"],
                row[DWC + "coordinateUncertaintyInMeters"], row[DWC + "geodeticDatum"])  # fmt: skip

    assert place("open.jpg") == ("50.5", "4.5", "30", "WGS84")
    assert rows["open.jpg"][DWC + "informationWithheld"] == ""
    for name in ("nulled.jpg", "private.jpg", "nulled.png"):
        assert place(name) == ("", "", "", ""), name  # never the camera's GPS
        assert rows[name][DWC + "informationWithheld"].startswith("Location withheld")
    assert "observer" in rows["private.jpg"][DWC + "informationWithheld"]
    # Obscured by iNaturalist: as published there, with its public uncertainty; the junk
    # 106,807,033 m never leaves.
    assert place("obscured.jpg") == ("50.71", "4.33", "24000", "WGS84")
    assert "obscured" in rows["obscured.jpg"][DWC + "dataGeneralizations"]
    # The lab's sensitive lynx: the centre of its 10 km cell (10 / 111.32 degrees).
    cell = 10 / 111.32
    lat, lon, uncertainty, _ = place("lynx.jpg")
    assert float(lat) == pytest.approx((np.floor(47.1234 / cell) + 0.5) * cell, abs=1e-6)
    assert float(lon) == pytest.approx((np.floor(8.5678 / cell) + 0.5) * cell, abs=1e-6)
    assert float(uncertainty) > 5_000
    assert "Lynx lynx is a sensitive taxon" in rows["lynx.jpg"][DWC + "dataGeneralizations"]
    text = zipfile.ZipFile(out).read("occurrence.txt").decode()
    assert "106807033" not in text and "51.12" not in text and "47.1234" not in text

    # The flat CSV publishes the same places.
    table = tmp_path / "records.csv"
    with Library.open(places.root) as library:
        export_dwc_csv(library, places.query_id, table)
    with table.open(encoding="utf-8", newline="") as handle:
        by_name = {r["associatedMedia"].rsplit("/", 1)[1]: r for r in csv.DictReader(handle)}
    assert by_name["nulled.jpg"]["decimalLatitude"] == ""
    assert by_name["obscured.jpg"]["coordinateUncertaintyInMeters"] == "24000"
    assert by_name["lynx.jpg"]["decimalLatitude"] == lat


def test_without_the_sensitive_list_the_eml_says_so(places, tmp_path, capsys):
    out = tmp_path / "records.zip"
    lib = ["--library", str(places.root)]
    assert main(["export", "dwca", str(out), "--query", QUERY, "--no-sensitive-taxa", *lib]) == 0
    said = capsys.readouterr()
    assert "1 place generalised, 3 withheld" in said.out
    assert "sensitive-taxa list was not applied" in said.err
    rows = _core_by_file(out)
    assert rows["lynx.jpg"][DWC + "decimalLatitude"] == "47.1234"
    assert rows["nulled.jpg"][DWC + "decimalLatitude"] == ""  # the record's own rule stays
    eml = zipfile.ZipFile(out).read("eml.xml").decode()
    assert "sensitive taxa was NOT applied" in eml


def test_the_results_csv_and_the_analyses_publish_places_alike(places, tmp_path):
    ranking = [(image_id, 1.0) for image_id in places.ids.values()]
    out = tmp_path / "results.csv"
    with Library.open(places.root) as library:
        export_results_csv(library, out, ranking)
        analyses = analyse_query(library, places.query_id)
    with out.open(encoding="utf-8", newline="") as handle:
        rows = {Path(r["path"]).name: r for r in csv.DictReader(handle)}
    assert (rows["open.jpg"]["latitude"], rows["open.jpg"]["place_note"]) == ("50.5", "")
    assert (rows["nulled.jpg"]["latitude"], rows["nulled.jpg"]["longitude"]) == ("", "")
    assert rows["private.jpg"]["place_note"] == "place withheld by its record"
    assert float(rows["lynx.jpg"]["latitude"]) != 47.1234
    assert "sensitive taxon Lynx lynx" in rows["lynx.jpg"]["place_note"]
    assert (analyses.no_place, analyses.withheld_place) == (3, 3)
    assert "with a place (3 withheld)" in analyses.summary()
    files = csv_files(analyses)
    assert b"place_withheld,3" in files["summary.csv"]
    assert sum(analyses.by_place.values()) == 3  # open, obscured, lynx: published points


def test_copies_of_photos_whose_place_is_withheld_lose_their_gps(places, tmp_path, capsys):
    out = tmp_path / "copies"
    with Library.open(places.root) as library:
        copied = copy_relevant_photos(library, places.query_id, out)
    names = sorted(p.name for p in copied)
    assert names == ["lynx.jpg", "nulled.jpg", "obscured.jpg", "open.jpg", "private.jpg"]
    assert copied.stripped == 4
    assert [Path(path).name for path, _ in copied.refused] == ["nulled.png"]
    assert "cannot remove GPS from .png" in copied.refused[0][1]
    # An open place is copied byte for byte; the others keep every pixel and lose the GPS.
    assert (out / "open.jpg").read_bytes() == (places.photos / "open.jpg").read_bytes()
    for name in ("nulled.jpg", "obscured.jpg", "private.jpg", "lynx.jpg"):
        assert has_gps((places.photos / name).read_bytes()), name
        assert not has_gps((out / name).read_bytes()), name
        with Image.open(out / name) as copy, Image.open(places.photos / name) as source:
            assert np.array_equal(np.asarray(copy), np.asarray(source))
            assert copy.getexif().get_ifd(ExifTags.IFD.Exif)[ExifTags.Base.DateTimeOriginal] == (
                "2023:05:01 10:00:00"
            )  # the rest of the EXIF stays

    # The command line says it in its summary and names the photo left out.
    again = tmp_path / "again"
    assert main(["export", "relevant-photos", str(again), "--query", QUERY,
                 "--library", str(places.root)]) == 0  # fmt: skip
    said = capsys.readouterr()
    assert said.out.strip() == (
        f"5 photos copied to {again}; 4 of them without GPS (their place is withheld or "
        "generalised); 1 not copied: their GPS could not be removed"
    )
    assert "nulled.png" in said.err
