"""A clock offset, an event gap and a frame set apart change photos' times or events in one
transaction with the value that caused them. A process killed at any statement of the change
leaves the deployment, its photos' times and their events agreeing, and undo returns to 0; an
event refresh of 100,000 frames killed in the middle of its write leaves the events as they
were, and the next refresh groups them. On SQLite and PostgreSQL."""

from __future__ import annotations

import multiprocessing
import os
import threading
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, event, select, text

from engine.catalog import Collection, Image
from engine.catalog.library import Library
from engine.catalog.models import Deployment
from engine.indexing.deployments import undo_clock_offset
from engine.indexing.events import event_gap, refresh_events
from tests.catalogs import folder_url

pytestmark = pytest.mark.integration  # (runs processes; the fast lane leaves it out)

START = datetime(2024, 6, 30, 23, 0, 0)
BURST = 10  # frames per burst, 2 s apart; bursts an hour apart, on each camera


def _camera_library(root: Path, url: str | None, frames: int) -> None:
    """`frames` camera frames on two deployments, grouped into events of `BURST` frames."""
    with Library.open(root, database_url=url) as library:
        with library.catalog.session() as s:
            collection = Collection(root="/traps", name="traps")
            s.add(collection)
            s.flush()
            deployments = [
                Deployment(
                    collection_id=collection.id,
                    folder=f"site{n}",
                    camera_serial=f"CAM-{n}",
                    name=f"site{n}",
                )  # fmt: skip
                for n in (1, 2)
            ]
            s.add_all(deployments)
            s.flush()
            _insert_frames(s, collection.id, [d.id for d in deployments], frames)
        refresh_events(library)


