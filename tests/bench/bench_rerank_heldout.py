"""Reranked's scorers side by side on held-out demo queries: Text, the CLIP scorer and the demo
answering model (the default on a demo library), with paired tests per group.

Run on demand (a few minutes on 2 cores):

    python tests/bench/bench_rerank_heldout.py [--benchmark heldout|demo] [--fusions] [--workdir DIR]

`heldout` (the default) writes a demo-world collection of its own: `heldout_queries()` (pair
groups, counts, sizes, backgrounds and occlusion the demo benchmark does not ask, and the 12
species), photos drawn from seed purpose `PURPOSE_HELDOUT`, never the demo collection's nor
the answering model's training data; `demo` runs the demo benchmark itself (its 60 queries).
Indexes it with the demo model and prints Markdown tables on stdout: mAP@k per category and
for binding and count together, then the paired randomisation test and bootstrap interval of
each scorer against Text and of the demo model against CLIP. Built-in subqueries, depth 100.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "2")

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

SPECS = ("text", "rerank:scorer=clip,depth=100", "rerank:scorer=demo,depth=100")
# The answering model's other pool orders (`engine.rerank.demo.FUSIONS`), with --fusions; they
# reuse the default's cached answers, so they cost only their base searches.
OTHER_FUSIONS = tuple(
    f"rerank:scorer=demo:{f},depth=100" for f in ("prior-kind", "tie", "mean", "rrf", "rrf-tie")
)
FOCUS = ("binding", "count")  # the groups the default must lift, tested together too


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--benchmark", choices=["heldout", "demo"], default="heldout")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--permutations", type=int, default=10_000)
    parser.add_argument("--workdir", type=Path, help="keep the collection and library here")
    parser.add_argument("--fusions", action="store_true", help="also the other pool orders")
    args = parser.parse_args()
    specs = list(SPECS) + (list(OTHER_FUSIONS) if args.fusions else [])

    from engine.benchmarks.runner import run_methods
    from engine.catalog.library import Library
    from engine.demo.collection import write_demo_collection
    from engine.demo.scenes import PURPOSE_HELDOUT, heldout_queries
    from engine.evaluation.evaluate import load_judgments, load_queries_csv
    from engine.indexing.indexer import Indexer
    from engine.models.encoders import load_encoder

    with tempfile.TemporaryDirectory() as scratch:
        tmp = Path(args.workdir or scratch) / args.benchmark
        started = time.perf_counter()
        if args.benchmark == "heldout":
            collection = write_demo_collection(
                tmp / "photos", images_per_class=20, photos_per_query=10,
                queries=heldout_queries(), purpose=PURPOSE_HELDOUT,
            )  # fmt: skip
        else:
            collection = write_demo_collection(tmp / "photos")
        encoder = load_encoder("demo", device="cpu")
        library = Library.open(tmp / "lib")
        Indexer(library, encoder).run(collection.root)
        log(f"{collection.image_count} photos indexed in {time.perf_counter() - started:.1f} s")
        queries = load_queries_csv(collection.queries_path)
        judgments = load_judgments(collection.judgments_path)
        started = time.perf_counter()
        bench = run_methods(
            library, lambda: encoder, queries, judgments, specs, k=args.k,
            permutations=args.permutations,
        )  # fmt: skip
        seconds = time.perf_counter() - started
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        print(f"Python {platform.python_version()}, {os.cpu_count()} CPUs (load {load:.1f}), "
              f"demo model, {args.benchmark} benchmark ({len(queries)} queries, "
              f"{collection.image_count} photos), k = {args.k}, depth 100, built-in "
              f"subqueries; the {len(specs)} methods ran in {seconds:.0f} s")  # fmt: skip
        print()
        tables(bench, queries, specs, args.k, args.permutations)
        library.close()
    return 0


def tables(bench, queries, specs, k: int, permutations: int) -> None:  # type: ignore[no-untyped-def]
    from statistics import mean

    from engine.evaluation.significance import compare

    ap = {s: {m.query_id: m.AP for m in bench.results[s].per_query if m.R > 0} for s in specs}
    category = {q.query_id: q.extra.get("category", "") or "" for q in queries}
    every = sorted(ap["text"])
    groups: list[tuple[str, list[str]]] = [("**all**", every)]
    groups.append(("binding + count", [q for q in every if category[q] in FOCUS]))
    for name in sorted(set(category.values())):
        groups.append((name, [q for q in every if category[q] == name]))
    print(f"#### mAP@{k}")
    print()
    print("| group | queries | " + " | ".join(f"`{s}`" for s in specs) + " |")
    print("| --- | ---: |" + " ---: |" * len(specs))
    for name, ids in groups:
        values = [mean(ap[s][q] for q in ids) for s in specs]
        print(f"| {name} | {len(ids)} | " + " | ".join(f"{v:.3f}" for v in values) + " |")
    print()
    print("#### Paired tests (randomisation p, bootstrap 95 % CI of ΔAP)")
    print()
    print("| method | against | group | queries | ΔmAP | 95 % CI | p |")
    print("| --- | --- | --- | ---: | ---: | --- | ---: |")
    pairs = [(s, specs[0]) for s in specs[1:]] + [(s, specs[1]) for s in specs[2:]]
    for method, baseline in pairs:
        for name, ids in groups:
            c = compare(method, {q: ap[method][q] for q in ids}, baseline,
                        {q: ap[baseline][q] for q in ids}, permutations)  # fmt: skip
            print(f"| `{method}` | `{baseline}` | {name} | {c.queries} | {c.delta:+.3f} | "
                  f"[{c.ci95[0]:+.3f}, {c.ci95[1]:+.3f}] | {c.p:.4f} |")  # fmt: skip
    print()
    example = [q for q in queries if q.text == "a red circle beside a blue square"]
    if example:
        qid = example[0].query_id
        print("| `" + example[0].text + "` | " + " | ".join(
            f"`{s}` AP@{k} {ap[s].get(qid, float('nan')):.3f}" for s in specs) + " |")  # fmt: skip
        print()


if __name__ == "__main__":
    sys.exit(main())
