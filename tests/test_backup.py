"""Catalog backups: consistent copies, pruning, restore (and its undo), the fingerprint, CLI."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from sqlalchemy import select

import app.cli
from app.cli import main
from app.cli.backup import COMMANDS as BACKUP_COMMANDS
from engine.catalog import Collection, Image
from engine.catalog.backup import (
    backup_catalog,
    backup_if_changed,
    catalog_counts,
    judgment_fingerprint,
    list_backups,
)
from engine.catalog.library import CATALOG_FILE, Library
from engine.catalog.restore import restore_catalog
from engine.errors import BadInputError, QuadratError
from engine.judgments.queries import QueryStore


def add_photos(lib: Library, n: int = 10) -> list[int]:
    with lib.catalog.session() as s:
        coll = Collection(root=str(lib.root / "photos"), name="photos")
        s.add(coll)
        s.flush()
        s.add_all(
            Image(collection_id=coll.id, rel_path=f"p{i}.jpg", size=1, mtime_ns=1) for i in range(n)
        )
    with lib.catalog.session() as s:
        return list(s.scalars(select(Image.id).order_by(Image.id)))


@pytest.fixture
def library(tmp_path):
    """A library with ten photos and one saved query judged on three of them."""
    with Library.open(tmp_path / "lib") as lib:
        ids = add_photos(lib)
        store = QueryStore(lib)
        qid = store.find_or_create_query("frogs in amplexus")
        for image_id, rel in zip(ids[:3], (1, 0, 1), strict=True):
            store.judge(qid, image_id, rel)
        lib.test_ids = ids  # type: ignore[attr-defined]
        lib.test_qid = qid  # type: ignore[attr-defined]
        yield lib


def catalog(lib: Library) -> Path:
    return lib.root / CATALOG_FILE


def test_round_trip_restores_lost_judgments_and_keeps_a_safety_backup(library):
    store = QueryStore(library)
    qid, ids = library.test_qid, library.test_ids
    saved = store.judgments(qid)
    backup = backup_catalog(library.root, catalog(library))
    assert backup.parent == library.root / "backups"
    assert backup.name.startswith("catalog-") and backup.name.endswith("-session.sqlite3")
    assert not list(backup.parent.glob("*-wal")) and not list(backup.parent.glob(".*"))

    store.clear_judgments(qid)
    store.judge(qid, ids[9], 1)  # work done after the backup, kept in the safety backup
    with library.writer_lock():
        safety = restore_catalog(library.root, catalog(library), backup)

    # The open library (and a fresh one) sees the restored judgments.
    assert store.judgments(qid) == saved
    with Library.open(library.root) as reopened:
        assert QueryStore(reopened).judgments(qid) == saved
        assert reopened.catalog.integrity_check() == "ok"
    assert "before-restore" in safety.name
    conn = sqlite3.connect(safety)
    try:
        rows = conn.execute("SELECT image_id, relevance FROM judgments").fetchall()
    finally:
        conn.close()
    assert rows == [(ids[9], 1)]
    # The restore can itself be undone.
    with library.writer_lock():
        restore_catalog(library.root, catalog(library), safety)
    assert store.judgments(qid) == {ids[9]: 1}


def test_backup_taken_before_a_kill_survives_deleting_the_wal(tmp_path):
    """A leftover -wal deleted after a kill: each judgment was checkpointed into the catalog
    file as it was committed, so none is lost; the backup has them too."""
    root = tmp_path / "lib"
    with Library.open(root) as lib:
        ids = add_photos(lib)
    script = textwrap.dedent(
        f"""
        import os, signal
        from pathlib import Path
        from engine.catalog.backup import backup_catalog
        from engine.catalog.library import Library
        from engine.judgments.queries import QueryStore
        lib = Library.open({str(root)!r})
        store = QueryStore(lib)
        qid = store.find_or_create_query("caterpillar")
        for image_id in {ids[:4]!r}:
            store.judge(qid, image_id, 1)
        backup_catalog(lib.root, lib.root / "catalog.sqlite3")
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    wal = root / (CATALOG_FILE + "-wal")
    assert wal.exists()
    wal.unlink()
    (root / (CATALOG_FILE + "-shm")).unlink(missing_ok=True)
    with Library.open(root) as lib:
        assert catalog_counts(lib.catalog.engine) == (4, 1)  # in the file, not only the -wal
        (backup,) = list_backups(root)
        assert (backup.judgments, backup.queries) == (4, 1)
        with lib.writer_lock():
            restore_catalog(root, lib.catalog.engine.url, backup.path)
        assert catalog_counts(lib) == (4, 1)


