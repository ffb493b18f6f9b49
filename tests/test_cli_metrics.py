"""`quadrat metrics`: a small run and qrels pair with answers worked out by hand."""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from app.cli.metrics import COMMANDS as METRICS_COMMANDS
from engine.errors import BadInputError

# Lines deliberately out of order: the scores decide (the rank column only breaks ties).
RUN = """\
q1 Q0 d2 2 0.8 sys
q1 Q0 d1 1 0.9 sys
q1 Q0 d4 4 0.6 sys
q1 Q0 d3 3 0.7 sys
q2 Q0 d5 1 0.5 sys
q2 Q0 d6 2 0.4 sys
q3 Q0 d9 1 0.3 sys
"""
QRELS = """\
q1 0 d2 1
q1 0 d4 1
q1 0 d7 1
q1 0 d1 0
q2 0 d5 1
q4 0 d8 1
"""
# k = 3, fullrank:
#   q1: top 3 = d1 (judged no), d2 (yes), d3 (unjudged); R = 3 -> AP = (1/2) / 3, RR = 1/2,
#       nDCG = (1/log2 3) / (1 + 1/log2 3 + 1/2)
#   q2: d5 relevant at rank 1, R = 1 -> AP = RR = nDCG = 1
#   q3: no judgments -> R = 0, listed but not averaged
#   q4: judged, absent from the run -> 0
Q1_NDCG = (1 / math.log2(3)) / (1 + 1 / math.log2(3) + 1 / 2)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="quadrat")
    METRICS_COMMANDS[0].install(parser.add_subparsers(dest="command"))
    return parser.parse_args(argv)


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    run = tmp_path / "run.trec"
    qrels = tmp_path / "qrels.txt"
    run.write_text(RUN)
    qrels.write_text(QRELS)
    return run, qrels


def run_json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict:
    args = parse(argv)
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1  # one JSON object on one line
    return json.loads(out)


