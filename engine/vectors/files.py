"""Vector index files on disk: atomic, checksummed saves and the check at load.

`write_verified` writes an index file and a checksum file beside it (``<name>.faiss.check.json``:
algorithm, digest, size, vector count), both through temporary files renamed into place, and
`verify_checksum` refuses a file that does not match its checksum file, so damage inside the
vector data is never served. A failed save is one line naming the cause (a full, read-only or
unwritable disk) and the way on.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from engine.errors import CorruptIndexError, QuadratError

log = logging.getLogger(__name__)

CHECKSUM_SUFFIX: str = ".check.json"
"""The checksum file of ``X.faiss`` is ``X.faiss.check.json`` (see `checksum_path`)."""
_CHECKSUM_FORMAT = "quadrat-vector-index-checksum"
_CHECKSUM_VERSION = 1
# SHA-256 runs on the CPU's SHA extensions through OpenSSL. Measured on a shared 2-core VM, file
# in the page cache: 0.13-0.14 s for a 100k x 512 flat file (205 MB) and 1.8-2.1 s for 1M x 512
# (2.06 GB), against 0.1 s and 3.2 s for FAISS to read them. CRC-32 was only 1.5x faster there
# (1.2 s at 1M, bound by reading the file) and is a weak check; BLAKE2b and MD5 were slower
# (3.5 s and 4.6 s).
_CHECKSUM_ALGORITHM = "sha256"
_HASH_CHUNK: int = 1 << 20
# The first four bytes FAISS writes for the layouts of the vector index's kinds (IVF-Flat had
# "IvFl" in older FAISS versions).
_OUR_FOURCCS = (b"IxM2", b"IwFl", b"IvFl", b"IwPQ", b"IwSq")
# Digests a checksum file may name (a later version may choose another); SHAKE needs a length.
_KNOWN_ALGORITHMS = frozenset(a for a in hashlib.algorithms_guaranteed if not a.startswith("shake"))


def checksum_path(path: Path) -> Path:
    """The checksum file `write_verified` writes beside the index file `path`."""
    path = Path(path)
    return path.with_name(path.name + CHECKSUM_SUFFIX)


def _file_digest(path: Path, algorithm: str = _CHECKSUM_ALGORITHM) -> tuple[int, str]:
    """(size in bytes, hex digest) of a file, read in chunks so memory stays flat."""
    started = time.perf_counter()
    digest = hashlib.new(algorithm)
    size = 0
    buffer = bytearray(_HASH_CHUNK)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as handle:
        while count := handle.readinto(buffer):
            digest.update(view[:count])
            size += count
    log.debug(
        "%s of %s (%d bytes) in %.2f s",
        algorithm,
        path.name,
        size,
        time.perf_counter() - started,
    )
    return size, digest.hexdigest()


def _read_checksum_record(sidecar: Path) -> dict[str, object] | None:
    """The parsed checksum file `sidecar`, or None if it is not a well-formed one."""
    try:
        record = json.loads(sidecar.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("format") != _CHECKSUM_FORMAT:
        return None
    digest = record.get("digest")
    numbers = [record.get(key) for key in ("size", "vectors", "dim")]
    if (
        record.get("algorithm") not in _KNOWN_ALGORITHMS
        or not isinstance(digest, str)
        or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in numbers)
    ):
        return None
    return record


def verify_checksum(path: Path) -> dict[str, object]:
    """Check the index file `path` against its checksum file; return the parsed record.

    Raises CorruptIndexError, naming what failed, for a missing, unreadable or mismatched
    checksum file, and QuadratError for a file that is no vector index of this application.
    """
    sidecar = checksum_path(path)
    if not sidecar.is_file():
        try:
            with open(path, "rb") as handle:
                fourcc = handle.read(4)
        except OSError as exc:
            raise QuadratError(f"Vector index file {path} is unreadable ({exc.strerror})") from exc
        if len(fourcc) < 4:
            raise CorruptIndexError(f"Vector index file {path} is corrupt or unreadable (empty)")
        if fourcc not in _OUR_FOURCCS:
            raise QuadratError(
                f"Vector index file {path} is not a Quadrat vector index "
                f"(header {fourcc!r}, no checksum file)"
            )
        raise CorruptIndexError(
            f"Vector index file {path} has no checksum file {sidecar.name}: it was written by "
            "an older Quadrat or its save was cut short, so it is not trusted"
        )
    record = _read_checksum_record(sidecar)
    if record is None:
        raise CorruptIndexError(
            f"The checksum file {sidecar} of the vector index is garbled or not Quadrat's, so "
            "the index is not trusted"
        )
    algorithm = str(record["algorithm"])
    try:
        size = path.stat().st_size
        if size != record["size"]:
            raise CorruptIndexError(
                f"Vector index file {path} is corrupt or unreadable: {size} bytes where its "
                f"checksum file records {record['size']} (truncated or overwritten)"
            )
        _, actual = _file_digest(path, algorithm)
    except OSError as exc:
        raise CorruptIndexError(
            f"Vector index file {path} is corrupt or unreadable ({exc.strerror or exc})"
        ) from exc
    if actual != record["digest"]:
        raise CorruptIndexError(
            f"Vector index file {path} is corrupt or unreadable: it failed its {algorithm} check"
        )
    return record


IndexShape = tuple[int, int, str]
"""What a checksum file records of the index it checks: (vectors, dimensions, kind)."""


def write_verified(path: Path, write: Callable[[str], IndexShape]) -> None:
    """Write an index file to `path` with `write(temporary path)`, which returns the shape of
    what it wrote, and its checksum file beside it (`checksum_path`).

    Both are written to temporary files in the same folder and flushed to disk first; then the
    index file is renamed over the old one, and the checksum file after it. A failed write
    leaves both old files untouched. A crash between the two renames leaves a new index file
    with the old checksum, which `verify_checksum` refuses, so the library rebuilds it from the
    catalog rather than trust it.

    Raises QuadratError naming the cause and the way on when the disk is full, read-only or
    not writable (FAISS reports those as a RuntimeError with C++ assertion text).
    """
    path = Path(path)
    folder = path.parent
    temporaries: list[str] = []
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp_index = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
        os.close(fd)
        temporaries.append(tmp_index)
        vectors, dim, kind = write(tmp_index)
        with open(tmp_index, "rb+") as written:
            os.fsync(written.fileno())
        size, digest = _file_digest(Path(tmp_index))
        record = {
            "format": _CHECKSUM_FORMAT,
            "version": _CHECKSUM_VERSION,
            "algorithm": _CHECKSUM_ALGORITHM,
            "digest": digest,
            "size": size,
            "vectors": vectors,
            "dim": dim,
            "kind": kind,
        }
        sidecar = checksum_path(path)
        fd, tmp_sidecar = tempfile.mkstemp(prefix=f".{sidecar.name}.", suffix=".tmp", dir=folder)
        temporaries.append(tmp_sidecar)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(json.dumps(record, indent=1) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_index, path)
        temporaries.remove(tmp_index)
        os.replace(tmp_sidecar, sidecar)
        temporaries.remove(tmp_sidecar)
    except RuntimeError as exc:  # FAISS's C++ exceptions
        raise _save_error(exc, folder, path) from exc
    except OSError as exc:
        if exc.errno is None:  # not from the operating system: nothing to explain
            raise
        raise _save_error(exc, folder, path) from exc
    finally:
        for name in temporaries:
            Path(name).unlink(missing_ok=True)
    _fsync_directory(folder)


# Quota exceeded (EDQUOT) is not defined on every platform.
_DISK_FULL_ERRNOS = (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC), errno.EFBIG)
_SAVE_ERRNOS = (*_DISK_FULL_ERRNOS, errno.EROFS, errno.EACCES, errno.EPERM)
# FAISS may report only "write error" (no reason): a folder with less free space than this is
# taken to be full.
_SMALL_FREE_SPACE: int = 1 << 20


def _save_error(exc: BaseException, folder: Path, path: Path) -> QuadratError:
    """A one-line QuadratError for a failed save: the cause and the way on."""
    text = str(exc)
    code = exc.errno if isinstance(exc, OSError) else None
    if code is None:
        # FAISS says e.g. "... write error in FILE: 1048494 != 2560000 (No space left on device)".
        code = next((c for c in _SAVE_ERRNOS if os.strerror(c) in text), None)
    if code is None and _free_bytes(folder) < _SMALL_FREE_SPACE:
        code = errno.ENOSPC
    keeps = "the catalog keeps every committed photo"
    if code in _DISK_FULL_ERRNOS:
        message = f"no space left on the disk holding {folder}: free some space and try again; "
    elif code == errno.EROFS:
        message = (
            f"the disk holding {folder} is read-only: make it writable or open the library from "
            "a writable copy; "
        )
    elif code in (errno.EACCES, errno.EPERM):
        message = f"no permission to write in {folder}: fix its permissions and try again; "
    else:
        reason = os.strerror(code) if code is not None else _last_line(text)
        message = f"cannot write the vector index {path.name} in {folder} ({reason}); "
    log.info("saving the vector index %s failed: %s", path, text)  # the error says it once
    return QuadratError(message + keeps)


def _free_bytes(folder: Path) -> int:
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return 1 << 62  # unknown: do not claim the disk is full


def _last_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1][-160:] if lines else "unknown error"


def _fsync_directory(folder: Path) -> None:
    # Makes the rename itself durable on POSIX; Windows cannot open a folder for fsync.
    if os.name != "posix":
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
