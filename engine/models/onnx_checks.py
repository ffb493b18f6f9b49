"""Whether an ONNX export may encode: bound to its model's weights and to its own files.

An export is a file onnxruntime runs as it is, so nothing in it is taken on trust. At export,
`onnx.json` records each tower's file size, sha256 and a sample hash (`file_record`), and the
sha256 of the weights the model was loaded from (`weights_identity`). Before a session opens:

- the file must be the tower's own name in the export's folder: a record naming an absolute
  path, a `..` or any other name is refused, and so is a link (the file, its folder or the
  store's `.onnx` folder);
- its size and sample hash must be the recorded ones (a few reads: a truncated file, random
  bytes, another model's export of the same shape are caught here);
- its full sha256 must be the recorded one: hashed once and remembered in `checked.json` beside
  it under the file's size, times, inode and device, so a text search does not read hundreds of
  MB each time; any write to the file changes its ctime and the file is hashed again;
- the weights the model loads now must be the ones it was exported from.

Each check gives a reason (one line) or None.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import stat
from pathlib import Path
from typing import Any

from engine.files import atomic_write_text, file_sha256
from engine.models.folders import MANIFEST_NAME, StoreFolders, read_manifest
from engine.models.spec import as_model_spec

CHECKED_FILE = "checked.json"  # full hashes already checked, by the file's stat
_SAMPLES = 16  # pieces read for the sample hash, spread over the file
_SAMPLE_BYTES = 4096
# A content-keyed model's key names its weights' hash (`engine.models.encoders.load_encoder`:
# "ARCH:sha256-…", "local-dir:sha256-…"; a pack's "[pack sha256-…]").
_KEY_DIGEST = re.compile(r"sha256-([0-9a-f]{16,64})")


def sample_sha256(path: Path, size: int) -> str:
    """A hash of `_SAMPLES` pieces spread evenly over the file (the first and last included)
    and its size: a few reads, however large the file."""
    digest = hashlib.sha256(str(size).encode())
    with path.open("rb") as handle:
        last = max(0, size - _SAMPLE_BYTES)
        for n in range(_SAMPLES):
            handle.seek(last * n // (_SAMPLES - 1))
            digest.update(handle.read(_SAMPLE_BYTES))
    return digest.hexdigest()


def file_record(path: Path) -> dict[str, Any]:
    """What `onnx.json` keeps of a tower's file: size, sha256, sample hash."""
    size = path.stat().st_size
    return {"size": size, "sha256": file_sha256(path), "sample_sha256": sample_sha256(path, size)}


def weights_identity(store_dir: Path | None, spec: Any, model_key: str) -> str | None:
    """The sha256 (or its first 16 digits) of the weights `model_key` stands for, found without
    reading them: from a content-keyed model's key, else from the store folder's manifest (its
    hash was checked at download or import); None for a named model outside the store."""
    found = _KEY_DIGEST.search(model_key)
    if found:
        return found.group(1)
    if store_dir is None:
        return None
    with contextlib.suppress(Exception):  # a spec the store cannot parse: nothing known
        folder = StoreFolders(store_dir).folder(as_model_spec(spec))
        manifest = read_manifest(folder / MANIFEST_NAME) if folder is not None else None
        digest = (manifest or {}).get("sha256")
        if isinstance(digest, str) and re.fullmatch(r"[0-9a-f]{16,64}", digest):
            return digest
    return None


def weights_problem(recorded: str | None, expected: str | None) -> str | None:
    """Why an export recorded with weights `recorded` does not belong to a model whose weights
    are `expected` (either may be a 16-digit prefix), or None."""
    if expected is None:
        return None  # nothing to compare with: the model key alone binds it
    if recorded is None:
        return "it does not say which weights it was made from"
    if recorded.startswith(expected) or expected.startswith(recorded):
        return None
    return f"it was made from other weights (sha256 {recorded[:12]}…, not {expected[:12]}…)"


def path_problem(folder: Path, name: str | None, expected_name: str) -> str | None:
    """Why the tower file a record names is not the plain file `expected_name` in `folder`,
    itself no link in a `.onnx` folder that is no link; None when it is."""
    if name != expected_name:
        return f"its record names {name!r}, not {expected_name}"
    for part in (folder.parent, folder):  # STORE/.onnx and its folder of this model
        if part.is_symlink():
            return f"{part.name} is a link"
    try:
        seen = (folder / name).lstat()
    except OSError as error:
        return f"{name} cannot be read ({error.strerror or error})"
    if not stat.S_ISREG(seen.st_mode):
        return f"{name} is {'a link' if stat.S_ISLNK(seen.st_mode) else 'not a plain file'}"
    return None


def file_problem(
    folder: Path, name: str | None, expected_name: str, record: dict[str, Any]
) -> str | None:
    """Why the tower file `name` of the export in `folder` may not be opened, or None.
    `record`: its recorded size, sha256 and sample hash."""
    problem = path_problem(folder, name, expected_name)
    if problem is not None:
        return problem
    name = expected_name  # (the record's name is this one)
    path = folder / name
    try:
        seen = path.lstat()
    except OSError as error:
        return f"{name} cannot be read ({error.strerror or error})"
    size, full, sample = record.get("size"), record.get("sha256"), record.get("sample_sha256")
    if not isinstance(size, int) or not isinstance(full, str) or not isinstance(sample, str):
        return f"{name} has no recorded hash"
    if seen.st_size != size:
        return f"{name} has {seen.st_size} bytes, not the {size} exported (cut short or replaced)"
    try:
        if sample_sha256(path, size) != sample:
            return f"{name} is not the file exported (its content differs)"
        stamp = [seen.st_size, seen.st_mtime_ns, seen.st_ctime_ns, seen.st_ino, seen.st_dev]
        checked = _read_checked(folder)
        if checked.get(name) == [full, *stamp]:
            return None
        if file_sha256(path) != full:
            return f"{name} is not the file exported (its sha256 differs)"
    except OSError as error:
        return f"{name} cannot be read ({error.strerror or error})"
    checked[name] = [full, *stamp]
    with contextlib.suppress(OSError):  # a read-only store: hashed again next time
        atomic_write_text(folder / CHECKED_FILE, json.dumps(checked))
    return None


def _read_checked(folder: Path) -> dict[str, Any]:
    try:
        data = json.loads((folder / CHECKED_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def remember_checked(folder: Path, name: str, sha256: str) -> None:
    """Record that `name` in `folder` was hashed right now (at export) as `sha256`."""
    with contextlib.suppress(OSError):
        seen = (folder / name).stat()
        checked = _read_checked(folder)
        checked[name] = [
            sha256,
            seen.st_size,
            seen.st_mtime_ns,
            seen.st_ctime_ns,
            seen.st_ino,
            seen.st_dev,
        ]
        atomic_write_text(folder / CHECKED_FILE, json.dumps(checked))


def safe_to_remove(path: Path) -> None:
    """Remove an export folder that may be a link (the link goes, not what it points to)."""
    import shutil

    if path.is_symlink():
        path.unlink()
    else:
        shutil.rmtree(path, ignore_errors=True)
