"""Benchmark files (INQUIRE CSVs, TREC runs and qrels) and benchmark runs."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from pathlib import Path

import pytest

from engine.errors import BadInputError, Cancelled
from engine.evaluation.evaluate import (
    BenchmarkJudgment,
    BenchmarkQuery,
    evaluate_run,
    load_judgments,
    load_queries_csv,
    load_trec_run,
    metrics_json,
    qrels_for_run,
    qrels_from_judgments,
    run_benchmark,
    write_judgments_csv,
    write_queries_csv,
    write_trec_qrels,
    write_trec_run,
)
from engine.progress import CancelToken, Progress

# Lines copied verbatim from INQUIRE's inquire_queries_test.csv (MIT licence): the unnamed
# pandas index column, a category with commas in quotes, and doubled quotes inside the text.
INQUIRE_QUERIES = """\
,query_id,query_text,supercategory,category,iconic_group
0,3,A mongoose standing upright alert,Behavior,Defensive and Survival Behaviors,Mammals
1,4,A meadowlark vocalizing,Behavior,Cooperative and Social Behaviors,Birds
52,71,A peacock male displaying its feathers,Behavior,"Mating, Courtship, Reproduction",Birds
53,72,A satin bowerbird's bower ornamented with blue objects,Context,Animal Structures and Habitats,Birds
92,123,"Strawberry poison-dart frog with the ""la gruta"" color morph from Isla Colon",Appearance,Unique appearances or morphs,Amphibians
"""

INQUIRE_JUDGMENTS = """\
query_id,image_id,image_path
3,4471963,train/04686_Animalia_Chordata_Mammalia_Carnivora_Herpestidae_Mungos_mungo/0a1b.jpg
3,4471964,train/04686_Animalia_Chordata_Mammalia_Carnivora_Herpestidae_Mungos_mungo/0a1c.jpg
4,1200001,train/03900_Animalia_Chordata_Aves_Passeriformes_Icteridae_Sturnella_neglecta/ff.jpg
"""


def write(path: Path, text: str, encoding: str = "utf-8") -> Path:
    path.write_bytes(text.encode(encoding))
    return path


# --- queries ---------------------------------------------------------------------------------


def test_load_inquire_queries(tmp_path: Path) -> None:
    queries = load_queries_csv(write(tmp_path / "queries.csv", INQUIRE_QUERIES))
    assert [q.query_id for q in queries] == ["3", "4", "71", "72", "123"]
    assert queries[0] == BenchmarkQuery(
        "3",
        "A mongoose standing upright alert",
        {
            "supercategory": "Behavior",
            "category": "Defensive and Survival Behaviors",
            "iconic_group": "Mammals",
        },
    )
    assert queries[2].extra["category"] == "Mating, Courtship, Reproduction"
    assert queries[3].text == "A satin bowerbird's bower ornamented with blue objects"
    assert queries[4].text == (
        'Strawberry poison-dart frog with the "la gruta" color morph from Isla Colon'
    )
    assert "" not in queries[0].extra  # the pandas index column is gone


def test_queries_without_index_or_optional_columns_and_with_bom_crlf(tmp_path: Path) -> None:
    text = "query_id,query_text,habitat\r\n9,Alligator lizards mating,grassland\r\n\r\n10,x,\r\n"
    queries = load_queries_csv(write(tmp_path / "q.csv", text, encoding="utf-8-sig"))
    assert queries == [
        BenchmarkQuery("9", "Alligator lizards mating", {"habitat": "grassland"}),
        BenchmarkQuery("10", "x", {"habitat": ""}),
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (",query_id,text\n0,1,a\n", "queries.csv line 1: missing column query_text"),
        (",query_id,query_text\n0,1,a\n1,2\n", "queries.csv line 3: expected 3 fields, got 2"),
        ("query_id,query_text\n1,a\n1,b\n", "queries.csv line 3: query_id 1 repeats line 2"),
        ("query_id,query_text\n1,\n", "queries.csv line 2: empty query_text for query 1"),
        ("query_id,query_text\n,a\n", "queries.csv line 2: empty query_id"),
        ("", "queries.csv: empty file"),
    ],
)
def test_malformed_queries_name_file_and_line(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(BadInputError) as err:
        load_queries_csv(write(tmp_path / "queries.csv", text))
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_unreadable_files_are_bad_input(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="nothing.csv: no such file"):
        load_queries_csv(tmp_path / "nothing.csv")
    (tmp_path / "binary.csv").write_bytes(b"\xff\xfe\x00\x81query")
    with pytest.raises(BadInputError, match="binary.csv: not a UTF-8 text file"):
        load_judgments(tmp_path / "binary.csv")
    with pytest.raises(BadInputError, match="is a folder"):
        load_trec_run(tmp_path)


def test_queries_round_trip_in_inquire_layout(tmp_path: Path) -> None:
    queries = load_queries_csv(write(tmp_path / "in.csv", INQUIRE_QUERIES))
    write_queries_csv(tmp_path / "out.csv", queries)
    text = (tmp_path / "out.csv").read_text(encoding="utf-8")
    assert text.splitlines()[0] == ",query_id,query_text,supercategory,category,iconic_group"
    assert text.splitlines()[1] == (
        "0,3,A mongoose standing upright alert,Behavior,Defensive and Survival Behaviors,Mammals"
    )
    assert load_queries_csv(tmp_path / "out.csv") == queries


# --- judgments -------------------------------------------------------------------------------


def test_inquire_annotations_mean_relevant(tmp_path: Path) -> None:
    judgments = load_judgments(write(tmp_path / "annotations.csv", INQUIRE_JUDGMENTS))
    assert len(judgments) == 3
    assert judgments[0] == BenchmarkJudgment(
        "3",
        "4471963",
        "train/04686_Animalia_Chordata_Mammalia_Carnivora_Herpestidae_Mungos_mungo/0a1b.jpg",
        1,
    )
    assert {j.relevant for j in judgments} == {1}


def test_judgments_with_relevant_column_keep_negatives(tmp_path: Path) -> None:
    text = ",query_id,image_path,relevant\n0,3,a/x.jpg,1\n1,3,a/y.jpg,0\n2,4,b/z.jpg,2\n"
    judgments = load_judgments(write(tmp_path / "j.csv", text))
    assert judgments == [
        BenchmarkJudgment("3", None, "a/x.jpg", 1),
        BenchmarkJudgment("3", None, "a/y.jpg", 0),
        BenchmarkJudgment("4", None, "b/z.jpg", 2),
    ]


def test_trec_qrels_are_detected_by_content(tmp_path: Path) -> None:
    text = "# my marks\n3 0 4471963 1\n3\t0\t4471999\t0\n\n4 0 1200001 1\n"
    judgments = load_judgments(write(tmp_path / "marks.txt", text))
    assert judgments == [
        BenchmarkJudgment("3", "4471963", None, 1),
        BenchmarkJudgment("3", "4471999", None, 0),
        BenchmarkJudgment("4", "1200001", None, 1),
    ]


@pytest.mark.parametrize(
    "text",
    [
        "",
        "\n\n",
        "# my marks, none yet\n",
        "query_id,image_id,image_path\n",
        ",query_id,image_path,relevant\r\n\r\n",
    ],
)
def test_empty_judgments_file_is_bad_input(tmp_path: Path, text: str) -> None:
    # Scoring against nothing gives zeros that look like results; say so instead.
    with pytest.raises(BadInputError) as err:
        load_judgments(write(tmp_path / "j.txt", text))
    assert str(err.value) == f"{tmp_path / 'j.txt'}: no judgments in the file (empty)"


@pytest.mark.parametrize(
    ("text", "lines"),
    [
        ("1 0 a 1\n1 0 b 0\n2 0 a 1\n1 0 a 1\n", "line 4 repeats line 1"),
        (
            "query_id,image_id,image_path\n3,11,x.jpg\n3,12,y.jpg\n3,11,x.jpg\n",
            "line 4 repeats line 2",
        ),
        (",query_id,image_path,relevant\n0,3,x.jpg,0\n1,3,x.jpg,0\n", "line 3 repeats line 2"),
        # the same photo named by id on one line and by id and path on another
        ("query_id,image_id,image_path\n3,11,\n3,11,x.jpg\n", "line 3 repeats line 2"),
    ],
)
def test_repeated_judgment_that_agrees_is_counted_once_with_a_warning(
    tmp_path: Path, text: str, lines: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = write(tmp_path / "judgments.csv", text)
    with caplog.at_level(logging.WARNING, logger="engine.evaluation.evaluate"):
        judgments = load_judgments(path)
    unique = {(j.query_id, j.image_id or j.image_path) for j in judgments}
    assert len(unique) == len(judgments)  # each judgment once
    (record,) = caplog.records
    assert str(path) in record.getMessage()
    assert lines in record.getMessage()
    assert "\n" not in record.getMessage()


def test_many_repeated_judgments_make_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    text = "".join(f"1 0 d{i} 1\n" for i in range(20)) * 2
    with caplog.at_level(logging.WARNING, logger="engine.evaluation.evaluate"):
        judgments = load_judgments(write(tmp_path / "q.txt", text))
    assert len(judgments) == 20
    (record,) = caplog.records
    message = record.getMessage()
    assert message.startswith(f"{tmp_path / 'q.txt'}: 20 judgments repeat an earlier line")
    assert "line 21 repeats line 1" in message and "15 more" in message


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "1 0 a 1\n1 0 b 0\n1 0 a 0\n",
            "judgments.csv line 3: query 1, image a judged 0 here but 1 on line 1",
        ),
        (
            ",query_id,image_id,image_path,relevant\n0,3,11,x.jpg,1\n1,3,12,y.jpg,1\n"
            "2,4,11,x.jpg,1\n3,3,13,x.jpg,0\n",
            "judgments.csv line 5: query 3, image x.jpg judged 0 here but 1 on line 2",
        ),
    ],
)
def test_repeated_judgment_that_disagrees_is_bad_input(
    tmp_path: Path, text: str, message: str
) -> None:
    with pytest.raises(BadInputError) as err:
        load_judgments(write(tmp_path / "judgments.csv", text))
    assert str(err.value) == f"{tmp_path / message}"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "1 0 a 1\n1 0 b 1\n1 0 c 0\n2 0 a 1\n2 0 b 1\n2 0 c 1\n2 0\n",
            "judgments.csv line 7: expected 4 fields in TREC qrels (qid 0 docid rel), got 2",
        ),
        ("1 0 a yes\n", "judgments.csv line 1: rel must be an integer, got 'yes'"),
        (
            "query_id,image_id,relevant\n1,5,1\n1,6,maybe\n",
            "judgments.csv line 3: relevant must be an integer, got 'maybe'",
        ),
        ("query_id,relevant\n1,1\n", "judgments.csv line 1: missing column image_id or image_path"),
        ("query_id,image_id,image_path\n1,,\n", "judgments.csv line 2: neither image_id nor"),
        ("query_id,image_id\n1,5,6\n", "judgments.csv line 2: expected 2 fields, got 3"),
        ("qid,docid,rel\n1,5,1\n", "judgments.csv line 1: a judgments CSV needs a header"),
    ],
)
def test_malformed_judgments_name_file_and_line(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(BadInputError) as err:
        load_judgments(write(tmp_path / "judgments.csv", text))
    assert message in str(err.value)


def test_judgments_round_trip_through_csv_and_qrels(tmp_path: Path) -> None:
    judgments = [
        BenchmarkJudgment("3", "11", "train/a b/x.jpg", 1),  # a space in the path is fine in CSV
        BenchmarkJudgment("3", "12", None, 0),
        BenchmarkJudgment("7", "13", "train/c/y.jpg", 2),
    ]
    write_judgments_csv(tmp_path / "j.csv", judgments)
    assert (tmp_path / "j.csv").read_text().splitlines()[
        0
    ] == "query_id,image_id,image_path,relevant"
    assert load_judgments(tmp_path / "j.csv") == judgments
    write_trec_qrels(tmp_path / "j.qrels", judgments)
    assert (tmp_path / "j.qrels").read_text() == "3 0 11 1\n3 0 12 0\n7 0 13 2\n"
    assert load_judgments(tmp_path / "j.qrels") == [
        BenchmarkJudgment(j.query_id, j.image_id, None, j.relevant) for j in judgments
    ]


def test_qrels_keyed_the_way_the_run_names_images(tmp_path: Path) -> None:
    judgments = load_judgments(write(tmp_path / "a.csv", INQUIRE_JUDGMENTS))
    by_id = qrels_from_judgments(judgments)
    assert by_id == {"3": {"4471963": 1, "4471964": 1}, "4": {"1200001": 1}}
    path = judgments[0].image_path
    assert path is not None
    run_by_path = {"3": [(path, 0.9), ("other.jpg", 0.1)]}
    assert set(qrels_for_run(run_by_path, judgments)["3"]) == {
        j.image_path for j in judgments if j.query_id == "3"
    }
    assert qrels_for_run({"3": [("4471964", 1.0)]}, judgments) == by_id


# --- TREC runs -------------------------------------------------------------------------------


def test_trec_run_is_ordered_by_rank(tmp_path: Path) -> None:
    text = "q1 Q0 b 2 0.5 sys\nq1 Q0 a 1 0.9 sys\nq2 Q0 c 1 3 sys\nq1 Q0 c 3 -1e-3 sys\n"
    run = load_trec_run(write(tmp_path / "run.trec", text))
    assert run == {"q1": [("a", 0.9), ("b", 0.5), ("c", -0.001)], "q2": [("c", 3.0)]}


def test_trec_run_is_ordered_by_score_ties_by_rank_then_docid(tmp_path: Path) -> None:
    # docs/SPEC.md §1.6 (and trec_eval): the score orders; the rank column only breaks ties.
    text = (
        "q1 Q0 a 1 0.1 sys\n"  # rank 1 but the lowest score
        "q1 Q0 b 2 0.9 sys\n"
        "q1 Q0 c 3 0.5 sys\n"
        "q1 Q0 d 4 0.5 sys\n"
        "q1 Q0 e 5 0.5 sys\n"
        "q1 Q0 y 6 0.3 sys\n"
        "q1 Q0 x 6 0.3 sys\n"  # same score and same rank: by docid
        "q1 Q0 f 0 0.5 sys\n"  # tied at 0.5 with the earliest rank
    )
    run = load_trec_run(write(tmp_path / "run.trec", text))
    assert [docid for docid, _ in run["q1"]] == ["b", "f", "c", "d", "e", "x", "y", "a"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("q1 Q0 a 1 0.9 sys\nq1 Q0 b 2 0.5\n", "run.trec line 2: expected 6 fields in a TREC run"),
        ("q1 Q0 a one 0.9 sys\n", "run.trec line 1: rank must be an integer, got 'one'"),
        ("q1 Q0 a 1 high sys\n", "run.trec line 1: score must be a number, got 'high'"),
        ("q1 Q0 a 1 nan sys\n", "run.trec line 1: score must be finite"),
        (
            "q1 Q0 a 1 1 s\nq2 Q0 a 1 1 s\nq1 Q0 a 2 0 s\n",
            "run.trec line 3: docid a repeats line 1",
        ),
        ("", "run.trec: no results in the run file (empty)"),
        ("# nothing ran\n\n", "run.trec: no results in the run file (empty)"),
    ],
)
def test_malformed_runs_name_file_and_line(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(BadInputError) as err:
        load_trec_run(write(tmp_path / "run.trec", text))
    assert message in str(err.value)


def test_trec_run_round_trip_keeps_order_and_exact_scores(tmp_path: Path) -> None:
    runs = {"3": [(5, 1 / 3), (17, 0.1 + 0.2), (4, 0.1 + 0.2)], "10": [("x.jpg", -2.5)]}
    write_trec_run(tmp_path / "out.trec", runs, tag="quadrat-text")
    lines = (tmp_path / "out.trec").read_text().splitlines()
    assert lines[1] == "3 Q0 17 2 0.30000000000000004 quadrat-text"
    assert lines[3] == "10 Q0 x.jpg 1 -2.5 quadrat-text"
    assert load_trec_run(tmp_path / "out.trec") == {  # the tie 17, 4 keeps its written ranks
        "3": [("5", 1 / 3), ("17", 0.1 + 0.2), ("4", 0.1 + 0.2)],
        "10": [("x.jpg", -2.5)],
    }
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.trec"]  # no temporary left


def test_writing_a_docid_with_spaces_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="docid 'a b.jpg'"):
        write_trec_run(tmp_path / "out.trec", {"1": [("a b.jpg", 1.0)]}, tag="t")
    with pytest.raises(ValueError, match="run tag"):
        write_trec_run(tmp_path / "out.trec", {}, tag="my run")
    assert not (tmp_path / "out.trec").exists()


# --- scoring runs ----------------------------------------------------------------------------


def test_evaluate_run_by_hand() -> None:
    run = {"1": ["a", "b", "c"], "2": ["x", "y"], "9": ["a"]}
    qrels = {"1": {"b": 1, "c": 1, "d": 1, "a": 0}, "2": {"y": 1}, "5": {"z": 1}, "9": {"a": 0}}
    mean = evaluate_run(run, qrels, k=3)
    by_id = {m.query_id: m for m in mean.per_query}
    assert [m.query_id for m in mean.per_query] == ["1", "2", "5", "9"]
    assert by_id["1"].R == 3
    assert math.isclose(by_id["1"].AP, (1 / 2 + 2 / 3) / 3)
    assert (by_id["2"].AP, by_id["2"].RR) == (0.5, 0.5)
    assert (by_id["5"].AP, by_id["5"].R) == (0.0, 1)  # judged query the run skipped: scored 0
    assert by_id["9"].R == 0  # listed, not averaged
    assert mean.queries == 3
    assert mean.mAP == pytest.approx(((1 / 2 + 2 / 3) / 3 + 1 / 2 + 0) / 3)
    assert math.isclose(mean.MRR, (1 / 2 + 1 / 2 + 0) / 3)


def test_evaluate_run_rerank_counts_relevant_candidates_only() -> None:
    run = {"1": ["a", "b", "c", "e"]}
    qrels = {"1": {"b": 1, "c": 1, "d": 1, "a": 0}}  # d is relevant but not a candidate
    mean = evaluate_run(run, qrels, k=4, protocol="rerank")
    (only,) = mean.per_query
    assert only.R == 2
    assert (only.AP, only.R_at_k) == pytest.approx((0.5833333, 1.0), abs=1e-7)
    fullrank = evaluate_run(run, qrels, k=4).per_query[0]
    assert fullrank.R == 3
    assert math.isclose(fullrank.AP, (1 / 2 + 2 / 3) / 3)


def test_evaluate_run_rejects_unknown_protocol() -> None:
    with pytest.raises(BadInputError, match="unknown protocol 'full'"):
        evaluate_run({}, {}, k=5, protocol="full")


def test_metrics_json_follows_spec() -> None:
    mean = evaluate_run({"1": ["a", "b"]}, {"1": {"b": 1}, "2": {"c": 1}}, k=50)
    data = metrics_json(mean, 50)
    assert list(data) == ["queries", "mAP@50", "nDCG@50", "MRR@50", "per_query"]
    assert data["queries"] == 2
    assert data["mAP@50"] == pytest.approx(0.25)
    assert data["MRR@50"] == pytest.approx(0.25)
    assert data["nDCG@50"] == pytest.approx(1 / math.log2(3) / 2)
    assert data["per_query"] == [
        {"query_id": "1", "AP": 0.5, "nDCG": pytest.approx(1 / math.log2(3)), "RR": 0.5, "R": 1},
        {"query_id": "2", "AP": 0.0, "nDCG": 0.0, "RR": 0.0, "R": 1},
    ]


# --- benchmark runs --------------------------------------------------------------------------

QUERIES = [
    BenchmarkQuery("1", "mongoose", {"supercategory": "Behavior", "iconic_group": "Mammals"}),
    BenchmarkQuery("2", "meadowlark", {"supercategory": "Behavior", "iconic_group": "Birds"}),
    BenchmarkQuery("3", "frog", {"supercategory": "Appearance", "iconic_group": ""}),
]
JUDGMENTS = [
    BenchmarkJudgment("1", None, "p3.jpg", 1),
    BenchmarkJudgment("1", None, "p5.jpg", 1),
    BenchmarkJudgment("1", None, "p7.jpg", 0),
    BenchmarkJudgment("1", None, "p99.jpg", 1),  # not in the collection
    BenchmarkJudgment("2", "2", None, 1),
    BenchmarkJudgment("3", None, "p1.jpg", 0),
    BenchmarkJudgment("8", None, "p1.jpg", 1),  # a query not in the queries file
]
RESULTS: dict[str, list[tuple[int, float]]] = {
    # 4 and 3 tie: the method listed 4 first, so 4 stays ahead although 3 < 4
    "1": [(5, 0.9), (4, 0.8), (3, 0.8), (7, 0.1), (5, 0.05)],
    "2": [(1, 0.5), (2, 0.4)],
    "3": [(1, 0.3)],
}


def resolve(judgment: BenchmarkJudgment) -> int | None:
    """Collection of images 1..10, known by id or as pN.jpg."""
    if judgment.image_id is not None:
        return int(judgment.image_id)
    number = int(judgment.image_path.removeprefix("p").removesuffix(".jpg"))  # type: ignore[union-attr]
    return number if 1 <= number <= 10 else None


def test_run_benchmark_fullrank_by_hand() -> None:
    calls: list[tuple[str, Sequence[int] | None]] = []
    reports: list[Progress] = []

    def search(query: BenchmarkQuery, candidates: Sequence[int] | None) -> list[tuple[int, float]]:
        calls.append((query.query_id, candidates))
        return RESULTS[query.query_id]

    result = run_benchmark(QUERIES, JUDGMENTS, search, resolve, k=3, progress=reports.append)

    assert calls == [("1", None), ("2", None), ("3", None)]
    assert result.runs["1"] == [(5, 0.9), (4, 0.8), (3, 0.8), (7, 0.1)]  # repeat of 5 dropped
    q1, q2, q3 = result.per_query
    assert q1.R == 2
    assert math.isclose(q1.AP, (1 + 2 / 3) / 2)  # ranks 1 and 3 relevant
    assert (q1.judged, q1.P) == pytest.approx((2 / 3, 2 / 3))
    assert (q2.R, q2.AP, q2.RR) == (1, 0.5, 0.5)
    assert q3.R == 0
    assert result.mean.queries == 2
    assert result.mean.mAP == pytest.approx(((1 + 2 / 3) / 2 + 0.5) / 2)
    assert result.unresolved_judgments == 1
    assert result.unresolved == [BenchmarkJudgment("1", None, "p99.jpg", 1)]
    assert result.judgments_without_query == 1
    behaviour = result.by_category["supercategory"]["Behavior"]
    assert (behaviour.queries, behaviour.mAP) == (2, pytest.approx(result.mean.mAP))
    assert result.by_category["supercategory"]["Appearance"].queries == 0
    assert result.by_category["iconic_group"]["Birds"].mAP == pytest.approx(0.5)
    assert "" not in result.by_category["iconic_group"]
    assert [(p.done, p.total) for p in reports] == [(1, 3), (2, 3), (3, 3)]


def test_run_benchmark_rerank_keeps_to_the_candidates() -> None:
    seen: dict[str, Sequence[int] | None] = {}

    def candidates(query: BenchmarkQuery) -> list[int]:
        return [7, 3, 4, 6] if query.query_id == "1" else [2, 1]

    def rerank(query: BenchmarkQuery, ids: Sequence[int] | None) -> list[tuple[int, float]]:
        seen[query.query_id] = ids
        if query.query_id == "1":
            return [(4, 0.9), (3, 0.8), (99, 0.7)]  # 99 is no candidate; 7 and 6 left out
        return [(1, 0.2), (2, 0.1)]

    result = run_benchmark(
        QUERIES[:2], JUDGMENTS, rerank, resolve, k=4, protocol="rerank", candidates=candidates
    )
    assert seen == {"1": [7, 3, 4, 6], "2": [2, 1]}
    assert [image_id for image_id, _ in result.runs["1"]] == [4, 3, 7, 6]
    q1, q2 = result.per_query
    assert q1.R == 1  # 5 is relevant but not a candidate
    assert q1.AP == 0.5
    assert q1.nDCG == pytest.approx(1 / math.log2(3))
    assert (q2.R, q2.AP) == (1, 0.5)


def test_run_benchmark_rerank_needs_candidates() -> None:
    with pytest.raises(ValueError, match="candidates"):
        run_benchmark(QUERIES, [], lambda q, c: [], resolve, protocol="rerank")


def test_run_benchmark_stops_when_cancelled() -> None:
    token = CancelToken()
    searched: list[str] = []

    def search(query: BenchmarkQuery, candidates: Sequence[int] | None) -> list[tuple[int, float]]:
        searched.append(query.query_id)
        token.cancel()
        return []

    with pytest.raises(Cancelled):
        run_benchmark(QUERIES, JUDGMENTS, search, resolve, cancel=token)
    assert searched == ["1"]


def test_a_queries_file_with_a_header_only_is_bad_input(tmp_path):
    path = tmp_path / "queries.csv"
    path.write_text(",query_id,query_text,supercategory\n")
    with pytest.raises(BadInputError, match="no queries in the file"):
        load_queries_csv(path)
