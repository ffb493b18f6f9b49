"""`quadrat --self-test`: one line, exit 0 when everything works, the failing step named when
not, and nothing left in the user's folders."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from app import selftest
from app.cli import main

pytestmark = pytest.mark.integration  # (runs processes; the fast lane leaves it out)

PASSED = re.compile(
    r"self-test passed: demo written \(108 photos\), indexed, searched, judged 5, metrics, "
    r"window opened and closed — \d+\.\d s"
)


def _quadrat_command() -> list[str]:
    """The installed `quadrat` script beside this Python, else the same entry point by module."""
    script = shutil.which("quadrat", path=str(Path(sys.executable).parent))
    return [script] if script else [sys.executable, "-m", "app.cli"]


def _files_under(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()]


def test_self_test_passes_in_a_clean_home_and_prints_one_line(tmp_path: Path):
    home, data, tmp = tmp_path / "home", tmp_path / "quadrat-home", tmp_path / "tmp"
    for folder in (home, data, tmp):
        folder.mkdir()
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")
    }
    env.update(HOME=str(home), QUADRAT_HOME=str(data), TMPDIR=str(tmp), OMP_NUM_THREADS="2")
    proc = subprocess.run(
        [*_quadrat_command(), "--self-test"],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 1 and PASSED.fullmatch(lines[0]), proc.stdout
    assert proc.stderr == ""
    # The user's data folder is untouched and the throwaway folder is gone.
    assert _files_under(data) == []
    assert list(tmp.glob("quadrat-self-test-*")) == []
    assert not [p for p in home.rglob("*") if "quadrat" in p.name.lower()]


def test_a_failing_step_is_named_and_exits_1(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    quadrat_home: Path,
    tmp_path: Path,
):
    def broken_index(state: object) -> None:
        raise OSError("No space left on device")

    monkeypatch.setattr(selftest, "_index", broken_index)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    assert main(["--self-test"]) == 1

    out = capsys.readouterr()
    assert out.out == ""
    lines = out.err.splitlines()
    assert len(lines) == 1, out.err
    assert lines[0].startswith(
        "self-test failed at step 'index': OSError: No space left on device — "
    )
    # The demo step before it ran in the throwaway folder, which is removed again; the user's
    # data folder (QUADRAT_HOME) is untouched and still the one in use.
    assert os.environ["QUADRAT_HOME"] == str(quadrat_home)
    assert _files_under(quadrat_home) == []
    assert _left_by_quadrat(tmp_path) == []


def test_a_step_that_gives_wrong_results_says_what_was_wrong(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    # A demo collection that loses a photo on the way to disk is caught by the count.
    import engine.demo.collection

    real = engine.demo.collection.write_demo_collection

    def lossy(dest: Path, **kwargs: object) -> object:
        written = real(dest, **kwargs)
        next(dest.rglob("*.jpg")).unlink()
        return written

    monkeypatch.setattr(engine.demo.collection, "write_demo_collection", lossy)
    assert main(["--self-test"]) == 1
    assert capsys.readouterr().err.startswith(
        "self-test failed at step 'demo': 107 photos on disk, the demo says 108 — "
    )


def _left_by_quadrat(folder: Path) -> list[Path]:
    """What is left in a temporary folder, less torch's own compiler cache: the first process
    to load a model makes `torchinductor_<user>` in the temporary folder of that moment and
    keeps it, so whether it appears here depends on which test ran first, not on Quadrat."""
    return [p for p in folder.iterdir() if not p.name.startswith("torchinductor_")]


def test_self_test_takes_no_arguments(capsys: pytest.CaptureFixture[str]):
    assert main(["--self-test", "gui"]) == 2
    assert "takes no arguments" in capsys.readouterr().err


def test_the_search_step_runs_the_text_method_users_run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
):
    # The self-test searches the way `quadrat search` and the window do, through the method
    # registry: a broken text method must fail it at the search step.
    from engine.methods.text import TextMethod

    def broken_run(*args: object, **kwargs: object) -> object:
        raise RuntimeError("text method broken")

    monkeypatch.setattr(TextMethod, "run", broken_run)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert main(["--self-test"]) == 1
    assert capsys.readouterr().err.startswith(
        "self-test failed at step 'search': RuntimeError: text method broken — "
    )
    assert _left_by_quadrat(tmp_path) == []
