"""`quadrat evaluate`: run benchmark queries against a library with one or more methods, score
them, and compare each method with the first (docs/SPEC.md §5–6)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.cli.args import positive_int
from app.cli.common import EXIT_OK, TqdmProgress
from app.cli.filters import add_filter_options, filters_from_args
from app.cli.methods import lists_methods, method_option_help
from app.cli.metrics import add_ties_option
from app.cli.registry import Command
from engine.errors import BadInputError

if TYPE_CHECKING:
    from engine.benchmarks.runner import CollectionChoice, MethodsBenchmark
    from engine.catalog.library import Library
    from engine.evaluation.evaluate import BenchmarkQuery, BenchmarkResult
    from engine.methods.base import LanguageModelEndpoint
    from engine.models.encoders import Encoder


def _arguments(p: argparse.ArgumentParser) -> None:
    """The options of `quadrat evaluate`."""
    p.add_argument("--queries", required=True, help="queries CSV (INQUIRE format)")
    p.add_argument("--judgments", required=True, help="judgments: INQUIRE CSV or TREC qrels")
    p.add_argument("--library", help="library folder")
    p.add_argument("--model", help="model spec (default: the library's model)")
    p.add_argument("--device", choices=["auto", "cpu", "cuda", "mps"])
    p.add_argument("--protocol", default="fullrank", choices=["fullrank", "rerank"])
    p.add_argument(
        "--candidates",
        metavar="FILE",
        help="rerank: each query's fixed candidates (CSV query_id,image_id,image_path,rank, as "
        "'quadrat import-inquire-rerank' writes it) instead of the top 100 of text search",
    )
    p.add_argument("--k", type=positive_int, default=50)
    p.add_argument(
        "--unit",
        default="photo",
        choices=["photo", "event"],
        help="what the metrics count: photos (the default), or events (an event is ranked at "
        "its best frame and is relevant when any of its frames is judged relevant)",
    )
    add_ties_option(p)
    p.add_argument(
        "--collection",
        action="append",
        metavar="NAME|all",
        help="the collection to rank (its name, folder or id), or 'all'; default: the one "
        "collection that holds every judged photo when exactly one does, else all; give it "
        "again to rank several (judged photos of the others are left out of R)",
    )
    lists_methods(
        p.add_argument(
            "--method",
            action="append",
            help=method_option_help() + "; give it again to compare methods with the first",
        )
    )
    p.add_argument(
        "--permutations",
        type=positive_int,
        default=10_000,
        help="permutations of the paired randomisation test (default: %(default)s)",
    )
    p.add_argument(
        "--generator",
        metavar="SPEC",
        help="text-to-image generator of the methods that draw (visret); default: the "
        "settings' generator, else the demo painter on a demo library",
    )
    p.add_argument("--run-out", help="write the first method's ranked lists as a TREC run file")
    p.add_argument("--json", action="store_true")
    add_filter_options(p, collection=False)


def run_evaluate_command(args: argparse.Namespace) -> int:
    from app.cli.common import load_encoder_for, open_library, resolve_model_spec, user_settings
    from app.settings import language_model
    from engine.benchmarks.runner import BenchmarkRequest, run_request
    from engine.evaluation.evaluate import load_judgments, load_queries_csv, write_trec_run
    from engine.io.export import plain_write_errors
    from engine.methods import resolve_spec

    specs = args.method or ["text"]
    for spec in specs:
        resolve_spec(spec)  # a bad method fails before any model loads
    filters = filters_from_args(args)  # checked before any file is read
    collection, several = _collection_choice(args.collection)
    queries = load_queries_csv(args.queries)
    judgments = load_judgments(args.judgments)
    candidates = None
    if args.candidates:
        from engine.benchmarks.inquire_rerank import load_candidates_csv

        if args.protocol != "rerank":
            raise BadInputError(
                "--candidates fixes the candidates of a rerank: add --protocol rerank"
            )
        candidates = load_candidates_csv(args.candidates)
    llm = language_model(user_settings())
    _draft_contexts(specs, queries, llm)
    with open_library(Path(args.library) if args.library else None) as library:
        if library.model_key is None:
            raise BadInputError(library.no_photos_message("run 'quadrat index FOLDER'"))
        if several:
            filters = dataclasses.replace(filters, collection_ids=_collection_ids(library, several))
        model = resolve_model_spec(args.model, library)
        encoder: list[Encoder] = []

        def encoder_loader() -> Encoder:
            if not encoder:
                encoder.append(load_encoder_for(model, args.device))
            return encoder[0]

        bar = TqdmProgress("evaluating")
        try:
            request = BenchmarkRequest(
                queries,
                judgments,
                specs,
                k=args.k,
                protocol=args.protocol,
                permutations=args.permutations,
                collection=collection,
                generator=args.generator or user_settings().generator,
                llm=llm,
                candidates=candidates,
                filters=filters if filters.active else None,
                ties=args.ties,
                unit=args.unit,
            )
            bench = run_request(library, encoder_loader, request, progress=bar)
        finally:
            bar.close()
        first = bench.results[specs[0]]
        if args.run_out:
            resolver = bench.resolver
            runs = {
                qid: [(resolver.docid(image_id), score) for image_id, score in ranked]
                for qid, ranked in first.runs.items()
            }
            with plain_write_errors(args.run_out, "the run file"):
                write_trec_run(args.run_out, runs, tag=f"quadrat-{specs[0].partition(':')[0]}")
    if first.unresolved_judgments:
        print(
            f"warning: {first.unresolved_judgments} judgments name photos that are not in the "
            "library; they are left out of R",
            file=sys.stderr,
        )
    if bench.unresolved_candidates:
        print(
            f"warning: {bench.unresolved_candidates} candidates name photos that are not in the "
            "ranked collection; they are left out",
            file=sys.stderr,
        )
    filters_note = _filters_note(bench)
    if filters_note:
        print(f"note: {filters_note}", file=sys.stderr)
    note = _ranked(bench).note
    if args.unit == "event":
        note += "; metrics per event (an event counts as relevant when any frame is)"
    if args.json:
        print(f"note: {note}", file=sys.stderr)
        print(json.dumps({**evaluation_json(bench, specs, args.k), "unit": args.unit}))
    else:
        print(f"{note[:1].upper()}{note[1:]}")
        print_tables(bench, specs, args.k)
    return EXIT_OK


def _draft_contexts(
    specs: list[str], queries: list[BenchmarkQuery], llm: LanguageModelEndpoint
) -> None:
    """Before a rerank with `contexts=FILE`, the configured language model drafts the expert
    context of each query the file lacks (the file is made beside the benchmark when missing,
    and kept: a second run drafts nothing). Without a language model the file is read as is."""
    from engine.methods import resolve_spec
    from engine.rerank.context import draft_missing
    from engine.rerank.decompose import LlmDecomposer

    for text in specs:
        spec = resolve_spec(text)
        path = str(getattr(spec.params, "contexts", "") or "").strip()
        if spec.key != "rerank" or not path or not llm.configured:
            continue
        drafter = LlmDecomposer(llm.url, llm.model, llm.api_key)
        pairs = [(q.query_id, q.text) for q in queries]
        drafted, notes = draft_missing(Path(path).expanduser(), pairs, drafter.draft_context)
        if drafted:
            print(f"note: drafted {drafted} expert contexts into {path}", file=sys.stderr)
        for note in notes[:5]:
            print(f"warning: {note}", file=sys.stderr)
        if len(notes) > 5:
            print(f"warning: {len(notes) - 5} more contexts were not drafted", file=sys.stderr)


def _collection_choice(values: list[str] | None) -> tuple[str | None, list[str]]:
    """--collection as given: one value is the collection choice ('all', a name, a folder or
    an id); several rank those collections (all, narrowed by a collection filter)."""
    if not values:
        return None, []
    if len(values) == 1:
        return values[0], []
    if any(v.strip() == "all" for v in values):
        raise BadInputError("--collection: 'all' ranks every collection; give it alone")
    return "all", values


def _ranked(bench: MethodsBenchmark) -> CollectionChoice:
    """What the benchmark ranked, and why."""
    # `run_request` always fills it in; only a MethodsBenchmark built by hand leaves it out.
    assert bench.collections is not None
    return bench.collections


def _collection_ids(library: Library, names: list[str]) -> tuple[int, ...]:
    from engine.search.filters import find_collections

    try:
        return find_collections(library.catalog, names)
    except BadInputError as exc:
        raise BadInputError(f"--collection: {exc}") from None


def _filters_note(bench: MethodsBenchmark) -> str:
    """One line on the filters every ranking was restricted to ("" without filters)."""
    filters = bench.filters
    if filters is None or not filters.without("collection_ids").active:
        return ""
    shown = "; ".join(label for key, label in filters.describe() if key != "collection_ids")
    note = f"every ranking is restricted to the photos passing the filters ({shown})"
    if bench.relevant_outside_filters:
        note += (
            f"; {bench.relevant_outside_filters:,} relevant judgments name photos outside them "
            "and stay in R (no method can find them here)"
        )
    return note


def unjudged_in_top_k(result: BenchmarkResult, query_id: str, judged: float, k: int) -> int:
    """How many of a query's top k photos carry no judgment (judged@k counts the others)."""
    shown = min(k, len(result.runs.get(query_id, ())))
    return max(0, shown - round(judged * k))


