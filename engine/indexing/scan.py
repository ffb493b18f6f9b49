"""Finding photos in a folder and reading what is known about them.

- `walk_images` lists image files under a collection root (sorted, no symlink loops).
- `parse_inat_dirname` / `taxon_for_path` read taxonomy from iNat21/iNat24 folder names.
- `load_coco_metadata` reads COCO-style metadata JSON (docs/SPEC.md §3.2).
- `read_exif` reads the date, GPS position and orientation of a photo.
- `decode_image` opens one photo safely: bad files become `BadImageError` with a short reason,
  huge images are refused from their header before any pixels are decoded.
- `content_hash` fingerprints a file's bytes for change detection.

Nothing here changes PIL settings that decoding reads per call (the pixel limit, truncated
images), so decoding can run in a thread pool; only Pillow's memory block size is raised, once.
"""

from __future__ import annotations

import codecs
import hashlib
import json
import logging
import math
import os
import pickle
import re
import sqlite3
import stat
import sys
import threading
import unicodedata
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from dataclasses import fields as dataclass_fields
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from functools import lru_cache, partial
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO, NamedTuple, TypeVar, cast

import ijson
from PIL import ExifTags, Image, UnidentifiedImageError

from engine.errors import BadImageError, BadInputError
from engine.progress import ProgressCallback, RateMeter, no_progress

log = logging.getLogger(__name__)

try:  # HEIC/HEIF support is optional (the "heic" extra).
    import pillow_heif

    pillow_heif.register_heif_opener()
    HEIF_AVAILABLE = True
except ImportError:
    HEIF_AVAILABLE = False

IMAGE_EXTENSIONS: frozenset[str] = frozenset(
    {".jpg", ".jpeg", ".png", ".webp", ".tif", ".tiff", ".gif"}
    | ({".heic", ".heif"} if HEIF_AVAILABLE else set())
)

# Where PIL's own default refusal starts (2 x Image.MAX_IMAGE_PIXELS), ~13,400 x 13,400.
DEFAULT_MAX_PIXELS: int = 178_956_970

# PIL formats decode_image accepts, whatever the file's extension says. Restricting the list
# keeps PIL from handing odd files to plugins such as EPS, which would run Ghostscript.
# "JPEG" also covers MPO, the multi-picture JPEG many cameras write under a .jpg name.
_ALLOWED_FORMATS: tuple[str, ...] = ("JPEG", "PNG", "WEBP", "TIFF", "GIF") + (
    ("HEIF",) if HEIF_AVAILABLE else ()
)

_HASH_CHUNK = 1 << 20


# --------------------------------------------------------------------------------------------
# Walking a folder


class _FileFields(NamedTuple):
    rel_path: str  # POSIX path relative to the collection root
    path: str  # the absolute path as text
    size: int
    mtime_ns: int


class FileEntry(_FileFields):
    """One image file found under a collection root.

    A named tuple that keeps the absolute path as the text `os.scandir` gave and makes it a
    `Path` (`abs_path`) when asked for: building a `Path` per file was a third of the time of
    walking 5 million files, and a re-scan that finds a file unchanged never needs it."""

    __slots__ = ()

    def __new__(
        cls, rel_path: str, abs_path: str | os.PathLike[str], size: int, mtime_ns: int
    ) -> FileEntry:
        return super().__new__(cls, rel_path, os.fspath(abs_path), size, mtime_ns)

    @property
    def abs_path(self) -> Path:
        return Path(self.path)


# The walk makes entries from text it already has, without the check `__new__` makes.
_new_entry = partial(tuple.__new__, FileEntry)


_WINDOWS = sys.platform == "win32"


def _is_hidden(entry: os.DirEntry[str]) -> bool:
    if entry.name.startswith("."):
        return True
    if sys.platform == "win32":  # (not os.name: type checkers know sys.platform)
        # Windows marks hidden files with an attribute rather than a dot (cached, no extra call).
        attributes = getattr(entry.stat(follow_symlinks=False), "st_file_attributes", 0)
        return bool(attributes & stat.FILE_ATTRIBUTE_HIDDEN)
    else:
        return False


