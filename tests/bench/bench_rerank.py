"""Structured reranking on the demo benchmark, with the CLIP scorer.

Run on demand (several minutes on 2 cores):

    python tests/bench/bench_rerank.py [--k 10] [--permutations 10000] [--scorer clip] [--workdir DIR]

Writes the full demo collection, indexes it with the demo model, and prints Markdown tables on
stdout (progress on stderr): mAP@k of `text`, `rerank` (built-in subqueries) and rerank with
subqueries written the way a user would write them for each kind of query, overall, per
supercategory and per category, with the paired randomisation test and bootstrap interval
against text (overall, per supercategory and per category); then the scoring cost (seconds).

The user-written subqueries follow a few generic patterns (an object, two related objects, a
count, a size, a background, an occlusion), read from the query's words, never per query.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import sys
import tempfile
import time
from pathlib import Path

for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "2")

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

USER = "rerank + user subqueries"
_NUMBERS = {"two": 2, "three": 3, "four": 4, "five": 5}


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def user_subqueries(query: str) -> str:
    """The questions a user would type for a query of each kind ("X beside/above Y", "N Xs",
    "a tiny X", "X on a B background", "X partly hidden behind B"), ";"-separated."""
    from engine.rerank.decompose import split_relation

    text = " ".join(query.lower().split())
    count = re.match(r"^(two|three|four|five)\s+(.+?)s$", text)
    if count:
        n, thing = count.groups()
        return f"{thing};Are there {n} {thing}s in this image?"
    size = re.match(r"^an?\s+(tiny|large|small|big)\s+(.+)$", text)
    if size:
        word, thing = size.groups()
        return f"{thing};Is the {thing} {word}?"
    hidden = re.match(r"^an?\s+(.+?)\s+partly hidden behind\s+(.+)$", text)
    if hidden:
        thing, cover = hidden.groups()
        return f"{thing};Is the {thing} partly hidden behind {cover}?"
    background = re.match(r"^an?\s+(.+?)\s+on an?\s+(\w+) background$", text)
    if background:
        thing, pattern = background.groups()
        return f"{thing};Is the background {pattern}?"
    relation = split_relation(text)
    if relation:
        x, rel, y = (re.sub(r"^(?:a|an|the)\s+", "", part) for part in relation)
        if rel in ("beside", "next to", "and", "with", "near"):
            return f"{x};{y}"
        return f"{x};{y};Is the {x} {rel} the {y}?"
    return f"Does this image show {text}?"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--permutations", type=int, default=10_000)
    parser.add_argument("--scorer", default="clip")
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument(
        "--workdir", type=Path, help="keep the demo collection and library here (reused next run)"
    )
    args = parser.parse_args()

    from engine.benchmarks.runner import run_methods
    from engine.catalog.library import Library
    from engine.demo.collection import write_demo_collection
    from engine.evaluation.evaluate import load_judgments, load_queries_csv
    from engine.indexing.indexer import Indexer
    from engine.models.encoders import load_encoder

    builtin = f"rerank:scorer={args.scorer},depth={args.depth}"
    specs = ["text", builtin]
    with tempfile.TemporaryDirectory() as scratch:
        tmp = str(args.workdir) if args.workdir else scratch
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
            library, lambda: encoder, queries, judgments, specs, k=args.k,
            permutations=args.permutations,
        )  # fmt: skip
        builtin_seconds = time.perf_counter() - started
        log(f"text and built-in rerank in {builtin_seconds:.1f} s")
        # User-written subqueries differ per query, so each query runs on its own.
        started = time.perf_counter()
        user_ap: dict[str, float] = {}
        for query in queries:
            spec = f"{builtin},subqueries={user_subqueries(query.text)}"
            one = run_methods(library, lambda: encoder, [query], judgments, [spec], k=args.k,
                              permutations=10)  # fmt: skip
            for m in one.results[spec].per_query:
                user_ap[m.query_id] = m.AP
        user_seconds = time.perf_counter() - started
        log(f"rerank with user subqueries in {user_seconds:.1f} s")
        print(f"Python {platform.python_version()}, {os.cpu_count()} CPUs, demo model, "
              f"k = {args.k}, depth = {args.depth}, scorer = {args.scorer}")  # fmt: skip
        print()
        tables(bench, specs, user_ap, queries, args.k, args.permutations)
        print("| run | seconds |")
        print("| --- | ---: |")
        print(f"| text + built-in rerank, {len(queries)} queries | {builtin_seconds:.1f} |")
        print(f"| user-subquery rerank, {len(queries)} queries (cache warm for "
              f"shared questions) | {user_seconds:.1f} |")  # fmt: skip
        print()
        library.close()
    return 0


def tables(bench, specs, user_ap, queries, k: int, permutations: int) -> None:  # type: ignore[no-untyped-def]
    from statistics import mean

    from engine.evaluation.significance import compare

    per_query = {
        spec: {m.query_id: m.AP for m in bench.results[spec].per_query if m.R > 0} for spec in specs
    }
    per_query[USER] = {q: ap for q, ap in user_ap.items() if q in per_query["text"]}
    columns = [*specs, USER]
    groups: dict[str, dict[str, str]] = {"supercategory": {}, "category": {}}
    for q in queries:
        for column in groups:
            groups[column][q.query_id] = q.extra.get(column, "") or ""

    def row(name: str, ids: list[str]) -> str:
        values = [mean(per_query[c][q] for q in ids if q in per_query[c]) for c in columns]
        return f"| {name} | {len(ids)} | " + " | ".join(f"{v:.3f}" for v in values) + " |"

    every = sorted(per_query["text"])
    print(f"### mAP@{k} (fullrank), the demo benchmark")
    print()
    print("| group | queries | " + " | ".join(f"`{c}`" for c in columns) + " |")
    print("| --- | ---: |" + " ---: |" * len(columns))
    print(row("**all**", every))
    for names in groups.values():
        for name in sorted(set(names.values())):
            print(row(name, [q for q in every if names[q] == name]))
    print()
    print("### Paired tests against `text` (randomisation p, bootstrap 95 % CI of ΔAP)")
    print()
    print("| method | group | queries | ΔmAP | 95 % CI | p |")
    print("| --- | --- | ---: | ---: | --- | ---: |")
    named = [(None, "all")] + [
        (names, group) for names in groups.values() for group in sorted(set(names.values()))
    ]
    for spec in columns[1:]:
        for names, group in named:
            ids = [q for q in every if names is None or names[q] == group]
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


if __name__ == "__main__":
    sys.exit(main())
