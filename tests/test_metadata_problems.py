"""Impossible metadata values are dropped, counted and said: in the reader's tally, the index
summary (human and --json), and the log with the first few examples."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import select

from app import paths
from app.cli import main
from engine.catalog import Image
from engine.catalog.library import Library
from engine.indexing.coco import load_coco_metadata
from engine.indexing.metadata import metadata_key

IMPOSSIBLE = {"latitude": "north", "longitude": 720, "date": "2021-13-05 10:00:00"}


def spoil(photos: Path, *, junk_record: bool = False) -> list[str]:
    """Give three photos of `photos/metadata.json` one impossible value each (and add a record
    that is not an object); returns their file names, in that order."""
    path = photos / "metadata.json"
    document = json.loads(path.read_text(encoding="utf-8"))
    images = document["images"]
    for record, (key, value) in zip(images, IMPOSSIBLE.items(), strict=False):
        record[key] = value
    if junk_record:
        images.append("not a record")
    path.write_text(json.dumps(document), encoding="utf-8")
    return [record["file_name"] for record in images[:3]]


def test_impossible_values_are_dropped_and_counted_one_by_one(photos: Path) -> None:
    names = spoil(photos, junk_record=True)
    metadata = load_coco_metadata(photos / "metadata.json")
    assert (metadata.values_ignored, metadata.records_ignored, metadata.problems) == (3, 1, 4)
    assert metadata.problem_line() == (
        "3 metadata values and 1 metadata record were ignored as impossible or unusable"
    )
    examples = " | ".join(metadata.examples)
    for text in ("latitude 'north'", "longitude 720", "date '2021-13-05 10:00:00'"):
        assert text in examples
    # Only the impossible value goes: the rest of each record is used.
    north, far_east, month_13 = (metadata[metadata_key(name)] for name in names)
    assert north.latitude is None and north.longitude is not None
    assert far_east.longitude is None and far_east.latitude is not None
    assert month_13.observed_at is None and month_13.latitude is not None


def run(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_index_summary_and_the_log_say_what_was_ignored(
    capsys: pytest.CaptureFixture[str], photos: Path, tmp_path: Path
) -> None:
    names = spoil(photos)
    library = tmp_path / "lib"
    code, out, err = run(capsys, "index", photos, "--library", library, "--model", "demo")
    assert code == 0
    line = "3 metadata values were ignored as impossible or unusable (examples in the log)"
    assert line in out.splitlines()
    # The examples: one warning line on stderr, and in the log file.
    log_text = (paths.log_dir() / "quadrat.log").read_text(encoding="utf-8")
    for text in ("latitude 'north'", "longitude 720", "date '2021-13-05 10:00:00'"):
        assert text in err and text in log_text
    # The photos are indexed with the values that were usable.
    with Library.open(library) as lib, lib.catalog.session() as s:
        rows = {img.rel_path: img for img in s.scalars(select(Image))}
    n = sum(1 for _ in photos.rglob("*.jpg"))
    assert len(rows) == n
    north = rows[names[0]]  # half a place is no place: the pair goes, the date stays
    assert north.latitude is None and north.longitude is None and north.observed_at is not None
    month_13 = rows[names[2]]
    assert month_13.observed_at is None and month_13.latitude is not None

    # --json counts them too (a second run: nothing new to index, the file is read again).
    code, out, _ = run(capsys, "index", photos, "--library", library, "--model", "demo", "--json")
    summary = json.loads(out.strip().splitlines()[-1])
    assert (summary["unchanged"], summary["metadata_values_ignored"]) == (n, 3)
    assert summary["metadata_records_ignored"] == 0
    assert len(summary["metadata_examples"]) == 3
    assert "latitude 'north'" in summary["metadata_examples"][0]


def test_a_clean_metadata_file_adds_no_line(
    capsys: pytest.CaptureFixture[str], photos: Path, tmp_path: Path
) -> None:
    code, out, _ = run(capsys, "index", photos, "--library", tmp_path / "lib", "--model", "demo")
    assert code == 0 and "metadata" not in out
