"""XMP sidecars on a full disk, in a read-only folder and killed mid-way: every sidecar stays
whole (as it was, or updated with a third-party sidecar's content kept), a refused write stops
the run in one line that says how many were written and how many not, and a rerun finishes
the rest, leaving no temporary file beside the photos."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.cli import main
from engine.catalog import Collection, Image
from engine.catalog.library import Library
from engine.indexing.xmp_packet import read_xmp
from engine.io.xmp import write_sidecars
from engine.judgments.queries import QueryStore
from tests.small_disk import small_tmpfs

QUERY = "striped owls"
PAGE = 4096  # a tmpfs gives space in pages: one per sidecar
# Photos in two folders; p1 has darktable's sidecar, p4 Lightroom's photo.xmp.
PHOTOS = [f"a/p{n}.jpg" for n in range(4)] + [f"b/p{n}.jpg" for n in range(4, 8)]
FOREIGN_SIDECARS = {"a/p1.jpg.xmp", "b/p4.xmp"}
FOREIGN = """<?xpacket begin="\ufeff" id="W5M0MpCehiHzreSzNTczkc9d"?>
<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#">
<rdf:Description rdf:about="" xmlns:darktable="http://darktable.sf.net/"
 xmlns:xmp="http://ns.adobe.com/xap/1.0/" xmlns:lr="http://ns.adobe.com/lightroom/1.0/"
 darktable:xmp_version="5" xmp:Rating="3">
<darktable:history><rdf:Seq><rdf:li darktable:operation="exposure"/></rdf:Seq></darktable:history>
<lr:hierarchicalSubject><rdf:Bag><rdf:li>Places|Coast</rdf:li></rdf:Bag></lr:hierarchicalSubject>
</rdf:Description></rdf:RDF></x:xmpmeta>
<?xpacket end="w"?>
"""


def make_photos(photos: Path) -> None:
    """The photo files and the third-party sidecars some of them already have."""
    for n, rel in enumerate(PHOTOS):
        (photos / rel).parent.mkdir(parents=True, exist_ok=True)
        (photos / rel).write_bytes(b"photo %d" % n)
    for rel in FOREIGN_SIDECARS:
        (photos / rel).write_text(FOREIGN, encoding="utf-8")


def make_library(root: Path, photos: Path) -> int:
    """A library of `photos` with QUERY judged for every photo (even ones relevant, some with a
    life stage); returns the query's id."""
    with Library.open(root) as library:
        with library.catalog.session() as s:
            collection = Collection(root=str(photos), name="owls")
            s.add(collection)
            s.flush()
            images = [
                Image(collection_id=collection.id, rel_path=rel, size=7, mtime_ns=1)
                for rel in PHOTOS
            ]
            s.add_all(images)
            s.flush()
            ids = [image.id for image in images]
        store = QueryStore(library)
        query_id = store.find_or_create_query(QUERY)
        for n, image_id in enumerate(ids):
            attributes = {"lifeStage": "juvenile"} if n % 3 == 0 else None
            store.judge(query_id, image_id, 1 - n % 2, attributes=attributes)
    return query_id


def sidecar_of(rel: str) -> str:
    return "b/p4.xmp" if rel == "b/p4.jpg" else rel + ".xmp"


def verdict(rel: str) -> str:
    return "relevant" if PHOTOS.index(rel) % 2 == 0 else "not relevant"


def files(photos: Path) -> dict[str, bytes]:
    """Every file below `photos` but the photos themselves (sidecars and anything else)."""
    return {
        str(p.relative_to(photos)): p.read_bytes()
        for p in sorted(photos.rglob("*"))
        if p.is_file() and not p.name.endswith(".jpg") and p.name != "filler"
    }


def is_updated(rel: str, data: bytes) -> bool:
    """Whether `data` is the photo's sidecar fully updated (its verdict in, and a third-party
    sidecar's own content kept); an earlier sidecar of the photo must equal FOREIGN."""
    facts = read_xmp(data)
    if f"Quadrat|{QUERY}|{verdict(rel)}" not in facts.hierarchical:
        return False
    if sidecar_of(rel) in FOREIGN_SIDECARS:
        assert "Places|Coast" in facts.hierarchical and facts.rating == 3
        assert b'darktable:operation="exposure"' in data
    return True


