"""The window's first answer without torch, and the runtime setting choosing the encoder.

An offscreen window is opened in a fresh process (so no other test's imports leak in) on an
indexed demo library whose model has an ONNX export in the store; a text query is answered
and shown, then what the process imported is read. The runtime is then set to torch in the
settings dialog and the next search's encoder is named.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration  # (runs processes; the fast lane leaves it out)

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "open_clip", "diffusers", "transformers")

# Run in the child: the window on the settings' library; each step prints one JSON line.
CHILD = """
import json, sys
from widgets.qtcompat import keep_none_alive
keep_none_alive()
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication
from app.controllers.application import Application

HEAVY = ("torch", "open_clip", "diffusers", "transformers")
qt = QApplication(sys.argv[:1])
# A failure in a slot ends the run at once rather than at the time limit.
sys.excepthook = lambda *error: (sys.__excepthook__(*error), qt.exit(1))
app = Application()
steps = iter(["first", "after-settings"])
step = next(steps)

def say(**fields):
    print(json.dumps(fields), flush=True)

def ask(text):
    app.window.query_bar.edit.setText(text)
    app.window.query_bar.submit()

def ready(ok, _message):
    if ok and step == "first" and app.window.results_model.rowCount() == 0:
        ask("yellow")

def shown(*_args):
    global step
    rows = app.window.results_model.rowCount()
    if rows == 0 or step is None:
        return
    encoder = type(app.session.encoder).__name__
    say(step=step, rows=rows, encoder=encoder, heavy=[m for m in HEAVY if m in sys.modules])
    step = next(steps, None)
    if step == "after-settings":
        dialog = app.open_settings()
        dialog.runtime.setCurrentIndex(dialog.runtime.findData("torch"))
        dialog.accept()
        say(step="saved", runtime=app.settings.runtime)
        app.window.results_model.clear()
        ask("blue")
    else:
        QTimer.singleShot(0, qt.quit)

app.session.readyChanged.connect(ready)
app.window.results_model.modelReset.connect(shown)
app.window.results_model.rowsInserted.connect(shown)
app.show()
QTimer.singleShot(0, app.start)
QTimer.singleShot(150000, qt.quit)
qt.aboutToQuit.connect(app.shutdown)
qt.exec()
"""


@pytest.fixture(scope="module")
def window_run(
    tmp_path_factory: pytest.TempPathFactory, demo_encoder, small_demo_collection
) -> list[dict[str, object]]:
    """The child's JSON lines: a home whose store holds the demo model's ONNX export and whose
    settings name a library of the small demo collection indexed with the demo model."""
    from app.settings import Settings, save_settings
    from engine.catalog.library import Library
    from engine.indexing.indexer import Indexer
    from engine.models.onnx_runtime import onnx_encoder_for

    home = tmp_path_factory.mktemp("first-answer-home")
    library_dir = tmp_path_factory.mktemp("first-answer") / "lib"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("QUADRAT_HOME", str(home))
        from app import paths

        exported = onnx_encoder_for(demo_encoder, paths.models_dir(), "onnx")
        assert exported is not demo_encoder  # both towers exported and verified
        with Library.open(library_dir) as library:
            Indexer(library, demo_encoder).run(small_demo_collection.root)
        save_settings(Settings(library_dir=str(library_dir), runtime="auto"))
    env = {
        **os.environ,
        "QUADRAT_HOME": str(home),
        "QT_QPA_PLATFORM": "offscreen",
        "PYTHONPATH": str(ROOT),
    }
    done = subprocess.run(
        [sys.executable, "-c", CHILD],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert lines, done.stderr[-3000:]
    return lines


def test_the_window_answers_a_text_query_without_torch(window_run: list[dict]) -> None:
    first = window_run[0]
    assert first["step"] == "first"
    assert first["rows"] > 0  # the answer is on screen
    assert first["encoder"] == "OnnxEncoder"
    assert first["heavy"] == []  # none of torch, open_clip, diffusers, transformers


def test_the_runtime_setting_changes_the_next_searchs_encoder(window_run: list[dict]) -> None:
    steps = {line["step"]: line for line in window_run}
    assert steps.get("saved", {}).get("runtime") == "torch", window_run
    after = steps["after-settings"]
    assert after["rows"] > 0
    assert after["encoder"] == "OpenClipEncoder"  # torch now encodes the query
    assert "torch" in after["heavy"]


def test_the_session_follows_the_runtime_setting(demo_encoder, quadrat_home: Path) -> None:
    """In process: the encoder the next search gets after the runtime setting changes."""
    from dataclasses import replace

    from app import paths
    from app.controllers.session import LibrarySession
    from app.settings import Settings
    from app.workers import InlineTaskRunner
    from engine.models.encoders import OpenClipEncoder
    from engine.models.onnx_runtime import OnnxEncoder, onnx_encoder_for

    onnx_encoder_for(demo_encoder, paths.models_dir(), "onnx")  # the export in the store
    settings = Settings(runtime="auto")
    session = LibrarySession(InlineTaskRunner(), quadrat_home / "library", settings)
    session.library_spec, session.model_key = "demo", demo_encoder.model_key
    text_only = session.ensure_encoder()
    assert isinstance(text_only, OnnxEncoder) and text_only.export.text.usable

    session.apply_settings(replace(settings, runtime="torch"))
    assert isinstance(session.ensure_encoder(), OpenClipEncoder)
    session.apply_settings(replace(settings, runtime="onnx"))
    assert isinstance(session.ensure_encoder(), OnnxEncoder)
