"""Metadata filter benchmark: `engine.search.filters` on a catalog of a million photos.

Run on demand (building the catalog takes about a minute):

    python tests/bench/bench_filters.py [--photos 1000000] [--repeat 5] [--indexes]

The catalog is synthetic but shaped like an iNaturalist export: 10,000 species in 2,000
genera, 400 families, 60 orders, 12 classes, 5 phyla and 2 kingdoms (photos per species
uneven, Zipf-like); observation dates over ten years (5 % without one); positions clustered
around 200 sites worldwide, a few across the antimeridian (10 % without GPS); licences in eight
spellings; five collections; one saved query with 2,000 judgments; 1 % of photos missing.

Each row is the median of `--repeat` runs of one call, and the number of photos it returns.
The rows are written as a catalog from before migration 0012 has them (its triggers off), so
the first column times the filters as they read every row (what they still do until the
filter columns are filled); then `fill_filter_columns` fills the columns and the R*Tree
(timed), and the second column times the same calls through the indexes of 0012, on the same
catalog in the same run. Then the filter column cache (`engine.search.filter_cache`, migration
0016) is loaded (timed, its memory said) and a third column times the calls with it. With
`--indexes` it times everything again after adding the partial indexes (WHERE status = 'ok') a
migration could add (`INDEXES`), so their worth can be weighed. `--skip-every-row` leaves out
the first column, `--filters-only` every call but dates, months and boxes. Markdown on stdout, progress on
stderr.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import engine.search.filters as filters_module  # noqa: E402
from engine.catalog import open_catalog  # noqa: E402
from engine.catalog.filter_columns import (  # noqa: E402
    fill_filter_columns,
    filter_columns_filled,
)
from engine.progress import Progress  # noqa: E402
from engine.search import filter_cache  # noqa: E402
from engine.search.filter_index import answered_by_indexes  # noqa: E402
from engine.search.filters import (  # noqa: E402
    SearchFilters,
    facet_counts,
    filtered_ids,
    locations,
    month_counts,
    taxon_suggestions,
)

SPECIES, GENERA, FAMILIES, ORDERS, CLASSES, PHYLA, KINGDOMS = 10_000, 2_000, 400, 60, 12, 5, 2
LICENCES = (
    "CC BY 4.0", "cc-by", "CC BY-NC 4.0", "cc-by-nc", "CC0 1.0", "cc0",
    "http://creativecommons.org/licenses/by-sa/4.0/", "All rights reserved",
)  # fmt: skip
SITES = 200
# What a migration could add: partial indexes over the photos a search sees (status ok), so a
# filter reads the index alone instead of every row.
INDEXES = {
    "bench_ix_ok_taxon": "taxon_id",
    "bench_ix_ok_observed": "observed_at",
    "bench_ix_ok_position": "latitude, longitude",
    "bench_ix_ok_license": "license",
    "bench_ix_ok_collection": "collection_id",
}
QUERY_ID = 1
FILTERS_ONLY = False  # --filters-only: dates, months and boxes alone
# Migration 0012's triggers, which keep the filter columns and the R*Tree of places.
FILTER_TRIGGERS = (
    "images_observed_added",
    "images_observed_changed",
    "images_place_added",
    "images_place_changed",
    "images_place_removed",
    # and migration 0019's generation (the filter cache's), off for the bulk write too
    "images_generation_added",
    "images_generation_updated",
    "images_generation_removed",
)


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _name(prefix: str, number: int) -> str:
    letters = "abcdefghijklmnopqrstuvwxyz"
    word = ""
    n = number
    for _ in range(4):
        word += letters[n % 26]
        n //= 26
    return f"{prefix}{word}"


def build_catalog(path: Path, photos: int, seed: int = 0) -> None:
    """Write the synthetic catalog at `path` (schema by `open_catalog`, rows by sqlite3)."""
    rng = np.random.default_rng(seed)
    open_catalog(path).dispose()
    con = sqlite3.connect(path)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=OFF")
    # Rows as a catalog catalogued before migration 0012 holds them: its triggers off while
    # they are written (put back after), its columns unfilled.
    triggers = con.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND name IN "
        f"({', '.join('?' * len(FILTER_TRIGGERS))})",
        FILTER_TRIGGERS,
    ).fetchall()
    for name, _ in triggers:
        con.execute(f"DROP TRIGGER {name}")
    con.execute("DELETE FROM library_meta WHERE key LIKE 'filter_columns%'")
    now = "2024-01-01 00:00:00.000000"
    con.executemany(
        "INSERT INTO collections (id, root, name, added_at) VALUES (?, ?, ?, ?)",
        [(c, f"/photos/set{c}", f"set{c}", now) for c in range(1, 6)],
    )
    taxa = []
    for s in range(SPECIES):
        genus = s % GENERA
        family, order = genus % FAMILIES, genus % ORDERS
        klass, phylum, kingdom = order % CLASSES, order % PHYLA, order % KINGDOMS
        genus_name = _name("G", genus).capitalize()
        epithet = _name("", s)
        taxa.append((
            s + 1, f"t{s}", f"{genus_name} {epithet}", f"common {epithet} bird",
            ("Plantae", "Animalia")[kingdom], _name("Ph", phylum).capitalize(),
            _name("Cl", klass).capitalize(), _name("Or", order).capitalize() + "ales",
            _name("Fa", family).capitalize() + "idae", genus_name, epithet,
        ))  # fmt: skip
    con.executemany(
        'INSERT INTO taxa (id, key, name, common_name, kingdom, phylum, class, "order", family, '
        "genus, specific_epithet) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        taxa,
    )
    weights = 1.0 / np.arange(1, SPECIES + 1) ** 0.8
    taxon = rng.choice(SPECIES, size=photos, p=weights / weights.sum()) + 1
    start = datetime(2014, 1, 1)
    seconds = rng.integers(0, 10 * 365 * 86_400, size=photos)
    has_date = rng.random(photos) >= 0.05
    site_lat = rng.uniform(-70, 75, SITES)
    site_lon = rng.uniform(-180, 180, SITES)
    site_lon[:4] = (179.5, -179.5, 179.9, -179.9)  # some sites on the antimeridian
    site_lat[4] = 88.5  # and one near the north pole
    site = rng.integers(0, SITES, size=photos)
    lat = np.clip(site_lat[site] + rng.normal(0, 0.5, photos), -90, 90)
    lon = (site_lon[site] + rng.normal(0, 0.5, photos) + 180.0) % 360.0 - 180.0
    has_gps = rng.random(photos) >= 0.10
    licence = rng.integers(0, len(LICENCES), size=photos)
    collection = rng.integers(1, 6, size=photos)
    status = np.where(rng.random(photos) < 0.01, "missing", "ok")

    def rows() -> Any:
        for i in range(photos):
            observed = (
                (start + timedelta(seconds=int(seconds[i]))).strftime("%Y-%m-%d %H:%M:%S.000000")
                if has_date[i]
                else None
            )
            yield (
                i + 1, int(collection[i]), f"p/{i}.jpg", 1000, 0, int(taxon[i]), observed,
                float(lat[i]) if has_gps[i] else None, float(lon[i]) if has_gps[i] else None,
                LICENCES[licence[i]], str(status[i]), now, now,
            )  # fmt: skip

    con.executemany(
        "INSERT INTO images (id, collection_id, rel_path, size, mtime_ns, taxon_id, observed_at, "
        "latitude, longitude, license, status, added_at, updated_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        rows(),
    )
    con.execute(
        "INSERT INTO queries (id, text, created_at, updated_at) VALUES (?, 'q', ?, ?)",
        (QUERY_ID, now, now),
    )
    judged = rng.choice(photos, size=2_000, replace=False) + 1
    con.executemany(
        "INSERT INTO judgments (query_id, image_id, relevance, judged_at) VALUES (?, ?, ?, ?)",
        [(QUERY_ID, int(i), int(i % 2), now) for i in judged],
    )
    for _, sql in triggers:
        con.execute(sql)
    con.commit()
    con.execute("ANALYZE")
    con.close()


def cases(sample: list[str]) -> list[tuple[str, SearchFilters]]:
    genus, species = sample[0].split()[0], sample[0]
    family = sample[1]
    return [
        ("none (every ok photo)", SearchFilters()),
        (f"taxon = a common species ({species})", SearchFilters(taxon=species)),
        (f"taxon = a genus ({genus})", SearchFilters(taxon=genus)),
        (f"taxon = a family ({family})", SearchFilters(taxon=family)),
        ("taxon substring fallback ('bird': all)", SearchFilters(taxon="bird")),
        ("taxon, nothing matches", SearchFilters(taxon="no such name")),
        ("date range, one year", SearchFilters(date_from=date(2018, 1, 1), date_to=date(2018, 12, 31))),
        ("date range, one week", SearchFilters(date_from=date(2018, 6, 1), date_to=date(2018, 6, 7))),
        ("months Jun–Aug", SearchFilters(months=(6, 8))),
        ("months Nov–Feb (wraps)", SearchFilters(months=(11, 2))),
        ("months Apr–Jun", SearchFilters(months=(4, 6))),
        ("month of February", SearchFilters(months=(2, 2))),
        ("bbox (Europe)", SearchFilters(bbox=(35.0, -10.0, 60.0, 30.0))),
        ("bbox (Europe) + one year", SearchFilters(bbox=(35.0, -10.0, 60.0, 30.0), date_from=date(2018, 1, 1), date_to=date(2018, 12, 31))),
        ("one year + months Jun–Aug", SearchFilters(date_from=date(2018, 1, 1), date_to=date(2018, 12, 31), months=(6, 8))),
        ("bbox ~10 % of sites", SearchFilters(bbox=(0.0, -30.0, 60.0, 40.0))),
        ("bbox across the antimeridian", SearchFilters(bbox=(-90.0, 170.0, 90.0, -170.0))),
        ("near 25 km", SearchFilters(near=(0.0, 0.0, 25.0))),
        ("near 2,000 km", SearchFilters(near=(40.0, 10.0, 2000.0))),
        ("near 100 km on the antimeridian", SearchFilters(near=(0.0, 180.0, 100.0))),
        ("near 1,000 km of the north pole", SearchFilters(near=(89.0, 0.0, 1000.0))),
        ("licences cc-by, cc0", SearchFilters(licenses=("cc-by", "cc0"))),
        ("licence substring 'nc'", SearchFilters(license="nc")),
        ("collections 2, 3", SearchFilters(collection_ids=(2, 3))),
        ("judged for a query", SearchFilters(judged="judged", judged_query_id=QUERY_ID)),
        ("unjudged for a query", SearchFilters(judged="unjudged", judged_query_id=QUERY_ID)),
        (
            "genus + months + bbox + licence",
            SearchFilters(taxon=genus, months=(4, 9), bbox=(-60.0, -180.0, 75.0, 180.0),
                          licenses=("cc-by",)),
        ),  # fmt: skip
    ]  # fmt: skip


def timed(call: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        result = call()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000.0, result


def run_all(catalog: Any, repeat: int) -> list[tuple[str, float, int]]:
    con = sqlite3.connect(catalog.path)
    common = con.execute(
        "SELECT t.name, t.family FROM images i JOIN taxa t ON t.id = i.taxon_id "
        "GROUP BY t.id ORDER BY count(*) DESC LIMIT 1"
    ).fetchone()
    con.close()
    rows = []
    for label, filters in cases(list(common)):
        if FILTERS_ONLY and not answered_by_indexes(filters):
            continue
        ms, ids = timed(lambda f=filters: filtered_ids(catalog, f), repeat)
        rows.append((f"filtered_ids: {label}", ms, len(ids)))
        log(f"{label}: {ms:.1f} ms, {len(ids):,} photos")
    if FILTERS_ONLY:
        return rows
    every = filtered_ids(catalog, SearchFilters())
    rng = np.random.default_rng(1)
    for size in (1_000, 10_000, 100_000):
        ids = [int(i) for i in rng.choice(every, size=min(size, len(every)), replace=False)]
        ms, _ = timed(lambda ids=ids: facet_counts(catalog, ids), repeat)
        rows.append((f"facet_counts of {size:,} results", ms, size))
        ms, _ = timed(lambda ids=ids: month_counts(catalog, ids), repeat)
        rows.append((f"month_counts of {size:,} results", ms, size))
        ms, _ = timed(lambda ids=ids: locations(catalog, ids), repeat)
        rows.append((f"locations of {size:,} results", ms, size))
        log(f"facets of {size:,} done")
    for prefix in ("g", "Gab", "common ab", "Plantae", "zzzz"):
        ms, found = timed(lambda p=prefix: taxon_suggestions(catalog, p), repeat)
        rows.append((f"taxon_suggestions({prefix!r})", ms, len(found)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--photos", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--indexes", action="store_true", help="also time with more indexes")
    parser.add_argument("--keep", type=Path, help="build (or reuse) the catalog at this path")
    parser.add_argument(
        "--skip-every-row", action="store_true", help="leave out the pass reading every row"
    )
    parser.add_argument(
        "--filters-only",
        action="store_true",
        help="time only dates, months and boxes (no other filters, facets or suggestions)",
    )
    args = parser.parse_args()
    global FILTERS_ONLY
    FILTERS_ONLY = args.filters_only
    # The filter cache only in its own column: the other passes time the SQL paths.
    cache_threshold = filter_cache.MIN_PHOTOS
    filter_cache.MIN_PHOTOS = sys.maxsize
    with tempfile.TemporaryDirectory() as tmp:
        path = args.keep or Path(tmp) / "catalog.sqlite3"
        if not path.exists():
            log(f"building a catalog of {args.photos:,} photos")
            started = time.perf_counter()
            build_catalog(path, args.photos)
            log(f"built in {time.perf_counter() - started:.0f} s")
        catalog = open_catalog(path)
        results = {}
        if not args.skip_every_row:
            # The path taken until the fill is done (a kept catalog may be filled already).
            filters_module.filter_columns_filled = lambda _session: False
            results["reading every row (before 0012)"] = run_all(catalog, args.repeat)
            filters_module.filter_columns_filled = filter_columns_filled
        started = time.perf_counter()
        last = [0.0]

        def report(p: Progress) -> None:
            if time.perf_counter() - last[0] > 10 or p.done == p.total:
                last[0] = time.perf_counter()
                log(f"filling the filter columns: {p.done:,} of {p.total:,} ids")

        filled = fill_filter_columns(catalog, report)
        fill_seconds = time.perf_counter() - started
        log(f"filter columns of {filled:,} ids filled in {fill_seconds:.1f} s")
        if filled:
            with catalog.engine.begin() as conn:  # the statistics of the filled columns
                conn.exec_driver_sql("ANALYZE")
        results["indexes of 0012"] = run_all(catalog, args.repeat)
        filter_cache.MIN_PHOTOS = cache_threshold
        started = time.perf_counter()
        columns = filter_cache.load_filter_cache(catalog)
        load_seconds = time.perf_counter() - started
        if columns is not None:
            log(f"filter cache of {len(columns.ids):,} photos loaded in {load_seconds:.1f} s")
            results["column cache (0016)"] = run_all(catalog, args.repeat)
        filter_cache.MIN_PHOTOS = sys.maxsize
        catalog.dispose()
        if args.indexes:
            con = sqlite3.connect(path)
            started = time.perf_counter()
            for name, columns in INDEXES.items():
                con.execute(
                    f"CREATE INDEX IF NOT EXISTS {name} ON images ({columns}) WHERE status = 'ok'"
                )
            con.execute("ANALYZE")
            con.commit()
            con.close()
            log(f"indexes built in {time.perf_counter() - started:.1f} s")
            catalog = open_catalog(path)
            results["with indexes"] = run_all(catalog, args.repeat)
            catalog.dispose()
    names = list(results)
    counts = {n: [row[2] for row in results[n]] for n in names}
    same = all(c == counts[names[0]] for c in counts.values())
    print(f"\n{args.photos:,} photos, median of {args.repeat} runs, ms; load {load_average()}")
    if filled:
        print(f"fill_filter_columns (columns and R*Tree of {filled:,} ids): {fill_seconds:.1f} s")
    if columns is not None:
        print(
            f"filter cache: {len(columns.ids):,} photos loaded in {load_seconds:.1f} s, "
            f"{columns.nbytes / 1e6:.0f} MB ({columns.nbytes / max(len(columns.ids), 1):.0f} "
            "bytes a photo)"
        )
    print(f"the same photo counts in every column: {'yes' if same else 'NO'}")
    print("| call | photos | " + " | ".join(names) + " |")
    print("| --- | ---: | " + " | ".join("---:" for _ in names) + " |")
    for number, (label, _, count) in enumerate(results[names[0]]):
        cells = " | ".join(f"{results[n][number][1]:.1f}" for n in names)
        print(f"| {label} | {count:,} | {cells} |")


if __name__ == "__main__":
    main()
