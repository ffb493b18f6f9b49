"""Importing MegaDetector and SpeciesNet output: fixtures in the published shapes, matching
file paths to indexed photos, re-imports, bad input and an import killed part-way."""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import time
from pathlib import Path

import pytest
from sqlalchemy import select

from engine.catalog.library import Library, RootMap
from engine.catalog.models import Collection, Detection, DetectionFrame, DetectionSource, Image
from engine.detections.importing import SHOWN_UNMATCHED, import_detections, importer_for
from engine.detections.speciesnet import names_of
from engine.errors import BadInputError, Cancelled
from engine.progress import CancelToken

ROOT = "/photos/traps"
PATHS = [
    "CAM01/IMG_0001.JPG",
    "CAM01/IMG_0002.JPG",
    "CAM01/IMG_0003.JPG",
    "CAM02/IMG_0001.JPG",
    "CAM02/IMG_0002.JPG",
]


def _library(folder: Path, paths: list[str] = PATHS, root_map: RootMap | None = None) -> Library:
    library = Library.open(folder / "library", root_map=root_map)
    with library.catalog.session() as s:
        collection = Collection(root=ROOT, name="traps")
        s.add(collection)
        s.flush()
        for n, rel_path in enumerate(paths, start=1):
            s.add(Image(id=n, collection_id=collection.id, rel_path=rel_path, size=1, mtime_ns=1))
    return library


@pytest.fixture
def library(tmp_path):
    library = _library(tmp_path)
    yield library
    library.catalog.dispose()


def _md(images: list[dict], version: str = "1.4", **extra) -> dict:
    return {
        "info": {
            "detector": "md_v5a.0.0.pt",
            "detection_completion_time": "2024-05-01 10:00:00",
            "format_version": version,
        },
        "detection_categories": {"1": "animal", "2": "person", "3": "vehicle"},
        **extra,
        "images": images,
    }


def _write(path: Path, content: dict | str) -> Path:
    path.write_text(content if isinstance(content, str) else json.dumps(content, indent=1))
    return path


def _rows(library: Library) -> tuple[list[tuple], list[tuple]]:
    """The frames and detections as comparable tuples (ids and source ids left out)."""
    with library.catalog.session() as s:
        frames = sorted(
            s.execute(
                select(
                    DetectionFrame.image_id, DetectionFrame.max_confidence, DetectionFrame.failure
                )
            ).all()
        )
        boxes = sorted(
            s.execute(
                select(
                    Detection.image_id,
                    Detection.category,
                    Detection.confidence,
                    Detection.box_x,
                    Detection.box_y,
                    Detection.label,
                    Detection.label_probability,
                )
            ).all(),
            key=repr,
        )
    return [tuple(f) for f in frames], [tuple(b) for b in boxes]


MD_IMAGES = [
    {
        "file": "CAM01/IMG_0001.JPG",
        "detections": [
            {"category": "1", "conf": 0.92, "bbox": [0.1, 0.2, 0.05, 0.04]},
            {"category": "2", "conf": 0.03, "bbox": [0.5, 0.5, 0.1, 0.1]},
        ],
    },
    {"file": "CAM01/IMG_0002.JPG", "detections": []},
    {"file": "CAM01/IMG_0003.JPG", "failure": "Failure image access", "detections": None},
    {"file": "CAM09/IMG_0009.JPG", "detections": []},
]


def test_a_megadetector_file_becomes_frames_boxes_and_empty_frames(library, tmp_path):
    path = _write(tmp_path / "md.json", _md(MD_IMAGES))
    report = import_detections(library, path)
    frames, boxes = _rows(library)
    assert frames == [(1, 0.92, None), (2, None, None), (3, None, "Failure image access")]
    assert [(b[0], b[1], b[2]) for b in boxes] == [(1, "animal", 0.92), (1, "person", 0.03)]
    assert (report.frames, report.detections, report.failures) == (3, 2, 1)
    assert report.matched_by == {"relative": 3}
    assert report.unmatched == [
        "md.json: images[3] (CAM09/IMG_0009.JPG): no indexed photo at this path"
    ]
    with library.catalog.session() as s:
        source = s.scalars(select(DetectionSource)).one()
    assert (source.kind, source.model) == ("megadetector", "md_v5a.0.0.pt")
    assert source.categories["detection_categories"]["1"] == "animal"
    assert source.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_threshold_drops_faint_boxes_but_the_frame_keeps_its_highest_confidence(
    library, tmp_path
):
    images = [
        {
            "file": "CAM01/IMG_0001.JPG",
            "detections": [{"category": "1", "conf": 0.15, "bbox": [0, 0, 0.1, 0.1]}],
        }
    ]
    import_detections(library, _write(tmp_path / "md.json", _md(images)), threshold=0.1)
    assert _rows(library)[0] == [(1, 0.15, None)]
    import_detections(library, _write(tmp_path / "md.json", _md(images)), threshold=0.5)
    frames, boxes = _rows(library)
    assert frames == [(1, 0.15, None)] and boxes == []  # not empty at 0.1, empty at 0.2


