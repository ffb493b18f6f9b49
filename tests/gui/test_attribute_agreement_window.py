"""Judge › Agreement… on an attribute: the term picker lists the Darwin Core terms two judges
gave values for, and choosing one shows the statistics over the values and the photos whose
values differ, side by side (issue 28)."""

from __future__ import annotations

import os

from engine.judgments.attributes import set_attributes
from engine.judgments.queries import QueryStore
from tests.gui.test_agreement_window import judges_app, top_ids, wait_written  # noqa: F401


def test_the_agreement_dialog_measures_an_attribute(qtbot, judges_app) -> None:  # noqa: F811
    app = judges_app
    ids = top_ids(app, 3)
    query_id = app.judging.query_id
    assert query_id is not None
    for image_id in ids:
        app.judging.judge(image_id, 1)
    wait_written(qtbot, app)
    library = app.session.library
    bob = QueryStore(library, user="bob")
    for image_id, ann_value, bob_value in zip(
        ids, ["adult", "larva", "adult"], ["adult", "adult", "adult"], strict=True
    ):
        set_attributes(library, query_id, image_id, {"lifeStage": ann_value}, "ann")
        bob.judge(query_id, image_id, 1)
        set_attributes(library, query_id, image_id, {"lifeStage": bob_value}, "bob")

    dialog = app.agreement.open_dialog()
    assert dialog is not None
    picker = dialog.term_picker
    qtbot.waitUntil(lambda: picker.findData("lifeStage") >= 0, timeout=20_000)
    assert [picker.itemText(i) for i in range(picker.count())] == [
        "Relevance",
        "Life stage (lifeStage)",
    ]
    picker.setCurrentIndex(picker.findData("lifeStage"))
    qtbot.waitUntil(lambda: "lifeStage" in dialog.title.text(), timeout=20_000)
    assert "0.667" in dialog.statistics.text()  # raw agreement: 2 of 3 photos
    assert dialog.table.rowCount() == 1
    header = [dialog.table.horizontalHeaderItem(c).text() for c in range(3)]
    assert header == ["Photo", "ann", "bob"]
    assert [dialog.table.item(0, c).text() for c in (1, 2)] == ["larva", "adult"]
    assert (
        dialog.disagreements_label.text()
        == "1 photo with different values of Life stage (lifeStage)"
    )
    if os.environ.get("QUADRAT_SHOT"):
        dialog.grab().save(os.environ["QUADRAT_SHOT"])
    picker.setCurrentIndex(0)  # back to relevance: the judges agree on every photo
    qtbot.waitUntil(lambda: "lifeStage" not in dialog.title.text(), timeout=20_000)
    assert dialog.table.rowCount() == 0
