"""Attribute questions: answers from stored attributes, cross-validation, the learning curve,
calibrated suggestions over the collection, accepting and rejecting, and the command line.

The demo collection's metadata says what each photo shows (background, count), so a question
such as "is it striped?" has a known answer for every photo."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from engine.errors import BadInputError
from engine.judgments import attribute_questions as aq
from engine.judgments.attribute_questions import (
    AttributeQuestion,
    CurvePoint,
    ask_collection,
    cross_validate,
    labels_from_attributes,
    learning_curve,
    wilson_interval,
)

# -- answers ----------------------------------------------------------------------------------


def test_question_parses_term_any_case_and_refuses_unknown_terms() -> None:
    assert AttributeQuestion.parse("lifestage = juvenile") == AttributeQuestion(
        "lifeStage", "juvenile"
    )
    with pytest.raises(BadInputError, match="unknown attribute"):
        AttributeQuestion.parse("colour=red")
    with pytest.raises(BadInputError, match="TERM=VALUE"):
        AttributeQuestion.parse("lifeStage")


def test_answers_from_attributes() -> None:
    flowering = AttributeQuestion("reproductiveCondition", "flowering")
    courtship = AttributeQuestion("behavior", "courtship")
    attributes = {
        1: {"reproductiveCondition": "Flowering"},  # any case
        2: {"reproductiveCondition": "fruiting"},  # another value of a one-value term: no
        3: {"reproductiveCondition": "not flowering"},  # a rejected suggestion: no
        4: {"lifeStage": "adult"},  # does not answer
        5: {"behavior": "foraging|courtship"},  # a pipe list holding it: yes
        6: {"behavior": "foraging"},  # free text noticing something else: no answer
        7: {"behavior": "not courtship"},
    }
    assert labels_from_attributes(attributes, flowering) == {1: 1, 2: 0, 3: 0}
    assert labels_from_attributes(attributes, courtship) == {5: 1, 7: 0}


def test_wilson_interval_by_hand() -> None:
    # 8 of 10 at 95 %: (0.4902, 0.9433), the textbook value.
    low, high = wilson_interval(8, 10, 0.95)
    assert low == pytest.approx(0.4902, abs=1e-4)
    assert high == pytest.approx(0.9433, abs=1e-4)


def test_a_perfect_score_still_has_an_interval() -> None:
    # 20 of 20 yes and 40 of 40 no answered right is not a certainty: Jeffreys' intervals
    y = np.asarray([1] * 20 + [0] * 40)
    low, high = aq._balanced_interval(y, y.copy(), 0.95, 4000, 0)
    assert 0.9 < low < 0.99 and high == pytest.approx(1.0, abs=1e-3)


def test_judgments_needed_interpolates_and_extrapolates() -> None:
    between = aq._judgments_needed([CurvePoint(10, 0.8, 0.8, 5), CurvePoint(20, 1.0, 1.0, 5)], 0.9)
    assert between[0] == math.ceil(math.sqrt(10 * 20))  # halfway on a log scale: 14.1 -> 15
    assert not between[1]
    # error 0.4 at 10, 0.2 at 40: error ~ n^-1/2, so 0.15 at 10 * (0.4 / 0.15)^2 = 71.1
    points = [CurvePoint(10, 0.6, 0.6, 5), CurvePoint(40, 0.8, 0.8, 5)]
    beyond = aq._judgments_needed(points, 0.85)
    assert beyond[0] == 72 and beyond[1]
    assert "about 72 judgments (extrapolated beyond 40)" in beyond[2]
    # 0.05 would take 640: more than 4 times the judgments tried, so the curve does not say
    far = aq._judgments_needed(points, 0.95)
    assert far[0] is None and "not reached: 0.80 at 40 judgments" in far[2]


def test_too_few_answers_are_refused_in_one_line() -> None:
    vectors = np.eye(6)
    with pytest.raises(BadInputError, match="judge at least 3 of each"):
        cross_validate(vectors, [1, 1, 0, 0, 0, 0])


# -- on the demo ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def demo_truth(cli_indexed_demo: Path, demo_collection) -> dict[int, dict[str, object]]:
    """image id -> the demo metadata's attributes (count, background) for every photo."""
    from engine.catalog import Image
    from engine.catalog.library import Library

    metadata = json.loads(demo_collection.metadata_path.read_text(encoding="utf-8"))
    by_path = {record["file_name"]: record["attributes"] for record in metadata["images"]}
    with Library.open(cli_indexed_demo) as library, library.catalog.session() as s:
        rows = s.query(Image.id, Image.rel_path).all()
    return {image_id: by_path[rel_path] for image_id, rel_path in rows}


