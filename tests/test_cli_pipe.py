"""A command whose reader goes away (`quadrat models list | grep -q …`, `| head`) stops
quietly with the shell's SIGPIPE status, not with an error line and a log entry."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_a_reader_that_goes_away_ends_the_command_quietly(tmp_path: Path) -> None:
    env = {**os.environ, "QUADRAT_HOME": str(tmp_path), "PYTHONPATH": str(REPO)}
    command = "from app.cli import main; raise SystemExit(main(['models', 'list']))"
    child = subprocess.Popen(
        [sys.executable, "-c", command],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert child.stdout is not None and child.stderr is not None
    child.stdout.close()  # the reader is gone before the list is written
    err = child.stderr.read().decode()
    assert child.wait(120) == 141, err
    assert "error" not in err and "Traceback" not in err and "Exception ignored" not in err
