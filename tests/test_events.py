"""Events and deployments: frames grouped by camera and time gap against hand-built
timelines, clock offsets set and undone, search results collapsed to events, metrics per
event, and `quadrat search --events --json`."""

from __future__ import annotations

import json
import math
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest

from engine.evaluation.units import to_event_units
from engine.indexing.events import group_events
from engine.search.events import collapse_ranking
from tests.test_exif_camera import camera_jpeg

NAN = math.nan


def test_a_gap_of_exactly_the_threshold_stays_in_the_event() -> None:
    ids = np.array([1, 2, 3, 4])
    seconds = np.array([0.0, 60.0, 121.0, 181.0])  # 60 (joins), 61 (splits), 60 (joins)
    events = group_events(ids, np.zeros(4, dtype=np.int64), seconds, gap=60)
    assert events.tolist() == [1, 1, 3, 3]


def test_two_cameras_interleaved_are_grouped_apart() -> None:
    # Camera 0 at 0, 30, 100; camera 1 at 10, 40, 70 (ids given out of time order).
    ids = np.array([11, 12, 13, 21, 22, 23])
    cameras = np.array([0, 0, 0, 1, 1, 1])
    seconds = np.array([0.0, 30.0, 100.0, 10.0, 40.0, 70.0])
    events = group_events(ids, cameras, seconds, gap=30)
    # Camera 0: 0 and 30 together, 100 is 70 s later; camera 1: each 30 s after the last.
    assert events.tolist() == [11, 11, 13, 21, 21, 21]


def test_undated_frames_are_events_of_their_own_and_ties_go_to_the_smaller_id() -> None:
    ids = np.array([7, 5, 9, 3])
    seconds = np.array([100.0, 100.0, NAN, 100.0])
    events = group_events(ids, np.array([0, 0, 0, 1]), seconds, gap=60)
    assert events.tolist() == [5, 5, 9, 3]


def test_collapsed_ranking_scores_each_event_by_its_best_frame() -> None:
    pairs = [(4, 0.9), (5, 0.8), (9, 0.7), (6, 0.6), (8, 0.5)]
    event_of = {4: 1, 5: 1, 6: 1, 9: 9, 8: 7}  # 8 is in event 7, whose first frame ranks nowhere
    assert collapse_ranking(pairs, event_of) == [
        (1, 4, 0.9, 3),
        (9, 9, 0.7, 1),
        (7, 8, 0.5, 1),
    ]


def test_event_units_relevant_when_any_frame_is() -> None:
    ranked = [4, 5, 9, 6, 8, 12]
    relevance = {5: 1, 4: 0, 9: 0, 8: 0, 12: 1, 30: 1}  # 30: a relevant frame not ranked
    event_of = {4: 1, 5: 1, 6: 1, 9: 9, 8: 7, 12: 12, 30: 7}
    events, event_relevance = to_event_units(ranked, relevance, event_of)
    assert events == [1, 9, 7, 12]
    assert event_relevance == {1: 1, 9: 0, 7: 1, 12: 1}


def test_metrics_per_event_against_hand_computed_values() -> None:
    from engine.evaluation.evaluate import BenchmarkJudgment, BenchmarkQuery, run_benchmark

    # Frames 1-3 are one burst (event 1), 4 and 5 another (event 4), 6 alone.
    event_of = {1: 1, 2: 1, 3: 1, 4: 4, 5: 4, 6: 6}
    ranking = [(2, 0.9), (1, 0.8), (6, 0.7), (5, 0.6), (3, 0.5), (4, 0.4)]
    judgments = [
        BenchmarkJudgment("q", str(i), "", rel) for i, rel in ((1, 1), (2, 0), (6, 0), (5, 1))
    ]
    queries = [BenchmarkQuery("q", "deer")]

    def run(unit_map):  # type: ignore[no-untyped-def]
        return run_benchmark(
            queries,
            judgments,
            lambda query, candidates: ranking,
            lambda judgment: int(judgment.image_id),
            k=10,
            event_of=unit_map,
        ).mean

    # Photos: relevant 1 and 5 at ranks 2 and 4: AP = (1/2 + 2/4) / 2 = 0.5.
    assert run(None).mAP == pytest.approx(0.5)
    # Events: 1 (relevant), 6 (not), 4 (relevant): AP = (1/1 + 2/3) / 2 = 5/6.
    per_event = run(lambda ids: {i: event_of[i] for i in ids})
    assert per_event.mAP == pytest.approx(5 / 6)
    assert pytest.approx(1.0) == per_event.MRR


