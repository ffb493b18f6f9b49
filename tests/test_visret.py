"""Visualize-then-retrieve: reciprocal rank fusion as docs/SPEC.md §2.1 says, the demo painter (the
prompt's words alone, seeded, no file read), the `visret` method on the demo library (rankings,
leaving a drawing out without drawing again, details) and the command line."""

from __future__ import annotations

import builtins
import io
import json
import random
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from app.cli import main
from engine.benchmarks.runner import JudgmentResolver
from engine.catalog.library import Library
from engine.errors import BadInputError
from engine.methods import MethodContext, SearchQuery, method_infos, resolve_spec
from engine.methods.events import DrawingMade, DrawingProgress, MethodEvent
from engine.methods.fusion import reciprocal_rank_fusion
from engine.progress import CancelToken, no_progress
from engine.visret.painter import DemoPainter, parse_prompt, scene_for
from tests.test_prompt import server  # noqa: F401 - the local chat endpoint fixture


@pytest.fixture(scope="module")
def indexed(tmp_path_factory, copy_small_demo_library) -> Path:
    return copy_small_demo_library(tmp_path_factory.mktemp("visret") / "lib")


# -- reciprocal rank fusion ------------------------------------------------------------------


def _reference_rrf(lists: list[list[int]], k_rrf: int) -> list[int]:
    """docs/SPEC.md §2.1 written out plainly: exact sums, ties by best single rank, then id."""
    score: dict[int, Fraction] = {}
    best: dict[int, int] = {}
    for ranking in lists:
        for rank, doc in enumerate(ranking, start=1):
            score[doc] = score.get(doc, Fraction(0)) + Fraction(1, k_rrf + rank)
            best[doc] = min(best.get(doc, rank), rank)
    return sorted(score, key=lambda d: (-score[d], best[d], d))


def test_rrf_matches_the_spec_example_and_visret_default_k():
    fused = reciprocal_rank_fusion([("a", "b", "c"), ("b", "c", "d")], k_rrf=60)
    assert [d for d, _ in fused] == ["b", "c", "a", "d"]
    assert [round(s, 7) for _, s in fused] == [0.0325225, 0.0320020, 0.0163934, 0.0158730]
    # k = 1, three drawings (visret's default): a 1/2+1/3+1/4, b 1/3+1/2+1/3, c 1/4+1/4+1/2.
    fused = reciprocal_rank_fusion([("a", "b", "c"), ("b", "a", "c"), ("c", "b", "a")], k_rrf=1)
    assert fused == [("b", pytest.approx(7 / 6)), ("a", pytest.approx(13 / 12)), ("c", 1.0)]
    # Ties: q and z (1/2, best rank 1: by id), then y (1/4 + 1/4, best rank 3), then p and r.
    fused = reciprocal_rank_fusion([("z", "p", "y"), ("q", "r", "y")], k_rrf=1)
    assert [d for d, _ in fused] == ["q", "z", "y", "p", "r"]
    assert fused[0][1] == fused[2][1] == 0.5


def test_rrf_equals_the_spec_on_random_lists_with_ties():
    rng = random.Random(7)
    for _ in range(300):
        pool = list(range(rng.randint(2, 12)))
        lists = [rng.sample(pool, rng.randint(1, len(pool))) for _ in range(rng.randint(1, 4))]
        k = rng.choice([0, 1, 2, 60])
        got = [d for d, _ in reciprocal_rank_fusion(lists, k_rrf=k)]
        assert got == _reference_rrf(lists, k), (lists, k)


# -- the demo painter --------------------------------------------------------------------------


