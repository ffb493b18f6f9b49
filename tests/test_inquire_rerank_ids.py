"""INQUIRE-Rerank as INQUIRE's own code reads it: stale `train-*` files of a full download are
skipped with a note, INQUIRE's query ids travel with the imported benchmark and its per-query
results, and AP can treat tied scores as one threshold, as sklearn's average_precision_score
(INQUIRE's metric) does."""

from __future__ import annotations

import json
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from engine.evaluation import metrics as quadrat_metrics
from engine.evaluation.evaluate import BenchmarkJudgment, BenchmarkQuery, run_benchmark
from engine.evaluation.metrics import average_precision_at_k
from tests.test_inquire_rerank import ROWS, SCHEMA, read_csv, record, run, write_parquet

# --- stale files of a full download ------------------------------------------------------------


def write_stale_train(path, schema: pa.Schema) -> None:
    """A `train-*` file as an earlier upload left it: the same queries again (so reading it would
    repeat them), here with the schema given."""
    rows = [record(*row) for row in ROWS[:4]]
    table = pa.Table.from_pylist(rows, schema=SCHEMA).select(schema.names)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)


def test_split_all_skips_stale_train_files_with_a_note_each(capsys, tmp_path):
    source = tmp_path / "INQUIRE-Rerank"
    write_parquet(source / "data" / "validation-00000-of-00001.parquet")
    # One stale file lacks a published column, the other has them all: neither is a split.
    write_stale_train(source / "data" / "train-00000-of-00002.parquet", SCHEMA.remove(3))
    write_stale_train(source / "data" / "train-00001-of-00002.parquet", SCHEMA)
    out = tmp_path / "out"
    code, stdout, err = run(
        capsys, "import-inquire-rerank", str(source), "--out", str(out), "--split", "all",
        "--no-index", "--json",
    )  # fmt: skip
    assert code == 0, err
    report = json.loads(stdout)
    assert [file.rsplit("/", 1)[-1] for file in report["files"]] == [
        "validation-00000-of-00001.parquet"
    ]
    skipped = {entry["file"].rsplit("/", 1)[-1]: entry["reason"] for entry in report["skipped"]}
    assert set(skipped) == {"train-00000-of-00002.parquet", "train-00001-of-00002.parquet"}
    assert all("train" in reason for reason in skipped.values())
    notes = [line for line in err.splitlines() if line.startswith("note: ")]
    assert len(notes) == 2 and all("train-0000" in note and "skipped" in note for note in notes)
    # Only the validation rows were read: no query twice, every candidate once.
    assert report["rows"] == len(ROWS) and report["queries"] == 3
    assert len(read_csv(out / "candidates.csv")) == 11


def test_split_all_skips_an_unnamed_file_of_another_schema_but_refuses_a_broken_split(
    capsys, tmp_path
):
    source = tmp_path / "INQUIRE-Rerank"
    write_parquet(source / "validation-00000-of-00001.parquet")
    write_stale_train(source / "extra.parquet", SCHEMA.remove(3))  # no split, not the schema
    code, stdout, err = run(
        capsys, "import-inquire-rerank", str(source), "--split", "all", "--no-index", "--json"
    )
    assert code == 0, err
    (entry,) = json.loads(stdout)["skipped"]
    assert entry["file"].endswith("extra.parquet") and "clip_score" in entry["reason"]
    # A file of a published split that is broken is the data asked for: one line, nothing written.
    write_stale_train(source / "test-00000-of-00001.parquet", SCHEMA.remove(3))
    (source / "collection").rename(tmp_path / "first-collection")
    code, _, err = run(capsys, "import-inquire-rerank", str(source), "--split", "all", "--no-index")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "clip_score" in err
    assert not (source / "collection").exists()


def test_only_stale_train_files_give_one_line_saying_so(capsys, tmp_path):
    source = tmp_path / "INQUIRE-Rerank"
    write_stale_train(source / "train-00000-of-00001.parquet", SCHEMA)
    code, _, err = run(capsys, "import-inquire-rerank", str(source), "--split", "all", "--no-index")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "train" in err and "validation" in err and "test" in err


# --- INQUIRE's query ids -----------------------------------------------------------------------

# INQUIRE's own queries file (inquire_queries_val.csv's layout); ids as INQUIRE numbers them.
INQUIRE_IDS = {"a red circle": "3", "a blue square": "117", "a green triangle": "42"}


