"""Builders of test photos, good and bad, written into a folder (usually pytest's tmp_path).

Every builder takes the path (or folder) to write, creates missing parent folders and returns
what it wrote. Pixels are generated, never downloaded. Typical use:

    from tests import oddfiles

    photo = oddfiles.write_jpeg_with_exif(tmp_path / "lizard.jpg")      # 40x20, Orientation=6
    odd = oddfiles.make_odd_collection(tmp_path / "photos")           # good and bad files mixed
    assert sorted(indexed_paths) == odd.good
    assert skipped_reasons.keys() == odd.bad.keys()

`make_inat_collection` writes an iNat21/iNat24-style tree (`train/NNNNN_Kingdom_..._epithet/`)
with a COCO `metadata.json` beside it.
"""

from __future__ import annotations

import io
import json
import os
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from PIL import ExifTags, Image
from PIL.TiffImagePlugin import IFDRational

Color = tuple[int, int, int]

# --------------------------------------------------------------------------------------------
# Good images


def _prepare(path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def solid_image(size: tuple[int, int] = (64, 48), color: Color = (200, 60, 30)) -> Image.Image:
    """An RGB image of one colour."""
    return Image.new("RGB", size, color)


def two_colour_image(
    size: tuple[int, int] = (40, 20),
    left: Color = (255, 0, 0),
    right: Color = (0, 0, 255),
) -> Image.Image:
    """An RGB image whose left half is `left` and right half is `right` (shows rotations)."""
    image = Image.new("RGB", size, right)
    image.paste(left, (0, 0, size[0] // 2, size[1]))
    return image


def write_image(
    path: Path,
    size: tuple[int, int] = (64, 48),
    color: Color = (200, 60, 30),
    image_format: str | None = None,
    exif: Image.Exif | None = None,
    image: Image.Image | None = None,
) -> Path:
    """Write a valid image; the format comes from `image_format` or the (any-case) extension.

    `image` overrides `size`/`color`. GIFs are saved as palette images, JPEGs at quality 95.
    """
    path = _prepare(path)
    picture = image if image is not None else solid_image(size, color)
    fmt = (image_format or Image.registered_extensions()[path.suffix.lower()]).upper()
    options: dict[str, Any] = {}
    if exif is not None:
        options["exif"] = exif
    if fmt == "JPEG":
        options["quality"] = 95
    if fmt == "GIF":
        picture = picture.convert("P")
    picture.save(path, format=fmt, **options)
    return path


def write_jpeg(path: Path, size: tuple[int, int] = (64, 48), color: Color = (200, 60, 30)) -> Path:
    """A valid baseline JPEG of one colour."""
    return write_image(path, size, color, "JPEG")


def write_png(path: Path, size: tuple[int, int] = (64, 48), color: Color = (200, 60, 30)) -> Path:
    """A valid RGB PNG of one colour."""
    return write_image(path, size, color, "PNG")


def write_webp(path: Path, size: tuple[int, int] = (64, 48), color: Color = (200, 60, 30)) -> Path:
    """A valid WebP of one colour."""
    return write_image(path, size, color, "WEBP")


def write_tiff(path: Path, size: tuple[int, int] = (64, 48), color: Color = (200, 60, 30)) -> Path:
    """A valid uncompressed TIFF of one colour."""
    return write_image(path, size, color, "TIFF")


def write_gif(path: Path, size: tuple[int, int] = (64, 48), color: Color = (200, 60, 30)) -> Path:
    """A valid single-frame palette GIF of one colour."""
    return write_image(path, size, color, "GIF")


def write_animated_gif(
    path: Path,
    size: tuple[int, int] = (32, 32),
    colors: Sequence[Color] = ((255, 0, 0), (0, 0, 255)),
) -> Path:
    """An animated GIF with one frame per colour; the first frame is `colors[0]`."""
    path = _prepare(path)
    frames = [Image.new("RGB", size, c).convert("P") for c in colors]
    frames[0].save(path, format="GIF", save_all=True, append_images=frames[1:], duration=100)
    return path


# File names (relative) of one good image per supported format, extensions in mixed case.
ANY_CASE_IMAGE_NAMES: tuple[str, ...] = (
    "a_lower.jpg",
    "b_upper.JPG",
    "c_mixed.JpEg",
    "d_png.PNG",
    "e_webp.WebP",
    "f_tiff.tif",
    "g_tiff.TIFF",
    "h_gif.Gif",
)


def write_any_case_images(folder: Path) -> list[Path]:
    """One valid image per supported format, named as in `ANY_CASE_IMAGE_NAMES`."""
    return [write_image(Path(folder) / name) for name in ANY_CASE_IMAGE_NAMES]


# --------------------------------------------------------------------------------------------
# EXIF


def _dms(degrees: float) -> tuple[IFDRational, IFDRational, IFDRational]:
    """Unsigned degrees as EXIF (degrees, minutes, seconds) rationals, seconds to 1/10000."""
    value = abs(Fraction(degrees).limit_denominator(10**9))
    whole = int(value)
    minutes_total = (value - whole) * 60
    minutes = int(minutes_total)
    seconds = round((minutes_total - minutes) * 60 * 10_000)
    return IFDRational(whole, 1), IFDRational(minutes, 1), IFDRational(seconds, 10_000)


def make_exif(
    *,
    datetime_original: str | None = None,
    offset_time_original: str | None = None,
    latitude: float | None = None,
    longitude: float | None = None,
    orientation: int | None = None,
) -> Image.Exif:
    """EXIF with the given fields. Dates use EXIF's "YYYY:MM:DD HH:MM:SS"; GPS is written as
    degree/minute/second rationals with N/S and E/W references (negative = S or W)."""
    exif = Image.Exif()
    if orientation is not None:
        exif[ExifTags.Base.Orientation] = orientation
    if datetime_original is not None or offset_time_original is not None:
        exif_ifd = exif.get_ifd(ExifTags.IFD.Exif)
        if datetime_original is not None:
            exif_ifd[ExifTags.Base.DateTimeOriginal] = datetime_original
        if offset_time_original is not None:
            exif_ifd[ExifTags.Base.OffsetTimeOriginal] = offset_time_original
    if latitude is not None and longitude is not None:
        exif.get_ifd(ExifTags.IFD.GPSInfo).update(
            {
                ExifTags.GPS.GPSLatitudeRef: "S" if latitude < 0 else "N",
                ExifTags.GPS.GPSLatitude: _dms(latitude),
                ExifTags.GPS.GPSLongitudeRef: "W" if longitude < 0 else "E",
                ExifTags.GPS.GPSLongitude: _dms(longitude),
            }
        )
    return exif


# Santiago de Chile: south and west, so both coordinates are negative.
EXIF_SAMPLE_DATETIME = "2021:05:03 10:11:12"
EXIF_SAMPLE_LATITUDE = -33.4489
EXIF_SAMPLE_LONGITUDE = -70.6693


def write_jpeg_with_exif(
    path: Path,
    image: Image.Image | None = None,
    *,
    datetime_original: str | None = EXIF_SAMPLE_DATETIME,
    latitude: float | None = EXIF_SAMPLE_LATITUDE,
    longitude: float | None = EXIF_SAMPLE_LONGITUDE,
    orientation: int | None = 6,
) -> Path:
    """A JPEG with DateTimeOriginal, GPS and Orientation (6 = stored rotated 90° anticlockwise).

    The default picture is `two_colour_image()`: 40x20 stored, red left half, blue right half,
    so it must decode as 20x40 with red on top.
    """
    exif = make_exif(
        datetime_original=datetime_original,
        latitude=latitude,
        longitude=longitude,
        orientation=orientation,
    )
    return write_image(path, image=image or two_colour_image(), image_format="JPEG", exif=exif)


def write_jpeg_with_junk_exif(path: Path) -> Path:
    """A valid JPEG whose EXIF holds nonsense: an unset camera clock ("0000:00:00 00:00:00"),
    a zero-denominator GPS latitude, an out-of-range orientation (99)."""
    exif = Image.Exif()
    exif[ExifTags.Base.Orientation] = 99
    exif.get_ifd(ExifTags.IFD.Exif)[ExifTags.Base.DateTimeOriginal] = "0000:00:00 00:00:00"
    exif.get_ifd(ExifTags.IFD.GPSInfo).update(
        {
            ExifTags.GPS.GPSLatitudeRef: "N",
            ExifTags.GPS.GPSLatitude: (IFDRational(1, 0), IFDRational(0, 1), IFDRational(0, 1)),
            ExifTags.GPS.GPSLongitudeRef: "E",
            ExifTags.GPS.GPSLongitude: (IFDRational(10, 1), IFDRational(0, 1), IFDRational(0, 1)),
        }
    )
    return write_image(path, size=(30, 10), image_format="JPEG", exif=exif)


# --------------------------------------------------------------------------------------------
# Bad files


def write_truncated_jpeg(path: Path, keep_fraction: float = 0.5) -> Path:
    """A JPEG cut off part-way through its pixel data (header intact, so it opens, then fails)."""
    path = _prepare(path)
    buffer = io.BytesIO()
    # Noise compresses badly, so the scan data is long and the cut lands inside it.
    Image.effect_noise((256, 192), 60).convert("RGB").save(buffer, format="JPEG", quality=90)
    data = buffer.getvalue()
    path.write_bytes(data[: int(len(data) * keep_fraction)])
    return path


def write_empty_file(path: Path) -> Path:
    """A zero-byte file (give it an image extension)."""
    path = _prepare(path)
    path.write_bytes(b"")
    return path


def write_text_as_image(path: Path, text: str = "This is not a photo.\n") -> Path:
    """A plain text file, typically named `*.jpg`."""
    path = _prepare(path)
    path.write_text(text, encoding="utf-8")
    return path


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return (
        struct.pack(">I", len(data))
        + kind
        + data
        + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    )


def write_png_bomb(path: Path, width: int = 100_000, height: int = 100_000) -> Path:
    """A PNG whose header claims `width` x `height` RGB pixels but is under 100 bytes on disk.

    Decoding it would need width*height*3 bytes (30 GB at the default size); a safe decoder
    refuses it from the header. The pixel data is a few zero rows, so it is also truncated.
    """
    path = _prepare(path)
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB, no interlace
    pixels = zlib.compress(b"\x00" * 64, 9)
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n"
        + _png_chunk(b"IHDR", header)
        + _png_chunk(b"IDAT", pixels)
        + _png_chunk(b"IEND", b"")
    )
    return path


def write_corrupt_png(path: Path) -> Path:
    """A PNG with a valid header whose compressed pixel data is garbage."""
    path = _prepare(path)
    header = struct.pack(">IIBBBBB", 16, 16, 8, 2, 0, 0, 0)
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n"
        + _png_chunk(b"IHDR", header)
        + _png_chunk(b"IDAT", b"\x13\x37 definitely not zlib data")
        + _png_chunk(b"IEND", b"")
    )
    return path


# --------------------------------------------------------------------------------------------
# Odd names and folders


# Names that trip naive code: spaces (leading, double, trailing before the extension), accents
# composed and decomposed, CJK, an emoji, shell and URL metacharacters, a second dot.
ODD_FILE_NAMES: tuple[str, ...] = (
    " leading space.jpg",
    "double  space .jpg",
    "caf\u00e9 compos\u00e9.jpg",  # é as one code point (NFC)
    "cafe\u0301 decompose\u0301.png",  # é as e + combining accent (NFD)
    "\u5317\u6781\u718a \u5199\u771f.jpeg",  # 北极熊 写真
    "\U0001f98e lizard.webp",  # 🦎
    "quote's & percent%20 #hash.JPG",
    "two.dots.in.name.png",
)


def write_odd_named_images(folder: Path) -> list[Path]:
    """One valid image per name in `ODD_FILE_NAMES`, inside `folder/"odd names ü"/`."""
    subfolder = Path(folder) / "odd names \u00fc"
    return [write_image(subfolder / name) for name in ODD_FILE_NAMES]


def symlinks_supported(folder: Path) -> bool:
    """Whether this platform and user may create symlinks in `folder` (Windows often not)."""
    probe = Path(folder) / ".symlink-probe"
    try:
        probe.symlink_to(Path(folder), target_is_directory=True)
    except (OSError, NotImplementedError):
        return False
    probe.unlink()
    return True


def make_symlink_loop(folder: Path) -> list[Path]:
    """A tree whose directory symlinks form loops; returns the image files really in it.

        folder/loop/photo.jpg
        folder/loop/inner/deeper.png
        folder/loop/inner/back -> ..            (a loop: back to loop/)
        folder/loop/inner/self -> .             (a loop onto itself)
        folder/loop/sibling    -> inner         (a second way into inner/)

    A walker that follows symlinks must terminate and list each file once.
    Raises OSError where symlinks cannot be created (see `symlinks_supported`).
    """
    loop = Path(folder) / "loop"
    files = [write_jpeg(loop / "photo.jpg"), write_png(loop / "inner" / "deeper.png")]
    (loop / "inner" / "back").symlink_to("..", target_is_directory=True)
    (loop / "inner" / "self").symlink_to(".", target_is_directory=True)
    (loop / "sibling").symlink_to("inner", target_is_directory=True)
    return files


# --------------------------------------------------------------------------------------------
# Whole collections


@dataclass
class OddCollection:
    """What `make_odd_collection` wrote, as POSIX paths relative to its root."""

    root: Path
    good: list[str] = field(default_factory=list)  # images that must decode, sorted
    bad: dict[str, str] = field(default_factory=dict)  # image-named files -> reason fragment
    hidden: list[str] = field(default_factory=list)  # valid images a scan must not list
    not_images: list[str] = field(default_factory=list)  # other files a scan must not list


def make_odd_collection(root: Path, with_symlink_loop: bool | None = None) -> OddCollection:
    """A small collection mixing good images with every kind of bad file.

    `good` lists the images a scan must find and decode (any-case extensions, odd names,
    EXIF-rotated, an animated GIF); `bad` maps each broken image-named file to a fragment of
    the reason `engine.indexing.decode.decode_image` gives; `hidden` and `not_images` must not be listed.
    `with_symlink_loop` adds `make_symlink_loop` (default: when the platform allows it).
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    odd = OddCollection(root=root)

    def rel(path: Path) -> str:
        return path.relative_to(root).as_posix()

    odd.good += [rel(p) for p in write_any_case_images(root / "formats")]
    odd.good += [rel(p) for p in write_odd_named_images(root)]
    odd.good.append(rel(write_jpeg_with_exif(root / "exif" / "rotated.jpg")))
    odd.good.append(rel(write_jpeg_with_junk_exif(root / "exif" / "junk exif.jpg")))
    odd.good.append(rel(write_animated_gif(root / "formats" / "i_animated.gif")))

    bad = root / "bad"
    odd.bad[rel(write_truncated_jpeg(bad / "truncated.jpg"))] = "truncated"
    odd.bad[rel(write_empty_file(bad / "empty.jpg"))] = "empty file"
    odd.bad[rel(write_text_as_image(bad / "notes.jpg"))] = "not an image file"
    odd.bad[rel(write_png_bomb(bad / "bomb.png"))] = "image too large"
    odd.bad[rel(write_corrupt_png(bad / "corrupt.png"))] = "corrupt"

    odd.hidden.append(rel(write_jpeg(root / ".hidden.jpg")))
    odd.hidden.append(rel(write_jpeg(root / ".thumbnails" / "thumb.jpg")))
    odd.not_images.append(rel(write_text_as_image(root / "readme.txt")))
    odd.not_images.append(rel(write_image(root / "formats" / "bitmap.bmp", image_format="BMP")))

    if with_symlink_loop is None:
        with_symlink_loop = symlinks_supported(root)
    if with_symlink_loop:
        odd.good += [rel(p) for p in make_symlink_loop(root)]

    odd.good.sort()
    return odd


# A few real iNat21 category folder names (epithet "novae-angliae" has a hyphen).
INAT_SAMPLE_TAXA: tuple[tuple[str, str], ...] = (
    (
        "00000_Animalia_Annelida_Clitellata_Haplotaxida_Lumbricidae_Lumbricus_terrestris",
        "Common Earthworm",
    ),
    ("04686_Animalia_Chordata_Mammalia_Carnivora_Herpestidae_Mungos_mungo", "Banded Mongoose"),
    (
        "07133_Plantae_Tracheophyta_Magnoliopsida_Asterales_Asteraceae_Symphyotrichum_novae-angliae",
        "New England Aster",
    ),
)


def make_inat_collection(
    root: Path,
    taxa: Sequence[tuple[str, str]] = INAT_SAMPLE_TAXA,
    images_per_taxon: int = 2,
    metadata_name: str | None = "metadata.json",
) -> dict[str, dict[str, Any]]:
    """An iNat-style tree `root/train/<category folder>/<id>.jpg` plus COCO metadata.

    `taxa` pairs a category folder name with a common name. Each image has a distinct colour.
    With `metadata_name`, a COCO file is written at the root (images, categories, annotations,
    licenses; image k has id 1000 + k, licence id 1 = "CC BY 4.0", date 2021-05-0N, a position).
    Returns the COCO image records keyed by relative path.
    """
    root = Path(root)
    images: list[dict[str, Any]] = []
    categories: list[dict[str, Any]] = []
    annotations: list[dict[str, Any]] = []
    records: dict[str, dict[str, Any]] = {}
    for t, (dir_name, common_name) in enumerate(taxa):
        number, kingdom, phylum, class_, order, family, genus, epithet = dir_name.split("_")
        category_id = int(number)
        categories.append(
            {
                "id": category_id,
                "name": f"{genus} {epithet}",
                "common_name": common_name,
                "supercategory": kingdom,
                "kingdom": kingdom,
                "phylum": phylum,
                "class": class_,
                "order": order,
                "family": family,
                "genus": genus,
                "specific_epithet": epithet,
                "image_dir_name": dir_name,
            }
        )
        for i in range(images_per_taxon):
            image_id = 1000 + len(images)
            rel_path = f"train/{dir_name}/{image_id:08x}-{t}{i}.jpg"
            write_jpeg(root / rel_path, color=(40 + 60 * t, 30 * i % 256, 120))
            record = {
                "id": image_id,
                "file_name": rel_path,
                "width": 64,
                "height": 48,
                "license": 1,
                "rights_holder": f"Observer {t}{i}",
                "date": f"2021-05-0{1 + i % 9} 10:00:00+00:00",
                "latitude": 10.5 + t,
                "longitude": -20.25 - i,
                "location_uncertainty": 15,
            }
            images.append(record)
            annotations.append({"id": image_id, "image_id": image_id, "category_id": category_id})
            records[rel_path] = record
    if metadata_name is not None:
        document = {
            "info": {"description": "test collection"},
            "licenses": [
                {
                    "id": 1,
                    "name": "CC BY 4.0",
                    "url": "https://creativecommons.org/licenses/by/4.0/",
                }
            ],
            "images": images,
            "categories": categories,
            "annotations": annotations,
        }
        (root / metadata_name).write_text(json.dumps(document, indent=1), encoding="utf-8")
    return records


def write_non_utf8_named_file(folder: Path) -> Path | None:
    """A valid JPEG whose file name is not valid UTF-8 (b"\\xff\\xfe.jpg"); None where the
    file system refuses such names (macOS, Windows)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    raw_path = os.fsencode(folder) + b"/\xff\xfe.jpg"
    buffer = io.BytesIO()
    solid_image().save(buffer, format="JPEG")
    try:
        with open(raw_path, "wb") as handle:
            handle.write(buffer.getvalue())
    except (OSError, ValueError):
        return None
    return Path(os.fsdecode(raw_path))
