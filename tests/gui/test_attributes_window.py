"""The detail pane's attributes (Darwin Core terms) in the window: an edit is stored for the
shown photo and the open query, an off-vocabulary value is flagged, Ctrl+Z takes an edit back,
and a query preset fills a photo judged relevant, shown in the pane."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox, QLabel, QLineEdit

from app.controllers.application import Application
from engine.judgments.attributes import attribute_history, attributes_of, set_attributes
from engine.judgments.queries import QueryStore
from tests.gui.test_agreement_window import judges_app, top_ids  # noqa: F401
from tests.gui.test_judging import focus_grid, open_search
from tests.gui.test_window import indexed_app


@pytest.fixture
def described_app(qtbot, make_app, photos) -> Application:
    app = indexed_app(qtbot, make_app, photos)
    app.window.resize(1280, 800)
    app.window.detail_dock.show()
    open_search(qtbot, app, "red circle")
    return app


def select(qtbot, app: Application, row: int) -> int:
    """Select a row and wait until its attributes are in the editor; its image id."""
    focus_grid(qtbot, app, row)
    image_id = app.window.results_model.item(row).image_id
    qtbot.waitUntil(
        lambda: (
            app.attributes.shown == (app.judging.query_id, image_id)
            and app.attributes.editor.form.isEnabled()
        ),
        timeout=5_000,
    )
    return image_id


def type_into(qtbot, box: QComboBox | QLineEdit, text: str) -> None:
    """Type `text` over the field's value and press Enter, as a user does."""
    line = box.lineEdit() if isinstance(box, QComboBox) else box
    assert line is not None
    line.setFocus()
    line.selectAll()
    qtbot.keyClicks(line, text)
    qtbot.keyClick(line, Qt.Key.Key_Return)


def test_editing_a_field_in_the_pane_stores_it_for_the_shown_photo(qtbot, described_app):
    app = described_app
    library, query_id = app.judging.store.library, app.judging.query_id
    image_id = select(qtbot, app, 1)
    form = app.attributes.editor.form
    assert form.isVisible(), "the editor shows in the detail pane"

    type_into(qtbot, form.input("lifeStage"), "Juvenile")
    type_into(qtbot, form.input("behavior"), "foraging|courtship")
    expected = {"behavior": "foraging | courtship", "lifeStage": "juvenile"}
    qtbot.waitUntil(lambda: attributes_of(library, query_id, image_id) == expected, timeout=5_000)
    # Shown as stored, and every change is an event with who made it.
    qtbot.waitUntil(lambda: form.text("behavior") == "foraging | courtship", timeout=5_000)
    history = attribute_history(library, query_id)
    assert {(r.term, r.changed_by) for r in history} == {
        ("lifeStage", app.judging.store.user),
        ("behavior", app.judging.store.user),
    }

    # Another photo shows its own (none); coming back shows the stored values.
    select(qtbot, app, 2)
    assert form.text("lifeStage") == "" and form.text("behavior") == ""
    select(qtbot, app, 1)
    assert form.text("lifeStage") == "juvenile"

    # A stage no vocabulary lists is kept as typed, and marked.
    type_into(qtbot, form.input("lifeStage"), "instar III")
    qtbot.waitUntil(
        lambda: attributes_of(library, query_id, image_id).get("lifeStage") == "instar III",
        timeout=5_000,
    )
    box = form.input("lifeStage")
    assert box.property("offVocabulary") is True
    assert "kept as typed" in box.toolTip()

    # Ctrl+Z (the window's undo) takes the last edit back.
    app.window.undo_judgment_action.trigger()
    qtbot.waitUntil(
        lambda: attributes_of(library, query_id, image_id).get("lifeStage") == "juvenile",
        timeout=5_000,
    )
    qtbot.waitUntil(lambda: form.text("lifeStage") == "juvenile", timeout=5_000)
    assert box.property("offVocabulary") is False


def test_a_query_preset_fills_a_photo_judged_relevant_and_undo_takes_it_back(qtbot, described_app):
    app = described_app
    library, query_id = app.judging.store.library, app.judging.query_id
    asked: list[dict[str, str]] = []

    def ask(_fields, _title, values):
        asked.append(values)
        return {"reproductiveCondition": "Flowering"}

    app.attributes._ask_presets = ask
    image_id = select(qtbot, app, 0)
    with qtbot.waitSignal(app.attributes.presetsSaved, timeout=5_000):
        app.attributes.editor.presets_button.click()
    assert asked == [{}]
    assert (
        "Reproductive condition (reproductiveCondition) = flowering"
        in app.attributes.editor.presets_label.text()
    )

    focus_grid(qtbot, app, 0)
    qtbot.keyClick(app.window.results, Qt.Key.Key_R)
    qtbot.waitUntil(
        lambda: (
            attributes_of(library, query_id, image_id) == {"reproductiveCondition": "flowering"}
        ),
        timeout=5_000,
    )
    app.judging.view.select_row(0)
    form = app.attributes.editor.form
    qtbot.waitUntil(lambda: form.text("reproductiveCondition") == "flowering", timeout=5_000)

    app.window.undo_judgment_action.trigger()
    qtbot.waitUntil(lambda: attributes_of(library, query_id, image_id) == {}, timeout=5_000)
    assert app.judging.store.judgments(query_id) == {}
    qtbot.waitUntil(lambda: form.text("reproductiveCondition") == "", timeout=5_000)


