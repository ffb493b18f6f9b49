"""Screenshots of the real window under a virtual X server (Xvfb).

    python tools/screenshots.py [--out screenshots] [--screen 1280x800x24]
    python tools/screenshots.py --camera-traps [--out screenshots] [--screen 1280x800x24]
    python tools/screenshots.py --check-layout --screen 1280x800x24
    python tools/screenshots.py --check-layout --states --screen 1366x768x24

Starts Xvfb, opens Quadrat on the demo collection (in a throwaway QUADRAT_HOME, so your own
library is untouched) as a first window on that screen, drives it like a user (index, search,
select a result, open the settings, search by image, judge results and watch the metrics, run
the benchmark, filter by months and licence with the map and month histogram shown) and writes
one PNG per view into the output folder. It then checks the layout (window inside the screen,
every pane at least its minimum size, the photo whole, no text cut, the metrics and the
analyses usable) and exits with status 3 if anything is clipped, listing what in `layout.txt`.

`--camera-traps` does the same on the camera-trap demo (`quadrat demo --camera-traps DIR`,
then `quadrat gui DIR`): three deployments of bursts, searched at night, grouped by event,
judged per event, filtered by deployment and hour, and the relevant frames' hours of the day.

`--check-layout` only opens the window (no indexing), fills it with sample content, prints the
layout check as JSON and saves `layout-WxH.png`: a few seconds per screen size. With
`--states` it then shows every view state of tools/layout_states.py in turn (Reranked with
its questions, VisRet's drawings, filters and map, twelve runs, a 300-character query, ...),
checks each (window inside the screen, nothing cut or overlapping, two rows of thumbnails,
every label whole or elided) and saves `state-NAME-WxH.png` for each.

Needs Xvfb and the X libraries Qt's xcb plugin loads; on Debian/Ubuntu:

    sudo apt-get install xvfb libxcb-icccm4 libxcb-keysyms1 libxcb-cursor0 imagemagick

(ImageMagick's `import` captures the whole screen, dialogs included; without it the window
is grabbed by Qt itself.)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCREEN = "1600x1000x24"
LAYOUT_PROBLEMS = 3  # exit status when the window's layout clips something
INSTALL_HINT = (
    "Xvfb was not found. Install it (and the X libraries Qt needs), e.g. on Debian/Ubuntu:\n"
    "    sudo apt-get install xvfb libxcb-icccm4 libxcb-keysyms1 libxcb-cursor0 imagemagick"
)


def _start_xvfb(xvfb: str, screen: str) -> tuple[subprocess.Popen[bytes], str | None]:
    """Xvfb on a display number it picks itself (-displayfd), so runs side by side never
    race for one; returns the server and its display (None: it did not start)."""
    read, write = os.pipe()
    server = subprocess.Popen(
        [xvfb, "-displayfd", str(write), "-screen", "0", screen, "-nolisten", "tcp"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        pass_fds=(write,),
    )
    os.close(write)
    with os.fdopen(read) as pipe:
        number = pipe.readline().strip()  # written once the server accepts connections
    return server, (f":{number}" if number else None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=ROOT / "screenshots", help="folder for the PNGs"
    )
    parser.add_argument(
        "--screen",
        default=SCREEN,
        help="virtual screen as WIDTHxHEIGHTxDEPTH (default: %(default)s)",
    )
    parser.add_argument(
        "--check-layout",
        action="store_true",
        help="only open the window with sample content and check its layout (prints JSON)",
    )
    parser.add_argument(
        "--platform",
        choices=("xvfb", "offscreen"),
        default="xvfb",
        help="xvfb: the real window on a virtual X server (default); offscreen: Qt's offscreen "
        "platform with a screen of that size (no X server needed, no dialogs in the PNGs)",
    )
    parser.add_argument(
        "--home",
        type=Path,
        help="QUADRAT_HOME to use and keep (default: a throwaway one); the window's geometry "
        "is saved there at exit, so a second run shows the next session",
    )
    parser.add_argument(
        "--states",
        action="store_true",
        help="with --check-layout: also show and check every view state (tools/layout_states.py)",
    )
    parser.add_argument(
        "--camera-traps",
        action="store_true",
        help="drive the window on the camera-trap demo (events, deployments, hours)",
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        if args.check_layout:
            return _check_layout(args.out, args.states)
        if args.camera_traps:
            return _drive_camera_traps(args.out)
        return _drive_window(args.out)
    args.out.mkdir(parents=True, exist_ok=True)
    child_args = ["--child", "--out", str(args.out.resolve())]
    child_args += ["--check-layout"] if args.check_layout else []
    child_args += ["--states"] if args.states else []
    child_args += ["--camera-traps"] if args.camera_traps else []
    if args.platform == "offscreen":
        return _run_offscreen(args.screen, args.home, child_args)

    xvfb = shutil.which("Xvfb")
    if xvfb is None:
        print(INSTALL_HINT, file=sys.stderr)
        return 2
    server, display = _start_xvfb(xvfb, args.screen)
    try:
        if display is None:
            server.wait(timeout=10)
            print(f"Xvfb exited at start (code {server.returncode})", file=sys.stderr)
            return 1
        with _home(args.home) as home:
            env = _child_env(home, DISPLAY=display, QT_QPA_PLATFORM="xcb")
            child = subprocess.run(
                [sys.executable, str(Path(__file__).resolve()), *child_args],
                env=env,
                check=False,
            )
            if child.returncode not in (0, LAYOUT_PROBLEMS):
                print(
                    "the window could not be driven (see above); if Qt says it cannot load the "
                    "xcb plugin, run with QT_DEBUG_PLUGINS=1 to see the missing library, and "
                    "install the X libraries Qt needs:\n" + INSTALL_HINT.split("\n", 1)[-1],
                    file=sys.stderr,
                )
            return child.returncode
    finally:
        server.terminate()
        server.wait(timeout=10)


@contextlib.contextmanager
def _home(keep: Path | None) -> Iterator[str]:
    """QUADRAT_HOME for the child: `keep`, or a throwaway folder."""
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        yield str(keep.resolve())
        return
    with tempfile.TemporaryDirectory(prefix="quadrat-shots-") as home:
        yield home


def _child_env(home: str, **qt: str) -> dict[str, str]:
    env = dict(os.environ, QUADRAT_HOME=home, **qt)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def _run_offscreen(screen: str, keep: Path | None, child_args: list[str]) -> int:
    """The child on Qt's offscreen platform, its one screen of `screen` (WxH[xD]) pixels."""
    width, height = (int(n) for n in screen.lower().split("x")[:2])
    with _home(keep) as home:
        config = Path(home) / "offscreen-screen.json"
        config.write_text(
            json.dumps(
                {
                    "screens": [
                        {
                            "name": "screen",
                            "x": 0,
                            "y": 0,
                            "width": width,
                            "height": height,
                            "logicalDpi": 96,
                            "logicalBaseDpi": 96,
                            "dpr": 1,
                        }
                    ]
                }
            ),
            encoding="utf-8",
        )
        env = _child_env(home, QT_QPA_PLATFORM=f"offscreen:configfile={config}")
        child = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), *child_args], env=env, check=False
        )
        return child.returncode


