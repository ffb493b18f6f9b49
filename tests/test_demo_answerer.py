"""The demo answering model (`scorer=demo`): loaded from the bundled file through the real
path, chosen by default only for a library indexed with the demo model, clear about a bad
file, and answering binding and count questions on drawn scenes it never saw."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from engine.catalog.library import Library
from engine.demo.scenes import (
    DEMO_QUERIES,
    DemoScene,
    draw_demo_scene,
    heldout_queries,
    jpeg_bytes,
)
from engine.errors import BadInputError, ModelLoadError
from engine.indexing.hashes import content_hash
from engine.methods import MethodContext, SearchQuery, resolve_spec
from engine.methods.base import ModelManager
from engine.methods.rerank import _pool, _ranking
from engine.rerank.base import Answer, Photo, Question
from engine.rerank.clip import ClipScorer
from engine.rerank.demo import DemoScorer, answerer_path, statement_parts
from engine.rerank.scorers import demo_or_clip, load_scorer


def _context(encoder: Any) -> Any:
    return SimpleNamespace(encoder=encoder, models=ModelManager(), llm=None)


class OtherEncoder:
    """A library's encoder that is not the demo model (never asked to encode here)."""

    model_key = "ViT-B-32:openai"
    dim = 512
    device = "cpu"


def test_auto_is_the_bundled_demo_model_on_a_demo_library(demo_encoder: Any) -> None:
    assert answerer_path().is_file()
    assert answerer_path().stat().st_size < 5 << 20  # small enough to ship in the package
    context = _context(demo_encoder)
    scorer = load_scorer("auto", context)
    assert isinstance(scorer, DemoScorer)
    assert scorer.identity.startswith("demo:") and scorer.identity.endswith(demo_encoder.model_key)
    assert load_scorer("demo", context) is scorer  # loaded once
    assert resolve_spec("rerank").params.scorer == "auto"  # what a plain rerank asks for


def test_a_real_library_keeps_the_clip_default_and_is_told_why_demo_is_refused() -> None:
    context = _context(OtherEncoder())
    assert demo_or_clip(OtherEncoder.model_key) == "clip"
    assert isinstance(load_scorer("auto", context), ClipScorer)
    with pytest.raises(BadInputError, match="indexed with ViT-B-32:openai; use scorer=clip"):
        load_scorer("demo", context)


def test_a_bad_answering_model_file_is_one_clear_line(tmp_path: Path, demo_encoder: Any) -> None:
    import torch
    from safetensors.torch import save_file

    garbage = tmp_path / "garbage.safetensors"
    garbage.write_bytes(b"\x00\x01 not a safetensors file")
    with pytest.raises(ModelLoadError, match="cannot read it") as error:
        DemoScorer(demo_encoder, garbage)
    assert "\n" not in str(error.value) and "scorer=clip" in str(error.value)
    foreign = tmp_path / "foreign.safetensors"
    save_file({"w": torch.zeros(2)}, str(foreign), metadata={"format": "something-else"})
    with pytest.raises(ModelLoadError, match="not a quadrat-demo-answerer"):
        DemoScorer(demo_encoder, foreign)
    truncated = tmp_path / "truncated.safetensors"
    truncated.write_bytes(answerer_path().read_bytes()[:-1000])
    with pytest.raises(ModelLoadError, match="cannot read it"):
        DemoScorer(demo_encoder, truncated)


def test_statements_split_into_the_heads_text_tokens() -> None:
    assert statement_parts("a red circle beside a blue square") == (
        "a red circle beside a blue square", "red circle", "blue square", 1,
    )  # fmt: skip
    assert statement_parts("a blue square below a red triangle")[1:] == (
        "blue square", "red triangle", 3,
    )  # fmt: skip
    assert statement_parts("two red circles") == ("two red circles", "two red circles", "", 0)


def _photos(tmp_path: Path, scenes: list[tuple[DemoScene, int]]) -> list[Photo]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    photos = []
    for k, (scene, seed) in enumerate(scenes):
        # Seed purpose 99: neither the collection's, the models' nor the benchmarks'.
        image = draw_demo_scene(np.random.default_rng([99, seed]), scene)[0]
        path = tmp_path / f"{k}.jpg"
        path.write_bytes(jpeg_bytes(image))
        photos.append(Photo(k, path, content_hash(path)))
    return photos


def test_it_tells_the_binding_and_the_count_apart_on_unseen_drawings(
    tmp_path: Path, demo_encoder: Any
) -> None:
    scorer = DemoScorer(demo_encoder)
    right = DemoScene(("red circle", "blue square"), "beside")
    swapped = DemoScene(("blue circle", "red square"), "beside")
    photos = _photos(tmp_path, [(right, s) for s in range(6)] + [(swapped, s) for s in range(6)])

    def p(question: Question) -> list[float]:
        return [a.p_yes for a in scorer.score(photos, question)]

    red = p(Question("Is there a red circle in this image?", target="red circle"))
    blue = p(Question("Is there a blue square in this image?", target="blue square"))
    means = [(a + b) / 2 for a, b in zip(red, blue, strict=True)]
    # Every right binding above every swapped one (CLIP's whole photo vector cannot).
    assert min(means[:6]) > max(means[6:])
    two, three = DemoScene(("green square",) * 2), DemoScene(("green square",) * 3)
    counted = _photos(tmp_path / "n", [(two, s) for s in range(5)] + [(three, s) for s in range(5)])
    asked = [
        a.p_yes
        for a in scorer.score(counted, Question("Does this image show three green squares?"))
    ]
    assert sum(q > 0.5 for q in asked[5:]) >= 4 and sum(q < 0.5 for q in asked[:5]) >= 4
    # "Two" it grades rather than decides (three of a kind often pass as two, less surely).
    asked = [
        a.p_yes for a in scorer.score(counted, Question("Does this image show two green squares?"))
    ]
    assert sum(asked[:5]) > sum(asked[5:])


