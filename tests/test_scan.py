"""Tests for finding photos and reading them: engine.indexing's walk, names, metadata, coco,
decode and hashes (folder walking, iNat names, COCO metadata, EXIF, safe decoding)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tracemalloc
import unicodedata
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from PIL import Image, ImageFile

from engine.errors import BadImageError, BadInputError
from engine.indexing.coco import load_coco_metadata
from engine.indexing.decode import DEFAULT_MAX_PIXELS, IMAGE_EXTENSIONS, decode_image, read_exif
from engine.indexing.hashes import content_hash
from engine.indexing.metadata import find_metadata_file, metadata_key, parse_date
from engine.indexing.names import TaxonInfo, parse_inat_dirname, taxon_for_path
from engine.indexing.walk import FileEntry, walk_images
from tests import oddfiles

EARTHWORM = "00000_Animalia_Annelida_Clitellata_Haplotaxida_Lumbricidae_Lumbricus_terrestris"
ASTER = "07133_Plantae_Tracheophyta_Magnoliopsida_Asterales_Asteraceae_Symphyotrichum_novae-angliae"
MONGOOSE = "04686_Animalia_Chordata_Mammalia_Carnivora_Herpestidae_Mungos_mungo"


def rel_paths(root: Path) -> list[str]:
    return [entry.rel_path for entry in walk_images(root)]


# --------------------------------------------------------------------------------------------
# iNat folder names


def test_parse_inat_dirname_reads_every_rank() -> None:
    assert parse_inat_dirname(EARTHWORM) == TaxonInfo(
        name="Lumbricus terrestris",
        kingdom="Animalia",
        phylum="Annelida",
        class_="Clitellata",
        order="Haplotaxida",
        family="Lumbricidae",
        genus="Lumbricus",
        specific_epithet="terrestris",
        common_name=None,
        category_id=0,
        image_dir_name=EARTHWORM,
    )


def test_parse_inat_dirname_keeps_hyphenated_epithet() -> None:
    taxon = parse_inat_dirname(ASTER)
    assert taxon is not None
    assert taxon.name == "Symphyotrichum novae-angliae"
    assert taxon.specific_epithet == "novae-angliae"
    assert taxon.category_id == 7133


@pytest.mark.parametrize(
    "name",
    [
        "",
        "train",
        "Lumbricus terrestris",
        # seven and nine fields
        "00000_Animalia_Annelida_Clitellata_Haplotaxida_Lumbricidae_Lumbricus",
        EARTHWORM + "_extra",
        # no number, or a number that is not one
        "Animalia_Animalia_Annelida_Clitellata_Haplotaxida_Lumbricidae_Lumbricus_terrestris",
        "0000x_Animalia_Annelida_Clitellata_Haplotaxida_Lumbricidae_Lumbricus_terrestris",
        # an ordinary folder that happens to have eight fields and a number first
        "2021_05_03_trip_to_the_coast_day",
        # lower-case genus, capitalised epithet, an empty field
        "00000_Animalia_Annelida_Clitellata_Haplotaxida_Lumbricidae_lumbricus_terrestris",
        "00000_Animalia_Annelida_Clitellata_Haplotaxida_Lumbricidae_Lumbricus_Terrestris",
        "00000_Animalia__Clitellata_Haplotaxida_Lumbricidae_Lumbricus_terrestris",
    ],
)
def test_parse_inat_dirname_rejects_other_names(name: str) -> None:
    assert parse_inat_dirname(name) is None


def test_taxon_for_path_uses_nearest_parsing_parent() -> None:
    earthworm = taxon_for_path(f"train/{EARTHWORM}/6f1b3c.jpg")
    assert earthworm is not None and earthworm.name == "Lumbricus terrestris"
    # A sub-folder that does not parse is looked through; the nearest parsing one wins.
    nested = taxon_for_path(f"train/{EARTHWORM}/{ASTER}/extra shots/a.jpg")
    assert nested is not None and nested.name == "Symphyotrichum novae-angliae"


def test_taxon_for_path_is_none_for_plain_layouts() -> None:
    assert taxon_for_path("holiday/2021/beach.jpg") is None
    assert taxon_for_path("beach.jpg") is None
    # The file's own name is not a folder.
    assert taxon_for_path(f"{EARTHWORM}.jpg") is None


# --------------------------------------------------------------------------------------------
# COCO metadata


def write_json(path: Path, document: object) -> Path:
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def test_load_coco_metadata_reads_full_records(tmp_path: Path) -> None:
    records = oddfiles.make_inat_collection(tmp_path)
    metadata = load_coco_metadata(tmp_path / "metadata.json")
    assert sorted(metadata) == sorted(records)

    rel_path = next(p for p in records if MONGOOSE in p)
    meta = metadata[rel_path]
    assert meta.taxon is not None
    assert meta.taxon.name == "Mungos mungo"
    assert meta.taxon.common_name == "Banded Mongoose"
    assert meta.taxon.category_id == 4686
    assert (meta.taxon.kingdom, meta.taxon.class_, meta.taxon.family) == (
        "Animalia",
        "Mammalia",
        "Herpestidae",
    )
    assert meta.taxon.image_dir_name == MONGOOSE
    # The int id resolved through "licenses": its URL, which names the licence exactly.
    assert meta.license == "https://creativecommons.org/licenses/by/4.0/"
    assert meta.rights_holder == records[rel_path]["rights_holder"]
    assert meta.observed_at == datetime(2021, 5, 1, 10, 0, tzinfo=UTC)
    assert (meta.latitude, meta.longitude) == (11.5, -20.25)
    assert meta.location_uncertainty == 15.0
    assert (meta.width, meta.height) == (64, 48)
    assert meta.external_id == records[rel_path]["id"]


def test_load_coco_metadata_tolerates_missing_and_null_fields(tmp_path: Path) -> None:
    path = write_json(
        tmp_path / "metadata.json",
        {
            "images": [
                {"file_name": "a.jpg"},
                {
                    "id": 7,
                    "file_name": "./sub\\b.jpg",
                    "width": None,
                    "height": None,
                    "license": None,
                    "rights_holder": None,
                    "date": None,
                    "latitude": None,
                    "longitude": None,
                    "location_uncertainty": None,
                },
                {"id": 8, "file_name": "c.jpg", "latitude": 123.0, "longitude": "x"},
                {"id": 9},  # no file name: ignored
                "not a record",
            ],
            "annotations": [{"image_id": 7, "category_id": 99}],  # unknown category
        },
    )
    metadata = load_coco_metadata(path)
    assert sorted(metadata) == ["a.jpg", "c.jpg", "sub/b.jpg"]
    for meta in metadata.values():
        assert meta.taxon is None
        assert meta.observed_at is None
        assert meta.latitude is None and meta.longitude is None
        assert meta.license is None and meta.rights_holder is None
        assert meta.width is None and meta.height is None
    assert metadata["sub/b.jpg"].external_id == 7
    assert metadata["a.jpg"].external_id is None


def test_load_coco_metadata_licence_ids_and_strings(tmp_path: Path) -> None:
    path = write_json(
        tmp_path / "train.json",
        {
            "licenses": [{"id": 1, "name": "CC0 1.0"}, {"id": 2, "name": "CC BY-NC 4.0"}],
            "images": [
                {"id": 1, "file_name": "a.jpg", "license": 2},
                {"id": 2, "file_name": "b.jpg", "license": "CC BY-SA 4.0"},
                {"id": 3, "file_name": "c.jpg", "license": 5},  # no such id
            ],
        },
    )
    metadata = load_coco_metadata(path)
    assert metadata["a.jpg"].license == "CC BY-NC 4.0"
    assert metadata["b.jpg"].license == "CC BY-SA 4.0"
    assert metadata["c.jpg"].license is None


def test_load_coco_metadata_taxon_from_sparse_category(tmp_path: Path) -> None:
    path = write_json(
        tmp_path / "metadata.json",
        {
            "images": [{"id": 1, "file_name": "a.jpg"}, {"id": 2, "file_name": "b.jpg"}],
            "categories": [
                {"id": 3, "image_dir_name": ASTER},  # ranks only in the folder name
                {"id": 4, "family": "Herpestidae", "genus": None},  # deepest rank known
            ],
            "annotations": [{"image_id": 1, "category_id": 3}, {"image_id": 2, "category_id": 4}],
        },
    )
    metadata = load_coco_metadata(path)
    aster = metadata["a.jpg"].taxon
    assert aster is not None
    assert (aster.name, aster.genus, aster.order) == (
        "Symphyotrichum novae-angliae",
        "Symphyotrichum",
        "Asterales",
    )
    assert aster.category_id == 3
    family_only = metadata["b.jpg"].taxon
    assert family_only is not None and family_only.name == "Herpestidae"


def test_load_coco_metadata_keys_are_nfc(tmp_path: Path) -> None:
    composed = unicodedata.normalize("NFC", "café/é.jpg")
    decomposed = unicodedata.normalize("NFD", composed)
    assert composed != decomposed
    path = write_json(tmp_path / "metadata.json", {"images": [{"id": 1, "file_name": decomposed}]})
    metadata = load_coco_metadata(path)
    assert metadata_key(decomposed) in metadata
    assert metadata_key(composed) in metadata


def test_malformed_json_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "metadata.json"
    path.write_text('{\n  "images": [\n    {"file_name": "a.jpg",,}\n  ]\n}\n', encoding="utf-8")
    with pytest.raises(BadInputError) as caught:
        load_coco_metadata(path)
    message = str(caught.value)
    assert str(path) in message
    assert "line 3" in message


@pytest.mark.parametrize(
    "document",
    [[{"file_name": "a.jpg"}], {"annotations": []}, {"images": {"a.jpg": {}}}, "images"],
    ids=["list", "no-images", "images-not-list", "string"],
)
def test_wrong_shape_names_file(tmp_path: Path, document: object) -> None:
    path = write_json(tmp_path / "odd.json", document)
    with pytest.raises(BadInputError, match="odd.json"):
        load_coco_metadata(path)


def test_unreadable_metadata_names_file(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="missing.json"):
        load_coco_metadata(tmp_path / "missing.json")
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(BadInputError, match="binary.json"):
        load_coco_metadata(binary)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2021-05-03", datetime(2021, 5, 3)),
        ("2021-05-03 10:00:00", datetime(2021, 5, 3, 10)),
        ("2021-05-03T10:00:00", datetime(2021, 5, 3, 10)),
        ("2021-05-03 10:00:00+00:00", datetime(2021, 5, 3, 10, tzinfo=UTC)),
        ("2021-05-03T10:00:00Z", datetime(2021, 5, 3, 10, tzinfo=UTC)),
        (
            "2021-05-03T10:00:00-07:00",
            datetime(2021, 5, 3, 10, tzinfo=timezone(timedelta(hours=-7))),
        ),
        ("2021:05:03 10:00:00", datetime(2021, 5, 3, 10)),
        ("  ", None),
        ("yesterday", None),
        ("2021-13-45", None),
        (20210503, None),
        (None, None),
    ],
)
def test_parse_date(text: object, expected: datetime | None) -> None:
    parsed = parse_date(text)
    assert parsed == expected
    if expected is not None:
        assert parsed is not None and parsed.utcoffset() == expected.utcoffset()


def test_find_metadata_file_prefers_metadata_json(tmp_path: Path) -> None:
    assert find_metadata_file(tmp_path) is None
    write_json(tmp_path / "train.json", {"images": []})
    assert find_metadata_file(tmp_path) == tmp_path / "train.json"
    write_json(tmp_path / "metadata.json", {"images": []})
    assert find_metadata_file(tmp_path) == tmp_path / "metadata.json"


# --------------------------------------------------------------------------------------------
# EXIF


def test_read_exif_date_gps_orientation(tmp_path: Path) -> None:
    path = oddfiles.write_jpeg_with_exif(tmp_path / "rotated.jpg")
    with Image.open(path) as image:
        exif = read_exif(image)
    assert exif.observed_at == datetime(2021, 5, 3, 10, 11, 12)
    # Written as S and W references with positive rationals: both must come back negative.
    assert exif.latitude == pytest.approx(oddfiles.EXIF_SAMPLE_LATITUDE, abs=1e-6)
    assert exif.longitude == pytest.approx(oddfiles.EXIF_SAMPLE_LONGITUDE, abs=1e-6)
    assert exif.orientation == 6


def test_read_exif_north_east_and_timezone(tmp_path: Path) -> None:
    exif_in = oddfiles.make_exif(
        datetime_original="2019:12:31 23:59:58",
        offset_time_original="+05:30",
        latitude=51.5007,
        longitude=0.1246,
    )
    path = oddfiles.write_image(tmp_path / "london.jpg", image_format="JPEG", exif=exif_in)
    with Image.open(path) as image:
        exif = read_exif(image)
    assert exif.observed_at == datetime(
        2019, 12, 31, 23, 59, 58, tzinfo=timezone(timedelta(hours=5, minutes=30))
    )
    assert exif.latitude == pytest.approx(51.5007, abs=1e-6)
    assert exif.longitude == pytest.approx(0.1246, abs=1e-6)
    assert exif.orientation is None


def test_read_exif_junk_and_missing_give_none(tmp_path: Path) -> None:
    for path in (
        oddfiles.write_jpeg_with_junk_exif(tmp_path / "junk.jpg"),
        oddfiles.write_png(tmp_path / "plain.png"),
    ):
        with Image.open(path) as image:
            exif = read_exif(image)
        assert (exif.observed_at, exif.latitude, exif.longitude, exif.orientation) == (
            None,
            None,
            None,
            None,
        )


# --------------------------------------------------------------------------------------------
# Decoding


def test_decode_applies_orientation(tmp_path: Path) -> None:
    path = oddfiles.write_jpeg_with_exif(tmp_path / "rotated.jpg")  # stored 40x20, red | blue
    decoded = decode_image(path)
    assert decoded.image.size == (20, 40)
    assert (decoded.width, decoded.height) == (20, 40)
    assert decoded.image.mode == "RGB"
    # Orientation 6 means "rotate 90° clockwise to display": the stored left half goes on top.
    top, bottom = decoded.image.getpixel((10, 5)), decoded.image.getpixel((10, 35))
    assert top[0] > 200 and top[2] < 60
    assert bottom[2] > 200 and bottom[0] < 60
    assert decoded.exif.orientation == 6
    assert decoded.exif.latitude == pytest.approx(oddfiles.EXIF_SAMPLE_LATITUDE, abs=1e-6)


def test_decode_every_format_any_case(tmp_path: Path) -> None:
    for path in oddfiles.write_any_case_images(tmp_path):
        decoded = decode_image(path)
        assert decoded.image.mode == "RGB", path.name
        assert decoded.image.size == (64, 48), path.name
        red, green, blue = decoded.image.getpixel((5, 5))
        # GIF palettes quantise colours a little; JPEG and WebP are lossy.
        assert abs(red - 200) < 12 and abs(green - 60) < 12 and abs(blue - 30) < 25, path.name


def test_decode_takes_first_gif_frame(tmp_path: Path) -> None:
    path = oddfiles.write_animated_gif(tmp_path / "anim.gif", colors=((255, 0, 0), (0, 0, 255)))
    assert decode_image(path).image.getpixel((3, 3)) == (255, 0, 0)


def test_decode_puts_transparency_on_white(tmp_path: Path) -> None:
    path = tmp_path / "clear.png"
    Image.new("RGBA", (8, 8), (0, 0, 0, 0)).save(path)
    assert decode_image(path).image.getpixel((4, 4)) == (255, 255, 255)


def test_decode_scales_16_bit_grey(tmp_path: Path) -> None:
    path = tmp_path / "grey16.png"
    Image.new("I;16", (8, 8), 32768).save(path)
    red, green, blue = decode_image(path).image.getpixel((4, 4))
    assert red == green == blue
    assert 120 <= red <= 136  # mid-grey, not clipped to white


@pytest.mark.parametrize(
    ("builder", "reason"),
    [
        (lambda d: oddfiles.write_truncated_jpeg(d / "cut.jpg"), "truncated image data"),
        (lambda d: oddfiles.write_truncated_jpeg(d / "cut.jpg", 0.05), "truncated image data"),
        (lambda d: oddfiles.write_empty_file(d / "empty.jpg"), "empty file"),
        (lambda d: oddfiles.write_text_as_image(d / "notes.jpg"), "not an image file"),
        # A real image in a format we do not accept, under a .jpg name.
        (
            lambda d: oddfiles.write_image(d / "bitmap.jpg", image_format="BMP"),
            "not an image file",
        ),
        (lambda d: oddfiles.write_corrupt_png(d / "corrupt.png"), "corrupt image data"),
        (lambda d: d / "missing.jpg", "file not found"),
        (lambda d: (d / "folder.jpg").mkdir() or d / "folder.jpg", "not a regular file"),
    ],
    ids=["truncated", "truncated-header", "empty", "text", "bmp", "corrupt", "missing", "dir"],
)
def test_odd_files_give_bad_image_error(tmp_path: Path, builder, reason: str) -> None:
    path = builder(tmp_path)
    with pytest.raises(BadImageError) as caught:
        decode_image(path)
    assert caught.value.reason.startswith(reason)
    assert str(caught.value) == caught.value.reason


def test_bomb_refused_without_allocating(tmp_path: Path) -> None:
    path = oddfiles.write_png_bomb(tmp_path / "bomb.png", 100_000, 100_000)
    assert path.stat().st_size < 200
    tracemalloc.start()
    try:
        with pytest.raises(BadImageError) as caught:
            decode_image(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 50 * 2**20
    assert caught.value.reason.startswith("image too large")
    assert "10,000,000,000" in caught.value.reason


def test_max_pixels_is_checked_from_header(tmp_path: Path) -> None:
    path = oddfiles.write_png_bomb(tmp_path / "wide.png", 3000, 2000)  # data far too short
    with pytest.raises(BadImageError) as caught:
        decode_image(path, max_pixels=1_000_000)
    # Refused for size, before the short pixel data could be noticed.
    assert caught.value.reason == "image too large: 3000x2000 pixels (limit 1,000,000)"
    exact = oddfiles.write_png(tmp_path / "exact.png", size=(64, 48))
    assert decode_image(exact, max_pixels=64 * 48).width == 64
    with pytest.raises(BadImageError, match="64x48"):
        decode_image(exact, max_pixels=64 * 48 - 1)


def test_min_side_decodes_jpeg_smaller_but_reports_full_size(tmp_path: Path) -> None:
    path = oddfiles.write_jpeg(tmp_path / "big.jpg", size=(800, 600))
    decoded = decode_image(path, min_side=100)
    assert (decoded.width, decoded.height) == (800, 600)
    assert decoded.image.size == (200, 150)  # JPEG DCT scaling by 1/4, both sides >= 100
    assert decode_image(path).image.size == (800, 600)


def test_decode_leaves_pil_globals_alone_and_is_thread_safe(tmp_path: Path) -> None:
    odd = oddfiles.make_odd_collection(tmp_path, with_symlink_loop=False)
    paths = [tmp_path / p for p in odd.good + sorted(odd.bad)]
    before = (Image.MAX_IMAGE_PIXELS, ImageFile.LOAD_TRUNCATED_IMAGES)

    def outcome(path: Path) -> tuple[tuple[int, int], bytes] | str:
        try:
            decoded = decode_image(path)
        except BadImageError as exc:
            return exc.reason
        return decoded.image.size, decoded.image.tobytes()

    sequential = [outcome(p) for p in paths]
    with ThreadPoolExecutor(max_workers=4) as pool:
        parallel = list(pool.map(outcome, paths * 3))
    assert parallel == sequential * 3
    assert before == (Image.MAX_IMAGE_PIXELS, ImageFile.LOAD_TRUNCATED_IMAGES)


def test_default_max_pixels_and_extensions() -> None:
    assert DEFAULT_MAX_PIXELS == 178_956_970
    assert {".jpg", ".jpeg", ".png", ".webp", ".tif", ".tiff", ".gif"} <= IMAGE_EXTENSIONS
    assert all(ext == ext.lower() and ext.startswith(".") for ext in IMAGE_EXTENSIONS)


# --------------------------------------------------------------------------------------------
# Walking folders


def test_walk_matches_extensions_in_any_case(tmp_path: Path) -> None:
    oddfiles.write_any_case_images(tmp_path)
    oddfiles.write_image(tmp_path / "bitmap.bmp", image_format="BMP")
    oddfiles.write_text_as_image(tmp_path / "notes.txt")
    oddfiles.write_text_as_image(tmp_path / "jpg")  # the extension alone is no name
    assert rel_paths(tmp_path) == sorted(oddfiles.ANY_CASE_IMAGE_NAMES)


def test_walk_skips_hidden_files_and_folders(tmp_path: Path) -> None:
    oddfiles.write_jpeg(tmp_path / "seen.jpg")
    oddfiles.write_jpeg(tmp_path / ".hidden.jpg")
    oddfiles.write_jpeg(tmp_path / "._seen.jpg")  # macOS resource fork
    oddfiles.write_jpeg(tmp_path / ".git" / "inside.jpg")
    oddfiles.write_jpeg(tmp_path / "sub" / ".cache" / "inside.jpg")
    assert rel_paths(tmp_path) == ["seen.jpg"]


def test_walk_entries_carry_stat(tmp_path: Path) -> None:
    path = oddfiles.write_png(tmp_path / "a" / "b.png")
    [entry] = list(walk_images(tmp_path))
    info = path.stat()
    assert entry == FileEntry("a/b.png", tmp_path / "a" / "b.png", info.st_size, info.st_mtime_ns)


def test_walk_order_is_sorted_and_repeatable(tmp_path: Path) -> None:
    names = ["b/z.jpg", "a.jpg", "b/a.jpg", "a-b/c.jpg", "c.jpg", "b/sub/x.jpg", "B.jpg", "b.jpg"]
    for name in names:
        oddfiles.write_jpeg(tmp_path / name)
    first = rel_paths(tmp_path)
    assert first == sorted(names, key=lambda p: p.split("/"))
    assert rel_paths(tmp_path) == first


def test_walk_survives_symlink_loops(tmp_path: Path) -> None:
    if not oddfiles.symlinks_supported(tmp_path):
        pytest.skip("symlinks not available")
    files = oddfiles.make_symlink_loop(tmp_path)
    found = rel_paths(tmp_path)
    assert sorted(found) == sorted(p.relative_to(tmp_path).as_posix() for p in files)
    assert len(found) == len(set(found)) == 2


def test_walk_follows_directory_symlinks_and_skips_broken_ones(tmp_path: Path) -> None:
    if not oddfiles.symlinks_supported(tmp_path):
        pytest.skip("symlinks not available")
    root = tmp_path / "root"
    elsewhere = root / ".elsewhere"  # inside the collection (links leading out are not followed)
    oddfiles.write_jpeg(elsewhere / "far.jpg")
    oddfiles.write_jpeg(root / "near.jpg")
    (root / "link").symlink_to(elsewhere, target_is_directory=True)
    (root / "broken.jpg").symlink_to(tmp_path / "nowhere.jpg")
    assert rel_paths(root) == ["link/far.jpg", "near.jpg"]


def test_walk_bad_root_raises_bad_input(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="folder not found"):
        list(walk_images(tmp_path / "nope"))
    file_path = oddfiles.write_jpeg(tmp_path / "a.jpg")
    with pytest.raises(BadInputError, match="not a folder"):
        list(walk_images(file_path))


def test_walk_logs_and_skips_unreadable_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    oddfiles.write_jpeg(tmp_path / "open" / "a.jpg")
    oddfiles.write_jpeg(tmp_path / "locked" / "b.jpg")
    oddfiles.write_jpeg(tmp_path / "z.jpg")
    real_scandir = os.scandir

    # chmod cannot lock out a superuser, so refuse the folder at the system-call seam.
    def scandir(path):  # type: ignore[no-untyped-def]
        if os.path.basename(os.fspath(path)) == "locked":
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    with caplog.at_level(logging.WARNING, logger="engine.indexing.walk"):
        found = rel_paths(tmp_path)
    assert found == ["open/a.jpg", "z.jpg"]
    assert any("locked" in record.getMessage() for record in caplog.records)


def test_walk_odd_names_round_trip(tmp_path: Path) -> None:
    written = oddfiles.write_odd_named_images(tmp_path)
    entries = list(walk_images(tmp_path))
    assert len(entries) == len(oddfiles.ODD_FILE_NAMES)
    assert sorted(e.abs_path for e in entries) == sorted(written)
    for entry in entries:
        assert (tmp_path / entry.rel_path).is_file()
        assert decode_image(entry.abs_path).width == 64


def test_walk_skips_names_that_are_not_unicode(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    if oddfiles.write_non_utf8_named_file(tmp_path) is None:
        pytest.skip("file system refuses non-UTF-8 names")
    oddfiles.write_jpeg(tmp_path / "fine.jpg")
    with caplog.at_level(logging.WARNING, logger="engine.indexing.walk"):
        assert rel_paths(tmp_path) == ["fine.jpg"]
    assert any("not valid Unicode" in r.getMessage() for r in caplog.records)


def test_odd_collection_scan_and_decode(tmp_path: Path) -> None:
    odd = oddfiles.make_odd_collection(tmp_path)
    found = rel_paths(tmp_path)
    assert sorted(found) == sorted(odd.good + list(odd.bad))
    for rel_path in odd.good:
        assert decode_image(tmp_path / rel_path).image.mode == "RGB"
    for rel_path, reason in odd.bad.items():
        with pytest.raises(BadImageError, match=reason):
            decode_image(tmp_path / rel_path)


# --------------------------------------------------------------------------------------------
# Content hash


def test_content_hash_is_blake2b_of_bytes(tmp_path: Path) -> None:
    path = tmp_path / "blob.jpg"
    data = os.urandom(3 * 2**20 + 17)  # spans several read chunks
    path.write_bytes(data)
    expected = hashlib.blake2b(data, digest_size=16).hexdigest()
    assert content_hash(path) == expected
    assert len(expected) == 32
    path.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    assert content_hash(path) != expected
