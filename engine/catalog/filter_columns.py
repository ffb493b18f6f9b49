"""The filter columns of photos catalogued before migration 0012, filled after the upgrade.

Migration 0012 adds `observed_date`, `observed_year` and `observed_month` (and, on SQLite, the
R*Tree `image_places`) with triggers that keep them right for every row written from then on.
The rows already there are filled here, a chunk of ids per transaction, because at 5 million
photos that is minutes of writing: the upgrade itself stays one short transaction, progress is
reported, and a fill that is stopped (a kill, a closed window, a full disk) goes on from the
last committed chunk next time. Until the fill is done the filters read `observed_at`,
`latitude` and `longitude` as before (`filter_columns_filled`), so answers never depend on it.
"""

from __future__ import annotations

import logging

from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from engine.catalog.db import Catalog
from engine.catalog.models import Image, LibraryMeta
from engine.progress import CancelToken, ProgressCallback, RateMeter, no_progress

log = logging.getLogger(__name__)

FILLED_KEY = "filter_columns"  # "filled" once every row catalogued before 0012 is done
FILLED_TO_KEY = "filter_columns_filled_to"  # the highest image id filled so far
FILLED = "filled"
# Ids per transaction: about a second of writing at a time, so a reader (a search) never waits
# long for the write lock, and a kill loses at most that much work.
CHUNK = 50_000
# Serializes fills of two processes on one catalog (the window and a script): a chunk at a time.
_FILL_LOCK_KEY = (0x5144_5254, 12)

# What migration 0012's triggers compute, for the rows written before them (kept equal to the
# migration's statements; tests/test_filters_indexed.py compares the two paths' answers).
_SQLITE_FILL = (
    "UPDATE images SET observed_date = substr(observed_at, 1, 10), "
    "observed_year = CAST(substr(observed_at, 1, 4) AS INTEGER), "
    "observed_month = CAST(substr(observed_at, 6, 2) AS INTEGER) "
    "WHERE id > :start AND id <= :end AND observed_at IS NOT NULL"
)
_SQLITE_PLACES = (
    "INSERT OR REPLACE INTO image_places (id, min_lat, max_lat, min_lon, max_lon, latitude, "
    "longitude) SELECT id, latitude, latitude, longitude, longitude, latitude, longitude "
    "FROM images WHERE id > :start AND id <= :end AND status = 'ok' "
    "AND latitude IS NOT NULL AND longitude IS NOT NULL"
)
_POSTGRES_FILL = (
    "UPDATE images SET observed_date = observed_at::date, "
    "observed_year = extract(year FROM observed_at)::integer, "
    "observed_month = extract(month FROM observed_at)::integer "
    "WHERE id > :start AND id <= :end AND observed_at IS NOT NULL"
)


PLACES_TABLE = "image_places"  # SQLite's R*Tree of the searched photos' places (0012)
PLACE_INDEX = "ix_images_ok_place"  # PostgreSQL's GiST index of the same (0012)


def is_places_object(name: str) -> bool:
    """Whether a table or index is the places' R*Tree (or one of its shadow tables) or GiST
    index: made by migration 0012, not described by a model."""
    return name in (PLACE_INDEX, PLACES_TABLE) or name.startswith(PLACES_TABLE + "_")


def _meta(session: Session, key: str) -> str | None:
    row = session.get(LibraryMeta, key)
    return None if row is None else row.value


def _set_meta(session: Session, key: str, value: str) -> None:
    row = session.get(LibraryMeta, key)
    if row is None:
        session.add(LibraryMeta(key=key, value=value))
    else:
        row.value = value


def filter_columns_filled(session: Session) -> bool:
    """Whether every photo's filter columns (and place in the R*Tree) can be trusted."""
    return _meta(session, FILLED_KEY) == FILLED


def fill_filter_columns(
    catalog: Catalog,
    progress: ProgressCallback = no_progress,
    cancel: CancelToken | None = None,
    chunk: int = CHUNK,
) -> int:
    """Fill the filter columns of the photos catalogued before migration 0012, `chunk` ids per
    transaction, from where an earlier fill stopped. Returns the number of ids gone over (0
    when there was nothing to do). `cancel` stops it between chunks (`Cancelled`); what was
    committed stays, and the next call goes on from there."""
    with catalog.session() as s:
        if filter_columns_filled(s):
            return 0
        start = int(_meta(s, FILLED_TO_KEY) or 0)
        # Rows with a higher id are written after the triggers: they are right already.
        last = int(s.scalar(select(func.max(Image.id))) or 0)
    first = start
    meter = RateMeter(max(last - first, 0))
    if last > start:
        log.info("filling the filter columns of ids %d to %d", start + 1, last)
    while start < last:
        if cancel is not None:
            cancel.check()
        end = min(start + chunk, last)
        with catalog.session() as s:
            catalog.serialize(s, _FILL_LOCK_KEY)
            # Another process may have filled this chunk meanwhile.
            if int(_meta(s, FILLED_TO_KEY) or 0) < end:
                bounds = {"start": start, "end": end}
                if catalog.is_server:
                    s.execute(text(_POSTGRES_FILL), bounds)
                else:
                    s.execute(text(_SQLITE_FILL), bounds)
                    s.execute(text(_SQLITE_PLACES), bounds)
                _set_meta(s, FILLED_TO_KEY, str(end))
        start = end
        progress(meter.update(end - first, "preparing the date and place filters"))
    with catalog.session() as s:
        _set_meta(s, FILLED_KEY, FILLED)
    return last - first