class _Driver:
    """Waits, pumps events and captures the screen (or a widget) for a drive of the window."""

    def __init__(self, window, out: Path) -> None:  # noqa: ANN001
        self.window = window
        self.out = out
        self.shots: list[Path] = []

    def pump(self, seconds: float) -> None:
        from PySide6.QtCore import QCoreApplication, QElapsedTimer

        timer = QElapsedTimer()
        timer.start()
        while timer.elapsed() < seconds * 1000:
            QCoreApplication.processEvents()
            time.sleep(0.01)

    def wait_for(self, condition, timeout: float = 120.0) -> None:  # noqa: ANN001
        from PySide6.QtCore import QCoreApplication, QElapsedTimer

        timer = QElapsedTimer()
        timer.start()
        while not condition():
            if timer.elapsed() > timeout * 1000:
                raise TimeoutError("the window did not get there in time")
            QCoreApplication.processEvents()
            time.sleep(0.01)

    def capture(self, name: str, widget=None) -> None:  # noqa: ANN001
        self.pump(0.4)
        path = self.out / f"{name}.png"
        importer = shutil.which("import")
        if (
            widget is None
            and importer
            and Path(importer).resolve().parts[:3] != ("/", "usr", "local")
        ):
            subprocess.run([importer, "-window", "root", str(path)], check=True)
        else:
            (widget or self.window).grab().save(str(path))
        self.shots.append(path)

    def problems(self) -> list[str]:
        """What the layout check finds wrong now, the metrics' and analyses' use included."""
        import layout_states  # beside this file

        return self.window.layout_problems() + layout_states.panel_problems(self.window)


