"""A search during an indexing run says what is true: before the run's first checkpoint,
that indexing is running (not that the library has no photos); after it, it searches the
photos committed so far."""

from __future__ import annotations

import threading
from pathlib import Path

from app.cli import main
from engine.catalog.library import Library
from engine.indexing.indexer import Indexer
from engine.progress import Progress


def _search(capsys, library: Path) -> tuple[int, str, str]:
    code = main(["search", "red circle", "--library", str(library), "--model", "demo"])
    out, err = capsys.readouterr()
    return code, out, err


def _indexing_paused_at(library: Library, photos: Path, encoder, stage: str, done: int):
    """Start indexing `photos` in a thread that pauses at its first `stage` report with at
    least `done` units; returns (thread, resume)."""
    reached, resume = threading.Event(), threading.Event()

    def progress(report: Progress) -> None:
        if report.message == stage and report.done >= done and not reached.is_set():
            reached.set()
            resume.wait(120)

    indexer = Indexer(library, encoder, batch_size=8, checkpoint_every=8)
    thread = threading.Thread(target=lambda: indexer.run(photos, progress=progress))
    thread.start()
    assert reached.wait(120)
    return thread, resume


def test_a_search_before_the_first_checkpoint_says_indexing_is_running(
    tmp_path, photos, demo_encoder, capsys
):
    library = Library.open(tmp_path / "lib")
    thread, resume = _indexing_paused_at(library, photos, demo_encoder, "scanning folder", 0)
    try:
        code, out, err = _search(capsys, tmp_path / "lib")
    finally:
        resume.set()
        thread.join()
    assert code == 2 and out == ""
    assert "indexing is running" in err and "search again in a moment" in err
    assert "no indexed photos" not in err
    library.close()
    # Once the run is over the search works, and with no run a truly empty library says so.
    assert _search(capsys, tmp_path / "lib")[0] == 0
    empty = Library.open(tmp_path / "empty")
    empty.close()
    code, _, err = _search(capsys, tmp_path / "empty")
    assert code == 2 and "no indexed photos yet" in err


def test_a_search_after_a_checkpoint_searches_the_photos_committed_so_far(
    tmp_path, photos, demo_encoder, capsys
):
    library = Library.open(tmp_path / "lib")
    thread, resume = _indexing_paused_at(library, photos, demo_encoder, "indexing", 16)

    def committed_now() -> int:
        from sqlalchemy import func, select

        from engine.catalog import Embedding

        with library.catalog.session() as s:
            return int(s.scalar(select(func.count()).select_from(Embedding)) or 0)

    try:
        # Checkpoints are written by a commit thread of their own, which may finish one more
        # while the encoder waits here: the search sees what was committed when it ran.
        before = committed_now()
        code, out, err = _search(capsys, tmp_path / "lib")
        committed = committed_now()
    finally:
        resume.set()
        thread.join()
        library.close()
    assert code == 0, err
    assert 0 < before <= committed < len(list(photos.rglob("*.jpg")))
    results = [line for line in out.splitlines() if line.strip()]
    assert 0 < len(results) <= committed
