"""The detection filters and the empty event, over a small catalog with imported output.

Photos 1-6 of `PATHS`: a MegaDetector file finds an animal at 0.9 on 1, a faint box (0.1) on
2, nothing on 3, a person at 0.5 on 4, cannot read 5; 6 is never looked at. A SpeciesNet file
labels 1 "red fox" and 3 "blank".
"""

from __future__ import annotations

import argparse

import pytest

from app.cli.filters import add_filter_options, filters_from_args
from engine.catalog.models import DetectionSource, Image
from engine.detections.importing import import_detections
from engine.errors import BadInputError
from engine.search.events import empty_events
from engine.search.filters import SearchFilters, filtered_ids
from tests.test_detections_import import _library, _md, _write

PATHS = [f"CAM01/IMG_000{n}.JPG" for n in range(1, 7)]
FOX = "u1;mammalia;carnivora;canidae;vulpes;vulpes;red fox"
BLANK = "u2;;;;;;blank"


def _box(category: str, conf: float) -> dict:
    return {"category": category, "conf": conf, "bbox": [0.1, 0.1, 0.2, 0.2]}


@pytest.fixture
def library(tmp_path):
    library = _library(tmp_path, PATHS)
    images = [
        {"file": PATHS[0], "detections": [_box("1", 0.9)]},
        {"file": PATHS[1], "detections": [_box("1", 0.1)]},
        {"file": PATHS[2], "detections": []},
        {"file": PATHS[3], "detections": [_box("2", 0.5)]},
        {"file": PATHS[4], "failure": "Failure image access"},
    ]
    import_detections(library, _write(tmp_path / "md.json", _md(images)))
    predictions = {
        "predictions": [
            {"filepath": PATHS[0], "prediction": FOX, "prediction_score": 0.8},
            {"filepath": PATHS[2], "prediction": BLANK, "prediction_score": 0.9},
        ]
    }
    import_detections(library, _write(tmp_path / "sn.json", predictions))
    yield library
    library.catalog.dispose()


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        (SearchFilters(empty=0.2), [2, 3]),  # 5 unreadable and 6 never looked at: unknown
        (SearchFilters(empty=0.05), [3]),
        (SearchFilters(empty=0.95), [1, 2, 3, 4]),
        (SearchFilters(not_empty=0.2), [1, 4]),
        (SearchFilters(not_empty=0.6), [1]),
        (SearchFilters(detected="Animal"), [1]),
        (SearchFilters(detected="animal", not_empty=0.05), [1, 2]),
        (SearchFilters(detected="vehicle"), []),
        (SearchFilters(detection_label="Red Fox"), [1]),
        (SearchFilters(detection_label="vulpes vulpes"), [1]),
        (SearchFilters(detection_label="blank"), [3]),
    ],
)
def test_the_detection_filters_select_the_frames_they_say(library, filters, expected):
    assert filtered_ids(library.catalog, filters).tolist() == expected


def test_an_import_under_way_is_not_counted(library):
    with library.catalog.session() as s:
        for source in s.query(DetectionSource):
            source.kind = "importing:" + source.kind
    assert filtered_ids(library.catalog, SearchFilters(not_empty=0.2)).tolist() == []
    assert filtered_ids(library.catalog, SearchFilters(empty=0.2)).tolist() == []


def test_the_filters_read_as_chips_and_clear_by_their_key():
    filters = SearchFilters(empty=0.2, detected="animal", detection_label="red fox")
    assert filters.describe() == [
        ("empty", "empty at 0.2"),
        ("detected", "detected animal"),
        ("detection_label", "label “red fox”"),
    ]
    assert filters.without("empty").empty is None
    assert SearchFilters.from_params(filters.to_params()) == filters


@pytest.mark.parametrize(
    ("values", "message"),
    [({"empty": 1.5}, "filter empty"), ({"empty": 0.5, "not_empty": 0.2}, "both empty")],
)
def test_a_bad_detection_filter_is_one_line(values, message):
    with pytest.raises(BadInputError, match=message):
        SearchFilters(**values)


def test_the_command_line_takes_a_bare_empty_at_the_default_threshold():
    parser = argparse.ArgumentParser()
    add_filter_options(parser)
    assert filters_from_args(parser.parse_args(["--empty"])).empty == 0.2
    args = parser.parse_args(["--not-empty", "0.5", "--detected", "animal", "--label", "fox"])
    filters = filters_from_args(args)
    assert (filters.not_empty, filters.detected, filters.detection_label) == (0.5, "animal", "fox")


def test_an_event_is_empty_when_every_frame_is(library):
    with library.catalog.session() as s:
        for image_id, event in [(2, 2), (3, 2), (1, 1), (6, 1), (4, 4), (5, 5)]:
            s.get(Image, image_id).event_id = event
    # Event 2: frames 2 and 3, both empty; event 1 holds the fox; 5 could not be read.
    assert empty_events(library, [1, 2, 4, 5]) == {2}
    assert empty_events(library, [1, 2, 4, 5], threshold=0.6) == {2, 4}
