"""The fill of the filter columns after an upgrade (photos catalogued before migration 0012),
killed at any statement or run out of disk: every date, month and box filter keeps the answers
reading every row gives, the fill goes on from its last committed chunk, and a full disk
costs the search nothing (the filters read every row until the fill is done)."""

from __future__ import annotations

import logging
import multiprocessing
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import Engine, event, select, text

from engine.catalog import Image, LibraryMeta, open_catalog
from engine.catalog.filter_columns import (
    FILLED_KEY,
    FILLED_TO_KEY,
    fill_filter_columns,
    filter_columns_filled,
)
from tests.small_disk import small_tmpfs
from tests.test_filters_indexed import PHOTOS, _catalog_before_0012, assert_every_case_agrees

pytestmark = pytest.mark.integration  # (runs processes; the fast lane leaves it out)

CHUNK = 4


def _fill_and_die_at(url: str, statement: int) -> None:
    """In a child: fill `CHUNK` ids at a time, dying (like kill -9) just before the fill's
    `statement`th statement (0: never; the exit status is then 100 + the statements run)."""
    catalog = open_catalog(url)
    seen = [0]

    def count(*_args: Any) -> None:
        seen[0] += 1
        if seen[0] == statement:
            os._exit(9)

    event.listen(Engine, "before_cursor_execute", count)
    fill_filter_columns(catalog, chunk=CHUNK)
    os._exit(100 + seen[0])


def _run(url: str, statement: int) -> int:
    child = multiprocessing.get_context("fork").Process(
        target=_fill_and_die_at, args=(url, statement)
    )
    child.start()
    child.join(120)
    assert child.exitcode is not None, "the child hung"
    return child.exitcode


def _unfill(url: str) -> None:
    """Back to the state the upgrade leaves: no column filled, no place in the R*Tree."""
    catalog = open_catalog(url)
    try:
        with catalog.session() as s:
            s.execute(text("UPDATE images SET observed_date = NULL, observed_year = NULL, "
                           "observed_month = NULL"))  # fmt: skip
            if not catalog.is_server:
                s.execute(text("DELETE FROM image_places"))
            s.execute(text(f"DELETE FROM library_meta WHERE key IN ('{FILLED_KEY}', "
                           f"'{FILLED_TO_KEY}')"))  # fmt: skip
    finally:
        catalog.dispose()


@pytest.mark.slow  # (a fork and a check per statement: 25-40 s)
def test_a_fill_killed_at_any_statement_keeps_every_answer_and_goes_on(
    catalog_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _catalog_before_0012(catalog_url)
    open_catalog(catalog_url).dispose()  # upgraded, not filled
    statements = _run(catalog_url, 0) - 100
    assert 0 < statements < 100
    for statement in range(1, statements + 1):
        _unfill(catalog_url)
        assert _run(catalog_url, statement) == 9
        catalog = open_catalog(catalog_url)
        try:
            with catalog.session() as s:
                filled_to = int(s.scalar(
                    select(LibraryMeta.value).where(LibraryMeta.key == FILLED_TO_KEY)) or 0
                )  # fmt: skip
                assert not filter_columns_filled(s) or filled_to == len(PHOTOS)
                months = dict(s.execute(select(Image.id, Image.observed_month)).all())
            # Committed chunks whole: every dated photo up to the mark filled, none past it.
            assert filled_to % CHUNK == 0 or filled_to == len(PHOTOS)
            for image_id, observed, _, _, _ in _dated(catalog):
                assert (months[image_id] is not None) == (image_id <= filled_to), statement
                assert observed is not None
            assert_every_case_agrees(catalog, monkeypatch)
            fill_filter_columns(catalog, chunk=CHUNK)  # goes on from the mark
            with catalog.session() as s:
                assert filter_columns_filled(s)
            assert_every_case_agrees(catalog, monkeypatch)
        finally:
            catalog.dispose()


def _dated(catalog: Any) -> list[tuple[Any, ...]]:
    with catalog.session() as s:
        return [
            tuple(row)
            for row in s.execute(
                select(
                    Image.id, Image.observed_at, Image.latitude, Image.longitude, Image.status
                ).where(Image.observed_at.is_not(None))
            )
        ]


def _fill_the_disk(disk: Path, leave_kib: int) -> Path:
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)
    size = filler.stat().st_size
    with open(filler, "r+b") as handle:
        handle.truncate(max(0, size - leave_kib * 1024))
    return filler


@pytest.mark.parametrize("leave_kib", [32, 64])
def test_a_search_on_a_full_disk_before_the_fill_answers_from_every_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
    leave_kib: int,
) -> None:  # fmt: skip
    from engine.catalog import Embedding
    from engine.catalog.library import Library
    from engine.search.filters import SearchFilters, filtered_ids

    with small_tmpfs(tmp_path / "disk", "4M") as disk:
        root = disk / "lib"
        root.mkdir()
        _catalog_before_0012(f"sqlite:///{root / 'catalog.sqlite3'}")
        with Library.open(root) as library:  # upgraded while there is room
            with library.catalog.session() as s:
                s.add(Embedding(image_id=1, model_key="m", vector=np.ones(4, np.float32).tobytes()))
            library.vector_index("m")  # the index file written, as a first search does
            with library.catalog.session() as s:  # as if that fill had never run
                s.execute(text(f"DELETE FROM library_meta WHERE key IN ('{FILLED_KEY}', "
                               f"'{FILLED_TO_KEY}')"))  # fmt: skip
                s.execute(text("UPDATE images SET observed_month = NULL"))
        filler = _fill_the_disk(disk, leave_kib)
        with Library.open(root) as library, caplog.at_level(logging.WARNING):
            index = library.vector_index("m")  # the fill cannot write: the search goes on
            assert index is not None
            feb = filtered_ids(library.catalog, SearchFilters(months=(2, 2)))
            assert [int(i) for i in feb] == [1]  # the leap day, read from observed_at
            with library.catalog.session() as s:
                filled = filter_columns_filled(s)
            if not filled:
                lines = [
                    r.getMessage()
                    for r in caplog.records
                    if r.levelno >= logging.WARNING and "filter" in r.getMessage()
                ]
                assert len(lines) == 1 and "\n" not in lines[0], lines
        filler.unlink()
        with Library.open(root) as library:
            library.vector_index("m")
            with library.catalog.session() as s:
                assert filter_columns_filled(s)
            assert_every_case_agrees(library.catalog, monkeypatch)
