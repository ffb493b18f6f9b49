"""`quadrat agreement`, `quadrat adjudicate` and `quadrat certify`: how far judges agree,
settling their disagreements, and recall with a guarantee.

    quadrat agreement --query ID_OR_TEXT [--term TERM] [--json]
    quadrat adjudicate --query ID_OR_TEXT (--list | --image ID (--relevant | --not-relevant |
        --clear)) [--judge NAME] [--json]
    quadrat certify --query ID_OR_TEXT [--target 0.9] [--confidence 0.95] [--next N] [--record]
        [filters: --taxon, --deployment, --date-from, ...] [--events] [--judge NAME] [--json]

`agreement` reads each judge's newest judgment of each photo (`judgment_events`) and prints raw
agreement, Fleiss' kappa and Krippendorff's alpha with bootstrap intervals, and per pair of
judges Cohen's kappa and the confusion table, then one line per Darwin Core term two judges gave
values for; `--term lifeStage` measures that term's values instead (each judge's newest value
per photo, `attribute_events`). `certify` says where the query stands against a
recall target by the stratified rule (engine/judgments/certified_recall.py), over the photos
passing the filter flags (the window's chips) and as events with `--events`: its plan and what
it costs, which photos of the ranking's top, the random sample or the review to judge next, or
that the target is reached with the guarantee (`--record` keeps a certified result with the
query, for exports).
`adjudicate` lists the photos judges disagree on, or records the judgment that settles one (an
event of its own kind, which metrics and exports then use). `--judge NAME` (here, on `quadrat
import`) names who acts; without it the server login on PostgreSQL, else the OS user.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from app.cli.common import EXIT_OK, open_library, saved_query_id
from app.cli.feedback import _encoder_loader, _model_options
from app.cli.filters import add_filter_options, filters_from_args
from app.cli.registry import Command
from engine.errors import BadInputError, QuadratError

if TYPE_CHECKING:
    from engine.catalog.library import Library


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


def add_judge_option(parser: argparse.ArgumentParser) -> None:
    """`--judge NAME`: who makes the judgments a command writes."""
    parser.add_argument(
        "--judge", metavar="NAME", default=None,
        help="who is judging (default: the PostgreSQL login on a server catalog, else the OS "
        "user); a judgments CSV's judge column wins over it",
    )  # fmt: skip


def add_export_judge_option(parser: argparse.ArgumentParser) -> None:
    """`quadrat export judgments --judge NAME|majority|adjudicated`."""
    parser.add_argument(
        "--judge", dest="judges_view", metavar="NAME|majority|adjudicated", default=None,
        help="judgments: whose to write: one judge's, the judges' majority, or the adjudicated "
        "ones only (default: the newest per photo, adjudicated where settled)",
    )  # fmt: skip


def _agreement_arguments(agreement: argparse.ArgumentParser) -> None:
    """The options of `quadrat agreement`."""
    agreement.add_argument("--query", required=True, metavar="ID_OR_TEXT", help="saved query")
    agreement.add_argument("--library", type=Path, help="library folder")
    agreement.add_argument(
        "--term", metavar="TERM",
        help="agreement on a Darwin Core attribute (lifeStage, sex, ...) instead of relevance",
    )  # fmt: skip
    agreement.add_argument("--json", action="store_true", help="print one JSON object")


def _certify_arguments(certify: argparse.ArgumentParser) -> None:
    """The options of `quadrat certify`."""
    certify.add_argument("--query", required=True, metavar="ID_OR_TEXT", help="saved query")
    certify.add_argument("--library", type=Path, help="library folder")
    certify.add_argument("--target", type=_share, default=0.9, help="recall to reach (0.9)")
    certify.add_argument(
        "--confidence", type=_share, default=0.95, help="confidence of the guarantee (0.95)"
    )
    certify.add_argument(
        "--next", type=int, default=20, metavar="N", help="list up to N photos to judge next"
    )
    certify.add_argument(
        "--record", action="store_true",
        help="when certified, keep the result (target, confidence, judgments spent, rule) with "
        "the query: judgment exports and the Darwin Core archive's methods text name it",
    )  # fmt: skip
    certify.add_argument(
        "--events", action="store_true",
        help="certify events rather than photos (as View › Group results by event shows them: "
        "an event is relevant when a frame of it is)",
    )  # fmt: skip
    add_filter_options(certify)
    add_judge_option(certify)
    _model_options(certify)
    certify.add_argument("--json", action="store_true", help="print one JSON object")


def _adjudicate_arguments(adjudicate: argparse.ArgumentParser) -> None:
    """The options of `quadrat adjudicate`."""
    adjudicate.add_argument("--query", required=True, metavar="ID_OR_TEXT", help="saved query")
    adjudicate.add_argument("--library", type=Path, help="library folder")
    adjudicate.add_argument("--image", type=int, metavar="ID", help="the photo to settle")
    mark = adjudicate.add_mutually_exclusive_group()
    mark.add_argument("--relevant", dest="mark", action="store_const", const=1)
    mark.add_argument("--not-relevant", dest="mark", action="store_const", const=0)
    mark.add_argument(
        "--clear", dest="mark", action="store_const", const=-1,
        help="take the adjudication back (the newest judgment counts again)",
    )  # fmt: skip
    add_judge_option(adjudicate)
    adjudicate.add_argument("--json", action="store_true", help="print one JSON object")


def run_agreement_command(args: argparse.Namespace) -> int:
    from engine.judgments.agreement import (
        attribute_agreements,
        attribute_ratings,
        judge_ratings,
        measure_agreement,
    )
    from engine.judgments.attributes import check_term
    from engine.judgments.dwc_terms import caption

    term = check_term(args.term) if args.term else None
    with open_library(args.library) as library:
        query_id = saved_query_id(library, args.query)
        if term is not None:
            ratings = attribute_ratings(library, query_id, term)
            if not ratings:
                raise QuadratError(
                    f"no attribute judgments for {term} on query {query_id} yet: no judge has "
                    "given it a value, so there is no agreement to measure"
                )
            agreement = measure_agreement(ratings, seed=query_id)
            if args.json:
                print(json.dumps({"query_id": query_id, "term": term, **agreement.to_json()}))
                return EXIT_OK
            print(f"{caption(term)}:")
            for line in agreement.summary_lines():
                print(line)
            return EXIT_OK
        agreement = measure_agreement(judge_ratings(library, query_id), seed=query_id)
        terms = attribute_agreements(library, query_id)
    if args.json:
        out = {"query_id": query_id, **agreement.to_json()}
        out["attributes"] = {name: a.to_json() for name, a in terms.items()}
        print(json.dumps(out))
        return EXIT_OK
    for line in agreement.summary_lines():
        print(line)
    for name, attribute in terms.items():
        print(f"{caption(name)}: {attribute.one_line()}")
    return EXIT_OK


def run_certify_command(args: argparse.Namespace) -> int:
    from engine.judgments.adjudication import record_certificate
    from engine.judgments.queries import QueryStore
    from engine.methods.certify import certify_for_query
    from engine.search.filters import filter_names
    from engine.search.searcher import Searcher

    if args.next < 0:
        raise BadInputError("--next must be 0 or more")
    recorded = None
    with open_library(args.library) as library:
        filters = filters_from_args(args, library)
        query_id = saved_query_id(library, args.query)
        loader = _encoder_loader(args, library)
        scoped = certify_for_query(
            library, loader, query_id, target=args.target, confidence=args.confidence,
            batch=max(args.next, 1), filters=filters, events=args.events,
            names=filter_names(library.catalog),
        )  # fmt: skip
        state = scoped.state
        if args.record and state.certified:
            judge = QueryStore(library, user=args.judge).user
            recorded = record_certificate(library, query_id, state, judge)
        shown = state.next_ids[: args.next]
        photos = scoped.photos(shown)
        hits = Searcher(library, loader()).hits_for([(i, 0.0) for i in photos]) if photos else []
    if args.json:
        out = {"query_id": query_id, **state.to_json(), "recorded": recorded is not None}
        rows = []
        for unit_id, hit in zip(shown, hits, strict=False):
            row: dict[str, object] = {"image_id": hit.image_id, "path": hit.path}
            if args.events:
                row["event_id"] = unit_id
            rows.append(row)
        out["next"] = rows
        print(json.dumps(out))
        return EXIT_OK
    print(state.plan())
    print(state.summary())
    if recorded is not None:
        print(f"recorded with the query: {recorded.text()}")
    elif args.record:
        print("not recorded: the target is not certified yet")
    if hits:
        where = {"census": "ranking's top", "sample": "random sample"}.get(state.phase, "review")
        what = "events (their best frame)" if args.events else "photos"
        print(f"judge these {what} next ({where}; mark them in the window, or import judgments):")
        for hit in hits:
            print(f"  {hit.image_id:>8}  {hit.path}")
    return EXIT_OK


def run_adjudicate_command(args: argparse.Namespace) -> int:
    from engine.judgments.adjudication import adjudicate, disagreements

    with open_library(args.library) as library:
        query_id = saved_query_id(library, args.query)
        if args.image is None:
            if args.mark is not None:
                raise BadInputError("--relevant, --not-relevant and --clear need --image ID")
            split = disagreements(library, query_id)
            if args.json:
                print(json.dumps({"query_id": query_id, "disagreements": [
                    {
                        "image_id": d.image_id,
                        "marks": [
                            {"judge": m.judge, "relevance": m.relevance, "note": m.note}
                            for m in d.marks
                        ],
                        "adjudicated": d.adjudicated,
                    }
                    for d in split
                ]}))  # fmt: skip
                return EXIT_OK
            if not split:
                print("the judges agree on every photo judged by two or more of them")
            for d in split:
                marks = "; ".join(
                    f"{m.judge}: {_mark_word(m.relevance)}" + (f" ({m.note})" if m.note else "")
                    for m in d.marks
                )
                settled = (
                    "" if d.adjudicated is None else f" → adjudicated {_mark_word(d.adjudicated)}"
                )
                print(f"{d.image_id:>8}  {marks}{settled}")
            return EXIT_OK
        if args.mark is None:
            raise BadInputError("say how: --relevant, --not-relevant or --clear")
        relevance = None if args.mark < 0 else args.mark
        _check_photo(library, args.image)
        change = adjudicate(library, query_id, args.image, relevance, args.judge)
    if args.json:
        print(json.dumps({"query_id": query_id, "image_id": args.image, "adjudicated": relevance,
                          "previous": change.previous}))  # fmt: skip
        return EXIT_OK
    what = (
        "adjudication taken back" if relevance is None else f"adjudicated {_mark_word(relevance)}"
    )
    print(f"photo {args.image}: {what} (was {_mark_word(change.previous)})")
    return EXIT_OK


def _mark_word(relevance: int | None) -> str:
    if relevance is None:
        return "unjudged"
    return "relevant" if relevance > 0 else "not relevant"


def _check_photo(library: Library, image_id: int) -> None:
    from engine.catalog import Image

    with library.catalog.session() as s:
        if s.get(Image, image_id) is None:
            raise BadInputError(f"no photo with id {image_id} in the catalog")


COMMANDS = (
    Command(
        "agreement",
        help="how far the judges of a saved query agree (kappa, alpha, confusion tables)",
        description="Agreement among the judges of a saved query, over the photos judged by "
        "two or more of them: raw agreement, Fleiss' kappa, Krippendorff's alpha (with 95 % "
        "bootstrap intervals over photos), and Cohen's kappa with the confusion table per pair.",
        add_arguments=_agreement_arguments,
        run=run_agreement_command,
    ),
    Command(
        "certify",
        help="certify a saved query's recall (e.g. 90 %% at 95 %%) with a stopping rule",
        description="Where a saved query stands against a recall target by a stratified "
        "rule with a guarantee: judge the ranking's top in full, a random sample below it (its "
        "size said before it starts), then the ranking on until the relevant photos found reach "
        "the target share of an exact bound. Filters scope it to the photos they pass, as the "
        "window's chips do.",
        add_arguments=_certify_arguments,
        run=run_certify_command,
    ),
    Command(
        "adjudicate",
        help="list the photos judges disagree on, or settle one with an adjudicated judgment",
        description="Without --image, list the photos of a saved query whose judges disagree, "
        "each judge's mark and note side by side. With --image, record the judgment that "
        "settles it: an event of its own kind, which metrics and exports use from then on.",
        add_arguments=_adjudicate_arguments,
        run=run_adjudicate_command,
    ),
)
