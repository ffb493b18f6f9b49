"""Importing detector and classifier output onto an indexed collection.

An `Importer` (kind, how to recognise its files, how to read one) turns a file into `Entry`s:
a path as the file names it and what the source found there. `import_detections` matches each
entry to an indexed photo (`PhotoMatcher`: through the library's root map, relative to a
collection root, or by a unique match of the path's last components) and writes the frames in
batches, one transaction each, under a source marked as being imported (`PENDING`). Only the
last transaction drops the file's earlier import and takes the mark off, so readers see the
earlier import whole until the new one is complete; a run killed part-way leaves a pending
source that no reader counts and the next import of the file deletes.

Files are streamed (`ijson`): a million-image file is never held in memory, and neither is the
catalog's path list (the matcher keeps 64-bit hashes of the paths in numpy arrays).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING

import numpy as np
from sqlalchemy import delete, func, select, update

from engine.catalog.models import Collection, DetectionSource, Image, utcnow
from engine.detections import megadetector, speciesnet
from engine.detections.reading import Entry, Importer, Reading
from engine.detections.records import DEFAULT_THRESHOLD, FrameRecord
from engine.detections.store import PENDING, imported, replace_source, write_frames
from engine.errors import BadInputError, QuadratError
from engine.progress import CancelToken, ProgressCallback, RateMeter, no_progress

if TYPE_CHECKING:
    from engine.catalog.db import Catalog
    from engine.catalog.library import Library, RootMap

BATCH = 5000  # frames per transaction: a few seconds of work, little memory
SHOWN_UNMATCHED = 300  # unmatched lines kept in the report; more go to a file
_SNIFF_BYTES = 64 * 1024


# The importers by kind: the built-in ones; `register` adds more.
_IMPORTERS: dict[str, Importer] = {i.kind: i for i in (megadetector.IMPORTER, speciesnet.IMPORTER)}


def register(importer: Importer) -> Importer:
    """Add an importer to the registry (a later one of the same kind replaces it)."""
    _IMPORTERS[importer.kind] = importer
    return importer


def importers() -> dict[str, Importer]:
    """Every importer by kind."""
    return dict(_IMPORTERS)


def importer_for(path: Path, kind: str = "auto") -> Importer:
    """The importer of `kind`, or (auto) the one that recognises the file's first bytes."""
    known = importers()
    if kind != "auto":
        if kind not in known:
            raise BadInputError(
                f"no importer for {kind!r}; the kinds are auto, {', '.join(sorted(known))}"
            )
        return known[kind]
    try:
        with path.open("rb") as stream:
            head = stream.read(_SNIFF_BYTES).decode("utf-8", errors="replace")
    except OSError as error:
        raise BadInputError(f"cannot read {path}: {error.strerror or error}") from None
    for importer in known.values():
        if importer.sniff(head):
            return importer
    raise BadInputError(
        f"{path}: not a file Quadrat recognises ({', '.join(sorted(known))}); "
        "name the format with --format"
    )


# -- matching file paths to photos ------------------------------------------------------------

_DRIVE = re.compile(r"^[A-Za-z]:[\\/]")


def windows_looking(path: str) -> bool:
    """Whether a path was written on Windows (a drive letter or backslashes): then compared
    without case, as Windows does."""
    return bool(_DRIVE.match(path)) or "\\" in path


def _parts(path: str) -> list[str]:
    return [p for p in path.replace("\\", "/").split("/") if p and p != "."]


def _key(collection_id: int, rel_path: str) -> int:
    # Python's 64-bit hash: a path not in a catalog of a million meets one of their hashes
    # with a chance of about 5 in 10**14 per look-up (10**6 of 2**64 values); a risk far below
    # a mistyped path's, for a sixth of the memory of a dict of the paths.
    return hash((collection_id, rel_path))


@dataclass(frozen=True)
class Match:
    image_id: int
    how: str  # "root map", "absolute", "relative", "suffix"


class _Lookup:
    """Sorted hashes and the ids under them: a dict of a million paths in 16 bytes each."""

    def __init__(self, hashes: np.ndarray, ids: np.ndarray) -> None:
        order = np.argsort(hashes, kind="stable")
        self.keys = hashes[order]
        self.ids = ids[order]

    def find(self, key: int) -> np.ndarray:
        left = int(np.searchsorted(self.keys, key, side="left"))
        right = int(np.searchsorted(self.keys, key, side="right"))
        return self.ids[left:right]

    def one(self, key: int) -> int | None:
        found = self.find(key)
        return int(found[0]) if len(found) == 1 else None


