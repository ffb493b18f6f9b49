"""Text: CLIP similarity between the query and every photo (INQUIRE's fullrank baseline).

Answers text queries (the words through a prompt template), image queries (the photo's own
embedding: "More like this", a dropped photo) and image+text queries (a weighted sum of both
embeddings, RMIR-style). Words may carry + and - terms, as rclip's do: "circle -red +yellow".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from engine.errors import BadInputError
from engine.methods.base import Method, Ranking, SearchQuery
from engine.methods.context import MethodContext
from engine.terms import combine_vectors, parse_terms

if TYPE_CHECKING:  # a text search on the ONNX text tower does without the torch encoders
    from engine.models.encoders import Encoder

ENSEMBLE = "ensemble"
"""The template value that averages the query's embeddings under several templates, as CLIP's
authors do for zero-shot classification."""

# Our own small set of caption forms, of the kinds CLIP's authors averaged (plain, photo,
# quality, close-up, in the wild); the query is inserted where {query} stands.
ENSEMBLE_TEMPLATES: tuple[str, ...] = (
    "{query}",
    "a photo of {query}",
    "a photo of a {query}",
    "a close-up photo of {query}",
    "a good photo of {query}",
    "a blurry photo of {query}",
    "an image showing {query}",
    "{query} in the wild",
)


@dataclass(frozen=True)
class TextParams:
    """`template` shapes the words: "{query}" (the bare query), any text with {query} in it
    ("a photo of {query}"), or "ensemble" (the mean over several templates). `image_weight` is
    the share of the photo in an image+text query (0 = words only, 1 = photo only)."""

    template: str = "{query}"
    image_weight: float = 0.5

    def check(self) -> None:
        if self.template != ENSEMBLE and "{query}" not in self.template:
            raise BadInputError(
                f"text template {self.template!r} must contain {{query}} (or be 'ensemble')"
            )
        if not 0.0 <= self.image_weight <= 1.0:
            raise BadInputError("image_weight must be between 0 and 1")


class TextMethod(Method):
    key = "text"
    label = "Text"
    description = "CLIP similarity to the query text (and to an example photo, if any)"
    Params = TextParams
    kinds = ("text", "image", "image+text")

    def run(
        self,
        query: SearchQuery,
        params: TextParams,
        context: MethodContext,
        *,
        top_k: int,
        candidates: Sequence[int] | None = None,
    ) -> Ranking:
        from engine.search.searcher import validate_query_text

        searcher = context.searcher
        vector: np.ndarray | None = None
        terms = parse_terms(query.text)
        if query.text.strip():
            vector = self.query_vector(validate_query_text(query.text), params, context.encoder)
        if query.image is not None:
            photo = searcher.encode_image_file(query.image)
            if vector is None:
                vector = photo
            else:
                vector = params.image_weight * photo + (1.0 - params.image_weight) * vector
        if vector is None:
            raise BadInputError("the query is empty: type a few words or give a photo")
        vector = vector / (np.linalg.norm(vector) or 1.0)
        context.cancel.check()
        hits = searcher.ranked(vector, top_k, context.filters, candidates=candidates)
        ranking = Ranking.from_pairs(hits)
        if terms.has_terms:
            ranking.details["terms"] = terms.to_json()
        return ranking

    @classmethod
    def query_vector(cls, text: str, params: TextParams, encoder: Encoder) -> np.ndarray:
        """The unit vector of the query's words. With + and - terms ("red circle -square
        +yellow", engine/terms.py): normalise(v(base) + Σ v(plus) − Σ v(minus)), each v under
        the template and normalised first; without any, exactly `text_vector(text)`."""
        from engine.search.searcher import searchable_terms

        terms = searchable_terms(text)
        if not terms.has_terms:
            return cls.text_vector(text, params, encoder)
        base = cls.text_vector(terms.base, params, encoder) if terms.base else None
        plus = [cls.text_vector(term, params, encoder) for term in terms.plus]
        minus = [cls.text_vector(term, params, encoder) for term in terms.minus]
        return combine_vectors(base, plus, minus)

    @staticmethod
    def text_vector(text: str, params: TextParams, encoder: Encoder) -> np.ndarray:
        """The query's unit vector under the template (the mean of the ensemble's)."""
        templates = ENSEMBLE_TEMPLATES if params.template == ENSEMBLE else (params.template,)
        vectors = encoder.encode_texts([t.replace("{query}", text) for t in templates])
        mean = np.asarray(vectors, dtype=np.float32).mean(axis=0)
        unit: np.ndarray = mean / (np.linalg.norm(mean) or 1.0)
        return unit
