"""Dates, months and boxes answered from the indexes of migration 0012 (the date columns, the
places' R*Tree on SQLite, the GiST index on PostgreSQL) give the same photos as reading every
row did, on both databases: photos without a date or a place, Feb 29, the year's end, boxes
across the antimeridian and on their edges. The columns follow every later write (triggers),
and the photos catalogued before the upgrade are filled afterwards, a chunk at a time, from
where a stopped fill left off."""

from __future__ import annotations

from datetime import date, datetime
from typing import Any

import numpy as np
import pytest
from sqlalchemy import create_engine, delete, select, text, update

import engine.search.filters as filters_module
from engine.catalog import Collection, Image, LibraryMeta, open_catalog
from engine.catalog.db import Catalog, _alembic_config
from engine.catalog.db import catalog_url as sqlalchemy_url
from engine.catalog.filter_columns import (
    FILLED_TO_KEY,
    fill_filter_columns,
    filter_columns_filled,
)
from engine.errors import Cancelled
from engine.progress import CancelToken, Progress
from engine.search import filter_index
from engine.search.filters import SearchFilters, filtered_ids

# name -> (observed_at, latitude, longitude, status); None where the record has no value.
PHOTOS: dict[str, tuple[datetime | None, float | None, float | None, str]] = {
    "leap-day": (datetime(2020, 2, 29, 10, 0), 45.0, -79.0, "ok"),
    "leap-day-missing": (datetime(2020, 2, 29, 11, 0), 45.0, -79.0, "missing"),
    "last-moment-of-2019": (datetime(2019, 12, 31, 23, 59, 59, 999999), -17.0, 179.9, "ok"),
    "first-moment-of-2020": (datetime(2020, 1, 1, 0, 0), -17.0, -179.9, "ok"),
    "midnight-june-1": (datetime(2021, 6, 1, 0, 0), 10.0, 10.0, "ok"),
    "no-date": (None, 10.0, 10.0, "ok"),
    "no-place": (datetime(2021, 6, 15, 12, 0), None, None, "ok"),
    "half-a-place": (datetime(2021, 7, 15, 12, 0), 10.0, None, "ok"),
    "nothing-known": (None, None, None, "ok"),
    "on-the-antimeridian-east": (datetime(2018, 11, 30, 8, 0), 0.0, 180.0, "ok"),
    "on-the-antimeridian-west": (datetime(2018, 3, 1, 8, 0), 0.0, -180.0, "ok"),
    "north-pole": (datetime(2017, 8, 1, 8, 0), 90.0, 0.0, "ok"),
    "south-pole": (datetime(1899, 1, 1, 8, 0), -90.0, 45.0, "ok"),
    "on-the-box-corner": (datetime(2021, 5, 31, 23, 59), 20.0, 30.0, "ok"),
    # Within the R*Tree's 32-bit rounding of the box's edges, just outside and just inside.
    "a-hair-outside": (datetime(2021, 5, 1, 12, 0), 20.0 - 1e-7, 30.0 + 1e-7, "ok"),
    "a-hair-inside": (datetime(2021, 5, 1, 12, 0), 20.0 + 1e-7, 30.0 - 1e-7, "ok"),
    "well-inside": (datetime(2022, 10, 10, 10, 0), 25.0, 25.0, "ok"),
    "skipped": (datetime(2022, 10, 10, 10, 0), 25.0, 25.0, "skipped"),
}

