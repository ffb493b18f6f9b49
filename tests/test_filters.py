"""Metadata filters (engine.search.filters): each filter alone and combined, on a hand-made collection
with edge cases and on the demo; facet counts, month counts, locations and taxon completion
against hand-counted values; saving filters with a run and reading them back."""

from __future__ import annotations

import json
import math
from datetime import date, datetime
from pathlib import Path

import numpy as np
import pytest
from PIL import Image as PILImage
from sqlalchemy import select, update

from engine.catalog import Collection, Image
from engine.catalog.library import Library
from engine.errors import BadInputError
from engine.indexing.indexer import Indexer
from engine.judgments.queries import QueryStore
from engine.search.filters import (
    FacetValue,
    SearchFilters,
    TaxonSuggestion,
    facet_counts,
    filtered_ids,
    find_collections,
    locations,
    month_counts,
    near_box,
    normalise_license,
    taxon_suggestions,
)

# -- the hand-made collection -----------------------------------------------------------------

_TAXA = {
    "frog": ("Rana temporaria", "common frog", "Animalia", "Chordata", "Amphibia", "Anura",
             "Ranidae", "Rana", "temporaria"),
    "bug": ("Ranatra linearis", "water stick-insect", "Animalia", "Arthropoda", "Insecta",
            "Hemiptera", "Nepidae", "Ranatra", "linearis"),
    # Shares a beginning with the order Anura: a substring filter "Anura" would take it too.
    "beetle": ("Anuranoides fictus", "fictional anuran-like beetle", "Animalia", "Arthropoda",
               "Insecta", "Coleoptera", "Anuranoididae", "Anuranoides", "fictus"),
    "milkweed": ("Asclepias syriaca", "common milkweed", "Plantae", "Tracheophyta",
                 "Magnoliopsida", "Gentianales", "Apocynaceae", "Asclepias", "syriaca"),
    "squirrel": ("Sciurus vulgaris", "Écureuil roux", "Animalia", "Chordata", "Mammalia",
                 "Rodentia", "Sciuridae", "Sciurus", "vulgaris"),
}  # fmt: skip

# file -> (taxon, date, latitude, longitude, licence); None where the record has no value.
EDGE_PHOTOS: dict[str, tuple[str | None, str | None, float | None, float | None, str | None]] = {
    "frog1.jpg": ("frog", "2020-02-29 10:00:00", 45.0, -79.0, "CC BY 4.0"),
    "frog2.jpg": ("frog", "2021-06-15 12:00:00", 45.1, -79.3, "cc-by-nc"),
    "frog3.jpg": ("frog", None, None, None, "CC0 1.0"),  # no date, no GPS
    "bug1.jpg": ("bug", "2019-12-31 23:00:00", -17.0, 179.9, "http://creativecommons.org/licenses/by-nc/4.0/"),
    "bug2.jpg": ("bug", "2020-01-01 01:00:00", -17.0, -179.9, "CC BY-NC 4.0"),
    "beetle1.jpg": ("beetle", "2020-11-15 09:00:00", 89.5, 0.0, "public domain"),
    "beetle2.jpg": ("beetle", "2020-03-01 09:00:00", 89.5, 180.0, "CC BY-SA 4.0"),  # over the pole
    "milkweed1.jpg": ("milkweed", "2022-07-01 08:00:00", 45.12, -79.30, "All rights reserved"),
    "milkweed2.jpg": ("milkweed", "2022-08-31 23:59:00", 10.0, 10.0, None),
    "squirrel.jpg": ("squirrel", "2024-02-29 16:00:00", 48.85, 2.35, "CC BY 4.0"),
    "untaxed.jpg": (None, "2023-05-05 05:00:00", 0.0, 0.0, "cc0"),  # 0, 0 is a position
    "gone.jpg": ("frog", "2020-06-01 10:00:00", 45.0, -79.0, "CC BY 4.0"),  # marked missing
}  # fmt: skip
MORE_PHOTOS = ("more1.jpg", "more2.jpg")  # a second collection, without any metadata
OK_EDGE = set(EDGE_PHOTOS) - {"gone.jpg"}
EVERY_OK = OK_EDGE | set(MORE_PHOTOS)


