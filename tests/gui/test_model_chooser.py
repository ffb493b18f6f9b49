"""The model chooser, driven like a new user would: no model on disk, no network, a download
that is cancelled and resumed, the demo model, an imported pack, and changing the model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from app.controllers.application import Application
from app.settings import DEFAULT_MODEL, Settings, load_settings
from engine.models.offers import model_offers
from engine.models.store import ModelStore
from engine.progress import CancelToken, Progress, ProgressCallback, no_progress

# The offscreen platform cannot raise a window above another (the chooser is raised when it is
# asked for again) nor propagate size hints; neither says anything about the application.
offscreen = pytest.mark.qt_log_ignore(
    "does not support propagateSizeHints", "does not support raise"
)

MB = 1_000_000
DOWNLOAD = 150 * MB


@dataclass(frozen=True)
class Installed:
    spec: str
    size_bytes: int
    path: Path | None
    origin: str
    role: str = "encoder"


class FakeStore:
    """A model store on a temporary folder whose download source is local: it hands out bytes
    in 10 MB steps, stopping at `stall_at` until released."""

    def __init__(self, root: Path, *, stall_at: int | None = None) -> None:
        self.root = root
        self.endpoint = "http://127.0.0.1:9"  # the hub, as the chooser asks it: never there
        self.stall_at = stall_at
        self.release = threading.Event()
        self.installed_specs = {"demo"}
        self.started_from: list[int] = []

    def partial(self, spec: str) -> Path:
        return self.root / (spec.replace(":", "_").replace("/", "_") + ".part")

    def is_installed(self, spec: str) -> bool:
        return spec in self.installed_specs

    def download(
        self, spec: str, progress: ProgressCallback = no_progress, cancel: CancelToken | None = None
    ) -> Installed:
        cancel = cancel or CancelToken()
        part = self.partial(spec)
        part.parent.mkdir(parents=True, exist_ok=True)
        done = part.stat().st_size if part.exists() else 0
        self.started_from.append(done)
        while done < DOWNLOAD:
            while self.stall_at is not None and done >= self.stall_at and not self.release.is_set():
                cancel.check()  # the partial file stays for the next attempt
                progress(Progress(done, DOWNLOAD))  # as a slow connection goes on reporting
                time.sleep(0.01)
            cancel.check()
            with part.open("ab") as out:
                out.truncate(done + 10 * MB)
            done += 10 * MB
            progress(Progress(done, DOWNLOAD))
        self.installed_specs.add(spec)
        return Installed(spec, DOWNLOAD, self.root / spec, "download")

    def import_pack(self, pack: Path, progress: ProgressCallback = no_progress) -> Installed:
        weights = self.root / "imported.safetensors"
        weights.parent.mkdir(parents=True, exist_ok=True)
        weights.write_bytes(b"weights")
        spec = f"ViT-B-32:{weights}"
        self.installed_specs.add(spec)
        return Installed(spec, 1, self.root, "pack")

    def import_file(self, spec_or_path: str) -> Installed:
        raise AssertionError("a pack must be imported as a pack")


def offline_store(root: Path) -> ModelStore:
    """The real model store, its download source a local port where nothing listens."""
    return ModelStore(root, endpoint="http://127.0.0.1:9")


def start(qtbot, make_app, tmp_path: Path, store: Any, model: str = DEFAULT_MODEL) -> Any:
    settings = Settings(model=model, library_dir=str(tmp_path / "library"), batch_size=16)
    app = make_app(settings=settings, model_store=store)
    qtbot.waitUntil(lambda: app.session.library is not None, timeout=20_000)
    return app


def chooser_shown(app: Application) -> bool:
    return app.models.chooser is not None and app.models.chooser.isVisible()


@offscreen
def test_first_start_without_a_model_offers_the_chooser(qtbot, make_app, tmp_path) -> None:
    app = start(qtbot, make_app, tmp_path, offline_store(tmp_path / "models"))
    qtbot.waitUntil(lambda: chooser_shown(app), timeout=5_000)
    chooser = app.models.chooser
    assert chooser is not None
    offers = model_offers("encoder")  # the search models' tab, shown first
    assert [r.spec for r in chooser.rows()] == [o.spec for o in offers]
    assert [r.installed for r in chooser.rows()] == [o.spec == "demo" for o in offers]
    table = chooser.table
    shown = [[table.topLevelItem(i).text(c) for c in range(5)] for i in range(len(offers))]
    assert shown[0][2:] == ["bundled", "450 MB", "✓ on disk"]
    b32 = next(i for i, o in enumerate(offers) if o.spec == DEFAULT_MODEL)
    assert shown[b32] == ["ViT-B/32 · LAION-2B", offers[b32].good_at, "605 MB", "1.2 GB", ""]
    assert any("INQUIRE" in row[1] for row in shown) and any("BioCLIP" in r[0] for r in shown)
    assert chooser.selected_spec() == DEFAULT_MODEL  # the model the settings name
    assert chooser.use_button.text() == "Download and use the selected model"
    assert "needs a model" in chooser.reason.text()


@offscreen
def test_offline_the_added_folder_is_kept_and_the_demo_model_indexes_it(
    qtbot, make_app, tmp_path, photos
) -> None:
    app = start(qtbot, make_app, tmp_path, offline_store(tmp_path / "models"))
    started = time.monotonic()
    app.library.add_folder(photos)
    qtbot.waitUntil(lambda: chooser_shown(app) and "“photos”" in app.models.chooser.reason.text())
    assert time.monotonic() - started < 5  # the chooser, not a 40-second hang
    assert not app.library.indexing
    # The folder is in the library at once, listed and waiting.
    root = str(photos.resolve())
    qtbot.waitUntil(lambda: [s.root for s in app.library.stats] == [root], timeout=10_000)
    assert app.library.stats[0].indexed == 0 and app.library.stats[0].pending == 108

    chooser = app.models.chooser
    with qtbot.waitSignal(app.library.indexingFinished, timeout=60_000) as finished:
        chooser.demo_button.click()
    assert finished.args[0] is not None
    assert not chooser.isVisible()
    qtbot.waitUntil(lambda: bool(app.library.stats) and app.library.stats[0].indexed == 108)
    assert [s.root for s in app.library.stats] == [root]  # the same collection, once
    qtbot.waitUntil(lambda: load_settings().settings.model == "demo", timeout=5_000)


@offscreen
def test_a_failed_download_says_what_failed_in_one_sentence(
    qtbot, make_app, tmp_path, photos
) -> None:
    app = start(qtbot, make_app, tmp_path, offline_store(tmp_path / "models"))
    app.library.add_folder(photos)
    qtbot.waitUntil(lambda: chooser_shown(app))
    chooser = app.models.chooser
    chooser.select(DEFAULT_MODEL)
    chooser.use_button.click()
    qtbot.waitUntil(chooser.error.isVisible, timeout=5_000)
    text = chooser.error.text()
    assert text.startswith("Could not download ViT-B/32 · LAION-2B: ")
    assert "127.0.0.1:9 cannot be reached" in text  # what failed, from the error message
    assert text.endswith(".") and text.count(". ") == 0 and "\n" not in text
    assert "quadrat models" not in text and "--model" not in text  # command-line advice
    # The dialog stays open with every other way on.
    assert chooser.isVisible()
    assert chooser.demo_button.isEnabled() and chooser.import_button.isEnabled()
    assert chooser.table.isEnabled() and chooser.use_button.isEnabled()
    assert not app.library.indexing


@offscreen
def test_a_download_shows_progress_can_be_cancelled_and_resumes(
    qtbot, make_app, tmp_path, photos
) -> None:
    store = FakeStore(tmp_path / "models", stall_at=30 * MB)
    app = start(qtbot, make_app, tmp_path, store)
    app.library.add_folder(photos)
    qtbot.waitUntil(lambda: chooser_shown(app))
    chooser = app.models.chooser
    chooser.select(DEFAULT_MODEL)
    chooser.use_button.click()
    qtbot.waitUntil(lambda: chooser.progress_label.text() == "30.0 of 150.0 MB", timeout=5_000)
    assert chooser.progress_box.isVisible() and chooser.progress.value() == 200
    assert not chooser.use_button.isEnabled() and not chooser.demo_button.isEnabled()

    chooser.cancel_button.click()
    qtbot.waitUntil(lambda: "resumes" in chooser.status.text(), timeout=5_000)
    assert chooser.status.text() == (
        "Download cancelled at 30 MB of 150 MB; it resumes from there next time."
    )
    assert not chooser.progress_box.isVisible() and chooser.isVisible()
    assert store.partial(DEFAULT_MODEL).stat().st_size == 30 * MB
    assert not app.library.indexing

    # The next attempt resumes, and the waiting folder is indexed once the model is there.
    store.release.set()
    with qtbot.waitSignal(app.library.indexingFinished, timeout=60_000) as finished:
        chooser.use_button.click()
    assert finished.args[0] is not None
    assert store.started_from == [0, 30 * MB]
    assert not chooser.isVisible()
    assert app.library.last_report.indexed == 108


@offscreen
def test_importing_a_model_pack_uses_it(qtbot, make_app, tmp_path, photos) -> None:
    store = FakeStore(tmp_path / "models")
    app = start(qtbot, make_app, tmp_path, store)
    app.library.add_folder(photos)
    qtbot.waitUntil(lambda: chooser_shown(app))
    chooser = app.models.chooser
    pack = tmp_path / "vit-b-32.qmodel"
    pack.write_bytes(b"pack")
    chooser.ask_import_file = lambda: str(pack)
    with qtbot.waitSignal(app.library.indexingFinished, timeout=60_000):
        chooser._import_file()  # as the button's menu entry does
    imported = "ViT-B-32:" + str(store.root / "imported.safetensors")
    assert app.settings.model == imported
    assert app.library.last_report.indexed == 108


@offscreen
def test_importing_a_generator_pack_makes_it_visrets_generator_not_the_search_model(
    qtbot, make_app, tmp_path, photos
) -> None:
    store = FakeStore(tmp_path / "models")
    folder = store.root / "sd-turbo-pack"

    def import_generator(pack: Path, progress: ProgressCallback = no_progress) -> Installed:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "model_index.json").write_text("{}")
        spec = "hf-hub:stabilityai/sd-turbo [pack sha256-0123456789abcdef]"  # not in the catalogue
        store.installed_specs.add(spec)
        return Installed(spec, 1, folder, "pack", role="generator")

    store.import_pack = import_generator  # type: ignore[method-assign]
    app = start(qtbot, make_app, tmp_path, store)
    app.library.add_folder(photos)
    qtbot.waitUntil(lambda: chooser_shown(app))
    model_before = app.settings.model
    chooser = app.models.chooser
    pack = tmp_path / "sd-turbo.qmodel"
    pack.write_bytes(b"pack")
    chooser.ask_import_file = lambda: str(pack)
    with qtbot.waitSignal(app.models.roleModelChosen, timeout=30_000) as chosen:
        chooser._import_file()
    assert chosen.args == ["generator", str(folder)]
    assert app.settings.model == model_before  # the search model is not the generator
    assert app.settings.generator == str(folder)


@offscreen
def test_changing_the_model_asks_first_and_estimates_the_time(
    qtbot, make_app, tmp_path, photos
) -> None:
    store = offline_store(tmp_path / "models")
    app = start(qtbot, make_app, tmp_path, store, model="demo")
    with qtbot.waitSignal(app.library.indexingFinished, timeout=60_000):
        app.library.add_folder(photos)
    assert not chooser_shown(app)  # the demo model is on disk: no question
    qtbot.waitUntil(lambda: app.session.ready, timeout=20_000)
    qtbot.waitUntil(lambda: bool(app.library.stats) and app.library.stats[0].indexed == 108)

    dialog = app.open_settings()
    labels = [dialog.model.itemText(i) for i in range(dialog.model.count())]
    assert labels[:3] == [
        "Demo model (bundled)  (✓ on disk)",
        "ViT-B/32 · LAION-2B  (not downloaded)",
        "ViT-L/14 · LAION-2B  (not downloaded)",
    ]
    assert not dialog.model_state.isVisible()  # demo: on disk
    questions: list[str] = []
    app.window.ask_yes_no = lambda title, text: questions.append(text) or True
    dialog.model.setCurrentIndex(2)
    dialog._model_chosen(2)  # as picking it in the list does
    assert dialog.model.currentText() == "ViT-L-14:laion2b_s32b_b82k"
    # Never downloaded: said beside the field, not shown as if it were here.
    assert dialog.model_state.isVisible()
    assert dialog.model_state.text().startswith("ViT-L-14:laion2b_s32b_b82k is not downloaded")
    dialog.accept()

    assert len(questions) == 1
    question = questions[0]
    assert "indexed with demo" in question
    assert "Re-indexing 108 photos with ViT-L/14 · LAION-2B will take" in question
    assert "this computer indexed" in question and "photos/s" in question
    # Not on disk: the chooser offers it before anything is re-indexed.
    qtbot.waitUntil(lambda: chooser_shown(app))
    assert app.models.chooser.selected_spec() == "ViT-L-14:laion2b_s32b_b82k"
    assert not app.library.indexing
    assert app.library.stats[0].indexed == 108


def test_estimates_scale_this_computers_rate_or_use_a_typical_one() -> None:
    from app.controllers.models import estimate_reindex

    measured = estimate_reindex(3000, "ViT-L-14:laion2b_s32b_b82k", "cpu",
                                ("ViT-B-32:laion2b_s34b_b79k", 600, 10.0))  # fmt: skip
    assert measured.rate == pytest.approx(60 * 2.5 / 30)  # 60 photos/s, L/14 is 12x slower
    assert measured.seconds == pytest.approx(600)
    assert "this computer indexed 60 photos/s" in measured.how
    typical = estimate_reindex(3000, "ViT-B-32:laion2b_s34b_b79k", "cuda")
    assert typical.seconds == pytest.approx(6) and "typical speed" in typical.how
    assert typical.sentence("ViT-B/32").endswith("on a GPU).")


@offscreen
def test_file_models_opens_the_chooser_when_a_model_is_already_there(
    qtbot, make_app, tmp_path
) -> None:
    """With the demo model in use nothing asks; File › Models… still opens the chooser, to
    import or download another."""
    app = start(qtbot, make_app, tmp_path, offline_store(tmp_path / "models"), model="demo")
    qtbot.wait(200)
    assert not chooser_shown(app)
    app.window.models_action.trigger()
    qtbot.waitUntil(lambda: chooser_shown(app), timeout=5_000)
    assert app.models.chooser is not None
    assert app.models.chooser.selected_spec() == "demo"
    assert "import" in app.models.chooser.reason.text()


REPO = Path(__file__).resolve().parents[2]

# A first start in a fresh process whose engine imports (torch, open_clip, FAISS) never finish:
# prints when the window and the chooser are shown, and whether the engine was being imported.
BLOCKED_ENGINE_START = """
import importlib.util, os, sys, threading, time
from PySide6.QtCore import QTimer
pending = []

