"""The camera-trap demo: written by `quadrat demo DIR --camera-traps`, indexed with the demo
model, its events are the bursts the generator drew, and `quadrat evaluate --unit event` scores
against judgments that follow from the drawing."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest
from sqlalchemy import select

from app.cli import main
from engine.catalog.library import Library
from engine.catalog.models import Deployment, Image
from engine.demo.camera_traps import CAMERAS, QUERIES, DemoQuery, DrawnEvent


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo written and indexed through the command line."""
    root = tmp_path_factory.mktemp("camera-trap-demo")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("QUADRAT_HOME", str(root / "home"))
        assert main(["demo", str(root / "photos"), "--camera-traps"]) == 0
        code = main(["index", str(root / "photos"), "--library", str(root / "lib"),
                     "--model", "demo", "--json"])  # fmt: skip
    assert code == 0
    return root


def _drawn(root: Path) -> list[DrawnEvent]:
    truth = json.loads((root / "photos" / "camera_traps.json").read_text())["events"]
    return [
        DrawnEvent(e["camera"], tuple(e["frames"]), e["start"], e["species"], e["night"])
        for e in truth
    ]


def test_events_are_the_bursts_drawn(indexed: Path) -> None:
    drawn = _drawn(indexed)
    assert 3 <= min(len(e.frames) for e in drawn) <= max(len(e.frames) for e in drawn) <= 10
    assert any(e.species is None for e in drawn) and any(e.night for e in drawn)
    with Library.open(indexed / "lib") as library, library.catalog.session() as s:
        rows = s.execute(
            select(
                Image.rel_path,
                Image.event_id,
                Image.observed_at,
                Image.observed_utc_offset,
                Image.camera_serial,
                Image.latitude,
            )  # fmt: skip
        ).all()
        deployments = s.scalars(select(Deployment.camera_serial)).all()
    by_path = {row[0]: row for row in rows}
    assert sorted(deployments) == sorted(c.serial for c in CAMERAS)
    assert len(by_path) == sum(len(e.frames) for e in drawn)
    event_of_burst = []
    for event in drawn:
        ids = {by_path[frame][1] for frame in event.frames}
        assert len(ids) == 1 and None not in ids, event.frames  # a burst is one event
        event_of_burst.append(ids.pop())
    assert len(set(event_of_burst)) == len(drawn)  # and bursts are never merged
    assert all(row[3] == 120 and row[4] and row[5] for row in rows)  # +02:00, serial, GPS
    # The burst across midnight is one event over two dates.
    days = defaultdict(set)
    for event, event_id in zip(drawn, event_of_burst, strict=True):
        days[event_id] |= {by_path[frame][2].date() for frame in event.frames}
    assert max(len(d) for d in days.values()) == 2


def _answers(drawn: list[DrawnEvent], query: DemoQuery) -> list[DrawnEvent]:
    return [e for e in drawn if e.species == query.species and (e.night or not query.night_only)]


@pytest.mark.parametrize("unit", ["event", "photo"])
def test_evaluate_counts_exactly_what_was_drawn(indexed: Path, unit: str, capsys) -> None:
    photos = indexed / "photos"
    code = main(["evaluate", "--queries", str(photos / "queries.csv"),
                 "--judgments", str(photos / "judgments.csv"), "--library",
                 str(indexed / "lib"), "--unit", unit, "--k", "10", "--json"])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    result = json.loads(out)
    assert result["unit"] == unit and result["unresolved_judgments"] == 0
    drawn = _drawn(indexed)
    relevant = {
        str(q.query_id): (
            len(_answers(drawn, q))
            if unit == "event"
            else sum(len(e.frames) for e in _answers(drawn, q))
        )
        for q in QUERIES
    }
    assert {q["query_id"]: q["R"] for q in result["per_query"]} == relevant
    assert all(0.0 <= q["AP"] <= 1.0 for q in result["per_query"])


def test_the_demo_is_written_again_in_place_but_never_over_other_files(tmp_path: Path) -> None:
    from engine.demo.camera_traps import write_camera_trap_demo

    first = write_camera_trap_demo(tmp_path / "demo")
    again = write_camera_trap_demo(tmp_path / "demo")
    photos = sorted(p.name for p in (tmp_path / "demo").rglob("*.JPG"))
    assert len(photos) == first.image_count == again.image_count
    other = tmp_path / "holiday"
    other.mkdir()
    (other / "beach.jpg").write_bytes(b"not ours")
    assert main(["demo", str(other), "--camera-traps"]) == 2
    assert [p.name for p in other.iterdir()] == ["beach.jpg"]
