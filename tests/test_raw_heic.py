"""Camera RAW (through rawpy/LibRaw), HEIC and multi-frame TIFF in the default install.

The RAW files are DNGs written here with tifffile: a Bayer mosaic (red left half, blue right
half), optionally with an RGB preview in IFD0 and the sensor data in a SubIFD, as cameras and
Adobe's converter write them."""

from __future__ import annotations

import io
import tomllib
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import ExifTags, Image

from engine.catalog.library import Library
from engine.errors import BadImageError
from engine.indexing.decode import IMAGE_EXTENSIONS, DecodeBudget, decode_image
from engine.indexing.indexer import Indexer
from engine.indexing.keywords import embedded_keywords
from engine.indexing.raw import decode_raw
from engine.indexing.walk import walk_images

tifffile = pytest.importorskip("tifffile")
rawpy = pytest.importorskip("rawpy")

ROOT = Path(__file__).resolve().parents[1]

# DNG tags: DNGVersion, UniqueCameraModel, ColorMatrix1 (identity), AsShotNeutral, illuminant.
_DNG_TAGS = [
    (50706, "B", 4, (1, 4, 0, 0), True),
    (50708, "s", 0, "Quadrat Test Camera", True),
    (50721, "2i", 9, (1, 1, 0, 1, 0, 1, 0, 1, 1, 1, 0, 1, 0, 1, 0, 1, 1, 1), True),
    (50728, "2I", 3, (1, 1, 1, 1, 1, 1), True),
    (50778, "H", 1, 21, True),
    (0x010F, "s", 0, "QuadratCam", True),  # Make
    (0x0110, "s", 0, "QT-1", True),  # Model
]
# The mosaic's tags: a 2 x 2 RGGB pattern, black 0, white 4095 (12 bits).
_CFA_TAGS = [
    (33421, "H", 2, (2, 2), True),
    (33422, "B", 4, (0, 1, 1, 2), True),
    (50714, "H", 1, 0, True),
    (50717, "H", 1, 4095, True),
]


