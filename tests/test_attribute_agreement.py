"""Agreement on Darwin Core attributes (issue 28): each judge's newest value per photo from the
attribute events, measured as relevance is (hand-computed values and the `krippendorff`
package), `quadrat agreement --term`, and adjudications through the judgments CSV."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import select

from engine.catalog import Image
from engine.catalog.library import Library
from engine.judgments.agreement import (
    attribute_agreements,
    attribute_ratings,
    measure_agreement,
)
from engine.judgments.attributes import set_attributes
from engine.judgments.queries import QueryStore
from tests.catalogs import add_plain_photos

krippendorff = pytest.importorskip("krippendorff")

ANN = ["adult", "adult", "larva", "larva"]
BOB = ["adult", "larva", "larva", "larva"]


@pytest.fixture
def library(tmp_path: Path):
    with Library.open(tmp_path / "lib") as lib:
        add_plain_photos(lib, tmp_path / "photos", 6)
        yield lib


def image_ids(library: Library) -> list[int]:
    with library.catalog.session() as s:
        return list(s.scalars(select(Image.id).order_by(Image.id)))


def judged_by_two(library: Library) -> tuple[int, list[int]]:
    """Ann and Bob judge four photos relevant and give each a lifeStage (ANN, BOB)."""
    ids = image_ids(library)
    ann, bob = QueryStore(library, user="ann"), QueryStore(library, user="bob")
    qid = ann.find_or_create_query("damselfly")
    for image_id, a, b in zip(ids, ANN, BOB, strict=False):
        ann.judge(qid, image_id, 1)
        set_attributes(library, qid, image_id, {"lifeStage": a}, "ann")
        bob.judge(qid, image_id, 1)
        set_attributes(library, qid, image_id, {"lifeStage": b}, "bob")
    return qid, ids


def test_the_same_value_from_a_second_judge_counts_as_agreement(library):
    qid, ids = judged_by_two(library)
    ratings = attribute_ratings(library, qid, "lifeStage")
    # Photo 1: both said adult; the value did not change, yet Bob's act is his value.
    assert ratings[ids[0]] == {"ann": "adult", "bob": "adult"}
    assert ratings[ids[1]] == {"ann": "adult", "bob": "larva"}


def test_attribute_agreement_matches_hand_computed_values(library):
    qid, _ = judged_by_two(library)
    agreement = measure_agreement(attribute_ratings(library, qid, "lifeStage"), resamples=50)
    assert agreement.photos == 4 and agreement.judges == ("ann", "bob")
    # 3 of 4 photos agree; Cohen: p_o 0.75, p_e 0.5*0.25 + 0.5*0.75 = 0.5 -> 0.5.
    assert agreement.raw.value == pytest.approx(0.75)
    assert agreement.pairs[0].kappa.value == pytest.approx(0.5)
    assert agreement.pairs[0].categories == ("adult", "larva")
    assert agreement.pairs[0].table == ((1, 1), (0, 2))  # rows ann, columns bob
    # Nominal alpha: 8 values (3 adult, 5 larva), one disagreeing pair both ways:
    # 1 - 7 * 2 / (64 - 9 - 25) = 8 / 15.
    assert agreement.krippendorff_alpha.value == pytest.approx(8 / 15)


def test_a_cleared_value_is_no_value_and_missing_values_match_krippendorff(library):
    qid, ids = judged_by_two(library)
    cy = QueryStore(library, user="cy")
    for image_id, value in zip(ids, ["adult", "pupa", "larva", None], strict=False):
        cy.judge(qid, image_id, 1)
        set_attributes(library, qid, image_id, {"lifeStage": "egg"}, "cy")
        set_attributes(library, qid, image_id, {"lifeStage": value}, "cy")  # None clears
    ratings = attribute_ratings(library, qid, "lifeStage")
    assert "cy" not in ratings[ids[3]]
    assert ratings[ids[1]]["cy"] == "pupa"
    agreement = measure_agreement(ratings, resamples=50)
    codes = {"adult": 0.0, "larva": 1.0, "pupa": 2.0}
    table = np.array(
        [
            [codes.get(ratings[i].get(j, ""), math.nan) for i in ids[:4]]
            for j in ("ann", "bob", "cy")
        ]
    )
    expected = krippendorff.alpha(reliability_data=table, level_of_measurement="nominal")
    assert agreement.krippendorff_alpha.value == pytest.approx(expected)
    assert agreement.photos == 4


def test_terms_with_two_judges_values_are_listed(library):
    qid, ids = judged_by_two(library)
    set_attributes(library, qid, ids[0], {"sex": "female"}, "ann")  # one judge only
    terms = attribute_agreements(library, qid, resamples=20)
    assert list(terms) == ["lifeStage"]


def test_quadrat_agreement_by_term(library, capsys):
    from app.cli import main

    qid, _ = judged_by_two(library)
    root = str(library.root)
    library.close()
    assert main(["agreement", "--query", str(qid), "--library", root, "--term", "lifeStage",
                 "--json"]) == 0  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    assert out["term"] == "lifeStage" and out["photos"] == 4
    assert out["raw_agreement"]["value"] == pytest.approx(0.75)
    assert main(["agreement", "--query", str(qid), "--library", root]) == 0
    text = capsys.readouterr().out
    assert "Life stage (lifeStage): 4 photos by 2 judges: raw agreement 0.750" in text


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))


def test_adjudications_survive_an_export_and_import(library, tmp_path):
    from engine.io.export import export_judgments, import_benchmark
    from engine.judgments.adjudication import adjudicate, adjudications

    ids = image_ids(library)
    ann, bob = QueryStore(library, user="ann"), QueryStore(library, user="bob")
    qid = ann.find_or_create_query("grebe")
    ann.judge(qid, ids[0], 1)
    bob.judge(qid, ids[0], 0)
    ann.judge(qid, ids[1], 1)
    bob.judge(qid, ids[1], 0)
    ann.judge(qid, ids[2], 1)
    adjudicate(library, qid, ids[0], 0, "chair")
    adjudicate(library, qid, ids[1], 1, "chair")
    out = tmp_path / "j.csv"
    export_judgments(library, out, [qid])
    assert sorted(r["judged_as"] for r in _rows(out)) == [
        "adjudication",
        "adjudication",
        "judgment",
    ]

    with Library.open(tmp_path / "other") as other:
        add_plain_photos(other, tmp_path / "photos", 6)
        import_benchmark(other, None, out, judge="eve")
        target = QueryStore(other, user="eve")
        copy = target.find_or_create_query("grebe")
        assert adjudications(other, copy) == adjudications(library, qid) == {ids[0]: 0, ids[1]: 1}
        # An adjudication is no judge's mark: the imported judges' marks hold ann's only.
        from engine.judgments.agreement import judge_ratings

        assert set(judge_ratings(other, copy)) == {ids[2]}
        assert target.judgments(copy) == {ids[0]: 0, ids[1]: 1, ids[2]: 1}
