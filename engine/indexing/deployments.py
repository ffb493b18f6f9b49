"""Deployments: a camera at a place, made after each indexing run with no set-up.

A photo whose EXIF names a camera serial belongs to the deployment of that serial in its
collection's top folder (a camera-trap card's folder). A folder tree the user marks as
deployments (`mark_deployments`) makes each folder directly under it a deployment, whatever
the EXIF says (the photos directly in it, one more); a serial that changes inside such a folder
(a camera swapped mid-season) splits it by serial, and every folder holding photos of more than
one serial is counted. Other photos have no deployment; their events are grouped by folder and
camera (`engine.indexing.events`).

Each deployment has a clock offset in seconds, added to the camera's clock (`images.camera_time`)
for the photo's time (`images.observed_at`), so every time shown, filtered and exported has it;
the previous offset is kept and `undo_clock_offset` brings it back. A time a metadata file gave
is the observer's, not the camera's, and takes no offset.

`refresh_camera_data` runs it all for a collection (deployments, offsets, events) and counts
what the EXIF held that was dropped (`CameraTally`).
"""

from __future__ import annotations

import json
import posixpath
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from typing import cast as cast_type

import numpy as np
from sqlalchemy import String, Table, bindparam, case, cast, func, or_, select, update
from sqlalchemy.orm import Session

from engine.catalog.library import Library
from engine.catalog.models import STATUS_OK, Collection, Deployment, Image, LibraryMeta
from engine.catalog.reads import camera_text
from engine.errors import BadInputError
from engine.indexing.events import (
    as_datetime64,
    count_events,
    event_gap,
    fetch_rows,
    refresh_events,
    regroup_events,
    write_column,
)
from engine.indexing.exif import (
    EXIF_DATE_BEFORE_1990,
    EXIF_DATE_FROM_XMP,
    EXIF_DATE_IN_FUTURE,
    EXIF_DATE_UNREADABLE,
    EXIF_GPS_ZERO,
    flag_reasons,
)

META_DEPLOYMENT_ROOTS = "deployment_roots"  # JSON: [[collection id, folder], ...]
# JSON: [collection id, ...] whose deployments a Camtrap DP package gave (engine/io/camtrap_read):
# kept as the package named them, never made again from folders and serials.
META_PACKAGE_DEPLOYMENTS = "package_deployments"
# A camera clock set a year wrong is a known mistake; beyond ten years it is a typing error.
MAX_CLOCK_OFFSET_S = 10 * 366 * 24 * 3600


@dataclass
class CameraTally:
    """What a collection's EXIF gave and what was dropped, after an indexing run."""

    photos: int = 0
    undated: int = 0
    dates_in_future: int = 0
    dates_before_1990: int = 0
    dates_unreadable: int = 0
    gps_zero: int = 0
    dates_from_xmp: int = 0  # no EXIF capture time: dated from the embedded XMP or IPTC
    serial_changes: int = 0  # folders holding photos of more than one camera serial
    deployments: int = 0
    events: int = 0

    def to_json(self) -> dict[str, int]:
        return asdict(self)

    def lines(self) -> list[str]:
        """The counts worth saying, one line each (none when nothing was dropped)."""
        lines = []
        if self.undated:
            dropped = [
                f"{count} {what}"
                for count, what in (
                    (self.dates_in_future, "in the future"),
                    (self.dates_before_1990, "before 1990"),
                    (self.dates_unreadable, "unreadable"),
                )
                if count
            ]
            why = f" (capture times dropped: {', '.join(dropped)})" if dropped else ""
            lines.append(
                f"{_count(self.undated, 'photo')} {_has(self.undated)} no capture time and "
                f"{_is(self.undated)} undated{why}; "
                "'quadrat deployments --undated' lists them"
            )
        if self.dates_from_xmp:
            lines.append(
                f"{_count(self.dates_from_xmp, 'photo')} had no EXIF capture time and "
                f"{_is(self.dates_from_xmp)} dated from XMP/IPTC"
            )
        if self.gps_zero:
            lines.append(f"{_count(self.gps_zero, 'photo')} had GPS (0, 0), taken as no position")
        if self.serial_changes:
            lines.append(
                f"{_count(self.serial_changes, 'folder')} "
                f"{'holds' if self.serial_changes == 1 else 'hold'} photos of more than one "
                "camera serial; "
                "they were split into deployments by serial"
            )
        if self.deployments:  # a collection of camera photos, not only of observations
            lines.append(
                f"{_count(self.deployments, 'deployment')}, {_count(self.events, 'event')}"
            )
        return lines


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'s' * (number != 1)}"


