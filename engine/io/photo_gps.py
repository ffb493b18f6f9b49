"""Removing GPS from a copy of a photo whose place may not be published (docs/SPEC.md §4.3).

Done in place, without decoding the image: in every EXIF block (JPEG APP1 segments, those of a
JPEG's further images such as MPF previews, and a TIFF file's own header) the GPS directory and
the bytes its values took are zeroed and its entry taken out of the directory that points to
it, so every other offset, the maker notes and
the image data stay as they were; in XMP packets every GPS property (`exif:GPSLatitude`, in
any prefix, as an attribute or an element) is overwritten with spaces, which keeps the packet's
length and leaves valid XML. Place names typed into IPTC or XMP location fields are not
touched.

JPEG and TIFF (with DNG) only: for other formats `strip_gps` returns None and the caller
leaves the photo out rather than publish a place it cannot remove.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable

STRIPPABLE_SUFFIXES = frozenset({".jpg", ".jpeg", ".jpe", ".tif", ".tiff", ".dng"})

_GPS_POINTER = 0x8825
_EXIF_POINTER = 0x8769
_SUB_IFDS = 0x014A
_XMP_TAG = 700
_TYPE_SIZES = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 6: 1, 7: 1, 8: 2, 9: 4, 10: 8, 11: 4, 12: 8, 13: 4}
_EXIF_HEADER = b"Exif\x00\x00"
_XMP_HEADER = b"http://ns.adobe.com/xap/1.0/\x00"
_XMP_EXTENSION = b"http://ns.adobe.com/xmp/extension/\x00"
_MAX_IFDS = 64  # a loop of directories in a damaged file ends here

# A GPS property of XMP, as an attribute (prefix:GPSLatitude="...") or an element.
_XMP_ATTRIBUTE = re.compile(rb"""\s[A-Za-z_][\w.-]*:GPS\w*\s*=\s*(?:"[^"]*"|'[^']*')""")
_XMP_ELEMENT = re.compile(rb"<([A-Za-z_][\w.-]*:GPS\w*)\b[^>]*?(?:/>|>.*?</\1\s*>)", re.DOTALL)


_Reader = Callable[[int], int]  # a number at an offset of the TIFF structure


class MalformedExif(ValueError):
    """An EXIF block whose directories point outside it: its GPS cannot be found for sure."""


def strip_gps(data: bytes, suffix: str) -> bytes | None:
    """`data` (a whole photo file) with its GPS removed; None for a format this cannot do.
    Raises MalformedExif when an EXIF block cannot be read (its GPS could stay)."""
    suffix = suffix.lower()
    if suffix not in STRIPPABLE_SUFFIXES:
        return None
    out = bytearray(data)
    if data[:2] == b"\xff\xd8":
        _strip_jpeg(out)
    elif data[:4] in (b"II*\x00", b"MM\x00*"):
        _strip_tiff(out, 0, len(out))
        _strip_xmp_everywhere(out)
    else:
        return None
    return bytes(out)


def _strip_jpeg(out: bytearray) -> None:
    """Every APP1 segment: EXIF blocks emptied of GPS, XMP packets of GPS properties. The
    segments of the first image are walked; later images (MPF) are found by their headers."""
    position = 2
    while position + 4 <= len(out) and out[position] == 0xFF:
        marker = out[position + 1]
        if marker in (0xD9, 0xDA):  # end of image, start of scan: no metadata after
            break
        if 0xD0 <= marker <= 0xD7 or marker == 0x01:
            position += 2
            continue
        length = struct.unpack(">H", out[position + 2 : position + 4])[0]
        start, end = position + 4, position + 2 + length
        if length < 2 or end > len(out):
            raise MalformedExif("a JPEG segment runs past the end of the file")
        if marker == 0xE1:
            _strip_app1(out, start, end)
        position = end
    # Further images (a multi-picture file's previews) carry their own EXIF.
    search = position
    while (found := out.find(b"\xff\xe1", search)) != -1:
        search = found + 2
        if out[found + 4 : found + 10] != _EXIF_HEADER:
            continue
        length = struct.unpack(">H", out[found + 2 : found + 4])[0]
        end = found + 2 + length
        if end <= len(out):
            _strip_app1(out, found + 4, end)


def _strip_app1(out: bytearray, start: int, end: int) -> None:
    if out[start : start + 6] == _EXIF_HEADER:
        _strip_tiff(out, start + 6, end)
    elif out[start : start + len(_XMP_HEADER)] == _XMP_HEADER or (
        out[start : start + len(_XMP_EXTENSION)] == _XMP_EXTENSION
    ):
        _blank_xmp(out, start, end)


