"""A catalog shared on a PostgreSQL server: 64-bit columns, one-line faults, library folders
that record their catalog, and indexing into it from two workstations (against SQLite too)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import URL, create_engine, make_url, select, text

from engine.catalog import Collection, Image, Query, open_catalog
from engine.catalog.binding import BINDING_FILE
from engine.catalog.db import PASSWORD_ENV
from engine.catalog.library import Library
from engine.errors import BadInputError, CatalogError
from engine.indexing.indexer import Indexer
from engine.methods import SearchQuery, search_hits

pytestmark = pytest.mark.integration  # (a server and processes; the fast lane leaves it out)

REPO = Path(__file__).resolve().parents[1]


def without_password(url: str) -> str:
    return make_url(url)._replace(password=None).render_as_string(hide_password=False)


@pytest.fixture
def no_password_source(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No password from the environment or ~/.pgpass: only what a test gives."""
    for name in (PASSWORD_ENV, "PGPASSWORD"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "no-pgpass"))


def assert_one_line_without_sql(message: str, *secrets: str) -> None:
    assert "\n" not in message
    for word in ("SELECT", "INSERT", "UPDATE", "[SQL", "parameters", "sqlalche.me", *secrets):
        assert word not in message, message


# -- 64-bit columns ---------------------------------------------------------------------------


def test_indexing_stores_nanosecond_mtimes_and_two_workstations_search_alike(
    catalog_url, tmp_path, photos, demo_encoder, monkeypatch
):
    """The first `quadrat index` into a PostgreSQL catalog failed with "integer out of range"
    (an mtime in ns in a 32-bit column). A second folder bound to the same catalog builds its
    own vector index file from the catalog (or asks the server, where it has pgvector) and gets
    the same results."""
    url = make_url(catalog_url)
    if url.password:
        monkeypatch.setenv(PASSWORD_ENV, url.password)
    plain = without_password(catalog_url)
    with Library.open(tmp_path / "first", database_url=plain) as first:
        report = Indexer(first, demo_encoder).run(photos)
        assert report.indexed == len(list(photos.rglob("*.jpg")))
        with first.catalog.session() as s:
            rows = s.execute(select(Image.rel_path, Image.mtime_ns, Image.size)).all()
        on_disk = {p.relative_to(photos).as_posix(): p.stat() for p in photos.rglob("*.jpg")}
        assert {r: (m, s) for r, m, s in rows} == {
            r: (st.st_mtime_ns, st.st_size) for r, st in on_disk.items()
        }
        assert max(m for _, m, _ in rows) > 2**31
        expected = search_hits(first, demo_encoder, SearchQuery("red circle"), top_k=10)
    with Library.open(tmp_path / "second") as unbound:  # a new folder: its own catalog
        assert unbound.model_key is None
    with Library.open(tmp_path / "third", database_url=plain) as third:
        hits = search_hits(third, demo_encoder, SearchQuery("red circle"), top_k=10)
        # Local to the folder, unless the server holds the vectors (pgvector: tests/test_pgvector.py)
        local = not third.server_vectors().usable
        assert third.index_path(demo_encoder.model_key).is_file() == local
    assert [(h.image_id, h.path) for h in hits] == [(h.image_id, h.path) for h in expected]
    assert [h.score for h in hits] == pytest.approx([h.score for h in expected], abs=1e-6)


def test_an_older_postgresql_catalog_is_migrated_to_64_bit_columns(postgres_url):
    from alembic import command

    from engine.catalog.db import _alembic_config, catalog_url

    engine = create_engine(catalog_url(postgres_url))
    with engine.begin() as conn:  # the catalog as the previous release wrote it
        command.upgrade(_alembic_config(conn), "0005")
        conn.execute(
            text("INSERT INTO collections(root, name, added_at) VALUES ('/p', 'p', now())")
        )
    engine.dispose()
    catalog = open_catalog(postgres_url)
    with catalog.session() as s:
        coll = s.scalars(select(Collection)).one()
        s.add(Image(collection_id=coll.id, rel_path="a.jpg", size=5 * 2**30, mtime_ns=2**62))
    with catalog.session() as s:
        assert s.execute(select(Image.size, Image.mtime_ns)).one() == (5 * 2**30, 2**62)
    catalog.dispose()


