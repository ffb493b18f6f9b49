"""Stable Diffusion (and any other diffusers text-to-image pipeline) as a `Generator`.

Specs: a pipeline folder (``model_index.json`` inside), one ``.safetensors``/``.ckpt`` file with
its config (``FILE?config=FOLDER`` or ``FILE?config=ORG/NAME``), or a hub id (``hf-hub:ORG/NAME``
or ``ORG/NAME``) downloaded into the user cache on first use. Options after ``?`` (``steps``,
``guidance``, ``width``, ``height``) replace the model's defaults. The pipeline class comes from
the model (``AutoPipelineForText2Image``, else the class ``model_index.json`` names).

Spec checks and the offline probe run before diffusers is imported (importing it and
transformers costs 5-6 s), so a wrong spec fails at once in one line.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import re
import threading
import urllib.parse
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from PIL import Image

from engine.errors import BadInputError, Cancelled, ModelLoadError, one_line
from engine.files import file_sha256
from engine.progress import CancelToken, Progress, ProgressCallback, no_progress
from engine.visret.base import DrawSettings

log = logging.getLogger(__name__)

CHECKPOINT_SUFFIXES = (".safetensors", ".ckpt")
_HUB_ID = re.compile(r"[\w.\-]+/[\w.\-]+")
_OPTIONS = ("config", "steps", "guidance", "width", "height")


@dataclass(frozen=True)
class DiffusersSpec:
    """A parsed generator spec: what to load and the user's overrides of the defaults."""

    spec: str
    kind: str  # "folder" | "file" | "hub"
    path: Path | None = None
    hub_id: str | None = None
    config: str | None = None  # a single file's pipeline config: a folder or a hub id
    steps: int | None = None
    guidance: float | None = None
    width: int | None = None
    height: int | None = None


def parse_spec(spec: str) -> DiffusersSpec:
    """Parse and check a diffusers spec against the disk; `ModelLoadError` (one line) when it
    names nothing loadable. Hub ids are not looked up here."""
    text = spec.strip()
    target, _, query = text.partition("?")
    target = target.strip()
    options: dict[str, str] = {}
    for name, value in urllib.parse.parse_qsl(query, keep_blank_values=True):
        if name not in _OPTIONS:
            raise ModelLoadError(
                f"generator {text}: unknown option '{name}' (known: {', '.join(_OPTIONS)})"
            )
        options[name] = value.strip()
    try:
        overrides: dict[str, Any] = {
            "steps": int(options["steps"]) if "steps" in options else None,
            "guidance": float(options["guidance"]) if "guidance" in options else None,
            "width": int(options["width"]) if "width" in options else None,
            "height": int(options["height"]) if "height" in options else None,
        }
    except ValueError as error:
        raise ModelLoadError(f"generator {text}: {one_line(error, 300)}") from error
    if not target:
        raise ModelLoadError(f"generator '{text}' names no model")
    if target.startswith("hf-hub:"):
        hub_id = target.removeprefix("hf-hub:").strip()
        if not _HUB_ID.fullmatch(hub_id):
            raise ModelLoadError(f"generator {target}: a hub id reads hf-hub:ORG/NAME")
        return DiffusersSpec(text, "hub", hub_id=hub_id, **overrides)
    path = Path(target).expanduser()
    if path.is_dir():
        if not (path / "model_index.json").is_file():
            raise ModelLoadError(
                f"{path} is not a diffusers pipeline folder (it has no model_index.json)"
            )
        return DiffusersSpec(text, "folder", path=path.resolve(), **overrides)
    if path.is_file():
        if path.suffix.lower() not in CHECKPOINT_SUFFIXES:
            raise ModelLoadError(
                f"{path} is not a Stable Diffusion checkpoint (expected a pipeline folder or a "
                f".safetensors/.ckpt file)"
            )
        config = options.get("config") or None
        if config is not None and Path(config).expanduser().is_dir():
            config = str(Path(config).expanduser().resolve())
        elif config is not None and not _HUB_ID.fullmatch(config.removeprefix("hf-hub:")):
            raise ModelLoadError(
                f"generator {text}: config '{config}' is neither a pipeline folder nor ORG/NAME"
            )
        elif config is not None:
            config = config.removeprefix("hf-hub:")
        return DiffusersSpec(text, "file", path=path.resolve(), config=config, **overrides)
    if _HUB_ID.fullmatch(target) and not target.startswith((".", "/", "~")):
        return DiffusersSpec(text, "hub", hub_id=target, **overrides)
    raise ModelLoadError(f"generator {target}: no such file or folder")


