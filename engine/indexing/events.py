"""Events: the frames one camera took close together in time (a camera trap's burst, a
photographer's series), grouped so a search can show one result per event.

Frames are grouped per camera (the photo's deployment, else its folder with the EXIF make,
model and serial) in time order; a frame more than the gap after the previous one starts a new
event (the "independence interval" of camera-trap tools; a gap of exactly the interval stays
in the event). Times are the catalog's (`observed_at`: the camera clock plus its deployment's
clock offset), taken back to UTC where the EXIF gave an offset, so a burst across midnight or
a daylight-saving change stays one event. An event's id is the image id of its first frame
(ties by the smaller id). An undated photo, a photo whose time is not its camera's (a metadata
file's: iNat observations of one day are no burst), and a frame set apart by the user
(`images.event_apart`) are events of their own; a photo never grouped keeps a NULL event id,
read as its own id.

`group_events` is the pure grouping (numpy, about 10 ms for 50,000 frames);
`refresh_events` reads the catalog, groups and writes the ids that changed; the gap is a
library setting (`event_gap`, `set_event_gap`), since the ids it gives are stored.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any
from typing import cast as cast_type

import numpy as np
from sqlalchemy import Connection, Select, String, cast, distinct, func, or_, select

from engine.catalog.library import Library
from engine.catalog.models import STATUS_OK, Image, LibraryMeta
from engine.errors import BadInputError

DEFAULT_EVENT_GAP_S = 60
MAX_EVENT_GAP_S = 24 * 3600
META_EVENT_GAP = "event_gap_seconds"


def group_events(
    ids: np.ndarray, cameras: np.ndarray, seconds: np.ndarray, gap: float
) -> np.ndarray:
    """The event id of each frame: `ids` (int64 image ids), `cameras` (int64, one value per
    camera), `seconds` (float64 times, NaN for undated frames, each its own event). A frame
    joins the previous frame's event when it is of the same camera and at most `gap` seconds
    after it; the event's id is its first frame's id."""
    ids = np.asarray(ids, dtype=np.int64)
    cameras = np.asarray(cameras, dtype=np.int64)
    seconds = np.asarray(seconds, dtype=np.float64)
    events = ids.copy()
    dated = np.flatnonzero(~np.isnan(seconds))
    if len(dated) == 0:
        return events
    order = dated[np.lexsort((ids[dated], seconds[dated], cameras[dated]))]
    camera, moment = cameras[order], seconds[order]
    starts = np.ones(len(order), dtype=bool)
    starts[1:] = (camera[1:] != camera[:-1]) | (np.diff(moment) > gap)
    first_ids = ids[order][starts]
    events[order] = first_ids[np.cumsum(starts) - 1]
    return events


def event_gap(library: Library) -> int:
    """The library's event gap in seconds (60 unless set)."""
    value = library.meta(META_EVENT_GAP)
    try:
        return int(value) if value is not None else DEFAULT_EVENT_GAP_S
    except ValueError:
        return DEFAULT_EVENT_GAP_S


def check_event_gap(seconds: int) -> int:
    """`seconds` when it is a usable gap (0 s to a day), else a one-line BadInputError."""
    if not 0 <= seconds <= MAX_EVENT_GAP_S:
        raise BadInputError(
            f"the event gap must be 0 to {MAX_EVENT_GAP_S} seconds (a day), got {seconds}"
        )
    return seconds


def set_event_gap(library: Library, seconds: int) -> int:
    """Set the library's event gap and group every collection's frames again, in one
    transaction (killed in between, neither the gap nor an event changed); the number of
    events after it."""
    check_event_gap(seconds)
    with library.catalog.session() as s:
        s.merge(LibraryMeta(key=META_EVENT_GAP, value=str(seconds)))
        s.flush()
        return regroup_events(s.connection(), None, seconds)


def as_datetime64(values: Iterable[object]) -> np.ndarray:
    """datetime64[us] of times as the database hands them back (SQLite's text, PostgreSQL's
    datetimes); NaT for None. Parsing the text in numpy is ten times faster than letting the
    driver make 50,000 datetime objects."""
    return np.array(
        [
            "NaT"
            if v is None
            else v
            if isinstance(v, str)
            else np.datetime64(cast_type(datetime, v), "us")
            for v in values
        ],
        dtype="datetime64[us]",
    )


def _utc_seconds(local: np.ndarray, offsets: Iterable[int | None]) -> np.ndarray:
    """Seconds since 1970 of each local time taken back to UTC by its offset in minutes (the
    local clock when the offset is unknown); NaN for NaT."""
    seconds = (local - np.datetime64(0, "us")).astype(np.float64) / 1e6
    seconds[np.isnat(local)] = np.nan
    shift = np.array([o or 0 for o in offsets], dtype=np.float64) * 60.0
    return seconds - shift