def _drive_window(out: Path) -> int:
    """Runs inside the virtual display: open the demo, act, capture."""
    from PySide6.QtWidgets import QApplication

    from app.controllers.application import Application
    from app.logs import setup_logging
    from widgets.style import apply_style

    log_file = setup_logging()
    qt_app = QApplication([sys.argv[0]])
    apply_style(qt_app)
    app = Application(demo=True, log_file=log_file)
    window = app.window  # placed by itself, as a new user's first window is
    driver = _Driver(window, out)
    shots, pump, wait_for, capture = driver.shots, driver.pump, driver.wait_for, driver.capture

    app.show()
    app.start()
    wait_for(lambda: app.session.library is not None)
    wait_for(lambda: window.library_panel.progress.isVisible() or app.session.ready)
    capture("01-indexing")
    wait_for(lambda: app.session.ready and not app.library.indexing and bool(app.library.stats))
    pump(0.5)
    capture("02-ready")

    window.query_bar.edit.setText("red circle")
    window.query_bar.submit()
    wait_for(lambda: app.search.last_outcome is not None)
    model = window.results_model
    window.results.setCurrentIndex(model.index(0, 0))
    wait_for(lambda: window.detail_pane.photo.photo() is not None)
    wait_for(
        lambda: all(app.thumbnails.pixmap(model.item(r).image_id) for r in range(4)), timeout=30
    )
    capture("03-results")

    dialog = app.open_settings()
    pump(0.3)
    capture("04-settings")
    dialog.reject()

    options = app.search.edit_options("text")
    if options is not None:
        options.move(140, 90)
        pump(0.3)
        capture("04b-method-options")
        options.reject()

    # Judge the text run like an annotator: keys on the grid, then one click on a toggle.
    wait_for(lambda: app.judging.query_id is not None)
    window.results.setFocus()
    window.results.select_row(0)
    judging = app.judging
    for relevance in (1, 1, 1, 0, 1, 1, 0, 1, 1, 1, 0, 0, 1, 0, 0):
        judging.judge_current(relevance)
    wait_for(lambda: judging.runner.idle())
    window.results.select_row(15)
    capture("05-judged")

    window.results.setCurrentIndex(model.index(0, 0))
    wait_for(lambda: window.detail_pane.photo.photo() is not None)
    runs_before = len(judging.runs)
    window.results.moreLikeThisRequested.emit(model.item(4))  # as the context menu does
    wait_for(lambda: len(judging.runs) > runs_before)
    window.results.setCurrentIndex(model.index(1, 0))
    wait_for(lambda: window.detail_pane.photo.photo() is not None)
    wait_for(
        lambda: all(app.thumbnails.pixmap(model.item(r).image_id) for r in range(4)), timeout=30
    )
    capture("06-more-like-this-same-judgments")
    problems = driver.problems()
    (out / "layout.txt").write_text("".join(f"{p}\n" for p in problems), encoding="utf-8")
    capture("07-metrics-panel", window.metrics_panel)

    window.queries_dock.raise_()
    capture("08-query-list", window.queries_dock)
    window.library_dock.raise_()

    dialog = app.open_benchmark()
    dialog.move(120, 80)
    dialog.k_combo.setCurrentIndex(dialog.k_combo.findData(10))
    dialog.more_methods.setText("text:template=a photo of {query}")  # compared with the first
    dialog.run_button.click()
    wait_for(lambda: not app.benchmark.running and app.benchmark.outcome is not None, timeout=120)
    capture("09-benchmark")
    dialog.tabs.setCurrentIndex(1)
    capture("10-benchmark-categories", dialog)
    dialog.close()

    # Visualize-then-retrieve (the demo painter draws the query), then structured reranking.
    def search_with(method: str, text: str) -> None:
        bar = window.query_bar
        bar.clear_image()  # the photo "More like this" left attached; these are text queries
        bar.method.setCurrentIndex(bar.method.findData(method))
        bar.edit.setText(text)
        before = app.search.last_outcome
        bar.submit()
        wait_for(lambda: app.search.last_outcome not in (None, before), timeout=180)
        window.results.setCurrentIndex(model.index(0, 0))
        wait_for(lambda: window.detail_pane.photo.photo() is not None)
        wait_for(
            lambda: all(app.thumbnails.pixmap(model.item(r).image_id) for r in range(3)),
            timeout=30,
        )

    search_with("visret", "a red circle beside a blue square")
    capture("12-visret-drawings")
    problems += [f"VisRet view: {p}" for p in driver.problems()]
    search_with("rerank", "a red circle beside a blue square")
    capture("13-rerank-answers")
    problems += [f"rerank view: {p}" for p in driver.problems()]
    window.query_bar.method.setCurrentIndex(window.query_bar.method.findData("text"))

    # Filters: chips under the query bar, the results' places and months beside the metrics.
    search_with("text", "red circle")
    for edit in ({"months": [3, 8]}, {"licenses": ["CC BY 4.0", "CC0 1.0"]}):
        before = app.search.last_outcome
        window.filter_bar.filtersEdited.emit(edit)  # as the Add filter menu does
        wait_for(lambda: app.search.last_outcome is not before, timeout=60)  # noqa: B023
    window.show_place_pane()
    shown = [item.image_id for item in model.items()]
    wait_for(lambda: app.filters.summary is not None and app.filters.summary.image_ids == shown)
    wait_for(window.map_view.has_coastlines)
    window.results.setCurrentIndex(model.index(0, 0))
    wait_for(lambda: window.detail_pane.photo.photo() is not None)
    wait_for(
        lambda: all(app.thumbnails.pixmap(model.item(r).image_id) for r in range(3)), timeout=30
    )
    capture("14-filters-map")
    problems += [f"filters view: {p}" for p in driver.problems()]
    editor = window.filter_bar.open_taxon_editor()
    editor.activateWindow()
    editor.edit.setFocus()
    editor.edit.setText("Circ")
    editor.edit.textEdited.emit("Circ")  # as typing does
    wait_for(lambda: bool(editor.suggestions()), timeout=30)
    capture("14b-taxon-completion")
    editor.reject()
    before = app.search.last_outcome
    app.filters.clear()
    wait_for(lambda: app.search.last_outcome is not before, timeout=60)
    window.metrics_dock.raise_()

    # Learning from the judgments, on a query of its own: its top 10 judged (relevant when the
    # photo shows what was asked, as an annotator would), the probe refines it (both runs in
    # the metrics), a sample below the judged top is judged the same way for the recall
    # estimate beside the stop rule; then Judge next's proposals in the grid.
    search_with("text", "blue square")
    wait_for(lambda: app.judging.query_id is not None and app.judging.run_id is not None)

    def judge_shown(rows: int) -> None:
        for row in range(min(rows, model.rowCount())):
            item = model.item(row)
            app.judging.judge(item.image_id, int(item.title == "blue square"))

    judge_shown(10)
    shown_lists: list[object] = []
    app.feedback.judgingListShown.connect(shown_lists.append)
    window.sample_action.trigger()
    wait_for(lambda: bool(shown_lists), timeout=60)
    judge_shown(model.rowCount())
    window.back_to_run_action.trigger()
    refined: list[object] = []
    app.feedback.refined.connect(lambda *args: refined.append(args))
    window.metrics_panel.refineRequested.emit("probe")  # as Refine ▾ › Probe does
    wait_for(lambda: bool(refined), timeout=60)
    wait_for(lambda: app.judging.run_id == refined[0][1], timeout=60)  # type: ignore[index]
    wait_for(lambda: "of about" in window.metrics_panel.recall_estimate.text(), timeout=60)
    window.results.setCurrentIndex(model.index(0, 0))
    wait_for(lambda: window.detail_pane.photo.photo() is not None)
    wait_for(
        lambda: all(app.thumbnails.pixmap(model.item(r).image_id) for r in range(3)), timeout=30
    )
    capture("15-refine")
    problems += [f"refine view: {p}" for p in driver.problems()]
    shown_lists.clear()
    window.judge_next_action.trigger()
    wait_for(lambda: bool(shown_lists), timeout=60)
    wait_for(
        lambda: all(app.thumbnails.pixmap(model.item(r).image_id) for r in range(3)), timeout=30
    )
    capture("15b-judge-next")
    window.back_to_run_action.trigger()
    (out / "layout.txt").write_text("".join(f"{p}\n" for p in problems), encoding="utf-8")

    # Photos that go away (a folder moved aside): kept as missing, with their judgments.
    stats = app.library.stats[0]
    aside = Path(tempfile.mkdtemp(prefix="quadrat-aside-"))
    for photo in sorted(Path(stats.root).rglob("*.jpg"))[:25]:
        shutil.move(photo, aside / photo.name)
    finished: list[object] = []
    app.library.indexingFinished.connect(finished.append)
    app.library.rescan(stats.id)
    wait_for(lambda: bool(finished))
    wait_for(lambda: bool(app.library.stats) and app.library.stats[0].missing > 0)
    window.library_panel.select(stats.id)
    pump(0.5)
    capture("11-missing-photos")

    app.shutdown()
    for path in shots:
        print(path)
    for problem in problems:
        print(f"layout: {problem}", file=sys.stderr)
    return LAYOUT_PROBLEMS if problems else 0