def assert_each_old_or_new(photos: Path, before: dict[str, bytes]) -> int:
    """Every sidecar is the earlier one (or absent) or the updated one, and nothing else lies
    beside the photos; returns how many are updated."""
    now = files(photos)
    updated = 0
    for rel in PHOTOS:
        name = sidecar_of(rel)
        if name in now and now[name] != before.get(name):
            assert is_updated(rel, now[name]), name
            updated += 1
    assert set(now) <= {sidecar_of(rel) for rel in PHOTOS}, sorted(now)  # no temporary file
    return updated


def assert_all_updated(photos: Path) -> None:
    now = files(photos)
    assert set(now) == {sidecar_of(rel) for rel in PHOTOS}
    for rel in PHOTOS:
        assert is_updated(rel, now[sidecar_of(rel)]), rel


def counts(line: str) -> tuple[int, int]:
    """(written, not written) as the one line says them."""
    found = re.search(r"(\d+) of (\d+) sidecars written, (\d+) not", line)
    assert found is not None, line
    written, total, left = map(int, found.groups())
    assert written + left == total == len(PHOTOS)
    return written, left


def fill(disk: Path, leave: int) -> None:
    """Fill the disk, then give `leave` bytes back."""
    filler = disk / "filler"
    with contextlib.suppress(OSError), filler.open("wb") as handle:
        while True:
            handle.write(b"\0" * 1024)
            handle.flush()
    os.truncate(filler, max(0, filler.stat().st_size - leave))


def export_xmp(library: Path, *more: str) -> int:
    return main(["export", "xmp", "--query", QUERY, "--library", str(library), *more])


# --- a full disk -----------------------------------------------------------------------------


def test_a_full_disk_stops_the_command_in_one_line_and_a_rerun_finishes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with small_tmpfs(tmp_path / "disk", "64k") as disk:
        photos = disk / "photos"
        make_photos(photos)
        library = tmp_path / "lib"  # the catalog is on another disk
        make_library(library, photos)
        before = files(photos)
        fill(disk, 2 * PAGE)  # room for a few sidecars, not all
        assert export_xmp(library) == 1
        said = capsys.readouterr()
        line = said.err.strip()
        assert "\n" not in line and "Traceback" not in said.err and not said.out
        assert line.startswith("error: could not write the XMP sidecar of p")
        assert "the disk is full" in line and "nothing was lost" in line
        written, left = counts(line)
        assert left > 0
        assert assert_each_old_or_new(photos, before) == written
        (disk / "filler").unlink()
        assert export_xmp(library) == 0
        assert f"{len(PHOTOS)} XMP sidecars written" in capsys.readouterr().out
        assert_all_updated(photos)


def test_a_full_disk_is_said_in_the_windows_message_band(tmp_path: Path, qapp) -> None:
    from types import SimpleNamespace

    from app.controllers.errors import ErrorReporter
    from app.controllers.sidecars import SidecarsController
    from app.workers import InlineTaskRunner
    from widgets.message_banner import WARNING

    shown: list[tuple[str, str, str]] = []
    reporter = ErrorReporter(
        lambda kind, title, text, log=False: shown.append((kind, title, text)), None
    )
    with small_tmpfs(tmp_path / "disk", "64k") as disk:
        photos = disk / "photos"
        make_photos(photos)
        query_id = make_library(tmp_path / "lib", photos)
        before = files(photos)
        fill(disk, 0)
        with Library.open(tmp_path / "lib") as library:
            controller = SidecarsController(
                InlineTaskRunner(error_handler=reporter),
                SimpleNamespace(library=library),  # type: ignore[arg-type]
                SimpleNamespace(query_id=query_id, judgments=dict.fromkeys(range(8), 1)),  # type: ignore[arg-type]
                lambda title, text: True,
            )
            outcomes: list[str] = []
            controller.outcome.connect(outcomes.append)
            controller.write_sidecars()
        assert outcomes == []  # nothing claims the sidecars were written
        ((kind, title, text),) = shown
        assert kind == WARNING and title == "Writing XMP sidecars failed"  # no bug report
        assert "\n" not in text and "the disk is full" in text and "nothing was lost" in text
        assert counts(text) == (0, len(PHOTOS))
        assert files(photos) == before


# --- read-only folders -----------------------------------------------------------------------


