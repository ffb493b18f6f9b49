"""Benchmark runs against a library: matching judgments to catalog photos and running methods.

`engine.evaluation.evaluate` knows files and protocols; this module supplies the library side:
`JudgmentResolver` (by source image id, relative path, or unique file name), a search callable
for any method of the registry, and `run_request` (a `BenchmarkRequest`), the one set-up that the
command line and the window use to run and compare several methods (`run_methods`: its short form).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import PurePosixPath
from typing import Any

from sqlalchemy import func, select

from engine.benchmarks.inquire_rerank import Candidate
from engine.catalog import Collection, Image
from engine.catalog.library import Library
from engine.errors import BadInputError
from engine.evaluation.evaluate import (
    BenchmarkJudgment,
    BenchmarkQuery,
    BenchmarkResult,
    run_benchmark,
)
from engine.evaluation.metrics import MeanMetrics
from engine.evaluation.significance import PERMUTATIONS, Comparison, compare
from engine.methods import (
    LanguageModelEndpoint,
    MethodContext,
    MethodSpec,
    SearchQuery,
    resolve_spec,
)
from engine.progress import CancelToken, Progress, ProgressCallback, no_progress
from engine.search.filters import SearchFilters, filtered_ids

log = logging.getLogger(__name__)

# How exports name a photo that has no source (COCO/iNat) id: unambiguous, and without spaces
# so that TREC files can carry it.
CATALOG_DOCID_PREFIX = "quadrat-"


def catalog_docid(image_id: int) -> str:
    """The docid of a photo by its catalog id."""
    return f"{CATALOG_DOCID_PREFIX}{image_id}"


RERANK_CANDIDATES = 100  # INQUIRE-RERANK reranks a fixed top-100

ALL_COLLECTIONS = "all"
"""The collection choice that ranks every collection of the library."""


@dataclass(frozen=True)
class CollectionInfo:
    """A collection of the library, as a benchmark names it."""

    id: int
    name: str
    root: str
    photos: int  # indexed photos (on disk, status ok)

    def label(self) -> str:
        return f"{self.name} ({self.photos:,} photos)"


class JudgmentResolver:
    """Maps a judgment's image id or image path (and collection, when the file names one) to a
    catalog image id; `collection_ids` limits it to those collections."""

    def __init__(self, library: Library, collection_ids: Iterable[int] | None = None) -> None:
        scope = None if collection_ids is None else set(collection_ids)
        self.by_external: dict[str, list[int]] = {}
        self.by_path: dict[str, list[int]] = {}
        self.catalog_ids: set[int] = set()
        self.collection_of: dict[int, int] = {}
        self.external_of: dict[int, str] = {}
        names: dict[str, list[int]] = {}
        stmt = select(Image.id, Image.rel_path, Image.external_id, Image.collection_id).where(
            Image.status == "ok"
        )
        with library.catalog.session() as s:
            self.collections = {c.id: (c.name, c.root) for c in s.scalars(select(Collection))}
            for image_id, rel_path, external_id, collection_id in s.execute(stmt):
                if scope is not None and collection_id not in scope:
                    continue
                if external_id is not None:
                    self.by_external.setdefault(str(external_id), []).append(image_id)
                    self.external_of[image_id] = str(external_id)
                self.by_path.setdefault(rel_path, []).append(image_id)
                self.catalog_ids.add(image_id)
                self.collection_of[image_id] = collection_id
                names.setdefault(PurePosixPath(rel_path).name, []).append(image_id)
        # A bare file name identifies a photo only when no other photo shares it.
        self.by_name = {name: ids[0] for name, ids in names.items() if len(ids) == 1}

    def _named(self, collection: str | None) -> set[int] | None:
        """The collections a judgment's `collection` names (by name, else by folder); None
        when it names none of this library's (a file from another library: ignored)."""
        if not collection:
            return None
        by_name = {cid for cid, (name, _) in self.collections.items() if name == collection}
        if by_name:
            return by_name
        by_root = {cid for cid, (_, root) in self.collections.items() if root == collection}
        return by_root or None

    def candidates(self, judgment: BenchmarkJudgment) -> list[int]:
        """Every photo the judgment matches equally well (one, unless collections hold copies
        under the same relative path and nothing tells them apart)."""
        named = self._named(judgment.collection)

        def within(ids: Iterable[int]) -> list[int]:
            return [i for i in ids if named is None or self.collection_of[i] in named]

        path = (judgment.image_path or "").replace("\\", "/").lstrip("./")
        image_id = judgment.image_id
        found = within(self.by_path.get(path, [])) if path else []
        if len(found) > 1 and image_id:
            # The same relative path in several collections: the image id tells them apart.
            narrowed = [i for i in found if image_id in (self.external_of.get(i), catalog_docid(i))]
            found = narrowed or found
        if found:
            return found
        if image_id and image_id in self.by_external:
            found = within(self.by_external[image_id])
            if found:
                return found
        if image_id and image_id.startswith(CATALOG_DOCID_PREFIX):
            suffix = image_id[len(CATALOG_DOCID_PREFIX) :]
            if suffix.isdigit() and int(suffix) in self.catalog_ids:
                return within([int(suffix)])
        if path:
            unique = self.by_name.get(PurePosixPath(path).name)
            if unique is not None:
                return within([unique])
        return []

    def __call__(self, judgment: BenchmarkJudgment) -> int | None:
        found = self.candidates(judgment)
        # Equal matches (identical copies): the photo indexed first, so the answer is stable.
        return min(found) if found else None

    def docid(self, image_id: int) -> str:
        """How a TREC run names a photo: its source id when it has one that no other photo
        shares, else the catalog id."""
        external = self.external_of.get(image_id)
        if external is not None and len(self.by_external.get(external, ())) == 1:
            return external
        return catalog_docid(image_id)