def write_inquire_queries(path) -> None:
    lines = [",query_id,query_text,supercategory,category,iconic_group"]
    for index, (text, query_id) in enumerate(INQUIRE_IDS.items()):
        lines.append(f"{index},{query_id},{text},Appearance,Colour,Plants")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_inquire_query_ids_travel_to_the_benchmark_files_and_per_query_results(capsys, tmp_path):
    source = tmp_path / "INQUIRE-Rerank"
    write_parquet(source / "validation-00000-of-00001.parquet")
    inquire = tmp_path / "inquire_queries_val.csv"
    write_inquire_queries(inquire)
    out, lib = tmp_path / "out", tmp_path / "lib"
    code, stdout, err = run(
        capsys, "import-inquire-rerank", str(source), "--out", str(out), "--library", str(lib),
        "--split", "validation", "--inquire-queries", str(inquire), "--model", "demo", "--json",
    )  # fmt: skip
    assert code == 0, err
    report = json.loads(stdout)
    queries = read_csv(out / "queries.csv")
    # Quadrat's ids stay 1.. in sorted order; INQUIRE's ride along in their own column.
    assert [(q["query_id"], q["inquire_query_id"]) for q in queries] == [
        ("1", "117"), ("2", "42"), ("3", "3"),
    ]  # fmt: skip
    candidates = read_csv(out / "candidates.csv")
    assert {(c["query_id"], c["inquire_query_id"]) for c in candidates} == {
        ("1", "117"), ("2", "42"), ("3", "3"),
    }  # fmt: skip

    # The printed command scores with INQUIRE's tie handling, and its per-query rows join
    # INQUIRE's ids; the ids are no category to average over.
    command = report["evaluate"]
    assert command[command.index("--ties") + 1] == "group"
    code, stdout, err = run(capsys, *command[1:-4], "--method", "text", "--json")
    assert code == 0, err
    result = json.loads(stdout)
    assert result["ties"] == "group"
    assert {row["query_id"]: row["inquire_query_id"] for row in result["per_query"]} == {
        "1": "117", "2": "42", "3": "3",
    }  # fmt: skip
    assert set(result["per_supercategory"]) == {"Appearance"}


def test_queries_missing_from_the_inquire_file_are_named_and_left_without_an_id(capsys, tmp_path):
    source = tmp_path / "INQUIRE-Rerank"
    write_parquet(source / "validation-00000-of-00001.parquet")
    inquire = source / "inquire_queries_val.csv"  # found beside the Parquet files
    inquire.write_text(",query_id,query_text\n0,117,A Blue  Square\n", encoding="utf-8")
    code, stdout, err = run(
        capsys, "import-inquire-rerank", str(source), "--split", "validation", "--no-index",
        "--json",
    )  # fmt: skip
    assert code == 0, err
    ids = {q["query_text"]: q["inquire_query_id"] for q in read_csv(source / "queries.csv")}
    # Case and spacing differ from the Parquet text; the query is the same one.
    assert ids == {"a blue square": "117", "a green triangle": "", "a red circle": ""}
    assert json.loads(stdout)["inquire_ids_missing"] == 2
    assert any("2 queries" in line and "inquire_query_id" in line for line in err.splitlines())


def test_a_bad_inquire_queries_file_gives_one_line_and_writes_nothing(capsys, tmp_path):
    source = tmp_path / "INQUIRE-Rerank"
    write_parquet(source / "validation-00000-of-00001.parquet")
    inquire = tmp_path / "inquire_queries_val.csv"
    inquire.write_text("id,text\n3,a red circle\n", encoding="utf-8")
    code, _, err = run(
        capsys, "import-inquire-rerank", str(source), "--split", "validation", "--no-index",
        "--inquire-queries", str(inquire),
    )  # fmt: skip
    assert code == 2 and len(err.strip().splitlines()) == 1 and "query_id" in err
    assert not (source / "collection").exists()


# --- tied scores ------------------------------------------------------------------------------


