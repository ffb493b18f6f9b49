"""Structured reranking: ask each of a base method's top photos 2–3 yes/no subqueries and
reorder them by the mean p(yes) (Kumar, Vendrow & Beery, "Divide and Conquer"; INQUIRE-RERANK).

The subqueries come from the user, the built-in rules or a language model (engine.rerank
.decompose); a scorer answers them per photo (engine.rerank.scorers); answers are cached in the
catalog by photo content, question, context and scorer, committed batch by batch, so Cancel
keeps what was scored and a second run asks nothing again. Ties keep the base order.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine.errors import BadInputError
from engine.methods.base import Method, MethodContext, MethodSpec, Ranking, SearchQuery
from engine.progress import Progress
from engine.rerank.base import AGGREGATIONS, Answer, Decomposer, Question, aggregate

if TYPE_CHECKING:
    from engine.library import Library
    from engine.rerank.base import Scorer

DECOMPOSERS = ("builtin", "llm")
MAX_DEPTH = 10_000


@dataclass(frozen=True)
class RerankParams:
    """`base`: the method spec whose top `depth` photos are reordered (under the rerank
    protocol, the given candidates). `subqueries`: the user's questions, ";"-separated ("" =
    from `decomposer`: "builtin", or "llm" through the configured endpoint, which falls back to
    the built-in ones with a note). `scorer`: "clip", "clip:regions", "clip:whole", "vlm:PATH"
    or "endpoint:URL[#MODEL]". `aggregate`: "mean" (the paper's), "min" or "product".
    `context`: expert context prepended to every scorer prompt. `chain`: the scorer sees the
    earlier questions and its answers for the same photo."""

    base: str = "text"
    subqueries: str = ""
    decomposer: str = "builtin"
    scorer: str = "clip"
    depth: int = 100
    aggregate: str = "mean"
    context: str = ""
    chain: bool = True

    def check(self) -> None:
        if not 1 <= self.depth <= MAX_DEPTH:
            raise BadInputError(f"depth must be from 1 to {MAX_DEPTH}")
        if self.aggregate not in AGGREGATIONS:
            raise BadInputError(f"aggregate must be one of {', '.join(AGGREGATIONS)}")
        if self.decomposer not in DECOMPOSERS:
            raise BadInputError(f"decomposer must be one of {', '.join(DECOMPOSERS)}")
        if not self.base.strip():
            raise BadInputError("rerank needs a base method (base=text, base=visret, ...)")
        if not self.scorer.strip():
            raise BadInputError("rerank needs a scorer (clip, vlm:PATH, endpoint:URL)")


def load_scorer_for(spec: str, context: MethodContext) -> Scorer:
    """The scorer named by `spec`, kept by the context's model manager."""
    from engine.rerank.scorers import load_scorer

    return load_scorer(spec, context)


def known_names(library: Library) -> list[str]:
    """Taxon and common names in the catalog (for the built-in subject question)."""
    from sqlalchemy import select

    from engine.catalog.models import Taxon

    names: set[str] = set()
    with library.catalog.session() as s:
        for name, common in s.execute(select(Taxon.name, Taxon.common_name)):
            names.update(n for n in (name, common) if n)
    return sorted(names)


def decomposer_for(params: RerankParams, context: MethodContext) -> Decomposer:
    """The user's list when there is one, else the chosen decomposer."""
    from engine.rerank.decompose import BuiltinDecomposer, LlmDecomposer, UserDecomposer

    if params.subqueries.strip():
        return UserDecomposer(params.subqueries)
    if params.decomposer == "llm":
        llm = context.llm
        return LlmDecomposer(llm.url, llm.model, llm.api_key)
    return BuiltinDecomposer()


class RerankMethod(Method):
    key = "rerank"
    label = "Reranked"
    description = (
        "Structured reranking: a base method's top photos (100 by default) are each asked a "
        "few yes/no subqueries (yours, built-in, or written by a language model) and reordered "
        "by the mean p(yes); every photo shows its answers"
    )
    Params = RerankParams
    kinds = ("text",)

    def run(
        self,
        query: SearchQuery,
        params: RerankParams,
        context: MethodContext,
        *,
        top_k: int,
        candidates: Sequence[int] | None = None,
    ) -> Ranking:
        from engine.methods.registry import resolve_spec
        from engine.rerank.cache import ScoreCache, photos_for
        from engine.search import validate_query_text

        text = validate_query_text(query.text)
        base_spec: MethodSpec = resolve_spec(params.base)
        started = time.perf_counter()
        if candidates is not None:
            # Under the rerank protocol the candidates are the list; the base only orders them.
            given = [int(c) for c in candidates]
            base = context.run_method(base_spec, query, top_k=max(1, len(given)), candidates=given)
            seen = set(base.ids)
            order = [i for i in base.ids if i in set(given)] + [i for i in given if i not in seen]
        else:
            base = context.run_method(base_spec, query, top_k=max(top_k, params.depth))
            order = list(base.ids)
        base_seconds = time.perf_counter() - started
        head, tail = order[: params.depth], order[params.depth :]

        decomposer = decomposer_for(params, context)
        decomposition = decomposer.decompose(
            text, context=params.context, known_names=known_names(context.library)
        )
        questions = decomposition.questions
        if not questions:
            raise BadInputError(f"rerank has no subqueries for {text!r}")
        scorer = load_scorer_for(params.scorer, context)
        cache = ScoreCache(context.library)
        photos = photos_for(context.library, head)
        head = [i for i in head if i in photos]  # a photo removed meanwhile cannot be asked
        base_rank = {image_id: rank for rank, image_id in enumerate(order, 1)}
        answers: dict[int, list[tuple[Question, Answer]]] = {}
        calls = cached = 0
        batch_size = max(1, int(getattr(scorer, "batch_size", 16) or 16))
        context.progress(Progress(0, len(head), message="asking subqueries"))
        context.notify("rerank-progress", (0, len(head)))
        scoring_started = time.perf_counter()
        for start in range(0, len(head), batch_size):
            batch = [photos[i] for i in head[start : start + batch_size]]
            for question in questions:
                context.cancel.check()
                found = cache.get(batch, question, decomposition.context, scorer.identity)
                todo = [p for p in batch if p.content_hash not in found]
                cached += len(batch) - len(todo)
                fresh: dict[int, Answer] = {}
                if todo:
                    history = [answers.get(p.image_id, []) if params.chain else [] for p in todo]
                    got = scorer.score(
                        todo,
                        question,
                        history=history,
                        context=decomposition.context,
                        cancel=context.cancel,
                    )
                    if len(got) != len(todo):
                        raise BadInputError(
                            f"scorer {scorer.identity} gave {len(got)} answers for {len(todo)} "
                            "photos"
                        )
                    calls += len(todo)
                    fresh = {p.image_id: a for p, a in zip(todo, got, strict=True)}
                    # Committed now: a cancel later keeps this batch's answers.
                    cache.put(zip(todo, got, strict=True), question, decomposition.context,
                              scorer.identity)  # fmt: skip
                for photo in batch:
                    answer = fresh.get(photo.image_id) or found.get(photo.content_hash)
                    if answer is None:  # pragma: no cover - every photo was found or asked
                        raise BadInputError(f"no answer for photo {photo.image_id}")
                    answers.setdefault(photo.image_id, []).append((question, answer))
            done = min(len(head), start + batch_size)
            context.progress(Progress(done, len(head), message="asking subqueries"))
            context.notify("rerank-progress", (done, len(head)))
            if done < len(head):
                context.notify(
                    "rerank-partial",
                    self._ranking(order, answers, base_rank, params.aggregate),
                )
        ranking = self._ranking(order, answers, base_rank, params.aggregate)
        keep = max(top_k, len(candidates)) if candidates is not None else top_k
        ranking = Ranking(ranking.ids[:keep], ranking.scores[:keep], ranking.evidence)
        if candidates is None:  # the base search as it stands alone, for comparison
            ranking.companions = [(base_spec.text, base)]
        ranking.evidence = {i: e for i, e in ranking.evidence.items() if i in set(ranking.ids)}
        ranking.details = {
            "questions": [
                {"text": q.text, "source": q.source, "target": q.target} for q in questions
            ],
            "scorer": scorer.identity,
            "decomposer": decomposer.identity,
            "note": decomposition.note,
            "calls": calls,
            "cached": cached,
            "depth": params.depth,
            "reranked": len(head),
            "not_reranked": len(tail),
            "context": decomposition.context,
            "aggregate": params.aggregate,
            "base": base_spec.text,
            "base_details": base.details,
            "timings": {
                "base": base_seconds,
                "scoring": time.perf_counter() - scoring_started,
            },
        }
        return ranking

    @staticmethod
    def _ranking(
        order: Sequence[int],
        answers: dict[int, list[tuple[Question, Answer]]],
        base_rank: dict[int, int],
        how: str,
    ) -> Ranking:
        """Photos with every answer first, by score (ties in base order); then the rest in base
        order, scored below them (-1, -2, ...)."""
        # Answers arrive a whole batch at a time, so every photo in `answers` has them all.
        complete = {i: pairs for i, pairs in answers.items() if pairs}
        scores = {i: aggregate([a.p_yes for _, a in pairs], how) for i, pairs in complete.items()}
        ranked = sorted(scores, key=lambda i: (-scores[i], base_rank[i]))
        rest = [i for i in order if i not in scores]
        ids = ranked + rest
        values = [scores[i] for i in ranked] + [-1.0 - n for n in range(len(rest))]
        evidence: dict[int, dict[str, Any]] = {
            i: {
                "answers": [
                    {"question": q.text, "answer": a.answer, "p": a.p_yes} for q, a in complete[i]
                ],
                "score": scores[i],
                "base_rank": base_rank[i],
            }
            for i in ranked
        }
        return Ranking(ids, values, evidence)
