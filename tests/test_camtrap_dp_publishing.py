"""What a Camtrap DP package may publish and how it says so: places through the catalog's rule
(sensitive taxa, records that withhold or obscure), licences as the Darwin Core export treats
them, the measured quality of the observations, cells that start like formulas, and the
pre-flight check that keeps a package a validator would reject from being written. Frames in
the shape of the standard's own example (tests/camtrap_belgium.py)."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from statistics import NormalDist
from typing import Any

import pytest
from sqlalchemy import update

from app.cli import main
from engine.catalog import Image, Taxon
from engine.catalog.library import Library
from engine.catalog.privacy import checked_rule, set_sensitive_taxa
from engine.io.camtrap_check import check_descriptor, check_table
from engine.io.camtrap_dp import (
    CamtrapReport,
    PackageRejected,
    check_camtrap_dp,
    export_camtrap_dp,
)
from engine.judgments.adjudication import adjudicate, record_certificate
from engine.judgments.certified_recall import Certification
from engine.judgments.queries import QueryStore
from tests.camtrap_belgium import MALLARD, SPRING, SUMMER, Belgium, build, copy_of
from tests.catalogs import folder_url
from tests.test_camtrap_dp import validate_descriptor, validate_package

ZONE = "Europe/Brussels"


@pytest.fixture(scope="module")
def belgium_template(tmp_path_factory: pytest.TempPathFactory, demo_encoder) -> Belgium:
    return build(tmp_path_factory.mktemp("belgium"), demo_encoder)


@pytest.fixture
def belgium(belgium_template: Belgium, tmp_path: Path) -> Belgium:
    return copy_of(belgium_template, tmp_path / "lib")


def _export(belgium: Belgium, folder: Path, **options: Any) -> CamtrapReport:
    options.setdefault("scientific_name", MALLARD)
    with Library.open(belgium.root) as library:
        return export_camtrap_dp(library, belgium.query_id, folder, timezone=ZONE, **options)


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))


def _frame(belgium: Belgium, name: str) -> int:
    """The image id of the frame with this file name (each is unique)."""
    [found] = [i for rel, i in belgium.ids.items() if rel.endswith("/" + name)]
    return found


def _set(belgium: Belgium, image_ids: list[int], **values: Any) -> None:
    with Library.open(belgium.root) as library, library.catalog.session() as s:
        s.execute(update(Image).where(Image.id.in_(image_ids)).values(**values))


# --- places --------------------------------------------------------------------------------------


def _cell_centre(value: float, cell: float) -> float:
    return round((math.floor(value / cell) + 0.5) * cell, 6)


def test_a_sensitive_taxon_generalises_the_deployments_and_the_spatial_coverage(
    belgium: Belgium, tmp_path: Path
) -> None:
    with Library.open(belgium.root) as library:
        set_sensitive_taxa(library.catalog, [checked_rule(MALLARD, "generalise", 10.0)])
    report = _export(belgium, tmp_path / "pkg")
    tables = validate_package(tmp_path / "pkg")
    descriptor = validate_descriptor(tmp_path / "pkg")
    cell = 10 / 111.32  # degrees: 10 km of latitude
    rows = {row["locationID"]: row for row in tables["deployments"]}
    for folder, (lat, lon) in ((SUMMER, (51.496, 4.774)), (SPRING, (50.699, 4.013))):
        row = rows[folder]
        centre = (_cell_centre(lat, cell), _cell_centre(lon, cell))
        assert (float(row["latitude"]), float(row["longitude"])) == pytest.approx(centre)
        # The true point may lie anywhere in the cell: its centre-to-corner distance.
        side = cell * 111.32 * 1000
        corner = math.hypot(side, side * math.cos(math.radians(centre[0]))) / 2
        assert int(row["coordinateUncertainty"]) == round(corner)
        assert "Anas platyrhynchos is a sensitive taxon" in row["deploymentComments"]
    # The package-level coverage reveals nothing the deployments hide.
    published = {(float(r["longitude"]), float(r["latitude"])) for r in rows.values()}
    assert {tuple(point) for point in descriptor["spatial"]["coordinates"]} == published
    assert [51.496, 4.774] not in descriptor["spatial"]["coordinates"]
    assert descriptor["coordinatePrecision"] == round(cell, 6)
    assert report.generalised == 2 and report.withheld == 0
    assert "deployment places: 2 generalised, 0 withheld" in report.summary()
    # Without the lab's list (as --no-sensitive-taxa asks): the true places, and said so.
    _export(belgium, tmp_path / "open", sensitive_taxa=False)
    rows = {row["locationID"]: row for row in validate_package(tmp_path / "open")["deployments"]}
    assert (rows[SUMMER]["latitude"], rows[SUMMER]["longitude"]) == ("51.496", "4.774")
    description = validate_descriptor(tmp_path / "open")["project"]["description"]
    assert "sensitive-taxa list was not applied" in description


def test_a_photo_of_a_sensitive_taxon_to_withhold_keeps_its_deployment_out(
    belgium: Belgium, tmp_path: Path
) -> None:
    # A blank of the spring deployment holds an otter another query found: the camera's place
    # says where otters are.
    with Library.open(belgium.root) as library:
        with library.catalog.session() as s:
            otter = Taxon(key="Lutra lutra", name="Lutra lutra", genus="Lutra",
                          specific_epithet="lutra", family="Mustelidae")  # fmt: skip
            s.add(otter)
            s.flush()
            s.execute(
                update(Image)
                .where(Image.id == _frame(belgium, "20210330103601-RCNX0001.JPG"))
                .values(taxon_id=otter.id)
            )
        set_sensitive_taxa(library.catalog, [checked_rule("Lutra", "withhold")])
        check = check_camtrap_dp(library, belgium.query_id, scientific_name=MALLARD, timezone=ZONE)
    assert [(d.name.startswith(SPRING), d.photos) for d in check.withheld] == [(True, 2)]
    assert "Lutra is a sensitive taxon" in check.withheld[0].reason
    report = _export(belgium, tmp_path / "pkg")
    tables = validate_package(tmp_path / "pkg")
    descriptor = validate_descriptor(tmp_path / "pkg")
    assert [row["locationID"] for row in tables["deployments"]] == [SUMMER]
    assert {row["deploymentID"] for row in tables["media"] + tables["observations"]} == {
        tables["deployments"][0]["deploymentID"]
    }
    assert descriptor["spatial"]["coordinates"] == [[4.774, 51.496]]
    assert report.withheld == 1 and "0 generalised, 1 withheld" in report.summary()


def test_records_that_withhold_or_obscure_their_place_are_respected(
    belgium: Belgium, tmp_path: Path
) -> None:
    summer_blank = _frame(belgium, "20200709093330-RCNX0120.JPG")
    spring_first = _frame(belgium, "20210330103601-RCNX0001.JPG")
    _set(belgium, [summer_blank], location_withheld=True, latitude=None, longitude=None)
    _set(belgium, [spring_first], geoprivacy="obscured")
    report = _export(belgium, tmp_path / "pkg")
    tables = validate_package(tmp_path / "pkg")
    descriptor = validate_descriptor(tmp_path / "pkg")
    [row] = tables["deployments"]
    assert row["locationID"] == SPRING
    # iNaturalist's 0.2° cell: 50.699, 4.013 -> the centre of [50.6, 50.8] x [4.0, 4.2].
    assert (float(row["latitude"]), float(row["longitude"])) == pytest.approx((50.7, 4.1))
    assert descriptor["spatial"]["coordinates"] == [[4.1, 50.7]]
    assert descriptor["coordinatePrecision"] == 0.2
    assert (report.generalised, report.withheld) == (1, 1)


# --- licences ------------------------------------------------------------------------------------


def test_media_whose_licence_allows_no_reuse_are_left_out_unless_asked(
    belgium: Belgium, tmp_path: Path
) -> None:
    restricted = _frame(belgium, "20200709093328-RCNX0002.JPG")  # relevant, in the summer event
    blank = _frame(belgium, "20200709093330-RCNX0120.JPG")
    _set(belgium, [restricted], license="All rights reserved")
    _set(belgium, [blank], license=None)
    report = _export(belgium, tmp_path / "pkg")
    tables = validate_package(tmp_path / "pkg")
    descriptor = validate_descriptor(tmp_path / "pkg")
    names = {row["fileName"] for row in tables["media"]}
    assert len(names) == 4 and not names & {
        "20200709093328-RCNX0002.JPG",
        "20200709093330-RCNX0120.JPG",
    }
    assert sum(row["observationLevel"] == "media" for row in tables["observations"]) == 3
    assert report.restricted == 2
    assert (
        "2 photos left out: their licence does not allow reuse (include them with "
        "--include-restricted)" in report.summary()
    )
    cc_by = {"name": "CC-BY-4.0", "path": "http://creativecommons.org/licenses/by/4.0/legalcode",
             "title": "CC BY 4.0"}  # fmt: skip
    assert descriptor["licenses"] == [{**cc_by, "scope": "data"}, {**cc_by, "scope": "media"}]

    report = _export(belgium, tmp_path / "all", include_restricted=True)
    tables = validate_package(tmp_path / "all")
    descriptor = validate_descriptor(tmp_path / "all")
    comments = {row["fileName"]: row["mediaComments"] for row in tables["media"]}
    assert comments["20200709093328-RCNX0002.JPG"] == "licence: All rights reserved"
    assert comments["20200709093330-RCNX0120.JPG"] == "licence: none recorded"
    assert comments["20200709093328-RCNX0001.JPG"] == "licence: CC BY 4.0"
    # As the Darwin Core export: restricted photos included make the data CC BY-NC 4.0.
    assert descriptor["licenses"][0]["name"] == "CC-BY-NC-4.0"
    assert "2 with a restricted licence included" in report.summary()


# --- quality -------------------------------------------------------------------------------------


def _wilson(successes: int, trials: int) -> tuple[float, float]:
    z = NormalDist().inv_cdf(0.975)
    p = successes / trials
    centre = (p + z * z / (2 * trials)) / (1 + z * z / trials)
    half = z / (1 + z * z / trials) * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials**2))
    return centre - half, centre + half


def test_the_package_carries_its_measured_quality_and_how_each_photo_was_decided(
    belgium: Belgium, tmp_path: Path
) -> None:
    first, second, third = (_frame(belgium, f"20200709093328-RCNX000{n}.JPG") for n in (1, 2, 4))
    spring_last = _frame(belgium, "20210330103601-RCNX0063.JPG")
    with Library.open(belgium.root) as library:
        bob = QueryStore(library, user="bob")
        bob.judge(belgium.query_id, first, 1)
        bob.judge(belgium.query_id, second, 0)  # a disagreement, then settled by carol
        bob.judge(belgium.query_id, third, 1)
        bob.judge(belgium.query_id, spring_last, 0)
        QueryStore(library, user="alice").judge(belgium.query_id, spring_last, 1)  # unsettled
        adjudicate(library, belgium.query_id, second, 1, by="carol")
        certification = Certification(
            target=0.9, confidence=0.95, phase="certified", population=60, census=6,
            census_relevant=4, rate=0.5, sample_size=20, sample_judged=20, sample_relevant=0,
            bound=0, stop_rank=6, judged=26, to_judge=0, expected=26, found=4,
        )  # fmt: skip
        record_certificate(library, belgium.query_id, certification, by="alice")
    _export(belgium, tmp_path / "pkg")
    tables = validate_package(tmp_path / "pkg")
    descriptor = validate_descriptor(tmp_path / "pkg")
    low, high = _wilson(2, 4)
    description = descriptor["project"]["description"]
    assert (
        "Precision: of the 4 photos of this package that two or more judges judged, 2 were "
        f"judged relevant by every judge: 0.500 (95 % Wilson interval {low:.3f}–{high:.3f})"
    ) in description
    assert "Adjudicated: 1 photo where judges disagreed" in description
    assert "Recall: recall of at least 90 % certified at 95 % confidence" in description
    media = {row["mediaID"]: row for row in tables["observations"] if row["mediaID"]}
    by_file = {
        row["fileName"]: media[row["mediaID"]] for row in tables["media"] if row["mediaID"] in media
    }
    settled = by_file["20200709093328-RCNX0002.JPG"]
    assert (settled["classifiedBy"], settled["observationTags"]) == ("carol", "adjudicated:true")
    assert settled["classificationProbability"] == ""  # the adjudicator's certainty is unknown
    assert (
        settled["observationComments"] == "adjudicated by carol (1 of 2 judges judged it relevant)"
    )
    unsettled = by_file["20210330103601-RCNX0063.JPG"]
    assert (unsettled["classifiedBy"], unsettled["classificationProbability"]) == ("alice", "0.5")
    agreed = by_file["20200709093328-RCNX0001.JPG"]
    assert agreed["classificationProbability"] == "1"
    assert all(row["classificationMethod"] == "human" for row in tables["observations"])
    events = [row for row in tables["observations"] if row["observationLevel"] == "event"]
    assert sorted(row["observationTags"] for row in events) == ["", "adjudicated:true"]


def test_without_a_second_judge_or_a_certificate_the_package_says_so(
    belgium: Belgium, tmp_path: Path
) -> None:
    _export(belgium, tmp_path / "pkg")
    description = validate_descriptor(tmp_path / "pkg")["project"]["description"]
    assert (
        "Precision: not measured (no photo of this package was judged by a second judge)"
        in description
    )
    assert "Recall: not certified" in description
    observations = validate_package(tmp_path / "pkg")["observations"]
    assert {row["classificationProbability"] for row in observations} == {""}


# --- cells that start like formulas (issue 39) ---------------------------------------------------


def test_formula_looking_cells_are_kept_and_named_in_the_check(
    belgium: Belgium, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    judge = '=HYPERLINK("http://example.org","x")'
    blank = _frame(belgium, "20200709093330-RCNX0120.JPG")
    with Library.open(belgium.root) as library:
        QueryStore(library, user=judge).judge(belgium.query_id, blank, 1)
        check = check_camtrap_dp(
            library, belgium.query_id, scientific_name="@Anas platyrhynchos", timezone=ZONE
        )
    _export(belgium, tmp_path / "pkg", scientific_name="@Anas platyrhynchos")
    tables = validate_package(tmp_path / "pkg")
    # Written as they are: the standard allows no guard character before a value.
    formulas = {
        (row["observationID"], column)
        for row in tables["observations"]
        for column, value in row.items()
        if value[:1] in ("=", "@")
    }
    assert {value for row in tables["observations"] for value in row.values()} >= {
        judge,
        "@Anas platyrhynchos",
    }
    named = {(p.record, p.column) for p in check.warnings if "formula" in p.message}
    assert named == formulas and len(formulas) == 2 + len(tables["observations"])
    assert all(p.table == "observations" for p in check.warnings if "formula" in p.message)
    assert not check.rejected


# --- the pre-flight check ------------------------------------------------------------------------


def test_a_package_a_validator_would_reject_is_checked_and_not_written(
    belgium: Belgium, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spring = [i for rel, i in belgium.ids.items() if rel.startswith(SPRING)]
    _set(belgium, spring, latitude=None, longitude=None)  # no GPS: latitude is required
    with Library.open(belgium.root) as library:
        check = check_camtrap_dp(library, belgium.query_id, scientific_name=MALLARD, timezone=ZONE)
        with pytest.raises(PackageRejected) as rejected:
            export_camtrap_dp(library, belgium.query_id, tmp_path / "pkg", scientific_name=MALLARD)
    assert check.rejected
    key = next(p.record for p in check.errors)
    assert {(p.table, p.record, p.column, p.message) for p in check.errors} == {
        ("deployments", key, "latitude", "required, empty"),
        ("deployments", key, "longitude", "required, empty"),
    }
    assert "\n" not in str(rejected.value) and "--write-anyway" in str(rejected.value)
    assert not (tmp_path / "pkg").exists()

    lib = str(belgium.root)
    base = ["export", "camtrap-dp", "--query", "mallard", "--library", lib, "--timezone", ZONE]
    assert main([*base, "--check"]) == 1  # no OUT needed: nothing is written
    printed = capsys.readouterr()
    assert printed.out.startswith("Camtrap DP package checked, nothing written: 2 deployments")
    assert f"error: deployments.csv {key} latitude: required, empty" in printed.err
    assert main([*base[:2], str(tmp_path / "pkg"), *base[2:]]) == 1
    assert "was not written: 2 problems would make it invalid" in capsys.readouterr().err
    assert not (tmp_path / "pkg").exists()
    assert main([*base[:2], str(tmp_path / "pkg"), *base[2:], "--write-anyway"]) == 0
    assert "Camtrap DP package written" in capsys.readouterr().out
    assert sorted(p.name for p in (tmp_path / "pkg").iterdir()) == [
        "datapackage.json", "deployments.csv", "media.csv", "observations.csv"
    ]  # fmt: skip


def test_the_check_writes_nothing_and_agrees_with_the_export(
    belgium: Belgium, tmp_path: Path
) -> None:
    with Library.open(belgium.root) as library:
        check = check_camtrap_dp(library, belgium.query_id, scientific_name=MALLARD, timezone=ZONE)
    report = _export(belgium, tmp_path / "pkg")
    assert check.problems == () and not check.rejected
    assert (check.report.deployments, check.report.media, check.report.observations) == (
        report.deployments, report.media, report.observations
    )  # fmt: skip
    assert check.report.written is False and report.written is True


# The standard's example, as its deployments.csv, media.csv and observations.csv write it
# (tdwg/camtrap-dp example/, tag 1.0): one row of each.
EXAMPLE_DEPLOYMENT = {
    "deploymentID": "00a2c20d", "locationID": "e254a13c", "locationName": "B_HS_val 2_processiepark",
    "latitude": "51.496", "longitude": "4.774", "coordinateUncertainty": "187",
    "deploymentStart": "2020-05-30T04:57:37+02:00", "deploymentEnd": "2020-07-01T11:41:41+02:00",
    "setupBy": "anonymized:3eb30aa", "cameraID": "320", "cameraModel": "Reconyx-HF2X",
    "cameraDelay": "0", "cameraHeight": "1.30", "cameraTilt": "-15", "cameraHeading": "285",
    "detectionDistance": "3.20", "timestampIssues": "false", "baitUse": "false",
    "featureType": "trailGame", "deploymentGroups": "area:HS | season:spring",
}  # fmt: skip
EXAMPLE_MEDIA = {
    "mediaID": "07840dcc", "deploymentID": "00a2c20d", "captureMethod": "activityDetection",
    "timestamp": "2020-05-30T04:57:37+02:00",
    "filePath": "https://multimedia.agouti.eu/assets/07840dcc-0d99-4ab4-973b-7e4a8e20b56d/file",
    "filePublic": "true", "fileName": "20200709093328-RCNX0001.JPG", "fileMediatype": "image/jpeg",
}  # fmt: skip
EXAMPLE_OBSERVATION = {
    "observationID": "07840dcc_1", "deploymentID": "00a2c20d", "mediaID": "07840dcc",
    "eventID": "4bb69c45", "eventStart": "2020-05-30T02:57:37Z", "eventEnd": "2020-05-30T02:57:37Z",
    "observationLevel": "media", "observationType": "animal", "scientificName": "Anas platyrhynchos",
    "count": "1", "lifeStage": "adult", "sex": "female", "classificationMethod": "human",
    "classifiedBy": "Peter Desmet",
}  # fmt: skip


@pytest.mark.parametrize(
    ("table", "row", "column", "value", "message"),
    [
        ("deployments", EXAMPLE_DEPLOYMENT, "featureType", "path", "is not one of roadPaved"),
        ("deployments", EXAMPLE_DEPLOYMENT, "deploymentStart", "2020-05-30T04:57:37",
         "is not a date and time as YYYY-MM-DDThh:mm:ss±hh:mm"),
        ("deployments", EXAMPLE_DEPLOYMENT, "latitude", "91", "above the maximum 90"),
        ("deployments", EXAMPLE_DEPLOYMENT, "cameraTilt", "1.5", "is not an integer"),
        ("media", EXAMPLE_MEDIA, "filePath", "../20200709093328-RCNX0001.JPG", "does not match"),
        ("media", EXAMPLE_MEDIA, "filePublic", "yes", "is not true or false"),
        ("media", EXAMPLE_MEDIA, "fileMediatype", "", "required, empty"),
        ("media", EXAMPLE_MEDIA, "exifData", "[1]", "not a JSON object"),
        ("observations", EXAMPLE_OBSERVATION, "lifeStage", "larva", "is not one of adult"),
        ("observations", EXAMPLE_OBSERVATION, "count", "0", "below the minimum 1"),
        ("observations", EXAMPLE_OBSERVATION, "classificationProbability", "1.2", "above"),
    ],
)  # fmt: skip
def test_the_check_reads_the_standards_table_schemas(
    table: str, row: dict[str, str], column: str, value: str, message: str
) -> None:
    from engine.io.camtrap_check import field_names

    header = field_names(table)
    assert check_table(table, header, [row]) == []  # the standard's own example passes
    [problem] = check_table(table, header, [{**row, column: value}])
    assert (problem.table, problem.record, problem.column) == (table, row[header[0]], column)
    assert message in problem.message and problem.severity == "error"


def test_the_check_finds_broken_keys_and_repeated_ids() -> None:
    from engine.io.camtrap_check import check_foreign_keys, field_names

    tables = {
        "deployments": [EXAMPLE_DEPLOYMENT],
        "media": [EXAMPLE_MEDIA, {**EXAMPLE_MEDIA, "deploymentID": "elsewhere"}],
        "observations": [{**EXAMPLE_OBSERVATION, "mediaID": "nothing"}],
    }
    keys = check_foreign_keys(tables)
    assert [(p.table, p.column) for p in keys] == [
        ("media", "deploymentID"), ("observations", "mediaID")
    ]  # fmt: skip
    [repeated] = check_table("media", field_names("media"), tables["media"])
    assert (repeated.column, repeated.message) == ("mediaID", "'07840dcc' appears twice")


def test_the_check_reads_what_the_profile_requires() -> None:
    example = json.loads(json.dumps(_EXAMPLE_DESCRIPTOR))
    assert check_descriptor(example) == []
    del example["project"]["samplingDesign"]
    example["licenses"] = [{"name": "CC0-1.0", "scope": "data"}]
    example["temporal"]["end"] = "2021-02-30"
    example["contributors"][0]["role"] = "author"
    found = {(p.record, p.message) for p in check_descriptor(example)}
    assert found == {
        ("project.samplingDesign", "required, missing"),
        ("licenses", "needs a licence of scope data and one of media"),
        ("temporal.end", "must be a date YYYY-MM-DD"),
        ("contributors[0]", "role is not in the vocabulary"),
    }


_BASE = "https://raw.githubusercontent.com/tdwg/camtrap-dp/1.0/"
_EXAMPLE_DESCRIPTOR = {  # the standard's example/datapackage.json, its required part
    "resources": [
        {"name": name, "path": f"{name}.csv", "profile": "tabular-data-resource",
         "schema": f"{_BASE}{name}-table-schema.json"}
        for name in ("deployments", "media", "observations")
    ],
    "profile": _BASE + "camtrap-dp-profile.json",
    "created": "2023-02-06T11:23:03Z",
    "contributors": [{"title": "Peter Desmet", "role": "contact"}],
    "licenses": [{"name": "CC0-1.0", "scope": "data"},
                 {"path": "http://creativecommons.org/licenses/by/4.0/", "scope": "media"}],
    "project": {"title": "Management of Invasive Coypu and muskrAt in Europe",
                "samplingDesign": "targeted", "captureMethod": ["activityDetection", "timeLapse"],
                "individualAnimals": False, "observationLevel": ["media", "event"]},
    "coordinatePrecision": 0.001,
    "spatial": {"type": "Polygon", "coordinates": [[[4.013, 50.699], [5.659, 50.699],
                [5.659, 51.496], [4.013, 51.496], [4.013, 50.699]]]},
    "temporal": {"start": "2020-05-30", "end": "2021-04-18"},
    "taxonomic": [{"scientificName": "Anas platyrhynchos", "taxonRank": "species"}],
}  # fmt: skip


def test_the_package_is_the_same_on_each_database(
    tmp_path: Path, demo_encoder, catalog_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Times, places, licences and judges read through the catalog on SQLite and PostgreSQL."""
    url = None if catalog_url.startswith("sqlite") else folder_url(catalog_url, monkeypatch)
    belgium = build(tmp_path, demo_encoder, url)
    first = _frame(belgium, "20200709093328-RCNX0001.JPG")
    with Library.open(belgium.root) as library:
        set_sensitive_taxa(library.catalog, [checked_rule(MALLARD, "generalise", 10.0)])
        QueryStore(library, user="bob").judge(belgium.query_id, first, 0)
        adjudicate(library, belgium.query_id, first, 1, by="carol")
    _set(belgium, [_frame(belgium, "20200709093330-RCNX0120.JPG")], license=None)
    report = _export(belgium, tmp_path / "pkg")
    tables = validate_package(tmp_path / "pkg")
    descriptor = validate_descriptor(tmp_path / "pkg")
    starts = sorted(row["deploymentStart"] for row in tables["deployments"])
    assert starts == ["2020-05-30T04:57:37+02:00", "2021-03-27T21:38:18+01:00"]
    assert (report.generalised, report.restricted, report.media) == (2, 1, 5)
    assert [o["classifiedBy"] for o in tables["observations"] if o["observationTags"]] == [
        "carol", "carol"
    ]  # fmt: skip
    assert "1 photo where judges disagreed" in descriptor["project"]["description"]


