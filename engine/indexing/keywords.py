"""A photo's keywords and rating as other tools keep them: its XMP sidecar (`photo.jpg.xmp`,
digiKam's and darktable's name, or `photo.xmp`, Lightroom's) and the XMP and IPTC embedded in
the file. Read at indexing time by `refresh_keywords` into `images.keywords` (one per line),
`images.rating` and `images.keywords_source` (migration 0015); the keywords are words of the
record (`record_text`), so the text and hybrid searches find them, and `keyword_condition` is
the keyword filter. Only files whose size or mtime changed (photo or sidecar) are read again.

Nothing here writes a photo or a sidecar: `engine.io.xmp` writes sidecars.
"""

from __future__ import annotations

import logging
import os
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import ColumnElement, func, literal, or_, select, update

from engine.catalog import Catalog, Image
from engine.catalog.models import STATUS_OK
from engine.indexing.metadata import as_int
from engine.progress import CancelToken, ProgressCallback, RateMeter, no_progress

log = logging.getLogger(__name__)

# Namespaces of the properties read and written.
NS_X = "adobe:ns:meta/"
NS_RDF = "http://www.w3.org/1999/02/22-rdf-syntax-ns#"
NS_DC = "http://purl.org/dc/elements/1.1/"
NS_LR = "http://ns.adobe.com/lightroom/1.0/"
NS_XMP = "http://ns.adobe.com/xap/1.0/"
NS_DIGIKAM = "http://www.digikam.org/ns/1.0/"
PREFIXES = {"x": NS_X, "rdf": NS_RDF, "dc": NS_DC, "lr": NS_LR, "xmp": NS_XMP}

SIDECAR_SUFFIX = ".xmp"
HIERARCHY_SEPARATOR = "|"  # Lightroom's, in lr:hierarchicalSubject (digiKam's TagsList: "/")
KEYWORD_MAX_CHARS = 500  # a keyword is a word or a short path; longer text is not one
KEYWORDS_MAX = 1_000  # per photo: more is a file of another kind, not a photo's keywords
RATING_RANGE = (-1, 5)  # XMP: -1 rejected, 0 unrated, 1..5 stars
_SIDECAR_MAX_BYTES = 16 * 1024 * 1024  # a sidecar is kilobytes; refuse to parse gigabytes
_BATCH = 500  # rows updated per transaction


def sidecar_names(photo_name: str) -> tuple[str, str]:
    """The two names a photo's sidecar may have, in the order they are looked for:
    `photo.jpg.xmp` (digiKam, darktable; unambiguous beside a RAW+JPEG pair) and `photo.xmp`
    (Lightroom, which shares one sidecar between files of the same stem)."""
    stem = photo_name.rsplit(".", 1)[0] if "." in photo_name else photo_name
    return photo_name + SIDECAR_SUFFIX, stem + SIDECAR_SUFFIX


def clean_keyword(text: object) -> str | None:
    """A keyword as stored: whitespace runs made one space (a line break would split it),
    blanks around `|` levels dropped; None for nothing usable."""
    if not isinstance(text, str):
        return None
    levels = [" ".join(level.split()) for level in text.split(HIERARCHY_SEPARATOR)]
    keyword = HIERARCHY_SEPARATOR.join(level for level in levels if level)
    if not keyword or len(keyword) > KEYWORD_MAX_CHARS:
        return None
    try:
        keyword.encode("utf-8")  # lone surrogates: the catalog cannot store them
    except UnicodeEncodeError:
        return None
    return keyword


@dataclass
class KeywordFacts:
    """Keywords (in the order found, each once) and a rating, from one or more sources."""

    keywords: list[str] = field(default_factory=list)
    rating: int | None = None

    def add(self, keywords: Iterable[object]) -> None:
        seen = set(self.keywords)
        for raw in keywords:
            keyword = clean_keyword(raw)
            if keyword is not None and keyword not in seen and len(seen) < KEYWORDS_MAX:
                seen.add(keyword)
                self.keywords.append(keyword)

    def merge(self, other: KeywordFacts) -> None:
        """`other`'s keywords after these; its rating only where this has none."""
        self.add(other.keywords)
        if self.rating is None:
            self.rating = other.rating

    @property
    def stored_keywords(self) -> str | None:
        """`images.keywords`: one per line, None when there are none."""
        return "\n".join(self.keywords) or None


def _bag_items(element: ET.Element) -> Iterator[str]:
    """The texts of an rdf:Bag / rdf:Seq / rdf:Alt's items under `element`."""
    for item in element.iter(f"{{{NS_RDF}}}li"):
        if item.text:
            yield item.text