def test_old_files_give_max_detection_conf_and_classifications_give_labels(library, tmp_path):
    images = [
        {
            "file": "CAM01/IMG_0001.JPG",
            "max_detection_conf": 0.97,
            "detections": [
                {
                    "category": "1",
                    "conf": 0.97,
                    "bbox": [0.1, 0.1, 0.2, 0.2],
                    "classifications": [["3", 0.2], ["0", 0.71]],
                }
            ],
        },
        {"file": "CAM01/IMG_0002.JPG", "max_detection_conf": 0.4, "detections": []},
    ]
    content = _md(images, "1.1", classification_categories={"0": "red fox", "3": "badger"})
    import_detections(library, _write(tmp_path / "old.json", content))
    frames, boxes = _rows(library)
    assert frames == [(1, 0.97, None), (2, 0.4, None)]
    assert [(b[5], b[6]) for b in boxes] == [("red fox", 0.71)]


def test_speciesnet_predictions_become_a_whole_photo_label_and_boxes(library, tmp_path):
    fox = "5b1b0c4f-1d7e-4e3e-9c3b-0c8c1f1a2b3c;mammalia;carnivora;canidae;vulpes;vulpes;red fox"
    blank = "f1856211-cfb7-4a5b-9158-c0f72fd09ee6;;;;;;blank"
    predictions = {
        "predictions": [
            {
                "filepath": f"{ROOT}/CAM01/IMG_0001.JPG",
                "classifications": {"classes": [fox, blank], "scores": [0.93, 0.05]},
                "detections": [
                    {"category": "1", "label": "animal", "conf": 0.9, "bbox": [0.4, 0.4, 0.2, 0.1]}
                ],
                "prediction": fox,
                "prediction_score": 0.93,
                "prediction_source": "classifier",
                "model_version": "4.0.1a",
            },
            {
                "filepath": f"{ROOT}/CAM01/IMG_0002.JPG",
                "detections": [],
                "prediction": blank,
                "prediction_score": 0.99,
                "prediction_source": "classifier",
                "model_version": "4.0.1a",
            },
            {
                "filepath": f"{ROOT}/CAM01/IMG_0003.JPG",
                "failures": ["CLASSIFIER", "DETECTOR"],
                "model_version": "4.0.1a",
            },
        ]
    }
    path = _write(tmp_path / "predictions.json", predictions)
    assert importer_for(path).kind == "speciesnet"
    report = import_detections(library, path)
    frames, boxes = _rows(library)
    assert frames == [(1, 0.9, None), (2, None, None), (3, None, "CLASSIFIER, DETECTOR")]
    assert sorted(((b[0], b[1], b[2], b[5], b[6]) for b in boxes), key=repr) == [
        (1, "animal", 0.9, None, None),
        (1, None, None, "red fox", 0.93),
        (2, None, None, "blank", 0.99),
    ]
    assert report.matched_by == {"absolute": 3}
    with library.catalog.session() as s:
        source = s.scalars(select(DetectionSource)).one()
    assert source.model == "SpeciesNet 4.0.1a"
    assert source.categories["labels"] == {"red fox": "Vulpes vulpes", "blank": None}


def test_a_taxonomy_string_gives_the_common_name_and_the_scientific_name():
    assert names_of("u;mammalia;carnivora;canidae;vulpes;vulpes;red fox") == (
        "red fox",
        "Vulpes vulpes",
    )
    assert names_of("u;aves;;;;;bird") == ("bird", "Aves")
    with pytest.raises(BadInputError, match="uuid;class"):
        names_of("red fox")


def test_the_format_is_recognised_from_the_file(tmp_path):
    md = _write(tmp_path / "a.json", _md(MD_IMAGES))
    images_first = _write(
        tmp_path / "b.json",
        '{"images": [{"file": "x.jpg", "detections": []}], "detection_categories": {"1": "animal"}}',
    )
    assert importer_for(md).kind == importer_for(images_first).kind == "megadetector"
    with pytest.raises(BadInputError, match="not a file Quadrat recognises"):
        importer_for(_write(tmp_path / "c.json", '{"rows": []}'))


