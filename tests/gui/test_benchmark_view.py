"""The benchmark view reads as a report: named columns before any run, a legend for Δ, the
interval and p, a verdict per method, the methods side by side per category, no "unjudged"
counts for an exhaustive labelling, its files found in any collection folder that has them,
and Ctrl+Q quitting from it as from the main window."""

from __future__ import annotations

import csv

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QTreeWidget

from tests.gui.test_window import indexed_app


def headers(tree: QTreeWidget) -> list[str]:
    item = tree.headerItem()
    return [item.text(column) for column in range(tree.columnCount())]


def test_empty_tables_name_their_columns(qtbot, make_app) -> None:
    app = make_app(start=False)
    dialog = app.open_benchmark()
    # Before any run every table says what it will hold; none reads Qt's default "1".
    assert headers(dialog.summary)[:3] == ["Method", "Queries", "mAP@50"]
    assert headers(dialog.per_query)[:3] == ["Query", "Text", "Method"]
    assert headers(dialog.per_category)[:3] == ["Column", "Value", "Queries"]
    for tree in (dialog.summary, dialog.per_query, dialog.per_category):
        assert "1" not in headers(tree)


def test_a_hand_added_demo_folder_fills_in_its_benchmark_files(qtbot, make_app, photos) -> None:
    app = indexed_app(qtbot, make_app, photos)  # added as any folder is, not with --demo
    dialog = app.open_benchmark()
    qtbot.waitUntil(lambda: dialog.queries_edit.text() == str(photos / "queries.csv"))
    assert dialog.judgments_edit.text() == str(photos / "judgments.csv")
    # ... and the judgments are matched to the collection, as for a file chosen by hand.
    qtbot.waitUntil(lambda: "photos" in dialog.collection_combo.itemText(0))


def test_a_comparison_reads_side_by_side_with_its_legend(qtbot, make_app, photos, tmp_path):
    app = indexed_app(qtbot, make_app, photos)
    dialog = app.open_benchmark()
    dialog.set_files(str(photos / "queries.csv"), str(photos / "judgments.csv"))
    dialog.method_boxes["hybrid"].setChecked(True)
    dialog.k_combo.setCurrentIndex(dialog.k_combo.findData(10))
    with qtbot.waitSignal(app.benchmark.finished, timeout=120_000) as blocker:
        dialog.run_button.click()
    outcome = blocker.args[0]
    assert outcome is not None

    # The comparison says what p is and what counts as significant, and gives a verdict.
    legends = [
        label
        for label in dialog.findChildren(QLabel)
        if "significant" in label.text() and label.isVisibleTo(dialog)
    ]
    assert len(legends) == 1 and "p:" in legends[0].text() and "0.05" in legends[0].text()
    summary = headers(dialog.summary)
    assert "Verdict" in summary and "p" in summary
    tip = dialog.summary.headerItem().toolTip(summary.index("p"))
    assert "significant" in tip
    hybrid = next(
        dialog.summary.topLevelItem(row)
        for row in range(dialog.summary.topLevelItemCount())
        if dialog.summary.topLevelItem(row).text(0) == "hybrid"
    )
    assert hybrid.text(summary.index("Verdict")) in {
        "no clear difference",
        "better (p < 0.05)",
        "worse (p < 0.05)",
    }

    # Per category: one row per category, the two methods in columns beside each other.
    per_category = headers(dialog.per_category)
    assert per_category[3:5] == ["mAP@10 text", "mAP@10 hybrid"]
    groups = {
        (value, group)
        for value, groups in outcome.results["text"].by_category.items()
        for group in groups
    }
    assert dialog.per_category.topLevelItemCount() == len(groups)
    first = dialog.per_category.topLevelItem(0)
    column, value = first.text(0), first.text(1)
    expected = outcome.results["hybrid"].by_category[column][value].mAP
    assert first.text(per_category.index("mAP@10 hybrid")) == f"{expected:.3f}"

    # The demo's judgments list only relevant photos, an exhaustive labelling: no photo is
    # unjudged, so no column claims 9 of every top 10 are.
    assert not any("judged" in name.lower() for name in headers(dialog.per_query))
    assert not any("judged" in name.lower() for name in summary)
    assert "only relevant photos" in dialog.status.text()
    # The export says the same: no unjudged counts.
    out = tmp_path / "bench.csv"
    handle = app.benchmark.export(str(out))
    qtbot.waitUntil(lambda: handle.done, timeout=5_000)
    rows = [r for r in csv.DictReader(out.open(encoding="utf-8")) if r["level"] == "query"]
    assert len(rows) == 120 and {r["unjudged"] for r in rows} == {""}


def test_ctrl_q_in_the_benchmark_view_quits(qtbot, make_app) -> None:
    app = make_app(start=False)
    dialog = app.open_benchmark()
    dialog.activateWindow()
    qtbot.waitUntil(dialog.isActiveWindow)
    assert app.window.isVisible()
    qtbot.keyClick(dialog.run_button, Qt.Key.Key_Q, Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(lambda: not app.window.isVisible(), timeout=5_000)