def test_the_heldout_benchmark_asks_nothing_the_demo_benchmark_asks() -> None:
    demo = {q.text for q in DEMO_QUERIES if q.category != "species"}
    heldout = [q for q in heldout_queries() if q.category != "species"]
    assert len(heldout) == 68 and not demo & {q.text for q in heldout}
    pairs = {frozenset(q.species) for q in DEMO_QUERIES if len(q.species) == 2}
    assert not pairs & {frozenset(q.species) for q in heldout if len(q.species) == 2}


def test_the_readme_example_puts_every_right_binding_first(
    tmp_path: Path, demo_encoder: Any
) -> None:
    """The README's example, "a red circle beside a blue square", on a pool of 8 photos of it,
    8 of its swapped binding and 8 of one shape alone: Text and the CLIP scorer put swapped
    bindings in their top 8 (measured: WWWWWssWWss...); the default rerank puts all 8 right
    bindings first."""
    from engine.indexing.indexer import Indexer
    from engine.rerank.cache import photos_for

    folder = tmp_path / "scenes"
    folder.mkdir()
    rng = np.random.default_rng(7)
    wanted = DemoScene(("red circle", "blue square"), "beside")
    swapped = DemoScene(("blue circle", "red square"), "beside")
    for n in range(8):
        for name, scene in (("wanted", wanted), ("swapped", swapped)):
            image, _, _ = draw_demo_scene(rng, scene)
            image.convert("RGB").save(folder / f"{name}-{n}.jpg", quality=92)
    for n in range(4):
        for name in ("red circle", "blue square"):
            image, _, _ = draw_demo_scene(rng, DemoScene((name,)))
            image.convert("RGB").save(folder / f"{name.replace(' ', '-')}-{n}.jpg", quality=92)
    with Library.open(tmp_path / "lib") as library:
        Indexer(library, demo_encoder).run(folder)
        context = MethodContext(library, lambda: demo_encoder)
        query = SearchQuery("a red circle beside a blue square")
        base = resolve_spec("text").run(query, context, top_k=100)
        ranking = resolve_spec("rerank").run(query, context, top_k=100)
        names = {i: p.path.name for i, p in photos_for(library, base.ids).items()}
    assert ranking.details["scorer"].startswith("demo:")
    assert not all(names[i].startswith("wanted") for i in base.ids[:8])  # Text mixes them
    assert all(names[i].startswith("wanted") for i in ranking.ids[:8])


def _reranked(scorer: Any, p_by_base_rank: list[list[float]]) -> list[int]:
    """The order the rerank method gives photos 1..n (the base's order) answered with these
    p(yes), one list per photo."""
    order = list(range(1, len(p_by_base_rank) + 1))
    answers = {
        i: [(Question(f"q{k}"), Answer(p)) for k, p in enumerate(ps)]
        for i, ps in zip(order, p_by_base_rank, strict=True)
    }
    ranking = _ranking(order, answers, {i: i for i in order}, "mean", _pool(scorer))
    return list(ranking.ids)


def test_where_the_head_is_unsure_the_base_order_stays_and_where_it_is_sure_it_reorders(
    demo_encoder: Any,
) -> None:
    scorer = load_scorer("demo", _context(demo_encoder))
    base = list(range(1, 41))
    # A pool of 40 whose p's rise a hair against the base order (all well within the head's
    # calibration error): the paper's mean alone turns the base order upside down; the
    # default keeps it.
    unsure = [[0.5 + 0.001 * n, 0.5 + 0.001 * n] for n in range(40)]
    assert _reranked(scorer, unsure) == base
    assert _reranked(load_scorer("demo:mean", _context(demo_encoder)), unsure) == base[::-1]
    # The head sure that the base's 8th and 10th show it and unsure of the rest: those two
    # go first, the rest keep the base order.
    sure = [[0.97, 0.99] if n in (8, 10) else [0.9, 0.1 + 0.001 * n] for n in base]
    assert _reranked(scorer, sure) == [8, 10] + [n for n in base if n not in (8, 10)]


def test_the_pool_orders_share_one_set_of_answers_and_a_bad_one_is_refused(
    demo_encoder: Any,
) -> None:
    context = _context(demo_encoder)
    default, paper = load_scorer("demo", context), load_scorer("demo:mean", context)
    assert default is not paper and default.identity == paper.identity  # cached answers shared
    with pytest.raises(BadInputError, match="write demo, demo:prior-kind"):
        load_scorer("demo:median", context)