def _photo(path: Path, number: int) -> None:
    colour = ((number * 53) % 256, (number * 97) % 256, (number * 151) % 256)
    PILImage.new("RGB", (96, 96), colour).save(path, quality=90)


def build_edge_collections(root: Path) -> tuple[Path, Path]:
    """Two photo folders: "edge" with a COCO metadata.json holding the edge cases above, and
    "more" with two photos and no metadata."""
    edge, more = root / "edge", root / "more"
    edge.mkdir(parents=True)
    more.mkdir()
    categories = [
        {"id": n, "name": t[0], "common_name": t[1], "kingdom": t[2], "phylum": t[3],
         "class": t[4], "order": t[5], "family": t[6], "genus": t[7], "specific_epithet": t[8]}
        for n, t in enumerate(_TAXA.values())
    ]  # fmt: skip
    category_of = {key: n for n, key in enumerate(_TAXA)}
    images, annotations = [], []
    for number, (name, (taxon, when, lat, lon, licence)) in enumerate(EDGE_PHOTOS.items(), 1):
        _photo(edge / name, number)
        record: dict[str, object] = {"id": number, "file_name": name, "width": 96, "height": 96}
        for key, value in (("date", when), ("latitude", lat), ("longitude", lon),
                           ("license", licence)):  # fmt: skip
            if value is not None:
                record[key] = value
        images.append(record)
        if taxon is not None:
            annotations.append(
                {"id": number, "image_id": number, "category_id": category_of[taxon]}
            )
    metadata = {"images": images, "categories": categories, "annotations": annotations}
    (edge / "metadata.json").write_text(json.dumps(metadata), encoding="utf-8")
    for number, name in enumerate(MORE_PHOTOS, 100):
        _photo(more / name, number)
    return edge, more


@pytest.fixture(scope="module")
def edge_library(tmp_path_factory, demo_encoder):
    """A library of both folders, indexed with the demo model; gone.jpg marked missing; a
    saved query with two judgments (one relevant, one not)."""
    root = tmp_path_factory.mktemp("edge")
    edge, more = build_edge_collections(root / "photos")
    library = Library.open(root / "lib")
    indexer = Indexer(library, demo_encoder)
    indexer.run(edge)
    indexer.run(more)
    with library.catalog.session() as s:
        s.execute(update(Image).where(Image.rel_path == "gone.jpg").values(status="missing"))
    store = QueryStore(library)
    query_id = store.find_or_create_query("frogs")
    ids = names_to_ids(library)
    store.judge(query_id, ids["frog1.jpg"], 1)
    store.judge(query_id, ids["bug1.jpg"], 0)  # judged not relevant: judged all the same
    library.query_id = query_id  # type: ignore[attr-defined]
    yield library
    library.close()


def names_to_ids(library: Library) -> dict[str, int]:
    with library.catalog.session() as s:
        return dict(s.execute(select(Image.rel_path, Image.id)).all())


def passing(library: Library, filters: SearchFilters) -> set[str]:
    names = {i: n for n, i in names_to_ids(library).items()}
    ids = filtered_ids(library.catalog, filters)
    assert ids.dtype == np.int64 and list(ids) == sorted(ids)
    return {names[int(i)] for i in ids}


# -- each filter alone ------------------------------------------------------------------------


def test_no_filter_is_inactive_and_every_ok_photo_passes(edge_library):
    assert not SearchFilters().active
    assert passing(edge_library, SearchFilters()) == EVERY_OK  # the missing photo never


