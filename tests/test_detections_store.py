"""The catalog's detections: written per source, replaced on re-import, read per photo."""

from __future__ import annotations

import pytest

from engine.catalog.db import open_catalog
from engine.catalog.models import Collection, CropEmbedding, Detection, DetectionFrame, Image
from engine.detections.records import Box, DetectionRecord, FrameRecord
from engine.detections.store import detections_of, replace_source, write_frames
from engine.errors import BadInputError


@pytest.fixture
def catalog(tmp_path):
    catalog = open_catalog(tmp_path / "catalog.sqlite3")
    with catalog.session() as s:
        collection = Collection(root="/photos", name="photos")
        s.add(collection)
        s.flush()
        for n in range(3):
            s.add(
                Image(
                    id=n + 1, collection_id=collection.id, rel_path=f"{n}.jpg", size=1, mtime_ns=1
                )
            )
    yield catalog
    catalog.dispose()


def _frames() -> list[FrameRecord]:
    deer = DetectionRecord(Box(0.1, 0.2, 0.05, 0.04), "animal", 0.91)
    faint = DetectionRecord(Box(0.5, 0.5, 0.2, 0.2), "animal", 0.12)
    label = DetectionRecord(None, label="Capreolus capreolus", label_probability=0.8)
    return [
        FrameRecord(1, (faint, deer, label)),
        FrameRecord(2),
        FrameRecord(3, failure="unreadable"),
    ]


def test_a_reimport_of_the_same_file_replaces_its_rows_instead_of_doubling_them(catalog):
    for _ in range(2):
        with catalog.session() as s:
            source = replace_source(s, "megadetector", "/runs/md.json", model="MDv5a")
            assert write_frames(s, source, _frames()) == 3
    with catalog.session() as s:
        assert s.query(Detection).count() == 3
        assert s.query(DetectionFrame).count() == 3
        found = detections_of(s, [1, 2, 3])
    assert list(found) == [1]  # frame 2 was looked at and is empty; 3 failed
    assert [d.record.confidence for d in found[1]] == [0.91, 0.12, None]
    assert found[1][0].record.box == Box(0.1, 0.2, 0.05, 0.04)
    assert found[1][0].source_kind == "megadetector"


def test_the_frame_keeps_its_highest_confidence_and_a_threshold_drops_faint_boxes(catalog):
    with catalog.session() as s:
        write_frames(s, replace_source(s, "megadetector", "/md.json"), _frames())
        maxima = {f.image_id: f.max_confidence for f in s.query(DetectionFrame)}
        kept = detections_of(s, [1], min_confidence=0.5)[1]
    assert maxima == {1: 0.91, 2: None, 3: None}
    assert [d.record.confidence for d in kept] == [0.91, None]  # the label has no confidence


def test_deleting_a_source_takes_its_crop_vectors_with_it(catalog):
    with catalog.session() as s:
        write_frames(s, replace_source(s, "demo", "/drawn.json"), _frames())
        first = s.query(Detection).first()
        s.add(CropEmbedding(detection_id=first.id, model_key="m", vector=b"\0" * 8))
    with catalog.session() as s:
        replace_source(s, "demo", "/drawn.json")
    with catalog.session() as s:
        assert s.query(CropEmbedding).count() == 0


@pytest.mark.parametrize(
    ("values", "clipped"),
    [((0.9, 0.9, 0.2, 0.2), (0.9, 0.9, 0.1, 0.1)), ((-0.1, 0.0, 0.3, 1.0), (0.0, 0.0, 0.2, 1.0))],
)
def test_a_box_reaching_past_the_photo_is_clipped_to_it(values, clipped):
    box = Box.checked(*values)
    assert (box.x, box.y, box.width, box.height) == pytest.approx(clipped)
    assert Box.from_text(box.text) == pytest.approx(box) or Box.from_text(box.text).text == box.text


@pytest.mark.parametrize(
    "values", [(0.1, 0.1, 0.0, 0.2), (1.2, 0.1, 0.1, 0.1), (float("nan"), 0, 0.1, 0.1)]
)
def test_a_box_that_is_not_one_is_refused_in_one_line(values):
    with pytest.raises(BadInputError, match="box"):
        Box.checked(*values)
