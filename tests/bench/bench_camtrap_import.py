"""Camtrap DP observations import at scale: time and peak memory of reading a package of N media
and N observations onto N indexed photos, and of importing it again (which replaces).

    nice python tests/bench/bench_camtrap_import.py [--n 100000] [--scratch DIR]

The catalog's photos are inserted directly (no pixels: the import reads paths only); the
package has one media-level observation per photo (half with a box, a tenth blank), one
event-level observation per ten photos, and one media row in a hundred naming no photo.
Prints a Markdown table on stdout.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from sqlalchemy import insert  # noqa: E402

from engine.catalog.library import Library  # noqa: E402
from engine.catalog.models import Collection, Image  # noqa: E402
from engine.detections.camtrap_observations import read_camtrap_observations  # noqa: E402
from tests.camtrap_packages import write_package  # noqa: E402


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def build(folder: Path, n: int) -> tuple[Library, Path]:
    package = folder / "package"
    library = Library.open(folder / "lib")
    with library.catalog.session() as s:
        collection = Collection(root=str(package.resolve()), name="package")
        s.add(collection)
        s.flush()
        rows = [
            {"collection_id": collection.id, "rel_path": f"media/{i:07d}.jpg", "size": 1,
             "mtime_ns": 1}
            for i in range(n)
        ]  # fmt: skip
        s.execute(insert(Image), rows)
    start = datetime(2021, 4, 1, tzinfo=UTC)
    media, observations = [], []
    for i in range(n + n // 100):
        moment = (start + timedelta(seconds=30 * i)).isoformat().replace("+00:00", "Z")
        name = f"{i:07d}.jpg" if i < n else f"missing-{i}.jpg"
        media.append(
            {"mediaID": f"m{i}", "deploymentID": f"d{i // 1000}", "timestamp": moment,
             "filePath": f"media/{name}", "filePublic": "false", "fileMediatype": "image/jpeg",
             "captureMethod": "activityDetection"}
        )  # fmt: skip
        if i >= n:
            continue
        row = {
            "observationID": f"o{i}", "deploymentID": f"d{i // 1000}", "mediaID": f"m{i}",
            "eventID": f"e{i // 10}", "eventStart": moment, "eventEnd": moment,
            "observationLevel": "media", "classificationMethod": "machine",
            "classifiedBy": "bench model", "classificationProbability": "0.8",
            "observationType": "blank" if i % 10 == 0 else "animal",
            "scientificName": "" if i % 10 == 0 else "Vulpes vulpes",
        }  # fmt: skip
        if i % 2:
            row.update(bboxX="0.1", bboxY="0.2", bboxWidth="0.3", bboxHeight="0.25")
        observations.append(row)
        if i % 10 == 0:
            observations.append(
                {**row, "observationID": f"ev{i}", "mediaID": "", "observationLevel": "event",
                 "observationType": "animal", "scientificName": "Vulpes vulpes",
                 "bboxX": "", "bboxY": "", "bboxWidth": "", "bboxHeight": "",
                 "eventEnd": (start + timedelta(seconds=30 * (i + 9))).isoformat()}
            )  # fmt: skip
    write_package(package, media=media, observations=observations)
    return library, package


def _import_twice(folder: Path) -> None:
    """In a process of its own (so its peak memory is the import's): both runs, one line each
    of run, seconds, detections, frames, unmatched, peak RSS in MB."""
    library = Library.open(folder / "lib")
    before = _peak_mb()
    for run in ("first import", "re-import (replaces)"):
        started = time.perf_counter()
        report = read_camtrap_observations(library, folder / "package")
        seconds = time.perf_counter() - started
        print(
            f"{run}\t{seconds:.1f}\t{report.detections}\t{report.frames}\t"
            f"{len(report.unmatched)}\t{_peak_mb():.0f} (opened: {before:.0f})"
        )
    library.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--scratch", type=Path, default=None)
    parser.add_argument("--import-only", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.import_only is not None:
        _import_twice(args.import_only)
        return
    with tempfile.TemporaryDirectory(dir=args.scratch) as scratch:
        library, _ = build(Path(scratch), args.n)
        library.close()
        out = subprocess.run(
            [sys.executable, __file__, "--import-only", scratch],
            check=True, capture_output=True, text=True,
        ).stdout  # fmt: skip
    print(f"\n{args.n:,} photos, {args.n + args.n // 100:,} media, "
          f"{args.n + args.n // 10:,} observations\n")  # fmt: skip
    print("| run | seconds | detections | frames | unmatched media | peak RSS (MB) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for line in out.strip().splitlines():
        run, seconds, detections, frames, unmatched, memory = line.split("\t")
        print(f"| {run} | {seconds} | {int(detections):,} | {int(frames):,} | "
              f"{int(unmatched):,} | {memory} |")  # fmt: skip


if __name__ == "__main__":
    main()