@pytest.mark.parametrize(
    ("taxon", "expected"),
    [
        ("Anura", {"frog1.jpg", "frog2.jpg", "frog3.jpg"}),  # the order, not Anuranoides
        ("anura", {"frog1.jpg", "frog2.jpg", "frog3.jpg"}),
        ("Rana", {"frog1.jpg", "frog2.jpg", "frog3.jpg"}),  # the genus, not Ranatra
        ("  RANATRA  ", {"bug1.jpg", "bug2.jpg"}),
        ("common frog", {"frog1.jpg", "frog2.jpg", "frog3.jpg"}),  # a common name
        ("Insecta", {"bug1.jpg", "bug2.jpg", "beetle1.jpg", "beetle2.jpg"}),  # a class
        ("Plantae", {"milkweed1.jpg", "milkweed2.jpg"}),  # a kingdom
        # No name is "ran": the names containing it (frogs, Ranatra, Anuranoides).
        (
            "ran",
            {
                "frog1.jpg",
                "frog2.jpg",
                "frog3.jpg",
                "bug1.jpg",
                "bug2.jpg",
                "beetle1.jpg",
                "beetle2.jpg",
            },
        ),  # fmt: skip
        ("milkweed", {"milkweed1.jpg", "milkweed2.jpg"}),  # part of "common milkweed"
        ("écureuil roux", {"squirrel.jpg"}),  # Unicode case folding: "Écureuil roux"
        ("ÉCUREUIL", {"squirrel.jpg"}),
    ],
)
def test_taxon_filter_exact_at_a_rank_else_part_of_a_name(edge_library, taxon, expected):
    assert passing(edge_library, SearchFilters(taxon=taxon)) == expected


@pytest.mark.parametrize(
    "hostile",
    ["%", "_", "%%", "\\", "'", '"', "'; DROP TABLE images; --", "a%b_c", "🐸", "x" * 1000,
     "'\"%_\\" * 250, "\x00", "Rana%", "Ran_"],
)  # fmt: skip
def test_hostile_taxon_text_finds_nothing_and_never_raises(edge_library, hostile):
    assert passing(edge_library, SearchFilters(taxon=hostile)) == set()
    assert taxon_suggestions(edge_library.catalog, hostile) == []
    assert passing(edge_library, SearchFilters()) == EVERY_OK  # the catalog is intact


def test_date_range_is_inclusive_and_a_photo_without_a_date_fails_it(edge_library):
    leap_day = SearchFilters(date_from=date(2020, 2, 29), date_to=date(2020, 2, 29))
    assert passing(edge_library, leap_day) == {"frog1.jpg"}
    # 23:00 on the last day is inside; frog3 and the second collection have no date.
    assert passing(edge_library, SearchFilters(date_to=date(2019, 12, 31))) == {"bug1.jpg"}
    assert passing(edge_library, SearchFilters(date_from=date(2022, 8, 31))) == {
        "milkweed2.jpg", "squirrel.jpg", "untaxed.jpg"
    }  # fmt: skip
    assert passing(edge_library, SearchFilters(date_from=date(2030, 1, 1))) == set()


@pytest.mark.parametrize(
    ("months", "expected"),
    [
        ((2, 2), {"frog1.jpg", "squirrel.jpg"}),  # both on 29 February
        ((6, 8), {"frog2.jpg", "milkweed1.jpg", "milkweed2.jpg"}),
        # Across the year end: Nov, Dec, Jan, Feb of any year.
        ((11, 2), {"frog1.jpg", "bug1.jpg", "bug2.jpg", "beetle1.jpg", "squirrel.jpg"}),
        ((12, 1), {"bug1.jpg", "bug2.jpg"}),
        ((9, 10), set()),
        ((1, 12), OK_EDGE - {"frog3.jpg"}),  # every month: only the undated are out
    ],
)
def test_months_of_any_year_including_ranges_across_the_year_end(edge_library, months, expected):
    assert passing(edge_library, SearchFilters(months=months)) == expected


def test_bounding_box_alone_and_across_the_antimeridian(edge_library):
    ontario = SearchFilters(bbox=(44.0, -80.0, 46.0, -79.0))
    assert passing(edge_library, ontario) == {"frog1.jpg", "frog2.jpg", "milkweed1.jpg"}
    fiji = SearchFilters(bbox=(-20.0, 179.0, -10.0, -179.0))  # min_lon > max_lon
    assert passing(edge_library, fiji) == {"bug1.jpg", "bug2.jpg"}
    assert passing(edge_library, SearchFilters(bbox=(-20.0, 170.0, -10.0, 175.0))) == set()
    # A position of exactly 0, 0 is a position; no GPS never passes, even the whole globe.
    globe = passing(edge_library, SearchFilters(bbox=(-90.0, -180.0, 90.0, 180.0)))
    assert globe == OK_EDGE - {"frog3.jpg"}


