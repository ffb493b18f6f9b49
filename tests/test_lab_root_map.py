"""One shared catalog, photos at different paths on different workstations: a per-workstation
mapping of collection roots (settings `root_map`, or QUADRAT_MAP_ROOT) is applied wherever a
photo's file is opened or shown, and a re-scan through it changes nothing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from sqlalchemy import func, select

from app.cli import main
from engine.catalog import Collection, Image
from engine.catalog.library import Library, RootMap
from engine.catalog.reads import photo_details
from engine.errors import BadInputError
from engine.io.export import copy_relevant_photos
from engine.judgments.queries import QueryStore


def _cli(capsys, *args: object) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def _counts(lib: Path) -> tuple[int, int, list[str]]:
    with Library.open(lib) as library, library.catalog.session() as s:
        photos = int(s.scalar(select(func.count()).select_from(Image)) or 0)
        missing = int(
            s.scalar(select(func.count()).select_from(Image).where(Image.status != "ok")) or 0
        )
        roots = list(s.scalars(select(Collection.root)))
    return photos, missing, roots


def test_a_moved_share_is_found_through_the_mapping_and_a_rescan_changes_nothing(
    tmp_path, photos, capsys, monkeypatch
):
    here_a = tmp_path / "mount-a" / "photos"
    here_a.parent.mkdir()
    shutil.move(str(photos), here_a)
    lib = tmp_path / "lib"
    assert _cli(capsys, "index", here_a, "--library", lib, "--model", "demo")[0] == 0
    before = _counts(lib)
    assert before[1] == 0 and before[2] == [str(here_a.resolve())]

    # The other workstation: the share is mounted elsewhere, the catalog still says A.
    here_b = tmp_path / "mount-b" / "photos"
    here_b.parent.mkdir()
    shutil.move(str(here_a), here_b)
    monkeypatch.setenv("QUADRAT_MAP_ROOT", f"{here_a.resolve()}={here_b.resolve()}")

    code, out, err = _cli(capsys, "search", "red circle", "--library", lib, "--top", "5", "--json")
    assert code == 0, err
    hits = [json.loads(line) for line in out.splitlines()]
    assert len(hits) == 5
    for hit in hits:
        assert hit["path"].startswith(str(here_b.resolve()))
        assert Path(hit["path"]).is_file()

    # A re-scan of B through the mapping: nothing missing, nothing added, no relocation.
    code, out, err = _cli(capsys, "index", here_b, "--library", lib, "--model", "demo")
    assert code == 0, err
    assert _counts(lib) == before

    # The detail pane and copying relevant photos open B's files.
    root_map = RootMap.parse([f"{here_a.resolve()}={here_b.resolve()}"])
    with Library.open(lib, root_map=root_map) as library:
        ids = [int(h["image_id"]) for h in hits[:2]]
        details = photo_details(library, ids)
        assert all(Path(d.path).is_file() for d in details.values())
        store = QueryStore(library)
        query = store.find_or_create_query("red circle")
        for image_id in ids:
            store.judge(query, image_id, 1)
        copied = copy_relevant_photos(library, query, tmp_path / "out")
        assert len(copied) == 2 and copied.missing == 0


def test_root_mappings_translate_both_ways_and_refuse_a_bad_pair():
    mapping = RootMap.parse(["Z:\\photos=/mnt/photos", "Z:\\photos\\birds=/srv/birds"])
    assert mapping.local("Z:\\photos\\frogs") == Path("/mnt/photos/frogs")
    assert mapping.local("Z:\\photos\\birds\\2024") == Path("/srv/birds/2024")  # the longest
    assert mapping.local("Z:\\photosets") == Path("Z:\\photosets")  # whole folders only
    assert mapping.catalog_root("/mnt/photos/frogs") == "Z:\\photos\\frogs"
    assert mapping.catalog_root("/elsewhere") == "/elsewhere"
    with pytest.raises(BadInputError, match="CATALOG_ROOT=FOLDER_HERE"):
        RootMap.parse(["/only/one/side"])


def test_the_library_panel_and_forgetting_see_a_mapped_share_as_mounted(tmp_path, photos):
    from engine.catalog.reads import unmounted_reason
    from engine.indexing.collections import collection_stats, find_moved_collection
    from engine.indexing.indexer import Indexer
    from engine.models.encoders import load_encoder

    lib = tmp_path / "lib"
    here_a = tmp_path / "mount-a" / "photos"
    here_a.parent.mkdir()
    shutil.move(str(photos), here_a)
    with Library.open(lib) as library:
        Indexer(library, load_encoder("demo")).run(here_a)
    here_b = tmp_path / "mount-b" / "photos"
    here_b.parent.mkdir()
    shutil.move(str(here_a), here_b)
    # Two photos really deleted on the share: forgetting them must not look like an unmount.
    for gone in sorted(here_b.rglob("*.jpg"))[:2]:
        gone.unlink()

    root_map = RootMap.parse([f"{here_a.resolve()}={here_b.resolve()}"])
    with Library.open(lib, root_map=root_map) as library:
        Indexer(library, load_encoder("demo")).run(here_b)  # marks the two missing
        (stats,) = collection_stats(library, scan_disk=True)
        assert stats.missing == 2
        assert stats.root == str(here_b.resolve())
        assert not stats.folder_missing and stats.pending == 0
        assert unmounted_reason(library) is None
        # The mapped folder is no "moved collection" to take over.
        assert find_moved_collection(library, here_b) is None
    with Library.open(lib) as library:  # without the mapping, this workstation sees no folder
        (stats,) = collection_stats(library, scan_disk=True)
        assert stats.folder_missing
        assert "is not there" in (unmounted_reason(library) or "")
