"""File › Backups…: listing the catalog's backups, backing up now, and restoring one, as
`quadrat backup` and `quadrat restore` do (the same engine functions).

Everything that touches the disk runs in a worker: the list (each backup's counts are read
from its file), a backup, the restore. A restore is asked for first, runs in the write pool
(so every judgment already clicked is committed before it, none between) under the library's
indexing lock, and takes the before-restore backup in the same exclusive step (engine).

After a restore the window opens the library again rather than going on with it or asking for
a restart: the restored catalog may have another schema (an older backup, upgraded at open),
other photos and other vectors (a full backup from before an indexing run), and only an open
compares the vector index with the catalog and repairs it. Until it is open again no search or
judgment can start (the session has no library); the grid and the open query are cleared,
since their photo ids may now name other photos.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QWidget

from app.controllers.install import asker, say
from app.controllers.session import LibrarySession
from app.workers import READ, WRITE, TaskContext, TaskHandle, TaskRunner
from widgets.backups_dialog import BackupRow, BackupsDialog

if TYPE_CHECKING:
    from app.controllers.application import Application
    from engine.catalog.backup import BackupInfo
    from engine.catalog.restore import Restored

log = logging.getLogger(__name__)

Ask = Callable[[str, str], bool]  # (title, question) -> yes?

_REASONS = {
    "session": "at the end of a session",
    "manual": "made by hand",
    "before-restore": "before a restore",
    "before-import": "before an import",
    "before-forget": "before forgetting missing photos",
    "before-upgrade": "before an upgrade",
}


def size_text(size: int) -> str:
    """A file size as people read it (B, KB, MB, GB)."""
    value = float(size)
    for unit in ("B", "KB", "MB"):
        if value < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GB"


def taken_text(info: BackupInfo) -> str:
    """When a backup was taken, in local time."""
    return info.created.astimezone().strftime("%Y-%m-%d %H:%M:%S")


def backup_rows(infos: list[BackupInfo]) -> list[BackupRow]:
    """The dialog's rows for the engine's list (newest first). The newest backup, when it was
    taken before a restore, is the restore's undo."""
    from engine.catalog.backup_source import KIND_JUDGMENTS

    rows = []
    for number, info in enumerate(infos):
        kind = "judgments only" if info.kind == KIND_JUDGMENTS else "full"
        if info.reason:
            kind += f", {_REASONS.get(info.reason, info.reason.replace('-', ' '))}"
        readable = info.judgments is not None and info.queries is not None
        rows.append(
            BackupRow(
                path=str(info.path),
                taken=taken_text(info),
                judgments=f"{info.judgments:,}" if readable else "unreadable",
                queries=f"{info.queries:,}" if readable else "",
                size=size_text(info.size),
                kind=kind,
                undo=number == 0 and info.reason == "before-restore",
            )
        )
    return rows


@dataclass(frozen=True)
class RestoreOutcome:
    """What a restore changed: (judgments, saved queries) before and after, and the engine's
    record (the safety backup, photos of a judgments-only backup not in this library)."""

    before: tuple[int, int]
    after: tuple[int, int]
    restored: Restored

    def summary(self, taken: str) -> str:
        text = (
            f"Restored the backup of {taken}: judgments {self.before[0]:,} → {self.after[0]:,}, "
            f"saved queries {self.before[1]:,} → {self.after[1]:,}."
        )
        unmatched = self.restored.unmatched_photos
        if unmatched:
            text += (
                f" {unmatched:,} of its photos are not in this library "
                f"({self.restored.dropped_judgments:,} judgments on them not restored)."
            )
        return text + " The catalog as it was is the first backup listed: restore it to undo."