def _is_storable_name(name: str) -> bool:
    """False for names that are not valid Unicode (undecodable bytes on POSIX)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _sorted_entries(folder: str | Path) -> list[os.DirEntry[str]]:
    with os.scandir(folder) as it:
        return sorted(it, key=lambda e: e.name)


def printable_name(text: str) -> str:
    """`text` as one printable line: names with nothing odd come back unchanged; otherwise
    bytes that are not UTF-8 (kept by Python as lone surrogates) become `\\xNN`, control
    characters (a newline in a file name) `\\n`, `\\t`, `\\xNN` or `\\uNNNN`, and a
    backslash `\\\\`."""
    if text.isprintable():
        return text
    out: list[str] = []
    for char in text:
        if "\udc80" <= char <= "\udcff":  # an undecodable byte, as surrogateescape keeps it
            out.append(f"\\x{ord(char) - 0xDC00:02x}")
        elif char == "\\":
            out.append("\\\\")
        elif char.isprintable():
            out.append(char)
        else:
            out.append(char.encode("unicode_escape", "backslashreplace").decode("ascii"))
    return "".join(out)


# Why the walk passes over an entry (reported through `walk_images`'s `on_skip`).
LINK_OUTSIDE_FOLDER = "a link to a folder outside the collection: not followed"
LINK_OUTSIDE_FILE = "a link to a file outside the collection: not followed"
NAME_NOT_UNICODE = "the name is not valid Unicode (undecodable bytes): rename it to index it"


def _inside(real: str, root_real: str) -> bool:
    """Whether the resolved path `real` is `root_real` or lies under it."""
    return real == root_real or real.startswith(root_real.rstrip(os.sep) + os.sep)


def walk_images(
    root: Path,
    extensions: frozenset[str] = IMAGE_EXTENSIONS,
    on_skip: Callable[[str, str], None] | None = None,
) -> Iterator[FileEntry]:
    """Yield every image file under `root`, depth first, in sorted order.

    Extensions match case-insensitively. Symlinks are followed only while their real path
    stays inside the real path of `root`, and a directory already visited (same device and
    inode) is never entered twice, so loops end. A link leading out of the collection (to
    `/proc`, another user's folder) is never followed: one such link once pulled a whole
    machine's files into a shared catalog. Hidden files and folders are skipped.

    Links leading outside, image files whose names are not valid Unicode and folders that
    cannot be read are passed over and reported to `on_skip(relative path, reason)` (the path
    made printable by `printable_name`), and logged.
    Raises `BadInputError` when `root` is missing or not a folder.
    """
    root = Path(root)
    try:
        root_stat = root.stat()
    except FileNotFoundError:
        raise BadInputError(f"folder not found: {root}") from None
    except OSError as exc:
        raise BadInputError(f"cannot read folder {root}: {exc.strerror or exc}") from None
    if not stat.S_ISDIR(root_stat.st_mode):
        raise BadInputError(f"not a folder: {root}")
    try:
        root_entries = _sorted_entries(root)
    except OSError as exc:
        raise BadInputError(f"cannot read folder {root}: {exc.strerror or exc}") from None
    root_real = os.path.realpath(root)

    def skip(rel_path: str, reason: str) -> None:
        shown = printable_name(rel_path)
        log.warning("skipping %s: %s", shown, reason)
        if on_skip is not None:
            on_skip(shown, reason)

    visited: set[tuple[int, int]] = {(root_stat.st_dev, root_stat.st_ino)}
    # A stack of (iterator over a folder's sorted entries, that folder's relative prefix):
    # files and sub-folders interleave by name, so the output is sorted by path components.
    stack: list[tuple[Iterator[os.DirEntry[str]], str]] = [(iter(root_entries), "")]
    while stack:
        entries, prefix = stack[-1]
        for entry in entries:
            name = entry.name
            try:
                if name.startswith(".") or (_WINDOWS and _is_hidden(entry)):
                    continue
                entry_stat = entry.stat()  # follows symlinks
            except OSError as exc:
                # Broken symlinks land here, as do files removed while we walk.
                log.debug("skipping %s: %s", entry.path, exc)
                continue
            mode = entry_stat.st_mode
            is_file = stat.S_ISREG(mode)
            if is_file:
                dot = name.rfind(".")
                if not (dot > 0 and name[dot:].lower() in extensions):
                    continue
            elif not stat.S_ISDIR(mode):
                continue
            # Only links (and, on Windows, junctions, which are not symlinks to Python) can
            # lead out of the root: every folder entered is inside it.
            leads_away = entry.is_symlink() or (_WINDOWS and not is_file)
            if leads_away and not _inside(os.path.realpath(entry.path), root_real):
                skip(prefix + name, LINK_OUTSIDE_FILE if is_file else LINK_OUTSIDE_FOLDER)
                continue
            if not name.isascii() and not _is_storable_name(name):
                # The catalog could not store the path, nor open the file by a stored one.
                skip(prefix + name + ("" if is_file else "/"), NAME_NOT_UNICODE)
                continue
            if is_file:
                yield _new_entry(
                    (prefix + name, entry.path, entry_stat.st_size, entry_stat.st_mtime_ns)
                )
                continue
            key = (entry_stat.st_dev, entry_stat.st_ino)
            if key in visited:
                log.debug("skipping %s: folder already visited (symlink loop?)", entry.path)
                continue
            visited.add(key)
            try:
                children = _sorted_entries(entry.path)
            except OSError as exc:
                skip(prefix + name + "/", f"cannot read folder: {exc.strerror or exc}")
                continue
            # Into the sub-folder; this folder's iterator resumes after it, keeping order.
            stack.append((iter(children), prefix + name + "/"))
            break
        else:
            stack.pop()


# --------------------------------------------------------------------------------------------
# iNat folder names


@dataclass(frozen=True)
class TaxonInfo:
    """Taxonomy of one photo's subject, from a folder name or a COCO category."""

    name: str  # scientific name, "Genus epithet", or the deepest rank known
    kingdom: str | None
    phylum: str | None
    class_: str | None
    order: str | None
    family: str | None
    genus: str | None
    specific_epithet: str | None
    common_name: str | None = None
    category_id: int | None = None  # iNat category number (folder prefix or COCO id)
    image_dir_name: str | None = None


# Rank names are capitalised words (a few genera carry a hyphen, e.g. Pseudo-nitzschia);
# epithets are lower case and may be hyphenated (novae-angliae). The strict shape keeps
# ordinary folders such as "2021_05_03_trip_..." from passing for taxa.
_RANK_RE = re.compile(r"[A-Z][A-Za-z-]*\Z")
_EPITHET_RE = re.compile(r"[a-z][a-z-]*\Z")


@lru_cache(maxsize=65_536)
def parse_inat_dirname(name: str) -> TaxonInfo | None:
    """Parse `NNNNN_Kingdom_Phylum_Class_Order_Family_Genus_epithet`; None for anything else."""
    fields = name.split("_")
    if len(fields) != 8:
        return None
    number, *ranks, epithet = fields
    if not number.isascii() or not number.isdigit():
        return None
    if not all(_RANK_RE.match(rank) for rank in ranks) or not _EPITHET_RE.match(epithet):
        return None
    kingdom, phylum, class_, order, family, genus = ranks
    return TaxonInfo(
        name=f"{genus} {epithet}",
        kingdom=kingdom,
        phylum=phylum,
        class_=class_,
        order=order,
        family=family,
        genus=genus,
        specific_epithet=epithet,
        category_id=int(number),
        image_dir_name=name,
    )


def taxon_for_path(rel_path: str) -> TaxonInfo | None:
    """Taxonomy from the nearest parent folder of `rel_path` whose name parses as an iNat taxon."""
    for folder in reversed(PurePosixPath(rel_path).parent.parts):
        taxon = parse_inat_dirname(folder)
        if taxon is not None:
            return taxon
    return None


# --------------------------------------------------------------------------------------------
# COCO-style metadata JSON


@dataclass
class ImageMeta:
    """What a metadata file says about one photo. Every field may be None."""

    taxon: TaxonInfo | None = None
    observed_at: datetime | None = None
    latitude: float | None = None
    longitude: float | None = None
    location_uncertainty: float | None = None
    license: str | None = None
    rights_holder: str | None = None
    width: int | None = None
    height: int | None = None
    external_id: int | None = None  # the COCO image id
    notes: str | None = None  # the observer's free text, at most NOTES_MAX_CHARS


# Free-text fields of an image record, the first with usable text wins.
NOTES_FIELDS: tuple[str, ...] = ("notes", "description", "remarks")
# A record's notes are an observer's sentence or paragraph; a field holding a whole document
# would swell the catalog and the text index for nothing.
NOTES_MAX_CHARS = 10_000

METADATA_FILE_NAMES: tuple[str, ...] = ("metadata.json", "train.json")


def find_metadata_file(root: Path) -> Path | None:
    """The collection's metadata file at `root` (metadata.json, then train.json), if any."""
    for name in METADATA_FILE_NAMES:
        candidate = Path(root) / name
        if candidate.is_file():
            return candidate
    return None


def metadata_key(rel_path: str) -> str:
    """The key `load_coco_metadata` uses for a relative path.

    POSIX separators, no leading "./", Unicode NFC: macOS may hand back decomposed (NFD)
    names while metadata files are written composed, and both must meet.
    """
    key = rel_path.replace("\\", "/")
    while key.startswith("./"):
        key = key[2:]
    return unicodedata.normalize("NFC", key)


_DATE_FORMATS = ("%Y:%m:%d %H:%M:%S", "%Y/%m/%d %H:%M:%S", "%Y/%m/%d", "%Y:%m:%d")


def parse_date(value: object) -> datetime | None:
    """A date or timestamp in the usual metadata spellings, or None.

    Accepts "2021-05-03", "2021-05-03 10:00:00", ISO 8601 with a timezone ("...+02:00", "Z")
    and EXIF's "2021:05:03 10:00:00". A timezone, when given, is kept.
    """
    if not isinstance(value, str):
        return None
    text = value.strip()
    if not text:
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        pass
    for fmt in _DATE_FORMATS:
        try:
            return datetime.strptime(text, fmt)
        except ValueError:
            continue
    return None


def local_time_and_offset(moment: datetime | None) -> tuple[datetime | None, int | None]:
    """`moment` as the catalog stores it: the local wall-clock time (naive: the date filters
    read the observer's local date) and its UTC offset in minutes east (None when unknown)."""
    if moment is None:
        return None, None
    offset = moment.utcoffset()
    local = moment.replace(tzinfo=None)  # the same clock reading, the zone set apart
    return local, None if offset is None else round(offset.total_seconds() / 60)


def with_utc_offset(local: datetime | None, minutes: int | None) -> datetime | None:
    """The stored local time with its offset attached again (as it was given), when known."""
    if local is None or minutes is None:
        return local
    try:
        return local.replace(tzinfo=timezone(timedelta(minutes=minutes)))
    except ValueError:  # an offset of a day or more: not one a reader of ours stored
        return local


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1  # SQLite INTEGER columns hold no more


def _as_float(value: object, low: float = -math.inf, high: float = math.inf) -> float | None:
    """A finite number within [low, high] (a number, numeric text, an EXIF rational), else None."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):  # OverflowError: an int beyond a float
        return None
    if not math.isfinite(number) or not low <= number <= high:
        return None
    return number


def _as_int(value: object) -> int | None:
    """A whole number that fits a signed 64-bit integer (a number or digit text), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        number = value
    elif isinstance(value, float):
        if not value.is_integer():  # also False for inf and nan
            return None
        number = int(value)
    elif isinstance(value, Decimal):
        # Checked before int(): Decimal("1e999999") is whole and would become a huge int.
        if not value.is_finite() or value.adjusted() > 18 or value != value.to_integral_value():
            return None
        number = int(value)
    elif isinstance(value, str):
        text = value.strip()
        digits = text[1:] if text.startswith("-") else text
        # isascii: str.isdigit() also accepts digits such as "²" that int() refuses.
        if not (0 < len(digits) <= 19 and digits.isascii() and digits.isdigit()):
            return None
        number = int(text)
    else:
        return None
    return number if _INT64_MIN <= number <= _INT64_MAX else None


def _as_text(value: object) -> str | None:
    """Stripped text (numbers written out), else None: null, blanks, booleans, containers, and
    strings with lone surrogates (JSON can escape them; SQLite cannot store them)."""
    if isinstance(value, str):
        text = value.strip()
    elif isinstance(value, int | float | Decimal) and not isinstance(value, bool):
        try:
            text = str(value)
        except ValueError:  # an int beyond Python's digit limit
            return None
    else:
        return None  # never str() a container: the repr of deep nesting recurses
    if not text:
        return None
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return None
    return text


def _notes(fields: _Fields) -> str | None:
    """The record's notes: the first of NOTES_FIELDS with text, stripped and capped."""
    for key in NOTES_FIELDS:
        text = fields.get(key, _as_text)
        if text is not None:
            return text[:NOTES_MAX_CHARS].rstrip()
    return None


class _Nested:
    """Stands for a list or object found where a record's field value belongs (never built)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<list or object>"


_NESTED = _Nested()
_T = TypeVar("_T")


def _short(value: object) -> str:
    """A few characters of a rejected value, for log examples."""
    if isinstance(value, str):
        return repr(value) if len(value) <= 30 else repr(value[:30]) + "…"
    try:
        text = str(value)  # a scalar from the parser: at most _MAX_DIGITS digits
    except ValueError:
        text = "a huge number"
    return text if len(text) <= 30 else text[:24] + "…"


class _Fields:
    """One record's fields, converted one by one; present values that cannot be used are noted."""

    __slots__ = ("_record", "issues")

    def __init__(self, record: dict[str, object]) -> None:
        self._record = record
        self.issues: list[str] = []

    def get(self, key: str, convert: Callable[[object], _T | None]) -> _T | None:
        value = self._record.get(key)
        if value is None:
            return None
        result = convert(value)
        if result is None and not (isinstance(value, str) and not value.strip()):
            if isinstance(value, _Nested):
                self.issues.append(f"{key} is a list or object")
            elif isinstance(value, int) and not _INT64_MIN <= value <= _INT64_MAX:
                self.issues.append(f"{key} {_short(value)} is out of range")
            else:
                self.issues.append(f"{key} {_short(value)} is not usable")
        return result


def _taxon_from_category(category: _Fields, category_id: int | None) -> TaxonInfo | None:
    ranks = {
        key: category.get(key, _as_text)
        for key in ("kingdom", "phylum", "class", "order", "family", "genus")
    }
    epithet = category.get("specific_epithet", _as_text)
    dir_name = category.get("image_dir_name", _as_text)
    from_dir = parse_inat_dirname(dir_name) if dir_name else None
    name = category.get("name", _as_text)
    common_name = category.get("common_name", _as_text)
    if name is None and ranks["genus"] and epithet:
        name = f"{ranks['genus']} {epithet}"
    if name is None:  # fall back to the deepest rank known
        name = next((r for r in reversed(ranks.values()) if r), None)
    if name is None and from_dir is not None:
        name = from_dir.name
    if name is None:
        return None

    def pick(value: str | None, fallback: str | None) -> str | None:
        return value if value is not None else fallback

    d = from_dir
    return TaxonInfo(
        name=name,
        kingdom=pick(ranks["kingdom"], d.kingdom if d else None),
        phylum=pick(ranks["phylum"], d.phylum if d else None),
        class_=pick(ranks["class"], d.class_ if d else None),
        order=pick(ranks["order"], d.order if d else None),
        family=pick(ranks["family"], d.family if d else None),
        genus=pick(ranks["genus"], d.genus if d else None),
        specific_epithet=pick(epithet, d.specific_epithet if d else None),
        common_name=common_name,
        category_id=category_id,
        image_dir_name=dir_name,
    )


def _licence_id(value: object) -> int | None:
    """An int licence value is an id into the top-level "licenses" list (resolved at the end)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return _as_int(value)  # None (and noted) when out of range
    return None


_latitude = partial(_as_float, low=-90.0, high=90.0)
_longitude = partial(_as_float, low=-180.0, high=180.0)
_uncertainty = partial(_as_float, low=0.0)
_EXAMPLES = 5  # problem descriptions kept for the log


class CocoMetadata(dict[str, ImageMeta]):
    """What `load_coco_metadata` read: ImageMeta by `metadata_key(file_name)`, plus a tally
    of what it had to ignore.

    `problems` counts records with at least one ignored value and records ignored whole;
    `values_ignored` counts the values dropped (a latitude "north", a longitude 720, a date of
    month 13), `records_ignored` the records skipped whole; `examples` describes the first few,
    e.g. "images[3]: id 18446744073709551616 is out of range".
    """

    def __init__(self) -> None:
        super().__init__()
        self.problems: int = 0
        self.values_ignored: int = 0
        self.records_ignored: int = 0
        self.examples: list[str] = []

    def _note(self, where: str, issues: list[str], *, whole: bool = False) -> None:
        self.problems += 1
        if whole:
            self.records_ignored += 1
        else:
            self.values_ignored += len(issues)
        if len(self.examples) < _EXAMPLES:
            self.examples.append(f"{where}: {'; '.join(issues)}")

    def problem_line(self) -> str:
        """What was ignored, in words ("" when nothing was): for summaries and the log."""
        return ignored_metadata_line(self.values_ignored, self.records_ignored)


def ignored_metadata_line(values: int, records: int) -> str:
    """E.g. "3 metadata values were ignored as impossible or unusable"; "" when none were."""
    parts = []
    if values:
        parts.append(f"{values} metadata value{'s' * (values != 1)}")
    if records:
        parts.append(f"{records} metadata record{'s' * (records != 1)}")
    if not parts:
        return ""
    verb = "was" if values + records == 1 else "were"
    return f"{' and '.join(parts)} {verb} ignored as impossible or unusable"


class _CocoReader:
    """Turns the records of one metadata file into CocoMetadata, one record at a time.

    Sections may come in any order (iNat's files list the images before the categories,
    annotations and licences they refer to), so taxa and licence names are joined in
    `finish`, once the whole file has been read.
    """

    def __init__(self) -> None:
        self.result = CocoMetadata()
        self.saw_images = False
        self._taxa: dict[int, TaxonInfo] = {}
        self._category_by_image: dict[int, int] = {}  # the first annotation of each image
        self._later_categories: dict[int, list[int]] = {}  # further annotations, rare
        self._category_ids: dict[int, int] = {}  # one int object per category id
        self._licence_names: dict[int, str] = {}
        self._by_licence: dict[int, list[ImageMeta]] = {}

    def _fields(self, where: str, record: dict[str, object] | None) -> _Fields | None:
        if record is None:
            self.result._note(where, ["not an object; ignored"], whole=True)
            return None
        return _Fields(record)

    def _done(self, where: str, fields: _Fields) -> None:
        if fields.issues:
            self.result._note(where, fields.issues)

    def image(self, index: int, record: dict[str, object] | None) -> None:
        where = f"images[{index}]"
        fields = self._fields(where, record)
        if fields is None or record is None:
            return
        file_name = record.get("file_name")
        if not isinstance(file_name, str) or not file_name.strip():
            self.result._note(where, ["no usable file_name; ignored"], whole=True)
            return
        key = metadata_key(file_name.strip())
        if key in self.result:
            self._listed_twice(where, key)
            return
        meta = ImageMeta(
            observed_at=fields.get("date", parse_date),
            latitude=fields.get("latitude", _latitude),
            longitude=fields.get("longitude", _longitude),
            location_uncertainty=fields.get("location_uncertainty", _uncertainty),
            rights_holder=fields.get("rights_holder", _as_text),
            width=fields.get("width", _as_int),
            height=fields.get("height", _as_int),
            external_id=fields.get("id", _as_int),
            notes=_notes(fields),
        )
        licence = record.get("license")
        licence_id: int | None = None
        if isinstance(licence, int) and not isinstance(licence, bool):
            licence_id = fields.get("license", _licence_id)
        else:
            meta.license = fields.get("license", _as_text)
        if not self._keep(key, meta, licence_id):
            self._listed_twice(where, key)
            return
        self._done(where, fields)

    def _listed_twice(self, where: str, key: str) -> None:
        self.result._note(where, [f"{_short(key)} is listed twice; the first is kept"], whole=True)

    def _keep(self, key: str, meta: ImageMeta, licence_id: int | None) -> bool:
        """Keep one image's record; False when `key` was already kept (the first one wins)."""
        if licence_id is not None:
            self._by_licence.setdefault(licence_id, []).append(meta)
        self.result[key] = meta
        return True

    def _keep_annotation(self, image_id: int, category_id: int) -> None:
        category_id = self._category_ids.setdefault(category_id, category_id)
        if image_id in self._category_by_image:
            self._later_categories.setdefault(image_id, []).append(category_id)
        else:
            self._category_by_image[image_id] = category_id

    def category(self, index: int, record: dict[str, object] | None) -> None:
        where = f"categories[{index}]"
        fields = self._fields(where, record)
        if fields is None:
            return
        category_id = fields.get("id", _as_int)
        taxon = _taxon_from_category(fields, category_id)
        if category_id is not None and taxon is not None:
            self._taxa[category_id] = taxon
        self._done(where, fields)

    def annotation(self, index: int, record: dict[str, object] | None) -> None:
        where = f"annotations[{index}]"
        fields = self._fields(where, record)
        if fields is None:
            return
        image_id = fields.get("image_id", _as_int)
        category_id = fields.get("category_id", _as_int)
        if image_id is not None and category_id is not None:
            self._keep_annotation(image_id, category_id)
        self._done(where, fields)

    def licence(self, index: int, record: dict[str, object] | None) -> None:
        where = f"licenses[{index}]"
        fields = self._fields(where, record)
        if fields is None:
            return
        licence_id = fields.get("id", _as_int)
        name = fields.get("name", _as_text) or fields.get("url", _as_text)
        if licence_id is not None and name is not None:
            self._licence_names[licence_id] = name
        self._done(where, fields)

    def _taxon(self, image_id: int) -> TaxonInfo | None:
        """The taxon of the image's first annotation whose category is known."""
        first = self._category_by_image.get(image_id)
        if first is None:
            return None
        taxon = self._taxa.get(first)
        if taxon is None:
            for category_id in self._later_categories.get(image_id, ()):
                taxon = self._taxa.get(category_id)
                if taxon is not None:
                    break
        return taxon

    def finish(self) -> CocoMetadata:
        for licence_id, metas in self._by_licence.items():
            name = self._licence_names.get(licence_id)  # an unknown id leaves no licence
            for meta in metas:
                meta.license = name
        if self._category_by_image and self._taxa:
            for meta in self.result.values():
                if meta.external_id is not None:
                    meta.taxon = self._taxon(meta.external_id)
        return self.result


# One JSON integer becomes one Python int, and int() refuses more digits than
# sys.get_int_max_str_digits() (4300 by default): ijson's python backend then stops with a
# syntax error and yajl2_c's parse() crashes the process. 640 is the smallest limit Python
# lets anyone set, so a run capped there always converts, and stays an absurd number that
# every field rejects. Runs inside strings are capped too; no real name holds 640 digits.
_MAX_DIGITS = 640
_DIGITS = b"0123456789"
_DIGIT_MASK = bytes(0x30 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))  # digit -> "0"
_TOO_MANY_DIGITS = b"0" * (_MAX_DIGITS + 1)
_LONG_DIGIT_RUN = re.compile(rb"(?<![0-9])[0-9]{%d,}" % (_MAX_DIGITS + 1))
_READ_SIZE = 1 << 16
_PROGRESS_BYTES = 1 << 20  # a progress report per MiB read: a thousand for a GB


