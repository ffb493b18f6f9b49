"""Exports (results CSV, judgments CSV/qrels), benchmark import, copying relevant photos."""

from __future__ import annotations

import csv
from datetime import datetime

import pytest
from sqlalchemy import select

from engine.catalog import Collection, Image, Taxon
from engine.catalog.library import Library
from engine.errors import BadInputError
from engine.evaluation.evaluate import load_judgments
from engine.io.export import (
    RESULT_COLUMNS,
    copy_relevant_photos,
    export_judgments,
    export_results_csv,
    import_benchmark,
)
from engine.judgments.queries import QueryStore


@pytest.fixture
def library(tmp_path):
    photos = tmp_path / "photos"
    (photos / "a").mkdir(parents=True)
    (photos / "b").mkdir()
    with Library.open(tmp_path / "lib") as lib:
        with lib.catalog.session() as s:
            coll = Collection(root=str(photos), name="photos")
            taxon = Taxon(key="x", name="Rana temporaria", common_name="common frog", genus="Rana")
            s.add_all([coll, taxon])
            s.flush()
            for i, sub in enumerate(["a", "a", "b"]):
                rel = f"{sub}/frog.jpg" if i != 1 else "a/toad.jpg"
                (photos / rel).write_bytes(f"photo {i}".encode())
                s.add(
                    Image(
                        collection_id=coll.id,
                        rel_path=rel,
                        size=7,
                        mtime_ns=1,
                        taxon_id=taxon.id,
                        observed_at=datetime(2021, 5, 3, 10, 0),
                        latitude=52.5,
                        longitude=-1.25,
                        license="CC-BY",
                        rights_holder="A. Naturalist",
                        external_id=1000 + i,
                    )
                )
        yield lib


def ids(library) -> list[int]:
    with library.catalog.session() as s:
        return list(s.scalars(select(Image.id).order_by(Image.id)))


def test_results_csv_has_spec_columns_ranks_and_judgments(library, tmp_path):
    a, b, c = ids(library)
    out = tmp_path / "results.csv"
    rows = export_results_csv(library, out, [(c, 0.9), (a, 0.5)], {a: 1})
    assert rows == 2
    with open(out, newline="") as f:
        table = list(csv.DictReader(f))
    assert list(table[0]) == RESULT_COLUMNS
    assert [r["rank"] for r in table] == ["1", "2"]
    assert table[0]["path"].endswith("b/frog.jpg") and table[0]["judgment"] == ""
    assert table[1]["judgment"] == "1"
    assert table[1]["common_name"] == "common frog" and table[1]["genus"] == "Rana"
    assert table[1]["date"].startswith("2021-05-03") and table[1]["latitude"] == "52.5"
    assert table[1]["license"] == "CC-BY" and table[1]["rights_holder"] == "A. Naturalist"


def test_judgments_round_trip_through_csv_and_qrels(library, tmp_path):
    a, b, c = ids(library)
    store = QueryStore(library)
    qid = store.find_or_create_query("frog calling")
    store.judge(qid, a, 1)
    store.judge(qid, b, 0)
    assert export_judgments(library, tmp_path / "j.csv") == 2
    assert export_judgments(library, tmp_path / "j.qrels", fmt="qrels") == 2
    for name in ("j.csv", "j.qrels"):
        loaded = {(j.image_id, j.relevant) for j in load_judgments(tmp_path / name)}
        assert loaded == {("1000", 1), ("1001", 0)}
    with pytest.raises(BadInputError):
        export_judgments(library, tmp_path / "x", fmt="xml")


def test_importing_a_benchmark_creates_saved_queries_with_judgments(library, tmp_path):
    (tmp_path / "q.csv").write_text(
        ",query_id,query_text,supercategory\n0,7,frog calling,Behavior\n"
    )
    (tmp_path / "j.csv").write_text(
        "query_id,image_id,image_path\n7,1002,b/frog.jpg\n7,,a/toad.jpg\n7,99,missing/x.jpg\n"
    )
    report = import_benchmark(library, tmp_path / "q.csv", tmp_path / "j.csv")
    assert (report.queries, report.judgments, report.unresolved) == (1, 2, 1)
    saved = report.query_ids["7"]
    a, b, c = ids(library)
    assert QueryStore(library).judgments(saved) == {c: 1, b: 1}


def test_copy_relevant_photos_keeps_clashing_names_apart(library, tmp_path):
    a, b, c = ids(library)
    store = QueryStore(library)
    qid = store.find_or_create_query("frog")
    store.judge(qid, a, 1)
    store.judge(qid, c, 1)
    store.judge(qid, b, 0)
    copied = copy_relevant_photos(library, qid, tmp_path / "out")
    assert sorted(p.name for p in copied) == ["frog-1.jpg", "frog.jpg"]
    assert {p.read_bytes() for p in copied} == {b"photo 0", b"photo 2"}


def test_judgments_match_photos_by_path_source_id_or_unique_file_name(library):
    from engine.benchmarks.runner import JudgmentResolver
    from engine.evaluation.evaluate import BenchmarkJudgment

    a, b, c = ids(library)
    resolve = JudgmentResolver(library)
    assert resolve(BenchmarkJudgment("1", None, "b/frog.jpg", 1)) == c  # relative path
    assert resolve(BenchmarkJudgment("1", "1000", None, 1)) == a  # source (COCO/iNat) image id
    assert resolve(BenchmarkJudgment("1", None, "train/elsewhere/toad.jpg", 1)) == b  # unique name
    assert resolve(BenchmarkJudgment("1", None, "train/elsewhere/frog.jpg", 1)) is None  # ambiguous
    assert resolve(BenchmarkJudgment("1", "424242", "nowhere/x.jpg", 1)) is None
    assert resolve.docid(a) == "1000"


@pytest.mark.parametrize("fmt", ["csv", "qrels"])
def test_exported_judgments_import_back_onto_the_same_saved_queries(library, tmp_path, fmt):
    with library.catalog.session() as s:  # a photo without a source id, named by catalog id
        s.get(Image, ids(library)[1]).external_id = None
    a, b, c = ids(library)
    store = QueryStore(library)
    first, second = store.find_or_create_query("frog"), store.find_or_create_query("toad")
    store.judge(first, a, 1)
    store.judge(first, b, 0)
    store.judge(second, b, 1)
    path = tmp_path / f"judgments.{fmt}"
    export_judgments(library, path, fmt=fmt)
    store.clear_judgments(first)
    store.clear_judgments(second)

    report = import_benchmark(library, None, path)
    assert (report.judgments, report.unresolved) == (3, 0)
    assert store.judgments(first) == {a: 1, b: 0}
    assert store.judgments(second) == {b: 1}
