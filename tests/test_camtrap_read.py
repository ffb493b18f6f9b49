"""A Camtrap DP package opened as a collection: its photos indexed and given the package's
deployments, times, places, cameras and licence, its observations as detections; a package
whose media are URLs refused in one line with nothing imported."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from app.cli import main
from engine.catalog.library import Library
from engine.catalog.models import Collection, Deployment, DetectionFrame, Image
from engine.detections.store import detections_of
from engine.errors import BadInputError
from engine.indexing.deployments import list_deployments
from engine.indexing.indexer import Indexer
from engine.io.camtrap_read import open_camtrap_package
from engine.licences import read_licence
from tests.camtrap_packages import jpeg, write_package
from tests.test_exif_camera import camera_jpeg

MALLARD = "Anas platyrhynchos"
DEPLOYMENTS = [
    {
        "deploymentID": "00a2c20d",
        "locationID": "e254a13c",
        "locationName": "B_HS_val 2_processiepark",
        "latitude": "51.496",
        "longitude": "4.774",
        "coordinateUncertainty": "187",
        "deploymentStart": "2020-05-30T04:57:37+02:00",
        "deploymentEnd": "2020-07-01T11:41:41+02:00",
        "setupBy": "Danny Van der beeck",
        "cameraID": "320",
        "cameraModel": "Reconyx-HF2X",
        "timestampIssues": "false",
    },
    {
        "deploymentID": "62c200a9",
        "locationID": "ce943ced",
        "locationName": "B_DM_val 4_'t WAD",
        "latitude": "50.699",
        "longitude": "4.013",
        "deploymentStart": "2021-03-27T21:38:18+01:00",
        "deploymentEnd": "2021-04-18T22:25:00+01:00",
        "cameraID": "315",
        "cameraModel": "Reconyx-HF2X",
        "timestampIssues": "false",
    },
]
# mediaID -> (deploymentID, file, timestamp)
MEDIA = {
    "07840dcc": ("00a2c20d", "media/a/RCNX0001.JPG", "2020-05-30T04:57:37+02:00"),
    "401386c7": ("00a2c20d", "media/a/RCNX0002.JPG", "2020-05-30T04:57:40+02:00"),
    "29aef5c3": ("00a2c20d", "media/a/RCNX0120.JPG", "2020-07-01T11:41:41+02:00"),
    "0e98b93e": ("62c200a9", "media/b/RCNX0031.JPG", "2021-03-27T21:38:18+01:00"),
}


def _media_rows(url: bool = False) -> list[dict[str, str]]:
    return [
        {
            "mediaID": media_id,
            "deploymentID": deployment,
            "captureMethod": "activityDetection",
            "timestamp": time,
            "filePath": f"https://multimedia.agouti.eu/assets/{media_id}/file" if url else path,
            "filePublic": "true",
            "fileName": Path(path).name,
            "fileMediatype": "image/jpeg",
        }
        for media_id, (deployment, path, time) in MEDIA.items()
    ]


OBSERVATIONS = [
    {
        "observationID": "07840dcc_1",
        "deploymentID": "00a2c20d",
        "mediaID": "07840dcc",
        "eventID": "4bb69c45",
        "eventStart": "2020-05-30T02:57:37Z",
        "eventEnd": "2020-05-30T02:57:37Z",
        "observationLevel": "media",
        "observationType": "animal",
        "scientificName": MALLARD,
        "count": "1",
        "bboxX": "0.32325",
        "bboxY": "0.46962",
        "bboxWidth": "0.2744",
        "bboxHeight": "0.25189",
        "classificationMethod": "machine",
        "classifiedBy": "Western Europe species model Version 1",
        "classificationProbability": "0.9",
    },
    {
        "observationID": "29aef5c3_1",
        "deploymentID": "00a2c20d",
        "mediaID": "29aef5c3",
        "eventID": "f99bfff4",
        "eventStart": "2020-07-01T09:41:41Z",
        "eventEnd": "2020-07-01T09:41:41Z",
        "observationLevel": "media",
        "observationType": "blank",
        "classificationMethod": "human",
        "classifiedBy": "Peter Desmet",
    },
]


def write_example(folder: Path, *, url: bool = False) -> Path:
    """The package, its JPEGs written unless its media are URLs."""
    if not url:
        for n, (_, path, _) in enumerate(MEDIA.values()):
            jpeg(folder / path, shade=40 + 40 * n)
    return write_package(
        folder, deployments=DEPLOYMENTS, media=_media_rows(url), observations=OBSERVATIONS
    )


def _photos(library: Library) -> dict[str, Image]:
    with library.catalog.session() as s:
        rows = list(s.query(Image))
        for row in rows:
            s.expunge(row)
    return {row.rel_path: row for row in rows}


@pytest.fixture
def opened(tmp_path: Path, demo_encoder) -> tuple[Library, Path]:
    package = write_example(tmp_path / "package")
    library = Library.open(tmp_path / "lib")
    open_camtrap_package(Indexer(library, demo_encoder), package)
    yield library, package
    library.close()


def test_the_packages_deployments_times_and_places_become_the_photos(opened) -> None:
    library, _ = opened
    photos = _photos(library)
    first = photos["media/a/RCNX0001.JPG"]
    assert first.observed_at == datetime(2020, 5, 30, 4, 57, 37)
    assert first.observed_utc_offset == 120
    assert (first.latitude, first.longitude, first.location_uncertainty) == (51.496, 4.774, 187)
    assert (first.camera_make, first.camera_model, first.camera_serial) == (
        "Reconyx",
        "HF2X",
        "320",
    )
    assert read_licence(first.license).code == "CC-BY-4.0"  # the package's media licence
    spring = photos["media/b/RCNX0031.JPG"]
    assert (spring.observed_at, spring.observed_utc_offset) == (
        datetime(2021, 3, 27, 21, 38, 18),
        60,
    )
    deployments = {d.name: d for d in list_deployments(library)}
    assert sorted(deployments) == ["00a2c20d", "62c200a9"]
    assert deployments["00a2c20d"].folder == "B_HS_val 2_processiepark"
    assert deployments["00a2c20d"].camera_serial == "320"
    assert deployments["00a2c20d"].photos == 3
    with library.catalog.session() as s:
        assert s.query(Collection).one().name == "A test package"


def test_the_packages_observations_are_detections(opened) -> None:
    library, _ = opened
    photos = _photos(library)
    duck_id = photos["media/a/RCNX0001.JPG"].id
    blank_id = photos["media/a/RCNX0120.JPG"].id
    with library.catalog.session() as s:
        found = detections_of(s, [duck_id, blank_id])
        frames = {f.image_id for f in s.query(DetectionFrame)}
    (duck,) = found[duck_id]
    assert duck.record.label == MALLARD and duck.record.box is not None
    assert duck.record.box.x == pytest.approx(0.32325) and duck.record.box.height == pytest.approx(
        0.25189
    )
    assert blank_id in frames and blank_id not in found  # an empty frame


def test_opening_it_again_keeps_the_deployments_and_doubles_nothing(opened, demo_encoder) -> None:
    library, package = opened
    with library.catalog.session() as s:
        before = {d.name: d.id for d in s.query(Deployment)}
    report = open_camtrap_package(Indexer(library, demo_encoder), package)
    # Indexing the folder on its own leaves the package's deployments as they are.
    Indexer(library, demo_encoder).run(package, reindex=True)
    with library.catalog.session() as s:
        assert {d.name: d.id for d in s.query(Deployment)} == before
        assert s.query(DetectionFrame).count() == 2
    assert report.observations is not None and report.observations.detections == 1
    assert {d.name: d.photos for d in list_deployments(library)} == {"00a2c20d": 3, "62c200a9": 1}


def test_a_package_of_urls_is_refused_in_one_line_and_nothing_is_imported(
    tmp_path: Path, demo_encoder
) -> None:
    package = write_example(tmp_path / "package", url=True)
    with Library.open(tmp_path / "lib") as library:
        with pytest.raises(BadInputError) as refused:
            open_camtrap_package(Indexer(library, demo_encoder), package)
        with library.catalog.session() as s:
            assert s.query(Collection).count() == 0
            assert s.query(Image).count() == 0
    message = str(refused.value)
    assert "\n" not in message
    assert "4 of 4 media are URLs" in message and "download" in message
    assert "nothing was imported" in message


def test_a_package_with_a_missing_file_is_refused(tmp_path: Path, demo_encoder) -> None:
    package = write_example(tmp_path / "package")
    (package / "media/b/RCNX0031.JPG").unlink()
    with Library.open(tmp_path / "lib") as library:
        with pytest.raises(BadInputError, match="1 of 4 media files are missing"):
            open_camtrap_package(Indexer(library, demo_encoder), package)
        with library.catalog.session() as s:
            assert s.query(Image).count() == 0


def test_the_command_line_opens_a_package(tmp_path: Path, capsys) -> None:
    package = write_example(tmp_path / "package")
    lib = tmp_path / "lib"
    code = main(["camtrap-dp", "open", str(package), "--library", str(lib), "--model", "demo"])
    out = capsys.readouterr().out
    assert code == 0
    assert "2 deployments, 4 photos timed by the package, licence CC BY 4.0" in out
    assert "4 of 4 media matched" in out
    refused = write_example(tmp_path / "remote", url=True)
    code = main(["camtrap-dp", "open", str(refused), "--library", str(lib), "--model", "demo"])
    assert code == 2
    assert "media are URLs" in capsys.readouterr().err


def test_a_photo_the_package_does_not_list_keeps_no_stale_deployment(
    tmp_path: Path, demo_encoder
) -> None:
    package = write_example(tmp_path / "package")
    # A frame of another camera left in the folder: indexing alone makes it a deployment.
    camera_jpeg(package / "extra" / "IMG_0001.JPG", original="2020:06:01 10:00:00", serial="999")
    with Library.open(tmp_path / "lib") as library:
        open_camtrap_package(Indexer(library, demo_encoder), package)
        photos = _photos(library)
        deployments = {d.name for d in list_deployments(library)}
    assert deployments == {"00a2c20d", "62c200a9"}
    assert photos["extra/IMG_0001.JPG"].deployment_id is None