# -- the catalog ---------------------------------------------------------------------------


@pytest.fixture
def trap_folder(tmp_path: Path) -> Path:
    """Two cameras in one site folder (a card swapped), bursts across midnight and across a
    daylight-saving change, and a folder of camera photos with no serial."""
    root = tmp_path / "traps"
    site = root / "site1"
    # Camera A: a burst across midnight (23:59:40, 23:59:50, 00:00:20 next day), then a frame
    # ten minutes later.
    for name, moment in (
        ("a1.jpg", "2024:06:30 23:59:40"),
        ("a2.jpg", "2024:06:30 23:59:50"),
        ("a3.jpg", "2024:07:01 00:00:20"),
        ("a4.jpg", "2024:07:01 00:10:20"),
    ):
        camera_jpeg(site / name, original=moment, serial="CAM-A", make="RECONYX")
    # Camera B in the same folder, interleaved in time with A.
    camera_jpeg(site / "b1.jpg", original="2024:06:30 23:59:45", serial="CAM-B")
    camera_jpeg(site / "b2.jpg", original="2024:07:01 00:05:00", serial="CAM-B")
    # Camera C across the October clock change: 02:59:50 +02:00 then 02:00:10 +01:00 is 20 s.
    camera_jpeg(root / "site2" / "c1.jpg", original="2024:10:27 02:59:50",
                original_offset="+02:00", serial="CAM-C")  # fmt: skip
    camera_jpeg(root / "site2" / "c2.jpg", original="2024:10:27 02:00:10",
                original_offset="+01:00", serial="CAM-C")  # fmt: skip
    # No serial: grouped by folder and camera model, no deployment until marked.
    camera_jpeg(root / "walk" / "p1.jpg", original="2023:01:01 10:00:00", model="X100")
    camera_jpeg(root / "walk" / "p2.jpg", original="2023:01:01 10:00:30", model="X100")
    camera_jpeg(root / "walk" / "undated.jpg")
    return root


def _rows(library):  # type: ignore[no-untyped-def]
    from engine.catalog.models import Image

    with library.catalog.session() as s:
        return {Path(r.rel_path).name: r for r in s.query(Image)}


def test_indexing_groups_deployments_and_events(
    tmp_path: Path, trap_folder: Path, demo_encoder
) -> None:
    from engine.catalog.library import Library
    from engine.indexing.deployments import list_deployments
    from engine.indexing.indexer import Indexer

    with Library.open(tmp_path / "lib") as library:
        report = Indexer(library, demo_encoder).run(trap_folder)
        rows = _rows(library)
        # A photo never grouped keeps no event id: it is an event of its own.
        event = {name: row.event_id or row.id for name, row in rows.items()}
        # One event across midnight; a4 alone; camera B's frames never join A's burst.
        assert event["a1.jpg"] == event["a2.jpg"] == event["a3.jpg"] == rows["a1.jpg"].id
        assert event["a4.jpg"] == rows["a4.jpg"].id
        assert event["b1.jpg"] == rows["b1.jpg"].id and event["b2.jpg"] == rows["b2.jpg"].id
        # The clock change: 20 s apart in UTC, one event.
        assert event["c1.jpg"] == event["c2.jpg"]
        assert event["p1.jpg"] == event["p2.jpg"] == rows["p1.jpg"].id
        assert rows["undated.jpg"].event_id is None
        deployments = {(d.folder, d.camera_serial): d for d in list_deployments(library)}
        assert set(deployments) == {("site1", "CAM-A"), ("site1", "CAM-B"), ("site2", "CAM-C")}
        assert deployments[("site1", "CAM-A")].photos == 4
        assert rows["p1.jpg"].deployment_id is None
    assert report.camera["serial_changes"] == 1  # site1 holds two serials
    assert report.camera["deployments"] == 3
    assert report.camera["events"] == 7  # A: 2, B: 2, C: 1, the walk: 1 and the undated one
    assert "1 folder holds photos of more than one camera serial" in report.summary()


