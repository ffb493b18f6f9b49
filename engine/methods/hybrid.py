"""Hybrid: CLIP similarity fused with the words of the records, and taxon-aware queries.

What people wrote about a photo (its taxon's scientific and common names, their notes) is
evidence CLIP cannot see; EDIS showed that adding a candidate's own text to the image score
helps where the image alone fails. Up to three signals are fused:

- CLIP: the query's words (with + and - terms, engine/terms.py) against every photo, as `text`;
- record words: bm25 over the catalog's index of names and notes (SQLite FTS5, PostgreSQL
  tsvector; engine/search/fulltext.py),
  function words left out, photos whose record holds a - term left out;
- the named taxon: when the query names a taxon of the catalog ("mongoose standing upright"),
  its photos are boosted (`taxon=boost`, the default) and, in RRF, ranked by CLIP similarity to
  the rest of the words ("standing upright"); `taxon=restrict` searches only its photos, with
  the rest of the words; `taxon=off` ignores taxa (the mention is still reported in details).

Fusion is a weighted sum of normalised scores (`weighted`, the default) or reciprocal rank
fusion (`rrf`, docs/SPEC.md §2.1, tied scores sharing their rank).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.errors import BadInputError
from engine.methods.base import Method, Ranking, SearchQuery
from engine.methods.context import MethodContext
from engine.methods.fusion import reciprocal_rank_fusion, shared_ranks
from engine.methods.text import TextMethod, TextParams
from engine.terms import QueryTerms, combine_vectors

if TYPE_CHECKING:
    from engine.models.encoders import Encoder
    from engine.search.fulltext import TaxonMention

FUSIONS = ("rrf", "weighted")
TAXON_MODES = ("boost", "restrict", "off")


@dataclass(frozen=True)
class HybridParams:
    """`fusion`: "weighted" (the default, measured better on the demo benchmark: CLIP and bm25
    scores scaled to [0, 1] over the pooled photos, summed with `text_weight` for the words and
    1 - text_weight for CLIP, plus `taxon_weight` for a photo of the named taxon) or "rrf"
    (reciprocal rank fusion with `k_rrf`, tied scores sharing a rank). `taxon`:
    "boost" the photos of a taxon the query names, "restrict" the search to them, or "off".
    `depth` photos are taken from each ranking before fusing; `template` shapes the words for
    CLIP as in `text`."""

    fusion: str = "weighted"
    k_rrf: int = 60
    text_weight: float = 0.25
    taxon_weight: float = 0.25
    taxon: str = "boost"
    depth: int = 1000
    template: str = "{query}"

    def check(self) -> None:
        if self.fusion not in FUSIONS:
            raise BadInputError(f"fusion must be one of {', '.join(FUSIONS)}")
        if self.taxon not in TAXON_MODES:
            raise BadInputError(f"taxon must be one of {', '.join(TAXON_MODES)}")
        if self.k_rrf < 0:
            raise BadInputError("k_rrf must be 0 or more")
        if not 0.0 <= self.text_weight <= 1.0:
            raise BadInputError("text_weight must be between 0 and 1")
        if not 0.0 <= self.taxon_weight <= 1.0:
            raise BadInputError("taxon_weight must be between 0 and 1")
        if self.depth < 1:
            raise BadInputError("depth must be at least 1")
        TextParams(template=self.template).check()


def _intersect(*sets: np.ndarray | None) -> np.ndarray | None:
    """The ids in every given set (None = no restriction)."""
    out: np.ndarray | None = None
    for ids in sets:
        if ids is None:
            continue
        out = ids if out is None else np.intersect1d(out, ids, assume_unique=True)
    return out


def _listed(ids: np.ndarray | None) -> list[int] | None:
    return None if ids is None else [int(i) for i in ids.tolist()]


def _scaled(scores: dict[int, float]) -> dict[int, float]:
    """Min-max scaling to [0, 1] (all 1.0 when every score is the same)."""
    if not scores:
        return {}
    low, high = min(scores.values()), max(scores.values())
    if high <= low:
        return dict.fromkeys(scores, 1.0)
    return {i: (s - low) / (high - low) for i, s in scores.items()}


def _clip_vectors(
    terms: QueryTerms, clip_words: str, params: HybridParams, encoder: Encoder
) -> tuple[np.ndarray, np.ndarray]:
    """(the rest of the words' vector, the vector the CLIP side searches with), each with the
    + and - terms: within a restricted taxon the rest of the words, else the whole query."""
    text_params = TextParams(template=params.template)
    plus = [TextMethod.text_vector(t, text_params, encoder) for t in terms.plus]
    minus = [TextMethod.text_vector(t, text_params, encoder) for t in terms.minus]

    def words_vector(words: str) -> np.ndarray:
        base = TextMethod.text_vector(words, text_params, encoder) if words else None
        return combine_vectors(base, plus, minus)

    rest_vector = words_vector(clip_words)
    whole_vector = rest_vector if clip_words == terms.base else words_vector(terms.base)
    return rest_vector, rest_vector if params.taxon == "restrict" else whole_vector


def _details(
    mentions: Sequence[TaxonMention],
    params: HybridParams,
    terms: QueryTerms,
    clip_words: str,
    words_text: str,
) -> dict[str, Any]:
    """What a hybrid run keeps in its saved params: the taxa the query names and the one
    applied, what CLIP and the words searched, the fusion, the + / − terms."""
    from engine.search.fulltext import fts_query

    applied = bool(mentions) and params.taxon != "off"
    details: dict[str, Any] = {
        "taxon_mention": mentions[0].to_json() if mentions else None,
        "taxon_mentions": [m.to_json() for m in mentions],
        "taxon_applied": params.taxon if applied else "off",
        "clip_text": clip_words,
        "fts_query": fts_query(words_text, exclude=" ".join(terms.minus)),
        "fusion": params.fusion,
    }
    if terms.has_terms:
        details["terms"] = terms.to_json()
    return details


def _evidence(
    shown: Sequence[int],
    clip: Sequence[tuple[int, float]],
    bm25: Sequence[tuple[int, float]],
    found_words: Mapping[int, Any],
    taxon_ids: np.ndarray | None,
) -> dict[int, dict[str, Any]]:
    """Per photo shown: the record words matched, its CLIP and words ranks, and (with a
    named taxon applied, `taxon_ids` its photos) whether it is of the taxon."""
    clip_rank = {i: r for r, (i, _) in enumerate(clip, start=1)}
    text_rank = shared_ranks(bm25)
    taxon_set = set(taxon_ids.tolist()) if taxon_ids is not None else set()
    out: dict[int, dict[str, Any]] = {}
    for image_id in shown:
        evidence: dict[str, Any] = {
            "record_words": found_words.get(image_id, {}),
            "clip_rank": clip_rank.get(image_id),
            "text_rank": text_rank.get(image_id),
        }
        if taxon_ids is not None:
            evidence["taxon"] = image_id in taxon_set
        out[image_id] = evidence
    return out


class HybridMethod(Method):
    key = "hybrid"
    label = "Hybrid"
    description = (
        "CLIP similarity fused with the words of the records (taxon names, common names, "
        "notes; bm25 over SQLite FTS5 or PostgreSQL full-text search); a taxon named in the query boosts (or restricts to) its "
        "photos while CLIP looks for the rest of the words"
    )
    Params = HybridParams
    kinds = ("text",)

    def run(
        self,
        query: SearchQuery,
        params: HybridParams,
        context: MethodContext,
        *,
        top_k: int,
        candidates: Sequence[int] | None = None,
    ) -> Ranking:
        from engine.search.fulltext import (
            matched_words,
            mention_image_ids,
            taxa_in_query,
            text_ranked,
        )
        from engine.search.searcher import searchable_terms, validate_query_text

        terms = searchable_terms(validate_query_text(query.text))
        catalog = context.library.catalog
        mentions = taxa_in_query(catalog, terms.base)
        mention = mentions[0] if mentions and params.taxon != "off" else None
        clip_words = (mention.rest or terms.base) if mention is not None else terms.base

        # The CLIP side, with the + and - terms. Within a named taxon the taxon's words say
        # nothing more, so its photos are searched with the rest of the words; over the whole
        # collection (boost, off) the whole query is encoded, since outside the taxon its words
        # are what tells what to find (encoding only the rest there measured worse, see
        # docs/BENCHMARKS.md "Hybrid search").
        rest_vector, clip_vector = _clip_vectors(terms, clip_words, params, context.encoder)
        context.cancel.check()

        searcher = context.searcher
        fixed = (
            np.unique(np.asarray(list(candidates), dtype=np.int64))
            if candidates is not None
            else None
        )
        taxon_ids = mention_image_ids(catalog, mention) if mention is not None else None
        restrict = taxon_ids if params.taxon == "restrict" else None
        depth = max(params.depth, top_k)
        clip_scope = _intersect(fixed, restrict)
        # The words side: every word of the query and the + terms; - terms exclude.
        words_text = " ".join([terms.base, *terms.plus])
        exclude = " ".join(terms.minus)
        words_depth = depth if fixed is None else max(depth, len(fixed))
        # On a catalog whose server holds the vectors, both lists in one round trip.
        both = (
            searcher.ranked_with_words(
                clip_vector, depth, context.filters, words_text, words_depth, exclude
            )
            if clip_scope is None
            else None
        )
        if both is not None:
            clip, bm25 = both
        else:
            clip = searcher.ranked(
                clip_vector, depth, context.filters, candidates=_listed(clip_scope)
            )
            if clip_scope is None:
                clip = clip[:depth]
            context.cancel.check()
            filtered = (
                searcher.filtered_ids(context.filters)
                if context.filters is not None and context.filters.active
                else None
            )
            words_scope = _intersect(filtered, fixed, restrict)
            bm25 = text_ranked(catalog, words_text, words_depth, words_scope, exclude=exclude)
        context.cancel.check()

        # The named taxon's photos, by CLIP similarity to the rest of the words.
        in_taxon: list[tuple[int, float]] = []
        if taxon_ids is not None and params.taxon == "boost":
            scope = _intersect(taxon_ids, fixed)
            if scope is not None and len(scope):
                in_taxon = searcher.ranked(
                    rest_vector, depth, context.filters, candidates=scope.tolist()
                )
                in_taxon = in_taxon[:depth]
        context.cancel.check()

        if params.fusion == "rrf":
            fused = self._rrf([clip, bm25, in_taxon], params.k_rrf)
        else:
            fused = self._weighted(clip, bm25, in_taxon, taxon_ids, clip_vector, params, context)
        if fixed is None:
            fused = fused[:top_k]
        ranking = Ranking.from_pairs(fused)
        found_words = matched_words(catalog, ranking.ids, words_text)
        in_named = taxon_ids if mention is not None else None
        ranking.evidence.update(_evidence(ranking.ids, clip, bm25, found_words, in_named))
        ranking.details = _details(mentions, params, terms, clip_words, words_text)
        return ranking

    @staticmethod
    def _rrf(lists: Sequence[Sequence[tuple[int, float]]], k_rrf: int) -> list[tuple[int, float]]:
        """Reciprocal rank fusion (docs/SPEC.md §2.1), tied scores sharing their rank (bm25 gives
        many photos one score); ties of the fused score, summed exactly, by best single rank,
        then id."""
        return reciprocal_rank_fusion(lists, k_rrf, ties="shared")

    @staticmethod
    def _weighted(
        clip: Sequence[tuple[int, float]],
        bm25: Sequence[tuple[int, float]],
        in_taxon: Sequence[tuple[int, float]],
        taxon_ids: np.ndarray | None,
        vector: np.ndarray,
        params: HybridParams,
        context: MethodContext,
    ) -> list[tuple[int, float]]:
        """(1 - w) · CLIP + w · bm25, each scaled to [0, 1] over the pooled photos, plus the
        taxon weight for a photo of the named taxon (boost only). A photo found by its words or
        its taxon alone gets its real CLIP score under `vector` (the one that ranked `clip`),
        so the scaling compares like with like."""
        cosine = dict(clip)
        words = dict(bm25)
        unscored = [i for i in [*words, *(i for i, _ in in_taxon)] if i not in cosine]
        if unscored:
            rest = context.searcher.ranked(vector, 1, context.filters, candidates=unscored)
            cosine.update(rest)
        clip_scaled = _scaled(cosine)
        best_words = max(words.values(), default=0.0)
        boosted = (
            set(taxon_ids.tolist()) if taxon_ids is not None and params.taxon == "boost" else set()
        )
        fused: dict[int, float] = {}
        for image_id, similarity in clip_scaled.items():
            text_part = words.get(image_id, 0.0) / best_words if best_words > 0 else 0.0
            fused[image_id] = (
                (1.0 - params.text_weight) * similarity
                + params.text_weight * text_part
                + (params.taxon_weight if image_id in boosted else 0.0)
            )
        order = sorted(fused, key=lambda i: (-fused[i], -cosine[i], i))
        return [(i, fused[i]) for i in order]
