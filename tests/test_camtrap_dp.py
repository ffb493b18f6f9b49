"""Camtrap DP 1.0 packages checked against the standard's own published schemas, offline.

resources/camtrap_dp/ holds the profile and the three table schemas of Camtrap DP 1.0 as
tdwg/camtrap-dp publishes them (tag 1.0; MIT licence, in LICENSE.txt there). The tables are
checked here field by field as a Frictionless validator would (header, required, type, format,
enum, minimum/maximum, pattern, unique, primary and foreign keys), independently of the
export's own pre-flight check; datapackage.json with jsonschema against the profile, the Data
Package and GeoJSON schemas it refers to by URL standing in as open schemas (no network).

The times are checked against the standard's own example package (deployments 00a2c20d and
62c200a9 of tdwg/camtrap-dp's example/: Reconyx frames in Belgium whose EXIF gives no UTC
offset), rebuilt here in that shape."""

from __future__ import annotations

import csv
import json
import math
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from app.cli import main
from engine.catalog import Query
from engine.catalog.library import Library
from engine.demo.camera_traps import SPECIES
from engine.errors import BadInputError
from engine.io.camtrap_dp import CamtrapReport, export_camtrap_dp, iso
from engine.judgments.attributes import set_attributes
from tests.camtrap_belgium import FRAMES, MALLARD, SPRING, SUMMER, Belgium, build, copy_of

SCHEMAS = Path(__file__).parent.parent / "resources" / "camtrap_dp"
DEER = SPECIES[0].scientific_name


def table_schema(name: str) -> dict[str, Any]:
    return json.loads((SCHEMAS / f"{name}-table-schema.json").read_text())


def _check_value(field: dict[str, Any], value: str, where: str) -> list[str]:
    """What is wrong with one cell under its field's type and constraints."""
    kind, limits = field["type"], field.get("constraints", {})
    if kind == "number" or kind == "integer":
        try:
            number = float(value) if kind == "number" else int(value)
        except ValueError:
            return [f"{where}: {value!r} is not a {kind}"]
        if not math.isfinite(number):
            return [f"{where}: {value!r} is not finite"]
        if "minimum" in limits and number < limits["minimum"]:
            return [f"{where}: {value} below {limits['minimum']}"]
        if "maximum" in limits and number > limits["maximum"]:
            return [f"{where}: {value} above {limits['maximum']}"]
    elif kind == "boolean":
        if value not in ("true", "false"):
            return [f"{where}: {value!r} is not a boolean"]
    elif kind == "datetime":
        try:
            parsed = datetime.strptime(value, field.get("format", "%Y-%m-%dT%H:%M:%S%z"))
        except ValueError:
            return [f"{where}: {value!r} is not a datetime as {field.get('format')}"]
        if parsed.tzinfo is None:
            return [f"{where}: {value!r} has no UTC offset"]
    if "enum" in limits and value not in limits["enum"]:
        return [f"{where}: {value!r} not in {limits['enum']}"]
    if "pattern" in limits and not re.fullmatch(limits["pattern"], value):
        return [f"{where}: {value!r} does not match {limits['pattern']}"]
    return []


def validate_table(path: Path, schema: dict[str, Any]) -> tuple[list[dict[str, str]], list[str]]:
    """The rows of a CSV and what in it breaks its table schema."""
    with path.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        header = reader.fieldnames or []
        rows = list(reader)
    names = [field["name"] for field in schema["fields"]]
    errors = [] if header == names else [f"{path.name}: header {header} is not {names}"]
    missing = set(schema.get("missingValues", [""]))
    for number, row in enumerate(rows, start=2):
        for field in schema["fields"]:
            value = row.get(field["name"], "")
            where = f"{path.name}:{number} {field['name']}"
            if value in missing:
                if field.get("constraints", {}).get("required"):
                    errors.append(f"{where}: required, empty")
                continue
            errors += _check_value(field, value, where)
    for field in schema["fields"]:
        if field.get("constraints", {}).get("unique") or field["name"] == schema.get("primaryKey"):
            values = [row[field["name"]] for row in rows]
            if len(values) != len(set(values)):
                errors.append(f"{path.name}: {field['name']} values repeat")
    return rows, errors