class PhotoMatcher:
    """Finds the indexed photo a path in a detector's file names. In order: the library's root
    map (a file made where the share is `D:\\traps`), a path inside a collection root as the
    catalog records it or as it lies here, a path relative to a collection root, then a unique
    match of the path's last components (the file's folders above the photo's differ); the
    folder of a suffix match is remembered, so its other photos are found directly."""

    def __init__(self, catalog: Catalog, root_map: RootMap | None) -> None:
        from engine.catalog.library import RootMap

        self._catalog = catalog
        self._root_map = root_map or RootMap()
        self.roots: list[tuple[int, str, str]] = []  # id, catalog root, folder here (posix)
        with catalog.session() as s:
            for cid, root in s.execute(select(Collection.id, Collection.root)):
                here = str(self._root_map.local(root)).replace("\\", "/").rstrip("/")
                self.roots.append((cid, root.replace("\\", "/").rstrip("/"), here))
            # Arrays filled in place: lists of a million Python ints would take ten times more.
            size = (s.scalar(select(func.count()).select_from(Image)) or 0) + 1024
            ids, exact, folded, names = (np.empty(size, dtype=np.int64) for _ in range(4))
            n = 0
            for image_id, cid, rel_path in s.execute(
                select(Image.id, Image.collection_id, Image.rel_path)
            ):
                if n == size:  # rows added since the count: grow
                    size *= 2
                    ids, exact, folded, names = (
                        np.resize(a, size) for a in (ids, exact, folded, names)
                    )
                ids[n] = image_id
                exact[n] = _key(cid, rel_path)
                folded[n] = _key(cid, rel_path.casefold())
                names[n] = hash(rel_path.rsplit("/", 1)[-1].casefold())
                n += 1
        self.max_id = int(ids[:n].max()) if n else 0
        self._exact = _Lookup(exact[:n], ids[:n])
        self._folded = _Lookup(folded[:n], ids[:n])
        self._names = _Lookup(names[:n], ids[:n])
        # A folder of the file (folded) -> (collection, folder in it) found by a suffix match.
        self._folders: dict[str, tuple[int, str]] = {}
        self._mapped_folders: dict[str, str] = {}  # a folder of the file -> through the root map

    def _at(self, cid: int, rel_path: str, fold: bool) -> int | None:
        found = self._exact.one(_key(cid, rel_path))
        if found is None and fold:
            found = self._folded.one(_key(cid, rel_path.casefold()))
        return found

    def match_all(self, paths: list[str]) -> list[Match | None]:
        """The photo each path names, and how it was found (None when none or several fit);
        the paths left to a suffix match are looked up together, in one read."""
        found: list[Match | None] = [self._direct(path) for path in paths]
        left = [n for n, match in enumerate(found) if match is None]
        if left:
            for n, image_id in zip(left, self._by_suffix([paths[n] for n in left]), strict=True):
                found[n] = Match(image_id, "suffix") if image_id is not None else None
        return found

    def match(self, path: str) -> Match | None:
        """The photo `path` names, and how it was found; None when none or several fit."""
        return self.match_all([path])[0]

    def _mapped(self, path: str) -> str:
        """`path` through the root map, its folder mapped once (a mapping is per folder)."""
        cut = max(path.rfind("/"), path.rfind("\\"))
        folder, name = (path[:cut], path[cut + 1 :]) if cut > 0 else (path, "")
        mapped = self._mapped_folders.get(folder)
        if mapped is None:
            if len(self._mapped_folders) > 100_000:  # bounded: a file of a million folders
                self._mapped_folders.clear()
            mapped = str(self._root_map.local(folder)).replace("\\", "/")
            self._mapped_folders[folder] = mapped
        return f"{mapped}/{name}" if name else mapped

    def _direct(self, path: str) -> Match | None:
        """The photo `path` names by the root map, a collection root, or a folder a suffix
        match found earlier; None when these do not find one."""
        fold = windows_looking(path)
        posix = path.replace("\\", "/")
        absolute = posix.startswith("/") or bool(_DRIVE.match(path))
        if absolute:
            mapped = self._mapped(path)
            tries = [(mapped, "root map")] if mapped != posix else []
            tries.append((posix, "absolute"))
            for candidate, how in tries:
                found = self._inside_roots(candidate, fold)
                if found is not None:
                    return Match(found, how)
        else:
            rel_path = "/".join(_parts(posix))
            for cid, _, _ in self.roots:
                found = self._at(cid, rel_path, fold)
                if found is not None:
                    return Match(found, "relative")
        found = self._in_known_folder(_parts(path), fold)
        return Match(found, "suffix") if found is not None else None

    def _in_known_folder(self, parts: list[str], fold: bool) -> int | None:
        known = self._folders.get("/".join(parts[:-1]).casefold()) if parts else None
        if known is None:
            return None
        cid, rel_folder = known
        return self._at(cid, f"{rel_folder}/{parts[-1]}" if rel_folder else parts[-1], fold)

    def _inside_roots(self, path: str, fold: bool) -> int | None:
        wanted = path.casefold() if fold else path
        for cid, catalog_root, here in self.roots:
            for root in (here, catalog_root):
                prefix = (root.casefold() if fold else root) + "/"
                if wanted.startswith(prefix):
                    found = self._at(cid, path[len(prefix) :], fold)
                    if found is not None:
                        return found
        return None

    def _by_suffix(self, paths: list[str]) -> list[int | None]:
        """Each path's photo by a unique match of its last components (in order, so a folder
        found for one path serves the next)."""
        split = [_parts(path) for path in paths]
        candidates: list[np.ndarray] = []
        for parts in split:
            ids = self._names.find(hash(parts[-1].casefold())) if parts else self._names.ids[:0]
            candidates.append(ids if len(ids) <= 1000 else ids[:0])
        wanted_ids = sorted({int(i) for ids in candidates for i in ids})
        rows: dict[int, tuple[int, str]] = {}
        if wanted_ids:
            with self._catalog.session() as s:
                for start in range(0, len(wanted_ids), 900):
                    chunk = wanted_ids[start : start + 900]
                    for image_id, cid, rel_path in s.execute(
                        select(Image.id, Image.collection_id, Image.rel_path).where(
                            Image.id.in_(chunk)
                        )
                    ):
                        rows[image_id] = (cid, rel_path)
        found: list[int | None] = []
        for path, parts, ids in zip(paths, split, candidates, strict=True):
            fold = windows_looking(path)
            known = self._in_known_folder(parts, fold)
            if known is not None:
                found.append(known)
            else:
                found.append(self._best_suffix(parts, fold, [(int(i), *rows[int(i)]) for i in ids]))
        return found

    def _best_suffix(
        self, parts: list[str], fold: bool, rows: list[tuple[int, int, str]]
    ) -> int | None:
        if not parts:
            return None
        wanted = [p.casefold() for p in parts] if fold else parts
        best, best_rows = 0, []
        for row in rows:
            theirs = row[2].split("/")
            theirs = [p.casefold() for p in theirs] if fold else theirs
            same = 0
            while same < min(len(theirs), len(wanted)) and theirs[-1 - same] == wanted[-1 - same]:
                same += 1
            if same > best:
                best, best_rows = same, [row]
            elif same == best and same:
                best_rows.append(row)
        if len(best_rows) != 1:
            return None
        image_id, cid, rel_path = best_rows[0]
        # Enough of the path agrees: the name and its folder, or all that one side has.
        if best < min(2, len(parts), len(rel_path.split("/"))):
            return None
        rel_folder = rel_path.rsplit("/", 1)[0] if "/" in rel_path else ""
        self._folders["/".join(parts[:-1]).casefold()] = (cid, rel_folder)
        return image_id


