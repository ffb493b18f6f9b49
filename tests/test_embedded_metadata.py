"""What a photo's own XMP and IPTC say, read at indexing: UTF-16 packets, IPTC keywords that XMP
supersedes (the Metadata Working Group's rule, with the IPTC digest), dates from XMP/IPTC as a
flagged fallback capture time, licences, a FIFO named like a sidecar, and the bound on embedded
packets.

The fixtures are built here in the formats' published shapes: JPEG APP1 (XMP) and APP13
(Photoshop image resources holding the IPTC-IIM block and its MD5 digest, resource 0x0425), TIFF
tag 700; exiftool (where installed) writes the files a third-party tool would."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import time
import tracemalloc
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from PIL import ExifTags, Image
from sqlalchemy import delete

from engine.catalog import Embedding
from engine.catalog import Image as Row
from engine.catalog.library import Library
from engine.indexing.decode import decode_image
from engine.indexing.deployments import undated_photos
from engine.indexing.embedded import Embedded, embedded_facts
from engine.indexing.exif import EXIF_DATE_FROM_XMP, flag_reasons, read_exif
from engine.indexing.indexer import Indexer
from engine.indexing.keywords import embedded_keywords, parse_xmp, read_sidecar
from engine.io.xmp import write_sidecars
from engine.judgments.queries import QueryStore

NOW = datetime(2026, 6, 1, 12, 0, 0)
XMP_NAMESPACES = (
    'xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" '
    'xmlns:dc="http://purl.org/dc/elements/1.1/" '
    'xmlns:lr="http://ns.adobe.com/lightroom/1.0/" '
    'xmlns:xmp="http://ns.adobe.com/xap/1.0/" '
    'xmlns:exif="http://ns.adobe.com/exif/1.0/" '
    'xmlns:photoshop="http://ns.adobe.com/photoshop/1.0/" '
    'xmlns:xmpRights="http://ns.adobe.com/xap/1.0/rights/" '
    'xmlns:cc="http://creativecommons.org/ns#"'
)


def xmp_packet(properties: str = "", subjects: tuple[str, ...] = ()) -> str:
    """An XMP packet (with its xpacket wrapper) holding `properties` and dc:subject."""
    bag = "".join(f"<rdf:li>{s}</rdf:li>" for s in subjects)
    subject = f"<dc:subject><rdf:Bag>{bag}</rdf:Bag></dc:subject>" if subjects else ""
    return (
        '<?xpacket begin="\ufeff" id="W5M0MpCehiHzreSzNTczkc9d"?>\n'
        '<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF '
        f"{XMP_NAMESPACES}><rdf:Description rdf:about=''>{subject}{properties}"
        "</rdf:Description></rdf:RDF></x:xmpmeta>\n"
        '<?xpacket end="w"?>'
    )


def iim(*datasets: tuple[int, int, bytes]) -> bytes:
    """An IPTC-IIM block: tag marker 0x1C, record, dataset, 2-byte size, value."""
    out = b"\x1c\x02\x00\x00\x02\x00\x04"  # 2:00 record version 4
    for record, number, value in datasets:
        out += bytes((0x1C, record, number)) + len(value).to_bytes(2, "big") + value
    return out


def psir(resources: dict[int, bytes]) -> bytes:
    """Photoshop image resources: "8BIM", id, empty padded Pascal name, size, padded data."""
    out = b""
    for resource, data in resources.items():
        out += b"8BIM" + resource.to_bytes(2, "big") + b"\x00\x00"
        out += len(data).to_bytes(4, "big") + data + b"\x00" * (len(data) % 2)
    return out


def segment(marker: int, payload: bytes) -> bytes:
    return bytes((0xFF, marker)) + (len(payload) + 2).to_bytes(2, "big") + payload


def write_jpeg(
    path: Path,
    *,
    xmp: str | None = None,
    iptc: bytes | None = None,
    digest: bytes | None | str = "none",
    exif_time: str | None = None,
) -> Path:
    """A small JPEG with an EXIF (a capture time when given), an XMP packet in APP1 and the
    IPTC block in APP13 with a digest: "match" (the block's MD5), bytes as given, or "none"."""
    exif = Image.Exif()
    exif[ExifTags.Base.Make] = "TestCam"
    if exif_time:
        exif.get_ifd(ExifTags.IFD.Exif)[ExifTags.Base.DateTimeOriginal] = exif_time
    buffer = io.BytesIO()
    Image.new("RGB", (48, 32), (90, 120, 60)).save(buffer, "JPEG", exif=exif)
    data = buffer.getvalue()
    segments = b""
    if xmp is not None:
        segments += segment(0xE1, b"http://ns.adobe.com/xap/1.0/\x00" + xmp.encode("utf-8"))
    if iptc is not None:
        resources = {0x0404: iptc}
        if digest == "match":
            resources[0x0425] = hashlib.md5(iptc).digest()
        elif isinstance(digest, bytes):
            resources[0x0425] = digest
        segments += segment(0xED, b"Photoshop 3.0\x00" + psir(resources))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data[:2] + segments + data[2:])
    return path


