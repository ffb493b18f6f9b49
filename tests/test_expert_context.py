"""Divide-and-Conquer as its paper defines it: a per-query expert context (a CSV of query id ->
context, drafted once per query and read back), the original query in the answering prompt,
and `evaluate --method rerank:variant=...` running the method, its ablations and INQUIRE's
baseline. A stand-in scorer records what each prompt would hold; nothing leaves the machine."""

from __future__ import annotations

import csv
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from app.cli import main
from engine.catalog.library import Library
from engine.errors import BadInputError
from engine.evaluation.evaluate import load_queries_csv
from engine.methods import MethodContext, SearchQuery, resolve_spec
from engine.methods.base import LanguageModelEndpoint
from engine.rerank import Answer


class RecordingScorer:
    """Records, per call, the question, the expert context and the query its prompt holds."""

    batch_size = 8

    def __init__(self, identity: str) -> None:
        self.identity = identity
        self.asked: list[dict[str, Any]] = []

    def score(self, photos, question, *, history, context, cancel, query=None) -> list[Answer]:  # type: ignore[no-untyped-def]
        self.asked.append({"question": question.text, "context": context, "query": query})
        return [Answer(1.0 / (1 + p.image_id), "yes") for p in photos]


class QuerylessScorer(RecordingScorer):
    """A scorer whose prompt has no place for the query (as the CLIP scorer)."""

    def score(self, photos, question, *, history, context, cancel) -> list[Answer]:  # type: ignore[no-untyped-def,override]
        return super().score(photos, question, history=history, context=context, cancel=cancel)


@pytest.fixture
def library(tmp_path: Path, copy_small_demo_library) -> Path:
    return copy_small_demo_library(tmp_path / "lib")


@pytest.fixture
def scorers(monkeypatch: pytest.MonkeyPatch) -> dict[str, RecordingScorer]:
    """One recording scorer per `scorer=` name, so each method's prompts are told apart."""
    made: dict[str, RecordingScorer] = {}

    def load(spec: str, context: object) -> RecordingScorer:
        if spec not in made:
            kind = QuerylessScorer if spec.startswith("plain") else RecordingScorer
            made[spec] = kind(f"recording:{spec}")
        return made[spec]

    monkeypatch.setattr("engine.methods.rerank.load_scorer_for", load)
    return made


@pytest.fixture
def few_queries(tmp_path: Path, small_demo_collection) -> Path:
    """The demo benchmark's first four queries (a benchmark run in seconds)."""
    lines = small_demo_collection.queries_path.read_text(encoding="utf-8").splitlines()
    path = tmp_path / "queries.csv"
    path.write_text("\n".join(lines[:5]) + "\n", encoding="utf-8")
    return path


def _contexts_file(path: Path, queries: list[tuple[str, str]]) -> dict[str, str]:
    """A contexts CSV written by hand (as a user edits it): a different passage per query."""
    contexts = {text: f"Expert note {n}: how {text} shows in a photo." for n, (_, text) in
                enumerate(queries)}  # fmt: skip
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["query_id", "query", "context"])
        for query_id, text in queries:
            writer.writerow([query_id, text, contexts[text]])
    return contexts


# -- the contexts file -------------------------------------------------------------------------


