"""Methods that learn from a saved query's judgments, and the workflows around them.

The methods (`rocchio`, `probe`, `more-like-these`) read the open query's judgments through
`MethodContext.query_judgments` and refine the query's own text (or image) vector with the
embeddings of the judged photos (the catalog's `embeddings` table, the source of truth). They
are marked `needs_judgments`: a benchmark refuses them, since they would learn from the very
judgments they are scored on (the simulation in tests/bench/bench_feedback.py measures them).

The workflows take plain arguments and return plain data, for the command line and the window
alike (run them off the GUI thread: they encode the query and search):

- `refine_query`: run a learning method on a saved query, save the ranking as a new run whose
  params name the run it came from ("from_run"), and return both runs' live metrics;
- `photos_above`: the photos judged relevant and every unjudged photo whose calibrated
  probability (from the probe) is at least p;
- `judge_next_for_query`: the photos whose judgment teaches the probe most;
- `estimate_for_query` / `sample_for_query`: how many relevant photos the collection holds, and
  the photos to judge that tighten that estimate.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.errors import BadInputError
from engine.evaluation.live import LiveMetrics, live_metrics
from engine.judgments.learning import (
    LEVEL,
    PRIOR_WEIGHT,
    PROBE_C,
    ROCCHIO_ALPHA,
    ROCCHIO_BETA,
    ROCCHIO_GAMMA,
    TOP_MIX,
    Probe,
    RecallEstimate,
    estimate_recall,
    fit_probe,
    judge_next,
    prior_scale,
    rocchio,
    sample_to_judge,
)
from engine.judgments.runs import SavedRunParams
from engine.methods.base import Method, MethodSpec, Ranking, SearchQuery
from engine.methods.context import MethodContext
from engine.methods.fusion import reciprocal_rank_fusion

if TYPE_CHECKING:
    from engine.catalog.library import Library
    from engine.models.encoders import Encoder
    from engine.search.searcher import SearchFilters

SPREAD_SAMPLE = 2048  # photos whose similarity to the query measures its spread (the prior)
RANKED_DEPTH = 20_000  # the recall estimate ranks this deep; the rest is one unranked band
JUDGE_NEXT_DEPTH = 1000  # "judge next" looks for uncertain photos this deep in the probe's ranking

# -- shared pieces ----------------------------------------------------------------------------


def query_vector(query: SearchQuery, context: MethodContext, image_weight: float = 0.5) -> Any:
    """The query's unit vector as the text method makes it with its defaults: the words (with
    their + and - terms), the photo, or their weighted sum."""
    from engine.methods.text import TextMethod, TextParams
    from engine.search.searcher import validate_query_text

    vector: np.ndarray | None = None
    if query.text.strip():
        words = validate_query_text(query.text)
        vector = np.asarray(
            TextMethod.query_vector(words, TextParams(), context.encoder), dtype=np.float64
        )
    if query.image is not None:
        photo = np.asarray(context.searcher.encode_image_file(query.image), dtype=np.float64)
        vector = photo if vector is None else image_weight * photo + (1 - image_weight) * vector
    if vector is None:
        raise BadInputError("the query is empty: type a few words or give a photo")
    return vector / (np.linalg.norm(vector) or 1.0)


@dataclass(frozen=True)
class JudgedVectors:
    """The judged photos that have a vector: ids, unit embeddings (rows), relevant flags."""

    ids: np.ndarray
    vectors: np.ndarray
    relevant: np.ndarray  # bool per row
    missing: int  # judged photos without a vector (missing from disk, not indexed)

    @property
    def relevant_vectors(self) -> np.ndarray:
        rows: np.ndarray = self.vectors[self.relevant]
        return rows

    @property
    def nonrelevant_vectors(self) -> np.ndarray:
        rows: np.ndarray = self.vectors[~self.relevant]
        return rows


def judged_vectors(context: MethodContext, judgments: Mapping[int, int]) -> JudgedVectors:
    """The catalog's embeddings of the judged photos (the index is only a cache of them)."""
    wanted = np.asarray(sorted(judgments), dtype=np.int64)
    if not len(wanted):
        dim = context.searcher.index.dim
        empty = np.zeros((0, dim), dtype=np.float64)
        return JudgedVectors(wanted, empty, np.zeros(0, dtype=bool), 0)
    ids, vectors = context.library.load_vectors(context.encoder.model_key, wanted)
    vectors = np.asarray(vectors, dtype=np.float64)
    vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    relevant = np.asarray([judgments[int(i)] > 0 for i in ids], dtype=bool)
    return JudgedVectors(ids, vectors, relevant, len(wanted) - len(ids))


