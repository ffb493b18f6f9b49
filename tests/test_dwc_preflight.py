"""Pre-flight of Darwin Core exports (engine/io/dwc_checks.py, engine/io/eml.py): GBIF's rules
per record, the descriptor against its files, eml.xml against GBIF's EML profile 1.2, URIs for
the photos, formula-looking cells flagged and left intact, `--check` and `--write-anyway`;
and what a full disk, a read-only folder or a kill leaves behind."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
from dwca.read import DwCAReader

from app.cli import main
from engine.catalog.library import Library
from engine.catalog.reads import photo_details
from engine.errors import QuadratError
from engine.io.dwc import RecordsRefused, check_records, export_dwc_csv, export_dwca, meta_xml
from engine.io.dwc_checks import ERROR, WARNING, check_meta, check_occurrence, is_iso_date
from engine.io.eml import check_eml, is_date_time
from engine.judgments.attributes import set_attributes
from engine.judgments.queries import QueryStore
from tests import test_dwc_export
from tests.small_disk import small_tmpfs
from tests.test_dwc_export import DC, QUERY, RELEVANT, _set_photo

judged = test_dwc_export.judged  # the fixture: the demo library with one query judged

GOOD_ROW = {
    "occurrenceID": "urn:uuid:1",
    "basisOfRecord": "HumanObservation",
    "scientificName": "Bufo bufo",
    "eventDate": "2024-05-01T06:30:00-07:00",
    "decimalLatitude": "50.5",
    "decimalLongitude": "-4.25",
    "geodeticDatum": "WGS84",
    "coordinateUncertaintyInMeters": "30",
    "license": "http://creativecommons.org/licenses/by/4.0/legalcode",
}


def _archive_member(path: Path, name: str) -> bytes:
    with zipfile.ZipFile(path) as archive:
        return archive.read(name)


# --- eml.xml --------------------------------------------------------------------------------


def test_the_eml_follows_gbifs_profile_and_stamps_a_date_time(judged, tmp_path):
    out = tmp_path / "records.zip"
    with Library.open(judged.root) as library:
        export_dwca(library, judged.query_id, out)
    eml = _archive_member(out, "eml.xml")
    assert check_eml(eml) == []
    stamp = ET.fromstring(eml).findtext("additionalMetadata/metadata/gbif/dateStamp") or ""
    assert is_date_time(stamp), stamp  # xs:dateTime, as profile 1.2 requires

    # What the profile refuses, each found by the pre-flight check.
    day_only = eml.replace(stamp.encode(), stamp[:10].encode())
    assert any("dateStamp" in p and "date-time" in p for p in check_eml(day_only))
    root = ET.fromstring(eml)
    dataset = root.find("dataset")
    assert dataset is not None
    contact = dataset.find("contact")
    assert contact is not None
    dataset.remove(contact)
    dataset.insert(1, contact)  # before the title
    assert any("too late" in p for p in check_eml(ET.tostring(root)))
    dataset.remove(contact)
    assert "eml.xml: dataset needs a contact" in check_eml(ET.tostring(root))
    pub = dataset.find("pubDate")
    assert pub is not None
    pub.text = "01/05/2024"
    assert any("pubDate" in p for p in check_eml(ET.tostring(root)))


@pytest.mark.skipif(
    not os.environ.get("QUADRAT_GBIF_EML_XSD"),
    reason="set QUADRAT_GBIF_EML_XSD to GBIF's eml.xsd (profile 1.2) to validate against it",
)
def test_the_eml_validates_against_gbifs_schema(judged, tmp_path):
    xmlschema = pytest.importorskip("xmlschema")
    out = tmp_path / "records.zip"
    with Library.open(judged.root) as library:
        export_dwca(library, judged.query_id, out)
    schema = xmlschema.XMLSchema(os.environ["QUADRAT_GBIF_EML_XSD"])
    schema.validate(_archive_member(out, "eml.xml").decode("utf-8"))


# --- the photos as URIs, the archive's members -------------------------------------------------


def test_identifiers_are_uris_and_members_extract_for_everyone(judged, tmp_path):
    first = judged.relevant[0]
    out = tmp_path / "records.zip"
    with Library.open(judged.root) as library:
        report = export_dwca(library, judged.query_id, out)
    local = [p for p in report.problems if "file: URIs" in p.message]
    assert len(local) == 1 and local[0].severity == WARNING and local[0].path == ""
    with DwCAReader(str(out)) as dwca:
        identifiers = {r.extensions[0].data[DC + "identifier"] for r in dwca.rows}
    with Library.open(judged.root) as library:
        photo = photo_details(library, [first])[first]
    assert Path(photo.path).is_absolute()
    assert Path(photo.path).as_uri() in identifiers
    with zipfile.ZipFile(out) as archive:
        for member in archive.infolist():
            assert member.create_system == 3, member.filename
            assert (member.external_attr >> 16) & 0o777 == 0o644, member.filename

    # Under --media-url each part of the path is percent-encoded.
    _set_photo(judged.root, first, rel_path="train/a b#c%.jpg")
    again = tmp_path / "again.zip"
    with Library.open(judged.root) as library:
        report = export_dwca(library, judged.query_id, again, media_url="https://example.org/p/")
    assert not any("file: URIs" in p.message for p in report.problems)
    with DwCAReader(str(again)) as dwca:
        identifiers = {r.extensions[0].data[DC + "identifier"] for r in dwca.rows}
    assert "https://example.org/p/train/a%20b%23c%25.jpg" in identifiers


# --- GBIF's rules per record --------------------------------------------------------------------


def test_a_good_row_passes_and_each_broken_term_is_named():
    assert check_occurrence(GOOD_ROW) == []
    broken = {
        "occurrenceID": ("", ERROR),
        "basisOfRecord": ("Photograph", ERROR),
        "eventDate": ("01/05/2024", ERROR),
        "decimalLatitude": ("91", ERROR),
        "decimalLongitude": ("east", ERROR),
        "coordinateUncertaintyInMeters": ("106807033", ERROR),
        "license": ("Attribution License", ERROR),
        "scientificName": ("", WARNING),
    }
    for term, (value, severity) in broken.items():
        found = check_occurrence({**GOOD_ROW, term: value})
        assert [(s, t) for s, t, _ in found] == [(severity, term)], (term, found)
    half = check_occurrence({**GOOD_ROW, "decimalLongitude": ""})
    assert (ERROR, "decimalLongitude") in [(s, t) for s, t, _ in half]
    no_datum = check_occurrence({**GOOD_ROW, "geodeticDatum": ""})
    assert [(s, t) for s, t, _ in no_datum] == [(ERROR, "geodeticDatum")]
    zero = check_occurrence({**GOOD_ROW, "coordinateUncertaintyInMeters": "0"})
    assert [t for _, t, _ in zero] == ["coordinateUncertaintyInMeters"]
    included = check_occurrence({**GOOD_ROW, "license": "© all"}, restricted_included=True)
    assert [(s, t) for s, t, _ in included] == [(WARNING, "license")]
    future = check_occurrence({**GOOD_ROW, "eventDate": "2999-01-01"})
    assert [(s, t) for s, t, _ in future] == [(WARNING, "eventDate")]


@pytest.mark.parametrize(
    ("text", "iso"),
    [
        ("2024", True), ("2024-05", True), ("2024-05-01", True), ("2024-05-01T06:30", True),
        ("2024-05-01T06:30:00Z", True), ("2024-05-01T06:30:00.5+05:30", True),
        ("2024-05-01/2024-05-03", True), ("2024-02-30", False), ("2024-05-01T25:00", False),
        ("01/05/2024", False), ("2024-05-01 06:30", False), ("", False), ("2024-05-01/", False),
    ],
)  # fmt: skip
def test_iso_dates(text, iso):
    assert is_iso_date(text) is iso


def test_the_descriptor_matches_its_files():
    from engine.io.dwc import MEASUREMENT_TERMS, MULTIMEDIA_TERMS, OCCURRENCE_TERMS

    headers = {
        "occurrence.txt": [n for n, _ in OCCURRENCE_TERMS],
        "multimedia.txt": ["coreid", *(n for n, _ in MULTIMEDIA_TERMS)],
        "measurementorfact.txt": ["coreid", *(n for n, _ in MEASUREMENT_TERMS)],
    }
    assert check_meta(meta_xml(), headers) == []
    short = {**headers, "multimedia.txt": headers["multimedia.txt"][:3]}
    assert any("has no column" in p for p in check_meta(meta_xml(), short))
    assert any("not in the archive" in p for p in check_meta(meta_xml(), {}))


def test_values_gbif_would_refuse_stop_the_export_unless_asked(judged, tmp_path, capsys):
    north, west = judged.relevant[0], judged.relevant[1]
    _set_photo(judged.root, north, latitude=95.0)
    _set_photo(judged.root, west, longitude=-200.0)
    out = tmp_path / "records.zip"
    with Library.open(judged.root) as library:
        check = check_records(library, judged.query_id)
        assert check.written == RELEVANT and not check.would_write
        assert sorted(p.name for p in tmp_path.iterdir()) == ["lib"]  # the check wrote nothing
        errors = {(p.image_id, p.term) for p in check.errors}
        assert errors == {(north, "decimalLatitude"), (west, "decimalLongitude")}
        paths = photo_details(library, [north, west])
        assert {p.path for p in check.errors} == {paths[north].path, paths[west].path}
        assert "would not be written" in check.summary()
        with pytest.raises(RecordsRefused) as refused:
            export_dwca(library, judged.query_id, out)
        assert "\n" not in str(refused.value) and "2 problems" in str(refused.value)
        assert not out.exists()
        report = export_dwca(library, judged.query_id, out, write_anyway=True)
    assert report.written == RELEVANT and out.exists()
    assert "written with 2 errors as asked" in report.summary()
    out.unlink()

    lib = ["--library", str(judged.root)]
    assert main(["export", "dwca", str(out), "--query", QUERY, "--check", *lib]) == 1
    said = capsys.readouterr()
    assert said.out.startswith(f"{RELEVANT} records checked, the archive would not be written")
    assert "2 errors (GBIF would refuse or misread these):" in said.err
    assert "decimalLatitude: '95' is not a latitude" in said.err
    assert not out.exists()
    assert main(["export", "dwca", str(out), "--query", QUERY, *lib]) == 1
    said = capsys.readouterr()
    assert said.err.strip().splitlines()[-1].startswith("error: the Darwin Core Archive was not")
    assert "--write-anyway" in said.err and not out.exists()
    assert main(["export", "dwc-csv", str(out), "--query", QUERY, "--write-anyway", *lib]) == 0
    assert out.exists()


# --- formula-looking cells (issue 39) -------------------------------------------------------------


def test_formula_looking_values_are_flagged_and_left_intact(judged, tmp_path):
    first, second = judged.relevant[0], judged.relevant[1]
    _set_photo(judged.root, first, rights_holder="=HYPERLINK(0)")
    with Library.open(judged.root) as library:
        set_attributes(library, judged.query_id, second, {"occurrenceRemarks": "-5 C, cold"},
                       judge="Ada Judge")  # fmt: skip
        QueryStore(library, user="@cmd").judge(judged.query_id, second, 1)
        out = tmp_path / "records.zip"
        report = export_dwca(library, judged.query_id, out)
        table = tmp_path / "records.csv"
        csv_report = export_dwc_csv(library, judged.query_id, table)
    flagged = {(p.image_id, p.term) for p in report.problems if "formula" in p.message}
    assert flagged == {
        (first, "rightsHolder"), (first, "multimedia creator"), (first, "multimedia rightsHolder"),
        (second, "occurrenceRemarks"), (second, "measurement measurementDeterminedBy"),
    }  # fmt: skip
    occurrences = _archive_member(out, "occurrence.txt").decode()
    assert "\t=HYPERLINK(0)\n" in occurrences and "'=HYPERLINK" not in occurrences
    assert "\t-5 C, cold\t" in occurrences
    assert "\t@cmd | Ada Judge\t" in _archive_member(out, "measurementorfact.txt").decode()
    # The flat CSV guards its cells, and says so.
    assert "'=HYPERLINK(0)" in table.read_text(encoding="utf-8")
    guarded = [p for p in csv_report.problems if "formula" in p.message]
    assert {p.term for p in guarded} == {"rightsHolder", "occurrenceRemarks"}
    assert all("leading '" in p.message for p in guarded)


# --- a full disk, a read-only folder, a kill (issue 39) -------------------------------------------


def test_the_csv_on_a_full_disk_fails_in_one_line(judged, tmp_path):
    with small_tmpfs(tmp_path / "disk", "16k") as disk:
        with contextlib.suppress(OSError), (disk / "filler").open("wb") as filler:
            while True:
                filler.write(b"\0" * 1024)
                filler.flush()
        with Library.open(judged.root) as library, pytest.raises(QuadratError) as caught:
            export_dwc_csv(library, judged.query_id, disk / "records.csv")
        assert "disk is full" in str(caught.value) and "\n" not in str(caught.value)
        assert sorted(p.name for p in disk.iterdir()) == ["filler"]


# Run in a child: every write into the target folder stops halfway and waits to be killed.
_SLOW_WRITES = """
import io, os, sys, time
from pathlib import Path
folder, marker = sys.argv[1], sys.argv[2]

