"""A photo's keywords, rating and licence as other tools keep them: its XMP sidecar
(`photo.jpg.xmp`, digiKam's and darktable's name, or `photo.xmp`, Lightroom's) and the XMP and
IPTC embedded in the file (`engine.indexing.embedded`, which reconciles the two as the Metadata
Working Group asks). Read at indexing time by `refresh_keywords` into `images.keywords` (one per
line), `images.rating` and `images.keywords_source` (migration 0015), and the licence into
`images.license` where the collection's metadata file gives the photo none; the keywords are
words of the record (`record_text`), so the text and hybrid searches find them, and
`keyword_condition` is the keyword filter. Only files whose size or mtime changed (photo or
sidecar) are read again. Only regular files are opened: a FIFO named like a sidecar is passed
over.

Nothing here writes a photo or a sidecar: `engine.io.xmp` writes sidecars.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import ColumnElement, func, literal, or_, select, update

from engine.catalog import Catalog, Image
from engine.catalog.models import STATUS_OK
from engine.indexing.embedded import NotARegularFile, embedded_facts, open_regular, read_embedded
from engine.indexing.metadata import ImageMeta, metadata_key
from engine.indexing.xmp_packet import (
    HIERARCHY_SEPARATOR,
    NS_DC,
    NS_DIGIKAM,
    NS_LR,
    NS_RDF,
    NS_X,
    NS_XMP,
    PREFIXES,
    RATING_RANGE,
    XMP_MAX_BYTES,
    read_xmp,
)
from engine.progress import CancelToken, ProgressCallback, RateMeter, no_progress

log = logging.getLogger(__name__)

__all__ = [
    "HIERARCHY_SEPARATOR",
    "NS_DC",
    "NS_DIGIKAM",
    "NS_LR",
    "NS_RDF",
    "NS_X",
    "NS_XMP",
    "PREFIXES",
    "RATING_RANGE",
    "KeywordFacts",
    "clean_keyword",
    "embedded_keywords",
    "find_sidecar",
    "keyword_condition",
    "keywords_of",
    "parse_xmp",
    "photo_keywords",
    "read_sidecar",
    "refresh_keywords",
    "sidecar_names",
]

SIDECAR_SUFFIX = ".xmp"
KEYWORD_MAX_CHARS = 500  # a keyword is a word or a short path; longer text is not one
KEYWORDS_MAX = 1_000  # per photo: more is a file of another kind, not a photo's keywords
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
    """Keywords (in the order found, each once), a rating and a licence (a URL or a short
    statement, as the file gives it), from one or more sources."""

    keywords: list[str] = field(default_factory=list)
    rating: int | None = None
    licence: str | None = None

    def add(self, keywords: Iterable[object]) -> None:
        seen = set(self.keywords)
        for raw in keywords:
            keyword = clean_keyword(raw)
            if keyword is not None and keyword not in seen and len(seen) < KEYWORDS_MAX:
                seen.add(keyword)
                self.keywords.append(keyword)

    def merge(self, other: KeywordFacts) -> None:
        """`other`'s keywords after these; its rating and licence only where these have none."""
        self.add(other.keywords)
        if self.rating is None:
            self.rating = other.rating
        if self.licence is None:
            self.licence = other.licence

    @property
    def stored_keywords(self) -> str | None:
        """`images.keywords`: one per line, None when there are none."""
        return "\n".join(self.keywords) or None


def parse_xmp(data: bytes | str) -> KeywordFacts:
    """Keywords, rating and licence of an XMP packet or sidecar (UTF-8, -16 or -32): dc:subject
    (flat), lr:hierarchicalSubject and digiKam:TagsList (hierarchical, as "A|B|C"), xmp:Rating
    as an element or an attribute, the licence (`engine.indexing.xmp_packet`). Malformed XML
    gives nothing (logged), never an error."""
    found = read_xmp(data)
    facts = KeywordFacts(rating=found.rating, licence=found.licence)
    facts.add(found.subjects + found.hierarchical)
    return facts


def read_sidecar(path: Path) -> KeywordFacts:
    """Keywords, rating and licence of a sidecar file (nothing when it cannot be read, is not
    a regular file or is over 16 MB)."""
    try:
        with open_regular(path) as handle:
            data = handle.read(XMP_MAX_BYTES + 1)
    except NotARegularFile:
        log.warning("the sidecar %s is not a regular file: not read", path)
        return KeywordFacts()
    except OSError as exc:
        log.warning("cannot read the sidecar %s: %s", path, exc.strerror or exc)
        return KeywordFacts()
    if len(data) > XMP_MAX_BYTES:
        log.warning("the sidecar %s is over %d MB: not read", path, XMP_MAX_BYTES >> 20)
        return KeywordFacts()
    return parse_xmp(data)


