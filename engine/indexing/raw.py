"""Decoding camera RAW files (CR2, NEF, ARW, DNG, RAF, ORF, RW2, ...) with rawpy (LibRaw).

An encoder sees photos at a few hundred pixels, so a RAW's embedded preview (a JPEG, sometimes an
RGB bitmap, that the camera wrote beside the sensor data) is used when it is at least as large as
the encoder asks: decoding it takes milliseconds, where demosaicing takes a second. Otherwise the
sensor data is demosaiced at half size (LibRaw's `half_size`: one pixel per 2 x 2 Bayer block, no
interpolation, about four times faster than a full demosaic), with the camera's white balance.

EXIF comes from the RAW's own TIFF header where PIL can read one (DNG, CR2, NEF, ARW, PEF); for
a Fujifilm RAF, from the APP1 segment of the JPEG the RAF container embeds (its offset and
length at bytes 84 and 88 of the header, big-endian), read here directly: the preview LibRaw
hands back carries an EXIF LibRaw generated from its own data (its spelling of the make and
model, no DateTimeOriginal), which left every RAF undated. Other RAWs (RW2, CR3, ORF) take the
preview's EXIF. A damaged file raises `BadImageError` with a short reason, like every other
photo.
"""

from __future__ import annotations

import io
import logging
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol, cast

import numpy as np
from PIL import Image

from engine.errors import BadImageError
from engine.indexing.embedded import RAF_MAGIC, open_regular
from engine.indexing.exif import ExifInfo, read_exif

log = logging.getLogger(__name__)

try:
    import rawpy

    RAW_AVAILABLE = True
except ImportError:  # a platform without a rawpy wheel: RAW files are not taken as photos
    RAW_AVAILABLE = False

# The RAW formats of the cameras LibRaw reads, by file name.
RAW_EXTENSIONS: frozenset[str] = frozenset(
    {
        ".3fr", ".arw", ".cr2", ".cr3", ".crw", ".dcr", ".dng", ".erf", ".iiq", ".kdc", ".mef",
        ".mos", ".mrw", ".nef", ".nrw", ".orf", ".pef", ".raf", ".rw2", ".rwl", ".sr2", ".srf",
        ".srw", ".x3f",
    }
)  # fmt: skip

# LibRaw's `flip` (how the sensor's image is turned) as the EXIF orientation that undoes it.
_FLIP_TO_ORIENTATION = {3: 3, 5: 8, 6: 6}
_TRANSPOSE = {
    3: Image.Transpose.ROTATE_180,
    6: Image.Transpose.ROTATE_270,
    8: Image.Transpose.ROTATE_90,
}


class Budget(Protocol):
    """What `decode_raw` needs of `engine.indexing.decode.DecodeBudget`."""

    def reserve(self, nbytes: int) -> AbstractContextManager[None]: ...


@dataclass
class RawImage:
    """A RAW decoded for an encoder: RGB and upright; the photo's full upright size."""

    image: Image.Image
    width: int
    height: int
    exif: ExifInfo
    from_preview: bool  # the embedded preview was used, not the sensor data


# How much of a TIFF-based RAW is read for its EXIF: cameras put the IFDs first.
_HEADER_BYTES = 1 << 20


class _ExifOnly:
    """What `read_exif` uses of an image (`getexif`), for EXIF parsed from a RAW's header: PIL
    opens no RAW as an image (a Bayer mosaic is no mode it knows)."""

    def __init__(self, exif: Image.Exif) -> None:
        self._exif = exif

    def getexif(self) -> Image.Exif:
        return self._exif


def _header_exif(path: Path) -> ExifInfo:
    """The camera's EXIF read from the file itself (nothing decoded): a TIFF-based RAW's header,
    or the APP1 of a RAF's embedded JPEG; an empty one for other RAWs (the preview's then)."""
    try:
        with open_regular(path) as file:
            head = file.read(_HEADER_BYTES)
            if head[:16] == RAF_MAGIC:
                head = _raf_exif_segment(file, head)
            elif head[:4] not in (b"II*\x00", b"MM\x00*"):
                return ExifInfo()  # RW2, CR3, ORF: the preview's EXIF
        if not head:
            return ExifInfo()
        exif = Image.Exif()
        exif.load(head)
        return read_exif(cast(Image.Image, _ExifOnly(exif)))
    except Exception as exc:  # a header PIL rejects
        log.debug("no header EXIF in %s: %s", path.name, exc)
        return ExifInfo()


