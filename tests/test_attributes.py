"""Attributes on judgments (Darwin Core terms): storage on both databases, events with who and
when, query presets filled on judging, undo, vocabularies and off-vocabulary values."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import select

from engine.catalog import Image
from engine.catalog.library import Library
from engine.errors import BadInputError
from engine.judgments.attributes import (
    attribute_history,
    attributes_for_query,
    attributes_of,
    fill_presets,
    normalize_value,
    off_vocabulary,
    preset_offer,
    query_presets,
    set_attributes,
    set_query_presets,
    undo_attributes,
    undo_preset_fill,
)
from engine.judgments.queries import QueryStore
from tests.catalogs import add_plain_photos, folder_url


@pytest.fixture
def library(tmp_path, catalog_url, monkeypatch):
    """Five catalog photos on SQLite and on a PostgreSQL server."""
    postgres = catalog_url.startswith("postgresql")
    database_url = folder_url(catalog_url, monkeypatch) if postgres else None
    with Library.open(tmp_path / "lib", database_url=database_url) as lib:
        add_plain_photos(lib, tmp_path / "photos", 5)
        yield lib


def image_ids(library) -> list[int]:
    with library.catalog.session() as s:
        return list(s.scalars(select(Image.id).order_by(Image.id)))


def test_values_are_stored_by_term_newest_counting_and_every_change_is_an_event(library):
    alice, bob = QueryStore(library, user="alice"), QueryStore(library, user="bob")
    qid = alice.find_or_create_query("bumblebee visiting salvia")
    photo = image_ids(library)[2]
    alice.judge(qid, photo, 1)
    set_attributes(library, qid, photo, {"lifeStage": "Adult", "behavior": "foraging"}, "alice")
    set_attributes(library, qid, photo, {"behavior": "foraging|  courtship |foraging"}, "bob")
    set_attributes(library, qid, photo, {"lifeStage": None}, "bob")

    assert attributes_for_query(library, qid) == {photo: {"behavior": "foraging | courtship"}}
    history = attribute_history(library, qid)
    assert [(r.term, r.value, r.changed_by) for r in history] == [
        ("lifeStage", "adult", "alice"),
        ("behavior", "foraging", "alice"),
        ("behavior", "foraging | courtship", "bob"),
        ("lifeStage", None, "bob"),
    ]
    assert all(r.changed_at is not None for r in history)
    assert history[0].changed_at <= history[-1].changed_at
    # The relevance history is not disturbed by attribute edits.
    assert [(r.relevance, r.judged_by) for r in bob.judgment_history(qid)] == [(1, "alice")]


def test_only_judged_photos_are_listed_and_values_survive_a_reopen(library, tmp_path):
    store = QueryStore(library)
    qid = store.find_or_create_query("flowering thistle")
    judged, unjudged = image_ids(library)[:2]
    store.judge(qid, judged, 1)
    set_attributes(library, qid, judged, {"reproductiveCondition": "Flowering"})
    set_attributes(library, qid, unjudged, {"occurrenceRemarks": "blurred"})
    assert attributes_for_query(library, qid) == {judged: {"reproductiveCondition": "flowering"}}
    assert attributes_of(library, qid, unjudged) == {"occurrenceRemarks": "blurred"}


def test_an_unknown_term_is_refused_in_one_line(library):
    store = QueryStore(library)
    qid = store.find_or_create_query("x")
    with pytest.raises(BadInputError, match="unknown attribute 'stage'"):
        set_attributes(library, qid, image_ids(library)[0], {"stage": "adult"})


def test_presets_fill_a_relevant_photo_and_leave_with_its_relevance(library):
    store = QueryStore(library, user="carol")
    qid = store.find_or_create_query("flowering orchids")
    set_query_presets(library, qid, {"reproductiveCondition": "Flowering", "sex": ""})
    assert query_presets(library, qid) == {"reproductiveCondition": "flowering"}
    a, b, c = image_ids(library)[:3]

    store.judge(qid, a, 1)
    assert attributes_for_query(library, qid) == {a: {"reproductiveCondition": "flowering"}}
    # A value already typed is never overwritten by the preset.
    set_attributes(library, qid, b, {"reproductiveCondition": "fruiting", "behavior": "x"})
    store.judge(qid, b, 1)
    assert attributes_for_query(library, qid)[b]["reproductiveCondition"] == "fruiting"
    # Not relevant: the preset's value goes, what was typed stays.
    store.judge(qid, a, 0)
    store.judge(qid, b, 0)
    assert attributes_for_query(library, qid) == {
        b: {"behavior": "x", "reproductiveCondition": "fruiting"}
    }
    # Cleared after relevant: no stale preset either; a photo never relevant gets none.
    store.judge(qid, c, 1)
    store.judge(qid, c, None)
    assert attributes_of(library, qid, c) == {}
    store.judge(qid, c, 0)
    assert attributes_of(library, qid, c) == {}
    who = {(r.image_id, r.value, r.changed_by) for r in attribute_history(library, qid)}
    assert (a, "flowering", "carol") in who and (a, None, "carol") in who


def test_undo_puts_back_preset_fills_and_attribute_edits_exactly(library):
    store = QueryStore(library)
    qid = store.find_or_create_query("juvenile gulls")
    set_query_presets(library, qid, {"lifeStage": "juvenile"})
    a = image_ids(library)[0]

    change = store.judge(qid, a, 1)
    assert change.attributes is not None
    assert change.attributes.current == {"lifeStage": "juvenile"}
    edit = set_attributes(library, qid, a, {"lifeStage": "adult", "sex": "female"})
    assert edit.previous == {"lifeStage": "juvenile", "sex": None}
    undo_attributes(library, edit)
    assert attributes_of(library, qid, a) == {"lifeStage": "juvenile"}
    store.undo(change)
    assert store.judgments(qid) == {}
    assert attributes_of(library, qid, a) == {}


def test_undo_of_not_relevant_brings_back_the_preset_value(library):
    store = QueryStore(library)
    qid = store.find_or_create_query("dead hedgehogs")
    set_query_presets(library, qid, {"vitality": "dead"})
    a = image_ids(library)[1]
    store.judge(qid, a, 1)
    change = store.judge(qid, a, 0)
    assert attributes_of(library, qid, a) == {}
    store.undo(change)
    assert store.judgments(qid) == {a: 1}
    assert attributes_of(library, qid, a) == {"vitality": "dead"}


def test_a_preset_set_after_judging_reaches_the_photos_judged_before_and_undo_takes_it_back(
    library,
):
    """Issue 34: a preset filled only photos judged after it was set (a DwC-A had lifeStage on
    1 of 10 records). Now the photos judged relevant before are offered it, counted, filled in
    one step with the judge named, and that step is taken back whole."""
    store = QueryStore(library, user="dana")
    qid = store.find_or_create_query("adult gulls")
    a, b, c, d, e = image_ids(library)
    for photo in (a, b, c):
        store.judge(qid, photo, 1)
    store.judge(qid, d, 0)
    set_attributes(library, qid, b, {"lifeStage": "juvenile"}, "dana")  # its own value
    set_query_presets(library, qid, {"lifeStage": "Adult", "vitality": "alive"})
    # Setting the presets changed no photo judged before.
    assert attributes_of(library, qid, a) == {}

    offer = preset_offer(library, qid)
    assert (offer.relevant, offer.photos, offer.keeping_their_own) == (3, 3, 0)
    assert offer.per_term == {"lifeStage": 2, "vitality": 3}
    assert offer.presets == {"lifeStage": "adult", "vitality": "alive"}

    fill = fill_presets(library, qid, judge="erin")
    assert fill.photos == 3
    assert attributes_for_query(library, qid) == {
        a: {"lifeStage": "adult", "vitality": "alive"},
        b: {"lifeStage": "juvenile", "vitality": "alive"},  # its own value kept
        c: {"lifeStage": "adult", "vitality": "alive"},
    }
    assert attributes_of(library, qid, d) == {} and attributes_of(library, qid, e) == {}
    events = [(r.image_id, r.term, r.value, r.changed_by) for r in attribute_history(library, qid)]
    assert (a, "lifeStage", "adult", "erin") in events and (
        b,
        "vitality",
        "alive",
        "erin",
    ) in events
    assert preset_offer(library, qid).photos == 0  # nothing left to fill
    assert fill_presets(library, qid, judge="erin").photos == 0

    # A value changed after the fill keeps its newer value when the fill is undone.
    set_attributes(library, qid, c, {"lifeStage": "subadult"}, "dana")
    undone = undo_preset_fill(library, fill, judge="erin")
    assert undone.photos == 3
    assert attributes_for_query(library, qid) == {
        b: {"lifeStage": "juvenile"},
        c: {"lifeStage": "subadult"},
    }
    assert (a, "lifeStage", None, "erin") in [
        (r.image_id, r.term, r.value, r.changed_by) for r in attribute_history(library, qid)
    ]
    # The judgments themselves are untouched.
    assert store.judgments(qid) == {a: 1, b: 1, c: 1, d: 0}


def test_vocabulary_values_are_normalized_and_others_flagged_but_kept():
    assert normalize_value("lifeStage", "  Juvenile ") == "juvenile"
    assert normalize_value("sex", "Cannot Be Determined") == "cannot be determined"
    assert normalize_value("reproductiveCondition", "Flowering|fruiting") == "flowering | fruiting"
    assert normalize_value("lifeStage", "instar III") == "instar III"
    assert normalize_value("behavior", " | ") is None
    assert off_vocabulary(
        {
            "lifeStage": "instar III",
            "reproductiveCondition": "flowering | seeding",
            "sex": "male",
            "behavior": "anything at all",
        }
    ) == {"lifeStage": ["instar III"], "reproductiveCondition": ["seeding"]}


# The suggestions as Quadrat offered them before issue 34 (iNaturalist's annotation values):
# values stored from them stay valid, never flagged and never rewritten.
EARLIER_VOCABULARIES = {
    "lifeStage": ("adult", "teneral", "pupa", "nymph", "larva", "egg", "juvenile", "subimago"),
    "sex": ("female", "male", "cannot be determined"),
    "reproductiveCondition": ("flowering", "fruiting", "budding", "no evidence of flowering"),
    "vitality": ("alive", "dead", "cannot be determined"),
}


def test_life_stages_fit_every_kingdom_and_sex_has_hermaphrodite():
    from engine.judgments.attributes import VOCABULARIES

    stages = set(VOCABULARIES["lifeStage"])
    # GBIF's LifeStage vocabulary (rs.gbif.org/vocabulary/gbif/life_stage): every kingdom.
    assert {"zygote", "embryo", "larva", "juvenile", "adult", "pupa"} <= stages
    assert {"sporophyte", "gametophyte", "spore", "gamete"} <= stages  # ferns, mosses, fungi
    # GBIF's Sex vocabulary (rs.gbif.org/vocabulary/gbif/sex) has hermaphrodite.
    assert "hermaphrodite" in VOCABULARIES["sex"]
    for term, earlier in EARLIER_VOCABULARIES.items():
        assert set(earlier) <= set(VOCABULARIES[term]), term
    assert normalize_value("sex", " Hermaphrodite") == "hermaphrodite"
    assert off_vocabulary(
        {"sex": "hermaphrodite", "lifeStage": "sporophyte | Spore", "vitality": "mixedLot"}
    ) == {"vitality": ["mixedLot"]}


def test_values_an_earlier_version_stored_still_read_as_they_were(library, tmp_path):
    import csv

    from engine.catalog.models import JudgmentAttribute
    from engine.io.export import export_judgments

    store = QueryStore(library, user="ann")
    qid = store.find_or_create_query("odonata emerging")
    a, b = image_ids(library)[:2]
    store.judge(qid, a, 1)
    store.judge(qid, b, 1)
    stored = {
        a: {"lifeStage": "teneral", "sex": "cannot be determined", "vitality": "alive"},
        # "instar III" was off the vocabulary then and is now: kept, and flagged.
        b: {"lifeStage": "nymph | instar III", "reproductiveCondition": "budding"},
    }
    with library.catalog.session() as s:  # as an earlier version left the rows
        for image_id, values in stored.items():
            for term, value in values.items():
                s.add(JudgmentAttribute(
                    query_id=qid, image_id=image_id, term=term, value=value, set_by="ann"
                ))  # fmt: skip
    assert attributes_for_query(library, qid) == stored
    assert off_vocabulary(stored[a]) == {}
    assert off_vocabulary(stored[b]) == {"lifeStage": ["instar III"]}
    out = tmp_path / "j.csv"
    export_judgments(library, out, [qid])
    with open(out, encoding="utf-8", newline="") as handle:
        rows = {row["image_id"]: row for row in csv.DictReader(handle)}
    assert sorted(row["lifeStage"] for row in rows.values()) == ["nymph | instar III", "teneral"]
    assert attributes_for_query(library, qid) == stored  # reading rewrote nothing


def test_the_command_line_names_the_terms_as_the_window_does(capsys):
    from app.cli import main
    from app.controllers.attributes import attribute_fields
    from engine.judgments.dwc_terms import DWC_ATTRIBUTE_TERMS

    assert main(["attributes", "terms", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["terms"]
    assert list(listed) == list(DWC_ATTRIBUTE_TERMS)
    assert "hermaphrodite" in listed["sex"]["values"]
    assert main(["attributes", "terms"]) == 0
    lines = capsys.readouterr().out.splitlines()
    for field, line in zip(attribute_fields(), lines, strict=True):
        assert line.startswith(field.label + "  ")  # the pane's label, as the CLI prints it
        assert field.term.casefold() in field.label.casefold()


def test_judgments_csv_carries_attributes_as_darwin_core_columns_and_round_trips(library, tmp_path):
    import csv

    from engine.io.export import export_judgments, import_benchmark

    store = QueryStore(library)
    qid = store.find_or_create_query("hoverflies, courtship")
    a, b, c = image_ids(library)[:3]
    store.judge(qid, a, 1)
    store.judge(qid, b, 1)
    store.judge(qid, c, 0)
    set_attributes(
        library,
        qid,
        a,
        {
            "behavior": "courtship | hovering",
            "lifeStage": "adult",
            "sex": "male",
            "associatedTaxa": "visits flowers of: Salvia",
            "occurrenceRemarks": '=1+1, "quoted"',
        },
    )
    set_attributes(library, qid, b, {"reproductiveCondition": "seeding", "vitality": "dead"})
    out = tmp_path / "judgments.csv"
    assert export_judgments(library, out) == 3
    with open(out, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    header = list(rows[0])
    for term in ("behavior", "lifeStage", "sex", "reproductiveCondition", "vitality"):
        assert term in header
    by_path = {r["image_path"]: r for r in rows}
    assert by_path["p0.jpg"]["behavior"] == "courtship | hovering"
    assert by_path["p1.jpg"]["reproductiveCondition"] == "seeding"
    assert by_path["p2.jpg"]["lifeStage"] == ""
    before = attributes_for_query(library, qid)

    # Into an empty copy of the library: the judgments and every attribute come back.
    with Library.open(tmp_path / "other") as other:
        add_plain_photos(other, tmp_path / "photos", 5)
        report = import_benchmark(other, None, out)
        assert report.judgments == 3 and report.unresolved == 0
        moved = report.query_ids[str(qid)]
        ids = image_ids(other)
        back = attributes_for_query(other, moved)
        assert back == {ids[0]: before[a], ids[1]: before[b]}
        assert back[ids[0]]["occurrenceRemarks"] == '=1+1, "quoted"'


def test_importing_a_csv_with_darwin_core_columns_sets_them(library, tmp_path):
    from engine.io.export import import_benchmark

    store = QueryStore(library)
    qid = store.find_or_create_query("larvae on nettles")
    data = tmp_path / "with_attributes.csv"
    data.write_text(
        "query_id,image_path,relevant,query_text,lifeStage,behavior\n"
        f"{qid},p3.jpg,1,larvae on nettles,Larva,feeding\n"
        f"{qid},p4.jpg,1,larvae on nettles,,\n",
        encoding="utf-8",
    )
    report = import_benchmark(library, None, data)
    assert report.judgments == 2
    ids = image_ids(library)
    assert attributes_for_query(library, qid) == {
        ids[3]: {"behavior": "feeding", "lifeStage": "larva"}
    }
    assert {r.value for r in attribute_history(library, qid)} == {"larva", "feeding"}


def test_a_judgments_only_backup_keeps_attributes_events_and_presets(library):
    from engine.catalog.backup import backup_judgments
    from engine.catalog.restore import restore_backup

    store = QueryStore(library, user="dana")
    qid = store.find_or_create_query("nymphs on reeds")
    set_query_presets(library, qid, {"lifeStage": "nymph"})
    a = image_ids(library)[0]
    store.judge(qid, a, 1)
    set_attributes(library, qid, a, {"behavior": "emerging"}, "dana")
    backup = backup_judgments(library.root, library.catalog.engine.url)
    set_attributes(library, qid, a, {"behavior": None, "lifeStage": "adult"}, "dana")
    set_query_presets(library, qid, {})
    with library.writer_lock():
        restore_backup(library.root, library.catalog.engine.url, backup)
    assert attributes_for_query(library, qid) == {a: {"behavior": "emerging", "lifeStage": "nymph"}}
    assert query_presets(library, qid) == {"lifeStage": "nymph"}
    assert len(attribute_history(library, qid)) == 2
    # New edits after a restore get new event ids (a server's sequence follows the rows).
    set_attributes(library, qid, a, {"sex": "male"})
    assert len(attribute_history(library, qid)) == 3


def test_undo_of_a_change_made_before_its_write_returned_takes_presets_back(library):
    from engine.judgments.queries import JudgmentChange

    store = QueryStore(library)
    qid = store.find_or_create_query("budding roses")
    set_query_presets(library, qid, {"reproductiveCondition": "budding"})
    a = image_ids(library)[0]
    store.judge(qid, a, 1)
    # The window's undo stack may hold the change it showed, not the one the catalog returned.
    store.undo(JudgmentChange(qid, a, None, 1))
    assert store.judgments(qid) == {} and attributes_of(library, qid, a) == {}


def test_deleting_a_query_deletes_its_attributes_and_presets(library):
    from engine.catalog.models import AttributeEvent, AttributePreset, JudgmentAttribute

    store = QueryStore(library)
    qid = store.find_or_create_query("to be deleted")
    set_query_presets(library, qid, {"vitality": "alive"})
    store.judge(qid, image_ids(library)[0], 1)
    store.delete_query(qid)
    with library.catalog.session() as s:
        for table in (JudgmentAttribute, AttributeEvent, AttributePreset):
            assert s.scalars(select(table)).all() == []
