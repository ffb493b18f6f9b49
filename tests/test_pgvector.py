"""Vectors served by a PostgreSQL catalog's server (pgvector): the same answers as SQLite's
FAISS index for every method, filtered recall, a new workstation that builds nothing, and the
one line (and the fallback to FAISS) where the server has no pgvector.

The server is the `pgserver` wheel's (PostgreSQL 16 with pgvector 0.6, tests/catalogs.py
`pgvector_server`): skipped without it, failed under CI=true."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import uuid
from datetime import date, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import create_engine, delete, insert, make_url, select, text, update

from engine.benchmarks.runner import run_methods
from engine.catalog import Embedding, Image, Taxon
from engine.catalog.library import Library
from engine.catalog.pgvector import PgVectorIndex
from engine.evaluation.evaluate import load_judgments, load_queries_csv
from engine.indexing.indexer import Indexer
from engine.methods import MethodContext, SearchQuery, resolve_spec
from engine.search.filters import SearchFilters, filter_terms, filtered_ids
from engine.search.searcher import Searcher
from tests.catalogs import add_plain_photos

REPO = Path(__file__).resolve().parents[1]


def _paths(library: Library) -> dict[int, str]:
    with library.catalog.session() as s:
        return {int(i): str(p) for i, p in s.execute(select(Image.id, Image.rel_path))}


def _server_index(library: Library, model_key: str) -> PgVectorIndex:
    index = library.vector_index(model_key)
    assert isinstance(index, PgVectorIndex)
    return index


@pytest.fixture
def two_libraries(tmp_path, small_demo_collection, demo_encoder, pgvector_url):
    """The small demo indexed into a SQLite library and into a pgvector catalog."""
    sqlite = Library.open(tmp_path / "sqlite")
    server = Library.open(tmp_path / "server", database_url=pgvector_url)
    try:
        for library in (sqlite, server):
            Indexer(library, demo_encoder).run(small_demo_collection.root)
        assert _paths(sqlite) == _paths(server)  # the same ids name the same photos
        yield sqlite, server
    finally:
        sqlite.close()
        server.close()


def _methods_score_as_on_sqlite(
    sqlite: Library, server: Library, collection, demo_encoder, few: int
) -> None:
    """Every method's mAP@10 on the pgvector catalog within 0.01 of SQLite's, answered exactly
    and then through the server's HNSW index; the learning methods' top 10 the same."""
    index = _server_index(server, demo_encoder.model_key)
    assert not list(server.root.rglob("*.faiss"))
    queries = load_queries_csv(collection.queries_path)
    judgments = load_judgments(collection.judgments_path)
    # VisRet draws and Reranked asks CLIP per query: a few queries of those.
    runs = ((["text", "hybrid"], queries), (["visret", "rerank"], queries[:few]))

    def scores(library: Library) -> dict[str, float]:
        found = {}
        for specs, asked in runs:
            result = run_methods(
                library,
                lambda: demo_encoder,
                asked,
                judgments,
                specs,
                k=10,
                permutations=0,
                generator="demo-painter",
            )
            found.update({spec: result.results[spec].mean.mAP for spec in specs})
        return found

    local = scores(sqlite)
    assert min(local.values()) > 0.3  # the comparison means something
    assert index.plan(10, None).method == "exact"
    for served in (scores(server), None):
        if served is None:
            # The demo is far below the size the server's index answers from: make it answer.
            index.exact_limit = 0
            index.build_ann()
            assert index.ann_index() == "hnsw" and index.plan(10, None).method == "hnsw"
            served = scores(server)
        for spec, value in local.items():
            assert served[spec] == pytest.approx(value, abs=0.01), spec

    # The learning methods (judgments of a saved query) rank as on SQLite too.
    query = SearchQuery("red circle")
    text_top = resolve_spec("text").run(
        query, MethodContext(sqlite, lambda: demo_encoder), top_k=30
    )
    judged = {i: int(r % 3 == 0) for r, i in enumerate(text_top.ids[:9])}
    for key in ("rocchio", "probe", "more-like-these"):
        rankings = [
            resolve_spec(key).run(
                query,
                MethodContext(library, lambda: demo_encoder, judgments=lambda: judged),
                top_k=30,
            )
            for library in (sqlite, server)
        ]
        assert rankings[0].ids[:10] == rankings[1].ids[:10], key


@pytest.mark.slow
def test_every_method_scores_the_small_demo_as_on_sqlite(
    two_libraries, small_demo_collection, demo_encoder
):
    sqlite, server = two_libraries
    _methods_score_as_on_sqlite(sqlite, server, small_demo_collection, demo_encoder, few=6)


@pytest.mark.slow
@pytest.mark.timeout(1800)  # 960 photos indexed twice, every query asked four times
def test_every_method_scores_the_demo_as_on_sqlite(
    tmp_path, demo_collection, demo_encoder, pgvector_url
):
    """The whole demo (an integration test: its collection); VisRet and Reranked on three of
    its queries (their drawings and CLIP's re-ranking take most of the time)."""
    sqlite = Library.open(tmp_path / "sqlite")
    server = Library.open(tmp_path / "server", database_url=pgvector_url)
    try:
        for library in (sqlite, server):
            Indexer(library, demo_encoder).run(demo_collection.root)
        assert _paths(sqlite) == _paths(server)
        _methods_score_as_on_sqlite(sqlite, server, demo_collection, demo_encoder, few=3)
    finally:
        sqlite.close()
        server.close()


def test_the_scores_are_the_faiss_index_scores(two_libraries, demo_encoder):
    sqlite, server = two_libraries
    key = demo_encoder.model_key
    local, served = sqlite.vector_index(key), _server_index(server, key)
    assert len(served) == len(local) > 0
    assert np.array_equal(served.ids(), local.ids())
    query = demo_encoder.encode_texts(["blue square on granite"])[0]
    for found, expected in (
        (served.search(query, 20), local.search(query, 20)),
        (served.search(query, 7, local.ids()[::4]), local.search(query, 7, local.ids()[::4])),
    ):
        assert [i for i, _ in found] == [i for i, _ in expected]
        # Scores to float32's last bits (FAISS's search and its re-rank kernel round apart).
        assert [s for _, s in found] == pytest.approx([s for _, s in expected], abs=1e-6)


def _synthetic(library: Library, tmp_path: Path, count: int, dim: int, seed: int) -> np.ndarray:
    """`count` photos with clustered unit vectors of one model key; returns the vectors."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(40, dim))
    vectors = centres[rng.integers(0, 40, count)] + 0.6 * rng.normal(size=(count, dim))
    vectors = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)
    add_plain_photos(library, tmp_path / "synthetic", count)
    library.record_model("synthetic", "synthetic", dim)
    with library.catalog.session() as s:
        ids = list(s.scalars(select(Image.id).order_by(Image.id)))
        s.execute(
            insert(Embedding),
            [
                {"image_id": i, "model_key": "synthetic", "vector": v.astype("<f4").tobytes()}
                for i, v in zip(ids, vectors, strict=True)
            ],
        )
    return vectors


def _exact(vectors: np.ndarray, query: np.ndarray, k: int, allowed: np.ndarray) -> set[int]:
    scores = vectors[allowed - 1] @ query
    return {int(i) for i in allowed[np.argsort(-scores, kind="stable")[:k]]}


def test_filtered_searches_keep_their_recall_through_the_servers_index(
    tmp_path, pgvector_url, caplog
):
    library = Library.open(tmp_path / "lib", database_url=pgvector_url)
    try:
        vectors = _synthetic(library, tmp_path, 12_000, 24, seed=7)
        index = _server_index(library, "synthetic")  # back-filled from `embeddings`
        assert len(index) == 12_000
        index.exact_limit = 1_000
        index.exact_filtered_limit = 1_000
        assert index.needs_rebuild()
        seen: list[str] = []
        index.build_ann(lambda p: seen.append(p.message))
        assert not index.needs_rebuild() and any("HNSW" in m for m in seen)

        rng = np.random.default_rng(1)
        everything = np.arange(1, 12_001)
        k = 50
        for share, method in ((None, "hnsw"), (0.02, "exact"), (0.1, "exact"), (0.6, "hnsw")):
            allowed = (
                everything
                if share is None
                else np.sort(rng.choice(everything, int(share * 12_000), replace=False))
            )
            assert index.plan(k, None if share is None else len(allowed)).method == method
            recalls = []
            for row in rng.choice(12_000, 15, replace=False):
                query = vectors[row] + 0.3 * rng.normal(size=24).astype(np.float32)
                query /= np.linalg.norm(query)
                found = index.search(query, k, None if share is None else allowed)
                assert len(found) == k
                assert set(i for i, _ in found) <= set(allowed.tolist())
                truth = _exact(vectors, query, k, allowed)
                recalls.append(len(truth & {i for i, _ in found}) / k)
            assert np.mean(recalls) >= 0.95, (share, np.mean(recalls))
    finally:
        library.close()


def _place_and_date(library: Library, count: int, seed: int) -> None:
    """Taxa, dates and places over the synthetic photos: a rare taxon (1 %), a common one
    (10 %), the rest a third; dates over four years; a tenth of the photos near Munich."""
    rng = np.random.default_rng(seed)
    with library.catalog.session() as s:
        taxa = [Taxon(key=n, name=n) for n in ("Rara", "Media", "Communis")]
        s.add_all(taxa)
        s.flush()
        share = rng.random(count)
        near = rng.random(count) < 0.1
        days = rng.integers(0, 4 * 365, count)
        rows = []
        for i in range(count):
            taxon = taxa[0] if share[i] < 0.01 else taxa[1] if share[i] < 0.11 else taxa[2]
            lat, lon = (
                (48.14 + rng.normal() * 0.2, 11.58 + rng.normal() * 0.3)
                if near[i]
                else (rng.uniform(-60, 30), rng.uniform(-120, 0))
            )
            rows.append(
                {
                    "id": i + 1,
                    "taxon_id": taxon.id,
                    "observed_at": datetime(2020, 1, 1) + timedelta(days=int(days[i])),
                    "latitude": lat,
                    "longitude": lon,
                }
            )
        s.execute(update(Image), rows)
    with library.catalog.engine.begin() as conn:
        conn.execute(text("ANALYZE images"))  # the planner's estimates, as autovacuum keeps them


def test_filters_run_as_sql_in_the_servers_vector_query(tmp_path, pgvector_url, caplog):
    """A filtered search is one statement on the server (the filter's SQL joined with the
    vector order), its plan chosen by the filter's estimated size: exact for a rare filter,
    the index's widened candidates for a common one; recall holds against exact search."""
    library = Library.open(tmp_path / "lib", database_url=pgvector_url)
    try:
        count = 12_000
        vectors = _synthetic(library, tmp_path, count, 24, seed=11)
        _place_and_date(library, count, seed=12)
        index = _server_index(library, "synthetic")
        index.exact_limit = index.exact_filtered_limit = 1_000
        index.build_ann()
        rng = np.random.default_rng(2)
        cases = [
            (SearchFilters(taxon="Rara"), 50, "exact"),  # 1 %
            (SearchFilters(taxon="Media"), 50, "exact"),  # 10 %: too rare for 1,000 candidates
            (SearchFilters(taxon="Media"), 10, "hnsw"),  # ... but plenty for a k of 10
            (SearchFilters(date_from=date(2021, 1, 1), date_to=date(2021, 12, 31)), 50, "hnsw"),
            (SearchFilters(near=(48.14, 11.58, 100.0)), 10, "hnsw"),
            (SearchFilters(near=(48.14, 11.58, 100.0), taxon="Rara"), 10, "exact"),
        ]
        caplog.set_level(logging.DEBUG, logger="engine.catalog.pgvector")
        for filters, k, method in cases:
            allowed = filtered_ids(library.catalog, filters)
            terms = filter_terms(library.catalog, filters)
            assert terms is not None and len(allowed) >= k
            recalls = []
            for row in rng.choice(count, 12, replace=False):
                query = vectors[row] + 0.3 * rng.normal(size=24).astype(np.float32)
                query /= np.linalg.norm(query)
                caplog.clear()
                found = index.search_filtered(query, k, terms)
                planned = [
                    r.getMessage() for r in caplog.records if "filtered search" in r.getMessage()
                ]
                assert len(planned) == 1 and f"plan {method}" in planned[0], (filters, planned)
                assert len(found) == k
                assert {i for i, _ in found} <= set(allowed.tolist())
                truth = _exact(vectors, query, k, allowed)
                recalls.append(len(truth & {i for i, _ in found}) / k)
            assert np.mean(recalls) >= 0.95, (filters, np.mean(recalls))
        # A filter no photo passes: nothing, and no query for it.
        assert filter_terms(library.catalog, SearchFilters(taxon="Nulla")) is None
    finally:
        library.close()


def test_filtered_searches_give_sqlites_answers(two_libraries, demo_encoder):
    """Through `Searcher.ranked`: the same photos as the SQLite catalog's FAISS index for
    taxon, date, place and month filters, exact on the small demo and through the index."""
    sqlite, server = two_libraries
    local, served = Searcher(sqlite, demo_encoder), Searcher(server, demo_encoder)
    with sqlite.catalog.session() as s:
        taxon = s.scalars(select(Taxon.name).join(Image, Image.taxon_id == Taxon.id)).first()
        lat, lon = s.execute(
            select(Image.latitude, Image.longitude).where(Image.latitude.is_not(None))
        ).first()
        day = s.scalars(select(Image.observed_at).where(Image.observed_at.is_not(None))).first()
    assert taxon and lat is not None and day is not None, "the demo has taxa, places and dates"
    filters = [
        SearchFilters(taxon=taxon),
        SearchFilters(date_from=day.date() - timedelta(days=200), date_to=day.date()),
        SearchFilters(near=(lat, lon, 500.0)),
        SearchFilters(months=(3, 9)),
    ]
    queries = demo_encoder.encode_texts(["red circle", "blue square on granite"])
    index = _server_index(server, demo_encoder.model_key)
    for forced in (False, True):
        if forced:  # the demo is far below the index's size: make it answer
            index.exact_limit = index.exact_filtered_limit = 0
            index.build_ann()
        for chosen in filters:
            assert served.filtered_ids(chosen).tolist() == local.filtered_ids(chosen).tolist()
            for query in queries:
                expected = local.ranked(query, 10, chosen)
                found = served.ranked(query, 10, chosen)
                assert [i for i, _ in found] == [i for i, _ in expected], (chosen, forced)
                assert [s for _, s in found] == pytest.approx([s for _, s in expected], abs=1e-6)


def test_a_new_workstation_answers_without_building_a_local_index(
    tmp_path, small_demo_collection, demo_encoder, pgvector_url
):
    first = Library.open(tmp_path / "first", database_url=pgvector_url)
    try:
        Indexer(first, demo_encoder).run(small_demo_collection.root)
        query = demo_encoder.encode_texts(["green triangle"])[0]
        expected = [i for i, _ in _server_index(first, demo_encoder.model_key).search(query, 5)]
    finally:
        first.close()
    # Another workstation: a fresh process, a new library folder on the same catalog.
    script = textwrap.dedent(
        """
        import sys
        from engine.catalog.library import Library
        from engine.methods import MethodContext, SearchQuery, resolve_spec
        from engine.models.encoders import load_encoder
        encoder = load_encoder("demo", device="cpu")
        with Library.open(sys.argv[1], database_url=sys.argv[2]) as library:
            context = MethodContext(library, lambda: encoder)
            ranking = resolve_spec("text").run(SearchQuery("green triangle"), context, top_k=5)
            print(type(library.vector_index(encoder.model_key)).__name__, *ranking.ids)
        """
    )
    folder = tmp_path / "second"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", script, str(folder), pgvector_url],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    kind, *ids = done.stdout.split()
    assert kind == "PgVectorIndex"
    assert [int(i) for i in ids] == expected
    assert not list(folder.rglob("*.faiss")), "no local index is built"


def test_a_server_without_the_extension_falls_back_to_faiss_in_one_line(
    tmp_path, small_demo_collection, demo_encoder, pgvector_server, caplog
):
    # A database the role owns, without the extension, on a server that has pgvector: the
    # role (no superuser) may not create it, so an administrator must.
    name = f"quadrat_plain_{uuid.uuid4().hex[:12]}"
    role = f"quadrat_user_{uuid.uuid4().hex[:8]}"
    admin = create_engine(pgvector_server, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f"CREATE ROLE {role} LOGIN PASSWORD 'pw'"))
            conn.execute(text(f'CREATE DATABASE "{name}" OWNER {role}'))
        url = make_url(pgvector_server).set(database=name, username=role, password="pw")
        caplog.set_level(logging.WARNING)
        library = Library.open(tmp_path / "lib", database_url=url.render_as_string(False))
        try:
            Indexer(library, demo_encoder).run(small_demo_collection.root)
            index = library.vector_index(demo_encoder.model_key)
            assert index.kind != "pgvector"
            lines = [
                r.getMessage()
                for r in caplog.records
                if "CREATE EXTENSION vector" in r.getMessage()
            ]
            assert len(lines) == 1 and "\n" not in lines[0]
            assert "an administrator" in lines[0] and "PGDG" in lines[0]
            query = demo_encoder.encode_texts(["red circle"])[0]
            assert len(index.search(query, 5)) == 5  # the local FAISS index answers
            assert list((tmp_path / "lib" / "indexes").glob("*.faiss"))
        finally:
            library.close()
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            conn.execute(text(f"DROP ROLE IF EXISTS {role}"))
        admin.dispose()


