"""Photos written by an INQUIRE-Rerank import get a normal file's mode (0644 under a 022
umask), not a temporary file's private 0600: the collection is read by colleagues too."""

from __future__ import annotations

import io
import os
import stat
from collections.abc import Iterator

import pytest
from PIL import Image

from engine.benchmarks.inquire_rerank import _write_photo


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def jpeg() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (64, 48), (200, 40, 40)).save(buffer, "JPEG")
    return buffer.getvalue()


@pytest.mark.skipif(os.name == "nt", reason="POSIX modes")
def test_an_imported_photo_is_readable_by_others(tmp_path, umask_022) -> None:
    target = tmp_path / "collection" / "train" / "1.jpg"
    written, width, height = _write_photo(target, jpeg())
    assert written and (width, height) == (64, 48)
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert [p.name for p in target.parent.iterdir()] == ["1.jpg"]  # no temporary file left


def test_a_photo_that_does_not_decode_is_not_put_in_place(tmp_path) -> None:
    from engine.errors import BadImageError

    target = tmp_path / "2.jpg"
    with pytest.raises(BadImageError):
        _write_photo(target, b"not a jpeg at all")
    assert list(tmp_path.iterdir()) == []
