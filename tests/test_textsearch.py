"""The words of the records: notes read from metadata, the FTS5 index kept right through
indexing, rescans, missing and removed photos and taxon changes, safe queries from any text,
and the taxa a query names."""

from __future__ import annotations

import json
import random
import shutil
import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import select, update

from engine.catalog import Image, Taxon
from engine.catalog.library import Library
from engine.indexing.coco import load_coco_metadata
from engine.indexing.collections import remove_collection
from engine.indexing.indexer import Indexer
from engine.indexing.metadata import NOTES_MAX_CHARS
from engine.search.fulltext import (
    fts_query,
    matched_words,
    mention_image_ids,
    taxa_in_query,
    text_ranked,
)

UPGRADE_FIXTURE = Path(__file__).parent / "data" / "upgrade"
TRIGGERS = {
    "record_text_image_added",
    "record_text_image_removed",
    "record_text_image_changed",
    "record_text_taxon_changed",
}


def _write_metadata(root: Path, notes: dict[str, str]) -> None:
    """Give the photos named in `notes` (relative path -> text) their notes; remove others'."""
    path = root / "metadata.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    for record in data["images"]:
        record.pop("notes", None)
        if record["file_name"] in notes:
            record["notes"] = notes[record["file_name"]]
    path.write_text(json.dumps(data), encoding="utf-8")


def _resave(path: Path) -> None:
    """The same picture written again with other bytes: a changed file to the indexer."""
    from PIL import Image as PILImage

    with PILImage.open(path) as image:
        image.load()
        image.save(path, format="JPEG", quality=70)


def _ids(library: Library) -> dict[str, int]:
    with library.catalog.session() as s:
        return dict(s.execute(select(Image.rel_path, Image.id)).all())


def _found(library: Library, text: str) -> set[int]:
    return {i for i, _ in text_ranked(library.catalog, text, 10_000)}


def _with_notes(photos: Path) -> list[str]:
    """Give two of `photos` notes; the photos' relative paths, sorted."""
    files = sorted(p.relative_to(photos).as_posix() for p in photos.rglob("*.jpg"))
    _write_metadata(photos, {files[0]: "Basking on warm granite", files[-1]: "near a pond"})
    return files


@pytest.fixture(scope="module")
def notes_library(tmp_path_factory, small_demo_collection, demo_encoder):
    """(photos, library folder, files): the small demo collection with two photos' notes,
    indexed once for the module. Read-only: `indexed` hands each test a copy of the library."""
    root = tmp_path_factory.mktemp("textsearch")
    photos = Path(shutil.copytree(small_demo_collection.root, root / "photos"))
    files = _with_notes(photos)
    with Library.open(root / "lib") as library:
        Indexer(library, demo_encoder).run(photos)
    return photos, root / "lib", files


@pytest.fixture
def indexed(tmp_path: Path, notes_library):
    """A private copy of the notes library; its photos are shared, so a test that changes
    photos takes `indexed_own_photos`."""
    photos, template, files = notes_library
    library = Library.open(shutil.copytree(template, tmp_path / "lib"))
    yield library, photos, files
    library.close()


@pytest.fixture
def indexed_own_photos(photos: Path, tmp_path: Path, demo_encoder):
    """The small demo collection (a private copy), two photos with notes, indexed."""
    files = _with_notes(photos)
    library = Library.open(tmp_path / "lib")
    Indexer(library, demo_encoder).run(photos)
    yield library, photos, files
    library.close()


# -- reading notes ----------------------------------------------------------------------------


def test_notes_come_from_the_first_field_with_text_stripped_and_capped(tmp_path: Path):
    long = "x" * (NOTES_MAX_CHARS + 50)
    images = [
        {"id": 1, "file_name": "a.jpg", "notes": "  on a fence post  ", "description": "no"},
        {"id": 2, "file_name": "b.jpg", "notes": "   ", "description": "Under the bridge"},
        {"id": 3, "file_name": "c.jpg", "remarks": "flew off"},
        {"id": 4, "file_name": "d.jpg", "description": long},
        {"id": 5, "file_name": "e.jpg"},
        {"id": 6, "file_name": "f.jpg", "notes": ["a", "list"], "remarks": "kept"},
    ]
    path = tmp_path / "metadata.json"
    path.write_text(json.dumps({"images": images}), encoding="utf-8")
    meta = load_coco_metadata(path)
    assert meta["a.jpg"].notes == "on a fence post"
    assert meta["b.jpg"].notes == "Under the bridge"
    assert meta["c.jpg"].notes == "flew off"
    assert meta["d.jpg"].notes == "x" * NOTES_MAX_CHARS
    assert meta["e.jpg"].notes is None
    assert meta["f.jpg"].notes == "kept"
    assert meta.values_ignored == 1  # the list where notes belong