def test_a_server_with_no_pgvector_at_all_keeps_the_local_index(
    tmp_path, photos, demo_encoder, postgres_url, caplog
):
    """The lab's PostgreSQL without pgvector (CI's Debian server): FAISS, said once."""
    caplog.set_level(logging.WARNING)
    with Library.open(tmp_path / "lib", database_url=postgres_url) as library:
        Indexer(library, demo_encoder).run(photos)
        support = library.server_vectors()
        index = library.vector_index(demo_encoder.model_key)
        if support.usable:
            pytest.skip("this PostgreSQL server has pgvector")
        assert index.kind != "pgvector"
        said = [
            r.getMessage() for r in caplog.records if "CREATE EXTENSION vector" in r.getMessage()
        ]
        assert len(said) == 1


def test_vectors_follow_indexing_changes(tmp_path, photos, demo_encoder, pgvector_url):
    """A photo gone missing leaves the search and comes back with its file; a kill between
    a commit and its vectors is repaired at the next open (the column back-filled)."""
    library = Library.open(tmp_path / "lib", database_url=pgvector_url)
    try:
        Indexer(library, demo_encoder).run(photos)
        index = _server_index(library, demo_encoder.model_key)
        total = len(index)
        victim = sorted(photos.rglob("*.jpg"))[0]
        moved = victim.with_suffix(".bak")
        victim.rename(moved)
        Indexer(library, demo_encoder).run(photos)
        assert len(index) == total - 1
        moved.rename(victim)
        Indexer(library, demo_encoder).run(photos)
        assert len(index) == total
        # Vectors lost from the column (as if killed after the catalog's commit): refilled.
        with library.catalog.engine.begin() as conn:
            conn.execute(text(f"UPDATE image_vectors SET {index.column} = NULL WHERE image_id < 6"))
        assert library.check_consistency(demo_encoder.model_key) is not None
        index = _server_index(library, demo_encoder.model_key)
        assert len(index) == total
        # A photo encoded again (its embedding deleted and written anew, as the indexer's
        # commit does) and killed before its vector reached the column: the migration's
        # trigger emptied the old vector, and the next open fills in the new one.
        photo = int(index.ids()[0])
        new_vector = np.zeros(index.dim, dtype="<f4")
        new_vector[0] = 1.0
        key = demo_encoder.model_key
        with library.catalog.session() as s:
            s.execute(delete(Embedding).where(Embedding.image_id == photo))
            s.execute(
                insert(Embedding).values(image_id=photo, model_key=key, vector=new_vector.tobytes())
            )
        with library.catalog.engine.connect() as conn:
            assert conn.execute(
                text(f"SELECT {index.column} IS NULL FROM image_vectors WHERE image_id = :i"),
                {"i": photo},
            ).scalar()
        library.check_consistency(key)
        found = _server_index(library, key).search(new_vector, 1)
        assert found[0][0] == photo and found[0][1] == pytest.approx(1.0)
    finally:
        library.close()