def write_tiff(path: Path, xmp: bytes) -> Path:
    """A small TIFF whose IFD0 holds `xmp` as tag 700 (type BYTE), as the XMP spec places it."""
    from PIL import TiffImagePlugin

    info = TiffImagePlugin.ImageFileDirectory_v2()
    info[700] = xmp
    info.tagtype[700] = 1
    Image.new("RGB", (32, 24), (40, 80, 120)).save(path, "TIFF", tiffinfo=info)
    return path


def _exiftool() -> str:
    found = shutil.which("exiftool")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("exiftool is missing (CI installs libimage-exiftool-perl)")
        pytest.skip("exiftool is not installed")
    return found


# -- UTF-16 packets -----------------------------------------------------------------------


def _encoded(text: str, encoding: str) -> bytes:
    if encoding == "utf-16-be-bom":
        return b"\xfe\xff" + text.encode("utf-16-be")
    if encoding == "utf-16-le-bom":
        return b"\xff\xfe" + text.encode("utf-16-le")
    return text.encode(encoding)


@pytest.mark.parametrize(
    "encoding", ["utf-16-be-bom", "utf-16-le-bom", "utf-16-be", "utf-16-le", "utf-32-be"]
)
def test_utf16_xmp_keeps_its_keywords_embedded_and_in_a_sidecar(
    tmp_path: Path, encoding: str
) -> None:
    packet = xmp_packet(
        "<lr:hierarchicalSubject><rdf:Bag><rdf:li>Animals|Bufo bufo</rdf:li></rdf:Bag>"
        "</lr:hierarchicalSubject>",
        subjects=("crapaud", "Kröte"),
    )
    data = _encoded(packet + "\n" + " " * 64, encoding)  # with the padding writers leave
    expected = ["crapaud", "Kröte", "Animals|Bufo bufo"]
    assert embedded_keywords(write_tiff(tmp_path / "scan.tif", data)).keywords == expected
    sidecar = tmp_path / "scan.tif.xmp"
    sidecar.write_bytes(data)
    assert read_sidecar(sidecar).keywords == expected


def test_a_sidecar_declaring_utf16_in_its_xml_declaration_is_read(tmp_path: Path) -> None:
    text = '<?xml version="1.0" encoding="UTF-16"?>\n' + xmp_packet(subjects=("heron",))
    assert parse_xmp(text.encode("utf-16")).keywords == ["heron"]


# -- IPTC that XMP supersedes (MWG) ---------------------------------------------------------


