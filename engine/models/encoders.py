"""CLIP encoders: device choice, safe weight loading and the open_clip encoder.

A model is named by a spec string, parsed into a `ModelSpec` by `engine.models.spec` (the
grammar is described there). A named model installed in the model store loads from there,
offline (found through `engine.models.folders`; the store imports this module for torch work,
never the other way round); otherwise open_clip's download cache is used, after a reachability
probe (`engine.models.hub`).

Local weights are read by this module, never by a general unpickler: safetensors files with
safetensors, anything else with ``torch.load(weights_only=True)``, so a checkpoint that would
run code when loaded is refused. TorchScript archives are refused too: loading one compiles and
runs the code it carries (its ``__setstate__`` methods), whatever the file name says.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import logging
import os
import re
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from engine.errors import BadInputError, ModelLoadError, one_line
from engine.files import file_sha256
from engine.models.folders import StoreFolders
from engine.models.hub import ensure_reachable, unavailable
from engine.models.onnx_runtime import check_runtime, cpu_threads, onnx_encoder_for
from engine.models.spec import DEMO_ARCH as DEMO_ARCH
from engine.models.spec import DEMO_SPEC as DEMO_SPEC
from engine.models.spec import ModelSpec as ModelSpec  # re-exported: callers import it from here
from engine.models.spec import (
    as_model_spec,
    bundled_model_file,
    demo_weights_path,
    store_key,
)
from engine.models.spec import demo_model_spec as demo_model_spec
from engine.models.spec import parse_model_spec as parse_model_spec
from engine.models.trained_as import TrainedAs, for_checkpoint, for_tag
from engine.progress import ProgressCallback

if TYPE_CHECKING:
    import torch
    from PIL import Image

log = logging.getLogger(__name__)

_TEXT_BATCH = 256
_IMAGE_BATCH = 64


class Encoder(Protocol):
    """Turns images and texts into L2-normalised vectors of one embedding space.

    What `Indexer` and `Searcher` use; `OpenClipEncoder` is the real one, and wrappers (tests,
    benchmarks) satisfy it structurally. An encoder may also have an ``image_size`` attribute
    (the side the model sees): the indexer then lets decoders shrink large JPEGs down to it.
    """

    @property
    def model_key(self) -> str:
        """Identifies the model and its weights: vectors of equal keys are comparable."""
        ...

    @property
    def dim(self) -> int: ...

    @property
    def device(self) -> str:
        """The torch device it encodes on ("cpu", "cuda", "mps", ...)."""
        ...

    @property
    def spec(self) -> ModelSpec | str:
        """The model as the user named it (remembered by the library to load it again)."""
        ...

    def preprocess(self, image: Image.Image) -> torch.Tensor | np.ndarray:
        """One image, resized for the model (CPU; called from decode threads)."""
        ...

    def encode_preprocessed(self, batch: Sequence[torch.Tensor | np.ndarray]) -> np.ndarray: ...

    def encode_images(self, images: Sequence[Image.Image]) -> np.ndarray: ...

    def encode_texts(self, texts: Sequence[str]) -> np.ndarray: ...


def choose_device(requested: str = "auto") -> str:
    """The torch device to use: for "auto" cuda, then mps, then cpu. An unavailable device
    -> `BadInputError` naming the available ones."""
    import torch

    available = ["cpu"]
    if torch.cuda.is_available():
        available += ["cuda"] + [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    if torch.backends.mps.is_available():
        available.append("mps")
    wanted = requested.strip().lower()
    if wanted == "auto":
        return "cuda" if "cuda" in available else "mps" if "mps" in available else "cpu"
    if wanted in available:
        return wanted
    raise BadInputError(
        f"device '{requested}' is not available here; available: auto, {', '.join(available)}"
    )


# ---------------------------------------------------------------------------------------------
# Resources


_demo_config_registered = False


def _register_demo_config() -> None:
    """Make the demo architecture known to open_clip (once)."""
    global _demo_config_registered
    if not _demo_config_registered:
        import open_clip

        open_clip.add_model_config(bundled_model_file(f"{DEMO_ARCH}.json"))
        _demo_config_registered = True


def default_cache_dir() -> Path:
    """Where downloaded model weights go unless told otherwise."""
    import platformdirs

    return Path(platformdirs.user_cache_dir("quadrat")) / "models"


# ---------------------------------------------------------------------------------------------
# Safe weight loading


def read_weights(path: Path) -> dict[str, torch.Tensor]:
    """Read a state dict from a local weights file without running any code it may contain.

    Raises `ModelLoadError` naming the file when it is missing, not a weights file, or unsafe.
    """
    import torch

    path = Path(path)
    if not path.exists():
        raise ModelLoadError(f"model file not found: {path}")
    if path.is_dir():
        raise ModelLoadError(
            f"{path} is a folder, not a weights file (for a folder use local-dir:{path})"
        )
    if path.suffix.lower() == ".safetensors":
        from safetensors.torch import load_file

        try:
            loaded: Any = load_file(str(path), device="cpu")
        except Exception as error:  # safetensors raises its own error types, or OSError
            raise ModelLoadError(f"{path} is not a valid safetensors file: {error}") from error
    else:
        # Before torch.load: given weights_only=False it would hand a TorchScript archive to
        # torch.jit.load, which runs the archive's code; refuse it whatever torch would do.
        refuse_torchscript(path)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # torch's pickle-protocol warnings: we decide below
                loaded = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as error:
            loaded = _explain_unreadable(path, error)
    return _as_state_dict(loaded, path)


_USE_INSTEAD = (
    "use a safetensors file or a plain state-dict checkpoint (torch.save(model.state_dict(), "
    "FILE)) instead"
)


def _is_torchscript(path: Path) -> bool:
    """Whether `path` is a TorchScript archive (a zip with compiled code and constants), read
    from its file list only."""
    import zipfile

    try:
        if not zipfile.is_zipfile(path):
            return False
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
    except (OSError, zipfile.BadZipFile):
        return False
    return any(re.fullmatch(r"[^/]+/(constants\.pkl|code/.*)", name) for name in names)


def refuse_torchscript(path: Path) -> None:
    """`ModelLoadError` when `path` is a TorchScript archive: loading one runs code it carries."""
    if _is_torchscript(path):
        raise ModelLoadError(
            f"refusing to load {path}: it is a TorchScript archive, which runs code it carries "
            f"when loaded; {_USE_INSTEAD}"
        )


def check_plain_checkpoint(path: Path) -> None:
    """Refuse a PyTorch checkpoint that would run code when loaded (TorchScript, or a pickle
    naming anything but tensors) with a one-line `ModelLoadError`, reading only its pickle
    (the tensors are memory-mapped, not read). Safetensors files pass: they hold no code."""
    import torch

    path = Path(path)
    if path.suffix.lower() == ".safetensors" or not path.is_file():
        return
    refuse_torchscript(path)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as error:
        if "Weights only load failed" in str(error) or "TorchScript" in str(error):
            _explain_unreadable(path, error)
        # Anything else (an old non-zip file mmap cannot map, ...) is the loader's to report.


def _explain_unreadable(path: Path, error: Exception) -> Any:
    """Turn torch.load's refusal into a one-line `ModelLoadError`."""
    message = str(error)
    if "TorchScript" in message:
        raise ModelLoadError(
            f"refusing to load {path}: it is a TorchScript archive, which runs code it carries "
            f"when loaded; {_USE_INSTEAD}"
        ) from error
    if "Weights only load failed" in message:
        imported = re.search(r"Unsupported global: GLOBAL ([\w.]+)", message)
        if imported:
            raise ModelLoadError(
                f"refusing to load {path}: it is not a plain weights file "
                f"(it contains code: {imported.group(1)})"
            ) from error
        raise ModelLoadError(
            f"refusing to load {path}: it is not a plain weights file "
            "(the safe loader cannot read it: another kind of file, or a pickle that may run code)"
        ) from error
    raise ModelLoadError(
        f"{path} is not a model checkpoint (neither a safetensors nor a PyTorch weights file)"
    ) from error


