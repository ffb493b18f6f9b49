"""First-start benchmark: how long a new user waits for the model chooser, and for the first
answer from an indexed library.

Run on demand:

    python tests/bench/bench_first_start.py [--runs 3] [--baseline OTHER_CHECKOUT]
    python tests/bench/bench_first_start.py --indexed [--runs 5] [--baseline OTHER_CHECKOUT]

Each run is `quadrat gui` in a fresh process with a fresh QUADRAT_HOME (no settings, no
library, no model downloaded, the hub unreachable), offscreen, timed from spawning the process
to the main window being shown and to the model chooser being shown. With `--baseline`, the
same runs are made from another checkout of Quadrat (an older commit, say) in the same session,
alternating with this one, so the two columns are measured side by side on the same machine.

With `--indexed`: `quadrat gui` on the indexed demo library (960 photos, the demo model),
offscreen, timed from spawning the process to the window shown, to ready to search and to the
first answer of a text query asked the moment it is ready (results in the grid); once with the
model's ONNX export in the model store and once without it, alternating, and which of torch,
open_clip, diffusers and transformers were imported by then. The load average is printed with
the table: the shared machine's load moves every figure.

Prints a Markdown table on stdout.
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

# Run in the child: note the wall-clock time the window and the chooser are first shown (the
# widgets' show events, so any checkout can be measured), then quit.
CHILD = """
import sys, time
from widgets.main_window import MainWindow
from widgets.model_chooser import ModelChooser

def hooked(cls, name):
    original = cls.showEvent
    def show_event(self, event):
        print(f"shown {name} {time.time():.4f}", flush=True)
        cls.showEvent = original
        original(self, event)
    cls.showEvent = show_event

hooked(MainWindow, "window")
hooked(ModelChooser, "chooser")
from app.cli import main
sys.exit(main(["gui"]))
"""


def first_start(checkout: Path, timeout: float = 120.0) -> dict[str, float]:
    """Seconds from spawning `quadrat gui` (from `checkout`, fresh home) to each shown event."""
    with tempfile.TemporaryDirectory(prefix="quadrat-first-start-") as home:
        env = dict(
            os.environ,
            QUADRAT_HOME=home,
            HOME=home,
            QT_QPA_PLATFORM="offscreen",
            PYTHONPATH=str(checkout),
            # No model can come from the network: what a user without one sees at first.
            HF_ENDPOINT="http://127.0.0.1:9",
        )
        started = time.time()
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD],
            cwd=checkout,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        times: dict[str, float] = {}
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                if line.startswith("shown "):
                    _, name, when = line.split()
                    times[name] = float(when) - started
                    if name == "chooser":
                        break
                if time.time() - started > timeout:
                    break
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    return times


# Run in the child on the settings' library: ask a text query as soon as searching is ready and
# note when its results are in the grid.
ANSWER_CHILD = """
import sys, time
from widgets.qtcompat import keep_none_alive
keep_none_alive()
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication
from app.controllers.application import Application

qt = QApplication(sys.argv[:1])
app = Application()
marks = set()

def mark(name):
    if name not in marks:
        marks.add(name)
        heavy = ",".join(m for m in ("torch", "open_clip", "diffusers", "transformers")
                         if m in sys.modules) or "-"
        print(f"mark {name} {time.time():.4f} {heavy}", flush=True)

def ready(ok, _message):
    if ok and "ready" not in marks:
        mark("ready")
        app.window.query_bar.edit.setText("a yellow circle")
        app.window.query_bar.submit()

def shown(*_args):
    if "ready" in marks and app.window.results_model.rowCount() > 0:
        mark("answer")
        QTimer.singleShot(0, qt.quit)

