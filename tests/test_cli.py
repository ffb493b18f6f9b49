"""The `quadrat` command line, end to end on the demo collection (docs/SPEC.md §5)."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from app.cli import main


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def indexed_demo(tmp_path_factory, copy_cli_demo_library):
    """The demo collection indexed with the demo model through the CLI: this module's copy of
    the session's library (the tests below import judgments into it)."""
    return copy_cli_demo_library(tmp_path_factory.mktemp("cli") / "lib")


def relevant_by_query(demo_collection) -> dict[str, tuple[str, set[str]]]:
    with open(demo_collection.queries_path, newline="") as f:
        queries = {row["query_id"]: row["query_text"] for row in csv.DictReader(f)}
    relevant: dict[str, set[str]] = defaultdict(set)
    with open(demo_collection.judgments_path, newline="") as f:
        for row in csv.DictReader(f):
            relevant[row["query_id"]].add(row["image_path"])
    return {qid: (text, relevant[qid]) for qid, text in queries.items()}


def test_index_json_summary_counts_every_photo(capsys, tmp_path, demo_collection):
    code, out, _ = run(
        capsys,
        "index",
        demo_collection.root,
        "--library",
        tmp_path / "lib",
        "--model",
        "demo",
        "--json",
    )
    assert code == 0
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["indexed"] == demo_collection.image_count
    assert (summary["unchanged"], summary["removed"], summary["skipped"]) == (0, 0, [])

    code, out, _ = run(
        capsys, "index", demo_collection.root, "--library", tmp_path / "lib", "--json"
    )
    again = json.loads(out.strip().splitlines()[-1])
    assert (again["indexed"], again["unchanged"]) == (0, demo_collection.image_count)


def test_demo_model_puts_the_right_shapes_on_top_for_every_query(
    capsys, indexed_demo, demo_collection
):
    """P@10 >= 0.9 for every "<colour> <shape>" query, through `quadrat search --json`."""
    precisions = {}
    species = {str(q.query_id) for q in demo_collection.queries if q.category == "species"}
    for _qid, (text, relevant) in relevant_by_query(demo_collection).items():
        if _qid not in species:
            continue
        code, out, _ = run(capsys, "search", text, "--library", indexed_demo, "--top", 10, "--json")
        assert code == 0
        hits = [json.loads(line) for line in out.strip().splitlines()]
        assert [h["rank"] for h in hits] == list(range(1, 11))
        assert all({"rank", "image_id", "path", "score"} <= set(h) for h in hits)
        scores = [h["score"] for h in hits]
        assert scores == sorted(scores, reverse=True)
        root = Path(demo_collection.root)
        found = sum(Path(h["path"]).relative_to(root).as_posix() in relevant for h in hits)
        precisions[text] = found / 10
    assert len(precisions) >= 12
    assert min(precisions.values()) >= 0.9, precisions


def test_search_by_example_image_returns_the_same_class_first(
    capsys, indexed_demo, demo_collection
):
    rel, label = sorted(demo_collection.labels.items())[0]
    query = Path(demo_collection.root) / rel
    code, out, _ = run(
        capsys, "search", "--image", query, "--library", indexed_demo, "--top", 5, "--json"
    )
    assert code == 0
    hits = [json.loads(line) for line in out.strip().splitlines()]
    assert Path(hits[0]["path"]) == query  # the photo itself is its own best match
    labels = [
        demo_collection.labels[Path(h["path"]).relative_to(demo_collection.root).as_posix()]
        for h in hits
    ]
    assert labels.count(label) >= 4


def test_taxon_filter_restricts_results(capsys, indexed_demo, demo_collection):
    rel = sorted(demo_collection.labels)[0]
    folder = rel.split("/")[-2]
    genus = folder.split("_")[6]
    code, out, _ = run(
        capsys,
        "search",
        "blue square",
        "--library",
        indexed_demo,
        "--taxon",
        genus,
        "--json",
        "--top",
        50,
    )
    assert code == 0
    hits = [json.loads(line) for line in out.strip().splitlines()]
    assert hits and all(f"_{genus}_" in h["path"] for h in hits)


def one_line_error(code: int, err: str, expected_code: int, *words: str) -> None:
    lines = [line for line in err.strip().splitlines() if line]
    assert code == expected_code, err
    assert len(lines) == 1, err
    assert "Traceback" not in err
    for word in words:
        assert word.lower() in lines[0].lower(), (word, lines[0])