def test_clock_offset_is_applied_to_times_and_undone(
    tmp_path: Path, trap_folder: Path, demo_encoder
) -> None:
    from engine.catalog.library import Library
    from engine.indexing.deployments import list_deployments, set_clock_offset, undo_clock_offset
    from engine.indexing.indexer import Indexer
    from engine.search.filters import SearchFilters, filtered_ids

    with Library.open(tmp_path / "lib") as library:
        Indexer(library, demo_encoder).run(trap_folder)
        b = next(d for d in list_deployments(library) if d.camera_serial == "CAM-B")
        # The camera was a day behind: its photos move to 1 and 2 July.
        assert set_clock_offset(library, b.id, 86_400) == (0, 86_400)
        rows = _rows(library)
        assert rows["b1.jpg"].observed_at == datetime(2024, 7, 1, 23, 59, 45)
        assert rows["b1.jpg"].camera_time == datetime(2024, 6, 30, 23, 59, 45)
        assert rows["a1.jpg"].observed_at == datetime(2024, 6, 30, 23, 59, 40)  # not its camera
        july_2 = filtered_ids(
            library.catalog, SearchFilters(date_from="2024-07-02", date_to="2024-07-31")
        )
        assert set(july_2.tolist()) == {rows["b2.jpg"].id}
        assert undo_clock_offset(library, b.id) == (86_400, 0)
        assert _rows(library)["b1.jpg"].observed_at == datetime(2024, 6, 30, 23, 59, 45)
        # A re-index keeps the offset: the camera's time is read again, the offset added.
        set_clock_offset(library, b.id, -30)
        Indexer(library, demo_encoder).run(trap_folder, reindex=True)
        assert _rows(library)["b1.jpg"].observed_at == datetime(2024, 6, 30, 23, 59, 15)


def test_gap_change_and_a_frame_set_apart_regroup(
    tmp_path: Path, trap_folder: Path, demo_encoder
) -> None:
    from engine.catalog.library import Library
    from engine.indexing.events import set_apart, set_event_gap
    from engine.indexing.indexer import Indexer

    with Library.open(tmp_path / "lib") as library:
        Indexer(library, demo_encoder).run(trap_folder)
        set_event_gap(library, 5)  # 10 s apart now splits A's burst
        rows = _rows(library)
        assert rows["a1.jpg"].event_id != rows["a2.jpg"].event_id
        set_event_gap(library, 3600)  # an hour joins all of A's frames, and B's
        rows = _rows(library)
        assert {rows[f"a{i}.jpg"].event_id for i in range(1, 5)} == {rows["a1.jpg"].id}
        assert rows["b2.jpg"].event_id == rows["b1.jpg"].id
        assert set_apart(library, rows["a2.jpg"].id) == rows["a2.jpg"].id
        assert _rows(library)["a3.jpg"].event_id == rows["a1.jpg"].id


def test_marking_a_folder_tree_makes_deployments_of_its_folders(
    tmp_path: Path, trap_folder: Path, demo_encoder
) -> None:
    from engine.catalog.library import Library
    from engine.indexing.deployments import list_deployments, mark_deployments
    from engine.indexing.indexer import Indexer

    with Library.open(tmp_path / "lib") as library:
        Indexer(library, demo_encoder).run(trap_folder)
        mark_deployments(library, trap_folder)
        found = {(d.folder, d.camera_serial, d.marked) for d in list_deployments(library)}
        assert ("walk", "", True) in found
        assert ("site1", "CAM-A", True) in found and ("site1", "CAM-B", True) in found
        assert _rows(library)["p1.jpg"].deployment_id is not None


