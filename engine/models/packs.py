"""Offline model packs: one zip archive per model, made on a connected machine and imported
on one without a network.

A pack is stored, not compressed (weights do not compress), and holds the config, the weights
and a manifest with their sha256, size, licence and source. Importing streams each entry into
a temporary folder, stopping at the size the manifest gives and hashing as it goes, and renames
the folder into place, so a bad pack leaves nothing behind.

A pack only vouches for itself: its checksums prove it was not damaged on the way, not that it
holds the model it names. So a pack's weights must fit the architecture its name implies (for
ARCH:TAG, open_clip's own config of ARCH; for hf-hub:ORG/NAME, the pack's config), and a model
installed from a pack gets its own identity, ``SPEC [pack sha256-XXXXXXXXXXXXXXXX]``, unless
this store already holds the same weights downloaded from the source: vectors made with a pack's
weights are never taken for the published model's. A pack never silently replaces an installed
model whose weights differ.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
import zipfile
import zlib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engine.errors import BadInputError, ModelLoadError, one_line
from engine.files import file_sha256
from engine.models.download import HubDownloads
from engine.models.folders import (
    CONFIG_NAME,
    MANIFEST_NAME,
    WEIGHTS_NAME,
    InstalledModel,
    check_config,
    folder_slug,
    installed_from,
    pack_model_key,
    read_manifest,
)
from engine.models.offers import repository_role
from engine.models.spec import ModelSpec, as_model_spec, store_key
from engine.progress import ProgressCallback, RateMeter, no_progress

PACK_FORMAT = "quadrat-model-pack"
PACK_VERSION = 1
PACK_SUFFIX = ".qmodel"
_MB = 1_000_000
_MANIFEST_LIMIT = 1 << 20  # a pack manifest is a few hundred bytes
_DISK_MARGIN = 200 * _MB  # left free on the store's disk after an import


class ModelPacks(HubDownloads):
    """A model store that writes offline packs (downloading first when needed) and imports
    them after checking them."""

    # -- packs ---------------------------------------------------------------------------------

    def pack(
        self, spec: str | ModelSpec, out: Path, progress: ProgressCallback = no_progress
    ) -> Path:
        """Write an offline pack of `spec` at `out` (a folder: a file named after the model in
        it), downloading the model first when it is not installed. Returns the pack's path."""
        if isinstance(spec, str) and repository_role(spec) is not None:
            # Packs hold one open_clip model; a generator's or VLM's folder is used in place.
            raise BadInputError(
                f"packs are made of search models only; to carry {spec} to an offline machine, "
                f"copy its folder (shown by 'quadrat models list') and give that folder as the "
                f"generator, or as vlm:FOLDER for the scorer"
            )
        parsed = as_model_spec(spec)
        if parsed.kind == "demo":
            raise BadInputError("the demo model is bundled with Quadrat: it needs no pack")
        key = store_key(parsed)
        folder = self.folder(parsed)
        if folder is None:
            self.download(parsed, progress)
            folder = self.folder(parsed)
            assert folder is not None
        manifest = read_manifest(folder / MANIFEST_NAME) or {}
        out = Path(out).expanduser()
        if out.is_dir():
            out = out / f"{folder_slug(key)}{PACK_SUFFIX}"
        files: dict[str, dict[str, Any]] = {
            name: {"sha256": file_sha256(folder / name), "size": (folder / name).stat().st_size}
            for name in (CONFIG_NAME, WEIGHTS_NAME)
        }
        pack_manifest = {
            "format": PACK_FORMAT,
            "version": PACK_VERSION,
            "spec": key,
            "model_key": key,
            "licence": manifest.get("licence", ""),
            "source": manifest.get("source", ""),
            "files": files,
        }
        total = sum(int(entry["size"]) for entry in files.values())
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, temp_name = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
        os.close(fd)
        try:
            meter, done = RateMeter(total), 0
            with zipfile.ZipFile(temp_name, "w", compression=zipfile.ZIP_STORED) as archive:
                archive.writestr(MANIFEST_NAME, json.dumps(pack_manifest, indent=2))
                for name in files:
                    with (folder / name).open("rb") as src, archive.open(name, "w") as dst:
                        while chunk := src.read(1 << 20):
                            dst.write(chunk)
                            done += len(chunk)
                            progress(meter.update(done, f"packing {key}"))
            # mkstemp's file is private (0600); a pack is made to be carried to other machines
            # and users, so it gets an ordinary file's permissions.
            os.chmod(temp_name, 0o644)
            os.replace(temp_name, out)
        except BaseException:
            Path(temp_name).unlink(missing_ok=True)
            raise
        return out

    def import_pack(
        self, pack: Path, progress: ProgressCallback = no_progress, *, replace: bool = False
    ) -> InstalledModel:
        """Install an offline pack after checking it: its entries (plain files only, each at
        most the size its manifest gives, read as a stream and hashed on the way), every
        sha256, and that its weights fit the architecture its name implies. A model installed
        from a pack gets a model key of its own (see the module docstring). An installed model
        of that name with other weights is replaced only when `replace` is given. A bad pack
        -> one-line `BadInputError`, and nothing is installed or left behind."""
        pack = Path(pack).expanduser()
        if not pack.is_file():
            raise BadInputError(f"model pack not found: {pack}")
        try:
            with zipfile.ZipFile(pack) as archive:
                manifest = _pack_manifest(archive, pack)
                key = str(manifest["spec"])
                parsed = as_model_spec(key)
                files: dict[str, Any] = manifest["files"]
                digest = str(files[WEIGHTS_NAME]["sha256"])
                existing = self.folder(parsed)
                kept = read_manifest(existing / MANIFEST_NAME) if existing else None
                if existing is not None and kept is not None and kept.get("sha256") == digest:
                    return installed_from(existing, kept)  # these very weights: nothing to do
                if existing is not None and not replace:
                    raise BadInputError(
                        f"{key} is already installed with other weights "
                        f"({(kept or {}).get('origin', 'unknown origin')}); nothing was installed; "
                        "to replace it give --replace (libraries indexed with the installed one "
                        "will need indexing again)"
                    )
                total = sum(int(entry["size"]) for entry in files.values())
                self.root.mkdir(parents=True, exist_ok=True)
                _check_room(self.root, total, pack)
                meter, done = RateMeter(total), 0
                with self._incoming() as temp:
                    for name, entry in files.items():
                        done = _extract(
                            archive, name, entry, temp / name, pack, done, meter, progress, key
                        )
                    check_config(temp / CONFIG_NAME, pack)
                    _check_claim(key, parsed, temp, pack)
                    installed = {
                        "spec": key,
                        "model_key": pack_model_key(key, digest),
                        "sha256": digest,
                        "size_bytes": int(files[WEIGHTS_NAME]["size"]),
                        "licence": str(manifest.get("licence", "")),
                        "source": str(manifest.get("source", "")),
                        "origin": "pack",
                        "pack": pack.name,
                        "installed": datetime.now(UTC).isoformat(timespec="seconds"),
                    }
                    (temp / MANIFEST_NAME).write_text(json.dumps(installed, indent=2))
                    folder = self._place(temp, self.root / folder_slug(key))
        except (
            zipfile.BadZipFile,
            zipfile.LargeZipFile,
            EOFError,
            NotImplementedError,
            zlib.error,
        ) as error:
            raise BadInputError(
                f"{pack} is not a readable model pack ({one_line(error)}); nothing was installed"
            ) from None
        return installed_from(folder, installed)