def test_categories_written_after_the_images_are_still_read(library, tmp_path):
    text = (
        '{"images": [{"file": "CAM01/IMG_0001.JPG", "detections": [{"category": "7", '
        '"conf": 0.8, "bbox": [0.1, 0.1, 0.1, 0.1]}]}], "detection_categories": {"7": "animal"},'
        ' "info": {"format_version": "1.3", "detector": "md_v5b.0.0.pt"}}'
    )
    import_detections(library, _write(tmp_path / "late.json", text))
    assert [b[1] for b in _rows(library)[1]] == ["animal"]


def test_a_windows_path_is_matched_through_the_root_map(tmp_path):
    library = _library(tmp_path, root_map=RootMap.parse([f"D:\\traps={ROOT}"]))
    images = [
        {"file": "D:\\traps\\CAM01\\IMG_0001.JPG", "detections": []},
        {"file": "D:\\traps\\cam02\\img_0002.jpg", "detections": []},  # Windows ignores case
    ]
    report = import_detections(library, _write(tmp_path / "md.json", _md(images)))
    library.catalog.dispose()
    assert report.matched_by == {"root map": 2} and not report.unmatched


def test_paths_from_another_machine_are_matched_by_their_last_components(library, tmp_path):
    images = [
        {"file": "/mnt/x/survey/CAM01/IMG_0001.JPG", "detections": []},
        {"file": "/mnt/x/survey/CAM01/IMG_0002.JPG", "detections": []},
        {"file": "E:\\elsewhere\\CAM02\\IMG_0001.JPG", "detections": []},
        {"file": "/mnt/x/survey/CAM03/IMG_0001.JPG", "detections": []},  # CAM01 or CAM02?
    ]
    report = import_detections(library, _write(tmp_path / "md.json", _md(images)))
    assert _rows(library)[0] == [(1, None, None), (2, None, None), (4, None, None)]
    assert report.matched_by == {"suffix": 3}
    assert report.unmatched == [
        "md.json: images[3] (/mnt/x/survey/CAM03/IMG_0001.JPG): no indexed photo at this path"
    ]


def test_a_file_made_on_a_subfolder_matches_by_suffix(tmp_path):
    library = _library(tmp_path, ["site1/CAM01/a.jpg", "site2/CAM01/a.jpg", "site1/CAM01/b.jpg"])
    images = [{"file": "CAM01/a.jpg", "detections": []}, {"file": "CAM01/b.jpg", "detections": []}]
    report = import_detections(library, _write(tmp_path / "md.json", _md(images)))
    library.catalog.dispose()
    # a.jpg is in two sites: ambiguous, so unmatched; b.jpg is only in site1.
    assert report.matched_by == {"suffix": 1} and report.unmatched_count == 1


def test_many_unmatched_lines_go_to_a_file(library, tmp_path):
    images = [{"file": f"nowhere/{n}.jpg", "detections": []} for n in range(SHOWN_UNMATCHED + 5)]
    images.append({"file": PATHS[0], "detections": []})
    report = import_detections(library, _write(tmp_path / "md.json", _md(images)))
    assert report.unmatched_count == SHOWN_UNMATCHED + 5
    assert len(report.unmatched) == SHOWN_UNMATCHED
    assert report.unmatched_file is not None
    lines = report.unmatched_file.read_text().splitlines()
    assert len(lines) == SHOWN_UNMATCHED + 5 and lines[-1].endswith(
        "(nowhere/304.jpg): no indexed photo at this path"
    )


def test_a_reimport_of_the_same_file_gives_the_same_rows_once(library, tmp_path):
    path = _write(tmp_path / "md.json", _md(MD_IMAGES))
    import_detections(library, path)
    first = _rows(library)
    import_detections(library, path, batch=1)
    assert _rows(library) == first
    with library.catalog.session() as s:
        assert s.query(DetectionSource).count() == 1


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not JSON"),
        ('{"images": 5, "detection_categories": {"1": "animal"}}', "not MegaDetector"),
        (
            _md(
                [
                    {"file": "CAM01/IMG_0002.JPG", "detections": []},
                    {
                        "file": "CAM01/IMG_0001.JPG",
                        "detections": [
                            {"category": "1", "conf": 0.9, "bbox": [1.5, 0.2, 0.1, 0.1]}
                        ],
                    },
                ]
            ),
            r"md.json: images\[1\] \(CAM01/IMG_0001.JPG\) detection 0: the box .* lies outside",
        ),
        (
            _md(
                [
                    {
                        "file": "CAM01/IMG_0001.JPG",
                        "detections": [{"category": "1", "conf": 3, "bbox": [0, 0, 1, 1]}],
                    }
                ]
            ),
            "confidence",
        ),
        (_md([{"detections": []}]), r'images\[0\]: no "file"'),
        (_md([], version="2.0"), "format_version 2.0"),
    ],
)
def test_bad_input_is_one_line_naming_the_entry_and_leaves_the_earlier_import(
    library, tmp_path, content, message
):
    path = tmp_path / "md.json"
    import_detections(library, _write(path, _md(MD_IMAGES)))
    before = _rows(library)
    with pytest.raises(BadInputError, match=message) as error:
        import_detections(library, _write(path, content), kind="megadetector", batch=1)
    assert "\n" not in str(error.value)
    assert _rows(library) == before
    with library.catalog.session() as s:
        assert [src.kind for src in s.query(DetectionSource)] == ["megadetector"]