def test_metrics_json_by_hand(files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    run, qrels = files
    data = run_json(
        ["metrics", "--run", str(run), "--qrels", str(qrels), "--k", "3", "--json"], capsys
    )
    assert set(data) == {"queries", "mAP@3", "nDCG@3", "MRR@3", "per_query", "ties"}
    assert data["ties"] == "order"
    assert data["queries"] == 3
    assert data["mAP@3"] == pytest.approx((1 / 6 + 1 + 0) / 3)
    assert data["MRR@3"] == pytest.approx((1 / 2 + 1 + 0) / 3)
    assert data["nDCG@3"] == pytest.approx((Q1_NDCG + 1 + 0) / 3)
    assert data["per_query"] == [
        {
            "query_id": "q1",
            "AP": pytest.approx(1 / 6),
            "nDCG": pytest.approx(Q1_NDCG),
            "RR": 0.5,
            "R": 3,
        },
        {"query_id": "q2", "AP": 1.0, "nDCG": 1.0, "RR": 1.0, "R": 1},
        {"query_id": "q3", "AP": 0.0, "nDCG": 0.0, "RR": 0.0, "R": 0},
        {"query_id": "q4", "AP": 0.0, "nDCG": 0.0, "RR": 0.0, "R": 1},
    ]


def test_metrics_rerank_protocol(
    files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    # The run is the candidate set: q1's relevant candidates are d2 and d4 (d7 was never a
    # candidate), r = 1 relevant in the top 3 -> AP = 1/2; q2 -> 1; q3, q4 have no relevant
    # candidate and are not averaged.
    run, qrels = files
    argv = ["metrics", "--run", str(run), "--qrels", str(qrels), "--k", "3"]
    data = run_json([*argv, "--protocol", "rerank", "--json"], capsys)
    assert data["queries"] == 2
    assert data["mAP@3"] == pytest.approx((1 / 2 + 1) / 2)
    assert [q["R"] for q in data["per_query"]] == [2, 1, 0, 0]


def test_default_k_is_50(files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    run, qrels = files
    data = run_json(["metrics", "--run", str(run), "--qrels", str(qrels), "--json"], capsys)
    assert "mAP@50" in data
    # q1 now reaches d4 at rank 4: AP = (1/2 + 2/4) / min(50, 3)
    assert data["per_query"][0]["AP"] == pytest.approx((1 / 2 + 2 / 4) / 3)


def test_inquire_csv_judgments_keyed_by_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "run.trec").write_text(
        "3 Q0 train/a/x.jpg 1 0.9 t\n3 Q0 train/a/y.jpg 2 0.8 t\n3 Q0 train/a/z.jpg 3 0.7 t\n"
    )
    (tmp_path / "annotations.csv").write_text(
        "query_id,image_id,image_path\n3,101,train/a/y.jpg\n3,102,train/a/w.jpg\n"
    )
    run, annotations = tmp_path / "run.trec", tmp_path / "annotations.csv"
    argv = ["metrics", "--run", str(run), "--qrels", str(annotations), "--k", "3", "--json"]
    data = run_json(argv, capsys)
    # the run names images by path: y.jpg is relevant at rank 2, w.jpg was never retrieved
    ndcg = (1 / math.log2(3)) / (1 + 1 / math.log2(3))
    assert data["per_query"] == [
        {"query_id": "3", "AP": 0.25, "nDCG": pytest.approx(ndcg), "RR": 0.5, "R": 2}
    ]


def test_human_table(files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    run, qrels = files
    args = parse(["metrics", "--run", str(run), "--qrels", str(qrels), "--k", "3"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split() == ["queries", "(fullrank)", "3", "averaged", "of", "4"]
    assert "mAP@3" in out and f"{(1 / 6 + 1) / 3:.4f}" in out
    assert f"{0.5:.4f}" in out  # MRR@3
    assert "1 queries without relevant judgments are not averaged" in out
    assert "1 judged queries have no results in the run (scored 0)" in out


def test_rerank_table_does_not_call_missing_queries_scored(
    files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    # Under rerank a judged query with no results has no candidates, so R = 0: it is not
    # averaged, and it is not "scored 0" either.
    run, qrels = files
    args = parse(["metrics", "--run", str(run), "--qrels", str(qrels), "--k", "3"])
    args.protocol = "rerank"
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == ["queries", "(rerank)", "2", "averaged", "of", "4"]
    assert "scored 0" not in out
    assert "2 queries without relevant candidates are not averaged" in out
    assert "1 of them judged but with no results in the run (no candidates)" in out


def test_fullrank_table_counts_only_averaged_queries_as_scored_0(
    tmp_path: Path, files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    # q5 is judged (not relevant) and absent from the run: R = 0, not averaged, not scored 0.
    run, qrels = files
    qrels.write_text(QRELS + "q5 0 d1 0\n")
    args = parse(["metrics", "--run", str(run), "--qrels", str(qrels), "--k", "3"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "2 queries without relevant judgments are not averaged" in out
    assert "1 judged queries have no results in the run (scored 0)" in out


def test_scores_decide_the_order_not_the_rank_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The rank column says d1 first, the scores put d2 first (as trec_eval reads it).
    (tmp_path / "run.trec").write_text("q Q0 d1 1 0.2 t\nq Q0 d2 2 0.9 t\n")
    (tmp_path / "qrels").write_text("q 0 d2 1\n")
    argv = ["metrics", "--run", str(tmp_path / "run.trec"), "--qrels", str(tmp_path / "qrels")]
    data = run_json([*argv, "--k", "1", "--json"], capsys)
    assert data["per_query"] == [{"query_id": "q", "AP": 1.0, "nDCG": 1.0, "RR": 1.0, "R": 1}]


# A tied run (issue 34): every photo of t1 scored 0.5, the one relevant first by the rank column;
# t2 is docs/SPEC.md §1.2's example (0.9, 0.8, 0.8, 0.8, 0.5 with rel 0, 1, 1, 0, 1).
TIED_RUN = "".join(f"t1 Q0 a{i} {i} 0.5 sys\n" for i in range(1, 9)) + (
    "t2 Q0 b1 1 0.9 sys\nt2 Q0 b2 2 0.8 sys\nt2 Q0 b3 3 0.8 sys\nt2 Q0 b4 4 0.8 sys\n"
    "t2 Q0 b5 5 0.5 sys\n"
)
# t1: a1 relevant, and nine relevant photos the run never retrieved (R = 10); t2: R = 3.
TIED_QRELS = (
    "t1 0 a1 1\n"
    + "".join(f"t1 0 m{i} 1\n" for i in range(2, 11))
    + ("t2 0 b1 0\nt2 0 b2 1\nt2 0 b3 1\nt2 0 b4 0\nt2 0 b5 1\n")
)
# k = 10, fullrank (normaliser min(10, R)). By hand:
#   order: t1 AP = (1/1) / 10 = 0.1; t2 AP = (1/2 + 2/3 + 3/5) / 3 = 0.5888889.
#   group: t1's eight tied photos are one threshold holding 1 relevant: AP = 1 · (1/8) / 10 =
#          0.0125 (INQUIRE's number for such a query); t2: (2 · 2/4 + 1 · 3/5) / 3 = 0.5333333.
#   nDCG@10, IDCG = Σ_{i=1..10} 1/log2(i+1) for t1, Σ_{i=1..3} for t2:
#   order: t1 DCG = 1; t2 DCG = 1/log2 3 + 1/log2 4 + 1/log2 6.
#   group: t1 each of ranks 1..8 gains 1/8: DCG = (1/8) Σ_{i=1..8} 1/log2(i+1);
#          t2 ranks 2..4 gain 2/3 each: DCG = (2/3)(1/log2 3 + 1/log2 4 + 1/log2 5) + 1/log2 6.
#   RR keeps the strict order either way: t1 1, t2 1/2.


def _discounts(first: int, last: int) -> float:
    return sum(1 / math.log2(i + 1) for i in range(first, last + 1))


def test_tied_runs_score_as_inquire_with_ties_group(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "run.trec").write_text(TIED_RUN)
    (tmp_path / "qrels").write_text(TIED_QRELS)
    argv = ["metrics", "--run", str(tmp_path / "run.trec"), "--qrels", str(tmp_path / "qrels")]
    argv += ["--k", "10", "--json"]
    order = run_json(argv, capsys)
    group = run_json([*argv, "--ties", "group"], capsys)
    assert (order["ties"], group["ties"]) == ("order", "group")
    assert [q["AP"] for q in order["per_query"]] == pytest.approx([0.1, 0.5888889])
    assert [q["AP"] for q in group["per_query"]] == pytest.approx([0.0125, 0.5333333])
    assert group["mAP@10"] == pytest.approx((0.0125 + 0.5333333) / 2)
    t2_order = _discounts(2, 3) + 1 / math.log2(6)
    t2_group = 2 / 3 * _discounts(2, 4) + 1 / math.log2(6)
    assert [q["nDCG"] for q in order["per_query"]] == pytest.approx(
        [1 / _discounts(1, 10), t2_order / _discounts(1, 3)]
    )
    assert [q["nDCG"] for q in group["per_query"]] == pytest.approx(
        [_discounts(1, 8) / 8 / _discounts(1, 10), t2_group / _discounts(1, 3)]
    )
    assert [q["RR"] for q in group["per_query"]] == [1.0, 0.5]
    # The table says that tied scores were grouped.
    args = parse([*argv[:-1], "--ties", "group"])
    assert args.func(args) == 0
    assert capsys.readouterr().out.splitlines()[0].split()[:4] == [
        "queries", "(fullrank,", "tied", "scores"
    ]  # fmt: skip


def test_metrics_and_evaluate_share_one_ties_option() -> None:
    from app.cli.evaluate import COMMANDS as EVALUATE_COMMANDS

    def ties_action(
        add: Callable[[argparse._SubParsersAction], None], name: str
    ) -> argparse.Action:
        parser = argparse.ArgumentParser(prog="quadrat")
        add(parser.add_subparsers(dest="command"))
        command = parser._subparsers._group_actions[0].choices[name]  # type: ignore[union-attr]
        return next(a for a in command._actions if "--ties" in a.option_strings)

    metrics, evaluate = (
        ties_action(METRICS_COMMANDS[0].install, "metrics"),
        ties_action(EVALUATE_COMMANDS[0].install, "evaluate"),
    )
    assert (metrics.choices, metrics.default, metrics.help) == (
        evaluate.choices, evaluate.default, evaluate.help
    )  # fmt: skip
    assert list(metrics.choices or ()) == ["order", "group"]


def quadrat(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Run the `quadrat` entry point: exit code, stdout, stderr."""
    from app.cli import main

    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("run.trec", ""),
        ("run.trec", "# no results\n"),
        ("qrels.txt", ""),
        ("qrels.txt", "query_id,image_id,image_path\n"),
        ("qrels.txt", ",query_id,image_id,relevant\n\n"),
    ],
)
def test_empty_run_or_judgments_exit_2_naming_the_file(
    files: tuple[Path, Path], capsys: pytest.CaptureFixture[str], name: str, text: str
) -> None:
    run, qrels = files
    empty = run if name == "run.trec" else qrels
    empty.write_text(text)
    code, out, err = quadrat(["metrics", "--run", str(run), "--qrels", str(qrels)], capsys)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and str(empty) in err and "empty" in err


@pytest.mark.parametrize(
    "judgments",
    [
        "q1 0 d2 1\nq2 0 d5 1\nq1 0 d2 0\n",
        "query_id,image_id,relevant\nq1,d2,1\nq2,d5,1\nq1,d2,0\n",
    ],
)
def test_judged_twice_differently_exits_2_naming_file_and_lines(
    files: tuple[Path, Path], capsys: pytest.CaptureFixture[str], judgments: str
) -> None:
    run, qrels = files
    qrels.write_text(judgments)
    code, out, err = quadrat(["metrics", "--run", str(run), "--qrels", str(qrels)], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1
    assert f"{qrels} line " in err and "on line " in err and "d2" in err


@pytest.mark.parametrize(
    "judgments",
    [
        "# judged twice\nq1 0 d2 1\nq2 0 d5 1\nq1 0 d2 1\n",
        "query_id,image_id,image_path\nq1,d2,x.jpg\nq2,d5,y.jpg\nq1,d2,x.jpg\n",
        "query_id,image_id,relevant\nq1,d2,1\nq2,d5,1\nq1,d2,1\n",
    ],
)
def test_judged_twice_alike_warns_naming_file_and_lines(
    files: tuple[Path, Path], capsys: pytest.CaptureFixture[str], judgments: str
) -> None:
    run, qrels = files
    qrels.write_text(judgments)
    argv = ["metrics", "--run", str(run), "--qrels", str(qrels), "--k", "3", "--json"]
    code, out, err = quadrat(argv, capsys)
    assert code == 0
    assert json.loads(out)["per_query"][0]["R"] == 1  # counted once
    assert str(qrels) in err and "line 4 repeats line 2" in err


def test_mismatched_image_names_warn(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "run.trec").write_text("1 Q0 img-17 1 0.9 t\n")
    (tmp_path / "qrels").write_text("1 0 17 1\n")
    args = parse(
        ["metrics", "--run", str(tmp_path / "run.trec"), "--qrels", str(tmp_path / "qrels")]
    )
    assert args.func(args) == 0
    assert "no image of the run appears in the judgments" in capsys.readouterr().err


def test_malformed_qrels_names_file_and_line(files: tuple[Path, Path]) -> None:
    run, qrels = files
    qrels.write_text(QRELS + "q5 0 d1\n")
    args = parse(["metrics", "--run", str(run), "--qrels", str(qrels)])
    with pytest.raises(BadInputError) as err:
        args.func(args)
    assert (
        str(err.value)
        == f"{qrels} line 7: expected 4 fields in TREC qrels (qid 0 docid rel), got 3"
    )


def test_malformed_run_names_file_and_line(files: tuple[Path, Path]) -> None:
    run, qrels = files
    run.write_text(RUN.replace("q2 Q0 d6 2 0.4 sys", "q2 Q0 d6 2 sys"))
    args = parse(["metrics", "--run", str(run), "--qrels", str(qrels)])
    with pytest.raises(BadInputError, match=r"run.trec line 6: expected 6 fields in a TREC run"):
        args.func(args)


def test_missing_run_file(tmp_path: Path, files: tuple[Path, Path]) -> None:
    _, qrels = files
    args = parse(["metrics", "--run", str(tmp_path / "none.trec"), "--qrels", str(qrels)])
    with pytest.raises(BadInputError, match="none.trec: no such file"):
        args.func(args)


@pytest.mark.parametrize("argv", [["--k", "0"], ["--k", "ten"], ["--protocol", "full"], []])
def test_bad_usage_is_an_argparse_error(files: tuple[Path, Path], argv: list[str]) -> None:
    run, qrels = files
    base = ["metrics", "--run", str(run)] + (["--qrels", str(qrels)] if argv else [])
    with pytest.raises(SystemExit) as exit_info:
        parse(base + argv)
    assert exit_info.value.code == 2


def test_metrics_command_needs_no_qt() -> None:
    # A headless server scores runs: importing the command must not pull in Qt.
    code = (
        "import sys, app.cli.metrics, engine.evaluation.evaluate, engine.evaluation.metrics; "
        "sys.exit(any(name.startswith(('PySide6', 'shiboken6')) for name in sys.modules))"
    )
    root = Path(__file__).resolve().parent.parent
    assert subprocess.run([sys.executable, "-c", code], cwd=root, check=False).returncode == 0
