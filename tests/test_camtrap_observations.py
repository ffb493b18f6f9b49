"""A Camtrap DP package's observations imported as detections on photos already indexed:
boxes, labels, blanks as empty frames, event-level labels, unmatched media said per row, and a
re-import that replaces instead of doubling."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.catalog.library import Library, RootMap
from engine.catalog.models import Collection, Detection, DetectionFrame, DetectionSource, Image
from engine.detections.camtrap_observations import KIND, read_camtrap_observations
from engine.detections.records import Box
from engine.detections.store import detections_of
from engine.errors import BadInputError
from tests.camtrap_packages import write_package

DEPLOYMENT = "00a2c20d"
MALLARD = "Anas platyrhynchos"
# media/<name>: the photos the library indexed (paths relative to the package).
NAMES = ("RCNX0001.JPG", "RCNX0002.JPG", "RCNX0003.JPG", "RCNX0004.JPG", "RCNX0005.JPG")


@pytest.fixture
def library(tmp_path: Path):
    """A library whose one collection is the package folder, its photos under media/."""
    package = tmp_path / "package"
    with Library.open(tmp_path / "lib") as library:
        with library.catalog.session() as s:
            collection = Collection(root=str(package.resolve()), name="package")
            s.add(collection)
            s.flush()
            for n, name in enumerate(NAMES, 1):
                s.add(
                    Image(
                        id=n, collection_id=collection.id, rel_path=f"media/{name}", size=1,
                        mtime_ns=1,
                    )
                )  # fmt: skip
        yield library


def _media(media_id: str, name: str, time: str, path: str | None = None) -> dict[str, str]:
    return {
        "mediaID": media_id,
        "deploymentID": DEPLOYMENT,
        "captureMethod": "activityDetection",
        "timestamp": time,
        "filePath": path if path is not None else f"media/{name}",
        "filePublic": "false",
        "fileName": name,
        "fileMediatype": "image/jpeg",
    }


MEDIA = [
    _media("m1", NAMES[0], "2020-05-30T04:57:37+02:00"),
    _media("m2", NAMES[1], "2020-05-30T04:57:40+02:00"),
    _media("m3", NAMES[2], "2020-05-30T04:57:42+02:00"),
    _media("m4", NAMES[3], "2020-06-02T10:00:00+02:00"),
    _media("m5", NAMES[4], "2020-06-03T10:00:00+02:00"),
    _media("gone", "RCNX9999.JPG", "2020-06-04T10:00:00+02:00"),
]


def _observation(obs_id: str, media_id: str, kind: str, **cells: str) -> dict[str, str]:
    row = {
        "observationID": obs_id,
        "deploymentID": DEPLOYMENT,
        "mediaID": media_id,
        "eventID": cells.pop("eventID", "e1"),
        "eventStart": cells.pop("eventStart", "2020-05-30T02:57:37Z"),
        "eventEnd": cells.pop("eventEnd", "2020-05-30T02:57:42Z"),
        "observationLevel": "media" if media_id else "event",
        "observationType": kind,
        "classificationMethod": cells.pop("classificationMethod", "human"),
    }
    row.update(cells)
    return row


OBSERVATIONS = [
    # The event: one event-level observation, media-level ones on m1 only.
    _observation("ev1", "", "animal", scientificName=MALLARD, count="2"),
    _observation(
        "o1",
        "m1",
        "animal",
        scientificName=MALLARD,
        count="1",
        bboxX="0.1",
        bboxY="0.2",
        bboxWidth="0.3",
        bboxHeight="0.25",
        classificationMethod="machine",
        classifiedBy="Western Europe species model Version 1",
        classificationProbability="0.9",
    ),  # fmt: skip
    _observation("o1b", "m1", "human", bboxX="0.6", bboxY="0.5", bboxWidth="0.2", bboxHeight="0.4"),
    _observation("o4", "m4", "blank", eventID="e2"),
    _observation("o5", "m5", "unclassified", eventID="e3"),
    _observation("o6", "gone", "vehicle", eventID="e4"),
]


def _rows(library: Library, model: type) -> list:
    with library.catalog.session() as s:
        return list(s.query(model))


def test_boxes_labels_and_types_become_detections(library: Library, tmp_path: Path) -> None:
    package = write_package(tmp_path / "package", media=MEDIA, observations=OBSERVATIONS)
    report = read_camtrap_observations(library, package)
    with library.catalog.session() as s:
        found = detections_of(s, [1, 2, 3, 4, 5])
        source = s.query(DetectionSource).one()
    assert (source.kind, source.path) == (KIND, str((package / "datapackage.json").resolve()))
    assert source.model == "Western Europe species model Version 1"
    by_observation = {d.record.observation_id: d.record for d in found[1]}
    assert set(by_observation) == {"o1", "o1b"}  # the event's label is not repeated here
    duck = by_observation["o1"]
    assert duck.box is not None and duck.box.text == Box(0.1, 0.2, 0.3, 0.25).text
    assert (duck.category, duck.label, duck.label_probability) == ("animal", MALLARD, 0.9)
    assert (duck.classification_method, duck.count, duck.confidence) == ("machine", 1, 0.9)
    person = by_observation["o1b"]
    assert (person.category, person.label, person.confidence) == ("person", None, 1.0)
    assert report.matched == 5 and report.observations == 6


def test_an_event_level_observation_labels_the_events_other_frames(
    library: Library, tmp_path: Path
) -> None:
    package = write_package(tmp_path / "package", media=MEDIA, observations=OBSERVATIONS)
    report = read_camtrap_observations(library, package)
    with library.catalog.session() as s:
        found = detections_of(s, [2, 3])
    # m2 and m3 lie in the event's time range (02:57:37Z..02:57:42Z) and have no
    # media-level observation: each gets the event's label, on the whole photo.
    for image_id in (2, 3):
        (label,) = found[image_id]
        assert (label.record.box, label.record.label) == (None, MALLARD)
        assert (label.record.observation_id, label.record.count) == ("ev1", 2)
    assert report.event_labels == 2


def test_blank_is_an_empty_frame_and_unclassified_stays_unknown(
    library: Library, tmp_path: Path
) -> None:
    package = write_package(tmp_path / "package", media=MEDIA, observations=OBSERVATIONS)
    report = read_camtrap_observations(library, package)
    frames = {f.image_id: f for f in _rows(library, DetectionFrame)}
    assert 4 in frames and frames[4].max_confidence is None  # looked at, nothing there
    with library.catalog.session() as s:
        assert 4 not in detections_of(s, [4])
    assert 5 not in frames  # nobody looked: unknown, not empty
    assert (report.empty_frames, report.unclassified) == (1, 1)


def test_each_unmatched_media_row_is_one_line(library: Library, tmp_path: Path) -> None:
    package = write_package(tmp_path / "package", media=MEDIA, observations=OBSERVATIONS)
    report = read_camtrap_observations(library, package)
    assert report.unmatched == ["media gone: no indexed photo at media/RCNX9999.JPG"]
    assert report.without_photo == 1  # its vehicle observation
    assert report.lines()[1:] == report.unmatched
    assert "5 of 6 media matched" in report.summary()


def test_importing_the_package_again_replaces_its_detections(
    library: Library, tmp_path: Path
) -> None:
    package = write_package(tmp_path / "package", media=MEDIA, observations=OBSERVATIONS)
    first = read_camtrap_observations(library, package)
    second = read_camtrap_observations(library, package)
    assert first.detections == second.detections == len(_rows(library, Detection)) == 4
    assert len(_rows(library, DetectionSource)) == 1
    assert len(_rows(library, DetectionFrame)) == 4  # m1, m2, m3 (event) and m4 (blank)


def test_url_media_are_matched_by_file_name(library: Library, tmp_path: Path) -> None:
    url = "https://multimedia.agouti.eu/assets/07840dcc/file"
    media = [
        _media("m1", NAMES[0], "2020-05-30T04:57:37+02:00", path=url),
        _media("m9", "NOWHERE.JPG", "2020-05-30T04:57:38+02:00", path=url + "2"),
    ]
    observations = [_observation("o1", "m1", "animal", scientificName=MALLARD)]
    package = write_package(tmp_path / "elsewhere", media=media, observations=observations)
    report = read_camtrap_observations(library, package, collection=tmp_path / "package")
    with library.catalog.session() as s:
        assert [d.record.label for d in detections_of(s, [1])[1]] == [MALLARD]
    assert report.unmatched == [
        f"media m9: no indexed photo named NOWHERE.JPG (its file is at {url}2)"
    ]


def test_a_folder_without_a_package_is_one_line(library: Library, tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="no Camtrap DP package"):
        read_camtrap_observations(library, tmp_path / "nothing")


def test_absolute_paths_are_read_through_the_root_map(tmp_path: Path) -> None:
    """A catalog shared with a workstation that records the photos under Z:\\traps: media
    written with either workstation's absolute path meet the same photo."""
    here = tmp_path / "traps"
    mapping = RootMap.parse([f"Z:\\traps={here}"])
    with Library.open(tmp_path / "lib", root_map=mapping) as library:
        with library.catalog.session() as s:
            collection = Collection(root="Z:\\traps", name="traps")
            s.add(collection)
            s.flush()
            for n, name in enumerate(NAMES[:2], 1):
                s.add(
                    Image(
                        id=n, collection_id=collection.id, rel_path=f"media/{name}", size=1,
                        mtime_ns=1,
                    )
                )  # fmt: skip
        media = [
            _media("m1", NAMES[0], "2020-05-30T04:57:37+02:00", path=f"{here}/media/{NAMES[0]}"),
            _media(
                "m2", NAMES[1], "2020-05-30T04:57:40+02:00", path=f"Z:\\traps\\media\\{NAMES[1]}"
            ),
        ]
        observations = [
            _observation("o1", "m1", "animal", scientificName=MALLARD),
            _observation("o2", "m2", "animal", scientificName=MALLARD),
        ]
        package = write_package(tmp_path / "package", media=media, observations=observations)
        report = read_camtrap_observations(library, package)
        with library.catalog.session() as s:
            found = detections_of(s, [1, 2])
    assert report.unmatched == []
    assert {i: [d.record.label for d in found[i]] for i in found} == {1: [MALLARD], 2: [MALLARD]}


