"""XMP sidecars: a query's judgments and attributes written as keywords beside the photos (read
back by exiftool), merged into existing sidecars, mirrored for read-only folders; keywords and
ratings read at indexing (sidecars, embedded XMP and IPTC) into the record's words and the
keyword filter."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from engine.catalog import Image
from engine.catalog.library import Library
from engine.indexing.indexer import Indexer
from engine.indexing.keywords import parse_xmp
from engine.io import xmp
from engine.io.xmp import write_sidecars
from engine.judgments.queries import QueryStore
from engine.search.filters import SearchFilters, filtered_ids
from engine.search.fulltext import text_ranked


def _exiftool() -> str:
    """exiftool's path; CI installs it (.ci/exiftool.sh), so there its absence fails."""
    found = shutil.which("exiftool")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("exiftool is missing (CI installs libimage-exiftool-perl)")
        pytest.skip("exiftool is not installed")
    return found


def _read_back(sidecar: Path) -> dict[str, object]:
    out = subprocess.run(
        [_exiftool(), "-j", "-XMP:All", str(sidecar)], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)[0]


def _as_list(value: object) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else [str(value)]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _ids_by_path(library: Library) -> dict[str, int]:
    with library.catalog.session() as s:
        return {p: i for i, p in s.query(Image.id, Image.rel_path).all()}


@pytest.fixture
def judged(photos: Path, tmp_path: Path, demo_encoder):
    """The small demo indexed, a query "striped owls" with one photo judged relevant (with a
    life stage) and one not relevant."""
    library = Library.open(tmp_path / "lib")
    Indexer(library, demo_encoder).run(photos)
    ids = _ids_by_path(library)
    relevant, not_relevant = sorted(ids)[:2]
    store = QueryStore(library)
    query_id = store.find_or_create_query("striped owls")
    store.judge(query_id, ids[relevant], 1, attributes={"lifeStage": "juvenile"})
    store.judge(query_id, ids[not_relevant], 0)
    yield library, photos, query_id, relevant, not_relevant
    library.close()


def test_sidecars_are_read_back_by_exiftool_and_the_photos_are_untouched(judged):
    library, photos, query_id, relevant, not_relevant = judged
    before = {p: _digest(photos / p) for p in (relevant, not_relevant)}
    report = write_sidecars(library, query_id)
    assert report.written == 2 and report.mirrored == 0
    tags = _read_back(photos / f"{relevant}.xmp")
    assert set(_as_list(tags["HierarchicalSubject"])) == {
        "Quadrat|striped owls|relevant",
        "Quadrat|lifeStage|juvenile",
    }
    assert _as_list(tags["Subject"]) == ["juvenile"]  # a verdict is no term on its own
    tags = _read_back(photos / f"{not_relevant}.xmp")
    assert _as_list(tags["HierarchicalSubject"]) == ["Quadrat|striped owls|not relevant"]
    assert "Subject" not in tags
    assert {p: _digest(photos / p) for p in before} == before  # the originals' bytes


def test_a_changed_judgment_replaces_its_keyword_on_a_second_write(judged):
    library, photos, query_id, relevant, _ = judged
    write_sidecars(library, query_id)
    with library.catalog.session() as s:
        image_id = s.query(Image.id).filter(Image.rel_path == relevant).scalar()
    QueryStore(library).judge(query_id, image_id, 0)
    write_sidecars(library, query_id)
    tags = _read_back(photos / f"{relevant}.xmp")
    hierarchical = _as_list(tags["HierarchicalSubject"])
    assert "Quadrat|striped owls|not relevant" in hierarchical
    assert "Quadrat|striped owls|relevant" not in hierarchical
    assert "relevant" not in _as_list(tags["Subject"])


