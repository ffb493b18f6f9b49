"""Darwin Core exports (engine/io/dwc.py, `quadrat export dwca|dwc-csv`): an archive of the demo
read back by a third-party reader (python-dwca-reader), its eml.xml, licences, incomplete
records, and no partial archive when the disk refuses or the export is killed."""

from __future__ import annotations

import contextlib
import csv
import os
import signal
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from urllib.parse import urlparse
from urllib.request import url2pathname
from xml.etree import ElementTree as ET

import pytest
from dwca.read import DwCAReader
from sqlalchemy import select

from app.cli import main
from engine.catalog import Image, Taxon
from engine.catalog.library import Library
from engine.errors import QuadratError
from engine.io.dwc import CSV_COLUMNS, export_dwc_csv, export_dwca
from engine.judgments.attributes import set_attributes
from engine.judgments.queries import QueryStore
from tests.small_disk import small_tmpfs

DWC = "http://rs.tdwg.org/dwc/terms/"
DC = "http://purl.org/dc/terms/"
MULTIMEDIA = "http://rs.gbif.org/terms/1.0/Multimedia"
MEASUREMENTS = DWC + "MeasurementOrFact"
EML = "{eml://ecoinformatics.org/eml-2.1.1}"
QUERY = "red circle"
JUDGE = "Ada Judge"
RELEVANT = 8


@dataclass
class Judged:
    """A copy of the demo library with one query judged: who, which photos, which run."""

    root: Path
    query_id: int
    relevant: list[int]  # image ids judged relevant, in id order
    not_relevant: list[int]
    run_model: str


@pytest.fixture
def judged(copy_cli_demo_library, tmp_path: Path) -> Judged:
    """The demo library with "red circle" saved, searched once (a saved run), eight of its
    photos judged relevant and two of another taxon not relevant, and attributes on two."""
    root = copy_cli_demo_library(tmp_path / "lib")
    with Library.open(root) as library:
        with library.catalog.session() as s:
            ids = list(
                s.scalars(
                    select(Image.id)
                    .join(Taxon, Taxon.id == Image.taxon_id)
                    .where(Taxon.common_name == QUERY)
                    .order_by(Image.id)
                )
            )
            others = list(
                s.scalars(
                    select(Image.id)
                    .join(Taxon, Taxon.id == Image.taxon_id)
                    .where(Taxon.common_name != QUERY)
                    .order_by(Image.id)
                    .limit(2)
                )
            )
        store = QueryStore(library, user=JUDGE)
        query_id = store.find_or_create_query(QUERY)
        model = library.model_key or ""
        store.save_run(
            query_id,
            "text",
            [(i, 1.0 - n / 100) for n, i in enumerate(ids[:RELEVANT] + others)],
            model_key=model,
        )
        for image_id in ids[:RELEVANT]:
            store.judge(query_id, image_id, 1)
        for image_id in others:
            store.judge(query_id, image_id, 0)
        set_attributes(
            library,
            query_id,
            ids[0],
            {"lifeStage": "juvenile", "behavior": "basking | feeding"},
            judge=JUDGE,
        )
        set_attributes(library, query_id, ids[1], {"sex": "female"}, judge=JUDGE)
    return Judged(root, query_id, ids[:RELEVANT], others, model)


def _set_photo(root: Path, image_id: int, **values: object) -> None:
    with Library.open(root) as library, library.catalog.session() as s:
        image = s.get(Image, image_id)
        assert image is not None
        for name, value in values.items():
            setattr(image, name, value)


def _photo(root: Path, image_id: int) -> Image:
    with Library.open(root) as library, library.catalog.session() as s:
        image = s.get(Image, image_id)
        assert image is not None
        s.expunge(image)
        return image


class _ByPath(dict[str, tuple[dict[str, str], list[dict[str, str]]]]):
    """Rows by the photo's file path (from its file: URI), looked up by the photo's path in
    its collection (the end of that path)."""

    def _key(self, rel: str) -> str:
        return next((k for k in self if k.endswith("/" + rel)), rel)

    def __getitem__(self, rel: str) -> tuple[dict[str, str], list[dict[str, str]]]:
        return super().__getitem__(self._key(rel))

    def __contains__(self, rel: object) -> bool:
        return isinstance(rel, str) and super().__contains__(self._key(rel))


def _rows_by_path(archive: Path) -> _ByPath:
    """The photo's path -> (core row, multimedia rows), as the third-party reader sees them."""
    out = _ByPath()
    with DwCAReader(str(archive)) as dwca:
        for row in dwca:
            media = [ext.data for ext in row.extensions if ext.rowtype == MULTIMEDIA]
            uri = media[0][DC + "identifier"]
            assert uri.startswith("file:///")
            out[url2pathname(urlparse(uri).path)] = (row.data, media)
    return out


