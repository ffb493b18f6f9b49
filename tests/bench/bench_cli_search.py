"""`quadrat search TEXT` end to end on the indexed demo (run on demand):
`python tests/bench/bench_cli_search.py [--base CHECKOUT]`.

Each tree (this one, and `--base`, another checkout of Quadrat such as a clone of an older
commit) indexes the demo into a library of its own, with one model store (QUADRAT_HOME) shared
by both, so the ONNX export is made once. Then `quadrat search "red circle"` runs as a fresh
process, the trees interleaved so both see the same machine load; the table gives the median
wall seconds of `--reps` processes and whether both printed the same results. The target of
issue 25 is 1.0 s.
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

ROOT = Path(__file__).resolve().parents[2]
QUERY = "red circle"


def quadrat(tree: Path, home: Path, *args: str) -> tuple[float, str]:
    """Wall seconds of `quadrat ARGS` run from `tree`, and what it printed on stdout."""
    env = {**os.environ, "QUADRAT_HOME": str(home), "PYTHONPATH": str(tree)}
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        cwd=tree,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return time.perf_counter() - started, done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, help="another checkout to compare with")
    parser.add_argument("--reps", type=int, default=5, help="processes per tree (median)")
    args = parser.parse_args()
    trees = {"this tree": ROOT}
    if args.base is not None:
        trees = {"base": args.base.resolve(), **trees}
    seconds: dict[str, list[float]] = {name: [] for name in trees}
    printed: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        home = tmp / "home"
        quadrat(ROOT, home, "demo", str(tmp / "demo"))
        libraries = {name: tmp / f"library-{i}" for i, name in enumerate(trees)}
        for name, tree in trees.items():  # the first exports the ONNX text tower
            demo = str(tmp / "demo")
            quadrat(tree, home, "index", demo, "--library", str(libraries[name]), "--model", "demo")

        def search(name: str) -> tuple[float, str]:
            return quadrat(trees[name], home, "search", QUERY, "--library", str(libraries[name]))

        for name in trees:  # warms the file cache; not timed
            printed[name] = search(name)[1]
        for _ in range(args.reps):
            for name in trees:  # interleaved: both see the same machine load
                seconds[name].append(search(name)[0])
    print(f'\n`quadrat search "{QUERY}"` on the indexed demo, median of {args.reps} processes')
    print("| tree | median s | min s | max s |")
    print("| --- | --- | --- | --- |")
    for name, values in seconds.items():
        print(
            f"| {name} | {statistics.median(values):.2f} | {min(values):.2f} | {max(values):.2f} |"
        )
    if len(printed) == 2:
        same = len(set(printed.values())) == 1
        print(f"\nSame results printed by both trees: {'yes' if same else 'NO'}")


if __name__ == "__main__":
    main()
