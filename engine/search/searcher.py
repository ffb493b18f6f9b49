"""The search primitives every method stands on: query checks, a filtered vector search with
its self-repair, and the hits (paths, taxa) of a ranking.

A search itself runs through the method registry (`engine.methods`: `resolve_spec(...).run`
with a `MethodContext`), the one path the command line, the window and the self-test take."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from sqlalchemy import select

from engine.catalog import Collection, Image, Taxon
from engine.catalog.library import Library
from engine.errors import BadImageError, BadInputError, QuadratError
from engine.search.filters import SearchFilters, filter_terms, filtered_ids
from engine.terms import QueryTerms, parse_terms

if TYPE_CHECKING:
    from engine.catalog.pgvector import PgVectorIndex
    from engine.models.encoders import Encoder
    from engine.vectors.index import VectorIndex

__all__ = [
    "SearchFilters",
    "SearchHit",
    "Searcher",
    "searchable_terms",
    "validate_query_text",
]

log = logging.getLogger(__name__)

# CLIP reads at most 77 tokens (about 60 words); a longer query would be silently truncated.
MAX_QUERY_CHARS = 1000


def searchable_terms(text: str) -> QueryTerms:
    """The query's base words and + and - terms (engine/terms.py); a query made only of - terms
    is refused, since there is nothing to search towards. The one place every method checks."""
    terms = parse_terms(text)
    if terms.minus and not terms.base and not terms.plus:
        raise BadInputError(
            "the query has only - terms: add words to search for (e.g. circle -red)"
        )
    return terms


def validate_query_text(text: str) -> str:
    """Strip a query and reject empty or over-long ones with a clear message."""
    cleaned = " ".join((text or "").split())
    if not cleaned:
        raise BadInputError("the query is empty: type a few words describing what to find")
    if len(cleaned) > MAX_QUERY_CHARS:
        raise BadInputError(
            f"the query is {len(cleaned)} characters long; the limit is {MAX_QUERY_CHARS} "
            "(the model reads only about the first 60 words)"
        )
    return cleaned


@dataclass(frozen=True)
class SearchHit:
    rank: int
    image_id: int
    score: float
    path: str  # absolute path of the photo
    rel_path: str = ""
    taxon: str | None = None
    common_name: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "image_id": self.image_id,
            "path": self.path,
            "score": round(float(self.score), 6),
            "rel_path": self.rel_path,
            "taxon": self.taxon,
            "common_name": self.common_name,
        }


class Searcher:
    """Searches one library with one encoder (the one it was indexed with)."""

    def __init__(self, library: Library, encoder: Encoder) -> None:
        spec = (
            encoder.spec if isinstance(encoder.spec, str) else getattr(encoder.spec, "spec", None)
        )
        library.check_model(encoder.model_key, spec)
        self.library = library
        self.encoder = encoder

    @property
    def index(self) -> VectorIndex | PgVectorIndex:
        """The model's vector index: a FAISS file here, or the catalog's server (pgvector)."""
        return self.library.vector_index(self.encoder.model_key)

    def encode_image_file(self, path: str | Path) -> np.ndarray:
        from engine.indexing.decode import decode_image

        path = Path(path).expanduser()
        if not path.is_file():
            raise BadInputError(f"query image not found: {path}")
        try:
            decoded = decode_image(path)
        except BadImageError as exc:
            raise BadInputError(f"cannot use {path.name} as a query: {exc.reason}") from exc
        vector: np.ndarray = self.encoder.encode_images([decoded.image])[0]
        return vector

    def ranked(
        self,
        vector: np.ndarray,
        top_k: int = 50,
        filters: SearchFilters | None = None,
        *,
        candidates: Sequence[int] | None = None,
    ) -> list[tuple[int, float]]:
        """(image id, score) pairs best first, within `filters` and, when given, within the
        fixed `candidates` (the rerank protocol: every candidate comes back, reordered).

        An index that serves an impossible score (outside [-1, 1], or NaN) is damaged: it is
        rebuilt from the catalog once, with a warning, and searched again. A second failure
        propagates as CorruptIndexError.
        """
        from engine.errors import CorruptIndexError

        if top_k < 1:
            raise BadInputError("--top must be at least 1")
        if filters is not None and filters.active and candidates is None:
            try:
                served = self._served_filtered(vector, top_k, filters)
            except CorruptIndexError as exc:
                log.warning("vector index failed its check, rebuilding from the catalog: %s", exc)
                self.library.rebuild_index(self.encoder.model_key)
                served = self._served_filtered(vector, top_k, filters)
            if served is not None:
                return served
        allowed = None
        if filters is not None and filters.active:
            allowed = self.filtered_ids(filters)
        if candidates is not None:
            wanted = np.unique(np.asarray(list(candidates), dtype=np.int64))
            allowed = wanted if allowed is None else np.intersect1d(allowed, wanted)
            top_k = max(top_k, len(wanted))
        if allowed is not None and len(allowed) == 0:
            return []
        query = np.asarray(vector, dtype=np.float32)
        try:
            return self.index.search(query, top_k, allowed_ids=allowed)
        except CorruptIndexError as exc:
            log.warning("vector index failed its check, rebuilding from the catalog: %s", exc)
            self.library.rebuild_index(self.encoder.model_key)
            return self.index.search(query, top_k, allowed_ids=allowed)

    def _served_filtered(
        self, vector: np.ndarray, top_k: int, filters: SearchFilters
    ) -> list[tuple[int, float]] | None:
        """A filtered search on the catalog's server (pgvector): the filter's SQL and the
        vector order in one statement, no id list sent; None for a local index."""
        index = self.index
        if index.kind != "pgvector":
            return None
        terms = filter_terms(self.library.catalog, filters)
        if terms is None:
            return []
        return index.search_filtered(np.asarray(vector, dtype=np.float32), top_k, terms)  # type: ignore[union-attr]

    def ranked_with_words(
        self,
        vector: np.ndarray,
        top_k: int,
        filters: SearchFilters | None,
        words: str,
        words_limit: int,
        exclude: str = "",
    ) -> tuple[list[tuple[int, float]], list[tuple[int, float]]] | None:
        """`ranked(vector, top_k, filters)` and `fulltext.text_ranked` of `words` (within the
        same filters) in one round trip to the catalog's server (pgvector); None for a local
        index or where the words find nothing to rank (the caller asks each on its own)."""
        from engine.search.fulltext import bm25_score, bm25_scored

        if top_k < 1:
            raise BadInputError("--top must be at least 1")
        index = self.index
        if index.kind != "pgvector":
            return None
        scored = bm25_scored(self.library.catalog, words, exclude)
        if scored is None:
            return None
        terms = None
        if filters is not None and filters.active:
            terms = filter_terms(self.library.catalog, filters)
            if terms is None:
                return [], []
        query = np.asarray(vector, dtype=np.float32)
        nearest, found = index.search_with_words(query, top_k, terms, scored, words_limit)  # type: ignore[union-attr]
        # The server's raw sums, rounded here as `text_ranked` rounds them (the catalog layer
        # below knows nothing of full-text search).
        return nearest, [(image_id, bm25_score(score)) for image_id, score in found]

    def hits_for(self, ranked: list[tuple[int, float]]) -> list[SearchHit]:
        """Attach paths and taxon names to (image_id, score) pairs, keeping their order."""
        ids = [int(i) for i, _ in ranked]
        info: dict[int, tuple[str, str, str | None, str | None]] = {}
        with self.library.catalog.session() as s:
            for start in range(0, len(ids), 900):
                chunk = ids[start : start + 900]
                stmt = (
                    select(Image.id, Collection.root, Image.rel_path, Taxon.name, Taxon.common_name)
                    .join(Collection, Collection.id == Image.collection_id)
                    .outerjoin(Taxon, Taxon.id == Image.taxon_id)
                    .where(Image.id.in_(chunk))
                )
                # taxon and common are None for a photo without a taxon (the outer join)
                for image_id, root, rel, taxon, common in s.execute(stmt):
                    info[image_id] = (root, rel, taxon, common)
        if self.library.restored_since_indexes_loaded():
            # The ids came from the index of the catalog before: read here, they may name
            # other photos. (The next search reads the restored catalog's vectors.)
            raise QuadratError("the catalog was restored while this search ran; search again")
        hits: list[SearchHit] = []
        for image_id, score in ranked:
            if image_id not in info:  # removed between index and catalog read
                continue
            root, rel, name, common = info[image_id]
            hits.append(
                SearchHit(
                    len(hits) + 1,
                    image_id,
                    float(score),
                    str(self.library.photo_root(root) / rel),
                    rel,
                    name,
                    common,
                )
            )
        return hits

    def filtered_ids(self, filters: SearchFilters) -> np.ndarray:
        """Sorted ids of the status-ok photos that pass `filters` (see `engine.search.filters`)."""
        return filtered_ids(self.library.catalog, filters)
