"""`quadrat detections import` and `summary` on a library with hand-inserted photo rows."""

from __future__ import annotations

import json

from app.cli import main
from tests.test_detections_import import _library, _md, _write


def test_quadrat_detections_import_then_summary(tmp_path, capsys):
    _library(tmp_path).catalog.dispose()
    images = [
        {"file": "CAM01/IMG_0001.JPG", "detections": [
            {"category": "1", "conf": 0.9, "bbox": [0.1, 0.1, 0.2, 0.2]},
            {"category": "2", "conf": 0.1, "bbox": [0.5, 0.5, 0.2, 0.2]},
        ]},
        {"file": "CAM01/IMG_0002.JPG", "detections": [
            {"category": "1", "conf": 0.15, "bbox": [0.1, 0.1, 0.2, 0.2]},
        ]},
        {"file": "CAM02/IMG_0001.JPG", "detections": []},
        *({"file": f"gone/{n}.jpg", "detections": []} for n in range(25)),
    ]  # fmt: skip
    path = _write(tmp_path / "md.json", _md(images))
    library = str(tmp_path / "library")
    assert main(["detections", "import", str(path), "--library", library]) == 0
    out = capsys.readouterr().out
    assert "3 of 28 photos matched (3 by relative), 3 boxes and labels" in out
    assert out.count("unmatched: md.json: images[") == 20
    assert "... 25 unmatched in all" in out
    assert main(["detections", "summary", "--library", library]) == 0
    out = capsys.readouterr().out
    assert "3 frames looked at, 2 empty at 0.2, 0 unreadable" in out
    assert "boxes at 0.2 or above: animal 1" in out
    assert (
        main(["detections", "summary", "--library", library, "--threshold", "0.05", "--json"]) == 0
    )
    (summary,) = json.loads(capsys.readouterr().out)
    assert summary["empty"] == 1 and summary["boxes"] == {"animal": 2, "person": 1}


def test_a_file_that_is_not_one_is_one_line_and_exit_code(tmp_path, capsys):
    _library(tmp_path).catalog.dispose()
    path = _write(tmp_path / "x.json", '{"rows": []}')
    code = main(["detections", "import", str(path), "--library", str(tmp_path / "library")])
    err = capsys.readouterr().err
    assert code != 0 and "not a file Quadrat recognises" in err
    assert len([line for line in err.splitlines() if line.strip()]) == 1


def test_quadrat_search_takes_the_detection_filters(tmp_path, capsys, copy_cli_small_demo_library):
    """On an indexed collection: an imported file's frames found empty, with an animal, or
    labelled, are what `quadrat search` returns under --empty, --detected and --label."""
    from engine.catalog.library import Library
    from engine.catalog.models import Collection, Image

    lib = copy_cli_small_demo_library(tmp_path / "lib")
    with Library.open(lib) as library, library.catalog.session() as s:
        root = s.query(Collection.root).scalar()
        paths = [p for (p,) in s.query(Image.rel_path).order_by(Image.id).limit(6)]
    images = [
        {"file": f"{root}/{paths[0]}", "detections": [{"category": "1", "conf": 0.95,
         "bbox": [0.2, 0.2, 0.1, 0.1], "classifications": [["0", 0.9]]}]},
        {"file": f"{root}/{paths[1]}", "detections": [{"category": "1", "conf": 0.1,
         "bbox": [0.2, 0.2, 0.1, 0.1]}]},
        {"file": f"{root}/{paths[2]}", "detections": []},
        {"file": f"{root}/{paths[3]}", "detections": [{"category": "2", "conf": 0.7,
         "bbox": [0.5, 0.5, 0.3, 0.4]}]},
    ]  # fmt: skip
    md = _write(tmp_path / "md.json", _md(images, classification_categories={"0": "red fox"}))
    assert main(["detections", "import", str(md), "--library", str(lib)]) == 0
    capsys.readouterr()

    def found(*flags: str) -> set[str]:
        argv = ["search", "a photo", "--library", str(lib), "--top", "1000", "--json", *flags]
        assert main(argv) == 0
        lines = capsys.readouterr().out.splitlines()
        return {json.loads(line)["rel_path"] for line in lines if line.strip()}

    assert found("--empty") == {paths[1], paths[2]}
    assert found("--empty", "0.05") == {paths[2]}
    assert found("--not-empty") == {paths[0], paths[3]}
    assert found("--detected", "animal") == {paths[0]}
    assert found("--label", "Red Fox") == {paths[0]}
