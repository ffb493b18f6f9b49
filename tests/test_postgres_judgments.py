"""Several people judging one query at once, on SQLite and on a PostgreSQL server: every
judgment is kept with who made it and when, and the newest of each photo counts."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from sqlalchemy import func, select

from engine.catalog import Image, JudgmentEvent
from engine.catalog.library import Library
from engine.judgments.queries import QueryStore
from tests.catalogs import add_plain_photos, folder_url

pytestmark = pytest.mark.integration  # (a server and processes; the fast lane leaves it out)

PHOTOS = 10


@pytest.fixture
def library(tmp_path: Path, catalog_url: str, monkeypatch: pytest.MonkeyPatch):
    """A library with ten catalog photos whose folder records `catalog_url` (the password,
    where there is one, comes from the environment, which subprocesses inherit)."""
    with Library.open(tmp_path / "lib", database_url=folder_url(catalog_url, monkeypatch)) as lib:
        add_plain_photos(lib, tmp_path / "photos", PHOTOS)
        yield lib


def image_ids(library: Library) -> list[int]:
    with library.catalog.session() as s:
        return list(s.scalars(select(Image.id).order_by(Image.id)))


def test_every_judgment_is_kept_with_who_and_when(library):
    ids = image_ids(library)
    alice, bob = QueryStore(library, user="alice"), QueryStore(library, user="bob")
    qid = alice.find_or_create_query("fox with mange")
    alice.judge(qid, ids[0], 1)
    bob.judge(qid, ids[0], 0)  # bob disagrees: his is the newest, alice's is kept
    change = alice.judge(qid, ids[1], 1)
    alice.undo(change)  # cleared
    assert alice.judgments(qid) == {ids[0]: 0}
    history = alice.judgment_history(qid)
    assert [(h.image_id, h.relevance, h.judged_by) for h in history] == [
        (ids[0], 1, "alice"),
        (ids[0], 0, "bob"),
        (ids[1], 1, "alice"),
        (ids[1], None, "alice"),
    ]
    times = [h.judged_at for h in history]
    assert times == sorted(times)


# Judges every photo of the query `rounds` times once the start file appears, as `user`.
WORKER = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    from sqlalchemy import select
    from engine.catalog import Image
    from engine.catalog.library import Library
    from engine.judgments.queries import QueryStore

    root, query_id, user, rounds, start = sys.argv[1:6]
    with Library.open(root) as lib:
        store = QueryStore(lib, user=user)
        with lib.catalog.session() as s:
            ids = list(s.scalars(select(Image.id).order_by(Image.id)))
        Path(root, f"ready-{user}").touch()
        while not Path(start).exists():
            time.sleep(0.005)
        made = 0
        for r in range(int(rounds)):
            for image_id in ids:
                store.judge(int(query_id), image_id, (r + made) % 2)
                made += 1
    print(json.dumps({"user": user, "made": made}))
    """
)


def test_processes_judging_the_same_query_at_once_lose_no_judgment(library, tmp_path):
    workers, rounds = 4, 5
    ids = image_ids(library)
    setup = QueryStore(library, user="setup")
    qid = setup.find_or_create_query("moth on lichen")  # no judgment yet: all race to create
    start = tmp_path / "start"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, *map(str, (library.root, qid, f"w{n}", rounds, start))],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(workers)
    ]
    deadline = time.monotonic() + 120
    while len(list(library.root.glob("ready-*"))) < workers and time.monotonic() < deadline:
        if any(p.poll() not in (None, 0) for p in procs):
            break
        time.sleep(0.05)
    start.touch()  # all at once, on the same photos in the same order
    outputs = [p.communicate(timeout=300) for p in procs]
    for proc, (_out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err
    made = {json.loads(out)["user"]: json.loads(out)["made"] for out, _ in outputs}
    assert made == {f"w{n}": rounds * PHOTOS for n in range(workers)}

    with library.catalog.session() as s:
        per_user = dict(
            s.execute(
                select(JudgmentEvent.judged_by, func.count())
                .where(JudgmentEvent.query_id == qid)
                .group_by(JudgmentEvent.judged_by)
            ).all()
        )
    assert per_user == {f"w{n}": rounds * PHOTOS for n in range(workers)}
    # One current judgment per photo, and it is the newest act on that photo.
    current = setup.judgments(qid)
    assert sorted(current) == ids
    newest: dict[int, int | None] = {}
    for record in setup.judgment_history(qid):
        newest[record.image_id] = record.relevance
    assert current == newest