def _usage(used: JudgedVectors, note: str) -> dict[str, Any]:
    """What a learning run's details say about the judgments it used."""
    relevant = int(used.relevant.sum())
    details: dict[str, Any] = {
        "judgments_used": len(used.ids),
        "relevant": relevant,
        "not_relevant": len(used.ids) - relevant,
        "note": note,
    }
    if used.missing:
        details["judgments_without_vector"] = used.missing
    return details


def _ranked(
    context: MethodContext,
    vector: np.ndarray,
    top_k: int,
    candidates: Sequence[int] | None,
) -> Ranking:
    hits = context.searcher.ranked(
        np.asarray(vector, dtype=np.float32), top_k, context.filters, candidates=candidates
    )
    return Ranking.from_pairs(hits)


class _LearningMethod(Method):
    needs_judgments = True
    kinds = ("text", "image", "image+text")


# -- Rocchio ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RocchioParams:
    """q' = alpha q + beta mean(relevant) - gamma mean(non-relevant), the SMART defaults."""

    alpha: float = ROCCHIO_ALPHA
    beta: float = ROCCHIO_BETA
    gamma: float = ROCCHIO_GAMMA

    def check(self) -> None:
        if min(self.alpha, self.beta, self.gamma) < 0:
            raise BadInputError("rocchio's alpha, beta and gamma must be 0 or more")
        if self.alpha == 0 and self.beta == 0:
            raise BadInputError("rocchio needs alpha or beta above 0")


class RocchioMethod(_LearningMethod):
    key = "rocchio"
    label = "Rocchio"
    description = (
        "The query moved toward the photos judged relevant and away from those judged not "
        "relevant (Rocchio, in the embedding space)"
    )
    Params = RocchioParams

    def run(
        self,
        query: SearchQuery,
        params: RocchioParams,
        context: MethodContext,
        *,
        top_k: int,
        candidates: Sequence[int] | None = None,
    ) -> Ranking:
        judgments = context.query_judgments(self.key)
        q = query_vector(query, context)
        used = judged_vectors(context, judgments)
        moved = rocchio(
            q,
            used.relevant_vectors,
            used.nonrelevant_vectors,
            params.alpha,
            params.beta,
            params.gamma,
        )
        context.cancel.check()
        ranking = _ranked(context, moved, top_k, candidates)
        note = (
            "no judgments yet: the query's own ranking"
            if not len(used.ids)
            else f"moved by {int(used.relevant.sum())} relevant and "
            f"{int((~used.relevant).sum())} non-relevant photos"
        )
        ranking.details.update(_usage(used, note))
        return ranking


# -- the probe --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProbeParams:
    """`c`: how far the judgments may move the weights from the query (the prior variance of
    the weights on unit embeddings, the inverse of their L2 strength: 1, scikit-learn's default);
    0 lets the judgments choose it by the evidence. `prior`: the query's weight in the prior, in
    logits per standard deviation of its similarity over the collection."""

    c: float = PROBE_C
    prior: float = PRIOR_WEIGHT

    def check(self) -> None:
        if self.c < 0:
            raise BadInputError("probe's c must be 0 (chosen from the judgments) or above")
        if self.prior <= 0:
            raise BadInputError("probe's prior must be above 0")