def test_the_export_dialog_lists_the_packages_problems_and_left_out_records(
    belgium: Belgium,
) -> None:
    from app.controllers.records import check_records, records_preview
    from widgets.records_dialog import CAMTRAP_DP, RecordsRequest

    restricted = _frame(belgium, "20200709093328-RCNX0002.JPG")
    _set(belgium, [restricted], license="All rights reserved")
    spring = [i for rel, i in belgium.ids.items() if rel.startswith(SPRING)]
    _set(belgium, spring, latitude=None, longitude=None)
    with Library.open(belgium.root) as library:
        check = check_records(
            library, belgium.query_id, RecordsRequest(CAMTRAP_DP, False, "", MALLARD)
        )
        included = check_records(
            library, belgium.query_id, RecordsRequest(CAMTRAP_DP, True, "", MALLARD)
        )
    assert sorted(item.reason for item in check.stops) == [
        "latitude: required, empty", "longitude: required, empty"
    ]  # fmt: skip
    [licence] = [item for item in check.left_out if "licence" in item.reason]
    assert licence.photo.endswith("20200709093328-RCNX0002.JPG")
    assert licence.reason == "licence: All rights reserved, which does not allow reuse"
    assert "would not be written: 2 problems" in records_preview(check, "mallard").headline
    assert any("included as asked" in item.reason for item in included.problems)
    assert not any("licence" in item.reason for item in included.left_out)