def test_backup_during_an_open_write_transaction_is_consistent(library):
    before = judgment_fingerprint(library.catalog.engine)
    writer = sqlite3.connect(catalog(library), timeout=10, isolation_level=None)
    try:
        writer.execute("BEGIN IMMEDIATE")
        writer.execute("DELETE FROM judgments")
        writer.execute("INSERT INTO queries (text, created_at, updated_at) VALUES ('x', 0, 0)")
        backup = backup_catalog(library.root, catalog(library))  # must not wait for the writer
        writer.execute("COMMIT")
    finally:
        writer.close()
    conn = sqlite3.connect(backup)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert judgment_fingerprint(conn) == before  # the last committed state, whole
        assert catalog_counts(conn) == (3, 1)
    finally:
        conn.close()
    assert catalog_counts(library) == (0, 2)


def test_backups_while_another_thread_judges_are_whole(library):
    store = QueryStore(library)
    qid, ids = library.test_qid, library.test_ids
    stop = threading.Event()

    def judge_forever():
        i = 0
        while not stop.is_set():
            store.judge(qid, ids[i % 10], i % 2)
            i += 1

    thread = threading.Thread(target=judge_forever)
    thread.start()
    try:
        paths = [backup_catalog(library.root, catalog(library), keep=10) for _ in range(4)]
    finally:
        stop.set()
        thread.join()
    assert len(set(paths)) == 4  # unique names within one second
    for info in list_backups(library.root):
        assert info.judgments is not None and 3 <= info.judgments <= 10


def test_pruning_keeps_the_newest_and_leaves_other_files_alone(library):
    folder = library.root / "backups"
    folder.mkdir()
    foreign = [
        folder / "notes.txt",
        folder / "catalog-old.sqlite3",
        folder / "my-catalog-20000101-000000.sqlite3",
        folder / "catalog-20000101-000000.sqlite3-wal",
    ]
    for path in foreign:
        path.write_text("mine")
    stale = folder / ".catalog-abc.tmp"  # left by a backup a crash interrupted
    stale.write_text("half")
    os.utime(stale, (0, 0))
    made = [backup_catalog(library.root, catalog(library), keep=3) for _ in range(5)]
    infos = list_backups(library.root)
    assert [i.path for i in infos] == made[::-1][:3]  # newest first
    assert all(i.judgments == 3 and i.queries == 1 and i.size > 0 for i in infos)
    assert all(path.read_text() == "mine" for path in foreign)
    assert not stale.exists()
    assert not made[0].exists() and not made[1].exists()
    assert backup_catalog(library.root, catalog(library), keep=1).exists()
    assert len(list_backups(library.root)) == 1


def test_a_backup_of_a_non_catalog_is_refused_and_changes_nothing(library, tmp_path):
    backup_catalog(library.root, catalog(library))
    before_files = sorted((library.root / "backups").iterdir())
    before = judgment_fingerprint(library)
    junk = tmp_path / "junk.sqlite3"
    junk.write_bytes(b"not a database at all" * 100)
    other = tmp_path / "other.sqlite3"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE judgments (x)")
    conn.commit()
    conn.close()
    for bad in (junk, other, tmp_path / "missing.sqlite3"):
        with pytest.raises(BadInputError) as info, library.writer_lock():
            restore_catalog(library.root, catalog(library), bad)
        assert "\n" not in str(info.value)
    assert sorted((library.root / "backups").iterdir()) == before_files
    assert judgment_fingerprint(library) == before


def test_server_catalogs_are_the_servers_job(library):
    url = "postgresql://user:secret@db.example/quadrat"
    with pytest.raises(QuadratError, match="pg_dump") as info:
        backup_catalog(library.root, url)
    assert "secret" not in str(info.value)
    assert backup_if_changed(library.root, url, (0,), (1,)) is None


