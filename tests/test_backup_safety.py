"""Safety backups that keep the user's work: a restore is one exclusive step with its safety
backup, special backups outlive the session rotation, judgments-only backups of any catalog
(SQLite or a PostgreSQL server) are restored by photo path, and forgetting photos of a folder
that looks unmounted is refused."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import func, select

from app.cli import main
from engine.catalog import Collection, Image, JudgmentEvent
from engine.catalog.backup import (
    backup_catalog,
    backup_judgments,
    catalog_counts,
    list_backups,
    safety_backup,
)
from engine.catalog.backup_source import KIND_FULL, KIND_JUDGMENTS
from engine.catalog.library import Library
from engine.catalog.restore import restore_backup, restore_catalog
from engine.errors import QuadratError
from engine.judgments.queries import QueryStore
from tests.catalogs import add_plain_photos, folder_url


def image_ids(library: Library) -> list[int]:
    with library.catalog.session() as s:
        return list(s.scalars(select(Image.id).order_by(Image.id)))


def judged_in_file(path: Path, query_id: int) -> set[int]:
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT image_id FROM judgments WHERE query_id = ?", (query_id,))
        return {image_id for (image_id,) in rows}
    finally:
        conn.close()


# -- a restore while another session judges -----------------------------------------------------


def test_restores_while_another_session_judges_lose_no_acknowledged_judgment(tmp_path):
    """Every judgment acknowledged to the judging session is in a before-restore backup (made
    before that restore) or in the catalog (made after the last one): none falls between the
    safety backup and the copy."""
    root = tmp_path / "lib"
    with Library.open(root) as lib:
        add_plain_photos(lib, tmp_path / "photos", 600)
        ids = image_ids(lib)
        qid = QueryStore(lib).find_or_create_query("godwits probing mud")
        base = backup_catalog(root, lib.catalog.engine.url, reason="manual")  # no judgments

        judge_session = Library.open(root)  # another session, with its own connections
        store = QueryStore(judge_session, user="judge")
        acknowledged: list[int] = []
        stop = threading.Event()

        def judge() -> None:
            for image_id in ids:  # one new photo each time: every judgment can be found
                if stop.is_set():
                    return
                try:
                    store.judge(qid, image_id, 1)
                except QuadratError:
                    continue  # not acknowledged: nothing promised
                acknowledged.append(image_id)

        thread = threading.Thread(target=judge)
        thread.start()
        safeties = []
        try:
            for _ in range(6):
                seen = len(acknowledged)
                deadline = time.monotonic() + 30
                while len(acknowledged) < seen + 3 and time.monotonic() < deadline:
                    time.sleep(0.002)
                with lib.writer_lock():
                    safeties.append(restore_catalog(root, lib.catalog.engine.url, base))
        finally:
            stop.set()
            thread.join()
            judge_session.close()
        assert len(acknowledged) >= 18
        kept = set(QueryStore(lib).judgments(qid))
        for safety in safeties:
            kept |= judged_in_file(safety, qid)
        lost = [image_id for image_id in acknowledged if image_id not in kept]
        assert lost == []
        assert all("before-restore" in s.name for s in safeties)
        assert all(s.exists() for s in safeties)  # special: not rotated away by the others


# -- special backups and the rotation ------------------------------------------------------------


@pytest.fixture
def library(tmp_path):
    """A SQLite library with ten photos and one query judged on three of them."""
    with Library.open(tmp_path / "lib") as lib:
        add_plain_photos(lib, tmp_path / "photos", 10)
        ids = image_ids(lib)
        store = QueryStore(lib)
        qid = store.find_or_create_query("frogs in amplexus")
        for image_id, rel in zip(ids[:3], (1, 0, 1), strict=True):
            store.judge(qid, image_id, rel)
        lib.test_ids = ids  # type: ignore[attr-defined]
        lib.test_qid = qid  # type: ignore[attr-defined]
        yield lib


def test_special_backups_outlive_the_session_rotation(library, capsys):
    root = library.root
    before_import = safety_backup(root, library, "before-import")
    store = QueryStore(library)
    for i in range(6):  # six small sessions after the import, each backed up
        store.judge(library.test_qid, library.test_ids[3 + i], 1)
        backup_catalog(root, library.catalog.engine.url, reason="session")
    infos = list_backups(root)
    paths = [info.path for info in infos]
    assert before_import in paths  # the pre-import state is still there
    assert sum(not info.special for info in infos) == 5
    (special,) = [info for info in infos if info.special]
    assert (special.reason, special.judgments, special.kind) == ("before-import", 3, KIND_FULL)

    assert main(["backup", "--list", "--library", str(root), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [item["special"] for item in listed].count(True) == 1
    assert main(["backup", "--list", "--library", str(root)]) == 0
    out = capsys.readouterr().out
    (line,) = [line for line in out.splitlines() if "before-import" in line]
    assert "special" in line and "full" in line


# -- judgments-only backups --------------------------------------------------------------------


@pytest.fixture
def any_library(tmp_path, catalog_url, monkeypatch):
    """A library on each catalog (SQLite, PostgreSQL) with twenty photos, a query judged on
    five of them (one judged twice), a saved run and a subquery."""
    with Library.open(tmp_path / "lib", database_url=folder_url(catalog_url, monkeypatch)) as lib:
        add_plain_photos(lib, tmp_path / "photos", 20)
        ids = image_ids(lib)
        store = QueryStore(lib, user="ana")
        qid = store.find_or_create_query("a heron swallowing a fish")
        for image_id in ids[:5]:
            store.judge(qid, image_id, 1)
        store.judge(qid, ids[0], 0)
        store.save_run(
            qid, "text", [(image_id, 1.0 - i / 10) for i, image_id in enumerate(ids[:10])]
        )
        lib.test_ids = ids  # type: ignore[attr-defined]
        lib.test_qid = qid  # type: ignore[attr-defined]
        yield lib


def test_a_judgments_only_backup_restores_by_photo_path(any_library):
    lib, qid, ids = any_library, any_library.test_qid, any_library.test_ids
    store = QueryStore(lib)
    saved = store.judgments(qid)
    backup = backup_judgments(lib.root, lib.catalog.engine.url)
    assert backup.name.startswith("judgments-") and backup.name.endswith("-manual.sqlite3")
    (info,) = list_backups(lib.root)
    assert (info.kind, info.judgments, info.queries) == (KIND_JUDGMENTS, 5, 1)
    conn = sqlite3.connect(backup)
    try:  # no vectors, no photo metadata: only what the judgments and runs name
        tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master")}
        assert "embeddings" not in tables and "taxa" not in tables
        assert conn.execute("SELECT count(*) FROM images").fetchone()[0] == 10
        assert conn.execute("SELECT count(*) FROM judgment_events").fetchone()[0] == 6
        assert conn.execute("SELECT count(*) FROM run_results").fetchone()[0] == 10
    finally:
        conn.close()

    # Work after the backup; and two photos renamed, so they cannot be matched any more.
    store.clear_judgments(qid)
    store.judge(qid, ids[12], 1)
    with lib.catalog.session() as s:
        for image_id in ids[3:5]:
            s.get(Image, image_id).rel_path = f"renamed-{image_id}.jpg"
    with lib.writer_lock():
        restored = restore_backup(lib.root, lib.catalog.engine.url, backup)
    assert (restored.unmatched_photos, restored.dropped_judgments) == (2, 2)
    assert store.judgments(qid) == {k: v for k, v in saved.items() if k not in ids[3:5]}
    history = store.judgment_history(qid)
    assert [(h.image_id, h.judged_by) for h in history][:2] == [(ids[0], "ana"), (ids[1], "ana")]
    assert len(history) == 6 - 2
    # The safety backup holds the work done after the backup, and restores it back.
    assert "before-restore" in restored.safety.name
    with lib.writer_lock():
        restore_backup(lib.root, lib.catalog.engine.url, restored.safety)
    assert store.judgments(qid) == {ids[12]: 1}
    # New work after a restore gets new ids (a server's sequences follow the restored rows).
    other = store.find_or_create_query("a second question")
    store.judge(other, ids[1], 1)
    assert store.judgments(other) == {ids[1]: 1}


def test_the_cli_backs_up_judgments_only_and_says_what_could_not_be_matched(library, capsys):
    root = library.root
    assert main(["backup", "--judgments-only", "--library", str(root)]) == 0
    path = Path(capsys.readouterr().out.strip())
    assert path.name.startswith("judgments-")
    with library.catalog.session() as s:
        s.get(Image, library.test_ids[0]).rel_path = "elsewhere.jpg"
    assert main(["restore", str(path), "--library", str(root), "--yes"]) == 0
    out = capsys.readouterr().out
    assert "judgments: 3 -> 2" in out
    assert "1 photo of the backup is not in this library (1 judgment on it not restored)" in out


def test_a_server_catalogs_safety_backup_is_judgments_only(tmp_path, postgres_url, monkeypatch):
    url = folder_url(postgres_url, monkeypatch)
    with Library.open(tmp_path / "lib", database_url=url) as lib:
        add_plain_photos(lib, tmp_path / "photos", 3)
        store = QueryStore(lib)
        qid = store.find_or_create_query("lichens on granite")
        store.judge(qid, image_ids(lib)[0], 1)
        path = safety_backup(lib.root, lib.catalog.engine.url, "before-import")
    assert path.parent == tmp_path / "lib" / "backups"
    (info,) = list_backups(tmp_path / "lib")
    assert (info.kind, info.special, info.judgments) == (KIND_JUDGMENTS, True, 1)


def test_a_judgments_only_backup_is_much_smaller_than_a_full_one(library):
    """The vectors stay out: a full backup grows with the photos, a judgments-only one with
    the judgments."""
    with library.catalog.session() as s:
        coll = s.scalar(select(Collection.id))
        s.add_all(
            Image(
                collection_id=coll, rel_path=f"more/{i}.jpg", size=1, mtime_ns=1, notes="x" * 200
            )  # fmt: skip
            for i in range(3000)
        )
    full = backup_catalog(library.root, library.catalog.engine.url)
    only = backup_judgments(library.root, library.catalog.engine.url)
    assert only.stat().st_size * 10 < full.stat().st_size
    assert catalog_counts(sqlite3.connect(only)) == catalog_counts(library)


# -- forgetting photos ---------------------------------------------------------------------------


def mark_missing(library: Library, image_ids: list[int]) -> None:
    from engine.catalog.models import STATUS_MISSING

    with library.catalog.session() as s:
        for image_id in image_ids:
            s.get(Image, image_id).status = STATUS_MISSING


def photo_count(library: Library) -> int:
    with library.catalog.session() as s:
        return s.scalar(select(func.count()).select_from(Image)) or 0


@pytest.fixture
def judged_photos(tmp_path, catalog_url, monkeypatch):
    """A library on each catalog with a collection of 40 photos (its folder exists), every
    one judged by a query."""
    folder = tmp_path / "photos"
    folder.mkdir()
    with Library.open(tmp_path / "lib", database_url=folder_url(catalog_url, monkeypatch)) as lib:
        add_plain_photos(lib, folder, 40)
        ids = image_ids(lib)
        store = QueryStore(lib, user="lab")
        qid = store.find_or_create_query("bees on thistles")
        for image_id in ids:
            store.judge(qid, image_id, image_id % 2)
        lib.test_ids = ids  # type: ignore[attr-defined]
        lib.test_qid = qid  # type: ignore[attr-defined]
        lib.test_folder = folder  # type: ignore[attr-defined]
        yield lib


def test_forgetting_a_half_mounted_or_unmounted_folder_is_refused(judged_photos, capsys):
    from engine.catalog.reads import LooksUnmountedError
    from engine.indexing.collections import forget_missing

    lib, ids = judged_photos, judged_photos.test_ids
    mark_missing(lib, ids[:20])  # half of the share did not come back
    with pytest.raises(LooksUnmountedError, match="20 of the 40 photos") as info:
        forget_missing(lib)
    assert "\n" not in str(info.value) and "--even-if-unmounted" in str(info.value)
    code = main(["forget", "--yes", "--library", str(lib.root)])
    assert code != 0 and "half mounted" in capsys.readouterr().err
    lib.test_folder.rmdir()  # the whole share is gone
    with pytest.raises(LooksUnmountedError, match="is not there"):
        forget_missing(lib)
    assert photo_count(lib) == 40
    assert len(QueryStore(lib).judgments(judged_photos.test_qid)) == 40
    assert list_backups(lib.root) == []  # refused before anything, a backup included

    # Said explicitly: forgotten, after a special backup holding what goes.
    code = main(["forget", "--yes", "--even-if-unmounted", "--library", str(lib.root)])
    assert code == 0, capsys.readouterr().err
    assert "20 missing photos forgotten, with 20 judgments" in capsys.readouterr().out
    assert photo_count(lib) == 20
    (backup,) = [b for b in list_backups(lib.root) if b.special]
    assert backup.reason == "before-forget" and backup.judgments == 40


def test_forgetting_on_a_server_backs_up_the_judgments_and_events_first(
    tmp_path, postgres_url, monkeypatch
):
    from engine.indexing.collections import forget_missing

    folder = tmp_path / "photos"
    folder.mkdir()
    url = folder_url(postgres_url, monkeypatch)
    with Library.open(tmp_path / "lib", database_url=url) as lib:
        add_plain_photos(lib, folder, 40)
        ids = image_ids(lib)
        store = QueryStore(lib, user="lab")
        qid = store.find_or_create_query("moss on north faces")
        for image_id in ids[:3]:
            store.judge(qid, image_id, 1)
            store.judge(qid, image_id, 0)  # two acts each
        mark_missing(lib, ids[:3])
        forgotten = forget_missing(lib)
        assert (forgotten.photos, forgotten.judgments, forgotten.events) == (3, 3, 6)
        with lib.catalog.session() as s:
            assert s.scalar(select(func.count()).select_from(JudgmentEvent)) == 0
    (backup,) = list_backups(tmp_path / "lib")
    assert (backup.kind, backup.special, backup.judgments) == (KIND_JUDGMENTS, True, 3)
    conn = sqlite3.connect(backup.path)
    try:
        events = conn.execute("SELECT count(*) FROM judgment_events").fetchone()[0]
        paths = {p for (p,) in conn.execute("SELECT rel_path FROM images")}
    finally:
        conn.close()
    assert events == 6 and paths == {"p0.jpg", "p1.jpg", "p2.jpg"}


def test_nothing_is_forgotten_when_the_backup_cannot_be_written(library):
    from engine.indexing.collections import forget_missing

    mark_missing(library, library.test_ids[:2])
    (library.root / "backups").write_text("a file where the folder should be")
    with pytest.raises(QuadratError, match="nothing was forgotten") as info:
        forget_missing(library)
    assert "\n" not in str(info.value)
    assert photo_count(library) == 10
    assert len(QueryStore(library).judgments(library.test_qid)) == 3