def test_tied_average_precision_matches_a_worked_example():
    # Scores 0.9, 0.8, 0.8, 0.8, 0.5 with relevance 0, 1, 1, 0, 1 (base order inside the tie).
    # Strict order: (1/2 + 2/3 + 3/5) / 3 = 0.5888889.
    # One threshold per distinct score (sklearn): at 0.8, 2 of 4 are relevant (P = 1/2) and
    # recall rises by 2/3; at 0.5, P = 3/5 and recall rises by 1/3:
    # 2/3 * 1/2 + 1/3 * 3/5 = 0.5333333.
    rels, scores = [0, 1, 1, 0, 1], [0.9, 0.8, 0.8, 0.8, 0.5]
    assert average_precision_at_k(rels, 5, 3, "rerank") == pytest.approx(0.5888889)
    assert quadrat_metrics.tied_average_precision_at_k(
        rels, scores, 5, 3, "rerank"
    ) == pytest.approx(0.5333333)
    # The order inside a tie no longer matters; without ties both agree.
    assert quadrat_metrics.tied_average_precision_at_k(
        [0, 0, 1, 1, 1], scores, 5, 3, "rerank"
    ) == pytest.approx(0.5333333)
    distinct = [0.9, 0.8, 0.7, 0.6, 0.5]
    assert quadrat_metrics.tied_average_precision_at_k(
        rels, distinct, 5, 3, "rerank"
    ) == pytest.approx(0.5888889)
    # fullrank divides by min(k, R), as INQUIRE's ap_at_k rescales sklearn's AP.
    assert quadrat_metrics.tied_average_precision_at_k(
        rels, scores, 5, 6, "fullrank"
    ) == pytest.approx((2 * 1 / 2 + 3 / 5) / 5)
    assert quadrat_metrics.tied_average_precision_at_k([0, 0], [1.0, 1.0], 2, 0, "rerank") == 0.0


def test_run_benchmark_groups_ties_only_when_asked():
    query = BenchmarkQuery("q1", "something", {"supercategory": "Appearance"})
    relevant = {2: 1, 3: 1, 5: 1, 1: 0, 4: 0}
    judgments = [BenchmarkJudgment("q1", str(i), None, rel) for i, rel in relevant.items()]
    tied = [(1, 0.9), (2, 0.8), (3, 0.8), (4, 0.8), (5, 0.5)]

    def bench(ties: str) -> float:
        result = run_benchmark(
            [query], judgments, lambda q, c: tied, lambda j: int(j.image_id or 0), k=100,
            protocol="rerank", candidates=lambda q: [1, 2, 3, 4, 5], ties=ties,
        )  # fmt: skip
        return result.per_query[0].AP

    assert bench("order") == pytest.approx(0.5888889)  # ties by the method's (base) order
    assert bench("group") == pytest.approx(0.5333333)  # INQUIRE's
    with pytest.raises(Exception, match="ties"):
        bench("random")


def test_tied_average_precision_equals_sklearn_when_installed():
    sklearn_metrics = pytest.importorskip("sklearn.metrics")
    rng = random.Random(7)
    for _ in range(200):
        n = rng.randint(2, 30)
        scores = [rng.choice([0.1, 0.25, 0.5, 0.75, 1.0]) for _ in range(n)]
        rels = [rng.randint(0, 1) for _ in range(n)]
        if not any(rels):
            continue
        order = sorted(range(n), key=lambda i: -scores[i])
        ours = quadrat_metrics.tied_average_precision_at_k(
            [rels[i] for i in order], [scores[i] for i in order], n, sum(rels), "rerank"
        )
        assert ours == pytest.approx(sklearn_metrics.average_precision_score(rels, scores))


def test_tied_ndcg_equals_sklearn_when_installed():
    # INQUIRE's ndcg_at_k: sklearn's ndcg_score (ties averaged) over the top k, the relevant
    # photos the top k missed appended with a score of -100 (beyond k, so they gain nothing).
    sklearn_metrics = pytest.importorskip("sklearn.metrics")
    rng = random.Random(11)
    for _ in range(200):
        n = rng.randint(2, 30)
        k = rng.randint(1, n)
        ordered = sorted(
            ((rng.choice([0.1, 0.25, 0.5, 0.75, 1.0]), rng.randint(0, 1)) for _ in range(n)),
            key=lambda pair: -pair[0],
        )
        scores, rels = [s for s, _ in ordered], [r for _, r in ordered]
        missed = rng.randint(0, 3)
        count_pos = sum(rels[:k]) + missed
        if count_pos == 0 or k + missed < 2:  # sklearn scores two documents or more
            continue
        ours = quadrat_metrics.tied_ndcg_at_k(rels, scores, k, count_pos)
        theirs = sklearn_metrics.ndcg_score(
            [rels[:k] + [1] * missed], [scores[:k] + [-100.0] * missed], k=k
        )
        assert ours == pytest.approx(theirs)


def test_the_spec_states_the_tie_example():
    from pathlib import Path

    spec = (Path(__file__).resolve().parents[1] / "docs" / "SPEC.md").read_text("utf-8")
    section = spec.split("\n## 2.")[0]
    assert "scores (0.9, 0.8, 0.8, 0.8, 0.5), rel = (0, 1, 1, 0, 1)" in section
    assert "**0.5888889**" in section and "**0.5333333**" in section
