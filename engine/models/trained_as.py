"""How an open_clip model is built so that it matches how its weights were trained.

Two things are not in an architecture's config but in its weights' history: the activation
(OpenAI's CLIP and several others were trained with QuickGELU, open_clip's ``ViT-B-32`` builds
GELU and only warns) and the image preprocessing (mean/std, resize mode, interpolation). open_clip
keeps them in its pretrained registry (per ``ARCH:TAG``) and in a model folder's
``open_clip_config.json``. `TrainedAs` gathers them for every way a model is named:

- ``ARCH:TAG`` (downloaded or from the model store): the tag's ``quick_gelu`` flag;
- ``ARCH:/file``: an ``open_clip_config.json`` beside the file when there is one, otherwise
  what all of the architecture's registered tags agree on; what they disagree on stays
  open_clip's default, with a warning (e.g. ViT-L-14: LAION's mean/std 0.5 against OpenAI's;
  ViT-B-32: QuickGELU for OpenAI's and LAION-400M's weights, GELU for LAION-2B's);
- ``local-dir:`` and ``hf-hub:`` read the folder's own config in open_clip itself.

A model key says what differs from the plain build an older Quadrat made (`TrainedAs.note`):
vectors of a model built otherwise are not comparable, so the library is told to re-index.
"""

from __future__ import annotations

import json
import logging
import numbers
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import ModelLoadError

log = logging.getLogger(__name__)

CONFIG_BESIDE = "open_clip_config.json"
_FIELDS = ("mean", "std", "interpolation", "resize_mode")
# open_clip's PreprocessCfg defaults: what a plain `create_model_and_transforms(ARCH)` uses
_DEFAULTS: dict[str, Any] = {
    "mean": (0.48145466, 0.4578275, 0.40821073),
    "std": (0.26862954, 0.26130258, 0.27577711),
    "interpolation": "bicubic",
    "resize_mode": "shortest",
}
_CHOICES = {
    "interpolation": ("bicubic", "bilinear", "random"),
    "resize_mode": ("shortest", "longest", "squash"),
}


@dataclass(frozen=True)
class TrainedAs:
    """What to force on top of an architecture's config: QuickGELU, an image size, and
    preprocessing values (only those that differ from open_clip's plain build)."""

    quick_gelu: bool = False
    image_size: int | None = None
    preprocess: dict[str, Any] = field(default_factory=dict)

    def create_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for `open_clip.create_model_and_transforms`."""
        kwargs: dict[str, Any] = {}
        if self.quick_gelu:
            kwargs["force_quick_gelu"] = True
        if self.image_size is not None:
            kwargs["force_image_size"] = self.image_size
        for name in _FIELDS:
            if name in self.preprocess:
                kwargs[f"image_{name}"] = self.preprocess[name]
        return kwargs

    @property
    def note(self) -> str:
        """The model key's suffix: "" for the plain build, else e.g. " [quickgelu, squash]"."""
        parts = ["quickgelu"] if self.quick_gelu else []
        if self.image_size is not None:
            parts.append(f"image {self.image_size}")
        for name in ("mean", "std"):
            if name in self.preprocess:
                parts.append(f"{name} " + " ".join(f"{v:g}" for v in self.preprocess[name]))
        parts += [
            str(self.preprocess[n])
            for n in ("resize_mode", "interpolation")
            if n in self.preprocess
        ]
        return f" [{', '.join(parts)}]" if parts else ""


def _arch_quick_gelu(arch: str) -> bool:
    import open_clip

    return bool((open_clip.get_model_config(arch) or {}).get("quick_gelu"))


def _plain(name: str, value: Any) -> Any:
    """A comparable form of a preprocessing value (lists and tuples alike, floats rounded)."""
    if isinstance(value, (list, tuple)):
        return tuple(round(float(v), 8) for v in value)
    return value


