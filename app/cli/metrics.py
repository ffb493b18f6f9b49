"""`quadrat metrics`: score a TREC run against judgments (docs/SPEC.md §5.4). No Qt, no library.

    quadrat metrics --run RUN.trec --qrels QRELS [--k 50] [--protocol fullrank|rerank]
                    [--ties order|group] [--json]

QRELS may be TREC qrels or an INQUIRE judgments CSV (with or without a `relevant` column).
A malformed file raises `BadInputError`, which the `quadrat` entry point turns into exit code 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from app.cli.args import positive_int
from app.cli.registry import Command
from engine.evaluation.metrics import PROTOCOLS, TIES

if TYPE_CHECKING:  # the scoring is imported by the command: every other command skips it
    from engine.evaluation.metrics import MeanMetrics


def add_ties_option(parser: argparse.ArgumentParser) -> None:
    """`--ties order|group`, the same for `metrics` and `evaluate` (docs/SPEC.md §1.2)."""
    parser.add_argument(
        "--ties",
        default="order",
        choices=TIES,
        help="tied scores: 'order' scores the strict order (ties by the rank column or the base "
        "ranking; the default), 'group' scores AP and nDCG with each tie as one group, as "
        "INQUIRE's code (sklearn) does, so the order inside a tie cannot matter",
    )


def _arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `quadrat metrics`."""
    parser.add_argument("--run", required=True, metavar="RUN.trec", help="TREC run file")
    parser.add_argument(
        "--qrels", required=True, metavar="QRELS", help="TREC qrels or INQUIRE judgments CSV"
    )
    parser.add_argument(
        "--k", type=positive_int, default=50, help="cut-off rank (default: %(default)s)"
    )
    parser.add_argument(
        "--protocol",
        choices=PROTOCOLS,
        default="fullrank",
        help="fullrank: AP normalised by min(k, R); rerank: the run is a fixed candidate set",
    )
    add_ties_option(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def run_metrics_command(args: argparse.Namespace) -> int:
    """Load, score and print; returns the exit code."""
    from engine.evaluation.evaluate import (
        evaluate_run,
        load_judgments,
        load_trec_run,
        metrics_json,
        qrels_for_run,
    )

    run = load_trec_run(args.run)
    judgments = load_judgments(args.qrels)
    qrels = qrels_for_run(run, judgments)
    mean = evaluate_run(run, qrels, args.k, args.protocol, args.ties)
    judged_docids = {docid for relevance in qrels.values() for docid in relevance}
    if (
        run
        and judged_docids
        and not any(docid in judged_docids for results in run.values() for docid, _ in results)
    ):
        # Scores of 0 from a naming mismatch look like a bad system; say so.
        print(
            "warning: no image of the run appears in the judgments; "
            "do both files name images the same way (image id or path)?",
            file=sys.stderr,
        )
    if args.json:
        print(json.dumps({**metrics_json(mean, args.k), "ties": args.ties}))
    else:
        print(_summary_table(mean, args.k, args.protocol, set(run), args.ties))
    return 0


def _summary_table(
    mean: MeanMetrics, k: int, protocol: str, in_run: set[str], ties: str = "order"
) -> str:
    """The human-readable summary. Every query is either averaged or not, and the notes below the
    table say which: under fullrank a judged query the run skipped is averaged with a score of 0;
    under rerank it has no candidates, hence no relevant candidate, and is not averaged."""
    total = len(mean.per_query)
    rows = [
        (
            f"queries ({protocol}{', tied scores grouped' if ties == 'group' else ''})",
            f"{mean.queries} averaged of {total}",
        ),
        (f"mAP@{k}", f"{mean.mAP:.4f}"),
        (f"nDCG@{k}", f"{mean.mean_nDCG:.4f}"),
        (f"MRR@{k}", f"{mean.MRR:.4f}"),
        (f"P@{k}", f"{mean.mean_P:.4f}"),
        (f"R@{k}", f"{mean.mean_R_at_k:.4f}"),
        (f"judged@{k}", f"{mean.mean_judged:.4f}"),
    ]
    width = max(len(name) for name, _ in rows)
    lines = [f"{name:<{width}}  {value}" for name, value in rows]
    missing = [m for m in mean.per_query if m.query_id not in in_run]
    if protocol == "rerank":
        if total > mean.queries:
            lines.append(
                f"{total - mean.queries} queries without relevant candidates are not averaged"
            )
        if missing:
            # evaluate_run lists a query absent from the run only when it has judgments.
            lines.append(
                f"{len(missing)} of them judged but with no results in the run (no candidates)"
            )
    else:
        if total > mean.queries:
            lines.append(
                f"{total - mean.queries} queries without relevant judgments are not averaged"
            )
        scored_zero = sum(1 for m in missing if m.R > 0)
        if scored_zero:
            lines.append(f"{scored_zero} judged queries have no results in the run (scored 0)")
    return "\n".join(lines)


COMMANDS = (
    Command(
        "metrics",
        help="score a TREC run against judgments (mAP@k, nDCG@k, MRR@k)",
        description="Score a TREC run file against judgments (TREC qrels or INQUIRE CSV).",
        add_arguments=_arguments,
        run=run_metrics_command,
    ),
)
