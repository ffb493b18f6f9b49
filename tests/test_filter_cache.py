"""The filter column cache answers dates, months and boxes from memory with the same photos as
the database, on SQLite and PostgreSQL, and never from rows that changed since it read them:
a new photo, a corrected date or place, a photo gone missing or deleted, written through this
catalog or another connection, is in the very next answer (migration 0019's generation)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date, datetime
from typing import Any

import numpy as np
import pytest
from sqlalchemy import delete, event, select, text, update

from engine.catalog import Image, LibraryMeta, open_catalog
from engine.catalog.db import Catalog
from engine.search import filter_cache
from engine.search.filter_cache import (
    GENERATION_KEY,
    load_filter_cache,
    wait_for_filter_cache,
)
from engine.search.filters import SearchFilters, filtered_ids
from tests.test_filters_indexed import CASES, PHOTOS, add_photos, expected_ids

MORE_CASES = [
    SearchFilters(date_from=date(2018, 1, 1), date_to=date(2018, 12, 31), months=(6, 8)),
    SearchFilters(bbox=(-90.0, -180.0, 90.0, 180.0), months=(12, 1)),
    SearchFilters(date_to=date(1900, 1, 1)),
]


@pytest.fixture
def catalog(catalog_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Catalog]:
    monkeypatch.setattr(filter_cache, "MIN_PHOTOS", 0)  # cache even a handful of photos
    monkeypatch.setattr(filter_cache, "RELOAD_SPACING", 0.0)
    opened = open_catalog(catalog_url)
    yield opened
    wait_for_filter_cache(opened)
    opened.dispose()


class SqlReads:
    """Counts the statements that hand ids over from the database (the SQL paths)."""

    def __init__(self, catalog: Catalog) -> None:
        self.count = 0
        event.listen(catalog.engine, "before_cursor_execute", self._heard)

    def _heard(self, _conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if "group_concat" in statement or "string_agg" in statement:
            self.count += 1


def generation(catalog: Catalog) -> str:
    with catalog.session() as s:
        return str(s.scalar(select(LibraryMeta.value).where(LibraryMeta.key == GENERATION_KEY)))


def answers(catalog: Catalog) -> list[list[int]]:
    return [[int(i) for i in filtered_ids(catalog, f)] for f in [*CASES, *MORE_CASES]]


def expected(catalog: Catalog) -> list[list[int]]:
    return [expected_ids(catalog, f) for f in [*CASES, *MORE_CASES]]


def warm(catalog: Catalog) -> None:
    """A first filter starts the background load; wait for it to end."""
    filtered_ids(catalog, SearchFilters(months=(1, 12)))
    assert wait_for_filter_cache(catalog) is not None


def test_the_cache_answers_like_the_database_without_handing_ids_over(catalog):
    add_photos(catalog, "/photos", PHOTOS)
    reads = SqlReads(catalog)
    first = filtered_ids(catalog, SearchFilters(months=(2, 2)))  # from SQL: nothing cached yet
    assert reads.count == 1
    assert wait_for_filter_cache(catalog) is not None
    reads.count = 0
    got = answers(catalog)
    assert reads.count == 0  # every answer from memory
    assert got == expected(catalog)
    assert [int(i) for i in first] == got[0]
    assert all(filtered_ids(catalog, f).dtype == np.int64 for f in CASES)


def test_a_write_after_the_cache_is_built_is_in_the_next_answer(catalog):
    ids = add_photos(catalog, "/photos", PHOTOS)
    warm(catalog)
    week = SearchFilters(date_from=date(2023, 3, 1), date_to=date(2023, 3, 7))
    assert list(filtered_ids(catalog, week)) == []
    # A new photo.
    new = add_photos(catalog, "/photos", {"new": (datetime(2023, 3, 2, 9, 0), 1.0, 2.0, "ok")})
    assert [int(i) for i in filtered_ids(catalog, week)] == [new["new"]]
    # A corrected date and place.
    with catalog.session() as s:
        s.execute(
            update(Image)
            .where(Image.id == ids["well-inside"])
            .values(observed_at=datetime(2023, 3, 5, 8, 0), latitude=-17.5, longitude=179.5)
        )
    assert [int(i) for i in filtered_ids(catalog, week)] == sorted([new["new"], ids["well-inside"]])
    box = SearchFilters(bbox=(-20.0, 179.0, 5.0, -179.0))
    assert ids["well-inside"] in filtered_ids(catalog, box)
    # A photo deleted, one gone missing.
    with catalog.session() as s:
        s.execute(delete(Image).where(Image.id == new["new"]))
        s.execute(update(Image).where(Image.id == ids["well-inside"]).values(status="missing"))
    assert list(filtered_ids(catalog, week)) == []
    assert ids["well-inside"] not in filtered_ids(catalog, box)
    # Reloaded behind the writes, the cache answers again, and rightly.
    assert wait_for_filter_cache(catalog) is not None
    reads = SqlReads(catalog)
    assert answers(catalog) == expected(catalog)
    assert reads.count == 0


def test_a_write_through_another_connection_is_seen(catalog, catalog_url):
    ids = add_photos(catalog, "/photos", PHOTOS)
    warm(catalog)
    other = open_catalog(catalog_url)  # another process's catalog, say
    try:
        with other.session() as s:
            s.execute(
                update(Image)
                .where(Image.id == ids["no-date"])
                .values(observed_at=datetime(2016, 2, 10, 12, 0))
            )
    finally:
        other.dispose()
    feb = [int(i) for i in filtered_ids(catalog, SearchFilters(months=(2, 2)))]
    assert ids["no-date"] in feb
    assert answers(catalog) == expected(catalog)


def test_only_writes_that_can_change_an_answer_draw_a_new_generation(catalog):
    ids = add_photos(catalog, "/photos", PHOTOS)
    before = generation(catalog)
    with catalog.session() as s:
        s.execute(update(Image).where(Image.id == ids["leap-day"]).values(size=5, taxon_id=None))
    assert generation(catalog) == before
    with catalog.session() as s:
        s.execute(update(Image).where(Image.id == ids["leap-day"]).values(longitude=-79.5))
    assert generation(catalog) != before


def test_without_its_triggers_the_cache_stays_off(tmp_path, monkeypatch):
    monkeypatch.setattr(filter_cache, "MIN_PHOTOS", 0)
    catalog = open_catalog(tmp_path / "c.sqlite3")
    try:
        add_photos(catalog, "/photos", PHOTOS)
        with catalog.session() as s:  # as a migration rebuilding `images` would leave it
            s.execute(text("DROP TRIGGER images_generation_updated"))
        assert load_filter_cache(catalog) is None
        assert answers(catalog) == expected(catalog)
    finally:
        catalog.dispose()


def test_a_small_catalog_is_not_cached(tmp_path):
    catalog = open_catalog(tmp_path / "c.sqlite3")
    try:
        add_photos(catalog, "/photos", PHOTOS)
        assert answers(catalog) == expected(catalog)
        assert wait_for_filter_cache(catalog) is None
    finally:
        catalog.dispose()


def test_the_cache_holds_about_30_bytes_a_photo_with_exact_places(tmp_path, monkeypatch):
    monkeypatch.setattr(filter_cache, "LOAD_CHUNK", 7)  # several chunks
    catalog = open_catalog(tmp_path / "c.sqlite3")
    rng = np.random.default_rng(3)
    photos = {
        f"p{n}": (datetime(2020, 1 + n % 12, 1 + n % 28), float(lat), float(lon), "ok")
        for n, (lat, lon) in enumerate(rng.normal(0, [30, 60], (50, 2)))
    }
    try:
        add_photos(catalog, "/photos", photos)
        columns = load_filter_cache(catalog)
        assert columns is not None and len(columns.ids) == 50
        assert columns.nbytes <= 30 * 50
        with catalog.session() as s:
            stored = s.execute(select(Image.id, Image.latitude, Image.longitude)).all()
        cached = zip(
            columns.ids.tolist(),
            columns.latitudes.tolist(),
            columns.longitudes.tolist(),
            strict=True,
        )
        assert [tuple(row) for row in stored] == list(cached)  # exact coordinates
        # A box whose edge is one photo's exact latitude keeps that photo.
        edge = float(columns.latitudes[17])
        inside = filtered_ids(catalog, SearchFilters(bbox=(edge, -180.0, 90.0, 180.0)))
        assert int(columns.ids[17]) in inside
    finally:
        catalog.dispose()
