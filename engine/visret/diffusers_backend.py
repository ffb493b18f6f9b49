"""Stable Diffusion (and any other diffusers text-to-image pipeline) as a `Generator`.

Specs: a pipeline folder (``model_index.json`` inside), one ``.safetensors``/``.ckpt`` file with
its config (``FILE?config=FOLDER`` or ``FILE?config=ORG/NAME``), or a hub id (``hf-hub:ORG/NAME``
or ``ORG/NAME``) downloaded into the user cache on first use. Options after ``?`` (``steps``,
``guidance``, ``width``, ``height``) replace the model's defaults. The pipeline class comes from
the model (``AutoPipelineForText2Image``, else the class ``model_index.json`` names).

A single file without ``config=`` gets the configs of the family diffusers recognises in it,
fetched when online (else one line asks for ``?config=``). Family, defaults and dtype come
from the model's own configs (`read_family`), never from a folder's name alone. Downloads take
one set of weights per component (fp16 ones for a GPU; never non-EMA or root checkpoints), and
a snapshot holding only fp16 files loads on a CPU too, cast to fp32.

The safety checker stays as the model ships it (turning it off is the publisher's call, not a
search tool's, and the drawings are shown in the window); what it flags is blacked out, so such
a drawing is dropped from the query with a note (`DrawingWithheld`) and never cached.

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

from engine.errors import BadInputError, Cancelled, ModelLoadError, QuadratError, one_line
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
# The model's family, read from its own configs


_FEW_STEP_WORDS = ("turbo", "schnell")  # distilled models published under these names


@dataclass(frozen=True)
class ModelFamily:
    """What a pipeline folder's configs say: its class, whether it is a few-step (distilled)
    model, whether it is published in bf16, and its card's steps and guidance (None: the
    pipeline's own call defaults)."""

    pipeline: str  # model_index.json's _class_name
    name: str  # the hub repo id when known, else the folder's name
    few_step: bool
    bf16: bool
    steps: int | None
    guidance: float | None

    def dtype(self, device: str, *, bf16: bool) -> str:
        """The torch dtype name to load in: fp32 on a CPU (fp16 maths there is slow or
        missing), bf16 on a GPU that supports it for a model published in bf16 (in fp16 its
        activations can overflow), fp16 otherwise."""
        if device == "cpu":
            return "float32"
        if self.bf16 and bf16 and device.startswith("cuda"):
            return "bfloat16"
        return "float16"


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def repo_id_in_path(folder: Path) -> str | None:
    """ORG/NAME when `folder` lies in a hub cache (``models--ORG--NAME/snapshots/<commit>``)."""
    for part in reversed(folder.parts):
        if part.startswith("models--"):
            org, _, name = part.removeprefix("models--").partition("--")
            if org and name:
                return f"{org}/{name}"
    return None


def read_family(folder: Path, name: str | None = None) -> ModelFamily:
    """The family of the pipeline whose configs are in `folder` (model_index.json, the
    scheduler's and the denoiser's configs); `name` is the hub id it came from, if known.

    A model is few-step when its name says so (the hub id, a hub-cache path, the folder), when
    a Flux transformer has no guidance embedding (FLUX.1-schnell; FLUX.1-dev has one), or when
    an SD/SDXL scheduler samples trailing timesteps (as sd-turbo and sdxl-turbo ship): a
    snapshot copied out of the hub cache keeps its configs but loses its name.
    """
    index = _read_json(folder / "model_index.json")
    pipeline = str(index.get("_class_name") or "")
    scheduler = _read_json(folder / "scheduler" / "scheduler_config.json")
    transformer = _read_json(folder / "transformer" / "config.json")
    label = name or repo_id_in_path(folder) or folder.name
    named_few = any(word in label.lower() for word in _FEW_STEP_WORDS)
    flux = pipeline.startswith("Flux")
    sd3 = pipeline.startswith("StableDiffusion3")
    sdxl = pipeline.startswith("StableDiffusionXL")
    sd = pipeline.startswith("StableDiffusion") and not sd3
    few = (
        named_few
        or (flux and transformer.get("guidance_embeds") is False)
        or (sd and scheduler.get("timestep_spacing") == "trailing")
    )
    # Published in bf16: Flux, SD3.5 (its transformer normalises q/k; SD3-medium's does not)
    # and any model whose component configs say so.
    published = [
        str(_read_json(folder / key / "config.json").get(field) or "")
        for key, value in index.items()
        if not key.startswith("_") and isinstance(value, list)
        for field in ("torch_dtype", "dtype")
    ]
    bf16 = flux or (sd3 and bool(transformer.get("qk_norm"))) or "bfloat16" in published
    steps: int | None
    guidance: float | None
    if flux:  # FLUX.1-schnell's card: 4 steps at 0; FLUX.1-dev: diffusers' 28 at 3.5
        steps, guidance = (4, 0.0) if few else (28, 3.5)
    elif sd3:  # SD3.5-large-turbo's card: 4 steps at 0
        steps, guidance = (4, 0.0) if few else (28, 7.0)
    elif sd:  # sd-turbo's and sdxl-turbo's cards: 1 step at 0
        steps, guidance = (1, 0.0) if few else ((25, 5.0) if sdxl else (25, 7.5))
    else:
        steps, guidance = None, None
    return ModelFamily(pipeline, label, few, bf16, steps, guidance)


