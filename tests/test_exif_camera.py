"""EXIF first: capture time, GPS, camera and serial read at indexing; photos with no usable
capture time listed as undated with the reason, never given their file time."""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from PIL import ExifTags, Image

from engine.indexing.exif import (
    EXIF_DATE_BEFORE_1990,
    EXIF_DATE_IN_FUTURE,
    EXIF_DATE_UNREADABLE,
    EXIF_GPS_ZERO,
    read_exif,
)

NOW = datetime(2026, 6, 1, 12, 0, 0)


def camera_jpeg(
    path: Path,
    *,
    original: str | None = None,
    original_offset: str | None = None,
    digitized: str | None = None,
    digitized_offset: str | None = None,
    gps: tuple[float, float] | None = None,
    make: str | None = None,
    model: str | None = None,
    serial: str | None = None,
    color: tuple[int, int, int] = (120, 90, 60),
) -> Path:
    """A small JPEG whose EXIF holds what is given (GPS as N/S, E/W degree rationals)."""
    exif = Image.Exif()
    if make:
        exif[ExifTags.Base.Make] = make
    if model:
        exif[ExifTags.Base.Model] = model
    sub = exif.get_ifd(ExifTags.IFD.Exif)
    for tag, value in (
        (ExifTags.Base.DateTimeOriginal, original),
        (ExifTags.Base.OffsetTimeOriginal, original_offset),
        (ExifTags.Base.DateTimeDigitized, digitized),
        (ExifTags.Base.OffsetTimeDigitized, digitized_offset),
        (ExifTags.Base.BodySerialNumber, serial),
    ):
        if value is not None:
            sub[tag] = value
    if gps is not None:
        lat, lon = gps
        exif.get_ifd(ExifTags.IFD.GPSInfo).update(
            {
                ExifTags.GPS.GPSLatitudeRef: "S" if lat < 0 else "N",
                ExifTags.GPS.GPSLatitude: (abs(lat), 0.0, 0.0),
                ExifTags.GPS.GPSLongitudeRef: "W" if lon < 0 else "E",
                ExifTags.GPS.GPSLongitude: (abs(lon), 0.0, 0.0),
            }
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (64, 48), color).save(path, "JPEG", exif=exif)
    return path


def exif_of(path: Path):
    with Image.open(path) as image:
        return read_exif(image, now=NOW)


def test_camera_make_model_serial_and_time_with_its_offset(tmp_path: Path) -> None:
    path = camera_jpeg(
        tmp_path / "a.jpg",
        original="2024:07:01 23:59:30",
        original_offset="-04:00",
        make="RECONYX",
        model="HF2X",
        serial="H500-1234",
        gps=(44.5, -72.25),
    )
    exif = exif_of(path)
    assert exif.observed_at == datetime(
        2024, 7, 1, 23, 59, 30, tzinfo=timezone(timedelta(hours=-4))
    )
    assert (exif.make, exif.model, exif.serial) == ("RECONYX", "HF2X", "H500-1234")
    assert exif.latitude == pytest.approx(44.5) and exif.longitude == pytest.approx(-72.25)
    assert exif.flags == 0


def test_digitized_time_with_its_own_offset_when_original_is_missing(tmp_path: Path) -> None:
    path = camera_jpeg(
        tmp_path / "d.jpg", digitized="2020:02:29 06:00:00", digitized_offset="+01:00"
    )
    assert exif_of(path).observed_at == datetime(
        2020, 2, 29, 6, 0, tzinfo=timezone(timedelta(hours=1))
    )


@pytest.mark.parametrize(
    ("original", "flag"),
    [
        ("2031:01:01 00:00:00", EXIF_DATE_IN_FUTURE),
        ("1989:12:31 23:59:59", EXIF_DATE_BEFORE_1990),
        ("1970:01:01 00:00:00", EXIF_DATE_BEFORE_1990),
        ("0000:00:00 00:00:00", EXIF_DATE_UNREADABLE),
    ],
)
def test_impossible_capture_times_are_dropped_and_flagged(
    tmp_path: Path, original: str, flag: int
) -> None:
    exif = exif_of(camera_jpeg(tmp_path / "x.jpg", original=original))
    assert exif.observed_at is None
    assert exif.flags == flag


