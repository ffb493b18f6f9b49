"""HEIC photos (phones' default format) are indexed when pillow-heif is installed."""

from __future__ import annotations

import pytest

pillow_heif = pytest.importorskip("pillow_heif")

from PIL import Image  # noqa: E402

from engine.catalog.library import Library  # noqa: E402
from engine.indexing.decode import decode_image  # noqa: E402
from engine.indexing.indexer import Indexer  # noqa: E402
from engine.indexing.walk import walk_images  # noqa: E402


def test_heic_files_are_listed_decoded_and_indexed(tmp_path, demo_encoder):
    pillow_heif.register_heif_opener()
    folder = tmp_path / "phone"
    folder.mkdir()
    Image.new("RGB", (64, 48), (200, 20, 20)).save(folder / "IMG_0001.HEIC")
    Image.new("RGB", (64, 48), (20, 20, 200)).save(folder / "IMG_0002.heif")

    assert [e.rel_path for e in walk_images(folder)] == ["IMG_0001.HEIC", "IMG_0002.heif"]
    decoded = decode_image(folder / "IMG_0001.HEIC")
    assert (decoded.width, decoded.height) == (64, 48)
    r, g, b = decoded.image.getpixel((10, 10))
    assert r > 150 and g < 60 and b < 60
    with Library.open(tmp_path / "lib") as lib:
        report = Indexer(lib, demo_encoder).run(folder)
    assert report.indexed == 2 and report.skipped == []


def test_fujifilm_hif_and_avif_are_listed_decoded_and_indexed(tmp_path, demo_encoder):
    from PIL import features

    if not features.check("avif"):
        pytest.skip("this Pillow was built without AVIF")
    pillow_heif.register_heif_opener()
    folder = tmp_path / "camera"
    folder.mkdir()
    Image.new("RGB", (64, 48), (200, 20, 20)).save(folder / "DSCF0001.HIF", format="HEIF")
    Image.new("RGB", (64, 48), (20, 20, 200)).save(folder / "export.avif")

    assert [e.rel_path for e in walk_images(folder)] == ["DSCF0001.HIF", "export.avif"]
    r, g, b = decode_image(folder / "export.avif").image.getpixel((10, 10))
    assert b > 150 and r < 60 and g < 60
    r, g, b = decode_image(folder / "DSCF0001.HIF").image.getpixel((10, 10))
    assert r > 150 and g < 60 and b < 60
    with Library.open(tmp_path / "lib") as lib:
        report = Indexer(lib, demo_encoder).run(folder)
    assert report.indexed == 2 and report.skipped == []