app.session.readyChanged.connect(ready)
app.window.results_model.modelReset.connect(shown)
app.window.results_model.rowsInserted.connect(shown)
app.show()
mark("shown")
QTimer.singleShot(0, app.start)
QTimer.singleShot(180000, qt.quit)
qt.aboutToQuit.connect(app.shutdown)
qt.exec()
"""


def indexed_homes(root: Path) -> dict[str, Path]:
    """Two Quadrat homes whose settings name one library of the demo collection indexed with
    the demo model: "with export" holds the demo model's ONNX export in its model store,
    "without export" none."""
    from app.settings import Settings, save_settings
    from engine.catalog.library import Library
    from engine.demo.collection import write_demo_collection
    from engine.indexing.indexer import Indexer
    from engine.models.encoders import load_encoder
    from engine.models.onnx_runtime import onnx_encoder_for

    collection = write_demo_collection(root / "collection")
    encoder = load_encoder("demo", device="cpu")
    with Library.open(root / "library") as library:
        Indexer(library, encoder).run(collection.root)
    homes = {"with export": root / "home-onnx", "without export": root / "home-torch"}
    for name, home in homes.items():
        os.environ["QUADRAT_HOME"] = str(home)
        from app import paths

        save_settings(Settings(library_dir=str(root / "library"), runtime="auto"))
        if name == "with export":
            onnx_encoder_for(encoder, paths.models_dir(), "onnx")
    os.environ.pop("QUADRAT_HOME", None)
    return homes


def first_answer(checkout: Path, home: Path, timeout: float = 200.0) -> dict[str, float]:
    """Seconds from spawning `quadrat gui` (from `checkout`, on `home`) to each mark; the
    heavy modules loaded at the answer under "heavy"."""
    env = dict(
        os.environ,
        QUADRAT_HOME=str(home),
        QT_QPA_PLATFORM="offscreen",
        PYTHONPATH=str(checkout),
        HF_ENDPOINT="http://127.0.0.1:9",
    )
    started = time.time()
    proc = subprocess.Popen(
        [sys.executable, "-c", ANSWER_CHILD],
        cwd=checkout,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    times: dict[str, float] = {}
    heavy = ""
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("mark "):
                _, name, when, heavy = line.split()
                times[name] = float(when) - started
                if name == "answer":
                    break
            if time.time() - started > timeout:
                break
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    times["torch loaded"] = float("torch" in heavy.split(","))
    return times


def bench_first_answer(runs: int, baseline: Path | None) -> None:
    """The `--indexed` table: each checkout with and without the export, alternating."""
    with tempfile.TemporaryDirectory(prefix="quadrat-first-answer-") as tmp:
        homes = indexed_homes(Path(tmp))
        checkouts = {"this checkout": REPO}
        if baseline is not None:
            checkouts = {"baseline": baseline.resolve(), **checkouts}
        cases = [(c, h) for c in checkouts for h in homes]
        results: dict[tuple[str, str], list[dict[str, float]]] = {case: [] for case in cases}
        load_before = os.getloadavg()
        for name, home in cases:  # one unmeasured run each: the files in the page cache
            first_answer(checkouts[name], homes[home])
        for _run in range(runs):
            for name, home in cases:
                results[(name, home)].append(first_answer(checkouts[name], homes[home]))
        load_after = os.getloadavg()

    print("## Launch to the first answer (`quadrat gui`, indexed demo library, offscreen)\n")
    print(
        f"Load average {load_before[0]:.1f} before and {load_after[0]:.1f} after "
        f"({os.cpu_count()} cores); medians of {runs} runs, from spawning the process.\n"
    )
    print("| checkout | store | window shown (s) | ready (s) | first answer (s) | torch loaded |")
    print("| --- | --- | ---: | ---: | ---: | --- |")
    nan = float("nan")
    for (name, home), times in results.items():

        def median(key: str, times: list[dict[str, float]] = times) -> float:
            return statistics.median(t.get(key, nan) for t in times)

        loaded = "yes" if any(t["torch loaded"] for t in times) else "no"
        print(
            f"| {name} | {home} | {median('shown'):.2f} | {median('ready'):.2f} | "
            f"{median('answer'):.2f} | {loaded} |"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="time from start to the model chooser")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--baseline", type=Path, help="another checkout, measured alongside")
    parser.add_argument(
        "--indexed", action="store_true", help="launch to the first answer on an indexed library"
    )
    args = parser.parse_args(argv)
    if args.indexed:
        if str(REPO) not in sys.path:
            sys.path.insert(0, str(REPO))
        bench_first_answer(args.runs, args.baseline)
        return 0

    checkouts = {"this checkout": REPO}
    if args.baseline is not None:
        checkouts = {"baseline": args.baseline.resolve(), **checkouts}
    results: dict[str, list[dict[str, float]]] = {name: [] for name in checkouts}
    for _run in range(args.runs):
        for name, checkout in checkouts.items():  # alternating, so load affects both alike
            results[name].append(first_start(checkout))

    print("## First start (`quadrat gui`, fresh home, no model, offscreen, from spawn)\n")
    print("| checkout | runs | window shown (s, median) | chooser shown (s, median) | each |")
    print("| --- | ---: | ---: | ---: | --- |")
    nan = float("nan")
    for name, runs in results.items():
        window = [r.get("window", nan) for r in runs]
        chooser = [r.get("chooser", nan) for r in runs]
        each = ", ".join(f"{c:.2f}" for c in chooser)
        print(
            f"| {name} | {len(runs)} | {statistics.median(window):.2f} | "
            f"{statistics.median(chooser):.2f} | {each} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