# ---------------------------------------------------------------------------------------------
# Identity: content hashes of local weights (memoised by size and mtime within a session)

_digests: dict[tuple[str, int, int], str] = {}
_digest_lock = threading.Lock()


def _file_sha256(path: Path) -> str:
    stat = path.stat()
    memo = (str(path), stat.st_size, stat.st_mtime_ns)
    with _digest_lock:
        if memo in _digests:
            return _digests[memo]
    value = file_sha256(path)
    with _digest_lock:
        _digests[memo] = value
    return value


def _folder_digest(folder: Path) -> str:
    """One digest over every file of a pipeline folder (configs, tokenizer, weights)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        relative = path.relative_to(folder).as_posix()
        if relative.startswith(".") or "/." in relative:
            continue  # hidden files (.gitattributes, editor droppings) change no drawing
        digest.update(f"{relative}\0{_file_sha256(path)}\n".encode())
    return digest.hexdigest()


def identity_of(parsed: DiffusersSpec) -> str:
    """The generator's identity for cache keys: what would change its drawings."""
    if parsed.kind == "hub":
        return f"diffusers:hf-hub:{parsed.hub_id}"
    assert parsed.path is not None
    if parsed.kind == "folder":
        return f"diffusers:sha256-{_folder_digest(parsed.path)[:16]}"
    digest = hashlib.sha256(_file_sha256(parsed.path).encode())
    config = parsed.config or ""
    if config and Path(config).is_dir():
        config = _folder_digest(Path(config))
    digest.update(f"\0{config}".encode())
    return f"diffusers:sha256-{digest.hexdigest()[:16]}"


# ---------------------------------------------------------------------------------------------
# Per-family defaults


def family_defaults(pipe: Any, name: str) -> DrawSettings:
    """Steps, guidance and native size for a loaded pipeline: turbo models 1 step without
    guidance, SD 1.x/2.x 25 steps at 7.5, SDXL 25 at 5.0, SD3 28 at 7.0, anything else the
    pipeline's own call defaults."""
    width, height = native_size(pipe)
    class_name = type(pipe).__name__
    lowered = name.lower()
    if "turbo" in lowered:
        steps, guidance = 1, 0.0
    elif class_name.startswith("StableDiffusion3"):
        steps, guidance = 28, 7.0
    elif class_name.startswith("StableDiffusionXL"):
        steps, guidance = 25, 5.0
    elif class_name.startswith("StableDiffusion"):
        steps, guidance = 25, 7.5
    else:
        parameters = inspect.signature(pipe.__call__).parameters
        steps = _default(parameters, "num_inference_steps", 25)
        guidance = float(_default(parameters, "guidance_scale", 7.5))
    return DrawSettings(steps=int(steps), guidance=float(guidance), width=width, height=height)


def _default(parameters: Any, name: str, fallback: Any) -> Any:
    parameter = parameters.get(name)
    if parameter is None or parameter.default in (inspect.Parameter.empty, None):
        return fallback
    return parameter.default


def native_size(pipe: Any) -> tuple[int, int]:
    """The size the model was trained at: its denoiser's sample size times the VAE's scale."""
    scale = int(getattr(pipe, "vae_scale_factor", 8) or 8)
    denoiser = getattr(pipe, "unet", None) or getattr(pipe, "transformer", None)
    sample = getattr(getattr(denoiser, "config", None), "sample_size", None)
    if isinstance(sample, (list, tuple)):
        return int(sample[1]) * scale, int(sample[0]) * scale
    if isinstance(sample, int) and sample > 0:
        return sample * scale, sample * scale
    return 512, 512


# ---------------------------------------------------------------------------------------------
# The generator