def _as_state_dict(loaded: Any, path: Path) -> dict[str, torch.Tensor]:
    import torch

    if isinstance(loaded, dict) and isinstance(loaded.get("state_dict"), dict):
        loaded = loaded["state_dict"]
    if (
        not isinstance(loaded, dict)
        or not loaded
        or not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in loaded.items())
    ):
        raise ModelLoadError(f"{path} does not hold model weights (no name -> tensor mapping)")
    for key in ("input_resolution", "context_length", "vocab_size"):  # TorchScript extras
        loaded.pop(key, None)
    if next(iter(loaded)).startswith("module."):  # saved from DistributedDataParallel
        loaded = {k.removeprefix("module."): v for k, v in loaded.items()}
    state_dict: dict[str, torch.Tensor] = loaded
    return state_dict


def apply_state_dict(
    model: Any, state_dict: dict[str, torch.Tensor], source: Path, arch: str
) -> None:
    """Load `state_dict` into `model` with open_clip's compatibility fixes (old text layout,
    scalar logit scale, position embedding sizes); weights that do not fit -> ModelLoadError."""
    from open_clip.convert import convert_state_dict
    from open_clip.model import (
        convert_to_custom_text_state_dict,
        resize_pos_embed,
        resize_text_pos_embed,
    )

    try:
        state_dict = convert_state_dict(model, dict(state_dict))
        if "positional_embedding" in state_dict and not hasattr(model, "positional_embedding"):
            state_dict = convert_to_custom_text_state_dict(state_dict)
        for name in ("logit_scale", "logit_bias"):
            target = getattr(model, name, None)
            if name in state_dict and target is not None and target.ndim != state_dict[name].ndim:
                state_dict[name] = state_dict[name].reshape(target.shape)
        if getattr(model, "logit_bias", None) is not None and "logit_bias" not in state_dict:
            state_dict["logit_bias"] = model.logit_bias.detach().clone().zero_()
        state_dict.pop("text.transformer.embeddings.position_ids", None)
        resize_pos_embed(state_dict, model)
        resize_text_pos_embed(state_dict, model)
        model.load_state_dict(state_dict, strict=True)
    except Exception as error:
        detail = " ".join(str(error).split())
        if len(detail) > 300:
            detail = detail[:300] + "..."
        raise ModelLoadError(
            f"the weights in {source} do not fit the {arch} architecture: {detail}"
        ) from error


