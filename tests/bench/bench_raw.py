"""Indexing speed of camera RAW against JPEG (engine/indexing/raw.py).

Run on demand:

    python tests/bench/bench_raw.py [--photos 8] [--width 4000] [--height 3000]

Three folders of the same scene at the same sensor size: JPEGs (quality 90, as cameras write
them), DNGs with an embedded RGB preview of 1024 pixels (decoded from the preview: it is larger
than the encoder's 224-pixel input) and DNGs without one (demosaiced at half size). Each row:
the median time to decode one photo for the encoder (`decode_image(min_side=224)`), and photos
per second indexing the folder with the demo model (decode, encode, catalog), one thread.
Markdown on stdout.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from engine.catalog.library import Library  # noqa: E402
from engine.indexing.decode import decode_image  # noqa: E402
from engine.indexing.indexer import Indexer  # noqa: E402
from engine.models.encoders import load_encoder  # noqa: E402
from tests.test_raw_heic import write_dng  # noqa: E402

MIN_SIDE = 224


def _write_folders(root: Path, photos: int, width: int, height: int) -> dict[str, Path]:
    rng = np.random.default_rng(0)
    folders = {name: root / name for name in ("JPEG", "DNG with preview", "DNG, no preview")}
    for folder in folders.values():
        folder.mkdir()
    for index in range(photos):
        scene = rng.integers(0, 255, (height // 64, width // 64, 3), dtype=np.uint8)
        image = Image.fromarray(scene, "RGB").resize((width, height), Image.Resampling.BILINEAR)
        image.save(folders["JPEG"] / f"IMG_{index:04d}.JPG", quality=90)
        write_dng(folders["DNG with preview"] / f"IMG_{index:04d}.DNG", width, height, 1024)
        write_dng(folders["DNG, no preview"] / f"IMG_{index:04d}.DNG", width, height)
    return folders


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--photos", type=int, default=8)
    parser.add_argument("--width", type=int, default=4000)
    parser.add_argument("--height", type=int, default=3000)
    args = parser.parse_args()
    encoder = load_encoder("demo", device="cpu")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folders = _write_folders(Path(tmp), args.photos, args.width, args.height)
        for name, folder in folders.items():
            files = sorted(folder.iterdir())
            size_mb = statistics.mean(f.stat().st_size for f in files) / 1e6
            decode_image(files[0], min_side=MIN_SIDE)  # warm up (plugins, LibRaw)
            times = []
            for path in files:
                start = time.perf_counter()
                decode_image(path, min_side=MIN_SIDE)
                times.append(time.perf_counter() - start)
            with Library.open(Path(tmp) / f"lib-{len(rows)}") as library:
                start = time.perf_counter()
                report = Indexer(library, encoder).run(folder)
                seconds = time.perf_counter() - start
            assert report.indexed == len(files), report.summary()
            rows.append((name, size_mb, statistics.median(times) * 1000, len(files) / seconds))
    base = rows[0][2]
    print(f"{args.photos} photos of {args.width} x {args.height} pixels per format\n")
    print(
        "| format | MB per file | decode for the encoder (ms, median) | vs JPEG | indexing (photos/s) |"
    )
    print("|---|---:|---:|---:|---:|")
    for name, size_mb, decode_ms, rate in rows:
        print(
            f"| {name} | {size_mb:.1f} | {decode_ms:.0f} | {decode_ms / base:.1f}x | {rate:.1f} |"
        )


if __name__ == "__main__":
    main()
