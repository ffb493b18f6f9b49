"""What reading keywords costs an indexing run (`engine.indexing.keywords.refresh_keywords`):
the first read of a collection (every photo's header, its sidecar where one is, and the
catalog update) and a re-scan where nothing changed (the catalog read and one listing per
folder), per photo, from a warm file cache.

    python tests/bench/bench_keywords.py [--per-class 40] [--sidecars 0.25] [--repeats 3]

Prints a Markdown table on stdout.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from sqlalchemy import select, update

from engine.catalog import Image
from engine.catalog.library import Library
from engine.demo.collection import write_demo_collection
from engine.indexing.indexer import Indexer
from engine.indexing.keywords import refresh_keywords
from engine.io.xmp import merge_keywords
from engine.models.encoders import load_encoder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-class", type=int, default=40, help="demo photos per class")
    parser.add_argument("--sidecars", type=float, default=0.25, help="share with a sidecar")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        collection = write_demo_collection(Path(scratch) / "c", images_per_class=args.per_class)
        photos = sorted(collection.root.rglob("*.jpg"))
        every = max(1, round(1 / args.sidecars)) if args.sidecars > 0 else 0
        for photo in photos[::every] if every else []:
            sidecar = photo.with_name(photo.name + ".xmp")
            sidecar.write_bytes(
                merge_keywords(None, ["Site|Pond A", "Quadrat|lifeStage|adult"], [])
            )
        with Library.open(Path(scratch) / "lib") as library:
            Indexer(library, load_encoder("demo", "cpu")).run(collection.root)
            with library.catalog.session() as s:
                collection_id = s.scalar(select(Image.collection_id).limit(1))
            assert collection_id is not None
            print(f"{len(photos)} photos, a sidecar for 1 in {every or 'none'}\n")
            print("| run | first read (µs/photo) | nothing changed (µs/photo) |")
            print("| --- | ---: | ---: |")
            for run in range(1, args.repeats + 1):
                with library.catalog.session() as s:
                    s.execute(update(Image).values(keywords_source=None))
                started = time.perf_counter()
                refresh_keywords(library.catalog, collection_id, collection.root)
                first = time.perf_counter() - started
                started = time.perf_counter()
                refresh_keywords(library.catalog, collection_id, collection.root)
                again = time.perf_counter() - started
                per = 1e6 / len(photos)
                print(f"| {run} | {first * per:.0f} | {again * per:.1f} |")


if __name__ == "__main__":
    main()
