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
