"""Scanning stays inside the collection, and odd names reach the user whole, on one line."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from app.cli import main
from engine.indexing.walk import (
    LINK_OUTSIDE_FILE,
    LINK_OUTSIDE_FOLDER,
    NAME_NOT_UNICODE,
    printable_name,
    walk_images,
)
from tests import oddfiles

needs_symlinks = pytest.mark.skipif(
    sys.platform == "win32", reason="symlinks need extra rights on Windows"
)
# Names made of bytes that are not UTF-8 exist on POSIX file systems only (macOS refuses them).
needs_byte_names = pytest.mark.skipif(
    sys.platform in ("win32", "darwin"), reason="file names are Unicode on this platform"
)


def run(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def linked_collection(tmp_path: Path) -> Path:
    """A collection with a folder link and a file link leading outside it, a folder link and a
    file link inside it, and a loop back to its root."""
    outside = tmp_path / "someone-else"
    oddfiles.write_jpeg(outside / "private1.jpg", color=(10, 200, 30))
    oddfiles.write_jpeg(outside / "sub" / "private2.jpg", color=(10, 30, 200))
    secret = oddfiles.write_png(tmp_path / "secret.png", color=(200, 10, 10))
    root = tmp_path / "photos"
    oddfiles.write_jpeg(root / "own" / "a.jpg", color=(200, 200, 30))
    oddfiles.write_png(root / "b.png", color=(30, 200, 200))
    (root / "elsewhere").symlink_to(outside, target_is_directory=True)
    (root / "secret.png").symlink_to(secret)
    oddfiles.write_jpeg(root / ".store" / "c.jpg", color=(90, 90, 90))  # hidden: seen by link
    (root / "album").symlink_to(root / ".store", target_is_directory=True)
    (root / "again.png").symlink_to("b.png")
    (root / "own" / "loop").symlink_to("..", target_is_directory=True)
    return root


@needs_symlinks
def test_walk_never_leaves_the_collection_and_says_which_links_it_passed_over(
    tmp_path: Path,
) -> None:
    root = linked_collection(tmp_path)
    passed: list[tuple[str, str]] = []
    found = [e.rel_path for e in walk_images(root, on_skip=lambda *s: passed.append(s))]
    # Links inside are followed (b.png is found by both its paths); the loop ends.
    assert found == ["again.png", "album/c.jpg", "b.png", "own/a.jpg"]
    assert passed == [("elsewhere", LINK_OUTSIDE_FOLDER), ("secret.png", LINK_OUTSIDE_FILE)]


@needs_symlinks
def test_a_collection_reached_through_a_link_is_still_walked(tmp_path: Path) -> None:
    root = linked_collection(tmp_path)
    alias = tmp_path / "alias"
    alias.symlink_to(root, target_is_directory=True)
    passed: list[tuple[str, str]] = []
    found = [e.rel_path for e in walk_images(alias, on_skip=lambda *s: passed.append(s))]
    assert found == ["again.png", "album/c.jpg", "b.png", "own/a.jpg"]
    assert [path for path, _ in passed] == ["elsewhere", "secret.png"]


@needs_symlinks
def test_index_records_no_photo_from_outside_and_reports_the_links(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    root = linked_collection(tmp_path)
    library = tmp_path / "lib"
    code, out, _ = run(capsys, "index", root, "--library", library, "--model", "demo", "--json")
    assert code == 0
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["indexed"] == 4
    assert summary["skipped"] == [
        {"path": "elsewhere", "reason": LINK_OUTSIDE_FOLDER},
        {"path": "secret.png", "reason": LINK_OUTSIDE_FILE},
    ]
    assert summary["catalog"] == {"indexed": 4, "skipped": 0}

    from engine.catalog import Image
    from engine.catalog.library import Library

    with Library.open(library) as lib, lib.catalog.session() as s:
        paths = sorted(img.rel_path for img in s.query(Image))
    assert paths == ["again.png", "album/c.jpg", "b.png", "own/a.jpg"]

    # The plain summary says it too, and counts them as skipped.
    code, out, _ = run(capsys, "index", root, "--library", library)
    assert code == 0
    assert "4 unchanged" in out and "2 skipped" in out
    assert f"  skipped elsewhere: {LINK_OUTSIDE_FOLDER}" in out.splitlines()
    assert f"  skipped secret.png: {LINK_OUTSIDE_FILE}" in out.splitlines()


def test_printable_name_keeps_ordinary_names_and_escapes_the_rest() -> None:
    assert printable_name("Å/ordinary name (1).jpg") == "Å/ordinary name (1).jpg"
    assert printable_name("a\\b.jpg") == "a\\b.jpg"
    assert printable_name("two\nlines.jpg") == "two\\nlines.jpg"
    assert printable_name("bad\udcff.jpg") == "bad\\xff.jpg"
    assert printable_name("a\\b\r.jpg") == "a\\\\b\\r.jpg"  # once escaping, backslashes too


@needs_byte_names
def test_names_that_are_not_unicode_are_listed_in_the_json_report(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    root = tmp_path / "photos"
    oddfiles.write_jpeg(root / "good.jpg")
    source = oddfiles.write_jpeg(tmp_path / "x.jpg", color=(0, 0, 255))
    bad_file = os.path.join(os.fsencode(root), b"caf\xe9.jpg")
    os.rename(os.fsencode(source), bad_file)
    os.mkdir(os.path.join(os.fsencode(root), b"d\xff"))
    oddfiles.write_jpeg(Path(os.fsdecode(os.path.join(os.fsencode(root), b"d\xff", b"in.jpg"))))

    code, out, _ = run(
        capsys, "index", root, "--library", tmp_path / "lib", "--model", "demo", "--json"
    )
    assert code == 0
    summary = json.loads(out.strip().splitlines()[-1])  # valid JSON, whatever the names
    assert summary["indexed"] == 1
    assert summary["skipped"] == [
        {"path": "caf\\xe9.jpg", "reason": NAME_NOT_UNICODE},
        {"path": "d\\xff/", "reason": NAME_NOT_UNICODE},
    ]

    code, out, _ = run(capsys, "index", root, "--library", tmp_path / "lib")
    assert code == 0
    assert "2 skipped" in out
    assert f"  skipped caf\\xe9.jpg: {NAME_NOT_UNICODE}" in out.splitlines()


def test_a_newline_in_a_file_name_keeps_one_result_on_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    if sys.platform == "win32":
        pytest.skip("Windows file names cannot hold a newline")
    root = tmp_path / "photos"
    name = "red\nsquare.png"
    oddfiles.write_png(root / name, color=(220, 20, 20))
    oddfiles.write_png(root / "blue.png", color=(20, 20, 220))
    library = tmp_path / "lib"
    assert run(capsys, "index", root, "--library", library, "--model", "demo")[0] == 0

    code, out, _ = run(capsys, "search", "a red square", "--library", library, "--top", 2)
    assert code == 0
    lines = out.splitlines()
    assert len(lines) == 2
    assert any(line.endswith(str(root / "red\\nsquare.png")) for line in lines)

    code, out, _ = run(capsys, "search", "a red square", "--library", library, "--top", 2, "--json")
    paths = {json.loads(line)["path"] for line in out.splitlines()}
    assert paths == {str(root / name), str(root / "blue.png")}  # the exact path, unescaped


def test_a_timezone_offset_in_metadata_dates_is_kept_and_the_date_filters_read_local_dates(
    tmp_path: Path, catalog_url: str, demo_encoder
) -> None:
    from datetime import UTC, date, datetime

    from engine.catalog import Image
    from engine.catalog.library import Library
    from engine.catalog.reads import photo_details
    from engine.indexing.indexer import Indexer
    from engine.search.filters import SearchFilters, filtered_ids

    root = tmp_path / "photos"
    dates = {
        "early.jpg": "2021-05-03T01:00:00+02:00",  # 2 May in UTC, 3 May where it was seen
        "late.jpg": "2021-05-31T23:30:00-05:00",  # 1 June in UTC, 31 May where it was seen
        "utc.jpg": "2021-05-03T12:00:00Z",
        "plain.jpg": "2021-05-03 10:00:00",  # no zone given: none invented
    }
    for i, name in enumerate(dates):
        oddfiles.write_jpeg(root / name, color=(40 * i, 100, 200))
    images = [{"id": i, "file_name": n, "date": d} for i, (n, d) in enumerate(dates.items())]
    (root / "metadata.json").write_text(json.dumps({"images": images}))

    database_url = catalog_url if catalog_url.startswith("postgresql") else None
    with Library.open(tmp_path / "lib", database_url=database_url) as library:
        Indexer(library, demo_encoder).run(root)
        with library.catalog.session() as s:
            ids = {img.rel_path: img.id for img in s.query(Image)}
            stored = {
                img.rel_path: (img.observed_at, img.observed_utc_offset) for img in s.query(Image)
            }
        assert stored == {
            "early.jpg": (datetime(2021, 5, 3, 1, 0), 120),
            "late.jpg": (datetime(2021, 5, 31, 23, 30), -300),
            "utc.jpg": (datetime(2021, 5, 3, 12, 0), 0),
            "plain.jpg": (datetime(2021, 5, 3, 10, 0), None),
        }
        details = photo_details(library, list(ids.values()))
        shown = {d.rel_path: d.observed_at.isoformat() for d in details.values() if d.observed_at}
        assert shown == {
            "early.jpg": "2021-05-03T01:00:00+02:00",
            "late.jpg": "2021-05-31T23:30:00-05:00",
            "utc.jpg": "2021-05-03T12:00:00+00:00",
            "plain.jpg": "2021-05-03T10:00:00",
        }
        assert details[ids["early.jpg"]].observed_at == datetime(2021, 5, 2, 23, 0, tzinfo=UTC)

        def passing(filters: SearchFilters) -> set[str]:
            found = set(filtered_ids(library.catalog, filters).tolist())
            return {name for name, image_id in ids.items() if image_id in found}

        may_3 = SearchFilters(date_from=date(2021, 5, 3), date_to=date(2021, 5, 3))
        assert passing(may_3) == {"early.jpg", "utc.jpg", "plain.jpg"}
        assert passing(SearchFilters(months=(5, 5))) == set(dates)
        assert passing(SearchFilters(months=(6, 6))) == set()  # late.jpg is May, locally