# --- the archive, read back by a third party ----------------------------------------------------


def test_an_archive_of_the_demo_reads_back_with_every_record_term_and_value(judged, tmp_path):
    out = tmp_path / "out" / "red-circle.zip"
    with Library.open(judged.root) as library:
        report = export_dwca(library, judged.query_id, out)
    assert report.written == RELEVANT and not report.restricted and not report.incomplete
    with DwCAReader(str(out)) as dwca:
        assert dwca.descriptor.core.type == DWC + "Occurrence"
        assert [e.type for e in dwca.descriptor.extensions] == [MULTIMEDIA, MEASUREMENTS]
        core_terms = set(dwca.descriptor.core.terms)
        for term in (
            "occurrenceID", "basisOfRecord", "scientificName", "taxonRank", "kingdom",
            "eventDate", "decimalLatitude", "decimalLongitude", "geodeticDatum",
            "coordinateUncertaintyInMeters", "behavior", "lifeStage", "sex",
            "reproductiveCondition", "vitality", "associatedTaxa", "occurrenceRemarks",
            "identificationRemarks",
        ):  # fmt: skip
            assert DWC + term in core_terms, term
        media_terms = set(dwca.descriptor.extensions[0].terms)
        for term in ("type", "format", "identifier", "references", "created", "creator",
                     "license", "rightsHolder"):  # fmt: skip
            assert DC + term in media_terms, term
        assert len(dwca.rows) == RELEVANT
        assert all(
            [e.rowtype for e in row.extensions] == [MULTIMEDIA, MEASUREMENTS] for row in dwca.rows
        )  # one photo and how it was judged (one judge, precision unmeasured: no p)
        ids = [row.id for row in dwca.rows]
        assert len(set(ids)) == RELEVANT

    rows = _rows_by_path(out)
    first = _photo(judged.root, judged.relevant[0])
    core, media = rows[first.rel_path]
    assert core[DWC + "basisOfRecord"] == "HumanObservation"
    assert core[DWC + "scientificName"] == "Circulus ruber"
    assert core[DWC + "taxonRank"] == "species"
    assert core[DWC + "kingdom"] == "Plantae" and core[DWC + "genus"] == "Circulus"
    assert first.observed_at is not None and first.latitude is not None
    offset = first.observed_utc_offset
    assert offset == 0  # the demo records UTC
    assert core[DWC + "eventDate"] == first.observed_at.strftime("%Y-%m-%dT%H:%M:%S+00:00")
    assert float(core[DWC + "decimalLatitude"]) == first.latitude
    assert float(core[DWC + "decimalLongitude"]) == first.longitude
    assert core[DWC + "geodeticDatum"] == "WGS84"
    assert float(core[DWC + "coordinateUncertaintyInMeters"]) == first.location_uncertainty
    assert core[DWC + "lifeStage"] == "juvenile"
    assert core[DWC + "behavior"] == "basking | feeding"
    assert core[DWC + "sex"] == ""
    assert QUERY in core[DWC + "identificationRemarks"]
    assert JUDGE in core[DWC + "identificationRemarks"]
    assert media[0][DC + "type"] == "StillImage"
    assert media[0][DC + "format"] == "image/jpeg"
    assert media[0][DC + "creator"] == first.rights_holder
    assert media[0][DC + "rightsHolder"] == first.rights_holder
    assert media[0][DC + "created"] == core[DWC + "eventDate"]
    assert media[0][DC + "license"].startswith("http://creativecommons.org/")
    second = _photo(judged.root, judged.relevant[1])
    assert rows[second.rel_path][0][DWC + "sex"] == "female"
    # Not-relevant photos are no records.
    for image_id in judged.not_relevant:
        assert _photo(judged.root, image_id).rel_path not in rows

    # The same photo keeps its occurrenceID from one export to the next.
    again = tmp_path / "again.zip"
    with Library.open(judged.root) as library:
        export_dwca(library, judged.query_id, again, media_url="https://example.org/photos/")
    with DwCAReader(str(again)) as dwca:
        assert sorted(r.id for r in dwca.rows) == sorted(ids)
        identifiers = {r.extensions[0].data[DC + "identifier"] for r in dwca.rows}
    assert f"https://example.org/photos/{first.rel_path}" in identifiers
    assert all(i.startswith("https://example.org/photos/train/") for i in identifiers)