def test_bad_input_gives_one_clear_line_and_exit_2(capsys, tmp_path, indexed_demo):
    lib = tmp_path / "lib"
    code, _, err = run(capsys, "index", tmp_path / "missing", "--library", lib, "--model", "demo")
    one_line_error(code, err, 2, "not found")
    (tmp_path / "empty").mkdir()
    code, _, err = run(capsys, "index", tmp_path / "empty", "--library", lib, "--model", "demo")
    one_line_error(code, err, 2, "no photos")
    code, _, err = run(
        capsys, "index", tmp_path / "empty", "--library", lib, "--model", "NoSuchNet:none"
    )
    one_line_error(code, err, 2, "NoSuchNet")
    junk = tmp_path / "weights.safetensors"
    junk.write_bytes(b"this is not a checkpoint at all")
    code, _, err = run(
        capsys, "search", "red circle", "--library", indexed_demo, "--model", f"RN50:{junk}"
    )
    one_line_error(code, err, 2, "weights.safetensors")
    code, _, err = run(capsys, "search", "   ", "--library", indexed_demo)
    one_line_error(code, err, 2, "empty")
    code, _, err = run(capsys, "search", "f" * 5000, "--library", indexed_demo)
    one_line_error(code, err, 2, "5000", "limit")
    code, _, err = run(capsys, "search", "red circle", "--library", indexed_demo, "--top", "zero")
    one_line_error(code, err, 2, "--top")
    code, _, err = run(capsys, "search", "red circle", "--library", tmp_path / "new-lib")
    one_line_error(code, err, 2, "index")


def test_searching_with_another_model_says_which_model_to_use(capsys, tmp_path, indexed_demo):
    import open_clip
    from safetensors.torch import save_file

    from engine.models.encoders import demo_model_spec

    arch = demo_model_spec().split(":", 1)[0]
    from engine.models.encoders import load_encoder

    load_encoder("demo", device="cpu")  # registers the demo architecture with open_clip
    model = open_clip.create_model(arch)  # same architecture, random weights: another model
    other = tmp_path / "other.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(other))
    capsys.readouterr()  # open_clip's own warning about the random model above
    code, _, err = run(
        capsys, "search", "red circle", "--library", indexed_demo, "--model", f"{arch}:{other}"
    )
    one_line_error(code, err, 2, "--model", "demo")


def test_installed_command_reports_errors_without_traceback(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "app.cli",
            "index",
            str(tmp_path / "missing"),
            "--library",
            str(tmp_path / "l"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "not found" in proc.stderr


def test_import_then_export_judgments_and_copy_relevant_photos(
    capsys, tmp_path, indexed_demo, demo_collection
):
    code, out, _ = run(
        capsys,
        "import",
        demo_collection.queries_path,
        "--judgments",
        demo_collection.judgments_path,
        "--library",
        indexed_demo,
    )
    assert code == 0
    with open(demo_collection.judgments_path, newline="") as f:
        expected = sum(1 for _ in csv.DictReader(f))
    assert f"{expected} judgments imported" in out
    code, out, _ = run(
        capsys,
        "export",
        "judgments",
        tmp_path / "q.qrels",
        "--format",
        "qrels",
        "--library",
        indexed_demo,
    )
    assert code == 0
    assert len((tmp_path / "q.qrels").read_text().splitlines()) == expected
    code, out, _ = run(
        capsys,
        "export",
        "relevant-photos",
        tmp_path / "copies",
        "--query",
        1,
        "--library",
        indexed_demo,
    )
    assert code == 0
    assert len(list((tmp_path / "copies").iterdir())) == len(demo_collection.relevant[1])


def test_the_window_without_a_display_gives_one_clear_line(tmp_path):
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")
    }
    proc = subprocess.run(
        [sys.executable, "-m", "app.cli"], capture_output=True, text=True, timeout=120, env=env
    )
    assert proc.returncode == 1
    assert proc.stderr.strip().count("\n") == 0 and "no display" in proc.stderr


def test_the_command_line_uses_the_settings_the_window_saves(
    capsys, tmp_path, small_demo_collection
):
    from app.settings import Settings, save_settings

    library = tmp_path / "my-library"
    database = tmp_path / "elsewhere" / "catalog.db"
    database.parent.mkdir()
    save_settings(
        Settings(model="demo", device="cpu", batch_size=4, library_dir=str(library),
                 database_url=f"sqlite:///{database}")
    )  # fmt: skip
    code, out, err = run(capsys, "index", small_demo_collection.root, "--json")
    assert code == 0, err
    assert json.loads(out.strip().splitlines()[-1])["indexed"] == small_demo_collection.image_count
    assert database.exists()  # the catalog went where the settings say
    assert (library / "indexes").is_dir() and not (library / "catalog.sqlite3").exists()
    code, out, _ = run(capsys, "search", "red circle", "--top", 3, "--json")
    assert code == 0 and len(out.strip().splitlines()) == 3


def test_the_progress_bar_counts_a_metadata_file_in_bytes_and_photos_as_photos(
    monkeypatch,
) -> None:
    """Reading a metadata file reports bytes through the indexing callback: the bar says MB
    then, not "img", and goes back to photos for the photos."""
    import io

    from app.cli.common import TqdmProgress
    from engine.indexing.coco import READING_METADATA
    from engine.progress import Progress

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(sys, "stderr", Terminal())
    bar = TqdmProgress("indexing")
    bar(Progress(done=3_000_000, total=6_000_000, message=READING_METADATA))
    assert (bar._bar.unit, bar._bar.unit_scale) == ("B", True)
    assert "3.00M/6.00M" in str(bar._bar) and "B/s" in str(bar._bar)
    bar(Progress(done=5, total=108, message="indexing"))
    assert (bar._bar.unit, bar._bar.unit_scale) == ("img", False)
    assert "5/108" in str(bar._bar)
    bar.close()
