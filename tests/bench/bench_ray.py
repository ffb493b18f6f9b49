"""Indexing on a Ray cluster against the local indexer (run on demand):
`python tests/bench/bench_ray.py`.

The 960-photo demo collection is written to a temporary folder and indexed with the demo model
into a fresh library each time: locally, then on a local Ray cluster of one one-CPU node
(alternating, three rounds), then the same after a second node joins. The local indexer runs
twice a round: with its own torch thread count, and with one thread as Ray gives its workers
(OMP_NUM_THREADS=1); on a loaded machine the difference is large. Photos/s counts the whole
`run()` (a Ray run starts its decode tasks and encode actors, which load the model, every
time); "first photo" is the time until the first encoded photo reached the writer, and the
last column the rate from then on (the pipeline running, its start excluded). Prints a
Markdown table and the load average. Needs `pip install 'quadrat[ray]'`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from engine.catalog.library import Library  # noqa: E402
from engine.demo.collection import write_demo_collection  # noqa: E402
from engine.indexing.indexer import Indexer  # noqa: E402
from engine.indexing.ray_indexer import RayIndexer  # noqa: E402
from engine.models.encoders import load_encoder  # noqa: E402
from engine.progress import Progress  # noqa: E402
from tests.ray_cluster import LocalRayCluster  # noqa: E402


def timed_run(make_indexer: Any, folder: Path, library_dir: Path) -> tuple[float, float, float]:
    """(photos/s over the whole run, seconds until the first photo was encoded, photos/s
    from then on)."""
    first: list[float] = []
    started = time.perf_counter()

    def progress(p: Progress) -> None:
        if p.done and not first:
            first.append(time.perf_counter() - started)

    with Library.open(library_dir) as lib:
        report = make_indexer(lib).run(folder, progress=progress)
    seconds = time.perf_counter() - started
    assert report.indexed and not report.skipped, report.summary()
    until_first = first[0] if first else seconds
    return report.indexed / seconds, until_first, report.indexed / (seconds - until_first)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--per-class", type=int, default=40, help="40 gives 960 photos")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args()

    import torch

    load_before = os.getloadavg()
    encoder = load_encoder("demo", device="cpu")
    default_threads = torch.get_num_threads()

    def local_indexer(lib: Library) -> Indexer:
        return Indexer(lib, encoder, batch_size=args.batch)

    def ray_indexer(lib: Library) -> Indexer:
        return RayIndexer(lib, encoder, address=cluster.address, batch_size=args.batch)

    rows: list[tuple[str, list[float], list[float], list[float]]] = []
    with tempfile.TemporaryDirectory(prefix="qbench") as tmp:
        folder = Path(tmp) / "photos"
        photos = write_demo_collection(folder, images_per_class=args.per_class).image_count
        cluster = LocalRayCluster()
        runs = 0

        def library() -> Path:
            nonlocal runs
            runs += 1
            return Path(tmp) / f"lib{runs}"

        try:
            cluster.start_head()
            for nodes in (1, 2):
                if nodes == 2:
                    cluster.add_node()
                local: list[tuple[float, float, float]] = []
                single: list[tuple[float, float, float]] = []
                remote: list[tuple[float, float, float]] = []
                for _ in range(args.repeat):
                    torch.set_num_threads(default_threads)
                    local.append(timed_run(local_indexer, folder, library()))
                    torch.set_num_threads(1)  # what a Ray worker runs with (OMP_NUM_THREADS=1)
                    single.append(timed_run(local_indexer, folder, library()))
                    remote.append(timed_run(ray_indexer, folder, library()))
                for name, results in (
                    (
                        f"local, {default_threads} torch threads (beside the {nodes}-node runs)",
                        local,
                    ),
                    ("local, 1 torch thread (as a Ray worker)", single),
                    (f"Ray, {nodes} node(s) of 1 CPU", remote),
                ):
                    rows.append((name, *map(list, zip(*results, strict=True))))
        finally:
            cluster.stop()

    load = os.getloadavg()
    print(f"\n{photos} photos, demo model, batch {args.batch}, medians of {args.repeat}")
    print(
        f"load average before: {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}; "
        f"after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}\n"
    )
    print("| indexer | photos/s (median) | runs | first photo after (s) | photos/s after it |")
    print("|---|---|---|---|---|")
    for name, rates, firsts, steady in rows:
        runs_text = ", ".join(f"{r:.0f}" for r in rates)
        print(
            f"| {name} | {statistics.median(rates):.0f} | {runs_text} | "
            f"{statistics.median(firsts):.1f} | {statistics.median(steady):.0f} |"
        )


if __name__ == "__main__":
    main()
