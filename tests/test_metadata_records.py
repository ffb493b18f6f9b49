"""COCO metadata is read record by record: one impossible record never costs the collection.

Ids beyond 64 bits, numbers of thousands of digits, lists nested 100,000 deep and records that
are not objects are ignored and counted, every other record is used, sections may come in any
order, the file is streamed in one pass, and syntax errors still name the file and line.
"""

from __future__ import annotations

import io
import itertools
import json
import tracemalloc
from pathlib import Path
from typing import Any

import ijson
import pytest
from sqlalchemy import select

from engine.catalog import Image, Taxon
from engine.catalog.library import Library
from engine.errors import BadInputError
from engine.indexing.coco import CocoMetadata, load_coco_metadata
from engine.indexing.indexer import Indexer

HUGE_NUMBER = "1" + "0" * 4999  # beyond int()'s 4300-digit limit
DEEP_LIST = "[" * 100_000 + "]" * 100_000  # json.load and repr() recurse on it
MUNGOOSE = "04686_Animalia_Chordata_Mammalia_Carnivora_Herpestidae_Mungos_mungo"


def _backend_available(name: str) -> bool:
    try:
        ijson.get_backend(name)
    except ImportError:
        return False
    return True


BACKENDS = [b for b in ("yajl2_c", "python") if _backend_available(b)]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each ijson backend present: yajl2_c and the pure-Python one fail differently."""
    monkeypatch.setattr(ijson, "basic_parse", ijson.get_backend(request.param).basic_parse)
    return request.param


def hostile_sections() -> dict[str, str]:
    """A metadata file's sections as JSON text: good records among impossible ones.

    Written by hand: json.dumps itself refuses the huge number and recurses on the nesting.
    """
    images = [
        '{"id": 1, "file_name": "good/a.jpg", "license": 1, "date": "2021-05-01"}',
        '{"id": 18446744073709551616, "file_name": "bad/id.jpg", "date": "2021-05-02"}',
        f'{{"id": 3, "file_name": "bad/width.jpg", "width": {HUGE_NUMBER}, "height": 48}}',
        f'{{"id": 4, "file_name": "bad/nested.jpg", "rights_holder": {DEEP_LIST}, "license": 2}}',
        '"not a record"',
        f'{{"id": 6, "file_name": {DEEP_LIST}}}',
        '{"id": 7, "file_name": "good/b.jpg", "license": "CC0 1.0", "latitude": 1.5}',
    ]
    categories = [
        '{"id": 9223372036854775808, "name": "Impossibilis impossibilis"}',
        f'{{"id": 10, "name": "Mungos mungo", "common_name": "Banded Mongoose", '
        f'"image_dir_name": "{MUNGOOSE}", "supercategory": {DEEP_LIST}}}',
    ]
    annotations = [
        '{"image_id": 1, "category_id": 9223372036854775808}',  # then a usable one below
        '{"image_id": 1, "category_id": 10, "segmentation": [[1.5, 2.5, 3.5]]}',
        '{"image_id": 18446744073709551616, "category_id": 10}',
        '{"image_id": 3, "category_id": 10}',
        '{"image_id": 4, "category_id": 10}',
        '{"image_id": 7, "category_id": 10}',
    ]
    licences = [
        '{"id": 1, "name": "CC BY 4.0"}',
        '{"id": 2, "url": "https://creativecommons.org/licenses/by-nc/4.0/"}',
    ]
    return {
        "info": f'{{"description": "hostile", "contributors": {DEEP_LIST}}}',
        "images": "[" + ",\n".join(images) + "]",
        "categories": "[" + ",\n".join(categories) + "]",
        "annotations": "[" + ",\n".join(annotations) + "]",
        "licenses": "[" + ",\n".join(licences) + "]",
    }


# images[1] to [3] (a bad value each), [4] (not an object), [5] (no usable file_name);
# categories[0] (its id); annotations[0] and [2] (an id each). Nesting in fields the reader
# does not use ("info", categories[1]'s supercategory) is skipped without a count.
HOSTILE_PROBLEMS = 8
HOSTILE_EXAMPLES = {
    "images[1]: id 18446744073709551616 is out of range",
    "images[2]: width 100000000000000000000000… is out of range",
    "images[3]: rights_holder is a list or object",
    "images[4]: not an object; ignored",
    "images[5]: no usable file_name; ignored",
    "categories[0]: id 9223372036854775808 is out of range",
    "annotations[0]: category_id 9223372036854775808 is out of range",
    "annotations[2]: image_id 18446744073709551616 is out of range",
}


def write_sections(path: Path, sections: dict[str, str], order: tuple[str, ...]) -> Path:
    body = ",\n".join(f'"{name}": {sections[name]}' for name in order)
    path.write_text("{\n" + body + "\n}\n", encoding="utf-8")
    return path


def check_hostile_result(metadata: Any) -> None:
    assert isinstance(metadata, CocoMetadata) and isinstance(metadata, dict)
    assert sorted(metadata) == [
        "bad/id.jpg",
        "bad/nested.jpg",
        "bad/width.jpg",
        "good/a.jpg",
        "good/b.jpg",
    ]
    good = metadata["good/a.jpg"]
    assert good.taxon is not None and good.taxon.name == "Mungos mungo"
    assert good.taxon.common_name == "Banded Mongoose"
    assert good.taxon.category_id == 10 and good.taxon.family == "Herpestidae"
    assert good.license == "CC BY 4.0" and good.external_id == 1
    assert good.observed_at is not None and good.observed_at.day == 1
    b = metadata["good/b.jpg"]
    assert (b.license, b.latitude, b.external_id) == ("CC0 1.0", 1.5, 7)
    assert b.taxon is not None and b.taxon.name == "Mungos mungo"
    # The bad values are gone; the rest of their records stays.
    bad_id = metadata["bad/id.jpg"]
    assert bad_id.external_id is None and bad_id.taxon is None
    assert bad_id.observed_at is not None and bad_id.observed_at.day == 2
    bad_width = metadata["bad/width.jpg"]
    assert (bad_width.width, bad_width.height, bad_width.external_id) == (None, 48, 3)
    assert bad_width.taxon is not None and bad_width.taxon.name == "Mungos mungo"
    nested = metadata["bad/nested.jpg"]
    assert nested.rights_holder is None
    assert nested.license == "https://creativecommons.org/licenses/by-nc/4.0/"
    assert nested.taxon is not None and nested.taxon.name == "Mungos mungo"
    assert metadata.problems == HOSTILE_PROBLEMS
    # The first five, in file order (which depends on the order of the sections).
    assert len(metadata.examples) == 5 and set(metadata.examples) <= HOSTILE_EXAMPLES


@pytest.mark.parametrize("encoding", ["utf-8", "utf-8-sig", "utf-16"])
def test_impossible_values_are_ignored_and_counted_and_the_rest_loads(
    tmp_path: Path, backend: str, encoding: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = write_sections(
        tmp_path / "metadata.json",
        hostile_sections(),
        ("info", "licenses", "categories", "images", "annotations"),
    )
    if encoding != "utf-8":  # json.load detects these; the stream must too
        path.write_text(path.read_text(encoding="utf-8"), encoding=encoding)
    with caplog.at_level("WARNING", logger="engine.indexing.coco"):
        metadata = load_coco_metadata(path)
    check_hostile_result(metadata)
    warnings = [r.getMessage() for r in caplog.records if r.name == "engine.indexing.coco"]
    assert len(warnings) == 1 and f"{HOSTILE_PROBLEMS} metadata records" in warnings[0]


@pytest.mark.parametrize(
    "order",
    list(itertools.permutations(("images", "categories", "annotations", "licenses"))),
    ids="-".join,
)
def test_sections_may_come_in_any_order(tmp_path: Path, order: tuple[str, ...]) -> None:
    path = write_sections(tmp_path / "metadata.json", hostile_sections(), order)
    check_hostile_result(load_coco_metadata(path))


def test_indexing_survives_impossible_metadata_records(
    photos: Path, tmp_path: Path, demo_encoder: Any
) -> None:
    metadata_path = photos / "metadata.json"
    document = json.loads(metadata_path.read_text(encoding="utf-8"))
    images = document["images"]
    common_names = {c["id"]: c["common_name"] for c in document["categories"]}
    category_of: dict[int, int] = {}
    for annotation in document["annotations"]:  # the first annotation names the photo's taxon
        category_of.setdefault(annotation["image_id"], annotation["category_id"])
    expected = {r["file_name"]: (r["id"], common_names[category_of[r["id"]]]) for r in images[4:]}
    # Impossible values in four records, and two records that are not usable at all.
    images[0]["id"] = 2**64  # json.dumps writes it; SQLite's INTEGER cannot hold it
    images[1]["width"] = "@HUGE@"
    images[2]["rights_holder"] = "@DEEP@"
    images[3]["rights_holder"] = "\ud800"  # a lone surrogate: SQLite cannot store it
    images.extend(["not a record", {"file_name": "@DEEP@"}])
    document["categories"].append({"id": 2**63, "name": "Impossibilis"})
    document["annotations"].insert(0, {"image_id": images[4]["id"], "category_id": 2**63})
    text = json.dumps(document, indent=1)
    text = text.replace('"@HUGE@"', HUGE_NUMBER).replace('"@DEEP@"', DEEP_LIST)
    metadata_path.write_text(text, encoding="utf-8")

    with Library.open(tmp_path / "lib") as library:
        report = Indexer(library, demo_encoder).run(photos)
        n = sum(1 for _ in photos.rglob("*.jpg"))
        assert report.indexed == n and not report.skipped
        # The user hears how many values and records were ignored.
        assert report.metadata_problems >= 6
        assert report.metadata_records_ignored == 2  # "not a record", and one with no file_name
        assert "were ignored as impossible or unusable" in report.summary()
        with library.catalog.session() as s:
            rows = {
                img.rel_path: (img, s.get(Taxon, img.taxon_id) if img.taxon_id else None)
                for img in s.scalars(select(Image).where(Image.status == "ok"))
            }
            assert len(rows) == n
            for rel_path, (external_id, common_name) in expected.items():
                img, taxon = rows[rel_path]
                assert img.external_id == external_id
                assert taxon is not None and taxon.common_name == common_name
                assert img.license and img.observed_at is not None
            img, taxon = rows[images[0]["file_name"]]
            assert img.external_id is None  # the impossible id is dropped, not the photo
            assert taxon is not None  # still known from the iNat folder name
            assert rows[images[1]["file_name"]][0].external_id == images[1]["id"]
            assert rows[images[2]["file_name"]][0].rights_holder is None
            assert rows[images[3]["file_name"]][0].rights_holder in (None, "?")


class CountingFile:
    """A file handle that counts the bytes read through it."""

    def __init__(self, handle: io.BufferedReader, counter: list[int]) -> None:
        self._handle = handle
        self._counter = counter

    def read(self, size: int = -1) -> bytes:
        data = self._handle.read(size)
        self._counter.append(len(data))
        return data

    def __enter__(self) -> CountingFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self._handle.close()


def write_large_metadata(path: Path, annotations: int = 2500) -> int:
    """A ~50 MB COCO file made mostly of what the reader does not keep (captions, polygons),
    with its annotations before its categories and its images last."""
    caption = "x" * 20_000
    polygon = json.dumps([[round(i * 0.5, 1) for i in range(60)]])
    with path.open("w", encoding="utf-8") as out:
        out.write('{"annotations": [')
        for i in range(annotations):
            out.write("," if i else "")
            out.write(
                f'{{"id": {i}, "image_id": {i % 10}, "category_id": {i % 3}, '
                f'"caption": "{caption}", "segmentation": {polygon}}}'
            )
        out.write('],\n"categories": [')
        out.write(",".join(f'{{"id": {c}, "name": "Genus{c} species"}}' for c in range(3)))
        out.write('],\n"images": [')
        out.write(",".join(f'{{"id": {i}, "file_name": "p{i}.jpg"}}' for i in range(10)))
        out.write("]}\n")
    return path.stat().st_size


# The pure-Python backend takes seconds over 45 MB under tracemalloc: slow, as the C backend
# streams the same file through the same reader in the fast lane.
@pytest.mark.parametrize(
    "backend",
    [pytest.param(b, marks=[pytest.mark.slow] if b == "python" else []) for b in BACKENDS],
    indirect=True,
)
def test_a_large_file_is_streamed_in_one_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    path = tmp_path / "train.json"
    size = write_large_metadata(path)
    assert size > 45_000_000
    reads: list[int] = []
    opened: list[Path] = []
    real_open = Path.open

    def counting_open(self: Path, *args: Any, **kwargs: Any) -> Any:
        opened.append(self)
        return CountingFile(real_open(self, *args, **kwargs), reads)

    monkeypatch.setattr(Path, "open", counting_open)
    tracemalloc.start()
    try:
        metadata = load_coco_metadata(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < size / 10, f"peak {peak:,} bytes for a {size:,}-byte file"
    assert opened == [path] and sum(reads) == size  # one pass, every byte read once
    assert len(metadata) == 10 and metadata.problems == 0
    taxon = metadata["p4.jpg"].taxon  # annotation 4 (the first for image 4): category 1
    assert taxon is not None and taxon.name == "Genus1 species"


def test_syntax_errors_still_name_the_file_and_line(tmp_path: Path, backend: str) -> None:
    truncated = tmp_path / "truncated.json"
    truncated.write_text(
        '{\n  "images": [\n'
        f'    {{"id": 1, "file_name": "a.jpg", "width": {HUGE_NUMBER}}},\n'
        '    {"id": 2, "file_name": "b.j',
        encoding="utf-8",
    )
    with pytest.raises(BadInputError) as caught:
        load_coco_metadata(truncated)
    assert str(truncated) in str(caught.value) and "line 4" in str(caught.value)

    deep = tmp_path / "deep.json"  # json cannot say where either: the file is still named
    deep.write_text('{"images": [{"id": 1, "file_name": "a.jpg", "r": ' + DEEP_LIST[:150_000])
    with pytest.raises(BadInputError, match="deep.json"):
        load_coco_metadata(deep)

    not_json = tmp_path / "notes.json"
    not_json.write_text("images:\n  - a.jpg\n", encoding="utf-8")
    with pytest.raises(BadInputError, match=r"notes\.json.*line 1"):
        load_coco_metadata(not_json)