def validate_package(folder: Path) -> dict[str, list[dict[str, str]]]:
    """Every table of the package against its schema, and the foreign keys between them."""
    tables: dict[str, list[dict[str, str]]] = {}
    errors: list[str] = []
    for name in ("deployments", "media", "observations"):
        tables[name], table_errors = validate_table(folder / f"{name}.csv", table_schema(name))
        errors += table_errors
    for name in ("media", "observations"):
        for key in table_schema(name).get("foreignKeys", []):
            target = key["reference"]
            known = {row[target["fields"]] for row in tables[target["resource"]]}
            errors += [
                f"{name}.{key['fields']} {row[key['fields']]!r} not in {target['resource']}"
                for row in tables[name]
                if row[key["fields"]] and row[key["fields"]] not in known
            ]
    assert errors == []
    return tables


def validate_descriptor(folder: Path) -> dict[str, Any]:
    """datapackage.json against Camtrap DP's profile (JSON Schema), with no network."""
    jsonschema = pytest.importorskip("jsonschema")
    referencing = pytest.importorskip("referencing")
    from referencing.jsonschema import DRAFT4

    # The published profile writes one JSON pointer without its first slash ("#$defs/version");
    # jsonschema rejects that, so it is read as the pointer it means.
    text = (SCHEMAS / "camtrap-dp-profile.json").read_text()
    profile = json.loads(text.replace('"#$defs/', '"#/$defs/'))
    # The schemas the profile names by URL (Frictionless' Data Package, GeoJSON) stand in as
    # open schemas: what is checked here is Camtrap DP's own part.
    registry = referencing.Registry().with_resources(
        (url, DRAFT4.create_resource({}))
        for url in (
            "https://frictionlessdata.io/schemas/data-package.json",
            "http://json.schemastore.org/geojson.json",
        )
    )
    descriptor = json.loads((folder / "datapackage.json").read_text())
    validator = jsonschema.Draft4Validator(
        profile, registry=registry, format_checker=jsonschema.Draft4Validator.FORMAT_CHECKER
    )
    assert [error.message for error in validator.iter_errors(descriptor)] == []
    return descriptor


def _query_id(library: Library, text_start: str) -> int:
    with library.catalog.session() as s:
        for query in s.query(Query).all():
            if query.text.startswith(text_start):
                return int(query.id)
    raise AssertionError(text_start)


def test_a_package_meets_the_standards_schemas(
    camera_trap_library: Path, camera_trap_demo_library: Path
) -> None:
    with Library.open(camera_trap_library / "lib") as library:
        query_id = _query_id(library, f"a {SPECIES[0].colour} circle: ")
        report = export_camtrap_dp(
            library,
            query_id,
            camera_trap_library / "pkg",
            scientific_name=DEER,
            include_restricted=True,  # the demo's frames record no licence
        )
    folder = camera_trap_library / "pkg"
    tables = validate_package(folder)
    descriptor = validate_descriptor(folder)

    demo = json.loads((camera_trap_demo_library / "photos" / "camera_traps.json").read_text())
    deer_events = [e for e in demo["events"] if e["species"] == DEER]
    deer_frames = sum(len(e["frames"]) for e in deer_events)
    cameras = {e["camera"] for e in deer_events}
    all_frames = sum(len(e["frames"]) for e in demo["events"] if e["camera"] in cameras)
    # One event-level observation per drawn deer burst, one media-level one per deer frame.
    levels = [row["observationLevel"] for row in tables["observations"]]
    assert levels.count("event") == len(deer_events) == report.events
    assert levels.count("media") == deer_frames
    assert len(tables["deployments"]) == len(cameras) == report.deployments
    assert len(tables["media"]) == all_frames  # the blanks too: effort is counted from them
    for row in tables["observations"]:
        assert row["observationType"] == "animal" and row["scientificName"] == DEER
        assert row["classificationMethod"] == "human" and row["classifiedBy"] == "alice"
        assert (row["mediaID"] == "") == (row["observationLevel"] == "event")
    # Event times span the burst; media timestamps keep the camera's offset.
    assert all(row["timestamp"].endswith("+02:00") for row in tables["media"])
    assert {row["timestampIssues"] for row in tables["deployments"]} == {"false"}
    assert report.timestamp_issues == 0
    by_event = {
        row["eventID"]: row for row in tables["observations"] if row["observationLevel"] == "event"
    }
    starts = sorted(row["eventStart"] for row in by_event.values())
    assert starts == sorted(iso(datetime.fromisoformat(e["start"] + "+02:00")) for e in deer_events)
    assert descriptor["profile"].endswith("/1.0/camtrap-dp-profile.json")
    assert descriptor["taxonomic"] == [{"scientificName": DEER}]
    assert descriptor["temporal"]["start"] <= descriptor["temporal"]["end"]
    assert len(descriptor["spatial"]["coordinates"]) == len(cameras)


