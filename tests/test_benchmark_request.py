"""A benchmark asked for as one record (`BenchmarkRequest`) runs as `run_methods` does: the same
scores per query, progress over every method's queries, and the same refusals before any work."""

from __future__ import annotations

import pytest

from engine.benchmarks.runner import BenchmarkRequest, run_methods, run_request
from engine.catalog.library import Library
from engine.errors import BadInputError
from engine.evaluation.evaluate import load_judgments, load_queries_csv
from engine.progress import Progress


def test_a_request_scores_as_run_methods_and_reports_progress_over_all_methods(
    tmp_path, small_demo_collection, demo_encoder, copy_small_demo_library
):
    queries = load_queries_csv(small_demo_collection.queries_path)
    judgments = load_judgments(small_demo_collection.judgments_path)
    with Library.open(copy_small_demo_library(tmp_path / "lib")) as library:
        seen: list[Progress] = []
        request = BenchmarkRequest(queries, judgments, ["text", "hybrid"], k=10, permutations=0)
        bench = run_request(library, lambda: demo_encoder, request, progress=seen.append)
        plain = run_methods(
            library, lambda: demo_encoder, queries, judgments, ["hybrid"], k=10, permutations=0
        )

    assert list(bench.results) == ["text", "hybrid"]
    ap = {m.query_id: m.AP for m in bench.results["hybrid"].mean.per_query}
    assert ap == {m.query_id: m.AP for m in plain.results["hybrid"].mean.per_query}
    assert bench.results["text"].mean.mAP > 0
    assert [c.method for c in bench.comparisons] == ["hybrid"]
    assert (bench.k, bench.protocol, bench.collections.ranked[0].name) == (10, "fullrank", "c")
    # Progress counts the queries of both methods, and the second method starts where the
    # first ended.
    assert {p.total for p in seen} == {2 * len(queries)}
    assert max(p.done for p in seen) == 2 * len(queries)
    assert any(p.message.startswith("hybrid: ") for p in seen)


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (BenchmarkRequest([], [], []), "choose at least one method"),
        (BenchmarkRequest([], [], ["text", "text"]), "a method is given twice"),
        (BenchmarkRequest([], [], ["text"], candidates={}), "use --protocol rerank"),
    ],
)
def test_a_request_that_cannot_run_is_refused_before_the_library_is_touched(
    request_: BenchmarkRequest, message: str
) -> None:
    with pytest.raises(BadInputError, match=message):
        run_request(None, lambda: None, request_)  # type: ignore[arg-type]