def query_spread_scale(context: MethodContext, q: np.ndarray, weight: float) -> float:
    """`prior_scale` from the query's similarity to a fixed random sample of the collection."""
    index = context.searcher.index
    ids = index.ids()
    if len(ids) > SPREAD_SAMPLE:
        ids = np.sort(np.random.default_rng(0).choice(ids, SPREAD_SAMPLE, replace=False))
    if len(ids) < 2:
        return prior_scale([], weight)
    hits = index.search(np.asarray(q, dtype=np.float32), len(ids), allowed_ids=ids)
    return prior_scale([score for _, score in hits], weight)


def fit_query_probe(
    query: SearchQuery, params: ProbeParams, context: MethodContext, judgments: Mapping[int, int]
) -> tuple[Probe, JudgedVectors]:
    """The probe of a query fitted to its judgments (the prior alone without both kinds)."""
    q = query_vector(query, context)
    used = judged_vectors(context, judgments)
    scale = query_spread_scale(context, q, params.prior)
    c = params.c if params.c > 0 else None
    probe = fit_probe(q, used.vectors, used.relevant, prior_scale=scale, c=c)
    return probe, used


class ProbeMethod(_LearningMethod):
    key = "probe"
    label = "Probe"
    description = (
        "A linear probe: logistic regression on the judged photos' embeddings with the query "
        "as its prior, scoring every photo with a calibrated probability of relevance"
    )
    Params = ProbeParams

    def run(
        self,
        query: SearchQuery,
        params: ProbeParams,
        context: MethodContext,
        *,
        top_k: int,
        candidates: Sequence[int] | None = None,
    ) -> Ranking:
        judgments = context.query_judgments(self.key)
        probe, used = fit_query_probe(query, params, context, judgments)
        context.cancel.check()
        ranking = _ranked(context, probe.direction, top_k, candidates)
        if probe.has_probabilities:
            for image_id, p in zip(ranking.ids, probe.probability(ranking.scores), strict=True):
                ranking.evidence[image_id] = {"p": round(float(p), 6)}
        ranking.details.update(_usage(used, probe.note))
        # p = 1 / (1 + exp(-(p_scale * score + p_bias))) for every row of the saved run.
        ranking.details["probe"] = probe.to_json()
        return ranking


def probabilities_of(scores: Sequence[float], details: Mapping[str, Any]) -> list[float] | None:
    """The calibrated probabilities of a probe run's scores, from its details (None when the
    run is not a fitted probe's)."""
    probe = details.get("probe") if isinstance(details, Mapping) else None
    if not isinstance(probe, Mapping) or not probe.get("fitted") or probe.get("p_scale") is None:
        return None  # not a probe's run, or one too few judgments of a kind gave no probability
    scale, bias = float(probe["p_scale"]), float(probe["p_bias"])
    logits = scale * np.asarray(scores, dtype=np.float64) + bias
    return [float(p) for p in 0.5 * (1.0 + np.tanh(0.5 * logits))]


# -- more like these --------------------------------------------------------------------------


@dataclass(frozen=True)
class MoreLikeTheseParams:
    """Each photo judged relevant searches the collection (at most `max_images` of them, spread
    over the judged ones); the rankings are fused by reciprocal rank fusion with `k_rrf` (60, as
    in Cormack et al.); `include_text` adds the query's own ranking to the fusion."""

    k_rrf: int = 60
    include_text: bool = False
    max_images: int = 32

    def check(self) -> None:
        if self.k_rrf < 0:
            raise BadInputError("k_rrf must be 0 or more")
        if self.max_images < 1:
            raise BadInputError("max_images must be at least 1")


