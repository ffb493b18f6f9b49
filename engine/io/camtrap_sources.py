"""What a Camtrap DP package is made from, read from the catalog, and the three decisions made
per deployment before a row is written: which photos may go (their licence), when they were
taken (the UTC offset, or that it is unknown) and where the camera may be said to stand
(`engine.catalog.privacy.PlacePolicy`).

**Times.** A frame's time is its EXIF time with the UTC offset EXIF gave (`OffsetTimeOriginal`).
For frames without one, the deployment's time zone is taken where the user gave one (an IANA name
such as Europe/Brussels, or a fixed offset such as +01:00): the zone's offset at the deployment's
first frame, kept for the whole deployment, because a camera's clock is set once and does not
change for summer time (the standard's own example writes a deployment from March into April at
+01:00). A deployment over which the zone's offset changes says so in its comments. Without a
zone the offset is unknown: the frames keep their clock reading, written with a zero offset, and
the deployment's `timestampIssues` is true, as the standard defines it ("unknown timezone").

**Places.** A deployment's place is the mean of its photos' GPS, published through the catalog's
rule as one record holding every photo's privacy: withheld when any photo's record withholds its
place or a sensitive taxon of the lab's list asks it, generalised (to iNaturalist's 0.2° cell, or
the lab's grid) when any record asks to obscure it or a sensitive taxon asks it. The taxa are
every photo's taxon and lineage and the observations' scientific name.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from sqlalchemy import select

from engine.catalog import Judgment, Query
from engine.catalog.library import Library
from engine.catalog.models import (
    STATUS_OK,
    Collection,
    Deployment,
    DetectionSource,
    Image,
    Taxon,
)
from engine.catalog.privacy import (
    ACTION_GENERALISE,
    DEFAULT_GRID_KM,
    GENERALISED,
    KM_PER_DEGREE,
    OBSCURED_CELL_DEGREES,
    PlaceFacts,
    PlacePolicy,
    PublishedPlace,
)
from engine.detections.records import StoredDetection
from engine.detections.store import detections_of
from engine.errors import BadInputError
from engine.licences import Licence, read_licence

_CHUNK = 500  # ids per IN (...): SQLite's bound-parameter limit
_RANK_COLUMNS = ("kingdom", "phylum", "class_", "order", "family", "genus")


@dataclass
class Frame:
    """One photo of a deployment, as the package needs it."""

    image_id: int
    path: str  # where it is on this workstation (for the user)
    rel_path: str  # its path in its collection (media.csv's filePath)
    event_id: int | None
    local: datetime | None  # the clock's reading, corrected by the deployment's clock offset
    offset_minutes: int | None  # the UTC offset EXIF gave
    latitude: float | None
    longitude: float | None
    taxon: str | None
    lineage: tuple[str, ...]  # the taxon's higher names, kingdom down to genus
    licence: Licence
    facts: PlaceFacts
    moment: datetime | None = None  # aware: set by `set_times`
    offset_unknown: bool = False  # `moment` is the clock's reading written as UTC


@dataclass
class Verdict:
    """A photo's judgment for the query: the newest one (an adjudication where there is one),
    and each judge's own newest mark."""

    relevance: int
    judged_by: str | None
    judged_at: datetime
    marks: dict[str, int] = field(default_factory=dict)
    adjudicated: bool = False

    @property
    def agreement(self) -> float | None:
        """The share of two or more judges who judged the photo relevant (None with fewer)."""
        if len(self.marks) < 2:
            return None
        return sum(1 for mark in self.marks.values() if mark > 0) / len(self.marks)


@dataclass
class CameraDeployment:
    """A deployment holding a photo judged relevant, with every photo of it."""

    row: Deployment
    camera: str = ""  # "manufacturer-model"
    key: str = ""  # its deploymentID
    frames: list[Frame] = field(default_factory=list)
    timestamp_issues: bool = False
    time_note: str = ""


@dataclass
class Sources:
    """A query, its judgments, the deployments holding a relevant photo, and the detector's
    and classifier's detections on their photos (with each source's model)."""

    query: Query
    verdicts: dict[int, Verdict]
    deployments: dict[int, CameraDeployment]
    outside: list[tuple[int, str]]  # relevant photos in no deployment: (id, path)
    detections: dict[int, list[StoredDetection]] = field(default_factory=dict)  # by photo
    models: dict[int, str] = field(default_factory=dict)  # detection source id -> its model
    lineages: dict[str, tuple[str, ...]] = field(default_factory=dict)  # label -> its names


