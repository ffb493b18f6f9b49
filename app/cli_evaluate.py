"""`quadrat evaluate`: run benchmark queries against a library and score them (SPEC.md §5)."""

from __future__ import annotations

import argparse
import json
import sys

from app.cli_args import positive_int
from engine.errors import BadInputError


def add_evaluate_command(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser("evaluate", help="run INQUIRE-style benchmark queries and score them")
    p.add_argument("--queries", required=True, help="queries CSV (INQUIRE format)")
    p.add_argument("--judgments", required=True, help="judgments: INQUIRE CSV or TREC qrels")
    p.add_argument("--library", help="library folder")
    p.add_argument("--model", help="model spec (default: the library's model)")
    p.add_argument("--device", choices=["auto", "cpu", "cuda", "mps"])
    p.add_argument("--protocol", default="fullrank", choices=["fullrank", "rerank"])
    p.add_argument("--k", type=positive_int, default=50)
    p.add_argument("--method", default="text", choices=["text", "visret", "rerank", "hybrid"])
    p.add_argument("--run-out", help="write the ranked lists as a TREC run file")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run_evaluate_command)


def run_evaluate_command(args: argparse.Namespace) -> int:
    from pathlib import Path

    from app.cli import load_encoder_for, open_library, resolve_model_spec
    from engine.benchmark import JudgmentResolver, candidate_lists, method_search
    from engine.evaluate import (
        load_judgments,
        load_queries_csv,
        metrics_json,
        run_benchmark,
        write_trec_run,
    )
    from engine.search import Searcher

    queries = load_queries_csv(args.queries)
    judgments = load_judgments(args.judgments)
    with open_library(Path(args.library) if args.library else None) as library:
        if library.model_key is None:
            raise BadInputError("the library has no indexed photos yet: run 'quadrat index FOLDER'")
        encoder = load_encoder_for(resolve_model_spec(args.model, library), args.device)
        searcher = Searcher(library, encoder)
        resolver = JudgmentResolver(library)
        depth = max(args.k, 100)
        result = run_benchmark(
            queries,
            judgments,
            method_search(searcher, args.method, depth),
            resolver,
            k=args.k,
            protocol=args.protocol,
            candidates=candidate_lists(searcher) if args.protocol == "rerank" else None,
        )
        if args.run_out:
            runs = {
                qid: [(resolver.docid(image_id), score) for image_id, score in ranked]
                for qid, ranked in result.runs.items()
            }
            write_trec_run(args.run_out, runs, tag=f"quadrat-{args.method}")
    if result.unresolved_judgments:
        print(
            f"warning: {result.unresolved_judgments} judgments name photos that are not in the "
            "library; they are left out of R",
            file=sys.stderr,
        )
    if args.json:
        out = metrics_json(result.mean, args.k)
        out["protocol"] = args.protocol
        out["method"] = args.method
        out["unresolved_judgments"] = result.unresolved_judgments
        print(json.dumps(out))
        return 0
    k = args.k
    print(f"{'query':<10} {'AP@' + str(k):>8} {'nDCG@' + str(k):>9} {'RR':>6} {'R':>5}  text")
    texts = {q.query_id: q.text for q in queries}
    for m in result.mean.per_query:
        print(
            f"{m.query_id:<10} {m.AP:8.4f} {m.nDCG:9.4f} {m.RR:6.3f} {m.R:5d}  {texts.get(m.query_id, '')}"
        )
    mean = result.mean
    print(
        f"mean over {mean.queries} queries ({args.protocol}, {args.method}): "
        f"mAP@{k} {mean.mAP:.4f}  nDCG@{k} {mean.mean_nDCG:.4f}  MRR@{k} {mean.MRR:.4f}"
    )
    for column, groups in result.by_category.items():
        for value, group in sorted(groups.items()):
            print(f"  {column}={value}: mAP@{k} {group.mAP:.4f} over {group.queries} queries")
    return 0