class _JsonStream:
    """A metadata file as ijson reads it: UTF-8 bytes (a UTF-8 BOM dropped, UTF-16/32 as
    `json.load` detects them re-encoded), with every run of digits cut to _MAX_DIGITS.

    Each piece handed out ends at its last "," "}" or "]" where it has one: ijson's pure-Python
    lexer keeps appending pieces to its buffer until one ends between tokens, so without this
    it could hold (and copy, quadratically) much of a file of long strings. yajl2_c does not
    care either way.
    """

    def __init__(self, raw: BinaryIO, on_read: Callable[[int], None] | None = None) -> None:
        self._raw = raw
        self._decoder: codecs.IncrementalDecoder | None = None
        self._started = False
        self._held = b""  # the end of the last piece read, after its last "," "}" or "]"
        self._run = 0  # digits at the end of what was handed out so far
        self.position = 0  # bytes of the file read so far, for error messages and progress
        self._on_read = on_read
        self._reported = 0

    def read(self, size: int = -1) -> bytes:
        if size == 0:
            return b""
        while True:
            chunk = self._raw.read(size if size > 0 else _READ_SIZE)
            self.position += len(chunk)
            if self._on_read is not None and self.position - self._reported >= _PROGRESS_BYTES:
                self._reported = self.position
                self._on_read(self.position)
            data = chunk if self._started else self._start(chunk)
            if self._decoder is not None:
                data = self._decoder.decode(data, final=not chunk).encode("utf-8")
            data, self._held = self._held + data, b""
            if chunk:
                cut = max(data.rfind(b","), data.rfind(b"}"), data.rfind(b"]")) + 1
                if cut:
                    data, self._held = data[:cut], data[cut:]
            data = self._cap_digits(data)
            # An empty answer means the end of the file to ijson: read on while a decoder
            # holds back a partial character or the cap dropped a whole chunk of digits.
            if data or not chunk:
                return data

    def _start(self, data: bytes) -> bytes:
        self._started = True
        encoding = json.detect_encoding(data)
        if encoding == "utf-8-sig":
            return data[len(codecs.BOM_UTF8) :]
        if encoding != "utf-8":
            self._decoder = codecs.getincrementaldecoder(encoding)()
        return data

    def _cap_digits(self, data: bytes) -> bytes:
        lead = len(data) - len(data.lstrip(_DIGITS))  # digits continuing the last chunk's run
        if self._run + lead > _MAX_DIGITS or _TOO_MANY_DIGITS in data.translate(_DIGIT_MASK):
            keep = max(0, _MAX_DIGITS - self._run)
            rest = _LONG_DIGIT_RUN.sub(lambda m: m.group()[:_MAX_DIGITS], data[lead:])
            data = data[: min(lead, keep)] + rest
        tail = len(data) - len(data.rstrip(_DIGITS))
        self._run = self._run + len(data) if tail == len(data) else tail
        return data


