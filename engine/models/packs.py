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

Image generators and VLMs (folders of many files: a diffusers pipeline, a transformers model)
are packed the same way, as the store holds them: every file at its path in the folder, each
with its sha256 and size in the manifest (version 2, with the model's role). Nested paths are
allowed; absolute paths, `..`, hidden parts, links and twins are not (no entry can land outside
the model's folder), and a pack holds only files a download of that catalogue offer would have
(its file patterns: safetensors weights, never pickles or code). Such a model installed from a
pack gets its own identity too, unless its files are exactly those of the installed download.
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
    whole_safetensors,
)
from engine.models.offers import ROLE_NAMES, Role, offer_for, repository_role
from engine.models.spec import ModelSpec, as_model_spec, store_key
from engine.progress import ProgressCallback, RateMeter, no_progress

PACK_FORMAT = "quadrat-model-pack"
PACK_VERSION = 2  # 2: generator and VLM packs (a folder of files, with the model's role)
ENCODER_PACK_VERSION = 1  # encoder packs keep version 1, which older Quadrats import
_MAX_ENTRIES = 10_000  # far more files than any model folder has
# The config every folder of a role has, and the field in it that names what it is.
KEY_CONFIGS = {
    "generator": ("model_index.json", "_class_name"),
    "vlm": ("config.json", "model_type"),
}
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
            return self._pack_repository(spec.strip(), out, progress)
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
        files: dict[str, dict[str, Any]] = {
            name: {"sha256": file_sha256(folder / name), "size": (folder / name).stat().st_size}
            for name in (CONFIG_NAME, WEIGHTS_NAME)
        }
        pack_manifest = {
            "format": PACK_FORMAT,
            "version": ENCODER_PACK_VERSION,  # so that an older Quadrat imports it too
            "spec": key,
            "model_key": key,
            "licence": manifest.get("licence", ""),
            "source": manifest.get("source", ""),
            "files": files,
        }
        return _write_pack(_pack_path(out, key), pack_manifest, folder, key, progress)

    def _pack_repository(self, spec: str, out: Path, progress: ProgressCallback) -> Path:
        """Pack the catalogue's generator or VLM `spec` as the store holds it: the files its
        manifest lists, each checked against the sha256 recorded when it was installed."""
        role = repository_role(spec)
        folder = self.folder(spec)
        if folder is None:
            self.download(spec, progress)
            folder = self.folder(spec)
            assert folder is not None
        manifest = read_manifest(folder / MANIFEST_NAME) or {}
        recorded = manifest.get("files")
        if not isinstance(recorded, dict) or not recorded:
            raise BadInputError(
                f"the installed {spec} lists no files in its manifest; remove it and download "
                "it again ('quadrat models remove', then 'download')"
            )
        files: dict[str, dict[str, Any]] = {}
        for name, entry in sorted(recorded.items()):
            path = folder / name
            digest = file_sha256(path) if path.is_file() and not path.is_symlink() else ""
            if (
                _unsafe_path(name) is not None
                or not isinstance(entry, dict)
                or digest != entry.get("sha256")
            ):
                raise BadInputError(
                    f"the installed {spec} has changed since it was installed ({name} is missing "
                    "or differs); remove it and download it again ('quadrat models remove', "
                    "then 'download')"
                )
            files[name] = {"sha256": digest, "size": path.stat().st_size}
        pack_manifest = {
            "format": PACK_FORMAT,
            "version": PACK_VERSION,
            "role": role,
            "spec": spec,
            "model_key": str(manifest.get("model_key", "")),
            "licence": str(manifest.get("licence", "")),
            "source": str(manifest.get("source", "")),
            "commit": str(manifest.get("commit", "")),
            "files": files,
        }
        return _write_pack(_pack_path(out, f"{role}:{spec}"), pack_manifest, folder, spec, progress)

    def import_pack(
        self, pack: Path, progress: ProgressCallback = no_progress, *, replace: bool = False
    ) -> InstalledModel:
        """Install an offline pack after checking it: its entries (plain files only, each at
        most the size its manifest gives, read as a stream and hashed on the way), every
        sha256, and that its weights fit the architecture its name implies (a generator's or
        VLM's: that its files are what the catalogue's download of it holds). A model installed
        from a pack gets a model key of its own (see the module docstring). An installed model
        of that name with other weights is replaced only when `replace` is given. A bad pack
        -> one-line `BadInputError`, and nothing is installed or left behind."""
        pack = Path(pack).expanduser()
        if not pack.is_file():
            raise BadInputError(f"model pack not found: {pack}")
        try:
            with zipfile.ZipFile(pack) as archive:
                manifest = _pack_manifest(archive, pack)
                if manifest.get("role", "encoder") != "encoder":
                    return self._import_repository(archive, manifest, pack, progress, replace)
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

    def _import_repository(
        self,
        archive: zipfile.ZipFile,
        manifest: dict[str, Any],
        pack: Path,
        progress: ProgressCallback,
        replace: bool,
    ) -> InstalledModel:
        """Install a generator's or VLM's pack (checked for shape by `_pack_manifest`) into the
        folder the store finds that catalogue offer in."""
        spec, role = str(manifest["spec"]), str(manifest["role"])
        files: dict[str, dict[str, Any]] = manifest["files"]
        offer = offer_for(spec)
        assert offer is not None  # _pack_manifest checked it
        digest = files_digest({name: str(entry["sha256"]) for name, entry in files.items()})
        existing = self.folder(spec)
        kept = read_manifest(existing / MANIFEST_NAME) if existing else None
        if existing is not None and kept is not None and _same_files(kept, files):
            return installed_from(existing, kept)  # these very files: nothing to do
        if existing is not None and not replace:
            raise BadInputError(
                f"{spec} is already installed with other files "
                f"({(kept or {}).get('origin', 'unknown origin')}); nothing was installed; "
                "to replace it give --replace"
            )
        total = sum(int(entry["size"]) for entry in files.values())
        self.root.mkdir(parents=True, exist_ok=True)
        _check_room(self.root, total, pack)
        _check_patterns(spec, files, pack)
        meter, done = RateMeter(total), 0
        with self._incoming() as temp:
            for name, entry in files.items():
                target = temp / name
                target.parent.mkdir(parents=True, exist_ok=True)
                done = _extract(archive, name, entry, target, pack, done, meter, progress, spec)
            _check_repository(offer.role, spec, temp, files, pack)
            installed = {
                "spec": spec,
                "role": role,
                "model_key": pack_model_key(spec, digest),  # as installed_from gives it
                "sha256": digest,
                "size_bytes": total,
                "files": {
                    name: {"size_bytes": int(entry["size"]), "sha256": str(entry["sha256"])}
                    for name, entry in files.items()
                },
                "commit": "",  # a pack only vouches for itself: no hub commit is claimed
                "stated_commit": str(manifest.get("commit", ""))[:64],
                "licence": offer.licence,
                "source": offer.source,
                "origin": "pack",
                "pack": pack.name,
                "installed": datetime.now(UTC).isoformat(timespec="seconds"),
            }
            (temp / MANIFEST_NAME).write_text(json.dumps(installed, indent=2), encoding="utf-8")
            folder = self._place(temp, self.repository_folder(spec))
        return installed_from(folder, installed)


def files_digest(hashes: dict[str, str]) -> str:
    """One sha256 of a folder's files (name and sha256 of each, in name order): the weights
    hash a generator's or VLM's pack-made model key carries."""
    digest = hashlib.sha256()
    for name in sorted(hashes):
        digest.update(f"{name}\0{hashes[name]}\n".encode())
    return digest.hexdigest()


def _same_files(kept: dict[str, Any], files: dict[str, dict[str, Any]]) -> bool:
    """Whether an installed folder's manifest lists exactly the pack's files and hashes."""
    recorded = kept.get("files")
    if not isinstance(recorded, dict) or set(recorded) != set(files):
        return False
    return all(
        isinstance(recorded[name], dict) and recorded[name].get("sha256") == entry["sha256"]
        for name, entry in files.items()
    )


def _pack_path(out: Path, key: str) -> Path:
    """The pack file to write: `out`, or a file named after the model in the folder `out`."""
    out = Path(out).expanduser()
    return out / f"{folder_slug(key)}{PACK_SUFFIX}" if out.is_dir() else out


def _write_pack(
    out: Path,
    pack_manifest: dict[str, Any],
    folder: Path,
    label: str,
    progress: ProgressCallback,
) -> Path:
    """Write the pack: the manifest, then the files it lists from `folder`, stored (weights do
    not compress), into a temporary file renamed into place."""
    files: dict[str, dict[str, Any]] = pack_manifest["files"]
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
                        progress(meter.update(done, f"packing {label}"))
        # mkstemp's file is private (0600); a pack is made to be carried to other machines
        # and users, so it gets an ordinary file's permissions.
        os.chmod(temp_name, 0o644)
        os.replace(temp_name, out)
    except BaseException:
        Path(temp_name).unlink(missing_ok=True)
        raise
    return out


def _pack_manifest(archive: zipfile.ZipFile, pack: Path) -> dict[str, Any]:
    """The manifest of a pack, checked for shape: plain files only (no links, folders or
    twins), a known version, a sha256 and a size for each file; an encoder pack holds exactly
    its config and weights, a generator's or VLM's pack the files its manifest lists, each at a
    relative path inside the model's folder."""
    refuse = f"{pack} is not a Quadrat model pack"
    names = _plain_entries(archive, refuse)
    manifest, version = _read_manifest(archive, pack, refuse)
    role = manifest.get("role", "encoder")
    if role == "encoder":
        expected = {CONFIG_NAME, WEIGHTS_NAME}
    elif isinstance(role, str) and role in ROLE_NAMES and version >= 2:
        expected = _repository_entries(manifest, names, refuse)
    else:
        raise BadInputError(f"{refuse} (unknown role {str(role)[:40]!r}); nothing was installed")
    _check_file_list(manifest, names, expected, refuse)
    if not isinstance(manifest.get("spec"), str):
        raise BadInputError(f"{refuse} (it names no model); nothing was installed")
    if role == "encoder":
        store_key(manifest["spec"])  # a named model, or BadInputError
        return manifest
    offer = offer_for(manifest["spec"])
    if offer is None or offer.role != role:
        raise BadInputError(
            f"{pack} holds {str(manifest['spec'])[:80]!r}, which is not among the "
            f"{ROLE_NAMES[role]}s this Quadrat offers; nothing was installed"
        )
    return manifest


def _plain_entries(archive: zipfile.ZipFile, refuse: str) -> list[str]:
    """The archive's entry names: not too many, plain files only, none twice (letter case
    aside), the manifest among them."""
    entries = archive.infolist()
    if len(entries) > _MAX_ENTRIES:
        raise BadInputError(f"{refuse} (it holds {len(entries)} entries); nothing was installed")
    names = [info.filename for info in entries]
    for info in entries:
        kind = stat.S_IFMT(info.external_attr >> 16)
        if info.is_dir() or (info.create_system == 3 and kind not in (0, stat.S_IFREG)):
            what = "a link" if kind == stat.S_IFLNK else "a folder or special file"
            raise BadInputError(
                f"{refuse} (its entry {info.filename!r} is {what}, not a plain file); "
                "nothing was installed"
            )
    # Case-insensitive: two names one letter-case apart are one file on Windows and macOS.
    if len({name.casefold() for name in names}) != len(names):
        raise BadInputError(f"{refuse} (it holds an entry twice); nothing was installed")
    if MANIFEST_NAME not in names:
        raise BadInputError(f"{refuse} (no {MANIFEST_NAME}); nothing was installed")
    return names


def _read_manifest(archive: zipfile.ZipFile, pack: Path, refuse: str) -> tuple[dict[str, Any], int]:
    """The manifest read (size-limited JSON) and its format and version checked: (manifest,
    version)."""
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
    return manifest, version


def _check_file_list(
    manifest: dict[str, Any], names: list[str], expected: set[str], refuse: str
) -> None:
    """Every entry is expected, and the manifest lists exactly the expected files, each in
    the archive with a sha256 and a size."""
    for name in names:
        if name != MANIFEST_NAME and name not in expected:
            raise BadInputError(
                f"{refuse} (it holds an unexpected entry {name!r}); nothing was installed"
            )
    files = manifest.get("files")
    if (
        not isinstance(files, dict)
        or set(files) != expected
        or not set(files) <= set(names)
        or not all(_listed_file(entry) for entry in files.values())
    ):
        raise BadInputError(f"{refuse} (its file list is wrong); nothing was installed")


def _listed_file(entry: object) -> bool:
    """A manifest's file entry: a lower-case hex sha256 and a size in bytes."""
    return (
        isinstance(entry, dict)
        and isinstance(entry.get("sha256"), str)
        and re.fullmatch(r"[0-9a-f]{64}", entry["sha256"]) is not None
        and isinstance(entry.get("size"), int)
        and not isinstance(entry.get("size"), bool)
        and entry["size"] >= 0
    )


def _repository_entries(manifest: dict[str, Any], names: list[str], refuse: str) -> set[str]:
    """The entries a generator's or VLM's pack may hold: the names its manifest lists, each a
    safe relative path (checked, like every entry of the archive, before anything is written),
    no name both a file and a folder."""
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        raise BadInputError(f"{refuse} (its file list is wrong); nothing was installed")
    listed = [str(name) for name in files]
    for name in [*names, *listed]:
        if name == MANIFEST_NAME and name in names:
            continue  # the pack's own manifest, at the root of the archive
        reason = _unsafe_path(name)
        if reason is not None:
            raise BadInputError(
                f"{refuse} (its entry {name[:120]!r} {reason}); nothing was installed"
            )
    if MANIFEST_NAME in files:
        raise BadInputError(
            f"{refuse} (it lists a file named {MANIFEST_NAME}); nothing was installed"
        )
    folders = {
        "/".join(parts[:end]).casefold()
        for parts in (name.split("/") for name in listed)
        for end in range(1, len(parts))
    }
    clash = next((name for name in listed if name.casefold() in folders), None)
    if clash is not None:
        raise BadInputError(
            f"{refuse} (its entry {clash!r} is both a file and a folder); nothing was installed"
        )
    return set(listed)


# Names Windows keeps for devices, whatever the extension (a file named so cannot be written).
_DEVICE_NAMES = frozenset(
    ["con", "prn", "aux", "nul"] + [f"{port}{n}" for port in ("com", "lpt") for n in range(1, 10)]
)


def _unsafe_path(name: str) -> str | None:
    """Why `name` cannot be a file inside a model folder (None: it can): it must be a relative
    path of plain parts, with no way out of the folder (zip-slip) on any system."""
    if not name or len(name) > 1024:
        return "is empty or too long"
    if any(ord(char) < 32 for char in name) or "\\" in name or ":" in name:
        return "holds a backslash, colon or control character"
    if name.startswith("/"):
        return "is an absolute path"
    for part in name.split("/"):
        if part in ("", ".", ".."):
            return "is not a plain relative path"
        if part.startswith("."):
            return "has a hidden part"
        if len(part) > 255 or part.rstrip(" .") != part:
            return "has a part no file system keeps as it is"
        if part.split(".", 1)[0].casefold() in _DEVICE_NAMES:
            return "names a device on Windows"
    return None


def _check_patterns(spec: str, files: dict[str, dict[str, Any]], pack: Path) -> None:
    """Refuse, before anything is written, a generator's or VLM's pack holding a file that a
    download of the catalogue's offer would not have (its file patterns: configs, tokenizer
    files and safetensors weights, so nothing that runs code when loaded)."""
    offer = offer_for(spec)
    assert offer is not None
    stray = sorted(name for name in files if not offer.takes(name))
    if stray:
        raise BadInputError(
            f"{pack} claims to be {spec} but holds {stray[0]!r}, which a download of it never "
            "has; nothing was installed"
        )


def _check_repository(
    role: Role, spec: str, folder: Path, files: dict[str, dict[str, Any]], pack: Path
) -> None:
    """Check an extracted generator's or VLM's pack: the role's own config, and weights that
    are whole safetensors files. What the weights are cannot be checked offline: that is why
    the model gets its own identity."""
    claim = f"{pack} claims to be {spec}"
    key_file, field = KEY_CONFIGS[role]
    try:
        config = json.loads((folder / key_file).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        config = None
    if not isinstance(config, dict) or not isinstance(config.get(field), str):
        raise BadInputError(
            f"{claim} but has no valid {key_file} (every {ROLE_NAMES[role]} has one); "
            "nothing was installed"
        )
    weights = [name for name in files if name.endswith(".safetensors")]
    if not weights:
        raise BadInputError(f"{claim} but holds no weights; nothing was installed")
    for name in weights:
        if not whole_safetensors(folder / name):
            raise BadInputError(
                f"{claim} but its weights {name} are not a valid safetensors file; "
                "nothing was installed"
            )


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
