"""The catalog on PostgreSQL against SQLite, same workloads (run on demand):

    QUADRAT_TEST_POSTGRES_URL=postgresql://USER:PASSWORD@127.0.0.1/DB \\
        python tests/bench/bench_catalog_db.py

The role must be allowed to create databases: each run gets a fresh one, dropped afterwards.

1. Latency of one judgment (`QueryStore.judge`, committed before it returns): median, p95.
2. A query's live metrics read, as the window does after each judgment: the judgments, the
   newest run of each method with its ranking, and the metrics at k.
3. Concurrent writers: 1, 2 and 4 processes judging the same query at once (each the same
   photos in its own order): judgments per second over all of them, and how many were lost
   (every judgment must be in `judgment_events`).

Prints a Markdown table with the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sqlalchemy import create_engine, func, make_url, select, text  # noqa: E402

from engine.catalog import Collection, Image, JudgmentEvent  # noqa: E402
from engine.catalog.library import Library  # noqa: E402
from engine.evaluation.live import live_metrics  # noqa: E402
from engine.judgments.queries import QueryStore  # noqa: E402

REPO = Path(__file__).resolve().parents[2]

WORKER = textwrap.dedent(
    """
    import json, random, sys, time
    from pathlib import Path
    from engine.catalog.library import Library
    from engine.judgments.queries import QueryStore

    root, url, query_id, user, count, start, ids = sys.argv[1:8]
    ids = [int(i) for i in ids.split(",")]
    random.Random(user).shuffle(ids)
    with Library.open(root, database_url=url) as lib:
        store = QueryStore(lib, user=user)
        store.judgments(int(query_id))  # connected and warm
        Path(start + "." + user).touch()
        while not Path(start).exists():
            time.sleep(0.001)
        began = time.time()
        made = 0
        for n in range(int(count)):
            store.judge(int(query_id), ids[n % len(ids)], (n // len(ids) + 1) % 2)
            made += 1
        ended = time.time()
    print(json.dumps({"made": made, "began": began, "ended": ended}))
    """
)


@contextmanager
def fresh_postgres(server_url: str) -> Iterator[str]:
    """A new database on the server, dropped afterwards."""
    server = make_url(server_url)
    if server.drivername in ("postgresql", "postgres"):
        server = server.set(drivername="postgresql+psycopg")
    name = f"quadrat_bench_{uuid.uuid4().hex[:12]}"
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield server.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def fill(library: Library, photos: int) -> list[int]:
    """A collection of `photos` catalog rows (no files needed for judging)."""
    with library.catalog.session() as s:
        coll = Collection(root="/photos", name="photos")
        s.add(coll)
        s.flush()
        s.add_all(
            Image(collection_id=coll.id, rel_path=f"p{i:06d}.jpg", size=1, mtime_ns=1)
            for i in range(photos)
        )
    with library.catalog.session() as s:
        return list(s.scalars(select(Image.id).order_by(Image.id)))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def bench_one(url: str, root: Path, args: argparse.Namespace) -> dict[str, str]:
    out: dict[str, str] = {}
    with Library.open(root, database_url=url) as library:
        ids = fill(library, args.photos)
        store = QueryStore(library, user="bench")
        qid = store.find_or_create_query("bench: latency")
        ranking = ids[: args.run_length]
        for method in ("text", "hybrid", "visret"):  # three methods to compare, as in the window
            store.save_run(qid, method, [(i, 1.0 / (r + 1)) for r, i in enumerate(ranking)])
        latencies = []
        for n in range(args.judgments):
            started = time.perf_counter()
            store.judge(qid, ranking[n % len(ranking)], n % 2)
            latencies.append((time.perf_counter() - started) * 1000)
        out["judgment, median (ms)"] = f"{statistics.median(latencies):.2f}"
        out["judgment, p95 (ms)"] = f"{percentile(latencies, 0.95):.2f}"

        reads = []
        for _ in range(args.reads):
            started = time.perf_counter()
            judged = store.judgments(qid)
            for run in store.latest_runs_by_method(qid).values():
                live_metrics([i for i, _ in run.ranking], judged, k=100, run_id=run.id)
            reads.append((time.perf_counter() - started) * 1000)
        out[f"live metrics read, 3 runs × {len(ranking)}, median (ms)"] = (
            f"{statistics.median(reads):.1f}"
        )

        pool = ",".join(str(i) for i in ranking[: args.pool])
        for writers in args.writers:
            qid_w = store.find_or_create_query(f"bench: {writers} writers")
            start = root / f"start-{writers}"
            procs = [
                subprocess.Popen(
                    [sys.executable, "-c", WORKER, str(root), url, str(qid_w)]
                    + [f"w{n}", str(args.per_writer), str(start), pool],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                    env={**os.environ, "PYTHONPATH": str(REPO)},
                )
                for n in range(writers)
            ]
            deadline = time.monotonic() + 120
            while (
                len(list(root.glob(f"start-{writers}.*"))) < writers
                and time.monotonic() < deadline
                and all(p.poll() is None for p in procs)
            ):
                time.sleep(0.01)
            start.touch()
            results, failed = [], 0
            for proc in procs:
                stdout, stderr = proc.communicate(timeout=600)
                if proc.returncode != 0:
                    failed += 1
                    print(stderr.strip().splitlines()[-1:], file=sys.stderr)
                    continue
                results.append(json.loads(stdout))
            with library.catalog.session() as s:
                kept = s.scalar(
                    select(func.count())
                    .select_from(JudgmentEvent)
                    .where(JudgmentEvent.query_id == qid_w)
                )
            made = sum(r["made"] for r in results)
            span = max(r["ended"] for r in results) - min(r["began"] for r in results)
            lost = writers * args.per_writer - int(kept or 0)
            out[f"{writers} writer(s): judgments/s (lost)"] = (
                f"{made / span:.0f} ({lost}{', failed: ' + str(failed) if failed else ''})"
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres-url", default=os.environ.get("QUADRAT_TEST_POSTGRES_URL"))
    parser.add_argument("--photos", type=int, default=10_000)
    parser.add_argument("--run-length", type=int, default=1000, help="results per run")
    parser.add_argument("--judgments", type=int, default=300)
    parser.add_argument("--reads", type=int, default=30)
    parser.add_argument("--writers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--per-writer", type=int, default=150)
    parser.add_argument("--pool", type=int, default=100, help="photos the writers judge")
    args = parser.parse_args()
    if not args.postgres_url:
        parser.error("give --postgres-url or set QUADRAT_TEST_POSTGRES_URL")

    load_before = os.getloadavg()
    columns: dict[str, dict[str, str]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-catalog-") as tmp:
        sqlite_url = f"sqlite:///{Path(tmp) / 'catalog.sqlite3'}"
        columns["SQLite"] = bench_one(sqlite_url, Path(tmp) / "lib-sqlite", args)
        with fresh_postgres(args.postgres_url) as pg_url:
            version = ""
            engine = create_engine(pg_url)
            with engine.connect() as conn:
                version = str(conn.execute(text("SHOW server_version")).scalar()).split()[0]
            engine.dispose()
            columns[f"PostgreSQL {version}"] = bench_one(pg_url, Path(tmp) / "lib-pg", args)
    load_after = os.getloadavg()

    names = list(columns)
    print(
        f"\n{args.photos:,} photos, {args.judgments} judgments in a row, {args.reads} reads, "
        f"{args.per_writer} judgments per writer on {args.pool} photos; load average "
        f"{load_before[0]:.2f} before, {load_after[0]:.2f} after\n"
    )
    print("| workload | " + " | ".join(names) + " |")
    print("| --- | " + " | ".join("---:" for _ in names) + " |")
    for row in columns[names[0]]:
        print(f"| {row} | " + " | ".join(columns[n][row] for n in names) + " |")


if __name__ == "__main__":
    main()