class NeverLoadingEngine:
    # Blocks in exec_module, which holds only that module's import lock (find_spec runs
    # under the interpreter's global one).
    def find_spec(self, name, path=None, target=None):
        if name in ("torch", "open_clip", "faiss"):
            return importlib.util.spec_from_loader(name, self)
        return None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        pending.append(module.__name__)
        threading.Event().wait()  # as a 20-second import on a slow disk, only longer

sys.meta_path.insert(0, NeverLoadingEngine())
from widgets.model_chooser import ModelChooser
started = time.monotonic()

def shown(self, event):
    seconds = time.monotonic() - started

    def report():  # a moment later: the engine has begun loading, and is not done
        print(f"chooser {seconds:.2f} {bool(pending)}", flush=True)
        os._exit(0)

    QTimer.singleShot(1000, report)

ModelChooser.showEvent = shown
from app.cli import main
main(["gui"])
"""


def test_first_start_shows_the_chooser_while_the_engine_is_still_loading(tmp_path) -> None:
    """Whether a model is on disk is known from files: the chooser does not wait for torch."""
    env = dict(
        os.environ,
        QUADRAT_HOME=str(tmp_path / "home"),
        QT_QPA_PLATFORM="offscreen",
        PYTHONPATH=str(REPO),
        HF_ENDPOINT="http://127.0.0.1:9",
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", BLOCKED_ENGINE_START],
            env=env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError("no chooser while torch, open_clip and FAISS were loading") from exc
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith("chooser "))
    _, seconds, engine_pending = line.split()
    assert engine_pending == "True"  # the engine was loading behind it all along
    assert float(seconds) < 20  # about 1.5 s on an idle machine


def test_whether_a_model_is_on_disk_is_known_without_torch(tmp_path) -> None:
    code = """
