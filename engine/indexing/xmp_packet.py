"""What one XMP packet or sidecar says about a photo: keywords (dc:subject apart from the
hierarchical ones: lr:hierarchicalSubject, digiKam:TagsList), the rating, the licence
(cc:license, else xmpRights:WebStatement, else xmpRights:UsageTerms' text) and the dates that
may stand for a capture time (exif:DateTimeOriginal, photoshop:DateCreated, xmp:CreateDate).

A packet may be UTF-8, UTF-16 or UTF-32, with or without a byte-order mark, as the XMP
specification allows outside JPEG (`packet_text`). Malformed XML gives nothing, never an error.
A packet over `XMP_MAX_BYTES` is never parsed: a sidecar or packet is kilobytes, and parsing a
96 MB one took 1.27 GB.
"""

from __future__ import annotations

import logging
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone

log = logging.getLogger(__name__)

# Namespaces of the properties read (and, for the first five, written by engine.io.xmp).
NS_X = "adobe:ns:meta/"
NS_RDF = "http://www.w3.org/1999/02/22-rdf-syntax-ns#"
NS_DC = "http://purl.org/dc/elements/1.1/"
NS_LR = "http://ns.adobe.com/lightroom/1.0/"
NS_XMP = "http://ns.adobe.com/xap/1.0/"
NS_DIGIKAM = "http://www.digikam.org/ns/1.0/"
NS_EXIF = "http://ns.adobe.com/exif/1.0/"
NS_PHOTOSHOP = "http://ns.adobe.com/photoshop/1.0/"
NS_XMP_RIGHTS = "http://ns.adobe.com/xap/1.0/rights/"
NS_CC = "http://creativecommons.org/ns#"
NS_XML = "http://www.w3.org/XML/1998/namespace"
PREFIXES = {"x": NS_X, "rdf": NS_RDF, "dc": NS_DC, "lr": NS_LR, "xmp": NS_XMP}

HIERARCHY_SEPARATOR = "|"  # Lightroom's, in lr:hierarchicalSubject (digiKam's TagsList: "/")
XMP_MAX_BYTES = 16 * 1024 * 1024  # a packet or sidecar is kilobytes; refuse to parse more
LICENCE_MAX_CHARS = 1_000  # a licence URL or a short statement, not a contract
RATING_RANGE = (-1, 5)  # XMP: -1 rejected, 0 unrated, 1..5 stars

# The dates that may stand for a capture time, in the order they are taken.
DATE_PROPERTIES = (
    (NS_EXIF, "DateTimeOriginal"),
    (NS_PHOTOSHOP, "DateCreated"),
    (NS_XMP, "CreateDate"),
)

_XML_DECLARATION = re.compile(r"\A\s*<\?xml[^>]*\?>")
# XMP dates (ISO 8601: a full date, optionally a time to the minute or second with a zone), and
# the EXIF form some writers put in XMP ("2021:06:01 10:00:00").
_XMP_DATE = re.compile(
    r"(\d{4})[-:](\d{2})[-:](\d{2})"
    r"(?:[T ](\d{2}):(\d{2})(?::(\d{2})(?:[.,]\d+)?)?)?"
    r"\s*(Z|[+-]\d{2}:?\d{2})?\Z"
)


def packet_text(data: bytes | str) -> str | None:
    """An XMP packet as text: UTF-8, UTF-16 or UTF-32 told by the byte-order mark, else by
    where the NUL bytes of the ASCII markup fall; padding and an XML declaration (which would
    name an encoding the text no longer has) removed. None for bytes of no such encoding."""
    if isinstance(data, str):
        text = data
    else:
        encoding = _encoding(data)
        try:
            text = data.decode(encoding)
        except (UnicodeDecodeError, LookupError):
            return None
    text = text.strip("\x00 \t\r\n\ufeff")
    return _XML_DECLARATION.sub("", text, count=1)


