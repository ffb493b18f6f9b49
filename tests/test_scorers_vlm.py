"""VLM and endpoint scorers with real architectures: tiny random-weight Qwen2-VL and PaliGemma
models built here with their real model and processor classes, saved and loaded back through
`VlmScorer(folder)`. The dtype a model loads in, loud failures (non-finite logits, no Yes/No
among the first token's top tokens) with nothing cached, PaliGemma's INQUIRE token layout, and
the original query in the answering prompt."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engine.demo.scenes import DemoScene, draw_demo_scene
from engine.indexing.hashes import content_hash
from engine.rerank.answering import ScorerError
from engine.rerank.base import Photo, Question
from engine.rerank.endpoint import EndpointScorer
from engine.rerank.vlm import VlmScorer
from tests.tiny_vlm import PALI_PATCH, PALI_SIDE, build_tiny_paligemma, build_tiny_qwen2_vl

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

# -- fixtures ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def qwen_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_qwen2_vl(tmp_path_factory.mktemp("qwen2-vl") / "model")


@pytest.fixture(scope="module")
def pali_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_paligemma(tmp_path_factory.mktemp("paligemma") / "model")


@pytest.fixture(scope="module")
def qwen(qwen_folder: Path) -> VlmScorer:
    return VlmScorer(qwen_folder, device="cpu", batch_size=2)


@pytest.fixture(scope="module")
def pali(pali_folder: Path) -> VlmScorer:
    return VlmScorer(pali_folder, device="cpu", batch_size=2)


@pytest.fixture(scope="module")
def three_photos(tmp_path_factory: pytest.TempPathFactory) -> list[Photo]:
    folder = tmp_path_factory.mktemp("photos")
    rng = np.random.default_rng(5)
    out = []
    for i, scene in enumerate((("red circle",), ("blue square",), ("green triangle",))):
        path = folder / f"p{i}.png"
        draw_demo_scene(rng, DemoScene(scene))[0].save(path)
        out.append(Photo(i, path, content_hash(path)))
    return out


def _hooked(scorer: VlmScorer, change: Callable[[Any], None]) -> Any:
    """Change the model's output logits in place (a forward hook); returns the hook's handle."""

    def hook(module: Any, args: Any, output: Any) -> Any:
        change(output.logits)
        return output

    return scorer.model.register_forward_hook(hook)


def _nan(logits: Any) -> None:
    logits.fill_(float("nan"))


def _thinks(scorer: VlmScorer) -> Callable[[Any], None]:
    """A "thinking" model: the first token is always another token, Yes and No far below."""
    other = scorer.tokenizer.convert_tokens_to_ids("<|im_start|>")

    def change(logits: Any) -> None:
        logits[..., other] = 50.0
        logits[..., scorer.yes_ids + scorer.no_ids] = -50.0

    return change


# -- numerics ----------------------------------------------------------------------------------


def test_the_dtype_follows_the_device_and_the_models_config(tmp_path: Path) -> None:
    from engine.rerank import vlm

    assert vlm.model_dtype("cuda", "bfloat16", bf16_supported=True) == "bfloat16"
    assert vlm.model_dtype("cuda:1", "torch.bfloat16", bf16_supported=True) == "bfloat16"
    assert vlm.model_dtype("cuda", "bfloat16", bf16_supported=False) == "float16"
    assert vlm.model_dtype("cuda", "float16", bf16_supported=True) == "float16"
    assert vlm.model_dtype("cuda", None, bf16_supported=True) == "float16"
    assert vlm.model_dtype("cpu", "bfloat16", bf16_supported=True) == "float32"
    assert vlm.model_dtype("mps", "bfloat16", bf16_supported=False) == "float32"
    # transformers 4.x writes "torch_dtype", 5.x "dtype"; a composite model may name it in
    # its text model's config only.
    for config, want in (
        ({"torch_dtype": "bfloat16"}, "bfloat16"),
        ({"dtype": "float16", "text_config": {"dtype": "bfloat16"}}, "float16"),
        ({"text_config": {"torch_dtype": "bfloat16"}}, "bfloat16"),
        ({}, None),
    ):
        (tmp_path / "config.json").write_text(json.dumps(config))
        assert vlm.config_dtype(tmp_path) == want
    assert vlm.config_dtype(tmp_path / "missing") is None


def test_a_bf16_model_loads_in_fp32_on_the_cpu(qwen: VlmScorer) -> None:
    assert qwen.dtype == "float32" and qwen.model.dtype == torch.float32


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_bf16_model_loads_in_bf16_on_a_gpu_that_supports_it(qwen_folder: Path) -> None:
    scorer = VlmScorer(qwen_folder, device="cuda", batch_size=2)
    want = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    assert scorer.model.dtype == want


# -- real architectures answer -----------------------------------------------------------------


@pytest.mark.parametrize("name", ["qwen", "pali"])
def test_each_architecture_answers_every_photo(
    name: str, request: pytest.FixtureRequest, three_photos: list[Photo]
) -> None:
    scorer: VlmScorer = request.getfixturevalue(name)
    answers = scorer.score(three_photos, Question("Does this picture show a red circle?"))
    assert len(answers) == 3
    for answer in answers:
        assert 0.0 <= answer.p_yes <= 1.0
        assert answer.l_yes is not None and answer.l_no is not None
    # Batched or one at a time, the same answers.
    single = [
        scorer.score([p], Question("Does this picture show a red circle?"))[0] for p in three_photos
    ]
    assert [a.p_yes for a in answers] == pytest.approx([a.p_yes for a in single], abs=1e-4)


# -- loud failures -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["qwen", "pali"])
def test_nan_logits_are_one_line_naming_the_model_and_the_fix(
    name: str, request: pytest.FixtureRequest, three_photos: list[Photo]
) -> None:
    scorer: VlmScorer = request.getfixturevalue(name)
    handle = _hooked(scorer, _nan)
    try:
        with pytest.raises(ScorerError) as caught:
            scorer.score(three_photos, Question("Is there a red circle?"))
    finally:
        handle.remove()
    message = str(caught.value)
    assert "\n" not in message
    assert scorer.folder.name in message and "bf16" in message and "fp32" in message


def test_a_model_that_never_starts_with_yes_or_no_is_an_error(
    qwen: VlmScorer, three_photos: list[Photo]
) -> None:
    handle = _hooked(qwen, _thinks(qwen))
    try:
        with pytest.raises(ScorerError, match="answers yes/no directly") as caught:
            qwen.score(three_photos, Question("Is there a red circle?"))
    finally:
        handle.remove()
    assert "\n" not in str(caught.value) and "<|im_start|>" in str(caught.value)
    # One photo holding Yes/No among its top tokens is enough: the others are real "no"s.
    calls = iter(range(100))

    def only_first_call(logits: Any) -> None:
        if next(calls) > 0:
            _thinks(qwen)(logits)

    handle = _hooked(qwen, only_first_call)
    try:
        # Two forward passes (batch size 2): the first holds Yes/No, the second does not.
        answers = qwen.score(three_photos, Question("Is there a red circle?"))
    finally:
        handle.remove()
    assert len(answers) == 3 and next(calls) == 2


@pytest.mark.parametrize("broken", ["nan", "thinks"])
def test_a_failed_batch_leaves_nothing_in_the_answer_cache(
    broken: str,
    qwen_folder: Path,
    tmp_path: Path,
    copy_small_demo_library: Callable[[Path], Path],
    demo_encoder: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from engine.catalog.library import Library
    from engine.methods import MethodContext, SearchQuery, resolve_spec
    from engine.rerank.cache import ScoreCache

    scorer = VlmScorer(qwen_folder, device="cpu", batch_size=4)
    _hooked(scorer, _nan if broken == "nan" else _thinks(scorer))
    monkeypatch.setattr("engine.methods.rerank.load_scorer_for", lambda spec, context: scorer)
    with Library.open(copy_small_demo_library(tmp_path / "lib")) as library:
        context = MethodContext(library, lambda: demo_encoder)
        spec = resolve_spec("rerank:depth=6,subqueries=red circle")
        with pytest.raises(ScorerError):
            spec.run(SearchQuery("red circle"), context, top_k=6)
        assert ScoreCache(library).count(scorer.identity) == 0


# -- prompts -----------------------------------------------------------------------------------


def test_paligemma_reads_image_tokens_then_bos_then_inquires_question(
    pali: VlmScorer, three_photos: list[Photo]
) -> None:
    """INQUIRE's PaliGemma prompt: [image tokens][bos]Q: ...? Respond with yes or no.\n"""
    from PIL import Image

    question = Question("Does this picture show a red circle?")
    text = pali.prompt(question, [], "")
    with Image.open(three_photos[0].path) as image:
        inputs = pali.processor(
            text=[text], images=[[image.convert("RGB")]], padding=True, return_tensors="pt"
        )
    tokens = pali.tokenizer.convert_ids_to_tokens(inputs["input_ids"][0].tolist())
    n = (PALI_SIDE // PALI_PATCH) ** 2
    assert tokens[:n] == ["<image>"] * n
    assert tokens[n] == "<bos>" and tokens.count("<bos>") == 1
    said = "Q : Does this picture show a red circle ? Respond with yes or no ."
    assert tokens[n + 1 :] == [*said.split(), "\n"]


def test_the_original_query_is_in_the_answering_prompt_only_when_given(
    qwen: VlmScorer, pali: VlmScorer, three_photos: list[Photo]
) -> None:
    question = Question("Is there a red circle?")
    before = qwen.prompt(question, [], "Wet meadow")
    assert "searched" not in before and "Wet meadow" in before
    with_query = qwen.prompt(question, [], "Wet meadow", query="a frog in a wet meadow")
    assert '"a frog in a wet meadow"' in with_query
    assert with_query.replace('\n\nThe photos are searched for: "a frog in a wet meadow".', "") == (
        before
    )
    assert "a frog in a wet meadow" in pali.prompt(question, [], "", query="a frog in a wet meadow")
    answers = qwen.score(three_photos, question, query="a frog in a wet meadow")
    assert len(answers) == 3
    endpoint = EndpointScorer("http://127.0.0.1:9/v1")
    system = endpoint.messages("data:,", question, [], "", query="a frog")[0]["content"]
    assert '"a frog"' in system
    assert "searched" not in endpoint.messages("data:,", question, [], "")[0]["content"]


# -- endpoint ----------------------------------------------------------------------------------


def _reply(top: list[tuple[str, float]]) -> dict[str, Any]:
    entries = [{"token": t, "logprob": lp} for t, lp in top]
    return {
        "choices": [
            {
                "message": {"content": top[0][0]},
                "logprobs": {"content": [{**entries[0], "top_logprobs": entries}]},
            }
        ]
    }


def test_an_endpoint_without_yes_or_no_in_any_top_20_is_an_error(
    three_photos: list[Photo], monkeypatch: pytest.MonkeyPatch
) -> None:
    scorer = EndpointScorer("http://127.0.0.1:9/v1", "thinker")
    thinking = _reply([("<think>", -0.01)] + [(f"w{i}", -6.0 - i) for i in range(19)])
    monkeypatch.setattr(scorer, "_post", lambda body: thinking)
    with pytest.raises(ScorerError, match="answers yes/no directly") as caught:
        scorer.score(three_photos, Question("Is there a red circle?"))
    assert "<think>" in str(caught.value) and "thinker" in str(caught.value)
    # One photo's top 20 holding "No" makes the others' p = 0 real answers.
    replies = iter([_reply([("No", -0.1), ("Yes", -2.5)]), thinking, thinking])
    monkeypatch.setattr(scorer, "_post", lambda body: next(replies))
    scorer.batch_size = 1
    answers = scorer.score(three_photos, Question("Is there a red circle?"))
    assert answers[0].p_yes == pytest.approx(1 / (1 + np.exp(2.4)))
    assert answers[1].p_yes == 0.0 and answers[2].p_yes == 0.0


def test_an_endpoint_nan_logprob_is_an_error(
    three_photos: list[Photo], monkeypatch: pytest.MonkeyPatch
) -> None:
    scorer = EndpointScorer("http://127.0.0.1:9/v1", "m")
    monkeypatch.setattr(scorer, "_post", lambda body: _reply([("Yes", float("nan")), ("No", -1.0)]))
    with pytest.raises(ScorerError, match="not finite"):
        scorer.score(three_photos[:1], Question("Is there a red circle?"))