def embedded_keywords(path: Path) -> KeywordFacts:
    """Keywords, rating and licence embedded in a photo: its XMP packet (JPEG APP1, TIFF tag
    700, PNG iTXt, WebP, HEIF) and its IPTC Keywords (2:25), where IPTC that XMP supersedes is
    dropped (`engine.indexing.embedded`). Only the headers are read, bounded, no pixels."""
    facts = KeywordFacts()
    try:
        found = embedded_facts(read_embedded(path))
    except Exception as exc:  # noqa: BLE001 - any unreadable header: no keywords, not a failure
        log.debug("no embedded keywords read from %s: %s", path, exc)
        return facts
    facts.add(found.keywords)
    facts.rating, facts.licence = found.rating, found.licence
    return facts


def photo_keywords(photo: Path, sidecar: Path | None) -> KeywordFacts:
    """A photo's keywords: its sidecar's first (the tools' newer word), then its embedded
    ones; the sidecar's rating and licence, else the embedded ones."""
    facts = read_sidecar(sidecar) if sidecar is not None else KeywordFacts()
    facts.merge(embedded_keywords(photo))
    return facts


# -- indexing ---------------------------------------------------------------------------------


def _sidecars_in(folder: Path) -> dict[str, os.DirEntry[str]]:
    """The folder's .xmp files by lower-case name (one listing per folder, not a stat per
    photo; case-blind, as the tools write `IMG_1.JPG.xmp` or `IMG_1.xmp`). Only regular files
    (links to them included): opening a FIFO so named would wait for a writer forever."""
    found: dict[str, os.DirEntry[str]] = {}
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                name = entry.name.lower()
                if not name.endswith(SIDECAR_SUFFIX):
                    continue
                try:
                    regular = entry.is_file()
                except OSError:
                    regular = False
                if regular:
                    found.setdefault(name, entry)
                else:
                    log.warning("%s is not a regular file: not read as a sidecar", entry.path)
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
    metadata: Mapping[str, ImageMeta] | None = None,
) -> int:
    """Read the keywords, rating and licence of the collection's photos whose photo or sidecar
    changed since they were last read (a sidecar added, edited or removed counts), into the
    catalog. Returns how many photos were read. The triggers of migration 0015 update the words.

    The photo's own licence (`KeywordFacts.licence`, a URL or text as written) becomes
    `images.license` where `metadata` (the run's metadata file, by `metadata_key`) gives the
    photo none; a metadata file's licence is never replaced. Without `metadata` the photo's
    licence only fills an empty one. No licence in the photo leaves the stored one as it is.

    An unchanged collection costs one catalog read and one listing per folder; the first run
    over a library catalogued before keywords were read opens every photo's header (a quarter of
    a millisecond each from a warm cache, tests/bench/bench_keywords.py), so it reports
    progress and stops between folders when cancelled."""
    root = Path(root)
    with catalog.session() as s:
        rows = s.execute(
            select(
                Image.id,
                Image.rel_path,
                Image.size,
                Image.mtime_ns,
                Image.keywords_source,
                Image.license,
            )
            .where(Image.collection_id == collection_id, Image.status == STATUS_OK)
            .order_by(Image.rel_path)
        ).all()
    # (id, name, size, mtime_ns, source, licence) by folder; str.rpartition, not PurePosixPath:
    # a re-scan with nothing changed costs this loop alone, per photo of the collection.
    by_folder: dict[str, list[tuple[int, str, int, int, str | None, str | None]]] = {}
    for image_id, rel_path, size, mtime_ns, stored_source, licence in rows:
        folder, _, name = rel_path.rpartition("/")
        by_folder.setdefault(folder, []).append(
            (image_id, name, size, mtime_ns, stored_source, licence)
        )
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
        for image_id, name, size, mtime_ns, stored_source, licence in photos:
            sidecar = find_sidecar(name, sidecars) if sidecars else None
            source = _source(size, mtime_ns, sidecar)
            if source == stored_source:
                continue
            facts = photo_keywords(
                folder_path / name, Path(sidecar.path) if sidecar is not None else None
            )
            if facts.licence is not None and not (
                _licensed_by_file(metadata, f"{folder}/{name}" if folder else name)
                if metadata is not None
                else licence is not None
            ):
                licence = facts.licence
            pending.append(
                {
                    "id": image_id,
                    "keywords": facts.stored_keywords,
                    "rating": facts.rating,
                    "keywords_source": source,
                    "license": licence,
                }
            )
            read += 1
            if len(pending) >= _BATCH:
                _store(catalog, pending)
    _store(catalog, pending)
    return read


def _licensed_by_file(metadata: Mapping[str, ImageMeta], rel_path: str) -> bool:
    """Whether the run's metadata file gives the photo a licence."""
    record = metadata.get(metadata_key(rel_path))
    return record is not None and bool(record.license)


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