def family_defaults(pipe: Any, family: ModelFamily) -> DrawSettings:
    """Steps, guidance and native size for a loaded pipeline: the family's (see `read_family`),
    else the pipeline's own call defaults."""
    width, height = native_size(pipe)
    parameters = inspect.signature(pipe.__call__).parameters
    steps = family.steps
    if steps is None:
        steps = _default(parameters, "num_inference_steps", 25)
    guidance = family.guidance
    if guidance is None:
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


class DrawingWithheld(QuadratError):
    """A drawing the model's safety checker blacked out: left out of the query, with a note."""


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
        flagged = getattr(result, "nsfw_content_detected", None)
        if flagged and flagged[0]:
            # The safety checker blacks out what it flags, false positives included (a bare
            # tree, a pink fish): a black square as a query image would rank dark photos first.
            raise DrawingWithheld(
                f"{self.label}'s safety checker flagged this drawing, so it is not used as a query "
                f"image; try another seed or other words"
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
    hub_name: str | None = None
    if parsed.kind == "hub":
        assert parsed.hub_id is not None
        source = _hub_folder(parsed.hub_id, cache, report, token, fp16=_wants_fp16(device))
        configs, name, hub_name = source, parsed.hub_id, parsed.hub_id
    elif parsed.kind == "folder":
        assert parsed.path is not None
        source = configs = parsed.path
        name = repo_id_in_path(source) or source.name
    else:
        assert parsed.path is not None
        source, name = parsed.path, parsed.path.name
        configs = _single_file_configs(parsed, cache, report, token)
    identity = identity_of(parsed)
    token.check()
    family = read_family(configs, hub_name or repo_id_in_path(configs) or name)

    from engine.models.encoders import choose_device

    chosen = choose_device(device)
    pipe = _load_pipeline(parsed, source, chosen, configs, family)
    _place(pipe, chosen)
    defaults = family_defaults(pipe, family)
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


def _bf16_supported(device: str) -> bool:
    import torch

    return device.startswith("cuda") and bool(torch.cuda.is_bf16_supported())


def _load_pipeline(
    parsed: DiffusersSpec, source: Path, device: str, configs: Path, family: ModelFamily
) -> Any:
    import torch

    dtype = getattr(torch, family.dtype(device, bf16=_bf16_supported(device)))
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
            return _from_single_file(diffusers, parsed, dtype, configs)
        variant = _variant(source, half=dtype == torch.float16)
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


def weight_variant(name: str) -> str | None:
    """The variant of a weights file (``unet/diffusion_pytorch_model.fp16.safetensors`` ->
    "fp16", ``model.fp16-00001-of-00002.safetensors`` -> "fp16"), None for the plain one."""
    parts = name.rsplit("/", 1)[-1].split(".")
    if len(parts) < 3:
        return None
    return re.sub(r"-\d+-of-\d+$", "", parts[-2])


def _variant(folder: Path, *, half: bool) -> str | None:
    """The variant to load: fp16 files for an fp16 load, and whenever a component has only
    fp16 files (a GPU's download used on a CPU: diffusers casts them to the asked dtype)."""
    by_component: dict[str, set[str | None]] = {}
    for path in folder.glob("*/*.safetensors"):
        by_component.setdefault(path.parent.name, set()).add(weight_variant(path.name))
    has_half = any("fp16" in variants for variants in by_component.values())
    plain_missing = any(None not in variants for variants in by_component.values())
    return "fp16" if has_half and (half or plain_missing) else None


def _single_file_configs(
    parsed: DiffusersSpec, cache: Path, progress: ProgressCallback, cancel: CancelToken
) -> Path:
    """The pipeline configs of a single checkpoint as a local folder: ``?config=FOLDER``, the
    configs of ``?config=ORG/NAME`` (fetched when missing), or, without ``config=``, those of
    the family diffusers recognises in the checkpoint (fetched when online)."""
    assert parsed.path is not None
    from engine.models.encoders import check_plain_checkpoint

    check_plain_checkpoint(parsed.path)  # a .ckpt that would run code: refused before diffusers
    config = parsed.config
    if config is not None and Path(config).is_dir():
        return Path(config)
    if config is not None:
        return _hub_folder(config, cache, progress, cancel, fp16=False, configs_only=True)
    repo_id = _recognised_config(parsed.path)
    from engine.models.hub import ModelUnavailableError, probe

    reason = None if _cached_snapshot(repo_id, cache) is not None else probe()
    if reason is not None:
        raise ModelUnavailableError(
            f"generator {parsed.path.name}: its configs ({repo_id}, the family diffusers "
            f"recognises in it) are not on disk and cannot be fetched: {reason}; add "
            f"?config=FOLDER (a pipeline folder of the same model) to the spec"
        )
    return _hub_folder(repo_id, cache, progress, cancel, fp16=False, configs_only=True)


def _recognised_config(path: Path) -> str:
    """The hub repo whose configs diffusers uses for a checkpoint of this family."""
    try:
        from diffusers.loaders import single_file_utils
    except ImportError as error:
        raise ModelLoadError(
            f"Stable Diffusion needs the diffusers package ({one_line(error, 300)})"
        ) from error
    utils: Any = single_file_utils  # untyped library
    try:
        checkpoint = utils.load_single_file_checkpoint(str(path), local_files_only=True)
        repo_id = str(utils.fetch_diffusers_config(checkpoint)["pretrained_model_name_or_path"])
    except Exception as error:
        raise ModelLoadError(
            f"could not tell the model family of {path.name} ({one_line(error, 200)}); add "
            f"?config=FOLDER or ?config=ORG/NAME naming its pipeline configs"
        ) from error
    return repo_id


def _from_single_file(diffusers: Any, parsed: DiffusersSpec, dtype: Any, configs: Path) -> Any:
    """A single checkpoint: its pipeline class is the one its configs' model_index.json names."""
    assert parsed.path is not None
    index = configs / "model_index.json"
    try:
        class_name = json.loads(index.read_text(encoding="utf-8"))["_class_name"]
    except (OSError, ValueError, KeyError) as error:
        raise ModelLoadError(f"{index} names no pipeline class ({one_line(error, 300)})") from error
    pipeline_class = getattr(diffusers, str(class_name), None)
    if pipeline_class is None or not hasattr(pipeline_class, "from_single_file"):
        raise ModelLoadError(f"a {class_name} cannot be loaded from a single checkpoint file")
    return pipeline_class.from_single_file(
        str(parsed.path), config=str(configs), torch_dtype=dtype, local_files_only=True
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
    configs and tokenizer files, and one set of safetensors weights per component: the fp16
    variant for a GPU where the component has it, else the plain one (the fp16 one where that
    is all there is). Never the repo's root checkpoints, .bin duplicates or other variants
    (SD 1.5's 3.4 GB non-EMA UNet is a variant for training, not drawing)."""
    configs = [
        f
        for f in files
        if f == "model_index.json"
        or ("/" in f and f.rsplit(".", 1)[-1] in ("json", "txt", "model"))
    ]
    if configs_only:
        return configs
    weights: dict[str, dict[str | None, list[str]]] = {}
    for name in files:
        if "/" in name and name.endswith(".safetensors"):
            component = name.split("/", 1)[0]
            weights.setdefault(component, {}).setdefault(weight_variant(name), []).append(name)
    chosen: list[str] = []
    for variants in weights.values():
        half, plain = variants.get("fp16", []), variants.get(None, [])
        chosen += half if (fp16 and half) or not plain else plain
    return configs + chosen


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
