"""A disk cache of thumbnails keyed by the photo's content hash (PIL only, no Qt).

A thumbnail is a small JPEG of the upright photo (EXIF orientation applied), at most `size`
pixels on its longer side. The key is the content hash the catalog already stores, so a renamed
or moved photo keeps its thumbnail and an edited one gets a new one. Files are written to a
temporary name and renamed into place, so a crash never leaves a half-written thumbnail, and
several threads may create thumbnails at once.

The GUI turns the bytes into a `QImage` in a worker thread; the engine never sees Qt.
"""

from __future__ import annotations

import errno
import io
import logging
import re
import shutil
import threading
from pathlib import Path

from PIL import Image

from engine.errors import BadImageError
from engine.files import atomic_write_bytes
from engine.indexing.decode import decode_image
from engine.indexing.hashes import content_hash

log = logging.getLogger(__name__)

DEFAULT_THUMBNAIL_SIZE = 256
_JPEG_QUALITY = 85
_HASH_RE = re.compile(r"[0-9a-f]{8,128}\Z")


class ThumbnailCache:
    """Thumbnails of one size in `folder/<size>/<hash[:2]>/<hash>.jpg`.

    A thumbnail that cannot be written (a full or read-only disk) is still returned; the
    cache says why once, in `write_problem` and one log line, until a write succeeds again.
    """

    def __init__(self, folder: str | Path, size: int = DEFAULT_THUMBNAIL_SIZE) -> None:
        if size < 16:
            raise ValueError(f"thumbnail size must be at least 16 pixels, not {size}")
        self.folder = Path(folder)
        self.size = size
        self.write_problem: str | None = None  # one line for the user, while writes fail
        self._lock = threading.Lock()  # several loader threads store at once

    def path_for(self, digest: str) -> Path:
        """Where the thumbnail of the photo with content hash `digest` is (or will be) stored."""
        digest = digest.lower()
        if not _HASH_RE.match(digest):
            # The key becomes a file name: refuse anything that is not a plain hex digest.
            raise ValueError(f"not a content hash: {digest!r}")
        return self.folder / str(self.size) / digest[:2] / f"{digest}.jpg"

    def get(self, digest: str) -> bytes | None:
        """The cached JPEG bytes, or None when not cached yet."""
        try:
            return self.path_for(digest).read_bytes()
        except FileNotFoundError:
            return None

    def get_or_create(self, source: str | Path, digest: str | None = None) -> bytes:
        """JPEG bytes of the thumbnail of `source`, made and cached on first use.

        `digest` is the photo's content hash when the catalog knows it (saves reading the
        file twice). Raises `BadImageError` for a photo that cannot be decoded.
        """
        source = Path(source)
        if digest is None:
            try:
                digest = content_hash(source)
            except FileNotFoundError:
                raise BadImageError("file not found") from None
            except OSError as exc:
                raise BadImageError(f"cannot read file: {exc.strerror or exc}") from None
        cached = self.get(digest)
        if cached is not None:
            return cached
        data = make_thumbnail(source, self.size)
        self._store(digest, data)
        return data

    def _store(self, digest: str, data: bytes) -> None:
        target = self.path_for(digest)
        try:
            # Temporary file, then rename: a failed write never leaves a truncated thumbnail.
            atomic_write_bytes(target, data)
        except OSError as exc:
            # A read-only or full disk costs speed, not the thumbnail itself: it is returned
            # all the same. Said once per spell of failures, not once per photo.
            problem = thumbnail_write_problem(exc, self.folder, len(data))
            with self._lock:
                first = self.write_problem is None  # the free space may differ each time
                self.write_problem = problem
            if first:
                log.warning("%s", problem)
            log.debug("cannot cache thumbnail %s: %s", target, exc)
            return
        if self.write_problem is not None:
            with self._lock:
                self.write_problem = None
            log.info("thumbnails are saved in %s again", self.folder)

    def clear(self) -> int:
        """Delete every cached thumbnail of this size; returns how many were deleted."""
        removed = 0
        for path in (self.folder / str(self.size)).glob("*/*.jpg"):
            path.unlink(missing_ok=True)
            removed += 1
        return removed


# Quota exceeded (EDQUOT) is not defined on every platform.
_DISK_FULL = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC), errno.EFBIG}
_NOTHING_LOST = "nothing was lost: photos, judgments and the catalog are untouched"


def thumbnail_write_problem(exc: OSError, folder: Path, needed: int) -> str:
    """One line for a thumbnail that could not be saved: the folder, the cause (with the space
    needed and free on a full disk, where known) and that nothing was lost."""
    where = f"thumbnails cannot be saved in {folder}"
    if exc.errno in _DISK_FULL:
        free = _free_bytes(folder)
        space = f" (needs {_size(needed)}, {_size(free)} free)" if free is not None else ""
        cause = f"the disk is full{space}"
    elif exc.errno == errno.EROFS:
        cause = "the disk is read-only"
    elif exc.errno in (errno.EACCES, errno.EPERM):
        cause = "no permission to write there"
    else:
        cause = " ".join(str(exc.strerror or exc).split())
    return f"{where}: {cause}; {_NOTHING_LOST}, and thumbnails are made again when shown"


def _free_bytes(folder: Path) -> int | None:
    """Free bytes on the disk holding `folder` (or its nearest existing parent); None if
    unknown."""
    for candidate in (folder, *folder.parents):
        if candidate.exists():
            try:
                return shutil.disk_usage(candidate).free
            except OSError:
                return None
    return None


def _size(n: int) -> str:
    """A byte count as people read it: "812 bytes", "14.2 KB", "3.0 MB"."""
    if n < 1024:
        return f"{n} bytes"
    value = n / 1024
    for unit in ("KB", "MB"):
        if value < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GB"


def make_thumbnail(source: str | Path, size: int = DEFAULT_THUMBNAIL_SIZE) -> bytes:
    """JPEG bytes of `source`, upright, at most `size` pixels on its longer side."""
    image = load_preview(source, size)
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=_JPEG_QUALITY, optimize=True)
    return buffer.getvalue()


def load_preview(source: str | Path, max_side: int) -> Image.Image:
    """The photo as an RGB PIL image, upright, shrunk to at most `max_side` on its longer side.

    Raises `BadImageError` for a photo that cannot be decoded.
    """
    if max_side < 1:
        raise ValueError(f"max_side must be positive, not {max_side}")
    # JPEG can decode at a reduced scale directly: ask for at least max_side on the short side.
    image = decode_image(Path(source), min_side=max_side).image
    if max(image.size) > max_side:
        image.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
    return image