@pytest.mark.parametrize(
    ("near", "expected"),
    [
        ((45.12, -79.30, 10.0), {"frog2.jpg", "milkweed1.jpg"}),  # 2.2 km and 0 km
        ((45.12, -79.30, 30.0), {"frog1.jpg", "frog2.jpg", "milkweed1.jpg"}),  # frog1: 27.1 km
        ((-17.0, 179.95, 10.0), {"bug1.jpg"}),  # 5.3 km, the other 16 km across 180°
        ((-17.0, 179.95, 20.0), {"bug1.jpg", "bug2.jpg"}),
        ((-17.0, -179.99, 20.0), {"bug1.jpg", "bug2.jpg"}),  # the centre on the other side
        ((89.5, 0.0, 100.0), {"beetle1.jpg"}),
        ((89.5, 0.0, 150.0), {"beetle1.jpg", "beetle2.jpg"}),  # 111 km over the pole
        ((90.0, 0.0, 60.0), {"beetle1.jpg", "beetle2.jpg"}),  # 55.6 km from the pole each
        ((0.0, 0.0, 1.0), {"untaxed.jpg"}),
        ((0.0, 0.0, 20_000.0), OK_EDGE - {"frog3.jpg"}),  # the whole globe, GPS only
    ],
)
def test_near_is_great_circle_distance_across_the_antimeridian_and_the_poles(
    edge_library, near, expected
):
    assert passing(edge_library, SearchFilters(near=near)) == expected


def test_near_box_holds_the_cap():
    # Away from poles and 180°: one range, wider in longitude than in latitude at 60°N.
    lo, hi, ranges = near_box(60.0, 10.0, 100.0)
    assert ranges is not None and len(ranges) == 1
    assert math.isclose(hi - lo, 2 * 100.0 / 111.195, rel_tol=1e-3)
    assert ranges[0][1] - ranges[0][0] > 2 * (hi - 60.0)
    assert len(near_box(0.0, 179.9, 50.0)[2] or ()) == 2  # split at the antimeridian
    assert near_box(89.5, 0.0, 100.0)[2] is None  # holds the pole: every longitude


@pytest.mark.parametrize(
    ("codes", "expected"),
    [
        (("cc-by-nc",), {"frog2.jpg", "bug1.jpg", "bug2.jpg"}),  # three spellings
        (("CC0",), {"frog3.jpg", "untaxed.jpg"}),
        (("pdm",), {"beetle1.jpg"}),  # "public domain": the mark, never CC0
        (("CC BY 4.0",), {"frog1.jpg", "squirrel.jpg"}),  # normalised when made
        (("cc-by", "cc-by-sa"), {"frog1.jpg", "squirrel.jpg", "beetle2.jpg"}),
        (("cc-by-nd",), set()),
    ],
)
def test_licence_codes_match_every_spelling(edge_library, codes, expected):
    assert passing(edge_library, SearchFilters(licenses=codes)) == expected


def test_licence_substring_is_kept_and_takes_wildcards_literally(edge_library):
    assert passing(edge_library, SearchFilters(license="BY-NC")) == {"bug1.jpg", "bug2.jpg"} | {
        "frog2.jpg"
    }
    assert passing(edge_library, SearchFilters(license="%")) == set()
    assert passing(edge_library, SearchFilters(license="_")) == set()


def test_collections_by_id_and_by_name(edge_library):
    with edge_library.catalog.session() as s:
        ids = dict(s.execute(select(Collection.name, Collection.id)).all())
    assert passing(edge_library, SearchFilters(collection_ids=(ids["more"],))) == set(MORE_PHOTOS)
    both = SearchFilters(collection_ids=[ids["more"], ids["edge"]])  # a list is taken too
    assert both.collection_ids == tuple(sorted(ids.values()))
    assert passing(edge_library, both) == EVERY_OK
    assert find_collections(edge_library.catalog, ["more", str(ids["edge"])]) == (
        ids["more"], ids["edge"]
    )  # fmt: skip
    with pytest.raises(BadInputError, match="no collection 'nope'.*'edge', 'more'"):
        find_collections(edge_library.catalog, ["nope"])


