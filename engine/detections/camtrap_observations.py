"""The observations of a Camtrap DP 1.0 package as detections on indexed photos.

Each media row is matched to an indexed photo by its `filePath`: a path relative to the
package (or an absolute one, read through the library's root map) names a photo inside a
collection; a URL is matched by the media's file name (`fileName`, else the URL's last part)
among the photos of one collection (or of every collection), where exactly one photo has that
name. Every media row that matches no photo is said in one line.

Observations become detections of source kind "camtrap-dp", one source per package, so that
importing the package again replaces what the earlier import wrote:

- media level: the box (`bboxX`..`bboxHeight`, normalised, origin top left) when given, else a
  whole-photo label; `observationType` animal, human, vehicle as the category animal, person,
  vehicle (unknown: no category); `scientificName` as the label, `classificationProbability`
  its probability, `classificationMethod`, `observationID`, `count`;
- "blank": the photo was looked at and nothing was there (an empty frame);
- "unclassified": nobody has looked yet, so the photo stays unknown (no frame);
- event level (no mediaID): the event's media (the deployment's media timed from `eventStart`
  to `eventEnd`, and those of its media-level observations) get it as a whole-photo label,
  except media that have media-level observations of their own, which already say more.

A detection's confidence is that someone saw it: 1 for a person's classification, the
classifier's probability for a machine's (1 when it gave none), so a frame with an observed
animal is never "empty" at a detector's threshold.

Both tables are read one row at a time; what is kept is a map of matched media (and each
deployment's media times, for events) and the detections until they are written, in one
transaction: a cancel or a failure leaves the earlier import whole.
"""

from __future__ import annotations

import bisect
import os
import posixpath
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from sqlalchemy import select

from engine.catalog.library import Library
from engine.catalog.models import Collection, Image
from engine.detections.camtrap_package import (
    Package,
    is_absolute,
    is_url,
    media_name,
    open_package,
    parse_number,
    parse_time,
)
from engine.detections.records import ANIMAL, PERSON, VEHICLE, Box, DetectionRecord, FrameRecord
from engine.detections.store import replace_source, write_frames
from engine.errors import BadInputError, QuadratError
from engine.files import file_sha256
from engine.progress import CancelToken, ProgressCallback, RateMeter, no_progress

KIND = "camtrap-dp"
CATEGORIES = {"animal": ANIMAL, "human": PERSON, "vehicle": VEHICLE}
BLANK, UNKNOWN, UNCLASSIFIED = "blank", "unknown", "unclassified"
_CHUNK = 500  # paths per IN (...): well under SQLite's bound-parameter limit
_WRITE_BATCH = 2_000  # frames per insert
_AMBIGUOUS = -1


@dataclass
class CamtrapObservationsReport:
    """What an import of a package's observations found and wrote."""

    package: Path
    media: int = 0  # rows of media.csv
    matched: int = 0  # of them matched to an indexed photo
    unmatched: list[str] = field(default_factory=list)  # one line per media row not matched
    observations: int = 0  # rows of observations.csv
    detections: int = 0  # written (boxes and whole-photo labels)
    frames: int = 0  # photos written as looked at
    empty_frames: int = 0  # of them with nothing seen (blank)
    event_labels: int = 0  # detections given to an event's media by an event-level row
    unclassified: int = 0  # observations nobody classified yet: not written
    without_photo: int = 0  # media-level observations whose media matched no photo
    bad_boxes: int = 0  # boxes that were not boxes: kept as whole-photo labels
    classifiers: set[str] = field(default_factory=set)  # classifiedBy of machine observations

    def summary(self) -> str:
        """The outcome in one line."""
        parts = [
            f"Camtrap DP observations read from {self.package}: {self.matched:,} of "
            f"{self.media:,} media matched, {self.detections:,} detections on {self.frames:,} "
            f"photos ({self.empty_frames:,} blank)"
        ]
        if self.event_labels:
            parts.append(f"{self.event_labels:,} labels from event-level observations")
        if self.unclassified:
            parts.append(f"{self.unclassified:,} unclassified observations left out")
        if self.without_photo:
            parts.append(f"{self.without_photo:,} observations of unmatched media left out")
        if self.bad_boxes:
            parts.append(f"{self.bad_boxes:,} unusable boxes read as whole-photo labels")
        return "; ".join(parts)

    def lines(self) -> list[str]:
        """The summary, then one line per unmatched media row."""
        return [self.summary(), *self.unmatched]