@dataclass(frozen=True)
class CollectionMatch:
    """Where the judgments' photos lie among the library's collections."""

    collections: tuple[CollectionInfo, ...]  # every collection of the library, by name
    holding: dict[int, int]  # collection id -> judgments whose photo it holds
    matched: int  # judgments that name a photo of the library
    unmatched: int  # judgments that name no photo of the library
    only: CollectionInfo | None  # the one collection holding every matched judgment's photo


def library_collections(library: Library) -> tuple[CollectionInfo, ...]:
    """Every collection of the library with its count of indexed photos, by name."""
    with library.catalog.session() as s:
        counts = dict(
            s.execute(
                select(Image.collection_id, func.count())
                .where(Image.status == "ok")
                .group_by(Image.collection_id)
            ).all()
        )
        rows = s.scalars(select(Collection).order_by(Collection.name, Collection.id)).all()
        return tuple(CollectionInfo(c.id, c.name, c.root, int(counts.get(c.id, 0))) for c in rows)


def match_collections(library: Library, judgments: Iterable[BenchmarkJudgment]) -> CollectionMatch:
    """Which collections hold the judged photos, and the one that holds all of them if exactly
    one does (a collection of copies under the same paths holds them only when nothing, such as
    a source image id, tells the copies from the originals)."""
    collections = library_collections(library)
    resolver = JudgmentResolver(library)
    holding: dict[int, int] = {}
    common: set[int] | None = None
    matched = unmatched = 0
    for judgment in judgments:
        found = {resolver.collection_of[i] for i in resolver.candidates(judgment)}
        if not found:
            unmatched += 1
            continue
        matched += 1
        for collection_id in found:
            holding[collection_id] = holding.get(collection_id, 0) + 1
        common = found if common is None else common & found
    only = None
    if common is not None and len(common) == 1:
        (only_id,) = common
        only = next((c for c in collections if c.id == only_id), None)
    return CollectionMatch(collections, holding, matched, unmatched, only)


