"""VisRet as its paper runs it (Wu, Wan & Chang 2025): with a language model configured, the query
is turned into a T2I instruction before drawing, and each drawing's whole ranking (not its top k)
goes into the reciprocal rank fusion."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from engine.catalog.library import Library
from engine.errors import BadInputError
from engine.methods import LanguageModelEndpoint, MethodContext, SearchQuery, resolve_spec
from engine.methods.visret import VisRetMethod, VisRetParams
from engine.visret.base import Drawing
from tests.test_prompt import server  # noqa: F401 - the local chat endpoint fixture


@pytest.fixture(scope="module")
def indexed(tmp_path_factory, copy_small_demo_library) -> Path:
    return copy_small_demo_library(tmp_path_factory.mktemp("visret-paper") / "lib")


# -- the T2I instruction ---------------------------------------------------------------------


def _chat_text(request: dict[str, Any]) -> str:
    return "\n".join(str(m["content"]) for m in request["body"]["messages"])


def test_a_configured_language_model_writes_the_t2i_instruction_by_default(
    indexed,
    demo_encoder,
    tmp_path,
    server,  # noqa: F811 - the imported fixture
):
    """No parameter asks for it: an endpoint in the settings is enough. The model is asked, as
    in the paper, to rephrase the query with a little more detail on the main subject's
    appearance, posture and actions, in at most 30 words, and its plain-text answer is drawn as
    "A small and realistic image of the ...", the paper's Stable Diffusion prompt."""
    text = "a red circle above a green square"
    server.answer("A bright red circle resting just above a flat green square.")
    with Library.open(indexed) as library:
        context = MethodContext(
            library,
            lambda: demo_encoder,
            drawings_dir=tmp_path / "d",
            llm=LanguageModelEndpoint(server.url, "tiny-llm"),
        )
        ranking = resolve_spec("visret").run(SearchQuery(text), context, top_k=10)
    assert ranking.details["prompt_rewritten"] is True
    assert ranking.details["prompt"] == (
        "A small and realistic image of the A bright red circle resting just above a flat "
        "green square."
    )
    assert len(server.requests) == 1
    asked = _chat_text(server.requests[0])
    assert text in asked
    assert "30 words" in asked
    assert all(word in asked for word in ("appearance", "posture", "actions"))


def test_without_a_language_model_the_template_is_drawn_and_nothing_is_asked(
    indexed,
    demo_encoder,
    tmp_path,
    server,  # noqa: F811 - the imported fixture
):
    """Rewriting is on by default only where a model is configured; `rewrite=false` turns it off
    even then, and `instruction=faithful` keeps Quadrat's own instruction and template."""
    from engine.visret.prompt import DEFAULT_TEMPLATE

    text = "two red circles"
    with Library.open(indexed) as library:
        bare = MethodContext(library, lambda: demo_encoder, drawings_dir=tmp_path / "d")
        plain = resolve_spec("visret").run(SearchQuery(text), bare, top_k=5)
        assert plain.details["prompt"] == DEFAULT_TEMPLATE.replace("{query}", text)
        assert plain.details["prompt_rewritten"] is False
        configured = MethodContext(
            library,
            lambda: demo_encoder,
            drawings_dir=tmp_path / "d",
            llm=LanguageModelEndpoint(server.url, "tiny-llm"),
        )
        off = resolve_spec("visret:rewrite=false").run(SearchQuery(text), configured, top_k=5)
        assert off.details["prompt"] == plain.details["prompt"] and not server.requests
        server.answer('{"prompt": "two bright red circles side by side"}')
        faithful = resolve_spec("visret:instruction=faithful").run(
            SearchQuery(text), configured, top_k=5
        )
    assert faithful.details["prompt"] == "two bright red circles side by side"
    assert "template_prompt" in _chat_text(server.requests[0])
    with pytest.raises(BadInputError, match="instruction must be one of"):
        resolve_spec("visret:instruction=poem")


def test_the_papers_prompt_reads_a_chatty_answer_and_falls_back_plainly(
    server,  # noqa: F811 - the imported fixture
):
    """A reasoning block, a "Rephrased query:" label and quotes are not drawn; an empty answer
    draws the plain template with a one-line note, as a search without a model would."""
    from engine.visret.prompt import paper_prompt

    server.answer('<think>owls perch</think>\nRephrased query: "A barn owl perched on a post"')
    drawn = paper_prompt("owl on a fence", "", server.url, "m")
    assert drawn.rewritten
    assert drawn.prompt == "A small and realistic image of the A barn owl perched on a post"
    assert server.requests[0]["body"]["temperature"] == 0
    server.answer("  ")
    fallback = paper_prompt("owl on a fence", "", server.url, "m", plain_template="{query}")
    assert (fallback.prompt, fallback.rewritten) == ("owl on a fence", False)
    assert "answer was empty" in fallback.note and "\n" not in fallback.note


