"""The filter column cache is exact across restores: a catalog put back from a backup (by
another process, through SQLite's backup API) or reloaded from a dump in SQL (as pg_restore
does on a server), then written as many times as the restore went back, must never find the
cache's old generation again. A counter would come back to the value the cache was read at;
a generation drawn at random by each write never does."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import date, datetime
from pathlib import Path

import pytest
from sqlalchemy import select, text, update

from engine.catalog import Image, LibraryMeta, open_catalog
from engine.catalog.backup import backup_catalog
from engine.catalog.db import Catalog
from engine.search import filter_cache
from engine.search.filter_cache import GENERATION_KEY, load_filter_cache, wait_for_filter_cache
from engine.search.filters import SearchFilters, filtered_ids
from tests.test_filter_cache import answers, expected, warm
from tests.test_filters_indexed import PHOTOS, add_photos

REPO = Path(__file__).resolve().parents[1]

# Another process: put the backup back, then move the given photos to March 2023, one write
# each (as many writes as the test made after the backup).
_RESTORE_THEN_WRITE = """
import sys
from datetime import date, datetime
from sqlalchemy import update
from engine.catalog import Image, open_catalog
from engine.catalog.restore import restore_backup
library, catalog_file, backup, *ids = sys.argv[1:]
restore_backup(library, catalog_file, backup)
catalog = open_catalog(catalog_file)
try:
    for day, image_id in enumerate(ids, start=1):
        with catalog.session() as s:
            s.execute(update(Image).where(Image.id == int(image_id))
                      .values(observed_at=datetime(2023, 3, day, 12, 0)))
finally:
    catalog.dispose()
"""


@pytest.fixture
def cached(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(filter_cache, "MIN_PHOTOS", 0)  # cache even a handful of photos
    monkeypatch.setattr(filter_cache, "RELOAD_SPACING", 0.0)


@pytest.fixture
def catalog(catalog_url: str, cached: None) -> Iterator[Catalog]:
    opened = open_catalog(catalog_url)
    yield opened
    wait_for_filter_cache(opened)
    opened.dispose()


def _move_to_1999(catalog: Catalog, ids: list[int]) -> None:
    """One write per photo, each its own transaction (a trigger's bump each)."""
    for image_id in ids:
        with catalog.session() as s:
            s.execute(
                update(Image)
                .where(Image.id == image_id)
                .values(observed_at=datetime(1999, 7, 7, 12, 0))
            )


def _generation(catalog: Catalog) -> str | None:
    with catalog.session() as s:
        return s.scalar(select(LibraryMeta.value).where(LibraryMeta.key == GENERATION_KEY))


def test_a_restore_by_another_process_then_as_many_writes_never_reuses_the_cache(
    tmp_path: Path, cached: None
) -> None:
    catalog_file = tmp_path / "catalog.sqlite3"
    catalog = open_catalog(catalog_file)
    try:
        ids = add_photos(catalog, "/photos", PHOTOS)
        backup = backup_catalog(tmp_path, catalog_file, reason="manual")
        dated = [ids[n] for n in ("leap-day", "no-place", "well-inside", "north-pole")]
        _move_to_1999(catalog, dated)
        warm(catalog)
        assert answers(catalog) == expected(catalog)
        others = [ids[n] for n in ("no-date", "midnight-june-1", "south-pole", "half-a-place")]
        env = dict(os.environ, PYTHONPATH=str(REPO))
        subprocess.run(
            [sys.executable, "-c", _RESTORE_THEN_WRITE, str(tmp_path), str(catalog_file),
             str(backup), *map(str, others)],
            check=True, env=env, timeout=120, capture_output=True,
        )  # fmt: skip
        # The restore undid four writes and four others followed: every answer is the
        # catalog's as it is now (1999 is empty again, March 2023 holds the other four).
        july_1999 = SearchFilters(date_from=date(1999, 7, 1), date_to=date(1999, 7, 31))
        assert list(filtered_ids(catalog, july_1999)) == []
        assert answers(catalog) == expected(catalog)
    finally:
        wait_for_filter_cache(catalog)
        catalog.dispose()


def test_a_dump_reloaded_in_sql_then_as_many_writes_never_reuses_the_cache(
    catalog: Catalog, catalog_url: str
) -> None:
    ids = add_photos(catalog, "/photos", PHOTOS)
    with catalog.session() as s:  # the dump: the photos' filter columns and the library_meta rows
        dumped_photos = s.execute(select(Image.id, Image.observed_at)).all()
        dumped_meta = s.execute(select(LibraryMeta.key, LibraryMeta.value)).all()
    dated = [ids[n] for n in ("leap-day", "no-place", "well-inside")]
    _move_to_1999(catalog, dated)
    warm(catalog)
    other = open_catalog(catalog_url)  # another workstation reloads the dump, then writes
    try:
        with other.session() as s:
            for image_id, observed in dumped_photos:
                s.execute(update(Image).where(Image.id == image_id).values(observed_at=observed))
            s.execute(text("DELETE FROM library_meta"))
            for key, value in dumped_meta:
                s.add(LibraryMeta(key=key, value=value))
        others = [ids[n] for n in ("no-date", "midnight-june-1", "south-pole")]
        for day, image_id in enumerate(others, start=1):
            with other.session() as s:
                s.execute(
                    update(Image)
                    .where(Image.id == image_id)
                    .values(observed_at=datetime(2023, 3, day, 12, 0))
                )
    finally:
        other.dispose()
    assert answers(catalog) == expected(catalog)


def test_every_write_draws_a_new_generation_and_others_leave_it(catalog: Catalog) -> None:
    ids = add_photos(catalog, "/photos", PHOTOS)
    seen = {_generation(catalog)}
    for _ in range(3):  # the same value written back and forth: each write a new generation
        for lat in (1.0, 2.0):
            with catalog.session() as s:
                s.execute(update(Image).where(Image.id == ids["leap-day"]).values(latitude=lat))
            seen.add(_generation(catalog))
    assert len(seen) == 7 and None not in seen
    before = _generation(catalog)
    with catalog.session() as s:  # a column no filter reads
        s.execute(update(Image).where(Image.id == ids["leap-day"]).values(size=5))
    assert _generation(catalog) == before


def test_triggers_dropped_and_made_again_around_a_write_are_noticed(tmp_path, cached):
    """A writer that drops the triggers, writes and makes them again leaves the generation as
    it was; SQLite's schema version, which the cache checks too, does not stay."""
    catalog = open_catalog(tmp_path / "c.sqlite3")
    try:
        ids = add_photos(catalog, "/photos", PHOTOS)
        assert load_filter_cache(catalog) is not None
        with catalog.session() as s:
            saved = s.execute(
                text("SELECT name, sql FROM sqlite_master WHERE type = 'trigger' "
                     "AND tbl_name = 'images' AND name LIKE 'images_generation%'")
            ).all()  # fmt: skip
            assert saved
            for name, _sql in saved:
                s.execute(text(f"DROP TRIGGER {name}"))
            s.execute(
                update(Image)
                .where(Image.id == ids["well-inside"])
                .values(observed_at=datetime(1999, 7, 7))
            )
            for _name, sql in saved:
                s.execute(text(sql))
        assert answers(catalog) == expected(catalog)
    finally:
        wait_for_filter_cache(catalog)
        catalog.dispose()
