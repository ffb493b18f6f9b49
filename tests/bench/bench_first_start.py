"""First-start benchmark: how long a new user waits for the model chooser.

Run on demand:

    python tests/bench/bench_first_start.py [--runs 3] [--baseline OTHER_CHECKOUT]

Each run is `quadrat gui` in a fresh process with a fresh QUADRAT_HOME (no settings, no
library, no model downloaded, the hub unreachable), offscreen, timed from spawning the process
to the main window being shown and to the model chooser being shown. With `--baseline`, the
same runs are made from another checkout of Quadrat (an older commit, say) in the same session,
alternating with this one, so the two columns are measured side by side on the same machine.

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="time from start to the model chooser")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--baseline", type=Path, help="another checkout, measured alongside")
    args = parser.parse_args(argv)

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