def into_folder(fd):
    try:
        return os.readlink(f"/proc/self/fd/{fd}").startswith(folder)
    except OSError:
        return False

def stall():
    Path(marker).touch()
    time.sleep(60)

real_write = os.write
def slow_write(fd, data):
    if into_folder(fd):
        real_write(fd, bytes(data[: len(data) // 2]))
        stall()
    return real_write(fd, data)
os.write = slow_write

real_fdopen = os.fdopen
class SlowFile(io.BufferedWriter):
    def write(self, data):
        if into_folder(self.fileno()):
            super().write(bytes(data[: len(data) // 2]))
            self.flush()
            stall()
        return super().write(data)
def slow_fdopen(fd, mode="r", *args, **kwargs):
    if "w" in mode and into_folder(fd):
        return SlowFile(io.FileIO(fd, "w"))
    return real_fdopen(fd, mode, *args, **kwargs)
os.fdopen = slow_fdopen

from app.cli import main
sys.exit(main(sys.argv[3:]))
"""


@pytest.mark.parametrize("kind", ["dwca", "dwc-csv"])
def test_a_kill_mid_write_leaves_the_old_file_and_nothing_else(judged, tmp_path, kind):
    folder = tmp_path / "out"
    folder.mkdir()
    target = folder / "records"
    target.write_bytes(b"an earlier export")
    marker = tmp_path / "writing"
    child = subprocess.Popen(
        [sys.executable, "-c", _SLOW_WRITES, str(folder), str(marker), "export", kind,
         str(target), "--query", QUERY, "--library", str(judged.root)],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert child.poll() is None, child.stderr.read() if child.stderr else ""
            assert time.monotonic() < deadline, "the export never started writing"
            time.sleep(0.05)
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    finally:
        if child.poll() is None:
            child.kill()
        if child.stderr:
            child.stderr.close()
    assert sorted(p.name for p in folder.iterdir()) == ["records"]  # no temporary file
    assert target.read_bytes() == b"an earlier export"
