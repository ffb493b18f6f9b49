"""Copying the photos judged relevant to a folder (`quadrat export relevant-photos`, Judge ›
Copy relevant photos…), without the GPS of a place that may not be published.

A copied photo carries its EXIF GPS, so the copy goes through the catalog's place rule
(`engine.catalog.privacy.PlacePolicy`, as every export does): a photo whose place is withheld
or generalised (the record withholds it, marks it private or obscured, or its taxon is on the
lab's sensitive list) is copied with its GPS removed (`engine/io/photo_gps.py`: JPEG and TIFF);
one in a format whose GPS Quadrat cannot remove is not copied, and listed with the reason.
Open places are copied byte for byte.

All or nothing: when the disk cannot take every photo, nothing is copied (checked first where
the free space is known) and copies already made are taken back.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
from pathlib import Path

from sqlalchemy import select

from engine.catalog import Judgment, Query
from engine.catalog.library import Library
from engine.catalog.privacy import GENERALISED, WITHHELD, PlacePolicy
from engine.catalog.reads import PhotoDetails, photo_details
from engine.errors import BadInputError
from engine.files import atomic_output
from engine.io import safe_write
from engine.io.photo_gps import MalformedExif, strip_gps

log = logging.getLogger(__name__)


class CopiedPhotos(list[Path]):
    """The files `copy_relevant_photos` wrote; `missing` counts the relevant photos whose files
    are gone from disk (not copied; their judgments stay), `stripped` the copies written
    without their GPS, and `refused` (path, reason) the photos not copied because their GPS
    could not be removed."""

    missing: int = 0
    stripped: int = 0

    def __init__(self) -> None:
        super().__init__()
        self.refused: list[tuple[str, str]] = []

    def summary(self, dest: object) -> str:
        """The outcome in one line."""
        parts = [f"{len(self)} photos copied to {dest}"]
        if self.stripped:
            parts.append(
                f"{self.stripped} of them without GPS (their place is withheld or generalised)"
            )
        if self.refused:
            parts.append(f"{len(self.refused)} not copied: their GPS could not be removed")
        return "; ".join(parts)


def _place_kept_private(policy: PlacePolicy, photo: PhotoDetails) -> str | None:
    """The place decision when the copy must lose its GPS (withheld or generalised), else None."""
    names = (photo.taxon, *(name for _, name in photo.lineage))
    place = policy.publish(
        photo.latitude, photo.longitude, photo.location_uncertainty, photo.place_privacy, names
    )
    if place.decision in (WITHHELD, GENERALISED):
        return place.decision
    if photo.place_privacy.location_withheld:
        return WITHHELD  # no coordinates in the catalog, but the file may hold the camera's
    return None


def copy_relevant_photos(
    library: Library, query_id: int, dest: str | Path, *, sensitive_taxa: bool = True
) -> CopiedPhotos:
    """Copy the photos judged relevant for a query into `dest`; name clashes get a suffix.
    Photos missing from disk are skipped and counted in the result's `missing`; photos whose
    place may not be published are copied without GPS (see the module). `sensitive_taxa`:
    apply the lab's sensitive-taxa list (the records' own privacy always applies)."""
    dest = Path(dest).expanduser()
    what = "the relevant photos"
    with library.catalog.session() as s:
        if s.get(Query, query_id) is None:
            raise BadInputError(f"no saved query with id {query_id}")
        ids = list(
            s.scalars(
                select(Judgment.image_id).where(
                    Judgment.query_id == query_id, Judgment.relevance > 0
                )
            )
        )
    policy = PlacePolicy.of(library.catalog, use_list=sensitive_taxa)
    copied = CopiedPhotos()
    sources: list[Path] = []  # in the order of their paths in the collection
    without_gps: dict[Path, bytes] = {}
    for record in sorted(photo_details(library, ids).values(), key=lambda r: r.rel_path):
        source = Path(record.path)
        if not source.is_file():
            log.warning("not copied, file is gone: %s", source)
            copied.missing += 1
            continue
        decision = _place_kept_private(policy, record)
        reason = _stripped(source, without_gps) if decision is not None else None
        if reason is not None:
            copied.refused.append((str(source), f"place {decision}; {reason}"))
        else:
            sources.append(source)
    needed = sum(len(without_gps[s]) if s in without_gps else _file_size(s) for s in sources)
    free = safe_write.free_bytes(dest)
    if free is not None and needed > free:
        raise safe_write.write_failure(
            OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), dest, what, needed
        )
    try:
        dest.mkdir(parents=True, exist_ok=True)
        for source in sources:
            target = dest / source.name
            n = 1
            while target.exists():
                target = dest / f"{source.stem}-{n}{source.suffix}"
                n += 1
            _copy_whole(source, target, without_gps.get(source))
            copied.append(target)
    except OSError as error:
        for done in copied:  # all or nothing: take back what this call copied
            done.unlink(missing_ok=True)
        raise safe_write.write_failure(error, dest, what, needed) from error
    copied.stripped = len(without_gps)
    return copied


def _stripped(source: Path, out: dict[Path, bytes]) -> str | None:
    """Read `source` and keep its bytes without GPS in `out`; the reason it cannot be."""
    try:
        data = source.read_bytes()
    except OSError as error:
        return f"unreadable: {error.strerror or error}"
    try:
        clean = strip_gps(data, source.suffix)
    except MalformedExif as error:
        return f"its EXIF cannot be read for sure ({error})"
    if clean is None:
        return f"Quadrat cannot remove GPS from {source.suffix or 'such'} files"
    out[source] = clean
    return None


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _copy_whole(source: Path, target: Path, data: bytes | None = None) -> None:
    """Copy to a temporary name beside the target, then rename: never a half-copied photo. The
    copy keeps the photo's times but gets the mode of a file created there (not the source's,
    nor a temporary file's private 0600): the folder is made to be handed on. `data`: the
    photo's bytes to write instead (its GPS removed)."""
    times = source.stat()
    with atomic_output(target) as (handle, temp):
        if data is None:
            with source.open("rb") as photo:
                shutil.copyfileobj(photo, handle, 1 << 20)
        else:
            handle.write(data)
        handle.flush()  # so that closing writes nothing more after the times are set
        os.utime(temp, ns=(times.st_atime_ns, times.st_mtime_ns))
