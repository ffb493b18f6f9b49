"""The open library and the encoder that searches it, loaded off the GUI thread.

At start-up a read task opens the library's catalog (migrations; no torch, about a second),
and `opened` is emitted: the collections are listed and the model chooser can open while a
second read task imports FAISS, loads the encoder the library was indexed with and checks its
vector index. When the model's ONNX export is in the store (and the runtime setting allows
it), searches encode their text with its text tower and torch-free tokenizer, so the first
answer imports neither torch nor open_clip; otherwise torch and open_clip are imported too
(10 s or more on a first start). The window is already on screen. The model itself
(`model_encoder`) loads behind when indexing or an image query needs it. `ensure_encoder`
may be called from any worker: loading is serialised by a lock.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal

from app import paths
from app.settings import ROOT_MAP_ENV, Settings, index_memory_bytes, root_map_of
from app.workers import READ, TaskContext, TaskHandle, TaskRunner

if TYPE_CHECKING:  # the engine loads in a worker at start-up, not with the window
    from engine.catalog.library import Library
    from engine.indexing.thumbnails import ThumbnailCache
    from engine.judgments.queries import QueryStore
    from engine.models.choice import EncoderChoice
    from engine.models.encoders import Encoder
    from engine.progress import Progress

log = logging.getLogger(__name__)

EncoderLoader = Callable[[str, str], "Encoder"]


def encoder_choice(spec: str, device: str, runtime: str) -> EncoderChoice:
    """`spec` parsed once, on `device` and `runtime`, from the model store and cache of
    `app.paths` (`engine.models.choice`, the command line's choice too)."""
    from engine.models.choice import EncoderChoice

    return EncoderChoice.of(
        spec, paths.models_dir(), paths.model_cache_dir(), device=device, runtime=runtime
    )


def default_encoder_loader(spec: str, device: str, runtime: str = "torch") -> Encoder:
    """The window's encoder: on the CPU, with runtime auto or onnx, the model's ONNX export
    when one is in the store (made by `quadrat index`), else torch. The window makes no
    export itself (`export=False`): that would hold the first search for the export's time."""
    return encoder_choice(spec, device, runtime).load(export=False)


@dataclass(frozen=True)
class NotComing:
    """Why searching cannot start by itself (a search asked for now is not kept for later):
    `text` for the status line; `choose_model`: the user has to pick a model first."""

    text: str
    choose_model: bool = False


@dataclass(frozen=True)
class _Opened:
    library: Library
    model_key: str | None
    model_spec: str | None
    seconds: float


_ENGINE_IMPORT = threading.Lock()


def import_engine(*, torch_too: bool = True) -> None:
    """The heavy imports (seconds), in a worker rather than on the GUI thread: one thread at a
    time (an indexing run may start while the engine loads), FAISS before torch as always.
    `torch_too=False`: FAISS alone, for a search whose text tower runs in ONNX."""
    with _ENGINE_IMPORT:
        import faiss  # noqa: F401

        if torch_too:
            import open_clip  # noqa: F401
            import torch  # noqa: F401


class LibrarySession(QObject):
    """State shared by the controllers: library, encoder, readiness."""

    opened = Signal()  # the library is open (collections can be listed)
    readyChanged = Signal(bool, str)  # can search?, a message for the query bar
    modelChanged = Signal(str)  # the model spec searches use
    modelMissing = Signal(str)  # a search needs this model and it is not on disk

    def __init__(
        self,
        runner: TaskRunner,
        library_dir: Path,
        settings: Settings,
        *,
        fixed_model: str | None = None,
        encoder_loader: EncoderLoader | None = None,
    ) -> None:
        super().__init__()
        self.runner = runner
        self.library_dir = Path(library_dir)
        self.settings = settings
        self.fixed_model = fixed_model  # the demo library always uses the demo model
        self._load_encoder = encoder_loader or (
            lambda spec, device: default_encoder_loader(spec, device, self.settings.runtime)
        )
        # Whether a model is on disk (set by the models controller): a model that is not is
        # never loaded here, since loading would try to download it (the chooser does that).
        self.model_available: Callable[[str], bool] = lambda spec: True
        self._lock = threading.Lock()
        self.library: Library | None = None
        self._queries: QueryStore | None = None  # the saved queries of `library`
        self._thumbs: ThumbnailCache | None = None
        self._encoder: Encoder | None = None  # what searches encode with
        self._encoder_spec: str | None = None
        # The model itself (torch, or ONNX with both towers), for indexing and as the fallback
        # of a text-only ONNX encoder; with the runtime it was loaded for.
        self._model: Encoder | None = None
        self._model_as: tuple[str, str] | None = None
        self.target_model: str | None = None  # a model chosen for the next re-index
        self.model_key: str | None = None  # the library's, as last read by a worker
        self.library_spec: str | None = None
        self.detected_device: str | None = None
        self.ready = False
        # Until the engine (torch, the encoder, the vector index) is loaded behind the open
        # catalog, searches wait for it.
        self.engine_loaded = False
        self.indexing = False  # set by the library controller
        self.started_at = time.monotonic()
        self.ready_after: float | None = None

    # -- start-up ---------------------------------------------------------------------------------

    def start(self) -> None:
        self.readyChanged.emit(False, "Loading the search engine…")
        self.runner.submit(
            self._open,
            title="Opening the library",
            pool=READ,
            on_success=self._on_opened,
            on_failure=self._on_open_failed,
            on_progress=self._on_open_progress,
        )

    def reload(self) -> TaskHandle:
        """Open the library again, its catalog replaced by a restore (schema, photos and
        vectors may all differ): until it is open the controllers see no library; the old
        one is closed in the worker without a session backup (the restore took one)."""
        old, self.library, self._queries = self.library, None, None
        self._set_ready(False, "Opening the restored catalog…")

        def reopen(ctx: TaskContext) -> _Opened:
            if old is not None:
                old.judgments_saved()
                old.close()
            return self._open(ctx)

        return self.runner.submit(
            reopen,
            title="Opening the restored catalog",
            pool=READ,
            on_success=self._on_opened,
            on_failure=self._on_open_failed,
            on_progress=self._on_open_progress,
        )

    def _on_open_progress(self, progress: Progress) -> None:
        if progress.total:
            self.readyChanged.emit(
                False, f"Preparing the search index: {progress.done:,} of {progress.total:,}…"
            )

    def _open(self, ctx: TaskContext) -> _Opened:
        """Open the catalog only: what lists the collections and says which model the library
        needs, without torch."""
        started = time.monotonic()
        from engine.catalog.library import Library

        # The demo library (fixed model) always keeps its own SQLite file.
        database_url = None if self.fixed_model else (self.settings.database_url or None)
        # Where this workstation sees the folders a shared catalog records elsewhere.
        root_map = root_map_of(os.environ.get(ROOT_MAP_ENV, ""), self.settings.root_map)
        library = Library.open(self.library_dir, database_url=database_url, root_map=root_map)
        library.index_memory_budget = index_memory_bytes(self.settings.index_memory_gb)
        return _Opened(library, library.model_key, library.model_spec, time.monotonic() - started)

    def _on_opened(self, opened: _Opened) -> None:
        self.library = opened.library
        self.model_key, self.library_spec = opened.model_key, opened.model_spec
        log.info("library %s opened in %.2f s", self.library_dir, opened.seconds)
        self.engine_loaded = False  # this library's vector index is checked next
        self.opened.emit()
        self.modelChanged.emit(self.search_model())
        self.update_ready()
        self._load_engine(opened.library)

    def _load_engine(self, library: Library) -> None:
        """Behind the open catalog: torch and the rest of the engine, the encoder when its
        model is on disk, the vector index checked (a rebuild reports progress)."""
        model_key = self.model_key
        spec = self.search_model()
        load_encoder = (model_key is not None or bool(self.fixed_model)) and self.model_available(
            spec
        )

        def load(ctx: TaskContext) -> str | None:
            # With the text tower in ONNX the first answer needs FAISS alone: torch is imported
            # when a method or indexing needs the model itself.
            text_only = load_encoder and self._text_encoder(spec) is not None
            import_engine(torch_too=not text_only)
            if load_encoder:
                encoder = self.ensure_encoder(spec)
                if text_only:  # the vocabulary and the ONNX session, so the first answer is quick
                    encoder.encode_texts([""])
            if model_key is not None:
                # Load and check it now, not on the first search.
                library.vector_index(model_key, progress=ctx.progress)
            if text_only:
                return None  # telling the device would import torch
            from engine.models.encoders import choose_device

            return choose_device("auto")

        def loaded(detected: str | None) -> None:
            self.detected_device = detected or self.detected_device
            self.engine_loaded = True
            self.update_ready()

        def failed(exc: BaseException) -> None:
            self.engine_loaded = True  # searches say what fails, not "loading" for ever
            self.readyChanged.emit(False, "The search engine could not be loaded")
            self.runner.report_error(exc, "Loading the search engine")

        self.runner.submit(
            load,
            title="Loading the search engine",
            pool=READ,
            on_success=loaded,
            on_failure=failed,
            on_progress=self._on_open_progress,
        )

    def _on_open_failed(self, exc: BaseException) -> None:
        self.readyChanged.emit(False, "The library could not be opened")
        from app.controllers.errors import describe_error

        log.error("cannot open the library: %s", describe_error(exc))
        self.runner.report_error(exc, "Opening the library")

    # -- model ------------------------------------------------------------------------------------

    def search_model(self) -> str:
        """The model spec searches use: fixed, else the library's, else the settings'."""
        return self._choose_model(self.library_spec)

    def _choose_model(self, library_spec: str | None) -> str:
        return self.fixed_model or self.target_model or library_spec or self.settings.model

    def note_library_model(self, model_key: str | None, model_spec: str | None) -> None:
        """Record the library's model as a worker read it (after indexing or a removal)."""
        self.model_key, self.library_spec = model_key, model_spec
        if self.target_model and model_spec == self.target_model:
            self.target_model = None
        self.modelChanged.emit(self.search_model())
        self.update_ready()

    def ensure_encoder(self, spec: str | None = None) -> Encoder:
        """The encoder searches use for `spec` (default: the search model), loading it if
        needed: the ONNX text tower alone when the library's model has one in the store and the
        runtime allows it (no torch), else the model (`model_encoder`). Blocks: call from a
        worker."""
        spec = spec or self.search_model()
        with self._lock:
            if self._encoder is None or self._encoder_spec != spec:
                text_only = self._text_encoder(spec)
                if text_only is not None:
                    log.info("searching %s with its ONNX text tower", spec)
                self._encoder = text_only or self._model_locked(spec)
                self._encoder_spec = spec
            return self._encoder

    def model_encoder(self, spec: str | None = None) -> Encoder:
        """The model itself for `spec` (default: the search model), as the runtime setting
        says (torch, or both ONNX towers): what indexing encodes photos with. Blocks: call
        from a worker."""
        with self._lock:
            return self._model_locked(spec or self.search_model())

    def _model_locked(self, spec: str) -> Encoder:
        wanted = (spec, self.settings.runtime)
        if self._model is None or self._model_as != wanted:
            import_engine()
            if self.detected_device is None:  # torch is imported now: telling costs nothing
                from engine.models.encoders import choose_device

                self.detected_device = choose_device("auto")
            log.info("loading model %s on %s", spec, self.settings.device)
            self._model = self._load_encoder(spec, self.settings.device)
            self._model_as = wanted
        return self._model

    def _text_encoder(self, spec: str) -> Encoder | None:
        """The torch-free text encoder of the library's own model
        (`engine.models.choice.EncoderChoice.text_tower`), when the settings let ONNX encode
        on the CPU (runtime auto or onnx, device auto or cpu; the vectors are the same
        whichever runtime encodes them). Another model's spec is not even parsed."""
        settings = self.settings
        if (
            spec != self.library_spec
            or self.model_key is None
            or settings.device not in ("auto", "cpu")
            or settings.runtime == "torch"
        ):
            return None
        return encoder_choice(spec, settings.device, settings.runtime).text_tower(
            self.model_key, self.library_spec, lambda: self.model_encoder(spec)
        )

    @property
    def encoder(self) -> Encoder | None:
        return self._encoder

    def update_ready(self) -> None:
        """Recompute whether searches can run and tell the query bar."""
        if self.library is None:
            return
        has_vectors = self.model_key is not None
        encoder_ok = self._encoder is not None and self._encoder_spec == self.search_model()
        if has_vectors and not self.engine_loaded:
            self._set_ready(False, "Loading the search engine…")
        elif not has_vectors and self.indexing:
            self._set_ready(False, "Indexing… searching starts when the first photos are in")
        elif not has_vectors:
            self._set_ready(False, "Add a photo folder to the library to start searching")
        elif not encoder_ok and not self.model_available(self.search_model()):
            spec = self.search_model()
            self._set_ready(False, f"The model {spec} is not on this computer: choose one")
            self.modelMissing.emit(spec)
        elif not encoder_ok:
            self._set_ready(False, "Loading the model…")
            self.runner.submit(
                lambda ctx: self.ensure_encoder(),
                title="Loading the model",
                pool=READ,
                group="load-model",
                on_success=lambda _enc: self.update_ready(),
            )
        else:
            self._set_ready(True, "")

    def not_coming(self) -> NotComing | None:
        """While searches cannot run: None when readiness is on its way (the library or the
        engine loading, a model loading, the first photos indexing), else what the user must
        do first. Reads files only (no torch), so it answers before the engine is loaded."""
        if self.ready:
            return None
        spec = self.search_model()
        if not self.fixed_model and not self.model_available(spec):
            if self.model_key is not None:  # the library's own model is gone from disk
                return NotComing(
                    f"The model {spec} is not on this computer: choose one to search with",
                    choose_model=True,
                )
            return NotComing(
                f"No model is chosen yet ({spec} is not on this computer): choose one to "
                "index and search with",
                choose_model=True,
            )
        if self.library is not None and self.model_key is None and not self.indexing:
            return NotComing("Nothing to search yet: add a photo folder to the library first")
        return None

    def _set_ready(self, ready: bool, message: str) -> None:
        if ready and self.ready_after is None:
            self.ready_after = time.monotonic() - self.started_at
            log.info("ready to search after %.2f s", self.ready_after)
        self.ready = ready
        self.readyChanged.emit(ready, message)

    def apply_settings(self, settings: Settings) -> None:
        old = self.settings
        self.settings = settings
        if self._queries is not None and settings.judge_name != old.judge_name:
            self._queries.user = settings.judge_name or None  # the next judgment is theirs
        if (settings.runtime, settings.device) != (old.runtime, old.device):
            with self._lock:  # the next search loads the encoder the new settings ask for
                self._encoder = self._encoder_spec = None
                self._model = self._model_as = None
        if self.library is not None:  # the next indexing run builds within the new budget
            self.library.index_memory_budget = index_memory_bytes(settings.index_memory_gb)
            # The next result, thumbnail or re-scan opens the folders where they are mapped now.
            self.library.root_map = root_map_of(os.environ.get(ROOT_MAP_ENV, ""), settings.root_map)
        self.modelChanged.emit(self.search_model())

    def thumbnail_cache(self) -> ThumbnailCache | None:
        if self.library is None:
            return None
        from engine.indexing.thumbnails import ThumbnailCache

        cache = self._thumbs
        if cache is None:
            cache = self._thumbs = ThumbnailCache(self.library.root / "cache" / "thumbnails")
        return cache

    def query_store(self) -> QueryStore | None:
        """The open library's saved queries, runs and judgments (one store per library)."""
        if self.library is None:
            return None
        store = self._queries
        if store is None or store.library is not self.library:
            from engine.judgments.queries import QueryStore

            store = self._queries = QueryStore(self.library, self.settings.judge_name or None)
        return store

    def close(self) -> None:
        if self.library is not None:
            self.library.close()
            self.library = None