def test_attributes_go_to_camtrap_vocabularies(camera_trap_library: Path, tmp_path: Path) -> None:
    with Library.open(camera_trap_library / "lib") as library:
        query_id = _query_id(library, f"a {SPECIES[1].colour} circle: ")
        with library.catalog.session() as s:
            from engine.catalog import Judgment

            judged = sorted(s.query(Judgment.image_id).filter(Judgment.query_id == query_id).all())
        first, second = judged[0][0], judged[-1][0]
        set_attributes(
            library, query_id, first, {"lifeStage": "juvenile", "sex": "female",
                                       "behavior": "foraging"}, judge="alice"
        )  # fmt: skip
        set_attributes(
            library, query_id, second, {"lifeStage": "larva", "sex": "hermaphrodite"},
            judge="alice",
        )  # fmt: skip
        export_camtrap_dp(
            library,
            query_id,
            tmp_path / "pkg",
            scientific_name="Vulpes vulpes",
            include_restricted=True,
        )
    tables = validate_package(tmp_path / "pkg")
    media_ids = {row["mediaID"]: row for row in tables["observations"] if row["mediaID"]}
    assert len(media_ids) == len(judged)
    rows = list(media_ids.values())
    described = [r for r in rows if r["lifeStage"] or r["observationComments"]]
    assert {(r["lifeStage"], r["sex"], r["behavior"], r["observationComments"])
            for r in described} == {("juvenile", "female", "foraging", ""),
                                    ("", "", "", "lifeStage: larva | sex: hermaphrodite")}  # fmt: skip


def test_the_command_line_writes_a_package(camera_trap_library: Path, tmp_path: Path, capsys):
    lib = str(camera_trap_library / "lib")
    out = tmp_path / "package"
    code = main(["export", "camtrap-dp", str(out), "--query", "a blue circle: wild boar",
                 "--library", lib, "--scientific-name", "Sus scrofa",
                 "--include-restricted"])  # fmt: skip
    printed = capsys.readouterr().out
    assert code == 0 and "Camtrap DP package written" in printed
    assert sorted(p.name for p in out.iterdir()) == [
        "datapackage.json", "deployments.csv", "media.csv", "observations.csv"
    ]  # fmt: skip
    validate_package(out)
    assert main(["export", "camtrap-dp", str(tmp_path / "x"), "--query", "no such query",
                 "--library", lib]) == 2  # fmt: skip


def test_observations_without_a_name_are_counted(camera_trap_library: Path, tmp_path: Path):
    with Library.open(camera_trap_library / "lib") as library:
        query_id = _query_id(library, f"a {SPECIES[2].colour} circle: ")
        report = export_camtrap_dp(library, query_id, tmp_path / "pkg", include_restricted=True)
        with pytest.raises(BadInputError):
            export_camtrap_dp(library, 10_000, tmp_path / "none")
    assert report.unnamed == report.observations > 0
    assert "without a scientific name" in report.summary()
    assert not (tmp_path / "none").exists()


# --- times: the standard's own example (tests/camtrap_belgium.py) ---------------------------------


@pytest.fixture(scope="module")
def belgium_template(tmp_path_factory: pytest.TempPathFactory, demo_encoder) -> Belgium:
    return build(tmp_path_factory.mktemp("belgium"), demo_encoder)


@pytest.fixture
def belgium(belgium_template: Belgium, tmp_path: Path) -> Belgium:
    return copy_of(belgium_template, tmp_path / "lib")


def _export(belgium: Belgium, folder: Path, **options: Any) -> CamtrapReport:
    with Library.open(belgium.root) as library:
        return export_camtrap_dp(
            library, belgium.query_id, folder, scientific_name=MALLARD, **options
        )


def _by_name(rows: list[dict[str, str]]) -> dict[str, dict[str, str]]:
    return {row["locationID"]: row for row in rows}