def _strip_tiff(out: bytearray, base: int, end: int) -> None:
    """Empty every GPS directory of the TIFF structure at out[base:end]."""
    order = bytes(out[base : base + 2])
    if order not in (b"II", b"MM") or end - base < 8:
        raise MalformedExif("no TIFF header in an EXIF block")
    endian = "<" if order == b"II" else ">"

    def u16(at: int) -> int:
        return int(struct.unpack(endian + "H", out[base + at : base + at + 2])[0])

    def u32(at: int) -> int:
        return int(struct.unpack(endian + "I", out[base + at : base + at + 4])[0])

    size = end - base
    if u16(2) != 42:
        raise MalformedExif("not a classic TIFF structure")
    pending = [u32(4)]
    seen: set[int] = set()
    while pending and len(seen) < _MAX_IFDS:
        offset = pending.pop()
        if offset == 0 or offset in seen:
            continue
        seen.add(offset)
        if offset + 2 > size:
            raise MalformedExif("a directory lies outside its EXIF block")
        count = u16(offset)
        if offset + 2 + 12 * count + 4 > size:
            raise MalformedExif("a directory runs past its EXIF block")
        gps_entry = None
        for index in range(count):
            entry = offset + 2 + 12 * index
            tag, kind, n = u16(entry), u16(entry + 2), u32(entry + 4)
            if tag == _GPS_POINTER:
                _empty_directory(out, base, size, u32(entry + 8), u16, u32)
                gps_entry = index
            elif tag in (_EXIF_POINTER, _SUB_IFDS):
                if n == 1 or tag == _EXIF_POINTER:
                    pending.append(u32(entry + 8))
                else:
                    where = u32(entry + 8)
                    pending.extend(
                        u32(where + 4 * k) for k in range(min(n, 16)) if where + 4 * k + 4 <= size
                    )
            elif tag == _XMP_TAG and base == 0:
                length = _TYPE_SIZES.get(kind, 1) * n
                start = u32(entry + 8) if length > 4 else entry + 8
                if start + length <= size:
                    _blank_xmp(out, start, start + length)
        pending.append(u32(offset + 2 + 12 * count))  # the next directory in the chain
        if gps_entry is not None:
            _drop_entry(out, base, offset, count, gps_entry, endian)


def _drop_entry(
    out: bytearray, base: int, offset: int, count: int, index: int, endian: str
) -> None:
    """Take entry `index` out of the directory at `offset`: the later entries and the pointer
    to the next directory move up (values stored elsewhere keep their offsets)."""
    table = base + offset + 2
    start, end = table + 12 * index, table + 12 * count + 4
    out[start : end - 12] = out[start + 12 : end]
    out[end - 12 : end] = bytes(12)
    out[base + offset : base + offset + 2] = struct.pack(endian + "H", count - 1)


def _empty_directory(
    out: bytearray, base: int, size: int, offset: int, u16: _Reader, u32: _Reader
) -> None:
    """Zero a GPS directory: its values, its entries and its count."""
    if offset == 0:
        return
    if offset + 2 > size:
        raise MalformedExif("the GPS directory lies outside its EXIF block")
    count = u16(offset)
    table_end = offset + 2 + 12 * count + 4
    if table_end > size:
        raise MalformedExif("the GPS directory runs past its EXIF block")
    for index in range(count):
        entry = offset + 2 + 12 * index
        kind, n = u16(entry + 2), u32(entry + 4)
        length = _TYPE_SIZES.get(kind, 1) * n
        if length > 4:
            where = u32(entry + 8)
            if where + length > size:
                raise MalformedExif("a GPS value lies outside its EXIF block")
            out[base + where : base + where + length] = bytes(length)
    out[base + offset : base + table_end] = bytes(table_end - offset)


def _blank_xmp(out: bytearray, start: int, end: int) -> None:
    """Overwrite the GPS properties of the XMP in out[start:end] with spaces."""
    packet = bytes(out[start:end])
    for pattern in (_XMP_ELEMENT, _XMP_ATTRIBUTE):
        for found in pattern.finditer(packet):
            a, b = found.span()
            out[start + a : start + b] = b" " * (b - a)
        packet = bytes(out[start:end])


def _strip_xmp_everywhere(out: bytearray) -> None:
    """A TIFF's XMP is blanked through its tag; an `<x:xmpmeta` packet elsewhere (a RAW's
    preview) is found by its wrapper."""
    search = 0
    while (start := out.find(b"<x:xmpmeta", search)) != -1:
        end = out.find(b"</x:xmpmeta>", start)
        if end == -1:
            break
        _blank_xmp(out, start, end)
        search = end


def has_gps(data: bytes) -> bool:
    """Whether a JPEG or TIFF still holds EXIF GPS coordinates or XMP GPS properties (read by
    Pillow, independently of how they were removed)."""
    import io

    from PIL import ExifTags, Image

    try:
        with Image.open(io.BytesIO(data)) as image:
            gps = image.getexif().get_ifd(ExifTags.IFD.GPSInfo)
            xmp = image.info.get("xmp") or image.info.get("XML:com.adobe.xmp") or b""
    except Exception:  # a file Pillow cannot open: judged by its XMP alone
        gps, xmp = {}, data
    if isinstance(xmp, str):
        xmp = xmp.encode("utf-8", "replace")
    return bool(gps) or bool(re.search(rb":GPS(?:Latitude|Longitude)", bytes(xmp)))
