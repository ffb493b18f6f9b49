"""The quality a Darwin Core export carries (engine/io/dwc_quality.py): how each record was
decided relevant and its p(relevant), in the MeasurementOrFact extension and the CSV's
dynamicProperties, and the package's precision and recall in the EML's quality control; a
worked example, on SQLite and on a PostgreSQL server."""

from __future__ import annotations

import csv
import json
import zipfile
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
from dwca.read import DwCAReader
from sqlalchemy import select, update

from engine.catalog import Image
from engine.catalog.library import Library
from engine.io.dwc import export_dwc_csv, export_dwca
from engine.judgments.adjudication import adjudicate, offer_double_judging, record_certificate
from engine.judgments.certified_recall import certify_recall
from engine.judgments.queries import QueryStore
from tests.catalogs import add_plain_photos, folder_url

DWC = "http://rs.tdwg.org/dwc/terms/"
DC = "http://purl.org/dc/terms/"
MEASUREMENTS = DWC + "MeasurementOrFact"


@pytest.fixture
def library(tmp_path: Path, catalog_url: str, monkeypatch: pytest.MonkeyPatch):
    with Library.open(tmp_path / "lib", database_url=folder_url(catalog_url, monkeypatch)) as lib:
        add_plain_photos(lib, tmp_path / "photos", 12)
        with lib.catalog.session() as s:
            s.execute(update(Image).values(license="CC-BY-4.0", rights_holder="Ada"))
        yield lib


def _ids(library: Library) -> list[int]:
    with library.catalog.session() as s:
        return [0, *s.scalars(select(Image.id).order_by(Image.id))]  # ids[1] is photo 1


def _judged_twice(library: Library) -> tuple[int, list[int]]:
    """The worked example. Ada judges photos 1-8 relevant and 9-10 not; all ten go to blind
    double judging; Bob judges 1-5 relevant, 6 not, 9 relevant, 10 not; the chair adjudicates
    6 relevant and 9 not. References: 1-5 agreed relevant, 6 adjudicated relevant, 9
    adjudicated not, 10 agreed not; 7 and 8 have Ada's mark only. Relevant marks on photos
    with a reference: 10 on 1-5 (confirmed), Ada's on 6 (confirmed), Bob's on 9 (not): 11 of
    12, so one judge's precision is 11/12 = 0.9167 with Wilson's 95 % interval 0.6461-0.9851.
    Records: 1-5 agreed and 6 adjudicated (p 1), 7 and 8 judged by Ada (p 0.9167): the
    package's precision is (6 + 2 x 0.9167) / 8 = 0.9792, interval (6 + 2 x 0.6461) / 8 =
    0.9115 to (6 + 2 x 0.9851) / 8 = 0.9963."""
    ids = _ids(library)
    ada, bob = QueryStore(library, user="Ada"), QueryStore(library, user="Bob")
    query_id = ada.find_or_create_query("dipper")
    for n in range(1, 11):
        ada.judge(query_id, ids[n], 1 if n <= 8 else 0)
    offer_double_judging(library, query_id, None, "Ada")
    for n, mark in ((1, 1), (2, 1), (3, 1), (4, 1), (5, 1), (6, 0), (9, 1), (10, 0)):
        bob.judge(query_id, ids[n], mark)
    adjudicate(library, query_id, ids[6], 1, "chair")
    adjudicate(library, query_id, ids[9], 0, "chair")
    return query_id, ids