def test_times_without_a_utc_offset_are_flagged_not_passed_off_as_utc(
    belgium: Belgium, tmp_path: Path
) -> None:
    report = _export(belgium, tmp_path / "pkg")
    tables = validate_package(tmp_path / "pkg")
    validate_descriptor(tmp_path / "pkg")
    deployments = _by_name(tables["deployments"])
    # Both deployments' frames came without an offset: the standard's field for exactly this.
    assert {row["timestampIssues"] for row in deployments.values()} == {"true"}
    assert "unknown UTC offset" in deployments[SUMMER]["deploymentComments"]
    # The clock's reading is kept as it was read, never shifted by a guessed offset.
    assert deployments[SUMMER]["deploymentStart"] == "2020-05-30T04:57:37Z"
    assert report.timestamp_issues == 2 and report.without_offset == len(FRAMES)
    assert "timestampIssues true (give their time zone with --timezone)" in report.summary()


def test_a_time_zone_gives_the_times_of_the_standards_own_example(
    belgium: Belgium, tmp_path: Path
) -> None:
    report = _export(belgium, tmp_path / "pkg", timezone="Europe/Brussels")
    tables = validate_package(tmp_path / "pkg")
    deployments = _by_name(tables["deployments"])
    # As the example's deployments.csv writes them: summer time in May, and a deployment set
    # up in winter keeps +01:00 after the change to summer time (the camera's clock does).
    assert deployments[SUMMER]["deploymentStart"] == "2020-05-30T04:57:37+02:00"
    assert deployments[SUMMER]["deploymentEnd"] == "2020-07-01T11:41:41+02:00"
    assert deployments[SPRING]["deploymentStart"] == "2021-03-27T21:38:18+01:00"
    assert deployments[SPRING]["deploymentEnd"] == "2021-04-18T22:25:00+01:00"
    assert "the zone changed to +02:00" in deployments[SPRING]["deploymentComments"]
    assert {row["timestampIssues"] for row in deployments.values()} == {"false"}
    # The example's observations.csv: the event from 02:57:37Z to 02:57:44Z.
    event = next(
        row
        for row in tables["observations"]
        if row["observationLevel"] == "event"
        and row["deploymentID"] == deployments[SUMMER]["deploymentID"]
    )
    start = datetime.fromisoformat(event["eventStart"]).astimezone(UTC)
    end = datetime.fromisoformat(event["eventEnd"]).astimezone(UTC)
    assert (start, end) == (datetime(2020, 5, 30, 2, 57, 37, tzinfo=UTC),
                            datetime(2020, 5, 30, 2, 57, 44, tzinfo=UTC))  # fmt: skip
    assert report.timestamp_issues == 0 and "timestampIssues" not in report.summary()


def test_a_time_zone_for_one_deployment_leaves_the_other_flagged(
    belgium: Belgium, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["export", "camtrap-dp", str(tmp_path / "pkg"), "--query", "mallard",
                 "--library", str(belgium.root), "--scientific-name", MALLARD,
                 "--timezone", f"{SUMMER}=+02:00"])  # fmt: skip
    assert code == 0
    deployments = _by_name(validate_package(tmp_path / "pkg")["deployments"])
    assert deployments[SUMMER]["timestampIssues"] == "false"
    assert deployments[SUMMER]["deploymentStart"] == "2020-05-30T04:57:37+02:00"
    assert deployments[SPRING]["timestampIssues"] == "true"
    printed = capsys.readouterr()
    assert "1 deployments with no known UTC offset" in printed.out
    assert (
        f"warning: deployments.csv {deployments[SPRING]['deploymentID']} timestampIssues"
        in printed.err
    )


def test_an_unknown_time_zone_is_one_line_and_writes_nothing(
    belgium: Belgium, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(BadInputError, match="unknown time zone 'Europe/Brusels'"):
        _export(belgium, tmp_path / "pkg", timezone="Europe/Brusels")
    code = main(["export", "camtrap-dp", str(tmp_path / "pkg"), "--query", "mallard",
                 "--library", str(belgium.root), "--timezone", "nowhere=+01:00"])  # fmt: skip
    assert code == 2 and "no deployment of this package is named nowhere" in capsys.readouterr().err
    assert not (tmp_path / "pkg").exists()
