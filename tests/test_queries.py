"""Saved queries, runs and judgments: persistence, undo, metrics against hand computations."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest
from sqlalchemy import select

from engine.catalog import Image
from engine.catalog.library import Library
from engine.errors import BadInputError
from engine.evaluation.live import live_metrics
from engine.judgments.queries import QueryStore
from tests.catalogs import add_plain_photos, folder_url


@pytest.fixture
def library(tmp_path, catalog_url, monkeypatch):
    """A library with ten catalog photos (no vectors needed for judging), on SQLite (its own
    file) and on a PostgreSQL server (the password from the environment, as users give it)."""
    postgres = catalog_url.startswith("postgresql")
    database_url = folder_url(catalog_url, monkeypatch) if postgres else None
    with Library.open(tmp_path / "lib", database_url=database_url) as lib:
        add_plain_photos(lib, tmp_path / "photos", 10)
        yield lib


def image_ids(library) -> list[int]:
    with library.catalog.session() as s:
        return list(s.scalars(select(Image.id).order_by(Image.id)))


def test_same_text_reuses_the_query_and_runs_accumulate(library):
    store = QueryStore(library)
    q1 = store.find_or_create_query("water frogs  in amplexus")
    q2 = store.find_or_create_query("water frogs in amplexus")
    assert q1 == q2
    ids = image_ids(library)
    store.save_run(q1, "text", [(ids[0], 0.9), (ids[1], 0.8)], model_key="demo")
    store.save_run(q1, "visret", [(ids[1], 0.7), (ids[0], 0.6)])
    runs = store.runs_for(q1)
    assert [r.method for r in runs] == ["text", "visret"]
    assert runs[1].ranking == [(ids[1], 0.7), (ids[0], 0.6)]
    info = store.list_queries()[0]
    assert (info.runs, info.text) == (2, "water frogs in amplexus")


def test_judgments_belong_to_the_query_and_undo_restores_exactly(library):
    store = QueryStore(library)
    qid = store.find_or_create_query("caterpillar with orange osmeterium")
    ids = image_ids(library)
    first = store.judge(qid, ids[3], 1)
    assert first.previous is None
    second = store.judge(qid, ids[3], 0)
    assert second.previous == 1
    assert store.judgments(qid) == {ids[3]: 0}
    store.undo(second)
    assert store.judgments(qid) == {ids[3]: 1}
    store.undo(first)
    assert store.judgments(qid) == {}
    store.judge(qid, ids[4], 1)
    store.judge(qid, ids[4], None)  # clear
    assert store.judgments(qid) == {}


def test_live_metrics_match_hand_computed_values(library):
    ids = image_ids(library)
    ranking = ids[:5]
    # rel = (1,0,0,0,1), and a third relevant photo outside the ranking: R = 3.
    judgments = {ids[0]: 1, ids[1]: 0, ids[4]: 1, ids[9]: 1}
    live = live_metrics(ranking, judgments, k=5)
    m = live.metrics
    assert m.R == 3
    assert pytest.approx(2 / 5) == m.P
    assert m.R_at_k == pytest.approx(2 / 3)
    assert pytest.approx((1 + 2 / 5) / 3) == m.AP
    assert m.RR == 1.0
    assert m.judged == pytest.approx(3 / 5)
    assert live.precision_curve == pytest.approx([1, 1 / 2, 1 / 3, 1 / 4, 2 / 5])
    assert live.trailing_nonrelevant == 0


def test_stop_rule_counts_judged_non_relevant_after_the_last_relevant(library):
    ids = image_ids(library)
    # relevant, not, not, then two unjudged photos: two judged misses in a row.
    live = live_metrics(ids[:5], {ids[0]: 1, ids[1]: 0, ids[2]: 0}, k=5)
    assert live.trailing_nonrelevant == 2


def test_stop_rule_does_not_count_unjudged_photos_above_a_deep_sampled_judgment(library):
    ids = image_ids(library)
    ranking = ids[:10]
    # The top three judged (relevant, not, not), then a photo judged not relevant at rank 10
    # (a random sample for the recall estimate): the six unjudged photos between are no
    # evidence of misses, so the run of judged misses is three, not nine.
    judgments = {ids[0]: 1, ids[1]: 0, ids[2]: 0, ids[9]: 0}
    assert live_metrics(ranking, judgments, k=5).trailing_nonrelevant == 3
    # A relevant photo found deep by the sample ends the run there.
    judgments[ids[9]] = 1
    assert live_metrics(ranking, judgments, k=5).trailing_nonrelevant == 0


def test_rename_notes_delete(library):
    store = QueryStore(library)
    qid = store.find_or_create_query("road-killed mammal")
    store.judge(qid, image_ids(library)[0], 1)
    store.rename_query(qid, "roadkill")
    store.set_notes(qid, "check the 2019 folder")
    info = store.list_queries()[0]
    assert (info.title, info.notes, info.judged, info.relevant) == (
        "roadkill",
        "check the 2019 folder",
        1,
        1,
    )
    store.delete_query(qid)
    assert store.list_queries() == []
    with pytest.raises(BadInputError):
        store.rename_query(qid, "gone")


def test_a_judgment_survives_a_kill_right_after_it_is_made(library, tmp_path):
    qid = QueryStore(library).find_or_create_query("penguin during molting period")
    target = image_ids(library)[2]
    script = textwrap.dedent(
        f"""
        import os, signal
        from engine.catalog.library import Library
        from engine.judgments.queries import QueryStore
        lib = Library.open({str(library.root)!r})
        QueryStore(lib).judge({qid}, {target}, 1)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    with Library.open(library.root) as reopened:  # the folder's catalog, whichever it is
        assert QueryStore(reopened).judgments(qid) == {target: 1}
        if not reopened.catalog.is_server:
            assert reopened.catalog.integrity_check() == "ok"
    if not library.catalog.is_server:
        assert os.path.exists(library.root / "catalog.sqlite3")
