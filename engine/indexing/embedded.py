"""The XMP packet and IPTC-IIM records a photo file carries, read bounded, and what they say
together.

`read_embedded` finds them itself in JPEG (APP1, APP13), TIFF and the TIFF-based RAWs (IFD0
tags 700, 33723, 34377), RAF (its embedded JPEG), PNG (iTXt) and WebP (the `XMP ` chunk),
seeking past everything else: only the headers are read, never the pixels, and a packet over
`XMP_MAX_BYTES` is skipped without being read (Pillow reads every TIFF tag whole: a 96 MB
packet cost 1.27 GB once parsed). Other formats (HEIF, AVIF, GIF) come through Pillow, capped
the same. `embedded_in_image` takes them from an image Pillow has already opened, for the
capture-time fallback of `engine.indexing.exif`. `open_regular` opens only regular files: a
FIFO named like a photo or sidecar would block the reader forever.

`embedded_facts` reconciles XMP and IPTC as the Metadata Working Group's Guidelines for Handling
Image Metadata 2.0 (2010) ask a reader to, with the IPTC digest (Photoshop image resource 0x0425,
the MD5 of the IIM block a writer that kept both in step stored beside it):

- no digest, or a digest that matches the IIM block: the two are in step (or the XMP is newer),
  so an XMP property that is present wins and IPTC fills only what XMP lacks;
- a digest that does not match: a tool that knows only IPTC changed it after the XMP was
  written, so IPTC's value wins (an IPTC value that is only XMP's cut to IPTC's length limit
  counts as XMP's).

This is applied to keywords (IPTC 2:25 against dc:subject) and to the capture-time candidates
(IPTC 2:55 + 2:60 and 2:62 + 2:63 against the XMP dates). Hierarchical keywords, the rating and
the licence exist in XMP alone.
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
import zlib
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, Any, Literal

from engine.indexing.xmp_packet import XMP_MAX_BYTES, read_xmp, with_zone

log = logging.getLogger(__name__)

XMP_APP1 = b"http://ns.adobe.com/xap/1.0/\x00"
PHOTOSHOP_APP13 = b"Photoshop 3.0\x00"
RAF_MAGIC = b"FUJIFILMCCD-RAW "
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
IPTC_KEYWORD_BYTES = 64  # IIM's limit for 2:25: a longer XMP keyword arrives cut there

_TAG_XMP, _TAG_IPTC, _TAG_PHOTOSHOP = 700, 33723, 34377
_PSIR_IPTC, _PSIR_IPTC_DIGEST = 0x0404, 0x0425
# TIFF and its RAW variants: 42, Panasonic's RW2 (0x55), Olympus' ORF ("RO", "RS").
_TIFF_MAGICS = frozenset({42, 0x55, 0x4F52, 0x5352})
_TIFF_TYPE_BYTES = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 6: 1, 7: 1, 8: 2, 9: 4, 10: 8, 11: 4, 12: 8}
_MAX_SEGMENTS = 10_000  # JPEG markers or PNG/WebP chunks looked at before giving up
_MAX_IFD_ENTRIES = 4_096


class NotARegularFile(OSError):
    """A FIFO, socket or device where a photo or sidecar was expected."""


def open_regular(path: str | os.PathLike[str]) -> IO[bytes]:
    """`path` opened for reading, only if it is a regular file (`NotARegularFile` otherwise).

    Checked before opening (opening a FIFO blocks until a writer comes, and a device may do
    something on open) and again on the opened file, which is opened non-blocking so that a
    FIFO put in its place in between cannot block either."""
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise NotARegularFile(f"not a regular file: {os.fspath(path)}")
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    descriptor = os.open(path, flags)
    try:
        regular = stat.S_ISREG(os.fstat(descriptor).st_mode)
    except OSError:
        os.close(descriptor)
        raise
    if not regular:
        os.close(descriptor)
        raise NotARegularFile(f"not a regular file: {os.fspath(path)}")
    return os.fdopen(descriptor, "rb")


@dataclass(frozen=True)
class Embedded:
    """A file's XMP packet, its IPTC-IIM block as stored and the IPTC digest beside it."""

    xmp: bytes | None = None
    iptc: bytes | None = None
    iptc_digest: bytes | None = None


# -- finding them in a file -------------------------------------------------------------------


def read_embedded(path: Path) -> Embedded:
    """The XMP packet and IPTC of the photo at `path`, headers only and bounded (see the
    module's docstring). Raises OSError (`NotARegularFile` included) when it cannot be read."""
    with open_regular(path) as file:
        head = file.read(16)
        if head[:2] == b"\xff\xd8":
            return _scan_jpeg(file, 0)
        if head[:2] in (b"II", b"MM") and _tiff_magic(head) in _TIFF_MAGICS:
            return _scan_tiff(file)
        if head[:2] in (b"II", b"MM") and _tiff_magic(head) == 43:
            return Embedded()  # BigTIFF: not read (Pillow would read its tags whole)
        if head[:8] == PNG_SIGNATURE:
            return _scan_png(file)
        if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
            return _scan_webp(file)
        if head == RAF_MAGIC:
            return _scan_raf(file)
    return _embedded_through_pillow(path)