def test_the_indexer_stores_notes_and_the_index_finds_them(indexed):
    library, _, files = indexed
    ids = _ids(library)
    with library.catalog.session() as s:
        notes = dict(
            s.execute(select(Image.rel_path, Image.notes).where(Image.notes.isnot(None))).all()
        )
    assert notes == {files[0]: "Basking on warm granite", files[-1]: "near a pond"}
    # Diacritics and case do not matter; the notes' words find their photo and no other.
    assert [i for i, _ in text_ranked(library.catalog, "GRANÍTE basking", 10)] == [ids[files[0]]]
    assert _found(library, "pond") == {ids[files[-1]]}
    words = matched_words(library.catalog, [ids[files[0]]], "red circle basking on granite")
    assert words[ids[files[0]]]["notes"] == ["basking", "granite"]
    assert words[ids[files[0]]]["common"] == ["red", "circle"]


def test_names_at_every_rank_and_common_names_find_their_photos(indexed):
    library, _, files = indexed
    with library.catalog.session() as s:
        red_circles = set(
            s.scalars(
                select(Image.id)
                .join(Taxon, Taxon.id == Image.taxon_id)
                .where(Taxon.common_name == "red circle")
            )
        )
        all_photos = set(s.scalars(select(Image.id)))
    assert red_circles
    assert _found(library, "Circulus ruber") >= red_circles
    assert _found(library, "Plantae") == all_photos  # the kingdom of every demo taxon
    ranked = text_ranked(library.catalog, "red circle", 1000)
    top = {i for i, s in ranked if s == ranked[0][1]}
    # Both words, the best score, tied (the photo with notes has a longer record: lower bm25);
    # every other photo matches one word only.
    noted = _ids(library)[files[0]]
    assert noted in red_circles and top == red_circles - {noted}
    scores = [s for _, s in ranked]
    assert scores == sorted(scores, reverse=True)
    # Ties are broken by the smaller id, so the order is the same every time.
    assert ranked == sorted(ranked, key=lambda p: (-p[1], p[0]))


def test_hostile_text_never_raises_and_finds_only_words(indexed):
    library, _, _ = indexed
    hostile = [
        '"',
        '"""',
        "red\" OR 'circle",
        "NOT red",
        "red AND",
        "OR OR OR",
        "NEAR(red circle, 2)",
        "circle*",
        "*",
        "^red",
        "names:red",
        "{names common}: red",
        "(((red",
        "red)))",
        "-red +circle",
        "\x00\x01\x1f",
        "🦊🐍 ☃ ǅ",
        "Ωμέγα 中文 العربية",
        "e\u0301",
        "x" * 5000,
        " ".join(["red"] * 600),
        "; DROP TABLE images; --",
    ]
    rng = random.Random(12)
    alphabet = "\"'*^:()-+ {}[]ORANDNEARnot\\/%_.,;\u0301é中🦊\t\n"
    hostile += [
        "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 1200))) for _ in range(60)
    ]
    for text in hostile:
        expression = fts_query(text)
        assert expression is None or expression.count('"') % 2 == 0
        text_ranked(library.catalog, text, 50)  # must not raise
        text_ranked(library.catalog, "circle", 50, exclude=text)
        matched_words(library.catalog, [1, 2, 3], text)
        taxa_in_query(library.catalog, text)
    assert fts_query("") is None and fts_query("the a of") is None
    # Operators are plain words: NOT, OR, AND, NEAR and column filters do nothing special.
    assert _found(library, "names:red") == _found(library, "names red")
    assert _found(library, "NOT red") == _found(library, "not red") == _found(library, "red")


def test_exclude_leaves_out_photos_whose_record_holds_the_word(indexed):
    library, _, _ = indexed
    circles = _found(library, "circle")
    not_red = _found(library, "circle") - _found(library, "red")
    assert text_ranked(library.catalog, "circle", 1000, exclude="red")
    assert {i for i, _ in text_ranked(library.catalog, "circle", 1000, exclude="red")} == not_red
    assert not_red < circles