def write_dng(path: Path, width: int = 256, height: int = 192, preview: int | None = None) -> Path:
    """A DNG of `width` x `height` sensor pixels, red on the left half and blue on the right;
    with an RGB preview `preview` pixels wide (same colours) when given."""
    cfa = np.zeros((height, width), np.uint16)
    cfa[0::2, 0::2], cfa[0::2, 1::2], cfa[1::2, 0::2], cfa[1::2, 1::2] = 3000, 600, 600, 300
    right = cfa[:, width // 2 :]
    right[0::2, 0::2], right[1::2, 1::2] = 300, 3500
    with tifffile.TiffWriter(path) as tif:
        if preview is None:
            tif.write(cfa, photometric=32803, extratags=_DNG_TAGS + _CFA_TAGS)
            return path
        small = np.zeros((preview * height // width, preview, 3), np.uint8)
        small[:, : preview // 2], small[:, preview // 2 :] = (200, 30, 30), (30, 30, 200)
        tif.write(small, photometric="rgb", subfiletype=1, subifds=1, extratags=_DNG_TAGS)
        tif.write(cfa, photometric=32803, subfiletype=0, extratags=_CFA_TAGS)
    return path


def _reddish(rgb: tuple[int, ...]) -> bool:
    return rgb[0] > 2 * rgb[2]


def _bluish(rgb: tuple[int, ...]) -> bool:
    return rgb[2] > 2 * rgb[0]


def test_raw_and_heic_are_default_dependencies() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = {dep.split(">")[0].split("=")[0].split("<")[0] for dep in project["dependencies"]}
    assert {"rawpy", "pillow-heif"} <= names
    assert {".dng", ".cr2", ".nef", ".arw", ".raf", ".orf", ".rw2", ".heic"} <= IMAGE_EXTENSIONS


def test_a_dng_without_preview_is_demosaiced_at_half_size(tmp_path: Path) -> None:
    path = write_dng(tmp_path / "IMG_0001.DNG")
    assert [e.rel_path for e in walk_images(tmp_path)] == ["IMG_0001.DNG"]
    decoded = decode_image(path, min_side=64)
    assert (decoded.width, decoded.height) == (256, 192)  # the sensor's size
    assert decoded.image.size == (128, 96)  # half size: one pixel per Bayer block
    assert decoded.exif.make == "QuadratCam" and decoded.exif.model == "QT-1"
    assert _reddish(decoded.image.getpixel((20, 48)))
    assert _bluish(decoded.image.getpixel((108, 48)))


def test_a_large_enough_preview_is_used_else_the_sensor_data(tmp_path: Path) -> None:
    path = write_dng(tmp_path / "with_preview.dng", preview=160)  # a 160 x 120 preview
    from_preview = decode_image(path, min_side=100)
    assert from_preview.image.size == (160, 120)
    assert (from_preview.width, from_preview.height) == (256, 192)
    assert _reddish(from_preview.image.getpixel((10, 60)))
    assert _bluish(from_preview.image.getpixel((150, 60)))
    demosaiced = decode_image(path, min_side=224)  # the preview is smaller than the encoder's
    assert demosaiced.image.size == (128, 96)


@pytest.mark.parametrize("keep", [400, 0.5])
def test_a_damaged_raw_is_skipped_with_its_reason(tmp_path: Path, keep: float) -> None:
    data = write_dng(tmp_path / "whole.dng").read_bytes()
    damaged = tmp_path / "cut" / "damaged.nef"
    damaged.parent.mkdir()
    damaged.write_bytes(data[: int(keep if keep > 1 else len(data) * keep)])
    with pytest.raises(BadImageError) as caught:
        decode_image(damaged)
    assert "RAW" in str(caught.value)


def test_raws_are_indexed_and_a_damaged_one_is_listed(tmp_path: Path, demo_encoder) -> None:
    folder = tmp_path / "card"
    folder.mkdir()
    write_dng(folder / "a.dng")
    write_dng(folder / "b.dng", preview=128)
    (folder / "c.cr2").write_bytes(b"II*\x00" + b"\x00" * 200)  # a header and nothing else
    with Library.open(tmp_path / "lib") as lib:
        report = Indexer(lib, demo_encoder).run(folder)
    assert report.indexed == 2
    assert [(Path(s.path).name, "RAW" in s.reason) for s in report.skipped] == [("c.cr2", True)]


def test_heic_decodes_in_the_default_install(tmp_path: Path) -> None:
    import pillow_heif

    pillow_heif.register_heif_opener()
    Image.new("RGB", (80, 60), (30, 160, 40)).save(tmp_path / "phone.heic")
    decoded = decode_image(tmp_path / "phone.heic")
    assert (decoded.width, decoded.height) == (80, 60)
    r, g, b = decoded.image.getpixel((40, 30))
    assert g > 120 and r < 80 and b < 80


def test_a_multi_frame_tiff_gives_its_first_frame(tmp_path: Path) -> None:
    frames = [Image.new("RGB", (40, 30), colour) for colour in ((220, 0, 0), (0, 0, 220))]
    frames[0].save(tmp_path / "stack.tif", save_all=True, append_images=frames[1:])
    decoded = decode_image(tmp_path / "stack.tif")
    assert decoded.image.getpixel((5, 5))[0] > 200


def _jpeg(exif: Image.Exif, app1: bytes = b"") -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (160, 120), (200, 30, 30)).save(buffer, "JPEG", exif=exif)
    data = buffer.getvalue()
    return data[:2] + app1 + data[2:]


def write_raf(path: Path, jpeg: bytes) -> Path:
    """A RAF as Fujifilm lays it out (big-endian): "FUJIFILMCCD-RAW ", format version, camera
    id, the camera's name in 32 bytes, directory version, 20 bytes, then the offsets and
    lengths of the embedded JPEG, the CFA header and the CFA data."""
    header = b"FUJIFILMCCD-RAW " + b"0201" + b"FF383501" + b"X-T4".ljust(32, b"\x00")
    header += b"0100" + b"\x00" * 20
    start, cfa_header, cfa = 160, b"\x00\x00\x00\x00", b"\x00" * 2048
    table = (start, len(jpeg), start + len(jpeg), 4, start + len(jpeg) + 4, len(cfa))
    header += b"".join(n.to_bytes(4, "big") for n in table)
    path.write_bytes(header.ljust(start, b"\x00") + jpeg + cfa_header + cfa)
    return path


def test_a_raf_takes_its_time_and_camera_from_the_embedded_jpeg_exif(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    camera = Image.Exif()
    camera[ExifTags.Base.Make], camera[ExifTags.Base.Model] = "FUJIFILM", "X-T4"
    camera.get_ifd(ExifTags.IFD.Exif).update(
        {ExifTags.Base.DateTimeOriginal: "2023:05:01 06:30:00",
         ExifTags.Base.OffsetTimeOriginal: "+02:00"}
    )  # fmt: skip
    packet = b'<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF xmlns:rdf="http://www.w3.org/1999/'
    packet += b'02/22-rdf-syntax-ns#"><rdf:Description xmlns:xmp="http://ns.adobe.com/xap/1.0/"'
    packet += b' xmp:Rating="3"/></rdf:RDF></x:xmpmeta>'
    xmp = b"http://ns.adobe.com/xap/1.0/\x00" + packet
    app1 = b"\xff\xe1" + (len(xmp) + 2).to_bytes(2, "big") + xmp
    path = write_raf(tmp_path / "DSCF0001.RAF", _jpeg(camera, app1))
    # What LibRaw hands back as the preview: the same picture under an EXIF it generated from
    # its own data (its spelling of the make, the time only as IFD0's DateTime).
    generated = Image.Exif()
    generated[ExifTags.Base.Make], generated[ExifTags.Base.Model] = "Fujifilm", "X-T4"
    generated[ExifTags.Base.DateTime] = "2023:05:01 06:30:00"
    thumb = SimpleNamespace(format=rawpy.ThumbFormat.JPEG, data=_jpeg(generated))

    class LibRawStandIn:  # LibRaw cannot open a RAF with no real sensor data
        sizes = SimpleNamespace(width=6240, height=4160, flip=0, raw_width=6240, raw_height=4160)

        def __enter__(self) -> LibRawStandIn:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

        def extract_thumb(self) -> SimpleNamespace:
            return thumb

    monkeypatch.setattr(rawpy, "imread", lambda name: LibRawStandIn())
    decoded = decode_raw(path, 10**9, 64, DecodeBudget())
    assert decoded.from_preview
    assert (decoded.exif.make, decoded.exif.model) == ("FUJIFILM", "X-T4")
    assert decoded.exif.observed_at == datetime(
        2023, 5, 1, 6, 30, tzinfo=timezone(timedelta(hours=2))
    )
    assert embedded_keywords(path).rating == 3  # the RAF's XMP: in its embedded JPEG too
