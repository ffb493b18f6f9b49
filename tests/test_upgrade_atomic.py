"""An upgrade happens whole or not at all, with a backup first.

The library under tests/data/upgrade/ is at an old schema; opening it runs every migration
since. Killed after any statement of that upgrade, or failing on a full disk, it must still
open afterwards with every query and judgment, and a library that an older Quadrat left half
upgraded (its DDL committed statement by statement) must open too.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, event, select

from tests.small_disk import small_tmpfs

pytestmark = pytest.mark.integration  # (runs processes; the fast lane leaves it out)

FIXTURE = Path(__file__).parent / "data" / "upgrade"
EXPECTED = json.loads((FIXTURE / "expected.json").read_text(encoding="utf-8"))
FIXTURE_REVISION = "0004"


def copy_fixture(dest: Path) -> Path:
    return Path(shutil.copytree(FIXTURE / "library", dest))


def revision_of(library_dir: Path) -> str:
    path = library_dir / "catalog.sqlite3"
    try:
        with sqlite3.connect(path) as db:
            return str(db.execute("SELECT version_num FROM alembic_version").fetchone()[0])
    except sqlite3.OperationalError:  # a full disk: no room for the -shm file
        pass
    db = sqlite3.connect(f"file:{path}?immutable=1", uri=True)
    try:
        return str(db.execute("SELECT version_num FROM alembic_version").fetchone()[0])
    finally:
        db.close()


def head_revision() -> str:
    from engine.catalog.db import MIGRATIONS_DIR

    head = ScriptDirectory(str(MIGRATIONS_DIR)).get_current_head()
    assert head is not None
    return head


def assert_intact(library_dir: Path) -> None:
    """Opens, at the newest schema, with every saved query and judgment of the fixture."""
    from engine.catalog import Image
    from engine.catalog.library import Library
    from engine.judgments.queries import QueryStore

    with Library.open(library_dir) as library:
        store = QueryStore(library)
        queries = {q.text: q for q in store.list_queries()}
        assert sorted(queries) == sorted(q["text"] for q in EXPECTED["queries"])
        with library.catalog.session() as s:
            paths = {i: p for i, p in s.execute(select(Image.id, Image.rel_path))}
        for want in EXPECTED["queries"]:
            judged = {paths[i]: r for i, r in store.judgments(queries[want["text"]].id).items()}
            assert judged == want["judgments"]
    assert revision_of(library_dir) == head_revision()


def _open_and_die_at(library_dir: str, statement: int) -> None:
    """In a child process: open the library, dying (like a kill -9) at the given statement."""
    from engine.catalog.library import Library

    seen = 0

    def count(*_args: Any) -> None:
        nonlocal seen
        seen += 1
        if seen == statement:
            os._exit(9)

    event.listen(Engine, "before_cursor_execute", count)
    Library.open(library_dir).close()
    os._exit(0)


def run_in_child(target: Callable[..., None], *args: Any) -> int:
    child = multiprocessing.get_context("fork").Process(target=target, args=args)
    child.start()
    child.join(120)
    assert child.exitcode is not None, "the child hung"
    return child.exitcode


# A child process per statement of every migration since 0004: 186 s alone on a loaded 2-core
# machine, past the default limit when other tests share the cores.
@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_an_upgrade_killed_after_any_statement_leaves_a_library_that_opens(tmp_path: Path):
    # How many statements a whole upgrade of the fixture runs (and that it ends at head).
    probe = copy_fixture(tmp_path / "probe")
    statements = 0

    def count(*_args: Any) -> None:
        nonlocal statements
        statements += 1

    from engine.catalog.library import Library

    event.listen(Engine, "before_cursor_execute", count)
    try:
        Library.open(probe).close()
    finally:
        event.remove(Engine, "before_cursor_execute", count)
    assert revision_of(probe) == head_revision()
    assert statements > 15  # the fixture's upgrade runs every migration since 0004

    killed_mid_upgrade = 0
    for kill_at in range(1, statements + 1):
        library_dir = copy_fixture(tmp_path / f"kill-{kill_at}")
        code = run_in_child(_open_and_die_at, str(library_dir), kill_at)
        if code == 9 and revision_of(library_dir) == FIXTURE_REVISION:
            killed_mid_upgrade += 1
        # Whatever the moment, the catalog is either as it was or wholly upgraded...
        assert revision_of(library_dir) in (FIXTURE_REVISION, head_revision())
        # ... and the next open finishes the job with nothing lost.
        assert_intact(library_dir)
    assert killed_mid_upgrade >= 10


def test_a_backup_is_taken_before_the_upgrade_and_opens_as_it_was(tmp_path: Path):
    from engine.catalog.backup import list_backups

    library_dir = copy_fixture(tmp_path / "library")
    assert_intact(library_dir)
    backups = list_backups(library_dir)
    assert len(backups) == 1
    assert backups[0].path.name.endswith(
        f"-before-upgrade-{FIXTURE_REVISION}-to-{head_revision()}.sqlite3"
    )
    with sqlite3.connect(backups[0].path) as db:
        assert db.execute("SELECT version_num FROM alembic_version").fetchone()[0] == "0004"
        assert db.execute("SELECT count(*) FROM judgments").fetchone()[0] == sum(
            len(q["judgments"]) for q in EXPECTED["queries"]
        )
    # Opening again (already at head) takes no second backup.
    assert_intact(library_dir)
    assert len(list_backups(library_dir)) == 1


def test_no_upgrade_without_its_backup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import engine.catalog.backup
    from engine.catalog.library import Library
    from engine.errors import QuadratError

    library_dir = copy_fixture(tmp_path / "library")

    def no_room(*_args: Any, **_kwargs: Any) -> Path:
        raise QuadratError("cannot write a backup: No space left on device")

    monkeypatch.setattr(engine.catalog.backup, "backup_catalog", no_room)
    with pytest.raises(QuadratError, match="backs it up first.*nothing was changed"):
        Library.open(library_dir)
    assert revision_of(library_dir) == FIXTURE_REVISION
    monkeypatch.undo()
    assert_intact(library_dir)


@pytest.mark.parametrize(
    "half_done",
    [
        # What an older Quadrat's interrupted upgrade left behind: DDL committed one statement
        # at a time while alembic_version still names the old revision.
        ["ALTER TABLE images ADD COLUMN notes TEXT"],
        [
            "ALTER TABLE images ADD COLUMN notes TEXT",
            "CREATE VIRTUAL TABLE record_text USING fts5(names, common, notes)",
            "CREATE TRIGGER record_text_image_removed AFTER DELETE ON images BEGIN "
            "DELETE FROM record_text WHERE rowid = OLD.id; END",
            "INSERT INTO record_text(rowid, names) SELECT id, 'x' FROM images",
        ],
    ],
    ids=["column-added", "text-index-half-built"],
)
def test_a_library_an_older_upgrade_left_half_done_opens(tmp_path: Path, half_done: list[str]):
    library_dir = copy_fixture(tmp_path / "library")
    with sqlite3.connect(library_dir / "catalog.sqlite3") as db:
        for statement in half_done:
            db.execute(statement)
    assert revision_of(library_dir) == FIXTURE_REVISION
    assert_intact(library_dir)
    # The text index was rebuilt from the records, not left with the half-built rows.
    with sqlite3.connect(library_dir / "catalog.sqlite3") as db:
        names = {n for (n,) in db.execute("SELECT names FROM record_text")}
    assert "x" not in names and names


def test_a_library_half_upgraded_to_judgment_events_opens_without_twin_events(tmp_path: Path):
    from alembic import command
    from sqlalchemy import create_engine

    from engine.catalog.db import _alembic_config

    library_dir = copy_fixture(tmp_path / "library")
    # As if 0007 had run all its statements, then died before stamping itself.
    engine = create_engine(f"sqlite:///{library_dir / 'catalog.sqlite3'}")
    with engine.begin() as connection:
        command.upgrade(_alembic_config(connection), "0007")
    engine.dispose()
    judgments = sum(len(q["judgments"]) for q in EXPECTED["queries"])
    with sqlite3.connect(library_dir / "catalog.sqlite3") as db:
        assert db.execute("SELECT count(*) FROM judgment_events").fetchone()[0] == judgments
        db.execute("UPDATE alembic_version SET version_num = '0006'")
    assert_intact(library_dir)
    with sqlite3.connect(library_dir / "catalog.sqlite3") as db:
        assert db.execute("SELECT count(*) FROM judgment_events").fetchone()[0] == judgments


@pytest.mark.parametrize("free_kib", [0, 64, 160, 320, 640])
def test_an_upgrade_on_a_nearly_full_disk_fails_whole_then_succeeds_after_freeing(
    tmp_path: Path, free_kib: int
):
    from engine.catalog.library import Library
    from engine.errors import QuadratError

    with small_tmpfs(tmp_path / "disk", "3M") as disk:
        library_dir = copy_fixture(disk / "library")
        filler = disk / "filler"
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError:
            pass
        finally:
            os.close(fd)
        # Give back what this fill level leaves free.
        size = filler.stat().st_size
        with open(filler, "r+b") as handle:
            handle.truncate(max(0, size - free_kib * 1024))
        try:
            Library.open(library_dir).close()
        except QuadratError as error:  # the app's own advice: free some space, try again
            assert "\n" not in str(error)
            assert "free" in str(error)
            assert revision_of(library_dir) == FIXTURE_REVISION
        filler.unlink()
        assert_intact(library_dir)


def test_opening_a_current_catalog_waits_for_no_writer(tmp_path: Path):
    """A search opening the library while an indexing run holds the write lock opens at once:
    only an upgrade takes the lock (before, every open did, and failed as "locked" when a
    writer held it past the busy timeout)."""
    from engine.catalog.library import Library

    library_dir = copy_fixture(tmp_path / "library")
    Library.open(library_dir).close()  # upgraded: from now on current
    writer = sqlite3.connect(library_dir / "catalog.sqlite3", isolation_level=None)
    try:
        writer.execute("BEGIN IMMEDIATE")  # held until the open below has returned
        Library.open(library_dir).close()
    finally:
        writer.execute("ROLLBACK")
        writer.close()
