"""Camera-trap frames in the shape of Camtrap DP 1.0's own example package (tdwg/camtrap-dp,
example/, tag 1.0): two of its Belgian deployments, Reconyx HF2X cameras whose EXIF gives the
capture time without a UTC offset.

- 00a2c20d, "B_HS_val 2_processiepark" (51.496, 4.774), camera 320: the example's first event
  (frames at 04:57:37, 04:57:40 and 04:57:44 local time on 2020-05-30; its observations.csv
  gives that event as 2020-05-30T02:57:37Z to 02:57:44Z, summer time +02:00), and the
  deployment's last frame, a blank, at 2020-07-01 11:41:41.
- 62c200a9, "B_DM_val 4_'t WAD" (50.699, 4.013), camera 315: its first and last frames, on
  2021-03-27 at 21:38:18 and on 2021-04-18 at 22:25:00 (the example's deployments.csv writes
  both with +01:00: a camera clock set in winter, kept across the change to summer time on
  28 March).

Every photo carries CC BY 4.0 (the example's media licence); the query "mallard" has the
example's event and the last frame of 62c200a9 judged relevant by alice.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import update

from engine.catalog import Image
from engine.catalog.library import Library
from engine.indexing.indexer import Indexer
from engine.judgments.queries import QueryStore
from tests.test_exif_camera import camera_jpeg

SUMMER = "B_HS_val 2_processiepark"
SPRING = "B_DM_val 4_'t WAD"
CC_BY = "http://creativecommons.org/licenses/by/4.0/"
MALLARD = "Anas platyrhynchos"
FRAMES = {
    f"{SUMMER}/20200709093328-RCNX0001.JPG": "2020:05:30 04:57:37",
    f"{SUMMER}/20200709093328-RCNX0002.JPG": "2020:05:30 04:57:40",
    f"{SUMMER}/20200709093328-RCNX0004.JPG": "2020:05:30 04:57:44",
    f"{SUMMER}/20200709093330-RCNX0120.JPG": "2020:07:01 11:41:41",
    f"{SPRING}/20210330103601-RCNX0001.JPG": "2021:03:27 21:38:18",
    f"{SPRING}/20210330103601-RCNX0063.JPG": "2021:04:18 22:25:00",
}
RELEVANT = (
    f"{SUMMER}/20200709093328-RCNX0001.JPG",
    f"{SUMMER}/20200709093328-RCNX0002.JPG",
    f"{SUMMER}/20200709093328-RCNX0004.JPG",
    f"{SPRING}/20210330103601-RCNX0063.JPG",
)
PLACES = {SUMMER: (51.496, 4.774), SPRING: (50.699, 4.013)}
SERIALS = {SUMMER: "320", SPRING: "315"}


@dataclass(frozen=True)
class Belgium:
    """A library of the example's frames, judged, and where its parts are."""

    root: Path  # the library folder
    photos: Path
    query_id: int
    ids: dict[str, int]  # rel path -> image id


def write_frames(folder: Path) -> Path:
    for rel, moment in FRAMES.items():
        deployment = rel.split("/")[0]
        camera_jpeg(
            folder / rel,
            original=moment,
            gps=PLACES[deployment],
            make="RECONYX",
            model="HF2X",
            serial=SERIALS[deployment],
        )
    return folder


def build(root: Path, encoder: object, database_url: str | None = None) -> Belgium:
    photos = write_frames(root / "photos")
    with Library.open(root / "lib", database_url=database_url) as library:
        Indexer(library, encoder).run(photos)  # type: ignore[arg-type]
        with library.catalog.session() as s:
            s.execute(update(Image).values(license=CC_BY))
            ids = {rel: image_id for image_id, rel in s.query(Image.id, Image.rel_path)}
        store = QueryStore(library, user="alice")
        query_id = store.find_or_create_query("mallard")
        for rel in RELEVANT:
            store.judge(query_id, ids[rel], 1)
    return Belgium(root / "lib", photos, query_id, ids)


def copy_of(template: Belgium, folder: Path) -> Belgium:
    """A copy of the library to change (sensitive taxa, judges, licences)."""
    shutil.copytree(template.root, folder)
    return Belgium(folder, template.photos, template.query_id, template.ids)
