"""ONNX exports made when a search model is downloaded or imported: in the store, once per model
key, cancellable, a refusal said in one line; `quadrat models import` and the window's model
chooser make them, and `quadrat models list --json` says which runtimes a model has."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from engine.errors import Cancelled
from engine.models.onnx_runtime import (
    TowerRecord,
    exports_by_spec,
    read_export,
    runtimes_of,
)
from engine.models.store import ModelStore, export_outcome
from engine.progress import CancelToken, Progress

pytestmark = pytest.mark.integration  # (runs processes; the fast lane leaves it out)

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def clip_folder(tmp_path: Path) -> Path:
    """An open_clip model folder (config and weights) of the demo architecture, as a user
    would import one."""
    models = ROOT / "resources" / "models"
    folder = tmp_path / "my-clip"
    folder.mkdir()
    shutil.copyfile(models / "quadrat-demo.safetensors", folder / "open_clip_model.safetensors")
    config = json.loads((models / "quadrat-demo.json").read_text(encoding="utf-8"))
    (folder / "open_clip_config.json").write_text(
        json.dumps({"model_cfg": config, "preprocess_cfg": {}}), encoding="utf-8"
    )
    return folder


def test_an_imported_model_is_exported_once_beside_it(tmp_path: Path, clip_folder: Path) -> None:
    store = ModelStore(tmp_path / "store")
    spec = store.import_file(str(clip_folder)).spec
    assert runtimes_of(spec, exports_by_spec(store.root)) == ["torch"]
    steps: list[str] = []

    export = store.export_onnx(spec, progress=lambda p: steps.append(p.message))
    assert export is not None and export.image.usable and export.text.usable
    assert any("image tower" in step for step in steps)  # progress was reported
    assert runtimes_of(spec, exports_by_spec(store.root)) == ["torch", "onnx"]
    written = {p.name: p.stat().st_mtime_ns for p in export.folder.iterdir()}
    again = store.export_onnx(spec)
    assert again is not None and again.folder == export.folder
    assert {p.name: p.stat().st_mtime_ns for p in again.folder.iterdir()} == written  # not remade


def test_a_cancelled_export_leaves_nothing(tmp_path: Path, clip_folder: Path) -> None:
    store = ModelStore(tmp_path / "store")
    spec = store.import_file(str(clip_folder)).spec
    cancel = CancelToken()

    def cancel_at_the_text_tower(progress: Progress) -> None:
        if "text tower" in progress.message:
            cancel.cancel()  # as the chooser's Cancel does while the image tower exported

    with pytest.raises(Cancelled):
        store.export_onnx(spec, progress=cancel_at_the_text_tower, cancel=cancel)
    assert runtimes_of(spec, exports_by_spec(store.root)) == ["torch"]
    assert not [p for p in (store.root / ".onnx").rglob("*") if p.is_file()]
    ahead = CancelToken()
    ahead.cancel()
    with pytest.raises(Cancelled):  # cancelled before torch loads the model
        store.export_onnx(spec, cancel=ahead)


def test_a_refused_tower_is_one_line_naming_torch(tmp_path: Path, clip_folder: Path) -> None:
    store = ModelStore(tmp_path / "store")
    spec = store.import_file(str(clip_folder)).spec
    export = store.export_onnx(spec)
    assert export is not None
    assert "ONNX Runtime encodes" in export_outcome(export)
    refused = TowerRecord(None, 0.93, "cosine 0.930000 to torch on the probe batch, below 0.9999")
    one = export_outcome(replace(export, image=refused))
    assert "\n" not in one and "image tower refused (cosine 0.930000" in one
    assert "text tower runs in ONNX Runtime" in one and "torch encodes it" in one
    none = export_outcome(replace(export, image=refused, text=refused))
    assert "\n" not in none and none.endswith("torch encodes this model")
    assert read_export(store.root, export.model_key) is not None


def _quadrat(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        cwd=ROOT,
        env={**os.environ, "QUADRAT_HOME": str(home), "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


def test_models_import_exports_and_list_says_which_runtimes(
    tmp_path: Path, clip_folder: Path
) -> None:
    kept_torch = _quadrat(
        tmp_path / "torch-home", "models", "import", str(clip_folder), "--runtime", "torch"
    )
    assert kept_torch.returncode == 0, kept_torch.stderr
    assert "ONNX" not in kept_torch.stdout
    torch_rows = json.loads(_quadrat(tmp_path / "torch-home", "models", "list", "--json").stdout)
    mine = [row for row in torch_rows if row["spec"].startswith("local-dir:")]
    assert [row["runtimes"] for row in mine] == [["torch"]]

    imported = _quadrat(tmp_path / "home", "models", "import", str(clip_folder))
    assert imported.returncode == 0, imported.stderr
    assert "exported to ONNX and verified against torch" in imported.stdout
    rows = json.loads(_quadrat(tmp_path / "home", "models", "list", "--json").stdout)
    mine = [row for row in rows if row["spec"].startswith("local-dir:")]
    assert [row["runtimes"] for row in mine] == [["torch", "onnx"]]
    assert all("onnx" not in row["runtimes"] for row in rows if row["role"] != "encoder")


def test_the_window_exports_an_imported_model_in_a_worker(
    qtbot, tmp_path: Path, clip_folder: Path
) -> None:
    import threading

    from app.controllers.models import ModelsController
    from app.controllers.session import LibrarySession
    from app.settings import Settings
    from app.workers import TaskRunner

    runner = TaskRunner()
    store = ModelStore(tmp_path / "store")
    session = LibrarySession(runner, tmp_path / "library", Settings(runtime="auto"))
    models = ModelsController(runner, session, None, store=store)
    messages: list[str] = []
    models.message.connect(messages.append)
    threads: list[str] = []
    export = store.export_onnx

    def recorded(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        threads.append(threading.current_thread().name)
        return export(*args, **kwargs)

    store.export_onnx = recorded  # type: ignore[method-assign]
    try:
        with qtbot.waitSignal(models.modelChosen, timeout=120_000) as chosen:
            models.import_model(str(clip_folder))
        spec = chosen.args[0]
        assert runtimes_of(spec, exports_by_spec(store.root)) == ["torch", "onnx"]
        assert threads and threads[0] != threading.main_thread().name  # never the GUI thread
        assert any("exported to ONNX" in line for line in messages), messages
    finally:
        runner.cancel_all()
        assert runner.wait(60)