class MoreLikeTheseMethod(_LearningMethod):
    key = "more-like-these"
    label = "More like these"
    description = (
        "A search from every photo judged relevant (image queries fused by reciprocal rank fusion)"
    )
    Params = MoreLikeTheseParams

    def run(
        self,
        query: SearchQuery,
        params: MoreLikeTheseParams,
        context: MethodContext,
        *,
        top_k: int,
        candidates: Sequence[int] | None = None,
    ) -> Ranking:
        judgments = context.query_judgments(self.key)
        relevant = {i: r for i, r in judgments.items() if r > 0}
        used = judged_vectors(context, relevant)
        vectors = used.vectors
        if len(vectors) > params.max_images:
            # Spread over the judged photos (by id), not the first few.
            keep = np.linspace(0, len(vectors) - 1, params.max_images).round().astype(int)
            vectors = vectors[keep]
        if not len(vectors):
            ranking = _ranked(context, query_vector(query, context), top_k, candidates)
            ranking.details.update(
                _usage(used, "no photo judged relevant yet: the query's own ranking")
            )
            return ranking
        depth = max(top_k, len(candidates)) if candidates is not None else top_k
        lists = []
        for vector in vectors:
            context.cancel.check()
            lists.append(_ranked(context, vector, depth, candidates).ids)
        if params.include_text:
            lists.append(_ranked(context, query_vector(query, context), depth, candidates).ids)
        fused = reciprocal_rank_fusion(lists, k_rrf=params.k_rrf)
        ranking = Ranking.from_pairs(fused[:depth])
        note = f"fused the searches of {len(vectors)} photos judged relevant"
        if len(vectors) < len(used.ids):
            note += f" (of {len(used.ids)})"
        ranking.details.update(_usage(used, note))
        ranking.details["images_used"] = len(vectors)
        return ranking


# -- workflows on a saved query ---------------------------------------------------------------


@dataclass(frozen=True)
class SavedQuery:
    """A saved query's words and photo, as the learning methods refine them."""

    id: int
    text: str
    image_path: str | None

    def search_query(self) -> SearchQuery:
        return SearchQuery(self.text, Path(self.image_path) if self.image_path else None)


def saved_query(library: Library, query_id: int) -> SavedQuery:
    """The saved query `query_id`; a one-line BadInputError when there is none."""
    from engine.catalog import Query

    with library.catalog.session() as s:
        row = s.get(Query, query_id)
        if row is None:
            raise BadInputError(f"no saved query with id {query_id} ('quadrat export' lists none)")
        return SavedQuery(row.id, row.text, row.image_path)


def query_context(
    library: Library,
    encoder_loader: Callable[[], Encoder],
    query_id: int,
    filters: SearchFilters | None,
    judgments: Mapping[int, int] | None,
) -> MethodContext:
    """A context that gives a learning method the saved query's judgments: `judgments` when
    given (the window passes the ones it shows), else the catalog's, read when it runs."""
    provider: Callable[[], Mapping[int, int]]
    if judgments is not None:
        fixed = dict(judgments)

        def provider() -> Mapping[int, int]:
            return fixed

    else:
        from engine.judgments.queries import QueryStore

        def provider() -> Mapping[int, int]:
            return QueryStore(library).judgments(query_id)

    return MethodContext(library, encoder_loader, filters=filters, judgments=provider)


def learning_spec(method: str | MethodSpec) -> MethodSpec:
    """The spec of a method that learns from judgments; a one-line BadInputError naming them
    for any other method."""
    from engine.methods.registry import methods, resolve_spec

    spec = resolve_spec(method) if isinstance(method, str) else method
    if not spec.method.needs_judgments:
        learning = ", ".join(k for k, m in methods().items() if m.needs_judgments)
        raise BadInputError(
            f"method '{spec.key}' does not learn from judgments; refine with one that does: "
            f"{learning}"
        )
    return spec