_OPENERS = ("start_map", "start_array")


def _skip(events: Iterator[tuple[str, Any]]) -> None:
    """Pass over the rest of a list or object whose start was just read: no recursion, nothing
    built, so nesting of any depth costs nothing."""
    depth = 1
    for event, _ in events:
        if event == "start_map" or event == "start_array":
            depth += 1
        elif event == "end_map" or event == "end_array":
            depth -= 1
            if depth == 0:
                return


def _record(events: Iterator[tuple[str, Any]]) -> dict[str, object]:
    """The rest of an object whose start was just read: its scalar values, with _NESTED for
    each list or object (skipped, never built: record fields are scalars)."""
    record: dict[str, object] = {}
    key = ""
    for event, value in events:
        if event == "map_key":
            key = value
        elif event == "end_map":
            break
        elif event == "start_map" or event == "start_array":
            _skip(events)
            record[key] = _NESTED
        else:
            record[key] = value
    return record


def _read_document(path: Path, events: Iterator[tuple[str, Any]], reader: _CocoReader) -> None:
    """Hand each record of the top-level sections to `reader`, in one pass over `events`."""
    not_coco = f'{path}: not COCO metadata (expected an object with an "images" list)'
    handlers: dict[str, Callable[[int, dict[str, object] | None], None]] = {
        "images": reader.image,
        "categories": reader.category,
        "annotations": reader.annotation,
        "licenses": reader.licence,
    }
    if next(events, ("", None))[0] != "start_map":
        raise BadInputError(not_coco)
    for event, key in events:
        if event == "end_map":
            break
        event, _ = next(events)  # the start of the key's value
        handler = handlers.get(key)
        if handler is None or (event == "null" and key != "images"):
            if event in _OPENERS:
                _skip(events)  # "info" and anything else not used
            continue
        if event != "start_array":
            raise BadInputError(
                not_coco if key == "images" else f'{path}: "{key}" should be a list'
            )
        reader.saw_images = reader.saw_images or key == "images"
        # One event starts each item; _record and _skip take the rest of it.
        for index, (event, _) in enumerate(events):
            if event == "end_array":
                break
            if event == "start_map":
                handler(index, _record(events))
            else:
                if event in _OPENERS:
                    _skip(events)
                handler(index, None)
    for _ in events:  # the parser's own checks of what follows (trailing garbage)
        pass
    if not reader.saw_images:
        raise BadInputError(not_coco)