def parse_xmp(data: bytes | str) -> KeywordFacts:
    """Keywords and rating of an XMP packet or sidecar: dc:subject (flat),
    lr:hierarchicalSubject and digiKam:TagsList (hierarchical, as "A|B|C"), xmp:Rating as an
    element or an attribute. Malformed XML gives nothing (logged), never an error."""
    facts = KeywordFacts()
    if isinstance(data, bytes):
        data = data.strip(b"\x00 \t\r\n")  # APP1 packets may carry padding
    try:
        # expat resolves no external entity and refuses entity expansion bombs (Python 3.11).
        root = ET.fromstring(data)
    except ET.ParseError as exc:
        log.debug("unreadable XMP: %s", exc)
        return facts
    hierarchical: list[str] = []
    for element in root.iter(f"{{{NS_LR}}}hierarchicalSubject"):
        hierarchical.extend(_bag_items(element))
    for element in root.iter(f"{{{NS_DIGIKAM}}}TagsList"):
        hierarchical.extend(tag.replace("/", HIERARCHY_SEPARATOR) for tag in _bag_items(element))
    flat: list[str] = []
    for element in root.iter(f"{{{NS_DC}}}subject"):
        flat.extend(_bag_items(element))
    facts.add(flat + hierarchical)
    rating_key = f"{{{NS_XMP}}}Rating"
    for description in root.iter(f"{{{NS_RDF}}}Description"):
        value = description.get(rating_key)
        if value is None:
            rating_element = description.find(rating_key)
            value = rating_element.text if rating_element is not None else None
        rating = _rating(value)
        if rating is not None:
            facts.rating = rating
            break
    return facts


def _rating(value: object) -> int | None:
    """An XMP rating as a whole number in -1..5 ("3", "3.0"), else None."""
    if isinstance(value, str) and value.strip().endswith(".0"):
        value = value.strip()[:-2]
    number = as_int(value)
    if number is None or not RATING_RANGE[0] <= number <= RATING_RANGE[1]:
        return None
    return number


