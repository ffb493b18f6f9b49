"""`quadrat refine` and `quadrat estimate` on a saved query of the small demo library."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import select

from app.cli import main
from engine.catalog import Image
from engine.catalog.library import Library
from engine.judgments.queries import QueryStore
from engine.methods import MethodContext, SearchQuery, resolve_spec

QUERY = "red circle"  # ten relevant photos in the small demo


@pytest.fixture(scope="module")
def indexed(tmp_path_factory, copy_cli_small_demo_library) -> Path:
    return copy_cli_small_demo_library(tmp_path_factory.mktemp("cli-feedback") / "lib")


@pytest.fixture
def judged_query(tmp_path, indexed, small_demo_collection, demo_encoder):
    """A copy of the library with QUERY saved, its text run, and its top 30 judged exactly
    (at least three of each kind: the probe's probabilities are calibrated on them)."""
    import shutil

    lib = tmp_path / "lib"
    shutil.copytree(indexed, lib)
    query = next(q for q in small_demo_collection.queries if q.text == QUERY)
    paths = set(small_demo_collection.relevant[query.query_id])
    with Library.open(lib) as library:
        with library.catalog.session() as s:
            relevant = {i for i, rel in s.execute(select(Image.id, Image.rel_path)) if rel in paths}
        store = QueryStore(library)
        query_id = store.find_or_create_query(QUERY)
        text = resolve_spec("text").run(
            SearchQuery(QUERY), MethodContext(library, lambda: demo_encoder), top_k=60
        )
        run_id = store.save_run(query_id, "text", text.pairs(), params={"top_k": 60})
        for image_id in text.ids[:30]:
            store.judge(query_id, image_id, int(image_id in relevant))
        judged = store.judgments(query_id)
    assert 3 <= sum(judged.values()) <= 27
    return lib, query_id, run_id, judged, relevant


def run_json(capsys, *argv: str) -> dict:
    code = main([*argv, "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def test_refine_saves_a_run_from_the_newest_one_with_both_runs_metrics(capsys, judged_query):
    lib, query_id, text_run, judged, _ = judged_query
    out = run_json(capsys, "refine", "--query", str(query_id), "--method", "probe",
                   "--library", str(lib), "--top", "5")  # fmt: skip
    assert out["from_run"] == text_run and out["run_id"] > text_run
    assert out["judged"] == len(judged) and out["relevant"] == sum(judged.values())
    assert len(out["results"]) == 5
    assert all(0.0 < row["p"] < 1.0 for row in out["results"])
    assert out["details"]["judgments_used"] == len(judged)
    # Both runs scored against the same judgments: the metrics panel's comparison.
    assert out["from_metrics"]["run_id"] == text_run
    assert out["from_metrics"]["relevant_judged"] == out["metrics"]["relevant_judged"]
    with Library.open(lib) as library:
        runs = QueryStore(library).runs_for(query_id)
    saved = runs[-1]
    assert (saved.id, saved.method) == (out["run_id"], "probe")
    assert saved.params["from_run"] == text_run
    assert saved.params["details"]["probe"]["fitted"] is True
    assert len(saved.ranking) == 100  # the run keeps more than the five printed

    # A second refinement comes from the newest run, the probe's; rocchio prints a table.
    code = main(["refine", "--query", str(query_id), "--method", "rocchio:beta=1",
                 "--library", str(lib), "--top", "3"])  # fmt: skip
    text, _ = capsys.readouterr()
    assert code == 0
    assert f"saved for query {query_id}, from run {out['run_id']} (Probe)" in text
    assert "AP@50" in text and "stop rule" in text
    with Library.open(lib) as library:
        newest = QueryStore(library).runs_for(query_id)[-1]
    assert newest.method == "rocchio" and newest.params["beta"] == 1.0


def test_refine_a_query_without_runs_saves_its_own_ranking_first(capsys, judged_query):
    lib, query_id, _, _, _ = judged_query
    with Library.open(lib) as library:
        store = QueryStore(library)
        bare = store.find_or_create_query("green triangle")
        first_photo = min(image_id for image_id, _ in store.runs_for(query_id)[0].ranking)
        store.judge(bare, first_photo, 1)
    out = run_json(capsys, "refine", "--query", str(bare), "--method", "more-like-these",
                   "--library", str(lib))  # fmt: skip
    with Library.open(lib) as library:
        runs = QueryStore(library).runs_for(bare)
    assert [r.method for r in runs] == ["text", "more-like-these"]
    assert out["from_run"] == runs[0].id
    assert any("its own ranking is saved" in note for note in out["notes"])


def test_min_p_lists_every_photo_above_the_cut_off_and_nothing_else(capsys, judged_query):
    lib, query_id, _, judged, _ = judged_query
    everything = run_json(capsys, "refine", "--query", str(query_id), "--method", "probe",
                          "--library", str(lib), "--top", "60")  # fmt: skip
    unjudged = [row for row in everything["results"] if row["image_id"] not in judged]
    chances = sorted((row["p"] for row in unjudged), reverse=True)
    cut = round((chances[2] + chances[3]) / 2, 6)  # between the third and fourth unjudged photo
    listed = run_json(capsys, "refine", "--query", str(query_id), "--method", "probe",
                      "--library", str(lib), "--min-p", str(cut))  # fmt: skip
    assert listed["min_p"] == cut
    relevant = {i for i, r in judged.items() if r}
    # The photos judged relevant (known: p 1), then the three unjudged photos above the cut.
    rows = listed["results"]
    assert {row["image_id"] for row in rows[: len(relevant)]} == relevant
    assert all(row["judged"] and row["p"] == 1.0 for row in rows[: len(relevant)])
    assert len(rows) == len(relevant) + 3
    assert all(not row["judged"] and row["p"] >= cut for row in rows[len(relevant) :])
    assert listed["likely"] == f"{len(relevant)} judged relevant, 3 unjudged with p ≥ {cut:g}"


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--method", "text"], "does not learn from judgments; refine with one that does"),
        (["--method", "rocchio", "--min-p", "0.9"], "--min-p needs --method probe"),
        (["--method", "probe", "--min-p", "1.5"], "between 0 and 1"),
        (["--method", "probe", "--from-run", "999"], "has no run 999"),
    ],
)
def test_refine_refuses_bad_requests_in_one_line(capsys, judged_query, argv, words):
    lib, query_id, _, _, _ = judged_query
    code = main(["refine", "--query", str(query_id), "--library", str(lib), *argv])
    _, err = capsys.readouterr()
    assert code == 2
    assert words in err and len(err.strip().splitlines()) == 1


def test_refine_an_unknown_query_is_one_line(capsys, judged_query):
    lib = judged_query[0]
    code = main(["refine", "--query", "999", "--method", "probe", "--library", str(lib)])
    _, err = capsys.readouterr()
    assert code == 2 and "no saved query with id 999" in err
    assert len(err.strip().splitlines()) == 1


def test_estimate_needs_a_sample_then_says_found_of_about(capsys, judged_query):
    lib, query_id, _, judged, relevant = judged_query
    out = run_json(capsys, "estimate", "--query", str(query_id), "--library", str(lib),
                   "--sample", "6")  # fmt: skip
    found = sum(judged.values())
    assert out["found"] == found and out["total"] is None
    assert "no judged sample yet" in out["note"]
    sample = [row["image_id"] for row in out["sample"]]
    assert len(sample) == 6 and not set(sample) & set(judged)
    with Library.open(lib) as library:
        store = QueryStore(library)
        for image_id in sample:
            store.judge(query_id, image_id, int(image_id in relevant))
    code = main(["estimate", "--query", str(query_id), "--library", str(lib)])
    text, _ = capsys.readouterr()
    assert code == 0
    found += sum(1 for i in sample if i in relevant)
    assert text.startswith(f"found {found} of about ")
    assert "90 %: " in text.splitlines()[0]
    out = run_json(capsys, "estimate", "--query", str(query_id), "--library", str(lib))
    assert out["low"] <= out["total"] <= out["high"]
    assert out["low"] >= found and out["judged_in_sample"] >= 6


def test_evaluate_and_search_refuse_the_learning_methods_in_one_line(
    capsys, indexed, small_demo_collection
):
    code = main([
        "evaluate", "--queries", str(small_demo_collection.queries_path),
        "--judgments", str(small_demo_collection.judgments_path), "--library", str(indexed),
        "--method", "text", "--method", "rocchio",
    ])  # fmt: skip
    _, err = capsys.readouterr()
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "rocchio would learn from the very judgments the benchmark scores" in err
    assert "bench_feedback.py" in err
    code = main(["search", "red circle", "--method", "probe", "--library", str(indexed)])
    _, err = capsys.readouterr()
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "quadrat refine --query ID --method probe" in err