import json, sys
from pathlib import Path
from engine.models.folders import MANIFEST_NAME, WEIGHTS_NAME, folder_slug
from engine.models.spec import as_model_spec, store_key
from engine.models.store import ModelStore, encoder_on_disk

store = ModelStore(Path(sys.argv[1]))
cache = Path(sys.argv[2])
installed = "ViT-B-32:laion2b_s34b_b79k"
folder = store.root / folder_slug(store_key(as_model_spec(installed)))
folder.mkdir(parents=True)
(folder / WEIGHTS_NAME).write_bytes(b"weights")
(folder / MANIFEST_NAME).write_text(json.dumps({"spec": installed}))
specs = ["demo", installed, "ViT-L-14:laion2b_s32b_b82k", "hf-hub:imageomics/bioclip"]
print(json.dumps({
    "on_disk": [encoder_on_disk(store, spec, cache) for spec in specs],
    "loaded": sorted(m for m in ("torch", "open_clip", "faiss") if m in sys.modules),
}))
"""
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "models"), str(tmp_path / "cache")],
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    answer = json.loads(done.stdout)
    assert answer["on_disk"] == [True, True, False, False]
    assert answer["loaded"] == []


@offscreen
def test_offline_the_default_button_uses_the_demo_model(qtbot, make_app, tmp_path) -> None:
    app = start(qtbot, make_app, tmp_path, offline_store(tmp_path / "models"))
    qtbot.waitUntil(lambda: chooser_shown(app), timeout=5_000)
    chooser = app.models.chooser
    assert chooser is not None
    # The hub is asked in a worker (two seconds at most); then Enter means the demo model.
    qtbot.waitUntil(chooser.demo_button.isDefault, timeout=10_000)
    assert not chooser.use_button.isDefault()
    assert chooser.selected_spec() == DEFAULT_MODEL  # still listed and selectable
    assert chooser.offline_note.isVisible()
    assert "No connection to the model hub (127.0.0.1:9 cannot be reached" in (
        chooser.offline_note.text()
    )


@offscreen
def test_offline_the_default_button_uses_a_model_already_on_disk(qtbot, make_app, tmp_path) -> None:
    store = FakeStore(tmp_path / "models")
    store.installed_specs.add(DEFAULT_MODEL)
    app = start(qtbot, make_app, tmp_path, store, model="ViT-L-14:laion2b_s32b_b82k")
    qtbot.waitUntil(lambda: chooser_shown(app), timeout=5_000)
    chooser = app.models.chooser
    assert chooser is not None
    # It opened on the model the settings name (not on disk); once the hub is known to be
    # out of reach, the model on disk is selected instead.
    qtbot.waitUntil(lambda: chooser.selected_spec() == DEFAULT_MODEL, timeout=10_000)
    assert chooser.use_button.isDefault() and not chooser.demo_button.isDefault()
    assert chooser.use_button.text() == "Use the selected model"


@offscreen
def test_a_search_after_not_now_says_no_model_is_chosen_and_offers_the_chooser(
    qtbot, make_app, tmp_path
) -> None:
    app = start(qtbot, make_app, tmp_path, offline_store(tmp_path / "models"))
    qtbot.waitUntil(lambda: chooser_shown(app), timeout=5_000)
    chooser = app.models.chooser
    assert chooser is not None
    chooser.close_button.click()  # "Not now"
    assert not chooser.isVisible()
    app.search.on_search_requested("a red circle", None, "text")
    status = app.window.status_line.text()
    assert status.startswith("No model is chosen yet")
    assert "as soon as" not in status
    assert chooser_shown(app)  # offered again, on the search models
    assert chooser.role() == "encoder" and chooser.selected_spec() == DEFAULT_MODEL
    assert app.search._pending is None  # nothing waits for a model nobody fetches


def test_the_choosers_buttons_stay_put_between_tabs_and_rows(qtbot) -> None:
    """The buttons moved as "Use the selected model" became "Download and use the selected
    model" on another tab or row: every button keeps its place whatever is chosen."""
    from PySide6.QtWidgets import QApplication

    from widgets.model_chooser import ModelChooser, ModelRow

    chooser = ModelChooser()
    qtbot.addWidget(chooser)
    chooser.set_rows(
        [
            ModelRow("demo", "Demo model", 0, 10_000_000, "trying Quadrat", True),
            ModelRow("ViT-B-32:x", "ViT-B/32", 151_000_000, 600_000_000, "search", False),
            ModelRow(
                "sd-turbo",
                "SD Turbo",
                2_500_000_000,
                5_000_000_000,
                "drawings for VisRet, one step; wants a GPU",
                False,
                role="generator",
            ),  # fmt: skip
            ModelRow("vlm", "A VLM", 4_000_000_000, 6_000_000_000, "yes/no", False, role="vlm"),
        ],
        "demo",
    )
    chooser.show()
    qtbot.waitExposed(chooser)
    buttons = (chooser.use_button, chooser.demo_button, chooser.import_button)

    def places() -> list[tuple[int, int, int, int]]:
        QApplication.processEvents()
        return [button.geometry().getRect() for button in buttons]

    first = places()
    chooser.select("ViT-B-32:x")  # a download: the longer wording
    assert chooser.use_button.text().startswith("Download")
    assert places() == first
    for tab in (1, 2, 0):
        chooser.tabs.setCurrentIndex(tab)
        assert places() == first, tab


def test_settings_says_the_model_set_was_never_downloaded(qtbot) -> None:
    """A new user's settings name the default search model, never downloaded (the demo model
    does the work): the dialog says it is not on this computer."""
    from widgets.settings_dialog import ModelChoice, SettingsChoices, SettingsDialog, SettingsValues

    choices = SettingsChoices(
        [ModelChoice("demo", "Demo model", True), ModelChoice(DEFAULT_MODEL, "ViT-B/32", False)],
        ["auto", "cpu"],
        256,
    )
    values = SettingsValues(DEFAULT_MODEL, "auto", 32, 1000, "")
    dialog = SettingsDialog(values, choices)
    qtbot.addWidget(dialog)
    dialog.show()
    assert dialog.model.currentText() == DEFAULT_MODEL
    assert dialog.model_state.isVisible()
    assert "not downloaded" in dialog.model_state.text()
    dialog.model.setEditText("demo")
    assert not dialog.model_state.isVisible()
