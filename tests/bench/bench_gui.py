"""GUI benchmark: start-up time and scrolling a 10,000-result grid.

Run on demand:

    python tests/bench/bench_gui.py [--runs 3] [--rows 10000]

1. Start-up: `quadrat gui --demo` in a fresh process (offscreen, throwaway QUADRAT_HOME), timed
   from spawning the process to the window being shown and to "ready to search". The first
   run writes and indexes the demo collection; later runs open the indexed library.
2. Scrolling: the results grid over 10,000 results, scrolled in steps with a synchronous
   repaint after each; frame time = scroll + paint of one step. Measured with thumbnails in
   the RAM cache, and cold (placeholders painted, loads requested).

Prints Markdown tables on stdout.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def startup_run(home: Path, timeout: float = 300.0) -> dict[str, float]:
    env = dict(
        os.environ,
        QUADRAT_HOME=str(home),
        QT_QPA_PLATFORM="offscreen",
        QUADRAT_PRINT_MILESTONES="1",
        PYTHONPATH=str(REPO),
    )
    started = time.monotonic()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from app.cli import main; sys.exit(main(['gui', '--demo']))",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    times: dict[str, float] = {}
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("milestone "):
                _, name, _inner = line.split()
                times[name] = time.monotonic() - started
                if name == "ready":
                    break
            if time.monotonic() - started > timeout:
                break
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return times


def bench_startup(runs: int) -> list[tuple[str, float, float]]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="quadrat-bench-") as tmp:
        home = Path(tmp)
        for run in range(runs):
            times = startup_run(home)
            label = (
                "first run (writes + indexes the demo)" if run == 0 else f"run {run + 1} (indexed)"
            )
            rows.append(
                (label, times.get("window-shown", float("nan")), times.get("ready", float("nan")))
            )
    return rows


def bench_scrolling(rows: int) -> list[tuple[str, int, float, float, float]]:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtGui import QColor, QPixmap
    from PySide6.QtWidgets import QApplication

    from widgets.results import ResultItem, ResultsModel, ResultsView

    app = QApplication.instance() or QApplication([])

    class Warm:
        def __init__(self) -> None:
            self.pix = QPixmap(256, 256)
            self.pix.fill(QColor("#557755"))

        def pixmap(self, image_id: int) -> QPixmap:
            return self.pix

        def request(self, *args: object) -> None:
            pass

    class Cold:
        def __init__(self) -> None:
            self.requests = 0

        def pixmap(self, image_id: int) -> None:
            return None

        def request(self, *args: object) -> None:
            self.requests += 1

    out = []
    items = [
        ResultItem(i + 1, 1.0 - i / rows, i + 1, f"/photos/{i:06d}.jpg", f"Taxon name {i}")
        for i in range(rows)
    ]
    for label, source in (("thumbnails cached", Warm()), ("cold (placeholders)", Cold())):
        model = ResultsModel()
        model.set_thumbnail_source(source)
        view = ResultsView()
        view.setModel(model)
        view.resize(1100, 800)
        view.show()
        model.set_results(items)
        app.processEvents()
        bar = view.verticalScrollBar()
        step = 60
        frames: list[float] = []
        value = 0
        while value < bar.maximum():
            value = min(bar.maximum(), value + step)
            started = time.perf_counter()
            bar.setValue(value)
            view.viewport().repaint()
            frames.append((time.perf_counter() - started) * 1000)
            if len(frames) % 50 == 0:
                app.processEvents()
        out.append(
            (
                label,
                len(frames),
                statistics.median(frames),
                max(frames),
                statistics.quantiles(frames, n=100)[98],
            )
        )
        view.close()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="GUI start-up and scrolling benchmark")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rows", type=int, default=10_000)
    args = parser.parse_args(argv)

    print("## Start-up (`quadrat gui --demo`, offscreen, from process spawn)\n")
    print("| run | window shown (s) | ready to search (s) |")
    print("| --- | ---: | ---: |")
    for label, shown, ready in bench_startup(args.runs):
        print(f"| {label} | {shown:.2f} | {ready:.2f} |")
    print()
    print(f"## Scrolling a {args.rows:,}-result grid (1100×800 view, 60 px steps)\n")
    print("| thumbnails | frames | median (ms) | worst (ms) | p99 (ms) |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for label, frames, median, worst, p99 in bench_scrolling(args.rows):
        print(f"| {label} | {frames:,} | {median:.2f} | {worst:.2f} | {p99:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