@dataclass
class Refinement:
    """A refinement saved as a run: its ranking, the run it came from, and both runs' metrics
    against the judgments made so far (what the metrics panel shows side by side)."""

    query_id: int
    run_id: int
    from_run: int | None
    method: str  # the spec text, e.g. "probe" or "rocchio:beta=1"
    ranking: Ranking
    judgments: dict[int, int]
    metrics: LiveMetrics
    from_metrics: LiveMetrics | None
    from_method: str | None
    notes: list[str] = field(default_factory=list)

    @property
    def probabilities(self) -> list[float] | None:
        """The calibrated probability of each ranked photo (a fitted probe's runs only)."""
        return probabilities_of(self.ranking.scores, self.ranking.details)


def refine_query(
    library: Library,
    encoder_loader: Callable[[], Encoder],
    query_id: int,
    method: str | MethodSpec = "probe",
    *,
    from_run: int | None = None,
    top_k: int = 100,
    k: int = 50,
    filters: SearchFilters | None = None,
    judgments: Mapping[int, int] | None = None,
) -> Refinement:
    """Refine a saved query from its judgments with a learning method and save the ranking as a
    new run whose params name `from_run` (default: the query's newest run; a query without runs
    first gets its own text/image ranking saved, so the gain has something to compare with).
    `judgments` replaces the catalog's (the window passes the ones it shows)."""
    from engine.judgments.queries import QueryStore
    from engine.methods.registry import run_label

    spec = learning_spec(method)
    query = saved_query(library, query_id)
    search_query = query.search_query()
    spec.check_query(search_query)
    store = QueryStore(library)
    judged = dict(judgments) if judgments is not None else store.judgments(query_id)
    context = query_context(library, encoder_loader, query_id, filters, judged)
    runs = store.runs_for(query_id)
    notes: list[str] = []
    model_key = context.encoder.model_key
    if from_run is not None:
        matching = [r for r in runs if r.id == from_run]
        if not matching:
            raise BadInputError(f"query {query_id} has no run {from_run}")
        base_run = matching[0]
    elif runs:
        base_run = runs[-1]
    else:
        from engine.methods.registry import resolve_spec

        text = resolve_spec("text")
        baseline = text.run(search_query, context, top_k=top_k)
        base_id = store.save_run(
            query_id,
            text.key,
            baseline.pairs(),
            model_key=model_key,
            params=SavedRunParams.for_run(text.params_dict(), top_k=top_k),
            kind=search_query.kind,
        )
        base_run = store.runs_for(query_id)[-1]
        assert base_run.id == base_id
        notes.append(f"the query had no run: its own ranking is saved as run {base_id}")
    started = time.monotonic()
    ranking = spec.run(search_query, context, top_k=top_k)
    seconds = time.monotonic() - started
    params = SavedRunParams.for_run(
        spec.params_dict(),
        details=ranking.details,  # kept even when empty, as refined runs always had it
        filters=filters.to_params() if filters is not None else None,  # as a search saves them
        top_k=top_k,
        from_run=base_run.id,
    )
    run_id = store.save_run(
        query_id,
        spec.key,
        ranking.pairs(),
        model_key=model_key,
        params=params,
        duration_ms=seconds * 1000.0,
        kind=search_query.kind,
    )
    metrics = live_metrics(ranking.ids, judged, k, run_id)
    base_ids = [image_id for image_id, _ in base_run.ranking]
    from_metrics = live_metrics(base_ids, judged, k, base_run.id)
    if ranking.details.get("note"):
        notes.append(str(ranking.details["note"]))
    return Refinement(
        query_id,
        run_id,
        base_run.id,
        spec.text,
        ranking,
        judged,
        metrics,
        from_metrics,
        run_label(base_run.method, base_run.params, base_run.kind),
        notes,
    )


