"""`quadrat metrics` against trec_eval (through pytrec_eval) on a few hundred random runs.

Skipped when pytrec_eval is not installed (`pip install pytrec-eval-terrier`; it is a compiled
extension, so it is not a project dependency). Where the definitions meet:

- AP@k (fullrank) normalises by min(k, R), trec_eval's `map` by R: equal when k >= R and k
  covers the whole list (k = 1000 here); `map_cut.k` sums the top k over R: equal where k >= R.
- nDCG@k is trec_eval's `ndcg_cut.k`, and `ndcg` when k covers the list (binary judgments).
- RR (MRR@k per query) is `recip_rank` when k covers the list.

trec_eval orders by score and ignores the rank column (ties: docid, descending); docs/SPEC.md §1.6
orders by score with ties by the earlier rank. Scores here are distinct, and half of the queries
carry a rank column that contradicts them.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import pytest

from app.cli.metrics import COMMANDS as METRICS_COMMANDS

pytrec_eval = pytest.importorskip("pytrec_eval")

QUERIES = 300
LONGEST = 60
CUTOFFS = (1, 5, 10, 20)


def make_benchmark(
    seed: int,
) -> tuple[dict[str, list[tuple[str, int, float]]], dict[str, dict[str, int]]]:
    """A random run (query -> [(docid, rank column, score)] in file order) and binary qrels."""
    rng = random.Random(seed)
    run: dict[str, list[tuple[str, int, float]]] = {}
    qrels: dict[str, dict[str, int]] = {}
    for number in range(QUERIES):
        query_id = f"q{number}"
        pool = [f"d{i}" for i in rng.sample(range(500), 120)]
        length = rng.randint(1, LONGEST)
        retrieved = pool[:length]
        scores = [value / 1024 for value in rng.sample(range(-50_000, 50_000), length)]
        ranked = sorted(zip(retrieved, scores, strict=True), key=lambda item: -item[1])
        ranks = list(range(1, length + 1))
        if number % 2:
            rng.shuffle(ranks)  # a rank column that contradicts the scores
        rows = [(docid, rank, score) for (docid, score), rank in zip(ranked, ranks, strict=True)]
        rng.shuffle(rows)  # and lines in no particular order
        if number % 17 != 3:  # a few queries only in the qrels
            run[query_id] = rows
        if number % 13 == 5:  # a few queries only in the run
            continue
        judged = rng.sample(pool, rng.randint(1, 60))
        density = rng.choice((0.05, 0.2, 0.5, 0.9))
        qrels[query_id] = {docid: int(rng.random() < density) for docid in judged}
    return run, qrels


def quadrat_metrics(
    run_file: Path, qrels_file: Path, k: int, capsys: pytest.CaptureFixture[str]
) -> dict[str, dict[str, float]]:
    parser = argparse.ArgumentParser(prog="quadrat")
    METRICS_COMMANDS[0].install(parser.add_subparsers(dest="command"))
    args = parser.parse_args(
        ["metrics", "--run", str(run_file), "--qrels", str(qrels_file), "--k", str(k), "--json"]
    )
    assert args.func(args) == 0
    data = json.loads(capsys.readouterr().out)
    return {row["query_id"]: row for row in data["per_query"]}


@pytest.mark.parametrize("seed", [1, 2])
def test_metrics_agree_with_trec_eval(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], seed: int
) -> None:
    run, qrels = make_benchmark(seed)
    run_file, qrels_file = tmp_path / "run.trec", tmp_path / "qrels.txt"
    run_file.write_text(
        "".join(
            f"{query_id} Q0 {docid} {rank} {score!r} rand\n"
            for query_id, rows in run.items()
            for docid, rank, score in rows
        )
    )
    qrels_file.write_text(
        "".join(
            f"{query_id} 0 {docid} {rel}\n"
            for query_id, judged in qrels.items()
            for docid, rel in judged.items()
        )
    )
    cuts = ",".join(str(k) for k in CUTOFFS)
    evaluator = pytrec_eval.RelevanceEvaluator(
        qrels, {"map", "ndcg", "recip_rank", "num_rel", f"ndcg_cut.{cuts}", f"map_cut.{cuts}"}
    )
    trec = evaluator.evaluate(
        {query_id: {docid: score for docid, _, score in rows} for query_id, rows in run.items()}
    )
    common = [q for q in run if q in qrels and sum(qrels[q].values()) > 0]
    assert len(common) > 200

    whole = quadrat_metrics(run_file, qrels_file, 1000, capsys)
    compared = 0
    for query_id in common:
        ours, theirs = whole[query_id], trec[query_id]
        assert ours["R"] == theirs["num_rel"]
        assert ours["AP"] == pytest.approx(theirs["map"], abs=1e-9), query_id
        assert ours["nDCG"] == pytest.approx(theirs["ndcg"], abs=1e-9), query_id
        assert ours["RR"] == pytest.approx(theirs["recip_rank"], abs=1e-9), query_id
        compared += 1

    for k in CUTOFFS:
        at_k = quadrat_metrics(run_file, qrels_file, k, capsys)
        for query_id in common:
            ours, theirs = at_k[query_id], trec[query_id]
            assert ours["nDCG"] == pytest.approx(theirs[f"ndcg_cut_{k}"], abs=1e-9), query_id
            if ours["R"] <= k:  # trec_eval divides by R, docs/SPEC.md by min(k, R)
                assert ours["AP"] == pytest.approx(theirs[f"map_cut_{k}"], abs=1e-9), query_id
                compared += 1
    assert compared > len(common) + 100
