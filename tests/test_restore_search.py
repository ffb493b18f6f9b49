"""Searches meeting a restore. A restore puts back the catalog's photos and vectors, and a
photo id may since have been given to another photo (a collection forgotten, another indexed):
the vector index files then hold other photos' vectors under the restored ids. Searches in a
fresh process, in a process that had the library open during the restore, and running while it
happens must all answer from the restored vectors (or, mid-restore, from the catalog as it was
before), never show a photo for another photo's vector."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from PIL import Image, ImageOps

from engine.catalog.backup import backup_catalog
from engine.catalog.library import Library
from engine.indexing.collections import remove_collection
from engine.indexing.indexer import Indexer
from engine.search.searcher import Searcher

pytestmark = pytest.mark.integration  # (runs processes; the fast lane leaves it out)

REPO = Path(__file__).resolve().parents[1]
QUERIES = ("a yellow square", "a blue circle", "a red triangle")

_RESTORE = """
import sys
from engine.catalog.library import Library
from engine.catalog.restore import restore_backup
with Library.open(sys.argv[1]) as library, library.writer_lock():
    restore_backup(library.root, library.catalog, sys.argv[2])
"""


def _answers(library: Library, encoder) -> list[list[tuple[str, float]]]:  # type: ignore[no-untyped-def]
    """Each query's top five as (photo path, score)."""
    searcher = Searcher(library, encoder)
    out = []
    for query in QUERIES:
        ranked = searcher.ranked(encoder.encode_texts([query])[0], top_k=5)
        out.append([(h.path, round(h.score, 4)) for h in searcher.hits_for(ranked)])
    return out


def _inverted_copy(source: Path, dest: Path) -> Path:
    """The same photos, colours inverted: other vectors under the same names."""
    for path in sorted(source.rglob("*.jpg")):
        target = dest / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        ImageOps.invert(Image.open(path).convert("RGB")).save(target, quality=95)
    return dest


def _restore_in_another_process(library_dir: Path, backup: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    subprocess.run([sys.executable, "-c", _RESTORE, str(library_dir), str(backup)],
                   check=True, env=env, timeout=300, capture_output=True)  # fmt: skip


def test_searches_after_a_restore_answer_from_the_restored_vectors(
    tmp_path: Path, copy_small_demo_library, small_demo_collection, demo_encoder
) -> None:
    library_dir = copy_small_demo_library(tmp_path / "lib")
    inverted = _inverted_copy(small_demo_collection.root, tmp_path / "inverted" / "c")
    with Library.open(library_dir) as library:
        truth = _answers(library, demo_encoder)
        backup = backup_catalog(library_dir, library.catalog, reason="manual")
        remove_collection(library, 1)  # the only collection
        Indexer(library, demo_encoder).run(inverted)  # its photos take the freed ids
        changed = _answers(library, demo_encoder)
    assert changed != truth
    # A window kept open across the restore, searching before and after it.
    with Library.open(library_dir) as open_window:
        assert _answers(open_window, demo_encoder) == changed
        _restore_in_another_process(library_dir, backup)
        assert _answers(open_window, demo_encoder) == truth
    with Library.open(library_dir) as fresh:  # a process started after it
        assert _answers(fresh, demo_encoder) == truth


@pytest.mark.slow  # (searches all along a restore in another process: about 25 s)
def test_a_search_running_during_a_restore_sees_one_catalog_or_the_other(
    tmp_path: Path, copy_small_demo_library, small_demo_collection, demo_encoder
) -> None:
    library_dir = copy_small_demo_library(tmp_path / "lib")
    inverted = _inverted_copy(small_demo_collection.root, tmp_path / "inverted" / "c")
    with Library.open(library_dir) as library:
        truth = _answers(library, demo_encoder)
        backup = backup_catalog(library_dir, library.catalog, reason="manual")
        remove_collection(library, 1)
        Indexer(library, demo_encoder).run(inverted)
        changed = _answers(library, demo_encoder)
    seen: list[object] = []
    failed_from: list[float] = []  # when each failed search started
    done = threading.Event()
    with Library.open(library_dir) as open_window:

        def search_all_along() -> None:
            while not done.is_set():
                started = time.monotonic()
                try:
                    seen.append(_answers(open_window, demo_encoder))
                except Exception as error:  # noqa: BLE001 - the test reports it
                    seen.append(error)
                    failed_from.append(started)

        searching = threading.Thread(target=search_all_along)
        searching.start()
        try:
            _restore_in_another_process(library_dir, backup)
        finally:
            restore_ended = time.monotonic()
            done.set()
            searching.join(60)
        seen.append(_answers(open_window, demo_encoder))
    assert len(seen) >= 2
    errors = [answer for answer in seen if isinstance(answer, Exception)]
    # Only searches the restore fell into fail, each in one line asking for it again (how
    # many depends on how long the restore takes); none started after it had ended.
    assert all("restored while this search ran" in str(e) for e in errors), errors[:3]
    assert all(started <= restore_ended for started in failed_from)
    # Each search (one query) answers as one catalog or the other; the restore may fall
    # between two queries of a round.
    answers = [answer for answer in seen if not isinstance(answer, Exception)]
    mixed = [
        (query, found)
        for answer in answers
        for query, found in enumerate(answer)  # type: ignore[arg-type]
        if found not in (truth[query], changed[query])
    ]
    assert mixed == [], f"a search mixed two catalogs: {mixed[0]}"
    assert seen[-1] == truth
    shutil.rmtree(tmp_path / "inverted", ignore_errors=True)
