"""Restoring a catalog from a backup, as one exclusive step with its safety backup.

The catalog's write lock is held from before the safety backup of the current state until the
restored data is committed, so every judgment committed before the restore is in the safety
backup and every one after lands in the restored catalog. A full backup replaces a SQLite
catalog's whole contents; a judgments-only one (`engine.catalog.judgments_backup`) replaces the
judgment tables of any catalog. Every failure is a `QuadratError` with a one-line message.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from engine.catalog.backup import (
    DEFAULT_KEEP,
    backup_catalog,
    backup_judgments,
    choose_kind,
    prune_backups,
    write_backup,
)
from engine.catalog.backup_source import (
    BUSY_TIMEOUT_S,
    KIND_FULL,
    KIND_JUDGMENTS,
    META_RESTORED,
    CatalogRef,
    catalog_engine,
    catalog_errors,
    failure_cause,
    integrity,
    is_sqlite_catalog,
    open_read_only,
    sqlite_catalog_file,
)
from engine.catalog.judgments_backup import (
    JUDGMENT_TABLES,
    judgments_to_file,
    replace_judgment_tables,
)
from engine.errors import BadInputError, QuadratError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Restored:
    """What a restore did. `unmatched_photos`: photos of a judgments-only backup that this
    catalog does not have (by collection root and path); `dropped_judgments` were on them."""

    safety: Path  # the catalog as it was, to undo the restore
    kind: str
    unmatched_photos: int = 0
    dropped_judgments: int = 0


def check_backup(backup: str | os.PathLike[str]) -> str:
    """The kind of backup `backup` is (`KIND_FULL` or `KIND_JUDGMENTS`); raises
    `BadInputError` (one line) unless it is a whole Quadrat backup this version can read."""
    path = Path(backup)
    if not path.is_file():
        raise BadInputError(f"no backup file at {path}")
    try:
        conn = open_read_only(path)
        try:
            result = integrity(conn)
            tables = {
                name
                for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
            }
            revision = kind = None
            if "backup_meta" in tables:
                meta = dict(conn.execute("SELECT key, value FROM backup_meta").fetchall())
                kind, revision = meta.get("kind"), meta.get("revision") or None
            elif "alembic_version" in tables:
                kind = KIND_FULL
                found = conn.execute("SELECT version_num FROM alembic_version").fetchone()
                revision = found[0] if found else None
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise BadInputError(
            f"{path} is not a Quadrat catalog backup ({failure_cause(exc)})"
        ) from None
    if result != "ok":
        raise BadInputError(f"{path} is damaged (integrity check: {result})")
    needed = {"judgments", "alembic_version"} if kind != KIND_JUDGMENTS else {"judgments", "images"}
    missing = needed - tables
    if missing or kind not in (KIND_FULL, KIND_JUDGMENTS) or (kind == KIND_FULL and not revision):
        raise BadInputError(
            f"{path} is not a Quadrat catalog (no {' or '.join(sorted(missing or needed))})"
        )
    if revision is not None and revision not in _known_revisions():
        raise BadInputError(
            f"{path} was written by a newer Quadrat (schema {revision}); update Quadrat first"
        )
    return str(kind)


def _known_revisions() -> set[str]:
    from alembic.script import ScriptDirectory

    from engine.catalog.db import MIGRATIONS_DIR

    return {s.revision for s in ScriptDirectory(str(MIGRATIONS_DIR)).walk_revisions()}


def restore_catalog(
    library_root: str | os.PathLike[str],
    catalog_path: CatalogRef,
    backup: str | os.PathLike[str],
    *,
    keep: int = DEFAULT_KEEP,
) -> Path:
    """`restore_backup`, returning only the safety backup of the catalog as it was."""
    return restore_backup(library_root, catalog_path, backup, keep=keep).safety


def restore_backup(
    library_root: str | os.PathLike[str],
    catalog: CatalogRef,
    backup: str | os.PathLike[str],
    *,
    keep: int = DEFAULT_KEEP,
) -> Restored:
    """Put back the catalog's queries and judgments from `backup`, in one exclusive step with
    the safety backup of the catalog as it was (reason "before-restore"), so the restore can
    be undone and no judgment made meanwhile, here or in another process, falls between them.

    A full backup replaces a SQLite catalog's whole contents (through SQLite's backup API, so
    the WAL and other open connections stay consistent); a judgments-only one replaces the
    judgment tables of any catalog, matching its photos by collection root and path.
    The caller must hold the library's indexing lock (`with library.writer_lock():`) so no
    indexing run writes meanwhile. The backup is checked first (`BadInputError`, nothing
    changed, when it is not a whole Quadrat backup). The vector index files are repaired at
    the next open (their ids are compared with the catalog); nothing to do here.
    """
    backup = Path(backup)
    kind = check_backup(backup)
    if kind == KIND_JUDGMENTS:
        return _restore_judgments(library_root, catalog, backup)
    target = sqlite_catalog_file(catalog)  # a full backup fits only a SQLite catalog
    if backup.resolve() == target.resolve():
        raise BadInputError("that is the catalog itself, not a backup")
    safety_kind = choose_kind(target)
    state: dict[str, Path] = {}
    busy = [0]

    def take_safety_backup(status: int, _remaining: int, _total: int) -> None:
        # Called after each step of the copy. After the first successful step the copy holds
        # the catalog's write lock until it commits: no judgment can commit in between, and a
        # reader (the safety backup) still sees the catalog as it was, which is what it saves.
        if "safety" in state:
            return
        if status in (_SQLITE_BUSY, _SQLITE_LOCKED):
            busy[0] += 1
            if busy[0] >= _BUSY_TRIES:
                raise QuadratError(
                    "cannot restore: another program has been writing the catalog for "
                    f"{busy[0] * BUSY_TIMEOUT_S:.0f} s; close it and try again (nothing changed)"
                )
            return
        if status != _SQLITE_OK:  # the whole copy in one step: too late for the safety backup
            raise QuadratError(f"{backup} is too small to be a Quadrat catalog")
        state["safety"] = _safety_for_restore(library_root, target, safety_kind, keep, backup)

    try:
        src = open_read_only(backup)
        try:
            pages = int(src.execute("PRAGMA page_count").fetchone()[0])
            if pages < 2:
                raise BadInputError(f"{backup} is too small to be a Quadrat catalog")
            dst = sqlite3.connect(target, timeout=BUSY_TIMEOUT_S)
            try:
                # One page per step, so the safety backup is taken once this copy holds the
                # write lock and before it commits (an aborted copy is rolled back).
                # Marked before and after: a process searching meanwhile reads a new mark
                # however its reads fall around the copy's commit (`Library.vector_index`).
                _mark_restored(dst)
                src.backup(dst, pages=1, progress=take_safety_backup)
                _mark_restored(dst)
                dst.execute("PRAGMA journal_mode=WAL").fetchall()
                result = integrity(dst)
            finally:
                dst.close()
        finally:
            src.close()
    except (OSError, sqlite3.Error) as exc:
        saved = f"; the catalog as it was is in {state['safety']}" if "safety" in state else ""
        raise QuadratError(
            f"cannot restore the catalog from {backup}: {failure_cause(exc)}{saved}"
        ) from exc
    safety = state["safety"]
    if result != "ok":
        raise QuadratError(
            f"the restored catalog failed its integrity check ({result}); the catalog as it "
            f"was is in {safety}"
        )
    log.info("catalog restored from %s; previous state saved in %s", backup, safety)
    return Restored(safety=safety, kind=KIND_FULL)


def _mark_restored(connection: sqlite3.Connection) -> None:
    """A new restore mark in the restored catalog (`META_RESTORED`), so a process that has the
    library open drops the vector indexes it holds in memory."""
    import uuid

    try:
        connection.execute(
            "INSERT OR REPLACE INTO library_meta (key, value) VALUES (?, ?)",
            (META_RESTORED, uuid.uuid4().hex),
        )
        connection.commit()
    except sqlite3.Error as error:  # a backup older than library_meta: nothing open can tell
        log.warning("the restored catalog could not be marked as restored: %s", error)


_SQLITE_OK, _SQLITE_BUSY, _SQLITE_LOCKED = 0, 5, 6
_BUSY_TRIES = 3


def _safety_for_restore(
    library_root: str | os.PathLike[str], target: Path, kind: str, keep: int, backup: Path
) -> Path:
    """The before-restore backup of a SQLite catalog whose write lock the restore holds: read
    on other connections, which see the last committed state."""
    if kind == KIND_JUDGMENTS:
        return backup_judgments(library_root, target, keep=keep, reason="before-restore",
                                protect={backup})  # fmt: skip
    return backup_catalog(library_root, target, keep=keep, reason="before-restore",
                          protect={backup})  # fmt: skip


def _restore_judgments(
    library_root: str | os.PathLike[str], catalog: CatalogRef, backup: Path
) -> Restored:
    """Replace the judgment tables of `catalog` with those of a judgments-only `backup`, in
    one transaction that first takes the safety backup under the same lock."""
    from sqlalchemy import text

    sqlite_file = sqlite_catalog_file(catalog) if is_sqlite_catalog(catalog) else None
    safety_kind = choose_kind(catalog)
    with (
        catalog_engine(catalog) as engine,
        catalog_engine(backup) as source_engine,
        catalog_errors(catalog),
        engine.connect() as live,
        source_engine.connect() as source,
    ):
        live = live.execution_options(quadrat_write=True)
        with live.begin(), source.begin():
            if live.dialect.name == "postgresql":
                # Every judging session on any workstation waits here until we commit.
                live.execute(text(
                    f"LOCK TABLE {', '.join(JUDGMENT_TABLES)} IN EXCLUSIVE MODE"
                ))  # fmt: skip
            if safety_kind == KIND_FULL and sqlite_file is not None:
                # Read on another connection: it sees the state our write lock now freezes.
                safety = backup_catalog(library_root, sqlite_file, reason="before-restore",
                                        protect={backup})  # fmt: skip
            else:
                safety = write_backup(
                    library_root, KIND_JUDGMENTS, "before-restore",
                    lambda temp: judgments_to_file(live, temp),
                )  # fmt: skip
                prune_backups(library_root, DEFAULT_KEEP, protect={safety, backup})
            unmatched, dropped = replace_judgment_tables(source, live)
    log.info("judgments restored from %s (%d photos not found); previous state in %s",
             backup, unmatched, safety)  # fmt: skip
    return Restored(safety, KIND_JUDGMENTS, unmatched_photos=unmatched, dropped_judgments=dropped)
