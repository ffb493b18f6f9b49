"""Structured reranking: ask each of a base method's top photos 2–3 yes/no subqueries and
reorder them by the mean p(yes) (Kumar, Vendrow & Beery, "Divide and Conquer"; INQUIRE-RERANK).

The subqueries come from the user, the built-in rules or a language model (engine.rerank
.decompose); a scorer answers them per photo (engine.rerank.scorers); answers are cached in the
catalog by photo content, question, context and scorer, committed batch by batch, so Cancel
keeps what was scored and a second run asks nothing again. Ties keep the base order.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.errors import BadInputError
from engine.methods.base import Method, MethodSpec, Ranking, SearchQuery
from engine.methods.context import MethodContext
from engine.methods.events import RerankPartial, RerankProgress
from engine.progress import Progress
from engine.rerank.base import (
    AGGREGATIONS,
    Answer,
    Decomposer,
    Decomposition,
    Question,
    aggregate,
)

if TYPE_CHECKING:
    from engine.catalog.library import Library
    from engine.rerank.base import Photo, Scorer

DECOMPOSERS = ("builtin", "llm")
MAX_DEPTH = 10_000

# Divide-and-Conquer and its ablations (Kumar, Vendrow & Beery), and INQUIRE's baseline, as
# `variant=` values with the label a run shows. "" leaves `context`, `contexts` and `query` as
# given.
VARIANTS: dict[str, str] = {
    "": "",
    "paper": "Divide-and-Conquer: the query's expert context, subqueries, the query asked too",
    "subqueries": "Divide-and-Conquer ablation: subqueries only (no context, no query)",
    "no-context": "Divide-and-Conquer ablation: subqueries and the query, no expert context",
    "baseline": "INQUIRE baseline: a one-token yes/no answer to the query itself",
}


@dataclass(frozen=True)
class RerankParams:
    """`base`: the method spec whose top `depth` photos are reordered (under the rerank
    protocol, the given candidates). `subqueries`: the user's questions, ";"-separated ("" =
    from `decomposer`: "builtin", or "llm" through the configured endpoint, which falls back to
    the built-in ones with a note). `scorer`: "auto" (the demo answering model on a library
    indexed with the demo model, else "clip"), "demo", "clip", "clip:regions", "clip:whole",
    "vlm:PATH" or "endpoint:URL[#MODEL]". `aggregate`: "mean" (the paper's), "min" or "product".
    `context`: expert context prepended to every scorer prompt; `contexts`: a CSV of per-query
    contexts (engine.rerank.context), the row of the query asked winning over `context`.
    `query`: the original query goes into every answering prompt (vlm and endpoint scorers).
    `variant` runs Divide-and-Conquer as its paper defines it or an ablation, overriding those
    three (see VARIANTS). `chain`: the scorer sees the earlier questions and its answers for
    the same photo."""

    base: str = "text"
    subqueries: str = ""
    decomposer: str = "builtin"
    scorer: str = "auto"
    depth: int = 100
    aggregate: str = "mean"
    context: str = ""
    chain: bool = True
    contexts: str = ""
    query: bool = False
    variant: str = ""

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
        if self.variant not in VARIANTS:
            raise BadInputError(f"variant must be one of {', '.join(v for v in VARIANTS if v)}")
        if self.variant in ("subqueries", "no-context", "baseline") and (
            self.context.strip() or self.contexts.strip()
        ):
            raise BadInputError(
                f"variant={self.variant} runs without expert context: leave out context= and "
                "contexts="
            )


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
        from engine.search.searcher import validate_query_text

        text = validate_query_text(query.text)
        base_spec: MethodSpec = resolve_spec(params.base)
        started = time.perf_counter()
        base, order = _base_order(base_spec, query, context, params.depth, top_k, candidates)
        base_seconds = time.perf_counter() - started
        prompting = _prompting(text, params, context)
        decomposer, decomposition = _questions(text, params, context, prompting.context)
        scoring = _Scoring(load_scorer_for(params.scorer, context), decomposition, params, context)
        scoring.query = text if prompting.with_query else None
        head = scoring.ask_all(order[: params.depth], order)
        ranking = _ranking(
            order, scoring.answers, _base_ranks(order), params.aggregate, _pool(scoring.scorer)
        )
        keep = max(top_k, len(candidates)) if candidates is not None else top_k
        ranking = Ranking(ranking.ids[:keep], ranking.scores[:keep], ranking.evidence)
        if candidates is None:  # the base search as it stands alone, for comparison
            ranking.companions = [(base_spec.text, base)]
        ranking.evidence = {i: e for i, e in ranking.evidence.items() if i in set(ranking.ids)}
        ranking.details = {
            "questions": [
                {"text": q.text, "source": q.source, "target": q.target}
                for q in decomposition.questions
            ],
            "scorer": scoring.scorer.identity,
            "decomposer": decomposer.identity,
            "note": "; ".join(n for n in (prompting.note, decomposition.note) if n),
            "variant": params.variant,
            "variant_label": VARIANTS[params.variant],
            "query_in_prompt": prompting.with_query,
            "calls": scoring.calls,
            "cached": scoring.cached,
            "depth": params.depth,
            "reranked": len(head),
            "not_reranked": len(order[params.depth :]),
            "context": decomposition.context,
            "aggregate": params.aggregate,
            "base": base_spec.text,
            "base_details": base.details,
            "timings": {
                "base": base_seconds,
                "scoring": time.perf_counter() - scoring.started,
            },
        }
        return ranking


def _base_order(
    base_spec: MethodSpec,
    query: SearchQuery,
    context: MethodContext,
    depth: int,
    top_k: int,
    candidates: Sequence[int] | None,
) -> tuple[Ranking, list[int]]:
    """The base method's ranking and the order reranking starts from: its top photos, or under
    the rerank protocol the candidates in the base's order (those it left out last)."""
    if candidates is None:
        base = context.run_method(base_spec, query, top_k=max(top_k, depth))
        return base, list(base.ids)
    # Under the rerank protocol the candidates are the list; the base only orders them.
    given = [int(c) for c in candidates]
    base = context.run_method(base_spec, query, top_k=max(1, len(given)), candidates=given)
    seen = set(base.ids)
    return base, [i for i in base.ids if i in set(given)] + [i for i in given if i not in seen]


@dataclass(frozen=True)
class _Prompting:
    """What every scorer prompt of one query holds besides the question."""

    context: str  # the expert context ("" for none)
    with_query: bool  # the original query is asked too
    note: str = ""


def _prompting(text: str, params: RerankParams, context: MethodContext) -> _Prompting:
    """The expert context and query setting of `text` under `params.variant`."""
    if params.variant in ("subqueries", "baseline"):
        return _Prompting("", False)
    if params.variant == "no-context":
        return _Prompting("", True)
    expert = params.context.strip()
    if params.contexts.strip():
        from engine.rerank.context import context_for, read_contexts

        found = context_for(read_contexts(Path(params.contexts).expanduser()), text)
        expert = found if found is not None else expert
    if params.variant != "paper":
        return _Prompting(expert, params.query)
    note = ""
    if not expert and context.llm.configured:
        from engine.rerank.decompose import LlmDecomposer

        llm = context.llm
        expert, failed = LlmDecomposer(llm.url, llm.model, llm.api_key).draft_context(text)
        note = failed or "expert context drafted for this run (not saved)"
    if not expert:
        why = f" ({note})" if note else ""
        raise BadInputError(
            f"variant=paper has no expert context for {text!r}{why}: give contexts=FILE (a row "
            "per query) or context=, or configure a language model to draft it"
        )
    return _Prompting(expert, True, note)


def _questions(
    text: str, params: RerankParams, context: MethodContext, expert: str
) -> tuple[Decomposer, Decomposition]:
    """The decomposer and the subqueries it gives for `text`; refused when it gives none.
    INQUIRE's baseline asks the query itself, in one question."""
    if params.variant == "baseline":
        from engine.rerank.decompose import BaselineDecomposer

        baseline = BaselineDecomposer()
        return baseline, baseline.decompose(text)
    decomposer = decomposer_for(params, context)
    decomposition = decomposer.decompose(
        text, context=expert, known_names=known_names(context.library)
    )
    if not decomposition.questions:
        raise BadInputError(f"rerank has no subqueries for {text!r}")
    return decomposer, decomposition


def _base_ranks(order: Sequence[int]) -> dict[int, int]:
    """Each photo's 1-based rank in the order reranking started from (the tie-break)."""
    return {image_id: rank for rank, image_id in enumerate(order, 1)}


class _Scoring:
    """Asks every question of a batch of photos at a time, answers from the cache first; the
    scorer's answers are committed batch by batch, so a cancel keeps them."""

    def __init__(
        self,
        scorer: Scorer,
        decomposition: Decomposition,
        params: RerankParams,
        context: MethodContext,
    ) -> None:
        from engine.rerank.cache import ScoreCache

        self.scorer = scorer
        self.decomposition = decomposition
        self.params = params
        self.context = context
        self.cache = ScoreCache(context.library)
        self.answers: dict[int, list[tuple[Question, Answer]]] = {}
        self.query: str | None = None  # the original query, when the prompts ask it too
        self.calls = 0  # photos the scorer was asked about, per question
        self.cached = 0  # answers found in the cache
        self.started = time.perf_counter()  # when the first batch was asked

    def ask_all(self, head: list[int], order: Sequence[int]) -> list[int]:
        """Answer every question on the photos of `head` still in the catalog (returned),
        reporting progress and, between batches, the partial ranking over `order`."""
        from engine.rerank.cache import photos_for

        context = self.context
        photos = photos_for(context.library, head)
        head = [i for i in head if i in photos]  # a photo removed meanwhile cannot be asked
        base_rank = _base_ranks(order)
        batch_size = max(1, int(getattr(self.scorer, "batch_size", 16) or 16))
        context.progress(Progress(0, len(head), message="asking subqueries"))
        context.notify(RerankProgress(0, len(head)))
        self.started = time.perf_counter()
        for start in range(0, len(head), batch_size):
            batch = [photos[i] for i in head[start : start + batch_size]]
            for question in self.decomposition.questions:
                context.cancel.check()
                self._ask(batch, question)
            done = min(len(head), start + batch_size)
            context.progress(Progress(done, len(head), message="asking subqueries"))
            context.notify(RerankProgress(done, len(head)))
            if done < len(head):
                partial = _ranking(
                    order, self.answers, base_rank, self.params.aggregate, _pool(self.scorer)
                )
                context.notify(RerankPartial(partial))
        return head

    def _ask(self, batch: list[Photo], question: Question) -> None:
        """One question on one batch: cached answers, then the scorer for the rest."""
        scorer, context = self.scorer, self.decomposition.context
        extra: dict[str, Any] = {}
        where = context
        if self.query is not None:
            if not _takes_query(scorer):
                raise BadInputError(
                    f"scorer {scorer.identity} cannot put the query in its prompt: use a vlm: "
                    "or endpoint: scorer, or query=false"
                )
            extra["query"] = self.query
            # The answer depends on the query too: cached apart from the same question
            # asked without it.
            where = f"{context}\n[query in prompt] {self.query}"
        found = self.cache.get(batch, question, where, scorer.identity)
        todo = [p for p in batch if p.content_hash not in found]
        self.cached += len(batch) - len(todo)
        fresh: dict[int, Answer] = {}
        if todo:
            chain = self.params.chain
            history = [self.answers.get(p.image_id, []) if chain else [] for p in todo]
            got = scorer.score(
                todo,
                question,
                history=history,
                context=context,
                cancel=self.context.cancel,
                **extra,
            )
            if len(got) != len(todo):
                raise BadInputError(
                    f"scorer {scorer.identity} gave {len(got)} answers for {len(todo)} photos"
                )
            self.calls += len(todo)
            fresh = {p.image_id: a for p, a in zip(todo, got, strict=True)}
            # Committed now: a cancel later keeps this batch's answers.
            self.cache.put(zip(todo, got, strict=True), question, where, scorer.identity)
        for photo in batch:
            answer = fresh.get(photo.image_id) or found.get(photo.content_hash)
            if answer is None:  # pragma: no cover - every photo was found or asked
                raise BadInputError(f"no answer for photo {photo.image_id}")
            self.answers.setdefault(photo.image_id, []).append((question, answer))


def _takes_query(scorer: Scorer) -> bool:
    """Whether the scorer's `score` accepts the original query (`query=`)."""
    try:
        parameters = inspect.signature(scorer.score).parameters
    except (TypeError, ValueError):
        return False
    return "query" in parameters or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()
    )


