"""Compressed vector index benchmark at millions of photos (5M by default): memory, build time,
latency and recall@100 of IVF-PQ and IVF-SQ8 shortlists re-ranked exactly from stored vectors.

Run on demand (hours at 5M on 2 cores; start with --n 500000):

    nice python tests/bench/bench_5m.py [--n 5000000] [--queries 200] [--kinds pq64,sq8]
                                        [--scratch DIR] [--sqlite-rows 500000]

Data: the clustered 512-d mixture of bench_filtered.py (100 groups of 30 clusters, uneven
Pareto sizes), generated 100,000 vectors at a time. Each chunk is scored against the queries in
float32 (the exact top-100, unfiltered and under each filter, is kept as it goes) and then
written to a float16 file in the scratch folder, which serves both as the stream the index is
built from and as the memory-mapped vector file the shortlist is re-ranked from. So recall is
measured against exact float32 search, and includes whatever float16 storage loses.

All kinds share one coarse quantizer (k-means on a sample, then every vector assigned once): the
build time of a kind is that shared part plus its own training and encoding, which is what
`VectorIndex.build` does for one kind. Searches go through `engine.vectors.index.VectorIndex` (the
kind's FAISS index with the vector file attached), single queries, top-100.

Filters: 1 % and 10 % of the ids, ``random`` (uniform) and ``taxon`` (whole clusters, a group at
a time; half the queries from inside the taxon), as in bench_filtered.py.

``--sqlite-rows N`` also measures reading a shortlist's vectors from a catalog-like SQLite
`embeddings` table of N rows against the memory-mapped float16 file.

Prints Markdown tables on stdout; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

THREADS = os.environ.get("QUADRAT_BENCH_THREADS", "2")
for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, THREADS)

import numpy as np  # noqa: E402 - after the thread settings, which BLAS reads at import

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.bench.bench_filtered import (  # noqa: E402
    CLUSTERS_PER_GROUP,
    DIM,
    GROUPS,
    Mixture,
    perturbed,
)

TOP = 100
CHUNK = 100_000
FRACTIONS = (0.01, 0.10)
DATA_VERSION = 1


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def anon_rss_bytes() -> int:
    """Resident anonymous memory (not pages of mapped files, which the page cache shares)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    return rss_bytes()


class Filter:
    def __init__(self, name: str, fraction: float | None) -> None:
        self.name = name
        self.fraction = fraction
        self.mask: np.ndarray | None = None  # allowed rows, for the exact top during generation
        self.clusters: np.ndarray | None = None
        self.queries = np.empty((0, DIM), dtype=np.float32)
        self.best_scores = np.empty(0)
        self.best_rows = np.empty(0)
        self.ids: np.ndarray | None = None

    @property
    def label(self) -> str:
        return "none" if self.fraction is None else f"{self.name} {100 * self.fraction:g} %"


def taxon_clusters_by_weight(mixture: Mixture, fraction: float, seed: int) -> np.ndarray:
    """Whole clusters, a group at a time, until their expected share reaches `fraction`."""
    rng = np.random.default_rng(seed)
    chosen: list[int] = []
    total = 0.0
    for group in rng.permutation(GROUPS):
        for cluster in group * CLUSTERS_PER_GROUP + rng.permutation(CLUSTERS_PER_GROUP):
            weight = float(mixture.weights[cluster])
            if total and total + weight > 1.5 * fraction:
                continue
            chosen.append(int(cluster))
            total += weight
            if total >= fraction:
                return np.array(chosen)
    return np.array(chosen)


def keep_top(found: Filter, scores: np.ndarray, start: int) -> None:
    rows = np.broadcast_to(np.arange(start, start + scores.shape[1]), scores.shape)
    scores = np.hstack([found.best_scores, scores])
    rows = np.hstack([found.best_rows, rows])
    keep = np.argpartition(-scores, TOP - 1, axis=1)[:, :TOP]
    found.best_scores = np.take_along_axis(scores, keep, axis=1)
    found.best_rows = np.take_along_axis(rows, keep, axis=1)