def test_the_contexts_csv_round_trips_and_refuses_bad_files(tmp_path):
    from engine.rerank.context import ContextRow, context_for, read_contexts, write_contexts

    rows = [
        ContextRow(
            "7", "a heron  in the reeds", "Herons stand still, neck drawn in; grey, long legs."
        ),
        ContextRow("12", "=a formula, with commas", '-starts like one, "quoted", and\nmore'),
        ContextRow("q3", "mating frogs", ""),
    ]
    path = tmp_path / "queries.contexts.csv"
    write_contexts(path, rows)
    back = read_contexts(path)
    assert [r.query_id for r in back] == ["7", "12", "q3"]
    assert back[0] == ContextRow("7", "a heron in the reeds", rows[0].context)
    assert back[1] == ContextRow(
        "12", "=a formula, with commas", '-starts like one, "quoted", and more'
    )
    # The cells a spreadsheet would run are guarded in the file itself.
    assert "'=a formula" in path.read_text(encoding="utf-8")
    assert context_for(back, "A Heron in the  reeds") == rows[0].context
    assert context_for(back, "an egret") is None

    bad = tmp_path / "bad.csv"
    for text, reason in (
        ("query_id,context\n1,x\n", "needs the columns query"),
        ("query_id,query,context\n1,a,x\n1,b,y\n", "query_id 1 repeats line"),
        ("query_id,query,context\n1,a,x\n2,A,y\n", "has another context above"),
        ("query_id,query,context\n,a,x\n", "empty query_id"),
    ):
        bad.write_text(text, encoding="utf-8")
        with pytest.raises(BadInputError, match=reason) as caught:
            read_contexts(bad)
        assert "\n" not in str(caught.value)
        assert bad.read_text(encoding="utf-8") == text  # a refused file is left as it was
    with pytest.raises(BadInputError, match="no such contexts file"):
        read_contexts(tmp_path / "missing.csv")


def test_contexts_are_drafted_once_per_query_and_kept(tmp_path):
    from engine.rerank.context import draft_missing, read_contexts

    asked: list[str] = []

    def draft(query: str) -> tuple[str, str]:
        asked.append(query)
        if "fails" in query:
            return "", "the model gave no context"
        return f"What an expert sees in {query}.", ""

    path = tmp_path / "queries.contexts.csv"
    queries = [("1", "a heron"), ("2", "this one fails"), ("3", "mating frogs")]
    drafted, notes = draft_missing(path, queries, draft)
    assert drafted == 2 and notes == ["query 2: the model gave no context"]
    assert {r.query_id: r.context for r in read_contexts(path)} == {
        "1": "What an expert sees in a heron.",
        "3": "What an expert sees in mating frogs.",
    }
    # A second run drafts only what is missing; an edited row is kept as the user wrote it.
    text = path.read_text(encoding="utf-8").replace("What an expert sees in a heron.", "Edited.")
    path.write_text(text, encoding="utf-8")
    asked.clear()
    draft_missing(path, queries, draft)
    assert asked == ["this one fails"]
    assert read_contexts(path)[0].context == "Edited."

    # An endpoint that is down: drafting stops after a few failures, not one time-out per query.
    many = [(str(n), f"query {n} fails") for n in range(10, 20)]
    asked.clear()
    drafted, notes = draft_missing(path, many, draft)
    assert drafted == 0 and len(asked) == 3
    assert notes[-1] == "stopped drafting after 3 failures in a row"


# -- per-query context and the query in the prompt ---------------------------------------------


def test_each_query_gets_its_own_context_and_the_query_in_its_prompt(
    tmp_path, library, scorers, small_demo_collection, demo_encoder
):
    queries = [(q.query_id, q.text) for q in load_queries_csv(small_demo_collection.queries_path)]
    chosen = queries[:3]
    contexts = _contexts_file(tmp_path / "contexts.csv", chosen)
    spec = resolve_spec(
        f"rerank:variant=paper,contexts={tmp_path / 'contexts.csv'},scorer=rec,depth=5"
    )
    with Library.open(library) as lib:
        context = MethodContext(lib, lambda: demo_encoder)
        for _, text in chosen:
            if "rec" in scorers:
                scorers["rec"].asked.clear()
            candidates = list(range(1, 6))
            ranking = spec.run(SearchQuery(text), context, top_k=5, candidates=candidates)
            asked = scorers["rec"].asked
            assert asked, "the scorer was asked"
            # Every prompt of this query holds this query's own context and the query itself.
            assert {a["context"] for a in asked} == {contexts[text]}
            assert {a["query"] for a in asked} == {text}
            assert ranking.details["context"] == contexts[text]
            assert ranking.details["variant_label"].startswith("Divide-and-Conquer")


