"""Finding photos in a folder and reading what is known about them.

- `walk_images` lists image files under a collection root (sorted, no symlink loops).
- `parse_inat_dirname` / `taxon_for_path` read taxonomy from iNat21/iNat24 folder names.
- `load_coco_metadata` reads COCO-style metadata JSON (SPEC.md §3).
- `read_exif` reads the date, GPS position and orientation of a photo.
- `decode_image` opens one photo safely: bad files become `BadImageError` with a short reason,
  huge images are refused from their header before any pixels are decoded.
- `content_hash` fingerprints a file's bytes for change detection.

Nothing here touches global PIL settings, so decoding can run in a thread pool.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import stat
import threading
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from functools import lru_cache
from pathlib import Path, PurePosixPath
from typing import Any

from PIL import ExifTags, Image, UnidentifiedImageError

from engine.errors import BadImageError, BadInputError

log = logging.getLogger(__name__)

try:  # HEIC/HEIF support is optional (the "heic" extra).
    import pillow_heif  # type: ignore[import-not-found]

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


@dataclass(frozen=True)
class FileEntry:
    """One image file found under a collection root."""

    rel_path: str  # POSIX path relative to the collection root
    abs_path: Path
    size: int
    mtime_ns: int


def _is_hidden(entry: os.DirEntry[str]) -> bool:
    if entry.name.startswith("."):
        return True
    if os.name != "nt":
        return False
    # Windows marks hidden files with an attribute rather than a dot (cached, no extra call).
    attributes = getattr(entry.stat(follow_symlinks=False), "st_file_attributes", 0)
    return bool(attributes & stat.FILE_ATTRIBUTE_HIDDEN)


def _is_storable_name(name: str) -> bool:
    """False for names that are not valid Unicode (undecodable bytes on POSIX)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _sorted_entries(folder: Path) -> list[os.DirEntry[str]]:
    with os.scandir(folder) as it:
        return sorted(it, key=lambda e: e.name)


