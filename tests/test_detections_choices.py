"""The detection filters' choices (the window's Add filter menu) count the photos those filters
keep: over the catalog of tests/test_detections_filters.py, every number offered is the number
of photos the filter it sets finds."""

from __future__ import annotations

from pathlib import Path

from engine.detections.choices import detection_choices
from engine.search.filters import SearchFilters, filtered_ids
from tests.test_detections_filters import library  # noqa: F401 (a fixture)
from tests.test_detections_import import _library


def _count(catalog, filters: SearchFilters) -> int:  # noqa: ANN001
    return len(filtered_ids(catalog, filters))


def test_each_choice_counts_the_photos_its_filter_keeps(library) -> None:  # noqa: F811
    found = detection_choices(library.catalog)
    assert found.available
    assert (found.empty, found.not_empty) == (2, 2)  # 5 unreadable, 6 never looked at
    assert found.empty == _count(library.catalog, SearchFilters(empty=found.threshold))
    assert found.not_empty == _count(library.catalog, SearchFilters(not_empty=found.threshold))
    assert found.categories == [("animal", 1), ("person", 1)]  # the faint box is below 0.2
    for category, photos in found.categories:
        assert photos == _count(library.catalog, SearchFilters(detected=category))
    assert sorted(label for label, _n in found.labels) == ["blank", "red fox"]
    for label, photos in found.labels:
        assert photos == _count(library.catalog, SearchFilters(detection_label=label))
    stricter = detection_choices(library.catalog, threshold=0.6)
    assert (stricter.empty, stricter.not_empty, stricter.categories) == (3, 1, [("animal", 1)])


def test_a_library_without_detections_offers_none(tmp_path: Path) -> None:
    bare = _library(tmp_path, ["a.jpg"])
    try:
        found = detection_choices(bare.catalog)
    finally:
        bare.catalog.dispose()
    assert not found.available
    assert (found.looked, found.categories, found.labels) == (0, [], [])
