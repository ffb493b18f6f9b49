"""One saved query per text and query photo, kept by the catalog itself (SQLite and
PostgreSQL): sessions creating the same new query at once get one, a catalog holding twins from
before the key merges them with every judgment, and the database refuses a twin outright."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine, exc, func, insert, select, text

from engine.catalog import (
    Collection,
    Image,
    Judgment,
    JudgmentEvent,
    Query,
    Run,
    RunResult,
    Subquery,
    open_catalog,
)
from engine.catalog.db import MIGRATIONS_DIR
from engine.catalog.library import Library
from engine.judgments.queries import QueryStore
from tests.catalogs import add_plain_photos, folder_url

CREATORS = 20


@pytest.fixture
def library(tmp_path: Path, catalog_url: str, monkeypatch: pytest.MonkeyPatch):
    with Library.open(tmp_path / "lib", database_url=folder_url(catalog_url, monkeypatch)) as lib:
        add_plain_photos(lib, tmp_path / "photos", 4)
        yield lib


def all_at_once(count: int, work: Callable[[int], Any]) -> list[Any]:
    """Run `work(n)` for n in range(count) in threads released together; their results."""
    barrier = threading.Barrier(count)
    results: list[Any] = [None] * count
    errors: list[BaseException] = []

    def run(n: int) -> None:
        try:
            barrier.wait(timeout=60)
            results[n] = work(n)
        except BaseException as error:  # reported below, in the test's thread
            errors.append(error)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    return results


def saved_queries(library: Library) -> list[tuple[str, str | None]]:
    with library.catalog.session() as s:
        return list(s.execute(select(Query.text, Query.image_path).order_by(Query.id)).all())


def workstation(library: Library) -> Any:
    """What a second Quadrat on the same catalog has of it: its own catalog connection,
    opened and used once already (so that all start together)."""
    catalog = open_catalog(library.catalog.engine.url)
    with catalog.session() as s:
        s.execute(select(Query.id).limit(1))
    return SimpleNamespace(catalog=catalog)


@pytest.mark.parametrize("image", [None, "/photos/lizard.jpg"])
def test_twenty_sessions_creating_one_new_query_at_once_get_one(library, image):
    others = [workstation(library) for _ in range(CREATORS)]
    stores = [QueryStore(other, user=f"u{n}") for n, other in enumerate(others)]
    words = "alligator lizards mating 0"
    try:
        ids = all_at_once(CREATORS, lambda n: stores[n].find_or_create_query(words, image))
        assert len(set(ids)) == 1, f"{len(set(ids))} queries for one text"
        assert saved_queries(library) == [(words, image)]
        # Creators asking with other spacing judge on the same query.
        qid = stores[0].find_or_create_query(words, image)
        photos = sorted(_image_ids(library))

        def judge(n: int) -> None:
            asked = stores[n].find_or_create_query("alligator  lizards\tmating 0 ", image)
            stores[n].judge(asked, photos[n], n % 2)

        all_at_once(len(photos), judge)
        assert stores[0].judgments(qid) == {p: n % 2 for n, p in enumerate(photos)}
    finally:
        for other in others:
            other.catalog.dispose()


def test_one_query_file_imported_at_once_with_searches_makes_one_query_per_text(library, tmp_path):
    from engine.io.export import import_benchmark

    texts = [f"a godwit feeding {n}" for n in range(30)]
    queries = tmp_path / "queries.csv"
    queries.write_text(
        "query_id,query_text\n" + "".join(f"{n},{t}\n" for n, t in enumerate(texts)),
        encoding="utf-8",
    )
    store = QueryStore(library)

    def work(n: int) -> object:
        if n < 2:  # two workstations import the file
            return import_benchmark(library, queries, None)
        return [store.find_or_create_query(t) for t in texts[n % 3 :: 3]]  # others search

    all_at_once(6, work)
    assert sorted(t for t, _ in saved_queries(library)) == sorted(texts)


# A pasted text far over what PostgreSQL's index entries hold (2.7 KB), and incompressible.
LONG = " ".join(f"{n:x}{n * 7919 % 104729:x}" for n in range(2000))


def test_the_catalog_refuses_a_second_query_of_one_text_and_photo(library):
    with library.catalog.session() as s:
        s.add_all([Query(text="fox"), Query(text="fox", image_path="/a.jpg"), Query(text="Fox")])
    for image_path in (None, "/a.jpg"):
        with pytest.raises(exc.IntegrityError), library.catalog.engine.begin() as conn:
            conn.execute(insert(Query).values(text="fox", image_path=image_path))
    assert len(saved_queries(library)) == 3
    store = QueryStore(library)
    assert store.find_or_create_query(LONG) == store.find_or_create_query(LONG + " ")
    assert len(saved_queries(library)) == 4


# -- migrating a catalog that holds twins -----------------------------------------------------

T0 = datetime(2026, 1, 1, 12, 0, 0)


def at(minutes: int) -> datetime:
    return T0 + timedelta(minutes=minutes)


def catalog_at_0008_with_twins(url: str) -> dict[str, Any]:
    """A catalog at revision 0008 (before the key) holding twins made by a race, with their
    runs, judgments, events and subqueries; what the merge must give."""
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            cfg = Config()
            cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "0008")
        with engine.begin() as conn:
            conn.execute(insert(Collection).values(id=1, root="/photos", name="photos"))
            conn.execute(
                insert(Image),
                [
                    {"id": i, "collection_id": 1, "rel_path": f"p{i}.jpg", "size": 1, "mtime_ns": 1}
                    for i in range(1, 7)
                ],
            )
            q = lambda id_, text_, **kw: {  # noqa: E731
                "id": id_,
                "text": text_,
                "image_path": None,
                "name": None,
                "notes": None,
                "created_at": at(id_),
                "updated_at": at(id_),
                **kw,
            }
            conn.execute(
                insert(Query),
                [
                    q(1, "lizards mating", notes="seen at dawn"),
                    q(
                        2,
                        "lizards mating",
                        name="Lizards",
                        notes="from the field laptop",
                        updated_at=at(90),
                    ),
                    q(3, "lizards mating", image_path="/q/lizard.jpg"),
                    q(4, "lizards mating", image_path="/q/lizard.jpg"),
                    q(5, "Lizards mating"),  # case differs: another query
                    q(6, "lizards  mating"),  # spacing differs: kept apart, as stored
                    q(7, "lizards mating"),  # a third twin
                    q(8, LONG),
                    q(9, LONG),
                ],
            )
            # (query, photo, relevance, minute): the newest act per photo must win.
            judged = [
                (1, 1, 1, 10),
                (2, 1, 0, 20),  # the twin's is newer: 0
                (1, 2, 1, 30),
                (2, 2, 0, 25),  # the oldest's is newer: 1
                (2, 3, 1, 15),  # only the twin judged it: kept
                (1, 4, 1, 10),  # cleared later on the twin (an event, no row): gone
                (7, 5, 0, 40),
                (2, 5, 1, 35),  # the third twin's is newest: 0
                (3, 6, 1, 5),
                (4, 6, 0, 6),  # the photo query's twins: 0
            ]
            conn.execute(
                insert(Judgment),
                [
                    {
                        "query_id": qid,
                        "image_id": img,
                        "relevance": rel,
                        "judged_by": f"user{qid}",
                        "judged_at": at(m),
                    }
                    for qid, img, rel, m in judged
                ],
            )
            events = [(qid, img, rel, m) for qid, img, rel, m in judged] + [
                (1, 4, None, 2),
                (2, 4, 1, 3),
                (2, 4, None, 50),  # cleared on the twin, last
                (1, 1, 1, 1),  # an older act, replaced since
            ]
            conn.execute(
                insert(JudgmentEvent),
                [
                    {
                        "query_id": qid,
                        "image_id": img,
                        "relevance": rel,
                        "judged_by": f"user{qid}",
                        "judged_at": at(m),
                    }
                    for qid, img, rel, m in events
                ],
            )
            conn.execute(
                insert(Run),
                [
                    {"id": 1, "query_id": 1, "method": "text", "params": {}, "created_at": at(1)},
                    {"id": 2, "query_id": 2, "method": "visret", "params": {}, "created_at": at(2)},
                ],
            )
            conn.execute(
                insert(RunResult),
                [{"run_id": 2, "rank": r, "image_id": r, "score": 1.0 / r} for r in (1, 2, 3)],
            )
            conn.execute(
                insert(Subquery),
                [
                    {"query_id": 2, "position": 0, "text": "is it a lizard?", "source": "user"},
                    {"query_id": 2, "position": 1, "text": "are two mating?", "source": "user"},
                    {"query_id": 7, "position": 0, "text": "older list", "source": "user"},
                ],
            )
        if engine.dialect.name == "postgresql":  # rows were given their ids
            with engine.begin() as conn:
                for table in ("collections", "images", "queries", "judgment_events", "runs"):
                    conn.execute(
                        text(
                            f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
                            f"(SELECT max(id) FROM {table}))"
                        )
                    )
    finally:
        engine.dispose()
    return {"events": len(events)}


def _image_ids(library: Library) -> list[int]:
    with library.catalog.session() as s:
        return list(s.scalars(select(Image.id)))


def test_a_catalog_with_twins_migrates_to_one_query_with_every_judgment(catalog_url):
    made = catalog_at_0008_with_twins(catalog_url)
    catalog = open_catalog(catalog_url)  # migrates to the newest revision
    try:
        with catalog.session() as s:
            queries = {
                q.id: (q.text, q.image_path, q.name, q.notes)
                for q in s.scalars(select(Query).order_by(Query.id))
            }
            assert queries == {
                1: ("lizards mating", None, "Lizards", "seen at dawn\n\nfrom the field laptop"),
                3: ("lizards mating", "/q/lizard.jpg", None, None),
                5: ("Lizards mating", None, None, None),
                6: ("lizards  mating", None, None, None),
                8: (LONG, None, None, None),
            }
            assert s.get(Query, 1).updated_at == at(90)  # the twins' latest use
            judgments = {
                (j.query_id, j.image_id): (j.relevance, j.judged_by)
                for j in s.scalars(select(Judgment))
            }
            assert judgments == {
                (1, 1): (0, "user2"),
                (1, 2): (1, "user1"),
                (1, 3): (1, "user2"),
                (1, 5): (0, "user7"),
                (3, 6): (0, "user4"),
            }
            # Every act is kept, on the query that stays.
            events = s.execute(
                select(JudgmentEvent.query_id, func.count()).group_by(JudgmentEvent.query_id)
            ).all()
            assert sorted(events) == [(1, made["events"] - 2), (3, 2)]
            runs = s.execute(select(Run.id, Run.query_id).order_by(Run.id)).all()
            assert [tuple(r) for r in runs] == [(1, 1), (2, 1)]
            assert s.scalar(select(func.count()).select_from(RunResult)) == 3
            questions = s.scalars(
                select(Subquery.text).where(Subquery.query_id == 1).order_by(Subquery.position)
            ).all()
            assert questions == ["is it a lizard?", "are two mating?"]  # the newest list
            assert s.scalar(select(func.count()).select_from(Subquery)) == 2
    finally:
        catalog.dispose()


def test_opening_the_migrated_catalog_in_a_library_shows_the_merged_judgments(
    tmp_path, catalog_url, monkeypatch
):
    catalog_at_0008_with_twins(catalog_url)
    with Library.open(tmp_path / "lib", database_url=folder_url(catalog_url, monkeypatch)) as lib:
        store = QueryStore(lib)
        qid = store.find_or_create_query("lizards mating")
        assert qid == 1
        assert store.judgments(qid) == {1: 0, 2: 1, 3: 1, 5: 0}
        listed = [q for q in store.list_queries() if q.text == "lizards mating"]
        assert [(q.id, q.runs, q.judged) for q in listed] == [(1, 2, 4), (3, 0, 1)]


# -- a plain copy of the catalog file ---------------------------------------------------------


def copied_judgments(library: Library, tmp_path: Path) -> dict[int, int]:
    """The judgments a copy of the catalog file alone holds (no -wal beside it), as a user's
    own backup taken while the window is open would."""
    import shutil
    import sqlite3
    from contextlib import closing

    assert library.catalog.path is not None
    copy = tmp_path / f"copy{len(list(tmp_path.glob('copy*')))}" / "catalog.sqlite3"
    copy.parent.mkdir()
    shutil.copyfile(library.catalog.path, copy)
    with closing(sqlite3.connect(copy)) as conn:
        return dict(conn.execute("SELECT image_id, relevance FROM judgments").fetchall())


def test_a_copy_of_the_catalog_file_alone_holds_the_latest_judgments(tmp_path):
    from engine.io.export import import_benchmark

    with Library.open(tmp_path / "lib") as lib:
        add_plain_photos(lib, tmp_path / "photos", 3)
        store = QueryStore(lib)
        ids = sorted(_image_ids(lib))
        qid = store.find_or_create_query("heron with a fish")
        store.judge(qid, ids[0], 1)
        change = store.judge(qid, ids[1], 0)
        assert copied_judgments(lib, tmp_path) == {ids[0]: 1, ids[1]: 0}
        store.undo(change)
        assert copied_judgments(lib, tmp_path) == {ids[0]: 1}
        store.clear_judgments(qid)
        assert copied_judgments(lib, tmp_path) == {}
        judgments = tmp_path / "judgments.csv"
        judgments.write_text(f"query_id,image_path,relevant\n{qid},p2.jpg,1\n", encoding="utf-8")
        import_benchmark(lib, None, judgments)
        assert copied_judgments(lib, tmp_path) == {ids[2]: 1}