def test_each_record_carries_how_it_was_decided_and_its_p_relevant(library, tmp_path):
    query_id, ids = _judged_twice(library)
    out = tmp_path / "records.zip"
    report = export_dwca(library, query_id, out)
    assert report.written == 8  # 1-8: photo 9 was adjudicated not relevant
    facts: dict[int, dict[str, dict[str, str]]] = {}
    with DwCAReader(str(out)) as dwca:
        for row in dwca:
            media = [e.data for e in row.extensions if e.rowtype.endswith("/Multimedia")]
            # Photo n (ids[n]) is the file p{n-1}.jpg.
            n = int(media[0][DC + "identifier"].rsplit("/p", 1)[1].removesuffix(".jpg")) + 1
            facts[n] = {
                e.data[DWC + "measurementType"]: e.data for e in row.extensions
                if e.rowtype == MEASUREMENTS
            }  # fmt: skip
    assert sorted(facts) == list(range(1, 9))
    photo = facts
    agreed = photo[1]["relevance to the query"]
    assert agreed[DWC + "measurementValue"] == "relevant"
    assert agreed[DWC + "measurementMethod"] == "judged relevant by 2 of 2 judges, in Quadrat"
    assert agreed[DWC + "measurementDeterminedBy"] == "Ada | Bob"
    assert photo[1]["probability of relevance"][DWC + "measurementValue"] == "1.0000"
    settled = photo[6]["relevance to the query"]
    assert settled[DWC + "measurementMethod"] == (
        "adjudicated relevant by chair after 1 of 2 judges marked it not relevant, in Quadrat"
    )
    assert settled[DWC + "measurementDeterminedBy"] == "Ada | chair"
    single = photo[7]["probability of relevance"]
    assert single[DWC + "measurementValue"] == "0.9167"
    assert single[DWC + "measurementAccuracy"] == "95 % interval 0.6461-0.9851"
    assert "blind double-judging sample" in single[DWC + "measurementMethod"]
    assert photo[7]["relevance to the query"][DWC + "measurementDeterminedBy"] == "Ada"

    quality = " ".join(
        p.text or ""
        for p in ET.fromstring(zipfile.ZipFile(out).read("eml.xml")).iterfind(
            "dataset/methods/qualityControl/description/para"
        )
    )
    assert "Precision of this package (the share of its 8 records that are relevant): " in quality
    assert "0.979 (95 % interval 0.912-0.996)" in quality
    assert "11 of 12 relevant marks on the 10 photos offered for blind double judging" in quality
    assert "Recall: unmeasured" in quality

    # The flat CSV carries the same as JSON in dynamicProperties.
    table = tmp_path / "records.csv"
    export_dwc_csv(library, query_id, table)
    with table.open(encoding="utf-8", newline="") as handle:
        rows = {r["associatedMedia"].rsplit("/", 1)[1]: r for r in csv.DictReader(handle)}
    seventh = json.loads(rows["p6.jpg"]["dynamicProperties"])
    assert seventh["relevance"] == "judged" and seventh["relevanceDeterminedBy"] == "Ada"
    assert seventh["pRelevant"] == 0.9167
    assert seventh["pRelevantInterval"] == [0.6461, 0.9851]
    assert json.loads(rows["p5.jpg"]["dynamicProperties"])["relevance"] == "adjudicated"


def test_a_certified_recall_goes_into_the_quality_control(library, tmp_path):
    query_id, ids = _judged_twice(library)
    judgments = {i: int(n <= 8) for n, i in enumerate(ids) if n}
    state = certify_recall(ids[1:], judgments, target=0.5, confidence=0.5, seed=query_id)
    record_certificate(library, query_id, state, "chair")
    out = tmp_path / "records.zip"
    export_dwca(library, query_id, out)
    eml = zipfile.ZipFile(out).read("eml.xml").decode()
    assert "Recall: recall of at least 50 % certified at 50 % confidence" in eml


def test_without_double_judging_precision_is_said_to_be_unmeasured(library, tmp_path):
    ids = _ids(library)
    store = QueryStore(library, user="Ada")
    query_id = store.find_or_create_query("heron")
    store.judge(query_id, ids[1], 1)
    out = tmp_path / "records.zip"
    export_dwca(library, query_id, out)
    eml = zipfile.ZipFile(out).read("eml.xml").decode()
    assert "relevant): unmeasured." in eml
    assert "no photo of this query was offered for blind double judging" in eml
    with DwCAReader(str(out)) as dwca:
        kinds = [e.data[DWC + "measurementType"] for e in dwca.rows[0].extensions
                 if e.rowtype == MEASUREMENTS]  # fmt: skip
    assert kinds == ["relevance to the query"]  # no number where nothing was measured