# -- faults as one line -----------------------------------------------------------------------


def test_server_faults_are_told_apart_by_sqlstate_before_words():
    """No server needed: psycopg's own exception classes, as the driver raises them."""
    import psycopg.errors as pg

    from engine.catalog import db

    refused = 'connection failed: connection to server at "h", port 1 failed: Connection refused'
    assert db.classify(pg.OperationalError(refused)) == db.UNREACHABLE
    assert db.classify(pg.NumericValueOutOfRange("integer out of range")) == db.OUT_OF_RANGE
    assert db.classify(pg.AdminShutdown("terminating connection")) == db.CONNECTION_LOST
    assert db.classify(pg.InvalidPassword("password authentication failed")) == db.AUTH_FAILED
    # A bug of ours, not a missing database, though its words say "does not exist".
    assert db.classify(pg.UndefinedTable('relation "x" does not exist')) == db.OTHER
    assert db.classify(pg.UniqueViolation("duplicate key value")) == db.OTHER  # callers catch it


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_server_that_is_not_there_is_one_line_from_the_command_line(
    tmp_path, capsys, small_demo_collection
):
    from app.cli import main

    url = f"postgresql://someone:s3cret@127.0.0.1:{free_port()}/photos"
    code = main(["index", str(small_demo_collection.root), "--library", str(tmp_path / "lib"),
                 "--database-url", url, "--model", "demo"])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert code == 1
    assert err.startswith("error: cannot reach the catalog server 127.0.0.1:"), err
    assert "is running" in err
    assert_one_line_without_sql(err, "s3cret")
    assert not (tmp_path / "lib" / BINDING_FILE).exists()  # nothing recorded for a failure


def test_a_refused_login_names_where_the_password_comes_from(
    postgres_server: URL, no_password_source
):
    with pytest.raises(CatalogError) as info:
        open_catalog(postgres_server.set(password="wrong-password"))
    message = str(info.value)
    assert "refused the login" in message and PASSWORD_ENV in message
    assert_one_line_without_sql(message, "wrong-password")
    with pytest.raises(CatalogError, match="refused the login"):
        open_catalog(postgres_server._replace(password=None))  # none given at all


def test_a_missing_database_says_how_to_create_it(postgres_server: URL):
    with pytest.raises(CatalogError) as info:
        open_catalog(postgres_server.set(database="quadrat_no_such_catalog"))
    message = str(info.value)
    assert "quadrat_no_such_catalog" in message and "does not exist" in message
    assert "createdb" in message
    assert_one_line_without_sql(message, str(postgres_server.password))


def test_a_value_out_of_range_is_one_line_and_saves_nothing(postgres_url):
    catalog = open_catalog(postgres_url)
    with catalog.session() as s:
        coll = Collection(root="/photos", name="photos")
        s.add(coll)
    with pytest.raises(CatalogError) as info, catalog.session() as s:
        s.add(Query(text="kept?"))
        s.add(Image(collection_id=coll.id, rel_path="x.jpg", size=1, mtime_ns=1, width=2**40))
    message = str(info.value)
    assert "does not fit" in message and "out of range" in message
    assert_one_line_without_sql(message, str(2**40), "x.jpg")
    with catalog.session() as s:
        assert s.scalars(select(Query)).all() == []  # the whole transaction was rolled back
    catalog.dispose()


def test_a_lost_connection_is_one_line_and_the_next_session_reconnects(
    postgres_url, postgres_server: URL
):
    catalog = open_catalog(postgres_url)
    admin = create_engine(postgres_server, isolation_level="AUTOCOMMIT")
    try:
        with pytest.raises(CatalogError) as info, catalog.session() as s:
            pid = s.execute(text("SELECT pg_backend_pid()")).scalar()
            with admin.connect() as conn:  # the server restarts, or an administrator ends it
                conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
            s.execute(select(Query)).all()
    finally:
        admin.dispose()
    message = str(info.value)
    assert message.startswith("lost the connection to the catalog server"), message
    assert_one_line_without_sql(message, str(postgres_server.password))
    with catalog.session() as s:  # a fresh connection, no restart of Quadrat needed
        s.add(Query(text="after the outage"))
    with catalog.session() as s:
        assert s.scalars(select(Query.text)).all() == ["after the outage"]
    catalog.dispose()