def test_allowed_ids_restrict_the_ranking(indexed):
    library, _, _ = indexed
    everything = [i for i, _ in text_ranked(library.catalog, "circle", 1000)]
    allowed = everything[::3]
    within = [i for i, _ in text_ranked(library.catalog, "circle", 1000, allowed)]
    assert within == [i for i in everything if i in set(allowed)]
    assert text_ranked(library.catalog, "circle", 1000, []) == []


# -- keeping the index right ----------------------------------------------------------------------


def test_the_index_follows_reindexing_missing_photos_and_removal(indexed_own_photos, demo_encoder):
    library, photos, files = indexed_own_photos
    ids = _ids(library)
    # New notes, picked up when the changed photos are indexed again (the indexer applies a
    # record when it encodes the photo).
    _write_metadata(photos, {files[1]: "Basking again"})
    for name in files[:2] + files[-1:]:
        _resave(photos / name)
    Indexer(library, demo_encoder).run(photos)
    assert _found(library, "basking") == {ids[files[1]]}
    assert _found(library, "pond") == set()

    # A photo gone from disk is out of the index; back on disk, it is found again.
    moved = photos.parent / "aside.jpg"
    shutil.move(photos / files[1], moved)
    Indexer(library, demo_encoder).run(photos)
    assert _found(library, "basking") == set()
    with library.catalog.session() as s:
        assert s.get(Image, ids[files[1]]).status == "missing"
    shutil.move(moved, photos / files[1])
    Indexer(library, demo_encoder).run(photos)
    assert _found(library, "basking") == {ids[files[1]]}

    # A removed collection leaves nothing behind.
    with library.catalog.session() as s:
        collection_id = s.get(Image, ids[files[1]]).collection_id
    remove_collection(library, collection_id)
    assert _found(library, "basking Plantae circle") == set()
    with sqlite3.connect(library.catalog.path) as db:
        assert db.execute("SELECT count(*) FROM record_text").fetchone() == (0,)


def test_the_index_follows_taxon_changes(indexed):
    library, _, _ = indexed
    with library.catalog.session() as s:
        taxon = s.scalar(select(Taxon).where(Taxon.common_name == "red circle"))
        photos = set(s.scalars(select(Image.id).where(Image.taxon_id == taxon.id)))
        s.execute(update(Taxon).where(Taxon.id == taxon.id).values(common_name="scarlet disc"))
    assert _found(library, "scarlet") == photos
    assert not _found(library, "red") & photos
    with library.catalog.session() as s:
        s.execute(update(Taxon).where(Taxon.id == taxon.id).values(genus="Discus"))
    assert _found(library, "Discus") == photos
    # A deleted taxon leaves its photos without names (the foreign key sets NULL).
    with library.catalog.session() as s:
        s.delete(s.get(Taxon, taxon.id))
    assert _found(library, "scarlet") == set()
    assert _found(library, "Discus") == set()
    with library.catalog.session() as s:
        orphan = next(iter(photos))
        s.execute(update(Image).where(Image.id == orphan).values(notes="an orphan"))
    assert _found(library, "orphan") == {orphan}


def test_the_index_matches_a_rebuild_from_the_catalog(indexed_own_photos, demo_encoder):
    """What the triggers kept equals what the migration's fill computes from scratch."""
    library, photos, files = indexed_own_photos
    _write_metadata(photos, {files[2]: "Third", files[3]: "fourth one"})
    for name in files[:4] + files[-1:]:
        _resave(photos / name)
    Indexer(library, demo_encoder).run(photos)
    with library.catalog.session() as s:
        s.execute(update(Taxon).where(Taxon.common_name == "blue square").values(family="Boxes"))
    fill = _migration().FILL
    with sqlite3.connect(library.catalog.path) as db:
        kept = db.execute(
            "SELECT rowid, names, common, notes FROM record_text ORDER BY 1"
        ).fetchall()
        db.execute("CREATE TEMP TABLE fresh(rowid INTEGER PRIMARY KEY, names, common, notes)")
        db.execute(fill.replace("INSERT INTO record_text", "INSERT INTO fresh"))
        fresh = db.execute("SELECT rowid, names, common, notes FROM fresh ORDER BY 1").fetchall()
        db.execute("INSERT INTO record_text(record_text) VALUES ('integrity-check')")
    assert kept == fresh and len(kept) == len(files)


