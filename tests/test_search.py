"""Searching an indexed library through the method registry, as `quadrat search` and the
window do: filters by taxon, date, place and licence; image and image+text queries."""

from __future__ import annotations

import json
import math
from datetime import date, datetime
from pathlib import Path

import pytest

from engine.catalog.library import Library
from engine.errors import BadInputError
from engine.methods import SearchQuery, search_hits
from engine.search.searcher import MAX_QUERY_CHARS, SearchFilters, SearchHit, searchable_terms


class Search:
    """Runs the registry's `text` method over one library, as a user's search runs."""

    def __init__(self, library: Library, encoder) -> None:
        self.library = library
        self.encoder = encoder

    def __call__(
        self,
        text: str = "",
        image: Path | None = None,
        *,
        top_k: int = 50,
        filters: SearchFilters | None = None,
        spec: str = "text",
    ) -> list[SearchHit]:
        query = SearchQuery(text, image)
        return search_hits(self.library, self.encoder, query, spec, top_k=top_k, filters=filters)


@pytest.fixture(scope="module")
def search(tmp_path_factory, copy_small_demo_library, demo_encoder):
    """Searches over this module's copy of the session's indexed small demo library."""
    lib = Library.open(copy_small_demo_library(tmp_path_factory.mktemp("search") / "lib"))
    yield Search(lib, demo_encoder)
    lib.close()


@pytest.fixture(scope="module")
def metadata(small_demo_collection) -> dict[str, dict]:
    data = json.loads(Path(small_demo_collection.metadata_path).read_text())
    return {img["file_name"]: img for img in data["images"]}


def rel(hit) -> str:
    return hit.rel_path


def test_text_search_ranks_the_named_class_first(search, small_demo_collection):
    hits = search("blue triangle", top_k=5)
    assert [small_demo_collection.labels[rel(h)] for h in hits] == ["blue triangle"] * 5
    assert [h.rank for h in hits] == [1, 2, 3, 4, 5]


def test_taxon_filter_matches_common_names_and_any_rank(search, small_demo_collection):
    hits = search("red circle", top_k=100, filters=SearchFilters(taxon="yellow square"))
    labels = small_demo_collection.labels
    assert len(hits) == sum(label == "yellow square" for label in labels.values())
    assert {labels[rel(h)] for h in hits} == {"yellow square"}
    genus = hits[0].taxon.split()[0]
    by_genus = search("red circle", top_k=100, filters=SearchFilters(taxon=genus.upper()))
    assert {h.taxon.split()[0] for h in by_genus} == {genus}


def test_date_filter_keeps_exactly_the_photos_observed_in_range(search, metadata):
    dates = sorted(datetime.fromisoformat(m["date"]).date() for m in metadata.values())
    lo, hi = dates[len(dates) // 4], dates[3 * len(dates) // 4]
    expected = {
        name for name, m in metadata.items() if lo <= datetime.fromisoformat(m["date"]).date() <= hi
    }
    assert 0 < len(expected) < len(metadata)
    hits = search("green circle", top_k=100, filters=SearchFilters(date_from=lo, date_to=hi))
    assert {rel(h) for h in hits} == expected


# The demo's photos lie scattered within a few km of five field sites. The oracle below does
# not test a box at all: it gives each photo to its nearest site by great-circle distance and
# takes the sites a reader of a map places in each box.
SITES = {
    "London": (51.50, -0.12),
    "Cape Town": (-33.92, 18.42),
    "San Francisco": (37.77, -122.42),
    "Tokyo": (35.68, 139.69),
    "Wellington": (-41.29, 174.78),
}
SITES_IN_BOX = {
    (-10.0, -30.0, 70.0, 60.0): {"London"},  # Europe and northern Africa
    # From 100° E eastwards across 180° to 100° W: the Pacific rim
    (-90.0, 100.0, 90.0, -100.0): {"Tokyo", "Wellington", "San Francisco"},
}


def haversine_km(a: tuple[float, float], b: tuple[float, float]) -> float:
    (lat1, lon1), (lat2, lon2) = (tuple(map(math.radians, p)) for p in (a, b))
    h = math.sin((lat2 - lat1) / 2) ** 2
    h += math.cos(lat1) * math.cos(lat2) * math.sin((lon2 - lon1) / 2) ** 2
    return 2 * 6371.0 * math.asin(math.sqrt(h))


def test_bounding_box_filter_including_one_across_the_antimeridian(search, metadata):
    site_of: dict[str, str] = {}
    for name, m in metadata.items():
        where = (m["latitude"], m["longitude"])
        site = min(SITES, key=lambda s: haversine_km(where, SITES[s]))
        assert haversine_km(where, SITES[site]) < 50, name  # far from every box edge
        site_of[name] = site
    for box, sites in SITES_IN_BOX.items():
        expected = {name for name, site in site_of.items() if site in sites}
        assert 0 < len(expected) < len(metadata), box  # the box must actually filter
        hits = search("a photo", top_k=100, filters=SearchFilters(bbox=box))
        assert {rel(h) for h in hits} == expected, box


def test_licence_filter_and_an_empty_filter_result(search, metadata):
    licence = sorted({m["license"] for m in metadata.values()})[0]
    expected = {name for name, m in metadata.items() if m["license"] == licence}
    assert 0 < len(expected) < len(metadata)
    hits = search("a photo", top_k=100, filters=SearchFilters(license=licence))
    assert {rel(h) for h in hits} == expected
    none = SearchFilters(date_from=date(1900, 1, 1), date_to=date(1900, 1, 2))
    assert search("a photo", filters=none) == []


def test_image_plus_text_query_moves_towards_the_words(search, small_demo_collection):
    red_circle = next(
        p for p, label in sorted(small_demo_collection.labels.items()) if label == "red circle"
    )
    path = Path(small_demo_collection.root) / red_circle
    only_image = search(image=path, top_k=5)
    assert small_demo_collection.labels[rel(only_image[0])] == "red circle"
    mixed = search("blue triangle", path, top_k=5, spec="text:image_weight=0.2")
    labels = [small_demo_collection.labels[rel(h)] for h in mixed]
    assert labels.count("blue triangle") >= 3


def test_bad_queries_are_refused_with_clear_messages(search, tmp_path):
    with pytest.raises(BadInputError, match="empty"):
        search("  \n ")
    with pytest.raises(BadInputError, match=str(MAX_QUERY_CHARS)):
        search("x" * 5000)
    with pytest.raises(BadInputError, match="not found"):
        search(image=tmp_path / "nope.jpg")
    junk = tmp_path / "junk.jpg"
    junk.write_text("not a photo")
    with pytest.raises(BadInputError, match="junk.jpg"):
        search(image=junk)


ONLY_MINUS = "the query has only - terms: add words to search for (e.g. circle -red)"


@pytest.mark.parametrize("spec", ["text", "text:template=ensemble", "hybrid", "hybrid:fusion=rrf"])
def test_a_query_of_minus_terms_alone_gets_one_refusal_from_every_method(search, spec):
    with pytest.raises(BadInputError) as refused:
        search('-red -"blue square"', spec=spec)
    assert str(refused.value) == ONLY_MINUS
    # The check itself, for a method of a plug-in: a base word or a + term is enough.
    with pytest.raises(BadInputError, match="only - terms"):
        searchable_terms("-red")
    assert searchable_terms("circle -red").base == "circle"
    assert searchable_terms("+circle -red").plus == ("circle",)
    assert searchable_terms("-5 degrees").base == "-5 degrees"
