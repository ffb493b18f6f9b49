"""Models on this computer: the chooser, downloads and imports, and the gate before indexing.

The chooser opens when the model that an indexing run or a search needs is not on disk
(`ModelStore.is_installed`, a few file checks) — on first start, when a folder is added, when
the library's model was removed — *before* any work that would try to fetch it. A folder added
meanwhile is kept in the library (listed, waiting) and indexed once a model is there. Downloads
and imports run through the `TaskRunner`, never on the GUI thread; Cancel stops a download and
the partial file stays for the next attempt.

Whether the hub answers is asked once, when the chooser first opens (a HEAD of about two
seconds in a worker; a download that failed for want of a connection says so too): offline,
the chooser's default button is a model on this computer, not a download.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QWidget

from app import paths
from app.controllers.session import LibrarySession
from app.settings import save_settings
from app.workers import READ, WRITE, TaskContext, TaskHandle, TaskRunner
from engine.progress import Progress
from widgets.model_chooser import DEMO_SPEC, ModelChooser, ModelRow, format_bytes
from widgets.settings_dialog import ModelChoice

if TYPE_CHECKING:
    from app.controllers.application import Application
    from engine.catalog.library import Library
    from engine.models.folders import InstalledModel
    from engine.models.offers import ModelOffer
    from engine.models.store import ModelStore

log = logging.getLogger(__name__)

PACK_SUFFIXES = (".qmodel", ".zip")
HUB_PROBE_SECONDS = 2.0  # how long the chooser's "is the hub there?" may take
# A checkpoint file's architecture, guessed from its name ("ViT-B-32_birds.safetensors").
KNOWN_ARCHS = ("ViT-bigG-14", "ViT-H-14", "ViT-L-14", "ViT-B-16", "ViT-B-32", "RN50")

# Typical photos per second of a whole indexing run (decoding included) on a laptop CPU and on
# a mid-range GPU, by architecture. Only the ratios matter once this computer has measured a
# run; before that they are the estimate.
TYPICAL_RATES: dict[str, tuple[float, float]] = {
    "demo": (250.0, 800.0),
    "RN50": (25.0, 500.0),
    "ViT-B-32": (30.0, 500.0),
    "ViT-B-16": (10.0, 300.0),
    "ViT-L-14": (2.5, 100.0),
    "ViT-H-14": (1.0, 50.0),
    "ViT-bigG-14": (0.4, 20.0),
    "hf-hub:imageomics/bioclip": (10.0, 300.0),  # a ViT-B/16
}
FALLBACK_RATE = (10.0, 200.0)


def typical_rate(spec: str, device: str) -> float:
    """Photos per second a run with `spec` typically indexes on `device` ("cpu", "cuda"...)."""
    key = spec if spec in TYPICAL_RATES else spec.split(":", 1)[0]
    if spec.startswith("hf-hub:") and spec not in TYPICAL_RATES:
        key = "ViT-B-16"  # most hub CLIP models people use here are B/16 sized
    cpu, gpu = TYPICAL_RATES.get(key, FALLBACK_RATE)
    return cpu if device in ("cpu", "") else gpu


def format_duration(seconds: float) -> str:
    """'under a minute', 'about 12 minutes', 'about 3.5 hours'."""
    if seconds < 60:
        return "under a minute"
    if seconds < 90 * 60:
        return f"about {round(seconds / 60)} minute{'s' * (round(seconds / 60) != 1)}"
    return f"about {seconds / 3600:.1f} hours"


@dataclass(frozen=True)
class ReindexEstimate:
    photos: int
    seconds: float
    rate: float  # photos per second assumed
    how: str  # how the estimate was made, for the user

    def sentence(self, label: str) -> str:
        return (
            f"Re-indexing {self.photos:,} photos with {label} will take "
            f"{format_duration(self.seconds)} ({self.how})."
        )


def _rate(rate: float) -> str:
    """'2.5', '30', '1,200' photos per second."""
    return f"{rate:,.1f}".removesuffix(".0") if rate < 10 else f"{rate:,.0f}"


def estimate_reindex(
    photos: int,
    spec: str,
    device: str,
    measured: tuple[str, int, float] | None = None,
) -> ReindexEstimate:
    """How long re-encoding `photos` with `spec` takes: this computer's last measured run
    (`measured` = (its spec, photos, seconds)) scaled by the two models' typical speeds, else
    the typical speed of `spec` on `device`."""
    if measured is not None:
        measured_spec, done, seconds = measured
        if done >= 20 and seconds > 0:
            own = done / seconds
            rate = own * typical_rate(spec, device) / typical_rate(measured_spec, device)
            how = (
                f"{_rate(rate)} photos/s: this computer indexed {_rate(own)} photos/s with "
                f"{measured_spec}, scaled by the models' typical speeds"
            )
            return ReindexEstimate(photos, photos / rate, rate, how)
    rate = typical_rate(spec, device)
    where = "a CPU" if device in ("cpu", "") else "a GPU"
    how = f"{_rate(rate)} photos/s, a typical speed for this model on {where}"
    return ReindexEstimate(photos, photos / rate, rate, how)


def one_sentence(text: str, limit: int = 220) -> str:
    """The first sentence of an error message, without a final full stop, kept short (the
    rest names command-line ways on, which the chooser offers as buttons)."""
    line = " ".join(text.strip().splitlines()[0].split()) if text.strip() else ""
    for end in (". ", "; "):
        if end in line:
            line = line.split(end, 1)[0]
    line = re.sub(r"^could not (download|import) \S+: ", "", line)
    line = line.rstrip(". ")
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


def default_store() -> ModelStore:
    """The user's model store (`engine.models.store.ModelStore` in the models folder)."""
    from engine.models.store import ModelStore

    return ModelStore(paths.models_dir())


