"""Decoding one photo safely for an encoder, and reading its EXIF.

- `decode_image` opens one photo: bad files become `BadImageError` with a short reason, huge
  images are refused from their header before any pixels are decoded, and the decodes of all
  threads together stay within a memory budget (`DecodeBudget`).
- `read_exif` (from `engine.indexing.exif`) reads the capture time, GPS, camera and orientation.
- `IMAGE_EXTENSIONS`: the file names the formats decoded here go by: JPEG, PNG, WebP, TIFF (its
  first frame), GIF, HEIC/HEIF and Fujifilm's HIF (pillow-heif), AVIF (Pillow's own plugin,
  where it was built with libavif) and camera RAW (rawpy/LibRaw; `decode_raw`).

Nothing here changes PIL settings that decoding reads per call (the pixel limit, truncated
images), so decoding can run in a thread pool; only Pillow's memory block size is raised, once.
"""

from __future__ import annotations

import logging
import os
import re
import stat
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from PIL import Image, UnidentifiedImageError

from engine.errors import BadImageError
from engine.indexing.exif import ExifInfo, read_exif
from engine.indexing.raw import RAW_AVAILABLE, RAW_EXTENSIONS, decode_raw

log = logging.getLogger(__name__)

# HEIC/HEIF and camera RAW are default dependencies (phones and cameras write them); the guards
# only keep an install where a platform had no wheel for one of them working for the rest.
try:
    import pillow_heif

    pillow_heif.register_heif_opener()
    HEIF_AVAILABLE = True
except ImportError:
    HEIF_AVAILABLE = False


def _avif_available() -> bool:
    """Whether this Pillow decodes AVIF (its own plugin, Pillow 11.2 and later with libavif)."""
    try:
        from PIL import features

        return bool(features.check("avif"))
    except (ImportError, ValueError):  # an older Pillow: "Unknown feature"
        return False


AVIF_AVAILABLE = _avif_available()

# The file names the walk takes for photos: those of the formats decoded here. `.hif` is
# Fujifilm's name for the HEIF its cameras write.
IMAGE_EXTENSIONS: frozenset[str] = frozenset(
    {".jpg", ".jpeg", ".png", ".webp", ".tif", ".tiff", ".gif"}
    | ({".heic", ".heif", ".hif"} if HEIF_AVAILABLE else set())
    | ({".avif"} if AVIF_AVAILABLE else set())
    | (RAW_EXTENSIONS if RAW_AVAILABLE else set())
)

# Where PIL's own default refusal starts (2 x Image.MAX_IMAGE_PIXELS), ~13,400 x 13,400.
DEFAULT_MAX_PIXELS: int = 178_956_970

# PIL formats decode_image accepts, whatever the file's extension says. Restricting the list
# keeps PIL from handing odd files to plugins such as EPS, which would run Ghostscript.
# "JPEG" also covers MPO, the multi-picture JPEG many cameras write under a .jpg name.
_ALLOWED_FORMATS: tuple[str, ...] = (
    ("JPEG", "PNG", "WEBP", "TIFF", "GIF")
    + (("HEIF",) if HEIF_AVAILABLE else ())
    + (("AVIF",) if AVIF_AVAILABLE else ())
)


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
    _check_file(path)
    _ensure_pil_plugins()
    if RAW_AVAILABLE and path.suffix.lower() in RAW_EXTENSIONS:
        # LibRaw, not PIL: a DNG or NEF is a TIFF to PIL, which would show its thumbnail.
        decoded = decode_raw(path, max_pixels, min_side, budget or _default_budget)
        return DecodedImage(decoded.image, decoded.width, decoded.height, decoded.exif)
    try:
        image, width, height, exif = _decode_with_pil(
            path, max_pixels, min_side, budget or _default_budget
        )
    except BadImageError:
        raise
    except Exception as exc:  # MemoryError too; never KeyboardInterrupt or SystemExit
        raise _pil_failure(exc, max_pixels) from None
    if exif.orientation in _SIDEWAYS:
        width, height = height, width
    return DecodedImage(image=image, width=width, height=height, exif=exif)


def _check_file(path: Path) -> None:
    """A regular, non-empty file, or `BadImageError` saying what it is."""
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


def _decode_with_pil(
    path: Path, max_pixels: int, min_side: int | None, budget: DecodeBudget
) -> tuple[Image.Image, int, int, ExifInfo]:
    """PIL's decode of `path` (see `decode_image`): the RGB image turned upright, the full
    width and height as stored, and the EXIF read. PIL's own errors are the caller's."""
    with Image.open(path, formats=_ALLOWED_FORMATS) as opened:
        width, height = opened.size
        if width <= 0 or height <= 0:
            raise BadImageError("corrupt image data (zero size)")
        if width * height > max_pixels:
            raise BadImageError(f"image too large: {width}x{height} pixels (limit {max_pixels:,})")
        if min_side is not None and opened.format in ("JPEG", "MPO"):
            opened.draft("RGB", (min_side, min_side))  # the DCT decodes at 1/2 to 1/8
        factor = _reduce_factor(opened.size, min_side)
        cost = _decode_cost(opened.mode, opened.size, factor)
        with budget.reserve(cost):
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
    return image, width, height, exif


def _pil_failure(exc: Exception, max_pixels: int) -> BadImageError:
    """What a failure of PIL's decode means, in a short reason."""
    if isinstance(exc, Image.DecompressionBombError):
        # PIL refused it in Image.open, before we could read the size ourselves.
        match = _BOMB_PIXELS_RE.search(str(exc))
        pixels = f"{int(match.group(1)):,} pixels" if match else "too many pixels"
        pil_limit = Image.MAX_IMAGE_PIXELS
        limit = max_pixels if pil_limit is None else min(max_pixels, 2 * pil_limit)
        return BadImageError(f"image too large: {pixels} (limit {limit:,})")
    if isinstance(exc, UnidentifiedImageError):
        return BadImageError("not an image file")
    if isinstance(exc, FileNotFoundError):
        return BadImageError("file not found")
    if isinstance(exc, PermissionError):
        return BadImageError("cannot read file: permission denied")
    if isinstance(exc, MemoryError):
        return BadImageError("image too large to decode")
    if isinstance(exc, OSError):
        message = str(exc)
        if "truncated" in message:
            return BadImageError("truncated image data")
        if "mode" in message:
            return BadImageError(f"unsupported image mode ({message})")
        return BadImageError(f"corrupt image data ({message or type(exc).__name__})")
    if isinstance(exc, ValueError):
        # PIL raises ValueError for conversions it does not support, and for bad parameters.
        return BadImageError(f"unsupported image data ({exc})")
    # SyntaxError, struct.error, IndexError... from damaged files
    return BadImageError(f"corrupt image data ({type(exc).__name__}: {exc})")


# EXIF orientations that turn the photo by a quarter: its width and height swap.
_SIDEWAYS = frozenset({5, 6, 7, 8})


def _oriented(image: Image.Image, orientation: int | None) -> Image.Image:
    """`image` turned upright as its EXIF orientation says."""
    transpose = _TRANSPOSE_FOR_ORIENTATION.get(orientation or 1)
    return image if transpose is None else image.transpose(transpose)