def _pack_manifest(archive: zipfile.ZipFile, pack: Path) -> dict[str, Any]:
    """The manifest of a pack, checked for shape: exactly the expected plain files (no links,
    folders, paths or twins), a known version, a sha256 and a size for each file."""
    refuse = f"{pack} is not a Quadrat model pack"
    expected = {MANIFEST_NAME, CONFIG_NAME, WEIGHTS_NAME}
    entries = archive.infolist()
    names = [info.filename for info in entries]
    for info in entries:
        kind = stat.S_IFMT(info.external_attr >> 16)
        if info.is_dir() or (info.create_system == 3 and kind not in (0, stat.S_IFREG)):
            what = "a link" if kind == stat.S_IFLNK else "a folder or special file"
            raise BadInputError(
                f"{refuse} (its entry {info.filename!r} is {what}, not a plain file); "
                "nothing was installed"
            )
        if info.filename not in expected:
            raise BadInputError(
                f"{refuse} (it holds an unexpected entry {info.filename!r}); nothing was installed"
            )
    if len(set(names)) != len(names):
        raise BadInputError(f"{refuse} (it holds an entry twice); nothing was installed")
    if MANIFEST_NAME not in names:
        raise BadInputError(f"{refuse} (no {MANIFEST_NAME}); nothing was installed")
    unreadable = f"{refuse} (unreadable {MANIFEST_NAME}); nothing was installed"
    try:
        with archive.open(MANIFEST_NAME) as handle:
            raw = handle.read(_MANIFEST_LIMIT + 1)
        if len(raw) > _MANIFEST_LIMIT:
            raise BadInputError(f"{refuse} ({MANIFEST_NAME} is too large); nothing was installed")
        manifest = json.loads(raw)
    except (ValueError, RecursionError):  # RecursionError: nested beyond any real manifest
        raise BadInputError(unreadable) from None
    if not isinstance(manifest, dict) or manifest.get("format") != PACK_FORMAT:
        raise BadInputError(f"{refuse} (unknown format); nothing was installed")
    version = manifest.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise BadInputError(
            f"{refuse} (its version {str(version)[:40]!r} is not a version number); "
            "nothing was installed"
        )
    if version > PACK_VERSION:
        raise BadInputError(f"{pack} was made by a newer Quadrat; nothing was installed")
    files = manifest.get("files")
    if (
        not isinstance(files, dict)
        or set(files) != {CONFIG_NAME, WEIGHTS_NAME}
        or not set(files) <= set(names)
        or not all(
            isinstance(entry, dict)
            and isinstance(entry.get("sha256"), str)
            and re.fullmatch(r"[0-9a-f]{64}", entry["sha256"])
            and isinstance(entry.get("size"), int)
            and not isinstance(entry.get("size"), bool)
            and entry["size"] >= 0
            for entry in files.values()
        )
    ):
        raise BadInputError(f"{refuse} (its file list is wrong); nothing was installed")
    if not isinstance(manifest.get("spec"), str):
        raise BadInputError(f"{refuse} (it names no model); nothing was installed")
    store_key(manifest["spec"])  # a named model, or BadInputError
    return manifest


