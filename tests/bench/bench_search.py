"""Vector search benchmark: build time, memory, latency and recall of each index kind.

Run on demand (it takes minutes at a million vectors):

    python tests/bench/bench_search.py [--sizes 100000 1000000] [--nprobes 8 16 32 64 128]

Data: L2-normalised 512-d vectors from a two-level Gaussian mixture (50 groups of 20 clusters,
1,000 clusters in all, uneven sizes), a stand-in for CLIP embeddings of photos where species
sit inside genera and families. Queries are held-out points of the same mixture, perturbed.
Recall@100 is measured against exact (numpy) search. Each (size, kind) runs in its own process
so the peak-memory figure belongs to that index alone. FAISS and BLAS use 2 threads.

Prints Markdown tables on stdout; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

THREADS = "2"
for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, THREADS)

import numpy as np  # noqa: E402 - after the thread settings, which BLAS reads at import

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

DIM = 512
GROUPS = 50
CLUSTERS_PER_GROUP = 20
TOP = 100
CHUNK = 100_000
FILTER_FRACTION = 0.10


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def normalise(array: np.ndarray) -> np.ndarray:
    return array / np.linalg.norm(array, axis=1, keepdims=True)


class Mixture:
    """A two-level Gaussian mixture on the unit sphere."""

    def __init__(self, dim: int, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        groups = normalise(rng.standard_normal((GROUPS, dim)))
        offsets = rng.standard_normal((GROUPS, CLUSTERS_PER_GROUP, dim)) * (0.9 / np.sqrt(dim))
        self.centres = normalise((groups[:, None, :] + offsets).reshape(-1, dim)).astype(np.float32)
        # Uneven cluster sizes, as in a real collection (a few common species, many rare).
        weights = rng.pareto(1.5, size=len(self.centres)) + 0.05
        self.weights = weights / weights.sum()
        # Per-cluster spread: within-cluster cosine ~0.55-0.8.
        self.spread = rng.uniform(0.5, 0.9, size=len(self.centres)).astype(np.float32)
        self.dim = dim

    def sample(self, n: int, seed: int) -> np.ndarray:
        """`n` normalised points, generated in chunks so memory stays at about the output."""
        rng = np.random.default_rng(seed)
        out = np.empty((n, self.dim), dtype=np.float32)
        for start in range(0, n, CHUNK):
            stop = min(start + CHUNK, n)
            labels = rng.choice(len(self.centres), size=stop - start, p=self.weights)
            noise = rng.standard_normal((stop - start, self.dim), dtype=np.float32)
            noise *= (self.spread[labels] / np.sqrt(self.dim))[:, None]
            chunk = self.centres[labels] + noise
            out[start:stop] = normalise(chunk)
        return out


def exact_top(data: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    """Row indices of the exact top-k of each query, by brute force in chunks."""
    best_scores = np.full((len(queries), 0), -np.inf, dtype=np.float32)
    best_rows = np.zeros((len(queries), 0), dtype=np.int64)
    for start in range(0, len(data), CHUNK):
        scores = queries @ data[start : start + CHUNK].T
        rows = np.broadcast_to(np.arange(start, start + scores.shape[1]), scores.shape)
        scores = np.hstack([best_scores, scores])
        rows = np.hstack([best_rows, rows])
        keep = np.argpartition(-scores, k - 1, axis=1)[:, :k]
        best_scores = np.take_along_axis(scores, keep, axis=1)
        best_rows = np.take_along_axis(rows, keep, axis=1)
    return best_rows


def current_rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS mark (Linux), so the next peak belongs to what follows."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def peak_rss_bytes() -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # whole-process peak: an upper bound
    return peak if platform.system() == "Darwin" else peak * 1024


def time_queries(search, queries: np.ndarray) -> tuple[float, float, list]:
    """Median and p95 latency in ms of single-query searches, and their results."""
    for query in queries[:5]:  # warm caches and thread pools
        search(query)
    latencies, results = [], []
    for query in queries:
        start = time.perf_counter()
        results.append(search(query))
        latencies.append((time.perf_counter() - start) * 1000)
    return float(np.median(latencies)), float(np.percentile(latencies, 95)), results


def recall_at(results: list, truth_ids: np.ndarray) -> float:
    hits = [
        len({i for i, _ in found} & set(truth.tolist()))
        for found, truth in zip(results, truth_ids, strict=True)
    ]
    return float(np.mean(hits)) / truth_ids.shape[1]


def run_child(size: int, kind: str, n_queries: int, nprobes: list[int]) -> list[dict]:
    """Measure one (size, kind) in this process; returns one row per setting."""
    import faiss

    from engine.vectors.index import VectorIndex

    faiss.omp_set_num_threads(int(THREADS))
    load_before = os.getloadavg()[0]
    mixture = Mixture(DIM)
    log(f"{kind} {size:,}: generating data")
    data = mixture.sample(size, seed=1)
    ids = np.arange(1, size + 1, dtype=np.int64)
    queries = mixture.sample(n_queries, seed=2)  # held out: never added
    queries = normalise(
        queries
        + np.random.default_rng(3).standard_normal(queries.shape).astype(np.float32)
        * (0.3 / np.sqrt(DIM))
    )
    log(f"{kind} {size:,}: exact ground truth")
    truth_ids = ids[exact_top(data, queries, TOP)]
    allowed = np.sort(
        np.random.default_rng(4).choice(ids, size=int(size * FILTER_FRACTION), replace=False)
    )

    if not reset_peak_rss():
        log("cannot reset the peak-RSS mark: the memory column is an upper bound")
    baseline = current_rss_bytes()
    log(f"{kind} {size:,}: building")
    start = time.perf_counter()
    index = VectorIndex.build(ids, data, kind=kind)
    build_seconds = time.perf_counter() - start
    peak_delta = max(0, peak_rss_bytes() - baseline)
    after_delta = current_rss_bytes() - baseline

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "bench.faiss"
        start = time.perf_counter()
        index.save(path)
        save_seconds = time.perf_counter() - start
        file_bytes = path.stat().st_size
        start = time.perf_counter()
        VectorIndex.load(path)
        load_seconds = time.perf_counter() - start

    allowed_set = set(allowed.tolist())
    default_nprobe = index.nprobe
    settings = sorted({*nprobes, default_nprobe}) if kind == "ivf" else [0]
    rows = []
    for nprobe in settings:
        if kind == "ivf":
            index.nprobe = nprobe
        log(f"{kind} {size:,}: searching" + (f" nprobe={nprobe}" if nprobe else ""))
        median, p95, results = time_queries(lambda q: index.search(q, TOP), queries)
        filtered_median, _, filtered = time_queries(
            lambda q: index.search(q, TOP, allowed_ids=allowed), queries[: max(20, n_queries // 4)]
        )
        if not all(i in allowed_set for found in filtered for i, _ in found):
            raise AssertionError("a filtered search returned an id outside the filter")
        rows.append(
            {
                "size": size,
                "kind": kind,
                "nlist": index.nlist,
                "nprobe": nprobe,
                "default": nprobe == default_nprobe,
                "build_s": build_seconds,
                "peak_rss_gb": peak_delta / 1e9,
                "after_rss_gb": after_delta / 1e9,
                "median_ms": median,
                "p95_ms": p95,
                "recall": recall_at(results, truth_ids),
                "filtered_median_ms": filtered_median,
                "file_gb": file_bytes / 1e9,
                "save_s": save_seconds,
                "load_s": load_seconds,
                "load_before": load_before,
                "load_after": os.getloadavg()[0],
            }
        )
    return rows


def markdown(rows: list[dict]) -> str:
    lines = [
        "| vectors | index | nlist | nprobe | build s | peak RSS Δ GB | median ms | p95 ms "
        "| recall@100 | 10%-filter median ms |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        lines.append(
            f"| {row['size']:,} | {row['kind']} | {row['nlist'] or '–'} "
            f"| {row['nprobe'] or '–'}{' (default)' if row['default'] and row['nprobe'] else ''} "
            f"| {row['build_s']:.1f} | {row['peak_rss_gb']:.2f} | {row['median_ms']:.2f} "
            f"| {row['p95_ms']:.2f} | {row['recall']:.3f} | {row['filtered_median_ms']:.2f} |"
        )
    lines += [
        "",
        "| vectors | index | file GB | save s | load s | load average (start → end) |",
        "| ---: | --- | ---: | ---: | ---: | --- |",
    ]
    seen = set()
    for row in rows:
        if (row["size"], row["kind"]) in seen:
            continue
        seen.add((row["size"], row["kind"]))
        lines.append(
            f"| {row['size']:,} | {row['kind']} | {row['file_gb']:.2f} | {row['save_s']:.1f} "
            f"| {row['load_s']:.1f} | {row['load_before']:.1f} → {row['load_after']:.1f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--kinds", nargs="+", default=["flat", "ivf"], choices=["flat", "ivf"])
    parser.add_argument("--nprobes", type=int, nargs="+", default=[8, 16, 32, 64, 128])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--child", nargs=2, metavar=("SIZE", "KIND"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.child:
        rows = run_child(int(args.child[0]), args.child[1], args.queries, args.nprobes)
        print(json.dumps(rows))
        return 0

    rows: list[dict] = []
    for size in args.sizes:
        for kind in args.kinds:
            command = [
                sys.executable,
                __file__,
                "--child",
                str(size),
                kind,
                "--queries",
                str(args.queries),
                "--nprobes",
                *map(str, args.nprobes),
            ]
            child = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=True)
            rows += json.loads(child.stdout)
            print(markdown(rows[-len(json.loads(child.stdout)) :]), file=sys.stderr, flush=True)
    print(f"{os.cpu_count()} CPUs, FAISS/BLAS threads {THREADS}, {args.queries} queries, top-{TOP}")
    print()
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
