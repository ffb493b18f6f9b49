"""Licences in Darwin Core exports: iNaturalist's licence names resolve, so every Creative
Commons photo is written without --include-restricted, as its URI; CC0 is the dedication,
never the Public Domain Mark; the dataset's licence is one GBIF takes; and `search --license`
finds exactly the photos the export calls by that licence."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from xml.etree import ElementTree as ET

from dwca.read import DwCAReader

from app.cli import main
from engine.catalog.library import Library
from engine.indexing.indexer import Indexer
from engine.io.dwc import export_dwca
from engine.judgments.queries import QueryStore
from engine.licences import read_licence
from tests.test_exif_camera import camera_jpeg

DC = "http://purl.org/dc/terms/"
# iNaturalist's licence list as its COCO-style exports give it: names in words, some with a URL.
INAT_LICENCES = [
    (1, "Attribution-NonCommercial-ShareAlike License", "http://creativecommons.org/licenses/by-nc-sa/4.0/"),
    (2, "Attribution-NonCommercial License", "http://creativecommons.org/licenses/by-nc/4.0/"),
    (3, "Attribution-NonCommercial-NoDerivs License", None),
    (4, "Attribution License", None),
    (5, "Attribution-ShareAlike License", "http://creativecommons.org/licenses/by-sa/4.0/"),
    (6, "Attribution-NoDerivs License", None),
    (7, "Public Domain Dedication", "http://creativecommons.org/publicdomain/zero/1.0/"),
    (8, "Creative Commons Attribution 4.0 International", None),
    (9, "Public Domain Dedication", None),
    (10, "All Rights Reserved", None),
]  # fmt: skip
CC_PHOTOS = 9


def test_nine_cc_photos_of_an_inat_export_are_written_with_their_uris(
    tmp_path, demo_encoder, capsys
):
    photos = tmp_path / "photos"
    images = []
    for licence_id, _, _ in INAT_LICENCES:
        name = f"photo{licence_id}.jpg"
        camera_jpeg(photos / name, original="2023:05:01 10:00:00", color=(licence_id * 20, 9, 9))
        images.append({"id": licence_id, "file_name": name, "license": licence_id,
                       "latitude": 50.0, "longitude": 4.0})  # fmt: skip
    licences = [{"id": i, "name": n, **({"url": u} if u else {})} for i, n, u in INAT_LICENCES]
    (photos / "metadata.json").write_text(
        json.dumps({"images": images, "licenses": licences}), encoding="utf-8"
    )
    root = tmp_path / "lib"
    with Library.open(root) as library:
        assert Indexer(library, demo_encoder).run(photos).indexed == len(INAT_LICENCES)
        store = QueryStore(library, user="Ada")
        query_id = store.find_or_create_query("photo")
        for image_id in range(1, len(INAT_LICENCES) + 1):
            store.judge(query_id, image_id, 1)
        out = tmp_path / "records.zip"
        report = export_dwca(library, query_id, out)
    assert report.written == CC_PHOTOS
    assert [p.reason for p in report.restricted] == ["licence: All Rights Reserved"]
    by_file: dict[str, str] = {}
    with DwCAReader(str(out)) as dwca:
        for row in dwca:
            media = row.extensions[0].data
            assert media[DC + "license"] == row.data[DC + "license"]
            by_file[media[DC + "identifier"].rsplit("/", 1)[1]] = media[DC + "license"]
    assert all(uri.startswith("http://creativecommons.org/") for uri in by_file.values())
    zero = "http://creativecommons.org/publicdomain/zero/1.0/legalcode"
    assert by_file["photo7.jpg"] == by_file["photo9.jpg"] == zero  # CC0, never the mark
    assert by_file["photo4.jpg"] == "http://creativecommons.org/licenses/by/4.0/legalcode"
    assert by_file["photo3.jpg"] == "http://creativecommons.org/licenses/by-nc-nd/4.0/legalcode"
    # The dataset's licence respects the non-commercial photos and is one GBIF takes.
    link = ET.fromstring(zipfile.ZipFile(out).read("eml.xml")).find(
        "dataset/intellectualRights/para/ulink"
    )
    assert link is not None
    assert read_licence(link.get("url")).code == "CC-BY-NC-4.0"
    assert read_licence(link.get("url")).gbif_dataset_licence

    # `search --license cc-by` and the export agree on which photos are CC BY (and so on).
    for family in ("cc-by", "cc0", "cc-by-nc", "cc-by-nc-nd"):
        exported = {name for name, uri in by_file.items() if read_licence(uri).family == family}
        assert exported, family
        assert _search_paths(root, family, capsys) == exported, family


def _search_paths(root: Path, family: str, capsys) -> set[str]:
    capsys.readouterr()
    assert main(["search", "photo", "--license", family, "--top", "50", "--json",
                 "--library", str(root)]) == 0  # fmt: skip
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]
    return {Path(line["path"]).name for line in lines}
