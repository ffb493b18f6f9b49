"""Hybrid search on a lab's PostgreSQL catalog uses the words of the records as on SQLite:
migration 0010's tsvector table, kept by triggers, ranked by the same bm25."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, select, text, update

from engine.benchmarks.runner import run_methods
from engine.catalog import Image, Taxon
from engine.catalog.library import Library
from engine.evaluation.evaluate import load_judgments, load_queries_csv
from engine.indexing.indexer import Indexer
from engine.search.fulltext import has_record_text, matched_words, text_ranked
from tests.catalogs import folder_url


def _same(server: list[tuple[int, float]], local: list[tuple[int, float]]) -> None:
    """The same photos in the same order with the same scores (to rounding)."""
    assert [i for i, _ in server] == [i for i, _ in local]
    assert [s for _, s in server] == pytest.approx([s for _, s in local], rel=1e-9)


def test_hybrid_on_postgresql_ranks_the_demo_as_sqlite_does(
    tmp_path, small_demo_collection, demo_encoder, postgres_url
):
    demo_collection = small_demo_collection  # the demo's queries and judgments, 60 photos
    sqlite = Library.open(tmp_path / "sqlite")
    server = Library.open(tmp_path / "server", database_url=postgres_url)
    try:
        for library in (sqlite, server):
            Indexer(library, demo_encoder).run(demo_collection.root)
        assert has_record_text(server.catalog)
        queries = load_queries_csv(demo_collection.queries_path)
        judgments = load_judgments(demo_collection.judgments_path)
        scores = {
            name: run_methods(
                library, lambda: demo_encoder, queries, judgments, specs, k=10, permutations=0
            )
            for name, library, specs in (
                ("sqlite", sqlite, ["hybrid"]),
                ("postgresql", server, ["hybrid", "text"]),
            )
        }
        hybrid = {name: result.results["hybrid"].mean.mAP for name, result in scores.items()}
        clip = scores["postgresql"].results["text"].mean.mAP
        assert hybrid["postgresql"] == pytest.approx(hybrid["sqlite"], abs=0.01)
        # The words count on PostgreSQL too: the demo's records lift hybrid above CLIP alone.
        assert hybrid["postgresql"] > clip + 0.02

        # The words ranking itself is the same, score for score.
        for words in ("red circle basking", "blue squares near granite", "Circulus"):
            _same(text_ranked(server.catalog, words, 50), text_ranked(sqlite.catalog, words, 50))
        ranked = text_ranked(server.catalog, "circles", 500, exclude="red")
        _same(ranked, text_ranked(sqlite.catalog, "circles", 500, exclude="red"))
        assert ranked and not any(
            "red" in found.get("common", [])
            for found in matched_words(server.catalog, [i for i, _ in ranked], "red").values()
        )
    finally:
        sqlite.close()
        server.close()


def _words(library: Library, image_id: int, query: str) -> dict[str, list[str]]:
    return matched_words(library.catalog, [image_id], query).get(image_id, {})


def test_postgresql_triggers_keep_the_words_current_and_the_migration_fills_them(
    tmp_path, photos, demo_encoder, postgres_url, monkeypatch
):
    library = Library.open(tmp_path / "lib", database_url=folder_url(postgres_url, monkeypatch))
    try:
        Indexer(library, demo_encoder).run(photos)
        with library.catalog.session() as s:
            first = s.scalar(select(Image).order_by(Image.id).limit(1))
            assert first is not None
            photo, taxon_id = first.id, first.taxon_id
            s.execute(update(Image).where(Image.id == photo).values(notes="a heron nearby"))
        assert _words(library, photo, "heron")["notes"] == ["heron"]
        assert text_ranked(library.catalog, "heron", 5)[0][0] == photo

        with library.catalog.session() as s:  # a renamed taxon: every photo of it
            s.execute(update(Taxon).where(Taxon.id == taxon_id).values(common_name="zebra disc"))
        assert _words(library, photo, "zebra")["common"] == ["zebra"]

        with library.catalog.session() as s:  # gone missing: no longer searched by its words
            s.execute(update(Image).where(Image.id == photo).values(status="missing"))
        assert photo not in dict(text_ranked(library.catalog, "heron zebra", 100))
        with library.catalog.session() as s:
            s.execute(update(Image).where(Image.id == photo).values(status="ok"))
        assert text_ranked(library.catalog, "heron", 5)[0][0] == photo

        def rows() -> int:
            with library.catalog.session() as s:
                return int(s.execute(text("SELECT count(*) FROM record_text")).scalar() or 0)

        before = rows()
        assert before == len(list(photos.rglob("*.jpg")))
    finally:
        library.close()

    # Back to 0009 (no text table) and up again: the migration fills the photos already there.
    from alembic import command

    from engine.catalog.db import _alembic_config

    engine = create_engine(postgres_url)
    try:
        with engine.begin() as conn:
            command.downgrade(_alembic_config(conn), "0009")
            assert conn.execute(text("SELECT to_regclass('record_text')")).scalar() is None
        reopened = Library.open(tmp_path / "lib")
        try:
            assert text_ranked(reopened.catalog, "heron", 5)[0][0] == photo
            with reopened.catalog.session() as s:
                assert s.execute(text("SELECT count(*) FROM record_text")).scalar() == before
        finally:
            reopened.close()
    finally:
        engine.dispose()