# A scorer whose answers rank only relative to the pool (the CLIP scorer's `pool_scores`):
# the photos' answers and base ranks in, each photo's score in [0, 1] out.
PoolScores = Callable[[Mapping[int, Sequence[Answer]], Mapping[int, int], str], dict[int, float]]


def _pool(scorer: Scorer) -> PoolScores | None:
    """The scorer's own pool ranking, when it has one. The CLIP scorer's p is a softmax against
    "something else" that saturates inside a pool showing the subject; the demo answering
    model's p is calibrated but keeps the base order where its p's differ by less than its
    calibration error (`engine.rerank.demo.fuse`). A VLM's p(yes) means what it says and is
    aggregated as the paper does."""
    pool = getattr(scorer, "pool_scores", None)
    return pool if callable(pool) else None


def _ranking(
    order: Sequence[int],
    answers: dict[int, list[tuple[Question, Answer]]],
    base_rank: dict[int, int],
    how: str,
    pool: PoolScores | None = None,
) -> Ranking:
    """Photos with every answer first, by score (ties in base order); then the rest in base
    order, scored below them (-1, -2, ...). Each answered photo's evidence: its answers, its
    score and its base rank. The score is `aggregate` of the p(yes), or the scorer's `pool`
    ranking of the answered photos when it has one."""
    # Answers arrive a whole batch at a time, so every photo in `answers` has them all.
    complete = {i: pairs for i, pairs in answers.items() if pairs}
    if pool is not None:
        scores = pool({i: [a for _, a in pairs] for i, pairs in complete.items()}, base_rank, how)
    else:
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
