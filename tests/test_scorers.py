"""Rerank scorers: CLIP (whole photo and regions) on demo photos, a tiny random
vision-language model (mechanics), and an OpenAI-compatible endpoint on loopback."""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from engine.demo.scenes import DemoScene, draw_demo_scene
from engine.errors import BadInputError
from engine.indexing.hashes import content_hash
from engine.methods.base import LanguageModelEndpoint, ModelManager
from engine.rerank.answering import ScorerError
from engine.rerank.base import Answer, Photo, Question, yes_probability
from engine.rerank.clip import ClipScorer, question_statement
from engine.rerank.endpoint import EndpointScorer
from engine.rerank.scorers import load_scorer
from engine.rerank.vlm import VlmScorer


def _photo(image_id: int, path: Path) -> Photo:
    return Photo(image_id, path, content_hash(path))


def _ap(scores: list[float], relevant: list[bool]) -> float:
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    hits, total = 0, 0.0
    for rank, i in enumerate(order, 1):
        if relevant[i]:
            hits += 1
            total += hits / rank
    return total / max(1, sum(relevant))


def test_statement_drops_the_yes_no_frame() -> None:
    assert question_statement(Question("Does this image show two red circles?")) == (
        "two red circles"
    )
    assert question_statement(Question("Is there a frog in this photo?")) == "a frog"
    assert question_statement(Question("Is it a frog?", target="green frog")) == "green frog"


# -- CLIP ---------------------------------------------------------------------------------------


def test_clip_scorer_says_yes_to_red_circles_on_red_circle_photos(
    demo_encoder: Any, small_demo_collection: Any
) -> None:
    root = small_demo_collection.root
    labels = small_demo_collection.labels
    photos = [_photo(i, root / rel) for i, rel in enumerate(sorted(labels))]
    is_red_circle = [labels[rel] == "red circle" for rel in sorted(labels)]
    scorer = ClipScorer(demo_encoder, regions=False)
    answers = scorer.score(
        photos, Question("Is there a red circle in this photo?"), history=(), context=""
    )
    p = [a.p_yes for a in answers]
    assert all(0.0 <= x <= 1.0 for x in p)
    on_red = [x for x, red in zip(p, is_red_circle, strict=True) if red]
    on_other = [x for x, red in zip(p, is_red_circle, strict=True) if not red]
    assert min(on_red) > float(np.median(on_other))
    assert _ap(p, is_red_circle) > 0.8
    # The answer is the two-way softmax of the logits it reports (docs/SPEC.md §2.2).
    first = answers[0]
    assert first.p_yes == pytest.approx(yes_probability(first.l_yes, first.l_no))
    assert scorer.identity == f"clip:{demo_encoder.model_key}"


def test_regions_bind_colour_to_shape_better_than_the_whole_photo(
    demo_encoder: Any, tmp_path: Path
) -> None:
    """ "A red circle beside a blue square" asked one object at a time, on photos of that
    scene and of its swapped binding (a blue circle beside a red square)."""
    rng = np.random.default_rng(3)
    photos, relevant = [], []
    for scene, right in (
        (("red circle", "blue square"), True),
        (("blue circle", "red square"), False),
    ):
        for _ in range(10):
            path = tmp_path / f"{len(photos)}.png"
            draw_demo_scene(rng, DemoScene(scene, "beside"))[0].save(path)
            photos.append(_photo(len(photos), path))
            relevant.append(right)
    questions = [Question(f"Is there a {x}?", target=x) for x in ("red circle", "blue square")]
    ap = {}
    for regions in (False, True):
        scorer = ClipScorer(demo_encoder, regions=regions)
        per_question = [
            [a.p_yes for a in scorer.score(photos, q, history=(), context="")] for q in questions
        ]
        ap[regions] = _ap(list(np.mean(per_question, axis=0)), relevant)
    assert ap[True] > ap[False]
    assert ap[True] > 0.8