def test_a_file_naming_no_indexed_photo_is_refused_and_the_earlier_import_stays(library, tmp_path):
    path = _write(tmp_path / "md.json", _md(MD_IMAGES))
    import_detections(library, path)
    before = _rows(library)
    elsewhere = [{"file": f"E:\\other\\{n}.jpg", "detections": []} for n in range(3)]
    with pytest.raises(BadInputError, match="no photo md.json names is indexed"):
        import_detections(library, _write(path, _md(elsewhere)))
    assert _rows(library) == before


def test_a_photo_named_twice_keeps_the_first_entry_and_progress_counts_bytes(library, tmp_path):
    images = [
        {"file": "CAM01/IMG_0001.JPG", "detections": [_box := {"category": "1", "conf": 0.8,
                                                              "bbox": [0, 0, 0.5, 0.5]}]},
        {"file": f"{ROOT}/CAM01/IMG_0001.JPG", "detections": []},
        {"file": "CAM01/IMG_0002.JPG", "detections": [_box]},
    ]  # fmt: skip
    path = _write(tmp_path / "md.json", _md(images))
    seen = []
    report = import_detections(library, path, progress=seen.append, batch=1)
    assert report.duplicates == 1 and report.frames == 2
    assert "images[1]" in report.unmatched[0] and "earlier entry" in report.unmatched[0]
    assert _rows(library)[0] == [(1, 0.8, None), (2, 0.8, None)]
    assert seen[-1].done == seen[-1].total == path.stat().st_size
    assert [p.done for p in seen] == sorted(p.done for p in seen)


def test_a_cancelled_import_leaves_the_earlier_one_whole(library, tmp_path):
    path = _write(tmp_path / "md.json", _md(MD_IMAGES))
    import_detections(library, path)
    before = _rows(library)
    token = CancelToken()
    token.cancel()
    with pytest.raises(Cancelled):
        import_detections(library, path, token=token, batch=1)
    assert _rows(library) == before


def _import_slowly(library_dir: str, path: str, started: multiprocessing.synchronize.Event) -> None:
    """Import in a child process, one frame per transaction, slowed so it can be killed."""
    from engine.detections import importing

    write = importing._write

    def slow_write(*args, **kwargs):
        write(*args, **kwargs)
        started.set()
        time.sleep(0.2)

    importing._write = slow_write
    library = Library.open(library_dir)
    importing.import_detections(library, Path(path), batch=1)


@pytest.mark.integration  # a process of its own
def test_an_import_killed_part_way_claims_nothing_and_the_next_gives_a_clean_import(tmp_path):
    path = _write(tmp_path / "md.json", _md(MD_IMAGES))
    clean_dir = tmp_path / "clean"
    clean_dir.mkdir()
    clean = _library(clean_dir)
    import_detections(clean, path)
    expected = _rows(clean)
    clean.catalog.dispose()

    library = _library(tmp_path)
    library.catalog.dispose()
    context = multiprocessing.get_context("spawn")
    started = context.Event()
    child = context.Process(
        target=_import_slowly, args=(str(tmp_path / "library"), str(path), started)
    )
    child.start()
    assert started.wait(60)
    child.kill()  # SIGKILL: no handler, no cleanup, as a crash or a power cut
    child.join()

    library = Library.open(tmp_path / "library")
    with library.catalog.session() as s:
        kinds = [src.kind for src in s.query(DetectionSource)]
        written = s.query(DetectionFrame).count()
        from engine.detections.store import detections_of

        seen = detections_of(s, [1, 2, 3])
    assert kinds == ["importing:megadetector"] and written >= 1  # killed part-way ...
    assert seen == {}  # ... and no reader counts it
    import_detections(library, path)
    assert _rows(library) == expected
    with library.catalog.session() as s:
        assert [src.kind for src in s.query(DetectionSource)] == ["megadetector"]
    library.catalog.dispose()
