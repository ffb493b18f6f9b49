"""Model specs: how a user names a CLIP model, parsed once into a `ModelSpec` value.

A model is named by a spec string (docs/SPEC.md §5.2):

- ``demo`` - the tiny model shipped in ``resources/models``;
- ``ARCH:PRETRAINED`` - an open_clip architecture and pretrained tag, from the model store
  (`engine.models.store`) or downloaded on first use;
- ``hf-hub:ORG/NAME`` - an open_clip model on the Hugging Face hub, likewise;
- ``ARCH:/path/to/checkpoint`` - an open_clip architecture with a local weights file; its
  activation and preprocessing come from an ``open_clip_config.json`` beside the file, else
  from the architecture's registered tags where they agree (`engine.models.trained_as`);
- ``local-dir:/path`` - a folder with ``open_clip_config.json`` and the weights (a hub model's
  downloaded folder or snapshot: its config decides activation and preprocessing).

Both the loader (`engine.models.encoders`) and the model store (`engine.models.store`) import this module and
pass the parsed value between them; it imports neither, nor torch, so parsing stays cheap.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Literal

from engine.errors import BadInputError

DEMO_SPEC = "demo"
DEMO_ARCH = "quadrat-demo"
"""open_clip name of the demo architecture: the stem of its config JSON in resources/models."""

_WEIGHT_SUFFIXES = (".safetensors", ".pt", ".pth", ".bin", ".ckpt")
_ACCEPTED_FORMS = (
    "use demo, ARCH:PRETRAINED (e.g. ViT-B-32:laion2b_s34b_b79k), hf-hub:ORG/NAME, "
    "ARCH:/path/to/checkpoint or local-dir:/path/to/folder"
)


@dataclass(frozen=True)
class ModelSpec:
    """A parsed model spec. `spec` is the text the user gave."""

    spec: str
    kind: Literal["demo", "pretrained", "hf-hub", "checkpoint", "local-dir"]
    arch: str | None = None
    pretrained: str | None = None
    path: Path | None = None
    hub_id: str | None = None

    @property
    def is_named(self) -> bool:
        """True for a model named by the hub or open_clip (ARCH:TAG, hf-hub:ORG/NAME): one the
        store downloads, packs and imports, as opposed to the demo or a file of the user's."""
        return self.kind in ("pretrained", "hf-hub")


def _bad_spec(spec: str, why: str) -> BadInputError:
    return BadInputError(f"bad model '{spec}': {why}; {_ACCEPTED_FORMS}")


def _looks_like_path(text: str) -> bool:
    return (
        "/" in text
        or "\\" in text
        or os.sep in text
        or text.lower().endswith(_WEIGHT_SUFFIXES)
        or Path(text).expanduser().exists()
    )


def parse_model_spec(spec: str) -> ModelSpec:
    """Parse a model spec (see the module docstring). Malformed -> `BadInputError`."""
    text = spec.strip()
    if not text:
        raise _bad_spec(spec, "empty")
    if text.lower() == DEMO_SPEC:
        return ModelSpec(spec=text, kind="demo", arch=DEMO_ARCH)
    if text.startswith("hf-hub:"):
        hub_id = text.removeprefix("hf-hub:").strip()
        if not re.fullmatch(r"[\w.\-]+/[\w.\-]+", hub_id):
            raise _bad_spec(spec, "a hub id is ORG/NAME")
        return ModelSpec(spec=text, kind="hf-hub", hub_id=hub_id)
    if text.startswith("local-dir:"):
        folder = text.removeprefix("local-dir:").strip()
        if not folder:
            raise _bad_spec(spec, "no folder after local-dir:")
        return ModelSpec(spec=text, kind="local-dir", path=Path(folder).expanduser())
    arch, colon, rest = text.partition(":")
    arch, rest = arch.strip(), rest.strip()
    if not colon:
        raise _bad_spec(spec, "no ':' between architecture and weights")
    if not arch or not rest:
        raise _bad_spec(spec, "architecture and weights must both be given")
    if _looks_like_path(arch):
        raise _bad_spec(spec, f"'{arch}' is not an architecture name")
    if _looks_like_path(rest):
        return ModelSpec(spec=text, kind="checkpoint", arch=arch, path=Path(rest).expanduser())
    if not re.fullmatch(r"[\w.\-]+", rest):
        raise _bad_spec(spec, f"'{rest}' is neither a pretrained tag nor a file path")
    return ModelSpec(spec=text, kind="pretrained", arch=arch, pretrained=rest)


def as_model_spec(spec: str | ModelSpec) -> ModelSpec:
    """`spec` as a parsed value: text is parsed (malformed -> `BadInputError`), a value kept."""
    return parse_model_spec(spec) if isinstance(spec, str) else spec


def store_key(spec: str | ModelSpec) -> str:
    """The canonical text of a named model (ARCH:TAG or hf-hub:ORG/NAME): its store identity
    and, for these kinds, its model key."""
    parsed = as_model_spec(spec)
    if parsed.kind == "pretrained":
        return f"{parsed.arch}:{parsed.pretrained}"
    if parsed.kind == "hf-hub":
        return f"hf-hub:{parsed.hub_id}"
    raise BadInputError(
        f"'{parsed.spec}' is a file on this machine, not a named model: "
        "only ARCH:PRETRAINED and hf-hub:ORG/NAME models are downloaded, packed or imported"
    )


# ---------------------------------------------------------------------------------------------
# The bundled demo model's files


_resource_files = contextlib.ExitStack()
atexit.register(_resource_files.close)


def bundled_model_file(name: str) -> Path:
    """A real file path for a file of the `resources.models` package (installed or frozen)."""
    ref = resources.files("resources.models") / name
    if isinstance(ref, Path):
        return ref
    return _resource_files.enter_context(resources.as_file(ref))


def demo_weights_path() -> Path:
    """The bundled demo model's weights file."""
    return bundled_model_file(f"{DEMO_ARCH}.safetensors")


def demo_model_spec() -> str:
    """The spec the "demo" model resolves to: the demo architecture and its shipped weights."""
    return f"{DEMO_ARCH}:{demo_weights_path()}"
