"""Benchmark runs against a library: matching judgments to catalog photos and running methods.

`engine.evaluate` knows files and protocols; this module supplies the library side:
`JudgmentResolver` (by source image id, relative path, or unique file name), a search callable
for any method of the registry, and `run_methods`, the one set-up that the command line and the
window use to run and compare several methods.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from sqlalchemy import select

from engine.catalog import Image
from engine.errors import BadInputError
from engine.evaluate import BenchmarkQuery, BenchmarkResult, Judgment, run_benchmark
from engine.library import Library
from engine.methods import MethodContext, MethodSpec, SearchQuery, resolve_spec
from engine.metrics import MeanMetrics
from engine.progress import CancelToken, Progress, ProgressCallback, no_progress
from engine.significance import PERMUTATIONS, Comparison, compare

log = logging.getLogger(__name__)

# How exports name a photo that has no source (COCO/iNat) id: unambiguous, and without spaces
# so that TREC files can carry it.
CATALOG_DOCID_PREFIX = "quadrat-"


def catalog_docid(image_id: int) -> str:
    """The docid of a photo by its catalog id."""
    return f"{CATALOG_DOCID_PREFIX}{image_id}"


RERANK_CANDIDATES = 100  # INQUIRE-RERANK reranks a fixed top-100


class JudgmentResolver:
    """Maps a judgment's image id or image path to a catalog image id."""

    def __init__(self, library: Library) -> None:
        self.by_external: dict[str, int] = {}
        self.by_path: dict[str, int] = {}
        self.catalog_ids: set[int] = set()
        names: dict[str, list[int]] = {}
        with library.catalog.session() as s:
            for image_id, rel_path, external_id in s.execute(
                select(Image.id, Image.rel_path, Image.external_id).where(Image.status == "ok")
            ):
                if external_id is not None:
                    self.by_external[str(external_id)] = image_id
                self.by_path[rel_path] = image_id
                self.catalog_ids.add(image_id)
                names.setdefault(PurePosixPath(rel_path).name, []).append(image_id)
        # A bare file name identifies a photo only when no other photo shares it.
        self.by_name = {name: ids[0] for name, ids in names.items() if len(ids) == 1}
        self.external_by_id = {v: k for k, v in self.by_external.items()}

    def __call__(self, judgment: Judgment) -> int | None:
        path = (judgment.image_path or "").replace("\\", "/").lstrip("./")
        if path and path in self.by_path:
            return self.by_path[path]
        if judgment.image_id and judgment.image_id in self.by_external:
            return self.by_external[judgment.image_id]
        if judgment.image_id and judgment.image_id.startswith(CATALOG_DOCID_PREFIX):
            suffix = judgment.image_id[len(CATALOG_DOCID_PREFIX) :]
            if suffix.isdigit() and int(suffix) in self.catalog_ids:
                return int(suffix)
        if path:
            return self.by_name.get(PurePosixPath(path).name)
        return None

    def docid(self, image_id: int) -> str:
        """How a TREC run names a photo: its source id when it has one, else the catalog id."""
        return self.external_by_id.get(image_id) or catalog_docid(image_id)


def method_search(
    context: MethodContext, spec: MethodSpec, depth: int
) -> Callable[[BenchmarkQuery, Sequence[int] | None], list[tuple[int, float]]]:
    """A `search(query, candidates)` callable for `engine.evaluate.run_benchmark`: any method of
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

    def per_supercategory(self, spec: str) -> dict[str, MeanMetrics]:
        return dict(sorted(self.results[spec].by_category.get("supercategory", {}).items()))


def run_methods(
    library: Library,
    encoder_loader: Callable[[], Any],
    queries: Sequence[BenchmarkQuery],
    judgments: Sequence[Judgment],
    specs: Sequence[str],
    *,
    k: int = 50,
    protocol: str = "fullrank",
    progress: ProgressCallback = no_progress,
    cancel: CancelToken | None = None,
    permutations: int = PERMUTATIONS,
) -> MethodsBenchmark:
    """Run each method (a `KEY[:NAME=VALUE,…]` spec) over the queries and compare each later one
    with the first: the one benchmark set-up of `quadrat evaluate` and the window's view."""
    if not specs:
        raise BadInputError("choose at least one method")
    if len(set(specs)) != len(specs):
        raise BadInputError("a method is given twice; give each method (with its options) once")
    resolved = [resolve_spec(text) for text in specs]  # every spec checked before any work
    context = MethodContext(library, encoder_loader, cancel=cancel or CancelToken())
    resolver = JudgmentResolver(library)
    depth = max(k, RERANK_CANDIDATES)
    candidates = candidate_lists(context) if protocol == "rerank" else None
    if candidates is not None:
        # The same fixed candidates for every method: computed once per query.
        cache: dict[str, list[int]] = {}
        base = candidates

        def candidates(query: BenchmarkQuery) -> list[int]:
            if query.query_id not in cache:
                cache[query.query_id] = base(query)
            return cache[query.query_id]

    total = len(queries) * len(resolved)
    results: dict[str, BenchmarkResult] = {}
    for number, spec in enumerate(resolved):
        offset = number * len(queries)

        def method_progress(p: Progress, offset: int = offset, name: str = spec.text) -> None:
            progress(Progress(offset + p.done, total, message=f"{name}: {p.message}"))

        results[spec.text] = run_benchmark(
            queries,
            judgments,
            method_search(context, spec, depth),
            resolver,
            k=k,
            protocol=protocol,
            candidates=candidates,
            progress=method_progress,
            cancel=context.cancel,
        )
    first = resolved[0].text
    baseline = _averaged_ap(results[first])
    comparisons = [
        compare(spec.text, _averaged_ap(results[spec.text]), first, baseline, permutations)
        for spec in resolved[1:]
    ]
    return MethodsBenchmark(list(queries), results, comparisons, resolver, k, protocol)


def _averaged_ap(result: BenchmarkResult) -> dict[str, float]:
    """query id -> AP of the queries the mean averages (R > 0)."""
    return {m.query_id: m.AP for m in result.mean.per_query if m.R > 0}