def _differing(arch: str, quick_gelu: bool, preprocess: dict[str, Any]) -> TrainedAs:
    """Only what differs from the plain build of `arch`, so that unchanged models keep their
    keys and build exactly as before."""
    changed = {
        name: _plain(name, value)
        for name, value in preprocess.items()
        if name in _FIELDS
        and value is not None
        and _plain(name, value) != _plain(name, _DEFAULTS[name])
    }
    return TrainedAs(quick_gelu=quick_gelu and not _arch_quick_gelu(arch), preprocess=changed)


def for_tag(arch: str, tag: str) -> TrainedAs:
    """``ARCH:TAG``: the tag's activation (open_clip already applies its preprocessing)."""
    from open_clip.pretrained import get_pretrained_cfg

    flag = bool(get_pretrained_cfg(arch, tag).get("quick_gelu"))
    return TrainedAs(quick_gelu=flag and not _arch_quick_gelu(arch))


def for_checkpoint(arch: str, path: Path) -> TrainedAs:
    """``ARCH:/file``: the config beside the file, else the architecture's registry entries
    where they are unambiguous (see the module docstring)."""
    beside = path.parent / CONFIG_BESIDE
    if beside.is_file():
        return _from_config_file(arch, beside)
    return _from_registry(arch)


def _from_config_file(arch: str, config_path: Path) -> TrainedAs:
    import open_clip

    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ModelLoadError(f"{config_path} is not a valid open_clip config: {error}") from error
    if not isinstance(config, dict):
        raise ModelLoadError(f"{config_path} is not a valid open_clip config: not an object")
    model_cfg = config.get("model_cfg") if isinstance(config.get("model_cfg"), dict) else {}
    preprocess = (
        config.get("preprocess_cfg") if isinstance(config.get("preprocess_cfg"), dict) else {}
    )
    assert isinstance(model_cfg, dict) and isinstance(preprocess, dict)
    for name in _FIELDS:
        if not _valid(name, preprocess.get(name)):
            raise ModelLoadError(
                f"{config_path} is not a valid open_clip config: preprocess_cfg {name} "
                f"{preprocess[name]!r} is not {_expected(name)}"
            )
    built = _differing(arch, bool(model_cfg.get("quick_gelu")), preprocess)
    # A model trained at another resolution than the architecture's (e.g. a 378-pixel
    # fine-tune): without this its position embeddings would be silently interpolated.
    vision = model_cfg.get("vision_cfg")
    size = vision.get("image_size") if isinstance(vision, dict) else None
    arch_vision = (open_clip.get_model_config(arch) or {}).get("vision_cfg", {})
    if isinstance(size, int) and size != arch_vision.get("image_size"):
        built = TrainedAs(built.quick_gelu, size, built.preprocess)
    return built


def _valid(name: str, value: Any) -> bool:
    if value is None:
        return True
    if name in _CHOICES:
        return value in _CHOICES[name]
    return (
        isinstance(value, (list, tuple))
        and len(value) == 3
        and all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in value)
    )


def _expected(name: str) -> str:
    return " or ".join(_CHOICES[name]) if name in _CHOICES else "three numbers"


def _from_registry(arch: str) -> TrainedAs:
    import open_clip
    from open_clip.pretrained import get_pretrained_cfg

    entries = [
        get_pretrained_cfg(arch, tag) for tag in open_clip.list_pretrained_tags_by_model(arch)
    ]
    if not entries:
        return TrainedAs()
    agreed: dict[str, Any] = {}
    for name in _FIELDS:
        values = {_plain(name, cfg.get(name, _DEFAULTS[name])) for cfg in entries}
        if len(values) == 1:
            agreed[name] = values.pop()
    quick = {bool(cfg.get("quick_gelu")) for cfg in entries}
    unsure = [name for name in _FIELDS if name not in agreed]
    unsure += ["activation"] if len(quick) > 1 else []
    if unsure:
        # why: one architecture trained several ways; the file alone cannot say which
        log.warning(
            "%s's pretrained weights differ in %s: open_clip's defaults are used for a local "
            "checkpoint; put its %s beside the file to build it as it was trained",
            arch,
            ", ".join(unsure),
            CONFIG_BESIDE,
        )
    return _differing(arch, quick == {True}, agreed)