def _raf_exif_segment(file: IO[bytes], head: bytes) -> bytes:
    """The EXIF (TIFF) of a RAF's embedded JPEG: its APP1 "Exif" segment, b"" when none."""
    start = int.from_bytes(head[84:88], "big")
    length = int.from_bytes(head[88:92], "big")
    file.seek(start)
    jpeg = file.read(min(length, _HEADER_BYTES))
    if jpeg[:2] != b"\xff\xd8":
        return b""
    position = 2
    while position + 4 <= len(jpeg) and jpeg[position] == 0xFF:
        marker = jpeg[position + 1]
        if marker in (0xDA, 0xD9):  # the image data: no EXIF before it
            break
        size = int.from_bytes(jpeg[position + 2 : position + 4], "big")
        payload = jpeg[position + 4 : position + 2 + size]
        if marker == 0xE1 and payload.startswith(b"Exif\x00\x00"):
            return payload[6:]
        position += 2 + size
    return b""


def _preview(raw: Any, min_side: int) -> tuple[Image.Image | None, ExifInfo]:
    """The embedded preview when both its sides reach `min_side` (else None), and its EXIF."""
    try:
        thumb = raw.extract_thumb()
    except (rawpy.LibRawNoThumbnailError, rawpy.LibRawUnsupportedThumbnailError):
        return None, ExifInfo()
    if thumb.format == rawpy.ThumbFormat.BITMAP:
        array = np.asarray(thumb.data)
        if array.ndim != 3 or min(array.shape[:2]) < min_side:
            return None, ExifInfo()
        return Image.fromarray(array[:, :, :3].astype(np.uint8), "RGB"), ExifInfo()
    try:
        opened = Image.open(io.BytesIO(thumb.data), formats=("JPEG",))
        exif = read_exif(opened)
        if min(opened.size) < min_side:
            return None, exif
        opened.draft("RGB", (min_side, min_side))  # a large preview decodes at 1/2 to 1/8
        opened.load()
        return opened.convert("RGB"), exif
    except Exception as exc:  # a damaged preview: the sensor data may still be good
        log.debug("unusable RAW preview: %s", exc)
        return None, ExifInfo()


def decode_raw(path: Path, max_pixels: int, min_side: int | None, budget: Budget) -> RawImage:
    """Decode one RAW file for an encoder that needs both sides at least `min_side` (None: the
    preview must be at least half the sensor's size, as the half-size demosaic would be).

    Raises `BadImageError` for a file LibRaw cannot read, a truncated or damaged one, or a
    sensor of more than `max_pixels` pixels."""
    try:
        with rawpy.imread(str(path)) as raw:  # reads the header; sensor data only on demand
            sizes = raw.sizes
            width, height = int(sizes.width), int(sizes.height)
            if width <= 0 or height <= 0:
                raise BadImageError("corrupt RAW data (zero size)")
            if width * height > max_pixels:
                raise BadImageError(
                    f"image too large: {width}x{height} pixels (limit {max_pixels:,})"
                )
            orientation = _FLIP_TO_ORIENTATION.get(int(sizes.flip))
            if orientation in (6, 8):
                width, height = height, width
            exif = _header_exif(path)
            wanted = min_side if min_side else (min(width, height) + 1) // 2
            with budget.reserve(8 * wanted * wanted * 4):
                preview, preview_exif = _preview(raw, wanted)
            if exif.observed_at is None and exif.make is None:
                exif = preview_exif
            if preview is not None:
                transpose = _TRANSPOSE.get(orientation or 1)
                image = preview if transpose is None else preview.transpose(transpose)
                return RawImage(image, width, height, exif, from_preview=True)
            # The unpacked sensor (16-bit) and the half-size 8-bit RGB with PIL's copy of it.
            cost = int(sizes.raw_width) * int(sizes.raw_height) * 2 + width * height * 2
            with budget.reserve(cost):
                rgb = raw.postprocess(half_size=True, use_camera_wb=True, output_bps=8)
                image = Image.fromarray(np.ascontiguousarray(rgb), "RGB")  # LibRaw turned it
            return RawImage(image, width, height, exif, from_preview=False)
    except BadImageError:
        raise
    except MemoryError:
        raise BadImageError("image too large to decode") from None
    except Exception as exc:
        raise BadImageError(_reason(exc)) from None


def _reason(exc: BaseException) -> str:
    """A short reason for a RAW LibRaw could not decode."""
    if RAW_AVAILABLE:
        if isinstance(exc, rawpy.LibRawFileUnsupportedError):
            return "not a RAW file LibRaw can read"
        if isinstance(exc, rawpy.LibRawIOError):
            return "truncated or unreadable RAW data"
        if isinstance(exc, rawpy.LibRawDataError):
            return "corrupt RAW data"
    if isinstance(exc, FileNotFoundError):
        return "file not found"
    if isinstance(exc, PermissionError):
        return "cannot read file: permission denied"
    text = exc.args[0] if exc.args else ""
    message = text.decode(errors="replace") if isinstance(text, bytes) else str(text)
    return f"corrupt RAW data ({message or type(exc).__name__})"
