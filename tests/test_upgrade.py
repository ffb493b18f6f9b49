"""Upgrades keep data: a library and a settings file written by an earlier version open with the
current code, with every judgment, saved query and setting still there.

The files under tests/data/upgrade/ were written by tools/make_upgrade_fixture.py and are kept as
they are: later versions must keep this test passing against them (add a new fixture folder for a
new version rather than regenerating this one).
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from alembic.script import ScriptDirectory
from sqlalchemy import select

FIXTURE = Path(__file__).parent / "data" / "upgrade"


@pytest.fixture
def expected() -> dict:
    return json.loads((FIXTURE / "expected.json").read_text(encoding="utf-8"))


@pytest.fixture
def library_dir(tmp_path: Path) -> Path:
    """A copy of the fixture library: opening it migrates it, and the fixture must stay as is."""
    return Path(shutil.copytree(FIXTURE / "library", tmp_path / "library"))


def test_the_fixture_is_small_and_names_no_machine():
    files = [p for p in FIXTURE.rglob("*") if p.is_file()]
    assert sum(p.stat().st_size for p in files) < 1_000_000
    catalog = (FIXTURE / "library" / "catalog.sqlite3").read_bytes()
    assert b"/tmp/" not in catalog and b"/home/" not in catalog


def test_settings_written_today_load_with_every_value(quadrat_home: Path, expected: dict):
    from app.settings import Settings, load_settings, save_settings, settings_path

    settings_path().parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(FIXTURE / "settings.json", settings_path())
    loaded = load_settings()
    assert loaded.problems == []
    wanted = {k: v for k, v in expected["settings"].items() if k != "version"}
    got = {name: getattr(loaded.settings, name) for name in wanted}
    assert got == wanted
    assert loaded.settings != Settings()  # the fixture's values are not the defaults
    # Saved again by this version, the file still holds the same values.
    save_settings(loaded.settings)
    again = json.loads(settings_path().read_text(encoding="utf-8"))
    assert {k: again[k] for k in wanted} == wanted


def test_library_written_today_opens_migrated_with_queries_and_judgments(
    library_dir: Path, expected: dict
):
    from engine.catalog import Image
    from engine.catalog.db import MIGRATIONS_DIR
    from engine.catalog.library import Library
    from engine.judgments.queries import QueryStore

    with Library.open(library_dir) as library:
        store = QueryStore(library)
        queries = {q.text: q for q in store.list_queries()}
        assert sorted(queries) == sorted(q["text"] for q in expected["queries"])
        with library.catalog.session() as s:
            paths = {i: p for i, p in s.execute(select(Image.id, Image.rel_path))}
        assert len(paths) == expected["library"]["photos_indexed"]
        for want in expected["queries"]:
            query = queries[want["text"]]
            assert (query.name, query.notes) == (want["name"], want["notes"])
            assert [run.method for run in store.runs_for(query.id)] == want["runs"]
            judged = {paths[i]: rel for i, rel in store.judgments(query.id).items()}
            assert judged == want["judgments"]
            assert 0 in judged.values() and 1 in judged.values()  # negatives are kept too
        # The vectors are still there for the model that indexed them.
        assert library.model_key == expected["library"]["model_key"]
        index = library.vector_index(library.model_key)
        assert len(index) == expected["library"]["photos_indexed"]

    # Opening ran the catalog's migrations up to this version's newest schema.
    head = ScriptDirectory(str(MIGRATIONS_DIR)).get_current_head()
    with sqlite3.connect(library_dir / "catalog.sqlite3") as db:
        assert db.execute("SELECT version_num FROM alembic_version").fetchall() == [(head,)]