class MediaMatcher:
    """Media rows to indexed photos (module docstring): relative and absolute paths in batches,
    URLs by file name within `collection` (a folder; every collection when None)."""

    def __init__(self, library: Library, folder: Path, collection: Path | None = None) -> None:
        self.library = library
        self.folder = folder
        with library.catalog.session() as s:
            rows = list(s.execute(select(Collection.id, Collection.root)))
        # Each collection by its root as recorded and as found here, longest first.
        roots: list[tuple[str, int]] = []
        for collection_id, root in rows:
            for text in {root, str(library.photo_root(root))}:
                roots.append((_posix(text), collection_id))
        self._roots = sorted(roots, key=lambda r: -len(r[0]))
        self._scope: list[int] | None = None
        if collection is not None:
            self._scope = [self._collection_of(_posix(str(collection.expanduser().resolve())))]
        self._names: dict[str, int] | None = None

    def _collection_of(self, path: str) -> int:
        for root, collection_id in self._roots:
            if path == root:
                return collection_id
        raise BadInputError(f"{path} is not an indexed collection's folder")

    def locate(self, file_path: str) -> tuple[int, str] | None:
        """(collection id, path in it) of a relative or absolute filePath, or None when it
        lies in no collection."""
        base = file_path if is_absolute(file_path) else f"{_posix(str(self.folder))}/{file_path}"
        full = _posix(posixpath.normpath(base.replace("\\", "/")))
        for root, collection_id in self._roots:
            if full.startswith(root + "/") or (root == "/" and full.startswith("/")):
                return collection_id, full[len(root) :].lstrip("/")
        return None

    def by_paths(self, wanted: Sequence[tuple[int, str]]) -> dict[tuple[int, str], int]:
        """Photo ids of (collection id, path) pairs, those the catalog has."""
        found: dict[tuple[int, str], int] = {}
        by_collection: dict[int, list[str]] = defaultdict(list)
        for collection_id, rel in wanted:
            by_collection[collection_id].append(rel)
        with self.library.catalog.session() as s:
            for collection_id, rels in by_collection.items():
                for start in range(0, len(rels), _CHUNK):
                    for image_id, rel in s.execute(
                        select(Image.id, Image.rel_path).where(
                            Image.collection_id == collection_id,
                            Image.rel_path.in_(rels[start : start + _CHUNK]),
                        )
                    ):
                        found[(collection_id, rel)] = image_id
        return found

    def by_name(self, name: str) -> int | None:
        """The photo of that file name in scope; None when none or several have it."""
        if self._names is None:
            self._names = {}
            statement = select(Image.id, Image.rel_path)
            if self._scope is not None:
                statement = statement.where(Image.collection_id.in_(self._scope))
            with self.library.catalog.session() as s:
                for image_id, rel in s.execute(statement):
                    key = rel.rpartition("/")[2]
                    self._names[key] = _AMBIGUOUS if key in self._names else image_id
        found = self._names.get(name)
        return None if found is None or found == _AMBIGUOUS else found

    def name_is_ambiguous(self, name: str) -> bool:
        return self._names is not None and self._names.get(name) == _AMBIGUOUS


def _posix(text: str) -> str:
    text = text.replace("\\", "/")
    return text if text == "/" else text.rstrip("/")


@dataclass
class MatchedMedia:
    """The package's media rows matched to photos, and each deployment's media by time."""

    images: dict[str, int] = field(default_factory=dict)  # mediaID -> photo id
    times: dict[str, list[tuple[float, int]]] = field(default_factory=dict)  # by deploymentID

    def in_range(self, deployment: str, start: float, end: float) -> list[int]:
        frames = self.times.get(deployment, [])
        low = bisect.bisect_left(frames, (start, -1))
        high = bisect.bisect_right(frames, (end, float("inf")))
        return [image_id for _, image_id in frames[low:high]]


