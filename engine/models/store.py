"""The model store: models on disk, and whether a named model can be had before any work.

`ModelStore` is the one object the command line and the window use. It is laid out by job:

- `engine.models.folders` (`StoreFolders`): the store's folders, what is installed, temporary
  folders and renames (what the loader reads, too);
- `engine.models.download` (`HubDownloads`): resumable downloads from the model hub;
- `engine.models.packs` (`ModelPacks`): offline packs, written and imported with their checks;
- here: removing a model, copying a model file or folder the user picks into the store,
  `export_onnx` (a downloaded or imported encoder's ONNX export, made once beside it), and
  `preflight`, which says within seconds and before torch is imported that a model can be
  neither found on disk nor downloaded.

The catalogue the chooser offers is `engine.models.offers`; the hub's address and reachability
are `engine.models.hub`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import zipfile
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from engine.errors import BadInputError
from engine.files import file_sha256
from engine.models.folders import (
    CONFIG_NAME,
    MANIFEST_NAME,
    PARTIAL_DIR,
    InstalledModel,
    StoreFolders,
    check_config,
    folder_slug,
    installed_from,
)
from engine.models.hub import ensure_reachable
from engine.models.offers import repository_role
from engine.models.packs import ModelPacks
from engine.models.spec import ModelSpec, as_model_spec, store_key
from engine.progress import CancelToken, Progress, ProgressCallback

if TYPE_CHECKING:
    from engine.models.onnx_runtime import OnnxExport


class ModelStore(ModelPacks):
    """Installed models (one folder each), downloads, offline packs, and models the user copies
    in from files."""

    # -- removing and importing files --------------------------------------------------------

    def remove(self, spec: str) -> None:
        """Delete an installed model (and any partial download of it) from the store."""
        if repository_role(spec) is not None:  # a generator or VLM folder
            shutil.rmtree(
                self.root / PARTIAL_DIR / self.repository_folder(spec).name, ignore_errors=True
            )
            found = self.folder(spec)
            if found is None:
                raise BadInputError(f"{spec} is not installed")
            _delete(found)
            return
        parsed = as_model_spec(spec)
        if parsed.kind == "demo":
            raise BadInputError("the demo model is bundled with Quadrat and cannot be removed")
        if parsed.kind in ("checkpoint", "local-dir"):
            entry = next((m for m in self.installed() if m.spec == parsed.spec), None)
            if entry is None or entry.path is None:
                raise BadInputError(f"{spec} is not in the model store (its files are yours)")
            folder: Path | None = entry.path
        else:
            folder = self.folder(parsed)
            shutil.rmtree(
                self.root / PARTIAL_DIR / folder_slug(store_key(parsed)), ignore_errors=True
            )
        if folder is None:
            raise BadInputError(f"{spec} is not installed")
        _delete(folder)
        # Its ONNX exports go with it (a model imported again is exported and checked again).
        from engine.models.onnx_runtime import exports_by_spec, remove_export

        for export in exports_by_spec(self.root).get(parsed.spec, []):
            remove_export(self.root, export.model_key)

    def export_onnx(
        self,
        spec: str,
        *,
        cache_dir: Path | None = None,
        progress: ProgressCallback | None = None,
        cancel: CancelToken | None = None,
    ) -> OnnxExport | None:
        """Export the installed encoder `spec`'s towers to ONNX beside it in the store, each
        verified against torch on the probe batch (`engine.models.onnx_runtime.ensure_export`;
        once per model key: an export already there is returned at once). None when
        onnxruntime is not installed. Loads the model with torch on the CPU (seconds);
        `cancel` is heard before the model loads and between the towers (`Cancelled`), and a
        cancelled export leaves nothing behind."""
        from engine.models.onnx_runtime import ensure_export, onnx_runtime_installed

        if not onnx_runtime_installed():
            return None
        report = progress or (lambda _p: None)

        def checked(step: Progress) -> None:
            if cancel is not None:
                cancel.check()
            report(step)

        checked(Progress(0, 0, message="loading the model to export it to ONNX"))
        from engine.models.encoders import OpenClipEncoder, load_encoder

        encoder = load_encoder(
            spec, device="cpu", cache_dir=cache_dir, store_dir=self.root, runtime="torch"
        )
        if not isinstance(encoder, OpenClipEncoder):  # a plug-in's encoder: torch only
            return None
        return ensure_export(encoder, self.root, checked)

    def import_file(self, spec_or_path: str) -> InstalledModel:
        """Copy a model the user picks into the store: an offline pack, an open_clip model
        folder (`local-dir:` or a plain folder path), or a checkpoint file named with its
        architecture (`ARCH:/path/file`). The returned spec loads it from the store; the model
        key (a content hash for files) is the same as loading the original."""
        text = spec_or_path.strip()
        as_path = Path(text).expanduser()
        if as_path.is_file() and zipfile.is_zipfile(as_path):
            return self.import_pack(as_path)
        if as_path.is_dir():
            text = f"local-dir:{as_path}"
        elif as_path.is_file():
            raise BadInputError(
                f"say which architecture {as_path.name} is: ARCH:{as_path} (e.g. ViT-B-32:...)"
            )
        parsed = as_model_spec(text)
        if parsed.kind not in ("checkpoint", "local-dir"):
            raise BadInputError(f"'{text}' is not a model file or folder on this machine")
        assert parsed.path is not None
        source = parsed.path.resolve()
        if parsed.kind == "local-dir":
            config = source / CONFIG_NAME
            weights = next(
                (source / n for n in _LOCAL_WEIGHTS if (source / n).is_file()),
                None,
            )
            if not config.is_file() or weights is None:
                raise BadInputError(
                    f"{source} is not an open_clip model folder ({CONFIG_NAME} and weights)"
                )
            check_config(config, source)
            copies = [config, weights]
        else:
            if not source.is_file():
                raise BadInputError(f"model file not found: {source}")
            weights, copies = source, [source]
        digest = file_sha256(weights)
        folder = self.root / folder_slug(f"file:{digest}")
        with self._incoming() as temp:
            for path in copies:
                shutil.copyfile(path, temp / path.name)
            if parsed.kind == "local-dir":
                spec = f"local-dir:{folder}"
            else:
                spec = f"{parsed.arch}:{folder / weights.name}"
            manifest = {
                "spec": spec,
                "model_key": "",
                "sha256": digest,
                "size_bytes": weights.stat().st_size,
                "licence": "",
                "source": str(source),
                "origin": "file",
                "installed": datetime.now(UTC).isoformat(timespec="seconds"),
            }
            (temp / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2), encoding="utf-8")
            self._place(temp, folder)
        return installed_from(folder, manifest)


def export_outcome(export: OnnxExport | None) -> str:
    """One line on what an ONNX export gives: both towers, one (and why the other was
    refused: torch encodes it), or none."""
    if export is None:
        return "ONNX Runtime is not installed: torch encodes this model"
    usable = [
        name for name, tower in (("image", export.image), ("text", export.text)) if tower.usable
    ]
    refused = [
        f"{name} tower refused ({tower.refused})"
        for name, tower in (("image", export.image), ("text", export.text))
        if not tower.usable
    ]
    if not refused:
        return "exported to ONNX and verified against torch: ONNX Runtime encodes it on the CPU"
    if not usable:
        return f"ONNX export refused ({'; '.join(refused)}): torch encodes this model"
    return f"ONNX: the {usable[0]} tower runs in ONNX Runtime; the {'; '.join(refused)}, torch encodes it"


def _delete(folder: Path) -> None:
    """Remove a model folder: gone from the store at once, even if deleting is slow."""
    trash = folder.with_name(f".removing-{folder.name}")
    os.replace(folder, trash)
    shutil.rmtree(trash, ignore_errors=True)


_LOCAL_WEIGHTS = (
    "open_clip_model.safetensors",
    "open_clip_pytorch_model.safetensors",
    "model.safetensors",
    "open_clip_pytorch_model.bin",
    "pytorch_model.bin",
    "open_clip_pytorch_model.pth",
    "model.pth",
)


def preflight(spec: str | ModelSpec, store_dir: Path | None, cache_dir: Path | None) -> None:
    """Before torch is imported (seconds): raise `ModelUnavailableError` when `spec` names a
    model that is not in the store, cannot be in open_clip's download cache and cannot be
    downloaded now. Anything else is left to `load_encoder`."""
    parsed = as_model_spec(spec)
    if not parsed.is_named:
        return
    if parsed.kind == "pretrained" and not _open_clip_lists(
        str(parsed.arch), str(parsed.pretrained)
    ):
        return  # a typo: load_encoder says which names are known
    if store_dir is not None and ModelStore(store_dir).folder(parsed) is not None:
        return
    if cache_dir is not None and in_download_cache(parsed, cache_dir):
        return
    ensure_reachable(parsed)


def encoder_on_disk(store: StoreFolders, spec: str | ModelSpec, cache_dir: Path | None) -> bool:
    """Whether the search model `spec` loads without a download: bundled, a file or folder
    that exists, in the store (its manifest), or possibly in open_clip's download cache. File
    checks only: it imports neither torch nor open_clip, so the window can ask at once."""
    if store.is_installed(spec):
        return True
    return cache_dir is not None and in_download_cache(spec, cache_dir)


def in_download_cache(spec: str | ModelSpec, cache_dir: Path) -> bool:
    """Whether open_clip's own download cache may hold the named model `spec` (models fetched
    before the store existed load from there offline). Cheap and conservative: for ARCH:TAG any
    cached file counts, since which hub repo a tag maps to is open_clip's to say."""
    parsed = as_model_spec(spec)
    if not parsed.is_named or not cache_dir.is_dir():
        return False
    if parsed.kind == "hf-hub":
        assert parsed.hub_id is not None
        return (cache_dir / f"models--{parsed.hub_id.replace('/', '--')}").is_dir()
    return any(cache_dir.iterdir())


def _open_clip_lists(arch: str, tag: str) -> bool:
    """Whether open_clip ships a config for `arch` and names the pretrained tag `tag`, read
    from its files without importing it (importing it imports torch: seconds)."""
    import importlib.util

    found = importlib.util.find_spec("open_clip")
    if found is None or not found.submodule_search_locations:
        return False
    package = Path(next(iter(found.submodule_search_locations)))
    if not (package / "model_configs" / f"{arch}.json").is_file():
        return False
    try:
        source = (package / "pretrained.py").read_text(encoding="utf-8")
    except OSError:
        return False
    return re.search(rf"\b{re.escape(tag)}\s*=", source) is not None
