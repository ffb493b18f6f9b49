"""Scorers: answer one yes/no subquery per photo with p(yes) in [0, 1] (docs/SPEC.md §2.2).

Four kinds behind the `Scorer` protocol of `engine.rerank.base`: `ClipScorer`
(`engine.rerank.clip`, offline, through the library's own encoder), `DemoScorer`
(`engine.rerank.demo`, offline, the bundled answering head on the demo CLIP), `VlmScorer`
(`engine.rerank.vlm`, a local transformers model) and `EndpointScorer` (`engine.rerank.endpoint`,
an OpenAI-compatible chat endpoint with logprobs). `load_scorer(spec, context)` builds one from
a spec string ("auto", the default, picks `demo_or_clip`); what they share is in
`engine.rerank.answering`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from engine.errors import BadInputError
from engine.models.chat import chat_url
from engine.rerank.base import Scorer
from engine.rerank.clip import DEFAULT_CLIP_VARIANT, ClipScorer
from engine.rerank.demo import DemoScorer
from engine.rerank.endpoint import EndpointScorer
from engine.rerank.vlm import VlmScorer

if TYPE_CHECKING:
    from engine.methods.context import MethodContext


DEFAULT_SCORER = "auto"


def scorer_specs() -> tuple[str, ...]:
    """The forms `load_scorer` accepts."""
    return (
        "auto",
        "demo",
        "demo:prior-kind",
        "demo:tie",
        "demo:mean",
        "demo:rrf",
        "demo:rrf-tie",
        "clip",
        "clip:regions",
        "clip:whole",
        "vlm:PATH",
        "endpoint:URL[#MODEL]",
    )


def demo_or_clip(model_key: str) -> str:
    """What "auto" means for a library whose encoder has `model_key`: "demo" when the bundled
    answering model was trained on that very encoder (the demo model), else "clip"."""
    from engine.rerank.demo import answerer_path, trained_for

    try:
        path = answerer_path()
    except (OSError, ModuleNotFoundError):
        return "clip"
    return "demo" if path.is_file() and trained_for(path) == model_key else "clip"


def load_scorer(spec: str, context: MethodContext) -> Scorer:
    """A scorer from its spec: "auto" (`demo_or_clip`), "demo" (the bundled answering model,
    demo libraries only; "demo:mean" and "demo:rrf" order a pool by the mean p alone or by
    reciprocal rank fusion with the base, `engine.rerank.demo.fuse`), "clip" (the measured default variant), "clip:regions", "clip:whole",
    "vlm:PATH" (a transformers model folder) or "endpoint:URL[#MODEL]".

    The endpoint's API key is the configured one (`context.llm`) when the URL is the
    configured endpoint, else the environment variable QUADRAT_LLM_API_KEY. Models are loaded
    once through `context.models`.
    """
    text = spec.strip()
    kind, _, rest = text.partition(":")
    kind = kind.strip().lower()
    if kind == "auto" and not rest.strip():
        kind = demo_or_clip(context.encoder.model_key)
    if kind == "demo":
        from engine.rerank.demo import DEFAULT_FUSION, FUSIONS

        fusion = rest.strip().lower() or DEFAULT_FUSION
        if fusion not in FUSIONS:
            raise BadInputError(
                f"scorer {spec!r}: write demo, demo:prior-kind, demo:tie, demo:mean or demo:rrf"
            )
        encoder = context.encoder
        key = f"scorer:demo-{fusion}:{encoder.model_key}"
        regions = _clip_scorer(context, "regions")  # its crop vectors, shared
        return context.models.get(
            key, lambda: DemoScorer(encoder, clip=regions, fusion=fusion), large=False
        )
    if kind == "clip":
        variant = rest.strip().lower() or DEFAULT_CLIP_VARIANT
        if variant not in ("regions", "whole"):
            raise BadInputError(f"scorer {spec!r}: write clip, clip:regions or clip:whole")
        return _clip_scorer(context, variant)
    if kind == "vlm":
        folder = Path(rest.strip()).expanduser()
        if not rest.strip():
            raise BadInputError("scorer vlm: give the model folder (vlm:PATH)")
        if not folder.is_dir():
            raise BadInputError(f"scorer {spec!r}: {folder} is not a folder")
        return context.models.get(f"scorer:vlm:{folder.resolve()}", lambda: VlmScorer(folder))
    if kind == "endpoint":
        url, _, model = rest.strip().partition("#")
        if not url.strip():
            raise BadInputError("scorer endpoint: give the URL (endpoint:URL[#MODEL])")
        configured = context.llm
        same = configured.configured and chat_url(configured.url) == chat_url(url)
        api_key = configured.api_key if same else os.environ.get("QUADRAT_LLM_API_KEY", "")
        if not model.strip() and same:
            model = configured.model
        return EndpointScorer(url.strip(), model.strip(), api_key=api_key)
    raise BadInputError(f"unknown scorer {spec!r}; use one of: {', '.join(scorer_specs())}")


def _clip_scorer(context: MethodContext, variant: str) -> ClipScorer:
    """The context's CLIP scorer of `variant` ("regions" or "whole"), loaded once."""
    encoder = context.encoder
    key = f"scorer:clip-{variant}:{encoder.model_key}"
    scorer: ClipScorer = context.models.get(
        key, lambda: ClipScorer(encoder, regions=variant == "regions"), large=False
    )
    return scorer