def _method_json(bench: MethodsBenchmark, spec: str, k: int) -> dict[str, Any]:
    from engine.evaluation.evaluate import INQUIRE_QUERY_ID, metrics_json

    result = bench.results[spec]
    out: dict[str, Any] = metrics_json(result.mean, k)
    # How far to trust the numbers: the share of each query's top k that carries a judgment.
    out[f"judged@{k}"] = result.mean.mean_judged
    judged = {m.query_id: m.judged for m in result.mean.per_query}
    # An imported benchmark's rows name INQUIRE's own query id too, so they join INQUIRE's.
    inquire_ids = {q.query_id: q.extra.get(INQUIRE_QUERY_ID, "") for q in bench.queries}
    for row in out["per_query"]:
        if inquire_ids.get(row["query_id"]):
            row[INQUIRE_QUERY_ID] = inquire_ids[row["query_id"]]
        row["judged"] = judged[row["query_id"]]
        row["unjudged"] = unjudged_in_top_k(result, row["query_id"], row["judged"], k)
    out["per_supercategory"] = {
        name: {f"mAP@{k}": group.mAP, "queries": group.queries}
        for name, group in bench.per_supercategory(spec).items()
    }
    return out


def _collections_json(bench: MethodsBenchmark) -> dict[str, Any]:
    """Which collections were ranked, and why (docs/SPEC.md §6.2 keys stay as they are)."""
    choice = _ranked(bench)
    match = choice.match
    return {
        "collections": [
            {"id": c.id, "name": c.name, "root": c.root, "photos": c.photos} for c in choice.ranked
        ],
        "all_collections": choice.everything,
        "collection_note": choice.note,
        "judged_collection": match.only.name if match.only is not None else None,
    }