def test_judged_and_unjudged_for_a_saved_query(edge_library):
    query_id = edge_library.query_id
    judged = SearchFilters(judged="judged", judged_query_id=query_id)
    assert passing(edge_library, judged) == {"frog1.jpg", "bug1.jpg"}
    unjudged = SearchFilters(judged="unjudged", judged_query_id=query_id)
    assert passing(edge_library, unjudged) == EVERY_OK - {"frog1.jpg", "bug1.jpg"}
    other = SearchFilters(judged="judged", judged_query_id=query_id + 1000)
    assert passing(edge_library, other) == set()


# -- combined ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        (SearchFilters(taxon="Anura", months=(6, 8)), {"frog2.jpg"}),
        (SearchFilters(taxon="Rana", bbox=(44.0, -80.0, 46.0, -79.0)), {"frog1.jpg", "frog2.jpg"}),
        (SearchFilters(licenses=("cc-by-nc",), near=(-17.0, 180.0, 50.0)), {"bug1.jpg", "bug2.jpg"}),
        (SearchFilters(taxon="Ranatra", date_to=date(2019, 12, 31)), {"bug1.jpg"}),
        (SearchFilters(months=(11, 2), date_from=date(2020, 1, 1), licenses=("cc-by",)),
         {"frog1.jpg", "squirrel.jpg"}),
        (SearchFilters(taxon="Animalia", near=(89.5, 0.0, 150.0), months=(3, 3)), {"beetle2.jpg"}),
        (SearchFilters(taxon="Plantae", licenses=("cc0",)), set()),
    ],
)  # fmt: skip
def test_combined_filters_pass_only_photos_passing_each(edge_library, filters, expected):
    assert passing(edge_library, filters) == expected
    # The same as intersecting each filter alone.
    alone = [
        passing(edge_library, SearchFilters(**{key: value}))
        for key, value in filters.to_params().items()
    ]
    assert set.intersection(*alone) == expected


# -- results described ------------------------------------------------------------------------


def _every_ok_id(library: Library) -> list[int]:
    return [int(i) for i in filtered_ids(library.catalog, SearchFilters())]


def test_facet_counts_by_hand(edge_library):
    facets = facet_counts(edge_library.catalog, _every_ok_id(edge_library))
    assert facets["taxon"] == [
        FacetValue("Rana temporaria", "Rana temporaria (common frog)", 3),
        FacetValue("", "unknown", 3),  # untaxed.jpg and the two of "more"
        FacetValue("Anuranoides fictus", "Anuranoides fictus (fictional anuran-like beetle)", 2),
        FacetValue("Asclepias syriaca", "Asclepias syriaca (common milkweed)", 2),
        FacetValue("Ranatra linearis", "Ranatra linearis (water stick-insect)", 2),
        FacetValue("Sciurus vulgaris", "Sciurus vulgaris (Écureuil roux)", 1),
    ]
    assert facets["license"] == [
        FacetValue("cc-by-nc", "CC BY-NC", 3),
        FacetValue("", "unknown", 3),
        FacetValue("cc-by", "CC BY", 2),
        FacetValue("cc0", "CC0", 2),
        FacetValue("all-rights-reserved", "All rights reserved", 1),
        FacetValue("cc-by-sa", "CC BY-SA", 1),
        FacetValue("pdm", "Public Domain Mark", 1),  # "public domain": the mark, not CC0
    ]
    assert [(v.key, v.label, v.count) for v in facets["month"]] == [
        ("", "unknown", 3), ("2", "Feb", 2), ("8", "Aug", 1), ("12", "Dec", 1), ("1", "Jan", 1),
        ("7", "Jul", 1), ("6", "Jun", 1), ("3", "Mar", 1), ("5", "May", 1), ("11", "Nov", 1),
    ]  # fmt: skip
    assert [(v.key, v.count) for v in facets["year"]] == [
        ("2020", 4), ("", 3), ("2022", 2), ("2019", 1), ("2021", 1), ("2023", 1), ("2024", 1)
    ]  # fmt: skip
    with edge_library.catalog.session() as s:
        ids = dict(s.execute(select(Collection.name, Collection.id)).all())
    assert facets["collection"] == [
        FacetValue(str(ids["edge"]), "edge", 11),
        FacetValue(str(ids["more"]), "more", 2),
    ]
    # A part of the results: the counts follow it.
    frogs = filtered_ids(edge_library.catalog, SearchFilters(taxon="Anura"))
    part = facet_counts(edge_library.catalog, list(frogs))
    assert part["taxon"] == [FacetValue("Rana temporaria", "Rana temporaria (common frog)", 3)]
    assert facet_counts(edge_library.catalog, [])["taxon"] == []