def _has(number: int) -> str:
    return "has" if number == 1 else "have"


def _is(number: int) -> str:
    return "is" if number == 1 else "are"


@dataclass(frozen=True)
class DeploymentInfo:
    """One deployment as `quadrat deployments` lists it."""

    id: int
    collection: str
    folder: str
    camera_serial: str
    name: str
    marked: bool
    clock_offset_s: int
    previous_clock_offset_s: int | None
    photos: int
    first: datetime | None
    last: datetime | None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["first"] = self.first.isoformat() if self.first else None
        data["last"] = self.last.isoformat() if self.last else None
        return data


# -- marked folder trees ------------------------------------------------------------------


def package_collections(library: Library) -> set[int]:
    """The collections whose deployments a Camtrap DP package gave."""
    try:
        ids = json.loads(library.meta(META_PACKAGE_DEPLOYMENTS) or "[]")
    except ValueError:
        ids = []
    return {int(i) for i in ids if isinstance(i, int)}


def keep_package_deployments(library: Library, collection_id: int) -> None:
    """Mark a collection's deployments as a package's: indexing runs leave them as they are."""
    ids = sorted(package_collections(library) | {collection_id})
    with library.catalog.session() as s:
        s.merge(LibraryMeta(key=META_PACKAGE_DEPLOYMENTS, value=json.dumps(ids)))


def marked_folders(library: Library) -> dict[int, list[str]]:
    """Collection id -> the folders (relative, '' the root) marked as deployment trees."""
    marks: dict[int, list[str]] = defaultdict(list)
    try:
        pairs = json.loads(library.meta(META_DEPLOYMENT_ROOTS) or "[]")
    except ValueError:
        pairs = []
    for pair in pairs:
        if isinstance(pair, list) and len(pair) == 2:
            marks[int(pair[0])].append(str(pair[1]))
    return dict(marks)


def mark_deployments(library: Library, folder: Path, marked: bool = True) -> tuple[int, str]:
    """Mark (or unmark) `folder`, inside an indexed collection, as a tree of deployments: each
    folder directly under it is one. Deployments and events are made again. Returns the
    collection id and the folder relative to its root."""
    folder = Path(folder).expanduser().resolve()
    with library.catalog.session() as s:
        collections = list(s.execute(select(Collection.id, Collection.root)))
    found = None
    for candidate_id, root in sorted(collections, key=lambda c: -len(c[1])):
        local = library.photo_root(root).resolve()
        if folder == local or local in folder.parents:
            found = candidate_id, folder.relative_to(local).as_posix()
            break
    if found is None:
        raise BadInputError(f"{folder} is not inside an indexed collection")
    collection_id, relative = found[0], "" if found[1] == "." else found[1]
    marks = marked_folders(library)
    kept = [f for f in marks.get(collection_id, []) if f != relative]
    marks[collection_id] = kept + ([relative] if marked else [])
    pairs = [[cid, f] for cid, folders in sorted(marks.items()) for f in folders]
    with library.catalog.session() as s:
        s.merge(LibraryMeta(key=META_DEPLOYMENT_ROOTS, value=json.dumps(pairs)))
    refresh_camera_data(library, collection_id)
    return collection_id, relative


def _deployment_key(parent: str, serial: str, marks: list[str]) -> tuple[str, str, bool] | None:
    """(folder, serial, marked) of a photo in folder `parent`, or None for no deployment."""
    for mark in marks:  # longest first
        if mark == "" or parent == mark or parent.startswith(mark + "/"):
            below = parent[len(mark) :].lstrip("/")
            top = below.split("/")[0] if below else ""
            folder = posixpath.join(mark, top) if top else mark
            return folder, serial, True
    if serial:
        return parent.split("/")[0] if parent else "", serial, False
    return None


