"""Analyses of a found set: counts by month, day of year, hour, taxon and place, checked against
counts worked out by hand; the CSV files and charts on disk; `quadrat analyses`."""

from __future__ import annotations

import csv
import dataclasses
import errno
import os
from datetime import datetime
from pathlib import Path

import pytest
from PIL import Image as PILImage

from engine.catalog.reads import PhotoDetails
from engine.errors import QuadratError
from engine.io.analyses import analyse_photos, csv_files, place_of, write_analyses


def _photo(image_id: int, **values: object) -> PhotoDetails:
    """A PhotoDetails with only the given fields set (the rest None or empty)."""
    empty: dict[str, object] = {}
    for f in dataclasses.fields(PhotoDetails):
        default = None if f.default is dataclasses.MISSING else f.default
        empty[f.name] = () if f.name == "lineage" else default
    empty.update(image_id=image_id, path=f"/p/{image_id}.jpg", rel_path=f"{image_id}.jpg")
    empty.update(values)
    return PhotoDetails(**empty)  # type: ignore[arg-type]


HAND_PHOTOS = [
    # 2021-03-15 is day 74 of 2021; 51.2 N 0.7 W lies in the cell 51..52 N, 1..0 W
    _photo(1, observed_at=datetime(2021, 3, 15, 6, 30), latitude=51.2, longitude=-0.7,
           taxon="Bellis perennis", common_name="daisy"),
    # day 79; the same cell
    _photo(2, observed_at=datetime(2021, 3, 20, 6, 59, 59), latitude=51.9, longitude=-0.1,
           taxon="Bellis perennis", common_name="daisy"),
    # day 74 of another year, at 18:00
    _photo(3, observed_at=datetime(2022, 3, 15, 18, 0), latitude=-33.9, longitude=18.4,
           taxon="Salvia"),
    # a date without a time (stored at midnight); the 366th day of a leap year; longitude 180
    _photo(4, observed_at=datetime(2024, 12, 31), latitude=0.0, longitude=180.0, taxon="Salvia"),
    # nothing known
    _photo(5),
]  # fmt: skip


def _rows(data: bytes) -> list[list[str]]:
    return list(csv.reader(data.decode("utf-8").splitlines()))


def test_counts_by_hand() -> None:
    a = analyse_photos(HAND_PHOTOS)
    assert a.relevant == 5
    assert dict(a.by_month) == {(2021, 3): 2, (2022, 3): 1, (2024, 12): 1}
    assert dict(a.by_day) == {(2021, 74): 1, (2021, 79): 1, (2022, 74): 1, (2024, 366): 1}
    assert dict(a.by_hour) == {6: 2, 18: 1}
    assert (a.no_date, a.no_time, a.no_taxon, a.no_place) == (1, 2, 1, 1)
    assert dict(a.by_taxon) == {("Bellis perennis", "daisy"): 2, ("Salvia", ""): 2}
    assert {p.name: n for p, n in a.by_place.items()} == {
        "51.5°N 0.5°W": 2,
        "33.5°S 18.5°E": 1,
        "0.5°N 179.5°E": 1,
    }
    assert a.summary() == (
        "5 relevant photos: 4 dated, 3 with a time of day, 4 with a taxon, 4 with a place"
    )


def test_place_cells_at_the_edges() -> None:
    assert place_of(90.0, 180.0).name == "89.5°N 179.5°E"
    assert place_of(-90.0, -180.0).name == "89.5°S 179.5°W"
    assert place_of(-0.1, -0.1).name == "0.5°S 0.5°W"


def test_csv_files_by_hand() -> None:
    files = csv_files(analyse_photos(HAND_PHOTOS))
    assert _rows(files["phenology_month.csv"]) == [
        ["year", "month", "photos"],
        ["2021", "3", "2"],
        ["2022", "3", "1"],
        ["2024", "12", "1"],
    ]
    assert _rows(files["phenology_day.csv"])[1:] == [
        ["2021", "74", "1"],
        ["2021", "79", "1"],
        ["2022", "74", "1"],
        ["2024", "366", "1"],
    ]
    diel = _rows(files["diel.csv"])
    assert len(diel) == 25  # every hour, zeros included
    assert {int(h): int(n) for h, n in diel[1:] if int(n)} == {6: 2, 18: 1}
    assert _rows(files["taxa.csv"])[1:] == [
        ["Bellis perennis", "daisy", "2"],
        ["Salvia", "", "2"],
    ]
    assert _rows(files["places.csv"])[1] == ["51.5°N 0.5°W", "51.5", "-0.5", "2"]
    assert dict(_rows(files["summary.csv"])[1:]) == {
        "relevant": "5",
        "no_date": "1",
        "no_time_of_day": "2",
        "no_taxon": "1",
        "no_place": "1",
        "place_withheld": "0",
    }