def test_month_counts_and_locations_by_hand(edge_library):
    every = _every_ok_id(edge_library)
    assert month_counts(edge_library.catalog, every) == [1, 2, 1, 0, 1, 1, 1, 1, 0, 0, 1, 1]
    ids = names_to_ids(edge_library)
    order = [ids[n] for n in ("untaxed.jpg", "frog3.jpg", "bug2.jpg", "more1.jpg", "frog1.jpg")]
    assert locations(edge_library.catalog, order) == [
        (ids["untaxed.jpg"], 0.0, 0.0),
        (ids["bug2.jpg"], -17.0, -179.9),
        (ids["frog1.jpg"], 45.0, -79.0),
    ]
    assert month_counts(edge_library.catalog, []) == [0] * 12


def test_taxon_suggestions_by_hand(edge_library):
    catalog = edge_library.catalog

    def names(prefix: str, limit: int = 12) -> list[tuple[str, str, int]]:
        return [(t.name, t.rank, t.count) for t in taxon_suggestions(catalog, prefix, limit)]

    # Prefixes of whole names, more photos first (gone.jpg, missing, is not counted).
    assert names("ran") == [
        ("Rana", "genus", 3), ("Rana temporaria", "species", 3), ("Ranidae", "family", 3),
        ("Ranatra", "genus", 2), ("Ranatra linearis", "species", 2),
    ]  # fmt: skip
    # The equal name first, then prefixes; "anuran-like" is a word start of a common name.
    assert names("ANURA") == [
        ("Anura", "order", 3), ("Anuranoides", "genus", 2),
        ("Anuranoides fictus", "species", 2), ("Anuranoididae", "family", 2),
    ]  # fmt: skip
    assert taxon_suggestions(catalog, "milk") == [
        TaxonSuggestion("Asclepias syriaca", "common milkweed", "species", 2)
    ]
    assert names("écu") == [("Sciurus vulgaris", "species", 1)]
    assert names("animalia") == [("Animalia", "kingdom", 8)]
    assert names("ran", limit=2) == [("Rana", "genus", 3), ("Rana temporaria", "species", 3)]
    assert names("") == [] and names("   ") == [] and names("zzz") == []


# -- on the demo collection -------------------------------------------------------------------


@pytest.fixture(scope="module")
def demo_library(tmp_path_factory, copy_small_demo_library):
    library = Library.open(copy_small_demo_library(tmp_path_factory.mktemp("filters-demo") / "lib"))
    yield library
    library.close()


@pytest.fixture(scope="module")
def demo_records(small_demo_collection) -> dict[str, dict]:
    data = json.loads(Path(small_demo_collection.metadata_path).read_text())
    taxon_of = {a["image_id"]: a["category_id"] for a in reversed(data["annotations"])}
    categories = {c["id"]: c for c in data["categories"]}
    return {
        img["file_name"]: {**img, "taxon": categories[taxon_of[img["id"]]]}
        for img in data["images"]
    }