def _check_room(root: Path, total: int, pack: Path) -> None:
    """Refuse an import its declared sizes say the store's disk cannot hold."""
    free = shutil.disk_usage(root).free
    if total + _DISK_MARGIN > free:
        raise BadInputError(
            f"{pack} needs {total / 1e9:.1f} GB and the model store's disk has "
            f"{free / 1e9:.1f} GB free; free some space (or check the pack); nothing was installed"
        )


def _extract(
    archive: zipfile.ZipFile,
    name: str,
    entry: dict[str, Any],
    target: Path,
    pack: Path,
    done: int,
    meter: RateMeter,
    progress: ProgressCallback,
    key: str,
) -> int:
    """Stream one entry to `target`, hashing it, and stop as soon as it outgrows the size the
    manifest gives (a zip bomb is never written out). Returns the bytes done so far."""
    limit = int(entry["size"])
    digest, written = hashlib.sha256(), 0
    with archive.open(name) as src, target.open("wb") as dst:
        while chunk := src.read(min(1 << 20, limit - written + 1)):
            written += len(chunk)
            if written > limit:
                raise BadInputError(
                    f"{pack} is damaged or was altered: {name} is larger than its manifest says "
                    f"({limit} bytes); nothing was installed"
                )
            digest.update(chunk)
            dst.write(chunk)
            done += len(chunk)
            progress(meter.update(done, f"importing {key}"))
    if written != limit or digest.hexdigest() != entry["sha256"]:
        raise BadInputError(
            f"{pack} is damaged or was altered: {name} fails its sha256 check; "
            "nothing was installed"
        )
    return done


def _check_claim(key: str, parsed: ModelSpec, folder: Path, pack: Path) -> None:
    """Check a pack's model against what its name implies, from outside the pack: for ARCH:TAG
    the architecture open_clip defines for ARCH (config and every weight's shape); for
    hf-hub:ORG/NAME, whose published files cannot be seen offline, that the weights fit the
    pack's own config. Reads the weights' header only (the model is built without memory)."""
    import open_clip
    import torch
    from safetensors import safe_open

    from engine.models.encoders import apply_state_dict, quiet_random_init  # lazy: needs torch

    config = json.loads((folder / CONFIG_NAME).read_text(encoding="utf-8"))
    claim = f"{pack} claims to be {key}"
    if parsed.kind == "pretrained":
        assert parsed.arch is not None and parsed.pretrained is not None
        if parsed.pretrained not in open_clip.list_pretrained_tags_by_model(parsed.arch):
            raise BadInputError(
                f"{claim}, which this Quadrat's open_clip does not know; nothing was installed"
            )
        if config.get("model_cfg") != open_clip.get_model_config(parsed.arch):
            raise BadInputError(
                f"{claim} but its config is not the {parsed.arch} architecture; "
                "nothing was installed"
            )
        name = parsed.arch
    else:
        name = f"local-dir:{folder}"
    try:
        with safe_open(str(folder / WEIGHTS_NAME), framework="pt") as weights:
            shapes = {k: weights.get_slice(k).get_shape() for k in weights.keys()}  # noqa: SIM118
    except Exception as error:  # safetensors raises its own error types
        raise BadInputError(
            f"{claim} but its weights are not a valid safetensors file ({one_line(error, 200)}); "
            "nothing was installed"
        ) from None
    try:
        with quiet_random_init():
            model = open_clip.create_model(name, device="meta", load_weights=False)
    except Exception as error:
        raise BadInputError(
            f"{claim} but its config describes no model open_clip can build "
            f"({one_line(error, 200)}); nothing was installed"
        ) from None
    fake = {k: torch.empty(shape, device="meta") for k, shape in shapes.items()}
    try:
        apply_state_dict(model, fake, folder / WEIGHTS_NAME, name)
    except ModelLoadError:
        size = (folder / WEIGHTS_NAME).stat().st_size
        raise BadInputError(
            f"{claim} but its weights ({size / _MB:.1f} MB) do not have the shapes of that "
            "model's architecture: it is another model; nothing was installed"
        ) from None