def test_iptc_keywords_that_xmp_supersedes_are_dropped(tmp_path: Path) -> None:
    xmp = xmp_packet(subjects=("heron", "river"))
    old_iptc = iim((2, 25, b"heron"), (2, 25, b"pond"))
    # No digest, or a digest that matches: XMP and IPTC are in step, XMP wins.
    for digest in ("none", "match"):
        photo = write_jpeg(tmp_path / f"{digest}.jpg", xmp=xmp, iptc=old_iptc, digest=digest)
        assert embedded_keywords(photo).keywords == ["heron", "river"], digest
    # A digest that does not match: an IPTC-only tool changed IPTC after the XMP: IPTC wins.
    stale = write_jpeg(tmp_path / "stale.jpg", xmp=xmp, iptc=old_iptc, digest=b"\x00" * 16)
    assert embedded_keywords(stale).keywords == ["heron", "pond"]
    # IPTC alone, or XMP without dc:subject: the IPTC keywords are the photo's.
    alone = write_jpeg(tmp_path / "alone.jpg", iptc=old_iptc)
    assert embedded_keywords(alone).keywords == ["heron", "pond"]
    rated = write_jpeg(tmp_path / "rated.jpg", xmp=xmp_packet("<xmp:Rating>2</xmp:Rating>"),
                       iptc=old_iptc)  # fmt: skip
    assert embedded_keywords(rated).keywords == ["heron", "pond"]


def test_an_iptc_keyword_cut_at_64_bytes_is_taken_as_the_xmp_keyword() -> None:
    long = "Ardea cinerea, grey heron standing in the shallows of the river bank"
    iptc = iim((2, 25, long.encode()[:64]))
    facts = embedded_facts(Embedded(xmp_packet(subjects=(long,)).encode(), iptc, b"\x01" * 16))
    assert facts.keywords == [long]


def test_exiftool_written_files_follow_the_digest(tmp_path: Path) -> None:
    exiftool = _exiftool()
    photo = tmp_path / "p.jpg"
    Image.new("RGB", (32, 32)).save(photo)

    def tool(*args: str) -> None:
        subprocess.run([exiftool, "-q", "-overwrite_original", *args, str(photo)], check=True)

    tool("-IPTC:Keywords=nocturnal", "-XMP-dc:Subject=striped")  # no digest
    assert embedded_keywords(photo).keywords == ["striped"]
    tool("-IPTCDigest=new")  # in step
    assert embedded_keywords(photo).keywords == ["striped"]
    tool("-IPTC:Keywords+=edited")  # IPTC changed after: the stored digest no longer matches
    assert embedded_keywords(photo).keywords == ["nocturnal", "edited"]


# -- dates from XMP or IPTC ---------------------------------------------------------------


def _exif(path: Path):
    with Image.open(path) as image:
        return read_exif(image, now=NOW)


def test_a_photo_without_an_exif_time_is_dated_from_xmp_and_flagged(tmp_path: Path) -> None:
    photo = write_jpeg(
        tmp_path / "scan.jpg",
        xmp=xmp_packet("<photoshop:DateCreated>2019-06-12T14:30:00+02:00</photoshop:DateCreated>"),
    )
    exif = _exif(photo)
    assert exif.observed_at == datetime(2019, 6, 12, 14, 30, tzinfo=timezone(timedelta(hours=2)))
    assert exif.flags == EXIF_DATE_FROM_XMP
    assert flag_reasons(exif.flags) == ["date from XMP/IPTC"]
    # In a PNG (iTXt) as exif:DateTimeOriginal, an attribute of rdf:Description.
    png = tmp_path / "export.png"
    packet = xmp_packet().replace(
        "rdf:about=''", "rdf:about='' exif:DateTimeOriginal='2021-08-03T06:15:00'"
    )
    Image.new("RGB", (16, 16)).save(png, pnginfo=_png_xmp(packet))
    assert _exif(png).observed_at == datetime(2021, 8, 3, 6, 15)


def _png_xmp(packet: str):
    from PIL import PngImagePlugin

    info = PngImagePlugin.PngInfo()
    info.add_itxt("XML:com.adobe.xmp", packet)
    return info