@dataclass(frozen=True)
class CollectionChoice:
    """The collections a benchmark ranks, and one line saying which and why."""

    ranked: tuple[CollectionInfo, ...]
    everything: bool  # every collection of the library is ranked
    match: CollectionMatch
    note: str

    @property
    def ids(self) -> tuple[int, ...] | None:
        """The collection filter of the searches; None when every collection is ranked."""
        return None if self.everything else tuple(c.id for c in self.ranked)


def _names(collections: Sequence[CollectionInfo]) -> str:
    return ", ".join(f"'{c.name}' ({c.photos:,} photos)" for c in collections)


def find_collection_by_key(collections: Sequence[CollectionInfo], key: str) -> CollectionInfo:
    """A collection by its name, its folder or its catalog id; a one-line BadInputError names
    the choices when none (or several) match."""
    key = key.strip()
    found = [c for c in collections if c.name == key]
    if not found:
        found = [c for c in collections if c.root == key or c.root == key.rstrip("/\\")]
    if not found and key.isdigit():
        found = [c for c in collections if c.id == int(key)]
    if len(found) == 1:
        return found[0]
    if found:
        raise BadInputError(
            f"several collections are named {key!r}: give the folder of the one to rank "
            f"({', '.join(c.root for c in found)})"
        )
    choices = ", ".join(repr(c.name) for c in collections) or "none yet"
    raise BadInputError(
        f"no collection {key!r} in the library; choose one of {choices}, or {ALL_COLLECTIONS!r}"
    )


def choose_collections(
    library: Library, judgments: Sequence[BenchmarkJudgment], choice: str | None = None
) -> CollectionChoice:
    """The collections to rank: `choice` names one (name, folder or id), `"all"` ranks every
    one, and None (the default) ranks the one collection that holds every judged photo when
    exactly one does (unjudged copies elsewhere would only push judged photos down), else all."""
    match = match_collections(library, judgments)
    collections = match.collections
    everything = CollectionChoice(collections, True, match, "")
    several = len(collections) > 1
    if choice is not None and choice.strip() not in ("", "auto") and choice != ALL_COLLECTIONS:
        chosen = find_collection_by_key(collections, choice)
        outside = match.matched - match.holding.get(chosen.id, 0)
        note = f"ranking the collection '{chosen.name}' ({chosen.photos:,} photos)"
        if outside:
            note += f"; {outside:,} judgments name photos of other collections, left out of R"
        return CollectionChoice((chosen,), not several, match, note)
    if choice == ALL_COLLECTIONS or not several or match.only is None:
        if not several:
            note = f"ranking the library's one collection {_names(collections)}"
        else:
            note = f"ranking all {len(collections)} collections: {_names(collections)}"
            if match.only is not None:
                note += f"; the judged photos all lie in '{match.only.name}'"
            elif match.matched and choice != ALL_COLLECTIONS:
                note += "; the judged photos lie in more than one of them"
        return CollectionChoice(everything.ranked, True, match, note)
    only = match.only
    note = (
        f"ranking the collection '{only.name}' ({only.photos:,} photos) alone: the judged photos "
        f"all lie in it (rank all {len(collections)} collections with the choice "
        f"'{ALL_COLLECTIONS}')"
    )
    return CollectionChoice((only,), False, match, note)


def method_search(
    context: MethodContext, spec: MethodSpec, depth: int
) -> Callable[[BenchmarkQuery, Sequence[int] | None], list[tuple[int, float]]]:
    """A `search(query, candidates)` callable for `engine.evaluation.evaluate.run_benchmark`: any method of
    the registry, ranking the collection (fullrank) or reordering fixed candidates (rerank)."""

    def search(query: BenchmarkQuery, candidates: Sequence[int] | None) -> list[tuple[int, float]]:
        top_k = depth if candidates is None else max(1, len(candidates))
        ranking = spec.run(SearchQuery(query.text), context, top_k=top_k, candidates=candidates)
        return ranking.pairs()

    return search