class DiffusersGenerator:
    """A loaded diffusers text-to-image pipeline. One drawing at a time (a lock): a pipeline's
    scheduler keeps state between steps."""

    def __init__(
        self, pipe: Any, identity: str, label: str, defaults: DrawSettings, device: str
    ) -> None:
        self.pipe = pipe
        self.identity = identity
        self.label = label
        self.device = device
        self._defaults = defaults
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"DiffusersGenerator({self.identity}, {type(self.pipe).__name__}, {self.device})"

    def default_settings(self) -> DrawSettings:
        return self._defaults

    def draw(
        self,
        prompt: str,
        seed: int,
        settings: DrawSettings,
        progress: ProgressCallback,
        cancel: CancelToken,
    ) -> Image.Image:
        """Draw `prompt` with a CPU generator seeded by `seed` (the same picture on any device
        for the same seed, within floating point)."""
        import torch

        scale = int(getattr(self.pipe, "vae_scale_factor", 8) or 8)
        if (
            settings.width % scale
            or settings.height % scale
            or min(settings.width, settings.height) <= 0
        ):
            raise BadInputError(
                f"drawing size {settings.width}x{settings.height} must be positive multiples of "
                f"{scale}"
            )
        if settings.steps < 1:
            raise BadInputError(f"a drawing needs at least 1 step, not {settings.steps}")
        total = settings.steps

        def step_end(
            pipe: Any, step: int, timestep: Any, tensors: dict[str, Any]
        ) -> dict[str, Any]:
            progress(Progress(min(step + 1, total), total))
            # Raising here stops the pipeline between two steps; nothing half-made is kept.
            cancel.check()
            return tensors

        with self._lock:
            cancel.check()
            progress(Progress(0, total))
            generator = torch.Generator(device="cpu").manual_seed(int(seed))
            with torch.inference_mode():
                result = self.pipe(
                    prompt=prompt,
                    num_inference_steps=settings.steps,
                    guidance_scale=settings.guidance,
                    width=settings.width,
                    height=settings.height,
                    generator=generator,
                    output_type="pil",
                    callback_on_step_end=step_end,
                )
        image = result.images[0]
        if not isinstance(image, Image.Image):  # pragma: no cover - output_type="pil" above
            raise ModelLoadError(f"{self.label} returned no picture")
        return image.convert("RGB")


def load_diffusers(
    spec: str,
    *,
    device: str = "auto",
    cache_dir: Path | None = None,
    progress: ProgressCallback | None = None,
    cancel: CancelToken | None = None,
) -> DiffusersGenerator:
    """Load the pipeline `spec` names (see the module docstring) onto `device`."""
    parsed = parse_spec(spec)
    cache = Path(cache_dir) if cache_dir is not None else _default_cache_dir()
    token = cancel or CancelToken()
    report = progress or no_progress
    if parsed.kind == "hub":
        assert parsed.hub_id is not None
        source = _hub_folder(parsed.hub_id, cache, report, token, fp16=_wants_fp16(device))
        name = parsed.hub_id
    else:
        assert parsed.path is not None
        source = parsed.path
        name = parsed.path.name
        if parsed.kind == "file" and parsed.config and not Path(parsed.config).is_dir():
            _hub_folder(parsed.config, cache, report, token, fp16=False, configs_only=True)
    identity = identity_of(parsed)
    token.check()

    from engine.models.encoders import choose_device

    chosen = choose_device(device)
    pipe = _load_pipeline(parsed, source, chosen, cache)
    _place(pipe, chosen)
    defaults = family_defaults(pipe, name)
    defaults = replace(
        defaults,
        steps=parsed.steps if parsed.steps is not None else defaults.steps,
        guidance=parsed.guidance if parsed.guidance is not None else defaults.guidance,
        width=parsed.width or defaults.width,
        height=parsed.height or defaults.height,
    )
    label = f"{name} ({type(pipe).__name__})"
    log.info("generator %s loaded on %s: %s", identity, chosen, defaults)
    return DiffusersGenerator(pipe, identity, label, defaults, chosen)


def _default_cache_dir() -> Path:
    from engine.models.encoders import default_cache_dir

    return default_cache_dir()