def walk_images(root: Path, extensions: frozenset[str] = IMAGE_EXTENSIONS) -> Iterator[FileEntry]:
    """Yield every image file under `root`, depth first, in sorted order.

    Extensions match case-insensitively. Directory symlinks are followed, but a directory
    already visited (same device and inode) is never entered twice, so loops end. Hidden
    files and folders are skipped; a folder that cannot be read is logged and skipped.
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

    visited: set[tuple[int, int]] = {(root_stat.st_dev, root_stat.st_ino)}
    # A stack of (iterator over a folder's sorted entries, that folder's relative prefix):
    # files and sub-folders interleave by name, so the output is sorted by path components.
    stack: list[tuple[Iterator[os.DirEntry[str]], str]] = [(iter(root_entries), "")]
    while stack:
        entries, prefix = stack[-1]
        entry = next(entries, None)
        if entry is None:
            stack.pop()
            continue
        rel_path = prefix + entry.name
        try:
            if _is_hidden(entry):
                continue
            if not _is_storable_name(entry.name):
                log.warning("skipping a name that is not valid Unicode: %r", entry.path)
                continue
            entry_stat = entry.stat()  # follows symlinks
        except OSError as exc:
            # Broken symlinks land here, as do files removed while we walk.
            log.debug("skipping %s: %s", entry.path, exc)
            continue

        if stat.S_ISDIR(entry_stat.st_mode):
            key = (entry_stat.st_dev, entry_stat.st_ino)
            if key in visited:
                log.debug("skipping %s: folder already visited (symlink loop?)", entry.path)
                continue
            visited.add(key)
            try:
                children = _sorted_entries(Path(entry.path))
            except OSError as exc:
                log.warning("skipping folder %s: %s", entry.path, exc.strerror or exc)
                continue
            stack.append((iter(children), rel_path + "/"))
        elif (
            stat.S_ISREG(entry_stat.st_mode)
            and os.path.splitext(entry.name)[1].lower() in extensions
        ):
            yield FileEntry(
                rel_path=rel_path,
                abs_path=Path(entry.path),
                size=entry_stat.st_size,
                mtime_ns=entry_stat.st_mtime_ns,
            )


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


def _as_float(value: object, low: float = -math.inf, high: float = math.inf) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    if not math.isfinite(number) or not low <= number <= high:
        return None
    return number


def _as_int(value: object) -> int | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


def _as_text(value: object) -> str | None:
    if value is None:
        return None
    text = str(value).strip()
    return text or None


def _taxon_from_category(category: dict[str, Any]) -> TaxonInfo | None:
    ranks = {
        key: _as_text(category.get(key))
        for key in ("kingdom", "phylum", "class", "order", "family", "genus")
    }
    epithet = _as_text(category.get("specific_epithet"))
    dir_name = _as_text(category.get("image_dir_name"))
    from_dir = parse_inat_dirname(dir_name) if dir_name else None
    name = _as_text(category.get("name"))
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
        common_name=_as_text(category.get("common_name")),
        category_id=_as_int(category.get("id")),
        image_dir_name=dir_name,
    )


def _licence_names(document: dict[str, Any]) -> dict[int, str]:
    names: dict[int, str] = {}
    licences = document.get("licenses")
    if not isinstance(licences, list):
        return names
    for licence in licences:
        if not isinstance(licence, dict):
            continue
        licence_id = _as_int(licence.get("id"))
        name = _as_text(licence.get("name")) or _as_text(licence.get("url"))
        if licence_id is not None and name is not None:
            names[licence_id] = name
    return names


def _licence(value: object, names: dict[int, str]) -> str | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return names.get(value)  # an id into the top-level "licenses" list
    return _as_text(value)


def load_coco_metadata(path: Path) -> dict[str, ImageMeta]:
    """Read a COCO-style metadata file (SPEC.md §3), keyed by `metadata_key(file_name)`.

    Missing or null fields become None; images without annotations get no taxon.
    Raises `BadInputError` naming the file (and the line, for JSON syntax errors) when the
    file cannot be read, is not JSON, or is not shaped like COCO metadata.
    """
    path = Path(path)
    try:
        with path.open("rb") as handle:
            document = json.load(handle)
    except json.JSONDecodeError as exc:
        raise BadInputError(
            f"{path}: malformed JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from None
    except UnicodeDecodeError:
        raise BadInputError(f"{path}: not a UTF-8 text file") from None
    except OSError as exc:
        raise BadInputError(f"cannot read {path}: {exc.strerror or exc}") from None
    if not isinstance(document, dict) or not isinstance(document.get("images"), list):
        raise BadInputError(f'{path}: not COCO metadata (expected an object with an "images" list)')
    for section in ("categories", "annotations", "licenses"):
        if document.get(section) is not None and not isinstance(document[section], list):
            raise BadInputError(f'{path}: "{section}" should be a list')

    taxa: dict[int, TaxonInfo] = {}
    for category in document.get("categories") or []:
        if isinstance(category, dict):
            category_id = _as_int(category.get("id"))
            taxon = _taxon_from_category(category)
            if category_id is not None and taxon is not None:
                taxa[category_id] = taxon

    taxon_by_image: dict[int, TaxonInfo] = {}
    for annotation in document.get("annotations") or []:
        if not isinstance(annotation, dict):
            continue
        image_id = _as_int(annotation.get("image_id"))
        category_id = _as_int(annotation.get("category_id"))
        if image_id is None or category_id is None or category_id not in taxa:
            continue
        taxon_by_image.setdefault(image_id, taxa[category_id])  # first annotation wins

    licence_names = _licence_names(document)
    result: dict[str, ImageMeta] = {}
    unusable = 0
    for record in document["images"]:
        file_name = record.get("file_name") if isinstance(record, dict) else None
        if not isinstance(file_name, str) or not file_name.strip():
            unusable += 1
            continue
        key = metadata_key(file_name.strip())
        if key in result:
            log.warning("%s: %s is listed twice; keeping the first record", path, key)
            continue
        image_id = _as_int(record.get("id"))
        result[key] = ImageMeta(
            taxon=taxon_by_image.get(image_id) if image_id is not None else None,
            observed_at=parse_date(record.get("date")),
            latitude=_as_float(record.get("latitude"), -90.0, 90.0),
            longitude=_as_float(record.get("longitude"), -180.0, 180.0),
            location_uncertainty=_as_float(record.get("location_uncertainty"), 0.0),
            license=_licence(record.get("license"), licence_names),
            rights_holder=_as_text(record.get("rights_holder")),
            width=_as_int(record.get("width")),
            height=_as_int(record.get("height")),
            external_id=image_id,
        )
    if unusable:
        log.warning("%s: %d image records without a file_name were ignored", path, unusable)
    return result


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
            _plugins_ready = True


_BOMB_PIXELS_RE = re.compile(r"\((\d+) pixels\)")


def _to_rgb(image: Image.Image) -> Image.Image:
    """Convert any PIL mode to RGB; transparent areas become white."""
    mode = image.mode
    if mode == "RGB":
        return image.copy()
    if mode.startswith("I;16"):
        image, mode = image.convert("I"), "I"
    if mode in ("I", "F"):
        # 16-bit and float greyscale: map the format's range onto 0..255 instead of
        # clipping to white (a 16-bit PNG arrives as "I" or "I;16" with values to 65535).
        _, high = image.getextrema()
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
    path: Path, max_pixels: int = DEFAULT_MAX_PIXELS, min_side: int | None = None
) -> DecodedImage:
    """Open, fully decode and normalise one photo (RGB, upright, first frame).

    Images with more than `max_pixels` pixels are refused from their header, before any
    pixel is decoded. (PIL itself refuses images above twice its global MAX_IMAGE_PIXELS
    before we see them, so a larger `max_pixels` cannot lift that.) `min_side`, when given,
    lets formats that can decode at reduced size (JPEG) do so, keeping both sides at least
    `min_side` pixels; `width`/`height` still report the full size.

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
                opened.draft("RGB", (min_side, min_side))
            # Load before reading EXIF: for PNG, getexif() loads the pixels itself and
            # read_exif would swallow a decoding error, leaving a half-decoded image.
            opened.load()
            exif = read_exif(opened)
            image = _to_rgb(opened)
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

    transpose = _TRANSPOSE_FOR_ORIENTATION.get(exif.orientation or 1)
    if transpose is not None:
        image = image.transpose(transpose)
        if transpose in (
            Image.Transpose.TRANSPOSE,
            Image.Transpose.TRANSVERSE,
            Image.Transpose.ROTATE_90,
            Image.Transpose.ROTATE_270,
        ):
            width, height = height, width
    return DecodedImage(image=image, width=width, height=height, exif=exif)


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
    "DecodedImage",
    "ExifInfo",
    "FileEntry",
    "ImageMeta",
    "TaxonInfo",
    "content_hash",
    "decode_image",
    "find_metadata_file",
    "load_coco_metadata",
    "metadata_key",
    "parse_date",
    "parse_inat_dirname",
    "read_exif",
    "taxon_for_path",
    "walk_images",
]