def assign_deployments(library: Library, collection_id: int) -> tuple[int, int]:
    """Give each photo of the collection its deployment (made when new, removed when no photo
    is left in it); (deployments, folders whose photos have more than one serial). A
    package's deployments (`package_collections`) are kept as they are."""
    if collection_id in package_collections(library):
        with library.catalog.session() as s:
            kept = s.scalar(
                select(func.count())
                .select_from(Deployment)
                .where(Deployment.collection_id == collection_id)
            )
        return int(kept or 0), 0
    marks = sorted(marked_folders(library).get(collection_id, []), key=len, reverse=True)
    with library.catalog.session() as s:
        name = s.scalar(select(Collection.name).where(Collection.id == collection_id)) or ""
        table = cast_type(Table, Image.__table__)
        stmt = select(
            table.c.id, table.c.rel_path, table.c.camera_serial, table.c.deployment_id
        ).where(table.c.collection_id == collection_id)
        if not marks:  # only photos with a serial can have a deployment: few in most libraries
            stmt = stmt.where(
                or_(table.c.camera_serial.is_not(None), table.c.deployment_id.is_not(None))
            )
        rows = fetch_rows(s.connection(), stmt)
        serials_in: dict[str, set[str]] = defaultdict(set)
        keys: dict[int, tuple[str, str, bool] | None] = {}
        for image_id, rel_path, camera_serial, _ in rows:
            parent = rel_path.rpartition("/")[0]
            serial = camera_serial or ""
            if serial:
                serials_in[parent].add(serial)
            keys[image_id] = _deployment_key(parent, serial, marks)
        existing = {
            (d.folder, d.camera_serial): d
            for d in s.scalars(select(Deployment).where(Deployment.collection_id == collection_id))
        }
        wanted = {key[:2]: key[2] for key in keys.values() if key is not None}
        for (folder, serial), marked in wanted.items():
            deployment = existing.get((folder, serial))
            if deployment is None:
                label = folder or name
                deployment = Deployment(
                    collection_id=collection_id,
                    folder=folder,
                    camera_serial=serial,
                    name=f"{label} ({serial})" if serial else label,
                    clock_offset_s=0,
                )
                s.add(deployment)
                existing[(folder, serial)] = deployment
            deployment.marked = marked
        s.flush()
        changed: list[tuple[object, int]] = []
        for image_id, _, _, stored in rows:
            photo_key = keys[image_id]
            deployment_id = existing[photo_key[:2]].id if photo_key is not None else None
            if deployment_id != stored:
                changed.append((deployment_id, image_id))
        write_column(s.connection(), "deployment_id", changed)
        for folder_serial, deployment in existing.items():
            if folder_serial not in wanted:
                s.delete(deployment)
    serial_changes = sum(1 for serials in serials_in.values() if len(serials) > 1)
    return len(wanted), serial_changes


# -- clock offsets -------------------------------------------------------------------------


def apply_clock_offsets(library: Library, collection_id: int) -> int:
    """Set each camera-timed photo's time to its camera clock plus its deployment's offset;
    the number of photos whose time changed."""
    with library.catalog.session() as s:
        return _apply_clock_offsets(s, collection_id)