def generate(n: int, scratch: Path, n_queries: int) -> tuple[np.ndarray, list[Filter]]:
    """The float16 collection (memory-mapped) and the filters with their exact top-100,
    generated once into `scratch` and loaded afterwards."""
    stem = scratch / f"data-v{DATA_VERSION}-{n}-{n_queries}"
    vectors_path = stem.with_suffix(".f16.npy")
    truth_path = stem.with_suffix(".truth.npz")
    mixture = Mixture(DIM)
    filters = [Filter("none", None)]
    for position, fraction in enumerate(FRACTIONS):
        filters.append(Filter("random", fraction))
        taxon = Filter("taxon", fraction)
        taxon.clusters = taxon_clusters_by_weight(mixture, fraction, seed=20 + position)
        filters.append(taxon)
    generic, _ = mixture.sample(n_queries, seed=2)  # held out: never added
    generic = perturbed(generic, seed=3)
    for position, found in enumerate(filters):
        found.queries = generic
        if found.name == "taxon":
            inside, _ = mixture.sample(
                n_queries - n_queries // 2, seed=30 + position, clusters=found.clusters
            )
            found.queries = np.vstack([generic[: n_queries // 2], perturbed(inside, seed=40)])
    if vectors_path.is_file() and truth_path.is_file():
        saved = np.load(truth_path)
        for position, found in enumerate(filters):
            found.best_rows = saved[f"rows{position}"]
            if f"ids{position}" in saved:
                found.ids = saved[f"ids{position}"]
        return np.load(vectors_path, mmap_mode="r"), filters

    log(f"generating {n:,} vectors into {vectors_path}")
    partial = vectors_path.with_suffix(".partial.npy")
    out = np.lib.format.open_memmap(partial, mode="w+", dtype=np.float16, shape=(n, DIM))
    rng = np.random.default_rng(1)
    random_ids: dict[int, list[np.ndarray]] = {}
    taxon_ids: dict[int, list[np.ndarray]] = {}
    for found in filters:
        found.best_scores = np.full((n_queries, 0), -np.inf, dtype=np.float32)
        found.best_rows = np.zeros((n_queries, 0), dtype=np.int64)
    for start in range(0, n, CHUNK):
        stop = min(start + CHUNK, n)
        chunk, labels = mixture.sample(stop - start, seed=1000 + start // CHUNK)
        out[start:stop] = chunk.astype(np.float16)
        random_draw = rng.random(stop - start)
        for position, found in enumerate(filters):
            if found.fraction is None:
                allowed = np.ones(stop - start, dtype=bool)
            elif found.name == "random":
                allowed = random_draw < found.fraction
                random_ids.setdefault(position, []).append(np.flatnonzero(allowed) + start)
            else:
                allowed = np.isin(labels, found.clusters)
                taxon_ids.setdefault(position, []).append(np.flatnonzero(allowed) + start)
            scores = found.queries @ chunk.T
            scores[:, ~allowed] = -np.inf
            keep_top(found, scores, start)
        if (start // CHUNK) % 10 == 0:
            log(f"  {stop:,} / {n:,}")
    out.flush()
    del out
    saved_arrays: dict[str, np.ndarray] = {}
    for position, found in enumerate(filters):
        order = np.argsort(-found.best_scores, axis=1)
        found.best_rows = np.take_along_axis(found.best_rows, order, axis=1)
        saved_arrays[f"rows{position}"] = found.best_rows
        parts = random_ids.get(position) or taxon_ids.get(position)
        if parts:
            found.ids = np.concatenate(parts).astype(np.int64) + 1  # ids are rows + 1
            saved_arrays[f"ids{position}"] = found.ids
    np.savez(truth_path, **saved_arrays)
    partial.replace(vectors_path)
    return np.load(vectors_path, mmap_mode="r"), filters


def float32_rows(n: int) -> np.ndarray:
    """The collection as `generate` drew it, before its float16 rounding (n x 2 KB)."""
    mixture = Mixture(DIM)
    out = np.empty((n, DIM), dtype=np.float32)
    for start in range(0, n, CHUNK):
        out[start : start + CHUNK], _ = mixture.sample(
            min(CHUNK, n - start), seed=1000 + start // CHUNK
        )
    return out


def sample_rows(n: int, size: int) -> np.ndarray:
    return np.sort(np.random.default_rng(0).choice(n, size=min(n, size), replace=False))


def as_f32(chunk: np.ndarray) -> np.ndarray:
    array = np.asarray(chunk, dtype=np.float32)
    return np.ascontiguousarray(array / np.linalg.norm(array, axis=1, keepdims=True))


def coarse(data: np.ndarray, nlist: int, scratch: Path) -> tuple[Any, np.ndarray, float, float]:
    """(trained flat quantizer, list of every row, k-means seconds, assignment seconds)."""
    import faiss

    path = scratch / f"coarse-v{DATA_VERSION}-{len(data)}-{nlist}.npz"
    if path.is_file():
        saved = np.load(path)
        quantizer = faiss.IndexFlatIP(DIM)
        quantizer.add(saved["centroids"])
        return quantizer, saved["assign"], float(saved["train_s"]), float(saved["assign_s"])
    from engine.vectors.kinds import KMEANS_ITERATIONS
    from engine.vectors.policy import TRAIN_POINTS_PER_LIST

    sample = as_f32(data[sample_rows(len(data), TRAIN_POINTS_PER_LIST * nlist)])
    log(f"k-means: {nlist} lists on {len(sample):,} vectors")
    started = time.perf_counter()
    kmeans = faiss.Kmeans(DIM, nlist, niter=KMEANS_ITERATIONS, spherical=True, seed=1234)
    kmeans.train(sample)
    train_s = time.perf_counter() - started
    del sample
    quantizer = faiss.IndexFlatIP(DIM)
    quantizer.add(kmeans.centroids)
    log("assigning every vector to its list")
    started = time.perf_counter()
    assign = np.empty(len(data), dtype=np.int64)
    for start in range(0, len(data), CHUNK):
        _, nearest = quantizer.search(as_f32(data[start : start + CHUNK]), 1)
        assign[start : start + CHUNK] = nearest[:, 0]
    assign_s = time.perf_counter() - started
    np.savez(path, centroids=kmeans.centroids, assign=assign, train_s=train_s, assign_s=assign_s)
    return quantizer, assign, train_s, assign_s


def make_kind(kind: str, quantizer: Any, nlist: int) -> Any:
    import faiss

    if kind.startswith("pq"):
        index = faiss.IndexIVFPQ(
            quantizer, DIM, nlist, int(kind[2:]), 8, faiss.METRIC_INNER_PRODUCT
        )
        index.pq.cp.niter = 10  # as VectorIndex.build trains it
        return index
    if kind == "sq8":
        return faiss.IndexIVFScalarQuantizer(
            quantizer, DIM, nlist, faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_INNER_PRODUCT
        )
    if kind == "sq4":
        return faiss.IndexIVFScalarQuantizer(
            quantizer, DIM, nlist, faiss.ScalarQuantizer.QT_4bit, faiss.METRIC_INNER_PRODUCT
        )
    raise SystemExit(f"unknown kind {kind!r}")


def build_kind(
    kind: str, data: np.ndarray, quantizer: Any, assign: np.ndarray
) -> tuple[Any, float]:
    """A kind's IVF index over the shared quantizer and assignment; (index, seconds)."""
    import faiss

    nlist = quantizer.ntotal
    copy = faiss.IndexFlatIP(DIM)
    copy.add(quantizer.reconstruct_n(0, nlist))
    index = make_kind(kind, copy, nlist)
    index.own_fields = True
    copy.this.disown()
    started = time.perf_counter()
    from engine.vectors.policy import COMPRESSED_TRAIN_SAMPLE

    index.train(as_f32(data[sample_rows(len(data), COMPRESSED_TRAIN_SAMPLE)]))
    index.set_direct_map_type(faiss.DirectMap.Hashtable)
    for start in range(0, len(data), CHUNK):
        stop = min(start + CHUNK, len(data))
        # Named arrays: a temporary passed to swig_ptr is freed before FAISS reads it.
        ids = np.arange(start + 1, stop + 1, dtype=np.int64)
        chunk = as_f32(data[start:stop])
        lists = np.ascontiguousarray(assign[start:stop])
        index.add_core(
            stop - start, faiss.swig_ptr(chunk), faiss.swig_ptr(ids), faiss.swig_ptr(lists)
        )
    return index, time.perf_counter() - started


def measure(search: Any, found: Filter) -> dict[str, float]:
    for query in found.queries[:5]:
        search(query)
    latencies, recalls = [], []
    allowed = None if found.ids is None else found.ids
    for query, truth_rows in zip(found.queries, found.best_rows, strict=True):
        started = time.perf_counter()
        result = search(query)
        latencies.append((time.perf_counter() - started) * 1000)
        result_ids = np.array([i for i, _ in result], dtype=np.int64)
        if allowed is not None and len(result_ids):
            inside = np.searchsorted(allowed, result_ids)
            inside = np.minimum(inside, len(allowed) - 1)
            if not bool(np.all(allowed[inside] == result_ids)):
                raise AssertionError("a filtered search returned an id outside the filter")
        truth = {int(r) + 1 for r in truth_rows if r >= 0}
        recalls.append(len(truth & set(result_ids.tolist())) / max(1, len(truth)))
    return {
        "median": float(np.median(latencies)),
        "p95": float(np.percentile(latencies, 95)),
        "recall": float(np.mean(recalls)),
    }


def sqlite_versus_mmap(data: np.ndarray, rows: int, scratch: Path, shortlist: int) -> list[str]:
    """Median ms to read a shortlist's vectors: SQLite `embeddings` blobs against the f16 map."""
    path = scratch / f"embeddings-{rows}.sqlite3"
    if not path.is_file():
        log(f"writing {rows:,} float32 blobs into {path.name}")
        partial = path.with_suffix(".partial")
        partial.unlink(missing_ok=True)
        con = sqlite3.connect(partial)
        con.execute(
            "CREATE TABLE embeddings (image_id INTEGER NOT NULL, model_key VARCHAR(255) NOT NULL,"
            " vector BLOB NOT NULL, PRIMARY KEY (image_id, model_key))"
        )
        for start in range(0, rows, CHUNK):
            chunk = as_f32(data[start : min(start + CHUNK, rows)])
            con.executemany(
                "INSERT INTO embeddings VALUES (?, 'model', ?)",
                ((start + i + 1, v.astype("<f4").tobytes()) for i, v in enumerate(chunk)),
            )
            con.commit()
        con.close()
        partial.replace(path)
    con = sqlite3.connect(path)
    rng = np.random.default_rng(5)
    lines = []
    for count in (shortlist, 10 * TOP):
        sqlite_ms, mmap_ms = [], []
        for _ in range(30):
            ids = np.sort(rng.choice(rows, size=count, replace=False) + 1)
            started = time.perf_counter()
            got: list[bytes] = []
            for first in range(0, count, 900):
                part = ids[first : first + 900].tolist()
                marks = ",".join("?" * len(part))
                got.extend(
                    blob
                    for (blob,) in con.execute(
                        f"SELECT vector FROM embeddings WHERE model_key = 'model' "
                        f"AND image_id IN ({marks})",
                        part,
                    )
                )
            np.frombuffer(b"".join(got), dtype="<f4").reshape(-1, DIM)
            sqlite_ms.append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            np.asarray(data[ids - 1], dtype=np.float32)
            mmap_ms.append((time.perf_counter() - started) * 1000)
        lines.append(
            f"| {count:,} | {np.median(sqlite_ms):.2f} | {np.percentile(sqlite_ms, 95):.2f} | "
            f"{np.median(mmap_ms):.2f} | {np.percentile(mmap_ms, 95):.2f} |"
        )
    con.close()
    size = path.stat().st_size
    header = [
        f"Reading a shortlist's vectors ({rows:,}-row SQLite table of float32 blobs, "
        f"{size / 1e9:.2f} GB, warm page cache; float16 memory map of {len(data):,} rows):",
        "",
        "| vectors | SQLite median ms | SQLite p95 ms | f16 map median ms | f16 map p95 ms |",
        "| ---: | ---: | ---: | ---: | ---: |",
    ]
    return header + lines


def peak_rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def library_of(data: np.ndarray, rows: int, scratch: Path) -> Path:
    """A library whose catalog holds `rows` photos and their float32 vectors (model "bench")."""
    from engine.catalog.library import Library

    root = scratch / f"library-{rows}"
    done = root / "complete"
    if done.is_file():
        return root
    log(f"writing a library of {rows:,} photos")
    Library.open(root).close()  # the catalog, migrated
    con = sqlite3.connect(root / "catalog.sqlite3")
    con.execute(
        "INSERT INTO collections (id, root, name, added_at) VALUES (1, '/photos', 'p', "
        "'2026-01-01')"
    )
    for start in range(0, rows, CHUNK):
        chunk = as_f32(data[start : min(start + CHUNK, rows)])
        con.executemany(
            "INSERT INTO images (id, collection_id, rel_path, size, mtime_ns, status, added_at, "
            "updated_at) VALUES (?, 1, ?, 1, 1, 'ok', '2026-01-01', '2026-01-01')",
            ((start + i + 1, f"{start + i + 1}.jpg") for i in range(len(chunk))),
        )
        con.executemany(
            "INSERT INTO embeddings (image_id, model_key, vector) VALUES (?, 'bench', ?)",
            ((start + i + 1, v.astype("<f4").tobytes()) for i, v in enumerate(chunk)),
        )
        con.commit()
    con.execute(
        "INSERT INTO library_meta (key, value) VALUES ('model_key', 'bench'), "
        f"('model_spec', 'bench'), ('model_dim', '{DIM}')"
    )
    con.commit()
    con.close()
    done.write_text("")
    return root


def library_child(root: Path, mode: str, budget_gb: float) -> None:
    """Run in a fresh process: peak memory and time of a library build, or of reading every
    vector at once as the build did before it streamed."""
    from engine.catalog.library import Library

    lib = Library.open(root)
    lib.index_memory_budget = int(budget_gb * 1024**3)
    before = peak_rss_bytes()
    started = time.perf_counter()
    reports: list[int] = []
    if mode == "stream":
        index = lib.rebuild_index("bench", progress=lambda p: reports.append(p.done))
        detail = f"{index.kind} ({index.codec}), {len(reports)} progress reports"
    else:
        ids, _ = lib.load_vectors("bench")
        detail = f"{len(ids):,} vectors in one array"
    seconds = time.perf_counter() - started
    print(
        json.dumps(
            {"mode": mode, "s": seconds, "peak": peak_rss_bytes(), "base": before, "detail": detail}
        )
    )


def library_rows(data: np.ndarray, rows: int, scratch: Path, budget_gb: float) -> list[str]:
    import subprocess

    root = library_of(data, rows, scratch)
    lines = [
        f"Library build from a catalog of {rows:,} photos (fresh process each; budget "
        f"{budget_gb:g} GB):",
        "",
        "| what | seconds | process peak RSS GB | result |",
        "| --- | ---: | ---: | --- |",
    ]
    for mode, label in (("stream", "`rebuild_index`, streamed"), ("all", "`load_vectors()`")):
        log(f"library: {label}")
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--library-child",
                mode,
                "--library-root",
                str(root),
                "--budget",
                str(budget_gb),
            ],
            check=True,
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        ).stdout
        result = json.loads(out.strip().splitlines()[-1])
        lines.append(
            f"| {label} | {result['s']:.0f} | {result['peak'] / 1e9:.2f} | {result['detail']} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=5_000_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--kinds", default="pq64,sq8", help="comma-separated: pqM, sq8, sq4")
    parser.add_argument("--nlist", type=int, default=0, help="0: the engine's choice")
    parser.add_argument("--nprobes", default="", help="comma-separated; default: the engine's")
    parser.add_argument("--factors", default="", help="shortlist sizes in units of k")
    parser.add_argument(
        "--scratch", type=Path, default=Path(tempfile.gettempdir()) / "quadrat-bench-5m"
    )
    parser.add_argument("--sqlite-rows", type=int, default=0)
    parser.add_argument("--no-filters", action="store_true")
    parser.add_argument(
        "--float32", action="store_true", help="also re-rank from float32 (n x 2 KB of memory)"
    )
    parser.add_argument("--library-rows", type=int, default=0, help="also measure a library build")
    parser.add_argument("--budget", type=float, default=0.5, help="GB, for --library-rows")
    parser.add_argument("--library-child", help=argparse.SUPPRESS)
    parser.add_argument("--library-root", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.library_child:
        library_child(args.library_root, args.library_child, args.budget)
        return 0

    import faiss

    from engine.vectors.index import VectorIndex
    from engine.vectors.policy import choose_compressed_nlist, default_nprobe
    from engine.vectors.scoring import RERANK_FACTOR
    from engine.vectors.vectorfile import VectorFile

    faiss.omp_set_num_threads(int(THREADS))
    args.scratch.mkdir(parents=True, exist_ok=True)
    load_start = os.getloadavg()
    started = time.perf_counter()
    data, filters = generate(args.n, args.scratch, args.queries)
    log(f"data ready in {time.perf_counter() - started:.0f} s")
    nlist = args.nlist or choose_compressed_nlist(args.n)
    quantizer, assign, train_s, assign_s = coarse(data, nlist, args.scratch)
    log(f"coarse: k-means {train_s:.0f} s, assignment {assign_s:.0f} s")
    ids_path = args.scratch / f"vectorfile-{args.n}"
    row_ids = np.arange(1, args.n + 1, dtype=np.int64)
    vector_file = VectorFile.wrap_rows(data, row_ids, ids_path)

    nprobes = [int(p) for p in args.nprobes.split(",") if p] or [default_nprobe(nlist)]
    factors = [int(f) for f in args.factors.split(",") if f] or [RERANK_FACTOR]
    summary: list[str] = []
    rows: list[str] = []
    filter_rows: list[str] = []
    for kind in [k for k in args.kinds.split(",") if k]:
        before = anon_rss_bytes()
        log(f"{kind}: training and adding")
        built, own_s = build_kind(kind, data, quantizer, assign)
        resident = anon_rss_bytes() - before
        with tempfile.NamedTemporaryFile(dir=args.scratch, suffix=".faiss") as handle:
            faiss.write_index(built, handle.name)
            file_bytes = Path(handle.name).stat().st_size
        index = VectorIndex._wrap(built)
        index.attach_vectors(vector_file)
        summary.append(
            f"| {kind} | {nlist} | {train_s + assign_s + own_s:.0f} s "
            f"({train_s:.0f} + {assign_s:.0f} + {own_s:.0f}) | {file_bytes / 1e9:.2f} | "
            f"{resident / 1e9:.2f} |"
        )
        for nprobe in nprobes:
            for factor in factors:
                index.nprobe = nprobe
                index.rerank_factor = factor
                log(f"{kind}: nprobe {nprobe}, shortlist {factor} x k")
                result = measure(lambda q, index=index: index.search(q, TOP), filters[0])
                rows.append(
                    f"| {kind} | {nprobe} | {factor * TOP} | {result['median']:.2f} | "
                    f"{result['p95']:.2f} | {result['recall']:.3f} |"
                )
                print(rows[-1], file=sys.stderr, flush=True)
        if args.float32:
            # The same shortlists re-ranked from float32 vectors: what float16 storage loses.
            index.nprobe, index.rerank_factor = nprobes[0], factors[0]
            index.attach_vectors(VectorFile.wrap_rows(float32_rows(args.n), row_ids))
            result = measure(lambda q, index=index: index.search(q, TOP), filters[0])
            rows.append(
                f"| {kind}, float32 re-rank | {nprobes[0]} | {factors[0] * TOP} | "
                f"{result['median']:.2f} | {result['p95']:.2f} | {result['recall']:.3f} |"
            )
            print(rows[-1], file=sys.stderr, flush=True)
            index.attach_vectors(vector_file)
        if not args.no_filters:
            index.nprobe = nprobes[0]
            index.rerank_factor = factors[0]
            for found in filters[1:]:
                log(f"{kind}: filter {found.label}")
                result = measure(
                    lambda q, index=index, found=found: index.search(q, TOP, allowed_ids=found.ids),
                    found,
                )
                filter_rows.append(
                    f"| {kind} | {found.label} | {0 if found.ids is None else len(found.ids):,} | "
                    f"{result['median']:.2f} | {result['p95']:.2f} | {result['recall']:.3f} |"
                )
                print(filter_rows[-1], file=sys.stderr, flush=True)
        del index, built
        # Hand the freed index back to the system, so the next kind's growth is its own.
        ctypes.CDLL("libc.so.6").malloc_trim(0)

    load_end = os.getloadavg()
    print(
        f"\n{args.n:,} clustered vectors of {DIM} dimensions, {args.queries} single queries, "
        f"top-{TOP}; {os.cpu_count()} CPUs, FAISS/BLAS threads {THREADS}; load average "
        f"{load_start[0]:.1f} at the start, {load_end[0]:.1f} at the end "
        f"(15-min {load_end[2]:.1f}). Re-ranked from a memory-mapped float16 file of "
        f"{data.nbytes / 1e9:.2f} GB; recall against exact float32 search.\n"
    )
    print("| kind | lists | build (k-means + assign + own) | file GB | resident GB |")
    print("| --- | ---: | ---: | ---: | ---: |")
    print("\n".join(summary))
    print("\n| kind | nprobe | shortlist | median ms | p95 ms | recall@100 |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    print("\n".join(rows))
    if filter_rows:
        print("\n| kind | filter | allowed | median ms | p95 ms | recall@100 |")
        print("| --- | --- | ---: | ---: | ---: | ---: |")
        print("\n".join(filter_rows))
    if args.sqlite_rows:
        print()
        print("\n".join(sqlite_versus_mmap(data, args.sqlite_rows, args.scratch, 4 * TOP)))
    if args.library_rows:
        print()
        print("\n".join(library_rows(data, args.library_rows, args.scratch, args.budget)))
    print(json.dumps({"n": args.n, "nlist": nlist}), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
