"""The open query as one object: what a controller reading it sees and hears."""

from __future__ import annotations

from app.controllers.open_query import OpenQuery, QueryState, RunState


def test_opening_judging_and_closing_are_heard_in_order(qtbot) -> None:
    query = OpenQuery()
    heard: list[tuple[object, ...]] = []
    query.opened.connect(lambda qid: heard.append(("opened", qid, len(query.runs))))
    query.runsChanged.connect(lambda: heard.append(("runs", len(query.runs))))
    query.judgmentChanged.connect(lambda *args: heard.append(("judged", *args)))
    runs = [RunState(5, "Text", "Text", [(1, 0.9), (2, 0.8)]), RunState(6, "Hybrid", "H", [])]
    query.open(QueryState(3, "red fox", 5, runs, {1: 1}))
    assert query.current_run() is not None and query.current_run().ids == [1, 2]
    assert query.set_judgment(3, 2, 0) and query.set_judgment(3, 1, None)
    assert not query.set_judgment(4, 1, 1)  # another query's judgment: not shown here
    assert query.judgments == {2: 0} and query.relevant() == 0
    assert query.retitle(3, "grey fox") and query.title == "grey fox"
    assert not query.retitle(9, "other")
    query.close()
    assert query.query_id is None and query.judgments == {} and query.current_run() is None
    assert heard == [
        ("opened", 3, 2),
        ("runs", 2),
        ("judged", 3, 2, 0),
        ("judged", 3, 1, None),
        ("runs", 0),
    ]
