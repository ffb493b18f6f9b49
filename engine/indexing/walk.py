"""Walking a collection's folder safely: `walk_images` lists its image files (sorted, links
kept inside the collection, no loops; what it passes over reported with a reason) as
`FileEntry` tuples, and `printable_name` makes any file name one printable line."""

from __future__ import annotations

import logging
import os
import stat
import sys
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import NamedTuple

from engine.errors import BadInputError

log = logging.getLogger(__name__)


class _FileFields(NamedTuple):
    rel_path: str  # POSIX path relative to the collection root
    path: str  # the absolute path as text
    size: int
    mtime_ns: int


class FileEntry(_FileFields):
    """One image file found under a collection root.

    A named tuple that keeps the absolute path as the text `os.scandir` gave and makes it a
    `Path` (`abs_path`) when asked for: building a `Path` per file was a third of the time of
    walking 5 million files, and a re-scan that finds a file unchanged never needs it."""

    __slots__ = ()

    def __new__(
        cls, rel_path: str, abs_path: str | os.PathLike[str], size: int, mtime_ns: int
    ) -> FileEntry:
        return super().__new__(cls, rel_path, os.fspath(abs_path), size, mtime_ns)

    @property
    def abs_path(self) -> Path:
        return Path(self.path)


# The walk makes entries from text it already has, without the check `__new__` makes.
_new_entry = partial(tuple.__new__, FileEntry)


_WINDOWS = sys.platform == "win32"


def _is_hidden(entry: os.DirEntry[str]) -> bool:
    if entry.name.startswith("."):
        return True
    if sys.platform == "win32":  # (not os.name: type checkers know sys.platform)
        # Windows marks hidden files with an attribute rather than a dot (cached, no extra call).
        attributes = getattr(entry.stat(follow_symlinks=False), "st_file_attributes", 0)
        return bool(attributes & stat.FILE_ATTRIBUTE_HIDDEN)
    else:
        return False