@dataclass(frozen=True)
class LikelyRelevant:
    """What "export likely relevant photos" writes, best first: the photos judged relevant
    (known to be relevant: p = 1, in the probe's order), then the unjudged photos whose
    calibrated probability reaches `min_p`. Photos judged not relevant are never in it.
    `best_unjudged` is the highest p of an unjudged photo (None without probabilities);
    `note` the probe's own, saying why there are no probabilities when there are none."""

    min_p: float
    judged: list[tuple[int, float]]  # (image id, similarity to the probe's direction)
    likely: list[tuple[int, float, float]]  # (image id, similarity, calibrated p)
    has_probabilities: bool
    best_unjudged: float | None
    note: str

    @property
    def ranking(self) -> list[tuple[int, float]]:
        """(image id, the probe's score) of every photo to write, in order."""
        return self.judged + [(image_id, score) for image_id, score, _ in self.likely]

    @property
    def probabilities(self) -> dict[int, float]:
        """Each photo's probability of relevance: 1 for a judged one, else the calibrated p."""
        known = {image_id: 1.0 for image_id, _ in self.judged}
        return known | {image_id: p for image_id, _, p in self.likely}

    def __len__(self) -> int:
        return len(self.judged) + len(self.likely)

    def summary(self) -> str:
        """One line: what would be written, or why nothing would."""
        if not len(self):
            if not self.has_probabilities:
                return (
                    "No photo is judged relevant yet, and no unjudged photo has a probability: "
                    + self.why_no_probability
                )
            best = (
                "" if self.best_unjudged is None else f" (the highest is {self.best_unjudged:.2f})"
            )
            return (
                f"No photo is judged relevant yet, and no unjudged photo has p ≥ {self.min_p:g}"
                f"{best}: judge more photos, or choose a lower probability"
            )
        parts = [f"{len(self.judged):,} judged relevant"]
        if self.has_probabilities:
            parts.append(f"{len(self.likely):,} unjudged with p ≥ {self.min_p:g}")
        else:
            parts.append(f"no probability for the unjudged photos yet ({self.why_no_probability})")
        return ", ".join(parts)

    @property
    def why_no_probability(self) -> str:
        """The probe's note, cut to what matters for an export."""
        withheld = self.note.find("no probabilities until")
        if withheld >= 0:
            return self.note[withheld:]
        return self.note.split("; the query's own ranking")[0]


def photos_above(
    library: Library,
    encoder_loader: Callable[[], Encoder],
    query_id: int,
    min_p: float,
    *,
    params: ProbeParams | None = None,
    filters: SearchFilters | None = None,
    judgments: Mapping[int, int] | None = None,
) -> LikelyRelevant:
    """The photos judged relevant, then every unjudged photo whose calibrated probability of
    relevance (the probe fitted to the query's judgments) is at least `min_p`: a list to
    export. Photos judged not relevant are left out, whatever their p."""
    if not 0.0 < min_p < 1.0:
        raise BadInputError("--min-p must be between 0 and 1 (e.g. 0.9)")
    query = saved_query(library, query_id).search_query()
    context = query_context(library, encoder_loader, query_id, filters, judgments)
    judged = context.query_judgments(ProbeMethod.key)
    probe, _ = fit_query_probe(query, params or ProbeParams(), context, judged)
    relevant_ids = sorted(i for i, r in judged.items() if r > 0)
    known = (
        _ranked(context, probe.direction, len(relevant_ids), relevant_ids) if relevant_ids else None
    )
    judged_rows = [] if known is None else known.pairs()
    likely: list[tuple[int, float, float]] = []
    best: float | None = None
    if probe.has_probabilities:
        cut = probe.score_at(min_p)
        total = len(context.searcher.index)
        depth = 256
        while True:
            ranking = _ranked(context, probe.direction, min(depth, total), None)
            unjudged = sum(1 for i in ranking.ids if i not in judged)
            deep_enough = bool(ranking.scores) and ranking.scores[-1] < cut and unjudged > 0
            if not ranking.ids or deep_enough or len(ranking.ids) >= total:
                break
            depth *= 4  # the cut-off (or the first unjudged photo) lies deeper: search further
        chances = probe.probability(ranking.scores)
        for image_id, score, p in zip(ranking.ids, ranking.scores, chances, strict=True):
            if image_id in judged:
                continue
            best = float(p) if best is None else best
            if p >= min_p:
                likely.append((image_id, float(score), float(p)))
    return LikelyRelevant(min_p, judged_rows, likely, probe.has_probabilities, best, probe.note)


