"""Filtered vector search benchmark: latency and recall@100 of searches restricted to an id set.

Run on demand (the first run at a million vectors builds and caches the data and the IVF index,
a few minutes; later runs load them in seconds):

    python tests/bench/bench_filtered.py [--n 1000000] [--queries 100] [--baseline REV]

Data: L2-normalised 512-d vectors from a two-level Gaussian mixture on the sphere (100 groups of
30 clusters, 3,000 clusters in all, uneven Pareto sizes, within-cluster cosine about 0.55-0.8): a
stand-in for CLIP embeddings of photos, where species sit inside genera and families. Ids are
1..n. The index is `VectorIndex.build(kind="auto")`: IVF-Flat above 200k vectors, with the
default nprobe.

Filters, each at 0.1 %, 1 %, 10 % and 50 % of the ids, and no filter:

- ``random``: ids drawn uniformly (a date range or a licence: unrelated to what photos show).
- ``taxon``: whole clusters, taken a group at a time (genus, family), until the fraction is
  reached: a taxon filter, whose allowed photos sit together in a few regions of the space.

Queries: held-out points of the mixture, perturbed. For a taxon filter half of them come from
inside the taxon (the ecologist asks about the taxon she filtered on) and half from anywhere.
Recall@100 is measured against the exact top-100 of the allowed vectors (numpy). Each query is a
single `VectorIndex.search` call, timed from the call to its return (the allowed ids are passed
as the sorted int64 array the search layer hands over).

``--baseline REV`` also measures engine/vectors/index.py as it was at git revision REV, on the same
FAISS index object and the same queries, so before and after come from one run. Only a revision
where the index was that one file gives a true baseline: later, its filtered search lives in
engine/vectors/filtered.py and scoring.py, which would be imported from the working tree.

Prints a Markdown table on stdout; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

THREADS = "2"
for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, THREADS)

import numpy as np  # noqa: E402 - after the thread settings, which BLAS reads at import

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

DIM = 512
GROUPS = 100
CLUSTERS_PER_GROUP = 30
TOP = 100
CHUNK = 100_000
FRACTIONS = (0.001, 0.01, 0.1, 0.5)
DATA_VERSION = 1  # bump when the generator changes, so a stale cache is not reused


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def normalise(array: np.ndarray) -> np.ndarray:
    return (array / np.linalg.norm(array, axis=1, keepdims=True)).astype(np.float32)


class Mixture:
    """A two-level Gaussian mixture on the unit sphere; cluster `c` belongs to group
    `c // CLUSTERS_PER_GROUP`."""

    def __init__(self, dim: int = DIM, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        groups = normalise(rng.standard_normal((GROUPS, dim)))
        offsets = rng.standard_normal((GROUPS, CLUSTERS_PER_GROUP, dim)) * (0.9 / np.sqrt(dim))
        self.centres = normalise((groups[:, None, :] + offsets).reshape(-1, dim))
        # Uneven cluster sizes, as in a real collection (a few common species, many rare).
        weights = rng.pareto(1.5, size=len(self.centres)) + 0.05
        self.weights = weights / weights.sum()
        self.spread = rng.uniform(0.5, 0.9, size=len(self.centres)).astype(np.float32)
        self.dim = dim

    def sample(
        self, n: int, seed: int, clusters: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """(`n` normalised points, their cluster labels), drawn from all clusters or only from
        `clusters`, in chunks so memory stays at about the output."""
        rng = np.random.default_rng(seed)
        pool = np.arange(len(self.centres)) if clusters is None else np.asarray(clusters)
        weights = self.weights[pool] / self.weights[pool].sum()
        out = np.empty((n, self.dim), dtype=np.float32)
        labels = np.empty(n, dtype=np.int32)
        for start in range(0, n, CHUNK):
            stop = min(start + CHUNK, n)
            chunk_labels = pool[rng.choice(len(pool), size=stop - start, p=weights)]
            noise = rng.standard_normal((stop - start, self.dim), dtype=np.float32)
            noise *= (self.spread[chunk_labels] / np.sqrt(self.dim))[:, None]
            out[start:stop] = normalise(self.centres[chunk_labels] + noise)
            labels[start:stop] = chunk_labels
        return out, labels


def perturbed(queries: np.ndarray, seed: int) -> np.ndarray:
    noise = np.random.default_rng(seed).standard_normal(queries.shape).astype(np.float32)
    return normalise(queries + noise * (0.3 / np.sqrt(queries.shape[1])))


# ---------------------------------------------------------------------- cached data and index


def cached_collection(n: int, cache: Path, mixture: Mixture) -> tuple[np.ndarray, np.ndarray]:
    """(vectors, labels) of the collection, generated once and memory-mapped afterwards."""
    stem = cache / f"collection-v{DATA_VERSION}-{n}"
    vectors_path, labels_path = stem.with_suffix(".vectors.npy"), stem.with_suffix(".labels.npy")
    if not (vectors_path.is_file() and labels_path.is_file()):
        log(f"generating {n:,} vectors")
        vectors, labels = mixture.sample(n, seed=1)
        for path, array in ((vectors_path, vectors), (labels_path, labels)):
            partial = path.with_suffix(".partial.npy")
            np.save(partial, array)
            partial.replace(path)
        del vectors, labels
    return np.load(vectors_path, mmap_mode="r"), np.load(labels_path)


def cached_index(vectors: np.ndarray, cache: Path) -> Any:
    """The `VectorIndex` of the collection (ids 1..n), built once and loaded afterwards."""
    from engine.vectors.index import VectorIndex

    path = cache / f"index-v{DATA_VERSION}-{len(vectors)}.faiss"
    if path.is_file():
        log(f"loading the index {path.name}")
        return VectorIndex.load(path)
    log(f"building the index of {len(vectors):,} vectors (IVF k-means above 200k: minutes)")
    started = time.perf_counter()
    index = VectorIndex.build(np.arange(1, len(vectors) + 1, dtype=np.int64), vectors)
    log(f"built a {index.kind} index in {time.perf_counter() - started:.0f} s; saving")
    index.save(path)
    return index


def baseline_module(revision: str) -> ModuleType:
    """engine/vectors/index.py as it was at git `revision`, imported under another name."""
    source = subprocess.run(
        ["git", "-C", str(REPO), "show", f"{revision}:engine/vectors/index.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    spec = importlib.util.spec_from_loader(f"engine_index_at_{revision}", loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    exec(compile(source, f"engine/vectors/index.py@{revision}", "exec"), module.__dict__)
    return module


def same_faiss_index(module: ModuleType, index: Any) -> Any:
    """A `module.VectorIndex` over the FAISS object of `index` (no second copy of the vectors)."""
    other = module.VectorIndex.__new__(module.VectorIndex)
    other._setup(index._index)
    return other


# ---------------------------------------------------------------------- filters and truth


class Filter:
    """An allowed-id set with its queries and their exact top-100 row numbers."""

    def __init__(self, name: str, fraction: float | None, rows: np.ndarray | None) -> None:
        self.name = name
        self.fraction = fraction
        self.rows = rows  # sorted row numbers; None: no filter
        self.ids = None if rows is None else rows.astype(np.int64) + 1
        self.queries = np.empty((0, DIM), dtype=np.float32)
        self.truth = np.empty((0, TOP), dtype=np.int64)


def random_rows(n: int, fraction: float, seed: int) -> np.ndarray:
    count = max(1, round(n * fraction))
    return np.sort(np.random.default_rng(seed).choice(n, size=count, replace=False))


def taxon_clusters(labels: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    """Whole clusters, a group at a time in random order, until `fraction` of the rows."""
    counts = np.bincount(labels, minlength=GROUPS * CLUSTERS_PER_GROUP)
    rng = np.random.default_rng(seed)
    target = fraction * len(labels)
    chosen: list[int] = []
    total = 0
    for group in rng.permutation(GROUPS):
        clusters = group * CLUSTERS_PER_GROUP + rng.permutation(CLUSTERS_PER_GROUP)
        for cluster in clusters:
            if counts[cluster] == 0:
                continue
            if total and total + counts[cluster] > 1.5 * target:
                continue  # a big cluster would overshoot: try a smaller one
            chosen.append(int(cluster))
            total += int(counts[cluster])
            if total >= target:
                return np.array(chosen)
    return np.array(chosen)


def exact_top_rows(
    vectors: np.ndarray, queries: np.ndarray, rows: np.ndarray | None, k: int
) -> np.ndarray:
    """Row numbers of the exact top-k of each query among `rows` (None: all), in chunks."""
    n = len(vectors)
    mask = None
    if rows is not None:
        mask = np.zeros(n, dtype=bool)
        mask[rows] = True
    best_scores = np.full((len(queries), 0), -np.inf, dtype=np.float32)
    best_rows = np.zeros((len(queries), 0), dtype=np.int64)
    for start in range(0, n, CHUNK):
        stop = min(start + CHUNK, n)
        scores = queries @ np.asarray(vectors[start:stop]).T
        if mask is not None:
            scores[:, ~mask[start:stop]] = -np.inf
        chunk_rows = np.broadcast_to(np.arange(start, stop), scores.shape)
        scores = np.hstack([best_scores, scores])
        chunk_rows = np.hstack([best_rows, chunk_rows])
        keep = np.argpartition(-scores, min(k, scores.shape[1]) - 1, axis=1)[:, :k]
        best_scores = np.take_along_axis(scores, keep, axis=1)
        best_rows = np.take_along_axis(chunk_rows, keep, axis=1)
    best_rows[~np.isfinite(best_scores)] = -1
    return best_rows


def make_filters(
    vectors: np.ndarray, labels: np.ndarray, mixture: Mixture, n_queries: int, seed: int = 0
) -> list[Filter]:
    """The filters and their queries; another `seed` draws other filters and queries from the
    same collection (to choose settings on one draw and report another)."""
    n = len(vectors)
    seed = 100 * seed
    generic, _ = mixture.sample(n_queries, seed=seed + 2)  # held out: never added
    generic = perturbed(generic, seed=seed + 3)
    filters = [Filter("none", None, None)]
    for position, fraction in enumerate(FRACTIONS):
        filters.append(
            Filter("random", fraction, random_rows(n, fraction, seed=seed + 10 + position))
        )
    for position, fraction in enumerate(FRACTIONS):
        clusters = taxon_clusters(labels, fraction, seed=seed + 20 + position)
        taxon = Filter("taxon", fraction, np.flatnonzero(np.isin(labels, clusters)))
        inside, _ = mixture.sample(
            n_queries - n_queries // 2, seed=seed + 30 + position, clusters=clusters
        )
        taxon.queries = np.vstack([generic[: n_queries // 2], perturbed(inside, seed=seed + 40)])
        filters.append(taxon)
    for found in filters:
        if not len(found.queries):
            found.queries = generic
        log(
            f"exact top-{TOP}: {found.name} "
            f"{'' if found.rows is None else f'{len(found.rows):,} allowed'}"
        )
        found.truth = exact_top_rows(vectors, found.queries, found.rows, TOP)
    return filters


# ---------------------------------------------------------------------- measuring


def current_rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def measure(search: Callable[[np.ndarray], list], found: Filter) -> dict[str, float]:
    """Median and p95 ms of single-query searches, and recall@100 against the exact top."""
    for query in found.queries[:5]:  # warm caches and thread pools
        search(query)
    latencies, recalls = [], []
    allowed = None if found.ids is None else set(found.ids.tolist())
    for query, truth_rows in zip(found.queries, found.truth, strict=True):
        started = time.perf_counter()
        result = search(query)
        latencies.append((time.perf_counter() - started) * 1000)
        result_ids = [i for i, _ in result]
        if allowed is not None and not allowed.issuperset(result_ids):
            raise AssertionError("a filtered search returned an id outside the filter")
        truth = {int(r) + 1 for r in truth_rows if r >= 0}
        recalls.append(len(truth & set(result_ids)) / max(1, len(truth)))
    return {
        "median": float(np.median(latencies)),
        "p95": float(np.percentile(latencies, 95)),
        "recall": float(np.mean(recalls)),
    }


def table(rows: list[dict[str, Any]], methods: list[str]) -> str:
    header = "| filter | allowed | " + " | ".join(
        f"{m} median ms | {m} p95 ms | {m} recall@100" for m in methods
    )
    lines = [header + " |", "| --- | ---: |" + " ---: | ---: | ---: |" * len(methods)]
    for row in rows:
        cells = [row["filter"], f"{row['allowed']:,}"]
        for method in methods:
            result = row[method]
            cells += [f"{result['median']:.2f}", f"{result['p95']:.2f}", f"{result['recall']:.3f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000, help="vectors in the index")
    parser.add_argument("--queries", type=int, default=100, help="queries per filter (>= 50)")
    parser.add_argument(
        "--cache",
        type=Path,
        default=Path(tempfile.gettempdir()) / "quadrat-bench-filtered",
        help="folder for the generated vectors and the built index",
    )
    parser.add_argument(
        "--baseline", metavar="REV", help="also measure engine/vectors/index.py at REV"
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="another draw of filters and queries (same data)"
    )
    args = parser.parse_args(argv)

    import faiss

    faiss.omp_set_num_threads(int(THREADS))
    args.cache.mkdir(parents=True, exist_ok=True)
    mixture = Mixture()
    vectors, labels = cached_collection(args.n, args.cache, mixture)
    rss_before_index = current_rss_bytes()
    index = cached_index(vectors, args.cache)
    index_rss = current_rss_bytes() - rss_before_index
    filters = make_filters(vectors, labels, mixture, args.queries, args.seed)

    searchers: dict[str, Any] = {}
    if args.baseline:
        searchers["before"] = same_faiss_index(baseline_module(args.baseline), index)
    searchers["after" if args.baseline else "now"] = index
    methods = list(searchers)

    load_start = os.getloadavg()[0]
    rows: list[dict[str, Any]] = []
    extra_rss: dict[str, int] = {}
    for method, searcher in searchers.items():
        rss = current_rss_bytes()
        for found in filters:
            # The first search builds whatever a method caches; it is part of its memory.
            searcher.search(found.queries[0], TOP, allowed_ids=found.ids)
        extra_rss[method] = current_rss_bytes() - rss
    for found in filters:
        label = "none" if found.fraction is None else f"{found.name} {100 * found.fraction:g} %"
        row: dict[str, Any] = {
            "filter": label,
            "allowed": args.n if found.ids is None else len(found.ids),
        }
        for method, searcher in searchers.items():

            def search(query: np.ndarray, searcher: Any = searcher, found: Filter = found) -> list:
                return searcher.search(query, TOP, allowed_ids=found.ids)

            log(f"{method}: {label}")
            row[method] = measure(search, found)
        rows.append(row)
        print(table(rows[-1:], methods), file=sys.stderr, flush=True)

    print(
        f"{args.n:,} vectors of {DIM} dimensions, {index.kind} index"
        + (f" ({index.nlist} lists, nprobe {index.nprobe})" if index.kind == "ivf" else "")
        + f", {args.queries} single-vector queries per filter, top-{TOP}; "
        f"{os.cpu_count()} CPUs, FAISS/BLAS threads {THREADS}; load average "
        f"{load_start:.1f} → {os.getloadavg()[0]:.1f}"
    )
    print(
        f"Memory: the index {index_rss / 1e9:.2f} GB resident; the first filtered searches added "
        + ", ".join(f"{m} {b / 1e6:.0f} MB" for m, b in extra_rss.items())
        + (
            f"; the index's filter lookup holds {index.filter_lookup_bytes / 1e6:.1f} MB"
            if hasattr(index, "filter_lookup_bytes")
            else ""
        )
    )
    print()
    print(table(rows, methods))
    return 0


if __name__ == "__main__":
    sys.exit(main())