def test_the_search_plan_follows_the_servers_pgvector_version():
    """No server needed: which way a search of k = 100 goes at a million vectors."""
    from engine.catalog.pgvector import PgVectorSupport

    def index(version: str) -> PgVectorIndex:
        made = PgVectorIndex(None, "m", 512, PgVectorSupport(version))  # type: ignore[arg-type]
        made._count, made._ann_index = 1_000_000, "hnsw"
        return made

    old, new = index("0.6.2"), index("0.8.0")
    assert (old.type_name, new.type_name) == ("vector", "halfvec")
    assert old.plan(100, None).method == new.plan(100, None).method == "hnsw"
    assert old.plan(100, None).ef_search == 1000  # recall@100 0.95 at a million needs it
    assert old.plan(5000, None).method == "exact"  # beyond what an index scan returns
    # A 1 % filter: scanned exactly either way (10,000 photos).
    assert old.plan(100, 10_000).method == new.plan(100, 10_000).method == "exact"
    # 10 %: too rare for 0.6's 1,000 candidates; 0.8 scans the index iteratively.
    assert old.plan(100, 100_000).method == "exact"
    iterative = new.plan(100, 100_000)
    assert iterative.method == "hnsw" and iterative.max_scan_tuples >= 20_000
    # Half the photos: the index's candidates hold enough of them on 0.6 too.
    widened = old.plan(100, 500_000)
    assert widened.method == "hnsw" and widened.ef_search >= 2 * widened.shortlist