@dataclass(frozen=True)
class JudgeNext:
    """What "judge next" proposes: photo ids (the top picks first), each one's probability of
    relevance (NaN without a fitted probe), and the probe's note."""

    ids: list[int]
    probabilities: dict[int, float]
    note: str


def judge_next_for_query(
    library: Library,
    encoder_loader: Callable[[], Encoder],
    query_id: int,
    n: int = 12,
    *,
    top_mix: float = TOP_MIX,
    seed: int = 0,
    params: ProbeParams | None = None,
    filters: SearchFilters | None = None,
    judgments: Mapping[int, int] | None = None,
) -> JudgeNext:
    """The `n` unjudged photos whose judgment teaches the probe most (`engine.judgments.learning.
    judge_next` over the probe's top JUDGE_NEXT_DEPTH)."""
    query = saved_query(library, query_id).search_query()
    context = query_context(library, encoder_loader, query_id, filters, judgments)
    judged = context.query_judgments(ProbeMethod.key)
    probe, _ = fit_query_probe(query, params or ProbeParams(), context, judged)
    depth = max(JUDGE_NEXT_DEPTH, 10 * n + len(judged))
    ranking = _ranked(context, probe.direction, depth, None)
    p = probe.probability(ranking.scores)
    pairs = list(zip(ranking.ids, (float(v) for v in p), strict=True))
    ids = judge_next(pairs, judged, n, top_mix=top_mix, seed=seed)
    chances = dict(pairs)
    return JudgeNext(ids, {i: chances[i] for i in ids}, probe.note)


def reference_order(
    context: MethodContext, query: SearchQuery, ranked_depth: int = RANKED_DEPTH
) -> tuple[np.ndarray, int]:
    """Every indexed photo, the top `ranked_depth` in the query's own ranking (fixed: it does
    not move as judgments come in, so the score bands stay put) and the rest by id: the order
    the recall estimate stratifies, and how deep it is ranked."""
    index = context.searcher.index
    everything = index.ids()
    depth = min(ranked_depth, len(everything))
    if depth == 0:
        return everything, 0
    hits = index.search(np.asarray(query_vector(query, context), dtype=np.float32), depth)
    ranked = np.asarray([image_id for image_id, _ in hits], dtype=np.int64)
    rest = np.setdiff1d(everything, ranked, assume_unique=True)
    return np.concatenate([ranked, rest]), len(ranked)


def estimate_for_query(
    library: Library,
    encoder_loader: Callable[[], Encoder],
    query_id: int,
    *,
    judgments: Mapping[int, int] | None = None,
    seed: int | None = None,
    level: float = LEVEL,
) -> RecallEstimate:
    """How many relevant photos the library holds for a saved query (`estimate_recall` over
    the query's own ranking; the random order of each band is seeded by the query id)."""
    query = saved_query(library, query_id).search_query()
    context = query_context(library, encoder_loader, query_id, None, judgments)
    judged = context.query_judgments("estimate")
    order, ranked = reference_order(context, query)
    return estimate_recall(
        order, judged, seed=query_id if seed is None else seed, level=level, ranked_depth=ranked
    )


def sample_for_query(
    library: Library,
    encoder_loader: Callable[[], Encoder],
    query_id: int,
    n: int,
    *,
    judgments: Mapping[int, int] | None = None,
    seed: int | None = None,
) -> list[int]:
    """The next `n` photos to judge so that `estimate_for_query` tightens most."""
    query = saved_query(library, query_id).search_query()
    context = query_context(library, encoder_loader, query_id, None, judgments)
    judged = context.query_judgments("estimate")
    order, ranked = reference_order(context, query)
    return sample_to_judge(
        order, judged, n, seed=query_id if seed is None else seed, ranked_depth=ranked
    )