def test_the_query_goes_into_the_prompt_only_when_asked(library, scorers, demo_encoder):
    with Library.open(library) as lib:
        context = MethodContext(lib, lambda: demo_encoder)
        query = SearchQuery("a red circle beside a blue square")
        resolve_spec("rerank:scorer=off,context=Circles are round.").run(
            query, context, top_k=5, candidates=[1, 2, 3]
        )
        resolve_spec("rerank:scorer=on,query=true,context=Circles are round.").run(
            query, context, top_k=5, candidates=[1, 2, 3]
        )
        assert {a["query"] for a in scorers["off"].asked} == {None}
        assert {a["query"] for a in scorers["on"].asked} == {query.text}
        assert {a["context"] for a in scorers["on"].asked} == {"Circles are round."}
        # Answers given with the query in the prompt are cached apart: the same scorer asked
        # the same questions without it is asked again, not served those answers.
        again = RecordingScorer("recording:on")
        scorers["on-again"] = again
        resolve_spec("rerank:scorer=on-again,context=Circles are round.").run(
            query, context, top_k=5, candidates=[1, 2, 3]
        )
        assert len(again.asked) == len(scorers["on"].asked)
        asked = len(scorers["on"].asked)
        resolve_spec("rerank:scorer=on,query=true,context=Circles are round.").run(
            query, context, top_k=5, candidates=[1, 2, 3]
        )
        assert len(scorers["on"].asked) == asked  # the second run with the query: all cached
        # A scorer whose prompt has no place for the query is refused in one line.
        with pytest.raises(BadInputError, match="cannot put the query in its prompt") as caught:
            resolve_spec("rerank:scorer=plain,query=true").run(
                query, context, top_k=5, candidates=[1, 2, 3]
            )
        assert "\n" not in str(caught.value)


def test_paper_variant_without_any_context_says_how_to_give_one(library, scorers, demo_encoder):
    with Library.open(library) as lib:
        context = MethodContext(lib, lambda: demo_encoder)
        with pytest.raises(BadInputError, match="give contexts=FILE"):
            resolve_spec("rerank:variant=paper,scorer=rec").run(
                SearchQuery("mating frogs"), context, top_k=5, candidates=[1, 2]
            )
    with pytest.raises(BadInputError, match="runs without expert context"):
        resolve_spec("rerank:variant=subqueries,context=x")
    with pytest.raises(BadInputError, match="variant must be one of"):
        resolve_spec("rerank:variant=full")


# -- evaluate runs the method, its ablations and the baseline ----------------------------------


def test_evaluate_variants_select_the_papers_prompts(
    capsys, tmp_path, library, scorers, small_demo_collection, few_queries
):
    queries = [(q.query_id, q.text) for q in load_queries_csv(few_queries)]
    contexts = _contexts_file(tmp_path / "contexts.csv", queries)
    methods = {
        "paper": f"rerank:variant=paper,contexts={tmp_path / 'contexts.csv'},scorer=paper,depth=10",
        "subqueries": "rerank:variant=subqueries,scorer=subqueries,depth=10",
        "no-context": "rerank:variant=no-context,scorer=no-context,depth=10",
        "baseline": "rerank:variant=baseline,scorer=baseline,depth=10",
    }
    args = ["evaluate", "--queries", str(few_queries),
            "--judgments", str(small_demo_collection.judgments_path), "--library", str(library),
            "--k", "5", "--protocol", "rerank", "--permutations", "50", "--json",
            "--method", "text"]  # fmt: skip
    for spec in methods.values():
        args += ["--method", spec]
    code = main(args)
    out, err = capsys.readouterr()
    assert code == 0, err
    result = json.loads(out)
    assert set(methods.values()) <= set(result["methods"])
    texts = {text for _, text in queries}

    paper = scorers["paper"].asked
    assert {a["context"] for a in paper} == set(contexts.values())  # one per query, all used
    assert {a["query"] for a in paper} == texts
    for a in paper:
        assert contexts[a["query"]] == a["context"]  # each query's own passage, never another's

    ablation = scorers["subqueries"].asked
    assert {a["context"] for a in ablation} == {""} and {a["query"] for a in ablation} == {None}
    assert {a["question"] for a in ablation} == {a["question"] for a in paper}

    no_context = scorers["no-context"].asked
    assert {a["context"] for a in no_context} == {""}
    assert {a["query"] for a in no_context} == texts

    baseline = scorers["baseline"].asked
    assert {a["question"] for a in baseline} == {f"Does this image show {t}?" for t in texts}
    assert {a["context"] for a in baseline} == {""} and {a["query"] for a in baseline} == {None}
    assert len({a["question"] for a in baseline}) == len(texts)  # one question per query


