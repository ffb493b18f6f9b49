"""An iNaturalist-format collection of six photos whose places must be published with care,
indexed into a library with every photo judged relevant: what the place-publishing export tests
(Darwin Core, the results CSV, the analyses, photo copies, GeoJSON) share."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from PIL import ExifTags, Image
from sqlalchemy import select

from engine.catalog import Image as CatalogImage
from engine.catalog.library import Library
from engine.catalog.privacy import ACTION_GENERALISE, checked_rule, set_sensitive_taxa
from engine.indexing.indexer import Indexer
from engine.judgments.queries import QueryStore
from engine.models.encoders import Encoder
from tests.test_exif_camera import camera_jpeg

CAMERA_GPS = (51.123456, 4.654321)  # where every photo's camera says it was
QUERY = "toads and lynx"
TOAD = {"id": 1, "name": "Bufo bufo", "kingdom": "Animalia", "phylum": "Chordata",
        "class": "Amphibia", "order": "Anura", "family": "Bufonidae", "genus": "Bufo"}  # fmt: skip
LYNX = {"id": 2, "name": "Lynx lynx", "kingdom": "Animalia", "phylum": "Chordata",
        "class": "Mammalia", "order": "Carnivora", "family": "Felidae", "genus": "Lynx"}  # fmt: skip


def inat_places(root: Path) -> Path:
    """Photos with EXIF GPS and an iNaturalist-format metadata file (COCO shape, licences by
    name): an open record, one whose coordinates are null (withheld), one obscured by
    iNaturalist (with its junk positional accuracy), a private one, a lynx (a sensitive taxon
    of the lab) and a PNG whose place is withheld."""
    for name in ("open.jpg", "nulled.jpg", "obscured.jpg", "private.jpg", "lynx.jpg"):
        camera_jpeg(root / name, original="2023:05:01 10:00:00", gps=CAMERA_GPS)
    exif = Image.Exif()
    exif.get_ifd(ExifTags.IFD.GPSInfo).update(
        {ExifTags.GPS.GPSLatitudeRef: "N", ExifTags.GPS.GPSLatitude: (51.0, 7.0, 24.0)}
    )
    Image.new("RGB", (64, 48), (20, 90, 160)).save(root / "nulled.png", exif=exif)
    images = [
        {"id": 1, "file_name": "open.jpg", "latitude": 50.5, "longitude": 4.5,
         "location_uncertainty": 30, "geoprivacy": "open"},
        {"id": 2, "file_name": "nulled.jpg", "latitude": None, "longitude": None},
        {"id": 3, "file_name": "obscured.jpg", "latitude": 50.71, "longitude": 4.33,
         "coordinates_obscured": True, "taxon_geoprivacy": "obscured",
         "positional_accuracy": 106_807_033, "public_positional_accuracy": 24_000},
        {"id": 4, "file_name": "private.jpg", "geoprivacy": "Private"},
        {"id": 5, "file_name": "lynx.jpg", "latitude": 47.1234, "longitude": 8.5678,
         "location_uncertainty": 10},
        {"id": 6, "file_name": "nulled.png", "latitude": None, "longitude": None},
    ]  # fmt: skip
    for image in images:
        image.update(license=1, rights_holder="Ada Field", date="2023-05-01 10:00:00+02:00")
    metadata = {
        "images": images,
        "licenses": [{"id": 1, "name": "Attribution License",
                      "url": "http://creativecommons.org/licenses/by/4.0/"}],
        "categories": [TOAD, LYNX],
        "annotations": [{"id": i, "image_id": i, "category_id": 2 if i == 5 else 1}
                        for i in range(1, 7)],
    }  # fmt: skip
    (root / "metadata.json").write_text(json.dumps(metadata), encoding="utf-8")
    return root


@dataclass
class Places:
    root: Path  # the library
    photos: Path
    query_id: int
    ids: dict[str, int]  # file name -> image id


def build_places(tmp_path: Path, encoder: Encoder) -> Places:
    """Six relevant photos judged by Ada: open, obscured by its record, a lynx (sensitive:
    generalised to a 10 km grid), and three whose places are withheld (null coordinates twice,
    private); the library at `tmp_path / "lib"`, the photos at `tmp_path / "photos"`."""
    photos = inat_places(tmp_path / "photos")
    root = tmp_path / "lib"
    with Library.open(root) as library:
        assert Indexer(library, encoder).run(photos).indexed == 6
        with library.catalog.session() as s:
            ids = {img.rel_path: img.id for img in s.scalars(select(CatalogImage))}
        store = QueryStore(library, user="Ada")
        query_id = store.find_or_create_query(QUERY)
        for image_id in ids.values():
            store.judge(query_id, image_id, 1)
        set_sensitive_taxa(library.catalog, [checked_rule("Lynx lynx", ACTION_GENERALISE, 10.0)])
    return Places(root, photos, query_id, ids)