def _insert_frames(s: Any, collection_id: int, deployments: list[int], frames: int) -> None:
    """Frame n: camera n // (frames / 2); on each, bursts of `BURST` frames 2 s apart, an hour
    apart. In bulk through each driver (SQLAlchemy's executemany would take minutes on a
    server at 100,000 rows)."""
    half = max(1, frames // 2)
    columns = ("collection_id, rel_path, size, mtime_ns, status, camera_time, observed_at, "
               "camera_serial, deployment_id, added_at, updated_at")  # fmt: skip
    if s.get_bind().dialect.name == "sqlite":
        rows = []
        for n in range(frames):
            camera, k = divmod(n, half)
            moment = START + timedelta(hours=k // BURST, seconds=2 * (k % BURST))
            at = moment.strftime("%Y-%m-%d %H:%M:%S.%f")
            rows.append((collection_id, f"site{camera + 1}/f{n:06d}.jpg", 1, 1, "ok", at, at,
                         f"CAM-{camera + 1}", deployments[camera], at, at))  # fmt: skip
        s.connection().exec_driver_sql(
            f"INSERT INTO images ({columns}) VALUES ({', '.join('?' * 11)})", rows
        )
        return
    s.execute(
        text(
            f"INSERT INTO images ({columns}) SELECT :collection, 'site' || (c + 1) || '/f' || "
            "lpad(g::text, 6, '0') || '.jpg', 1, 1, 'ok', t, t, 'CAM-' || (c + 1), "
            "CASE WHEN c = 0 THEN :first ELSE :second END, t, t FROM (SELECT g, g / :half AS c, "
            "timestamp '2024-06-30 23:00:00' + ((g % :half) / :burst) * interval '1 hour' + "
            "2 * ((g % :half) % :burst) * interval '1 second' AS t "
            "FROM generate_series(0, :frames - 1) AS g) AS frames"
        ),
        {
            "collection": collection_id,
            "first": deployments[0],
            "second": deployments[1],
            "half": half,
            "burst": BURST,
            "frames": frames,
        },  # fmt: skip
    )


def _state(library: Library) -> dict[str, Any]:
    with library.catalog.session() as s:
        deployments = {
            d.id: (d.clock_offset_s, d.previous_clock_offset_s)
            for d in s.scalars(select(Deployment))
        }
        photos = s.execute(
            select(
                Image.id,
                Image.deployment_id,
                Image.camera_time,
                Image.observed_at,
                Image.event_id,
                Image.event_apart,
            ).order_by(Image.id)  # fmt: skip
        ).all()
    return {"deployments": deployments, "photos": [tuple(p) for p in photos],
            "gap": event_gap(library)}  # fmt: skip


def _assert_agrees(library: Library) -> dict[str, Any]:
    """Every photo's time is its camera's plus its deployment's offset, and its event is the
    one a fresh grouping gives (a refresh changes nothing). The state, for comparisons."""
    state = _state(library)
    for _id, deployment, camera, observed, _event, _apart in state["photos"]:
        offset = state["deployments"][deployment][0]
        assert observed == camera + timedelta(seconds=offset), (deployment, offset)
    refresh_events(library)
    assert _state(library) == state, "the events did not follow the times, gap or frames apart"
    return state


def _die_at(statement: int) -> None:
    """From now on, die (like kill -9) just before this process's `statement`th statement."""
    seen = 0

    def count(*_args: Any) -> None:
        nonlocal seen
        seen += 1
        if seen == statement:
            os._exit(9)

    event.listen(Engine, "before_cursor_execute", count)


def _change(root: str, url: str | None, what: str, statement: int) -> None:
    """In a child: open the library, then make the change `what`, dying at its `statement`th
    statement (0: never, and the exit status is 100 + the statements it ran)."""
    from engine.indexing.deployments import list_deployments, set_clock_offset
    from engine.indexing.events import set_apart, set_event_gap

    library = Library.open(root, database_url=url)
    deployment = list_deployments(library)[0].id
    with library.catalog.session() as s:
        first = s.scalar(select(Image.id).where(Image.deployment_id == deployment).limit(1))
    counted = [0]

    def count(*_args: Any) -> None:
        counted[0] += 1

    if statement:
        _die_at(statement)
    else:
        event.listen(Engine, "before_cursor_execute", count)
    if what == "offset":
        set_clock_offset(library, deployment, 3600)
    elif what == "undo":
        undo_clock_offset(library, deployment)
    elif what == "gap":
        set_event_gap(library, 7200)
    else:
        set_apart(library, int(first), True)
    os._exit(100 + counted[0] if not statement else 0)


def _run(target: Any, *args: Any) -> int:
    child = multiprocessing.get_context("fork").Process(target=target, args=args)
    child.start()
    child.join(300)
    assert child.exitcode is not None, "the child hung"
    return child.exitcode


@pytest.mark.parametrize("what", ["offset", "undo", "gap", "apart"])
def test_a_change_killed_at_any_statement_leaves_times_and_events_agreeing(
    what: str, tmp_path: Path, catalog_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = None if catalog_url.startswith("sqlite") else folder_url(catalog_url, monkeypatch)
    root = tmp_path / "lib"
    _camera_library(root, url, 40)
    if what == "undo":  # a change to undo: +1 h, done whole
        assert _run(_change, str(root), url, "offset", 0) >= 100
    with Library.open(root, database_url=url) as library:
        before = _assert_agrees(library)
    statements = _run(_change, str(root), url, what, 0) - 100  # (the change made whole)
    assert 0 < statements < 100
    with Library.open(root, database_url=url) as library:
        after = _assert_agrees(library)
    assert after != before
    killed_between = 0
    for statement in range(1, statements + 1):
        # Put the state back as it was (the whole change undone by hand), then kill.
        _restore(root, url, before)
        assert _run(_change, str(root), url, what, statement) == 9
        with Library.open(root, database_url=url) as library:
            state = _assert_agrees(library)
        assert state in (before, after), f"killed at statement {statement}: half a change"
        killed_between += state == before
        if what in ("offset", "undo"):  # one undo (or the undo tried again) returns to 0
            with Library.open(root, database_url=url) as library:
                deployment = min(state["deployments"])
                if state["deployments"][deployment][0] != 0:
                    undo_clock_offset(library, deployment)
                _assert_agrees(library)
                final = _state(library)["deployments"][deployment][0]
            assert final == 0, f"killed at statement {statement}: undo went to {final}"
    assert killed_between >= 1


def _restore(root: Path, url: str | None, state: dict[str, Any]) -> None:
    """Write `state` (deployments' offsets, photos' times and events, the gap) back."""
    from sqlalchemy import update

    from engine.catalog import LibraryMeta
    from engine.indexing.events import META_EVENT_GAP

    with Library.open(root, database_url=url) as library, library.catalog.session() as s:
        for deployment, (offset, previous) in state["deployments"].items():
            s.execute(update(Deployment).where(Deployment.id == deployment)
                      .values(clock_offset_s=offset, previous_clock_offset_s=previous))  # fmt: skip
        for image_id, _d, _camera, observed, event_id, apart in state["photos"]:
            s.execute(update(Image).where(Image.id == image_id)
                      .values(observed_at=observed, event_id=event_id, event_apart=apart))  # fmt: skip
        s.merge(LibraryMeta(key=META_EVENT_GAP, value=str(state["gap"])))


def _gap_and_die_mid_write(root: str, url: str | None) -> None:
    """In a child: set a gap that joins every burst, dying halfway through writing the
    100,000 frames' new events."""
    from engine.indexing.events import set_event_gap

    library = Library.open(root, database_url=url)

    def mid_write(_conn: Any, cursor: Any, statement: str, *_args: Any) -> None:
        if not statement.startswith("UPDATE images SET event_id"):
            return
        if library.catalog.engine.dialect.name == "sqlite":
            ticks = [0]

            def tick() -> int:
                ticks[0] += 1
                if ticks[0] > 2_000:  # well into the write, far from its end
                    os._exit(9)
                return 0

            cursor.connection.set_progress_handler(tick, 100)
        else:
            threading.Timer(0.2, os._exit, (9,)).start()

    event.listen(Engine, "before_cursor_execute", mid_write)
    set_event_gap(library, 7200)
    os._exit(0)


@pytest.mark.slow
def test_an_event_refresh_of_100_000_frames_killed_mid_write_leaves_the_events_as_they_were(
    tmp_path: Path, catalog_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = None if catalog_url.startswith("sqlite") else folder_url(catalog_url, monkeypatch)
    root = tmp_path / "lib"
    frames = 100_000
    _camera_library(root, url, frames)
    with Library.open(root, database_url=url) as library:
        before = _state(library)
    assert len({p[4] for p in before["photos"]}) == frames // BURST
    assert _run(_gap_and_die_mid_write, str(root), url) == 9
    with Library.open(root, database_url=url) as library:
        assert _state(library) == before  # the gap and every event as they were
        assert refresh_events(library) == frames // BURST
        from engine.indexing.events import set_event_gap

        assert set_event_gap(library, 7200) == 2  # one event a camera: the bursts an hour apart
