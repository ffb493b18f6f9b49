"""Which encoder a search uses, decided in one place for the command line and the window: the
model spec is parsed once (`EncoderChoice`), a text search of the library's own model takes
its stored ONNX text tower (no torch, no open_clip), anything else loads the model itself on
the runtime asked for (`choose_encoder`). Imports nothing heavy until an encoder loads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from engine.models.spec import ModelSpec, as_model_spec

if TYPE_CHECKING:
    from engine.models.encoders import Encoder
    from engine.progress import ProgressCallback


@dataclass(frozen=True)
class EncoderChoice:
    """A model to encode with and where it loads from: `text` the spec as asked, `model` the
    same parsed (once; the parsed value travels on), `device` and `runtime` as given (the
    caller resolves its settings' defaults), the model store and open_clip's cache."""

    text: str
    model: ModelSpec
    store_dir: Path
    cache_dir: Path
    device: str = "auto"
    runtime: str = "auto"

    @classmethod
    def of(
        cls,
        spec: str | ModelSpec,
        store_dir: Path,
        cache_dir: Path,
        *,
        device: str = "auto",
        runtime: str = "auto",
    ) -> EncoderChoice:
        """The choice for `spec` (malformed -> `BadInputError`, before anything loads)."""
        model = as_model_spec(spec)
        text = spec if isinstance(spec, str) else model.spec
        return cls(text, model, store_dir, cache_dir, device, runtime)

    def text_tower(
        self, model_key: str | None, library_spec: str | None, fallback: Callable[[], Encoder]
    ) -> Encoder | None:
        """For a text search, an encoder that imports no torch: the stored ONNX text tower of
        the library's model (`model_key`, indexed with `library_spec`) with the torch-free
        tokenizer. None when the runtime is torch, the library has no model yet, another
        model is asked for, or the store holds no usable export; anything else it is asked
        to encode (an image) comes from `fallback`."""
        if self.runtime == "torch" or model_key is None or library_spec is None:
            return None
        if self.text != library_spec:
            return None
        from engine.models.onnx_runtime import text_encoder_from_store

        return text_encoder_from_store(self.store_dir, model_key, library_spec, fallback)

    def load(
        self,
        *,
        export: bool = True,
        preflight: bool = False,
        progress: ProgressCallback | None = None,
    ) -> Encoder:
        """The model itself on this device and runtime (`engine.models.encoders.load_encoder`;
        `export` False: no ONNX export made now). `preflight`: a named model neither on disk
        nor downloadable is refused in one line before torch is imported."""
        if preflight:
            from engine.models.store import preflight as refuse_unavailable

            refuse_unavailable(self.model, self.store_dir, self.cache_dir)
        from engine.models.encoders import load_encoder

        return load_encoder(
            self.model,
            device=self.device,
            cache_dir=self.cache_dir,
            store_dir=self.store_dir,
            runtime=self.runtime,
            progress=progress,
            export=export,
        )


def choose_encoder(
    choice: EncoderChoice,
    model: Callable[[], Encoder],
    *,
    library: tuple[str | None, str | None] | None = None,
    fallback: Callable[[], Encoder] | None = None,
) -> Encoder:
    """The encoder a search uses: with `library` (its model key and spec: a text search of
    that library), the stored ONNX text tower of its model when `choice` allows one (see
    `EncoderChoice.text_tower`; what it cannot encode comes from `fallback`, by default
    `model`); else `model()`, the model itself (the caller's loader, which may keep it)."""
    if library is not None:
        quick = choice.text_tower(*library, fallback or model)
        if quick is not None:
            return quick
    return model()