def _tiff_magic(head: bytes) -> int:
    return int.from_bytes(head[2:4], "little" if head[:2] == b"II" else "big")


def _too_large(what: str, size: int) -> bool:
    if size <= XMP_MAX_BYTES:
        return False
    log.warning("embedded %s of %d MB not read (over %d MB)", what, size >> 20, XMP_MAX_BYTES >> 20)
    return True


def _scan_jpeg(file: IO[bytes], start: int) -> Embedded:
    """APP1's XMP packet and APP13's Photoshop resources, up to the image data."""
    file.seek(start + 2)
    xmp: bytes | None = None
    resources = bytearray()
    for _ in range(_MAX_SEGMENTS):
        if file.read(1) != b"\xff":
            break  # not a marker: damaged, stop with what was found
        marker = file.read(1)
        while marker == b"\xff":  # fill bytes
            marker = file.read(1)
        if not marker or marker in (b"\xda", b"\xd9"):  # start of scan, end of image
            break
        if marker == b"\x01" or b"\xd0" <= marker <= b"\xd7":
            continue  # markers without a length
        size_bytes = file.read(2)
        if len(size_bytes) < 2:
            break
        length = int.from_bytes(size_bytes, "big") - 2
        if length < 0:
            break
        if marker == b"\xe1" and xmp is None and length >= len(XMP_APP1):
            prefix = file.read(len(XMP_APP1))
            if prefix == XMP_APP1:
                xmp = file.read(length - len(prefix))  # at most 64 KB: a segment's limit
            else:
                file.seek(length - len(prefix), os.SEEK_CUR)
        elif marker == b"\xed" and len(resources) + length <= XMP_MAX_BYTES:
            payload = file.read(length)
            if payload.startswith(PHOTOSHOP_APP13):  # one resource block may span segments
                resources += payload[len(PHOTOSHOP_APP13) :]
        else:
            file.seek(length, os.SEEK_CUR)
    found = photoshop_resources(bytes(resources))
    return Embedded(xmp, found.get(_PSIR_IPTC), found.get(_PSIR_IPTC_DIGEST))


def photoshop_resources(data: bytes) -> dict[int, bytes]:
    """Photoshop image resource blocks ("8BIM", id, padded Pascal name, size, padded data) by
    id, the first of each; a damaged block ends the list."""
    found: dict[int, bytes] = {}
    position = 0
    while position + 12 <= len(data) and data[position : position + 4] == b"8BIM":
        resource = int.from_bytes(data[position + 4 : position + 6], "big")
        name = data[position + 6] + 1
        position += 6 + name + (name % 2)
        if position + 4 > len(data):
            break
        size = int.from_bytes(data[position : position + 4], "big")
        position += 4
        if position + size > len(data):
            break
        found.setdefault(resource, data[position : position + size])
        position += size + (size % 2)
    return found