def test_evaluate_drafts_missing_contexts_beside_the_benchmark(
    capsys, tmp_path, library, scorers, small_demo_collection, few_queries, monkeypatch
):
    from engine.rerank.context import read_contexts

    drafted: list[str] = []

    def draft(self: Any, query: str) -> tuple[str, str]:
        drafted.append(query)
        return f"Drafted for {query}.", ""

    monkeypatch.setattr("engine.rerank.decompose.LlmDecomposer.draft_context", draft)
    monkeypatch.setattr(
        "app.settings.language_model",
        lambda settings: LanguageModelEndpoint("http://127.0.0.1:9/v1", "drafter"),
    )
    path = tmp_path / "queries.contexts.csv"
    spec = f"rerank:variant=paper,contexts={path},scorer=paper,depth=10"
    args = ["evaluate", "--queries", str(few_queries),
            "--judgments", str(small_demo_collection.judgments_path), "--library", str(library),
            "--k", "5", "--protocol", "rerank", "--permutations", "50", "--json",
            "--method", spec]  # fmt: skip
    assert main(args) == 0, capsys.readouterr().err
    queries = load_queries_csv(few_queries)
    rows = read_contexts(path)
    assert [r.query_id for r in rows] == [q.query_id for q in queries]
    assert {a["context"] for a in scorers["paper"].asked} == {r.context for r in rows}
    # Cached: a second run drafts nothing.
    drafted.clear()
    assert main(args) == 0
    assert drafted == []


# -- through a real scorer's prompt ------------------------------------------------------------


class _LogprobsEndpoint(BaseHTTPRequestHandler):
    """A chat endpoint on loopback answering "Yes" with log-probabilities; keeps each body."""

    bodies: list[dict[str, Any]] = []

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        type(self).bodies.append(json.loads(self.rfile.read(length)))
        top = [{"token": "Yes", "logprob": -0.2}, {"token": "No", "logprob": -1.7}]
        first = {"token": "Yes", "logprob": -0.2, "top_logprobs": top}
        reply = {"choices": [{"message": {"content": "Yes"}, "logprobs": {"content": [first]}}]}
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


def test_the_endpoint_scorers_prompt_holds_the_querys_context_and_the_query(
    tmp_path, library, demo_encoder
):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _LogprobsEndpoint)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _LogprobsEndpoint.bodies = []
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    queries = [("1", "a red circle"), ("2", "a blue square")]
    contexts = _contexts_file(tmp_path / "contexts.csv", queries)
    spec = resolve_spec(
        f"rerank:variant=paper,contexts={tmp_path / 'contexts.csv'},scorer=endpoint:{url}#m,"
        "subqueries=Is there a circle?,depth=2"
    )
    try:
        with Library.open(library) as lib:
            context = MethodContext(lib, lambda: demo_encoder)
            for _, text in queries:
                _LogprobsEndpoint.bodies = []
                spec.run(SearchQuery(text), context, top_k=2, candidates=[1, 2])
                assert len(_LogprobsEndpoint.bodies) == 2
                for body in _LogprobsEndpoint.bodies:
                    prompt = json.dumps(body["messages"])
                    assert contexts[text] in prompt and text in prompt
                    other = next(c for t, c in contexts.items() if t != text)
                    assert other not in prompt
    finally:
        server.shutdown()
        server.server_close()