def _relevant_deployments(
    library: Library, relevant: Sequence[int]
) -> tuple[set[int], list[tuple[int, str]]]:
    """The deployments holding the relevant photos, and the relevant photos in none."""
    wanted: set[int] = set()
    outside: list[tuple[int, str]] = []
    with library.catalog.session() as s:
        for start in range(0, len(relevant), _CHUNK):
            chunk = list(relevant[start : start + _CHUNK])
            for image_id, deployment_id, rel, root in s.execute(
                select(Image.id, Image.deployment_id, Image.rel_path, Collection.root)
                .join(Collection, Collection.id == Image.collection_id)
                .where(Image.id.in_(chunk))
            ):
                if deployment_id is None:
                    outside.append((image_id, str(library.photo_root(root) / rel)))
                else:
                    wanted.add(deployment_id)
    return wanted, sorted(outside)


_FRAME_COLUMNS = (
    Image.id, Image.deployment_id, Image.rel_path, Image.event_id, Image.observed_at,
    Image.observed_utc_offset, Image.latitude, Image.longitude, Image.license,
    Image.geoprivacy, Image.taxon_geoprivacy, Image.coordinates_obscured,
    Image.location_withheld, Image.public_location_uncertainty, Image.camera_make,
    Image.camera_model, Image.taxon_id, Collection.root,
)  # fmt: skip


def _taxa(library: Library) -> dict[int, tuple[str, tuple[str, ...]]]:
    """Every taxon's name and its higher names, by id."""
    with library.catalog.session() as s:
        return {
            taxon.id: (
                taxon.name,
                tuple(str(n) for c in _RANK_COLUMNS if (n := getattr(taxon, c, None))),
            )
            for taxon in s.scalars(select(Taxon))
        }


def _frames(library: Library, wanted: set[int]) -> dict[int, CameraDeployment]:
    """The deployments `wanted` with all their photos, in time order (columns, not rows: a
    season of a camera is tens of thousands of frames)."""
    deployments: dict[int, CameraDeployment] = {}
    taxa = _taxa(library)
    licences: dict[str | None, Licence] = {}
    with library.catalog.session() as s:
        for made in s.scalars(
            select(Deployment).where(Deployment.id.in_(sorted(wanted))).order_by(Deployment.id)
        ):
            s.expunge(made)
            deployments[made.id] = CameraDeployment(made)
        rows = s.execute(
            select(*_FRAME_COLUMNS)
            .join(Collection, Collection.id == Image.collection_id)
            .where(Image.deployment_id.in_(sorted(wanted)), Image.status == STATUS_OK)
            .order_by(Image.deployment_id, Image.observed_at, Image.id)
        ).all()
    for row in rows:
        deployment = deployments.get(row.deployment_id or 0)
        if deployment is None:  # no row for it (no foreign key): not a deployment to write
            continue
        if row.license not in licences:
            licences[row.license] = read_licence(row.license)
        taxon, lineage = taxa.get(row.taxon_id or 0, (None, ()))
        deployment.frames.append(
            Frame(
                row.id,
                str(library.photo_root(row.root) / row.rel_path),
                row.rel_path,
                row.event_id,
                row.observed_at,
                row.observed_utc_offset,
                row.latitude,
                row.longitude,
                taxon,
                lineage,
                licences[row.license],
                PlaceFacts(
                    row.geoprivacy,
                    row.taxon_geoprivacy,
                    row.coordinates_obscured,
                    row.location_withheld,
                    row.public_location_uncertainty,
                ),
            )
        )
        if not deployment.camera and (row.camera_make or row.camera_model):
            # Camtrap DP asks for "manufacturer-model".
            parts = (row.camera_make, row.camera_model)
            deployment.camera = "-".join(part for part in parts if part)
    return deployments


def _verdicts(library: Library, query_id: int) -> dict[int, Verdict]:
    from engine.judgments.adjudication import adjudications
    from engine.judgments.agreement import judge_ratings

    with library.catalog.session() as s:
        verdicts = {
            image_id: Verdict(relevance, by, at)
            for image_id, relevance, by, at in s.execute(
                select(
                    Judgment.image_id, Judgment.relevance, Judgment.judged_by, Judgment.judged_at
                ).where(Judgment.query_id == query_id)
            )
        }
    for image_id, marks in judge_ratings(library, query_id).items():
        if image_id in verdicts:
            verdicts[image_id].marks = marks
    for image_id in adjudications(library, query_id):
        if image_id in verdicts:
            verdicts[image_id].adjudicated = True
    return verdicts


def _detections(
    library: Library, deployments: Iterable[CameraDeployment], min_confidence: float | None
) -> tuple[dict[int, list[StoredDetection]], dict[int, str]]:
    """The detections on the deployments' photos (boxes below `min_confidence` left out;
    labels without a confidence kept) and the model of each source they came from."""
    ids = [frame.image_id for deployment in deployments for frame in deployment.frames]
    with library.catalog.session() as s:
        found = detections_of(s, ids, min_confidence=min_confidence)
        models = {
            int(source_id): str(model or "")
            for source_id, model in s.execute(select(DetectionSource.id, DetectionSource.model))
        }
    return found, models


