"""Crops of detections: their geometry, their encoding (incremental, resumable), the crop index,
and searches that rank boxes or fuse a frame's full-frame and best-crop scores."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image, ImageDraw
from sqlalchemy import func, select

from engine.catalog.library import Library
from engine.catalog.models import CropEmbedding
from engine.catalog.models import Image as ImageRow
from engine.detections.crops import MIN_CROP_PIXELS, crop_region, encode_crops
from engine.detections.records import Box, DetectionRecord, FrameRecord
from engine.detections.store import PENDING, replace_source, write_frames
from engine.errors import BadInputError
from engine.indexing.indexer import Indexer
from engine.methods import SearchJob, SearchQuery, run_search
from engine.methods.units import DEFAULT_RULE, fuse

# ----------------------------------------------------------------------------- geometry


def test_a_crop_is_the_box_grown_by_the_margin_and_made_square() -> None:
    # A 100 x 50 box in the middle of a 1000 x 1000 photo: 15 % of 100 each way -> 130 square.
    box = Box(0.45, 0.475, 0.1, 0.05)
    left, top, right, bottom = crop_region(box, 1000, 1000, margin=0.15)
    assert (right - left, bottom - top) == (130, 130)
    assert (left + right) / 2 == pytest.approx(500, abs=1)
    assert (top + bottom) / 2 == pytest.approx(500, abs=1)
    # No margin: the longer side alone, still square.
    left, top, right, bottom = crop_region(box, 1000, 1000, margin=0.0)
    assert (right - left, bottom - top) == (100, 100)


def test_a_tiny_box_gets_the_least_crop_and_a_box_at_the_edge_is_shifted_inwards() -> None:
    tiny = crop_region(Box(0.5, 0.5, 0.004, 0.004), 1000, 1000)
    assert (tiny[2] - tiny[0], tiny[3] - tiny[1]) == (MIN_CROP_PIXELS, MIN_CROP_PIXELS)
    # A box in the top-left corner: the square stays whole, inside the photo.
    left, top, right, bottom = crop_region(Box(0.0, 0.0, 0.1, 0.1), 1000, 800)
    assert (left, top) == (0, 0) and (right, bottom) == (130, 130)
    # At the bottom-right corner too.
    left, top, right, bottom = crop_region(Box(0.9, 0.9, 0.1, 0.1), 1000, 1000)
    assert (right, bottom) == (1000, 1000) and (right - left, bottom - top) == (130, 130)


def test_a_box_larger_than_the_photo_allows_is_clipped_to_the_photo() -> None:
    # A box as tall as the photo: the square would be 1.3 x its height; it is cut at the edges.
    left, top, right, bottom = crop_region(Box(0.3, 0.0, 0.4, 1.0), 400, 300)
    assert (top, bottom) == (0, 300)
    assert 0 <= left < right <= 400 and right - left == round(300 * 1.3)
    with pytest.raises(BadInputError):
        crop_region(Box(0.3, 0.0, 0.4, 1.0), 400, 300, margin=-0.1)


# ----------------------------------------------------------------------------- a tiny collection

RED, BLUE, YELLOW = (215, 35, 35), (35, 75, 215), (240, 205, 35)
GREY = (110, 110, 100)
SMALL_BOX = (196, 136, 20, 20)  # pixels of a 240 x 180 frame: under 1 % of it


def _frame(path: Path, big: tuple[int, int, int] | None, small: tuple[int, int, int] | None,
           shape: str = "square") -> None:  # fmt: skip
    image = Image.new("RGB", (240, 180), GREY)
    draw = ImageDraw.Draw(image)
    if big is not None:
        (draw.rectangle if shape == "square" else draw.ellipse)((60, 30, 180, 150), fill=big)
    if small is not None:
        x, y, w, h = SMALL_BOX
        draw.ellipse((x, y, x + w, y + h), fill=small)
    image.save(path, "JPEG", quality=92)


def _normalised(x: int, y: int, w: int, h: int) -> Box:
    return Box(x / 240, y / 180, w / 240, h / 180)


# What each frame shows, and its boxes (normalised box, confidence).
FRAMES: dict[str, tuple[Any, Any, str, list[tuple[Box, float]]]] = {
    # A small red circle beside a large blue square: the frame reads as blue.
    "far_red.jpg": (BLUE, RED, "square", [(_normalised(*SMALL_BOX), 0.6)]),
    # Nothing red: a plain frame and a yellow circle, boxed by a detector all the same.
    "empty.jpg": (None, None, "square", []),
    "yellow.jpg": (YELLOW, None, "circle", [(_normalised(60, 30, 120, 120), 0.9)]),
    # A large blue circle, and a faint false box on it below the threshold.
    "blue.jpg": (
        BLUE,
        None,
        "circle",
        [(_normalised(60, 30, 120, 120), 0.95), (_normalised(10, 10, 30, 30), 0.1)],
    ),  # fmt: skip
}


def _index_tiny(root: Path, encoder: Any) -> tuple[Path, dict[str, int]]:
    photos = root / "photos"
    photos.mkdir(parents=True)
    for name, (big, small, shape, _) in FRAMES.items():
        _frame(photos / name, big, small, shape)
    lib = root / "lib"
    with Library.open(lib) as library:
        Indexer(library, encoder).run(photos)
        with library.catalog.session() as s:
            ids = {rel: i for rel, i in s.execute(select(ImageRow.rel_path, ImageRow.id))}
            source = replace_source(s, "demo", str(photos / "boxes.json"))
            write_frames(
                s,
                source,
                [
                    FrameRecord(ids[name], tuple(DetectionRecord(b, "animal", c) for b, c in boxes))
                    for name, (*_, boxes) in FRAMES.items()
                ],
            )
    return lib, ids


@pytest.fixture
def tiny(tmp_path: Path, demo_encoder: Any) -> tuple[Path, dict[str, int]]:
    return _index_tiny(tmp_path, demo_encoder)


class _Dies:
    """The demo encoder, dying (as a killed process would stop) on its `die_at`-th image batch."""

    def __init__(self, encoder: Any, die_at: int) -> None:
        self._encoder, self._die_at, self.calls = encoder, die_at, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._encoder, name)

    def encode_images(self, images: Any) -> np.ndarray:
        self.calls += 1
        if self.calls == self._die_at:
            raise KeyboardInterrupt
        result: np.ndarray = self._encoder.encode_images(images)
        return result


def _crop_rows(lib: Path, model_key: str) -> list[int]:
    with Library.open(lib) as library, library.catalog.session() as s:
        return list(
            s.scalars(
                select(CropEmbedding.detection_id).where(CropEmbedding.model_key == model_key)
            )
        )


def test_crops_are_encoded_once_and_a_run_killed_midway_loses_nothing(tiny, demo_encoder) -> None:
    lib, _ = tiny
    dying = _Dies(demo_encoder, die_at=2)
    with Library.open(lib) as library, pytest.raises(KeyboardInterrupt):
        encode_crops(library, dying, batch=1)  # type: ignore[arg-type]
    kept = _crop_rows(lib, demo_encoder.model_key)
    assert len(kept) == 1  # the first batch was committed before the second died
    with Library.open(lib) as library:
        report = encode_crops(library, demo_encoder, batch=1)
        again = encode_crops(library, demo_encoder)
    rows = _crop_rows(lib, demo_encoder.model_key)
    # Three boxes above 0.2 (the faint 0.1 box is never cropped), each exactly once.
    assert sorted(rows) == sorted(set(rows)) and len(rows) == 3
    assert set(kept) <= set(rows)
    assert (report.encoded, report.already) == (2, 1)
    assert (again.encoded, again.already) == (0, 3)


def test_the_boxes_of_an_import_under_way_get_no_crops(tiny, demo_encoder) -> None:
    lib, ids = tiny
    with Library.open(lib) as library:
        with library.catalog.session() as s:
            pending = replace_source(s, PENDING + "megadetector", "/runs/md.json")
            box = DetectionRecord(Box(0.1, 0.1, 0.5, 0.5), "animal", 0.9)
            write_frames(s, pending, [FrameRecord(next(iter(ids.values())), (box,))])
        report = encode_crops(library, demo_encoder)
    assert (report.encoded, report.already) == (3, 0)  # the three finished boxes above 0.2


def test_a_lower_threshold_encodes_only_the_boxes_it_adds(tiny, demo_encoder) -> None:
    lib, _ = tiny
    with Library.open(lib) as library:
        encode_crops(library, demo_encoder)
        lower = encode_crops(library, demo_encoder, threshold=0.05)
    assert (lower.encoded, lower.already) == (1, 3)


def test_the_boxes_unit_ranks_detections_by_their_crops(tiny, demo_encoder) -> None:
    lib, ids = tiny
    with Library.open(lib) as library:
        with pytest.raises(BadInputError, match="crops encode"):
            job = SearchJob(library, SearchQuery("a red circle"), lambda: demo_encoder, k=5,
                            unit="boxes")  # fmt: skip
            run_search(job)
        encode_crops(library, demo_encoder)
        result = run_search(job)
        with library.catalog.session() as s:
            stored = {
                d: np.frombuffer(v, dtype="<f4")
                for d, v in s.execute(select(CropEmbedding.detection_id, CropEmbedding.vector))
            }
    query = demo_encoder.encode_texts(["a red circle"])[0]
    expected = sorted(stored, key=lambda d: -float(stored[d] @ query))
    assert [b.detection_id for b in result.boxes] == expected
    assert [b.score for b in result.boxes] == pytest.approx(
        [float(stored[d] @ query) for d in expected], abs=1e-5
    )
    first = result.boxes[0]
    assert first.image_id == ids["far_red.jpg"] and first.rel_path == "far_red.jpg"
    assert first.box == pytest.approx(_normalised(*SMALL_BOX), abs=1e-6)
    # The frames of a box search are the boxes' frames, each once, in the order of its best.
    assert [h.image_id for h in result.hits] == list(
        dict.fromkeys(b.image_id for b in result.boxes)
    )


def test_a_fused_search_lifts_a_frame_whose_small_box_matches(tiny, demo_encoder) -> None:
    lib, ids = tiny
    with Library.open(lib) as library:
        encode_crops(library, demo_encoder)
        query = SearchQuery("a red circle")

        def ranked(unit: str, rule: str = DEFAULT_RULE) -> list[int]:
            job = SearchJob(library, query, lambda: demo_encoder, k=4, unit=unit, fusion=rule)
            return run_search(job).ranking.ids

        frames, fused, by_max = ranked("frames"), ranked("fused"), ranked("fused", "max")
        fused_result = run_search(SearchJob(library, query, lambda: demo_encoder, k=4,
                                            unit="fused"))  # fmt: skip
    red, empty, blue = ids["far_red.jpg"], ids["empty.jpg"], ids["blue.jpg"]
    # Full frame: the big blue square hides the small red circle, the frame comes last,
    # below a frame with no animal at all and one with a blue one.
    assert frames[-1] == red and frames.index(empty) < frames.index(red)
    # Fused (the default rule): its crop lifts it above both; every frame stays ranked.
    assert fused.index(red) < fused.index(empty) and fused.index(red) < fused.index(blue)
    assert sorted(fused) == sorted(ids.values())
    assert fused_result.best_box[red] == fused_result.boxes[0].detection_id
    # By the max rule its crop's similarity tops every frame's.
    assert by_max[0] == red


def test_fusion_rules_on_a_worked_example() -> None:
    frames = [(1, 0.30), (2, 0.20), (3, 0.10)]  # full-frame cosines, best first
    crops = [(3, 0.60), (2, 0.15)]  # best crop per frame; frame 1 has no box
    assert fuse(frames, crops, "max") == [(3, 0.60), (1, 0.30), (2, 0.20)]
    weighted = fuse(frames, crops, "weighted")
    assert [i for i, _ in weighted] == [3, 1, 2]
    assert dict(weighted)[3] == pytest.approx(0.35) and dict(weighted)[1] == pytest.approx(0.30)
    # RRF (k 60): 3 gets 1/63 + 1/61, 2 gets 1/62 + 1/62, 1 only 1/61.
    rrf = fuse(frames, crops, "rrf")
    assert [i for i, _ in rrf] == [3, 2, 1]
    assert dict(rrf)[1] == pytest.approx(1 / 61)
    # A frame the method did not return takes the lowest full-frame score it did.
    assert dict(fuse(frames, [(9, 0.05)], "weighted"))[9] == pytest.approx(0.075)
    with pytest.raises(BadInputError):
        fuse(frames, crops, "mean")


def test_a_box_search_keeps_to_the_filters(tiny, demo_encoder, tmp_path: Path) -> None:
    from engine.catalog.models import Collection
    from engine.search.searcher import SearchFilters

    lib, ids = tiny
    other = tmp_path / "other"
    other.mkdir()
    _frame(other / "red.jpg", None, RED)
    with Library.open(lib) as library:
        Indexer(library, demo_encoder).run(other)
        with library.catalog.session() as s:
            red = s.scalar(select(ImageRow.id).where(ImageRow.rel_path == "red.jpg"))
            first = s.scalar(select(func.min(Collection.id)))
            source = replace_source(s, "demo", str(other / "boxes.json"))
            box = DetectionRecord(_normalised(*SMALL_BOX), "animal", 0.9)
            write_frames(s, source, [FrameRecord(red, (box,))])
        encode_crops(library, demo_encoder)
        query = SearchQuery("a red circle")
        everywhere = run_search(SearchJob(library, query, lambda: demo_encoder, k=5, unit="boxes"))
        filters = SearchFilters(collection_ids=(first,))
        job = SearchJob(library, query, lambda: demo_encoder, k=5, filters=filters, unit="boxes")
        kept = run_search(job)
    assert red in {b.image_id for b in everywhere.boxes}
    assert {b.image_id for b in kept.boxes} <= set(ids.values()) and len(kept.boxes) == 3


# ----------------------------------------------------------------------------- the demo's boxes


def test_the_camera_trap_demo_writes_megadetector_batch_output(tmp_path: Path) -> None:
    from engine.demo.camera_traps import write_camera_trap_demo

    demo = write_camera_trap_demo(tmp_path / "demo")
    batch = json.loads(demo.detections_path.read_text())
    assert batch["info"]["format_version"] == "1.4" and batch["info"]["detector"]
    assert batch["detection_categories"] == {"1": "animal", "2": "person", "3": "vehicle"}
    files = [entry["file"] for entry in batch["images"]]
    assert len(files) == demo.image_count and all((demo.root / f).is_file() for f in files)
    drawn = {f: (e, b) for e in demo.events for f, b in zip(e.frames, e.boxes, strict=True)}
    sizes: dict[str, list[float]] = {"far": [], "near": []}
    false_confs: list[float] = []
    for entry in batch["images"]:
        event, box = drawn[entry["file"]]
        for d in entry["detections"]:
            assert d["category"] in batch["detection_categories"] and 0 <= d["conf"] <= 1
            x, y, w, h = d["bbox"]
            assert x >= 0 and y >= 0 and w > 0 and h > 0 and x + w <= 1 and y + h <= 1
        if box is None:
            false_confs += [d["conf"] for d in entry["detections"]]
            continue
        assert entry["detections"][0]["bbox"] == pytest.approx(list(box), abs=1e-4)
        sizes["far" if event.far else "near"].append(box[2] * box[3])
    # Far animals are a few percent of the frame, near ones much more.
    assert sizes["far"] and min(sizes["far"]) > 0.01 and max(sizes["far"]) < 0.06
    assert min(sizes["near"]) > 0.08
    # Some false boxes on empty frames, all of low confidence, some below the usual 0.2.
    assert false_confs and max(false_confs) <= 0.3 and min(false_confs) < 0.2
    # The same seed draws the same boxes.
    again = write_camera_trap_demo(tmp_path / "demo")
    assert json.loads(again.detections_path.read_text()) == batch


def test_the_demo_boxes_load_onto_the_indexed_demo(tmp_path: Path, demo_encoder) -> None:
    from engine.demo.camera_traps import write_camera_trap_demo
    from engine.detections.demo import load_demo_detections
    from engine.detections.store import detections_of

    demo = write_camera_trap_demo(tmp_path / "photos", bursts_per_camera=3)
    batch = json.loads(demo.detections_path.read_text())
    with Library.open(tmp_path / "lib") as library:
        Indexer(library, demo_encoder).run(demo.root)
        for _ in range(2):  # a second load replaces the first
            frames, boxes = load_demo_detections(library, demo.root)
        with library.catalog.session() as s:
            paths = {i: rel for i, rel in s.execute(select(ImageRow.id, ImageRow.rel_path))}
            found = detections_of(s, list(paths))
    assert frames == demo.image_count
    assert boxes == sum(len(e["detections"]) for e in batch["images"])
    assert sum(len(v) for v in found.values()) == boxes
    assert all(d.source_kind == "megadetector" and d.record.category == "animal"
               for v in found.values() for d in v)  # fmt: skip


def test_the_crop_index_follows_the_table_after_a_reimport(tiny, demo_encoder) -> None:
    from engine.detections import crop_index as module

    lib, ids = tiny
    with Library.open(lib) as library:
        encode_crops(library, demo_encoder)
        first = module.crop_index(library, demo_encoder.model_key)
        assert first is not None and len(first) == 3
        path = module.crop_index_path(library, demo_encoder.model_key)
        assert path.is_file()
        # The same file imported again: new detections, the old ones and their crops gone.
        with library.catalog.session() as s:
            source = replace_source(s, "demo", str(lib.parent / "photos" / "boxes.json"))
            box = DetectionRecord(_normalised(*SMALL_BOX), "animal", 0.7)
            write_frames(s, source, [FrameRecord(ids["far_red.jpg"], (box,))])
        assert module.crop_index(library, demo_encoder.model_key) is None  # nothing encoded
        encode_crops(library, demo_encoder)
        module._loaded.clear()  # as a new process: the file on disk is read and repaired
        again = module.crop_index(library, demo_encoder.model_key)
        with library.catalog.session() as s:
            table = sorted(s.scalars(select(CropEmbedding.detection_id)))
    assert again is not None and again.ids().tolist() == table and len(table) == 1


def test_the_command_line_searches_boxes_and_fused_events(tiny, capsys) -> None:
    from app.cli import main

    lib, ids = tiny
    assert main(["crops", "encode", "--library", str(lib), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"encoded": 3, "skipped": 0, "already": 0}
    assert main(["search", "a red circle", "--library", str(lib), "--unit", "boxes",
                 "--json"]) == 0  # fmt: skip
    boxes = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [b["rank"] for b in boxes] == [1, 2, 3]
    assert boxes[0]["image_id"] == ids["far_red.jpg"] and boxes[0]["unit"] == "boxes"
    assert boxes[0]["box"] == pytest.approx(list(_normalised(*SMALL_BOX).__dict__.values()))
    assert main(["search", "a red circle", "--library", str(lib), "--unit", "fused",
                 "--events", "--json"]) == 0  # fmt: skip
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(events) == 4  # four photos without times: each its own event
    assert main(["search", "red", "--library", str(lib), "--unit", "nope"]) == 2


@pytest.mark.slow
@pytest.mark.integration  # a process of its own (the in-process crash above is the fast check)
def test_a_process_killed_between_batches_keeps_each_committed_batch(tiny, demo_encoder) -> None:
    """SIGKILL in the middle of the second batch (no cleanup of any kind): the first batch's
    vector stays, the next run encodes the other two, none twice."""
    import signal
    import subprocess
    import sys
    import textwrap

    lib, _ = tiny
    script = textwrap.dedent(
        f"""
        import os, signal
        from engine.catalog.library import Library
        from engine.detections.crops import encode_crops
        from engine.models.encoders import load_encoder

        encoder = load_encoder("demo", device="cpu")
        calls = []

        class Dies:
            model_key = encoder.model_key

            def encode_images(self, images):
                calls.append(1)
                if len(calls) == 2:
                    os.kill(os.getpid(), signal.SIGKILL)
                return encoder.encode_images(images)

        with Library.open({str(lib)!r}) as library:
            encode_crops(library, Dies(), batch=1)
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert len(_crop_rows(lib, demo_encoder.model_key)) == 1
    with Library.open(lib) as library:
        report = encode_crops(library, demo_encoder)
    rows = _crop_rows(lib, demo_encoder.model_key)
    assert report.encoded == 2 and len(rows) == len(set(rows)) == 3