def match_media(
    package: Package,
    matcher: MediaMatcher,
    report: CamtrapObservationsReport,
    cancel: CancelToken,
) -> MatchedMedia:
    """Read media.csv and match each row to a photo (unmatched ones said in `report`)."""
    matched = MatchedMedia()
    times: dict[str, list[tuple[float, int]]] = defaultdict(list)
    pending: list[tuple[dict[str, str], tuple[int, str]]] = []

    def resolve() -> None:
        found = matcher.by_paths([where for _, where in pending])
        for row, where in pending:
            image_id = found.get(where)
            if image_id is None:
                _unmatched(report, row, f"no indexed photo at {row['filePath']}")
            else:
                _matched(matched, times, report, row, image_id)
        pending.clear()

    for row in package.rows("media"):
        report.media += 1
        media_id, file_path = row.get("mediaID", ""), row.get("filePath", "")
        if not media_id:
            _unmatched(report, row, "no mediaID")
            continue
        if is_url(file_path):
            name = media_name(file_path, row.get("fileName", ""))
            image_id = matcher.by_name(name)
            if image_id is None:
                why = (
                    f"several indexed photos are named {name}"
                    if matcher.name_is_ambiguous(name)
                    else f"no indexed photo named {name} (its file is at {file_path})"
                )
                _unmatched(report, row, why)
            else:
                _matched(matched, times, report, row, image_id)
            continue
        where = matcher.locate(file_path) if file_path else None
        if where is None:
            _unmatched(report, row, f"{file_path or 'no filePath'} is in no indexed collection")
            continue
        pending.append((row, where))
        if len(pending) >= _CHUNK:
            cancel.check()
            resolve()
    resolve()
    for deployment, frames in times.items():
        frames.sort()
        matched.times[deployment] = frames
    return matched


def _matched(
    matched: MatchedMedia,
    times: dict[str, list[tuple[float, int]]],
    report: CamtrapObservationsReport,
    row: dict[str, str],
    image_id: int,
) -> None:
    report.matched += 1
    matched.images[row["mediaID"]] = image_id
    moment = parse_time(row.get("timestamp", ""))
    if moment is not None:
        times[row.get("deploymentID", "")].append((_seconds(moment), image_id))


def _unmatched(report: CamtrapObservationsReport, row: dict[str, str], why: str) -> None:
    report.unmatched.append(f"media {row.get('mediaID') or '?'}: {why}")


def _seconds(moment: datetime) -> float:
    """Seconds since the epoch; a time without an offset is read as UTC (no better guess)."""
    if moment.tzinfo is None:
        return (moment - datetime(1970, 1, 1)).total_seconds()
    return moment.timestamp()


# --- observations ---------------------------------------------------------------------------


@dataclass
class _EventObservation:
    event_id: str
    deployment: str
    start: float | None
    end: float | None
    record: DetectionRecord | None  # None: blank


def observation_record(row: dict[str, str], report: CamtrapObservationsReport) -> DetectionRecord:
    """A detection of an animal, human, vehicle or unknown observation row."""
    method = row.get("classificationMethod", "").lower() or None
    probability = parse_number(row.get("classificationProbability", ""))
    if probability is not None and not 0 <= probability <= 1:
        probability = None
    label = row.get("scientificName") or None
    confidence = 1.0 if method == "human" or probability is None else probability
    return DetectionRecord(
        box=_box(row, report),
        category=CATEGORIES.get(row.get("observationType", "").lower()),
        confidence=confidence,
        label=label,
        label_probability=probability if label else None,
        classification_method=method if method in ("human", "machine") else None,
        observation_id=row.get("observationID") or None,
        count=_count(row.get("count", "")),
    )


def _box(row: dict[str, str], report: CamtrapObservationsReport) -> Box | None:
    cells = [row.get(name, "") for name in ("bboxX", "bboxY", "bboxWidth", "bboxHeight")]
    if not any(cells):
        return None
    values = [parse_number(cell) for cell in cells]
    try:
        if any(v is None for v in values):
            raise BadInputError("not four numbers")
        x, y, width, height = (float(v or 0) for v in values)
        return Box.checked(x, y, width, height)
    except BadInputError:
        report.bad_boxes += 1
        return None


def _count(text: str) -> int | None:
    try:
        value = int(text)
    except ValueError:
        return None
    return value if value >= 0 else None