def _demo_vectors(library_path: Path) -> tuple[np.ndarray, np.ndarray]:
    from engine.catalog.library import Library

    with Library.open(library_path) as library:
        assert library.model_key is not None
        return library.load_vectors(library.model_key)


def _judged_sample(truth: np.ndarray, yes: int, no: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.concatenate(
        [
            rng.choice(np.flatnonzero(truth == 1), yes, replace=False),
            rng.choice(np.flatnonzero(truth == 0), no, replace=False),
        ]
    )


def test_is_it_striped_cross_validates_well_above_chance(cli_indexed_demo, demo_truth) -> None:
    ids, vectors = _demo_vectors(cli_indexed_demo)
    truth = np.asarray([int(demo_truth[int(i)]["background"] == "striped") for i in ids])
    judged = _judged_sample(truth, 30, 70)  # 30 of the demo's 40 striped photos
    result = cross_validate(vectors[judged], truth[judged])
    assert (result.judged, result.yes, result.no) == (100, 30, 70)
    assert result.chance == pytest.approx(0.7)
    # well above always saying "no" (0.7), and above a coin for balanced accuracy (0.5)
    assert result.accuracy_low > 0.8, result.summary()
    assert result.balanced_low > 0.75, result.summary()
    assert result.accuracy_low <= result.accuracy <= result.accuracy_high
    assert "cross-validated accuracy" in result.summary()


def test_is_it_a_count_of_two_cross_validates_well_above_chance(
    cli_indexed_demo, demo_truth
) -> None:
    ids, vectors = _demo_vectors(cli_indexed_demo)
    truth = np.asarray([int(demo_truth[int(i)]["count"] == 2) for i in ids])
    judged = np.random.default_rng(1).choice(len(ids), 150, replace=False)  # judged at random
    result = cross_validate(vectors[judged], truth[judged])
    assert result.accuracy_low > result.chance, result.summary()
    assert result.balanced > 0.85, result.summary()
    assert result.auc > 0.9


def test_learning_curve_rises_and_says_how_many_judgments(cli_indexed_demo, demo_truth) -> None:
    ids, vectors = _demo_vectors(cli_indexed_demo)
    truth = np.asarray([int(demo_truth[int(i)]["count"] == 2) for i in ids])
    curve = learning_curve(vectors, truth, sizes=(10, 50, 200), repeats=3, target=0.9)
    assert [p.judgments for p in curve.points] == [10, 50, 200]
    assert curve.points[-1].balanced > curve.points[0].balanced
    assert curve.needed is not None and 10 < curve.needed <= 200, curve.note
    assert f"about {curve.needed} judgments" in curve.note


def test_suggestions_over_the_collection_are_ranked_and_calibrated(
    copy_cli_demo_library, tmp_path, demo_truth
) -> None:
    from engine.catalog.library import Library

    lib = copy_cli_demo_library(tmp_path / "lib")
    ids, _ = _demo_vectors(lib)
    truth = np.asarray([int(demo_truth[int(i)]["background"] == "striped") for i in ids])
    judged = _judged_sample(truth, 20, 60, seed=2)
    labels = {int(ids[k]): int(truth[k]) for k in judged}
    heard: list[str] = []
    with Library.open(lib) as library:
        answers = ask_collection(
            library, 1, AttributeQuestion("occurrenceRemarks", "striped"), labels=labels,
            top=20, on_checked=lambda learnt: heard.append(learnt.validation.summary()),
        )  # fmt: skip
    assert len(heard) == 1  # the check is said before the collection is scored
    assert answers.scored == len(ids) - len(labels)
    suggested = [s.image_id for s in answers.suggestions]
    assert len(suggested) == 20 and not set(suggested) & set(labels)
    probabilities = [s.probability for s in answers.suggestions]
    assert probabilities == sorted(probabilities, reverse=True)
    assert all(0.0 <= p <= 1.0 for p in probabilities)
    # 20 striped photos remain unjudged: most of them come first
    hits = sum(demo_truth[i]["background"] == "striped" for i in suggested)
    assert hits >= 15, hits
    # calibrated: the probabilities' sum is close to the striped photos among the top 20
    assert abs(sum(probabilities) - hits) < 5


def test_a_filter_limits_the_photos_asked(copy_cli_demo_library, tmp_path, demo_truth) -> None:
    from engine.catalog.library import Library
    from engine.search.filters import SearchFilters

    lib = copy_cli_demo_library(tmp_path / "lib")
    ids, _ = _demo_vectors(lib)
    truth = np.asarray([int(demo_truth[int(i)]["background"] == "striped") for i in ids])
    labels = {int(ids[k]): int(truth[k]) for k in _judged_sample(truth, 10, 20)}
    with Library.open(lib) as library:
        from engine.search.filters import filtered_ids

        filters = SearchFilters(taxon="red triangle")
        allowed = set(filtered_ids(library.catalog, filters).tolist())
        answers = ask_collection(
            library, 1, AttributeQuestion("occurrenceRemarks", "striped"), labels=labels,
            filters=filters, top=500, curve=False,
        )  # fmt: skip
    assert 0 < len(allowed) < len(ids)
    assert {s.image_id for s in answers.suggestions} <= allowed
    assert answers.scored == len(allowed - set(labels))


def test_stored_attributes_teach_it_and_accepting_sets_them(
    copy_cli_demo_library, tmp_path, demo_truth
) -> None:
    """Without labels handed in, the attributes stored on the query's judged photos teach the
    question; accepting and rejecting a suggestion store the value and its "not"."""
    from engine.catalog.library import Library
    from engine.judgments.attributes import attributes_of, set_attributes
    from engine.judgments.queries import QueryStore

    lib = copy_cli_demo_library(tmp_path / "lib")
    ids, _ = _demo_vectors(lib)
    truth = np.asarray([int(demo_truth[int(i)]["count"] == 2) for i in ids])
    judged = [int(ids[k]) for k in _judged_sample(truth, 30, 50, seed=3)]
    question = AttributeQuestion.parse("lifeStage=juvenile")  # "juvenile" stands for two
    with Library.open(lib) as library:
        store = QueryStore(library)
        query_id = store.find_or_create_query("shapes")
        for image_id in judged:
            store.judge(query_id, image_id, 1)
            pairs = demo_truth[image_id]["count"] == 2
            set_attributes(
                library, query_id, image_id, {"lifeStage": "juvenile" if pairs else "adult"}
            )
        answers = ask_collection(library, query_id, question, top=5, curve=False)
        first, second = answers.suggestions[0].image_id, answers.suggestions[1].image_id
        aq.accept_suggestion(library, query_id, first, question)
        change = aq.reject_suggestion(library, query_id, second, question)
        assert attributes_of(library, query_id, first) == {"lifeStage": "juvenile"}
        assert attributes_of(library, query_id, second) == {"lifeStage": "not juvenile"}
        assert change.previous == {"lifeStage": None}
        # answers given to suggestions on photos never judged for the query teach the next fit
        again = ask_collection(library, query_id, question, top=5, curve=False)
        assert (again.learnt.validation.yes, again.learnt.validation.no) == (31, 51)
        assert {first, second}.isdisjoint(s.image_id for s in again.suggestions)
    assert answers.learnt.validation.judged == 80
    assert (answers.learnt.validation.yes, answers.learnt.validation.no) == (30, 50)
    assert answers.learnt.validation.balanced > 0.8
    assert sum(demo_truth[s.image_id]["count"] == 2 for s in answers.suggestions) >= 4


def test_no_answers_is_one_line(copy_cli_demo_library, tmp_path) -> None:
    from engine.catalog.library import Library

    lib = copy_cli_demo_library(tmp_path / "lib")
    with Library.open(lib) as library, pytest.raises(BadInputError, match="set it on some"):
        ask_collection(library, 1, AttributeQuestion("sex", "female"), labels={})


def test_command_prints_the_check_first_then_suggestions(
    copy_cli_demo_library, tmp_path, demo_truth, capsys
) -> None:
    from app.cli import main
    from engine.catalog.library import Library
    from engine.judgments.attributes import set_attributes
    from engine.judgments.queries import QueryStore

    lib = copy_cli_demo_library(tmp_path / "lib")
    with Library.open(lib) as library:
        query_id = QueryStore(library).find_or_create_query("shapes on patterns")
    ids, _ = _demo_vectors(lib)
    truth = np.asarray([int(demo_truth[int(i)]["background"] == "striped") for i in ids])
    with Library.open(lib) as library:
        store = QueryStore(library)
        for k in _judged_sample(truth, 20, 40):
            store.judge(query_id, int(ids[k]), 1)
            value = "striped" if truth[k] else "plain"
            set_attributes(library, query_id, int(ids[k]), {"vitality": value})
    args = ["attributes", "ask", "vitality=striped", "--library", str(lib), "--top", "5"]
    assert main([*args, "--query", "shapes on patterns"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "is it striped? (vitality=striped)"
    assert out[1].startswith("cross-validated accuracy")
    suggestions = [line for line in out if line.startswith("  0.") or line.startswith("  1.")]
    assert len(suggestions) == 5
    assert all(Path(line.split()[-1]).is_file() for line in suggestions)

    assert main([*args, "--query", str(query_id), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["query_id"] == query_id
    assert data["cross_validation"]["judged"] == 60
    assert len(data["suggestions"]) == 5 and Path(data["suggestions"][0]["path"]).is_file()

    assert main([*args, "--query", "no such query"]) == 2
    assert "no saved query has the text" in capsys.readouterr().err


# -- the window -------------------------------------------------------------------------------


@pytest.mark.qt_log_ignore("does not support propagateSizeHints")  # the offscreen platform
def test_dialog_shows_the_check_then_suggestions_and_stores_answers(
    qtbot, copy_cli_demo_library, tmp_path, demo_truth
) -> None:
    """Judge › Ask an attribute question…: the check is shown, the suggestions listed with
    their probabilities, and Yes / No on selected rows store the value and its "not"."""
    from types import SimpleNamespace

    from app.controllers.attribute_questions import AttributeQuestionsController
    from app.workers import InlineTaskRunner
    from engine.catalog.library import Library
    from engine.judgments.attributes import attributes_of, set_attributes
    from engine.judgments.queries import QueryStore

    lib = copy_cli_demo_library(tmp_path / "lib")
    ids, _ = _demo_vectors(lib)
    truth = np.asarray([int(demo_truth[int(i)]["background"] == "striped") for i in ids])
    errors: list[tuple[str, str]] = []
    with Library.open(lib) as library:
        store = QueryStore(library)
        query_id = store.find_or_create_query("patterns")
        for k in _judged_sample(truth, 20, 40, seed=4):
            store.judge(query_id, int(ids[k]), 1)
            value = "striped" if truth[k] else "plain"
            set_attributes(library, query_id, int(ids[k]), {"reproductiveCondition": value})
        store = QueryStore(library)
        session = SimpleNamespace(library=library, query_store=lambda: store)
        judging = SimpleNamespace(query_id=query_id, title="patterns")
        runner = InlineTaskRunner(error_handler=lambda exc, title: errors.append((title, str(exc))))
        controller = AttributeQuestionsController(runner, session, judging)  # type: ignore[arg-type]
        messages: list[str] = []
        controller.message.connect(messages.append)
        dialog = controller.open_dialog()
        assert dialog is not None
        qtbot.addWidget(dialog)
        assert not dialog.ask_button.isEnabled()  # no value typed yet
        dialog.term_box.setCurrentIndex(dialog.term_box.findData("reproductiveCondition"))
        dialog.value_edit.setText("striped")
        dialog.ask_button.click()
        assert errors == []
        assert dialog.check_label.text().startswith("cross-validated accuracy")
        assert "60 judged photos (20 yes, 40 no" in dialog.check_label.text()
        assert dialog.table.rowCount() == 100
        shown = [float(dialog.table.item(r, 0).text()) for r in range(100)]
        assert shown == sorted(shown, reverse=True)
        assert not dialog.yes_button.isEnabled()  # nothing selected
        dialog.table.selectRow(0)
        first = dialog.selected_ids()
        dialog.yes_button.click()
        dialog.table.selectRow(1)
        second = dialog.selected_ids()
        dialog.no_button.click()
        assert attributes_of(library, query_id, first[0]) == {"reproductiveCondition": "striped"}
        assert attributes_of(library, query_id, second[0]) == {
            "reproductiveCondition": "not striped"
        }
        assert dialog.table.item(0, 1).text().endswith("(yes)")
        assert dialog.table.item(1, 1).text().endswith("(no)")
        assert messages[-1] == "1 photos answered no: reproductiveCondition=not striped"

        # too few answers: said in the dialog and the status line, in one line
        dialog.value_edit.setText("spotted")
        dialog.ask_button.click()
        assert "judge at least 3 of each" in dialog.check_label.text()
        assert "judge at least 3 of each" in messages[-1] and "\n" not in messages[-1]
        assert dialog.ask_button.isEnabled()
