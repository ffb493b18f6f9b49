"""The model store's folders: what is installed, and how anything gets in or out safely.

The store is a folder with one folder per installed model::

    STORE/<slug>/open_clip_config.json        the open_clip config (model_cfg, preprocess_cfg)
    STORE/<slug>/open_clip_model.safetensors  the weights (safetensors: loading runs no code)
    STORE/<slug>/manifest.json                spec, sha256, size, licence, source, origin
    STORE/.partial/<slug>/<file>.part         a download in progress, resumed by HTTP Range

A model installed here loads without a network under the same model key as a direct open_clip
load (`engine.models.encoders.load_encoder(..., store_dir=STORE)`, which finds it through
`StoreFolders` without importing the rest of the store), so a library indexed either way
matches.

Every install is written into a temporary folder inside the store and renamed into place, so a
failed one leaves nothing behind. Temporary folders (``.incoming-*``) hold an owner lock while
in use; ones whose owner died (a killed import) are removed the next time the store is listed
or installs something.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from engine.errors import BadInputError
from engine.models.spec import DEMO_SPEC, ModelSpec, as_model_spec, demo_weights_path, store_key

log = logging.getLogger(__name__)

CONFIG_NAME = "open_clip_config.json"
WEIGHTS_NAME = "open_clip_model.safetensors"
MANIFEST_NAME = "manifest.json"
PARTIAL_DIR = ".partial"
_OWNER = ".owner"  # suffix of the lock file beside a temporary folder, held by its process
_STALE_SECONDS = 3600.0  # a temporary folder without an owner lock (older Quadrat) this old


@dataclass(frozen=True)
class InstalledModel:
    """A model that can be loaded without a network."""

    spec: str
    size_bytes: int
    path: Path | None  # its folder in the store; None for the bundled demo model
    origin: str  # "bundled" | "pack" | "download" | "file"
    licence: str = ""
    source: str = ""
    model_key: str = ""  # the identity load_encoder gives it ("" when known only at load)
    role: str = "encoder"  # "encoder" | "generator" | "vlm" (engine.models.offers.ROLES)


def folder_slug(key: str) -> str:
    """The store folder name of a model key: readable, and unique by a hash of the key."""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", key).strip("._-")[:80]
    return f"{readable}-{hashlib.sha256(key.encode()).hexdigest()[:8]}"


class StoreFolders:
    """A model store's folders: what is installed there, and the temporary folder and rename
    every install goes through. Cheap: no torch, no network."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    # -- what is installed ---------------------------------------------------------------------

    def folder(self, spec: str | ModelSpec) -> Path | None:
        """The store folder of an installed named model, or None (cheap: no torch)."""
        parsed = as_model_spec(spec)
        if not parsed.is_named:
            return None
        folder = self.root / folder_slug(store_key(parsed))
        if (folder / MANIFEST_NAME).is_file() and (folder / WEIGHTS_NAME).is_file():
            return folder
        return None

    def model_key(self, folder: Path, spec: str | ModelSpec) -> str:
        """The model key `load_encoder` gives the named model installed in `folder`: its name,
        or for one installed from a pack the name and weights hash (`pack_model_key`), so its
        vectors stay apart."""
        key = store_key(spec)
        manifest = read_manifest(folder / MANIFEST_NAME) or {}
        digest = manifest.get("sha256")
        if manifest.get("origin") == "pack" and isinstance(digest, str):
            return pack_model_key(key, digest)  # packs installed before their keys said so, too
        return key

    def is_installed(self, spec: str | ModelSpec) -> bool:
        """True when `spec` loads without a network: the demo, an existing checkpoint file or
        model folder, or a named model in the store. Cheap (no torch import)."""
        parsed = as_model_spec(spec)
        if parsed.kind == "demo":
            return True
        if parsed.kind == "checkpoint":
            return parsed.path is not None and parsed.path.is_file()
        if parsed.kind == "local-dir":
            return parsed.path is not None and (parsed.path / CONFIG_NAME).is_file()
        return self.folder(parsed) is not None

    def installed(self) -> list[InstalledModel]:
        """The demo model, then every model in the store (by spec)."""
        demo = demo_weights_path()
        found = [InstalledModel(DEMO_SPEC, demo.stat().st_size, None, "bundled", "", "")]
        entries = []
        self.remove_stale()
        if self.root.is_dir():
            for folder in sorted(self.root.iterdir()):
                if folder.name.startswith("."):
                    continue  # partial downloads, imports in progress
                manifest = read_manifest(folder / MANIFEST_NAME)
                if manifest is not None:
                    entries.append(installed_from(folder, manifest))
        return found + sorted(entries, key=lambda entry: entry.spec)

    def partial_bytes(self, spec: str) -> int:
        """Bytes of an interrupted download of `spec` waiting to be resumed."""
        folder = self.root / PARTIAL_DIR / folder_slug(store_key(spec))
        if not folder.is_dir():
            return 0
        return sum(p.stat().st_size for p in folder.glob("*.part"))

    # -- getting in safely: a temporary folder, then a rename -----------------------------------

    @contextlib.contextmanager
    def _incoming(self) -> Iterator[Path]:
        """A temporary folder inside the store (same file system, so the rename is atomic);
        removed on any failure, so a failed install leaves nothing behind. It holds an owner
        lock while in use, so that one left by a killed process is known to be stale."""
        self.root.mkdir(parents=True, exist_ok=True)
        self.remove_stale()
        temp = Path(tempfile.mkdtemp(prefix=".incoming-", dir=self.root))
        lock = _owner_lock(temp)  # beside the folder: it must not move into the store with it
        try:
            owner = _hold_owner_lock(lock)
        except BaseException:
            shutil.rmtree(temp, ignore_errors=True)
            raise
        try:
            yield temp
        finally:
            shutil.rmtree(temp, ignore_errors=True)
            owner.close()
            lock.unlink(missing_ok=True)

    def remove_stale(self) -> None:
        """Remove what killed imports and removals left behind: temporary folders whose owner
        is gone, and the pieces of interrupted replacements (an old copy whose model folder is
        missing is put back). Best effort: a store on a read-only disk is left as it is."""
        if not self.root.is_dir():
            return
        with contextlib.suppress(OSError):
            for entry in list(self.root.iterdir()):
                name = entry.name
                if name.startswith(".incoming-") and name.endswith(_OWNER):
                    if not entry.with_name(name.removesuffix(_OWNER)).exists() and _owner_gone(
                        entry.with_name(name.removesuffix(_OWNER))
                    ):
                        entry.unlink(missing_ok=True)
                    continue
                if not entry.is_dir() or entry.is_symlink():
                    continue
                if name.startswith(".incoming-") and _owner_gone(entry):
                    log.info("removing %s, left by an import that did not finish", entry)
                    shutil.rmtree(entry, ignore_errors=True)
                    _owner_lock(entry).unlink(missing_ok=True)
                elif name.startswith(".old-"):
                    # `_place` names it .old-FOLDER-PID; a living PID is replacing it right now.
                    pid = re.search(r"-(\d+)$", name)
                    if pid is None or _pid_alive(int(pid.group(1))):
                        continue
                    folder = self.root / name.removeprefix(".old-")[: pid.start() - 5]
                    if not folder.exists():
                        with contextlib.suppress(OSError):
                            os.replace(entry, folder)  # killed mid-replacement: put it back
                            continue
                    shutil.rmtree(entry, ignore_errors=True)
                elif name.startswith(".removing-"):
                    shutil.rmtree(entry, ignore_errors=True)

    def _place(self, temp: Path, folder: Path) -> Path:
        """Rename `temp` to `folder`, replacing an older copy only once the new one is whole."""
        old = None
        if folder.exists():
            old = folder.with_name(f".old-{folder.name}-{os.getpid()}")
            os.replace(folder, old)
        os.replace(temp, folder)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return folder