def candidate_lists(
    context: MethodContext, base: str = "text", size: int = RERANK_CANDIDATES
) -> Callable[[BenchmarkQuery], list[int]]:
    """The fixed candidate set of the rerank protocol: the top `size` of the `base` method
    (INQUIRE-RERANK fixes the top 100 of a CLIP text search)."""
    spec = resolve_spec(base)

    def candidates(query: BenchmarkQuery) -> list[int]:
        return spec.run(SearchQuery(query.text), context, top_k=size).ids

    return candidates


@dataclass
class MethodsBenchmark:
    """Benchmark results of several methods on the same queries and judgments."""

    queries: list[BenchmarkQuery]
    results: dict[str, BenchmarkResult]  # spec text as given -> result, in the order given
    comparisons: list[Comparison]  # each later method against the first, paired over queries
    resolver: JudgmentResolver
    k: int
    protocol: str
    collections: CollectionChoice | None = None  # what was ranked, and why
    # Fixed candidates (rerank from a candidates file) naming no photo of what was ranked.
    unresolved_candidates: int = 0
    filters: SearchFilters | None = None  # what every method's ranking was restricted to
    # Relevant judgments whose photo the filters leave out: still in R, no method can find them.
    relevant_outside_filters: int = 0

    def per_supercategory(self, spec: str) -> dict[str, MeanMetrics]:
        return dict(sorted(self.results[spec].by_category.get("supercategory", {}).items()))


@dataclass(frozen=True)
class BenchmarkRequest:
    """What a benchmark of several methods runs: the queries and judgments, each method as a
    `KEY[:NAME=VALUE,…]` spec, and the options of `run_request` (documented there)."""

    queries: Sequence[BenchmarkQuery]
    judgments: Sequence[BenchmarkJudgment]
    specs: Sequence[str]
    k: int = 50
    protocol: str = "fullrank"
    permutations: int = PERMUTATIONS
    collection: str | None = None
    generator: str = ""
    llm: LanguageModelEndpoint | None = None
    candidates: Mapping[str, Sequence[Candidate]] | None = None
    filters: SearchFilters | None = None
    ties: str = "order"  # tied scores: strict order, or grouped in AP and nDCG (INQUIRE's)
    unit: str = "photo"  # what the metrics count: photos, or events (engine.evaluation.units)


def run_methods(
    library: Library,
    encoder_loader: Callable[[], Any],
    queries: Sequence[BenchmarkQuery],
    judgments: Sequence[BenchmarkJudgment],
    specs: Sequence[str],
    *,
    progress: ProgressCallback = no_progress,
    cancel: CancelToken | None = None,
    **options: Any,
) -> MethodsBenchmark:
    """`run_request` in short, for scripts and tests: `options` are `BenchmarkRequest`'s other
    fields by name (an unknown one is a TypeError)."""
    request = BenchmarkRequest(queries, judgments, specs, **options)
    return run_request(library, encoder_loader, request, progress=progress, cancel=cancel)


def run_request(
    library: Library,
    encoder_loader: Callable[[], Any],
    request: BenchmarkRequest,
    *,
    progress: ProgressCallback = no_progress,
    cancel: CancelToken | None = None,
) -> MethodsBenchmark:
    """Run each method of `request` (a `KEY[:NAME=VALUE,…]` spec) over its queries and compare
    each later one with the first: the one benchmark set-up of `quadrat evaluate` and the
    window's view. Checks, set-up, a run per method, scoring.

    `collection` picks what is ranked (see `choose_collections`): by default the one collection
    that holds every judged photo, when exactly one does. `generator` is the configured
    text-to-image generator spec for methods that draw (visret); `llm` the language-model
    endpoint for methods that ask one. `candidates` (rerank only: query id -> its fixed
    candidates, by image id or path as a judgment names a photo) replaces the computed top 100
    of text search, as INQUIRE-Rerank's published candidates do.

    `filters` restrict every method's ranking (and the fixed candidates) to the photos that
    pass them. Their collections narrow the collection choice (a judgment naming a photo of a
    collection left out is left out of R, as with `collection`); the other filters keep R
    whole, and `relevant_outside_filters` counts the relevant judgments they put out of reach.
    `ties="group"` scores AP and nDCG with tied scores grouped, as INQUIRE's code does.
    `unit="event"` scores events rather than photos (an event is relevant when any of its
    frames is judged relevant; `engine.evaluation.units`)."""
    resolved = _checked_specs(request)  # every spec checked before any work
    setup = _set_up(library, encoder_loader, request, cancel or CancelToken())
    results = _run_each(setup, request, resolved, progress)
    first = resolved[0].text
    baseline = _averaged_ap(results[first])
    comparisons = [
        compare(spec.text, _averaged_ap(results[spec.text]), first, baseline, request.permutations)
        for spec in resolved[1:]
    ]
    filters = request.filters
    return MethodsBenchmark(
        list(request.queries),
        results,
        comparisons,
        setup.resolver,
        request.k,
        request.protocol,
        setup.chosen,
        setup.unresolved_candidates,
        filters=filters if filters is not None and filters.active else None,
        relevant_outside_filters=setup.relevant_outside_filters,
    )