def test_search_events_json_gives_one_row_per_event(
    tmp_path: Path, trap_folder: Path, capsys
) -> None:
    from app.cli import main

    lib = tmp_path / "lib"
    assert main(["index", str(trap_folder), "--library", str(lib), "--model", "demo"]) == 0
    capsys.readouterr()
    assert (
        main(["search", "an animal", "--library", str(lib), "--events", "--json", "--top", "50"])
        == 0
    )
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["rank"] for r in rows] == list(range(1, len(rows) + 1))
    assert len({r["event_id"] for r in rows}) == len(rows) == 7
    by_best = {Path(r["path"]).name: r for r in rows}
    burst = next(r for r in rows if r["frames"] == 3)  # A's burst across midnight
    assert Path(burst["path"]).name in {"a1.jpg", "a2.jpg", "a3.jpg"}
    assert sum(r["frames"] for r in rows) == 11
    assert all(r["score"] <= prev["score"] for prev, r in zip(rows, rows[1:], strict=False))
    assert "undated.jpg" in by_best and by_best["undated.jpg"]["frames"] == 1


def test_filters_by_hour_of_day_and_by_deployment(
    tmp_path: Path, trap_folder: Path, demo_encoder
) -> None:
    from engine.catalog.library import Library
    from engine.indexing.deployments import list_deployments
    from engine.indexing.indexer import Indexer
    from engine.search.filters import SearchFilters, filtered_ids

    with Library.open(tmp_path / "lib") as library:
        Indexer(library, demo_encoder).run(trap_folder)
        rows = _rows(library)
        by_id = {row.id: name for name, row in rows.items()}

        def names(**filters: object) -> set[str]:
            found = filtered_ids(library.catalog, SearchFilters(**filters))  # type: ignore[arg-type]
            return {by_id[i] for i in found.tolist()}

        # 23:00 to 00:59 across midnight: site1's frames; the undated photo never passes.
        assert names(hours=(23, 0)) == {"a1.jpg", "a2.jpg", "a3.jpg", "a4.jpg", "b1.jpg", "b2.jpg"}
        assert names(hours=(2, 2)) == {"c1.jpg", "c2.jpg"}
        assert names(hours=(10, 10)) == {"p1.jpg", "p2.jpg"}
        camera_a = next(d.id for d in list_deployments(library) if d.camera_serial == "CAM-A")
        assert names(deployment_ids=[camera_a]) == {"a1.jpg", "a2.jpg", "a3.jpg", "a4.jpg"}
        assert names(deployment_ids=[camera_a], hours=(0, 0)) == {"a3.jpg", "a4.jpg"}
        assert SearchFilters(hours=(20, 5)).describe() == [("hours", "20:00–05:59")]
        with pytest.raises(Exception, match="two hours 0..23"):
            SearchFilters(hours=(20, 24))


def test_deployments_command_sets_and_undoes_an_offset_and_lists_undated(
    tmp_path: Path, trap_folder: Path, capsys
) -> None:
    from app.cli import main

    lib = str(tmp_path / "lib")
    assert main(["index", str(trap_folder), "--library", lib, "--model", "demo"]) == 0
    capsys.readouterr()

    def deployments(*extra: str) -> str:
        assert main(["deployments", "--library", lib, *extra]) == 0
        return capsys.readouterr().out

    listed = json.loads(deployments("--json"))
    assert listed["event_gap_s"] == 60
    b = next(d for d in listed["deployments"] if d["camera_serial"] == "CAM-B")
    assert (b["photos"], b["first"]) == (2, "2024-06-30T23:59:45")
    assert "clock offset +3600 s (was +0 s" in deployments("--offset", str(b["id"]), "3600")
    after = next(d for d in json.loads(deployments("--json"))["deployments"] if d["id"] == b["id"])
    assert (after["first"], after["clock_offset_s"]) == ("2024-07-01T00:59:45", 3600)
    assert after["previous_clock_offset_s"] == 0
    deployments("--undo-offset", str(b["id"]))
    after = next(d for d in json.loads(deployments("--json"))["deployments"] if d["id"] == b["id"])
    assert (after["first"], after["clock_offset_s"]) == ("2024-06-30T23:59:45", 0)
    undated = json.loads(deployments("--undated", "--json"))
    assert [(Path(u["path"]).name, u["reason"]) for u in undated] == [
        ("undated.jpg", "no capture time in the EXIF, XMP or IPTC")
    ]
    # 5 s apart splits every burst here: each of the 11 photos is an event.
    assert "event gap 5 s: 11 events" in deployments("--gap", "5")
    assert json.loads(deployments("--json"))["event_gap_s"] == 5
    assert main(["deployments", "--library", lib, "--gap", "-1"]) != 0