def _drive_camera_traps(out: Path) -> int:
    """Runs inside the virtual display: the camera-trap demo written, indexed and searched for
    roe deer, grouped by event, judged per event as the demo's truth says, filtered by deployment
    and hour, with the relevant frames' hours of the day; each view captured and checked."""
    from PySide6.QtWidgets import QApplication

    from app.controllers.application import Application
    from app.logs import setup_logging
    from app.settings import Settings
    from engine.demo.camera_traps import QUERIES, write_camera_trap_demo
    from widgets.place_pane import RELEVANT
    from widgets.style import apply_style

    home = Path(os.environ["QUADRAT_HOME"])
    demo = write_camera_trap_demo(home / "camera-traps")
    query = QUERIES[0]  # a red circle: roe deer
    relevant = {str(demo.root / path) for path in demo.relevant(query)}
    log_file = setup_logging()
    qt_app = QApplication([sys.argv[0]])
    apply_style(qt_app)
    settings = Settings(model="demo", library_dir=str(home / "library"))
    app = Application(settings=settings, folder=demo.root, log_file=log_file)
    window, model = app.window, app.window.results_model
    driver = _Driver(window, out)
    wait_for, capture = driver.wait_for, driver.capture
    problems: list[str] = []

    def checked(view: str) -> None:
        capture(view)
        problems.extend(f"{view}: {p}" for p in driver.problems())

    def thumbnails_shown(rows: int = 3) -> None:
        wait_for(lambda: window.detail_pane.photo.photo() is not None)
        wait_for(
            lambda: all(
                app.thumbnails.pixmap(model.item(r).image_id)
                for r in range(min(rows, model.rowCount()))
            ),
            timeout=30,
        )

    app.show()
    app.start()
    wait_for(lambda: app.session.ready and not app.library.indexing and bool(app.library.stats))
    wait_for(lambda: window.group_events_action.isVisible(), timeout=60)
    driver.pump(0.5)
    checked("ct-01-indexed")
    library = app.session.library
    assert library is not None
    _drawn_boxes(library, demo)
    app.boxes.check_library()
    wait_for(window.show_boxes_action.isVisible, timeout=30)

    bar = window.query_bar
    bar.set_text(query.text)
    bar.submit()
    wait_for(lambda: app.search.last_outcome is not None and app.judging.query_id is not None)
    window.group_events_action.trigger()  # View › Group results by event
    wait_for(lambda: model.rowCount() > 0 and model.item(0).frames > 1, timeout=60)
    window.results.setCurrentIndex(model.index(0, 0))
    thumbnails_shown()
    checked("ct-02-events")

    # Judged per event, as the demo's truth says: a card is relevant when its frames are.
    for row in range(min(8, model.rowCount())):
        item = model.item(row)
        app.judging.judge(item.image_id, int(item.path in relevant))
    wait_for(lambda: app.judging.runner.idle())
    window.results.setCurrentIndex(model.index(1, 0))
    thumbnails_shown()
    checked("ct-03-judged-events")

    for edit in ({"deployment_ids": [1, 3]}, {"hours": [22, 5]}):
        before = app.search.last_outcome
        window.filter_bar.filtersEdited.emit(edit)  # as the Add filter menu does
        wait_for(lambda: app.search.last_outcome is not before, timeout=60)  # noqa: B023
    wait_for(lambda: model.rowCount() > 0 and model.item(0).frames > 0, timeout=60)
    window.results.setCurrentIndex(model.index(0, 0))
    thumbnails_shown(1)
    checked("ct-04-deployments-and-hours")

    window.show_place_pane()
    window.place_pane.set_mode(RELEVANT)
    wait_for(lambda: sum(window.place_pane.relevant.hour_histogram.counts()) > 0, timeout=60)
    wait_for(window.place_pane.relevant.map_view.has_coastlines, timeout=30)
    checked("ct-05-relevant-hours")

    # The detector's boxes: every frame on its own, large thumbnails (captions), the first
    # photo judged on its box (B, then R), and the full view with the box chosen.
    before = app.search.last_outcome
    window.filter_bar.filtersEdited.emit({"deployment_ids": [], "hours": []})
    wait_for(lambda: app.search.last_outcome is not before, timeout=60)
    window.group_events_action.trigger()
    wait_for(lambda: model.rowCount() > 0 and model.item(0).frames == 1, timeout=60)
    driver.pump(1.0)
    window.results.set_thumbnail_size(224)
    window.results.setCurrentIndex(model.index(0, 0))
    thumbnails_shown()
    window.results.setFocus()
    window.next_box_action.trigger()  # B
    app.judging.judge_current(1, advance=False)
    wait_for(lambda: app.judging.runner.idle())
    checked("ct-06-boxes")
    window.results.setCurrentIndex(model.index(1, 0))
    window.next_box_action.trigger()
    view = app.full_view.open()
    assert view is not None
    wait_for(lambda: not view.canvas.image_size().isEmpty(), timeout=30)
    driver.capture("ct-07-full-view-boxes", view)
    view.close()
    window.detail_dock.raise_()
    window.results.setCurrentIndex(model.index(0, 0))
    thumbnails_shown(1)
    driver.capture("ct-08-detail-detections", window.detail_dock)

    # View › Rank by › Detector boxes: the crops encoded, then each frame's matching box chosen.
    before = app.search.last_outcome
    window.rank_by_actions["boxes"].trigger()
    wait_for(lambda: app.search.last_outcome is not before, timeout=300)
    window.results.setCurrentIndex(model.index(0, 0))
    thumbnails_shown()
    checked("ct-09-ranked-by-boxes")

    (out / "layout.txt").write_text("".join(f"{p}\n" for p in problems), encoding="utf-8")
    app.shutdown()
    for path in driver.shots:
        print(path)
    for problem in problems:
        print(f"layout: {problem}", file=sys.stderr)
    return LAYOUT_PROBLEMS if problems else 0


