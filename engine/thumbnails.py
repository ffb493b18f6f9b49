"""A disk cache of thumbnails keyed by the photo's content hash (PIL only, no Qt).

A thumbnail is a small JPEG of the upright photo (EXIF orientation applied), at most `size`
pixels on its longer side. The key is the content hash the catalog already stores, so a renamed
or moved photo keeps its thumbnail and an edited one gets a new one. Files are written to a
temporary name and renamed into place, so a crash never leaves a half-written thumbnail, and
several threads may create thumbnails at once.

The GUI turns the bytes into a `QImage` in a worker thread; the engine never sees Qt.
"""

from __future__ import annotations

import io
import logging
import re
from pathlib import Path

from PIL import Image

from engine.errors import BadImageError
from engine.files import atomic_write_bytes
from engine.scan import content_hash, decode_image

log = logging.getLogger(__name__)

DEFAULT_THUMBNAIL_SIZE = 256
_JPEG_QUALITY = 85
_HASH_RE = re.compile(r"[0-9a-f]{8,128}\Z")


class ThumbnailCache:
    """Thumbnails of one size in `folder/<size>/<hash[:2]>/<hash>.jpg`."""

    def __init__(self, folder: str | Path, size: int = DEFAULT_THUMBNAIL_SIZE) -> None:
        if size < 16:
            raise ValueError(f"thumbnail size must be at least 16 pixels, not {size}")
        self.folder = Path(folder)
        self.size = size

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
            atomic_write_bytes(target, data)
        except OSError as exc:
            # A read-only or full disk costs speed, not the thumbnail itself.
            log.warning("cannot cache thumbnail in %s: %s", target.parent, exc)

    def clear(self) -> int:
        """Delete every cached thumbnail of this size; returns how many were deleted."""
        removed = 0
        for path in (self.folder / str(self.size)).glob("*/*.jpg"):
            path.unlink(missing_ok=True)
            removed += 1
        return removed


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