@dataclass
class _Setup:
    """What every method of a benchmark shares: the ranked collections, the method context,
    the judgments' resolver and the rerank protocol's candidates (None under fullrank)."""

    judgments: list[BenchmarkJudgment]
    chosen: CollectionChoice
    context: MethodContext
    resolver: JudgmentResolver
    candidates_of: Callable[[BenchmarkQuery], list[int]] | None = None
    unresolved_candidates: int = 0
    relevant_outside_filters: int = 0


def _checked_specs(request: BenchmarkRequest) -> list[MethodSpec]:
    """The request's methods, resolved; a one-line refusal for a request that cannot run."""
    if request.candidates is not None and request.protocol != "rerank":
        raise BadInputError("fixed candidates belong to the rerank protocol: use --protocol rerank")
    if not request.specs:
        raise BadInputError("choose at least one method")
    if len(set(request.specs)) != len(request.specs):
        raise BadInputError("a method is given twice; give each method (with its options) once")
    resolved = [resolve_spec(text) for text in request.specs]
    learning = [spec.text for spec in resolved if spec.method.needs_judgments]
    if learning:
        raise BadInputError(
            f"{', '.join(learning)} would learn from the very judgments the benchmark scores; "
            "measure learning methods with the simulation (tests/bench/bench_feedback.py) or "
            "use 'quadrat refine' on a saved query"
        )
    return resolved


def _set_up(
    library: Library,
    encoder_loader: Callable[[], Any],
    request: BenchmarkRequest,
    cancel: CancelToken,
) -> _Setup:
    """Choose what is ranked, build the shared context and resolver, and fix the candidates."""
    judgments = list(request.judgments)
    filters = request.filters
    chosen = choose_collections(library, judgments, request.collection)
    if filters is not None and filters.collection_ids:
        chosen = _narrowed(chosen, filters.collection_ids)
    ranking_filters = replace(filters or SearchFilters(), collection_ids=chosen.ids or ())
    context = MethodContext(
        library,
        encoder_loader,
        filters=ranking_filters if ranking_filters.active else None,
        cancel=cancel,
        generator=request.generator,
        llm=request.llm or LanguageModelEndpoint(),
    )
    setup = _Setup(judgments, chosen, context, JudgmentResolver(library, chosen.ids))
    if request.protocol == "rerank":
        setup.candidates_of = candidate_lists(context)
    allowed: set[int] | None = None
    if ranking_filters.without("collection_ids").active:
        allowed = set(filtered_ids(library.catalog, ranking_filters).tolist())
        found = (setup.resolver(j) for j in judgments if j.relevant > 0)
        setup.relevant_outside_filters = sum(
            1 for image_id in found if image_id is not None and image_id not in allowed
        )
    if request.candidates is not None:
        fixed, setup.unresolved_candidates = _resolve_candidates(request.candidates, setup.resolver)
        if allowed is not None:  # the filters restrict the fixed candidates too
            fixed = {qid: [i for i in ids if i in allowed] for qid, ids in fixed.items()}
        setup.candidates_of = lambda query: fixed.get(query.query_id, [])
    if setup.candidates_of is not None:
        setup.candidates_of = _once_per_query(setup.candidates_of)
    return setup