def _apply_clock_offsets(s: Session, collection_id: int) -> int:
    """`apply_clock_offsets` in the caller's transaction."""
    offsets = dict(
        s.execute(
            select(Deployment.id, Deployment.clock_offset_s).where(
                Deployment.collection_id == collection_id
            )
        ).all()
    )
    table = cast_type(Table, Image.__table__)
    rows = fetch_rows(
        s.connection(),
        select(
            table.c.id,
            cast(table.c.camera_time, String),
            cast(table.c.observed_at, String),
            table.c.deployment_id,
        ).where(table.c.collection_id == collection_id, table.c.camera_time.is_not(None)),
    )
    if not rows:
        return 0
    ids, camera, observed, deployments = zip(*rows, strict=True)
    shift = np.array([offsets.get(d, 0) for d in deployments], dtype=np.int64)
    shifted = as_datetime64(camera) + shift.astype("timedelta64[s]")
    differs = np.flatnonzero(shifted != as_datetime64(observed))
    changed = [
        {"image_id": int(ids[i]), "moment": shifted[i].astype("datetime64[us]").item()}
        for i in differs
    ]
    if changed:
        # Through SQLAlchemy, which writes times as the dialect keeps them; the database's
        # triggers fill the date parts from them.
        s.connection().execute(
            update(table)
            .where(table.c.id == bindparam("image_id"))
            .values(observed_at=bindparam("moment")),
            changed,
        )
    return len(changed)


def set_clock_offset(library: Library, deployment_id: int, seconds: int) -> tuple[int, int]:
    """Set a deployment's clock offset (the previous one kept for undo); its photos' times and
    events follow in the same transaction. Returns (previous offset, new offset)."""
    if not -MAX_CLOCK_OFFSET_S <= seconds <= MAX_CLOCK_OFFSET_S:
        raise BadInputError(
            f"a clock offset of {seconds} s is more than ten years; give it in seconds"
        )
    return _change_clock_offset(library, deployment_id, lambda _deployment: seconds)


def undo_clock_offset(library: Library, deployment_id: int) -> tuple[int, int]:
    """Bring back a deployment's previous clock offset (an undo undone is the change again)."""

    def previous(deployment: Deployment) -> int:
        if deployment.previous_clock_offset_s is None:
            raise BadInputError(f"deployment {deployment_id}'s clock offset was never changed")
        return deployment.previous_clock_offset_s

    return _change_clock_offset(library, deployment_id, previous)


def _change_clock_offset(
    library: Library, deployment_id: int, new_offset: Callable[[Deployment], int]
) -> tuple[int, int]:
    """The offset `new_offset` gives the deployment as it is now, its photos' times and their
    events in one transaction: a process killed in between leaves all as they were (and
    undo then still returns to the offset before), never an offset its photos do not show."""
    gap = event_gap(library)
    with library.catalog.session() as s:
        # Two changes at once (two windows) would each read the other's offset as previous.
        library.catalog.serialize(s, (_OFFSET_LOCK, deployment_id))
        deployment = s.get(Deployment, deployment_id)
        if deployment is None:
            raise BadInputError(f"no deployment {deployment_id}; 'quadrat deployments' lists them")
        previous, seconds = deployment.clock_offset_s, new_offset(deployment)
        deployment.clock_offset_s, deployment.previous_clock_offset_s = seconds, previous
        s.flush()
        _apply_clock_offsets(s, deployment.collection_id)
        regroup_events(s.connection(), deployment.collection_id, gap)
    return previous, seconds


# The first half of the key an offset change serializes on ("DPOF"), the deployment id the other.
_OFFSET_LOCK = 0x44504F46


# -- reading -------------------------------------------------------------------------------


def list_deployments(library: Library) -> list[DeploymentInfo]:
    """Every deployment with its photo count and first and last time (offset applied)."""
    with library.catalog.session() as s:
        stats = {
            deployment_id: (count, first, last)
            for deployment_id, count, first, last in s.execute(
                select(
                    Image.deployment_id,
                    func.count(),
                    func.min(Image.observed_at),
                    func.max(Image.observed_at),
                )
                .where(Image.deployment_id.is_not(None), Image.status == STATUS_OK)
                .group_by(Image.deployment_id)
            )
        }
        rows = s.execute(
            select(Deployment, Collection.root)
            .join(Collection, Collection.id == Deployment.collection_id)
            .order_by(Deployment.id)
        ).all()
        return [
            DeploymentInfo(
                d.id,
                root,
                d.folder,
                d.camera_serial,
                d.name,
                bool(d.marked),
                d.clock_offset_s,
                d.previous_clock_offset_s,
                *stats.get(d.id, (0, None, None)),
            )
            for d, root in rows
        ]