def _add_collection(library: Library, folder: Path) -> None:
    from engine.indexing.collections import add_collection

    add_collection(library, folder)


class ModelsController(QObject):
    """Decides when the chooser opens and runs what the user picks in it."""

    modelChosen = Signal(str)  # a model is on disk and is to be used (before waiting work runs)
    # A generator or VLM is on disk: its role and what a method takes to use it (its folder as
    # VisRet's generator, vlm:FOLDER as Reranked's scorer).
    roleModelChosen = Signal(str, str)
    message = Signal(str)

    def __init__(
        self,
        runner: TaskRunner,
        session: LibrarySession,
        parent: QWidget | None,
        *,
        store: ModelStore | None = None,
        confirm: Callable[[str], bool] = lambda spec: True,
        refresh_library: Callable[[], object] = lambda: None,
    ) -> None:
        super().__init__()
        self.runner = runner
        self.session = session
        self._parent = parent
        self._store = store
        self._confirm = confirm  # asked before a choice replaces the library's model
        self._refresh_library = refresh_library
        self.chooser: ModelChooser | None = None
        self._waiting: list[tuple[Path | None, Callable[[], object]]] = []
        self._needed: str | None = None
        self._approved: set[str] = set()  # specs the user already agreed to re-index with
        self._dismissed: set[str] = set()  # specs whose chooser the user closed ("Not now")
        self._task: TaskHandle | None = None
        self._last_bytes: tuple[int, int] = (0, 0)
        # Whether the hub answered: unknown until the chooser first opens and asks it.
        self._offline: str | None = None
        self._probe: TaskHandle | None = None
        session.model_available = self.installed
        session.modelMissing.connect(self._on_model_missing)
        session.opened.connect(self.check_at_start)

    # -- the store --------------------------------------------------------------------------------

    @property
    def store(self) -> ModelStore:
        if self._store is None:
            self._store = default_store()
        return self._store

    def installed(self, spec: str) -> bool:
        """Whether `spec` is on disk (a few file checks, no torch)."""
        try:
            from engine.models.store import encoder_on_disk

            if self.role_of(spec) != "encoder":  # generators and VLMs live in the store only
                return bool(self.store.is_installed(spec))
            return encoder_on_disk(self.store, spec, paths.model_cache_dir())
        except Exception:  # a spec the store cannot read: let loading say what is wrong
            log.info("cannot tell whether %s is installed", spec, exc_info=True)
            return True

    def offers(self) -> list[ModelOffer]:
        """The catalogue (`engine.models.offers.model_offers`), every role."""
        from engine.models.offers import model_offers

        return list(model_offers())

    def role_of(self, spec: str) -> str:
        """The role of an offered model ("encoder" for anything the catalogue does not list)."""
        return next((o.role for o in self.offers() if o.spec == spec), "encoder")

    def rows(self, role: str | None = "encoder") -> list[ModelRow]:
        """The offered models of `role` (None: every role), marked when on disk; the needed
        search model too when not offered."""
        rows = [
            ModelRow(
                spec=o.spec,
                label=o.label,
                download_bytes=o.download_bytes,
                memory_bytes=o.memory_bytes,
                good_at=o.good_at,
                installed=self.installed(o.spec),
                licence=o.licence,
                source=o.source,
                role=o.role,
                use=self.use_spec(o.spec) if o.role != "encoder" else o.spec,
            )
            for o in self.offers()
            if role is None or o.role == role
        ]
        if role not in (None, "encoder"):
            return rows
        known = {r.spec for r in rows}
        for spec in (self._needed, self.session.library_spec, self.session.settings.model):
            if spec and spec not in known and self.role_of(spec) == "encoder":
                known.add(spec)
                rows.append(ModelRow(spec, spec, 0, 0, "the model you chose", self.installed(spec)))
        return rows

    def use_spec(self, spec: str) -> str:
        """What a method takes to use the installed generator or VLM `spec` ("" when it is not
        on disk): its folder as VisRet's generator, vlm:FOLDER as Reranked's scorer."""
        try:
            folder = self.store.folder(spec)
        except Exception:  # a spec the store cannot read
            return ""
        if folder is None:
            return ""
        return f"vlm:{folder}" if self.role_of(spec) == "vlm" else str(folder)

    def open_for_role(self, role: str, reason: str) -> ModelChooser:
        """A method needs a model of `role` ("generator", "vlm"; "encoder": no search model is
        on disk) that is not: say which and open the chooser on that role's tab."""
        needed = self.session.search_model() if role == "encoder" else ""
        self._dismissed.discard(needed)  # asked for again by a search: the user wants one
        chooser = self.open_chooser(needed, reason)
        busy = self._task is not None and not self._task.done
        if not busy:
            chooser.set_role(role, needed or None)
        return chooser

    def label(self, spec: str) -> str:
        return next((o.label for o in self.offers() if o.spec == spec), spec)

    # -- when the chooser opens -------------------------------------------------------------------

    def gate(self, folder: Path | None, go: Callable[[], object]) -> bool:
        """Before an indexing run: True when its model is on disk (run it now); otherwise keep
        `folder` in the library, open the chooser, and run `go` once a model is there."""
        spec = self.session.search_model()
        if self.installed(spec):
            return True
        self._waiting.append((folder, go))
        if folder is not None:
            self._keep(folder)
        name = folder.name if folder is not None else "your photos"
        self.open_chooser(
            spec,
            f"To index “{name}”, Quadrat needs a model on this computer, and {self.label(spec)} "
            "is not downloaded yet. The folder is kept in the library and indexed as soon as "
            "a model is here.",
        )
        return False

    def ensure(self, spec: str, go: Callable[[], object], *, approved: bool = False) -> None:
        """Run `go` with `spec` chosen, downloading or choosing it first when not on disk."""
        if approved:
            self._approved.add(spec)
        if self.installed(spec):
            self._use(spec, go)
            return
        self._waiting.append((None, go))
        self.open_chooser(
            spec, f"{self.label(spec)} is not on this computer yet: download it, or pick another."
        )

    def check_at_start(self) -> None:
        """First start (or the library's model gone from disk): offer the chooser at once."""
        if self.session.fixed_model:
            return
        spec = self.session.search_model()
        if not self.installed(spec):
            self.open_chooser(
                spec,
                "Quadrat needs a model to index and search photos. Pick one to download, use "
                "the bundled demo model, or import a model file or folder (for a computer "
                "without a network connection).",
            )

    def _on_model_missing(self, spec: str) -> None:
        if spec in self._dismissed and (self.chooser is None or not self.chooser.isVisible()):
            return
        self.open_chooser(
            spec,
            f"Searching this library needs {self.label(spec)}, which is not on this computer.",
        )

    def open_chooser(self, needed: str, reason: str) -> ModelChooser:
        """Show the chooser (one at a time) with `needed` selected."""
        self._needed = needed
        chooser = self.chooser
        if chooser is None:
            chooser = self.chooser = ModelChooser(self._parent)
            chooser.useRequested.connect(self.use)
            chooser.demoRequested.connect(lambda: self.use(DEMO_SPEC))
            chooser.importRequested.connect(self.import_model)
            chooser.cancelRequested.connect(self.cancel_download)
            chooser.rejected.connect(self._dismissed_now)
        busy = self._task is not None and not self._task.done
        if not busy:
            chooser.set_rows(self.rows(None), needed or None)
            chooser.set_reason(reason)
        if chooser.isVisible():  # asked for again: bring it to the front
            chooser.raise_()
            chooser.activateWindow()
        chooser.show()
        self._ask_hub()
        return chooser

    def _ask_hub(self) -> None:
        """Once, off the GUI thread: can models be downloaded now? (Two seconds at most.)"""
        if self._probe is not None:
            return
        from engine.models.hub import probe

        endpoint = getattr(self.store, "endpoint", None)  # the hub downloads would use

        def ask(ctx: TaskContext) -> str | None:
            return probe(endpoint, timeout=HUB_PROBE_SECONDS)

        self._probe = self.runner.submit(
            ask,
            title="Asking the model hub",
            pool=READ,
            on_success=self._hub_answered,
            on_failure=lambda exc: log.info("hub probe failed: %s", exc),
        )

    def _hub_answered(self, reason: str | None) -> None:
        self._offline = reason
        if reason is not None:
            log.info("model hub: %s", reason)
        if self.chooser is not None:
            self.chooser.set_offline(reason)

    def _dismissed_now(self) -> None:
        if self._needed:
            self._dismissed.add(self._needed)
        self.cancel_download()
        if self._waiting:
            folders = sum(1 for folder, _go in self._waiting if folder is not None)
            self.message.emit(
                f"No model chosen: {folders} folder{'s' * (folders != 1)} wait in the library "
                "and are indexed once a model is on disk"
                if folders
                else "No model chosen"
            )

    # -- what the user picks ----------------------------------------------------------------------

    def use(self, spec: str) -> None:
        """Use `spec`: at once when on disk, else after downloading it."""
        if self.role_of(spec) != "encoder":  # a generator or VLM: the library is not affected
            if self.installed(spec):
                self._role_chosen(spec)
            else:
                self.download(spec)
            return
        if spec not in self._approved and not self._confirm(spec):
            return
        self._approved.add(spec)
        if self.installed(spec):
            self._chosen(spec)
        else:
            self.download(spec)

    def download(self, spec: str) -> TaskHandle:
        """Download `spec` in a worker, with progress and Cancel in the chooser."""
        label = self.label(spec)
        chooser = self.chooser
        if chooser is not None:
            chooser.show_download(label)
        self._last_bytes = (0, 0)
        store = self.store

        def run(ctx: TaskContext) -> InstalledModel:
            return store.download(spec, progress=ctx.progress, cancel=ctx.cancel)

        self._task = self.runner.submit(
            run,
            title=f"Downloading {label}",
            pool=READ,
            on_success=lambda _installed: self._downloaded(spec),
            on_failure=lambda exc: self._failed(f"Could not download {label}", exc),
            on_progress=self._progress,
            on_cancelled=self._cancelled,
        )
        self.message.emit(f"Downloading {label}…")
        return self._task

    def _progress(self, p: Progress) -> None:
        self._last_bytes = (p.done, p.total)
        if self.chooser is not None:
            self.chooser.set_download_progress(p.done, p.total)

    def _downloaded(self, spec: str) -> None:
        self._task = None
        self.message.emit(f"{self.label(spec)} downloaded")
        if self.role_of(spec) != "encoder":
            self._role_chosen(spec)
            return
        self.export_onnx(spec, lambda: self._chosen(spec))

    def export_onnx(self, spec: str, then: Callable[[], object]) -> TaskHandle | None:
        """A downloaded or imported search model's ONNX export (once per model key, verified
        against torch), in a worker with progress and Cancel in the chooser; then `then`,
        whatever came of it: a refusal, a failure or Cancel is said in one line and torch
        encodes. None (and `then` at once) when the runtime setting is torch."""
        from engine.models.onnx_runtime import onnx_runtime_installed

        if self.session.settings.runtime == "torch" or not onnx_runtime_installed():
            then()
            return None
        label = self.label(spec)
        store = self.store
        working = f"Preparing {label} for the CPU: exporting it to ONNX (once)…"
        if self.chooser is not None:
            self.chooser.show_working(working, cancellable=True)

        def run(ctx: TaskContext) -> str:
            from engine.models.store import export_outcome

            export = store.export_onnx(
                spec, cache_dir=paths.model_cache_dir(), progress=ctx.progress, cancel=ctx.cancel
            )
            return f"{label}: {export_outcome(export)}"

        def progress(p: Progress) -> None:
            if self.chooser is not None and p.message:
                self.chooser.show_working(f"{working[:-1]}: {p.message}…", cancellable=True)

        def finished(line: str) -> None:
            self._task = None
            self.message.emit(line)
            then()

        def failed(exc: BaseException) -> None:
            log.info("ONNX export of %s: %s", spec, exc)  # the worker logged its traceback
            finished(f"{label}: ONNX export not made ({one_sentence(str(exc))}); torch encodes it")

        self._task = self.runner.submit(
            run,
            title=f"Exporting {label} to ONNX",
            pool=READ,
            on_success=finished,
            on_failure=failed,
            on_progress=progress,
            on_cancelled=lambda: finished(
                f"ONNX export of {label} cancelled: torch encodes it until it is exported"
            ),
        )
        return self._task

    def _role_chosen(self, spec: str, role: str = "", folder: Path | None = None) -> None:
        """A generator or VLM is on disk: say how it is used and hand it to the application.
        `role` and `folder` come with an imported pack, whose key the catalogue may not list."""
        role = role or self.role_of(spec)
        if folder is None:
            use = self.use_spec(spec)
        else:
            use = f"vlm:{folder}" if role == "vlm" else str(folder)
        chooser = self.chooser
        if chooser is not None:
            chooser.set_busy(False)
            chooser.set_rows(self.rows(None), spec)
            chooser.show_cancelled(f"{self.label(spec)} is on this computer: use it as {use}")
        self.roleModelChosen.emit(role, use)

    def _cancelled(self) -> None:
        self._task = None
        done, total = self._last_bytes
        text = "Download cancelled"
        if done:
            text += (
                f" at {format_bytes(done)}"
                + (f" of {format_bytes(total)}" if total else "")
                + "; it resumes from there next time"
            )
        if self.chooser is not None:
            self.chooser.show_cancelled(text + ".")
        self.message.emit(text)

    def _failed(self, what: str, exc: BaseException) -> None:
        self._task = None
        reason = one_sentence(str(exc)) or type(exc).__name__
        log.info("%s: %s", what, exc)  # the worker logged it with its traceback
        sentence = f"{what}: {reason}."
        from engine.models.hub import ModelUnavailableError

        if isinstance(exc, ModelUnavailableError):  # no connection: the next default is local
            self._hub_answered(reason)
        if self.chooser is not None:
            self.chooser.show_failure(sentence)
        self.message.emit(sentence)

    def cancel_download(self) -> None:
        if self._task is not None and not self._task.done:
            self._task.cancel()

    def import_model(self, path: str) -> TaskHandle:
        """Install a model pack, checkpoint file or open_clip model folder, then use it."""
        source = Path(path).expanduser()
        store = self.store
        is_pack = source.is_file() and source.name.lower().endswith(PACK_SUFFIXES)

        target = str(source)
        if source.is_file() and not is_pack:
            name = source.name.replace("_", "-").lower()
            arch = next((a for a in KNOWN_ARCHS if a.lower() in name), None)
            target = f"{arch}:{source}" if arch else target  # else the store asks which one

        def run(ctx: TaskContext) -> InstalledModel:
            if is_pack:
                return store.import_pack(source, progress=ctx.progress)
            return store.import_file(target)

        if self.chooser is not None:
            self.chooser.show_working(f"Importing {source.name}…")
        self._task = self.runner.submit(
            run,
            title=f"Importing {source.name}",
            pool=READ,
            on_success=self._imported,
            on_failure=lambda exc: self._failed(f"Could not import {source.name}", exc),
        )
        return self._task

    def _imported(self, installed: InstalledModel) -> None:
        self._task = None
        spec = str(installed.spec)
        self.message.emit(f"Imported {spec}")
        role = getattr(installed, "role", "encoder")
        if role != "encoder":  # a generator's or VLM's pack: the search model stays as it is
            self._role_chosen(spec, role, installed.path)
            return
        if spec not in self._approved and not self._confirm(spec):
            if self.chooser is not None:
                self.chooser.set_rows(self.rows(), spec)
                self.chooser.show_cancelled(f"{spec} is on disk now.")
            return
        self._approved.add(spec)
        self.export_onnx(spec, lambda: self._chosen(spec))

    def _chosen(self, spec: str) -> None:
        """`spec` is on disk and chosen: tell the application, then run the waiting work."""
        self._dismissed.discard(spec)
        self._needed = None
        if self.chooser is not None:
            self.chooser.set_busy(False)
            self.chooser.hide()
        self.modelChosen.emit(spec)
        waiting, self._waiting = self._waiting, []
        for _folder, go in waiting:
            go()

    def _use(self, spec: str, go: Callable[[], object]) -> None:
        self._waiting.append((None, go))
        self._chosen(spec)

    # -- keeping added folders ---------------------------------------------------------------------

    def _keep(self, folder: Path) -> None:
        library = self.session.library
        if library is None:
            return

        def added(_none: None) -> None:
            self._refresh_library()

        self.runner.submit(
            lambda ctx: _add_collection(library, folder),
            title=f"Adding {folder.name}",
            pool=WRITE,
            on_success=added,
        )