def test_the_command_line_imports_observations(tmp_path: Path, capsys) -> None:
    from app.cli import main

    package = write_package(tmp_path / "package", media=MEDIA, observations=OBSERVATIONS)
    with Library.open(tmp_path / "lib") as library, library.catalog.session() as s:
        collection = Collection(root=str(package.resolve()), name="package")
        s.add(collection)
        s.flush()
        s.add(Image(collection_id=collection.id, rel_path=f"media/{NAMES[0]}", size=1,
                    mtime_ns=1))  # fmt: skip
    code = main(["camtrap-dp", "observations", str(package), "--library", str(tmp_path / "lib")])
    lines = capsys.readouterr().out.splitlines()
    assert code == 0
    assert "1 of 6 media matched, 2 detections on 1 photos" in lines[0]
    assert len(lines) == 6  # the summary, then each of the five media with no photo
    assert lines[1] == "media m2: no indexed photo at media/RCNX0002.JPG"


def test_compressed_tables_are_read(library: Library, tmp_path: Path) -> None:
    import gzip
    import json

    package = write_package(tmp_path / "package", media=MEDIA, observations=OBSERVATIONS)
    descriptor = json.loads((package / "datapackage.json").read_text())
    for resource in descriptor["resources"]:
        plain = package / resource["path"]
        with gzip.open(plain.with_suffix(".csv.gz"), "wb") as handle:
            handle.write(plain.read_bytes())
        plain.unlink()
        resource["path"] += ".gz"
    (package / "datapackage.json").write_text(json.dumps(descriptor))
    report = read_camtrap_observations(library, package)
    assert (report.matched, report.detections) == (5, 4)