class BackupsController(QObject):
    """Owns the Backups dialog while it is open."""

    message = Signal(str)
    restored = Signal(str)  # a summary; the library is being opened again

    def __init__(self, runner: TaskRunner, session: LibrarySession, ask_yes_no: Ask) -> None:
        super().__init__()
        self.runner = runner
        self.session = session
        self.ask_yes_no = ask_yes_no
        self.dialog: BackupsDialog | None = None
        self._infos: dict[str, BackupInfo] = {}

    def open_dialog(self, parent: QWidget | None = None) -> BackupsDialog:
        """File › Backups…: the dialog, its list read in a worker."""
        if self.dialog is None:
            dialog = self.dialog = BackupsDialog(str(self.session.library_dir / "backups"), parent)
            dialog.restoreRequested.connect(self.restore)
            dialog.backupRequested.connect(self.back_up_now)
            dialog.finished.connect(self._closed)
        self.dialog.open()
        self.refresh()
        return self.dialog

    def _closed(self, _result: int) -> None:
        if self.dialog is not None and not self.dialog.progress.isVisible():
            self.dialog.deleteLater()
            self.dialog = None

    # -- the list -----------------------------------------------------------------------------------

    def refresh(self, select: str | None = None) -> TaskHandle:
        """Read the backups again (their counts come from their files: a worker's job)."""
        folder = self.session.library_dir

        def read(ctx: TaskContext) -> list[BackupInfo]:
            from engine.catalog.backup import list_backups

            return list_backups(folder)

        def show(infos: list[BackupInfo]) -> None:
            self._infos = {str(info.path): info for info in infos}
            if self.dialog is not None:
                self.dialog.set_rows(backup_rows(infos))
                if select is not None:
                    self.dialog.select_path(select)

        return self.runner.submit(
            read, title="Listing the backups", pool=READ, group="backups-list", on_success=show
        )

    # -- backing up -----------------------------------------------------------------------------

    def back_up_now(self) -> TaskHandle | None:
        """A manual backup (full for a SQLite catalog, judgments only for a server's)."""
        library = self.session.library
        if library is None:
            self._say("The library is still opening: try again in a moment")
            return None

        def run(ctx: TaskContext) -> str:
            from engine.catalog.backup import backup_catalog, backup_judgments
            from engine.catalog.backup_source import is_sqlite_catalog

            url = library.catalog.engine.url
            if is_sqlite_catalog(url):
                return str(backup_catalog(library.root, url, reason="manual"))
            return str(backup_judgments(library.root, library.catalog, reason="manual"))

        self._busy("Backing up the catalog…")

        def done(path: str) -> None:
            self._busy(None)
            self._say("Backed up the catalog")
            self.refresh(select=path)

        return self.runner.submit(
            run, title="Backing up the catalog", pool=WRITE, on_success=done,
            on_failure=self._failed("Backing up the catalog"),
        )  # fmt: skip

    # -- restoring ----------------------------------------------------------------------------------

    def restore(self, path: str) -> TaskHandle | None:
        """Restore the backup at `path` after a confirmation; the library is opened again."""
        library = self.session.library
        if library is None:
            self._say("The library is still opening: try again in a moment")
            return None
        if self.session.indexing:
            self._say("Indexing is running: stop it (or let it finish) before restoring a backup")
            return None
        info = self._infos.get(path)
        taken = taken_text(info) if info is not None else path
        counts = (
            f" ({info.judgments:,} judgments, {info.queries:,} saved queries)"
            if info is not None and info.judgments is not None and info.queries is not None
            else ""
        )
        if not self.ask_yes_no(
            "Restore this backup?",
            f"Replace the saved queries and judgments of this library with those of the backup "
            f"of {taken}{counts}?\n\nThe catalog as it is now is backed up first: restoring "
            "that backup undoes this. The library is opened again afterwards.",
        ):
            return None

        def run(ctx: TaskContext) -> RestoreOutcome:
            from engine.catalog.backup import catalog_counts
            from engine.catalog.restore import check_backup, restore_backup

            check_backup(path)  # a bad file is refused before anything changes
            before = catalog_counts(library.catalog.engine)
            with library.writer_lock():  # no indexing run writes meanwhile
                restored = restore_backup(library.root, library.catalog, path)
            library.judgments_saved()  # the restored state is a backup already
            return RestoreOutcome(before, catalog_counts(library.catalog.engine), restored)

        def done(outcome: RestoreOutcome) -> None:
            summary = outcome.summary(taken)
            log.info("%s (previous state in %s)", summary, outcome.restored.safety)
            self._busy(None)
            self._say(summary)
            self.restored.emit(summary)
            self.session.reload()
            self.refresh(select=str(outcome.restored.safety))

        self._busy(
            f"Restoring the backup of {taken} (the catalog as it is now is backed up first)…"
        )
        # The write pool: judgments clicked before are committed first, in order.
        return self.runner.submit(
            run, title="Restoring a backup", pool=WRITE, on_success=done,
            on_failure=self._failed("Restoring a backup"),
        )  # fmt: skip

    # -- internals -----------------------------------------------------------------------------

    def _busy(self, text: str | None) -> None:
        if self.dialog is not None:
            self.dialog.set_busy(text)

    def _say(self, text: str) -> None:
        if self.dialog is not None:
            self.dialog.set_status(text)
        self.message.emit(text)

    def _failed(self, title: str) -> Callable[[BaseException], None]:
        def failed(exc: BaseException) -> None:
            from app.controllers.errors import describe_error

            self._busy(None)
            self._say(f"{title} failed: {describe_error(exc)}")
            self.runner.report_error(exc, title)

        return failed


def install(app: Application) -> None:
    """File › Backups…: list, back up now, restore (then the library is opened again)."""
    w = app.window
    backups = app.backups = BackupsController(app.runner, app.session, asker(app))
    w.backupsRequested.connect(lambda: backups.open_dialog(w))
    backups.restored.connect(app.show_restored)
    say(app, backups.message)