FOREIGN = """<?xpacket begin="\ufeff" id="W5M0MpCehiHzreSzNTczkc9d"?>
<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#">
<rdf:Description rdf:about="" xmlns:darktable="http://darktable.sf.net/"
 xmlns:xmp="http://ns.adobe.com/xap/1.0/" xmlns:dc="http://purl.org/dc/elements/1.1/"
 xmlns:lr="http://ns.adobe.com/lightroom/1.0/" darktable:xmp_version="5" xmp:Rating="3">
<darktable:history><rdf:Seq><rdf:li darktable:operation="exposure"/></rdf:Seq></darktable:history>
<dc:subject><rdf:Bag><rdf:li>Coast</rdf:li></rdf:Bag></dc:subject>
<lr:hierarchicalSubject><rdf:Bag><rdf:li>Places|Coast</rdf:li></rdf:Bag></lr:hierarchicalSubject>
</rdf:Description></rdf:RDF></x:xmpmeta>
<?xpacket end="w"?>
"""


def test_an_existing_sidecar_keeps_its_content_and_foreign_namespaces(judged):
    library, photos, query_id, relevant, _ = judged
    sidecar = photos / f"{relevant}.xmp"
    sidecar.write_text(FOREIGN, encoding="utf-8")
    write_sidecars(library, query_id)
    tags = _read_back(sidecar)
    assert tags["Xmp_version"] == 5 and tags["Rating"] == 3
    assert tags["HistoryOperation"] == "exposure"
    assert "xmlns:darktable=" in sidecar.read_text(encoding="utf-8")  # its own prefix
    assert set(_as_list(tags["HierarchicalSubject"])) == {
        "Places|Coast",
        "Quadrat|striped owls|relevant",
        "Quadrat|lifeStage|juvenile",
    }
    assert set(_as_list(tags["Subject"])) == {"Coast", "juvenile"}


def test_a_lightroom_sidecar_is_updated_in_place(judged):
    library, photos, query_id, relevant, _ = judged
    lightroom = photos / relevant.rsplit(".", 1)[0]
    lightroom = lightroom.with_name(lightroom.name + ".xmp")
    lightroom.write_text(FOREIGN, encoding="utf-8")
    write_sidecars(library, query_id)
    assert not (photos / f"{relevant}.xmp").exists()
    assert "Quadrat|striped owls|relevant" in _as_list(_read_back(lightroom)["HierarchicalSubject"])


def test_an_unreadable_sidecar_is_left_as_it_is(judged):
    library, photos, query_id, relevant, _ = judged
    sidecar = photos / f"{relevant}.xmp"
    sidecar.write_text("not xml <<<", encoding="utf-8")
    report = write_sidecars(library, query_id)
    assert sidecar.read_text(encoding="utf-8") == "not xml <<<"
    assert report.unreadable == [str(sidecar)] and report.written == 1
    assert "left as they are" in " ".join(report.lines())


def test_a_read_only_folder_sends_its_sidecars_to_the_mirror(judged, tmp_path, monkeypatch):
    library, photos, query_id, relevant, not_relevant = judged
    folder = (photos / relevant).parent
    folder.chmod(0o555)
    if os.geteuid() == 0:  # root writes through the mode bits: the folder says no instead
        real = xmp._writable
        monkeypatch.setattr(xmp, "_writable", lambda f: f != folder and real(f))
    try:
        mirror = tmp_path / "mirror"
        report = write_sidecars(library, query_id, mirror=mirror)
    finally:
        folder.chmod(0o755)
    mirrored = mirror / photos.name / f"{relevant}.xmp"
    assert mirrored.is_file() and not (photos / f"{relevant}.xmp").exists()
    assert "Quadrat|lifeStage|juvenile" in _as_list(_read_back(mirrored)["HierarchicalSubject"])
    assert report.mirrored >= 1
    line = report.lines()[1]
    assert str(mirror) in line and str(folder) in line and "cannot be written" in line


def _tag_photo(photo: Path) -> None:
    """Embedded IPTC and XMP keywords and a rating, written by exiftool."""
    subprocess.run(
        [_exiftool(), "-q", "-overwrite_original", "-IPTC:Keywords=nocturnal",
         "-IPTC:Keywords=Felis catus", "-XMP-dc:Subject=striped",
         "-XMP-lr:HierarchicalSubject=Animals|Cats|tabby", "-XMP:Rating=4", str(photo)],
        check=True,
    )  # fmt: skip