CASES = [
    SearchFilters(months=(2, 2)),
    SearchFilters(months=(12, 1)),
    SearchFilters(months=(11, 2)),
    SearchFilters(months=(6, 6)),
    SearchFilters(months=(1, 12)),
    SearchFilters(date_from=date(2020, 2, 29), date_to=date(2020, 2, 29)),
    SearchFilters(date_from=date(2019, 12, 31), date_to=date(2019, 12, 31)),
    SearchFilters(date_from=date(2020, 1, 1)),
    SearchFilters(date_to=date(2021, 5, 31)),
    SearchFilters(date_from=date(2021, 6, 1), date_to=date(2021, 6, 1)),
    SearchFilters(bbox=(20.0, 20.0, 30.0, 30.0)),  # corner on (20, 30)
    SearchFilters(bbox=(20.0, 30.0, 20.0, 30.0)),  # a box that is one point
    SearchFilters(bbox=(19.99, 29.99, 20.01, 30.01)),  # a box smaller than the tree's margin
    SearchFilters(bbox=(-20.0, 179.0, 5.0, -179.0)),  # across the antimeridian
    SearchFilters(bbox=(-90.0, 180.0, 90.0, -180.0)),  # only the antimeridian itself
    SearchFilters(bbox=(-90.0, -180.0, 90.0, 180.0)),  # the whole world
    SearchFilters(bbox=(89.0, -180.0, 90.0, 180.0)),  # around the north pole
    SearchFilters(bbox=(0.0, 0.0, 30.0, 30.0), months=(5, 6)),
    SearchFilters(bbox=(-20.0, 179.0, 5.0, -179.0), date_from=date(2019, 12, 31)),
    SearchFilters(date_from=date(2021, 1, 1), months=(5, 5)),
    SearchFilters(date_from=date(2030, 1, 1)),  # nothing
]


def expected_ids(catalog: Catalog, filters: SearchFilters) -> list[int]:
    """The photos passing `filters`, worked out in Python from each photo's own values."""
    with catalog.session() as s:
        rows = s.execute(
            select(Image.id, Image.observed_at, Image.latitude, Image.longitude, Image.status)
        ).all()
    passing = []
    for image_id, observed, lat, lon, status in rows:
        if status != "ok":
            continue
        day = observed.date() if observed is not None else None
        if (filters.date_from or filters.date_to or filters.months) and day is None:
            continue
        if filters.date_from and day < filters.date_from:
            continue
        if filters.date_to and day > filters.date_to:
            continue
        if filters.months:
            first, last = filters.months
            inside = first <= day.month <= last if first <= last else not last < day.month < first
            if not inside:
                continue
        if filters.bbox:
            min_lat, min_lon, max_lat, max_lon = filters.bbox
            if lat is None or lon is None or not min_lat <= lat <= max_lat:
                continue
            if min_lon <= max_lon and not min_lon <= lon <= max_lon:
                continue
            if min_lon > max_lon and not (lon >= min_lon or lon <= max_lon):
                continue
        passing.append(image_id)
    return sorted(passing)


def ids_reading_every_row(
    catalog: Catalog, filters: SearchFilters, monkeypatch: pytest.MonkeyPatch
) -> list[int]:
    """`filtered_ids` as before migration 0012 (the path still taken until the fill is done)."""
    with monkeypatch.context() as patch:
        patch.setattr(filters_module, "filter_columns_filled", lambda _session: False)
        return [int(i) for i in filtered_ids(catalog, filters)]


def add_photos(catalog: Catalog, root: str, photos: dict[str, Any]) -> dict[str, int]:
    with catalog.session() as s:
        collection = s.scalars(select(Collection).where(Collection.root == root)).first()
        if collection is None:
            collection = Collection(root=root, name=root.strip("/"))
            s.add(collection)
            s.flush()
        images = {
            name: Image(
                collection_id=collection.id,
                rel_path=f"{name}.jpg",
                size=1,
                mtime_ns=1,
                observed_at=observed,
                latitude=lat,
                longitude=lon,
                status=status,
            )
            for name, (observed, lat, lon, status) in photos.items()
        }
        s.add_all(images.values())
        s.flush()
        return {name: image.id for name, image in images.items()}


def assert_every_case_agrees(catalog: Catalog, monkeypatch: pytest.MonkeyPatch) -> None:
    for filters in CASES:
        want = expected_ids(catalog, filters)
        got = filtered_ids(catalog, filters)
        assert got.dtype == np.int64 and list(got) == sorted(set(got.tolist())), filters
        assert [int(i) for i in got] == want, filters.to_params()
        assert ids_reading_every_row(catalog, filters, monkeypatch) == want, filters.to_params()


@pytest.fixture
def catalog(catalog_url: str) -> Any:
    opened = open_catalog(catalog_url)
    yield opened
    opened.dispose()