def test_evaluate_per_event_counts_a_burst_once(tmp_path: Path, trap_folder: Path, capsys) -> None:
    from app.cli import main

    lib = str(tmp_path / "lib")
    assert main(["index", str(trap_folder), "--library", lib, "--model", "demo"]) == 0
    queries = tmp_path / "queries.csv"
    queries.write_text("query_id,query_text\nq1,an animal at night\n")
    judgments = tmp_path / "judgments.csv"
    # a1 and a2 are frames of one burst; b1 is an event of its own.
    judgments.write_text(
        "query_id,image_path,relevant\nq1,site1/a1.jpg,1\nq1,site1/a2.jpg,1\nq1,site1/b1.jpg,1\n"
    )
    capsys.readouterr()
    args = ["evaluate", "--library", lib, "--queries", str(queries), "--judgments", str(judgments)]
    assert main([*args, "--json", "--permutations", "10"]) == 0
    per_photo = json.loads(capsys.readouterr().out)
    assert main([*args, "--json", "--permutations", "10", "--unit", "event"]) == 0
    per_event = json.loads(capsys.readouterr().out)
    assert per_photo["per_query"][0]["R"] == 3
    assert per_event["per_query"][0]["R"] == 2
    assert per_event["unit"] == "event"


def test_photos_timed_by_a_metadata_file_are_never_grouped(tmp_path: Path, demo_encoder) -> None:
    """Observations of one day in one taxon folder (iNat style, dates from metadata.json)
    share a time but are no burst: each stays an event of its own."""
    from engine.catalog.library import Library
    from engine.indexing.indexer import Indexer

    folder = tmp_path / "inat"
    images = []
    for number in range(3):
        name = f"Anura/{number}.jpg"
        camera_jpeg(folder / name, color=(number * 60, 90, 60))
        images.append({"id": number + 1, "file_name": name, "date": "2021-05-03"})
    (folder / "metadata.json").write_text(json.dumps({"images": images}))
    with Library.open(tmp_path / "lib") as library:
        report = Indexer(library, demo_encoder).run(folder)
        rows = _rows(library)
    assert {row.observed_at for row in rows.values()} == {datetime(2021, 5, 3)}
    assert [row.event_id for row in rows.values()] == [None, None, None]
    assert report.camera["events"] == 3 and report.camera["undated"] == 0


def test_events_offsets_and_hours_on_each_database(
    tmp_path: Path, trap_folder: Path, demo_encoder, catalog_url: str
) -> None:
    """The driver-level reads and writes, the date triggers and the hour filter, on SQLite
    and PostgreSQL alike."""
    from engine.catalog.library import Library
    from engine.indexing.deployments import list_deployments, set_clock_offset
    from engine.indexing.events import set_event_gap
    from engine.indexing.indexer import Indexer
    from engine.search.filters import SearchFilters, filtered_ids

    url = None if catalog_url.startswith("sqlite") else catalog_url
    with Library.open(tmp_path / "lib", database_url=url) as library:
        report = Indexer(library, demo_encoder).run(trap_folder)
        assert (report.camera["events"], report.camera["deployments"]) == (7, 3)
        rows = _rows(library)
        assert rows["a1.jpg"].event_id == rows["a3.jpg"].event_id == rows["a1.jpg"].id
        assert rows["c1.jpg"].event_id == rows["c2.jpg"].event_id
        b = next(d for d in list_deployments(library) if d.camera_serial == "CAM-B")
        set_clock_offset(library, b.id, 7200)  # 23:59:45 -> 01:59:45, 00:05 -> 02:05
        rows = _rows(library)
        assert rows["b1.jpg"].observed_at == datetime(2024, 7, 1, 1, 59, 45)
        night = filtered_ids(library.catalog, SearchFilters(hours=(1, 2)))
        names = {Path(r.rel_path).name for r in rows.values() if r.id in set(night.tolist())}
        assert names == {"b1.jpg", "b2.jpg", "c1.jpg", "c2.jpg"}
        july_1 = filtered_ids(
            library.catalog, SearchFilters(date_from="2024-07-01", date_to="2024-07-01")
        )
        assert rows["b1.jpg"].id in set(july_1.tolist())
        assert set_event_gap(library, 5) == 11
