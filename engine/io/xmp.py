"""A query's judgments and attributes written as keywords into XMP sidecars, for digiKam,
Lightroom, darktable and exiftool users: `Quadrat|<query>|relevant` (or `not relevant`) and
`Quadrat|<term>|<value>` ("Quadrat|lifeStage|juvenile") in lr:hierarchicalSubject.

dc:subject, the flat keywords every tool reads, gets only the leaves that are terms about the
photo on their own: an attribute's value ("juvenile"), as Lightroom and digiKam put a
hierarchical keyword's leaf there. A verdict is not such a term: a bare "relevant" says nothing
without its query, and a photo judged for two queries would carry both "relevant" and "not
relevant". It stays in the hierarchy alone, where Lightroom (as for a keyword not included on
export) and digiKam (which reads lr:hierarchicalSubject) show it under its query; the flat
verdicts earlier versions wrote are removed when a sidecar is written again.

The photo itself is never opened for writing. A sidecar the photo already has is parsed and
updated (its other properties, keywords and foreign namespaces kept; this query's and these
terms' earlier Quadrat keywords replaced); an unparseable one is left alone and counted. New
sidecars are named `photo.jpg.xmp` (digiKam, darktable): `photo.xmp` would be one file for a
RAW+JPEG pair judged apart; an existing `photo.xmp` is updated in place. Where a photo's folder
cannot be written, the sidecar goes to a mirror folder (same layout below the collection's
name).

Each sidecar is written whole or not at all: an unnamed or hidden temporary file in its folder,
renamed onto the sidecar once complete, so an existing one is never truncated and a killed run
leaves every sidecar as it was or fully updated (a later run removes the temporary files a
killed one left and finishes the rest). A write the system refuses (a full disk, a read-only
mirror folder, no permission) stops the run with one line saying how many sidecars were
written and how many were not (`SidecarWriteError`).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from sqlalchemy import select

from engine.catalog import Collection, Image, Judgment, Query
from engine.catalog.models import STATUS_OK
from engine.errors import BadInputError, QuadratError
from engine.indexing.embedded import NotARegularFile, open_regular
from engine.indexing.keywords import (
    HIERARCHY_SEPARATOR,
    NS_DC,
    NS_LR,
    NS_RDF,
    NS_X,
    PREFIXES,
    clean_keyword,
    find_sidecar,
    sidecar_names,
)
from engine.indexing.xmp_packet import XMP_MAX_BYTES
from engine.io.safe_write import disk_full, remove_stale_temps, write_cause, write_whole
from engine.judgments.attributes import attributes_for_query
from engine.progress import CancelToken, Progress, ProgressCallback, no_progress

if TYPE_CHECKING:
    from engine.catalog.library import Library

log = logging.getLogger(__name__)

ROOT_KEYWORD = "Quadrat"
RELEVANT, NOT_RELEVANT = "relevant", "not relevant"
_PACKET_BEGIN = '<?xpacket begin="\ufeff" id="W5M0MpCehiHzreSzNTczkc9d"?>\n'
_PACKET_END = '\n<?xpacket end="w"?>\n'
_SIDECAR_MAX_BYTES = XMP_MAX_BYTES
# A temporary sidecar as engine.files and safe_write name them (one a killed run left).
_TEMP = re.compile(r"^\..+\.(?i:xmp)\.[0-9a-f]{12}\.tmp$")


def _level(text: str) -> str:
    """A value as one level of a hierarchical keyword (no `|` inside, one line)."""
    return " ".join(text.replace(HIERARCHY_SEPARATOR, "/").split())


def judgment_keywords(
    query_text: str, relevance: int, attributes: dict[str, str]
) -> tuple[list[str], list[str]]:
    """(keywords to write, prefixes of earlier Quadrat keywords they replace) for one photo."""
    query = _level(query_text)
    verdict = RELEVANT if relevance > 0 else NOT_RELEVANT
    keywords = [HIERARCHY_SEPARATOR.join((ROOT_KEYWORD, query, verdict))]
    replaces = [HIERARCHY_SEPARATOR.join((ROOT_KEYWORD, query)) + HIERARCHY_SEPARATOR]
    for term, value in sorted(attributes.items()):
        # A pipe list ("feeding|perching", dominant first) is one keyword per value.
        for part in value.split(HIERARCHY_SEPARATOR):
            if _level(part):
                keywords.append(HIERARCHY_SEPARATOR.join((ROOT_KEYWORD, term, _level(part))))
        replaces.append(HIERARCHY_SEPARATOR.join((ROOT_KEYWORD, term)) + HIERARCHY_SEPARATOR)
    return [k for k in (clean_keyword(k) for k in keywords) if k], replaces


def _leaf(keyword: str) -> str:
    return keyword.rsplit(HIERARCHY_SEPARATOR, 1)[-1]


def _is_verdict(keyword: str) -> bool:
    """Whether a hierarchical keyword is a Quadrat judgment (`Quadrat|<query>|relevant`)."""
    return keyword.startswith(ROOT_KEYWORD + HIERARCHY_SEPARATOR) and _leaf(keyword) in (
        RELEVANT,
        NOT_RELEVANT,
    )


def _flat_term(keyword: str) -> str | None:
    """What a hierarchical keyword puts in dc:subject: its leaf, except for a verdict."""
    return None if _is_verdict(keyword) else _leaf(keyword)


# -- the XMP document -------------------------------------------------------------------------


class SidecarUnreadable(ValueError):
    """An existing sidecar that is not XMP this module can update (left as it is)."""


def _q(namespace: str, name: str) -> str:
    return f"{{{namespace}}}{name}"


def _register_prefixes(data: bytes) -> None:
    """Keep the prefixes the document uses (ElementTree would name foreign ones ns0, ns1...)."""
    for prefix, uri in PREFIXES.items():
        ET.register_namespace(prefix, uri)
    try:
        for _event, (prefix, uri) in ET.iterparse(io.BytesIO(data), events=("start-ns",)):
            if prefix and prefix not in PREFIXES:
                # A reserved "ns0"-like prefix raises: ElementTree then picks one itself.
                with contextlib.suppress(ValueError):
                    ET.register_namespace(prefix, uri)
    except ET.ParseError as exc:
        raise SidecarUnreadable(str(exc)) from None


def _new_document() -> ET.Element:
    meta = ET.Element(_q(NS_X, "xmpmeta"))
    rdf = ET.SubElement(meta, _q(NS_RDF, "RDF"))
    ET.SubElement(rdf, _q(NS_RDF, "Description"), {_q(NS_RDF, "about"): ""})
    return meta


def _bag(rdf: ET.Element, namespace: str, name: str) -> ET.Element:
    """The rdf:Bag of property `name` (made in the first rdf:Description when missing)."""
    prop = rdf.find(f".//{_q(namespace, name)}")
    if prop is None:
        description = rdf.find(_q(NS_RDF, "Description"))
        if description is None:
            description = ET.SubElement(rdf, _q(NS_RDF, "Description"), {_q(NS_RDF, "about"): ""})
        prop = ET.SubElement(description, _q(namespace, name))
    bag = prop.find(_q(NS_RDF, "Bag"))
    if bag is None:
        bag = prop.find(_q(NS_RDF, "Seq"))
    if bag is None:
        bag = ET.SubElement(prop, _q(NS_RDF, "Bag"))
    return bag


def _remove_property(rdf: ET.Element, namespace: str, name: str) -> None:
    for description in rdf.iter(_q(NS_RDF, "Description")):
        for prop in description.findall(_q(namespace, name)):
            description.remove(prop)


def _items(bag: ET.Element) -> list[ET.Element]:
    return bag.findall(_q(NS_RDF, "li"))


def _add_item(bag: ET.Element, text: str) -> None:
    item = ET.SubElement(bag, _q(NS_RDF, "li"))
    item.text = text


def merge_keywords(
    existing: bytes | None, keywords: Iterable[str], replaces: Iterable[str]
) -> bytes:
    """The sidecar `existing` (None: a new one) with `keywords` added to lr:hierarchicalSubject
    and their flat terms (`_flat_term`: leaves, verdicts excepted) to dc:subject; hierarchical
    keywords starting with a prefix of `replaces` are removed first, with their flat leaves
    where no other keyword holds them, and so are flat verdicts where a Quadrat verdict is
    in the hierarchy. Everything else in the document is kept. Raises `SidecarUnreadable` for
    a document that is not XMP."""
    keywords = list(keywords)
    root, rdf = _parsed(existing)
    removed, verdicts, kept = _merge_hierarchy(rdf, keywords, tuple(replaces))
    terms = {t for t in (_flat_term(k) for k in kept) if t is not None}
    stale = removed | ({RELEVANT, NOT_RELEVANT} if verdicts else set())
    new_terms = [t for t in (_flat_term(k) for k in keywords) if t is not None]
    if new_terms or rdf.find(f".//{_q(NS_DC, 'subject')}") is not None:
        _merge_flat(rdf, new_terms, stale, terms)
    ET.indent(root, space=" ")
    body = ET.tostring(root, encoding="unicode")
    return (_PACKET_BEGIN + body + _PACKET_END).encode("utf-8")


def _parsed(existing: bytes | None) -> tuple[ET.Element, ET.Element]:
    """(document root, its rdf:RDF) of a sidecar, or of a new one for None or blank bytes;
    `SidecarUnreadable` for a document that is not XMP."""
    if existing is None or not existing.strip(b"\x00 \t\r\n"):
        _register_prefixes(b"<x/>")
        root = _new_document()
    else:
        data = existing.strip(b"\x00 \t\r\n")
        _register_prefixes(data)
        try:
            # Comments and processing instructions inside the document are kept too.
            parser = ET.XMLParser(target=ET.TreeBuilder(insert_comments=True, insert_pis=True))
            root = ET.fromstring(data, parser=parser)
        except ET.ParseError as exc:
            raise SidecarUnreadable(str(exc)) from None
    rdf = root if root.tag == _q(NS_RDF, "RDF") else root.find(f".//{_q(NS_RDF, 'RDF')}")
    if rdf is None:
        raise SidecarUnreadable("no rdf:RDF element")
    return root, rdf


def _merge_hierarchy(
    rdf: ET.Element, keywords: list[str], replaces: tuple[str, ...]
) -> tuple[set[str], bool, set[str]]:
    """lr:hierarchicalSubject with the keywords under `replaces` taken out and `keywords`
    added: (the leaves taken out, whether a verdict was or is there, the keywords kept)."""
    hierarchical = _bag(rdf, NS_LR, "hierarchicalSubject")
    removed: set[str] = set()
    verdicts = False
    for item in _items(hierarchical):
        text = item.text or ""
        if text.startswith(replaces) and text not in keywords:
            hierarchical.remove(item)
            removed.add(_leaf(text))
            verdicts = verdicts or _is_verdict(text)
    kept = {item.text or "" for item in _items(hierarchical)}
    for keyword in keywords:
        if keyword not in kept:
            _add_item(hierarchical, keyword)
            kept.add(keyword)
    verdicts = verdicts or any(_is_verdict(k) for k in kept)
    return removed, verdicts, kept


def _merge_flat(rdf: ET.Element, new_terms: list[str], stale: set[str], terms: set[str]) -> None:
    """dc:subject with the `stale` terms no kept keyword holds (`terms`) taken out and
    `new_terms` added; emptied, it goes rather than stay an empty bag."""
    flat = _bag(rdf, NS_DC, "subject")
    for item in _items(flat):
        if (item.text or "") in stale and item.text not in terms:
            flat.remove(item)
    have = {item.text or "" for item in _items(flat)}
    for term in new_terms:
        if term not in have:
            _add_item(flat, term)
            have.add(term)
    if not have:
        _remove_property(rdf, NS_DC, "subject")


# -- writing a query's sidecars -----------------------------------------------------------


@dataclass
class SidecarReport:
    """What `write_sidecars` did."""

    written: int = 0  # sidecars written beside their photos
    mirrored: int = 0  # sidecars written into the mirror folder
    mirror: Path | None = None
    read_only_folders: list[str] = field(default_factory=list)
    missing: int = 0  # judged photos not on disk: no sidecar
    unreadable: list[str] = field(default_factory=list)  # existing sidecars left untouched
    paths: list[Path] = field(default_factory=list)

    def lines(self) -> list[str]:
        """The report in a few lines: what was written, where, and what was not."""
        out = [f"{self.written + self.mirrored} XMP sidecars written"]
        if self.mirrored and self.mirror is not None:
            folders = len(self.read_only_folders)
            out.append(
                f"{self.mirrored} went into the mirror folder {self.mirror}: "
                f"{folders} photo folder{'s' * (folders != 1)} cannot be written "
                f"({self.read_only_folders[0]}{', ...' if folders > 1 else ''})"
            )
        if self.missing:
            out.append(f"{self.missing} judged photos are missing from disk: no sidecar")
        if self.unreadable:
            out.append(
                f"{len(self.unreadable)} existing sidecars are not XMP Quadrat can update and "
                f"were left as they are ({self.unreadable[0]})"
            )
        return out


class SidecarWriteError(QuadratError):
    """A sidecar write the system refused (a full disk, a read-only mirror, no permission):
    the run stopped there, in one line. `report` holds what was written before it."""

    def __init__(self, message: str, report: SidecarReport) -> None:
        super().__init__(message)
        self.report = report


def _writable(folder: Path) -> bool:
    """Whether a new file can be made in `folder` (tried, not guessed: os.access says yes to
    root on a read-only mount and no on some network shares that accept writes). A full disk
    raises: its sidecars would fail in the mirror folder just the same."""
    probe = folder / f".quadrat-write-test-{os.getpid()}"
    try:
        probe.open("xb").close()
    except OSError as error:
        if disk_full(error):
            raise
        return False
    with contextlib.suppress(OSError):
        probe.unlink()
    return True


def _stopped(
    error: OSError, target: Path, photo: Path, mirrored: bool, report: SidecarReport, left: int
) -> SidecarWriteError:
    """The one line of a run stopped by a refused write: what, where, why, how many sidecars
    were written and how many were not, and that nothing was lost."""
    folder = target.parent
    cause = write_cause(error, folder)
    where = (
        f"the mirror folder {folder} (the photo's folder {photo.parent} cannot be written)"
        if mirrored
        else str(folder)
    )
    written = report.written + report.mirrored
    log.info("writing the sidecar %s failed: %s", target, error)
    return SidecarWriteError(
        f"could not write the XMP sidecar of {photo.name} to {where}: {cause}; "
        f"{written} of {written + left} sidecars written, {left} not; nothing was lost: every "
        "sidecar is whole, as it was or updated, and writing them again finishes the rest",
        report,
    )


def default_mirror(library: Library) -> Path:
    """Where sidecars go for read-only folders when no mirror is named."""
    return Path(library.root) / "sidecars"


def _read_existing(path: Path) -> bytes | None:
    """The sidecar at `path` (None when there is none); `SidecarUnreadable` for one over the
    bound or that is no regular file (a FIFO would block the write forever)."""
    try:
        with open_regular(path) as handle:
            data = handle.read(_SIDECAR_MAX_BYTES + 1)
    except FileNotFoundError:
        return None
    except NotARegularFile:
        raise SidecarUnreadable("not a regular file") from None
    except OSError as error:  # no permission to read it: it cannot be updated either
        raise SidecarUnreadable(error.strerror or str(error)) from None
    if len(data) > _SIDECAR_MAX_BYTES:
        raise SidecarUnreadable(f"over {_SIDECAR_MAX_BYTES >> 20} MB")
    return data


def write_sidecars(
    library: Library,
    query_id: int,
    mirror: str | Path | None = None,
    progress: ProgressCallback = no_progress,
    cancel: CancelToken | None = None,
) -> SidecarReport:
    """Write the query's judgments and attributes into the judged photos' sidecars (see the
    module's docstring); folders that cannot be written send theirs to `mirror` (default:
    the library's `sidecars` folder). Never writes a photo. A refused write stops the run:
    `SidecarWriteError`, whose one line says how many were written and how many not."""
    with library.catalog.session() as s:
        query = s.get(Query, query_id)
        if query is None:
            raise BadInputError(f"no saved query with id {query_id}")
        query_text = query.text
        rows = s.execute(
            select(
                Judgment.image_id,
                Judgment.relevance,
                Image.rel_path,
                Image.status,
                Collection.root,
                Collection.name,
            )
            .join(Image, Image.id == Judgment.image_id)
            .join(Collection, Collection.id == Image.collection_id)
            .where(Judgment.query_id == query_id)
            .order_by(Collection.root, Image.rel_path)
        ).all()
    attributes = attributes_for_query(library, query_id)
    mirror_root = Path(mirror).expanduser() if mirror is not None else default_mirror(library)
    report = SidecarReport()
    writable: dict[Path, bool] = {}
    swept: set[Path] = set()  # folders cleared of a killed run's temporary files
    for done, row in enumerate(rows):
        if cancel is not None:
            cancel.check()
        progress(Progress(done, len(rows), message="writing XMP sidecars"))
        root = library.photo_root(row.root)
        photo = root / row.rel_path
        if row.status != STATUS_OK or not photo.is_file():
            report.missing += 1
            continue
        keywords, replaces = judgment_keywords(
            query_text, row.relevance, attributes.get(row.image_id, {})
        )
        folder = photo.parent
        target = folder / sidecar_names(photo.name)[0]
        try:
            if folder not in writable:
                writable[folder] = _writable(folder)
                if not writable[folder]:
                    report.read_only_folders.append(str(folder))
            if writable[folder]:
                target = _sidecar_beside(photo)
            else:
                relative = PurePosixPath(row.name or Path(row.root).name) / row.rel_path
                target = mirror_root / Path(str(relative) + ".xmp")
            try:
                merged = merge_keywords(_read_existing(target), keywords, replaces)
            except SidecarUnreadable as exc:
                log.warning("sidecar %s left as it is: %s", target, exc)
                report.unreadable.append(str(target))
                continue
            if target.parent not in swept:
                remove_stale_temps(target.parent, _TEMP)
                swept.add(target.parent)
            write_whole(target, merged)
        except OSError as error:
            mirrored = not writable.get(folder, True)
            raise _stopped(error, target, photo, mirrored, report, len(rows) - done) from error
        report.paths.append(target)
        if writable[folder]:
            report.written += 1
        else:
            report.mirrored += 1
            report.mirror = mirror_root
    progress(Progress(len(rows), len(rows), message="writing XMP sidecars"))
    for line in report.lines():
        log.info("%s", line)
    return report


def _sidecar_beside(photo: Path) -> Path:
    """The sidecar the photo has (`photo.jpg.xmp`, else `photo.xmp`), or the new name."""
    sidecars: dict[str, os.DirEntry[str]] = {}
    names = {n.lower() for n in sidecar_names(photo.name)}
    with os.scandir(photo.parent) as entries:
        for entry in entries:
            if entry.name.lower() in names:
                sidecars[entry.name.lower()] = entry
    found = find_sidecar(photo.name, sidecars)
    return Path(found.path) if found is not None else photo.with_name(sidecar_names(photo.name)[0])