def test_the_painter_reads_colours_shapes_relations_counts_sizes_and_backgrounds():
    rng = np.random.default_rng(0)
    beside = scene_for(parse_prompt("a red circle next to a blue square"), rng)
    assert beside.objects == ("red circle", "blue square") and beside.layout == "beside"
    below = scene_for(parse_prompt("a blue square below a red triangle"), rng)
    assert below.objects == ("red triangle", "blue square") and below.layout == "above"
    counted = scene_for(parse_prompt("three yellow triangles"), rng)
    assert counted.objects == ("yellow triangle",) * 3 and counted.layout == "free"
    assert scene_for(parse_prompt("a tiny green disc"), rng).size == "tiny"
    patterned = scene_for(parse_prompt("a large box, green, on a striped background"), rng)
    assert patterned.size == "large" and patterned.background == "striped"
    hidden = scene_for(parse_prompt("a red circle partly hidden behind twigs"), rng)
    assert hidden.objects == ("red circle",) and hidden.occluded
    # Words before "of" describe the picture, not its content; unknown words are ignored.
    framed = parse_prompt("A small and realistic image of the two zebra-striped purple squares")
    assert [(p.count, p.colour, p.shape, p.size) for p in framed.phrases] == [
        (2, None, "square", None)
    ]
    assert framed.background == "striped"
    # Nothing known: one shape, colour and shape drawn from the seed.
    assert len(scene_for(parse_prompt("an okapi at dusk"), rng).objects) == 1


def test_the_painter_is_seeded_and_reads_no_file(monkeypatch):
    painter = DemoPainter()
    settings = painter.default_settings()

    def draw(prompt: str, seed: int) -> bytes:
        image = painter.draw(prompt, seed, settings, no_progress, CancelToken())
        assert image.size == (settings.width, settings.height)
        return image.tobytes()

    first = draw("a yellow triangle above a green circle", 0)

    # No file may be opened or read while drawing: the words and the seed are all it has.
    def refuse(*args, **kwargs):
        raise AssertionError(f"the painter read a file: {args[:1]}")

    for target, name in ((builtins, "open"), (io, "open"), (Path, "open"), (Path, "read_text"),
                         (Path, "read_bytes")):  # fmt: skip
        monkeypatch.setattr(target, name, refuse)
    again = draw("a yellow triangle above a green circle", 0)
    other_seed = draw("a yellow triangle above a green circle", 1)
    monkeypatch.undo()
    assert again == first
    assert other_seed != first
    cancelled = CancelToken()
    cancelled.cancel()
    from engine.errors import Cancelled

    with pytest.raises(Cancelled):
        painter.draw("a red circle", 0, settings, no_progress, cancelled)


def test_the_painter_draws_the_colours_it_is_asked_for():
    painter = DemoPainter()
    settings = painter.default_settings()
    image = painter.draw("two blue squares", 3, settings, no_progress, CancelToken())
    pixels = np.asarray(image, dtype=np.int32)
    blue = (pixels[..., 2] > 150) & (pixels[..., 0] < 90) & (pixels[..., 1] < 130)
    red = (pixels[..., 0] > 150) & (pixels[..., 1] < 90) & (pixels[..., 2] < 90)
    assert blue.sum() > 400 and red.sum() < 50


# -- the method ---------------------------------------------------------------------------------


def _relevant_ids(library: Library, collection, query_id: int) -> set[int]:
    resolver = JudgmentResolver(library)
    return {i for path in collection.relevant[query_id] for i in resolver.by_path[path]}


def test_visret_is_listed_with_the_papers_defaults():
    info = {i.key: i for i in method_infos()}["visret"]
    assert info.available and info.kinds == ("text",)
    assert info.params["images"] == 3 and info.params["k_rrf"] == 1
    assert "k_rrf = 1" in info.description
    with pytest.raises(BadInputError, match="fusion must be one of"):
        resolve_spec("visret:fusion=max")
    with pytest.raises(BadInputError, match="leave_out"):
        resolve_spec("visret:leave_out=first")