def test_a_bad_original_falls_back_to_a_good_digitized_time(tmp_path: Path) -> None:
    path = camera_jpeg(
        tmp_path / "x.jpg", original="2099:01:01 00:00:00", digitized="2021:03:04 05:06:07"
    )
    exif = exif_of(path)
    assert exif.observed_at == datetime(2021, 3, 4, 5, 6, 7)
    assert exif.flags == 0


def test_a_make_and_model_with_bytes_after_their_nul_are_cut_there(tmp_path: Path) -> None:
    # Fixed-size fields some cameras fill after the string's terminating NUL.
    path = camera_jpeg(
        tmp_path / "m.jpg", make="FUJIFILM\x00\x00\x00", model="X-T4\x00\x01\x7fjunk  \x02"
    )
    exif = exif_of(path)
    assert (exif.make, exif.model) == ("FUJIFILM", "X-T4")


def test_gps_zero_zero_is_no_position_and_flagged(tmp_path: Path) -> None:
    exif = exif_of(camera_jpeg(tmp_path / "z.jpg", original="2022:01:01 10:00:00", gps=(0, 0)))
    assert (exif.latitude, exif.longitude) == (None, None)
    assert exif.flags == EXIF_GPS_ZERO
    assert exif.observed_at == datetime(2022, 1, 1, 10, 0)


def test_indexing_stores_the_camera_and_lists_undated_photos_with_reasons(
    tmp_path: Path, demo_encoder
) -> None:
    from engine.catalog.library import Library
    from engine.catalog.models import Image as Row
    from engine.indexing.deployments import undated_photos
    from engine.indexing.indexer import Indexer

    folder = tmp_path / "card"
    camera_jpeg(folder / "good.jpg", original="2024:05:01 21:00:00", make="Browning",
                model="BTC-8E", serial="SN-1", gps=(0, 0))  # fmt: skip
    camera_jpeg(folder / "future.jpg", original="2091:05:01 21:00:00", serial="SN-1")
    camera_jpeg(folder / "unset.jpg", original="0000:00:00 00:00:00", serial="SN-1")
    plain = camera_jpeg(folder / "plain.jpg")  # no EXIF time at all
    old = datetime(2015, 3, 3, 12, 0).timestamp()
    os.utime(plain, (old, old))  # a file time that must never become the capture time

    with Library.open(tmp_path / "lib") as library:
        report = Indexer(library, demo_encoder).run(folder)
        with library.catalog.session() as s:
            rows = {r.rel_path: r for r in s.query(Row)}
            good = rows["good.jpg"]
            assert (good.camera_make, good.camera_model, good.camera_serial) == (
                "Browning",
                "BTC-8E",
                "SN-1",
            )
            assert good.observed_at == datetime(2024, 5, 1, 21, 0)
            assert good.camera_time == datetime(2024, 5, 1, 21, 0)
            assert (good.latitude, good.longitude) == (None, None)
            assert rows["plain.jpg"].observed_at is None
        undated = dict((Path(p).name, why) for p, why in undated_photos(library))
    assert undated == {
        "future.jpg": "capture time in the future",
        "plain.jpg": "no capture time in the EXIF, XMP or IPTC",
        "unset.jpg": "capture time unreadable",
    }
    assert report.camera["undated"] == 3
    assert report.camera["dates_in_future"] == 1
    assert report.camera["dates_unreadable"] == 1
    assert report.camera["gps_zero"] == 1
    assert "3 photos have no capture time and are undated" in report.summary()
    assert "1 photo had GPS (0, 0)" in report.summary()