# ---------------------------------------------------------------------------------------------
# The open_clip encoder


class OpenClipEncoder:
    """An open_clip model as an `Encoder`. Build it with `load_encoder`."""

    runtime = "torch"

    def __init__(
        self,
        model: Any,
        preprocess: Any,
        tokenizer: Any,
        model_key: str,
        device: str,
        spec: ModelSpec,
    ) -> None:
        import torch

        self.model = model.to(device).eval()
        self._transform = preprocess
        self._pil_steps, self._mean, self._std = _split_transform(preprocess)
        if self._mean is not None:
            # Scaling and normalising run where the model runs: on a GPU, the uint8 batch is
            # copied (a quarter of the float32 bytes) and converted there. Measured on an H100,
            # ViT-B-32, batch 256: 122 ms per batch with CPU normalisation, 29 ms this way.
            self._mean, self._std = self._mean.to(device), self._std.to(device)
        self._tokenizer = tokenizer
        self.model_key = model_key
        self.device = device
        self.spec = spec
        # fp16 autocast on the GPU halves memory and time; on CPU it would only cost accuracy.
        self._autocast = (
            torch.autocast(device_type="cuda", dtype=torch.float16)
            if device.startswith("cuda")
            else contextlib.nullcontext()
        )
        size = getattr(model.visual, "image_size", 224)
        # The side the model sees: decoders may decode large JPEGs at a reduced scale down to it.
        self.image_size = int(max(size) if isinstance(size, (tuple, list)) else size)
        self.dim = int(self.encode_texts(["a photo"]).shape[1])

    def __repr__(self) -> str:
        return f"OpenClipEncoder({self.model_key!r}, dim={self.dim}, device={self.device!r})"

    @property
    def pil_steps(self) -> list[Any] | None:
        """The transform's PIL steps (resize, crop) when `preprocess` returns uint8 arrays,
        else None: what decode worker processes replay without torch
        (`engine.indexing.decode_pool.pixel_steps_of`)."""
        return None if self._pil_steps is None else list(self._pil_steps)

    def preprocess(self, image: Image.Image) -> torch.Tensor | np.ndarray:
        """Resize and crop one image for the model (CPU; safe in worker threads).

        Returns a uint8 (H, W, 3) array when the model's transform is the usual PIL steps
        followed by to-tensor and normalise: decode threads then run no torch operation, whose
        OpenMP thread teams would otherwise compete with the encoder's (measured: 3x slower
        indexing). Scaling and normalising happen batched in `encode_preprocessed`.
        """
        image = image.convert("RGB")
        if self._pil_steps is None:
            tensor: torch.Tensor = self._transform(image)
            return tensor
        for step in self._pil_steps:
            image = step(image)
        return np.asarray(image.convert("RGB"), dtype=np.uint8)

    def encode_preprocessed(self, batch: Sequence[torch.Tensor | np.ndarray]) -> np.ndarray:
        """Encode preprocessed images: an (n, dim) float32 array of unit vectors."""
        import torch

        if len(batch) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        if isinstance(batch[0], np.ndarray):
            pixels = torch.from_numpy(np.stack(batch)).to(self.device)
            pixels = pixels.permute(0, 3, 1, 2).float().div_(255.0)
            pixels = pixels.sub_(self._mean).div_(self._std)
        else:
            pixels = torch.stack([torch.as_tensor(item) for item in batch]).to(self.device)
        with torch.inference_mode(), self._autocast:
            features = self.model.encode_image(pixels)
        return _normalised(features)

    def encode_images(self, images: Sequence[Image.Image]) -> np.ndarray:
        """Encode PIL images: an (n, dim) float32 array of unit vectors."""
        parts = [
            self.encode_preprocessed(
                [self.preprocess(image) for image in images[i : i + _IMAGE_BATCH]]
            )
            for i in range(0, len(images), _IMAGE_BATCH)
        ]
        return np.concatenate(parts) if parts else np.zeros((0, self.dim), dtype=np.float32)

    def encode_texts(self, texts: Sequence[str]) -> np.ndarray:
        """Encode texts (truncated at the model's context length): (n, dim) unit vectors."""
        import torch

        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        parts = []
        for i in range(0, len(texts), _TEXT_BATCH):
            tokens = self._tokenizer(list(texts[i : i + _TEXT_BATCH]))
            with torch.inference_mode(), self._autocast:
                parts.append(_normalised(self.model.encode_text(tokens.to(self.device))))
        return np.concatenate(parts)