# -- a library folder and its catalog ---------------------------------------------------------


def test_a_folder_records_its_server_catalog_but_never_the_password(
    postgres_url, tmp_path, monkeypatch, no_password_source
):
    folder = tmp_path / "lib"
    password = make_url(postgres_url).password or ""
    with Library.open(folder, database_url=postgres_url) as lib, lib.catalog.session() as s:
        s.add(Query(text="shared question"))
    recorded = (folder / BINDING_FILE).read_text()
    assert without_password(postgres_url).split("://", 1)[1] in recorded
    assert password not in recorded
    assert not (folder / "catalog.sqlite3").exists()
    with pytest.raises(CatalogError, match="refused the login"):
        Library.open(folder)  # no password anywhere
    monkeypatch.setenv(PASSWORD_ENV, password)
    with Library.open(folder) as again, again.catalog.session() as s:
        assert again.catalog.is_server
        assert s.scalars(select(Query.text)).all() == ["shared question"]


def test_a_folder_bound_to_one_catalog_refuses_another(tmp_path):
    folder = tmp_path / "lib"
    first, other = f"sqlite:///{tmp_path / 'a.sqlite3'}", f"sqlite:///{tmp_path / 'b.sqlite3'}"
    with Library.open(folder, database_url=first) as lib, lib.catalog.session() as s:
        s.add(Query(text="kept"))
    with pytest.raises(BadInputError) as info:
        Library.open(folder, database_url=other)
    message = str(info.value)
    assert "belongs to the catalog" in message and "a.sqlite3" in message and "b.sqlite3" in message
    assert "\n" not in message
    assert not (tmp_path / "b.sqlite3").exists()
    with Library.open(folder, database_url=first) as lib, lib.catalog.session() as s:
        assert s.scalars(select(Query.text)).all() == ["kept"]


def test_a_folder_with_its_own_catalog_cannot_join_another(tmp_path):
    folder = tmp_path / "lib"
    Library.open(folder).close()
    with pytest.raises(BadInputError, match="has its own catalog"):
        Library.open(folder, database_url=f"sqlite:///{tmp_path / 'shared.sqlite3'}")
    assert not (folder / BINDING_FILE).exists()


def test_the_settings_database_url_applies_to_a_library_given_with_dash_dash_library(
    capsys, tmp_path, small_demo_collection
):
    """`--library` used to ignore the settings' database URL, silently."""
    from app.cli import main
    from app.settings import Settings, save_settings

    database = tmp_path / "shared" / "catalog.db"
    database.parent.mkdir()
    save_settings(Settings(model="demo", device="cpu", database_url=f"sqlite:///{database}"))
    library = tmp_path / "lib"
    code = main(["index", str(small_demo_collection.root), "--library", str(library)])
    assert code == 0, capsys.readouterr().err
    assert database.exists() and (library / BINDING_FILE).exists()
    assert not (library / "catalog.sqlite3").exists()


# -- CI must not skip the PostgreSQL variants -------------------------------------------------


@pytest.mark.parametrize(("ci", "outcome"), [("true", "1 error"), ("", "1 skipped")])
def test_without_a_server_the_postgresql_variants_skip_locally_and_fail_in_ci(ci, outcome):
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "QUADRAT_TEST_POSTGRES_URL")}
    env["CI"] = ci
    env["PYTHONPATH"] = str(REPO)
    target = f"{Path(__file__).name}::test_a_value_out_of_range_is_one_line_and_saves_nothing"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"tests/{target}"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert outcome in proc.stdout, proc.stdout[-2000:]
    assert (proc.returncode == 0) == (ci == "")
    if ci:
        assert "CI=true but QUADRAT_TEST_POSTGRES_URL is not set" in proc.stdout


# -- the rest of the catalog on a server ------------------------------------------------------


