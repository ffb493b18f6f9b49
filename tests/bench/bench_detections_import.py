"""Importing a MegaDetector file of a million photos: time and peak memory.

    nice python tests/bench/bench_detections_import.py [--n 1000000] [--scratch DIR]

A catalog of N photo rows (written straight into SQLite: 1,000 photos per camera folder) and a
synthetic MegaDetector batch output naming them as a Windows machine did (`D:\\traps\\CAM...`,
found through the root map): 30 % empty frames, the rest one to three boxes, faint boxes down to
0.005 as MegaDetector writes them, 1 % of the photos in a folder the catalog does not hold
(unmatched). The file is written to disk as it is generated and the import reads it streamed.

The import runs in a child process of its own, so its peak RSS is its own, not the
generator's. Rows: the first import, a re-import of the same file (replacing a million
frames), the summary, and the empty-frames filter over the catalog. Target: an import of a
million photos in 10 minutes or less here. Prints a Markdown table on stdout.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import random
import resource
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

PER_FOLDER = 1000
ROOT_HERE = "/photos/traps"
ROOT_THERE = "D:\\traps"


def _rel_path(n: int) -> str:
    return f"CAM{n // PER_FOLDER:04d}/IMG_{n:07d}.JPG"


def make_catalog(folder: Path, n: int) -> Path:
    """A library whose catalog holds `n` photo rows under one collection."""
    from engine.catalog.library import Library

    library = Library.open(folder)
    library.catalog.dispose()
    path = folder / "catalog.sqlite3"
    db = sqlite3.connect(path)
    db.execute(
        "INSERT INTO collections (id, root, name, added_at) VALUES (1, ?, 'traps', "
        "'2026-01-01 00:00:00')",
        (ROOT_HERE,),
    )
    rows = ((i + 1, _rel_path(i), "2026-01-01 00:00:00") for i in range(n))
    db.executemany(
        "INSERT INTO images (id, collection_id, rel_path, size, mtime_ns, status, added_at, "
        "updated_at) VALUES (?, 1, ?, 1, 1, 'ok', ?, ?)",
        ((i, p, t, t) for i, p, t in rows),
    )
    db.commit()
    db.close()
    return folder


def write_megadetector_file(path: Path, n: int, seed: int = 7) -> dict[str, int]:
    """A MegaDetector 1.4 file of `n` photos, written entry by entry; counts of what it holds."""
    rng = random.Random(seed)
    counts = {"photos": n, "boxes": 0, "unmatched": 0}
    with path.open("w", encoding="utf-8") as out:
        header = {
            "info": {"detector": "md_v5a.0.0.pt", "format_version": "1.4"},
            "detection_categories": {"1": "animal", "2": "person", "3": "vehicle"},
        }
        out.write(json.dumps(header)[:-1] + ', "images": [\n')
        for i in range(n):
            folder = _rel_path(i).replace("/", "\\")
            if rng.random() < 0.01:
                folder = folder.replace("CAM", "OLD")
                counts["unmatched"] += 1
            detections: list[dict[str, Any]] = []
            if rng.random() >= 0.3:
                for _ in range(rng.randint(1, 3)):
                    detections.append(
                        {
                            "category": rng.choice("1112"),
                            "conf": round(rng.uniform(0.005, 1.0), 3),
                            "bbox": [round(rng.uniform(0, 0.8), 4), round(rng.uniform(0, 0.8), 4),
                                     round(rng.uniform(0.01, 0.2), 4), round(rng.uniform(0.01, 0.2), 4)],
                        }
                    )  # fmt: skip
            if folder.startswith("CAM"):
                counts["boxes"] += len(detections)  # boxes on photos the catalog holds
            entry = {"file": f"{ROOT_THERE}\\{folder}", "detections": detections}
            out.write(json.dumps(entry) + (",\n" if i < n - 1 else "\n"))
        out.write("]}\n")
    return counts


def _child(library_dir: str, file: str, queue: Any) -> None:
    from engine.catalog.library import Library, RootMap
    from engine.detections.importing import import_detections, summarise
    from engine.search.filters import SearchFilters, filtered_ids

    library = Library.open(library_dir, root_map=RootMap.parse([f"{ROOT_THERE}={ROOT_HERE}"]))
    times: dict[str, float] = {}
    start = time.perf_counter()
    report = import_detections(library, Path(file))
    times["import"] = time.perf_counter() - start
    rss_import = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    import_detections(library, Path(file))
    times["re-import (replaces every row)"] = time.perf_counter() - start
    start = time.perf_counter()
    (summary,) = summarise(library.catalog)
    times["summary at 0.2"] = time.perf_counter() - start
    start = time.perf_counter()
    empty = filtered_ids(library.catalog, SearchFilters(empty=0.2))
    times["filter --empty 0.2"] = time.perf_counter() - start
    library.catalog.dispose()
    queue.put(
        {
            "times": times,
            "rss_import_mb": rss_import / 1024,
            "rss_end_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "frames": report.frames,
            "detections": report.detections,
            "unmatched": report.unmatched_count,
            "matched_by": report.matched_by,
            "empty": summary.empty,
            "empty_filtered": len(empty),
        }
    )


def run(n: int, scratch: Path) -> str:
    """Make the catalog and the file in `scratch`, import in a child process; the table."""
    scratch.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    library_dir = make_catalog(scratch / "library", n)
    print(f"catalog of {n:,} rows: {time.perf_counter() - start:.0f} s", file=sys.stderr)
    start = time.perf_counter()
    file = scratch / "md.json"
    counts = write_megadetector_file(file, n)
    size_mb = file.stat().st_size / 1e6
    print(f"file of {size_mb:,.0f} MB: {time.perf_counter() - start:.0f} s", file=sys.stderr)
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    child = context.Process(target=_child, args=(str(library_dir), str(file), queue))
    child.start()
    result = queue.get()
    child.join()
    assert result["frames"] == counts["photos"] - counts["unmatched"]
    assert result["unmatched"] == counts["unmatched"]
    assert result["detections"] == counts["boxes"]  # threshold 0: every box kept
    assert result["empty"] == result["empty_filtered"]
    lines = [
        f"## Importing a MegaDetector file ({n:,} photos, {size_mb:,.0f} MB)",
        "",
        "| step | seconds | photos/s | result |",
        "| --- | ---: | ---: | --- |",
    ]
    for step, seconds in result["times"].items():
        rate = f"{n / seconds:,.0f}" if "import" in step else ""
        note = ""
        if step == "import":
            note = (
                f"{result['frames']:,} frames, {result['detections']:,} boxes, "
                f"{result['unmatched']:,} unmatched; peak RSS {result['rss_import_mb']:,.0f} MB"
            )
        elif step.startswith("summary") or step.startswith("filter"):
            note = f"{result['empty']:,} empty frames"
        lines.append(f"| {step} | {seconds:,.1f} | {rate} | {note} |")
    lines.append(f"\npeak RSS of the importing process: {result['rss_end_mb']:,.0f} MB")
    return "\n".join(lines)


@pytest.mark.bench
def test_import_benchmark_small(tmp_path: Path) -> None:
    """The benchmark at 5,000 photos (`-m bench`): its counts hold; the table printed."""
    print(run(5000, tmp_path))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--scratch", type=Path, default=None)
    args = parser.parse_args()
    scratch = Path(args.scratch or tempfile.mkdtemp(prefix="bench-detections-"))
    print("\n" + run(args.n, scratch))


if __name__ == "__main__":
    main()
