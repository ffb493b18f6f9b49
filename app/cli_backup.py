"""`quadrat backup` and `quadrat restore`: copies of the catalog in LIBRARY/backups/.

    quadrat backup [--library DIR] [--keep N]        make one now, print its path
    quadrat backup --list [--library DIR] [--json]   list them, newest first
    quadrat restore [BACKUP] [--library DIR] [--yes] restore one (a path, or 1 = newest)

A restore first backs up the catalog as it is, so it can be undone with another restore.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from app.cli_args import positive_int
from engine.backup import (
    DEFAULT_KEEP,
    BackupInfo,
    backup_catalog,
    catalog_counts,
    check_backup,
    list_backups,
    restore_catalog,
)
from engine.errors import BadInputError


def add_backup_command(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register `backup` and `restore` on the `quadrat` subcommand parser."""
    backup = subparsers.add_parser(
        "backup",
        help="back up the library's catalog (queries and judgments) now, or list the backups",
        description="Copy the catalog to LIBRARY/backups/, keeping the newest N copies.",
    )
    backup.add_argument("--library", type=Path, help="library folder (catalog, indexes, caches)")
    backup.add_argument(
        "--keep",
        type=positive_int,
        default=DEFAULT_KEEP,
        help="backups to keep, older ones are deleted (default: %(default)s)",
    )
    backup.add_argument("--list", action="store_true", help="list the backups, newest first")
    backup.add_argument("--json", action="store_true", help="print JSON")
    backup.set_defaults(func=cmd_backup)

    restore = subparsers.add_parser(
        "restore",
        help="put back the catalog from a backup (the current one is backed up first)",
        description="Restore the catalog from a backup; without BACKUP, list the backups.",
    )
    restore.add_argument(
        "backup", nargs="?", help="a backup file, or its number in the list (1 = newest)"
    )
    restore.add_argument("--library", type=Path, help="library folder (catalog, indexes, caches)")
    restore.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    restore.set_defaults(func=cmd_restore)


def cmd_backup(args: argparse.Namespace) -> int:
    from app.cli_common import open_library

    with open_library(args.library) as library:
        if args.list:
            _print_list(list_backups(library.root), args.json, library.root)
            return 0
        path = backup_catalog(
            library.root, library.catalog.engine.url, keep=args.keep, reason="manual"
        )
    if args.json:
        print(json.dumps({"path": str(path)}))
    else:
        print(path)
    return 0


def cmd_restore(args: argparse.Namespace) -> int:
    from app.cli_common import confirm, open_library

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
            safety = restore_catalog(library.root, library.catalog.engine.url, chosen)
        library.judgments_saved()  # the restored state is a backup already
        after = catalog_counts(library.catalog.engine)
    print(f"restored {chosen}")
    print(f"  judgments: {before[0]} -> {after[0]}")
    print(f"  saved queries: {before[1]} -> {after[1]}")
    print(f"the catalog as it was is saved in {safety} (restore it to undo this)")
    return 0


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
        reason = f"  ({info.reason})" if info.reason else ""
        print(f"{number:3d}  {when}  {counts}  {_size(info.size)}{reason}  {info.path}")


def _size(size: int) -> str:
    value = float(size)
    for unit in ("B", "KB", "MB"):
        if value < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GB"