@pytest.fixture(params=("sqlite", "postgresql"))
def open_library(request: pytest.FixtureRequest, tmp_path: Path):
    """Opens a library on a SQLite catalog, then on a fresh PostgreSQL database."""
    url = request.getfixturevalue("postgres_url") if request.param == "postgresql" else None
    return lambda: Library.open(tmp_path / "lib", database_url=url)


def test_embedded_keywords_are_searched_and_filtered(photos: Path, open_library, demo_encoder):
    names = sorted(p.relative_to(photos).as_posix() for p in photos.rglob("*.jpg"))
    target, iptc_only = names[3], names[4]
    _tag_photo(photos / target)
    subprocess.run(
        [_exiftool(), "-q", "-overwrite_original", "-IPTC:Keywords=nocturnal", str(photos / iptc_only)],
        check=True,
    )  # fmt: skip
    with open_library() as library:
        Indexer(library, demo_encoder).run(photos)
        image_id = _ids_by_path(library)[target]
        # The tagged photo's IPTC keywords are superseded by its XMP dc:subject (no IPTC digest
        # says the XMP is out of step); a photo with IPTC alone keeps them.
        found = {i for i, _ in text_ranked(library.catalog, "nocturnal", 100)}
        assert found == {_ids_by_path(library)[iptc_only]}
        assert {i for i, _ in text_ranked(library.catalog, "tabby", 100)} == {image_id}
        for keyword in ("STRIPED", "tabby", "Cats|tabby", "Animals"):
            found_ids = filtered_ids(library.catalog, SearchFilters(keyword=keyword))
            assert found_ids.tolist() == [image_id], keyword
        assert filtered_ids(library.catalog, SearchFilters(keyword="Felis catus")).size == 0
        assert filtered_ids(library.catalog, SearchFilters(keyword="tab")).size == 0
        with library.catalog.session() as s:
            assert s.get(Image, image_id).rating == 4


def test_a_changed_sidecar_is_read_again_without_encoding_the_photo(
    photos: Path, open_library, demo_encoder
):
    target = sorted(p.relative_to(photos).as_posix() for p in photos.rglob("*.jpg"))[5]
    with open_library() as library:
        Indexer(library, demo_encoder).run(photos)
        image_id = _ids_by_path(library)[target]
        sidecar = photos / f"{target}.xmp"
        sidecar.write_bytes(xmp.merge_keywords(None, ["Site|Pond A"], []))
        report = Indexer(library, demo_encoder).run(photos)
        assert report.indexed == 0  # nothing encoded again
        assert filtered_ids(library.catalog, SearchFilters(keyword="pond a")).tolist() == [image_id]
        sidecar.write_bytes(xmp.merge_keywords(None, ["Site|Pond B"], []))
        os.utime(sidecar, ns=(1, sidecar.stat().st_mtime_ns + 10**9))
        Indexer(library, demo_encoder).run(photos)
        assert filtered_ids(library.catalog, SearchFilters(keyword="pond a")).size == 0
        assert {i for i, _ in text_ranked(library.catalog, "pond", 100)} == {image_id}
        sidecar.unlink()
        Indexer(library, demo_encoder).run(photos)
        assert text_ranked(library.catalog, "pond", 100) == []


def test_flat_verdicts_of_an_earlier_version_are_removed_and_attribute_terms_kept():
    # What earlier versions wrote: every leaf flat, the verdict too.
    earlier = FOREIGN.replace(
        "<rdf:li>Places|Coast</rdf:li>",
        "<rdf:li>Places|Coast</rdf:li><rdf:li>Quadrat|owls|relevant</rdf:li>",
    ).replace("<rdf:li>Coast</rdf:li>", "<rdf:li>Coast</rdf:li><rdf:li>relevant</rdf:li>")
    assert parse_xmp(earlier.encode()).keywords[:2] == ["Coast", "relevant"]
    keywords, replaces = xmp.judgment_keywords("owls", 0, {"lifeStage": "adult"})
    merged = parse_xmp(xmp.merge_keywords(earlier.encode(), keywords, replaces)).keywords
    assert merged == ["Coast", "adult", "Places|Coast", "Quadrat|owls|not relevant",
                      "Quadrat|lifeStage|adult"]  # fmt: skip


