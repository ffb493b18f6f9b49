"""`quadrat agreement` and `quadrat certify`: how far judges agree, and recall with a guarantee.

    quadrat agreement --query ID_OR_TEXT [--json]
    quadrat certify --query ID_OR_TEXT [--target 0.9] [--confidence 0.95] [--next N] [--json]

`agreement` reads each judge's newest judgment of each photo (`judgment_events`) and prints raw
agreement, Fleiss' kappa and Krippendorff's alpha with bootstrap intervals, and per pair of
judges Cohen's kappa and the confusion table. `certify` says where the query stands against a
recall target by the quantile stopping rule (engine/judgments/certified_recall.py): which
photos of the random sample, or of the ranking's top, to judge next, or that the target is
reached with the guarantee.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from app.cli_common import EXIT_OK, open_library, saved_query_id
from app.cli_feedback import _encoder_loader, _model_options
from engine.errors import BadInputError


def _share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value > 1.0:
        value /= 100.0  # "90" means 90 %
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1 (or 1 and 100 %), not {text}")
    return value


def add_judges_commands(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    agreement = subparsers.add_parser(
        "agreement",
        help="how far the judges of a saved query agree (kappa, alpha, confusion tables)",
        description="Agreement among the judges of a saved query, over the photos judged by "
        "two or more of them: raw agreement, Fleiss' kappa, Krippendorff's alpha (with 95 %% "
        "bootstrap intervals over photos), and Cohen's kappa with the confusion table per pair.",
    )
    agreement.add_argument("--query", required=True, metavar="ID_OR_TEXT", help="saved query")
    agreement.add_argument("--library", type=Path, help="library folder")
    agreement.add_argument("--json", action="store_true", help="print one JSON object")
    agreement.set_defaults(func=run_agreement_command)

    certify = subparsers.add_parser(
        "certify",
        help="certify a saved query's recall (e.g. 90 %% at 95 %%) with a stopping rule",
        description="Where a saved query stands against a recall target by the quantile "
        "stopping rule of Lewis, Yang & Frieder (2021): judge a random sample until it holds "
        "enough relevant photos, then the ranking's top down to the rule's stop.",
    )
    certify.add_argument("--query", required=True, metavar="ID_OR_TEXT", help="saved query")
    certify.add_argument("--library", type=Path, help="library folder")
    certify.add_argument("--target", type=_share, default=0.9, help="recall to reach (0.9)")
    certify.add_argument(
        "--confidence", type=_share, default=0.95, help="confidence of the guarantee (0.95)"
    )
    certify.add_argument(
        "--next", type=int, default=20, metavar="N", help="list up to N photos to judge next"
    )
    _model_options(certify)
    certify.add_argument("--json", action="store_true", help="print one JSON object")
    certify.set_defaults(func=run_certify_command)


def run_agreement_command(args: argparse.Namespace) -> int:
    from engine.judgments.agreement import judge_ratings, measure_agreement

    with open_library(args.library) as library:
        query_id = saved_query_id(library, args.query)
        agreement = measure_agreement(judge_ratings(library, query_id), seed=query_id)
    if args.json:
        print(json.dumps({"query_id": query_id, **agreement.to_json()}))
        return EXIT_OK
    for line in agreement.summary_lines():
        print(line)
    return EXIT_OK


def run_certify_command(args: argparse.Namespace) -> int:
    from engine.methods.feedback import certify_for_query
    from engine.search.searcher import Searcher

    if args.next < 0:
        raise BadInputError("--next must be 0 or more")
    with open_library(args.library) as library:
        query_id = saved_query_id(library, args.query)
        loader = _encoder_loader(args, library)
        state = certify_for_query(
            library, loader, query_id, target=args.target, confidence=args.confidence,
            batch=max(args.next, 1),
        )  # fmt: skip
        shown = state.next_ids[: args.next]
        hits = Searcher(library, loader()).hits_for([(i, 0.0) for i in shown]) if shown else []
    if args.json:
        out = {"query_id": query_id, **state.to_json()}
        out["next"] = [{"image_id": h.image_id, "path": h.path} for h in hits]
        print(json.dumps(out))
        return EXIT_OK
    print(state.summary())
    if hits:
        where = "random sample" if state.phase == "sample" else "ranking's top"
        print(f"judge these next ({where}; mark them in the window, or import their judgments):")
        for hit in hits:
            print(f"  {hit.image_id:>8}  {hit.path}")
    return EXIT_OK