def _wants_fp16(device: str) -> bool:
    """Whether the pipeline will run in fp16 (on a GPU), without importing torch for "cpu"."""
    if device.strip().lower() == "cpu":
        return False
    from engine.models.encoders import choose_device

    return choose_device(device) != "cpu"


def _load_pipeline(parsed: DiffusersSpec, source: Path, device: str, cache: Path) -> Any:
    import torch

    dtype = torch.float16 if device != "cpu" else torch.float32
    try:
        import diffusers as diffusers_module
    except ImportError as error:
        raise ModelLoadError(
            f"Stable Diffusion needs the diffusers package ({one_line(error, 300)})"
        ) from error
    diffusers: Any = diffusers_module  # untyped library: its calls are checked by the tests
    diffusers.utils.logging.disable_progress_bar()
    try:
        if parsed.kind == "file":
            return _from_single_file(diffusers, parsed, dtype, cache)
        variant = "fp16" if dtype == torch.float16 and _has_fp16_variant(source) else None
        try:
            return diffusers.AutoPipelineForText2Image.from_pretrained(
                str(source), torch_dtype=dtype, local_files_only=True, variant=variant
            )
        except ValueError as error:
            if "AutoPipeline" not in str(error):
                raise
            # A pipeline AutoPipeline does not map (a community or newer class): its own class.
            return diffusers.DiffusionPipeline.from_pretrained(
                str(source), torch_dtype=dtype, local_files_only=True, variant=variant
            )
    except (ModelLoadError, Cancelled):
        raise
    except Exception as error:
        raise ModelLoadError(
            f"could not load the generator {parsed.spec}: {one_line(error, 300)}"
        ) from error


def _has_fp16_variant(folder: Path) -> bool:
    return any(folder.glob("*/*.fp16.safetensors"))


def _from_single_file(diffusers: Any, parsed: DiffusersSpec, dtype: Any, cache: Path) -> Any:
    """A single checkpoint: its pipeline class is the one its config's model_index.json names."""
    assert parsed.path is not None
    from engine.models.encoders import check_plain_checkpoint

    check_plain_checkpoint(parsed.path)  # a .ckpt that would run code: refused before diffusers
    config = parsed.config
    if config is None:
        # diffusers recognises the checkpoint's family and fetches that family's config.
        from diffusers.loaders import single_file_utils

        utils: Any = single_file_utils
        checkpoint = utils.load_single_file_checkpoint(str(parsed.path), local_files_only=True)
        config = str(utils.fetch_diffusers_config(checkpoint)["pretrained_model_name_or_path"])
        del checkpoint
    if Path(config).is_dir():
        index = Path(config) / "model_index.json"
    else:
        from huggingface_hub import hf_hub_download

        try:
            index = Path(
                hf_hub_download(
                    config, "model_index.json", cache_dir=str(cache), local_files_only=True
                )
            )
        except Exception as error:
            raise _unavailable(
                config, f"the config of {parsed.path.name} is not on disk; give ?config=FOLDER"
            ) from error
    try:
        class_name = json.loads(index.read_text(encoding="utf-8"))["_class_name"]
    except (OSError, ValueError, KeyError) as error:
        raise ModelLoadError(f"{index} names no pipeline class ({one_line(error, 300)})") from error
    pipeline_class = getattr(diffusers, str(class_name), None)
    if pipeline_class is None or not hasattr(pipeline_class, "from_single_file"):
        raise ModelLoadError(f"a {class_name} cannot be loaded from a single checkpoint file")
    return pipeline_class.from_single_file(
        str(parsed.path),
        config=config,
        torch_dtype=dtype,
        cache_dir=str(cache),
        local_files_only=True,
    )