_FALLBACK_MAX_BYTES = 64 << 20  # json.loads takes about ten times a file's size in memory


def _syntax_error(path: Path, error: Exception, position: int) -> BadInputError:
    """The error for a file ijson could not parse, naming the line where json can tell it.

    ijson reports no line, so a file small enough is parsed again by json just for the
    message. json may fail otherwise (deep nesting) or not at all (it accepts NaN, which is
    not JSON); then ijson's own message and the bytes read stand.
    """
    detail = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
    try:
        if path.stat().st_size <= _FALLBACK_MAX_BYTES:
            # parse_int: no int() of each integer, which refuses thousands of digits.
            json.loads(path.read_bytes(), parse_int=len)
            detail += " (NaN and Infinity are not JSON)"  # what json accepts beyond JSON
    except json.JSONDecodeError as exc:
        return BadInputError(
            f"{path}: malformed JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        )
    except UnicodeDecodeError:
        return BadInputError(f"{path}: not a UTF-8 text file")
    except (RecursionError, ValueError, MemoryError, OSError):
        pass
    return BadInputError(f"{path}: malformed JSON (within its first {position:,} bytes): {detail}")


def load_coco_metadata(path: Path, progress: ProgressCallback = no_progress) -> CocoMetadata:
    """Read a COCO-style metadata file (docs/SPEC.md §3.2), keyed by `metadata_key(file_name)`.

    One streaming pass, record by record, so a multi-GB iNat train.json never sits in memory
    whole (its records do: `MetadataStore.load` keeps them on disk instead). Missing or null
    fields become None; images without annotations get no taxon. A value that cannot be used
    (an id beyond 64 bits, a list where text belongs, a number of thousands of digits) is
    ignored, a record that is not an object or has no file_name is skipped, and both count in
    the result's `problems`: one bad record never costs the rest. `progress` hears the bytes
    read of the file's size. Raises `BadInputError` naming the file (and the line, for JSON
    syntax errors, where it can be had) when the file cannot be read, is not JSON, or is not
    shaped like COCO metadata.
    """
    path = Path(path)
    reader = _CocoReader()
    _read_coco(path, reader, progress)
    metadata = reader.finish()
    _log_problems(path, metadata)
    return metadata


def _read_coco(path: Path, reader: _CocoReader, progress: ProgressCallback) -> None:
    """Stream the records of the file at `path` into `reader`, reporting bytes read."""
    try:
        size = path.stat().st_size
        with path.open("rb") as handle:
            meter = RateMeter(size)
            progress(meter.update(0, READING_METADATA))
            stream = _JsonStream(
                handle, lambda done: progress(meter.update(done, READING_METADATA))
            )
            # basic_parse, not parse or items: their path prefixes grow with nesting depth, so
            # 100,000 nested lists cost O(depth²) memory (tens of GB); basic_parse is linear.
            # use_float=False: ints stay exact and decimals cannot overflow, where yajl's own
            # number parsing (use_float=True) fails the whole file at 2**63 or 1e999.
            events = ijson.basic_parse(stream, use_float=False)
            try:
                _read_document(path, events, reader)
            except UnicodeError:
                raise
            except (ijson.JSONError, ValueError) as exc:
                raise _syntax_error(path, exc, stream.position) from None
            progress(meter.update(stream.position, READING_METADATA))
    except UnicodeError:
        raise BadInputError(f"{path}: not a UTF-8 text file") from None
    except OSError as exc:
        raise BadInputError(f"cannot read {path}: {exc.strerror or exc}") from None


def _log_problems(path: Path, tally: CocoMetadata) -> None:
    if tally.problems:
        log.warning(
            "%s: %s, in %d metadata records; the first: %s",
            path,
            tally.problem_line(),
            tally.problems,
            " | ".join(tally.examples),
        )


READING_METADATA = "reading metadata"

# ImageMeta's fields in order, as MetadataStore keeps them (the taxon is joined when read).
_META_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclass_fields(ImageMeta))


