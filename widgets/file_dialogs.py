"""File dialogs that open where the same kind of dialog was last used.

Each dialog kind (choosing a query photo, importing judgments, exporting results, …) starts
in the folder the user last chose in it; the window's owner hands in a `FolderMemory` (the
application keeps it in the settings folder), so widgets only ask and tell. A kind of export
not used yet starts where the last export of any kind went: results, records and analyses of
one piece of work usually go to one folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from PySide6.QtWidgets import QFileDialog, QWidget


class FolderMemory(Protocol):
    """Where each kind of file dialog was last used."""

    def folder(self, kind: str) -> str: ...

    def remember(self, kind: str, path: str) -> None: ...


class NoFolderMemory:
    """Remembers nothing: every dialog starts in Qt's default folder (until one is set)."""

    def folder(self, kind: str) -> str:
        return ""

    def remember(self, kind: str, path: str) -> None:
        return None


LAST_EXPORT = "last-export"  # where the last export of any kind went


def is_export(kind: str) -> bool:
    """Whether dialogs of `kind` choose where to write (a file or a folder)."""
    return kind.startswith(("save:", "folder:")) or kind.endswith("-export")


def _remember(memory: FolderMemory, kind: str, folder: str) -> None:
    memory.remember(kind, folder)
    if is_export(kind):
        memory.remember(LAST_EXPORT, folder)


def _start(memory: FolderMemory, kind: str, suggested: str = "") -> str:
    """The dialog's starting path: a suggested bare name in the remembered folder (for an
    export not made before, the folder of the last export)."""
    folder = memory.folder(kind) or (memory.folder(LAST_EXPORT) if is_export(kind) else "")
    if not folder:
        return suggested
    if suggested and Path(suggested).is_absolute():
        return suggested  # the caller knows better (the file already chosen, say)
    return str(Path(folder) / suggested) if suggested else folder


def open_file(
    parent: QWidget | None,
    memory: FolderMemory,
    kind: str,
    caption: str,
    file_filter: str,
    current: str = "",
) -> str | None:
    """A file to read, starting at `current` (the file already chosen) if given, else where
    this kind of dialog was last used; None if cancelled."""
    start = current or _start(memory, kind)
    path, _ = QFileDialog.getOpenFileName(parent, caption, start, file_filter)
    if path:
        _remember(memory, kind, str(Path(path).parent))
    return path or None


def save_file(
    parent: QWidget | None,
    memory: FolderMemory,
    kind: str,
    caption: str,
    suggested: str,
    file_filter: str,
) -> str | None:
    """A file to write (`suggested` in the remembered folder at first); None if cancelled."""
    path, _ = QFileDialog.getSaveFileName(
        parent, caption, _start(memory, kind, suggested), file_filter
    )
    if path:
        _remember(memory, kind, str(Path(path).parent))
    return path or None


def existing_folder(
    parent: QWidget | None, memory: FolderMemory, kind: str, caption: str
) -> str | None:
    """A folder, starting at the one last chosen in this kind of dialog; None if cancelled."""
    folder = QFileDialog.getExistingDirectory(parent, caption, _start(memory, kind))
    if folder:
        _remember(memory, kind, folder)
    return folder or None
