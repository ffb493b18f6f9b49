"""Writing an export file all or nothing: a file is written whole or not at all, and a failed
write says in one line what, where, why, the space needed and free where known, and that
nothing was lost. Where the system allows it, the file has no name until it is whole, so not
even a killed process leaves part of one (docs/SPEC.md §4)."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import secrets
import shutil
import stat
import time
from collections.abc import Iterator
from pathlib import Path

from engine.errors import QuadratError
from engine.files import atomic_write_bytes

log = logging.getLogger(__name__)

# Quota exceeded (EDQUOT) is not defined on every platform.
_DISK_FULL = (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC), errno.EFBIG)
NOTHING_LOST = "nothing was lost: the library is unchanged and no partial file was left"
STALE_TEMP_S = 60  # a temporary file of ours older than this was left by a killed write


def human_size(size: int) -> str:
    """A byte count as people read it: 512 bytes, 12.3 KB, 4.0 MB."""
    if size < 1000:
        return f"{size} bytes"
    value = float(size)
    for unit in ("KB", "MB", "GB", "TB"):
        value /= 1000
        if value < 1000 or unit == "TB":
            return f"{value:.1f} {unit}"
    raise AssertionError("unreachable")


def free_bytes(folder: str | os.PathLike[str]) -> int | None:
    """Free space on the disk that holds `folder` (or its nearest existing parent); None when
    it cannot be read."""
    probe = Path(folder).expanduser().absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        return shutil.disk_usage(probe).free
    except OSError:
        return None


def disk_full(error: OSError) -> bool:
    """Whether a failed write met a full disk (or a full quota)."""
    return error.errno in _DISK_FULL


def write_failure(
    error: OSError, folder: str | os.PathLike[str], what: str, needed: int | None = None
) -> QuadratError:
    """The one-line error of a failed export write: what, where, why, space needed and free."""
    cause = write_cause(error, folder, needed)
    log.info("writing %s to %s failed: %s", what, folder, error)  # the error says it once
    return QuadratError(f"could not write {what} to {folder}: {cause}; {NOTHING_LOST}")


def write_cause(error: OSError, folder: str | os.PathLike[str], needed: int | None = None) -> str:
    """Why a write failed, in words: a full disk (with the space needed and free where known),
    a read-only disk, no permission, else the system's own words."""
    code = error.errno
    if code in _DISK_FULL:
        free = free_bytes(folder)
        sizes = [f"{human_size(needed)} needed" if needed is not None else ""]
        sizes.append(f"{human_size(free)} free" if free is not None else "")
        space = ", ".join(part for part in sizes if part)
        cause = "the disk is full" + (f" ({space})" if space else "")
    elif code == errno.EROFS:
        cause = "the disk is read-only"
    elif code in (errno.EACCES, errno.EPERM):
        cause = "no permission to write there"
    else:
        cause = " ".join((error.strerror or str(error) or type(error).__name__).split())
    return cause


@contextlib.contextmanager
def plain_write_errors(
    path: str | os.PathLike[str], what: str, needed: int | None = None
) -> Iterator[None]:
    """Turn an OSError of the writes inside into `write_failure`'s one line (for writers that
    are atomic already, such as `engine.evaluation.evaluate.write_trec_run`)."""
    try:
        yield
    except OSError as error:
        folder = Path(path).expanduser().absolute().parent
        raise write_failure(error, folder, what, needed) from error


def export_text(path: str | os.PathLike[str], text: str, what: str) -> None:
    """Write a whole export file of text (UTF-8) atomically, as `export_bytes` does."""
    export_bytes(path, text.encode("utf-8"), what)


def export_bytes(path: str | os.PathLike[str], data: bytes, what: str) -> None:
    """Write a whole export file atomically; a full or read-only disk gives one line and leaves
    no partial file, and any earlier file of that name as it was. Where the system allows it
    (Linux), the data is written to a file without a name that gets one only when complete,
    so even a process killed mid-write leaves nothing behind (`_write_unnamed`)."""
    target = Path(path).expanduser()
    folder = target.absolute().parent
    free = free_bytes(folder)
    if free is not None and len(data) > free:
        raise write_failure(
            OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), folder, what, len(data)
        )
    with plain_write_errors(path, what, len(data)):
        # Named by engine.files' temporary-file scheme: left by a killed export of this file.
        remove_stale_temps(
            folder, re.compile(rf"^\.{re.escape(target.name)}\.[0-9a-f]{{12}}\.tmp$")
        )
        write_whole(target, data)


def remove_stale_temps(folder: Path, ours: re.Pattern[str]) -> None:
    """The temporary files a killed write left in `folder`: those whose name `ours` matches,
    older than STALE_TEMP_S (a younger one may be another process's write in progress)."""
    with contextlib.suppress(OSError), os.scandir(folder) as entries:
        for entry in entries:
            if ours.match(entry.name) and entry.is_file(follow_symlinks=False):
                with contextlib.suppress(OSError):
                    if time.time() - entry.stat(follow_symlinks=False).st_mtime > STALE_TEMP_S:
                        os.unlink(entry.path)


def write_whole(target: Path, data: bytes) -> None:
    """Replace `target` with `data` in one step: an unnamed file that gets a name only when
    whole where the system allows it (`_write_unnamed`), else a named temporary file beside
    it. Raises the OSError of a refused write, having removed what it wrote."""
    if not _write_unnamed(target, data):
        atomic_write_bytes(target, data)


def _write_unnamed(target: Path, data: bytes) -> bool:
    """Write `data` to an unnamed file in `target`'s folder (O_TMPFILE), link it beside the
    target once whole and rename it onto the target. A kill before the link leaves nothing:
    the kernel frees a file no name points to. False where the system or the file system
    cannot make such a file (the caller then writes a named temporary file)."""
    flag = getattr(os, "O_TMPFILE", None)
    if flag is None or not os.path.isdir("/proc/self/fd"):
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(target.parent, flag | os.O_WRONLY, 0o666)
    except OSError as error:
        if error.errno in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL, errno.ENOENT):
            return False
        raise
    temp = target.parent / f".{target.name}.{secrets.token_hex(6)}.tmp"
    try:
        with contextlib.suppress(OSError):  # replacing a file keeps its mode
            os.fchmod(fd, stat.S_IMODE(target.stat().st_mode))
        _write_all(fd, data)
        folder = os.open(target.parent, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            # linkat(..., AT_SYMLINK_FOLLOW): a directory fd makes os.link call linkat, which
            # follows /proc's link to the open file (plain link() would not).
            os.link(f"/proc/self/fd/{fd}", temp.name, dst_dir_fd=folder, follow_symlinks=True)
        except OSError as error:
            if error.errno in (errno.EXDEV, errno.ENOENT, errno.EPERM, errno.ENOSYS):
                return False  # no way to name it here: the caller writes a named file
            raise
        finally:
            os.close(folder)
    finally:
        os.close(fd)
    try:
        os.replace(temp, target)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return True


def _write_all(fd: int, data: bytes) -> None:
    """Write every byte of `data` to `fd`."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view[: 1 << 20]) :]