def _is_storable_name(name: str) -> bool:
    """False for names that are not valid Unicode (undecodable bytes on POSIX)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _sorted_entries(folder: str | Path) -> list[os.DirEntry[str]]:
    with os.scandir(folder) as it:
        return sorted(it, key=lambda e: e.name)


def printable_name(text: str) -> str:
    """`text` as one printable line: names with nothing odd come back unchanged; otherwise
    bytes that are not UTF-8 (kept by Python as lone surrogates) become `\\xNN`, control
    characters (a newline in a file name) `\\n`, `\\t`, `\\xNN` or `\\uNNNN`, and a
    backslash `\\\\`."""
    if text.isprintable():
        return text
    out: list[str] = []
    for char in text:
        if "\udc80" <= char <= "\udcff":  # an undecodable byte, as surrogateescape keeps it
            out.append(f"\\x{ord(char) - 0xDC00:02x}")
        elif char == "\\":
            out.append("\\\\")
        elif char.isprintable():
            out.append(char)
        else:
            out.append(char.encode("unicode_escape", "backslashreplace").decode("ascii"))
    return "".join(out)


# Why the walk passes over an entry (reported through `walk_images`'s `on_skip`).
LINK_OUTSIDE_FOLDER = "a link to a folder outside the collection: not followed"
LINK_OUTSIDE_FILE = "a link to a file outside the collection: not followed"
NAME_NOT_UNICODE = "the name is not valid Unicode (undecodable bytes): rename it to index it"


def _inside(real: str, root_real: str) -> bool:
    """Whether the resolved path `real` is `root_real` or lies under it."""
    return real == root_real or real.startswith(root_real.rstrip(os.sep) + os.sep)


def _open_root(root: Path) -> tuple[os.stat_result, list[os.DirEntry[str]]]:
    """The collection folder's stat and sorted entries; `BadInputError` for a missing,
    unreadable or non-folder root."""
    try:
        root_stat = root.stat()
    except FileNotFoundError:
        raise BadInputError(f"folder not found: {root}") from None
    except OSError as exc:
        raise BadInputError(f"cannot read folder {root}: {exc.strerror or exc}") from None
    if not stat.S_ISDIR(root_stat.st_mode):
        raise BadInputError(f"not a folder: {root}")
    try:
        return root_stat, _sorted_entries(root)
    except OSError as exc:
        raise BadInputError(f"cannot read folder {root}: {exc.strerror or exc}") from None


def _image_or_folder(
    entry: os.DirEntry[str], extensions: frozenset[str]
) -> tuple[os.stat_result, bool] | None:
    """(stat through links, is a file) of an entry the walk looks at: an image file by its
    extension, or a folder. None for hidden entries, other files, and what cannot be read
    (a broken link, a file removed while the walk runs)."""
    name = entry.name
    try:
        if name.startswith(".") or (_WINDOWS and _is_hidden(entry)):
            return None
        entry_stat = entry.stat()  # follows symlinks
    except OSError as exc:
        log.debug("skipping %s: %s", entry.path, exc)
        return None
    mode = entry_stat.st_mode
    if stat.S_ISREG(mode):
        dot = name.rfind(".")
        return (entry_stat, True) if dot > 0 and name[dot:].lower() in extensions else None
    return (entry_stat, False) if stat.S_ISDIR(mode) else None


def walk_images(
    root: Path,
    extensions: frozenset[str] | None = None,
    on_skip: Callable[[str, str], None] | None = None,
) -> Iterator[FileEntry]:
    """Yield every image file under `root`, depth first, in sorted order.

    Extensions match case-insensitively. Symlinks are followed only while their real path
    stays inside the real path of `root`, and a directory already visited (same device and
    inode) is never entered twice, so loops end. A link leading out of the collection (to
    `/proc`, another user's folder) is never followed: one such link once pulled a whole
    machine's files into a shared catalog. Hidden files and folders are skipped.

    Links leading outside, image files whose names are not valid Unicode and folders that
    cannot be read are passed over and reported to `on_skip(relative path, reason)` (the path
    made printable by `printable_name`), and logged.
    Raises `BadInputError` when `root` is missing or not a folder. `extensions` defaults to
    the ones the decoder reads.
    """
    if extensions is None:  # imported here: printing a path (a search does) needs no Pillow
        from engine.indexing.decode import IMAGE_EXTENSIONS

        extensions = IMAGE_EXTENSIONS
    root = Path(root)
    root_stat, root_entries = _open_root(root)
    root_real = os.path.realpath(root)

    def skip(rel_path: str, reason: str) -> None:
        shown = printable_name(rel_path)
        log.warning("skipping %s: %s", shown, reason)
        if on_skip is not None:
            on_skip(shown, reason)

    visited: set[tuple[int, int]] = {(root_stat.st_dev, root_stat.st_ino)}
    # A stack of (iterator over a folder's sorted entries, that folder's relative prefix):
    # files and sub-folders interleave by name, so the output is sorted by path components.
    stack: list[tuple[Iterator[os.DirEntry[str]], str]] = [(iter(root_entries), "")]
    while stack:
        entries, prefix = stack[-1]
        for entry in entries:
            name = entry.name
            found = _image_or_folder(entry, extensions)
            if found is None:
                continue
            entry_stat, is_file = found
            # Only links (and, on Windows, junctions, which are not symlinks to Python) can
            # lead out of the root: every folder entered is inside it.
            leads_away = entry.is_symlink() or (_WINDOWS and not is_file)
            if leads_away and not _inside(os.path.realpath(entry.path), root_real):
                skip(prefix + name, LINK_OUTSIDE_FILE if is_file else LINK_OUTSIDE_FOLDER)
                continue
            if not name.isascii() and not _is_storable_name(name):
                # The catalog could not store the path, nor open the file by a stored one.
                skip(prefix + name + ("" if is_file else "/"), NAME_NOT_UNICODE)
                continue
            if is_file:
                yield _new_entry(
                    (prefix + name, entry.path, entry_stat.st_size, entry_stat.st_mtime_ns)
                )
                continue
            key = (entry_stat.st_dev, entry_stat.st_ino)
            if key in visited:
                log.debug("skipping %s: folder already visited (symlink loop?)", entry.path)
                continue
            visited.add(key)
            try:
                children = _sorted_entries(entry.path)
            except OSError as exc:
                skip(prefix + name + "/", f"cannot read folder: {exc.strerror or exc}")
                continue
            # Into the sub-folder; this folder's iterator resumes after it, keeping order.
            stack.append((iter(children), prefix + name + "/"))
            break
        else:
            stack.pop()