def test_visret_finds_a_relation_above_chance_and_records_its_drawings(
    indexed, demo_encoder, small_demo_collection, tmp_path
):
    query = next(q for q in small_demo_collection.queries if q.category == "relation")
    events: list[MethodEvent] = []
    with Library.open(indexed) as library:
        context = MethodContext(
            library,
            lambda: demo_encoder,
            drawings_dir=tmp_path / "drawings",
            notify=events.append,
        )
        total = len(JudgmentResolver(library).catalog_ids)
        relevant = _relevant_ids(library, small_demo_collection, query.query_id)
        ranking = resolve_spec("visret").run(SearchQuery(query.text), context, top_k=total)
    assert sorted(ranking.ids) == sorted(set(ranking.ids))
    ranks = [ranking.ids.index(i) + 1 for i in relevant]
    # Chance puts a relevant photo at about half the collection; the drawings put it near the top.
    assert min(ranks) <= 10 and np.mean(ranks) < total / 4
    details = ranking.details
    assert details["generator"] == "demo-painter:1"
    assert query.text in details["prompt"]
    assert [d["seed"] for d in details["drawings"]] == [0, 1, 2]
    assert all(Path(d["path"]).is_file() and not d["error"] for d in details["drawings"])
    assert sum(isinstance(e, DrawingMade) for e in events) == 3
    assert any(isinstance(e, DrawingProgress) for e in events)
    assert set(ranking.evidence[ranking.ids[0]]["ranks"]) <= {"drawing 0", "drawing 1", "drawing 2"}


def test_leaving_a_drawing_out_refuses_without_drawing_again(
    indexed, demo_encoder, tmp_path, monkeypatch
):
    from engine.visret import painter

    drawn: list[int] = []
    original = painter.DemoPainter.draw

    def counting(self, prompt, seed, settings, progress, cancel):
        drawn.append(seed)
        return original(self, prompt, seed, settings, progress, cancel)

    monkeypatch.setattr(painter.DemoPainter, "draw", counting)
    text = "a blue square beside a yellow triangle"
    with Library.open(indexed) as library:
        context = MethodContext(library, lambda: demo_encoder, drawings_dir=tmp_path / "d")
        every = resolve_spec("visret").run(SearchQuery(text), context, top_k=50)
        assert drawn == [0, 1, 2]
        without = resolve_spec("visret:leave_out=0").run(SearchQuery(text), context, top_k=50)
        assert drawn == [0, 1, 2]  # all three came from the cache
        assert all(d["cached"] for d in without.details["drawings"])
        assert [d["left_out"] for d in without.details["drawings"]] == [True, False, False]
        assert without.ids != every.ids
        # The two that are left, fused alone, give exactly this ranking.
        lists = [
            [i for i, _ in context.searcher.ranked(v, 1000)]  # fused 1,000 deep by default
            for v in demo_encoder.encode_images(
                [painter.DemoPainter().draw(without.details["prompt"], s,
                 painter.DemoPainter().default_settings(), no_progress, CancelToken())
                 for s in (1, 2)]
            )
        ]  # fmt: skip
        assert without.ids == [d for d, _ in reciprocal_rank_fusion(lists, k_rrf=1)][:50]
        with pytest.raises(BadInputError, match="every drawing is left out"):
            resolve_spec("visret:leave_out=0,1,2").run(SearchQuery(text), context, top_k=5)
        # With the text query's ranking in the fusion, nothing else is needed.
        text_only = resolve_spec("visret:leave_out=0,1,2,include_text=true").run(
            SearchQuery(text), context, top_k=5
        )
        plain = resolve_spec("text").run(SearchQuery(text), context, top_k=5)
        assert text_only.ids == plain.ids


def test_visret_respects_filters_candidates_and_mean_fusion(indexed, demo_encoder, tmp_path):
    from engine.search.searcher import SearchFilters

    text = "two red circles"
    with Library.open(indexed) as library:
        context = MethodContext(library, lambda: demo_encoder, drawings_dir=tmp_path / "d")
        base = resolve_spec("text").run(SearchQuery(text), context, top_k=30)
        candidates = base.ids[10:30]
        reranked = resolve_spec("visret").run(
            SearchQuery(text), context, top_k=5, candidates=candidates
        )
        assert sorted(reranked.ids) == sorted(candidates)
        mean = resolve_spec("visret:fusion=mean").run(SearchQuery(text), context, top_k=20)
        assert mean.scores == sorted(mean.scores, reverse=True)
        assert mean.details["fusion"] == "mean" and -1 <= mean.scores[-1] <= mean.scores[0] <= 1
        context.filters = SearchFilters(taxon="blue square")
        filtered = resolve_spec("visret").run(SearchQuery(text), context, top_k=20)
        hits = context.searcher.hits_for(filtered.pairs())
        assert hits and all(h.common_name == "blue square" for h in hits)