def install(app: Application) -> None:
    """File › Models…: the chooser; before indexing or searching needs a model that is not on
    disk, the chooser opens."""
    w = app.window
    models = app.models = ModelsController(
        app.runner,
        app.session,
        w,
        store=app.model_store,
        confirm=lambda spec: confirm_model(app, spec),
        refresh_library=app.library.refresh,
    )
    app.library.model_gate = models.gate
    models.modelChosen.connect(lambda spec: use_model(app, spec))
    models.roleModelChosen.connect(lambda role, use: use_role_model(app, role, use))
    models.message.connect(w.set_status)
    w.models_action.triggered.connect(lambda: open_models(app))


# -- the library's model, as the application keeps it ----------------------------------------


def open_models(app: Application) -> None:
    """File › Models…: the chooser, with the model searches use selected."""
    app.models.open_chooser(
        app.session.search_model(),
        "Choose the model photos are indexed and searched with, download one, or import a "
        "model file, folder or pack. The other tabs offer an image generator for VisRet "
        "and vision-language models for Reranked.",
    )


def model_choices(app: Application) -> list[ModelChoice]:
    """The settings dialog's models: the chooser's offers, marked when on disk."""
    return [
        ModelChoice(row.spec, row.label, row.installed, row.good_at) for row in app.models.rows()
    ]


