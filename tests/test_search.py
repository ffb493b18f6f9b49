"""Searching an indexed library: filters by taxon, date, place and licence; image+text queries."""

from __future__ import annotations

import json
from datetime import date, datetime
from pathlib import Path

import pytest

from engine.errors import BadInputError
from engine.indexer import Indexer
from engine.library import Library
from engine.search import MAX_QUERY_CHARS, Searcher, SearchFilters


@pytest.fixture(scope="module")
def searcher(tmp_path_factory, small_demo_collection, demo_encoder):
    lib = Library.open(tmp_path_factory.mktemp("search") / "lib")
    Indexer(lib, demo_encoder).run(small_demo_collection.root)
    yield Searcher(lib, demo_encoder)
    lib.close()


@pytest.fixture(scope="module")
def metadata(small_demo_collection) -> dict[str, dict]:
    data = json.loads(Path(small_demo_collection.metadata_path).read_text())
    return {img["file_name"]: img for img in data["images"]}


def rel(hit) -> str:
    return hit.rel_path


def test_text_search_ranks_the_named_class_first(searcher, small_demo_collection):
    hits = searcher.text("blue triangle", top_k=5).hits
    assert [small_demo_collection.labels[rel(h)] for h in hits] == ["blue triangle"] * 5
    assert [h.rank for h in hits] == [1, 2, 3, 4, 5]


def test_taxon_filter_matches_common_names_and_any_rank(searcher, small_demo_collection):
    hits = searcher.text("red circle", top_k=100, filters=SearchFilters(taxon="yellow square")).hits
    labels = small_demo_collection.labels
    assert len(hits) == sum(label == "yellow square" for label in labels.values())
    assert {labels[rel(h)] for h in hits} == {"yellow square"}
    genus = hits[0].taxon.split()[0]
    by_genus = searcher.text(
        "red circle", top_k=100, filters=SearchFilters(taxon=genus.upper())
    ).hits
    assert {h.taxon.split()[0] for h in by_genus} == {genus}


def test_date_filter_keeps_exactly_the_photos_observed_in_range(searcher, metadata):
    dates = sorted(datetime.fromisoformat(m["date"]).date() for m in metadata.values())
    lo, hi = dates[len(dates) // 4], dates[3 * len(dates) // 4]
    expected = {
        name for name, m in metadata.items() if lo <= datetime.fromisoformat(m["date"]).date() <= hi
    }
    assert 0 < len(expected) < len(metadata)
    hits = searcher.text(
        "green circle", top_k=100, filters=SearchFilters(date_from=lo, date_to=hi)
    ).hits
    assert {rel(h) for h in hits} == expected


def test_bounding_box_filter_including_one_across_the_antimeridian(searcher, metadata):
    def inside(m, box):
        min_lat, min_lon, max_lat, max_lon = box
        lon_ok = (
            min_lon <= m["longitude"] <= max_lon
            if min_lon <= max_lon
            else m["longitude"] >= min_lon or m["longitude"] <= max_lon
        )
        return min_lat <= m["latitude"] <= max_lat and lon_ok

    for box in [(-10.0, -30.0, 70.0, 60.0), (-90.0, 100.0, 90.0, -100.0)]:
        expected = {name for name, m in metadata.items() if inside(m, box)}
        assert 0 < len(expected) < len(metadata), box  # the box must actually filter
        hits = searcher.text("a photo", top_k=100, filters=SearchFilters(bbox=box)).hits
        assert {rel(h) for h in hits} == expected, box


def test_licence_filter_and_an_empty_filter_result(searcher, metadata):
    licence = sorted({m["license"] for m in metadata.values()})[0]
    expected = {name for name, m in metadata.items() if m["license"] == licence}
    assert 0 < len(expected) < len(metadata)
    hits = searcher.text("a photo", top_k=100, filters=SearchFilters(license=licence)).hits
    assert {rel(h) for h in hits} == expected
    none = SearchFilters(date_from=date(1900, 1, 1), date_to=date(1900, 1, 2))
    assert searcher.text("a photo", filters=none).hits == []


def test_image_plus_text_query_moves_towards_the_words(searcher, small_demo_collection):
    red_circle = next(
        p for p, label in sorted(small_demo_collection.labels.items()) if label == "red circle"
    )
    path = Path(small_demo_collection.root) / red_circle
    only_image = searcher.image(path, top_k=5).hits
    assert small_demo_collection.labels[rel(only_image[0])] == "red circle"
    mixed = searcher.image_text(path, "blue triangle", top_k=5, image_weight=0.2).hits
    labels = [small_demo_collection.labels[rel(h)] for h in mixed]
    assert labels.count("blue triangle") >= 3


def test_bad_queries_are_refused_with_clear_messages(searcher, tmp_path):
    with pytest.raises(BadInputError, match="empty"):
        searcher.text("  \n ")
    with pytest.raises(BadInputError, match=str(MAX_QUERY_CHARS)):
        searcher.text("x" * 5000)
    with pytest.raises(BadInputError, match="not found"):
        searcher.image(tmp_path / "nope.jpg")
    junk = tmp_path / "junk.jpg"
    junk.write_text("not a photo")
    with pytest.raises(BadInputError, match="junk.jpg"):
        searcher.image(junk)
