"""A judgment made on a detector's box: it judges the frame, keeps the box in both judgment
tables, and undo puts back the box the judgment replaced; the window's detections read."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from engine.catalog import Image, Judgment, JudgmentEvent
from engine.catalog.library import Library
from engine.detections.records import Box, DetectionRecord, FrameRecord
from engine.detections.shown import has_detections, shown_detections
from engine.detections.store import replace_source, write_frames
from engine.judgments.queries import QueryStore
from tests.catalogs import add_plain_photos


@pytest.fixture
def library(tmp_path):
    with Library.open(tmp_path / "lib") as lib:
        add_plain_photos(lib, tmp_path / "photos", 3)
        yield lib


def _ids(library: Library) -> list[int]:
    with library.catalog.session() as s:
        return list(s.scalars(select(Image.id).order_by(Image.id)))


def _texts(store: QueryStore, qid: int) -> dict[int, str]:
    return {photo: box.text for photo, box in store.judged_boxes(qid).items()}


def test_a_box_judgment_judges_the_frame_and_keeps_the_box_in_both_tables(library):
    store = QueryStore(library, user="ana")
    qid = store.find_or_create_query("red fox")
    photo = _ids(library)[0]
    fox = Box(0.1, 0.2, 0.05, 0.04)
    change = store.judge(qid, photo, 1, box=fox)

    assert store.judgments(qid) == {photo: 1}  # the frame is judged
    assert _texts(store, qid) == {photo: fox.text}
    with library.catalog.session() as s:
        assert s.scalar(select(Judgment.box)) == "0.1000,0.2000,0.0500,0.0400"
        assert s.scalars(select(JudgmentEvent.box)).all() == ["0.1000,0.2000,0.0500,0.0400"]
    assert change.box == fox and change.previous_box is None


def test_undo_puts_back_the_previous_judgment_with_its_box(library):
    store = QueryStore(library, user="ana")
    qid = store.find_or_create_query("red fox")
    photo = _ids(library)[1]
    first, second = Box(0.1, 0.1, 0.2, 0.2), Box(0.5, 0.5, 0.3, 0.3)
    store.judge(qid, photo, 1, box=first)
    change = store.judge(qid, photo, 0, box=second)
    assert change.previous_box is not None and change.previous_box.text == first.text

    store.undo(change)
    assert store.judgments(qid) == {photo: 1}
    assert _texts(store, qid) == {photo: first.text}
    with library.catalog.session() as s:
        events = s.scalars(select(JudgmentEvent.box).order_by(JudgmentEvent.id)).all()
    assert events == [first.text, second.text, first.text]

    # A judgment on the whole frame leaves no box behind.
    store.judge(qid, photo, 1)
    assert store.judged_boxes(qid) == {}


def test_the_window_reads_boxes_above_the_threshold_with_their_model(library):
    photo, empty, _ = _ids(library)
    assert not has_detections(library)
    with library.catalog.session() as s:
        source = replace_source(s, "megadetector", "/md.json", model="MDV5A")
        frames = [
            FrameRecord(
                photo,
                (
                    DetectionRecord(Box(0.1, 0.1, 0.2, 0.2), "animal", 0.9),
                    DetectionRecord(Box(0.6, 0.6, 0.1, 0.1), "animal", 0.1),
                ),
            ),
            FrameRecord(empty),
        ]
        write_frames(s, source, frames)
    found = shown_detections(library, [photo, empty], 0.2)
    assert list(found) == [photo]
    assert [(d.detection.record.confidence, d.model) for d in found[photo]] == [(0.9, "MDV5A")]
    assert has_detections(library)


def test_the_judgments_csv_carries_the_box_and_imports_it_back(library, tmp_path):
    import csv

    from engine.io.export import export_judgments, import_benchmark

    store = QueryStore(library, user="ana")
    qid = store.find_or_create_query("red fox")
    boxed, whole, _ = _ids(library)
    fox = Box(0.1, 0.2, 0.3, 0.4)
    store.judge(qid, boxed, 1, box=fox)
    store.judge(qid, whole, 0)
    path = tmp_path / "judgments.csv"
    export_judgments(library, path)
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert sorted(r["box"] for r in rows) == ["", fox.text]

    store.clear_judgments(qid)
    import_benchmark(library, None, path)
    assert store.judgments(qid) == {boxed: 1, whole: 0}
    assert _texts(store, qid) == {boxed: fox.text}


def test_a_blind_judge_sees_and_undoes_only_their_own_box(library):
    ana = QueryStore(library, user="ana", blind=True)
    ben = QueryStore(library, user="ben", blind=True)
    qid = ana.find_or_create_query("red fox")
    photo = _ids(library)[0]
    mine, theirs = Box(0.1, 0.1, 0.2, 0.2), Box(0.6, 0.6, 0.2, 0.2)
    ana.judge(qid, photo, 1, box=mine)
    change = ben.judge(qid, photo, 0, box=theirs)
    assert change.previous_box is None  # ben's own previous mark: none
    assert _texts(ana, qid) == {photo: mine.text}
    assert _texts(ben, qid) == {photo: theirs.text}
