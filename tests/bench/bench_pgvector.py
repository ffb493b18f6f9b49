"""pgvector on the catalog's server against the workstation's FAISS index, side by side.

Run on demand (minutes at 100k; the 1M build wants a server with cores to spare):

    python tests/bench/bench_pgvector.py [--sizes 100000 1000000] [--queries 50]

The server is the `pgserver` wheel's (PostgreSQL 16, pgvector 0.6) started in a temporary
folder, unless QUADRAT_TEST_PGVECTOR_URL names a superuser role on another. Data: the same
two-level Gaussian mixture of 512-d unit vectors as bench_search.py (a stand-in for CLIP
embeddings), written into a real catalog (`images`, `embeddings`); held-out queries. For each
size it measures: the back-fill of the server's column from `embeddings`, the HNSW build on the
server and its size, search latency (median, p95) and recall@100 against exact search,
unfiltered and with 1 % and 10 % filters (a taxon on disjoint random photos: on pgvector as SQL
in the vector query, and as an id list), for pgvector and for FAISS (the index the library
would build: `kind="auto"`), and the time from opening the catalog in a new library folder to
its first answer on each. `--keep DIR` keeps the server and its catalogs, so a 1M build is done
once (`--prepare-only`) and measured again later.

Prints a Markdown table on stdout; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

THREADS = "2"
for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, THREADS)

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.bench.bench_search import (  # noqa: E402
    DIM,
    TOP,
    Mixture,
    exact_top,
    log,
    normalise,
    recall_at,
    time_queries,
)

MODEL = "bench-512"
FILTERS = (None, 0.01, 0.10)


def _server_url(folder: Path, keep: bool) -> tuple[str, object]:
    raw = os.environ.get("QUADRAT_TEST_PGVECTOR_URL", "").strip()
    if raw:
        return raw, None
    import pgserver

    server = pgserver.get_server(folder, cleanup_mode="stop" if keep else "delete")
    return server.get_uri(), server


def _database(admin_url: str, name: str | None = None) -> tuple[str, bool]:
    """A database for one size (a new one, or `name`, created when missing); whether it was
    there already."""
    from sqlalchemy import create_engine, make_url, text

    url = make_url(admin_url).set(drivername="postgresql+psycopg")
    name = name or f"bench_{uuid.uuid4().hex[:10]}"
    admin = create_engine(url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        there = conn.execute(text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": name})
        existed = there.first() is not None
        if not existed:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    database = create_engine(url.set(database=name), isolation_level="AUTOCOMMIT")
    with database.connect() as conn:
        conn.execute(text("CREATE EXTENSION IF NOT EXISTS vector"))
    database.dispose()
    return url.set(database=name).render_as_string(hide_password=False), existed


def _fill_catalog(library: object, data: np.ndarray) -> None:
    """`len(data)` photos and their vectors, written as the indexer would leave them."""
    from sqlalchemy import text

    engine = library.catalog.engine  # type: ignore[attr-defined]
    n = len(data)
    key = MODEL.encode()
    with engine.begin() as conn:
        conn.execute(
            text("INSERT INTO collections (id, root, name, added_at) VALUES (1, '/b', 'b', now())")
        )
        conn.execute(
            text(
                "INSERT INTO images (id, collection_id, rel_path, size, mtime_ns, status, "
                "added_at, updated_at) SELECT g, 1, 'p' || g || '.jpg', 1, 1, 'ok', now(), now() "
                "FROM generate_series(1, :n) g"
            ),
            {"n": n},
        )
        conn.execute(text("SELECT setval(pg_get_serial_sequence('images', 'id'), :n)"), {"n": n})
        id_type = conn.execute(
            text(
                "SELECT data_type FROM information_schema.columns "
                "WHERE table_name = 'embeddings' AND column_name = 'image_id'"
            )
        ).scalar()
        id_bytes = 8 if id_type == "bigint" else 4
        row = np.dtype(
            [
                ("fields", ">i2"),
                ("id_len", ">i4"),
                ("id", f">i{id_bytes}"),
                ("key_len", ">i4"),
                ("key", f"S{len(key)}"),
                ("vec_len", ">i4"),
                ("vec", "<f4", (DIM,)),
            ]
        )
        cursor = conn.connection.driver_connection.cursor()
        with cursor.copy(
            "COPY embeddings (image_id, model_key, vector) FROM STDIN (FORMAT BINARY)"
        ) as copy:
            copy.write(b"PGCOPY\n\xff\r\n\x00" + bytes(8))
            for start in range(0, n, 50_000):
                part = data[start : start + 50_000]
                rows = np.empty(len(part), dtype=row)
                rows["fields"], rows["id_len"], rows["key_len"] = 3, id_bytes, len(key)
                rows["id"] = np.arange(start + 1, start + 1 + len(part))
                rows["key"], rows["vec_len"], rows["vec"] = key, DIM * 4, part
                copy.write(rows.tobytes())
            copy.write((-1).to_bytes(2, "big", signed=True))
    library.record_model(MODEL, MODEL, DIM)  # type: ignore[attr-defined]


def _relation_mb(engine: object, name: str) -> float:
    from sqlalchemy import text

    with engine.connect() as conn:  # type: ignore[attr-defined]
        size = conn.execute(text("SELECT pg_relation_size(CAST(:n AS regclass))"), {"n": name})
        return float(size.scalar() or 0) / 1e6


def _prepared(engine: object) -> tuple[float, float] | None:
    """The back-fill and build seconds of a catalog made by an earlier run (`--keep`)."""
    from sqlalchemy import text

    with engine.connect() as conn:  # type: ignore[attr-defined]
        if conn.execute(text("SELECT to_regclass('bench_prepared')")).scalar() is None:
            return None
        row = conn.execute(text("SELECT backfill_s, build_s FROM bench_prepared")).first()
    return None if row is None else (float(row[0]), float(row[1]))


def _record_prepared(engine: object, backfill_s: float, build_s: float) -> None:
    from sqlalchemy import text

    with engine.begin() as conn:  # type: ignore[attr-defined]
        conn.execute(text("CREATE TABLE bench_prepared (backfill_s float8, build_s float8)"))
        conn.execute(
            text("INSERT INTO bench_prepared VALUES (:a, :b)"), {"a": backfill_s, "b": build_s}
        )


def _filter_terms(library: object, allowed: dict) -> dict:
    """Each filter's SQL (`filter_terms`): a taxon per filtered share, written once onto its
    photos (a kept catalog has them from before)."""
    from sqlalchemy import text

    from engine.search.filters import SearchFilters, filter_terms

    engine = library.catalog.engine  # type: ignore[attr-defined]
    out: dict = {None: None}
    for share, subset in allowed.items():
        if subset is None:
            continue
        name = f"Share{round(share * 1000)}"
        with engine.begin() as conn:
            taxon = conn.execute(text("SELECT id FROM taxa WHERE key = :n"), {"n": name}).scalar()
            if taxon is None:
                taxon = conn.execute(
                    text("INSERT INTO taxa (key, name) VALUES (:n, :n) RETURNING id"), {"n": name}
                ).scalar()
                conn.execute(
                    text("UPDATE images SET taxon_id = :t WHERE id = ANY(:ids)"),
                    {"t": taxon, "ids": subset.tolist()},
                )
                conn.execute(text("ANALYZE"))
        out[share] = filter_terms(library.catalog, SearchFilters(taxon=name))  # type: ignore[attr-defined]
    return out


def run_size(
    admin_url: str,
    size: int,
    n_queries: int,
    work: Path,
    keep: bool = False,
    prepare_only: bool = False,
) -> list[dict]:
    from engine.catalog.library import Library
    from engine.catalog.pgvector import PgVectorIndex, support_of
    from engine.vectors.index import VectorIndex

    load = os.getloadavg()[0]
    mixture = Mixture(DIM)
    log(f"{size:,}: data")
    data = mixture.sample(size, seed=1)
    ids = np.arange(1, size + 1, dtype=np.int64)
    queries = mixture.sample(n_queries, seed=2)
    queries = normalise(
        queries
        + np.random.default_rng(3).standard_normal(queries.shape).astype(np.float32)
        * (0.3 / np.sqrt(DIM))
    ).astype(np.float32)
    # The filters: two taxa on disjoint random photos (1 % and 10 %), asked as a user would
    # (SearchFilters), so the server runs them as SQL beside the vector order.
    shuffled = np.random.default_rng(4).permutation(ids)
    allowed: dict[float | None, np.ndarray | None] = {None: None}
    start = 0
    for share in FILTERS[1:]:
        count = int(size * share)
        allowed[share] = np.sort(shuffled[start : start + count])
        start += count
    url, existed = _database(admin_url, f"bench_{size}" if keep else None)
    library = Library.open(work / f"first-{size}", database_url=url)
    engine = library.catalog.engine
    server = PgVectorIndex(engine, MODEL, DIM, support_of(engine))
    prepared = _prepared(engine) if existed else None
    if prepared is None:
        if existed:
            raise SystemExit(f"database bench_{size} is half made: drop it and run again")
        log(f"{size:,}: catalog")
        _fill_catalog(library, data)
        server.ensure_column()
        started = time.perf_counter()
        server.backfill()
        backfill_s = time.perf_counter() - started
        log(f"{size:,}: HNSW build")
        build_s = server.build_ann()
        _record_prepared(engine, backfill_s, build_s)
    else:
        backfill_s, build_s = prepared
        log(f"{size:,}: catalog and HNSW index kept from an earlier run")
    index_mb = _relation_mb(engine, server.index_name)
    table_mb = _relation_mb(engine, "image_vectors")
    if prepare_only:
        library.close()
        return []
    terms = _filter_terms(library, allowed)
    log(f"{size:,}: FAISS build")
    started = time.perf_counter()
    faiss_index = VectorIndex.build(ids, data, kind="auto")
    faiss_build_s = time.perf_counter() - started

    rows = []
    for share in FILTERS:
        subset = allowed[share]
        k = min(TOP, size if subset is None else len(subset))
        truth_rows = exact_top(data if subset is None else data[subset - 1], queries, k)
        truth = (ids if subset is None else subset)[truth_rows]
        sql = terms[share]

        def served(q: np.ndarray, k: int = k, subset: np.ndarray | None = subset) -> list:
            return server.search(q, k, subset)

        def served_sql(q: np.ndarray, k: int = k, sql: list | None = sql) -> list:
            return server.search_filtered(q, k, sql or [])

        def local(q: np.ndarray, k: int = k, subset: np.ndarray | None = subset) -> list:
            return faiss_index.search(q, k, subset)

        runs: list[tuple[str, object, int | None]] = [("pgvector HNSW", served, None)]
        if subset is None:
            runs.append(("pgvector HNSW", served, 1000))  # pgvector's largest ef_search
        else:
            runs = [("pgvector HNSW, filter in SQL", served_sql, None)] + [
                ("pgvector HNSW, id list", served, None)
            ]
        runs.append((f"FAISS {faiss_index.kind}", local, None))
        for name, search, ef in runs:
            server.ef_search = ef
            log(f"{size:,}: {name}, filter {share}, ef_search {ef}")
            median, p95, results = time_queries(search, queries)
            if search is served_sql:
                chosen = server.plan(k, server.estimate_passing(sql or []))
            else:
                chosen = server.plan(k, None if subset is None else len(subset))
            plan = chosen.method + (f", ef_search {chosen.ef_search}" if chosen.ef_search else "")
            server.ef_search = None
            rows.append(
                {
                    "size": size,
                    "filter": "none" if share is None else f"{share:.0%}",
                    "index": name if search is local else f"{name} ({plan})",
                    "median": median,
                    "p95": p95,
                    "recall": recall_at(results, truth),
                    "build": faiss_build_s if search is local else build_s,
                    "load": load,
                }
            )
    library.close()

    # A new workstation: a new library folder on the same catalog, to its first answer.
    firsts = {}
    for backend in ("auto", "faiss"):
        os.environ["QUADRAT_VECTOR_BACKEND"] = backend
        started = time.perf_counter()
        with Library.open(work / f"new-{backend}-{size}", database_url=url) as fresh:
            fresh.vector_index(MODEL).search(queries[0], TOP)
        firsts[backend] = time.perf_counter() - started
    os.environ.pop("QUADRAT_VECTOR_BACKEND", None)
    for row in rows:
        row["first"] = firsts["auto" if row["index"].startswith("pgvector") else "faiss"]
        row["backfill"] = backfill_s
        row["index_mb"], row["table_mb"] = index_mb, table_mb
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000])
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument(
        "--keep",
        type=Path,
        help="a folder for the server and its catalogs, kept: a later run measures them again "
        "without filling or building anything",
    )
    parser.add_argument(
        "--prepare-only", action="store_true", help="fill and build (with --keep), then stop"
    )
    args = parser.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="qbpgv"))
    work.mkdir(parents=True, exist_ok=True)
    admin_url, server = _server_url(work / "server", args.keep is not None)
    rows = []
    try:
        for size in args.sizes:
            rows.extend(
                run_size(
                    admin_url, size, args.queries, work, args.keep is not None, args.prepare_only
                )
            )
    finally:
        if server is not None:
            server.cleanup()  # type: ignore[attr-defined]
    if args.prepare_only:
        return
    print(
        "| vectors | filter | index (plan) | median ms | p95 ms | recall@100 | build s "
        "| new workstation to first answer s | load |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['size']:,} | {r['filter']} | {r['index']} | {r['median']:.1f} | "
            f"{r['p95']:.1f} | {r['recall']:.3f} | {r['build']:.1f} | {r['first']:.1f} | "
            f"{r['load']:.1f} |"
        )
    first = rows[0]
    print(
        f"\nServer: back-fill of the column {first['backfill']:.1f} s, HNSW index "
        f"{first['index_mb']:.0f} MB, table {first['table_mb']:.0f} MB (first size)."
    )


if __name__ == "__main__":
    main()
