"""The catalog at iNat24 scale (run on demand): `python tests/bench/bench_catalog_5m.py`.

    python tests/bench/bench_catalog_5m.py --photos 5000000 [--workdir DIR] [--keep]
    python tests/bench/bench_catalog_5m.py --coco-images 3000000   # the metadata part only

Builds, under `--workdir` (a temporary folder by default, deleted at the end):

- a tree of EMPTY files shaped like iNat24's training set: one folder per taxon named
  `NNNNN_Kingdom_Phylum_Class_Order_Family_Genus_epithet`, about 500 files each, uuid names;
- a library whose catalog describes every file (the real schema, made by `Library.open`; rows
  written in bulk through SQL): 10,000 species in 2,500 genera, 500 families, 80 orders, 20
  classes, 6 phyla and 3 kingdoms, observation dates over 16 years, positions around 300 sites,
  licences in six spellings, and one vector per photo. The vectors are a 4-dimensional
  stand-in (the re-scan never encodes; a real 512-d CLIP vector would add 10 GB to the catalog
  and say nothing about the catalog's own costs), with a stand-in encoder of that size.

Then it measures, each in a fresh process (peak RSS is that process's own): opening the
library with the first counts, the library panel's counts (which walk the folder), filtered
queries, and an incremental re-scan that finds nothing changed. `--profile FILE` writes a
cProfile of the re-scan. With `--coco-images N` it writes an iNat-like COCO file of N images
and measures reading it (`load_coco_metadata`) and the bounded-memory spill the indexer uses.

Markdown tables on stdout, progress on stderr.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import random
import resource
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

SPECIES, GENERA, FAMILIES, ORDERS, CLASSES, PHYLA = 10_000, 2_500, 500, 80, 20, 6
KINGDOMS = ("Animalia", "Plantae", "Fungi")
LICENCES = ("cc-by", "cc-by-nc", "CC BY 4.0", "cc0", "cc-by-sa", "cc-by-nc-sa")
LICENCE_WEIGHTS = (0.3, 0.4, 0.05, 0.1, 0.05, 0.1)
SITES = 300
DIM = 4
MODEL_KEY = "bench-stand-in-4d"
MTIME_NS = 1_700_000_000_000_000_000  # every file's mtime, set when it is created


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


# -- the stand-in encoder ---------------------------------------------------------------------


class StandInEncoder:
    """An encoder of `DIM` dimensions that the re-scan never calls (nothing is new)."""

    model_key = MODEL_KEY
    spec = "bench-stand-in"
    dim = DIM
    device = "cpu"

    def preprocess(self, image: Any) -> np.ndarray:
        return np.zeros(1, dtype=np.float32)

    def encode_preprocessed(self, batch: Any) -> np.ndarray:
        vectors = np.zeros((len(batch), DIM), dtype=np.float32)
        vectors[:, 0] = 1.0
        return vectors


# -- the synthetic library --------------------------------------------------------------------


def _word(number: int, length: int = 4) -> str:
    letters = "abcdefghijklmnopqrstuvwxyz"
    out = ""
    for _ in range(length):
        out += letters[number % 26]
        number //= 26
    return out


def taxa_rows() -> list[tuple[Any, ...]]:
    """(id, folder name, name, kingdom, phylum, class, order, family, genus, epithet, number)."""
    rows = []
    for s in range(SPECIES):
        genus = s % GENERA
        family = genus % FAMILIES
        order = family % ORDERS
        klass = order % CLASSES
        phylum = klass % PHYLA
        kingdom = KINGDOMS[phylum % len(KINGDOMS)]
        ranks = (
            kingdom,
            "Ph" + _word(phylum),
            "Cl" + _word(klass),
            "Or" + _word(order) + "ales",
            "Fa" + _word(family) + "idae",
            "Ge" + _word(genus),
        )
        epithet = _word(s * 7919 % SPECIES + 1000, 6)
        folder = f"{s:05d}_" + "_".join(ranks) + f"_{epithet}"
        rows.append((s + 1, folder, f"{ranks[5]} {epithet}", *ranks, epithet, s))
    return rows


def file_names(photos: int, seed: int = 0) -> Iterator[tuple[int, int, str]]:
    """(image id, taxon index, relative path) of every photo, folder by folder."""
    rnd = random.Random(seed)
    folders = taxa_rows()
    per = -(-photos // SPECIES)
    image_id = 0
    for taxon in range(SPECIES):
        folder = folders[taxon][1]
        for _ in range(per):
            if image_id == photos:
                return
            image_id += 1
            yield image_id, taxon, f"{folder}/{uuid.UUID(int=rnd.getrandbits(128))}.jpg"


def build_tree(root: Path, photos: int) -> None:
    """Empty files, iNat-style, each with the mtime `MTIME_NS`."""
    flags = os.O_CREAT | os.O_WRONLY | os.O_EXCL
    made: set[str] = set()
    for _, _, rel in file_names(photos):
        folder = rel.split("/", 1)[0]
        if folder not in made:
            (root / folder).mkdir(parents=True)
            made.add(folder)
        fd = os.open(root / rel, flags, 0o644)
        os.utime(fd, ns=(MTIME_NS, MTIME_NS))
        os.close(fd)


def build_catalog(library_dir: Path, tree: Path, photos: int, seed: int = 0) -> None:
    """The library's catalog, rows written in bulk through SQL, and its vector index."""
    from engine.catalog.library import Library

    Library.open(library_dir).close()  # creates the schema through the migrations
    path = library_dir / "catalog.sqlite3"
    con = sqlite3.connect(path)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=OFF")
    now = "2026-01-01 00:00:00.000000"
    con.execute(
        "INSERT INTO collections (id, root, name, added_at, last_scanned_at) "
        "VALUES (1, ?, ?, ?, ?)",
        (str(tree.resolve()), tree.name, now, now),
    )
    taxa = taxa_rows()
    con.executemany(
        'INSERT INTO taxa (id, key, name, kingdom, phylum, class, "order", family, genus, '
        "specific_epithet, category_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        taxa,
    )
    for key, value in (("model_key", MODEL_KEY), ("model_spec", "bench-stand-in"),
                       ("model_dim", str(DIM))):  # fmt: skip
        con.execute("INSERT OR REPLACE INTO library_meta (key, value) VALUES (?, ?)", (key, value))
    # The text index is filled in one statement afterwards, as its migration does.
    trigger = con.execute(
        "SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = 'record_text_image_added'"
    ).fetchone()
    if trigger:
        con.execute("DROP TRIGGER record_text_image_added")
    rng = np.random.default_rng(seed)
    site_lat = rng.uniform(-55, 70, SITES)
    site_lon = rng.uniform(-180, 180, SITES)
    start = datetime(2008, 1, 1)
    vector = np.zeros(DIM, dtype="<f4")
    vector[0] = 1.0
    blob = vector.tobytes()
    batch: list[tuple[Any, ...]] = []

    def flush() -> None:
        con.executemany(
            "INSERT INTO images (id, collection_id, rel_path, size, mtime_ns, content_hash, "
            "width, height, taxon_id, observed_at, latitude, longitude, location_uncertainty, "
            "license, rights_holder, external_id, status, added_at, updated_at) VALUES "
            "(?, 1, ?, 0, ?, ?, 500, 375, ?, ?, ?, ?, ?, ?, ?, ?, 'ok', ?, ?)",
            batch,
        )
        con.executemany(
            "INSERT INTO embeddings (image_id, model_key, vector) VALUES (?, ?, ?)",
            [(row[0], MODEL_KEY, blob) for row in batch],
        )
        batch.clear()

    for n, (image_id, taxon, rel) in enumerate(file_names(photos)):
        if n % 100_000 == 0:
            seconds = rng.integers(0, 16 * 365 * 86_400, 100_000)
            site = rng.integers(0, SITES, 100_000)
            jitter = rng.normal(0, 0.7, (100_000, 2))
            licence = rng.choice(len(LICENCES), 100_000, p=LICENCE_WEIGHTS)
            observer = rng.integers(0, 50_000, 100_000)
        k = n % 100_000
        observed = (start + timedelta(seconds=int(seconds[k]))).strftime("%Y-%m-%d %H:%M:%S.%f")
        lat = float(np.clip(site_lat[site[k]] + jitter[k, 0], -90, 90))
        lon = float((site_lon[site[k]] + jitter[k, 1] + 180.0) % 360.0 - 180.0)
        batch.append((
            image_id, rel, MTIME_NS, f"{image_id:064x}", taxon + 1, observed, lat, lon, 30.0,
            LICENCES[licence[k]], f"observer {observer[k]}", image_id, now, now,
        ))  # fmt: skip
        if len(batch) == 50_000:
            flush()
            if (n + 1) % 500_000 == 0:
                log(f"  {n:,} rows")
    if batch:
        flush()
    if trigger:
        fill = importlib.import_module("engine.catalog.migrations.versions.0005_record_text").FILL
        con.execute("DELETE FROM record_text")
        con.execute(fill)
        con.execute(trigger[0])
    con.commit()
    con.execute("ANALYZE")
    con.close()
    with Library.open(library_dir) as library:
        library.vector_index(MODEL_KEY, dim=DIM)
        library.save_index(MODEL_KEY)


