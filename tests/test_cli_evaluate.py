"""`quadrat evaluate` on the demo collection's own INQUIRE-format files."""

from __future__ import annotations

import json

import pytest

from app.cli import main


def evaluate(capsys, demo_collection, lib, *extra: str) -> dict:
    """Run `quadrat evaluate --k 10 --json` on the demo files; return its JSON."""
    code = main([
        "evaluate", "--queries", str(demo_collection.queries_path),
        "--judgments", str(demo_collection.judgments_path), "--library", str(lib),
        "--k", "10", "--json", *extra,
    ])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def test_demo_benchmark_scores_species_near_1_and_relations_lower(
    capsys, tmp_path, demo_collection, copy_cli_demo_library, with_plugin
):
    lib = copy_cli_demo_library(tmp_path / "lib")  # indexed once per session, as `quadrat index`
    run_file = tmp_path / "run.trec"
    result = evaluate(capsys, demo_collection, lib, "--run-out", str(run_file))
    assert result["queries"] == 60
    per_supercategory = result["per_supercategory"]
    assert per_supercategory["Species"] == {"mAP@10": pytest.approx(1.0, abs=0.05), "queries": 12}
    # The secondary attributes are where plain CLIP similarity fails (docs/BENCHMARKS.md).
    assert per_supercategory["Context"]["mAP@10"] < 0.8
    assert per_supercategory["Context"]["queries"] == 28
    assert {"nDCG@10", "MRR@10", "per_query"} <= set(result)
    assert all({"query_id", "AP", "nDCG", "RR", "R"} <= set(q) for q in result["per_query"])
    assert result["unresolved_judgments"] == 0

    # The written run scores the same through `quadrat metrics`.
    code = main([
        "metrics", "--run", str(run_file), "--qrels", str(demo_collection.judgments_path),
        "--k", "10", "--json",
    ])  # fmt: skip
    out, _ = capsys.readouterr()
    assert code == 0
    assert abs(json.loads(out)["mAP@10"] - result["mAP@10"]) < 1e-9

    # Under the rerank protocol a method reorders the fixed candidates, text's top 100. The test
    # plug-in's Reverse turns text's order upside down, so its list is the candidates reversed
    # (an identity reranker would give text's order back) and the relevant photos text puts
    # first end up last: the same R, a much lower AP@10.
    rerank_file = tmp_path / "rerank.trec"
    reranked = evaluate(
        capsys, demo_collection, lib, "--protocol", "rerank", "--method", "reverse",
        "--method", "text", "--permutations", "200", "--run-out", str(rerank_file),
    )  # fmt: skip
    reverse, text = reranked["methods"]["reverse"], reranked["methods"]["text"]
    assert text["per_supercategory"]["Species"]["mAP@10"] >= 0.9
    assert reverse["per_supercategory"]["Species"]["mAP@10"] < 0.6
    assert [q["R"] for q in reverse["per_query"]] == [q["R"] for q in text["per_query"]]
    fullrank, reversed_lists = read_run(run_file), read_run(rerank_file)
    assert set(reversed_lists) == set(fullrank)
    for query_id, docids in reversed_lists.items():
        assert len(docids) == 100
        assert docids == fullrank[query_id][:100][::-1], query_id


def read_run(path) -> dict[str, list[str]]:
    """A TREC run file: query id -> its docids in rank order."""
    ranked: dict[str, list[tuple[int, str]]] = {}
    for line in path.read_text().splitlines():
        query_id, _, docid, rank, *_ = line.split()
        ranked.setdefault(query_id, []).append((int(rank), docid))
    return {query_id: [docid for _, docid in sorted(pairs)] for query_id, pairs in ranked.items()}


def test_malformed_benchmark_file_gives_exit_2_naming_file_and_line(
    capsys, tmp_path, demo_collection
):
    bad = tmp_path / "queries.csv"
    bad.write_text(",query_id,query_text\n0,1,red circle\n1,2\n")
    code = main(
        [
            "evaluate",
            "--queries",
            str(bad),
            "--judgments",
            str(demo_collection.judgments_path),
            "--library",
            str(tmp_path / "lib"),
        ]
    )
    _, err = capsys.readouterr()
    assert code == 2
    assert "queries.csv" in err and "line 3" in err and len(err.strip().splitlines()) == 1