def read_sources(
    library: Library, query_id: int, *, min_confidence: float | None = None
) -> Sources:
    """The query, its judgments, the deployments holding a relevant photo and the detections
    on their photos at `min_confidence` (BadInputError for a query that does not exist)."""
    with library.catalog.session() as s:
        query = s.get(Query, query_id)
        if query is None:
            raise BadInputError(f"no saved query with id {query_id}")
        s.expunge(query)
    verdicts = _verdicts(library, query_id)
    relevant = sorted(i for i, v in verdicts.items() if v.relevance > 0)
    wanted, outside = _relevant_deployments(library, relevant)
    deployments = _frames(library, wanted)
    _deployment_keys(deployments.values())
    detections, models = _detections(library, deployments.values(), min_confidence)
    labels = {d.record.label for found in detections.values() for d in found if d.record.label}
    lineages = {label: label_lineage(library, label) for label in sorted(labels)}
    return Sources(query, verdicts, deployments, outside, detections, models, lineages)


def _deployment_keys(deployments: Iterable[CameraDeployment]) -> None:
    """Each deployment's `deploymentID`: its name, with its id where names repeat."""
    items = list(deployments)
    names = [d.row.name or f"deployment {d.row.id}" for d in items]
    for deployment, name in zip(items, names, strict=True):
        deployment.key = name if names.count(name) == 1 else f"{name}-{deployment.row.id}"


def taxon_lineage(library: Library, name: str | None) -> tuple[str, ...]:
    """A scientific name and its higher names as the catalog knows them (the name alone when
    the catalog has no such taxon)."""
    if not name:
        return ()
    with library.catalog.session() as s:
        taxon = s.scalars(select(Taxon).where(Taxon.name == name).limit(1)).first()
        higher = [getattr(taxon, column, None) for column in _RANK_COLUMNS] if taxon else []
    return (name, *(str(n) for n in higher if n))


def label_lineage(library: Library, label: str) -> tuple[str, ...]:
    """A classifier's label with its higher names: the catalog's where it knows the taxon, and
    the genus of a binomial ("Vulpes" of "Vulpes vulpes") in any case."""
    names = list(taxon_lineage(library, label))
    genus = label.split(" ")[0]
    if " " in label and genus[:1].isupper() and genus not in names:
        names.append(genus)
    return tuple(names)


# --- times ---------------------------------------------------------------------------------------

_OFFSET = re.compile(r"^(?:UTC|GMT)?([+-])(\d{1,2})(?::?(\d{2}))?$", re.IGNORECASE)


def resolve_zone(text: str) -> tzinfo:
    """A time zone as a user gives it: an IANA name (Europe/Brussels), UTC, or a fixed offset
    (+01:00, -0530, UTC+2). BadInputError in one line otherwise."""
    clean = text.strip()
    if clean.upper() in ("UTC", "Z", "GMT"):
        return UTC
    fixed = _OFFSET.match(clean)
    if fixed is not None:
        sign, hours, minutes = fixed.group(1), int(fixed.group(2)), int(fixed.group(3) or 0)
        if hours > 14 or minutes >= 60:
            raise BadInputError(f"{text!r} is not a UTC offset (at most ±14:00)")
        delta = timedelta(hours=hours, minutes=minutes)
        return timezone(-delta if sign == "-" else delta)
    try:
        return ZoneInfo(clean)
    except (ZoneInfoNotFoundError, ValueError) as error:
        raise BadInputError(
            f"unknown time zone {text!r}: give an IANA name such as Europe/Brussels, or a UTC "
            "offset such as +01:00"
        ) from error


