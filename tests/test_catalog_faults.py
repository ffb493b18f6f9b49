"""Catalog faults a user can meet: two first runs at once, a read-only library, a full disk, a
removed or damaged file. Each must reach the user as one line naming the cause and the way on
(no SQL, no traceback, no help link), and never break the catalog."""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import exc, text

from engine.catalog import open_catalog
from engine.errors import CatalogError, QuadratError
from tests.small_disk import small_tmpfs
from tests.warm_python import WarmPython

pytestmark = pytest.mark.integration  # (runs processes; the fast lane leaves it out)

REPO = Path(__file__).resolve().parents[1]
ANOTHER_INDEXER = "another Quadrat is indexing the library at"


# -- helpers ----------------------------------------------------------------------------------


def _quadrat_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(REPO), TQDM_DISABLE="1", **extra)
    env.pop("QT_QPA_PLATFORM", None)
    return env


def _stderr_lines(stderr: str) -> list[str]:
    """The lines a user reads on stderr, without progress bars (should any be drawn)."""
    lines = []
    for line in stderr.splitlines():
        if "\r" in line or "img/s" in line or "it/s" in line or not line.strip():
            continue
        lines.append(line.rstrip())
    return lines


def _assert_one_clean_line(lines: list[str]) -> str:
    assert len(lines) == 1, "expected one line on stderr:\n" + "\n".join(lines)
    line = lines[0]
    for noise in ("Traceback", "[SQL", "sqlalche.me", "already exists", "sqlite3.", "faiss"):
        assert noise not in line, line
    return line


def _photo_counts(catalog_file: Path) -> tuple[int, int]:
    """(photos indexed, vectors) in a catalog file, read with plain sqlite3."""
    with contextlib.closing(sqlite3.connect(catalog_file)) as conn:
        images = conn.execute("SELECT count(*) FROM images WHERE status = 'ok'").fetchone()[0]
        vectors = conn.execute("SELECT count(*) FROM embeddings").fetchone()[0]
    return images, vectors


def _integrity(catalog_file: Path) -> str:
    with contextlib.closing(sqlite3.connect(catalog_file)) as conn:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])


# -- two first runs at once --------------------------------------------------------------------

# Both processes (forked from the warm parent, which imported torch and the engine) import
# the rest first, then wait for one start signal: the race between them is then over the
# catalog alone, not over who finishes importing first.
_SYNCHRONISED_CLI = """
import os, sys, time
from pathlib import Path
import alembic.command, engine.catalog.db, engine.indexing.indexer  # noqa: F401
from app.cli import main
ready, go = Path(sys.argv[1]), Path(sys.argv[2])
ready.touch()
deadline = time.monotonic() + 120
while not go.exists() and time.monotonic() < deadline:
    time.sleep(0.001)
sys.exit(main(sys.argv[3:]))
"""