def remount_read_only(folder: Path) -> None:
    done = subprocess.run(["mount", "-o", "remount,ro", str(folder)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot remount read-only: {done.stderr.decode().strip()}")


def test_a_read_only_folder_and_mirror_stop_in_one_line_and_a_writable_mirror_finishes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Folder a/ can be written, folder b/ is a read-only disk: a/'s sidecars are written
    beside the photos, b/'s go to the mirror folder, and when the mirror is read-only too the
    run stops there, saying so; a writable mirror then takes b/'s."""
    photos = tmp_path / "photos"
    make_photos(photos)
    library = tmp_path / "lib"
    make_library(library, photos)
    before = files(photos)
    with small_tmpfs(photos / "b", "1M") as read_only:
        make_photos(tmp_path / "copy")  # the tmpfs hides b/: put b/'s photos on it
        for name in os.listdir(tmp_path / "copy" / "b"):
            (read_only / name).write_bytes((tmp_path / "copy" / "b" / name).read_bytes())
        remount_read_only(read_only)
        mirror = read_only / "mirror"
        assert export_xmp(library, "--mirror", str(mirror)) == 1
        said = capsys.readouterr()
        line = said.err.strip()
        assert "\n" not in line and "Traceback" not in said.err
        assert "the disk is read-only" in line and "nothing was lost" in line
        assert f"to the mirror folder {mirror}" in line
        assert f"(the photo's folder {read_only} cannot be written)" in line
        assert counts(line) == (4, 4)  # a/'s four, then the first of b/ stops the run
        assert assert_each_old_or_new(photos, before) == 4
        assert files(read_only) == {k[2:]: v for k, v in before.items() if k.startswith("b/")}

        good = tmp_path / "mirror"
        assert export_xmp(library, "--mirror", str(good)) == 0
        said = capsys.readouterr()
        assert f"{len(PHOTOS)} XMP sidecars written" in said.out
        assert f"4 went into the mirror folder {good}" in said.err
        mirrored = files(good / "owls")
        for rel in PHOTOS[4:]:
            assert (
                f"Quadrat|{QUERY}|{verdict(rel)}" in read_xmp(mirrored[rel + ".xmp"]).hierarchical
            )


# --- killed mid-way --------------------------------------------------------------------------

_CHILD = """
import os, signal, sys
from engine.catalog.library import Library
from engine.io.xmp import write_sidecars

library_path, query_id, count = sys.argv[1:4]
seen = [0]
rename = os.replace

def dying(source, target, *args, **kwargs):
    if str(target).endswith(".xmp"):
        seen[0] += 1
        if seen[0] == int(count):
            os.kill(os.getpid(), signal.SIGKILL)
    return rename(source, target, *args, **kwargs)

os.replace = dying
with Library.open(library_path) as library:
    write_sidecars(library, int(query_id))
"""


@pytest.mark.parametrize("count", [1, 2, 5, 8])
def test_a_killed_run_leaves_every_sidecar_old_or_new_and_a_rerun_finishes(
    tmp_path: Path, count: int
) -> None:
    """Killed with the count-th sidecar's new content complete, before its rename."""
    photos = tmp_path / "photos"
    make_photos(photos)
    query_id = make_library(tmp_path / "lib", photos)
    before = files(photos)
    root = Path(__file__).parent.parent
    child = subprocess.run(
        [sys.executable, "-c", _CHILD, str(tmp_path / "lib"), str(query_id), str(count)],
        env={**os.environ, "PYTHONPATH": str(root)},
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    visible = {k: v for k, v in files(photos).items() if not Path(k).name.startswith(".")}
    updated = [k for k, v in visible.items() if v != before.get(k)]
    assert len(updated) == count - 1  # those renamed before the kill, each whole
    for name, data in visible.items():
        assert data == before.get(name) or name in updated
    for rel in PHOTOS:
        if sidecar_of(rel) in updated:
            assert is_updated(rel, visible[sidecar_of(rel)])
    # The temporary files a killed run left, once old, are taken away by the next run.
    past = time.time() - 3600
    for path in photos.rglob(".*.tmp"):
        os.utime(path, (past, past))
    with Library.open(tmp_path / "lib") as library:
        report = write_sidecars(library, query_id)
    assert report.written == len(PHOTOS)
    assert_all_updated(photos)


def test_a_stopped_run_hands_back_what_it_wrote(tmp_path: Path) -> None:
    """The error carries the report of the sidecars written before it (for the window)."""
    from engine.io.xmp import SidecarWriteError

    with small_tmpfs(tmp_path / "disk", "64k") as disk:
        photos = disk / "photos"
        make_photos(photos)
        query_id = make_library(tmp_path / "lib", photos)
        fill(disk, 0)
        with Library.open(tmp_path / "lib") as library, pytest.raises(SidecarWriteError) as caught:
            write_sidecars(library, query_id)
        assert caught.value.report.written == 0 and caught.value.report.paths == []