def _drawn_boxes(library, demo) -> None:  # noqa: ANN001
    """The boxes the camera-trap demo drew (its detections.json, MegaDetector's batch format),
    imported as a detector's file is, where the library has no detections yet."""
    from engine.detections.demo import load_demo_detections
    from engine.detections.shown import has_detections

    if not has_detections(library):
        load_demo_detections(library, demo.root)


SAMPLE_RUN_LABELS = (
    "Text · 14:03",
    "Image · red circle · 14:05",
    "Text + photo · Circulus ruber · 14:07",
)


def sample_content(window) -> None:  # noqa: ANN001
    """Fill the window with what a working session shows, from plain data (no library): a
    long status line, a selected photo with long metadata, three runs in the metrics."""
    from datetime import datetime

    from PySide6.QtGui import QColor, QPixmap

    from widgets.metrics_panel import MetricsView, RunMetrics
    from widgets.photo_view import PhotoView
    from widgets.results import ResultItem

    path = "/photos/" + "/".join(["a-rather-long-folder-name"] * 3) + "/" + "e" * 36 + ".jpg"
    details = PhotoView(
        common_name="Red circle of the northern uplands",
        taxon="Circulus ruber",
        lineage=(("kingdom", "Plantae"), ("phylum", "Demonstrata"), ("species", "C. ruber")),
        observed_at=datetime(2019, 12, 2, 10, 47),
        latitude=37.7113,
        longitude=-122.47806,
        location_uncertainty=323.0,
        license="CC BY-NC-SA 4.0",
        rights_holder="Ada Linnaea and the Upland Naturalists' Society",
        width=4032,
        height=3024,
        collection="demo-collection",
    )
    item = ResultItem(2, 0.9834, 7, path, details.common_name, None, details)
    window.detail_pane.set_item(item)
    photo = QPixmap(1600, 1200)  # landscape, larger than any pane: must be scaled down whole
    photo.fill(QColor("#7a9a6a"))
    window.detail_pane.set_photo(photo)
    window.detail_pane.set_judgment(0)
    window.set_status(
        "960 results for “a red circle on a pale background, photographed in the uplands "
        "in winter, with a thin dark line crossing it” · Text + photo · search 15 ms"
    )
    values = {"P": 0.3, "R_at_k": 0.333, "AP": 0.176, "nDCG": 0.381, "RR": 1.0, "judged": 0.6}
    curve = [1.0, 0.5, 0.33, 0.25, 0.2, 0.33, 0.29, 0.25, 0.33, 0.3]
    runs = [
        RunMetrics(number, label.split(" · ")[0], label, values, curve, 0, 1)
        for number, label in enumerate(SAMPLE_RUN_LABELS, start=1)
    ]
    window.metrics_panel.show_metrics(MetricsView("red circle", 10, 9, 15, 2, runs))