def test_the_filtered_statement_follows_the_servers_pgvector_version():
    """No server needed: the SQL a filtered search sends, by plan and pgvector version."""
    from sqlalchemy.dialects import postgresql

    from engine.catalog.pgvector import PgVectorSupport

    def index(version: str) -> PgVectorIndex:
        made = PgVectorIndex(None, "m", 4, PgVectorSupport(version))  # type: ignore[arg-type]
        made._count, made._ann_index = 1_000_000, "hnsw"
        return made

    assert PgVectorSupport("0.10.1").has_iterative_scans  # by number, not as text
    assert not PgVectorSupport("0.7.4").has_iterative_scans
    terms = [Image.taxon_id == 7, Image.status == "ok"]
    query = np.array([1, 0, 0, 0], dtype=np.float32)

    def sql(made: PgVectorIndex, passing: int) -> tuple[str, list[str], str]:
        plan = made.plan(100, passing)
        statement = made.filtered_statement(query, plan, terms)
        compiled = statement.compile(
            dialect=postgresql.dialect(), compile_kwargs={"literal_binds": True}
        )
        return plan.method, made._settings(plan), " ".join(str(compiled).split())

    old, new = index("0.6.2"), index("0.8.0")
    # 10 %: exact on 0.6 (its index gives 1,000 candidates at most)...
    method, settings, text_ = sql(old, 100_000)
    assert method == "exact" and not [s for s in settings if "hnsw" in s]
    assert "+ 0" in text_ and "images.taxon_id = 7" in text_ and "nearest" not in text_
    # ... an iterative index scan on 0.8: the filter and the index order in one scan.
    method, settings, text_ = sql(new, 100_000)
    assert method == "hnsw" and "SET LOCAL hnsw.iterative_scan = relaxed_order" in settings
    assert any(s.startswith("SET LOCAL hnsw.max_scan_tuples") for s in settings)
    assert "nearest" not in text_ and "+ 0" not in text_ and "images.taxon_id = 7" in text_
    # Half the photos on 0.6: the index's widened candidates, then the filter, then the
    # shortlist, re-ranked here.
    method, settings, text_ = sql(old, 500_000)
    ef = old.plan(100, 500_000).ef_search
    assert method == "hnsw" and ef > 300
    assert [s for s in settings if "hnsw" in s] == [f"SET LOCAL hnsw.ef_search = {ef}"]
    assert "WITH nearest AS MATERIALIZED" in text_ and f"LIMIT {ef}" in text_
    assert "top AS MATERIALIZED" in text_ and "LIMIT 150" in text_
    assert text_.index(f"LIMIT {ef}") < text_.index("images.taxon_id = 7")