def _scan_tiff(file: IO[bytes]) -> Embedded:
    """IFD0's XMP (700), IPTC (33723) and Photoshop resources (34377), each read only when
    its size is within the bound."""
    file.seek(0)
    head = file.read(8)
    order: Literal["little", "big"] = "little" if head[:2] == b"II" else "big"
    file.seek(int.from_bytes(head[4:8], order))
    count = int.from_bytes(file.read(2), order)
    if count > _MAX_IFD_ENTRIES:
        return Embedded()
    entries = file.read(12 * count)
    values: dict[int, bytes] = {}
    for index in range(len(entries) // 12):
        entry = entries[12 * index : 12 * index + 12]
        tag = int.from_bytes(entry[0:2], order)
        if tag not in (_TAG_XMP, _TAG_IPTC, _TAG_PHOTOSHOP):
            continue
        kind = int.from_bytes(entry[2:4], order)
        size = int.from_bytes(entry[4:8], order) * _TIFF_TYPE_BYTES.get(kind, 1)
        if size <= 4:
            values[tag] = entry[8 : 8 + size]
        elif not _too_large("XMP" if tag == _TAG_XMP else "IPTC", size):
            here = file.tell()
            file.seek(int.from_bytes(entry[8:12], order))
            values[tag] = file.read(size)
            file.seek(here)
    resources = photoshop_resources(values.get(_TAG_PHOTOSHOP, b""))
    iptc = values.get(_TAG_IPTC) or resources.get(_PSIR_IPTC)
    return Embedded(values.get(_TAG_XMP), iptc, resources.get(_PSIR_IPTC_DIGEST))


def _scan_raf(file: IO[bytes]) -> Embedded:
    """A Fujifilm RAF's embedded JPEG (its offset at byte 84, big-endian), scanned as a JPEG."""
    file.seek(84)
    start = int.from_bytes(file.read(4), "big")
    file.seek(start)
    if file.read(2) != b"\xff\xd8":
        return Embedded()
    return _scan_jpeg(file, start)


def _scan_png(file: IO[bytes]) -> Embedded:
    """The iTXt chunk "XML:com.adobe.xmp" (inflated when compressed, bounded)."""
    keyword = b"XML:com.adobe.xmp\x00"
    file.seek(8)
    for _ in range(_MAX_SEGMENTS):
        head = file.read(8)
        if len(head) < 8 or head[4:8] == b"IEND":
            break
        length = int.from_bytes(head[:4], "big")
        if head[4:8] == b"iTXt" and length > len(keyword):
            prefix = file.read(len(keyword))
            if prefix == keyword and not _too_large("XMP", length):
                rest = file.read(length - len(keyword))
                compressed = rest[:1] == b"\x01"
                # compression flag and method, language tag, translated keyword, then text
                _language, _, rest = rest[2:].partition(b"\x00")
                _translated, _, text = rest.partition(b"\x00")
                if compressed:
                    inflater = zlib.decompressobj()
                    text = inflater.decompress(text, XMP_MAX_BYTES + 1)
                    if _too_large("XMP", len(text)):
                        return Embedded()
                return Embedded(xmp=text)
            file.seek(length - len(prefix) + 4, os.SEEK_CUR)
            continue
        file.seek(length + 4, os.SEEK_CUR)  # the chunk and its CRC
    return Embedded()


def _scan_webp(file: IO[bytes]) -> Embedded:
    """The `XMP ` chunk of a WebP's RIFF container."""
    file.seek(12)
    for _ in range(_MAX_SEGMENTS):
        head = file.read(8)
        if len(head) < 8:
            break
        size = int.from_bytes(head[4:8], "little")
        if head[:4] == b"XMP ":
            return Embedded() if _too_large("XMP", size) else Embedded(xmp=file.read(size))
        file.seek(size + (size % 2), os.SEEK_CUR)
    return Embedded()


def _embedded_through_pillow(path: Path) -> Embedded:
    """HEIF, AVIF, GIF and the rest: what Pillow (and pillow-heif, when registered) finds."""
    from PIL import Image

    Image.init()
    # Only these (no EPS and the like), and only those registered: Pillow refuses unknown names.
    wanted = ("HEIF", "AVIF", "GIF", "JPEG", "PNG", "WEBP", "TIFF")
    formats: list[str] = [f for f in wanted if f in Image.OPEN]
    with Image.open(path, formats=formats) as image:
        return embedded_in_image(image)


def embedded_in_image(image: Any, exif: Any = None) -> Embedded:
    """The XMP packet and IPTC of an image Pillow opened (or of anything with `getexif`, as a
    RAW's header EXIF is): what its decoder read, the XMP over the bound dropped. `exif` is
    the image's `getexif()` when the caller has it already."""
    info: dict[str, Any] = getattr(image, "info", None) or {}
    xmp = info.get("xmp") or info.get("XML:com.adobe.xmp")
    if xmp is None:
        for marker, payload in getattr(image, "applist", None) or ():
            if marker == "APP1" and payload.startswith(XMP_APP1):
                xmp = payload[len(XMP_APP1) :]
                break
    if exif is None:
        try:
            exif = image.getexif()
        except Exception:  # noqa: BLE001 - junk EXIF: no TIFF tags to look in
            exif = {}
    if xmp is None:
        xmp = exif.get(_TAG_XMP)
    if isinstance(xmp, str):
        xmp = xmp.encode("utf-8")
    if not isinstance(xmp, bytes) or _too_large("XMP", len(xmp)):
        xmp = None
    resources = info.get("photoshop")  # JPEG: Pillow parsed APP13 into {id: data}
    if not isinstance(resources, dict):
        resources = photoshop_resources(_as_bytes(exif.get(_TAG_PHOTOSHOP)) or b"")
    iptc = _as_bytes(resources.get(_PSIR_IPTC)) or _as_bytes(exif.get(_TAG_IPTC))
    return Embedded(xmp, iptc, _as_bytes(resources.get(_PSIR_IPTC_DIGEST)))


def _as_bytes(value: object) -> bytes | None:
    """A tag's bytes (Pillow gives an UNDEFINED or BYTE tag as bytes, rarely as a tuple)."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, tuple) and all(isinstance(v, int) and 0 <= v < 256 for v in value):
        return bytes(value)
    return None


# -- what they say together ---------------------------------------------------------------


def iim_datasets(block: bytes) -> dict[tuple[int, int], list[bytes]]:
    """An IPTC-IIM block's datasets by (record, dataset), values in order; a damaged dataset
    ends the block."""
    found: dict[tuple[int, int], list[bytes]] = {}
    position = 0
    while position + 5 <= len(block) and block[position] == 0x1C:
        record, dataset = block[position + 1], block[position + 2]
        size = int.from_bytes(block[position + 3 : position + 5], "big")
        position += 5
        if size & 0x8000:  # an extended dataset: the size's own length follows
            width = size & 0x7FFF
            if width > 4:
                break
            size = int.from_bytes(block[position : position + width], "big")
            position += width
        if position + size > len(block):
            break
        found.setdefault((record, dataset), []).append(block[position : position + size])
        position += size
    return found


def iptc_text(value: bytes, utf8: bool) -> str:
    """An IIM text value: UTF-8 when the block says so (1:90 ESC % G), else UTF-8 when it
    decodes (most writers use it without saying), else Latin-1."""
    if utf8:
        return value.decode("utf-8", "replace")
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return value.decode("latin-1")


def _iim_date(date: bytes, time: bytes | None) -> datetime | None:
    """IIM's CCYYMMDD with HHMMSS±HHMM (the time and its zone optional)."""
    text = date.decode("ascii", "replace").strip().replace("-", "")
    try:
        moment = datetime.strptime(text, "%Y%m%d")
    except ValueError:
        return None
    clock = (time or b"").decode("ascii", "replace").strip().replace(":", "")
    if len(clock) >= 6 and clock[:6].isdigit():
        try:
            moment = moment.replace(
                hour=int(clock[:2]), minute=int(clock[2:4]), second=int(clock[4:6])
            )
        except ValueError:
            return moment
        zone = clock[6:]
        if len(zone) == 5 and zone[0] in "+-" and zone[1:].isdigit():
            moment = with_zone(moment, zone)
    return moment


@dataclass
class EmbeddedFacts:
    """What a file's XMP and IPTC say, reconciled: flat then hierarchical keywords, the rating,
    the licence, and the capture-time candidates in the order they are taken."""

    keywords: list[str] = field(default_factory=list)
    rating: int | None = None
    licence: str | None = None
    dates: list[datetime] = field(default_factory=list)
    iptc_state: str = "none"  # "none", "no digest", "digest matches", "digest differs"


def embedded_facts(embedded: Embedded) -> EmbeddedFacts:
    """XMP and IPTC reconciled by the Metadata Working Group's rule (the module's docstring)."""
    xmp = read_xmp(embedded.xmp) if embedded.xmp else None
    facts = EmbeddedFacts()
    iptc_keywords: list[str] = []
    iptc_dates: list[datetime] = []
    if embedded.iptc:
        datasets = iim_datasets(embedded.iptc)
        utf8 = any(b"\x1b%G" in v for v in datasets.get((1, 90), []))
        iptc_keywords = [iptc_text(v, utf8) for v in datasets.get((2, 25), [])]
        for date_set, time_set in (((2, 55), (2, 60)), ((2, 62), (2, 63))):
            dates, times = datasets.get(date_set), datasets.get(time_set)
            moment = _iim_date(dates[0], times[0] if times else None) if dates else None
            if moment is not None:
                iptc_dates.append(moment)
        if embedded.iptc_digest is None:
            facts.iptc_state = "no digest"
        elif hashlib.md5(embedded.iptc, usedforsecurity=False).digest() == embedded.iptc_digest:
            facts.iptc_state = "digest matches"
        else:
            facts.iptc_state = "digest differs"
    iptc_newer = facts.iptc_state == "digest differs"
    if xmp is None:
        facts.keywords = iptc_keywords
        facts.dates = iptc_dates
        return facts
    if xmp.has_subject and not (iptc_newer and iptc_keywords):
        flat = xmp.subjects
    else:
        flat = [_untruncated(k, xmp.subjects) for k in iptc_keywords] or xmp.subjects
    facts.keywords = flat + xmp.hierarchical
    facts.rating, facts.licence = xmp.rating, xmp.licence
    facts.dates = iptc_dates + xmp.dates if iptc_newer else xmp.dates + iptc_dates
    return facts


def _untruncated(keyword: str, subjects: list[str]) -> str:
    """An IPTC keyword that is an XMP keyword cut at IIM's 64 bytes, as the XMP keyword."""
    cut = keyword.encode("utf-8")
    if len(cut) < IPTC_KEYWORD_BYTES:
        return keyword
    for subject in subjects:
        if subject.encode("utf-8")[: len(cut)] == cut:
            return subject
    return keyword