class _SpillingReader(_CocoReader):
    """A `_CocoReader` that writes each image record and annotation to a temporary SQLite
    file as it reads them, instead of keeping them in memory (categories and licences, a few
    thousand at most, stay in memory)."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        super().__init__()
        self._db = connection
        self._annotations: list[tuple[int, int]] = []
        self._images = 0

    def _keep(self, key: str, meta: ImageMeta, licence_id: int | None) -> bool:
        values = tuple(getattr(meta, name) for name in _META_FIELDS)
        cursor = self._db.execute(
            "INSERT OR IGNORE INTO images (key, external_id, licence_id, data) VALUES (?, ?, ?, ?)",
            (key, meta.external_id, licence_id, pickle.dumps(values, protocol=5)),
        )
        if cursor.rowcount == 0:
            return False
        self._images += 1
        return True

    def _keep_annotation(self, image_id: int, category_id: int) -> None:
        self._annotations.append((image_id, category_id))
        if len(self._annotations) >= 50_000:
            self._flush()

    def _flush(self) -> None:
        self._db.executemany(
            "INSERT INTO annotations (image_id, category_id) VALUES (?, ?)", self._annotations
        )
        self._annotations.clear()

    def finish_store(self, path: Path) -> MetadataStore:
        self._flush()
        self._db.execute("CREATE INDEX annotations_image ON annotations (image_id)")
        self._db.commit()
        return MetadataStore(
            self._db, path, self._images, self.result, self._taxa, self._licence_names
        )


class MetadataStore(Mapping[str, ImageMeta]):
    """What a metadata file says about each photo, as `load_coco_metadata` gives it, but kept
    in a temporary SQLite file rather than in memory: iNat24's train.json lists 5 million
    photos, and a dict of their records took about 800 bytes each. A read-only mapping from
    `metadata_key(file_name)` to ImageMeta with the same tally of what was ignored (`problems`,
    `values_ignored`, `records_ignored`, `examples`). Close it (or use `with`) to delete the
    temporary database; one thread at a time."""

    def __init__(
        self,
        connection: sqlite3.Connection,
        source: Path,
        count: int,
        tally: CocoMetadata,
        taxa: dict[int, TaxonInfo],
        licence_names: dict[int, str],
    ) -> None:
        self._db: sqlite3.Connection | None = connection
        self.source = source
        self._count = count
        self._taxa = taxa
        self._licence_names = licence_names
        self.problems = tally.problems
        self.values_ignored = tally.values_ignored
        self.records_ignored = tally.records_ignored
        self.examples = list(tally.examples)

    @classmethod
    def load(cls, path: Path, progress: ProgressCallback = no_progress) -> MetadataStore:
        """Read the COCO file at `path` in one streaming pass (as `load_coco_metadata`, with the
        same errors and progress) into a new temporary database."""
        path = Path(path)
        # SQLite's private temporary database (the empty name): a file in the system's
        # temporary folder that SQLite deletes itself, even when the process is killed.
        connection = sqlite3.connect("", check_same_thread=False)
        try:
            # A scratch file: nothing to recover after a crash, so no journal and no syncs.
            connection.execute("PRAGMA journal_mode=OFF")
            connection.execute("PRAGMA synchronous=OFF")
            connection.execute("PRAGMA cache_size=-32768")  # 32 MB of pages
            connection.execute(
                "CREATE TABLE images (key TEXT PRIMARY KEY, external_id INTEGER, "
                "licence_id INTEGER, data BLOB)"
            )
            connection.execute("CREATE TABLE annotations (image_id INTEGER, category_id INTEGER)")
            reader = _SpillingReader(connection)
            _read_coco(path, reader, progress)
            store = reader.finish_store(path)
        except BaseException:
            connection.close()
            raise
        _log_problems(path, reader.result)
        return store

    def _connection(self) -> sqlite3.Connection:
        if self._db is None:
            raise ValueError("the metadata store is closed")
        return self._db

    def __getitem__(self, key: str) -> ImageMeta:
        row = (
            self._connection()
            .execute("SELECT external_id, licence_id, data FROM images WHERE key = ?", (key,))
            .fetchone()
        )
        if row is None:
            raise KeyError(key)
        external_id, licence_id, data = row
        meta = ImageMeta(*pickle.loads(data))
        if licence_id is not None:
            meta.license = self._licence_names.get(licence_id)  # an unknown id: no licence
        if external_id is not None and self._taxa:
            meta.taxon = self._taxon(external_id)
        return meta

    def _taxon(self, image_id: int) -> TaxonInfo | None:
        """The taxon of the image's first annotation whose category is known."""
        for (category_id,) in self._connection().execute(
            "SELECT category_id FROM annotations WHERE image_id = ? ORDER BY rowid", (image_id,)
        ):
            taxon = self._taxa.get(category_id)
            if taxon is not None:
                return taxon
        return None

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[str]:
        for (key,) in self._connection().execute("SELECT key FROM images ORDER BY rowid"):
            yield key

    def problem_line(self) -> str:
        """What was ignored, in words ("" when nothing was)."""
        return ignored_metadata_line(self.values_ignored, self.records_ignored)

    def close(self) -> None:
        """Close it, which deletes its temporary database (closing twice is harmless)."""
        if self._db is not None:
            self._db.close()
            self._db = None

    def __enter__(self) -> MetadataStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --------------------------------------------------------------------------------------------
# EXIF


@dataclass(frozen=True)
class ExifInfo:
    """What a photo's EXIF says about when and where it was taken, and how to turn it."""

    observed_at: datetime | None = None
    latitude: float | None = None
    longitude: float | None = None
    orientation: int | None = None  # 1..8 as in the EXIF standard


_TAG_ORIENTATION = 0x0112
_TAG_DATETIME_ORIGINAL = 0x9003
_TAG_DATETIME_DIGITIZED = 0x9004
_TAG_OFFSET_TIME_ORIGINAL = 0x9011
_GPS_LATITUDE_REF, _GPS_LATITUDE, _GPS_LONGITUDE_REF, _GPS_LONGITUDE = 1, 2, 3, 4
_OFFSET_RE = re.compile(r"([+-])(\d{2}):?(\d{2})\Z")


def _exif_text(value: object) -> str | None:
    if isinstance(value, bytes):
        value = value.decode("ascii", "replace")
    if not isinstance(value, str):
        return None
    return value.strip("\x00 ") or None


def _exif_datetime(exif_ifd: dict[int, Any]) -> datetime | None:
    text = _exif_text(exif_ifd.get(_TAG_DATETIME_ORIGINAL)) or _exif_text(
        exif_ifd.get(_TAG_DATETIME_DIGITIZED)
    )
    if text is None:
        return None
    # Cameras write "0000:00:00 00:00:00" or blanks when the clock was unset: parse fails.
    try:
        moment = datetime.strptime(text[:19], "%Y:%m:%d %H:%M:%S")
    except ValueError:
        return None
    offset = _OFFSET_RE.match(_exif_text(exif_ifd.get(_TAG_OFFSET_TIME_ORIGINAL)) or "")
    if offset:
        sign = -1 if offset.group(1) == "-" else 1
        delta = timedelta(hours=int(offset.group(2)), minutes=int(offset.group(3)))
        if delta < timedelta(hours=24):
            moment = moment.replace(tzinfo=timezone(sign * delta))
    return moment


def _gps_coordinate(value: object, ref: object, limit: float) -> float | None:
    """Degrees from EXIF (degrees, minutes, seconds) rationals; S and W give negatives."""
    parts = value if isinstance(value, tuple | list) else (value,)
    if not 1 <= len(parts) <= 3:
        return None
    degrees = 0.0
    for part, scale in zip(parts, (1.0, 60.0, 3600.0), strict=False):
        number = _as_float(part)  # a zero denominator gives nan, rejected here
        if number is None or number < 0:
            return None
        degrees += number / scale
    if degrees > limit:
        return None
    ref_text = (_exif_text(ref) or "").upper()
    return -degrees if ref_text in ("S", "W") else degrees