def _migration():
    import importlib.util

    from engine.catalog.db import MIGRATIONS_DIR

    path = MIGRATIONS_DIR / "versions" / "0005_record_text.py"
    spec = importlib.util.spec_from_file_location("record_text_migration", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_new_catalog_has_the_index_and_its_triggers(tmp_path: Path):
    from engine.catalog import open_catalog

    open_catalog(tmp_path / "c.sqlite3").dispose()
    with sqlite3.connect(tmp_path / "c.sqlite3") as db:
        names = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='trigger'")}
        sql = db.execute("SELECT sql FROM sqlite_master WHERE name='record_text'").fetchone()[0]
    assert names >= TRIGGERS
    assert "remove_diacritics 2" in sql and "unicode61" in sql


def test_an_old_library_is_migrated_and_its_index_filled(tmp_path: Path):
    library_dir = Path(shutil.copytree(UPGRADE_FIXTURE / "library", tmp_path / "library"))
    with sqlite3.connect(library_dir / "catalog.sqlite3") as db:
        assert db.execute("SELECT version_num FROM alembic_version").fetchone() == ("0004",)
    with Library.open(library_dir) as library:
        with library.catalog.session() as s:
            with_taxon = set(
                s.scalars(select(Image.id).where(Image.status == "ok", Image.taxon_id.isnot(None)))
            )
            names = dict(
                s.execute(
                    select(Image.id, Taxon.name).join(Taxon, Taxon.id == Image.taxon_id)
                ).all()
            )
        assert with_taxon  # the fixture's photos have taxa
        assert _found(library, "Plantae") == with_taxon
        some = next(iter(with_taxon))
        assert some in _found(library, names[some])
    with sqlite3.connect(library_dir / "catalog.sqlite3") as db:
        names_in_db = {
            r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='trigger'")
        }
        assert names_in_db >= TRIGGERS
        assert db.execute("SELECT count(*) FROM images WHERE notes IS NOT NULL").fetchone() == (0,)


# -- taxa named in a query --------------------------------------------------------------------


def test_taxa_in_query_finds_names_at_any_rank_longest_first(indexed):
    library, _, _ = indexed
    catalog = library.catalog

    def first(text: str) -> tuple[str, str, str, str]:
        m = taxa_in_query(catalog, text)[0]
        return m.name, m.rank, m.matched, m.rest

    assert first("two red circles on sand") == (
        "Circulus ruber",
        "species",
        "red circles",
        "two on sand",
    )
    assert first("a RED CIRCLE") == ("Circulus ruber", "species", "RED CIRCLE", "")
    assert first("circulus ruber basking") == (
        "Circulus ruber",
        "species",
        "circulus ruber",
        "basking",
    )
    assert first("Circulus in the shade") == ("Circulus", "genus", "Circulus", "in the shade")
    assert first("any Trigonaceae?") == ("Trigonaceae", "family", "Trigonaceae", "any ?")
    # A common name's last word names the group of taxa so called: "circles" → Circulus.
    assert first("circles standing upright") == ("Circulus", "genus", "circles", "standing upright")
    mentions = taxa_in_query(catalog, "a red circle beside a blue square")
    assert [(m.name, m.start, m.end) for m in mentions] == [
        ("Circulus ruber", 2, 12),
        ("Quadratum caeruleum", 22, 33),
    ]
    assert mentions[0].rest == "beside a blue square"
    assert mentions[0].common_name == "red circle"
    assert mentions[0].count == len(mention_image_ids(catalog, mentions[0]))
    genus = taxa_in_query(catalog, "Circulus")[0]
    assert genus.count == sum(
        len(mention_image_ids(catalog, m))
        for m in (
            taxa_in_query(catalog, f"{c} circle")[0] for c in ("red", "green", "blue", "yellow")
        )
    )
    # Whole words only, and nothing for words that name no taxon of the catalog.
    assert taxa_in_query(catalog, "redcircle circlet mongoose standing upright") == []
    assert taxa_in_query(catalog, "") == []


def test_a_taxon_without_searchable_photos_is_not_named(indexed):
    library, _, _ = indexed
    with library.catalog.session() as s:
        taxon = s.scalar(select(Taxon).where(Taxon.common_name == "green square"))
        s.execute(update(Image).where(Image.taxon_id == taxon.id).values(status="missing"))
    assert [m.name for m in taxa_in_query(library.catalog, "green square")] == ["Quadratum"]
