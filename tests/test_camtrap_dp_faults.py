"""A Camtrap DP export on a full disk, into a read-only folder, and killed mid-way: never a
package that mixes two exports or claims to be complete when it is not, and a one-line
message. Frames in the shape of the standard's own example (tests/camtrap_belgium.py)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.catalog.library import Library
from engine.errors import QuadratError
from engine.indexing.deployments import list_deployments, set_clock_offset
from engine.io.camtrap_dp import export_camtrap_dp
from tests.camtrap_belgium import MALLARD, SUMMER, Belgium, build, copy_of
from tests.small_disk import small_tmpfs
from tests.test_camtrap_dp import validate_package

pytestmark = pytest.mark.integration  # (runs processes; the fast lane leaves it out)

GADWALL = "Anas strepera"  # the other duck of the example: a package that differs
PAGE = 4096  # a tmpfs gives space in pages
FILES = ("datapackage.json", "deployments.csv", "media.csv", "observations.csv")


@pytest.fixture(scope="module")
def belgium_template(tmp_path_factory: pytest.TempPathFactory, demo_encoder) -> Belgium:
    return build(tmp_path_factory.mktemp("belgium"), demo_encoder)


@pytest.fixture
def belgium(belgium_template: Belgium, tmp_path: Path) -> Belgium:
    return copy_of(belgium_template, tmp_path / "lib")


def _export(belgium: Belgium, folder: Path, name: str = MALLARD) -> None:
    with Library.open(belgium.root) as library:
        export_camtrap_dp(library, belgium.query_id, folder, scientific_name=name)


def _contents(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())} if folder.exists() else {}


def _fill(disk: Path, leave: int) -> None:
    """Fill the disk, then give `leave` bytes back."""
    filler = disk / "filler"
    with contextlib.suppress(OSError), filler.open("wb") as handle:
        while True:
            handle.write(b"\0" * 1024)
            handle.flush()
    os.truncate(filler, max(0, filler.stat().st_size - leave))


def test_a_full_disk_leaves_no_partial_package_and_the_earlier_one_whole(
    belgium: Belgium, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with small_tmpfs(tmp_path / "disk", "64k") as disk:
        _export(belgium, disk / "pkg")  # the earlier package
        earlier = _contents(disk / "pkg")
        # Room for one file: the free space cannot be read first, so the writes meet the wall.
        _fill(disk, PAGE)
        monkeypatch.setattr("engine.io.camtrap_dp.free_bytes", lambda folder: None)
        for target in (disk / "new", disk / "pkg"):
            with pytest.raises(QuadratError) as caught:
                _export(belgium, target, GADWALL)
            message = str(caught.value)
            assert "disk is full" in message and "\n" not in message
            assert "no partial file was left" in message
        assert not (disk / "new").exists()  # not even the folder it made
        assert _contents(disk / "pkg") == earlier  # no temporary file, nothing replaced
        assert sorted(p.name for p in disk.iterdir()) == ["filler", "pkg"]


def test_a_full_disk_known_in_advance_fails_before_writing(
    belgium: Belgium, tmp_path: Path
) -> None:
    with small_tmpfs(tmp_path / "disk", "64k") as disk:
        _fill(disk, 0)
        with pytest.raises(QuadratError, match="disk is full .*needed, .* free"):
            _export(belgium, disk / "pkg", GADWALL)
        assert sorted(p.name for p in disk.iterdir()) == ["filler"]


def test_a_read_only_target_fails_in_one_line_and_keeps_the_earlier_package(
    belgium: Belgium, tmp_path: Path
) -> None:
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("a read-only mount needs root (a folder's mode does not stop root)")
    with small_tmpfs(tmp_path / "ro", "1M") as disk:
        _export(belgium, disk / "pkg")
        earlier = _contents(disk / "pkg")
        done = subprocess.run(["mount", "-o", "remount,ro", str(disk)], capture_output=True)
        if done.returncode != 0:
            pytest.skip(f"cannot remount read-only: {done.stderr.decode().strip()}")
        for target in (disk / "pkg", disk / "new"):
            with pytest.raises(QuadratError) as caught:
                _export(belgium, target, GADWALL)
            assert "read-only" in str(caught.value) and "\n" not in str(caught.value)
        assert _contents(disk / "pkg") == earlier
        assert sorted(p.name for p in disk.iterdir()) == ["pkg"]


_CHILD = """
import os, signal, sys
from engine.catalog.library import Library
from engine.io.camtrap_dp import export_camtrap_dp

library_path, target, query_id, call, count = sys.argv[1:6]
seen = [0]
real = getattr(os, call)

def dying(*args, **kwargs):
    if call == "fsync" or str(args[1]).startswith(target):
        seen[0] += 1
        if seen[0] == int(count):
            os.kill(os.getpid(), signal.SIGKILL)
    return real(*args, **kwargs)

setattr(os, call, dying)
with Library.open(library_path) as library:
    export_camtrap_dp(library, int(query_id), target, scientific_name="Anas strepera")
"""


@pytest.mark.parametrize(
    ("call", "count"),
    [("fsync", 2), ("replace", 1), ("replace", 2), ("replace", 3), ("replace", 4)],
)
def test_an_export_killed_mid_way_never_leaves_a_mixed_package(
    belgium: Belgium, tmp_path: Path, call: str, count: int
) -> None:
    target = tmp_path / "pkg"
    _export(belgium, target)  # the earlier package
    earlier = _contents(target)
    with Library.open(belgium.root) as library:
        # The camera was a minute slow: every file of the next package differs.
        summer = next(d for d in list_deployments(library) if d.folder == SUMMER)
        set_clock_offset(library, summer.id, 60)
    root = Path(__file__).parent.parent
    env = {**os.environ, "PYTHONPATH": str(root)}
    child = subprocess.run(
        [sys.executable, "-c", _CHILD, str(belgium.root), str(target), str(belgium.query_id),
         call, str(count)],
        env=env, cwd=root, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert child.returncode == -signal.SIGKILL, child.stderr
    now = _contents(target)
    visible = {name: data for name, data in now.items() if not name.startswith(".")}
    if "datapackage.json" in visible:
        # A package that says it is complete is the earlier one, whole.
        assert visible == earlier
    else:  # killed between the renames: no descriptor claims a package of mixed files
        assert set(visible) < set(FILES)
    if call == "fsync":  # killed while writing: nothing was renamed
        assert visible == earlier
    # The next export takes the killed one's temporary files away once they are old.
    for name in now:
        if name.startswith("."):
            past = time.time() - 3600
            os.utime(target / name, (past, past))
    _export(belgium, target, GADWALL)
    assert sorted(p.name for p in target.iterdir()) == sorted(FILES)
    validate_package(target)
