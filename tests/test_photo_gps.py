"""Removing GPS from photo copies (engine/io/photo_gps.py): EXIF GPS in either byte order, a
JPEG's further images, XMP GPS properties as attributes and elements, TIFF files; every other
byte of the photo kept; damaged EXIF refused rather than guessed."""

from __future__ import annotations

import io
import struct
from pathlib import Path
from xml.etree import ElementTree as ET

import numpy as np
import pytest
from PIL import ExifTags, Image

from engine.io.photo_gps import MalformedExif, has_gps, strip_gps
from tests.test_exif_camera import camera_jpeg

XMP = (
    b'<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF '
    b'xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#">'
    b'<rdf:Description rdf:about="" xmlns:exif="http://ns.adobe.com/exif/1.0/" '
    b'xmlns:dc="http://purl.org/dc/elements/1.1/" exif:GPSLatitude="51,7.4N" '
    b'exif:GPSLongitude="4,39.2E">'
    b"<exif:GPSAltitude>12/1</exif:GPSAltitude><dc:subject><rdf:Bag><rdf:li>toad</rdf:li>"
    b"</rdf:Bag></dc:subject></rdf:Description></rdf:RDF></x:xmpmeta>"
)


def _gps_exif(little_endian: bool = False) -> Image.Exif:
    exif = Image.Exif()
    exif[ExifTags.Base.Make] = "Camera"
    exif.get_ifd(ExifTags.IFD.Exif)[ExifTags.Base.DateTimeOriginal] = "2023:05:01 10:00:00"
    exif.get_ifd(ExifTags.IFD.GPSInfo).update(
        {ExifTags.GPS.GPSLatitudeRef: "N", ExifTags.GPS.GPSLatitude: (51.0, 7.0, 24.4),
         ExifTags.GPS.GPSLongitudeRef: "E", ExifTags.GPS.GPSLongitude: (4.0, 39.0, 15.6)}
    )  # fmt: skip
    if little_endian:
        exif.endian = "<"
    return exif


def test_a_jpegs_gps_goes_and_everything_else_stays(tmp_path: Path):
    path = camera_jpeg(tmp_path / "a.jpg", original="2023:05:01 10:00:00", gps=(51.1, 4.6),
                       make="Canon", model="EOS")  # fmt: skip
    data = path.read_bytes()
    clean = strip_gps(data, ".JPG")
    assert clean is not None and len(clean) == len(data)
    assert has_gps(data) and not has_gps(clean)
    with Image.open(io.BytesIO(clean)) as image:
        exif = image.getexif()
        assert (exif[ExifTags.Base.Make], exif[ExifTags.Base.Model]) == ("Canon", "EOS")
        assert ExifTags.IFD.GPSInfo not in exif  # the pointer is gone, not left dangling
        assert exif.get_ifd(ExifTags.IFD.Exif)[ExifTags.Base.DateTimeOriginal] == (
            "2023:05:01 10:00:00"
        )
        pixels = np.asarray(image)
    with Image.open(path) as image:
        assert np.array_equal(pixels, np.asarray(image))
    assert strip_gps(clean, ".jpg") == clean  # nothing left to remove


def test_little_endian_exif_and_xmp_gps_are_removed(tmp_path: Path):
    out = io.BytesIO()
    Image.new("RGB", (32, 24), (1, 2, 3)).save(out, "JPEG", exif=_gps_exif(True), xmp=XMP)
    data = out.getvalue()
    assert b"II*\x00" in data and b"exif:GPSLatitude" in data
    clean = strip_gps(data, ".jpeg")
    assert clean is not None and not has_gps(clean)
    assert b"GPSLatitude" not in clean and b"GPSAltitude" not in clean and b"51,7.4N" not in clean
    assert b"<rdf:li>toad</rdf:li>" in clean  # other XMP stays
    with Image.open(io.BytesIO(clean)) as image:
        assert ExifTags.IFD.GPSInfo not in image.getexif()
        packet = image.info["xmp"]
    ET.fromstring(packet)  # still well-formed XML


def test_a_second_image_in_the_file_loses_its_gps_too(tmp_path: Path):
    """A multi-picture JPEG (MPF) carries further images after the first, each with its EXIF."""
    first, second = io.BytesIO(), io.BytesIO()
    Image.new("RGB", (32, 24)).save(first, "JPEG", exif=_gps_exif())
    Image.new("RGB", (16, 12)).save(second, "JPEG", exif=_gps_exif(True))
    data = first.getvalue() + second.getvalue()
    clean = strip_gps(data, ".jpg")
    assert clean is not None
    tail = clean[len(first.getvalue()) :]
    assert not has_gps(tail) and has_gps(second.getvalue())


def _tiff_with_gps() -> bytes:
    """A 2 x 1 grey TIFF (big-endian) whose first directory points to a GPS directory holding
    a latitude (Pillow writes no GPS into TIFFs, so it is laid out here by hand)."""

    def entry(tag: int, kind: int, count: int, value: bytes) -> bytes:
        return struct.pack(">HHI", tag, kind, count) + value.ljust(4, b"\0")

    ifd0_at, gps_at = 8, 8 + 2 + 8 * 12 + 4
    rational_at = gps_at + 2 + 2 * 12 + 4
    pixels_at = rational_at + 24
    ifd0 = [
        entry(256, 3, 1, struct.pack(">H", 2)), entry(257, 3, 1, struct.pack(">H", 1)),
        entry(258, 3, 1, struct.pack(">H", 8)), entry(259, 3, 1, struct.pack(">H", 1)),
        entry(262, 3, 1, struct.pack(">H", 1)), entry(273, 4, 1, struct.pack(">I", pixels_at)),
        entry(279, 4, 1, struct.pack(">I", 2)), entry(0x8825, 4, 1, struct.pack(">I", gps_at)),
    ]  # fmt: skip
    gps = [entry(1, 2, 2, b"N\0"), entry(2, 5, 3, struct.pack(">I", rational_at))]
    return b"".join([
        b"MM\0*", struct.pack(">I", ifd0_at),
        struct.pack(">H", len(ifd0)), *ifd0, b"\0" * 4,
        struct.pack(">H", len(gps)), *gps, b"\0" * 4,
        struct.pack(">6I", 51, 1, 7, 1, 244, 10), b"\x10\xf0",
    ])  # fmt: skip


def test_tiff_files_lose_their_gps():
    data = _tiff_with_gps()
    assert has_gps(data)
    clean = strip_gps(data, ".tif")
    assert clean is not None and not has_gps(clean)
    assert b"\0\0\0\x33" not in clean[8:]  # the latitude's 51 is zeroed, not just unlinked
    with Image.open(io.BytesIO(clean)) as image:
        assert image.getexif()[256] == 2 and ExifTags.IFD.GPSInfo not in image.getexif()
        assert np.asarray(image).tolist() == [[0x10, 0xF0]]


def test_other_formats_and_damaged_exif_are_refused(tmp_path: Path):
    out = io.BytesIO()
    Image.new("RGB", (8, 8)).save(out, "PNG", exif=_gps_exif())
    assert strip_gps(out.getvalue(), ".png") is None
    jpeg = io.BytesIO()
    Image.new("RGB", (8, 8)).save(jpeg, "JPEG", exif=_gps_exif())
    data = bytearray(jpeg.getvalue())
    at = data.index(b"Exif\x00\x00") + 6
    order = "<" if data[at : at + 2] == b"II" else ">"
    data[at + 4 : at + 8] = struct.pack(order + "I", 10**6)  # the first directory: far away
    with pytest.raises(MalformedExif):
        strip_gps(bytes(data), ".jpg")