def test_clip_scorer_encodes_each_photo_once(demo_encoder: Any, tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    path = tmp_path / "a.png"
    draw_demo_scene(rng, DemoScene(("red circle",)))[0].save(path)
    calls: list[int] = []

    class Counting:
        model_key = demo_encoder.model_key
        image_size = demo_encoder.image_size

        def encode_images(self, images: Any) -> Any:
            calls.append(len(images))
            return demo_encoder.encode_images(images)

        def encode_texts(self, texts: Any) -> Any:
            return demo_encoder.encode_texts(texts)

    scorer = ClipScorer(Counting(), regions=True, logit_scale=100.0)  # type: ignore[arg-type]
    photo = _photo(1, path)
    for text in ("red circle", "blue square"):
        scorer.score([photo, photo], Question(f"Is there a {text}?", target=text))
    assert len(calls) == 1  # one batch: one photo's crops, for both questions
    assert calls[0] > 1


# -- local vision-language model ----------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_vlm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.tiny_vlm import build_tiny_vlm

    return build_tiny_vlm(tmp_path_factory.mktemp("tiny-vlm") / "model")


@pytest.fixture
def three_photos(tmp_path: Path) -> list[Photo]:
    rng = np.random.default_rng(5)
    out = []
    for i, scene in enumerate(
        (("red circle",), ("blue square",), ("green triangle", "red circle"))
    ):
        path = tmp_path / f"p{i}.png"
        draw_demo_scene(rng, DemoScene(scene))[0].save(path)
        out.append(_photo(i, path))
    return out


def test_vlm_reads_yes_and_no_from_the_first_tokens_logits(
    tiny_vlm: Path, three_photos: list[Photo]
) -> None:
    import torch
    from PIL import Image

    scorer = VlmScorer(tiny_vlm, device="cpu", batch_size=1)
    question = Question("Is there a red circle?")
    answer = scorer.score(three_photos[:1], question)[0]
    # The same model asked through generate(): the first token's scores.
    prompt = scorer.prompt(question, [], "")
    image = Image.open(three_photos[0].path).convert("RGB")
    inputs = scorer.processor(text=[prompt], images=[[image]], return_tensors="pt")
    with torch.inference_mode():
        out = scorer.model.generate(
            **inputs,
            max_new_tokens=1,
            do_sample=False,
            output_logits=True,
            return_dict_in_generate=True,
        )
    logprobs = torch.log_softmax(out.logits[0][0].float(), dim=-1)
    yes_id = scorer.tokenizer.convert_tokens_to_ids("Yes")
    no_id = scorer.tokenizer.convert_tokens_to_ids("No")
    assert yes_id in scorer.yes_ids and no_id in scorer.no_ids
    l_yes = math.log(sum(math.exp(float(logprobs[t])) for t in scorer.yes_ids))
    l_no = math.log(sum(math.exp(float(logprobs[t])) for t in scorer.no_ids))
    assert answer.l_yes == pytest.approx(l_yes, abs=1e-4)
    assert answer.l_no == pytest.approx(l_no, abs=1e-4)
    assert answer.p_yes == pytest.approx(math.exp(l_yes) / (math.exp(l_yes) + math.exp(l_no)))
    assert scorer.identity.startswith("vlm:sha256-") and len(scorer.identity) == 27


def test_vlm_batches_give_the_answers_of_single_photos(
    tiny_vlm: Path, three_photos: list[Photo]
) -> None:
    question = Question("Is there a red circle?")
    history = [[(Question("Is there a square?"), Answer(0.9))], [], []]  # prompts of unequal length
    single = VlmScorer(tiny_vlm, device="cpu", batch_size=1)
    batched = VlmScorer(tiny_vlm, device="cpu", batch_size=2)
    calls: list[int] = []
    forward = batched._first_token

    def counting(prompts: Any, images: Any) -> Any:
        calls.append(len(prompts))
        return forward(prompts, images)

    batched._first_token = counting  # type: ignore[method-assign]
    one = single.score(three_photos, question, history=history)
    many = batched.score(three_photos, question, history=history)
    assert calls == [2, 1]
    for a, b in zip(one, many, strict=True):
        assert a.p_yes == pytest.approx(b.p_yes, abs=1e-4)


def test_vlm_chaining_puts_earlier_answers_and_context_in_the_prompt(
    tiny_vlm: Path, three_photos: list[Photo]
) -> None:
    scorer = VlmScorer(tiny_vlm, device="cpu", batch_size=4)
    seen: list[str] = []
    processor = scorer.processor

    def spy(*, text: list[str], **kwargs: Any) -> Any:
        seen.extend(text)
        return processor(text=text, **kwargs)

    scorer.processor = _Callable(processor, spy)  # the model reads what reaches the processor
    first = Question("Is there a blue square?")
    history = [[(first, Answer(0.9))], [(first, Answer(0.1))], []]
    second = Question("Is there a red circle?")
    chained = scorer.score(three_photos, second, history=history, context="Circles are round.")
    plain = scorer.score(three_photos, second, history=[[], [], []], context="Circles are round.")
    assert "blue square" in seen[0] and "assistant: Yes" in seen[0]
    assert "blue square" in seen[1] and "assistant: No" in seen[1]
    assert "blue square" not in seen[2]
    assert all("Circles are round." in text for text in seen)
    assert seen[0].index("blue square") < seen[0].index("red circle")
    assert chained[0].p_yes != pytest.approx(plain[0].p_yes, abs=1e-9)
    assert chained[2].p_yes == pytest.approx(plain[2].p_yes, abs=1e-5)


class _Callable:
    """A processor stand-in that forwards everything but records the text it is called with."""

    def __init__(self, inner: Any, call: Any) -> None:
        self._inner, self._call = inner, call

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __call__(self, **kwargs: Any) -> Any:
        return self._call(**kwargs)


# -- OpenAI-compatible endpoint -----------------------------------------------------------------


def _reply(top: list[tuple[str, float]], content: str = "Yes") -> dict[str, Any]:
    """A chat-completions answer shaped as OpenAI documents it, logprobs included."""
    entries = [{"token": t, "logprob": lp, "bytes": list(t.encode())} for t, lp in top]
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "tiny",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "logprobs": {"content": [{**entries[0], "top_logprobs": entries}]},
                "finish_reason": "length",
            }
        ],
    }