def test_eml_parses_and_carries_the_provenance(judged, tmp_path):
    out = tmp_path / "records.zip"
    with Library.open(judged.root) as library:
        export_dwca(library, judged.query_id, out, creator="Dr Sedge")
    with zipfile.ZipFile(out) as archive:
        assert sorted(archive.namelist()) == [
            "eml.xml", "measurementorfact.txt", "meta.xml", "multimedia.txt", "occurrence.txt"
        ]  # fmt: skip
        root = ET.fromstring(archive.read("eml.xml"))
        meta = ET.fromstring(archive.read("meta.xml"))
    assert root.tag == EML + "eml"
    dataset = root.find("dataset")
    assert dataset is not None
    assert QUERY in (dataset.findtext("title") or "")
    assert dataset.findtext("creator/individualName/surName") == "Dr Sedge"
    assert dataset.findtext("contact/individualName/surName") == "Dr Sedge"
    link = dataset.find("intellectualRights/para/ulink")
    assert link is not None and link.get("url", "").startswith("http://creativecommons.org/")
    methods = " ".join(
        para.text or "" for para in dataset.iterfind("methods/methodStep/description/para")
    )
    assert f'"{QUERY}"' in methods
    assert judged.run_model in methods  # the model
    assert "method text" in methods  # the search method and its parameters
    assert JUDGE in methods  # who judged
    from engine import quadrat_version

    assert f"Quadrat {quadrat_version()}" in methods
    assert meta.get("metadata") == "eml.xml"


# --- licences and incomplete records -------------------------------------------------------------


def test_restricted_licences_are_left_out_and_listed_unless_asked_for(judged, tmp_path):
    reserved, unknown = judged.relevant[2], judged.relevant[3]
    _set_photo(judged.root, reserved, license="© All rights reserved")
    _set_photo(judged.root, unknown, license=None)
    out = tmp_path / "open.zip"
    with Library.open(judged.root) as library:
        report = export_dwca(library, judged.query_id, out)
    assert report.written == RELEVANT - 2
    assert {p.image_id for p in report.restricted} == {reserved, unknown}
    assert "left out" in report.summary() and "--include-restricted" in report.summary()
    paths = set(_rows_by_path(out))
    assert _photo(judged.root, reserved).rel_path not in paths
    assert _photo(judged.root, unknown).rel_path not in paths

    both = tmp_path / "all.zip"
    with Library.open(judged.root) as library:
        report = export_dwca(library, judged.query_id, both, include_restricted=True)
    assert report.written == RELEVANT and report.restricted_included
    assert "restricted licence included" in report.summary()
    rows = _rows_by_path(both)
    assert rows[_photo(judged.root, reserved).rel_path][1][0][DC + "license"] == (
        "© All rights reserved"
    )
    assert rows[_photo(judged.root, unknown).rel_path][1][0][DC + "license"] == "unknown"
    # With restricted photos inside, the dataset claims no more than non-commercial reuse.
    assert "CC-BY-NC" in report.licence


def test_a_photo_without_date_or_place_exports_with_what_it_has_and_is_listed(judged, tmp_path):
    bare = judged.relevant[4]
    _set_photo(
        judged.root, bare, observed_at=None, observed_utc_offset=None, latitude=None,
        longitude=None, location_uncertainty=None,
    )  # fmt: skip
    out = tmp_path / "records.zip"
    with Library.open(judged.root) as library:
        report = export_dwca(library, judged.query_id, out)
    assert report.written == RELEVANT
    assert [(p.image_id, p.reason) for p in report.incomplete] == [(bare, "no date, no place")]
    assert "1 incomplete" in report.summary()
    core, media = _rows_by_path(out)[_photo(judged.root, bare).rel_path]
    assert core[DWC + "scientificName"] == "Circulus ruber"
    assert core[DWC + "eventDate"] == "" and core[DWC + "decimalLatitude"] == ""
    assert core[DWC + "geodeticDatum"] == ""  # no datum claimed for no coordinates
    assert media[0][DC + "created"] == ""


# --- the flat CSV -------------------------------------------------------------------------------