def _haversine_km(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    """The spherical law of cosines: a second formula to check the engine's haversine."""
    p1, p2, dl = math.radians(lat1), math.radians(lat2), math.radians(lon2 - lon1)
    cosine = math.sin(p1) * math.sin(p2) + math.cos(p1) * math.cos(p2) * math.cos(dl)
    return 6371.0088 * math.acos(max(-1.0, min(1.0, cosine)))


def demo_expected(records: dict[str, dict], filters: SearchFilters) -> set[str]:
    """The demo photos passing `filters`, worked out from metadata.json alone."""
    out = set()
    for name, r in records.items():
        when = datetime.fromisoformat(r["date"])
        ok = True
        if filters.taxon:
            t = r["taxon"]
            ranks = [t["name"], t["common_name"], t["kingdom"], t["phylum"], t["class"],
                     t["order"], t["family"], t["genus"]]  # fmt: skip
            ok &= filters.taxon.lower() in [v.lower() for v in ranks]
        if filters.months:
            first, last = filters.months
            ok &= (first <= when.month <= last) if first <= last else not last < when.month < first
        if filters.near:
            lat, lon, radius = filters.near
            ok &= _haversine_km(lat, lon, r["latitude"], r["longitude"]) <= radius
        if filters.licenses:
            ok &= normalise_license(r["license"]) in filters.licenses
        if filters.date_from:
            ok &= when.date() >= filters.date_from
        if filters.date_to:
            ok &= when.date() <= filters.date_to
        if filters.bbox:
            min_lat, min_lon, max_lat, max_lon = filters.bbox
            lon = r["longitude"]
            inside = (
                min_lon <= lon <= max_lon if min_lon <= max_lon else not max_lon < lon < min_lon
            )
            ok &= min_lat <= r["latitude"] <= max_lat and inside
        if ok:
            out.add(name)
    return out


@pytest.mark.parametrize(
    "filters",
    [
        SearchFilters(taxon="Circulus"),
        SearchFilters(taxon="blue square"),
        SearchFilters(months=(6, 8)),
        SearchFilters(months=(11, 2)),
        SearchFilters(near=(51.50, -0.12, 10.0)),  # one field site (photos scatter ~5 km)
        SearchFilters(near=(-41.29, 174.78, 2500.0)),  # Wellington, not Cape Town or Tokyo
        SearchFilters(licenses=("cc-by", "cc0")),
        SearchFilters(taxon="Quadratales", months=(3, 9), licenses=("cc-by-nc",)),
        SearchFilters(taxon="Formae", near=(35.68, 139.69, 50.0), date_from=date(2021, 1, 1)),
    ],
)
def test_demo_filters_match_the_metadata(demo_library, demo_records, filters):
    expected = demo_expected(demo_records, filters)
    assert 0 < len(expected) < len(demo_records)  # each case really filters
    assert passing(demo_library, filters) == expected


def test_a_filtered_text_search_on_the_demo_returns_only_passing_photos(
    demo_library, demo_records, demo_encoder
):
    from engine.methods import SearchQuery, search_hits
    from engine.search.searcher import SearchFilters as Reexported

    assert Reexported is SearchFilters  # existing imports keep working
    filters = SearchFilters(months=(11, 2), licenses=("cc-by", "cc0"))
    query = SearchQuery("red circle")
    hits = search_hits(demo_library, demo_encoder, query, top_k=500, filters=filters)
    expected = demo_expected(demo_records, filters)
    assert {h.rel_path for h in hits} == expected
    red = {n for n in expected if demo_records[n]["taxon"]["common_name"] == "red circle"}
    assert red  # the case has red circles among the passing photos
    assert hits[0].rel_path in red  # still ranked by the query within the filter


# -- saving filters with a run ----------------------------------------------------------------


def test_params_round_trip_and_describe():
    filters = SearchFilters(
        taxon="Anura",
        date_from=date(2020, 2, 29),
        date_to=date(2024, 2, 29),
        months=(11, 2),
        bbox=(-20, 179, -10, -179),
        near=(45.12, -79.3, 25),
        license="by",
        licenses=("CC BY-NC 4.0", "public domain", "cc_by_nc"),
        collection_ids=(3, 1, 3),
        judged="unjudged",
        judged_query_id=7,
    )
    params = filters.to_params()
    assert json.loads(json.dumps(params)) == params  # JSON-safe
    assert params["licenses"] == ["cc-by-nc", "pdm"] and params["collection_ids"] == [1, 3]
    assert params["date_from"] == "2020-02-29" and params["months"] == [11, 2]
    assert SearchFilters.from_params(params) == filters
    assert SearchFilters.from_params({**params, "added_later": 1}) == filters  # unknown: kept out
    assert SearchFilters.from_params(None) == SearchFilters() == SearchFilters.from_params({})
    assert SearchFilters(months=(6, 8)).to_params() == {"months": [6, 8]}  # only what is set
    chips = dict(filters.describe())
    assert chips["months"] == "Nov–Feb, any year"
    assert chips["near"] == "45.1°N 79.3°W ± 25 km"  # a place, not raw coordinates
    assert chips["licenses"] == "CC BY-NC or Public Domain Mark"
    assert chips["judged"] == "unjudged for query 7"
    assert [key for key, _ in filters.describe()] == [
        "taxon", "date_from", "date_to", "months", "bbox", "near", "license", "licenses",
        "collection_ids", "judged",
    ]  # fmt: skip
    assert dict(SearchFilters(months=(6, 8)).describe()) == {"months": "Jun–Aug, any year"}
    for key, _ in filters.describe():
        fewer = filters.without(key)
        assert key not in dict(fewer.describe())
        assert len(fewer.describe()) == len(filters.describe()) - 1
    assert not SearchFilters(months=(6, 8)).without("months").active
    assert filters.without("judged").judged_query_id is None


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ("months", "filters"),
        ({"months": [0, 3]}, "months"),
        ({"months": [6]}, "months"),
        ({"months": "jun"}, "months"),
        ({"months": [True, 3]}, "months"),
        ({"date_from": "2021-02-29"}, "date_from"),
        ({"date_to": 20200101}, "date_to"),
        ({"bbox": [1, 2, 3]}, "bbox"),
        ({"bbox": [10, 0, -10, 5]}, "bbox"),
        ({"bbox": [0, 0, 95, 5]}, "bbox"),
        ({"near": [45, -79, 0]}, "near"),
        ({"near": [45, -79, 20_001]}, "near"),
        ({"near": [45, 200, 5]}, "near"),
        ({"near": [45, "west", 5]}, "near"),
        ({"near": [45, float("nan"), 5]}, "near"),
        ({"licenses": [3]}, "licenses"),
        ({"collection_ids": ["one"]}, "collection_ids"),
        ({"collection_ids": 3}, "collection_ids"),
        ({"judged": "maybe", "judged_query_id": 1}, "judged"),
        ({"judged": "judged"}, "judged"),
        ({"judged_query_id": 4}, "judged"),
        ({"taxon": ["Anura"]}, "taxon"),
    ],
)
def test_from_params_of_junk_is_one_line_naming_the_filter(params, named):
    with pytest.raises(BadInputError, match=named) as caught:
        SearchFilters.from_params(params)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("CC-BY-NC 4.0", "cc-by-nc"),
        ("cc_by_nc", "cc-by-nc"),
        ("http://creativecommons.org/licenses/by-nc/4.0/", "cc-by-nc"),
        ("https://creativecommons.org/licenses/by-nc-sa/2.0/legalcode", "cc-by-nc-sa"),
        ("Attribution-NonCommercial-ShareAlike License", "cc-by-nc-sa"),
        ("CC BY-SA 4.0 International", "cc-by-sa"),
        ("cc by nd", "cc-by-nd"),
        ("CC0", "cc0"),
        ("CC0 1.0", "cc0"),
        ("Public Domain Dedication", "cc0"),
        ("public domain", "pdm"),
        ("Public Domain Mark 1.0", "pdm"),
        ("https://creativecommons.org/publicdomain/zero/1.0/", "cc0"),
        ("http://creativecommons.org/publicdomain/mark/1.0/", "pdm"),
        ("Attribution License", "cc-by"),
        ("Attribution-NoDerivs License", "cc-by-nd"),
        ("  All Rights Reserved ", "all-rights-reserved"),
        ("No known copyright restrictions", "no known copyright restrictions"),
        ("", None),
        (None, None),
    ],
)
def test_licence_spellings_normalise(text, code):
    assert normalise_license(text) == code