def _encoding(data: bytes) -> str:
    if data[:4] in (b"\x00\x00\xfe\xff", b"\xff\xfe\x00\x00"):
        return "utf-32"
    if data[:2] in (b"\xfe\xff", b"\xff\xfe"):
        return "utf-16"
    if data[:3] == b"\xef\xbb\xbf":
        return "utf-8-sig"
    # No mark: the markup is ASCII, so UTF-16/32 put NULs at fixed places in each character.
    head = data[:256]
    width = len(head) // 4 * 4
    if width < 8:
        return "utf-8"
    nul = [sum(1 for i in range(k, width, 4) if head[i] == 0) for k in range(4)]
    quarter = width // 4
    if all(n > quarter // 2 for n in nul[:3]) and nul[3] < quarter // 4:
        return "utf-32-be"
    if all(n > quarter // 2 for n in nul[1:]) and nul[0] < quarter // 4:
        return "utf-32-le"
    even, odd = nul[0] + nul[2], nul[1] + nul[3]
    if even > quarter and odd < quarter // 2:
        return "utf-16-be"
    if odd > quarter and even < quarter // 2:
        return "utf-16-le"
    return "utf-8"


@dataclass
class XmpFacts:
    """What one packet says: dc:subject's keywords (and whether it has the property at all,
    which the reconciliation with IPTC asks), the hierarchical keywords as "A|B|C", the rating,
    the licence and the capture-time candidates, in `DATE_PROPERTIES` order."""

    subjects: list[str] = field(default_factory=list)
    has_subject: bool = False
    hierarchical: list[str] = field(default_factory=list)
    rating: int | None = None
    licence: str | None = None
    dates: list[datetime] = field(default_factory=list)


def read_xmp(data: bytes | str) -> XmpFacts:
    """The facts of one XMP packet or sidecar (`XmpFacts`); nothing from malformed XML or a
    packet over `XMP_MAX_BYTES`."""
    facts = XmpFacts()
    if len(data) > XMP_MAX_BYTES:
        log.warning("an XMP packet over %d MB was not read", XMP_MAX_BYTES >> 20)
        return facts
    text = packet_text(data)
    if not text:
        return facts
    try:
        # expat resolves no external entity and refuses entity expansion bombs (Python 3.11).
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        log.debug("unreadable XMP: %s", exc)
        return facts
    for element in root.iter(f"{{{NS_DC}}}subject"):
        facts.has_subject = True
        facts.subjects.extend(_items(element))
    for element in root.iter(f"{{{NS_LR}}}hierarchicalSubject"):
        facts.hierarchical.extend(_items(element))
    for element in root.iter(f"{{{NS_DIGIKAM}}}TagsList"):
        facts.hierarchical.extend(t.replace("/", HIERARCHY_SEPARATOR) for t in _items(element))
    descriptions = list(root.iter(f"{{{NS_RDF}}}Description"))
    for value in _values(descriptions, NS_XMP, "Rating"):
        facts.rating = _rating(value)
        if facts.rating is not None:
            break
    facts.licence = _licence(descriptions)
    for namespace, name in DATE_PROPERTIES:
        for value in _values(descriptions, namespace, name):
            moment = parse_xmp_date(value)
            if moment is not None:
                facts.dates.append(moment)
    return facts


def _items(element: ET.Element) -> Iterator[str]:
    """The texts of an rdf:Bag / rdf:Seq / rdf:Alt's items under `element`."""
    for item in element.iter(f"{{{NS_RDF}}}li"):
        if item.text:
            yield item.text


def _values(descriptions: list[ET.Element], namespace: str, name: str) -> Iterator[str]:
    """A simple property's values: as an attribute of an rdf:Description, as an element's text,
    or as an element's rdf:resource (a URL, as cc:license is usually written)."""
    key = f"{{{namespace}}}{name}"
    for description in descriptions:
        value = description.get(key)
        if value is not None:
            yield value
        for element in description.findall(key):
            resource = element.get(f"{{{NS_RDF}}}resource")
            if resource:
                yield resource
            elif element.text and element.text.strip():
                yield element.text


def _licence(descriptions: list[ET.Element]) -> str | None:
    for namespace, name in ((NS_CC, "license"), (NS_XMP_RIGHTS, "WebStatement")):
        for value in _values(descriptions, namespace, name):
            text = _licence_text(value)
            if text is not None:
                return text
    for description in descriptions:  # a language alternative: x-default, else the first
        for element in description.findall(f"{{{NS_XMP_RIGHTS}}}UsageTerms"):
            items = list(element.iter(f"{{{NS_RDF}}}li"))
            items.sort(key=lambda li: li.get(f"{{{NS_XML}}}lang") != "x-default")
            for item in items:
                text = _licence_text(item.text)
                if text is not None:
                    return text
    return None


def _licence_text(value: str | None) -> str | None:
    text = " ".join((value or "").split())
    return text if text and len(text) <= LICENCE_MAX_CHARS else None


def _rating(value: object) -> int | None:
    """An XMP rating as a whole number in -1..5 ("3", "3.0"), else None."""
    if not isinstance(value, str):
        return None
    text = value.strip()
    if text.endswith(".0"):
        text = text[:-2]
    try:
        number = int(text)
    except ValueError:
        return None
    return number if RATING_RANGE[0] <= number <= RATING_RANGE[1] else None


def parse_xmp_date(value: str) -> datetime | None:
    """An XMP date with at least a day ("2021-06-01", "2021-06-01T10:30",
    "2021-06-01T10:30:15+02:00", EXIF's "2021:06:01 10:30:15"): naive when it names no zone, a
    day alone at midnight. A year or a month alone is no capture time: None."""
    match = _XMP_DATE.match(value.strip())
    if match is None:
        return None
    year, month, day, hour, minute, second, zone = match.groups()
    try:
        moment = datetime(
            int(year), int(month), int(day), int(hour or 0), int(minute or 0), int(second or 0)
        )
    except ValueError:  # "2021-02-30", "25:00"
        return None
    return with_zone(moment, zone)


def with_zone(moment: datetime, zone: str | None) -> datetime:
    """`moment` in the zone "Z", "+02:00" or "-0530" (less than a day); naive without one."""
    if not zone:
        return moment
    if zone == "Z":
        return moment.replace(tzinfo=UTC)
    digits = zone[1:].replace(":", "")
    delta = timedelta(hours=int(digits[:2]), minutes=int(digits[2:4]))
    if delta >= timedelta(hours=24):
        return moment
    return moment.replace(tzinfo=timezone(-delta if zone[0] == "-" else delta))