@pytest.mark.parametrize("box_lookups", [20_000, 0], ids=["small-box", "big-box"])
def test_a_new_catalog_needs_no_fill_and_answers_from_the_indexes(
    catalog, monkeypatch, box_lookups
):
    """A box with dates: its few photos looked up, or (a big box) two id sets intersected."""
    monkeypatch.setattr(filter_index, "_LOOKUPS", box_lookups)
    with catalog.session() as s:
        assert filter_columns_filled(s)
    add_photos(catalog, "/photos", PHOTOS)
    assert fill_filter_columns(catalog) == 0
    assert_every_case_agrees(catalog, monkeypatch)


def test_the_columns_and_places_follow_every_change(catalog, monkeypatch):
    ids = add_photos(catalog, "/photos", PHOTOS)
    others = add_photos(catalog, "/more", {"elsewhere": (datetime(2021, 5, 5), 20.0, 25.0, "ok")})
    with catalog.session() as s:
        # A re-scan that corrects a date and a place, a photo gone missing and one back.
        s.execute(
            update(Image)
            .where(Image.id == ids["well-inside"])
            .values(observed_at=datetime(2021, 2, 28, 23, 0), latitude=-17.5, longitude=179.5)
        )
        s.execute(update(Image).where(Image.id == ids["no-date"]).values(observed_at=None))
        s.execute(update(Image).where(Image.id == ids["midnight-june-1"]).values(observed_at=None))
        s.execute(update(Image).where(Image.id == ids["leap-day"]).values(status="missing"))
        s.execute(update(Image).where(Image.id == ids["leap-day-missing"]).values(status="ok"))
        s.execute(update(Image).where(Image.id == ids["north-pole"]).values(latitude=None))
        s.execute(
            update(Image).where(Image.id == ids["no-place"]).values(latitude=20.0, longitude=30.0)
        )
    with catalog.session() as s:
        assert s.scalar(select(Image.observed_month).where(Image.id == ids["well-inside"])) == 2
        assert s.scalar(select(Image.observed_date).where(Image.id == ids["well-inside"])) == date(
            2021, 2, 28
        )
        assert (
            s.scalar(select(Image.observed_year).where(Image.id == ids["midnight-june-1"])) is None
        )
    assert_every_case_agrees(catalog, monkeypatch)
    # A collection removed takes its photos' places with it.
    with catalog.session() as s:
        s.execute(delete(Image).where(Image.id == others["elsewhere"]))
        s.execute(delete(Collection).where(Collection.root == "/photos"))
    assert list(filtered_ids(catalog, SearchFilters(bbox=(-90.0, -180.0, 90.0, 180.0)))) == []
    assert_every_case_agrees(catalog, monkeypatch)


def _catalog_before_0012(url: str) -> None:
    """A catalog at schema 0011 holding PHOTOS, written as that version wrote them."""
    from alembic import command

    engine = create_engine(sqlalchemy_url(url))
    on_sqlite = engine.dialect.name == "sqlite"

    def stored(moment: datetime | None) -> datetime | str | None:
        # As SQLAlchemy writes a time into SQLite: always with microseconds.
        if moment is None or not on_sqlite:
            return moment
        return moment.isoformat(sep=" ", timespec="microseconds")

    with engine.begin() as conn:
        command.upgrade(_alembic_config(conn), "0011")
        conn.execute(
            text("INSERT INTO collections (id, root, name, added_at) VALUES (1, '/p', 'p', :t)"),
            {"t": datetime(2024, 1, 1)},
        )
        for number, (observed, lat, lon, status) in enumerate(PHOTOS.values(), start=1):
            conn.execute(
                text(
                    "INSERT INTO images (id, collection_id, rel_path, size, mtime_ns, observed_at, "
                    "latitude, longitude, status, added_at, updated_at) VALUES (:id, 1, :path, 1, "
                    "1, :observed, :lat, :lon, :status, :t, :t)"
                ),
                {
                    "id": number,
                    "path": f"{number}.jpg",
                    "observed": stored(observed),
                    "lat": lat,
                    "lon": lon,
                    "status": status,
                    "t": datetime(2024, 1, 1),
                },
            )
    engine.dispose()