# -- measurements, each in its own process ------------------------------------------------------


def measure(name: str, library_dir: Path, tree: Path, profile: str | None) -> dict[str, Any]:
    from engine.catalog.library import Library
    from engine.indexing.collections import collection_stats
    from engine.search.filters import SearchFilters, filtered_ids

    out: dict[str, Any] = {}
    started = time.perf_counter()
    if name == "open":
        library = Library.open(library_dir)
        opened = time.perf_counter()
        stats = collection_stats(library, MODEL_KEY)
        out["open_s"] = opened - started
        out["counts_s"] = time.perf_counter() - opened
        out["indexed"] = stats[0].indexed
        library.close()
    elif name == "panel":
        with Library.open(library_dir) as library:
            started = time.perf_counter()
            stats = collection_stats(library, MODEL_KEY, scan_disk=True)
            out["seconds"] = time.perf_counter() - started
            out["pending"] = stats[0].pending
    elif name == "filters":
        genus = "Ge" + _word(17)
        cases = {
            f"taxon = a genus ({genus})": SearchFilters(taxon=genus),
            "months Apr–Jun": SearchFilters(months=(4, 6)),
            "bbox (Europe)": SearchFilters(bbox=(35.0, -10.0, 60.0, 30.0)),
            "genus + months + bbox": SearchFilters(
                taxon=genus, months=(4, 6), bbox=(-60.0, -180.0, 75.0, 180.0)
            ),
            "date range, one year": SearchFilters(
                date_from=date(2018, 1, 1), date_to=date(2018, 12, 31)
            ),
        }
        with Library.open(library_dir) as library:
            rows = []
            for label, filters in cases.items():
                times = []
                for _ in range(3):
                    t0 = time.perf_counter()
                    ids = filtered_ids(library.catalog, filters)
                    times.append(time.perf_counter() - t0)
                rows.append((label, sorted(times)[1], len(ids)))
            out["cases"] = rows
    elif name == "rescan":
        from engine.indexing.indexer import Indexer

        with Library.open(library_dir) as library:
            indexer = Indexer(library, StandInEncoder())  # type: ignore[arg-type]
            started = time.perf_counter()
            if profile:
                import cProfile

                profiler = cProfile.Profile()
                report = profiler.runcall(indexer.run, tree)
                profiler.dump_stats(profile)
            else:
                report = indexer.run(tree)
            out["seconds"] = time.perf_counter() - started
            out["unchanged"] = report.unchanged
            out["indexed"] = report.indexed
            out["missing"] = report.missing
    elif name == "coco-load":
        from engine.indexing.coco import load_coco_metadata

        meta = load_coco_metadata(tree)
        out["seconds"] = time.perf_counter() - started
        out["records"] = len(meta)
    elif name == "coco-spill":
        from engine.indexing.metadata_store import MetadataStore

        done: list[int] = []
        with MetadataStore.load(tree, progress=lambda p: done.append(p.done)) as store:
            out["seconds"] = time.perf_counter() - started
            out["records"] = len(store)
            out["progress_last"] = done[-1] if done else 0
            out["progress_calls"] = len(done)
            t0 = time.perf_counter()
            keys = [f"train/{i:07d}.jpg" for i in range(0, len(store), max(1, len(store) // 10000))]
            found = sum(store.get(k) is not None for k in keys)
            out["lookup_us"] = (time.perf_counter() - t0) / len(keys) * 1e6
            out["found"] = found
    else:
        raise SystemExit(f"unknown measurement {name}")
    out["peak_rss_mb"] = peak_rss_mb()
    return out


def run_child(
    name: str, library_dir: Path, tree: Path, profile: str | None = None
) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", name, "--library", str(library_dir),
               "--tree", str(tree)]  # fmt: skip
    if profile:
        command += ["--profile", profile]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run(command, check=True, capture_output=True, text=True, env=env)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


INDEXED_COUNT_SQL = (
    "SELECT count(*) FROM embeddings JOIN images ON images.id = embeddings.image_id "
    "WHERE images.collection_id = 1 AND images.status = 'ok' AND embeddings.model_key = ?"
)


def counts_without_index(library_dir: Path, tree: Path) -> None:
    """The first counts again without migration 0007's index, and the index made again (what
    the migration costs at this size); with SQLite's plan for the indexed count both ways."""
    path = library_dir / "catalog.sqlite3"
    con = sqlite3.connect(path)
    plan_with = " / ".join(r[3] for r in con.execute("EXPLAIN QUERY PLAN " + INDEXED_COUNT_SQL,
                                                      (MODEL_KEY,)))  # fmt: skip
    con.execute("DROP INDEX ix_images_collection_status")
    con.commit()
    con.close()
    con = sqlite3.connect(path)
    # Other text than above: sqlite3's statement cache would hand back the first plan.
    plan_without = " / ".join(r[3] for r in con.execute("EXPLAIN QUERY PLAN  " + INDEXED_COUNT_SQL,
                                                         (MODEL_KEY,)))  # fmt: skip
    con.close()
    log("first counts without the (collection, status) index")
    without = run_child("open", library_dir, tree)
    print(f"| first counts without index 0007 | {without['counts_s']:.2f} | "
          f"{without['peak_rss_mb']:,.0f} MB | {without['indexed']:,} indexed |")  # fmt: skip
    con = sqlite3.connect(path)
    started = time.perf_counter()
    con.execute("CREATE INDEX ix_images_collection_status ON images (collection_id, status)")
    con.commit()
    con.close()
    print(f"| migration 0007 (the index made) | {time.perf_counter() - started:.2f} | | |")
    print(f"| plan of the indexed count, with / without the index | | | {plan_with} ‖ "
          f"{plan_without} |")  # fmt: skip


# -- COCO metadata --------------------------------------------------------------------------


def write_coco(path: Path, images: int, seed: int = 0) -> None:
    """An iNat-like train.json: images (with dates, positions, licences), categories with the
    full lineage, one annotation per image. About 340 bytes per image."""
    rng = random.Random(seed)
    taxa = taxa_rows()
    with path.open("w", encoding="utf-8") as out:
        out.write('{"info": {"year": 2021, "version": "bench"}, "images": [')
        for i in range(images):
            day = date(2008, 1, 1) + timedelta(days=rng.randrange(16 * 365))
            record = {
                "id": i,
                "width": 500,
                "height": 375,
                "file_name": f"train/{i:07d}.jpg",
                "license": 1 + i % 6,
                "rights_holder": f"observer {rng.randrange(50_000)}",
                "date": f"{day.isoformat()} {rng.randrange(24):02d}:{rng.randrange(60):02d}:00+00:00",
                "latitude": round(rng.uniform(-55, 70), 6),
                "longitude": round(rng.uniform(-180, 180), 6),
                "location_uncertainty": rng.choice((None, 5, 30, 120, 1000)),
            }
            out.write(("," if i else "") + json.dumps(record))
        out.write('], "categories": [')
        for n, row in enumerate(taxa):
            category = {
                "id": row[10], "name": row[2], "common_name": f"common {row[9]}",
                "kingdom": row[3], "phylum": row[4], "class": row[5], "order": row[6],
                "family": row[7], "genus": row[8], "specific_epithet": row[9],
                "image_dir_name": row[1],
            }  # fmt: skip
            out.write(("," if n else "") + json.dumps(category))
        out.write('], "annotations": [')
        for i in range(images):
            out.write(("," if i else "") + json.dumps(
                {"id": i, "image_id": i, "category_id": rng.randrange(SPECIES)}))  # fmt: skip
        out.write('], "licenses": [')
        out.write(",".join(json.dumps({"id": k + 1, "name": name, "url": ""})
                           for k, name in enumerate(LICENCES)))  # fmt: skip
        out.write("]}")


# -- main -------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--photos", type=int, default=5_000_000)
    parser.add_argument("--coco-images", type=int, default=0)
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--keep", action="store_true", help="keep the tree and library")
    parser.add_argument("--reuse", action="store_true", help="measure an existing workdir")
    parser.add_argument("--build-only", action="store_true", help="build, measure nothing")
    parser.add_argument("--profile", help="write a cProfile of the re-scan to this file")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--library", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--tree", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.child:
        print(json.dumps(measure(args.child, args.library, args.tree, args.profile)))
        return

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="quadrat-5m-"))
    workdir.mkdir(parents=True, exist_ok=True)
    tree, library_dir = workdir / "photos", workdir / "library"
    print(f"load average at start: {load_average()}\n")
    try:
        if args.coco_images:
            bench_coco(workdir, args.coco_images)
            return
        if not args.reuse:
            started = time.perf_counter()
            log(f"creating {args.photos:,} empty files")
            build_tree(tree, args.photos)
            tree_s = time.perf_counter() - started
            started = time.perf_counter()
            log("writing the catalog")
            build_catalog(library_dir, tree, args.photos)
            catalog_s = time.perf_counter() - started
            size_mb = (library_dir / "catalog.sqlite3").stat().st_size / 1e6
            print(f"| {args.photos:,} photos | |\n|---|---:|")
            print(f"| empty-file tree created | {tree_s:.1f} s |")
            print(f"| catalog written (rows, text index, vector index) | {catalog_s:.1f} s |")
            print(f"| catalog file | {size_mb:,.0f} MB |\n")
            if args.build_only:
                return
        print("| measurement | seconds | peak RSS | result |\n|---|---:|---:|---|")
        log("library open + first counts")
        opened = run_child("open", library_dir, tree)
        print(f"| `Library.open` | {opened['open_s']:.2f} | | |")
        print(f"| first counts (`collection_stats`) | {opened['counts_s']:.2f} | "
              f"{opened['peak_rss_mb']:,.0f} MB | {opened['indexed']:,} indexed |")  # fmt: skip
        counts_without_index(library_dir, tree)
        log("library panel counts (walks the folder)")
        panel = run_child("panel", library_dir, tree)
        print(f"| library panel counts (`scan_disk=True`) | {panel['seconds']:.2f} | "
              f"{panel['peak_rss_mb']:,.0f} MB | {panel['pending']:,} pending |")  # fmt: skip
        log("incremental re-scan")
        rescan = run_child("rescan", library_dir, tree, args.profile)
        print(f"| re-scan, nothing changed (`Indexer.run`) | {rescan['seconds']:.2f} | "
              f"{rescan['peak_rss_mb']:,.0f} MB | {rescan['unchanged']:,} unchanged, "
              f"{rescan['indexed']} indexed, {rescan['missing']} missing |")  # fmt: skip
        log("filtered queries")
        filters = run_child("filters", library_dir, tree)
        for label, seconds, count in filters["cases"]:
            print(f"| filter: {label} | {seconds:.3f} | | {count:,} photos |")
        print(f"| (filters process) | | {filters['peak_rss_mb']:,.0f} MB | |")
        print(f"\nload average at the end: {load_average()}")
    finally:
        if not args.keep:
            log("deleting the tree and library")
            shutil.rmtree(workdir, ignore_errors=True)


def bench_coco(workdir: Path, images: int) -> None:
    path = workdir / "train.json"
    if not path.exists():
        log(f"writing a COCO file of {images:,} images")
        write_coco(path, images)
    size = path.stat().st_size
    print(f"| COCO file: {images:,} images, {size / 1e9:.2f} GB | seconds | peak RSS | |")
    print("|---|---:|---:|---|")
    for name, label in (("coco-load", "`load_coco_metadata` (a dict of every record)"),
                        ("coco-spill", "`MetadataStore.load` (spilled to SQLite)")):  # fmt: skip
        log(label)
        result = run_child(name, workdir, path)
        extra = f"{result['records']:,} records"
        if "progress_last" in result:
            extra += (f"; progress reached {result['progress_last']:,} of {size:,} bytes in "
                      f"{result['progress_calls']} reports; lookup {result['lookup_us']:.0f} µs")  # fmt: skip
        print(f"| {label} | {result['seconds']:.1f} | {result['peak_rss_mb']:,.0f} MB | {extra} |")
    print(f"\nload average at the end: {load_average()}")


if __name__ == "__main__":
    main()
