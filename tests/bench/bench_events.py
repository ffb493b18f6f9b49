"""Events benchmark: grouping 50,000 camera-trap frames into events, and a search collapsed
to events against a plain one, on the same synthetic library in the same run.

Run on demand (building the library takes about half a minute):

    python tests/bench/bench_events.py [--frames 50000] [--repeat 5] [--top 20]

The library is synthetic but shaped like a season of camera traps: 20 cameras (serials) in
20 site folders, bursts of 3 to 10 frames 1 to 5 s apart, bursts minutes to hours apart, 1 %
of frames undated. Rows are written straight into the catalog (no photo files, no encoder);
the vector index is the library's exact index (`VectorIndex`) of random unit vectors
(512-d), searched with a random query.

Rows (median of `--repeat` runs):
- `group_events`: the numpy grouping alone (target ≤ 1 s for 50,000 frames);
- `refresh_events`, first: read, group and write every frame's event id;
- `refresh_events`, gap changed: the same after the gap changes (only changed ids written);
- `refresh_camera_data`: deployments, clock offsets and events, as after an indexing run;
- plain search: the index's top `--top`;
- collapsed search: the top `--top` x 10 frames, then `collapse_to_events` to `--top`
  events (target: ≤ 50 ms more than the plain search).
Markdown on stdout, progress on stderr.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from sqlalchemy import insert  # noqa: E402

from engine.catalog.library import Library  # noqa: E402
from engine.catalog.models import Collection, Image  # noqa: E402
from engine.indexing.deployments import refresh_camera_data  # noqa: E402
from engine.indexing.events import group_events, refresh_events  # noqa: E402
from engine.search.events import FRAMES_PER_EVENT, collapse_to_events  # noqa: E402
from engine.vectors.index import VectorIndex  # noqa: E402

CAMERAS = 20
DIM = 512


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def frames(count: int, seed: int = 0) -> list[dict[str, Any]]:
    """Catalog rows of `count` frames: bursts per camera, 1 % undated."""
    rng = np.random.default_rng(seed)
    rows: list[dict[str, Any]] = []
    clocks = [datetime(2024, 5, 1) + timedelta(hours=int(c)) for c in range(CAMERAS)]
    while len(rows) < count:
        camera = int(rng.integers(CAMERAS))
        clocks[camera] += timedelta(seconds=int(rng.integers(120, 4 * 3600)))
        moment = clocks[camera]
        for _ in range(int(rng.integers(3, 11))):
            moment += timedelta(seconds=int(rng.integers(1, 6)))
            undated = rng.random() < 0.01
            number = len(rows)
            rows.append(
                {
                    "collection_id": 1,
                    "rel_path": f"site{camera:02d}/DCIM/IMG_{number:06d}.JPG",
                    "size": 1000,
                    "mtime_ns": 0,
                    "status": "ok",
                    "camera_serial": f"SN{camera:04d}",
                    "camera_make": "RECONYX",
                    "camera_time": None if undated else moment,
                    "observed_at": None if undated else moment,
                }
            )
            if len(rows) == count:
                break
        clocks[camera] = moment
    return rows


def build(root: Path, count: int) -> Library:
    library = Library.open(root / "lib")
    with library.catalog.session() as s:
        s.add(Collection(id=1, root=str(root / "photos"), name="traps"))
        s.flush()
        rows = frames(count)
        for start in range(0, len(rows), 5000):
            s.execute(insert(Image), rows[start : start + 5000])
    return library


def timed(call: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        result = call()
        times.append(time.perf_counter() - started)
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--top", type=int, default=20)
    args = parser.parse_args()
    rows: list[tuple[str, float, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        log(f"building a library of {args.frames:,} frames")
        library = build(Path(tmp), args.frames)
        try:
            with library.catalog.session() as s:
                data = s.query(Image.id, Image.camera_serial, Image.observed_at).all()
            ids = np.array([r[0] for r in data], dtype=np.int64)
            cameras = np.array([int(r[1][2:]) for r in data], dtype=np.int64)
            seconds = np.array(
                [r[2].timestamp() if r[2] else np.nan for r in data], dtype=np.float64
            )
            took, events = timed(lambda: group_events(ids, cameras, seconds, 60), args.repeat)
            rows.append(("group_events (numpy)", took, f"{len(np.unique(events)):,} events"))
            took, count = timed(lambda: refresh_events(library, 1, 60), 1)
            rows.append(("refresh_events, first (every id written)", took, f"{count:,} events"))
            gaps = iter([3, 60] * args.repeat)
            took, count = timed(lambda: refresh_events(library, 1, next(gaps)), args.repeat)
            rows.append(("refresh_events, gap changed (3 s <-> 60 s)", took, f"{count:,} events"))
            took, tally = timed(lambda: refresh_camera_data(library, 1), args.repeat)
            rows.append(
                ("refresh_camera_data (after indexing)", took, f"{tally.deployments} deployments")
            )

            log("building the vector index")
            rng = np.random.default_rng(1)
            vectors = rng.standard_normal((len(ids), DIM)).astype(np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            index = VectorIndex(DIM)
            index.add(ids, vectors)
            queries = rng.standard_normal((args.repeat * 4, DIM)).astype(np.float32)
            queries /= np.linalg.norm(queries, axis=1, keepdims=True)
            plain_times, collapsed_times = [], []
            for query in queries:  # interleaved, so both see the same machine
                started = time.perf_counter()
                index.search(query, args.top)
                plain_times.append(time.perf_counter() - started)
                started = time.perf_counter()
                pairs = index.search(query, args.top * FRAMES_PER_EVENT)
                hits = collapse_to_events(library, pairs, args.top)
                collapsed_times.append(time.perf_counter() - started)
            plain, collapsed = statistics.median(plain_times), statistics.median(collapsed_times)
            rows.append((f"plain search, top {args.top}", plain, ""))
            rows.append(
                (
                    f"collapsed search, top {args.top} events",
                    collapsed,
                    f"{len(hits)} events; +{(collapsed - plain) * 1000:.1f} ms",
                )
            )
        finally:
            library.close()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{args.frames:,} frames, {CAMERAS} cameras; load average {load:.2f}\n")
    print("| step | median ms | result |")
    print("| --- | ---: | --- |")
    for label, seconds_taken, note in rows:
        print(f"| {label} | {seconds_taken * 1000:.1f} | {note} |")


if __name__ == "__main__":
    main()