def test_a_preset_set_after_judging_is_offered_to_the_photos_judged_before(qtbot, described_app):
    """Issue 34: a preset reached only photos judged after it was set, though its dialog said
    every relevant photo gets it. Now OK offers it to the photos judged before, with their
    count; Apply fills them, and one Ctrl+Z takes the whole fill back."""
    from tests.gui.test_backups_window import judged

    app = described_app
    library, query_id = app.judging.store.library, app.judging.query_id
    model = app.window.results_model
    ids = [model.item(row).image_id for row in range(5)]
    judged(qtbot, app, {ids[0]: 1, ids[1]: 1, ids[2]: 1, ids[3]: 0})
    set_attributes(library, query_id, ids[1], {"lifeStage": "juvenile"})  # its own value
    questions: list[tuple[str, int]] = []

    def ask_fill(question: str, photos: int) -> bool:
        questions.append((question, photos))
        return True

    app.attributes._ask_presets = lambda _fields, _title, _values: {"lifeStage": "Adult"}
    app.attributes._ask_fill = ask_fill
    select(qtbot, app, 0)
    with qtbot.waitSignal(app.attributes.presetsFilled, timeout=5_000) as filled:
        app.attributes.editor.presets_button.click()
    assert filled.args == [query_id, 2]
    assert questions == [
        (
            "Apply Life stage (lifeStage) = adult to the 2 relevant photos judged before? "
            "Photos with their own value keep it. Undo the last judgment (Ctrl+Z) takes it "
            "back.",
            2,
        )
    ]
    assert {i: attributes_of(library, query_id, i).get("lifeStage") for i in ids} == {
        ids[0]: "adult", ids[1]: "juvenile", ids[2]: "adult", ids[3]: None, ids[4]: None
    }  # fmt: skip
    who = {(r.image_id, r.changed_by) for r in attribute_history(library, query_id)}
    assert (ids[0], app.judging.store.user) in who
    form = app.attributes.editor.form
    qtbot.waitUntil(lambda: form.text("lifeStage") == "adult", timeout=5_000)
    assert "presets given to 2 photos" in app.window.status_line.text()

    # One undo takes back the whole fill, and the pane shows it; the judgments stay.
    app.window.undo_judgment_action.trigger()
    qtbot.waitUntil(
        lambda: (
            attributes_of(library, query_id, ids[0]) == {}
            and attributes_of(library, query_id, ids[2]) == {}
        ),
        timeout=5_000,
    )
    assert attributes_of(library, query_id, ids[1]) == {"lifeStage": "juvenile"}
    qtbot.waitUntil(lambda: form.text("lifeStage") == "", timeout=5_000)
    assert app.judging.store.judgments(query_id) == {ids[0]: 1, ids[1]: 1, ids[2]: 1, ids[3]: 0}

    # The dialog says what OK does: from now on, and an offer for the photos judged before.
    from widgets.attributes_editor import PresetsDialog

    dialog = PresetsDialog(app.attributes.fields, "red circle", {})
    qtbot.addWidget(dialog)
    intro = dialog.findChild(QLabel).text()
    assert "from now on" in intro and "already judged relevant are offered" in intro


def test_the_pane_and_every_dialog_name_each_term_alike(qtbot, judges_app):  # noqa: F811
    """Issue 34: the pane said Behaviour, Phenology, Alive or dead where the dialogs and files
    said behavior, reproductiveCondition, vitality. Now one caption per term, naming it."""
    from engine.judgments.dwc_terms import DWC_ATTRIBUTE_TERMS
    from widgets.attributes_editor import PresetsDialog

    app = judges_app
    image_id = top_ids(app, 1)[0]
    query_id = app.judging.query_id
    library = app.session.library
    values = {
        "behavior": "foraging", "lifeStage": "adult", "sex": "hermaphrodite",
        "reproductiveCondition": "flowering", "vitality": "alive",
        "associatedTaxa": "Salvia", "occurrenceRemarks": "on a wall",
    }  # fmt: skip
    for judge in ("ann", "bob"):  # two judges' values: the agreement dialog offers every term
        QueryStore(library, user=judge).judge(query_id, image_id, 1)
        set_attributes(library, query_id, image_id, values, judge)

    pane = {term: app.attributes.editor.form.label(term) for term in DWC_ATTRIBUTE_TERMS}
    presets = PresetsDialog(app.attributes.fields, "red circle", {})
    qtbot.addWidget(presets)
    agreement = app.agreement.open_dialog()
    assert agreement is not None
    picker = agreement.term_picker
    qtbot.waitUntil(lambda: picker.count() == 1 + len(DWC_ATTRIBUTE_TERMS), timeout=20_000)
    question = app.questions.open_dialog()
    assert question is not None
    qtbot.addWidget(question)
    for term in DWC_ATTRIBUTE_TERMS:
        shown = {
            pane[term],
            presets.form.label(term),
            picker.itemText(picker.findData(term)),
            question.term_box.itemText(question.term_box.findData(term)),
        }
        assert len(shown) == 1, shown
        assert term.casefold() in pane[term].casefold()  # a user finds the file's column
    assert pane["reproductiveCondition"] == "Reproductive condition (reproductiveCondition)"
    assert pane["vitality"] == "Vitality" and pane["behavior"] == "Behavior"
    question.term_box.setCurrentIndex(question.term_box.findData("vitality"))
    question.value_edit.setText("dead")
    assert question.question() == ("vitality", "dead")