def _once_per_query(
    candidates_of: Callable[[BenchmarkQuery], list[int]],
) -> Callable[[BenchmarkQuery], list[int]]:
    """The same fixed candidates for every method: computed once per query."""
    cache: dict[str, list[int]] = {}

    def cached(query: BenchmarkQuery) -> list[int]:
        if query.query_id not in cache:
            cache[query.query_id] = list(candidates_of(query))
        return cache[query.query_id]

    return cached


def _run_each(
    setup: _Setup,
    request: BenchmarkRequest,
    resolved: Sequence[MethodSpec],
    progress: ProgressCallback,
) -> dict[str, BenchmarkResult]:
    """Each method over every query, in the order given; progress counts queries of all."""
    queries = request.queries
    depth = max(request.k, RERANK_CANDIDATES)
    total = len(queries) * len(resolved)
    results: dict[str, BenchmarkResult] = {}
    for number, spec in enumerate(resolved):
        offset = number * len(queries)

        def method_progress(p: Progress, offset: int = offset, name: str = spec.text) -> None:
            progress(Progress(offset + p.done, total, message=f"{name}: {p.message}"))

        results[spec.text] = run_benchmark(
            queries,
            setup.judgments,
            method_search(setup.context, spec, depth),
            setup.resolver,
            k=request.k,
            protocol=request.protocol,
            candidates=setup.candidates_of,
            progress=method_progress,
            cancel=setup.context.cancel,
            ties=request.ties,
            event_of=event_lookup(setup.context.library) if request.unit == "event" else None,
        )
    return results


def event_lookup(library: Library) -> Callable[[Sequence[int]], Mapping[int, int]]:
    """Image ids -> their event ids, read from the library (for metrics per event)."""
    from engine.search.events import event_ids_of

    def lookup(image_ids: Sequence[int]) -> Mapping[int, int]:
        return event_ids_of(library, image_ids)

    return lookup


def _narrowed(chosen: CollectionChoice, wanted: Sequence[int]) -> CollectionChoice:
    """The collection choice cut down to the collections of a filter."""
    kept = tuple(c for c in chosen.ranked if c.id in set(wanted))
    if not kept:
        raise BadInputError(
            f"the collection filter leaves nothing to rank: {chosen.note}, and the filter names "
            "none of those collections"
        )
    if len(kept) == len(chosen.ranked):
        return chosen
    match = chosen.match
    note = f"ranking {_names(kept)} (the collection filter)"
    outside = match.matched - sum(match.holding.get(c.id, 0) for c in kept)
    if outside > 0:
        note += f"; {outside:,} judgments name photos of other collections, left out of R"
    return CollectionChoice(kept, False, match, note)


def _resolve_candidates(
    candidates: Mapping[str, Sequence[Candidate]], resolver: JudgmentResolver
) -> tuple[dict[str, list[int]], int]:
    """Query id -> catalog ids of its fixed candidates in their order, matched as judgments are;
    and how many named no photo (left out, and logged)."""
    fixed: dict[str, list[int]] = {}
    unresolved = 0
    for query_id, listed in candidates.items():
        ids: list[int] = []
        for candidate in listed:
            image_id = resolver(
                BenchmarkJudgment(query_id, candidate.image_id, candidate.image_path, relevant=0)
            )
            if image_id is None:
                unresolved += 1
            else:
                ids.append(image_id)
        fixed[query_id] = list(dict.fromkeys(ids))
    if unresolved:
        log.warning("%d fixed candidates name photos not in the ranked collection", unresolved)
    return fixed, unresolved


def _averaged_ap(result: BenchmarkResult) -> dict[str, float]:
    """query id -> AP of the queries the mean averages (R > 0)."""
    return {m.query_id: m.AP for m in result.mean.per_query if m.R > 0}