def test_an_unwritable_backups_folder_fails_with_one_line(library, monkeypatch):
    (library.root / "backups").write_text("a file where the folder should be")
    with pytest.raises(QuadratError) as info:
        backup_catalog(library.root, catalog(library))
    assert "\n" not in str(info.value) and "backups" in str(info.value)

    def full_disk(*_args, **_kwargs):
        raise OSError(28, "No space left on device")

    (library.root / "backups").unlink()
    monkeypatch.setattr("engine.catalog.backup.os.replace", full_disk)
    with pytest.raises(QuadratError, match="the disk is full"):
        backup_catalog(library.root, catalog(library))
    assert list((library.root / "backups").iterdir()) == []  # the partial file is removed


def test_fingerprint_changes_on_add_change_and_undo(library):
    store = QueryStore(library)
    qid, ids = library.test_qid, library.test_ids
    seen = [judgment_fingerprint(library.catalog.engine)]
    added = store.judge(qid, ids[5], 1)
    seen.append(judgment_fingerprint(library.catalog.engine))
    changed = store.judge(qid, ids[5], 0)
    seen.append(judgment_fingerprint(library.catalog.engine))
    store.undo(changed)
    seen.append(judgment_fingerprint(library.catalog.engine))
    store.undo(added)  # deletes the judgment
    seen.append(judgment_fingerprint(library.catalog.engine))
    assert all(a != b for a, b in zip(seen, seen[1:], strict=False))
    assert seen[-1] == seen[0]  # add, change, undo, undo: the table is as it was
    with library.catalog.engine.connect() as conn:  # a SQLAlchemy connection works too
        assert judgment_fingerprint(conn) == seen[-1]

    root, cat = library.root, catalog(library)
    assert backup_if_changed(root, cat, seen[0], judgment_fingerprint(library)) is None
    assert not (root / "backups").exists()
    path = backup_if_changed(root, cat, seen[0], seen[2], keep=2)
    assert path is not None and path.exists() and "session" in path.name


# -- command line ------------------------------------------------------------------------------


@pytest.fixture
def cli(monkeypatch):
    """`app.cli.main` with `backup`/`restore` registered (whether or not cli.py does it yet)."""
    original = app.cli.build_parser

    def build_parser():
        parser = original()
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        if "backup" not in sub.choices:
            for command in BACKUP_COMMANDS:
                command.install(sub)
        return parser

    monkeypatch.setattr(app.cli, "build_parser", build_parser)

    def run(capsys, *argv):
        code = main([str(a) for a in argv])
        out, err = capsys.readouterr()
        return code, out, err

    return run


def test_cli_backup_list_and_restore(cli, capsys, library):
    root = library.root
    code, out, _ = cli(capsys, "backup", "--library", root)
    assert code == 0
    first = Path(out.strip())
    assert first.exists() and first.parent == root / "backups"

    QueryStore(library).clear_judgments(library.test_qid)
    code, out, _ = cli(capsys, "backup", "--library", root, "--keep", "3")
    assert code == 0

    code, out, _ = cli(capsys, "backup", "--list", "--library", root, "--json")
    listed = json.loads(out)
    assert [item["judgments"] for item in listed] == [0, 3]
    assert listed[1]["path"] == str(first) and listed[1]["queries"] == 1

    code, out, err = cli(capsys, "restore", "--library", root)
    assert code == 0 and "quadrat restore N" in err
    assert len(out.strip().splitlines()) == 2

    code, out, err = cli(capsys, "restore", "2", "--library", root)  # no TTY, no --yes
    assert code == 2 and "--yes" in err and len(err.strip().splitlines()) == 1
    assert catalog_counts(library) == (0, 1)

    code, out, _ = cli(capsys, "restore", "2", "--library", root, "--yes")
    assert code == 0, out
    assert "judgments: 0 -> 3" in out and "saved queries: 1 -> 1" in out
    assert catalog_counts(library) == (3, 1)
    newest = list_backups(root)[0]
    assert newest.reason == "before-restore" and newest.judgments == 0
    assert str(newest.path) in out

    code, _, err = cli(capsys, "restore", "9", "--library", root, "--yes")
    assert code == 2 and "no backup number 9" in err
    code, _, err = cli(capsys, "restore", root / CATALOG_FILE, "--library", root, "--yes")
    assert code == 2 and len(err.strip().splitlines()) == 1