def _place(pipe: Any, device: str) -> None:
    """Move the pipeline to `device`; when the GPU is short of memory, keep the parts not
    working on the CPU (model offload) and compute attention in slices."""
    pipe.set_progress_bar_config(disable=True)
    if device.startswith("cuda"):
        import torch

        free, _ = torch.cuda.mem_get_info(torch.device(device))
        needed = _parameter_bytes(pipe) * 1.5  # weights plus activations at native size
        if free < needed:
            log.info(
                "%.1f GB free on %s for a %.1f GB pipeline: offloading",
                free / 1e9,
                device,
                needed / 1e9,
            )
            pipe.enable_attention_slicing()
            try:
                pipe.enable_model_cpu_offload(device=device)
                return
            except Exception as error:  # offload needs the accelerate package
                log.warning(
                    "model offload unavailable (%s); loading it whole", one_line(error, 300)
                )
    elif device == "mps":
        pipe.enable_attention_slicing()  # what diffusers advises below 64 GB of unified memory
    pipe.to(device)


def _parameter_bytes(pipe: Any) -> int:
    total = 0
    for component in getattr(pipe, "components", {}).values():
        parameters = getattr(component, "parameters", None)
        if callable(parameters):
            total += sum(p.numel() * p.element_size() for p in parameters())
    return total


# ---------------------------------------------------------------------------------------------
# The hub


def _unavailable(hub_id: str, reason: str) -> Exception:
    from engine.models.hub import ModelUnavailableError

    return ModelUnavailableError(
        f"generator {hub_id} is not downloaded and {reason}; copy its pipeline folder here and "
        f"give that folder as the generator, or use 'demo-painter'"
    )


def _hub_folder(
    hub_id: str,
    cache: Path,
    progress: ProgressCallback,
    cancel: CancelToken,
    *,
    fp16: bool,
    configs_only: bool = False,
) -> Path:
    """The local snapshot of `hub_id`, downloaded first when missing (byte progress, cancel).
    Offline and not on disk -> `ModelUnavailableError` within seconds."""
    from engine.models.hub import probe

    local = _cached_snapshot(hub_id, cache)
    if local is not None and (configs_only or any(local.glob("*/*.safetensors"))):
        return local
    reason = probe()
    if reason is not None:
        raise _unavailable(hub_id, reason)
    try:
        from huggingface_hub import HfApi, snapshot_download

        files = HfApi().list_repo_files(hub_id)
        wanted = _files_to_fetch(files, fp16=fp16, configs_only=configs_only)
        folder = snapshot_download(
            hub_id,
            cache_dir=str(cache),
            allow_patterns=wanted,
            tqdm_class=_progress_bar(progress, cancel, hub_id),
        )
    except Cancelled:
        raise
    except Exception as error:
        raise _unavailable(hub_id, f"its download failed ({one_line(error, 300)})") from error
    return Path(folder)


def _cached_snapshot(hub_id: str, cache: Path) -> Path | None:
    try:
        from huggingface_hub import snapshot_download

        folder = Path(snapshot_download(hub_id, cache_dir=str(cache), local_files_only=True))
    except Exception:
        return None
    return folder if (folder / "model_index.json").is_file() else None


def _files_to_fetch(files: list[str], *, fp16: bool, configs_only: bool) -> list[str]:
    """The files a pipeline needs from a hub repo: model_index.json, every component's
    configs and tokenizer files, and one set of safetensors weights (fp16 ones for a GPU where
    the repo has them) - not the repo's root checkpoints or .bin duplicates."""
    configs = [
        f
        for f in files
        if f == "model_index.json"
        or ("/" in f and f.rsplit(".", 1)[-1] in ("json", "txt", "model"))
    ]
    if configs_only:
        return configs
    weights = [f for f in files if "/" in f and f.endswith(".safetensors")]
    half = [f for f in weights if f.endswith(".fp16.safetensors")]
    full = [f for f in weights if not f.endswith(".fp16.safetensors")]
    return configs + (half if fp16 and half else full)


def _progress_bar(progress: ProgressCallback, cancel: CancelToken, hub_id: str) -> type:
    """A tqdm class that forwards the hub client's byte counts to `progress`."""
    from tqdm.auto import tqdm

    class _Bar(tqdm):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["disable"] = True  # the numbers go to our callback, not to a terminal
            super().__init__(*args, **kwargs)

        def update(self, n: float | None = 1) -> bool | None:
            cancel.check()
            self.n += n or 0
            progress(Progress(int(self.n), int(self.total or 0), message=f"downloading {hub_id}"))
            return None

    return _Bar