def _offset_text(offset: timedelta) -> str:
    minutes = int(offset.total_seconds() // 60)
    sign = "-" if minutes < 0 else "+"
    return f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def deployment_names(deployment: CameraDeployment) -> tuple[str, ...]:
    """What a user may call a deployment: its deploymentID, its name, its folder."""
    return tuple(n for n in (deployment.key, deployment.row.name, deployment.row.folder) if n)


def zone_for(
    deployment: CameraDeployment, default: str | None, per_deployment: Mapping[str, str]
) -> str | None:
    """The time zone the user gave for a deployment: by its deploymentID, its name, or its
    folder (every deployment of that folder)."""
    for name in deployment_names(deployment):
        if name and name in per_deployment:
            return per_deployment[name]
    return default


def set_times(deployment: CameraDeployment, zone_text: str | None) -> None:
    """Each frame's aware time, and the deployment's `timestamp_issues` and note (see the module
    docstring)."""
    dated = [f for f in deployment.frames if f.local is not None]
    unknown = [frame for frame in dated if not _set_own_offset(frame)]
    if not unknown:
        return
    if zone_text is None:
        _times_as_utc(deployment, unknown, len(dated))
    else:
        _times_in_zone(deployment, unknown, zone_text)


def _set_own_offset(frame: Frame) -> bool:
    """Give a dated frame its aware time from its own offset (kept with the time, or an EXIF
    offset under a day); False when it has none."""
    assert frame.local is not None
    if frame.local.tzinfo is not None:  # a catalog that keeps the offset with the time
        frame.moment = frame.local
    elif frame.offset_minutes is not None and abs(frame.offset_minutes) < 24 * 60:
        offset = timedelta(minutes=frame.offset_minutes)
        frame.moment = frame.local.replace(tzinfo=timezone(offset))
    else:
        return False
    return True


def _times_as_utc(deployment: CameraDeployment, unknown: list[Frame], dated: int) -> None:
    """No zone given: the camera clock's readings written as UTC, said as timestamp issues."""
    for frame in unknown:
        assert frame.local is not None
        frame.moment = frame.local.replace(tzinfo=UTC)
        frame.offset_unknown = True
    deployment.timestamp_issues = True
    deployment.time_note = (
        f"{len(unknown)} of {dated} timestamps are the camera clock's readings with "
        "an unknown UTC offset, written as UTC"
    )


def _times_in_zone(deployment: CameraDeployment, unknown: list[Frame], zone_text: str) -> None:
    """The zone's offset at the deployment's first such frame for all of them (the camera's
    clock does not follow a change of offset), said in the note."""
    zone = resolve_zone(zone_text)
    first = min(f.local for f in unknown if f.local is not None)
    last = max(f.local for f in unknown if f.local is not None)
    offset = zone.utcoffset(first) or timedelta(0)
    fixed = timezone(offset)
    for frame in unknown:
        assert frame.local is not None
        frame.moment = frame.local.replace(tzinfo=fixed)
    deployment.time_note = (
        f"times without a UTC offset taken as {_offset_text(offset)} ({zone_text}"
    )
    changed = zone.utcoffset(last)
    if changed is not None and changed != offset:
        deployment.time_note += (
            f" at the first frame; the zone changed to {_offset_text(changed)} during the "
            "deployment, which the camera's clock is taken not to follow"
        )
    deployment.time_note += ")"


# --- places --------------------------------------------------------------------------------------


def _merged_facts(frames: Sequence[Frame]) -> PlaceFacts:
    """One record's privacy standing for every photo of a deployment: the strictest of them.
    Coordinates a record obscured are not published as given: the deployment's mean holds the
    others' true coordinates, so the mean is generalised here."""

    def strictest(values: Iterable[str | None], obscured: bool) -> str | None:
        words = {v for v in values if v}
        if "private" in words:
            return "private"
        if "obscured" in words or obscured:
            return "obscured"
        return None

    obscured = any(f.facts.coordinates_obscured for f in frames)
    return PlaceFacts(
        geoprivacy=strictest((f.facts.geoprivacy for f in frames), obscured),
        taxon_geoprivacy=strictest((f.facts.taxon_geoprivacy for f in frames), False),
        coordinates_obscured=False,
        location_withheld=any(f.facts.location_withheld for f in frames),
    )


def place_of(
    policy: PlacePolicy, deployment: CameraDeployment, names: Iterable[str]
) -> tuple[PublishedPlace, float | None]:
    """Where the deployment may be said to stand, and the size in degrees of the cell it was
    generalised to (None when it was not). `names`: the observations' taxa and their lineage."""
    frames = deployment.frames
    placed = [(f.latitude, f.longitude) for f in frames if f.latitude is not None]
    taxa = {n for f in frames for n in (f.taxon, *f.lineage) if n} | set(names)
    facts = _merged_facts(frames)
    latitude = longitude = None
    if placed:
        latitude = sum(p[0] for p in placed if p[0] is not None) / len(placed)
        longitude = sum(p[1] for p in placed if p[1] is not None) / len(placed)
    place = policy.publish(latitude, longitude, None, facts, sorted(taxa))
    if place.decision != GENERALISED:
        return place, None
    cells = []
    if "obscured" in (facts.geoprivacy, facts.taxon_geoprivacy):
        cells.append(OBSCURED_CELL_DEGREES)
    rule = policy.rule_for(sorted(taxa))
    if rule is not None and rule.action == ACTION_GENERALISE:
        cells.append((rule.grid_km or DEFAULT_GRID_KM) / KM_PER_DEGREE)
    return place, max(cells) if cells else None