def _check_layout(out: Path, states: bool = False) -> int:
    """Runs inside the virtual display: a first window with sample content, checked (and,
    with `states`, every view state of tools/layout_states.py, each checked)."""
    from PySide6.QtCore import QCoreApplication, QElapsedTimer
    from PySide6.QtWidgets import QApplication

    from app.controllers.application import Application
    from app.settings import Settings
    from widgets.style import apply_style

    qt_app = QApplication([sys.argv[0]])
    apply_style(qt_app)
    home = Path(os.environ["QUADRAT_HOME"])
    app = Application(settings=Settings(model="demo", library_dir=str(home / "library")))
    window = app.window
    app.show()
    sample_content(window)
    timer = QElapsedTimer()
    timer.start()
    while timer.elapsed() < 500:  # let the window map and lay out (and correct) its docks
        QCoreApplication.processEvents()
        time.sleep(0.01)
    area = window.available_area()
    report = {
        "screen": [area.width(), area.height()],
        "window": [window.frameGeometry().width(), window.frameGeometry().height()],
        "photo_pane": window.detail_pane.width(),
        "photo_pane_minimum": window.detail_pane.minimum_width(),
        "results": window.centralWidget().width(),
        "problems": window.layout_problems(),
    }
    out.mkdir(parents=True, exist_ok=True)
    size = f"{area.width()}x{area.height()}"
    window.grab().save(str(out / f"layout-{size}.png"))
    if states:
        import layout_states  # beside this file

        report["states"] = {}
        for name in layout_states.STATES:
            layout_states.apply_state(window, name, area)
            pump_until = QElapsedTimer()
            pump_until.start()
            while pump_until.elapsed() < 150:  # a real screen maps and lays out the panels
                QCoreApplication.processEvents()
                time.sleep(0.01)
            found = layout_states.view_problems(window, area)
            report["states"][name] = found
            report["problems"] += [f"{name}: {problem}" for problem in found]
            window.grab().save(str(out / f"state-{name}-{size}.png"))
        dialog = layout_states.benchmark_dialog(window)
        dialog.show()
        layout_states.settle()
        found = layout_states.dialog_problems(dialog, area)
        report["states"]["benchmark"] = found
        report["problems"] += [f"benchmark: {problem}" for problem in found]
        dialog.close()
    print(json.dumps(report))
    app.shutdown()
    return LAYOUT_PROBLEMS if report["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