# -- the command line ---------------------------------------------------------------------------


def test_search_with_visret_on_the_command_line(capsys, indexed):
    code = main(["search", "a red circle beside a blue square", "--library", str(indexed),
                 "--method", "visret", "--images", "2", "--seed", "5", "--rrf-k", "3",
                 "--top", "4", "--json"])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    hits = [json.loads(line) for line in out.splitlines()]
    assert len(hits) == 4
    assert {h["method"] for h in hits} == {"visret:images=2,seed=5,k_rrf=3"}
    drawings = sorted((Path(indexed) / "cache" / "drawings").rglob("*.png"))
    assert len(drawings) == 2  # cached in the library
    code = main(["search", "red", "--library", str(indexed), "--method", "text", "--images", "2"])
    assert code == 2 and "apply to --method visret" in capsys.readouterr().err


def test_evaluate_with_visret_on_the_demo_library(capsys, indexed, small_demo_collection):
    code = main([
        "evaluate", "--queries", str(small_demo_collection.queries_path),
        "--judgments", str(small_demo_collection.judgments_path), "--library", str(indexed),
        "--k", "10", "--method", "text", "--method", "visret", "--permutations", "200", "--json",
    ])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    result = json.loads(out)
    visret = result["methods"]["visret"]
    assert visret["queries"] == result["queries"] == len(small_demo_collection.queries)
    assert 0.3 < visret["mAP@10"] <= 1.0
    assert result["comparisons"][0]["method"] == "visret"


def test_rewriting_the_prompt_asks_the_endpoint_once_and_falls_back_plainly(
    indexed,
    demo_encoder,
    tmp_path,
    server,  # noqa: F811 - the imported fixture
):
    """With an endpoint configured, rewriting draws the model's prompt and keeps it (leaving a
    drawing out asks nothing again); a failing endpoint draws the template and says why."""
    from engine.methods import LanguageModelEndpoint

    text = "a red circle above a green square"
    server.answer(json.dumps({"prompt": "a bright red disc above a green square, flat colours"}))
    with Library.open(indexed) as library:
        context = MethodContext(
            library,
            lambda: demo_encoder,
            drawings_dir=tmp_path / "d",
            llm=LanguageModelEndpoint(server.url, "tiny-llm"),
        )
        first = resolve_spec("visret:instruction=faithful").run(
            SearchQuery(text), context, top_k=20
        )
        assert first.details["prompt"] == "a bright red disc above a green square, flat colours"
        assert first.details["prompt_rewritten"] is True
        assert len(server.requests) == 1
        assert server.requests[0]["body"]["model"] == "tiny-llm"
        again = resolve_spec("visret:instruction=faithful,leave_out=0").run(
            SearchQuery(text), context, top_k=20
        )
        assert again.details["prompt"] == first.details["prompt"]
        assert all(d["cached"] for d in again.details["drawings"])
        assert len(server.requests) == 1  # kept beside the drawings, not asked again

        server.reply = b"not json"
        broken = MethodContext(
            library,
            lambda: demo_encoder,
            drawings_dir=tmp_path / "other",
            llm=LanguageModelEndpoint(server.url, "tiny-llm"),
        )
        fallback = resolve_spec("visret:instruction=faithful").run(
            SearchQuery(text), broken, top_k=20
        )
        plain = resolve_spec("visret:rewrite=false").run(SearchQuery(text), broken, top_k=20)
        assert fallback.details["prompt_rewritten"] is False
        assert "rewriting failed" in fallback.details["prompt_note"]
        assert fallback.details["prompt"] == plain.details["prompt"]
        assert fallback.ids == plain.ids