# -- fusing whole rankings -------------------------------------------------------------------


class _OneHotEncoder:
    """Drawing i (a picture i + 1 pixels wide) encodes as the i-th unit vector."""

    def encode_images(self, images: Sequence[Image.Image]) -> np.ndarray:
        out = np.zeros((len(images), 8), dtype=np.float32)
        for row, image in enumerate(images):
            out[row, image.width - 1] = 1.0
        return out


class _StandInSearcher:
    """Each drawing's ranking of the collection, served as deep as it is asked for."""

    def __init__(self, rankings: list[list[int]]) -> None:
        self.rankings = rankings
        self.index = rankings[0]  # the collection's photos
        self.asked: list[int] = []

    def ranked(
        self,
        vector: np.ndarray,
        top_k: int = 50,
        filters: object = None,
        *,
        candidates: Sequence[int] | None = None,
    ) -> list[tuple[int, float]]:
        self.asked.append(top_k)
        ranking = self.rankings[int(np.argmax(vector))]
        if candidates is not None:
            ranking = [i for i in ranking if i in set(candidates)]
            top_k = max(top_k, len(ranking))
        return [(i, 1.0 - rank / 100) for rank, i in enumerate(ranking[:top_k])]


def _drawings(count: int) -> list[Drawing]:
    return [
        Drawing(index=i, seed=i, prompt="p", image=Image.new("RGB", (i + 1, 1)))
        for i in range(count)
    ]


# Photo 9 is third in every drawing's ranking, so no drawing's top 2 holds it; fused over the
# whole rankings (k_rrf = 1) it scores 3/4, above every photo a single drawing put first (each
# drawing's first two photos come last in the other drawings' rankings: 1/2 + about 2/25).
_FILLERS = list(range(10, 30))
_TOPS = [[1, 2], [5, 6], [7, 8]]
_RANKINGS = [
    [*top, 9, *_FILLERS[j * 7 :], *_FILLERS[: j * 7], *(i for t in _TOPS if t != top for i in t)]
    for j, top in enumerate(_TOPS)
]


def _fuse(params: VisRetParams, top_k: int, candidates: Sequence[int] | None = None):
    searcher = _StandInSearcher(_RANKINGS)
    context = MethodContext(library=None, encoder_loader=_OneHotEncoder)  # type: ignore[arg-type]
    context._searcher = searcher  # type: ignore[assignment]
    ranking = VisRetMethod().fuse(
        SearchQuery("q"), params, context, _drawings(3), top_k=top_k, candidates=candidates
    )
    return ranking, searcher


def test_the_fusion_finds_a_photo_no_single_drawing_put_in_its_top_k():
    ranking, searcher = _fuse(VisRetParams(), top_k=2)
    assert ranking.ids == [9, 1]
    assert ranking.scores[0] == pytest.approx(0.75)
    assert ranking.evidence[9]["ranks"] == {"drawing 0": 3, "drawing 1": 3, "drawing 2": 3}
    assert all(asked > 2 for asked in searcher.asked)  # each ranking fused deeper than top_k
    assert ranking.details["depth"] == VisRetParams().depth


def test_the_fusion_depth_is_a_parameter_and_zero_fuses_every_photo():
    whole, searcher = _fuse(VisRetParams(depth=0), top_k=2)
    assert whole.ids == [9, 1]
    assert min(searcher.asked) >= len(_RANKINGS[0])
    shallow, _ = _fuse(VisRetParams(depth=2), top_k=2)
    assert 9 not in shallow.ids  # as deep as top_k only: the truncated fusion of before
    # The rerank protocol ranks the whole candidate set whatever the depth.
    reranked, _ = _fuse(VisRetParams(depth=2), top_k=2, candidates=[1, 5, 7, 9])
    # Within them 9 is second everywhere (3 x 1/3) and ties 1 (1/2 + 1/4 + 1/4), first once.
    assert reranked.ids[:2] == [1, 9] and sorted(reranked.ids) == [1, 5, 7, 9]
    with pytest.raises(BadInputError, match="depth"):
        resolve_spec("visret:depth=-1")
