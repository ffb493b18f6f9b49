"""Structured reranking: the yes/no formula and aggregation, subqueries from the user, the
built-in rules and a language model on loopback, the score cache and Cancel, the `rerank`
method on the command line, and the CLIP scorer fixing a swapped binding on demo scenes."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from app.cli import main
from engine.catalog.library import Library
from engine.errors import BadInputError, Cancelled
from engine.evaluation.metrics import average_precision_at_k
from engine.indexing.indexer import Indexer
from engine.methods import MethodContext, SearchQuery, resolve_spec
from engine.methods.events import MethodEvent, RerankPartial, RerankProgress
from engine.progress import CancelToken
from engine.rerank import Answer, Photo, Question, aggregate, yes_probability
from engine.rerank.cache import ScoreCache
from engine.rerank.cost import estimate_cost
from engine.rerank.decompose import BuiltinDecomposer, LlmDecomposer, UserDecomposer
from engine.rerank.store import load_questions, save_questions


@pytest.fixture(scope="module")
def indexed(tmp_path_factory, copy_small_demo_library) -> Path:
    return copy_small_demo_library(tmp_path_factory.mktemp("rerank") / "lib")


class FakeScorer:
    """Answers by a rule on the photo id; counts the photos it was asked about."""

    def __init__(self, rule: Any, batch_size: int = 4, identity: str = "fake:1") -> None:
        self.rule = rule
        self.batch_size = batch_size
        self.identity = identity
        self.asked: list[tuple[int, str, int]] = []  # (image id, question, history length)
        self.on_call: Any = None

    def score(self, photos, question, *, history, context, cancel) -> list[Answer]:  # type: ignore[no-untyped-def]
        if self.on_call is not None:
            self.on_call(len(self.asked))
        self.asked += [
            (p.image_id, question.text, len(h)) for p, h in zip(photos, history, strict=True)
        ]
        return [Answer(self.rule(p.image_id, question), "yes") for p in photos]


def use_scorer(monkeypatch: pytest.MonkeyPatch, scorer: FakeScorer) -> None:
    monkeypatch.setattr("engine.methods.rerank.load_scorer_for", lambda spec, context: scorer)


# -- the formula and aggregation ---------------------------------------------------------------


def test_yes_probability_and_aggregation_follow_the_spec_example():
    p = yes_probability(2.0, 0.5)
    assert p == pytest.approx(0.8175745, abs=1e-7)
    # The missing-token rule: neither token is "No"; only one present decides alone.
    assert yes_probability(None, None) == 0.0
    assert yes_probability(None, 3.0) == 0.0
    assert yes_probability(-2.0, None) == 1.0
    assert aggregate([p, 0.2]) == pytest.approx((0.8175745 + 0.2) / 2, abs=1e-7)
    assert aggregate([p, 0.2], "min") == pytest.approx(0.2)
    assert aggregate([p, 0.5], "product") == pytest.approx(0.8175745 / 2, abs=1e-7)
    assert aggregate([]) == 0.0
    with pytest.raises(BadInputError, match="unknown aggregation"):
        aggregate([0.5], "median")


def test_cost_is_photos_times_questions():
    calls, seconds = estimate_cost(100, 3, "clip")
    assert calls == 300 and seconds > 0
    assert estimate_cost(100, 3, "endpoint:http://x")[1] > seconds  # a language model is slower


# -- decomposers -------------------------------------------------------------------------------


def test_builtin_subqueries_ask_the_subject_first_and_split_relations(indexed):
    from engine.methods.rerank import known_names

    with Library.open(indexed) as library:
        names = known_names(library)
    assert "red circle" in names  # the demo catalog's common names
    builtin = BuiltinDecomposer()
    counted = builtin.decompose("three red circles", known_names=names).questions
    assert [q.text for q in counted] == [
        "Is there a red circle in this image?",
        "Does this image show three red circles?",
    ]
    assert counted[0].target == "red circle" and counted[1].target == ""
    # A name the catalog does not know gets no subject question.
    assert len(builtin.decompose("three mauve hexagons", known_names=names).questions) == 1

    beside = builtin.decompose("a red circle beside a blue square").questions
    assert [q.target for q in beside] == ["red circle", "blue square"]
    above = builtin.decompose("An owl above a sleeping fox").questions
    assert [q.target for q in above] == ["owl", "sleeping fox", ""]
    assert above[2].text == "Does this image show An owl above a sleeping fox?"
    assert [q.target for q in builtin.decompose("a heron next to a reed bed").questions] == [
        "heron",
        "reed bed",
    ]


def test_user_subqueries_keep_their_order_and_bare_phrases_become_questions():
    questions = (
        UserDecomposer("red circle; Is it in the shade?;  ;Is there an egret?")
        .decompose("q")
        .questions
    )
    assert [q.text for q in questions] == [
        "Is there a red circle in this image?",
        "Is it in the shade?",
        "Is there an egret?",
    ]
    assert [q.target for q in questions] == ["red circle", "", "egret"]
    assert {q.source for q in questions} == {"user"}


class _Endpoint(BaseHTTPRequestHandler):
    mode = "good"
    bodies: list[dict[str, Any]] = []

    def do_POST(self) -> None:  # noqa: N802 - the http.server API
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).bodies.append(body)
        if self.mode == "slow":
            time.sleep(1.5)
        if self.mode == "500":
            self.send_error(500, "model crashed")
            return
        content = json.dumps(
            {"questions": [
                {"text": "Is there a frog in this image?", "target": "frog"},
                {"text": "Are two frogs clasped together?", "target": ""},
            ], "context": "Amplexus: the male grips the female from behind."}
        )  # fmt: skip
        if self.mode == "malformed":
            content = "Sure! Here are some questions: frog? amplexus?"
        answer = {"choices": [{"message": {"role": "assistant", "content": content}}]}
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def endpoint() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Endpoint)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Endpoint.bodies = []
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(
    ("mode", "why"),
    [
        ("slow", "did not answer within 0.5 s"),
        ("500", "answered HTTP 500"),
        ("malformed", "did not reply with the JSON asked for"),
    ],
)
def test_the_llm_decomposer_falls_back_with_a_clear_note(endpoint, mode, why):
    _Endpoint.mode = mode
    decomposer = LlmDecomposer(endpoint, "tiny", timeout=0.5)
    got = decomposer.decompose("water frogs in amplexus", known_names=["water frog"])
    assert why in got.note and "used the built-in ones" in got.note
    builtin = BuiltinDecomposer().decompose("water frogs in amplexus", known_names=["water frog"])
    assert got.questions == builtin.questions


def test_the_llm_decomposer_asks_with_the_context_and_drafts_one(endpoint):
    _Endpoint.mode = "good"
    decomposer = LlmDecomposer(endpoint, "tiny", timeout=5)
    got = decomposer.decompose("water frogs in amplexus", context="Rana esculenta breeds in May")
    assert [(q.text, q.source, q.target) for q in got.questions] == [
        ("Is there a frog in this image?", "llm", "frog"),
        ("Are two frogs clasped together?", "llm", ""),
    ]
    assert got.note == "" and got.context == "Rana esculenta breeds in May"
    asked = json.loads(_Endpoint.bodies[-1]["messages"][1]["content"])
    assert asked == {"query": "water frogs in amplexus",
                     "expert_context": "Rana esculenta breeds in May"}  # fmt: skip
    assert decomposer.draft_context("water frogs in amplexus") == (
        "Amplexus: the male grips the female from behind.",
        "",
    )
    assert decomposer.identity == f"llm:{endpoint}#tiny"


# -- the method: order, ties, cache, cancel ----------------------------------------------------


def test_rerank_reorders_the_base_ties_keep_its_order_and_evidence_is_kept(
    indexed, demo_encoder, monkeypatch
):
    with Library.open(indexed) as library:
        context = MethodContext(library, lambda: demo_encoder)
        query = SearchQuery("red circle")
        base = resolve_spec("text").run(query, context, top_k=20)
        favoured = set(base.ids[10:13])
        use_scorer(monkeypatch, FakeScorer(lambda i, q: 0.9 if i in favoured else 0.5))
        events: list[MethodEvent] = []
        context.notify = events.append
        ranking = resolve_spec("rerank:depth=20,subqueries=red circle;Is it round?").run(
            query, context, top_k=20
        )
        # The favoured three lead, in base order; every tie below keeps the base order.
        assert ranking.ids == base.ids[10:13] + base.ids[:10] + base.ids[13:20]
        assert ranking.scores[0] == pytest.approx(0.9)
        first = ranking.evidence[base.ids[10]]
        assert first["base_rank"] == 11 and first["score"] == pytest.approx(0.9)
        assert [a["question"] for a in first["answers"]] == [
            "Is there a red circle in this image?",
            "Is it round?",
        ]
        details = ranking.details
        assert details["calls"] == 40 and details["cached"] == 0 and details["depth"] == 20
        assert details["scorer"] == "fake:1" and details["decomposer"] == "user"
        progress = [(e.done, e.total) for e in events if isinstance(e, RerankProgress)]
        assert progress[0] == (0, 20) and progress[-1] == (20, 20)
        assert any(isinstance(e, RerankPartial) for e in events)


def test_chaining_gives_the_scorer_the_earlier_answers(indexed, demo_encoder, monkeypatch):
    with Library.open(indexed) as library:
        context = MethodContext(library, lambda: demo_encoder)
        for chain, expected in ((True, {0, 1, 2}), (False, {0})):
            scorer = FakeScorer(lambda i, q: 0.5, identity=f"fake:chain-{chain}")
            use_scorer(monkeypatch, scorer)
            spec = f"rerank:depth=5,subqueries=a;b;c,chain={str(chain).lower()}"
            resolve_spec(spec).run(SearchQuery("red circle"), context, top_k=5)
            assert {h for _, _, h in scorer.asked} == expected


def test_a_second_run_comes_from_the_cache_and_cancel_keeps_what_was_scored(
    tmp_path, photos, demo_encoder, monkeypatch
):
    with Library.open(tmp_path / "lib") as library:
        Indexer(library, demo_encoder).run(photos)
        context = MethodContext(library, lambda: demo_encoder)
        query = SearchQuery("blue square")
        spec = resolve_spec("rerank:depth=12,subqueries=blue square;Is it on grass?")
        scorer = FakeScorer(lambda i, q: (i % 7) / 7, batch_size=4)
        use_scorer(monkeypatch, scorer)

        # Cancel while the second batch is being scored: the first batch's 8 answers stay.
        def cancel_on_third_call(done: int) -> None:
            if done == 8:
                context.cancel.cancel()

        scorer.on_call = cancel_on_third_call
        with pytest.raises(Cancelled):
            spec.run(query, context, top_k=12)
        # The answers the scorer gave before it saw the cancel are kept too (4 more); the
        # second question of the second batch was never asked.
        kept = ScoreCache(library).count("fake:1")
        assert kept == 12

        scorer.on_call = None
        scorer.asked.clear()
        context.cancel = CancelToken()
        first = spec.run(query, context, top_k=12)
        assert len(scorer.asked) == 24 - kept and first.details["cached"] == kept
        scorer.asked.clear()
        second = spec.run(query, context, top_k=12)
        assert scorer.asked == [] and second.details["calls"] == 0
        assert second.details["cached"] == 24
        assert second.ids == first.ids and second.scores == first.scores
        # Another context is another key: asked again.
        resolve_spec(
            "rerank:depth=12,subqueries=blue square;Is it on grass?,context=Wet meadows"
        ).run(query, context, top_k=12)
        assert len(scorer.asked) == 24


def test_questions_are_saved_with_a_query(tmp_path):
    from engine.judgments.queries import QueryStore

    with Library.open(tmp_path / "lib") as library:
        query_id = QueryStore(library).find_or_create_query("water frogs in amplexus")
        questions = (
            Question("Is there a water frog in this image?", "builtin", "water frog"),
            Question("Are they clasped?", "user"),
        )
        save_questions(library, query_id, questions)
        assert load_questions(library, query_id) == questions
        save_questions(library, query_id, questions[1:])
        assert load_questions(library, query_id) == questions[1:]


# -- the command line --------------------------------------------------------------------------


def test_search_with_rerank_prints_each_photos_answers(capsys, indexed, monkeypatch):
    use_scorer(monkeypatch, FakeScorer(lambda i, q: 1.0 if q.target == "red circle" else 0.25))
    code = main(["search", "a red circle beside a blue square", "--library", str(indexed),
                 "--method", "rerank", "--depth", "30", "--top", "5", "--json"])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    assert len(lines) == 5 and {line["method"] for line in lines} == {"rerank:depth=30"}
    assert [a["question"] for a in lines[0]["answers"]] == [
        "Is there a red circle in this image?",
        "Is there a blue square in this image?",
    ]
    assert lines[0]["answers"][0]["p"] == 1.0 and lines[0]["score"] == pytest.approx(0.625)

    code = main(["search", "red circle", "--library", str(indexed), "--method", "text",
                 "--subqueries", "a;b"])  # fmt: skip
    assert code == 2 and "apply to --method rerank" in capsys.readouterr().err


def test_evaluate_rerank_under_the_rerank_protocol(
    capsys, indexed, small_demo_collection, monkeypatch
):
    # A scorer that says "yes" to the photos the text ranking puts last turns the order around:
    # the same candidates, fewer relevant ones on top.
    use_scorer(monkeypatch, FakeScorer(lambda i, q: 1.0 / (1 + i)))
    code = main([
        "evaluate", "--queries", str(small_demo_collection.queries_path),
        "--judgments", str(small_demo_collection.judgments_path), "--library", str(indexed),
        "--k", "5", "--protocol", "rerank", "--method", "text",
        "--method", "rerank:subqueries=anything", "--permutations", "200", "--json",
    ])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    result = json.loads(out)
    text, reranked = result["methods"]["text"], result["methods"]["rerank:subqueries=anything"]
    assert [q["R"] for q in text["per_query"]] == [q["R"] for q in reranked["per_query"]]
    assert reranked["mAP@5"] != text["mAP@5"]


# -- the CLIP scorer on demo scenes ------------------------------------------------------------


def test_clip_rerank_on_a_binding_pool_demotes_no_right_binding(tmp_path, demo_encoder):
    # The pool: 8 photos of the query's binding, 8 of the swapped binding, 8 of one shape
    # alone. CLIP grades "red circle" higher on the right binding than the swapped one, but
    # its margins fall in three groups (the red circles alone highest), not two, so read as a
    # condition the question is left out; "blue square" splits off the red circles alone,
    # already last. The rule trades this grading, which earlier rules used, for not
    # reordering a top the base had right (docs/BENCHMARKS.md, "Structured reranking").
    from engine.demo.scenes import DemoScene, draw_demo_scene

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
        reranked = resolve_spec("rerank:scorer=clip").run(query, context, top_k=100)
        paths = {p.image_id: p.path.name for p in _photos(library, base.ids)}

    def ap(ids: Sequence[int]) -> float:
        return average_precision_at_k([int(paths[i].startswith("wanted")) for i in ids], 10, 8)

    assert [q["target"] for q in reranked.details["questions"]] == ["red circle", "blue square"]
    assert sorted(reranked.ids) == sorted(base.ids)  # the same top-100, reordered
    assert ap(reranked.ids) >= ap(base.ids), (ap(base.ids), ap(reranked.ids))
    wanted_at = {i: r for r, i in enumerate(reranked.ids) if paths[i].startswith("wanted")}
    assert all(wanted_at[i] <= r for r, i in enumerate(base.ids) if i in wanted_at)
    alone = [i for i in reranked.ids if paths[i].startswith(("red-circle", "blue-square"))]
    assert reranked.ids[-len(alone) :] == alone  # the single shapes stay below both bindings


def _photos(library: Library, ids: Sequence[int]) -> list[Photo]:
    from engine.rerank.cache import photos_for

    return list(photos_for(library, ids).values())