def _lock(handle: IO[bytes]) -> bool:
    """Take an exclusive lock on an open file without waiting: False when another process
    holds it. The operating system drops the lock when its process dies, even by a kill."""
    try:
        if sys.platform == "win32":
            import msvcrt

            msvcrt.locking(handle.fileno(), msvcrt.LK_NBLCK, 1)
        else:
            import fcntl

            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


def _owner_lock(folder: Path) -> Path:
    return folder.with_name(folder.name + _OWNER)


def _hold_owner_lock(path: Path) -> IO[bytes]:
    """Create `path` and hold its lock until the returned file is closed."""
    handle = path.open("wb")
    if not _lock(handle):  # a fresh file nobody else knows: cannot happen, but say so
        handle.close()
        raise OSError(f"could not lock {path}")
    return handle


def _owner_gone(folder: Path) -> bool:
    """Whether the process that made a temporary folder has gone: its owner lock is free, or
    (a folder made before owner locks, or in the instant before its lock) it is old."""
    try:
        with _owner_lock(folder).open("rb+") as handle:
            return _lock(handle)  # closing the file releases the lock again
    except FileNotFoundError:
        try:
            return time.time() - folder.stat().st_mtime > _STALE_SECONDS
        except FileNotFoundError:
            return True  # an orphaned lock file's folder: nothing to wait for
        except OSError:
            return False
    except OSError:
        return False