def read_exif(image: Image.Image) -> ExifInfo:
    """Date (DateTimeOriginal), GPS position and orientation from an opened image.

    Never raises: junk or missing EXIF gives None fields.
    """
    try:
        exif = image.getexif()
    except Exception as exc:  # PIL raises many kinds of errors on junk EXIF
        log.debug("unreadable EXIF: %s", exc)
        return ExifInfo()

    orientation: int | None = None
    try:
        raw = exif.get(_TAG_ORIENTATION)
        if isinstance(raw, int) and 1 <= raw <= 8:
            orientation = raw
    except Exception as exc:
        log.debug("unreadable EXIF orientation: %s", exc)

    observed_at: datetime | None = None
    try:
        observed_at = _exif_datetime(exif.get_ifd(ExifTags.IFD.Exif))
    except Exception as exc:
        log.debug("unreadable EXIF date: %s", exc)

    latitude = longitude = None
    try:
        gps = exif.get_ifd(ExifTags.IFD.GPSInfo)
        latitude = _gps_coordinate(gps.get(_GPS_LATITUDE), gps.get(_GPS_LATITUDE_REF), 90.0)
        longitude = _gps_coordinate(gps.get(_GPS_LONGITUDE), gps.get(_GPS_LONGITUDE_REF), 180.0)
        if latitude is None or longitude is None:  # half a position is no position
            latitude = longitude = None
    except Exception as exc:
        log.debug("unreadable EXIF GPS: %s", exc)
        latitude = longitude = None

    return ExifInfo(observed_at, latitude, longitude, orientation)


# --------------------------------------------------------------------------------------------
# Decoding


@dataclass
class DecodedImage:
    """A photo ready for an encoder."""

    image: Image.Image  # RGB, EXIF orientation applied, first frame, fully loaded
    width: int  # the photo's full size after orientation (image.size unless min_side shrank it)
    height: int
    exif: ExifInfo


_TRANSPOSE_FOR_ORIENTATION: dict[int, Image.Transpose] = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}

_plugins_lock = threading.Lock()
_plugins_ready = False


def _ensure_pil_plugins() -> None:
    # PIL registers its format plugins lazily on first use; do it once, under a lock, so
    # worker threads never race on the registry.
    global _plugins_ready
    if _plugins_ready:
        return
    with _plugins_lock:
        if not _plugins_ready:
            Image.init()
            _use_large_pixel_blocks()
            _plugins_ready = True


# Pillow keeps a big image's pixels in 16 MB blocks. glibc hands blocks of that size back to
# the system only below its (self-raising) mmap threshold of at most 32 MB: the freed blocks of
# one huge photo stayed in the process, and four 13,000-pixel RGBA PNGs indexed one after the
# other peaked at 3.2 GB rather than 2.2. Blocks of 64 MB are always returned when freed; a
# small image still takes only the memory it needs.
_PIXEL_BLOCK_BYTES = 64 << 20


def _use_large_pixel_blocks() -> None:
    if "PILLOW_BLOCK_SIZE" in os.environ:  # the user's own choice wins
        return
    try:
        core: Any = Image.core  # type: ignore[attr-defined]  # PIL's C module, not re-exported
        if core.get_block_size() < _PIXEL_BLOCK_BYTES:
            core.set_block_size(_PIXEL_BLOCK_BYTES)
    except (AttributeError, ValueError) as exc:  # a Pillow without the arena functions
        log.debug("cannot set Pillow's block size: %s", exc)


_BOMB_PIXELS_RE = re.compile(r"\((\d+) pixels\)")


# The memory that decodes running at once may take, whatever the number of threads: one
# 13,000 x 13,000 PNG (0.7 MB on disk) is 676 MB of pixels once decoded, and four decoded at
# once used to take 7.5 GB. A photo larger than the budget is decoded alone.
DEFAULT_DECODE_MEMORY: int = 1 << 30

# Photos are first shrunk by a whole factor (a box average, cheap) while both sides stay at least
# this many times the size asked for; the encoder's own resize does the rest. Pillow documents a
# gap of 3 as indistinguishable from resizing in one step.
_REDUCING_GAP = 3


class DecodeBudget:
    """A bound on the bytes of the decodes in flight, shared by threads.

    `reserve(n)` waits until `n` more bytes fit, in arrival order (a big photo is not starved
    by small ones); a request larger than the whole budget waits until nothing else is in
    flight and then runs alone, so every photo is decoded eventually."""

    def __init__(self, max_bytes: int = DEFAULT_DECODE_MEMORY) -> None:
        if max_bytes < 1:
            raise ValueError("a decode budget must be at least one byte")
        self.max_bytes = max_bytes
        self.in_use = 0
        self.peak = 0  # the most bytes reserved at once (for tests and logs)
        self._ready = threading.Condition()
        self._queue: deque[object] = deque()

    @contextmanager
    def reserve(self, nbytes: int) -> Iterator[None]:
        """Hold `nbytes` of the budget (at most all of it) while the block runs."""
        amount = max(0, min(int(nbytes), self.max_bytes))
        ticket = object()
        with self._ready:
            self._queue.append(ticket)
            try:
                while self._queue[0] is not ticket or (
                    self.in_use and self.in_use + amount > self.max_bytes
                ):
                    self._ready.wait()
            finally:
                self._queue.remove(ticket)
                self._ready.notify_all()  # the next in line may fit too
            self.in_use += amount
            self.peak = max(self.peak, self.in_use)
        try:
            yield
        finally:
            with self._ready:
                self.in_use -= amount
                self._ready.notify_all()


_default_budget = DecodeBudget()


def default_decode_budget() -> DecodeBudget:
    """The budget every decode of this process shares unless it is given its own."""
    return _default_budget


def _bytes_per_pixel(mode: str) -> int:
    # PIL keeps 1-, L- and P-mode pixels in a byte, 16-bit ones in two, all others (RGB too)
    # in four.
    if mode in ("1", "L", "P"):
        return 1
    return 2 if mode.startswith("I;16") else 4


