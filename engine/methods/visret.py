"""VisRet, visualize-then-retrieve (Wu, Wan & Chang 2025): draw the query, search with the drawings.

CLIP's text-to-image similarity misses relations, counts and bindings; its image-to-image
similarity is much stronger. So a text-to-image generator draws the query a few times (seeds
seed … seed+images-1), each drawing is encoded with the library's own encoder and searches the
collection, and the rankings are fused by reciprocal rank fusion (docs/SPEC.md §2.1) or by mean
similarity. Drawings are cached on disk, so leaving one out of the fusion re-fuses without
drawing again.

As in the paper, a configured language model first turns the query into a T2I instruction
(`engine.visret.prompt.paper_prompt`), and each drawing's ranking goes into the fusion whole: the
whole candidate set under the rerank protocol, and the top `depth` photos (1,000 by default;
0 = the whole collection) in a full-collection search. Where it still differs from the paper: the
paper always rewrites (here there is no rewrite without a model), it draws with gpt-image-1 or
SD 3.5 where the user's generator draws here, and it ranks a per-query candidate pool only.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.errors import BadInputError
from engine.methods.base import Method, Ranking, SearchQuery
from engine.methods.context import MethodContext
from engine.methods.events import DrawingMade, DrawingProgress
from engine.methods.fusion import reciprocal_rank_fusion

if TYPE_CHECKING:
    from engine.visret.base import Drawing, Generator

DEMO_PAINTER = "demo-painter"
FUSIONS = ("rrf", "mean")
INSTRUCTIONS = ("paper", "faithful")
DEFAULT_DEPTH = 1000
MAX_IMAGES = 16


@dataclass(frozen=True)
class VisRetParams:
    """`generator`: a generator spec ("" = the configured one, else the demo painter on a
    library indexed with the demo model). `images` drawings with seeds `seed` … seed+images-1,
    fused by `fusion` ("rrf" with `k_rrf`, or "mean" similarity); `include_text` adds the text
    query's own ranking; `template` shapes the prompt ("" = the default, with {query});
    `steps`/`guidance` override the generator's defaults (0 / < 0 = its default); `leave_out`
    lists drawing indices (0-based, comma-separated) to leave out of the fusion. `rewrite` (on
    by default) has the configured language-model endpoint write the prompt when one is
    configured; on any failure the template is drawn and the run's details say why.
    `instruction` says how: "paper", the VisRet paper's T2I instruction (the query rephrased with
    the subject's appearance, posture and actions, drawn inside `template` or else the paper's
    "A small and realistic image of the {query}"), or "faithful", Quadrat's (every detail of the
    query kept, inside the template). `depth`: how deep each drawing's ranking goes into the RRF
    fusion of a full-collection search (at least the results asked for; 0 = the whole
    collection, as the paper ranks its whole candidate pool); a reranking always fuses the
    whole candidate set."""

    generator: str = ""
    images: int = 3
    seed: int = 0
    k_rrf: int = 1
    fusion: str = "rrf"
    include_text: bool = False
    template: str = ""
    steps: int = 0
    guidance: float = -1.0
    leave_out: str = ""
    rewrite: bool = True
    instruction: str = "paper"
    depth: int = DEFAULT_DEPTH

    def check(self) -> None:
        if not 1 <= self.images <= MAX_IMAGES:
            raise BadInputError(f"images must be from 1 to {MAX_IMAGES}")
        if self.k_rrf < 0:
            raise BadInputError("k_rrf must be 0 or more")
        if self.fusion not in FUSIONS:
            raise BadInputError(f"fusion must be one of {', '.join(FUSIONS)}")
        if self.instruction not in INSTRUCTIONS:
            raise BadInputError(f"instruction must be one of {', '.join(INSTRUCTIONS)}")
        if self.depth < 0:
            raise BadInputError("depth must be 0 (the whole collection) or more")
        if self.template and "{query}" not in self.template:
            raise BadInputError(f"visret template {self.template!r} must contain {{query}}")
        if self.steps < 0:
            raise BadInputError("steps must be 0 (the generator's default) or more")
        self.left_out()

    def left_out(self) -> set[int]:
        """The drawing indices to leave out of the fusion."""
        out: set[int] = set()
        for part in self.leave_out.replace(";", ",").split(","):
            if not part.strip():
                continue
            try:
                out.add(int(part))
            except ValueError:
                raise BadInputError(
                    f"leave_out lists drawing numbers from 0, e.g. 0,2; got {self.leave_out!r}"
                ) from None
        return out


def rewritten_prompt(
    query: str, template: str, context: MethodContext, instruction: str = "faithful"
) -> tuple[str, bool, str]:
    """The prompt the configured language model writes for `query` (prompt, rewritten, note),
    with the paper's T2I instruction or Quadrat's faithful one (`instruction`). `template` is
    the one asked for ("" = the instruction's own: the paper's, or Quadrat's default).

    A successful rewrite is kept beside the drawings, keyed by endpoint, model, instruction,
    template and query, so leaving a drawing out or reopening the run draws nothing again; a
    failure falls back to the plain template and is not kept (the next run asks again)."""
    from engine.files import atomic_write_text
    from engine.visret.prompt import DEFAULT_TEMPLATE, paper_prompt, rewrite_prompt

    llm = context.llm
    if instruction == "faithful":
        template = template or DEFAULT_TEMPLATE
    parts: list[str] = [llm.url.strip(), llm.model, template, query]
    if instruction != "faithful":  # keys of faithful rewrites kept before stay valid
        parts.insert(2, instruction)
    key = hashlib.sha256(json.dumps(parts).encode("utf-8")).hexdigest()[:32]
    kept = context.drawing_cache_dir / "rewrites" / f"{key}.txt"
    if llm.configured and kept.is_file():
        return kept.read_text(encoding="utf-8"), True, "rewritten by the language model (kept)"
    if instruction == "paper":
        answer = paper_prompt(
            query, template, llm.url, llm.model, llm.api_key, plain_template=template
        )
    else:
        answer = rewrite_prompt(query, template, llm.url, llm.model, llm.api_key)
    if answer.rewritten:
        kept.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(kept, answer.prompt)
        return answer.prompt, True, "rewritten by the language model"
    return answer.prompt, False, answer.note


def is_demo_library(context: MethodContext) -> bool:
    """Whether the library was indexed with the bundled demo model."""
    from engine.models.spec import DEMO_ARCH

    return (context.library.model_key or "").startswith(f"{DEMO_ARCH}:")


def generator_spec(params: VisRetParams, context: MethodContext) -> str:
    """The generator to draw with: the parameter, else the configured one, else the demo
    painter on a demo library; a one-line BadInputError when there is none."""
    spec = params.generator.strip() or context.generator.strip()
    if spec:
        return spec
    if is_demo_library(context):
        return DEMO_PAINTER
    raise BadInputError(
        "visret needs a text-to-image generator: give --generator (a diffusers folder, a "
        ".safetensors file or hf-hub:ORG/NAME) or choose one in Settings"
    )


def load_context_generator(spec: str, context: MethodContext) -> Generator:
    """The generator through the context's model manager, so that CLIP and Stable Diffusion
    share an accelerator sensibly (the demo painter is small and kept aside)."""
    from engine.visret.generator import load_generator

    return context.models.get(
        f"generator:{spec}",
        lambda: load_generator(spec, cache_dir=context.cache_dir),
        large=spec != DEMO_PAINTER,
    )


class VisRetMethod(Method):
    key = "visret"
    label = "VisRet"
    description = (
        "Visualize then retrieve: a text-to-image generator draws the query (a configured "
        "language model first writes the paper's T2I instruction), each drawing ranks the "
        "photos image-to-image, and the rankings are fused by reciprocal rank fusion "
        "(default: 3 drawings with k_rrf = 1, as in the paper's code)"
    )
    Params = VisRetParams
    kinds = ("text",)

    def param_label(self, name: str, value: Any) -> str | None:
        """`leave_out=1` as the strip numbers drawings, from 1: "without drawing 2"."""
        if name != "leave_out":
            return None
        try:
            numbers = sorted(VisRetParams(leave_out=str(value)).left_out())
        except BadInputError:
            return None  # a value no version accepted: shown as stored
        if not numbers:
            return None
        word = "drawing" if len(numbers) == 1 else "drawings"
        return f"without {word} {', '.join(str(n + 1) for n in numbers)}"

    def unavailable_reason(self) -> str | None:
        try:
            import engine.visret.generator  # noqa: F401
        except ImportError as exc:  # pragma: no cover - a broken install
            return f"the generator module cannot be loaded ({exc})"
        return None

    def run(
        self,
        query: SearchQuery,
        params: VisRetParams,
        context: MethodContext,
        *,
        top_k: int,
        candidates: Sequence[int] | None = None,
    ) -> Ranking:
        from engine.search.searcher import validate_query_text
        from engine.visret.base import DrawSettings
        from engine.visret.generator import DrawingCache, draw_all
        from engine.visret.prompt import DEFAULT_TEMPLATE, render_prompt

        text = validate_query_text(query.text)
        spec = generator_spec(params, context)
        timings: dict[str, float] = {}
        started = time.perf_counter()
        generator = load_context_generator(spec, context)
        defaults = generator.default_settings()
        settings = DrawSettings(
            steps=params.steps or defaults.steps,
            guidance=params.guidance if params.guidance >= 0 else defaults.guidance,
            width=defaults.width,
            height=defaults.height,
        )
        prompt = render_prompt(params.template or DEFAULT_TEMPLATE, text)
        rewritten, prompt_note = False, ""
        # Rewriting is on by default but needs a model: without one the template is drawn
        # quietly, as every search on a workstation without an LLM would otherwise say so.
        if params.rewrite and context.llm.configured:
            prompt, rewritten, prompt_note = rewritten_prompt(
                text, params.template, context, params.instruction
            )
        seeds = [params.seed + i for i in range(params.images)]
        drawings = draw_all(
            generator,
            prompt,
            seeds,
            settings,
            cache=DrawingCache(context.drawing_cache_dir),
            progress=lambda index, p: context.notify(DrawingProgress(index, p)),
            cancel=context.cancel,
            on_drawing=lambda drawing: context.notify(DrawingMade(drawing)),
        )
        timings["drawing"] = time.perf_counter() - started
        ranking = self.fuse(query, params, context, drawings, top_k=top_k, candidates=candidates,
                            timings=timings)  # fmt: skip
        ranking.details.update(
            {
                "prompt": prompt,
                "prompt_rewritten": rewritten,
                "prompt_note": prompt_note,
                "generator": generator.identity,
                "generator_spec": spec,
                "settings": {
                    "steps": settings.steps,
                    "guidance": settings.guidance,
                    "width": settings.width,
                    "height": settings.height,
                },
                "drawings": drawing_details(drawings, params.left_out()),
            }
        )
        return ranking

    def fuse(
        self,
        query: SearchQuery,
        params: VisRetParams,
        context: MethodContext,
        drawings: Sequence[Drawing],
        *,
        top_k: int,
        candidates: Sequence[int] | None = None,
        timings: dict[str, float] | None = None,
    ) -> Ranking:
        """Search with each usable drawing and fuse the rankings (with the text query's own,
        when asked); `timings` gets the seconds spent encoding, searching and fusing."""
        timings = timings if timings is not None else {}
        left_out = params.left_out()
        usable = [d for d in drawings if d.image is not None and d.index not in left_out]
        if not usable and not params.include_text:
            failed = [d.error for d in drawings if d.image is None]
            why = f"every drawing failed ({failed[0]})" if failed else "every drawing is left out"
            raise BadInputError(f"visret has nothing to search with: {why}")
        context.cancel.check()
        started = time.perf_counter()
        rows = _query_vectors(usable, query, params, context)
        timings["encoding"] = time.perf_counter() - started
        searcher = context.searcher
        started = time.perf_counter()
        if params.fusion == "mean":
            # The mean similarity to the drawings is the similarity to their mean vector: one
            # exact search instead of a fusion of truncated lists.
            mean = np.mean(np.stack(rows), axis=0).astype(np.float32)
            hits = searcher.ranked(mean, top_k, context.filters, candidates=candidates)
            timings["searching"] = time.perf_counter() - started
            timings["fusing"] = 0.0
            ranking = Ranking.from_pairs(hits)
        else:
            # Each ranking goes into the fusion far deeper than the results shown: a photo that
            # every drawing ranks just below the top k can fuse above each one's first photo
            # (the paper fuses whole rankings). A rerank's candidates are always ranked whole.
            deep = top_k
            if candidates is None:
                deep = max(top_k, params.depth or len(searcher.index))
            lists = [
                [i for i, _ in searcher.ranked(v, deep, context.filters, candidates=candidates)]
                for v in rows
            ]
            timings["searching"] = time.perf_counter() - started
            started = time.perf_counter()
            fused = reciprocal_rank_fusion(lists, k_rrf=params.k_rrf)
            limit = max(top_k, len(candidates)) if candidates is not None else top_k
            ranking = Ranking.from_pairs(fused[:limit])
            # Evidence for the window: where each fused photo stood in each list.
            sources = [f"drawing {d.index}" for d in usable]
            sources += ["text"] if params.include_text else []
            ranking.evidence.update(_list_ranks(ranking.ids[:top_k], sources, lists))
            timings["fusing"] = time.perf_counter() - started
        ranking.details.update(
            {
                "fusion": params.fusion,
                "k_rrf": params.k_rrf,
                "include_text": params.include_text,
                "depth": params.depth,
                "timings": dict(timings),
            }
        )
        return ranking


def _query_vectors(
    usable: Sequence[Drawing], query: SearchQuery, params: VisRetParams, context: MethodContext
) -> list[np.ndarray]:
    """The vectors searched with: each usable drawing's (unit length), then the text query's
    when `include_text`."""
    rows: list[np.ndarray] = []
    if usable:
        vectors = np.asarray(
            context.encoder.encode_images([d.image for d in usable if d.image is not None]),
            dtype=np.float32,
        )
        vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        rows.extend(vectors)
    if params.include_text:
        from engine.methods.text import TextMethod, TextParams

        rows.append(TextMethod.text_vector(query.text, TextParams(), context.encoder))
    return rows


def _list_ranks(
    shown: Sequence[int], sources: Sequence[str], lists: Sequence[Sequence[int]]
) -> dict[int, dict[str, Any]]:
    """Evidence for the window: where each fused photo stood in each source's list."""
    positions = [{i: rank for rank, i in enumerate(ranked, 1)} for ranked in lists]
    return {
        image_id: {
            "ranks": {
                source: where[image_id]
                for source, where in zip(sources, positions, strict=True)
                if image_id in where
            }
        }
        for image_id in shown
    }


def drawing_details(drawings: Sequence[Drawing], left_out: set[int]) -> list[dict[str, Any]]:
    """What a run records of its drawings: index, seed, cache key and file, error, left out."""
    return [
        {
            "index": d.index,
            "seed": d.seed,
            "key": d.key,
            "path": str(d.path) if d.path is not None else "",
            "error": d.error,
            "left_out": d.index in left_out,
            "cached": d.cached,
        }
        for d in drawings
    ]