def deployment_labels(session: Session, *, with_camera: bool = True) -> dict[int, str]:
    """Deployment id -> how the window names it: its name (folder and camera serial) and,
    with `with_camera` and where its photos name one camera model, that model
    ("CAM01_trail (QT0001) · QuadratTrail QT-1")."""
    names = {
        int(i): str(name) for i, name in session.execute(select(Deployment.id, Deployment.name))
    }
    if not with_camera:
        return names
    models: dict[int, set[str]] = defaultdict(set)
    for deployment_id, make, model in session.execute(
        select(Image.deployment_id, Image.camera_make, Image.camera_model)
        .where(Image.deployment_id.is_not(None))
        .group_by(Image.deployment_id, Image.camera_make, Image.camera_model)
    ):
        if deployment_id is not None:
            models[int(deployment_id)].add(camera_text(make, model))
    labels = {}
    for deployment_id, name in names.items():
        cameras = models.get(deployment_id, set()) - {""}
        camera = next(iter(cameras)) if len(cameras) == 1 else ""
        labels[deployment_id] = f"{name} · {camera}" if camera and camera not in name else name
    return labels


def undated_photos(library: Library, limit: int | None = None) -> list[tuple[str, str]]:
    """(path, why) of the photos with no capture time, by path."""
    stmt = (
        select(Collection.root, Image.rel_path, Image.exif_flags)
        .join(Collection, Collection.id == Image.collection_id)
        .where(Image.status == STATUS_OK, Image.observed_at.is_(None))
        .order_by(Collection.root, Image.rel_path)
        .limit(limit)
    )
    with library.catalog.session() as s:
        rows = s.execute(stmt).all()
    undated = []
    for root, rel_path, flags in rows:
        reasons = [r for r in flag_reasons(flags) if r.startswith("capture time")]
        why = "; ".join(reasons) if reasons else "no capture time in the EXIF, XMP or IPTC"
        undated.append((str(library.photo_root(root) / rel_path), why))
    return undated


def camera_tally(library: Library, collection_id: int) -> CameraTally:
    """The counts of `CameraTally` for one collection's photos, read from the catalog."""
    with library.catalog.session() as s:
        table = cast_type(Table, Image.__table__)
        flags = func.coalesce(table.c.exif_flags, 0)

        def flagged(bit: int) -> Any:
            return func.sum(case((flags.op("&")(bit) != 0, 1), else_=0))

        counts = s.execute(
            select(
                func.count(),
                func.sum(case((table.c.observed_at.is_(None), 1), else_=0)),
                flagged(EXIF_DATE_IN_FUTURE),
                flagged(EXIF_DATE_BEFORE_1990),
                flagged(EXIF_DATE_UNREADABLE),
                flagged(EXIF_GPS_ZERO),
                flagged(EXIF_DATE_FROM_XMP),
            ).where(table.c.collection_id == collection_id, table.c.status == STATUS_OK)
        ).one()
        deployments = s.scalar(
            select(func.count())
            .select_from(Deployment)
            .where(Deployment.collection_id == collection_id)
        )
        events = count_events(s.connection(), collection_id)
    photos, undated, future, before_1990, unreadable, gps_zero, from_xmp = (
        int(c or 0) for c in counts
    )
    return CameraTally(
        photos=photos,
        undated=undated,
        dates_in_future=future,
        dates_before_1990=before_1990,
        dates_unreadable=unreadable,
        gps_zero=gps_zero,
        dates_from_xmp=from_xmp,
        deployments=int(deployments or 0),
        events=events,
    )


def refresh_camera_data(library: Library, collection_id: int) -> CameraTally:
    """After indexing a collection: its deployments, their clock offsets, its events, and
    the tally of what its EXIF held that was dropped."""
    _, serial_changes = assign_deployments(library, collection_id)
    apply_clock_offsets(library, collection_id)
    refresh_events(library, collection_id)
    tally = camera_tally(library, collection_id)
    tally.serial_changes = serial_changes
    return tally