def evaluation_json(bench: MethodsBenchmark, specs: list[str], k: int) -> dict[str, Any]:
    """docs/SPEC.md §6.2: the §5.4 keys of the first method, per supercategory; with two or more
    methods, every method's keys and the paired comparisons with the first."""
    out = _method_json(bench, specs[0], k)
    out["protocol"] = bench.protocol
    out["ties"] = bench.results[specs[0]].ties
    out["method"] = specs[0]
    out["unresolved_judgments"] = bench.results[specs[0]].unresolved_judgments
    out["unresolved_candidates"] = bench.unresolved_candidates
    if bench.filters is not None:
        out["filters"] = bench.filters.to_params()
        out["relevant_outside_filters"] = bench.relevant_outside_filters
    out.update(_collections_json(bench))
    if len(specs) > 1:
        out["methods"] = {spec: _method_json(bench, spec, k) for spec in specs}
        out["comparisons"] = [c.to_json() for c in bench.comparisons]
    return out


def print_tables(bench: MethodsBenchmark, specs: list[str], k: int) -> None:
    """Per query, then the methods side by side overall and per supercategory, then the tests."""
    results = [bench.results[spec] for spec in specs]
    names = [f"m{number}" for number in range(1, len(specs) + 1)]
    for name, spec in zip(names, specs, strict=True):
        print(f"{name} = {spec}")
    _print_per_query(bench, results, names)
    print()
    _print_means(bench, specs, results, names, k)
    _print_notes(bench, results, names, k)


