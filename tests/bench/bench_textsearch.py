"""The words of the records at scale: what keeping the FTS5 index costs, and how fast it answers.

Run on demand (minutes at a million photos):

    python tests/bench/bench_textsearch.py [--n 1000000] [--taxa 10000]

Builds two catalogs with the real migrations: one where the triggers keep `record_text` as rows
are written (the shipped design), one without the triggers, filled once at the end by the
migration's own INSERT … SELECT (the "refresh in bulk" alternative). Photos are inserted as the
indexer writes them (10,000 rows per transaction); 30 % carry notes of 4–14 words from a
2,000-word vocabulary; taxa have seven ranks and two-word common names. Then: maintenance
(photos going missing, a taxon renamed), query latency (median of 20 runs) of `text_ranked`,
`taxa_in_query` and `matched_words`, and the space the index takes.

Prints Markdown tables on stdout; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

BATCH = 10_000
SYLLABLES = [
    "ba",
    "ce",
    "di",
    "fo",
    "gu",
    "la",
    "me",
    "ni",
    "po",
    "ru",
    "sa",
    "te",
    "vi",
    "xo",
    "zu",
    "an",
    "er",
    "is",
    "or",
    "us",
    "el",
]


def _latin(rng: random.Random, parts: int) -> str:
    return "".join(rng.choice(SYLLABLES) for _ in range(parts))


def make_taxa(rng: random.Random, count: int) -> list[tuple]:
    """(id, key, name, common, kingdom, phylum, class, order, family, genus, epithet)."""
    vocabulary = [_latin(rng, 2) for _ in range(400)]
    heads = [_latin(rng, 2) for _ in range(150)]
    rows = []
    for i in range(1, count + 1):
        kingdom = ("Animalia", "Plantae", "Fungi")[i % 3]
        phylum = _latin(random.Random(i // 2000), 3).capitalize() + "a"
        class_ = _latin(random.Random(i // 500), 3).capitalize() + "ae"
        order = _latin(random.Random(i // 120), 3).capitalize() + "ales"
        family = _latin(random.Random(i // 30), 3).capitalize() + "idae"
        genus = _latin(random.Random(i // 4), 3).capitalize()
        epithet = _latin(rng, 3)
        common = f"{rng.choice(vocabulary)} {heads[(i // 30) % len(heads)]}"
        name = f"{genus} {epithet}"
        rows.append((i, f"{i}_{name}", name, common, kingdom, phylum, class_, order, family,
                     genus, epithet))  # fmt: skip
    return rows


def open_fresh(path: Path, triggers: bool) -> sqlite3.Connection:
    from engine.catalog import open_catalog

    open_catalog(path).dispose()  # the real migrations, 0005 included
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("PRAGMA foreign_keys=ON")
    if not triggers:
        for name in _migration().TRIGGERS:
            db.execute(f"DROP TRIGGER {name}")
    db.execute("INSERT INTO collections(id, root, name, added_at) VALUES (1, '/c', 'c', 0)")
    db.commit()
    return db


def _migration():
    import importlib.util

    from engine.catalog.db import MIGRATIONS_DIR

    path = MIGRATIONS_DIR / "versions" / "0005_record_text.py"
    spec = importlib.util.spec_from_file_location("record_text_migration", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def insert_photos(db: sqlite3.Connection, n: int, taxa: int, seed: int) -> float:
    rng = random.Random(seed)
    words = [_latin(rng, 2) for _ in range(2000)]
    started = time.perf_counter()
    for start in range(0, n, BATCH):
        rows = []
        for i in range(start + 1, min(n, start + BATCH) + 1):
            notes = (
                " ".join(rng.choices(words, k=rng.randint(4, 14))) if rng.random() < 0.3 else None
            )
            rows.append((i, f"p/{i}.jpg", 1000, 0, rng.randint(1, taxa), "ok", notes))
        db.executemany(
            "INSERT INTO images(id, collection_id, rel_path, size, mtime_ns, taxon_id, status, "
            "notes, added_at, updated_at) VALUES (?, 1, ?, ?, ?, ?, ?, ?, 0, 0)",
            rows,
        )
        db.commit()
        print(f"  {min(n, start + BATCH):,} photos", end="\r", file=sys.stderr)
    print(file=sys.stderr)
    return time.perf_counter() - started


def median_ms(call: Callable[[], object], runs: int = 20) -> float:
    call()  # warm
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        call()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--taxa", type=int, default=10_000)
    args = parser.parse_args(argv)
    rng = random.Random(1)
    taxa = make_taxa(rng, args.taxa)
    results: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory(prefix="quadrat-fts-") as tmp:
        paths = {}
        for triggers in (True, False):
            path = Path(tmp) / f"{'kept' if triggers else 'bulk'}.sqlite3"
            paths[triggers] = path
            db = open_fresh(path, triggers)
            db.executemany(
                'INSERT INTO taxa(id, key, name, common_name, kingdom, phylum, "class", "order", '
                "family, genus, specific_epithet) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                taxa,
            )
            db.commit()
            print(f"inserting {args.n:,} photos, triggers={triggers}", file=sys.stderr)
            seconds = insert_photos(db, args.n, args.taxa, seed=2)
            label = "kept by triggers" if triggers else "no text index"
            results.append((f"insert {args.n:,} photos, {label}", f"{seconds:.1f} s"))
            if not triggers:
                started = time.perf_counter()
                db.execute("DELETE FROM record_text")
                db.execute(_migration().FILL)
                db.commit()
                results.append(
                    (
                        "fill the index in one statement afterwards (bulk refresh)",
                        f"{time.perf_counter() - started:.1f} s",
                    )  # fmt: skip
                )
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            db.close()
        kept = paths[True]
        db = sqlite3.connect(kept)
        db.execute("PRAGMA foreign_keys=ON")
        pages = (
            db.execute("PRAGMA page_count").fetchone()[0]
            * db.execute("PRAGMA page_size").fetchone()[0]
        )
        db.execute("CREATE TEMP TABLE t AS SELECT 1")
        try:
            fts_bytes = db.execute(
                "SELECT sum(pgsize) FROM dbstat WHERE name LIKE 'record_text%'"
            ).fetchone()[0]
        except sqlite3.OperationalError:
            fts_bytes = None
        results.append(("catalog file", f"{pages / 1e6:.0f} MB"))
        if fts_bytes:
            results.append(
                ("of which record_text and its shadow tables", f"{fts_bytes / 1e6:.0f} MB")
            )
        # Maintenance through the triggers.
        started = time.perf_counter()
        db.execute("UPDATE images SET status = 'missing' WHERE id % 100 = 0")
        db.commit()
        results.append((f"{args.n // 100:,} photos go missing (one UPDATE)",
                        f"{time.perf_counter() - started:.2f} s"))  # fmt: skip
        started = time.perf_counter()
        db.execute("UPDATE images SET status = 'ok' WHERE id % 100 = 0")
        db.commit()
        results.append(("… and come back", f"{time.perf_counter() - started:.2f} s"))
        per_taxon = db.execute("SELECT count(*) FROM images WHERE taxon_id = 7").fetchone()[0]
        started = time.perf_counter()
        db.execute("UPDATE taxa SET common_name = 'renamed thing' WHERE id = 7")
        db.commit()
        results.append((f"a taxon renamed ({per_taxon} photos re-indexed)",
                        f"{(time.perf_counter() - started) * 1000:.1f} ms"))  # fmt: skip
        started = time.perf_counter()
        db.execute("UPDATE images SET rel_path = rel_path || '.moved' WHERE id % 10 = 0")
        db.commit()
        results.append((f"{args.n // 10:,} photos moved (rel_path only: no trigger work)",
                        f"{time.perf_counter() - started:.2f} s"))  # fmt: skip
        db.close()

        from engine.catalog import open_catalog
        from engine.search.fulltext import matched_words, taxa_in_query, text_ranked

        catalog = open_catalog(kept)
        sample = taxa[123]
        genus, family, common = sample[9], sample[8], sample[3]
        note_word = _latin(random.Random(2), 2)
        allowed = list(range(1, args.n + 1, 10))
        latency = [
            (f"text_ranked '{common}' (common name), top 1000",
             lambda: text_ranked(catalog, common, 1000)),
            (f"text_ranked '{genus}' (a genus), top 1000", lambda: text_ranked(catalog, genus, 1000)),
            ("text_ranked 'Animalia' (a third of all photos), top 1000",
             lambda: text_ranked(catalog, "Animalia", 1000)),
            ("text_ranked a 6-word query (names + a notes word)",
             lambda: text_ranked(catalog, f"{common} {family} {note_word} standing", 1000)),
            (f"text_ranked 'Animalia' within a 10 % filter ({len(allowed):,} ids)",
             lambda: text_ranked(catalog, "Animalia", 1000, allowed)),
            (f"taxa_in_query, {args.taxa:,} taxa (vocabulary cached)",
             lambda: taxa_in_query(catalog, f"a {common} standing upright on a rock")),
            ("matched_words for 1000 photos",
             lambda: matched_words(catalog, list(range(1, 1001)), f"{common} {note_word}")),
        ]  # fmt: skip
        started = time.perf_counter()
        taxa_in_query(catalog, "nothing at all")
        results.append(
            (
                f"taxa_in_query first call ({args.taxa:,} taxa read and folded)",
                f"{(time.perf_counter() - started) * 1000:.0f} ms",
            )  # fmt: skip
        )
        for name, call in latency:
            print(f"timing {name}", file=sys.stderr)
            results.append((name + ", median of 20", f"{median_ms(call):.1f} ms"))
        catalog.dispose()
    print(f"| what ({args.n:,} photos, {args.taxa:,} taxa) | result |")
    print("| --- | ---: |")
    for name, value in results:
        print(f"| {name} | {value} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