def test_the_flat_csv_has_darwin_core_columns_one_row_per_photo(judged, tmp_path):
    first = judged.relevant[0]
    _set_photo(judged.root, first, rights_holder="=HYPERLINK(0)")
    out = tmp_path / "records.csv"
    with Library.open(judged.root) as library:
        report = export_dwc_csv(library, judged.query_id, out)
    assert report.written == RELEVANT
    with out.open(encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle)
        assert tuple(reader.fieldnames or ()) == CSV_COLUMNS
        rows = list(reader)
    assert len(rows) == RELEVANT
    by_media = {url2pathname(urlparse(row["associatedMedia"]).path): row for row in rows}
    row = next(r for k, r in by_media.items() if k.endswith(_photo(judged.root, first).rel_path))
    assert row["scientificName"] == "Circulus ruber" and row["lifeStage"] == "juvenile"
    assert row["rightsHolder"] == "'=HYPERLINK(0)"  # shown by a spreadsheet, never run
    assert all(r["basisOfRecord"] == "HumanObservation" for r in rows)


# --- failures leave nothing behind ---------------------------------------------------------------


@pytest.fixture
def read_only_folder(tmp_path: Path) -> Iterator[Path]:
    """A folder that refuses writes: a tmpfs remounted read-only as root, else a folder without
    write permission."""
    folder = tmp_path / "ro"
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        with small_tmpfs(folder, "1M"):
            (folder / "records.zip").write_bytes(b"an earlier archive")
            done = subprocess.run(
                ["mount", "-o", "remount,ro", str(folder)], capture_output=True, text=True
            )
            if done.returncode != 0:
                pytest.skip(f"cannot remount read-only: {done.stderr.strip()}")
            yield folder
        return
    folder.mkdir()
    (folder / "records.zip").write_bytes(b"an earlier archive")
    folder.chmod(0o555)
    try:
        yield folder
    finally:
        folder.chmod(0o755)


def test_a_read_only_folder_fails_in_one_line_and_leaves_the_old_file(judged, read_only_folder):
    target = read_only_folder / "records.zip"
    for write in (export_dwca, export_dwc_csv):
        with Library.open(judged.root) as library, pytest.raises(QuadratError) as caught:
            write(library, judged.query_id, target)
        message = str(caught.value)
        assert "\n" not in message
        assert "read-only" in message or "no permission" in message
        assert "no partial file" in message
        assert target.read_bytes() == b"an earlier archive"
        assert sorted(p.name for p in read_only_folder.iterdir()) == ["records.zip"]


def test_a_full_disk_fails_in_one_line_and_leaves_no_partial_archive(judged, tmp_path, monkeypatch):
    with small_tmpfs(tmp_path / "disk", "16k") as disk:
        with contextlib.suppress(OSError), (disk / "filler").open("wb") as filler:
            while True:  # until the disk is full
                filler.write(b"\0" * 1024)
                filler.flush()
        with Library.open(judged.root) as library, pytest.raises(QuadratError) as caught:
            export_dwca(library, judged.query_id, disk / "records.zip")
        assert "disk is full" in str(caught.value) and "\n" not in str(caught.value)
        # The same when the free space cannot be read first: the write itself fails.
        monkeypatch.setattr("engine.io.safe_write.free_bytes", lambda folder: None)
        with Library.open(judged.root) as library, pytest.raises(QuadratError) as caught:
            export_dwca(library, judged.query_id, disk / "records.zip")
        assert "disk is full" in str(caught.value)
        assert sorted(p.name for p in disk.iterdir()) == ["filler"]


_KILLED_EXPORT = """
import os, signal, sys
import engine.io.safe_write as safe_write
from engine.catalog.library import Library
from engine.io.dwc import export_dwca

library_path, target, query_id, where = sys.argv[1:5]
name = os.path.basename(target)

def die():
    os.kill(os.getpid(), signal.SIGKILL)

if where == "write":  # half the archive's bytes written, into a file with no name yet
    def half(fd, data):
        os.write(fd, bytes(data[: len(data) // 2]))
        die()
    safe_write._write_all = half
else:  # "link": before the whole file is named; "replace": named, before the rename
    real = getattr(os, where)
    def dying(*args, **kwargs):
        if os.path.basename(str(args[1])).startswith(("." + name, name)):
            die()
        return real(*args, **kwargs)
    setattr(os, where, dying)
with Library.open(library_path) as library:
    export_dwca(library, int(query_id), target)
sys.exit(3)  # never killed: this system writes a named temporary file instead
"""


