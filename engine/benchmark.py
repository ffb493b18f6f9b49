"""Benchmark runs against a library: matching judgments to catalog photos and running methods.

`engine.evaluate` knows files and protocols; this module supplies the library-side callables:
`JudgmentResolver` (by source image id, relative path, or unique file name) and the per-method
search functions.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import PurePosixPath

from sqlalchemy import select

from engine.catalog import Image
from engine.errors import BadInputError
from engine.evaluate import BenchmarkQuery, Judgment
from engine.library import Library
from engine.search import Searcher

log = logging.getLogger(__name__)

METHODS = ("text",)  # methods a benchmark can run today
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
    searcher: Searcher, method: str, depth: int
) -> Callable[[BenchmarkQuery, Sequence[int] | None], list[tuple[int, float]]]:
    """A `search(query, candidates)` callable for `engine.evaluate.run_benchmark`."""
    if method not in METHODS:
        raise BadInputError(
            f"method '{method}' cannot be benchmarked yet; available: {', '.join(METHODS)}"
        )

    def search(query: BenchmarkQuery, candidates: Sequence[int] | None) -> list[tuple[int, float]]:
        if candidates is None:
            hits = searcher.text(query.text, top_k=depth).hits
            return [(h.image_id, h.score) for h in hits]
        # Rerank protocol: score only the fixed candidates with this method.
        import numpy as np

        vector = searcher.encoder.encode_texts([query.text])[0]
        allowed = np.asarray(list(candidates), dtype=np.int64)
        return searcher.index.search(vector, len(allowed), allowed_ids=allowed)

    return search


def candidate_lists(
    searcher: Searcher, size: int = RERANK_CANDIDATES
) -> Callable[[BenchmarkQuery], list[int]]:
    """The fixed candidate set of the rerank protocol: the text method's top `size`."""

    def candidates(query: BenchmarkQuery) -> list[int]:
        return [h.image_id for h in searcher.text(query.text, top_k=size).hits]

    return candidates