def test_reranking_answers_are_cached_and_replaced_on_both_databases(catalog_url, tmp_path):
    """The cache wrote with SQLite's own upsert, which PostgreSQL cannot compile."""
    from engine.rerank.base import Answer, Photo, Question
    from engine.rerank.cache import ScoreCache

    photos = [Photo(i, tmp_path / f"{i}.jpg", f"hash{i}") for i in range(3)]
    question = Question("Is there a red circle in this photo?")
    with Library.open(tmp_path / "lib", database_url=catalog_url) as lib:
        cache = ScoreCache(lib)
        assert cache.put([(p, Answer(0.25, "no")) for p in photos], question, "", "fake:1") == 3
        assert cache.put([(photos[0], Answer(0.75, "yes"))], question, "", "fake:1") == 1
        found = cache.get(photos, question, "", "fake:1")
        assert found == {
            "hash0": Answer(0.75, "yes"),
            "hash1": Answer(0.25, "no"),
            "hash2": Answer(0.25, "no"),
        }
        assert cache.count("fake:1") == 3


def test_two_workstations_cannot_index_one_server_catalog_at_once(postgres_url, tmp_path):
    """Each folder has its own lock file; the server's lock spans the workstations."""
    from engine.errors import QuadratError

    with (
        Library.open(tmp_path / "one", database_url=postgres_url) as one,
        Library.open(tmp_path / "two", database_url=postgres_url) as two,
    ):
        with (
            one.writer_lock(),
            pytest.raises(QuadratError, match="another Quadrat is indexing the catalog"),
            two.writer_lock(),
        ):
            pass
        with two.writer_lock():  # free again once the first is done
            pass


def test_the_64_bit_migration_changes_nothing_on_sqlite(tmp_path):
    """SQLite's INTEGER is 64-bit already: 0006 must not rebuild `images` (which would also
    drop the record_text triggers)."""
    import sqlite3

    from alembic import command

    from engine.catalog.db import _alembic_config

    def schema(path: Path) -> list[tuple[str, str]]:
        with sqlite3.connect(path) as conn:
            return conn.execute(
                "SELECT name, sql FROM sqlite_master WHERE tbl_name IN ('images', 'taxa') "
                "ORDER BY name"
            ).fetchall()

    older = tmp_path / "older.sqlite3"
    engine = create_engine(f"sqlite:///{older}")
    with engine.begin() as conn:
        command.upgrade(_alembic_config(conn), "0005")
    engine.dispose()
    before = schema(older)
    engine = create_engine(f"sqlite:///{older}")
    with engine.begin() as conn:
        command.upgrade(_alembic_config(conn), "0006")
    engine.dispose()
    assert schema(older) == before
    assert any(name == "record_text_image_added" for name, _ in before)


def test_a_database_error_that_escapes_is_still_one_line_without_sql(capsys, monkeypatch):
    """The last line of defence of the command line: no SQL, no parameters, one line."""
    import psycopg.errors as pg
    from sqlalchemy.exc import DataError

    import app.cli
    import app.cli.search

    def failing(_path):
        raise DataError(
            "INSERT INTO images (size, mtime_ns) VALUES (%(size)s, %(mtime_ns)s)",
            {"size": 1, "mtime_ns": 1_763_000_000_123_456_789},
            pg.NumericValueOutOfRange("integer out of range"),
        )

    monkeypatch.setattr(app.cli.search, "open_library", failing)
    code = app.cli.main(["search", "red circle"])
    err = capsys.readouterr().err.strip()
    assert code == 1
    assert "integer out of range" in err
    assert_one_line_without_sql(err, "1763000000123456789", "mtime_ns")


def test_the_command_line_creates_a_shared_library_and_a_second_folder_joins_it(
    postgres_url, tmp_path, capsys, monkeypatch, small_demo_collection, no_password_source
):
    """`quadrat index --library DIR --database-url URL` (the password from the environment),
    then `--library DIR` alone, and another folder with the same URL: the same results."""
    from app.cli import main

    monkeypatch.setenv(PASSWORD_ENV, make_url(postgres_url).password or "")
    url = without_password(postgres_url)
    first, second = tmp_path / "alice", tmp_path / "bob"
    code = main(["index", str(small_demo_collection.root), "--library", str(first),
                 "--database-url", url, "--model", "demo", "--json"])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    capsys.readouterr()
    searches = []
    for extra in (["--library", str(first)], ["--library", str(second), "--database-url", url]):
        code = main(["search", "red circle", "--top", "5", "--json", *extra])
        out, err = capsys.readouterr()
        assert code == 0, err
        searches.append(out.strip().splitlines())
    assert len(searches[0]) == 5 and searches[0] == searches[1]
    assert (second / BINDING_FILE).exists() and not (second / "catalog.sqlite3").exists()
