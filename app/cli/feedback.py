"""`quadrat refine` and `quadrat estimate`: learning from a query's judgments (docs/SPEC.md §6.3).

    quadrat refine --query ID --method rocchio|probe|more-like-these [--min-p 0.9] [--json]
    quadrat estimate --query ID [--sample N] [--json]

`refine` saves the refined ranking as a new run of the query (its params name the run it came
from) and prints its top results with the metrics of both runs against the judgments so far;
`--min-p` lists instead the photos judged relevant and every unjudged photo whose calibrated
probability (the probe's) is at least p, for an export. `estimate` prints "found 37 of about 45 (90 %: 40–55)" and, with `--sample N`,
the photos to judge that tighten it most.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.cli.args import positive_int
from app.cli.common import EXIT_OK, load_encoder_for, open_library, resolve_model_spec
from app.cli.registry import Command
from engine.errors import BadInputError

if TYPE_CHECKING:
    from collections.abc import Callable

    from engine.catalog.library import Library
    from engine.evaluation.live import LiveMetrics
    from engine.methods.feedback import Refinement
    from engine.models.encoders import Encoder
    from engine.search.searcher import SearchHit

DEFAULT_SAVED = 100  # a refinement's run keeps at least this many results (as the window's do)


def _probability(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a probability such as 0.9, got {text!r}"
        ) from None
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"expected a probability between 0 and 1, got {value}")
    return value


def _refine_arguments(refine: argparse.ArgumentParser) -> None:
    """The options of `quadrat refine`."""
    refine.add_argument("--query", type=positive_int, required=True, help="saved query id")
    refine.add_argument(
        "--method",
        required=True,
        metavar="rocchio|probe|more-like-these",
        help="the learning method, optionally with parameters (e.g. rocchio:beta=1)",
    )
    refine.add_argument("--library", type=Path, help="library folder")
    _model_options(refine)
    refine.add_argument("--top", type=positive_int, default=20, help="results printed")
    refine.add_argument("--k", type=positive_int, default=50, help="metrics cut-off")
    refine.add_argument(
        "--from-run", type=positive_int, help="the run refined (default: the query's newest)"
    )
    refine.add_argument(
        "--min-p",
        type=_probability,
        metavar="P",
        help="list the photos judged relevant and every unjudged photo whose calibrated "
        "probability of relevance is at least P (--method probe), for an export",
    )
    refine.add_argument("--json", action="store_true", help="print one JSON object")


def _estimate_arguments(estimate: argparse.ArgumentParser) -> None:
    """The options of `quadrat estimate`."""
    estimate.add_argument("--query", type=positive_int, required=True, help="saved query id")
    estimate.add_argument("--library", type=Path, help="library folder")
    _model_options(estimate)
    estimate.add_argument(
        "--sample",
        type=positive_int,
        metavar="N",
        help="also list N photos to judge that tighten the estimate most",
    )
    estimate.add_argument("--json", action="store_true", help="print one JSON object")


def _model_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", help="model spec (default: the library's model)")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda", "mps"])


def _encoder_loader(args: argparse.Namespace, library: Library) -> Callable[[], Encoder]:
    if library.model_key is None:
        raise BadInputError(library.no_photos_message("run 'quadrat index FOLDER'"))
    loaded: list[Encoder] = []

    def loader() -> Encoder:
        if not loaded:
            loaded.append(load_encoder_for(resolve_model_spec(args.model, library), args.device))
        return loaded[0]

    return loader


def _metrics_json(live: LiveMetrics | None) -> dict[str, Any] | None:
    if live is None:  # no metrics of the run refined from (refine_query always has them)
        return None
    m, k = live.metrics, live.k
    return {
        "run_id": live.run_id,
        f"AP@{k}": m.AP,
        f"nDCG@{k}": m.nDCG,
        f"RR@{k}": m.RR,
        f"P@{k}": m.P,
        f"R@{k}": m.R_at_k,
        f"judged@{k}": m.judged,
        "relevant_judged": m.R,
        "trailing_nonrelevant": live.trailing_nonrelevant,
    }


def _metrics_lines(refinement: Refinement) -> list[str]:
    new, old = refinement.metrics, refinement.from_metrics
    if old is None:  # no metrics of the run refined from (refine_query always has them)
        return []
    k = new.k
    rows = [
        (f"AP@{k}", "AP"),
        (f"nDCG@{k}", "nDCG"),
        (f"MRR@{k}", "RR"),
        (f"P@{k}", "P"),
        (f"R@{k}", "R_at_k"),
        (f"judged@{k}", "judged"),
    ]
    before = f"run {old.run_id} ({refinement.from_method})"
    after = f"run {new.run_id} ({refinement.method})"
    width = max(len(before), 8)
    judged = len(refinement.judgments)
    relevant = sum(1 for r in refinement.judgments.values() if r > 0)
    lines = [
        f"metrics against the {judged} judgments so far ({relevant} relevant):",
        f"{'':<12}{before:>{width}}  {after}",
    ]
    for label, name in rows:
        lines.append(
            f"{label:<12}{getattr(old.metrics, name):>{width}.4f}  {getattr(new.metrics, name):.4f}"
        )
    lines.append(
        f"{'stop rule':<12}{old.trailing_nonrelevant:>{width}}  {new.trailing_nonrelevant}"
        "  (non-relevant in a row after the last relevant)"
    )
    return lines


def run_refine_command(args: argparse.Namespace) -> int:
    from engine.methods.feedback import learning_spec, photos_above, refine_query
    from engine.search.searcher import Searcher

    spec = learning_spec(args.method)  # a bad method fails before any model loads
    if args.min_p is not None and spec.key != "probe":
        raise BadInputError("--min-p needs --method probe: only the probe gives probabilities")
    with open_library(args.library) as library:
        loader = _encoder_loader(args, library)
        refinement = refine_query(
            library,
            loader,
            args.query,
            spec,
            from_run=args.from_run,
            top_k=max(args.top, DEFAULT_SAVED),
        )
        chances = refinement.probabilities
        likely = None
        if args.min_p is not None:
            likely = photos_above(library, loader, args.query, args.min_p, params=spec.params)
            pairs = [(image_id, math.nan) for image_id, _ in likely.ranking]
            by_id = likely.probabilities
        else:
            pairs = refinement.ranking.pairs()[: args.top]
            by_id = (
                dict(zip(refinement.ranking.ids, chances, strict=True))
                if chances is not None
                else {}
            )
        scores = dict(refinement.ranking.pairs())
        hits = Searcher(library, loader()).hits_for(pairs)
    if args.json:
        results = []
        for hit in hits:
            row = hit.to_json()
            row["score"] = round(float(scores.get(hit.image_id, math.nan)), 6)
            if hit.image_id in by_id:
                row["p"] = round(by_id[hit.image_id], 6)
            if likely is not None:  # a judged photo's p is its judgment: it is known
                row["judged"] = hit.image_id in refinement.judgments
            if math.isnan(row["score"]):
                row["score"] = None  # deeper than the saved run
            results.append(row)
        out: dict[str, Any] = {
            "query_id": refinement.query_id,
            "run_id": refinement.run_id,
            "from_run": refinement.from_run,
            "method": refinement.method,
            "judged": len(refinement.judgments),
            "relevant": sum(1 for r in refinement.judgments.values() if r > 0),
            "metrics": _metrics_json(refinement.metrics),
            "from_metrics": _metrics_json(refinement.from_metrics),
            "details": refinement.ranking.details,
            "notes": refinement.notes,
            "results": results,
        }
        if likely is not None:
            out["min_p"] = args.min_p
            out["likely"] = likely.summary()
        print(json.dumps(out, default=str))
        return EXIT_OK
    print(
        f"run {refinement.run_id} ({refinement.method}) saved for query {refinement.query_id}, "
        f"from run {refinement.from_run} ({refinement.from_method})"
    )
    for note in refinement.notes:
        print(f"note: {note}")
    if likely is not None:
        print(f"{len(hits)} photos: {likely.summary()}:")
    for hit in hits:
        p = f"  p={by_id[hit.image_id]:.3f}" if hit.image_id in by_id else ""
        if likely is not None and hit.image_id in refinement.judgments:
            p = "  judged relevant"
        name = f"  {hit.taxon}" if hit.taxon else ""
        score = scores.get(hit.image_id)
        shown = f"{score:.4f}" if score is not None else "   -  "
        print(f"{hit.rank:4d}  {shown}{p}  {hit.path}{name}")
    for line in _metrics_lines(refinement):
        print(line)
    return EXIT_OK


def run_estimate_command(args: argparse.Namespace) -> int:
    from engine.methods.feedback import estimate_for_query, sample_for_query
    from engine.search.searcher import Searcher

    with open_library(args.library) as library:
        loader = _encoder_loader(args, library)
        estimate = estimate_for_query(library, loader, args.query)
        sample: list[SearchHit] = []
        if args.sample:
            ids = sample_for_query(library, loader, args.query, args.sample)
            sample = Searcher(library, loader()).hits_for([(i, 0.0) for i in ids])
    if args.json:
        out = {"query_id": args.query, **estimate.to_json()}
        if args.sample:
            out["sample"] = [{"image_id": h.image_id, "path": h.path} for h in sample]
        print(json.dumps(out))
        return EXIT_OK
    print(estimate.summary())
    if estimate.complete:
        print(estimate.note)
    if args.sample:
        print(
            f"judge these {len(sample)} photos (random samples of the score bands; mark them in "
            "the window, or import their judgments) to tighten it:"
        )
        for hit in sample:
            print(f"  {hit.image_id:>8}  {hit.path}")
    return EXIT_OK


COMMANDS = (
    Command(
        "refine",
        help="refine a saved query from its judgments (saved as a new run)",
        description="Refine a saved query from its judgments with rocchio, probe or "
        "more-like-these; the ranking is saved as a new run of the query.",
        add_arguments=_refine_arguments,
        run=run_refine_command,
    ),
    Command(
        "estimate",
        help="estimate how many relevant photos a saved query has, and how many are unseen",
        description="Estimate from the judgments (the judged top of the query's ranking and "
        "random samples of score bands below it) how many relevant photos the library holds.",
        add_arguments=_estimate_arguments,
        run=run_estimate_command,
    ),
)
