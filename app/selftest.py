"""`quadrat --self-test`: a smoke test of an installed (or frozen) Quadrat, with no network.

It runs offscreen against a throwaway data folder (`QUADRAT_HOME` pointed at a temporary folder,
removed afterwards), so the user's libraries, settings and logs are never touched: writes the
small demo collection, indexes it with the bundled demo model, searches it by text, judges the
top results from the demo's exact judgments, checks the live metrics against a hand computation,
and opens and closes the window. It prints one line — what passed and how long it took, or the
step that failed and why — and exits 0 only if every step passed.

Qt is imported by the window step only, and only after `QT_QPA_PLATFORM=offscreen` is set.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2

SEARCH_TEXT = "red circle"  # a species query of the demo benchmark
JUDGED = 5  # top results judged, and the metrics' cut-off
IMAGES_PER_CLASS = 5  # the small demo collection: 12 x 5 plain photos + 48 for other queries
WINDOW_TIMEOUT_S = 60.0


class SelfTestFailure(Exception):
    """A step ran but did not give what it should; the message says what was wrong."""


@dataclass
class _State:
    """What the steps hand on to each other."""

    home: Path
    collection: Any = None  # engine.demo.collection.DemoCollection
    library: Any = None  # engine.catalog.library.Library
    encoder: Any = None
    hits: list[Any] = field(default_factory=list)  # engine.search.searcher.SearchHit
    query_id: int = 0
    run_id: int = 0
    judgments: dict[int, int] = field(default_factory=dict)
    done: list[str] = field(default_factory=list)  # what each passed step reports


def _write_demo(state: _State) -> None:
    from engine.demo.collection import write_demo_collection

    state.collection = write_demo_collection(
        state.home / "demo-collection", images_per_class=IMAGES_PER_CLASS
    )
    written = sum(1 for p in state.collection.root.rglob("*.jpg"))
    if written != state.collection.image_count:
        raise SelfTestFailure(
            f"{written} photos on disk, the demo says {state.collection.image_count}"
        )
    state.done.append(f"demo written ({written} photos)")


def _index(state: _State) -> None:
    from engine.catalog.library import Library
    from engine.indexing.indexer import Indexer
    from engine.models.encoders import load_encoder

    state.encoder = load_encoder("demo", device="cpu")
    state.library = Library.open(state.home / "library")
    report = Indexer(state.library, state.encoder, batch_size=32).run(
        state.collection.root, metadata=state.collection.metadata_path
    )
    if report.skipped or report.indexed != state.collection.image_count:
        raise SelfTestFailure(
            f"{report.indexed} of {state.collection.image_count} photos indexed, "
            f"{len(report.skipped)} skipped"
        )
    state.done.append("indexed")


def _relevant_paths(state: _State, text: str) -> set[str]:
    """The photos (relative paths) the demo's exact judgments call relevant to `text`."""
    query = next(q for q in state.collection.queries if q.text == text)
    return set(state.collection.relevant[query.query_id])


def _search(state: _State) -> None:
    # Through the method registry, as `quadrat search` and the window run a search.
    from engine.methods import SearchQuery, search_hits

    state.hits = search_hits(state.library, state.encoder, SearchQuery(SEARCH_TEXT), top_k=20)
    if len(state.hits) < JUDGED:
        raise SelfTestFailure(f"'{SEARCH_TEXT}' found {len(state.hits)} photos")
    relevant = _relevant_paths(state, SEARCH_TEXT)
    if state.hits[0].rel_path not in relevant:
        # The demo model finds every species: a wrong first result means a broken model or index.
        raise SelfTestFailure(f"the first result for '{SEARCH_TEXT}' is {state.hits[0].rel_path}")
    state.done.append("searched")


def _judge(state: _State) -> None:
    from engine.judgments.queries import QueryStore

    store = QueryStore(state.library)
    state.query_id = store.find_or_create_query(SEARCH_TEXT)
    state.run_id = store.save_run(
        state.query_id,
        "text",
        [(hit.image_id, hit.score) for hit in state.hits],
        model_key=state.encoder.model_key,
    )
    relevant = _relevant_paths(state, SEARCH_TEXT)
    for hit in state.hits[:JUDGED]:
        store.judge(state.query_id, hit.image_id, int(hit.rel_path in relevant))
    state.judgments = store.judgments(state.query_id)
    if len(state.judgments) != JUDGED:
        raise SelfTestFailure(f"{JUDGED} photos judged, {len(state.judgments)} read back")
    state.done.append(f"judged {JUDGED}")


