"""`quadrat backup` and `quadrat restore`: copies of the catalog in LIBRARY/backups/.

    quadrat backup [--library DIR] [--keep N] [--judgments-only]   make one now, print its path
    quadrat backup --list [--library DIR] [--json]   list them, newest first
    quadrat restore [BACKUP] [--library DIR] [--yes] restore one (a path, or 1 = newest)

A restore first backs up the catalog as it is, in the same exclusive step, so it can be
undone with another restore. A judgments-only backup (queries, runs, judgments; no vectors)
works for any catalog, a server's too, and its restore matches photos by folder and path.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from app.cli.args import positive_int
from app.cli.registry import Command
from engine.catalog.backup import (
    DEFAULT_KEEP,
    SPECIAL_KEEP,
    BackupInfo,
    backup_catalog,
    backup_judgments,
    catalog_counts,
    list_backups,
)
from engine.catalog.backup_source import KIND_JUDGMENTS, is_sqlite_catalog
from engine.catalog.restore import check_backup, restore_backup
from engine.errors import BadInputError


def _backup_arguments(backup: argparse.ArgumentParser) -> None:
    """The options of `quadrat backup`."""
    backup.add_argument("--library", type=Path, help="library folder (catalog, indexes, caches)")
    backup.add_argument(
        "--keep",
        type=positive_int,
        default=DEFAULT_KEEP,
        help="backups to keep, older ones are deleted (default: %(default)s)",
    )
    backup.add_argument(
        "--judgments-only",
        action="store_true",
        help="back up only queries, runs and judgments (no vectors, rebuilt from the photos): "
        "small at any library size, and possible for a catalog on a server",
    )
    backup.add_argument("--list", action="store_true", help="list the backups, newest first")
    backup.add_argument("--json", action="store_true", help="print JSON")


def _restore_arguments(restore: argparse.ArgumentParser) -> None:
    """The options of `quadrat restore`."""
    restore.add_argument(
        "backup", nargs="?", help="a backup file, or its number in the list (1 = newest)"
    )
    restore.add_argument("--library", type=Path, help="library folder (catalog, indexes, caches)")
    restore.add_argument("--yes", action="store_true", help="do not ask for confirmation")


def cmd_backup(args: argparse.Namespace) -> int:
    from app.cli.common import open_library

    with open_library(args.library) as library:
        if args.list:
            _print_list(list_backups(library.root), args.json, library.root)
            return 0
        if args.judgments_only or not is_sqlite_catalog(library.catalog.engine.url):
            # A server catalog's full copy is the server's job (pg_dump); its judgments are ours.
            path = backup_judgments(library.root, library.catalog, keep=args.keep, reason="manual")
        else:
            path = backup_catalog(
                library.root, library.catalog.engine.url, keep=args.keep, reason="manual"
            )
    if args.json:
        print(json.dumps({"path": str(path)}))
    else:
        print(path)
    return 0


def cmd_restore(args: argparse.Namespace) -> int:
    from app.cli.common import confirm, open_library

    with open_library(args.library) as library:
        backups = list_backups(library.root)
        if args.backup is None:
            _print_list(backups, False, library.root)
            if backups:
                print(
                    "to restore one: quadrat restore N (1 = newest) or quadrat restore FILE",
                    file=sys.stderr,
                )
            return 0
        chosen = _choose(args.backup, backups)
        check_backup(chosen)  # refuse a bad file before asking anything
        confirm(f"replace the queries and judgments of {library.root} with {chosen.name}", args.yes)
        before = catalog_counts(library.catalog.engine)
        with library.writer_lock():
            restored = restore_backup(library.root, library.catalog, chosen)
        library.judgments_saved()  # the restored state is a backup already
        after = catalog_counts(library.catalog.engine)
    print(f"restored {chosen}")
    print(f"  judgments: {before[0]} -> {after[0]}")
    print(f"  saved queries: {before[1]} -> {after[1]}")
    if restored.unmatched_photos:
        photos = _plural(restored.unmatched_photos, "photo")
        verb = "is" if restored.unmatched_photos == 1 else "are"
        on = "it" if restored.unmatched_photos == 1 else "them"
        print(
            f"  {photos} of the backup {verb} not in this library "
            f"({_plural(restored.dropped_judgments, 'judgment')} on {on} not restored)"
        )
    print(f"the catalog as it was is saved in {restored.safety} (restore it to undo this)")
    return 0


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _choose(text: str, backups: list[BackupInfo]) -> Path:
    if text.isdigit():
        number = int(text)
        if not 1 <= number <= len(backups):
            have = f"1 to {len(backups)}" if backups else "none: the library has no backups"
            raise BadInputError(f"no backup number {number} (backups are numbered {have})")
        return backups[number - 1].path
    path = Path(text).expanduser()
    if not path.is_file():
        raise BadInputError(f"no backup file at {path}")
    return path


def _print_list(backups: list[BackupInfo], as_json: bool, root: Path) -> None:
    if as_json:
        print(json.dumps([b.to_json() for b in backups]))
        return
    if not backups:
        print(f"no backups of the library at {root}", file=sys.stderr)
        return
    for number, info in enumerate(backups, start=1):
        counts = (
            f"{info.judgments} judgments, {info.queries} queries"
            if info.judgments is not None
            else "unreadable"
        )
        when = info.created.astimezone().strftime("%Y-%m-%d %H:%M:%S")
        kind = "judgments only" if info.kind == KIND_JUDGMENTS else "full"
        reason = f", {info.reason}" if info.reason else ""
        special = "special: " if info.special else ""
        print(
            f"{number:3d}  {when}  {counts}  {_size(info.size)}  ({special}{kind}{reason})  "
            f"{info.path}"
        )


def _size(size: int) -> str:
    value = float(size)
    for unit in ("B", "KB", "MB"):
        if value < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GB"


COMMANDS = (
    Command(
        "backup",
        help="back up the library's catalog (queries and judgments) now, or list the backups",
        description="Copy the catalog to LIBRARY/backups/, keeping the newest N copies. "
        f"Special backups (taken before an import, a restore, forgetting photos or an upgrade) "
        f"are kept apart, the newest {SPECIAL_KEEP}.",
        add_arguments=_backup_arguments,
        run=cmd_backup,
    ),
    Command(
        "restore",
        help="put back the catalog from a backup (the current one is backed up first)",
        description="Restore the catalog from a backup; without BACKUP, list the backups.",
        add_arguments=_restore_arguments,
        run=cmd_restore,
    ),
)