def _pid_alive(pid: int) -> bool:
    """Whether process `pid` runs (POSIX); elsewhere assumed to, so nothing is touched."""
    if sys.platform == "win32":
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def read_manifest(path: Path) -> dict[str, Any] | None:
    """An installed model's manifest, or None when it is missing or unreadable."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("spec"), str) else None


def installed_from(folder: Path, manifest: dict[str, Any]) -> InstalledModel:
    """The `InstalledModel` a store folder and its manifest describe."""
    spec, origin = str(manifest.get("spec", "")), str(manifest.get("origin", "download"))
    key = str(manifest.get("model_key", ""))
    if origin == "pack" and isinstance(manifest.get("sha256"), str):
        key = pack_model_key(spec, manifest["sha256"])  # as load_encoder gives it
    return InstalledModel(
        spec=spec,
        size_bytes=int(manifest.get("size_bytes", 0)),
        path=folder,
        origin=origin,
        licence=str(manifest.get("licence", "")),
        source=str(manifest.get("source", "")),
        model_key=key,
        role=str(manifest.get("role", "encoder")),
    )


def pack_model_key(spec: str, sha256: str) -> str:
    """The model key of a model installed from a pack: its name and its weights' hash, so its
    vectors are never taken for the published model's (nor another pack's of that name)."""
    return f"{spec} [pack sha256-{sha256[:16]}]"


def check_config(path: Path, origin: Path) -> None:
    """Refuse a model whose config file is not an open_clip config."""
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        config = None
    if not isinstance(config, dict) or "model_cfg" not in config:
        raise BadInputError(f"{origin} holds no valid open_clip config; nothing was installed")


def whole_safetensors(path: Path) -> bool:
    """Whether `path` is a whole safetensors file: a JSON header whose tensors fill the rest of
    the file exactly (read without torch; the tensors themselves are not read)."""
    size = path.stat().st_size
    try:
        with path.open("rb") as handle:
            length = int.from_bytes(handle.read(8), "little")
            if size < 8 or length > min(size - 8, 100_000_000):
                return False
            header = json.loads(handle.read(length))
    except (OSError, ValueError, RecursionError):
        return False
    if not isinstance(header, dict):
        return False
    end = 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        if (
            not isinstance(offsets, list)
            or len(offsets) != 2
            or not all(isinstance(n, int) and n >= 0 for n in offsets)
            or offsets[0] > offsets[1]
        ):
            return False
        end = max(end, offsets[1])
    return end == size - 8 - length