def test_iptc_date_and_time_are_the_last_fallback_and_exif_still_wins(tmp_path: Path) -> None:
    iptc = iim((2, 55, b"20180520"), (2, 60, b"061500-0500"))
    exif = _exif(write_jpeg(tmp_path / "iptc.jpg", iptc=iptc))
    assert exif.observed_at == datetime(2018, 5, 20, 6, 15, tzinfo=timezone(timedelta(hours=-5)))
    assert exif.flags == EXIF_DATE_FROM_XMP
    both = write_jpeg(tmp_path / "both.jpg", iptc=iptc, exif_time="2020:01:02 03:04:05",
                      xmp=xmp_packet("<xmp:CreateDate>2017-01-01</xmp:CreateDate>"))  # fmt: skip
    assert (_exif(both).observed_at, _exif(both).flags) == (datetime(2020, 1, 2, 3, 4, 5), 0)
    # XMP before IPTC while the digest says they are in step; IPTC first when it does not.
    xmp = xmp_packet("<xmp:CreateDate>2017-01-01</xmp:CreateDate>")
    synced = write_jpeg(tmp_path / "synced.jpg", xmp=xmp, iptc=iptc, digest="match")
    assert _exif(synced).observed_at == datetime(2017, 1, 1)
    edited = write_jpeg(tmp_path / "edited.jpg", xmp=xmp, iptc=iptc, digest=b"\x07" * 16)
    assert _exif(edited).observed_at.date() == datetime(2018, 5, 20).date()


def test_an_impossible_or_partial_xmp_date_leaves_the_photo_undated(tmp_path: Path) -> None:
    future = write_jpeg(tmp_path / "f.jpg", xmp=xmp_packet(
        "<photoshop:DateCreated>2091-01-01</photoshop:DateCreated>"))  # fmt: skip
    assert _exif(future).observed_at is None
    assert flag_reasons(_exif(future).flags) == ["capture time in the future"]
    year_only = write_jpeg(tmp_path / "y.jpg", xmp=xmp_packet(
        "<photoshop:DateCreated>2019</photoshop:DateCreated>"))  # fmt: skip
    assert (_exif(year_only).observed_at, _exif(year_only).flags) == (None, 0)


def test_indexing_stores_the_fallback_date_and_says_so(tmp_path: Path, demo_encoder) -> None:
    folder = tmp_path / "scans"
    write_jpeg(
        folder / "slide.jpg",
        xmp=xmp_packet("<photoshop:DateCreated>2019-06-12</photoshop:DateCreated>"),
    )
    write_jpeg(folder / "camera.jpg", exif_time="2024:05:01 21:00:00")
    write_jpeg(folder / "nothing.jpg")  # fmt: skip
    with Library.open(tmp_path / "lib") as library:
        report = Indexer(library, demo_encoder).run(folder)
        with library.catalog.session() as s:
            rows = {r.rel_path: r for r in s.query(Row)}
            slide = rows["slide.jpg"]
            assert slide.observed_at == datetime(2019, 6, 12)
            assert flag_reasons(slide.exif_flags) == ["date from XMP/IPTC"]
            assert rows["camera.jpg"].exif_flags is None
        undated = [Path(p).name for p, _ in undated_photos(library)]
    assert undated == ["nothing.jpg"]
    assert report.camera["dates_from_xmp"] == 1
    assert "1 photo had no EXIF capture time and is dated from XMP/IPTC" in report.summary()


# -- licences -------------------------------------------------------------------------------

BY = "https://creativecommons.org/licenses/by/4.0/"
BY_NC = "https://creativecommons.org/licenses/by-nc/4.0/"
CC0 = "https://creativecommons.org/publicdomain/zero/1.0/"