def test_an_upgraded_catalog_is_filled_a_chunk_at_a_time_and_a_stopped_fill_goes_on(
    catalog_url, monkeypatch
):
    _catalog_before_0012(catalog_url)
    upgraded = open_catalog(catalog_url)
    try:
        with upgraded.session() as s:
            assert not filter_columns_filled(s)
            assert s.scalar(select(Image.observed_month).where(Image.id == 1)) is None
        # Not filled yet: the filters read every row, with the same answers.
        assert_every_case_agrees(upgraded, monkeypatch)

        # Stopped after its second chunk (the window closed): what was committed stays.
        token = CancelToken()
        heard: list[Progress] = []

        def stop_after_two(progress: Progress) -> None:
            heard.append(progress)
            if len(heard) == 2:
                token.cancel()

        with pytest.raises(Cancelled):
            fill_filter_columns(upgraded, stop_after_two, token, chunk=4)
        with upgraded.session() as s:
            assert not filter_columns_filled(s)
            assert s.get(LibraryMeta, FILLED_TO_KEY).value == "8"
            months = dict(s.execute(select(Image.id, Image.observed_month)).all())
        assert months[1] == 2 and months[8] == 7  # filled
        assert months[10] is None  # not yet: its chunk was never started
        assert [p.done for p in heard] == [4, 8] and heard[-1].total == len(PHOTOS)
        assert_every_case_agrees(upgraded, monkeypatch)

        # The next fill goes on from id 8, then the filters use the indexes.
        assert fill_filter_columns(upgraded, chunk=4) == len(PHOTOS) - 8
        with upgraded.session() as s:
            assert filter_columns_filled(s)
        assert fill_filter_columns(upgraded) == 0
        assert_every_case_agrees(upgraded, monkeypatch)
    finally:
        upgraded.dispose()


def test_the_filled_catalog_answers_without_reading_every_row(tmp_path):
    """SQLite's plans: a month range reads the month index alone, a box the R*Tree."""
    catalog = open_catalog(tmp_path / "c.sqlite3")
    add_photos(catalog, "/photos", PHOTOS)
    plans = []
    from sqlalchemy import event

    def remember(_conn: Any, cursor: Any, statement: str, params: Any, *_: Any) -> None:
        if "group_concat" in statement:
            plans.append(
                " ".join(
                    row[3]
                    for row in cursor.connection.execute(f"EXPLAIN QUERY PLAN {statement}", params)
                )
            )

    event.listen(catalog.engine, "before_cursor_execute", remember)
    filtered_ids(catalog, SearchFilters(months=(6, 8)))
    filtered_ids(catalog, SearchFilters(bbox=(0.0, 0.0, 30.0, 30.0)))
    filtered_ids(catalog, SearchFilters(date_from=date(2020, 1, 1), date_to=date(2020, 12, 31)))
    catalog.dispose()
    assert "COVERING INDEX ix_images_observed_month_status" in plans[0]
    assert "image_places VIRTUAL TABLE" in plans[1] and "SCAN images" not in plans[1]
    assert "INDEX ix_images_observed_date_status" in plans[2]


def test_a_library_fills_its_filter_columns_before_it_first_loads_a_vector_index(tmp_path):
    """The window and the command line load a vector index before their first search: that
    is when the photos catalogued before the upgrade get their columns, with progress."""
    from engine.catalog import Embedding
    from engine.catalog.library import Library

    _catalog_before_0012(f"sqlite:///{tmp_path / 'catalog.sqlite3'}")
    heard: list[Progress] = []
    with Library.open(tmp_path) as library:
        with library.catalog.session() as s:
            assert not filter_columns_filled(s)
            s.add(Embedding(image_id=1, model_key="m", vector=np.ones(4, np.float32).tobytes()))
        library.vector_index("m", progress=heard.append)
        with library.catalog.session() as s:
            assert filter_columns_filled(s)
        feb = filtered_ids(library.catalog, SearchFilters(months=(2, 2)))
    assert [p.message for p in heard[:1]] == ["preparing the date and place filters"]
    assert [int(i) for i in feb] == [1]  # the leap day; its twin is missing