def test_hybrid_fuses_both_lists_from_one_round_trip(two_libraries, demo_encoder, monkeypatch):
    """On a pgvector catalog hybrid's CLIP list and bm25 list come from one statement, and
    it ranks exactly as when each is asked on its own (the path of every other catalog)."""
    from sqlalchemy import event

    _, server = two_libraries
    index = _server_index(server, demo_encoder.model_key)
    with server.catalog.session() as s:
        taxon = s.scalars(select(Taxon.name).join(Image, Image.taxon_id == Taxon.id)).first()
    cases = [
        ("red circle", "hybrid", None),
        ("blue square on granite -triangle", "hybrid:fusion=rrf", None),
        (f"{taxon} on sand", "hybrid", None),
        ("green triangle", "hybrid", SearchFilters(months=(3, 9))),
        ("red circle +granite", "hybrid:fusion=rrf", SearchFilters(taxon=taxon)),
    ]
    statements: list[str] = []

    def seen(_conn, _cursor, statement, *_args) -> None:
        statements.append(statement)

    def rankings() -> list[tuple[list[int], list[float]]]:
        out = []
        for text_, spec, filters in cases:
            context = MethodContext(server, lambda: demo_encoder, filters=filters)
            found = resolve_spec(spec).run(SearchQuery(text_), context, top_k=20)
            out.append((found.ids, [round(v, 9) for v in found.scores]))
        return out

    for forced in (False, True):
        if forced:  # through the server's index too
            index.exact_limit = index.exact_filtered_limit = 0
            index.build_ann()
        event.listen(server.catalog.engine, "before_cursor_execute", seen)
        statements.clear()
        together = rankings()
        event.remove(server.catalog.engine, "before_cursor_execute", seen)
        both = [s for s in statements if "<#>" in s and "record_text" in s]
        assert len(both) >= len(cases)
        # ... and no words-alone statement (the one each asks on its own).
        assert not [s for s in statements if "ORDER BY s.score DESC" in s]
        with monkeypatch.context() as patch:
            patch.setattr(Searcher, "ranked_with_words", lambda *a, **k: None)
            apart = rankings()
        assert together == apart, forced
        assert all(ids for ids, _ in together)