def test_licences_come_from_xmp_where_the_metadata_file_gives_none(
    tmp_path: Path, demo_encoder
) -> None:
    folder = tmp_path / "field"
    write_jpeg(folder / "a.jpg")
    (folder / "a.jpg.xmp").write_text(
        xmp_packet(f'<cc:license rdf:resource="{BY}"/>'), encoding="utf-8"
    )
    write_jpeg(folder / "b.jpg", xmp=xmp_packet(
        f"<xmpRights:WebStatement>{BY_NC}</xmpRights:WebStatement>"))  # fmt: skip
    write_jpeg(folder / "c.jpg", xmp=xmp_packet(
        '<xmpRights:UsageTerms><rdf:Alt><rdf:li xml:lang="x-default">All rights reserved, '
        "ask the station</rdf:li></rdf:Alt></xmpRights:UsageTerms>"))  # fmt: skip
    write_jpeg(folder / "d.jpg", xmp=xmp_packet(f'<cc:license rdf:resource="{CC0}"/>'))
    write_jpeg(folder / "e.jpg")
    records = [{"id": i, "file_name": f"{n}.jpg"} for i, n in enumerate("abcde", 1)]
    records[3]["license"] = 7  # d: the metadata file's licence
    (folder / "metadata.json").write_text(json.dumps({
        "images": records, "categories": [], "annotations": [],
        "licenses": [{"id": 7, "name": "Attribution License", "url": BY}],
    }))  # fmt: skip

    def licences(library: Library) -> dict[str, str | None]:
        with library.catalog.session() as s:
            return {r.rel_path: r.license for r in s.query(Row)}

    with Library.open(tmp_path / "lib") as library:
        Indexer(library, demo_encoder).run(folder)
        found = licences(library)
        assert found["a.jpg"] == BY and found["b.jpg"] == BY_NC
        assert found["c.jpg"] == "All rights reserved, ask the station"
        assert found["d.jpg"] not in (None, CC0)  # the metadata file's, never the photo's
        assert found["e.jpg"] is None
        # Every photo encoded again (a new model): the metadata file's empty licences are
        # written again, and the photos' own come back.
        with library.catalog.session() as s:
            s.execute(delete(Embedding))
        Indexer(library, demo_encoder).run(folder)
        assert licences(library) == found
        # A changed sidecar is read again without encoding its photo.
        (folder / "a.jpg.xmp").write_text(
            xmp_packet(f'<cc:license rdf:resource="{CC0}"/>'), encoding="utf-8"
        )
        os.utime(folder / "a.jpg.xmp", ns=(1, time.time_ns() + 10**9))
        report = Indexer(library, demo_encoder).run(folder)
        assert report.indexed == 0 and licences(library)["a.jpg"] == CC0


# -- files that must not be read ------------------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
@pytest.mark.timeout(60)
def test_a_fifo_named_like_a_sidecar_is_never_opened(tmp_path: Path, demo_encoder) -> None:
    folder = tmp_path / "card"
    write_jpeg(folder / "a.jpg", xmp=xmp_packet(subjects=("owl",)))
    write_jpeg(folder / "b.jpg")
    os.mkfifo(folder / "a.jpg.xmp")  # nothing ever writes to it: opening it would block
    os.mkfifo(folder / "b.xmp")
    with Library.open(tmp_path / "lib") as library:
        report = Indexer(library, demo_encoder).run(folder)
        assert report.indexed == 2
        with library.catalog.session() as s:
            assert s.query(Row.keywords).filter(Row.rel_path == "a.jpg").scalar() == "owl"
            ids = dict(s.query(Row.rel_path, Row.id).all())
        store = QueryStore(library)
        query = store.find_or_create_query("owls")
        store.judge(query, ids["a.jpg"], 1)
        sidecars = write_sidecars(library, query)  # the FIFO is left alone, not written
    assert sidecars.unreadable == [str(folder / "a.jpg.xmp")]
    assert (folder / "a.jpg.xmp").is_fifo()


@pytest.mark.skipif(sys.platform == "win32", reason="tracemalloc figures are for CPython/Linux")
def test_an_embedded_packet_over_16_mb_is_not_read(tmp_path: Path) -> None:
    small = xmp_packet("<photoshop:DateCreated>2019-06-12</photoshop:DateCreated>",
                       subjects=("heron",))  # fmt: skip
    assert embedded_keywords(write_tiff(tmp_path / "ok.tif", small.encode())).keywords == ["heron"]
    padding = " " * (17 * 1024 * 1024)  # XMP allows padding; 17 MB passes the bound
    packet = small.replace("<?xpacket end", padding + "<?xpacket end")
    big = write_tiff(tmp_path / "big.tif", packet.encode())
    tracemalloc.start()
    try:
        facts = embedded_keywords(big)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert facts.keywords == []
    assert peak < 2 * 1024 * 1024  # the packet was never read into memory
    # Decoding it for the encoder reads the tag (Pillow does), but the date is not parsed.
    assert decode_image(big).exif.observed_at is None
