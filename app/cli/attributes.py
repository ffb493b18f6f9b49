"""`quadrat attributes ask` (docs/SPEC.md §6.3): a closed question learnt from a query's judged
photos, checked by cross-validation, then asked of the whole collection (or the photos the
filters let through). `quadrat attributes terms` lists the Darwin Core terms a judgment can
carry, as the window labels them, with their suggested values.

    quadrat attributes ask TERM=VALUE --query ID_OR_TEXT [filters] [--top N] [--min-p P]
                           [--target 0.9] [--json]
    quadrat attributes terms [--json]

The cross-validated accuracy is printed first, before the collection is scored, then how many
judgments the question needs to reach --target, then the photos most likely to answer yes with
their calibrated probabilities (`engine.judgments.attribute_questions`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from app.cli.args import positive_int
from app.cli.common import EXIT_OK, open_library, saved_query_id
from app.cli.filters import add_filter_options, filters_from_args
from app.cli.registry import Command

if TYPE_CHECKING:
    from engine.judgments.attribute_questions import QuestionModel


def _share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number such as 0.9, got {text!r}") from None
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"expected a number from 0 up to 1, got {value}")
    return value


def _attributes_arguments(attributes: argparse.ArgumentParser) -> None:
    """The options of `quadrat attributes`."""
    actions = attributes.add_subparsers(dest="attributes_action", metavar="ACTION")
    actions.required = True
    ask = actions.add_parser(
        "ask",
        help="learn TERM=VALUE from a query's judged photos and ask it of the collection",
        description="Learn a closed question (TERM=VALUE, e.g. reproductiveCondition=flowering) "
        "from the attributes of a query's judged photos, print its cross-validated accuracy, "
        "then the photos most likely to answer yes with calibrated probabilities.",
    )
    ask.add_argument("question", metavar="TERM=VALUE", help="e.g. lifeStage=juvenile")
    ask.add_argument(
        "--query", required=True, metavar="ID_OR_TEXT", help="saved query id or its exact text"
    )
    ask.add_argument("--library", type=Path, help="library folder")
    ask.add_argument("--top", type=positive_int, default=20, help="suggestions printed")
    ask.add_argument(
        "--min-p", type=_share, default=0.0, metavar="P",
        help="only suggestions whose probability is at least P",
    )  # fmt: skip
    ask.add_argument(
        "--target", type=_share, default=0.9, metavar="ACCURACY",
        help="say how many judgments reach this balanced accuracy (default: %(default)s)",
    )  # fmt: skip
    ask.add_argument("--json", action="store_true", help="print one JSON object")
    add_filter_options(ask)
    ask.set_defaults(func=run_ask_command)
    terms = actions.add_parser(
        "terms",
        help="the Darwin Core terms a judgment can carry, their labels and suggested values",
        description="The Darwin Core terms a judgment can carry (the judgments CSV's and the "
        "archive's columns), each with the label the window shows and its suggested values.",
    )
    terms.add_argument("--json", action="store_true", help="print one JSON object")
    terms.set_defaults(func=run_terms_command)


def run_terms_command(args: argparse.Namespace) -> int:
    """One line per term: its caption, then its suggested values (or "free text")."""
    from engine.judgments.dwc_terms import ATTRIBUTE_TERMS

    if args.json:
        listed = {
            t.term: {"label": t.label, "values": list(t.vocabulary), "source": t.source}
            for t in ATTRIBUTE_TERMS
        }
        print(json.dumps({"terms": listed}))
        return EXIT_OK
    width = max(len(t.caption) for t in ATTRIBUTE_TERMS)
    for t in ATTRIBUTE_TERMS:
        values = ", ".join(t.vocabulary) if t.vocabulary else "free text"
        print(f"{t.caption:<{width}}  {values}")
    return EXIT_OK


def run_ask_command(args: argparse.Namespace) -> int:
    from engine.judgments.attribute_questions import (
        AttributeQuestion,
        ask_collection,
        photo_paths,
    )

    question = AttributeQuestion.parse(args.question)

    def checked(learnt: QuestionModel) -> None:
        if args.json:
            return
        missing = learnt.missing
        print(f"{question.sentence} ({question.label})")
        print(learnt.validation.summary())
        if missing:
            print(f"{missing} judged photos answering it have no vector and were left out")
        print("asking the collection...", flush=True)

    with open_library(args.library) as library:
        query_id = saved_query_id(library, args.query)
        filters = filters_from_args(args, library)
        answers = ask_collection(
            library, query_id, question, filters=filters, top=args.top, min_p=args.min_p,
            target=args.target, on_checked=checked,
        )  # fmt: skip
        paths = photo_paths(library, [s.image_id for s in answers.suggestions])
    if args.json:
        out = {"query_id": query_id, **answers.to_json()}
        for item in out["suggestions"]:  # type: ignore[attr-defined]
            item["path"] = paths.get(item["image_id"], "")
        print(json.dumps(out))
        return EXIT_OK
    if answers.curve is not None:
        points = ", ".join(f"{p.judgments}: {p.balanced:.2f}" for p in answers.curve.points)
        print(f"balanced accuracy by judgments ({points}): {answers.curve.note}")
    print(f"{answers.scored:,} photos without an answer scored; the {len(answers.suggestions)} "
          "most likely yes (calibrated probability, id, path):")  # fmt: skip
    for suggestion in answers.suggestions:
        path = paths.get(suggestion.image_id, "")
        print(f"  {suggestion.probability:.3f}  {suggestion.image_id:>8}  {path}")
    return EXIT_OK


COMMANDS = (
    Command(
        "attributes",
        help="attribute questions over the collection (is it flowering? a juvenile?)",
        description="Attribute questions learnt from judged photos.",
        add_arguments=_attributes_arguments,
    ),
)