def reindex_question(app: Application, spec: str) -> str:
    """What changing the library's model means, with how long re-indexing will take."""
    session = app.session
    photos = sum(s.indexed + s.pending for s in app.library.stats)
    report = app.library.last_report
    measured = (
        (session.library_spec, report.indexed, report.seconds)
        if report is not None and session.library_spec and not report.cancelled
        else None
    )
    device = app.settings.device
    if device == "auto":
        device = session.detected_device or "cpu"
    label = app.models.label(spec)
    estimate = estimate_reindex(photos, spec, device, measured)
    return (
        f"This library is indexed with {session.library_spec}. Searching with {label} needs "
        f"every collection re-indexed with it.\n\n{estimate.sentence(label)}\n\n"
        "Re-index now? (Until it is done, searches use the model the library was indexed "
        "with.)"
    )


def confirm_model(app: Application, spec: str) -> bool:
    """Asked before a model picked in the chooser replaces the library's model."""
    session = app.session
    if app.demo or session.model_key is None or spec == session.library_spec:
        return True
    return app.window.ask_yes_no("Re-index with another model?", reindex_question(app, spec))


def use_role_model(app: Application, role: str, use: str) -> None:
    """A generator downloaded in the chooser becomes VisRet's generator (the settings');
    a VLM is named in the status line (the Reranked options take it as their scorer)."""
    if role == "generator" and use and use != app.settings.generator and not app.demo:
        new = replace(app.settings, generator=use)
        app.settings = new
        app.session.apply_settings(new)
        app.runner.submit(lambda ctx: save_settings(new), title="Saving the settings", pool=WRITE)
        app.window.set_status(f"VisRet now draws with {use}")
    elif role == "vlm" and use:
        app.window.set_status(f"Reranked can ask this model: choose the scorer {use}")


def use_model(app: Application, spec: str) -> None:
    """A model is on disk and chosen: remember it, and re-index a library indexed with
    another model (the waiting folders are indexed after that)."""
    if app.demo:
        return
    if spec != app.settings.model:
        new = replace(app.settings, model=spec)
        app.settings = new
        app.session.apply_settings(new)
        app.runner.submit(lambda ctx: save_settings(new), title="Saving the settings", pool=WRITE)
    if app.session.model_key is not None and spec != app.session.library_spec:
        app.session.target_model = spec
        app.library.reindex_all()