# -- the import -------------------------------------------------------------------------------


@dataclass
class ImportReport:
    """What an import did: frames written, boxes, how photos were matched, what was not."""

    source_id: int
    kind: str
    path: str
    model: str | None
    entries: int = 0
    frames: int = 0
    detections: int = 0
    failures: int = 0
    matched_by: dict[str, int] = field(default_factory=dict)
    unmatched: list[str] = field(default_factory=list)  # the first SHOWN_UNMATCHED lines
    unmatched_count: int = 0
    duplicates: int = 0  # entries naming a photo an earlier entry named (the first is kept)
    unmatched_file: Path | None = None  # every unmatched line, when there are many


@dataclass(frozen=True)
class _Frame(FrameRecord):
    """A frame whose highest confidence is the file's (boxes below the threshold included)."""

    file_max: float | None = None

    @property
    def max_confidence(self) -> float | None:
        return self.file_max


class _CountingReader:
    """A binary file that counts (and hashes) the bytes read, for progress and the source's
    sha256."""

    def __init__(self, stream: IO[bytes]) -> None:
        self._stream = stream
        self.done = 0
        self.sha256 = hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        data = self._stream.read(size)
        self.done += len(data)
        self.sha256.update(data)
        return data


def import_detections(
    library: Library,
    path: Path,
    *,
    kind: str = "auto",
    threshold: float = 0.0,
    progress: ProgressCallback = no_progress,
    token: CancelToken | None = None,
    unmatched_dir: Path | None = None,
    batch: int = BATCH,
) -> ImportReport:
    """Import the detector or classifier output in `path` onto the library's photos: see the
    module docstring. Boxes below `threshold` are left out (the frame keeps the file's highest
    confidence). Progress is counted in bytes of the file. Unmatched lines beyond
    `SHOWN_UNMATCHED` are written to a file in `unmatched_dir` (default: the library's
    `imports` folder). Bad input raises a one-line `BadInputError`; the earlier import of the
    same file, if any, is then left as it was."""
    if not 0.0 <= threshold <= 1.0:
        raise BadInputError(f"--threshold is a confidence from 0 to 1, got {threshold}")
    path = Path(path).expanduser().resolve()
    if not path.is_file():
        raise BadInputError(f"no such file: {path}")
    importer = importer_for(path, kind)
    token = token or CancelToken()
    catalog = library.catalog
    total = path.stat().st_size
    meter = RateMeter(total)
    with path.open("rb") as raw:
        stream = _CountingReader(raw)
        reading = importer.read(stream, path, threshold)
        matcher = PhotoMatcher(catalog, library.root_map)
        with catalog.session() as s:
            # A pending import of this file killed part-way goes now.
            source_id = replace_source(
                s, PENDING + importer.kind, str(path), model=reading.model,
                categories=reading.categories,
            )  # fmt: skip
        report = ImportReport(source_id, importer.kind, str(path), reading.model)
        claimed = bytearray(matcher.max_id + 1)
        spill = _UnmatchedLines(report, unmatched_dir or library.root / "imports", path)
        try:
            pending: list[Entry] = []
            for entry in reading.entries:
                report.entries += 1
                pending.append(entry)
                if len(pending) >= batch:
                    frames = _frames_of(pending, matcher, claimed, report, spill)
                    _write(catalog, source_id, frames, report)
                    pending = []
                    token.check()
                    progress(meter.update(stream.done))
            _write(catalog, source_id, _frames_of(pending, matcher, claimed, report, spill), report)
            token.check()
            if report.entries and not report.frames:
                # A wrong root map or library would otherwise replace a good import with nothing.
                raise BadInputError(
                    f"no photo {path.name} names is indexed in this library (none of "
                    f"{report.entries} entries found); index their folder first, or map the "
                    'folder they name to the one here (QUADRAT_MAP_ROOT="OLD=NEW")'
                )
            while stream.read(1 << 20):  # the rest of the file, for its checksum
                pass
            _finish(catalog, importer.kind, path, source_id, stream.sha256.hexdigest(), reading)
        except BaseException:
            _drop_pending(catalog, source_id)
            spill.close()
            raise
        spill.close()
    progress(meter.update(total))
    return report


