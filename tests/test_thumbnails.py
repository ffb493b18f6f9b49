"""The thumbnail disk cache: upright, bounded size, keyed by content, atomic, bad files refused."""

from __future__ import annotations

import errno
import io
import re
from pathlib import Path

import pytest
from PIL import Image

from engine.errors import BadImageError
from engine.indexing.hashes import content_hash
from engine.indexing.thumbnails import ThumbnailCache, load_preview, make_thumbnail
from tests.small_disk import small_tmpfs


def write_photo(path: Path, size: tuple[int, int], orientation: int | None = None) -> Path:
    image = Image.new("RGB", size, (200, 40, 40))
    # A blue band on the left edge shows where "left" ends up after orientation.
    image.paste((30, 30, 220), (0, 0, size[0] // 4, size[1]))
    exif = Image.Exif()
    if orientation:
        exif[0x0112] = orientation
    image.save(path, format="JPEG", quality=95, exif=exif.tobytes())
    return path


def decode(data: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(data))
    image.load()
    return image


def files_under(folder: Path) -> list[Path]:
    """Every file below `folder`, hidden ones included (temporary files start with a dot)."""
    return sorted(p for p in folder.rglob("*") if p.is_file())


def test_thumbnail_fits_the_size_and_keeps_the_aspect(tmp_path: Path) -> None:
    photo = write_photo(tmp_path / "wide.jpg", (1200, 600))
    thumb = decode(make_thumbnail(photo, 256))
    assert thumb.format == "JPEG"
    assert thumb.size == (256, 128)


def test_exif_orientation_is_applied(tmp_path: Path) -> None:
    # Orientation 6: the camera was turned; the stored 400x200 photo is shown 200x400.
    photo = write_photo(tmp_path / "turned.jpg", (400, 200), orientation=6)
    thumb = decode(make_thumbnail(photo, 100))
    assert thumb.size == (50, 100)
    r, g, b = thumb.convert("RGB").getpixel((25, 5))
    assert b > 150 and r < 100  # the blue band is now along the top
    assert load_preview(photo, 1000).size == (200, 400)


def test_cache_is_keyed_by_content_and_reused(tmp_path: Path) -> None:
    cache = ThumbnailCache(tmp_path / "cache", size=64)
    photo = write_photo(tmp_path / "a.jpg", (300, 300))
    digest = content_hash(photo)
    assert cache.get(digest) is None
    data = cache.get_or_create(photo, digest)
    stored = cache.path_for(digest)
    assert stored.read_bytes() == data
    assert stored.relative_to(tmp_path / "cache").parts[:2] == ("64", digest[:2])
    # A renamed copy of the same photo finds the same thumbnail without decoding again.
    renamed = photo.rename(tmp_path / "b.jpg")
    stored.write_bytes(b"marker")
    assert cache.get_or_create(renamed) == b"marker"
    # Written atomically: the folder holds the thumbnail and nothing else (no temporary file).
    assert files_under(tmp_path / "cache") == [stored]
    assert cache.clear() == 1
    assert cache.get(digest) is None


def test_bad_files_raise_with_a_reason(tmp_path: Path) -> None:
    cache = ThumbnailCache(tmp_path / "cache")
    broken = tmp_path / "broken.jpg"
    broken.write_text("not a photo")
    with pytest.raises(BadImageError, match="not an image"):
        cache.get_or_create(broken)
    with pytest.raises(BadImageError, match="not found"):
        cache.get_or_create(tmp_path / "missing.jpg")
    assert files_under(tmp_path / "cache") == []


def test_keys_that_are_not_hashes_are_refused(tmp_path: Path) -> None:
    cache = ThumbnailCache(tmp_path)
    with pytest.raises(ValueError, match="not a content hash"):
        cache.path_for("../../etc/passwd")


def fill_disk(folder: Path) -> Path:
    """Write a file into `folder` until its disk is full; returns the file."""
    filler = folder / "filler.bin"
    with filler.open("wb", buffering=0) as handle:
        try:
            while True:
                handle.write(b"\0" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    return filler


def test_a_full_disk_costs_no_thumbnail_and_says_so_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Noise: thumbnails of tens of KB, more than a full disk has room for.
    photos = [tmp_path / f"noise{number}.jpg" for number in range(2)]
    for photo in photos:
        Image.effect_noise((400, 400), 80).convert("RGB").save(photo, quality=95)
    with small_tmpfs(tmp_path / "small-disk", "256k") as disk:
        cache = ThumbnailCache(disk / "thumbnails")
        filler = fill_disk(disk)
        with caplog.at_level("WARNING", logger="engine.indexing.thumbnails"):
            thumbs = [cache.get_or_create(photo) for photo in photos]
        # The thumbnails are shown all the same, and the cache keeps no truncated file.
        assert all(decode(data).size == (256, 256) for data in thumbs)
        assert [p for p in files_under(disk) if p != filler] == []
        problem = cache.write_problem or ""
        assert str(disk / "thumbnails") in problem and "the disk is full (needs " in problem
        assert "free)" in problem and "nothing was lost" in problem
        warnings = [
            r.getMessage() for r in caplog.records if r.name == "engine.indexing.thumbnails"
        ]
        # One line for the spell, not one per photo. `write_problem` follows the latest
        # failure, whose space needed may differ from the first (random noise compresses
        # differently), so the two are compared without the sizes.
        assert len(warnings) == 1
        assert re.sub(r"[\d.]+ (KB|MB|bytes)", "N", warnings[0]) == re.sub(
            r"[\d.]+ (KB|MB|bytes)", "N", problem
        )
        # Space freed: the next thumbnail is stored and the problem is over.
        filler.unlink()
        digest = content_hash(photos[0])
        assert cache.get_or_create(photos[0], digest) == cache.path_for(digest).read_bytes()
        assert cache.write_problem is None
