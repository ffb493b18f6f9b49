"""Screenshots of the real window under a virtual X server (Xvfb).

    python tools/screenshots.py [--out screenshots]

Starts Xvfb, opens Quadrat on the demo collection (in a throwaway QUADRAT_HOME, so your own
library is untouched), drives it like a user (index, search, select a result, open the
settings, search by image, judge results and watch the metrics, run the benchmark) and writes
one PNG per view into the output folder.

Needs Xvfb and the X libraries Qt's xcb plugin loads; on Debian/Ubuntu:

    sudo apt-get install xvfb libxcb-icccm4 libxcb-keysyms1 libxcb-cursor0 imagemagick

(ImageMagick's `import` captures the whole screen, dialogs included; without it the window
is grabbed by Qt itself.)
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCREEN = "1600x1000x24"
INSTALL_HINT = (
    "Xvfb was not found. Install it (and the X libraries Qt needs), e.g. on Debian/Ubuntu:\n"
    "    sudo apt-get install xvfb libxcb-icccm4 libxcb-keysyms1 libxcb-cursor0 imagemagick"
)


def _free_display() -> int:
    for number in range(99, 160):
        if (
            not Path(f"/tmp/.X{number}-lock").exists()
            and not Path(f"/tmp/.X11-unix/X{number}").exists()
        ):
            return number
    raise SystemExit("no free X display number between :99 and :159")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=ROOT / "screenshots", help="folder for the PNGs"
    )
    parser.add_argument(
        "--screen", default=SCREEN, help="virtual screen as WIDTHxHEIGHTxDEPTH (default: %(default)s)"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return _drive_window(args.out)

    xvfb = shutil.which("Xvfb")
    if xvfb is None:
        print(INSTALL_HINT, file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    display = f":{_free_display()}"
    server = subprocess.Popen(
        [xvfb, display, "-screen", "0", args.screen, "-nolisten", "tcp"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(1.0)
        if server.poll() is not None:
            print(f"Xvfb exited at start (code {server.returncode})", file=sys.stderr)
            return 1
        with tempfile.TemporaryDirectory(prefix="quadrat-shots-") as home:
            env = dict(os.environ, DISPLAY=display, QT_QPA_PLATFORM="xcb", QUADRAT_HOME=home)
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
            child = subprocess.run(
                [
                    sys.executable,
                    str(Path(__file__).resolve()),
                    "--child",
                    "--out",
                    str(args.out.resolve()),
                ],
                env=env,
                check=False,
            )
            if child.returncode != 0:
                print(
                    "the window could not be driven; if Qt says it cannot load the xcb plugin, "
                    "run with QT_DEBUG_PLUGINS=1 to see the missing library.\n" + INSTALL_HINT,
                    file=sys.stderr,
                )
            return child.returncode
    finally:
        server.terminate()
        server.wait(timeout=10)


def _drive_window(out: Path) -> int:
    """Runs inside the virtual display: open the demo, act, capture."""
    from PySide6.QtCore import QCoreApplication, QElapsedTimer
    from PySide6.QtWidgets import QApplication

    from app.controllers.application import Application
    from app.logs import setup_logging
    from widgets.style import apply_style

    log_file = setup_logging()
    qt_app = QApplication([sys.argv[0]])
    apply_style(qt_app)
    app = Application(demo=True, log_file=log_file)
    window = app.window
    area = qt_app.primaryScreen().availableGeometry()
    window.resize(min(1560, area.width() - 40), min(960, area.height() - 40))
    window.move(20, 20)
    shots: list[Path] = []

    def pump(seconds: float) -> None:
        timer = QElapsedTimer()
        timer.start()
        while timer.elapsed() < seconds * 1000:
            QCoreApplication.processEvents()
            time.sleep(0.01)

    def wait_for(condition, timeout: float = 120.0) -> None:  # noqa: ANN001
        timer = QElapsedTimer()
        timer.start()
        while not condition():
            if timer.elapsed() > timeout * 1000:
                raise TimeoutError("the window did not get there in time")
            QCoreApplication.processEvents()
            time.sleep(0.01)

    def capture(name: str, widget=None) -> None:  # noqa: ANN001
        pump(0.4)
        path = out / f"{name}.png"
        importer = shutil.which("import")
        if (
            widget is None
            and importer
            and Path(importer).resolve().parts[:3] != ("/", "usr", "local")
        ):
            subprocess.run([importer, "-window", "root", str(path)], check=True)
        else:
            (widget or window).grab().save(str(path))
        shots.append(path)

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
    return 0


if __name__ == "__main__":
    sys.exit(main())