def _metrics(state: _State) -> None:
    from engine.evaluation.live import live_metrics

    ranking = [hit.image_id for hit in state.hits]
    live = live_metrics(ranking, state.judgments, JUDGED, state.run_id)
    # By hand, as docs/SPEC.md §1 defines them: unjudged photos count as not relevant.
    rel = [1 if state.judgments.get(image_id, 0) > 0 else 0 for image_id in ranking[:JUDGED]]
    total = sum(1 for value in state.judgments.values() if value > 0)
    precision_at = [sum(rel[:i]) / i for i in range(1, JUDGED + 1)]
    expected = {
        "P": sum(rel) / JUDGED,
        "AP": (
            sum(p * r for p, r in zip(precision_at, rel, strict=True)) / min(JUDGED, total)
            if total
            else 0.0
        ),
        "RR": next((1 / i for i, r in enumerate(rel, start=1) if r), 0.0),
    }
    for name, value in expected.items():
        got = getattr(live.metrics, name)
        if not math.isclose(got, value, abs_tol=1e-9):
            raise SelfTestFailure(f"{name}@{JUDGED} is {got:.6f}, by hand {value:.6f}")
    state.done.append("metrics")


def _window(state: _State) -> None:
    # Close the engine's handle first: the window opens the library itself, as a user would.
    state.library.close()
    state.library = None
    from PySide6.QtCore import QEventLoop, QTimer, qInstallMessageHandler
    from PySide6.QtWidgets import QApplication

    from app.controllers.application import Application  # its widgets apply the Qt guards
    from app.settings import Settings

    qt_log = logging.getLogger("quadrat.selftest.qt")
    # Qt's own warnings (the offscreen plugin's, say) go to the log, not between the result lines.
    previous = qInstallMessageHandler(lambda _kind, _context, text: qt_log.info("Qt: %s", text))
    qt_app = QApplication.instance() or QApplication(sys.argv[:1])
    encoder = state.encoder
    app = Application(
        settings=Settings(model="demo", library_dir=str(state.home / "library"), batch_size=32),
        log_file=None,
        encoder_loader=lambda spec, device: encoder,
    )
    ready: list[str] = []
    loop = QEventLoop()

    def ready_changed(ok: bool, message: str) -> None:
        if ok:
            ready.append(message)
            loop.quit()

    app.session.readyChanged.connect(ready_changed)
    QTimer.singleShot(int(WINDOW_TIMEOUT_S * 1000), loop.quit)
    try:
        app.show()
        app.start()
        shown = app.window.isVisible()
        if not ready:
            loop.exec()
        if not shown:
            raise SelfTestFailure("the window was not shown")
        if not ready:
            raise SelfTestFailure(f"the window was not ready to search in {WINDOW_TIMEOUT_S:.0f} s")
        if not app.window.close():  # as the user closing it: the close guard shuts down
            raise SelfTestFailure("the window refused to close")
        if app.window.isVisible() or not app.runner.idle():
            raise SelfTestFailure("work was still running after the window closed")
    finally:
        app.shutdown()
        qt_app.processEvents()
        qInstallMessageHandler(previous)
    state.done.append("window opened and closed")


def _steps() -> list[tuple[str, Callable[[_State], None]]]:
    """The steps in order, looked up when the test runs (a test may replace one)."""
    return [
        ("demo", _write_demo),
        ("index", _index),
        ("search", _search),
        ("judge", _judge),
        ("metrics", _metrics),
        ("window", _window),
    ]


def run_self_test() -> tuple[bool, str]:
    """Run every step in a throwaway data folder; (passed, the one line to print)."""
    started = time.monotonic()
    # Before Qt loads: no screen is needed, and nothing is shown on one that is there.
    os.environ["QT_QPA_PLATFORM"] = "offscreen"
    saved_home = os.environ.get("QUADRAT_HOME")
    home = Path(tempfile.mkdtemp(prefix="quadrat-self-test-"))
    os.environ["QUADRAT_HOME"] = str(home)
    state = _State(home=home)
    failed: str | None = None
    try:
        _quiet_logging()
        for name, step in _steps():
            try:
                step(state)
            except Exception as exc:  # any failure ends the test with that step's name
                why = (
                    str(exc) if isinstance(exc, SelfTestFailure) else f"{type(exc).__name__}: {exc}"
                )
                failed = f"self-test failed at step '{name}': {why}"
                break
    finally:
        if state.library is not None:
            state.library.close()
        _end_logging()
        if saved_home is None:
            os.environ.pop("QUADRAT_HOME", None)
        else:
            os.environ["QUADRAT_HOME"] = saved_home
        shutil.rmtree(home, ignore_errors=True)
    seconds = f"{time.monotonic() - started:.1f} s"
    if failed:
        return False, f"{failed} — {seconds}"
    return True, f"self-test passed: {', '.join(state.done)} — {seconds}"


def _quiet_logging() -> None:
    """Log to the throwaway folder only; the terminal gets the one result line."""
    from app.logs import setup_logging

    setup_logging(stderr_level=logging.CRITICAL + 1)


def _end_logging() -> None:
    """Close the throwaway log file before its folder is removed."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, "_quadrat", False):
            root.removeHandler(handler)
            handler.close()


def main(argv: Sequence[str] = ()) -> int:
    """Entry point of `quadrat --self-test`: print one line, exit 0 only if all passed."""
    if argv:
        print(
            f"error: quadrat --self-test takes no arguments, got {' '.join(argv)}", file=sys.stderr
        )
        return EXIT_USAGE
    passed, line = run_self_test()
    print(line, file=sys.stdout if passed else sys.stderr, flush=True)
    return EXIT_OK if passed else EXIT_FAILED