def _frames_of(
    entries: list[Entry],
    matcher: PhotoMatcher,
    claimed: bytearray,
    report: ImportReport,
    spill: _UnmatchedLines,
) -> list[FrameRecord]:
    """The frames of a batch of entries matched to photos; the unmatched said in `spill`."""
    frames: list[FrameRecord] = []
    for entry, found in zip(entries, matcher.match_all([e.file for e in entries]), strict=True):
        if found is None:
            spill.add(f"{entry.where}: no indexed photo at this path")
            continue
        if claimed[found.image_id]:
            report.duplicates += 1
            spill.add(f"{entry.where}: names a photo an earlier entry named; skipped")
            continue
        claimed[found.image_id] = 1
        report.matched_by[found.how] = report.matched_by.get(found.how, 0) + 1
        if entry.failure is not None:
            report.failures += 1
        frames.append(_Frame(found.image_id, entry.detections, entry.failure, entry.max_confidence))
    return frames


def _write(
    catalog: Catalog, source_id: int, frames: list[FrameRecord], report: ImportReport
) -> None:
    if not frames:
        return
    with catalog.session() as s:
        report.detections += write_frames(s, source_id, frames)
    report.frames += len(frames)


def _finish(
    catalog: Catalog, kind: str, path: Path, source_id: int, sha256: str, reading: Reading
) -> None:
    """One transaction: the file's earlier import goes and the new one takes its place (with
    the category and label maps the reader completed while streaming)."""
    with catalog.session() as s:
        s.execute(
            delete(DetectionSource).where(
                DetectionSource.kind == kind, DetectionSource.path == str(path)
            )
        )
        s.execute(
            update(DetectionSource)
            .where(DetectionSource.id == source_id)
            .values(
                kind=kind,
                sha256=sha256,
                model=reading.model,
                categories=reading.categories,
                imported_at=utcnow(),
            )
        )