@pytest.mark.parametrize("attempt", range(3))
def test_two_first_index_runs_at_once_on_a_new_library_never_show_sql(
    attempt: int, photos: Path, tmp_path: Path, warm_python: WarmPython
) -> None:
    library = tmp_path / f"new-library-{attempt}"
    go = tmp_path / "go"
    args = ["index", str(photos), "--library", str(library), "--model", "demo", "--json"]
    ready = [tmp_path / f"ready-{i}" for i in range(2)]
    procs = [
        warm_python.popen(
            ["-c", _SYNCHRONISED_CLI, str(ready[i]), str(go), *args], cwd=REPO, env=_quadrat_env()
        )
        for i in range(2)
    ]
    try:
        deadline = time.monotonic() + 120
        while not all(r.exists() for r in ready) and time.monotonic() < deadline:
            time.sleep(0.01)
        go.touch()  # both have imported everything: start them at the same moment
        results = [p.communicate(timeout=300) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    succeeded = 0
    for proc, (stdout, stderr) in zip(procs, results, strict=True):
        lines = _stderr_lines(stderr)
        assert "already exists" not in stderr and "[SQL" not in stderr, stderr
        assert "Traceback" not in stderr, stderr
        if proc.returncode == 0:
            succeeded += 1
            assert '"cancelled": false' in stdout
            assert not [line for line in lines if line.startswith("error")], stderr
        else:
            assert proc.returncode == 1, stderr
            line = _assert_one_clean_line(lines)
            assert ANOTHER_INDEXER in line and str(library) in line, line
    assert succeeded >= 1
    assert _photo_counts(library / "catalog.sqlite3") == (108, 108)
    assert _integrity(library / "catalog.sqlite3") == "ok"


def test_opening_waits_for_the_process_creating_the_catalog(tmp_path: Path) -> None:
    """While the schema lock is held (another process creating the library), opening waits;
    past its timeout it gives up with one line instead of racing the migrations."""
    from filelock import FileLock

    from engine.catalog.db import schema_lock_path

    path = tmp_path / "lib" / "catalog.sqlite3"
    path.parent.mkdir()
    holder = FileLock(str(schema_lock_path(path)))
    holder.acquire()
    try:
        with pytest.raises(CatalogError) as caught:
            open_catalog(path, lock_timeout=0.5)
        message = str(caught.value)
        assert "\n" not in message and "another Quadrat" in message and str(path) in message
    finally:
        holder.release()
    catalog = open_catalog(path, lock_timeout=5)  # free again: opens and creates the schema
    assert catalog.integrity_check() == "ok"
    catalog.dispose()
    assert schema_lock_path(path) == path.with_name("catalog.sqlite3.lock")


# -- read-only library ---------------------------------------------------------------------------


def _drop_capabilities() -> None:  # pragma: no cover - runs in the child before exec
    """Root without any capability: file permissions apply to it as to its owner."""
    libc = ctypes.CDLL(None, use_errno=True)
    pr_capbset_drop = 24
    for cap in range(64):
        libc.prctl(pr_capbset_drop, cap, 0, 0, 0)


def _runner(privileges: dict[str, object]) -> Callable[..., object]:
    def run(cmd: list[str], **kwargs: object) -> object:
        return subprocess.run(cmd, **privileges, **kwargs)

    return run


def _unprivileged_runner(read_only: Path, env: dict[str, str]) -> Callable[..., object]:
    """A `subprocess.run` that cannot write `read_only`; skips where privileges cannot drop."""
    probe = [sys.executable, "-c", f"open({str(read_only / 'probe')!r}, 'w')"]
    ways: list[dict[str, object]] = []
    if os.geteuid() != 0:
        ways.append({})
    else:
        if sys.platform.startswith("linux"):
            ways.append({"preexec_fn": _drop_capabilities})
        ways.append({"user": "nobody", "group": "nogroup"})
        ways.append({"user": "nobody"})
    for kwargs in ways:
        try:
            result = subprocess.run(probe, capture_output=True, text=True, env=env, **kwargs)
        except (OSError, ValueError, KeyError, subprocess.SubprocessError):
            continue
        if result.returncode != 0 and "PermissionError" in result.stderr:
            return _runner(kwargs)
        (read_only / "probe").unlink(missing_ok=True)
    pytest.skip("cannot drop privileges here (no capability drop, no usable 'nobody' user)")


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A world-accessible temporary folder (pytest's own is private to root)."""
    folder = Path(tempfile.mkdtemp(prefix="quadrat-ro-"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        for path in [folder, *folder.rglob("*")]:
            with contextlib.suppress(OSError):
                path.chmod(0o777 if path.is_dir() else 0o666)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.parametrize("existing", [False, True], ids=["new-library", "existing-library"])
def test_a_read_only_library_folder_gives_one_line(
    existing: bool, shared_tmp: Path, small_demo_collection
) -> None:
    photos = shared_tmp / "photos"
    shutil.copytree(small_demo_collection.root, photos)
    for path in [photos, *photos.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    home = shared_tmp / "home"
    home.mkdir(mode=0o777)
    home.chmod(0o777)
    library = shared_tmp / "library"
    if existing:
        from engine.catalog.library import Library

        Library.open(library).close()
    else:
        library.mkdir()
    before = sorted(p.name for p in library.iterdir())
    library.chmod(0o555)
    env = _quadrat_env(QUADRAT_HOME=str(home))
    run = _unprivileged_runner(library, env)
    for args in (
        ["index", str(photos), "--library", str(library), "--model", "demo"],
        ["search", "a yellow square", "--library", str(library)],
    ):
        result = run(
            [sys.executable, "-m", "app.cli", *args],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode not in (0, 2), result.stderr
        line = _assert_one_clean_line(_stderr_lines(result.stderr))
        assert str(library) in line and "read-only" in line, line
        assert "--library" in line, line
    assert sorted(p.name for p in library.iterdir()) == before


# -- disk full -----------------------------------------------------------------------------------


def _fill(folder: Path, leave_bytes: int) -> Path:
    """Write a filler file so that about `leave_bytes` stay free on the file system."""
    stat = os.statvfs(folder)
    free = stat.f_bavail * stat.f_frsize
    filler = folder / "filler"
    with open(filler, "wb") as handle:
        remaining = max(free - leave_bytes, 0)
        chunk = b"\0" * (1 << 16)
        while remaining > 0:
            try:
                handle.write(chunk[: min(len(chunk), remaining)])
                handle.flush()
            except OSError:
                break
            remaining -= min(len(chunk), remaining)
    return filler


def _index(warm: WarmPython, photos: Path, library: Path) -> subprocess.CompletedProcess[str]:
    """`quadrat index` of `photos` into `library` as a process of its own."""
    args = ["index", str(photos), "--library", str(library), "--model", "demo", "--json"]
    return warm.run(
        ["-m", "app.cli", *args, "--batch-size", "8"],
        cwd=REPO,
        env=_quadrat_env(QUADRAT_CHECKPOINT_EVERY="8"),
        timeout=300,
    )


@pytest.fixture
def full_disk_run(
    photos: Path, tmp_path: Path, warm_python: WarmPython
) -> Iterator[tuple[subprocess.CompletedProcess[str], Path, Path]]:  # result, library, filler
    """A library on a tmpfs whose free space runs out while the demo collection is indexed
    (the catalog exists before; checkpoints every 8 photos, so some commit first)."""
    with small_tmpfs(tmp_path / "small-disk", "8M") as disk:
        from engine.catalog.library import Library

        library = disk / "library"
        Library.open(library).close()
        # Room for some checkpoints (each also writes the record-text index) before it runs out.
        filler = _fill(disk, leave_bytes=320 * 1024)
        result = _index(warm_python, photos, library)
        yield result, library, filler


def test_disk_full_during_indexing_is_one_line_with_sqlites_error(full_disk_run) -> None:
    result, library, _filler = full_disk_run
    assert result.returncode == 1, result.stderr
    line = _assert_one_clean_line(_stderr_lines(result.stderr))
    assert line.startswith("error: ") and "disk" in line and "full" in line, line
    assert "database or disk is full" in line, line  # SQLite's error, not FAISS's
    assert str(library) in line and "committed" in line, line


def test_after_a_disk_full_run_freeing_space_lets_indexing_complete(
    full_disk_run, photos: Path, warm_python: WarmPython
) -> None:
    result, library, filler = full_disk_run
    assert result.returncode != 0, result.stdout  # the message: see the test above
    filler.unlink()
    again = _index(warm_python, photos, library)
    assert again.returncode == 0, again.stderr
    assert '"cancelled": false' in again.stdout
    assert _photo_counts(library / "catalog.sqlite3") == (108, 108)
    assert _integrity(library / "catalog.sqlite3") == "ok"


def test_a_disk_full_before_the_catalog_is_created_is_one_line(
    photos: Path, tmp_path: Path, warm_python: WarmPython
) -> None:
    """No room for the new catalog itself: SQLite's error as one line, not the migration's SQL."""
    with small_tmpfs(tmp_path / "small-disk", "2M") as disk:
        filler = _fill(disk, leave_bytes=48 * 1024)
        result = _index(warm_python, photos, disk / "library")
        assert result.returncode == 1, result.stdout
        line = _assert_one_clean_line(_stderr_lines(result.stderr))
        assert "database or disk is full" in line and str(disk / "library") in line, line
        assert "free some space" in line, line
        filler.unlink()
        again = _index(warm_python, photos, disk / "library")
        assert again.returncode == 0, again.stderr
        assert _photo_counts(disk / "library" / "catalog.sqlite3") == (108, 108)
        assert _integrity(disk / "library" / "catalog.sqlite3") == "ok"


def test_a_full_disk_at_commit_is_one_catalog_error_and_loses_nothing(tmp_path: Path) -> None:
    """SQLite's real 'database or disk is full' at a commit (as an indexing checkpoint meets
    it) leaves `Catalog.session()` as one line; earlier commits stay, and freeing space is
    enough to go on."""
    with small_tmpfs(tmp_path / "small-disk", "4M") as disk:
        catalog = open_catalog(disk / "catalog.sqlite3")
        try:
            with catalog.session() as s:
                s.execute(text("INSERT INTO library_meta(key, value) VALUES ('kept', 'yes')"))
            filler = _fill(disk, leave_bytes=32 * 1024)
            with pytest.raises(CatalogError) as caught, catalog.session() as s:
                for i in range(64):
                    s.execute(
                        text("INSERT INTO library_meta(key, value) VALUES (:k, :v)"),
                        {"k": f"big-{i}", "v": "x" * 8192},
                    )
            message = str(caught.value)
            assert "\n" not in message and "[SQL" not in message, message
            assert "database or disk is full" in message and str(disk) in message, message
            assert "committed" in message, message
            filler.unlink()
            with catalog.session() as s:
                before = set(s.execute(text("SELECT key FROM library_meta")).scalars())
                s.execute(text("INSERT INTO library_meta(key, value) VALUES ('after', 'ok')"))
            # The committed row stayed and none of the failed commit's did (the catalog keeps
            # keys of its own there too, such as whether its filter columns are filled).
            assert "kept" in before and not any(key.startswith("big-") for key in before)
            assert catalog.integrity_check() == "ok"
        finally:
            catalog.dispose()


# -- translating SQLite's errors -----------------------------------------------------------------


def _operational(message: str) -> exc.OperationalError:
    return exc.OperationalError("SELECT 1", {}, sqlite3.OperationalError(message))


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (
            _operational("disk I/O error"),
            ["disk I/O error", "removed", "close every Quadrat", "quadrat restore"],
        ),
        (
            _operational("database or disk is full"),
            ["database or disk is full", "free some space", "committed"],
        ),
        (
            _operational("attempt to write a readonly database"),
            ["read-only", "--library", "Settings"],
        ),
        (_operational("database is locked"), ["another program", "locked"]),
        (
            exc.DatabaseError("SELECT 1", {}, sqlite3.DatabaseError("file is not a database")),
            ["damaged", "quadrat restore"],
        ),
        (
            exc.DatabaseError(
                "SELECT 1", {}, sqlite3.DatabaseError("database disk image is malformed")
            ),
            ["damaged", "quadrat restore"],
        ),
        (sqlite3.OperationalError("disk I/O error"), ["disk I/O error", "quadrat restore"]),
    ],
    ids=["io", "full", "read-only", "locked", "not-a-database", "malformed", "raw-sqlite3"],
)
def test_a_session_turns_database_faults_into_one_line(
    tmp_path: Path, error: Exception, expected: list[str]
) -> None:
    path = tmp_path / "catalog.sqlite3"
    catalog = open_catalog(path)
    try:
        with pytest.raises(CatalogError) as caught, catalog.session() as s:
            s.execute(text("INSERT INTO library_meta(key, value) VALUES ('k', 'v')"))
            raise error
        message = str(caught.value)
        assert "\n" not in message and "[SQL" not in message and "sqlalche.me" not in message
        for words in expected:
            assert words in message, message
        assert caught.value.__cause__ is error  # the original stays chained for the log
        with catalog.session() as s:  # rolled back, and the catalog still works
            # (the catalog's own keys are there from its creation: the filter columns' state and
            # the images' generation)
            assert (
                s.execute(
                    text(
                        "SELECT count(*) FROM library_meta "
                        "WHERE key NOT LIKE 'filter_columns%' AND key <> 'images_generation'"
                    )
                ).scalar()
                == 0
            )
    finally:
        catalog.dispose()


def test_a_session_still_commits_and_leaves_constraint_errors_alone(tmp_path: Path) -> None:
    catalog = open_catalog(tmp_path / "catalog.sqlite3")
    try:
        with catalog.session() as s:
            s.execute(text("INSERT INTO library_meta(key, value) VALUES ('k', 'v')"))
        with pytest.raises(exc.IntegrityError), catalog.session() as s:
            s.execute(text("INSERT INTO library_meta(key, value) VALUES ('k', 'again')"))
        with pytest.raises(KeyError), catalog.session() as s:
            s.execute(text("INSERT INTO library_meta(key, value) VALUES ('x', 'y')"))
            raise KeyError("not a database fault")
        with catalog.session() as s:
            rows = s.execute(
                text(
                    "SELECT key, value FROM library_meta "
                    "WHERE key NOT LIKE 'filter_columns%' AND key <> 'images_generation'"
                )
            ).all()
        assert [tuple(r) for r in rows] == [("k", "v")]
    finally:
        catalog.dispose()


def test_a_catalog_file_damaged_under_an_open_catalog_is_one_line(tmp_path: Path) -> None:
    """A session whose catalog file turned into garbage under it: one line, not SQL."""
    path = tmp_path / "catalog.sqlite3"
    catalog = open_catalog(path)
    try:
        catalog.dispose()
        for suffix in ("-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        path.write_bytes(b"this is no longer a database" * 400)
        with pytest.raises(CatalogError) as caught, catalog.session() as s:
            s.execute(text("SELECT count(*) FROM images")).scalar()
        message = str(caught.value)
        assert "\n" not in message and "damaged" in message and str(path) in message
    finally:
        catalog.dispose()


def test_a_removed_wal_file_gives_one_line_about_a_removed_file(tmp_path: Path) -> None:
    """The WAL file deleted while the indexer has commits in it: SQLite's 'disk I/O error' for
    the next process to open the library (a search beside the indexing run) is one line."""
    from engine.catalog.library import Library

    writer = Library.open(tmp_path / "library")
    try:
        with writer.catalog.session() as s:
            for i in range(50):
                s.execute(
                    text("INSERT INTO library_meta(key, value) VALUES (:k, 'v')"), {"k": str(i)}
                )
        Path(f"{writer.catalog.path}-wal").unlink()
        with pytest.raises(CatalogError) as caught:
            Library.open(tmp_path / "library")
        message = str(caught.value)
        assert "\n" not in message and "[SQL" not in message and "sqlalche.me" not in message
        assert "disk I/O error" in message and "removed" in message, message
        assert "close every Quadrat" in message and "quadrat restore" in message, message
    finally:
        writer.close()


def test_a_catalog_file_that_is_not_a_database_gives_one_line(tmp_path: Path) -> None:
    from engine.catalog.library import Library

    library = tmp_path / "library"
    library.mkdir()
    (library / "catalog.sqlite3").write_bytes(b"definitely not sqlite" * 100)
    with pytest.raises(CatalogError) as caught:
        Library.open(library)
    message = str(caught.value)
    assert "\n" not in message and "sqlalche.me" not in message and "[SQL" not in message
    assert "damaged" in message and "quadrat restore" in message
    assert str(library / "catalog.sqlite3") in message


def test_the_cli_prints_a_damaged_catalog_as_one_line(
    tmp_path: Path, warm_python: WarmPython
) -> None:
    library = tmp_path / "library"
    library.mkdir()
    (library / "catalog.sqlite3").write_bytes(b"definitely not sqlite" * 100)
    result = warm_python.run(
        ["-m", "app.cli", "search", "a yellow square", "--library", str(library)],
        cwd=REPO,
        env=_quadrat_env(),
        timeout=300,
    )
    assert result.returncode == 1
    line = _assert_one_clean_line(_stderr_lines(result.stderr))
    assert "damaged" in line and "quadrat restore" in line, line


def test_a_library_folder_that_cannot_be_created_gives_one_line(tmp_path: Path) -> None:
    from engine.catalog.library import Library

    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(QuadratError) as caught:
        Library.open(blocker / "library")
    message = str(caught.value)
    assert "\n" not in message and str(blocker / "library") in message
    assert "--library" in message