@pytest.fixture
def server() -> Iterator[SimpleNamespace]:
    state = SimpleNamespace(bodies=[], headers=[], url="")

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802 - the http.server name
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            state.bodies.append(body)
            state.headers.append(dict(self.headers))
            mode = self.path.split("/")[1]
            if mode == "slow":
                time.sleep(1.5)
            if mode == "fail":
                self.send_response(500)
                self.end_headers()
                self.wfile.write(b'{"error": {"message": "model crashed"}}')
                return
            if mode == "bad":
                payload = b"<html>not json"
            elif mode == "missing":
                payload = json.dumps(_reply([("Maybe", -0.1), ("Perhaps", -2.5)], "Maybe")).encode()
            else:
                payload = json.dumps(_reply([(" Yes", -0.2), ("yes", -3.0), ("No", -1.8)])).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(payload)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    yield state
    httpd.shutdown()
    httpd.server_close()
    thread.join(5)


def test_endpoint_p_from_the_yes_and_no_tokens_among_the_top_logprobs(
    server: SimpleNamespace, three_photos: list[Photo]
) -> None:
    scorer = EndpointScorer(f"{server.url}/good/v1", "tiny", api_key="k-1", batch_size=2)
    answers = scorer.score(three_photos, Question("Is there a red circle?"))
    l_yes = math.log(math.exp(-0.2) + math.exp(-3.0))
    expected = math.exp(l_yes) / (math.exp(l_yes) + math.exp(-1.8))
    assert [a.p_yes for a in answers] == pytest.approx([expected] * 3)
    body = server.bodies[0]
    assert body["logprobs"] is True and body["top_logprobs"] == 20 and body["model"] == "tiny"
    image = body["messages"][1]["content"][0]["image_url"]["url"]
    assert image.startswith("data:image/jpeg;base64,")
    assert server.headers[0]["Authorization"] == "Bearer k-1"
    assert scorer.identity == f"endpoint:{server.url}/good/v1/chat/completions#tiny"


def test_endpoint_without_yes_or_no_tokens_in_a_whole_batch_is_an_error(
    server: SimpleNamespace, three_photos: list[Photo]
) -> None:
    # A batch in which no photo's top 20 holds Yes or No is not a batch of "no"s
    # (docs/SPEC.md §2.2); a single photo without them among others answers 0
    # (tests/test_scorers_vlm.py).
    scorer = EndpointScorer(f"{server.url}/missing", "tiny")
    with pytest.raises(ScorerError, match="answers yes/no directly") as caught:
        scorer.score(three_photos[:1], Question("Is there a red circle?"))
    assert "Maybe" in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("mode", "words"),
    [("slow", "did not answer within 0.5 s"), ("fail", "HTTP 500"), ("bad", "did not answer JSON")],
)
def test_endpoint_failures_raise_one_line(
    server: SimpleNamespace, three_photos: list[Photo], mode: str, words: str
) -> None:
    scorer = EndpointScorer(f"{server.url}/{mode}", "tiny", timeout=0.5)
    with pytest.raises(ScorerError) as caught:
        scorer.score(three_photos[:1], Question("Is there a red circle?"))
    assert words in str(caught.value) and "\n" not in str(caught.value)
    if mode == "fail":
        assert "model crashed" in str(caught.value)


def test_endpoint_chaining_sends_the_earlier_turns(
    server: SimpleNamespace, three_photos: list[Photo]
) -> None:
    scorer = EndpointScorer(f"{server.url}/good", "tiny")
    first = Question("Is there a blue square?")
    scorer.score(
        three_photos[:1],
        Question("Is there a red circle?"),
        history=[[(first, Answer(0.2))]],
        context="Circles are round.",
    )
    messages = server.bodies[0]["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert "Circles are round." in messages[0]["content"]
    assert messages[1]["content"][1]["text"] == "Is there a blue square?"
    assert messages[2]["content"] == "No"
    assert messages[3]["content"] == "Is there a red circle?"


# -- specs --------------------------------------------------------------------------------------


def test_load_scorer_specs(demo_encoder: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    context: Any = SimpleNamespace(
        encoder=demo_encoder,
        models=ModelManager(),
        llm=LanguageModelEndpoint("http://127.0.0.1:9/v1", "configured-model", "secret"),
    )
    assert load_scorer("clip:whole", context).identity == f"clip:{demo_encoder.model_key}"
    regions = load_scorer("clip:regions", context)
    assert regions.identity == f"clip-regions:{demo_encoder.model_key}"
    assert load_scorer("clip", context) is regions  # the measured default, loaded once
    mine: Any = load_scorer("endpoint:http://127.0.0.1:9", context)
    assert (mine.api_key, mine.model) == ("secret", "configured-model")
    monkeypatch.setenv("QUADRAT_LLM_API_KEY", "from-env")
    other: Any = load_scorer("endpoint:http://127.0.0.1:8/v1#m2", context)
    assert (other.api_key, other.model) == ("from-env", "m2")
    for bad in ("clip:nearby", "vlm:/no/such/folder", "endpoint:", "oracle"):
        with pytest.raises(BadInputError):
            load_scorer(bad, context)
