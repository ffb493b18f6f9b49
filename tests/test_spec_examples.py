"""The worked examples of docs/SPEC.md §1–§2, computed by `engine.evaluation.metrics`,
`engine.methods.fusion` and `engine.rerank.base`.

Each example is written here as the document writes it, so a change to a definition fails here
and must be carried into the document too. The last test checks that the numbers stated in the
document are the ones asserted here.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from engine.evaluation.metrics import (
    average_precision_at_k,
    evaluate_ranking,
    mean_metrics,
    ndcg_at_k,
    precision_at_k,
    recall_at_k,
    reciprocal_rank_at_k,
    strict_order,
)
from engine.methods.fusion import reciprocal_rank_fusion
from engine.rerank.base import aggregate, yes_probability

SPEC = Path(__file__).resolve().parents[1] / "docs" / "SPEC.md"


def close(value: float, stated: float) -> bool:
    """The document rounds to 7 decimals."""
    return math.isclose(value, stated, abs_tol=5e-8)


# §1.3: ranking p1 p2 p3 p4 p5; judgments p1 -> 0, p2 -> 1, p4 -> 1, p7 -> 1; k = 5.
Q1_RANKING = ["p1", "p2", "p3", "p4", "p5"]
Q1_JUDGMENTS = {"p1": 0, "p2": 1, "p4": 1, "p7": 1}


def test_one_query_worked_example() -> None:
    m = evaluate_ranking(Q1_RANKING, Q1_JUDGMENTS, 5, query_id="q1")
    rels = [0, 1, 0, 1, 0]
    assert m.R == 3
    assert close(m.P, 0.4) and close(precision_at_k(rels, 5), 0.4)
    assert close(m.R_at_k, 0.6666667) and close(recall_at_k(rels, 5, 3), 0.6666667)
    assert close(m.judged, 0.6)
    assert close(m.RR, 0.5) and close(reciprocal_rank_at_k(rels, 5), 0.5)
    assert close(m.AP, 0.3333333)
    assert close(average_precision_at_k(rels, 5, 3, "rerank"), 0.5)
    assert close(m.nDCG, 0.4981893)
    dcg = 1 / math.log2(3) + 1 / math.log2(5)
    idcg = 1 + 1 / math.log2(3) + 1 / math.log2(4)
    assert close(dcg, 1.0616063) and close(idcg, 2.1309298)


@pytest.mark.parametrize(
    ("rels", "num_relevant", "k", "protocol", "stated"),
    [
        ((1, 0, 0, 0, 0), 2, 5, "fullrank", 0.5),
        ((1, 0, 0, 0, 1), 2, 5, "fullrank", 0.7),
        ((1, 0, 0, 0, 0), 2, 5, "rerank", 1.0),
        ((1, 0, 0, 0, 1), 2, 5, "rerank", 0.7),
        ((0, 1, 1, 0), 3, 4, "rerank", 0.5833333),
        ((0, 1, 1, 0), 3, 4, "fullrank", 0.3888889),
    ],
)
def test_average_precision_examples(
    rels: tuple[int, ...], num_relevant: int, k: int, protocol: str, stated: float
) -> None:
    assert close(average_precision_at_k(rels, k, num_relevant, protocol), stated)


def test_ndcg_example() -> None:
    assert close(ndcg_at_k((0, 1, 0, 1), 4, 3), 0.4981893)


def test_means_skip_queries_without_relevant_photos() -> None:
    q1 = evaluate_ranking(Q1_RANKING, Q1_JUDGMENTS, 5, query_id="q1")
    q2 = evaluate_ranking(["p3", "p1", "p2"], {"p3": 1}, 5, query_id="q2")
    q3 = evaluate_ranking(["p1"], {"p9": 0}, 5, query_id="q3")
    assert (q2.AP, q2.nDCG, q2.RR) == (1.0, 1.0, 1.0)
    assert q3.R == 0
    mean = mean_metrics([q1, q2, q3])
    assert mean.queries == 2
    assert [m.query_id for m in mean.per_query] == ["q1", "q2", "q3"]  # q3 listed all the same
    assert close(mean.mAP, 0.6666667)
    assert close(mean.mean_nDCG, 0.7490946)
    assert close(mean.MRR, 0.75)


def test_strict_order_examples() -> None:
    scored = [("x", 0.9), ("y", 0.5), ("z", 0.9), ("w", 0.5)]
    assert strict_order(scored) == ["x", "z", "w", "y"]
    assert strict_order(scored, {"z": 1, "x": 2, "y": 3}) == ["z", "x", "y", "w"]


def test_reciprocal_rank_fusion_examples() -> None:
    fused = reciprocal_rank_fusion([["a", "b", "c"], ["b", "c", "d"]], k_rrf=60)
    assert [doc for doc, _ in fused] == ["b", "c", "a", "d"]
    for (_, score), stated in zip(fused, [0.0325225, 0.0320020, 0.0163934, 0.0158730], strict=True):
        assert close(score, stated)
    tied = reciprocal_rank_fusion([["a", "b"], ["b", "a"]], k_rrf=60)
    assert [doc for doc, _ in tied] == ["a", "b"]
    assert tied[0][1] == tied[1][1] and close(tied[0][1], 0.0325225)


def test_reciprocal_rank_fusion_with_shared_ranks_example() -> None:
    lists = [[("a", 0.9), ("b", 0.5), ("c", 0.5)], [("c", 0.8), ("a", 0.1)]]
    shared = reciprocal_rank_fusion(lists, k_rrf=60, ties="shared")
    assert [doc for doc, _ in shared] == ["a", "c", "b"]
    for (_, score), stated in zip(shared, [0.0325225, 0.0325225, 0.0161290], strict=True):
        assert close(score, stated)
    by_place = reciprocal_rank_fusion([[d for d, _ in ranked] for ranked in lists], k_rrf=60)
    assert [doc for doc, _ in by_place] == ["a", "c", "b"]
    for (_, score), stated in zip(by_place, [0.0325225, 0.0322665, 0.0161290], strict=True):
        assert close(score, stated)


def test_yes_probability_and_aggregation_examples() -> None:
    assert close(yes_probability(2.0, 0.5), 0.8175745)
    assert yes_probability(None, 0.5) == 0.0
    assert yes_probability(2.0, None) == 1.0
    assert yes_probability(None, None) == 0.0
    answers = (0.9, 0.6, 0.3)
    assert close(aggregate(answers, "mean"), 0.6)
    assert close(aggregate(answers, "min"), 0.3)
    assert close(aggregate(answers, "product"), 0.162)
    assert aggregate((), "mean") == 0.0


def test_the_document_states_these_numbers() -> None:
    """The values asserted above appear in the document's metric and fusion sections as written,
    so the document cannot drift from the code without this module noticing."""
    text = SPEC.read_text(encoding="utf-8")
    sections = text.split("\n## 3.")[0]
    stated = set(re.findall(r"\d+\.\d+", sections))
    for number in [
        "0.6666667",
        "0.3333333",
        "0.4981893",
        "1.0616063",
        "2.1309298",
        "0.5833333",
        "0.3888889",
        "0.7490946",
        "0.0325225",
        "0.0320020",
        "0.0163934",
        "0.0158730",
        "0.0161290",
        "0.0322665",
        "0.8175745",
        "0.162",
        "0.75",
    ]:
        assert number in stated, number
    for example in [
        "Ranking `p1 p2 p3 p4 p5`; judgments `p1 → 0`, `p2 → 1`, `p4 → 1`, `p7 → 1`",
        "ranking `p3 p1 p2`, judgments `p3 → 1`",
        "ranking `p1`, judgments `p9 → 0`",
        "scores x 0.9, y 0.5, z 0.9, w 0.5",
        "no earlier ranks → `x z w y`",
        "earlier ranks z 1, x 2, y 3 (w none) → `z x y w`",
        "L1 = (a, b, c), L2 = (b, c, d) → b",
        "L1 = ((a, 0.9), (b, 0.5), (c, 0.5)), L2 = ((c, 0.8), (a, 0.1)) →",
        "l_yes = 2.0, l_no = 0.5 → p = **0.8175745**",
    ]:
        assert example in text, example


def test_every_citation_names_a_section_of_the_document() -> None:
    """Code and tests cite "docs/SPEC.md §N" or "§N.M"; each cited section is a heading there,
    and no comment cites the specification by another name."""
    root = SPEC.parents[1]
    headings = set(re.findall(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", SPEC.read_text("utf-8"), re.M))
    cited: dict[str, list[str]] = {}
    for folder in ("app", "engine", "widgets", "tests", "tools"):
        for path in sorted((root / folder).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            assert not re.search(r"(?<!docs/)SPEC(\.md)? ?§", text), path
            for run in re.findall(r"docs/SPEC\.md ((?:§?\d+(?:\.\d+)?[–/, ]*)+)", text):
                for section in re.findall(r"\d+(?:\.\d+)?", run):
                    cited.setdefault(section, []).append(path.name)
    assert cited, "no citation found: the search above is broken"
    missing = {section: files for section, files in cited.items() if section not in headings}
    assert not missing, missing