def test_places_are_counted_as_they_may_be_published() -> None:
    from engine.catalog.privacy import ACTION_WITHHOLD, PlaceFacts, PlacePolicy, SensitiveRule

    photos = [
        _photo(1, latitude=51.2, longitude=-0.7, place_privacy=PlaceFacts(geoprivacy="private")),
        _photo(2, latitude=51.2, longitude=-0.7, taxon="Lynx lynx"),
        _photo(3, latitude=51.2, longitude=-0.7, taxon="Bellis perennis"),
    ]
    records_only = analyse_photos(photos)
    assert (records_only.no_place, records_only.withheld_place) == (1, 1)
    assert sum(records_only.by_place.values()) == 2
    lab = analyse_photos(photos, PlacePolicy([SensitiveRule("Lynx lynx", ACTION_WITHHOLD)]))
    assert (lab.no_place, lab.withheld_place) == (2, 2)
    assert dict(lab.by_place) == {place_of(51.2, -0.7): 1}
    assert lab.summary().endswith("1 with a place (2 withheld)")
    assert ["place_withheld", "2"] in _rows(csv_files(lab)["summary.csv"])


def test_a_taxon_name_is_never_a_formula() -> None:
    files = csv_files(analyse_photos([_photo(1, taxon="=HYPERLINK(1)")]))
    assert _rows(files["taxa.csv"])[1][0] == "'=HYPERLINK(1)"


def test_written_files_and_charts(tmp_path: Path) -> None:
    written = write_analyses(analyse_photos(HAND_PHOTOS), tmp_path / "out", "daisies")
    names = sorted(p.name for p in written)
    assert names == sorted(
        [
            "phenology_month.csv", "phenology_day.csv", "diel.csv", "taxa.csv", "places.csv",
            "summary.csv", "phenology_month.png", "phenology_week.png", "diel.png", "taxa.png",
            "places.png",
        ]
    )  # fmt: skip
    assert sorted(os.listdir(tmp_path / "out")) == names  # nothing else, no temporary files
    with PILImage.open(tmp_path / "out" / "diel.png") as chart:
        assert chart.format == "PNG" and chart.width >= 800
        # the 06 hour's bar is drawn: some pixels of the bar colour
        colours = {colour for _, colour in chart.convert("RGB").getcolors(1 << 16) or []}
        assert (46, 125, 50) in colours


def test_empty_found_set_writes_headers_and_empty_charts(tmp_path: Path) -> None:
    written = write_analyses(analyse_photos([]), tmp_path, "nothing")
    assert len(written) == 11
    assert (tmp_path / "taxa.csv").read_text(encoding="utf-8") == "taxon,common_name,photos\n"


def test_a_full_disk_fails_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The disk fills at the third file: one line saying where and why; the files before it
    are whole, and no half-written file or temporary file is left."""
    import engine.files
    from engine.io import analyses

    real_write = engine.files.atomic_write_bytes
    calls = []

    def filling(path: str | os.PathLike[str], data: bytes) -> None:
        calls.append(path)
        if len(calls) == 3:
            with engine.files.atomic_output(path) as (handle, _):
                handle.write(data[:5])
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_write(path, data)

    monkeypatch.setattr(analyses, "atomic_write_bytes", filling)
    with pytest.raises(QuadratError) as caught:
        write_analyses(analyse_photos(HAND_PHOTOS), tmp_path, "x", charts=False)
    message = str(caught.value)
    assert "\n" not in message and "the disk is full" in message and str(tmp_path) in message
    assert sorted(os.listdir(tmp_path)) == ["phenology_day.csv", "phenology_month.csv"]


def test_command_counts_a_query_s_relevant_photos(
    copy_small_demo_library, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Judge three photos relevant and one not; give them hand-set times and places; the
    command's files count the three."""
    from sqlalchemy import select, update

    from app.cli import main
    from engine.catalog import Image
    from engine.catalog.library import Library
    from engine.judgments.queries import QueryStore

    lib = copy_small_demo_library(tmp_path / "lib")
    with Library.open(lib) as library:
        store = QueryStore(library)
        query_id = store.find_or_create_query("flowering daisies")
        with library.catalog.session() as s:
            ids = list(s.scalars(select(Image.id).order_by(Image.id).limit(4)))
        times = [datetime(2020, 5, 1, 9, 15), datetime(2020, 5, 2, 9, 45),
                 datetime(2021, 6, 1, 21, 0), datetime(2021, 6, 1, 9, 0)]  # fmt: skip
        with library.catalog.session() as s:
            for image_id, moment in zip(ids, times, strict=True):
                s.execute(
                    update(Image)
                    .where(Image.id == image_id)
                    .values(observed_at=moment, latitude=10.5, longitude=20.5)
                )
        for image_id in ids[:3]:
            store.judge(query_id, image_id, 1)
        store.judge(query_id, ids[3], 0)  # judged, not relevant: not counted
    out = tmp_path / "analyses"
    args = ["analyses", "--library", str(lib), str(out)]
    assert main([*args, "--query", "flowering daisies"]) == 0
    assert capsys.readouterr().out.startswith("3 relevant photos: 3 dated")
    assert _rows((out / "phenology_month.csv").read_bytes())[1:] == [
        ["2020", "5", "2"],
        ["2021", "6", "1"],
    ]
    diel = {int(h): int(n) for h, n in _rows((out / "diel.csv").read_bytes())[1:] if int(n)}
    assert diel == {9: 2, 21: 1}
    places = _rows((out / "places.csv").read_bytes())[1:]
    assert places == [["10.5°N 20.5°E", "10.5", "20.5", "3"]]
    assert (out / "phenology_week.png").is_file()

    assert main([*args, "--query", str(query_id), "--no-charts", "--json"]) == 0
    assert '"relevant": 3' in capsys.readouterr().out