def _split_transform(transform: Any) -> tuple[list[Any] | None, Any, Any]:
    """Split an open_clip transform into its PIL steps and the (mean, std) of its final
    normalisation, or (None, None, None) when it is not of that plain shape."""
    import torch

    steps = list(getattr(transform, "transforms", []))
    names = [type(step).__name__ for step in steps]
    if len(steps) < 2 or names[-1] != "Normalize" or "ToTensor" not in names[-2]:
        return None, None, None
    normalize = steps[-1]
    mean = torch.tensor(normalize.mean, dtype=torch.float32).view(1, -1, 1, 1)
    std = torch.tensor(normalize.std, dtype=torch.float32).view(1, -1, 1, 1)
    return steps[:-2], mean, std


def _normalised(features: torch.Tensor) -> np.ndarray:
    import torch

    features = torch.nn.functional.normalize(features.float(), dim=-1)
    return features.cpu().numpy().astype(np.float32, copy=False)


class _DropRandomInitWarning(logging.Filter):
    """open_clip warns "initialized randomly" when it builds an architecture we are about to
    fill with weights ourselves; the warning would mislead users."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("No pretrained weights loaded")


@contextlib.contextmanager
def quiet_random_init() -> Iterator[None]:
    root = logging.getLogger()
    drop = _DropRandomInitWarning()
    root.addFilter(drop)
    try:
        yield
    finally:
        root.removeFilter(drop)


def known_arch(arch: str) -> None:
    import open_clip

    names = open_clip.list_models()
    if arch in names:
        return
    close = difflib.get_close_matches(arch, names, n=5, cutoff=0.5)
    common = [
        n
        for n in ("ViT-B-32", "ViT-B-16", "ViT-L-14", "RN50", "ViT-SO400M-14-SigLIP")
        if n in names
    ]
    shown = list(dict.fromkeys(close + common))[:8]
    raise ModelLoadError(
        f"unknown model architecture '{arch}'; known ones include {', '.join(shown)} "
        f"({len(names)} in all)"
    )


def cpu_encoder_threads() -> int:
    """Torch threads for an encoder on the CPU: one on two cores or fewer, else all but a
    quarter of the cores (left to the photos' decoding).

    Measured on a shared 2-core machine (tests/bench/bench_indexing.py --torch-threads,
    docs/BENCHMARKS.md): two threads encoded at 0.75x the rate of one with ViT-B-32 and 0.38x
    with the tiny demo model at load average 2 (the quietest it got), 0.71x and 0.10x at 9 to
    13. An OpenMP team waits for its slowest thread, so a thread that loses its core stalls
    the whole forward; on two cores the other core also decodes photos and runs the window.
    OMP_NUM_THREADS, when set, wins. ONNX Runtime measured alike (docs/BENCHMARKS.md, "The
    ONNX runtime on the CPU": 1.41x torch at two threads, 1.17x at one, both below one
    thread's rate), so both read the one rule, `onnx_runtime.cpu_threads`."""
    return cpu_threads()


def _set_cpu_threads() -> None:
    """Use `cpu_encoder_threads` torch threads (fewer only: a caller's lower choice stays)."""
    import torch

    wanted = cpu_encoder_threads()
    if torch.get_num_threads() > wanted:
        torch.set_num_threads(wanted)


def load_encoder(
    spec: str | ModelSpec,
    device: str = "auto",
    cache_dir: Path | None = None,
    *,
    store_dir: Path | None = None,
    runtime: str = "torch",
    progress: ProgressCallback | None = None,
    export: bool = True,
) -> Encoder:
    """Load the model named by `spec` on `device` ("auto": cuda, mps, cpu).

    `runtime` (`engine.models.onnx_runtime.RUNTIMES`): on the CPU, "auto" and "onnx" encode
    with onnxruntime, the towers exported into the store at `store_dir` on first use (with
    `progress`) and verified against torch; a refused tower stays torch's. "onnx" puts an
    "auto" device on the CPU; "torch" (the default) never uses ONNX. `export` False: a model
    with no export yet encodes with torch rather than being exported now (a single search
    should not wait for it).

    A named model (``ARCH:PRETRAINED``, ``hf-hub:ORG/NAME``) installed in the model store at
    `store_dir` (see `engine.models.store`) loads from there, offline, under the same model key as a
    download. Otherwise it comes from open_clip's download cache in `cache_dir` (the user
    cache by default), downloaded on first use; when it is not there and cannot be fetched now
    (offline, unreachable hub) -> `ModelUnavailableError` within seconds. Any other failure ->
    `ModelLoadError` with a one-line reason; a malformed spec or unavailable device ->
    `BadInputError`.
    """
    import open_clip

    model_spec = as_model_spec(spec)  # parsed once; the value is what travels on
    runtime = check_runtime(runtime)
    if runtime == "onnx":
        if device.strip().lower() not in ("auto", "cpu"):
            raise BadInputError(
                f"the ONNX runtime encodes on the CPU, not on '{device}': use the cpu (or auto) "
                "device, or the torch runtime"
            )
        device = "cpu"
    device = choose_device(device)
    if device == "cpu":
        _set_cpu_threads()
    cache = str(cache_dir or default_cache_dir())
    _register_demo_config()

    if model_spec.kind in ("demo", "checkpoint"):
        arch = DEMO_ARCH if model_spec.kind == "demo" else model_spec.arch
        path = demo_weights_path() if model_spec.kind == "demo" else model_spec.path
        assert arch is not None and path is not None
        known_arch(arch)
        state_dict = read_weights(path)
        digest = file_sha256(path)
        # activation and preprocessing as the weights were trained, not open_clip's defaults
        built = for_checkpoint(arch, path)
        with quiet_random_init():
            model, _, preprocess = open_clip.create_model_and_transforms(
                arch, **built.create_kwargs()
            )
        apply_state_dict(model, state_dict, path, arch)
        tokenizer = open_clip.get_tokenizer(arch)
        key = f"{arch}:sha256-{digest[:16]}{built.note}"
    elif model_spec.kind == "local-dir":
        assert model_spec.path is not None
        model, preprocess, tokenizer, key = _load_local_dir(model_spec.path)
    elif model_spec.kind == "pretrained":
        assert model_spec.arch is not None and model_spec.pretrained is not None
        key = store_key(model_spec)
        _known_pretrained(model_spec.arch, model_spec.pretrained)
        # The tag's QuickGELU flag, which open_clip only warns about (ViT-B-32:openai); the
        # store folder's config is the architecture's, so it applies there too.
        built = for_tag(model_spec.arch, model_spec.pretrained)
        stored = _stored(model_spec, store_dir)
        if stored is not None:
            folder, key = stored
            model, preprocess, tokenizer, _ = _load_local_dir(folder, key, built)
        else:
            model, preprocess, tokenizer = _load_pretrained(model_spec, cache, built)
        # A build other than an older Quadrat's gets another key: its libraries re-index.
        key += built.note
    else:
        key = store_key(model_spec)
        stored = _stored(model_spec, store_dir)
        if stored is not None:
            folder, key = stored
            model, preprocess, tokenizer, _ = _load_local_dir(folder, key)
        else:
            model, preprocess, tokenizer = _load_from_hub(model_spec, cache)
    encoder = OpenClipEncoder(model, preprocess, tokenizer, key, device, model_spec)
    log.info("loaded %s on %s (%d dimensions)", key, device, encoder.dim)
    if device == "cpu" and runtime != "torch" and store_dir is not None:
        # Same model key and vectors (verified), so libraries need no re-indexing.
        return onnx_encoder_for(encoder, store_dir, runtime, progress, export=export)
    return encoder


def _load_local_dir(
    folder: Path, key: str | None = None, built: TrainedAs | None = None
) -> tuple[Any, Any, Any, str]:
    """Build an open_clip model folder's model with our safe weight loader (open_clip reads the
    activation and preprocessing from the folder's config; `built` adds what a store folder's
    config lacks). Its model key is `key` when given (a store folder keeps its model's name),
    else a hash of the weights."""
    import open_clip

    from engine.models.floors import require

    # Every store model loads as local-dir:, which open_clip names from 3.0 on.
    require("open_clip_torch", str(getattr(open_clip, "__version__", "")), f"loading {folder}")
    config_path = folder / "open_clip_config.json"
    if not config_path.is_file():
        raise ModelLoadError(f"{folder} is not an open_clip model folder: no open_clip_config.json")
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ModelLoadError(f"{config_path} is not a valid open_clip config: {error}") from error
    if not isinstance(config, dict) or "model_cfg" not in config:
        raise ModelLoadError(f"{config_path} is not a valid open_clip config: no model_cfg")
    candidates = [
        folder / name
        for name in (
            "open_clip_model.safetensors",
            "open_clip_pytorch_model.safetensors",
            "model.safetensors",
            "open_clip_pytorch_model.bin",
            "pytorch_model.bin",
            "open_clip_pytorch_model.pth",
            "model.pth",
        )
    ]
    weights = next((p for p in candidates if p.is_file()), None)
    if weights is None:
        raise ModelLoadError(f"no weights file in {folder} (expected open_clip_model.safetensors)")
    state_dict = read_weights(weights)
    name = f"local-dir:{folder}"
    try:
        with quiet_random_init():
            model, _, preprocess = open_clip.create_model_and_transforms(
                name, load_weights=False, **(built or TrainedAs()).create_kwargs()
            )
        tokenizer = open_clip.get_tokenizer(name)
    except Exception as error:
        raise ModelLoadError(
            f"could not build the model described in {config_path}: {error}"
        ) from error
    apply_state_dict(model, state_dict, weights, name)
    return model, preprocess, tokenizer, key or f"local-dir:sha256-{file_sha256(weights)[:16]}"


def _known_pretrained(arch: str, tag: str) -> None:
    import open_clip

    known_arch(arch)
    tags = open_clip.list_pretrained_tags_by_model(arch)
    if tag not in tags:
        known = ", ".join(tags) if tags else "none (give a checkpoint file: ARCH:/path/to/file)"
        raise ModelLoadError(f"unknown pretrained tag '{tag}' for {arch}; known tags: {known}")


def _stored(spec: ModelSpec, store_dir: Path | None) -> tuple[Path, str] | None:
    """The store folder of a named model installed at `store_dir` and the model key the store
    gives it (`engine.models.folders.StoreFolders.model_key`), or None when it is not installed
    there."""
    if store_dir is None:
        return None
    store = StoreFolders(store_dir)
    folder = store.folder(spec)
    return None if folder is None else (folder, store.model_key(folder, spec))


def _cached_on_hub(repo_id: str, names: Sequence[str], cache: str) -> bool:
    """Whether open_clip's download cache already holds one of `names` of a hub repo (no
    network: a first use offline must not wait on retries)."""
    from huggingface_hub import try_to_load_from_cache

    return any(
        isinstance(try_to_load_from_cache(repo_id, name, cache_dir=cache), str) for name in names
    )


def _safe_alternatives(file_name: str) -> list[str]:
    if file_name == "open_clip_pytorch_model.bin":
        return ["open_clip_model.safetensors", file_name]
    if file_name.endswith((".bin", ".pth")):
        return [file_name.rsplit(".", 1)[0] + ".safetensors", file_name]
    return [file_name]


def _pretrained_is_cached(cfg: dict[str, Any], cache: str) -> bool:
    hub = str(cfg.get("hf_hub") or "")
    if hub:
        repo_id = "/".join(hub.split("/")[:2])
        file_name = hub[len(repo_id) :].strip("/") or "open_clip_pytorch_model.bin"
        return _cached_on_hub(repo_id, _safe_alternatives(file_name), cache)
    url = str(cfg.get("url") or "")
    return bool(url) and (Path(cache) / os.path.basename(url)).is_file()


def _load_pretrained(model_spec: ModelSpec, cache: str, built: TrainedAs) -> tuple[Any, Any, Any]:
    import open_clip
    from open_clip.pretrained import download_pretrained, get_pretrained_cfg

    assert model_spec.arch is not None and model_spec.pretrained is not None
    arch, tag = model_spec.arch, model_spec.pretrained
    spec = store_key(model_spec)
    cfg = get_pretrained_cfg(arch, tag)
    if not _pretrained_is_cached(cfg, cache):
        ensure_reachable(spec)  # offline: one line now, not a minute of retries
    try:
        download_pretrained(cfg, cache_dir=cache)
    except Exception as error:
        raise unavailable(spec, one_line(error, 300)) from error
    try:
        # Downloaded (cached) files come from the tag's known source; open_clip loads them
        # with weights_only=True.
        with warnings.catch_warnings():
            # open_clip's "QuickGELU mismatch" warning: `built` already settled it
            warnings.filterwarnings("ignore", message="QuickGELU mismatch")
            model, _, preprocess = open_clip.create_model_and_transforms(
                arch, pretrained=tag, cache_dir=cache, **built.create_kwargs()
            )
        tokenizer = open_clip.get_tokenizer(arch, cache_dir=cache)
    except Exception as error:
        raise ModelLoadError(f"could not load {arch}:{tag}: {one_line(error, 300)}") from error
    return model, preprocess, tokenizer


def _load_from_hub(model_spec: ModelSpec, cache: str) -> tuple[Any, Any, Any]:
    import open_clip
    from open_clip.pretrained import download_pretrained_from_hf

    assert model_spec.hub_id is not None
    hub_id, name = model_spec.hub_id, store_key(model_spec)
    if not (
        _cached_on_hub(hub_id, ["open_clip_config.json"], cache)
        and _cached_on_hub(hub_id, _safe_alternatives("open_clip_pytorch_model.bin"), cache)
    ):
        ensure_reachable(name)  # offline: one line now, not a minute of retries
    try:
        download_pretrained_from_hf(hub_id, filename="open_clip_config.json", cache_dir=cache)
        download_pretrained_from_hf(hub_id, cache_dir=cache)
    except Exception as error:
        raise unavailable(name, one_line(error, 300)) from error
    try:
        model, _, preprocess = open_clip.create_model_and_transforms(name, cache_dir=cache)
        tokenizer = open_clip.get_tokenizer(name, cache_dir=cache)
    except Exception as error:
        raise ModelLoadError(f"could not load {name}: {one_line(error, 300)}") from error
    return model, preprocess, tokenizer