def _print_per_query(
    bench: MethodsBenchmark, results: list[BenchmarkResult], names: list[str]
) -> None:
    """One row per query: R, each method's AP and judged@k, the query's text."""
    texts = {q.query_id: q.text for q in bench.queries}
    header = f"{'query':<10} {'R':>4} " + " ".join(f"{'AP ' + n:>9}" for n in names)
    # judged@k per method: how much of each top k carries a judgment at all.
    header += " " + " ".join(f"{'judged ' + n:>10}" for n in names)
    print(header + "  text")
    per_query = [{m.query_id: m for m in r.per_query} for r in results]
    for m in results[0].per_query:
        cells = " ".join(f"{pq[m.query_id].AP:9.4f}" if m.query_id in pq else f"{'–':>9}"
                         for pq in per_query)  # fmt: skip
        judged = " ".join(f"{pq[m.query_id].judged:10.2f}" if m.query_id in pq else f"{'–':>10}"
                          for pq in per_query)  # fmt: skip
        # Under rerank a query with judgments but no relevant candidate is not averaged.
        note = "" if m.R > 0 else "  (not averaged: R = 0)"
        print(f"{m.query_id:<10} {m.R:4d} {cells} {judged}  {texts.get(m.query_id, '')}{note}")


def _print_means(
    bench: MethodsBenchmark,
    specs: list[str],
    results: list[BenchmarkResult],
    names: list[str],
    k: int,
) -> None:
    """The methods side by side: the means, then mAP@k per supercategory."""
    print(f"{'':<22}" + " ".join(f"{n:>9}" for n in names))
    rows: list[tuple[str, list[float], str]] = [
        ("queries averaged", [r.mean.queries for r in results], "d"),
        (f"mAP@{k}", [r.mean.mAP for r in results], ".4f"),
        (f"nDCG@{k}", [r.mean.mean_nDCG for r in results], ".4f"),
        (f"MRR@{k}", [r.mean.MRR for r in results], ".4f"),
        (f"judged@{k}", [r.mean.mean_judged for r in results], ".4f"),
    ]
    for label, values, fmt in rows:
        print(f"{label:<22}" + " ".join(f"{value:>9{fmt}}" for value in values))
    supercategories = sorted({name for spec in specs for name in bench.per_supercategory(spec)})
    for name in supercategories:
        groups = [bench.per_supercategory(spec).get(name) for spec in specs]
        cells = " ".join(f"{g.mAP:9.4f}" if g is not None else f"{'–':>9}" for g in groups)
        count = next((g.queries for g in groups if g is not None), 0)
        print(f"{'  ' + name[:14] + f' ({count})':<22}{cells}")


def _print_notes(
    bench: MethodsBenchmark, results: list[BenchmarkResult], names: list[str], k: int
) -> None:
    """What the means are over, what judged@k says, and each method against m1."""
    print(
        f"mean over {results[0].mean.queries} queries ({bench.protocol}"
        f"{', tied scores grouped' if results[0].ties == 'group' else ''}); "
        f"supercategory rows are mAP@{k}"
    )
    unjudged = 1.0 - results[0].mean.mean_judged
    if unjudged > 0:
        print(
            f"judged@{k}: the share of a query's top {k} that carries a judgment; the other "
            f"{unjudged:.0%} (m1, on average) count as not relevant"
        )
    for c, name in zip(bench.comparisons, names[1:], strict=True):
        print(
            f"{name} - m1: ΔmAP@{k} {c.delta:+.4f}, 95% CI [{c.ci95[0]:+.4f}, {c.ci95[1]:+.4f}], "
            f"p = {c.p:.4f} (paired randomisation test over {c.queries} queries)"
        )


COMMANDS = (
    Command(
        "evaluate",
        help="run INQUIRE-style benchmark queries and score them",
        add_arguments=_arguments,
        run=run_evaluate_command,
    ),
)