@pytest.mark.parametrize("where", ["write", "link", "replace"])
def test_a_killed_export_leaves_the_earlier_archive_and_the_next_export_tidies_up(
    judged, tmp_path, where
):
    target = tmp_path / "out" / "records.zip"
    target.parent.mkdir()
    target.write_bytes(b"an earlier archive")
    root = Path(__file__).parent.parent
    child = subprocess.run(
        [sys.executable, "-c", _KILLED_EXPORT, str(judged.root), str(target),
         str(judged.query_id), where],
        env={**os.environ, "PYTHONPATH": str(root)}, cwd=root, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    if child.returncode == 3:
        pytest.skip("no unnamed temporary files on this system")
    assert child.returncode == -signal.SIGKILL, child.stderr
    assert target.read_bytes() == b"an earlier archive"
    left = [p for p in target.parent.iterdir() if p != target]
    assert all(p.name.startswith(".records.zip.") for p in left)  # hidden, never the archive
    assert bool(left) == (where == "replace")  # a file with no name is freed by the kernel
    past = time.time() - 3600  # the killed export's temporary file, once old, is taken away
    for path in left:
        os.utime(path, (past, past))
    with Library.open(judged.root) as library:
        export_dwca(library, judged.query_id, target)
    assert sorted(p.name for p in target.parent.iterdir()) == ["records.zip"]
    with DwCAReader(str(target)) as dwca:
        assert len(dwca.rows) == RELEVANT


# --- the command line -----------------------------------------------------------------------------


def test_the_commands_write_both_formats_and_say_what_was_left_out(judged, tmp_path, capsys):
    _set_photo(judged.root, judged.relevant[2], license="All rights reserved")
    archive, table = tmp_path / "records.zip", tmp_path / "records.csv"
    lib = ["--library", str(judged.root)]
    assert main(["export", "dwca", str(archive), "--query", QUERY, *lib]) == 0
    said = capsys.readouterr()
    assert said.out.strip() == (
        f"{RELEVANT - 1} records written to {archive}; 1 photo left out: their licence does "
        "not allow reuse (include them with --include-restricted)"
    )
    assert "file: URIs, which only this computer can open" in said.err
    assert _photo(judged.root, judged.relevant[2]).rel_path in said.err
    with DwCAReader(str(archive)) as dwca:
        assert len(dwca.rows) == RELEVANT - 1
    assert main(
        ["export", "dwc-csv", str(table), "--query", str(judged.query_id),
         "--include-restricted", *lib]
    ) == 0  # fmt: skip
    assert "1 with a restricted licence included" in capsys.readouterr().out
    with table.open(encoding="utf-8", newline="") as handle:
        assert len(list(csv.DictReader(handle))) == RELEVANT
    # A query the library does not have: one line, exit 2, nothing written.
    assert main(["export", "dwca", str(tmp_path / "no.zip"), "--query", "blue moon", *lib]) == 2
    assert "no saved query" in capsys.readouterr().err
    assert not (tmp_path / "no.zip").exists()


def test_import_of_a_judgments_csv_then_export_dwca_round_trips_every_attribute(
    judged, copy_cli_demo_library, tmp_path, capsys
):
    values = {
        "behavior": "courtship | display",
        "lifeStage": "adult",
        "sex": "male",
        "reproductiveCondition": "flowering",
        "vitality": "alive",
        "associatedTaxa": "visits flowers of: Salvia",
        "occurrenceRemarks": "two on one stem",
    }
    with Library.open(judged.root) as library:
        set_attributes(library, judged.query_id, judged.relevant[5], values, judge=JUDGE)
    judgments = tmp_path / "judgments.csv"
    assert main(["export", "judgments", str(judgments), "--library", str(judged.root)]) == 0
    other = copy_cli_demo_library(tmp_path / "other")
    assert main(["import", "--judgments", str(judgments), "--library", str(other)]) == 0
    archive = tmp_path / "records.zip"
    assert main(["export", "dwca", str(archive), "--query", QUERY, "--library", str(other)]) == 0
    capsys.readouterr()
    rows = _rows_by_path(archive)
    assert len(rows) == RELEVANT
    core, _ = rows[_photo(judged.root, judged.relevant[5]).rel_path]
    assert {term: core[DWC + term] for term in values} == values
    assert rows[_photo(judged.root, judged.relevant[0]).rel_path][0][DWC + "lifeStage"] == (
        "juvenile"
    )


def test_event_dates_keep_a_recorded_utc_offset(judged, tmp_path):
    _set_photo(
        judged.root, judged.relevant[0], observed_at=datetime(2024, 5, 1, 6, 30),
        observed_utc_offset=-420,
    )  # fmt: skip
    out = tmp_path / "records.csv"
    with Library.open(judged.root) as library:
        export_dwc_csv(library, judged.query_id, out)
    with out.open(encoding="utf-8", newline="") as handle:
        dates = {row["eventDate"] for row in csv.DictReader(handle)}
    assert "2024-05-01T06:30:00-07:00" in dates
