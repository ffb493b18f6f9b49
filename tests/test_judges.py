"""Judges by name, blind double judging, adjudication and recorded recall certificates, on SQLite
and on a PostgreSQL server (issue 28)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from sqlalchemy import select

from engine.catalog import Image
from engine.catalog.library import Library
from engine.evaluation.live import live_metrics
from engine.judgments.adjudication import (
    ADJUDICATED,
    MAJORITY,
    NEWEST,
    adjudicate,
    certificates,
    disagreements,
    double_judging_sample,
    judgment_view,
    majority,
    offer_double_judging,
    record_certificate,
)
from engine.judgments.agreement import judge_ratings
from engine.judgments.certified_recall import certify_recall
from engine.judgments.queries import QueryStore
from tests.catalogs import add_plain_photos, folder_url
from tests.test_dwc_export import judged  # noqa: F401 (the fixture)

PHOTOS = 12


@pytest.fixture
def library(tmp_path: Path, catalog_url: str, monkeypatch: pytest.MonkeyPatch):
    with Library.open(tmp_path / "lib", database_url=folder_url(catalog_url, monkeypatch)) as lib:
        add_plain_photos(lib, tmp_path / "photos", PHOTOS)
        yield lib


@pytest.fixture
def sqlite_library(tmp_path: Path):
    with Library.open(tmp_path / "lib") as lib:
        add_plain_photos(lib, tmp_path / "photos", PHOTOS)
        yield lib


def image_ids(library: Library) -> list[int]:
    with library.catalog.session() as s:
        return list(s.scalars(select(Image.id).order_by(Image.id)))


def test_the_default_judge_is_the_server_login_on_postgresql(library):
    from sqlalchemy import make_url

    judge = QueryStore(library).user
    if library.catalog.engine.dialect.name == "postgresql":
        assert judge == make_url(str(library.catalog.engine.url)).username
    else:
        import getpass

        assert judge == getpass.getuser()


def test_two_blind_judges_each_see_only_their_own_marks(library):
    ids = image_ids(library)
    ann = QueryStore(library, user="ann")
    qid = ann.find_or_create_query("heron fishing")
    for image_id in ids[:4]:
        ann.judge(qid, image_id, 1)
    sample = offer_double_judging(library, qid, None, "ann")
    assert sample == ids[:4]
    # Two processes on one catalog: each opens its own store under its own name, blind.
    bob = QueryStore(Library.open(library.root), user="bob", blind=True)
    cy = QueryStore(Library.open(library.root), user="cy", blind=True)
    try:
        assert bob.judgments(qid) == {} and cy.judgments(qid) == {}  # ann's marks hidden
        assert double_judging_sample(bob.library, qid) == ids[:4]
        bob.judge(qid, ids[0], 0)
        bob.judge(qid, ids[1], 1)
        change = cy.judge(qid, ids[0], 1)
        assert change.previous is None  # cy's own previous mark, not ann's or bob's
        assert bob.judgments(qid) == {ids[0]: 0, ids[1]: 1}
        assert cy.judgments(qid) == {ids[0]: 1}
        cy.undo(change)
        assert cy.judgments(qid) == {}
    finally:
        bob.library.close()
        cy.library.close()
    # Not blind, the newest judgment of each photo shows, as before.
    assert QueryStore(library, user="ann").judgments(qid)[ids[1]] == 1
    assert judge_ratings(library, qid)[ids[0]] == {"ann": 1, "bob": 0}


def test_a_sample_of_a_chosen_size_is_the_same_for_everyone(sqlite_library):
    ids = image_ids(sqlite_library)
    ann = QueryStore(sqlite_library, user="ann")
    qid = ann.find_or_create_query("heron")
    for image_id in ids[:10]:
        ann.judge(qid, image_id, image_id % 2)
    first = offer_double_judging(sqlite_library, qid, 4, "ann")
    assert len(first) == 4 and set(first) <= set(ids[:10])
    assert offer_double_judging(sqlite_library, qid, 4, "bob") == first  # offered already
    assert len(offer_double_judging(sqlite_library, qid, 6, "ann")) == 6


def test_adjudicated_judgments_win_in_metrics_and_views(library):
    ids = image_ids(library)
    ann, bob = QueryStore(library, user="ann"), QueryStore(library, user="bob")
    qid = ann.find_or_create_query("otter")
    ann.judge(qid, ids[0], 1)
    bob.judge(qid, ids[0], 0)
    ann.judge(qid, ids[1], 1)
    bob.judge(qid, ids[1], 1)
    (split,) = disagreements(library, qid)
    assert split.image_id == ids[0] and split.adjudicated is None
    assert [(m.judge, m.relevance) for m in split.marks] == [("ann", 1), ("bob", 0)]
    adjudicate(library, qid, ids[0], 1, "chair")
    # A later judgment is kept as an event but leaves the adjudicated one in force.
    bob.judge(qid, ids[0], 0)
    assert ann.judgments(qid) == {ids[0]: 1, ids[1]: 1}
    ranking = [ids[0], ids[1], ids[2]]
    live = live_metrics(ranking, ann.judgments(qid), 2)
    assert live.metrics.P == 1.0  # both top photos relevant: the adjudication counts
    view = judgment_view(library, qid, NEWEST)
    assert view.judgments == {ids[0]: 1, ids[1]: 1} and "adjudicated" in view.label
    assert judgment_view(library, qid, ADJUDICATED).judgments == {ids[0]: 1}
    assert judgment_view(library, qid, "bob").judgments == {ids[0]: 0, ids[1]: 1}
    assert judgment_view(library, qid, MAJORITY).judgments == {ids[0]: 1, ids[1]: 1}
    # The adjudication is no judge's mark: agreement still sees ann and bob disagree.
    assert judge_ratings(library, qid)[ids[0]] == {"ann": 1, "bob": 0}
    (settled,) = disagreements(library, qid)
    assert settled.adjudicated == 1
    assert disagreements(library, qid, settled_too=False) == []
    adjudicate(library, qid, ids[0], None, "chair")  # taken back: the newest counts again
    assert ann.judgments(qid)[ids[0]] == 0


def test_majority_ties_go_to_the_newest_judgment():
    ratings = {1: {"a": 1, "b": 0}, 2: {"a": 1, "b": 1, "c": 0}, 3: {"a": 0, "b": 1}}
    assert majority(ratings, {1: 0, 2: 0, 3: 1}) == {1: 0, 2: 1, 3: 1}
    assert majority({4: {"a": 1, "b": 0}}, {}) == {4: 0}  # no newest known: not relevant


def test_a_certified_recall_is_recorded_with_its_query(sqlite_library):
    ids = image_ids(sqlite_library)
    store = QueryStore(sqlite_library, user="ann")
    qid = store.find_or_create_query("kingfisher")
    relevant = set(ids[:6])
    judgments = {i: int(i in relevant) for i in ids}
    state = certify_recall(ids, judgments, target=0.5, confidence=0.5, seed=qid)
    assert state.certified
    with pytest.raises(Exception, match="not certified"):
        record_certificate(sqlite_library, qid, certify_recall(ids, {}, seed=qid))
    record_certificate(sqlite_library, qid, state, "ann")
    kept = certificates(sqlite_library)[qid]
    assert (kept.target, kept.confidence, kept.judged, kept.certified_by) == (
        0.5,
        0.5,
        state.judged,
        "ann",
    )
    assert "certified at 50 % confidence" in kept.text() and "Lewis" in kept.text()


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))


def test_judge_names_go_through_export_and_import(sqlite_library, tmp_path):
    from engine.benchmarks.runner import catalog_docid
    from engine.io.export import export_judgments, import_benchmark

    ids = image_ids(sqlite_library)
    ann, bob = QueryStore(sqlite_library, user="ann"), QueryStore(sqlite_library, user="bob")
    qid = ann.find_or_create_query("grebe")
    ann.judge(qid, ids[0], 1)
    ann.judge(qid, ids[1], 0)
    bob.judge(qid, ids[1], 1)
    out = tmp_path / "j.csv"
    assert export_judgments(sqlite_library, out, [qid]) == 2
    rows = _rows(out)
    assert [(r["judge"], r["relevant"], r["judged_as"]) for r in rows] == [
        ("ann", "1", "judgment"),
        ("bob", "1", "judgment"),
    ]
    export_judgments(sqlite_library, out, [qid], view="ann")
    assert [(r["judge"], r["relevant"]) for r in _rows(out)] == [("ann", "1"), ("ann", "0")]
    adjudicate(sqlite_library, qid, ids[1], 0, "chair")
    export_judgments(sqlite_library, out, [qid], view=ADJUDICATED)
    assert [(r["relevant"], r["judged_as"]) for r in _rows(out)] == [("0", "adjudication")]

    # A second judge's file: its judge column wins over --judge; no column: --judge.
    second = tmp_path / "second.csv"
    second.write_text(
        f"query_id,image_id,relevant,judge\n{qid},{catalog_docid(ids[2])},1,dora\n"
        f"{qid},{catalog_docid(ids[3])},0,\n"
        f"{qid},{catalog_docid(ids[1])},1,dora\n"
    )
    import_benchmark(sqlite_library, None, second, judge="eve")
    history = {(h.image_id, h.judged_by) for h in ann.judgment_history(qid)}
    assert (ids[2], "dora") in history and (ids[3], "eve") in history
    assert (ids[1], "dora") in history
    assert ann.judgments(qid)[ids[1]] == 0  # the adjudication still stands
    old = tmp_path / "old.csv"  # an older export, with no judge column
    old.write_text(f"query_id,image_id,relevant\n{qid},{catalog_docid(ids[4])},1\n")
    import_benchmark(sqlite_library, None, old, judge="fay")
    assert (ids[4], "fay") in {(h.image_id, h.judged_by) for h in ann.judgment_history(qid)}


# Two judges' marks of the same six photos in one file (issue 34): ann's lines, then bob's.
#   photo:  0  1  2  3  4  5
#   ann:    1  1  1  0  0  0
#   bob:    1  1  0  0  0  1
# They agree on 4 of 6: raw agreement 2/3. Each judge says relevant for 3 of 6, so chance
# agreement is 1/2 · 1/2 + 1/2 · 1/2 = 1/2 and Cohen's kappa = (2/3 − 1/2) / (1 − 1/2) = 1/3;
# with two judges Fleiss' kappa is the same 1/3. Krippendorff's alpha (nominal): 12 values,
# 6 of each; the two disagreeing photos add 2 to each off-diagonal cell of the coincidence
# table, so alpha = 1 − (12 − 1) · (2 + 2) / (2 · 6 · 6) = 1 − 44/72 = 7/18.
ANN = (1, 1, 1, 0, 0, 0)
BOB = (1, 1, 0, 0, 0, 1)


def two_judges_file(path: Path, qid: int, ids: list[int]) -> Path:
    from engine.benchmarks.runner import catalog_docid

    lines = ["query_id,image_id,relevant,lifeStage,judge"]
    for judge, marks in (("ann", ANN), ("bob", BOB)):
        for index, mark in enumerate(marks):
            stage = ("adult" if judge == "ann" or index == 0 else "juvenile") if index < 2 else ""
            lines.append(f"{qid},{catalog_docid(ids[index])},{mark},{stage},{judge}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_a_file_of_two_judges_imports_each_judges_marks(library, tmp_path):
    from engine.io.export import import_benchmark
    from engine.judgments.agreement import attribute_ratings, measure_agreement

    ids = image_ids(library)
    store = QueryStore(library, user="chair")
    qid = store.find_or_create_query("heron")
    report = import_benchmark(library, None, two_judges_file(tmp_path / "j.csv", qid, ids))
    assert report.judgments == 12
    ratings = judge_ratings(library, qid)
    assert ratings == {ids[i]: {"ann": ANN[i], "bob": BOB[i]} for i in range(6)}
    agreement = measure_agreement(ratings, seed=qid)
    assert agreement.raw.value == pytest.approx(2 / 3)
    assert agreement.pairs[0].kappa.value == pytest.approx(1 / 3)
    assert agreement.fleiss_kappa.value == pytest.approx(1 / 3)
    assert agreement.krippendorff_alpha.value == pytest.approx(7 / 18)
    # Each judge's attribute values are theirs too.
    assert attribute_ratings(library, qid, "lifeStage") == {
        ids[0]: {"ann": "adult", "bob": "adult"},
        ids[1]: {"ann": "adult", "bob": "juvenile"},
    }
    # The photo's judgment is the newest (the file's later line), as two judges judging it in
    # the window would leave it.
    assert store.judgments(qid) == {ids[i]: BOB[i] for i in range(6)}


def test_one_judge_marking_a_photo_twice_differently_is_still_refused(sqlite_library, tmp_path):
    from engine.benchmarks.runner import catalog_docid
    from engine.errors import BadInputError
    from engine.io.export import import_benchmark

    ids = image_ids(sqlite_library)
    qid = QueryStore(sqlite_library).find_or_create_query("egret")
    doc = catalog_docid(ids[0])
    path = tmp_path / "j.csv"
    path.write_text(
        f"query_id,image_id,relevant,judge\n{qid},{doc},1,ann\n{qid},{doc},1,bob\n"
        f"{qid},{doc},0,ann\n"
    )
    with pytest.raises(BadInputError, match=r"line 4: .* judged 0 here but 1 on line 2 by ann"):
        import_benchmark(sqlite_library, None, path)
    assert judge_ratings(sqlite_library, qid) == {}  # nothing was imported


def test_quadrat_agreement_measures_an_imported_file_of_two_judges(
    sqlite_library, tmp_path, capsys
):
    from app.cli import main

    ids = image_ids(sqlite_library)
    qid = QueryStore(sqlite_library).find_or_create_query("bittern")
    path = two_judges_file(tmp_path / "j.csv", qid, ids)
    root = str(sqlite_library.root)
    sqlite_library.close()
    assert main(["import", "--judgments", str(path), "--library", root]) == 0
    assert "12 judgments imported" in capsys.readouterr().out
    assert main(["agreement", "--query", "bittern", "--library", root, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["judges"], out["photos"], out["judgments"]) == (["ann", "bob"], 6, 12)
    assert out["raw_agreement"]["value"] == pytest.approx(2 / 3, abs=1e-4)
    assert out["pairs"][0]["cohen_kappa"]["value"] == pytest.approx(1 / 3, abs=1e-4)
    assert out["pairs"][0]["table"] == [[2, 1], [1, 2]]
    assert out["krippendorff_alpha"]["value"] == pytest.approx(7 / 18, abs=1e-4)
    # Each attribute's line names it as the window does.
    assert main(["agreement", "--query", "bittern", "--library", root]) == 0
    assert "Life stage (lifeStage): 2 photos by 2 judges" in capsys.readouterr().out


def test_the_judge_setting_is_stored_and_read_back(tmp_path):
    from app.settings import Settings, load_settings, save_settings

    path = save_settings(Settings(judge_name="ann"), tmp_path / "settings.json")
    assert json.loads(path.read_text())["judge_name"] == "ann"
    assert load_settings(path).settings.judge_name == "ann"
    assert Settings(judge_name=" ann").problems()


def test_quadrat_adjudicate_lists_and_settles(sqlite_library, capsys):
    from app.cli import main

    ids = image_ids(sqlite_library)
    ann, bob = QueryStore(sqlite_library, user="ann"), QueryStore(sqlite_library, user="bob")
    qid = ann.find_or_create_query("dipper")
    ann.judge(qid, ids[0], 1)
    bob.judge(qid, ids[0], 0)
    root = str(sqlite_library.root)
    sqlite_library.close()
    assert main(["adjudicate", "--query", "dipper", "--library", root, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["disagreements"][0]["image_id"] == ids[0]
    assert {m["judge"] for m in listed["disagreements"][0]["marks"]} == {"ann", "bob"}
    code = main([
        "adjudicate", "--query", str(qid), "--image", str(ids[0]), "--relevant",
        "--judge", "chair", "--library", root,
    ])  # fmt: skip
    assert code == 0
    assert "adjudicated relevant" in capsys.readouterr().out
    with Library.open(Path(root)) as lib:
        history = QueryStore(lib, user="x").judgment_history(qid)
        assert (history[-1].judged_by, history[-1].relevance) == ("chair", 1)
        assert QueryStore(lib, user="x").judgments(qid) == {ids[0]: 1}
    assert main(["adjudicate", "--query", "dipper", "--library", root]) == 0
    assert "→ adjudicated relevant" in capsys.readouterr().out
    assert main(["adjudicate", "--query", "dipper", "--image", "999999", "--relevant",
                 "--library", root]) != 0  # fmt: skip


def test_the_darwin_core_methods_name_the_certificate_and_adjudications(judged, tmp_path):  # noqa: F811
    import zipfile
    from xml.etree import ElementTree as ET

    from engine.io.dwc import export_dwca

    out = tmp_path / "records.zip"
    with Library.open(judged.root) as library:
        ids = judged.relevant + judged.not_relevant
        QueryStore(library, user="bob").judge(judged.query_id, ids[0], 0)
        adjudicate(library, judged.query_id, ids[0], 1, "chair")
        judgments = {i: int(i in judged.relevant) for i in ids}
        state = certify_recall(ids, judgments, target=0.5, confidence=0.5, seed=judged.query_id)
        record_certificate(library, judged.query_id, state, "chair")
        export_dwca(library, judged.query_id, out, creator="Dr Sedge")
    with zipfile.ZipFile(out) as archive:
        root = ET.fromstring(archive.read("eml.xml"))
    methods = " ".join(p.text or "" for p in root.iterfind(".//methods//description/para"))
    assert "Recall: recall of at least 50 % certified at 50 % confidence" in methods
    assert "an adjudicated judgment settled 1 photo." in methods


def test_quadrat_export_and_import_take_a_judge(sqlite_library, tmp_path, capsys):
    from app.cli import main

    ids = image_ids(sqlite_library)
    ann, bob = QueryStore(sqlite_library, user="ann"), QueryStore(sqlite_library, user="bob")
    qid = ann.find_or_create_query("wagtail")
    ann.judge(qid, ids[0], 1)
    bob.judge(qid, ids[0], 0)  # a tie: the newest (bob's) decides the majority
    ann.judge(qid, ids[1], 1)
    root = str(sqlite_library.root)
    sqlite_library.close()
    out = tmp_path / "majority.csv"
    args = ["export", "judgments", str(out), "--query", str(qid), "--library", root]
    assert main([*args, "--judge", "majority"]) == 0
    assert [(r["relevant"], r["judge"]) for r in _rows(out)] == [
        ("0", "majority"),
        ("1", "majority"),
    ]
    assert main([*args, "--judge", "ann"]) == 0
    assert [r["relevant"] for r in _rows(out)] == ["1", "1"]
    assert main([*args, "--judge", "zed"]) != 0  # no such judge: said, not an empty file
    capsys.readouterr()
    plain = tmp_path / "plain.csv"
    plain.write_text(f"query_id,image_id,relevant\n{qid},quadrat-{ids[2]},1\n")
    assert main(["import", "--judgments", str(plain), "--judge", "gil", "--library", root]) == 0
    with Library.open(Path(root)) as lib:
        last = QueryStore(lib, user="x").judgment_history(qid)[-1]
    assert (last.image_id, last.judged_by) == (ids[2], "gil")