def test_parse_reads_digikam_tags_and_a_rating_element():
    packet = (
        '<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF '
        'xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#"><rdf:Description '
        'xmlns:digiKam="http://www.digikam.org/ns/1.0/" xmlns:xmp="http://ns.adobe.com/xap/1.0/">'
        "<xmp:Rating>5</xmp:Rating><digiKam:TagsList><rdf:Seq><rdf:li>Birds/Owls</rdf:li>"
        "</rdf:Seq></digiKam:TagsList></rdf:Description></rdf:RDF></x:xmpmeta>"
    )
    facts = parse_xmp(packet.encode())
    assert facts.keywords == ["Birds|Owls"] and facts.rating == 5
    assert parse_xmp(b"<broken").keywords == []


def test_export_xmp_from_the_command_line(judged, capsys):
    from app.cli import main

    library, photos, query_id, relevant, _ = judged
    code = main(["export", "xmp", "--query", "striped owls", "--library", str(library.root)])
    assert code == 0
    assert "2 XMP sidecars written" in capsys.readouterr().out
    assert (photos / f"{relevant}.xmp").is_file()


def test_the_window_action_writes_after_asking_and_says_what_it_did(judged, qapp):
    from types import SimpleNamespace

    from app.controllers.sidecars import SidecarsController
    from app.workers import InlineTaskRunner

    library, photos, query_id, relevant, not_relevant = judged
    asked: list[str] = []
    answer = [False]
    judging = SimpleNamespace(query_id=query_id, judgments={1: 1, 2: 0})
    controller = SidecarsController(
        InlineTaskRunner(),
        SimpleNamespace(library=library),
        judging,
        lambda title, text: asked.append(text) or answer[0],
    )
    messages: list[str] = []
    outcomes: list[str] = []
    controller.message.connect(messages.append)
    controller.outcome.connect(outcomes.append)  # the message band says what was written
    controller.write_sidecars()  # declined
    assert "2 judged photos" in asked[0] and not (photos / f"{relevant}.xmp").exists()
    answer[0] = True
    controller.write_sidecars()
    assert (photos / f"{relevant}.xmp").is_file() and (photos / f"{not_relevant}.xmp").is_file()
    assert outcomes == ["2 XMP sidecars written"] and messages == []
    judging.query_id = None
    controller.write_sidecars()
    assert messages[-1].startswith("Open a saved query first")


def test_undoing_the_keywords_migration_keeps_the_other_triggers_and_indexes(tmp_path: Path):
    import sqlite3

    from alembic import command
    from sqlalchemy import create_engine

    from engine.catalog import open_catalog
    from engine.catalog.db import _alembic_config

    path = tmp_path / "c.sqlite3"
    open_catalog(path).dispose()

    def on_images() -> set[str]:
        with sqlite3.connect(path) as db:
            return {
                name
                for (name,) in db.execute(
                    "SELECT name FROM sqlite_master WHERE type IN ('trigger', 'index') "
                    "AND tbl_name = 'images'"
                )
            }

    engine = create_engine(f"sqlite:///{path}")
    try:
        with engine.begin() as conn:
            command.downgrade(_alembic_config(conn), "0015")
        before = on_images()
        with engine.begin() as conn:
            command.downgrade(_alembic_config(conn), "0014")
    finally:
        engine.dispose()
    assert on_images() == before  # the place and date triggers of 0012 among them
    with sqlite3.connect(path) as db:
        columns = {row[1] for row in db.execute("PRAGMA table_info(record_text)")}
    assert columns == {"names", "common", "notes"}
    open_catalog(path).dispose()  # and up again
    with sqlite3.connect(path) as db:
        columns = {row[1] for row in db.execute("PRAGMA table_info(record_text)")}
    assert "keywords" in columns
