"""Visualize-then-retrieve on the demo benchmark, with the demo painter as the generator.

Run on demand (about a minute on 2 cores):

    python tests/bench/bench_visret.py [--k 10] [--permutations 10000] [--queries 12]

Writes the full demo collection (40 photos per class, 60 queries) to a temporary folder,
indexes it with the demo model, and prints Markdown tables on stdout (progress on stderr):

1. mAP@k of `text`, `visret` and `visret:include_text=true` overall, per supercategory and per
   category, with the paired randomisation test and bootstrap interval against text
   (engine/evaluation/significance.py), overall and per category;
2. where one VisRet query's time goes (drawing, encoding, searching, fusing), drawings not cached,
   and what searching and fusing cost at each fusion depth;
3. the demo painter per drawing: time and peak Python memory (tracemalloc);
4. a VisRet query end to end on the demo library, drawings not cached and cached.

The painter reads the prompt's words only; nothing here tunes it to the queries.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "2")

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

# `visret:depth=1` fuses each drawing's ranking only as deep as the results asked for (100 here),
# as Quadrat did before fusing whole rankings as the paper does.
SPECS = ("text", "visret", "visret:depth=1", "visret:include_text=true")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--permutations", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=12, help="queries timed end to end")
    args = parser.parse_args()

    from engine.benchmarks.runner import run_methods
    from engine.catalog.library import Library
    from engine.demo.collection import write_demo_collection
    from engine.evaluation.evaluate import load_judgments, load_queries_csv
    from engine.indexing.indexer import Indexer
    from engine.models.encoders import load_encoder

    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        collection = write_demo_collection(Path(tmp) / "demo")
        encoder = load_encoder("demo", device="cpu")
        library = Library.open(Path(tmp) / "lib")
        Indexer(library, encoder).run(collection.root)
        log(f"demo library ready in {time.perf_counter() - started:.1f} s")
        queries = load_queries_csv(collection.queries_path)
        judgments = load_judgments(collection.judgments_path)
        started = time.perf_counter()
        bench = run_methods(
            library,
            lambda: encoder,
            queries,
            judgments,
            list(SPECS),
            k=args.k,
            permutations=args.permutations,
        )
        log(f"benchmark of {len(SPECS)} methods in {time.perf_counter() - started:.1f} s")
        print(
            f"Python {platform.python_version()}, {os.cpu_count()} CPUs, demo model, k = {args.k}"
        )
        print()
        accuracy_tables(bench, queries, args.k, args.permutations)
        phase_table(library, encoder, queries, args.queries)
        painter_table()
        library.close()
    return 0


def accuracy_tables(bench, queries, k: int, permutations: int) -> None:  # type: ignore[no-untyped-def]
    from engine.evaluation.significance import compare

    results = [bench.results[spec] for spec in SPECS]
    print(f"### mAP@{k} (fullrank), the demo benchmark")
    print()
    print("| group | queries | " + " | ".join(f"`{s}`" for s in SPECS) + " |")
    print("| --- | ---: |" + " ---: |" * len(SPECS))
    print(f"| **all** | {results[0].mean.queries} | "
          + " | ".join(f"{r.mean.mAP:.3f}" for r in results) + " |")  # fmt: skip
    for column in ("supercategory", "category"):
        for name in sorted(results[0].by_category.get(column, {})):
            groups = [r.by_category[column][name] for r in results]
            print(f"| {name} | {groups[0].queries} | "
                  + " | ".join(f"{g.mAP:.3f}" for g in groups) + " |")  # fmt: skip
    print()
    category = {q.query_id: q.extra.get("category", "") for q in queries}
    per_query = {spec: {m.query_id: m.AP for m in bench.results[spec].per_query if m.R > 0}
                 for spec in SPECS}  # fmt: skip
    print("### Paired tests against `text` (randomisation p, bootstrap 95 % CI of ΔAP)")
    print()
    print("| method | group | queries | ΔmAP | 95 % CI | p |")
    print("| --- | --- | ---: | ---: | --- | ---: |")
    groups = ["all", *sorted(set(category.values()))]
    for spec in SPECS[1:]:
        for group in groups:
            ids = [q for q in per_query["text"] if group == "all" or category[q] == group]
            c = compare(
                spec,
                {q: per_query[spec][q] for q in ids if q in per_query[spec]},
                "text",
                {q: per_query["text"][q] for q in ids},
                permutations,
            )
            print(f"| `{spec}` | {group} | {c.queries} | {c.delta:+.3f} | "
                  f"[{c.ci95[0]:+.3f}, {c.ci95[1]:+.3f}] | {c.p:.4f} |")  # fmt: skip
    print()


def phase_table(library, encoder, queries, count: int) -> None:  # type: ignore[no-untyped-def]
    from engine.methods import MethodContext, SearchQuery, resolve_spec

    spec = resolve_spec("visret")
    chosen = [q for q in queries if q.extra.get("category") != "species"][:count]
    with tempfile.TemporaryDirectory() as drawings:
        context = MethodContext(library, lambda: encoder, drawings_dir=Path(drawings))
        spec.run(SearchQuery("a red circle"), context, top_k=10)  # warm the index and imports
        phases: dict[str, list[float]] = {}
        cold: list[float] = []
        warm: list[float] = []
        for query in chosen:
            started = time.perf_counter()
            ranking = spec.run(SearchQuery(query.text), context, top_k=100)
            cold.append(time.perf_counter() - started)
            for name, seconds in ranking.details["timings"].items():
                phases.setdefault(name, []).append(seconds)
            started = time.perf_counter()
            spec.run(SearchQuery(query.text), context, top_k=100)
            warm.append(time.perf_counter() - started)
    total = sum(statistics.mean(v) for v in phases.values())
    print(f"### One VisRet query (3 drawings, top 100), mean of {len(chosen)} queries")
    print()
    print("| phase | ms | share |")
    print("| --- | ---: | ---: |")
    for name in ("drawing", "encoding", "searching", "fusing"):
        mean = statistics.mean(phases[name])
        print(f"| {name} | {mean * 1000:.1f} | {mean / total:.0%} |")
    print()
    print("| end to end | mean ms | max ms |")
    print("| --- | ---: | ---: |")
    print(f"| drawings not cached | {statistics.mean(cold) * 1000:.0f} | {max(cold) * 1000:.0f} |")
    print(f"| drawings cached | {statistics.mean(warm) * 1000:.0f} | {max(warm) * 1000:.0f} |")
    print()
    depth_table(library, encoder, chosen)


def depth_table(library, encoder, chosen) -> None:  # type: ignore[no-untyped-def]
    """Searching and fusing at each fusion depth, drawings cached, top 100."""
    from engine.methods import MethodContext, SearchQuery, resolve_spec

    print(f"### Fusion depth (top 100, drawings cached), mean of {len(chosen)} queries")
    print()
    print("| spec | photos per ranking | searching ms | fusing ms |")
    print("| --- | ---: | ---: | ---: |")
    with tempfile.TemporaryDirectory() as drawings:
        context = MethodContext(library, lambda: encoder, drawings_dir=Path(drawings))
        for text in ("visret:depth=1", "visret", "visret:depth=0"):
            spec = resolve_spec(text)
            spec.run(SearchQuery(chosen[0].text), context, top_k=100)  # draw once
            searching: list[float] = []
            fusing: list[float] = []
            for query in chosen:
                spec.run(SearchQuery(query.text), context, top_k=100)  # drawings into the cache
                timings = spec.run(SearchQuery(query.text), context, top_k=100).details["timings"]
                searching.append(timings["searching"])
                fusing.append(timings["fusing"])
            deep = max(100, spec.params.depth or len(context.searcher.index))
            print(f"| `{text}` | {min(deep, len(context.searcher.index))} | "
                  f"{statistics.mean(searching) * 1000:.1f} | "
                  f"{statistics.mean(fusing) * 1000:.1f} |")  # fmt: skip
    print()


def painter_table(drawings: int = 30) -> None:
    from engine.progress import CancelToken, no_progress
    from engine.visret.painter import DemoPainter

    painter = DemoPainter()
    settings = painter.default_settings()
    prompts = ("a red circle beside a blue square", "three yellow triangles",
               "a tiny green square on a spotted background")  # fmt: skip
    times: list[float] = []
    tracemalloc.start()
    for n in range(drawings):
        started = time.perf_counter()
        painter.draw(prompts[n % len(prompts)], n, settings, no_progress, CancelToken())
        times.append(time.perf_counter() - started)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"### The demo painter, {drawings} drawings of {settings.width}x{settings.height}")
    print()
    print("| per drawing | mean ms | max ms | peak Python memory |")
    print("| --- | ---: | ---: | ---: |")
    print(f"| demo painter | {statistics.mean(times) * 1000:.1f} | {max(times) * 1000:.1f} | "
          f"{peak / 2**20:.1f} MiB |")  # fmt: skip
    print()


if __name__ == "__main__":
    sys.exit(main())
