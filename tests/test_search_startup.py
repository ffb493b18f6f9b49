"""What `quadrat search` skips on its way to the first answer keeps its behaviour: the catalog's
quick revision check, the `--method` help listed only when printed, CLIP's tokenizer without
ftfy on plain ASCII. (tests/test_onnx_runtime.py checks the imports of a whole search.)"""

from __future__ import annotations

import random
import sqlite3
import string
import subprocess
import sys
from pathlib import Path

import numpy as np
from sqlalchemy import create_engine

from engine.catalog import db
from engine.catalog.db import open_catalog
from engine.models.onnx_runtime import ClipTokenizer

ROOT = Path(__file__).resolve().parent.parent


def _revision_check(path: Path) -> str | None:
    engine = create_engine(f"sqlite:///{path}")
    try:
        return db._current_head_quickly(engine)
    finally:
        engine.dispose()


def test_only_a_catalog_at_the_newest_revision_skips_alembic(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite3"
    open_catalog(path).dispose()
    with sqlite3.connect(path) as conn:
        (head,) = conn.execute("SELECT version_num FROM alembic_version").fetchone()
    from alembic.script import ScriptDirectory

    assert head == ScriptDirectory(str(db.MIGRATIONS_DIR)).get_current_head()
    assert _revision_check(path) == head
    for older_or_unknown in ("0001", "9999"):  # Alembic upgrades the one, refuses the other
        with sqlite3.connect(path) as conn:
            conn.execute("UPDATE alembic_version SET version_num = ?", (older_or_unknown,))
        assert _revision_check(path) is None
    assert _revision_check(tmp_path / "new.sqlite3") is None  # no revision table yet


def test_search_help_still_lists_the_methods_that_run_here() -> None:
    shown = subprocess.run(
        [sys.executable, "-m", "app.cli", "search", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    flat = " ".join(shown.split())
    assert "here: text, visret, rerank" in flat
    assert "%(" not in flat


def test_plain_ascii_queries_get_open_clips_tokens() -> None:
    import open_clip

    theirs = open_clip.get_tokenizer("ViT-B-32")
    rng = random.Random(25)
    letters = string.printable  # tabs, newlines and "&" too: those go through ftfy
    texts = ["".join(rng.choice(letters) for _ in range(rng.randint(0, 60))) for _ in range(400)]
    texts += ["red circle", "&amp;amp; entities", "a\x07bell", "\x1b[31mred\x1b[0m"]
    assert np.array_equal(ClipTokenizer().tokens(texts, 77), theirs(texts).numpy())