def _reduce_factor(size: tuple[int, int], min_side: int | None) -> int:
    if not min_side:
        return 1
    return max(1, min(size) // (_REDUCING_GAP * min_side))


# Modes that `_reduced` shrinks without a full-size copy first (alpha is premultiplied into
# one, palettes and 16-bit greyscale are converted).
_REDUCED_IN_PLACE = frozenset({"L", "RGB", "I", "F", "CMYK", "YCbCr"})


def _decode_cost(mode: str, size: tuple[int, int], factor: int) -> int:
    """The bytes decoding one photo may hold at its worst: its pixels as decoded, a full-size
    working copy where the mode needs one before shrinking, and the shrunk photo with its RGB
    conversion; unshrunk, two full-size copies (RGB conversion and orientation)."""
    pixels = size[0] * size[1]
    decoded = pixels * _bytes_per_pixel(mode)
    if factor > 1:
        copy = 0 if mode in _REDUCED_IN_PLACE else pixels * 4
        return decoded + copy + 2 * 4 * (pixels // (factor * factor))
    return decoded + 2 * 4 * pixels


def _reduced(image: Image.Image, factor: int) -> Image.Image:
    """`image` shrunk `factor` times by a box average in a mode that averages correctly
    (palettes and 1-bit images are converted first); the same image when factor is 1."""
    if factor < 2:
        return image
    mode = image.mode
    if mode == "1":
        image = image.convert("L")
    elif mode.startswith("I;16"):
        image = image.convert("I")
    elif mode in ("P", "PA"):
        transparent = mode == "PA" or "transparency" in image.info
        image = image.convert("RGBA" if transparent else "RGB")
    elif mode not in ("L", "LA", "RGB", "RGBA", "I", "F", "CMYK", "YCbCr"):
        return image  # a mode Pillow cannot reduce: decoded at full size, as before
    return image.reduce(factor)


def _to_rgb(image: Image.Image) -> Image.Image:
    """Convert any PIL mode to RGB; transparent areas become white."""
    mode = image.mode
    if mode == "RGB":
        return image  # no copy: a loaded image outlives its closed file
    if mode.startswith("I;16"):
        image, mode = image.convert("I"), "I"
    if mode in ("I", "F"):
        # 16-bit and float greyscale: map the format's range onto 0..255 instead of
        # clipping to white (a 16-bit PNG arrives as "I" or "I;16" with values to 65535).
        # One band: getextrema gives (min, max) numbers, not a (min, max) pair per band.
        high = cast(float, image.getextrema()[1])
        if mode == "F" and 0 < high <= 1.0:
            scale = 255.0
        elif high <= 255:
            scale = 1.0
        elif high <= 65535:
            scale = 255.0 / 65535.0
        else:
            scale = 255.0 / high
        return image.point(lambda value: value * scale).convert("L").convert("RGB")
    has_alpha = mode in ("RGBA", "LA", "PA", "La", "RGBa") or (
        mode == "P" and "transparency" in image.info
    )
    if has_alpha:
        rgba = image.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    return image.convert("RGB")


def decode_image(
    path: Path,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    min_side: int | None = None,
    budget: DecodeBudget | None = None,
) -> DecodedImage:
    """Open, fully decode and normalise one photo (RGB, upright, first frame).

    Images with more than `max_pixels` pixels are refused from their header, before any
    pixel is decoded. (PIL itself refuses images above twice its global MAX_IMAGE_PIXELS
    before we see them, so a larger `max_pixels` cannot lift that.) `min_side`, when given,
    lets formats that can decode at reduced size (JPEG) do so, keeping both sides at least
    `min_side` pixels, and shrinks other large photos right after decoding, before any mode
    conversion (both sides stay at least 3 x `min_side`); `width`/`height` still report the
    full size.

    The memory a decode may take is estimated from the header and reserved from `budget`
    (the process's `default_decode_budget()` when None) before any pixel is decoded, so the
    decodes of all threads together stay within it: a big photo waits for the others.

    Raises `BadImageError` with a short reason for every file that cannot be used. Safe to
    call from several threads; changes no global PIL setting.
    """
    path = Path(path)
    try:
        file_stat = path.stat()
    except FileNotFoundError:
        raise BadImageError("file not found") from None
    except OSError as exc:
        raise BadImageError(f"cannot read file: {exc.strerror or exc}") from None
    if not stat.S_ISREG(file_stat.st_mode):
        raise BadImageError("not a regular file")
    if file_stat.st_size == 0:
        raise BadImageError("empty file")

    _ensure_pil_plugins()
    try:
        with Image.open(path, formats=_ALLOWED_FORMATS) as opened:
            width, height = opened.size
            if width <= 0 or height <= 0:
                raise BadImageError("corrupt image data (zero size)")
            if width * height > max_pixels:
                raise BadImageError(
                    f"image too large: {width}x{height} pixels (limit {max_pixels:,})"
                )
            if min_side is not None and opened.format in ("JPEG", "MPO"):
                opened.draft("RGB", (min_side, min_side))  # the DCT decodes at 1/2 to 1/8
            factor = _reduce_factor(opened.size, min_side)
            cost = _decode_cost(opened.mode, opened.size, factor)
            with (budget or _default_budget).reserve(cost):
                # Load before reading EXIF: for PNG, getexif() loads the pixels itself and
                # read_exif would swallow a decoding error, leaving a half-decoded image.
                opened.load()
                exif = read_exif(opened)
                # Shrink first: converting a 13,000-pixel RGBA photo to RGB at full size took
                # three more copies of it.
                image = _to_rgb(_reduced(opened, factor))
                if image is not opened:  # the full-size pixels go now, not with the caller's
                    opened.close()
                image = _oriented(image, exif.orientation)
    except BadImageError:
        raise
    except Image.DecompressionBombError as exc:
        # PIL refused it in Image.open, before we could read the size ourselves.
        match = _BOMB_PIXELS_RE.search(str(exc))
        pixels = f"{int(match.group(1)):,} pixels" if match else "too many pixels"
        pil_limit = Image.MAX_IMAGE_PIXELS
        limit = max_pixels if pil_limit is None else min(max_pixels, 2 * pil_limit)
        raise BadImageError(f"image too large: {pixels} (limit {limit:,})") from None
    except UnidentifiedImageError:
        raise BadImageError("not an image file") from None
    except FileNotFoundError:
        raise BadImageError("file not found") from None
    except PermissionError:
        raise BadImageError("cannot read file: permission denied") from None
    except MemoryError:
        raise BadImageError("image too large to decode") from None
    except OSError as exc:
        message = str(exc)
        if "truncated" in message:
            raise BadImageError("truncated image data") from None
        if "mode" in message:
            raise BadImageError(f"unsupported image mode ({message})") from None
        raise BadImageError(f"corrupt image data ({message or type(exc).__name__})") from None
    except ValueError as exc:
        # PIL raises ValueError for conversions it does not support, and for bad parameters.
        raise BadImageError(f"unsupported image data ({exc})") from None
    except Exception as exc:  # SyntaxError, struct.error, IndexError... from damaged files
        raise BadImageError(f"corrupt image data ({type(exc).__name__}: {exc})") from None

    if exif.orientation in _SIDEWAYS:
        width, height = height, width
    return DecodedImage(image=image, width=width, height=height, exif=exif)


# EXIF orientations that turn the photo by a quarter: its width and height swap.
_SIDEWAYS = frozenset({5, 6, 7, 8})


def _oriented(image: Image.Image, orientation: int | None) -> Image.Image:
    """`image` turned upright as its EXIF orientation says."""
    transpose = _TRANSPOSE_FOR_ORIENTATION.get(orientation or 1)
    return image if transpose is None else image.transpose(transpose)


# --------------------------------------------------------------------------------------------
# Content hash


def content_hash(path: Path) -> str:
    """Hex BLAKE2b (16-byte digest) of the file's bytes, read in chunks."""
    digest = hashlib.blake2b(digest_size=16)
    with Path(path).open("rb") as handle:
        while chunk := handle.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


__all__ = [
    "DEFAULT_MAX_PIXELS",
    "HEIF_AVAILABLE",
    "IMAGE_EXTENSIONS",
    "METADATA_FILE_NAMES",
    "READING_METADATA",
    "CocoMetadata",
    "DecodeBudget",
    "DecodedImage",
    "ExifInfo",
    "FileEntry",
    "ImageMeta",
    "MetadataStore",
    "TaxonInfo",
    "content_hash",
    "decode_image",
    "default_decode_budget",
    "find_metadata_file",
    "load_coco_metadata",
    "local_time_and_offset",
    "metadata_key",
    "parse_date",
    "parse_inat_dirname",
    "printable_name",
    "read_exif",
    "taxon_for_path",
    "walk_images",
    "with_utc_offset",
]
