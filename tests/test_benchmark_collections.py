"""Benchmarks that say what they ranked: a second collection of unjudged copies of the demo
photos lowers the scores when both are ranked; by default the collection that holds every
judged photo is ranked alone, and the output names it and gives judged@k per query."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from app.cli import main
from engine.evaluation.evaluate import BenchmarkJudgment
from tests.gui.conftest import make_app  # noqa: F401 - the window fixture, for the last test


def run_cli(capsys, *args: object) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def evaluate(capsys, photos: Path, lib: Path, *extra: str) -> dict:
    """`quadrat evaluate --k 10 --json` on the demo benchmark files; returns the JSON."""
    code, out, err = run_cli(
        capsys, "evaluate", "--queries", photos / "queries.csv",
        "--judgments", photos / "judgments.csv", "--library", lib, "--k", "10", "--json", *extra,
    )  # fmt: skip
    assert code == 0, err
    return json.loads(out)


def add_copies(photos: Path, dest: Path) -> Path:
    """Unjudged copies of the demo photos under the same relative paths (no metadata file, so
    nothing but the catalog tells them from the originals)."""
    shutil.copytree(photos / "train", dest / "train")
    return dest


def index(capsys, folder: Path, lib: Path) -> None:
    code, _, err = run_cli(capsys, "index", folder, "--library", lib, "--model", "demo")
    assert code == 0, err


def test_the_default_ranks_the_judged_collection_alone_and_says_so(capsys, tmp_path, photos):
    lib = tmp_path / "lib"
    index(capsys, photos, lib)
    alone = evaluate(capsys, photos, lib)
    assert [c["name"] for c in alone["collections"]] == ["photos"]

    index(capsys, add_copies(photos, tmp_path / "copies"), lib)
    both = evaluate(capsys, photos, lib, "--collection", "all")
    default = evaluate(capsys, photos, lib)

    # Ranking the copies too pushes judged photos down: every score falls.
    assert both["mAP@10"] < alone["mAP@10"] - 0.05
    assert sorted(c["name"] for c in both["collections"]) == ["copies", "photos"]
    assert both["all_collections"] is True and both["judged_collection"] == "photos"
    # The default finds the collection the judgments name and gives back the demo-alone value.
    assert default["mAP@10"] == pytest.approx(alone["mAP@10"], abs=1e-12)
    assert default["nDCG@10"] == pytest.approx(alone["nDCG@10"], abs=1e-12)
    assert [c["name"] for c in default["collections"]] == ["photos"]
    assert default["all_collections"] is False
    assert "alone" in default["collection_note"] and "'photos'" in default["collection_note"]
    # docs/SPEC.md §5.4 keys stay; judged@k comes per query, and it drops with the unjudged copies.
    assert {"queries", "mAP@10", "nDCG@10", "MRR@10", "per_query", "per_supercategory"} <= set(
        default
    )
    for row in default["per_query"]:
        assert {"query_id", "AP", "nDCG", "RR", "R", "judged", "unjudged"} <= set(row)
    judged = {row["query_id"]: row for row in both["per_query"]}
    assert judged["1"]["judged"] + judged["1"]["unjudged"] / 10 == pytest.approx(1.0)
    assert both["judged@10"] < default["judged@10"]
    assert sum(r["unjudged"] for r in both["per_query"]) > sum(
        r["unjudged"] for r in default["per_query"]
    )

    # Naming the collection does the same as the default; an unknown one says what there is.
    named = evaluate(capsys, photos, lib, "--collection", "photos")
    assert named["mAP@10"] == pytest.approx(alone["mAP@10"], abs=1e-12)
    code, out, err = run_cli(
        capsys, "evaluate", "--queries", photos / "queries.csv",
        "--judgments", photos / "judgments.csv", "--library", lib, "--collection", "meadow",
    )  # fmt: skip
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1
    assert "'meadow'" in err and "'copies'" in err and "'photos'" in err and "'all'" in err


def test_the_tables_name_the_collections_and_show_judged_at_k(capsys, tmp_path, photos):
    lib = tmp_path / "lib"
    index(capsys, photos, lib)
    index(capsys, add_copies(photos, tmp_path / "copies"), lib)
    code, out, err = run_cli(
        capsys, "evaluate", "--queries", photos / "queries.csv",
        "--judgments", photos / "judgments.csv", "--library", lib, "--k", "10",
    )  # fmt: skip
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("Ranking the collection 'photos' (108 photos) alone")
    header = next(line for line in lines if line.startswith("query"))
    assert "judged m1" in header
    assert any(line.startswith("judged@10") for line in lines)


def test_judgments_spread_over_two_collections_rank_both(tmp_path):
    from engine.benchmarks.runner import ALL_COLLECTIONS, choose_collections
    from engine.catalog import Collection, Image
    from engine.catalog.library import Library

    with Library.open(tmp_path / "lib") as lib:
        with lib.catalog.session() as s:
            for name in ("north", "south"):
                coll = Collection(root=str(tmp_path / name), name=name)
                s.add(coll)
                s.flush()
                s.add(Image(collection_id=coll.id, rel_path=f"{name}.jpg", size=1, mtime_ns=1))
        spread = [
            BenchmarkJudgment("1", None, "north.jpg", 1),
            BenchmarkJudgment("1", None, "south.jpg", 1),
        ]
        choice = choose_collections(lib, spread)
        assert choice.everything and choice.match.only is None
        assert "more than one" in choice.note
        one = choose_collections(lib, spread[:1])
        assert [c.name for c in one.ranked] == ["north"] and not one.everything
        assert choose_collections(lib, spread[:1], ALL_COLLECTIONS).everything


@pytest.mark.qt_log_ignore("does not support propagateSizeHints")
def test_the_benchmark_view_offers_the_matching_collection(qtbot, make_app, photos, tmp_path):  # noqa: F811
    from tests.gui.test_window import index as index_in_window
    from tests.gui.test_window import wait_ready

    app = make_app()
    wait_ready(qtbot, app)
    index_in_window(qtbot, app, photos)
    index_in_window(qtbot, app, add_copies(photos, tmp_path / "copies"))
    qtbot.waitUntil(lambda: app.session.ready, timeout=20_000)

    dialog = app.open_benchmark()
    combo = dialog.collection_combo
    dialog.set_files(str(photos / "queries.csv"), str(photos / "judgments.csv"))
    qtbot.waitUntil(lambda: combo.count() == 4, timeout=10_000)  # automatic, all, 2 folders
    assert "photos" in combo.itemText(0)  # the automatic choice names the matching collection
    assert "alone" in dialog.collection_note.text()
    dialog.k_combo.setCurrentIndex(dialog.k_combo.findData(10))

    def run() -> object:
        with qtbot.waitSignal(app.benchmark.finished, timeout=60_000) as blocker:
            dialog.run_button.click()
        assert blocker.args[0] is not None
        return blocker.args[0]

    alone = run()
    tree = dialog.per_query
    headers = [tree.headerItem().text(c) for c in range(tree.columnCount())]
    # The demo's judgments list the relevant photos of the collection they were made on, so
    # every photo is judged: the view shows k's metrics and no judged@k / unjudged columns.
    assert headers[3:7] == ["AP@10", "nDCG@10", "RR@10", "R"] and len(headers) == 7
    assert "'photos' (108 photos) alone" in dialog.collection_note.text()

    combo.setCurrentIndex(combo.findData("all"))
    both = run()
    assert both.results["text"].mean.mAP < alone.results["text"].mean.mAP - 0.05
    assert "all 2 collections" in dialog.collection_note.text()
    summary = dialog.summary
    judged_column = summary.columnCount() - 1
    assert summary.headerItem().text(judged_column) == "judged@10"
    assert float(summary.topLevelItem(0).text(judged_column)) < 1.0