def _drop_pending(catalog: Catalog, source_id: int) -> None:
    try:
        with catalog.session() as s:
            s.execute(delete(DetectionSource).where(DetectionSource.id == source_id))
    except QuadratError:  # the catalog itself failed: the next import drops it
        pass


class _UnmatchedLines:
    """The unmatched lines: the first few hundred in the report; all of them in a file when
    there are more."""

    def __init__(self, report: ImportReport, folder: Path, source: Path) -> None:
        self._report = report
        self._folder = folder
        self._source = source
        self._file: IO[str] | None = None

    def add(self, line: str) -> None:
        report = self._report
        report.unmatched_count += 1
        if len(report.unmatched) < SHOWN_UNMATCHED:
            report.unmatched.append(line)
            return
        if self._file is None:
            self._folder.mkdir(parents=True, exist_ok=True)
            report.unmatched_file = self._folder / f"{self._source.stem}.unmatched.txt"
            self._file = report.unmatched_file.open("w", encoding="utf-8")
            self._file.writelines(f"{shown}\n" for shown in report.unmatched)
        self._file.write(f"{line}\n")

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


# -- what the catalog holds -------------------------------------------------------------------


@dataclass(frozen=True)
class SourceSummary:
    """One imported file: what it looked at and found, at a confidence threshold."""

    id: int
    kind: str
    path: str
    model: str | None
    frames: int  # photos it looked at
    failures: int  # of which it could not read
    empty: int  # looked at, read, nothing at the threshold or above
    boxes: dict[str, int]  # boxes at the threshold or above, per category
    labels: dict[str, int]  # frames or boxes per classifier label, most first


def summarise(catalog: Catalog, threshold: float = DEFAULT_THRESHOLD) -> list[SourceSummary]:
    """Every imported source (imports under way left out), oldest first."""
    from sqlalchemy import func, or_

    from engine.catalog.models import Detection, DetectionFrame

    found: list[SourceSummary] = []
    with catalog.session() as s:
        sources = s.scalars(
            select(DetectionSource).where(imported()).order_by(DetectionSource.id)
        ).all()
        for source in sources:
            frames = DetectionFrame.source_id == source.id
            looked = s.scalar(select(func.count()).where(frames)) or 0
            failed = s.scalar(
                select(func.count()).where(frames, DetectionFrame.failure.is_not(None))
            )
            below = or_(
                DetectionFrame.max_confidence.is_(None), DetectionFrame.max_confidence < threshold
            )
            empty = s.scalar(
                select(func.count()).where(frames, DetectionFrame.failure.is_(None), below)
            )
            ours = Detection.source_id == source.id
            boxes = s.execute(
                select(Detection.category, func.count())
                .where(ours, Detection.box_x.is_not(None), Detection.confidence >= threshold)
                .group_by(Detection.category)
                .order_by(func.count().desc())
            ).all()
            labels = s.execute(
                select(Detection.label, func.count())
                .where(ours, Detection.label.is_not(None))
                .where(or_(Detection.confidence.is_(None), Detection.confidence >= threshold))
                .group_by(Detection.label)
                .order_by(func.count().desc(), Detection.label)
            ).all()
            found.append(
                SourceSummary(
                    source.id,
                    source.kind,
                    source.path,
                    source.model,
                    looked,
                    failed or 0,
                    empty or 0,
                    {str(c): n for c, n in boxes},
                    {str(label): n for label, n in labels},
                )
            )
    return found