def fetch_rows(connection: Connection, stmt: Select[Any]) -> list[tuple[Any, ...]]:
    """The rows of a Core select as the driver gives them (no SQLAlchemy row objects or type
    processing: half a second saved per 50,000 rows). Booleans may come back as 0/1."""
    compiled = stmt.compile(dialect=connection.dialect)
    params = compiled.construct_params()
    args = (
        tuple(params[name] for name in compiled.positiontup or ())
        if compiled.positional
        else params
    )
    cursor = connection.connection.cursor()
    try:
        cursor.execute(str(compiled), args)
        return list(cursor.fetchall())
    finally:
        cursor.close()


def write_column(connection: Connection, column: str, pairs: list[tuple[object, int]]) -> None:
    """Set images.`column` to each pair's value for its image id, through the driver's own
    executemany (SQLAlchemy's would cost a second per 30,000 rows in parameter handling)."""
    if not pairs:
        return
    mark = "?" if connection.dialect.paramstyle == "qmark" else "%s"
    connection.exec_driver_sql(
        f"UPDATE images SET {column} = {mark} WHERE id = {mark}",  # noqa: S608 (our names)
        pairs,
    )


def refresh_events(
    library: Library, collection_id: int | None = None, gap: int | None = None
) -> int:
    """Group the frames of one collection (or all) into events and store the ids that
    changed (one transaction); the number of events among its photos."""
    gap = event_gap(library) if gap is None else gap
    with library.catalog.session() as s:
        return regroup_events(s.connection(), collection_id, gap)


def regroup_events(connection: Connection, collection_id: int | None, gap: int) -> int:
    """`refresh_events` in the caller's transaction, so a change that moves frames (a clock
    offset, a gap, a frame set apart) commits with its events or not at all."""
    table = Image.__table__
    stmt = select(
        table.c.id,
        table.c.collection_id,
        table.c.rel_path,
        table.c.deployment_id,
        table.c.camera_make,
        table.c.camera_model,
        table.c.camera_serial,
        cast(table.c.observed_at, String),  # text, parsed by numpy below
        table.c.observed_utc_offset,
        table.c.event_apart,
        table.c.event_id,
        table.c.camera_time.is_(None),
    ).where(
        table.c.status == STATUS_OK,
        # Only frames timed by a camera group; the others keep (or get back) no event id:
        # at millions of observation photos this reads almost nothing.
        or_(table.c.camera_time.is_not(None), table.c.event_id.is_not(None)),
    )
    if collection_id is not None:
        stmt = stmt.where(table.c.collection_id == collection_id)
    rows = fetch_rows(connection, stmt)
    if not rows:
        return count_events(connection, collection_id)
    columns = list(zip(*rows, strict=True))
    ids = np.array(columns[0], dtype=np.int64)
    camera_keys: dict[tuple[object, ...], int] = {}
    cameras = np.empty(len(rows), dtype=np.int64)
    for i, (collection, rel_path, deployment, make, model, serial) in enumerate(
        zip(*columns[1:7], strict=True)
    ):
        key: tuple[object, ...] = (
            (deployment,)
            if deployment is not None
            else (collection, rel_path.rpartition("/")[0], make, model, serial)
        )
        cameras[i] = camera_keys.setdefault(key, len(camera_keys))
    seconds = _utc_seconds(as_datetime64(columns[7]), columns[8])
    alone = np.array([bool(a) for a in columns[9]], dtype=bool)  # set apart
    seconds[alone] = np.nan  # an event of its own, as an undated frame is
    events = group_events(ids, cameras, seconds, gap)
    no_camera = np.array([bool(n) for n in columns[11]], dtype=bool)
    events[no_camera] = -1  # NULL: its own event, as for any photo never grouped
    stored = np.array([-1 if e is None else e for e in columns[10]], dtype=np.int64)
    changed = np.flatnonzero(stored != events)
    write_column(
        connection,
        "event_id",
        [(None if events[i] < 0 else int(events[i]), int(ids[i])) for i in changed],
    )
    return count_events(connection, collection_id)


def count_events(connection: Connection, collection_id: int | None = None) -> int:
    """The events among the searchable photos (of one collection): the distinct event ids,
    and each photo without one."""
    table = Image.__table__
    stmt = select(
        func.count(distinct(table.c.event_id)),
        func.count() - func.count(table.c.event_id),
    ).where(table.c.status == STATUS_OK)
    if collection_id is not None:
        stmt = stmt.where(table.c.collection_id == collection_id)
    grouped, alone = connection.execute(stmt).one()
    return int(grouped or 0) + int(alone or 0)


def set_apart(library: Library, image_id: int, apart: bool = True) -> int:
    """Set one frame apart from its event (its own event) or put it back; its event id."""
    gap = event_gap(library)
    with library.catalog.session() as s:  # one transaction: the frame and its event
        image = s.get(Image, image_id)
        if image is None:
            raise BadInputError(f"no photo with id {image_id} in the library")
        image.event_apart = apart or None
        s.flush()
        regroup_events(s.connection(), image.collection_id, gap)
        event = s.scalar(select(Image.event_id).where(Image.id == image_id))
    return int(event if event is not None else image_id)