def read_sidecar(path: Path) -> KeywordFacts:
    """Keywords and rating of a sidecar file (nothing when it cannot be read)."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(_SIDECAR_MAX_BYTES + 1)
    except OSError as exc:
        log.warning("cannot read the sidecar %s: %s", path, exc.strerror or exc)
        return KeywordFacts()
    if len(data) > _SIDECAR_MAX_BYTES:
        log.warning("the sidecar %s is over %d MB: not read", path, _SIDECAR_MAX_BYTES >> 20)
        return KeywordFacts()
    return parse_xmp(data)


def _iptc_text(value: bytes, utf8: bool) -> str:
    if utf8:
        return value.decode("utf-8", "replace")
    try:
        return value.decode("utf-8")  # most writers use UTF-8 without saying so
    except UnicodeDecodeError:
        return value.decode("latin-1")


def embedded_keywords(path: Path) -> KeywordFacts:
    """Keywords and rating embedded in a photo: its XMP packet (JPEG APP1, PNG iTXt, WebP,
    TIFF tag 700) and its IPTC Keywords (2:25). Only the headers are read, no pixels."""
    from PIL import Image as PILImage
    from PIL import IptcImagePlugin

    facts = KeywordFacts()
    try:
        with PILImage.open(path) as image:
            packet: Any = image.info.get("xmp") or image.info.get("XML:com.adobe.xmp")
            if packet is None and hasattr(image, "tag_v2"):
                packet = image.tag_v2.get(700)
            if packet:
                facts.merge(parse_xmp(packet))
            iptc = IptcImagePlugin.getiptcinfo(image) or {}
    except Exception as exc:  # noqa: BLE001 - any unreadable header: no keywords, not a failure
        log.debug("no embedded keywords read from %s: %s", path, exc)
        return facts
    charset = iptc.get((1, 90))
    utf8 = isinstance(charset, bytes) and b"%G" in charset
    values = iptc.get((2, 25))
    if values is not None:
        items = values if isinstance(values, list) else [values]
        facts.add(_iptc_text(v, utf8) for v in items if isinstance(v, bytes))
    return facts


def photo_keywords(photo: Path, sidecar: Path | None) -> KeywordFacts:
    """A photo's keywords: its sidecar's first (the tools' newer word), then its embedded
    ones; the sidecar's rating, else the embedded one."""
    facts = read_sidecar(sidecar) if sidecar is not None else KeywordFacts()
    facts.merge(embedded_keywords(photo))
    return facts


# -- indexing ---------------------------------------------------------------------------------


def _sidecars_in(folder: Path) -> dict[str, os.DirEntry[str]]:
    """The folder's .xmp files by lower-case name (one listing per folder, not a stat per
    photo; case-blind, as the tools write `IMG_1.JPG.xmp` or `IMG_1.xmp`)."""
    found: dict[str, os.DirEntry[str]] = {}
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.name.lower().endswith(SIDECAR_SUFFIX):
                    found.setdefault(entry.name.lower(), entry)
    except OSError:
        pass
    return found


def find_sidecar(photo_name: str, sidecars: dict[str, os.DirEntry[str]]) -> os.DirEntry[str] | None:
    """The photo's sidecar among a folder's (`_sidecars_in`), by `sidecar_names`' order."""
    for name in sidecar_names(photo_name):
        entry = sidecars.get(name.lower())
        if entry is not None:
            return entry
    return None


def _source(size: int, mtime_ns: int, sidecar: os.DirEntry[str] | None) -> str:
    """What a photo's keywords were read from, as `images.keywords_source` keeps it."""
    if sidecar is None:
        return f"{size}:{mtime_ns}"
    try:
        stat = sidecar.stat()
    except OSError:
        return f"{size}:{mtime_ns}"
    return f"{size}:{mtime_ns}:{sidecar.name}:{stat.st_size}:{stat.st_mtime_ns}"


def refresh_keywords(
    catalog: Catalog,
    collection_id: int,
    root: Path,
    cancel: CancelToken | None = None,
    progress: ProgressCallback = no_progress,
) -> int:
    """Read the keywords and rating of the collection's photos whose photo or sidecar changed
    since they were last read (a sidecar added, edited or removed counts), into the catalog.
    Returns how many photos were read. The triggers of migration 0015 update the words.

    An unchanged collection costs one catalog read and one listing per folder; the first run
    over a library catalogued before keywords were read opens every photo's header (a quarter of
    a millisecond each from a warm cache, tests/bench/bench_keywords.py), so it reports
    progress and stops between folders when cancelled."""
    root = Path(root)
    with catalog.session() as s:
        rows = s.execute(
            select(Image.id, Image.rel_path, Image.size, Image.mtime_ns, Image.keywords_source)
            .where(Image.collection_id == collection_id, Image.status == STATUS_OK)
            .order_by(Image.rel_path)
        ).all()
    # (id, name, size, mtime_ns, source) by folder; str.rpartition, not PurePosixPath: a
    # re-scan with nothing changed costs this loop alone, per photo of the collection.
    by_folder: dict[str, list[tuple[int, str, int, int, str | None]]] = {}
    for image_id, rel_path, size, mtime_ns, stored_source in rows:
        folder, _, name = rel_path.rpartition("/")
        by_folder.setdefault(folder, []).append((image_id, name, size, mtime_ns, stored_source))
    pending: list[dict[str, Any]] = []
    read = seen = 0
    meter = RateMeter(len(rows))
    for folder, photos in by_folder.items():
        if cancel is not None and cancel.cancelled:
            break
        if read:  # nothing to say while every photo is as it was
            progress(meter.update(seen, "reading keywords"))
        seen += len(photos)
        folder_path = root / folder if folder else root
        sidecars = _sidecars_in(folder_path)
        for image_id, name, size, mtime_ns, stored_source in photos:
            sidecar = find_sidecar(name, sidecars) if sidecars else None
            source = _source(size, mtime_ns, sidecar)
            if source == stored_source:
                continue
            facts = photo_keywords(
                folder_path / name, Path(sidecar.path) if sidecar is not None else None
            )
            pending.append(
                {
                    "id": image_id,
                    "keywords": facts.stored_keywords,
                    "rating": facts.rating,
                    "keywords_source": source,
                }
            )
            read += 1
            if len(pending) >= _BATCH:
                _store(catalog, pending)
    _store(catalog, pending)
    return read


def _store(catalog: Catalog, pending: list[dict[str, Any]]) -> None:
    if not pending:
        return
    with catalog.session() as s:
        s.execute(update(Image), pending)  # one executemany, by primary key
    pending.clear()


def keywords_of(stored: str | None) -> list[str]:
    """`images.keywords` as a list."""
    return [k for k in (stored or "").split("\n") if k]


def keyword_condition(keyword: str) -> ColumnElement[bool]:
    """SQL: the photo has `keyword` (any case): a keyword equal to it, or a hierarchical one
    holding it as whole levels ("juvenile" and "lifeStage|juvenile" both find
    "Quadrat|lifeStage|juvenile"; "juv" finds nothing)."""
    escaped = keyword.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    wanted = func.lower(literal(escaped))
    # Each keyword fenced by line breaks, so a level is found whole at either end of a line.
    haystack = func.lower(literal("\n") + Image.keywords + literal("\n"))
    patterns = [
        literal("%\n") + wanted + literal("\n%"),
        literal("%|") + wanted + literal("\n%"),
        literal("%\n") + wanted + literal("|%"),
        literal("%|") + wanted + literal("|%"),
    ]
    return or_(*(haystack.like(p, escape="\\") for p in patterns))