def read_observations(
    package: Package,
    matched: MatchedMedia,
    report: CamtrapObservationsReport,
    cancel: CancelToken,
) -> dict[int, list[DetectionRecord]]:
    """Every matched photo's detections (an empty list: blank), from observations.csv."""
    frames: dict[int, list[DetectionRecord]] = {}
    events: list[_EventObservation] = []
    for number, row in enumerate(package.rows("observations"), 1):
        if number % 10_000 == 0:
            cancel.check()
        report.observations += 1
        kind = row.get("observationType", "").lower()
        if row.get("classificationMethod", "").lower() == "machine" and row.get("classifiedBy"):
            report.classifiers.add(row["classifiedBy"])
        if kind == UNCLASSIFIED:
            report.unclassified += 1
            continue
        media_id = row.get("mediaID", "")
        level = row.get("observationLevel", "").lower() or ("media" if media_id else "event")
        if level == "event" or not media_id:
            start, end = parse_time(row.get("eventStart", "")), parse_time(row.get("eventEnd", ""))
            events.append(
                _EventObservation(
                    row.get("eventID", ""),
                    row.get("deploymentID", ""),
                    _seconds(start) if start else None,
                    _seconds(end) if end else None,
                    None if kind == BLANK else observation_record(row, report),
                )
            )
            continue
        image_id = matched.images.get(media_id)
        if image_id is None:
            report.without_photo += 1
            continue
        found = frames.setdefault(image_id, [])
        if kind != BLANK:
            found.append(observation_record(row, report))
    _apply_events(events, matched, frames, report)
    return frames


def _apply_events(
    events: Iterable[_EventObservation],
    matched: MatchedMedia,
    frames: dict[int, list[DetectionRecord]],
    report: CamtrapObservationsReport,
) -> None:
    """Event-level observations onto the event's media without media-level ones."""
    observed = set(frames)  # media with observations of their own
    for event in events:
        if event.start is None or event.end is None:
            continue
        for image_id in matched.in_range(event.deployment, event.start, event.end):
            if image_id in observed:
                continue
            found = frames.setdefault(image_id, [])
            if event.record is not None:
                found.append(event.record)
                report.event_labels += 1


def read_camtrap_observations(
    library: Library,
    package_path: str | os.PathLike[str],
    progress: ProgressCallback = no_progress,
    cancel: CancelToken | None = None,
    *,
    collection: str | os.PathLike[str] | None = None,
) -> CamtrapObservationsReport:
    """Import the observations of the package at `package_path` (its folder or its
    datapackage.json) onto the library's photos (module docstring). `collection`: the folder
    whose photos URL media are matched to by name. Importing it again replaces the earlier
    import's detections."""
    cancel = cancel or CancelToken()
    package = open_package(package_path)
    report = CamtrapObservationsReport(package.descriptor_path)
    meter = RateMeter(3)
    progress(meter.update(0, "matching Camtrap DP media"))
    matcher = MediaMatcher(
        library, package.folder, Path(collection) if collection is not None else None
    )
    matched = match_media(package, matcher, report, cancel)
    progress(meter.update(1, "reading Camtrap DP observations"))
    frames = read_observations(package, matched, report, cancel)
    progress(meter.update(2, "writing detections"))
    write_detections(library, package, frames, report, cancel)
    progress(meter.update(3, "done"))
    return report


def write_detections(
    library: Library,
    package: Package,
    frames: dict[int, list[DetectionRecord]],
    report: CamtrapObservationsReport,
    cancel: CancelToken,
) -> None:
    """The package's source and its frames, replacing an earlier import, in one transaction."""
    models = sorted(report.classifiers)
    try:
        digest = file_sha256(package.tables["observations"])
    except OSError as error:
        raise QuadratError(f"cannot read {package.tables['observations']}: {error}") from error
    with library.catalog.session() as s:
        source = replace_source(
            s,
            KIND,
            str(package.descriptor_path),
            sha256=digest,
            model="; ".join(models) or None,
        )
        batch: list[FrameRecord] = []
        for image_id, records in frames.items():
            batch.append(FrameRecord(image_id, tuple(records)))
            report.frames += 1
            report.empty_frames += not records
            if len(batch) >= _WRITE_BATCH:
                cancel.check()  # raising here rolls the whole import back
                report.detections += write_frames(s, source, batch)
                batch.clear()
        report.detections += write_frames(s, source, batch)
