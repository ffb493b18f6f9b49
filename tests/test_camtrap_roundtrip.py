"""Detections in a Camtrap DP export (machine observations with their boxes, taxa, model and
probability, beside the judges' human observations), and a package exported and read back
into a fresh library: the same boxes, labels, deployments and times."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from engine.catalog import Judgment
from engine.catalog.library import Library
from engine.catalog.models import Image
from engine.catalog.privacy import checked_rule, set_sensitive_taxa
from engine.detections.records import Box, DetectionRecord, FrameRecord
from engine.detections.store import detections_of, replace_source, write_frames
from engine.indexing.deployments import list_deployments
from engine.indexing.indexer import Indexer
from engine.io.camtrap_dp import check_camtrap_dp, export_camtrap_dp
from engine.io.camtrap_read import open_camtrap_package
from engine.io.camtrap_tables import is_taxon
from engine.judgments.queries import QueryStore
from tests.test_camtrap_dp import validate_descriptor, validate_package
from tests.test_camtrap_read import MALLARD, write_example

FOX = "Vulpes vulpes"
MD = "md_v5a.0.0.pt"


def _ids(library: Library) -> dict[str, int]:
    with library.catalog.session() as s:
        return dict(s.query(Image.rel_path, Image.id).all())


@pytest.fixture
def exported(tmp_path: Path, demo_encoder):
    """A package opened (its mallard box), MegaDetector boxes added, every photo judged
    relevant, exported into out/ with the photos copied beside it."""
    package = write_example(tmp_path / "package")
    library = Library.open(tmp_path / "a")
    open_camtrap_package(Indexer(library, demo_encoder), package)
    ids = _ids(library)
    with library.catalog.session() as s:
        source = replace_source(s, "megadetector", str(tmp_path / "md.json"), model=MD)
        write_frames(
            s,
            source,
            [
                FrameRecord(
                    ids["media/a/RCNX0002.JPG"],
                    (
                        DetectionRecord(Box(0.5, 0.25, 0.125, 0.2), "animal", 0.92),
                        DetectionRecord(Box(0.1, 0.1, 0.1, 0.1), "animal", 0.05),  # faint
                    ),
                ),
                FrameRecord(
                    ids["media/b/RCNX0031.JPG"],
                    (
                        DetectionRecord(
                            Box(0.2, 0.3, 0.4, 0.5), "animal", 0.9, FOX, 0.8, "machine"
                        ),
                        DetectionRecord(Box(0.6, 0.6, 0.2, 0.2), "person", 0.7, "human", 0.6),
                    ),
                ),
            ],
        )
    store = QueryStore(library, user="alice")
    query_id = store.find_or_create_query("mallard")
    for image_id in ids.values():
        store.judge(query_id, image_id, 1)
    out = tmp_path / "out"
    report = export_camtrap_dp(library, query_id, out, scientific_name=MALLARD)
    shutil.copytree(package / "media", out / "media")
    yield library, out, report
    library.close()


def _boxes(library: Library) -> set[tuple[str, tuple[float, ...], str | None, str | None]]:
    """Every box of the library: (photo, box rounded, category, label)."""
    ids = _ids(library)
    with library.catalog.session() as s:
        found = detections_of(s, list(ids.values()))
    paths = {image_id: path for path, image_id in ids.items()}
    return {
        (
            paths[image_id],
            tuple(round(v, 5) for v in (b.x, b.y, b.width, b.height)),
            d.record.category,
            d.record.label,
        )
        for image_id, detections in found.items()
        for d in detections
        if (b := d.record.box) is not None
    }


def test_detections_are_machine_observations_beside_the_judges(exported) -> None:
    _, out, report = exported
    tables = validate_package(out)  # the standard's own table schemas
    validate_descriptor(out)
    rows = tables["observations"]
    machine = [r for r in rows if r["classificationMethod"] == "machine"]
    human = [r for r in rows if r["classificationMethod"] == "human"]
    # The judges' observations as before: every photo judged relevant, per event and frame.
    assert {r["classifiedBy"] for r in human} == {"alice"}
    assert len([r for r in human if r["observationLevel"] == "media"]) == 4
    # Four boxes at 0.2 and above (the faint one is left out): MegaDetector's three (an
    # animal, a classifier's fox, a person) and the package's own mallard.
    assert len(machine) == report.machine == 4
    by_box = {r["bboxX"]: r for r in machine}
    box = by_box["0.5"]
    assert (box["bboxY"], box["bboxWidth"], box["bboxHeight"]) == ("0.25", "0.125", "0.2")
    assert (box["observationType"], box["scientificName"]) == ("animal", "")
    assert (box["classifiedBy"], box["classificationProbability"]) == (MD, "0.92")
    fox = by_box["0.2"]
    assert (fox["scientificName"], fox["classificationProbability"]) == (FOX, "0.8")
    assert fox["observationLevel"] == "media" and fox["mediaID"]
    person = [r for r in rows if r["observationType"] == "human"]
    assert [(p["bboxX"], p["observationComments"]) for p in person] == [
        ("0.6", "classifier label: human")
    ]
    duck = by_box["0.32325"]
    assert duck["classifiedBy"] == "Western Europe species model Version 1"
    assert not report.errors


def test_a_package_read_back_has_the_same_boxes_labels_deployments_and_times(
    exported, tmp_path: Path, demo_encoder
) -> None:
    library, out, _ = exported
    expected = {
        b for b in _boxes(library) if b[1] != (0.1, 0.1, 0.1, 0.1)
    }  # the faint box stays behind
    with Library.open(tmp_path / "b") as fresh:
        open_camtrap_package(Indexer(fresh, demo_encoder), out)
        assert _boxes(fresh) == {
            (path, box, category, label if label and is_taxon(label) else None)
            for path, box, category, label in expected
        }
        deployments = {
            (d.name, d.folder, d.camera_serial, d.photos) for d in list_deployments(fresh)
        }
        with fresh.catalog.session() as s:
            read_back = {
                i.rel_path: (i.observed_at, i.observed_utc_offset, i.latitude, i.longitude)
                for i in s.query(Image)
            }
    assert deployments == {
        (d.name, d.folder, d.camera_serial, d.photos) for d in list_deployments(library)
    }
    with library.catalog.session() as s:
        original = {
            i.rel_path: (i.observed_at, i.observed_utc_offset, i.latitude, i.longitude)
            for i in s.query(Image)
        }
    assert read_back == original


def test_a_sensitive_taxon_a_classifier_named_withholds_its_deployment(
    exported, tmp_path: Path
) -> None:
    library, _, _ = exported
    set_sensitive_taxa(library.catalog, [checked_rule("Vulpes", "withhold")])
    with library.catalog.session() as s:
        query_id = s.query(Judgment.query_id).first()[0]
    check = check_camtrap_dp(library, query_id, scientific_name=MALLARD)
    # The fox box is on 62c200a9's frame: its place would show where the fox lives.
    assert [w.name for w in check.withheld] == ["62c200a9"]
    assert check.report.deployments == 1
