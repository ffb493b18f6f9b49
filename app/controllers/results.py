"""Result cards: ranked photos with their catalog details, as the grid and detail pane show
them. One builder for a search just run and for a stored run reopened. And the query photo as
the query bar, the status line, run labels and the query list name it."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from engine.detections.shown import DEFAULT_BOX_THRESHOLD
from engine.licences import licence_display
from widgets.boxes import DetectionView
from widgets.photo_view import PhotoView
from widgets.results import ResultItem

if TYPE_CHECKING:
    from engine.catalog.library import Library
    from engine.catalog.reads import PhotoDetails
    from engine.detections.shown import ShownDetection
    from engine.indexing.thumbnails import ThumbnailCache
    from engine.search.searcher import SearchHit


def taxon_label(taxon: str | None, common_name: str | None) -> str | None:
    """“Mungos mungo (banded mongoose)”, or whichever of the two is known, or None."""
    if taxon and common_name and common_name.casefold() != taxon.casefold():
        return f"{taxon} ({common_name})"
    return taxon or common_name or None


@dataclass(frozen=True)
class QueryPhoto:
    """A query photo as the window names it: its taxon where the catalog knows the photo,
    else its file name. `image_id` is set when the photo is one of the library's."""

    path: str
    name: str
    image_id: int | None = None
    content_hash: str | None = None

    @property
    def reference(self) -> str:
        """The name with the catalog number, to tell two photos of one species apart
        ("Mungos mungo #123"); the file name alone for a photo from outside the library."""
        return f"{self.name} #{self.image_id}" if self.image_id is not None else self.name


def photo_reference(details: PhotoDetails | None, image_id: int) -> str:
    """A photo as the status line and dialogs name it: its taxon (else its file name) and
    catalog number, and its deployment (folder and camera serial) where its collection has
    several cameras ("IMG_0013.JPG #1051, CAM01_trail (QT0001)"); "photo #1051" when the
    catalog has no row."""
    if details is None:
        return f"photo #{image_id}"
    name = taxon_label(details.taxon, details.common_name) or Path(details.rel_path).name
    camera = details.camera_line and (details.deployment or details.camera_line)
    return f"{name} #{image_id}" + (f", {camera}" if camera else "")


def photo_view(details: PhotoDetails) -> PhotoView:
    """What the detail pane shows of the catalog's record of a photo."""
    return PhotoView(
        taxon=details.taxon,
        common_name=details.common_name,
        lineage=details.lineage,
        observed_at=details.observed_at,
        latitude=details.latitude,
        longitude=details.longitude,
        location_uncertainty=details.location_uncertainty,
        license=licence_display(details.license),
        rights_holder=details.rights_holder,
        width=details.width,
        height=details.height,
        collection=details.collection,
    )


def query_photo(library: Library | None, path: str | Path) -> QueryPhoto:
    """Name the photo at `path` from the catalog (taxon and common name), falling back to
    the file name. Runs in a worker (it reads the catalog)."""
    from engine.catalog.reads import image_id_at, photo_details

    path = Path(path)
    image_id = image_id_at(library, path) if library is not None else None
    if image_id is None or library is None:
        return QueryPhoto(str(path), path.name)
    d = photo_details(library, [image_id]).get(image_id)
    name = (taxon_label(d.taxon, d.common_name) if d else None) or path.name
    return QueryPhoto(str(path), name, image_id, d.content_hash if d else None)


def photo_thumbnail_bytes(cache: ThumbnailCache | None, photo: QueryPhoto) -> bytes | None:
    """The JPEG thumbnail of a query photo from the library's disk cache (made on first
    use), or None when it cannot be read. Runs in the thumbnails pool."""
    from engine.errors import BadImageError

    if cache is None:
        return None
    try:
        data: bytes = cache.get_or_create(photo.path, photo.content_hash)
    except (BadImageError, OSError):
        return None  # a photo gone from disk: the chip or row keeps its placeholder
    return data


# The confidence from which a detector's box is shown (the setting `box_threshold`, given by
# `app/controllers/boxes.py` when the window starts and when it changes).
_box_threshold = DEFAULT_BOX_THRESHOLD


def set_box_threshold(value: float) -> None:
    """Show boxes of at least `value` confidence on the results made from now on."""
    global _box_threshold
    _box_threshold = float(value)


def box_threshold() -> float:
    return _box_threshold


def detection_view(shown: ShownDetection) -> DetectionView:
    """A stored detection as the widgets draw and list it."""
    record = shown.detection.record
    box = record.box
    return DetectionView(
        box=(box.x, box.y, box.width, box.height) if box is not None else None,
        category=record.category,
        confidence=record.confidence,
        label=record.label,
        label_probability=record.label_probability,
        source=shown.detection.source_kind,
        model=shown.model,
    )


def result_items(
    library: Library,
    ranking: Sequence[tuple[int, float]],
    hits: Iterable[SearchHit] = (),
    *,
    min_box_confidence: float | None = None,
) -> list[ResultItem]:
    """Cards for `ranking` ((image id, score), best first), numbered from 1, with each photo's
    catalog details and its detections of at least `min_box_confidence` (default: the
    window's box threshold) read in one query each. Runs in a worker (it reads the catalog).

    `hits` are the engine's `SearchHit`s of the search that made the ranking: they say where a
    photo is and what it shows when the catalog has no row for it. A photo with neither a
    catalog row nor a hit (a stored run reopened after its photo was removed) is left out.
    """
    from engine.catalog.reads import photo_details
    from engine.detections.shown import shown_detections

    by_id = {hit.image_id: hit for hit in hits}
    ids = [image_id for image_id, _ in ranking]
    details = photo_details(library, ids)
    threshold = _box_threshold if min_box_confidence is None else min_box_confidence
    detections = shown_detections(library, ids, threshold)
    items: list[ResultItem] = []
    for image_id, score in ranking:
        d, hit = details.get(image_id), by_id.get(image_id)
        if hit is not None:
            path = hit.path
        elif d is not None:
            path = d.path
        else:
            continue
        title = (
            (d and (d.common_name or d.taxon))
            or (hit and (hit.common_name or hit.taxon))
            or Path(path).name
        )
        items.append(
            ResultItem(
                rank=len(items) + 1,
                score=float(score),
                image_id=image_id,
                path=path,
                title=title,
                content_hash=d.content_hash if d is not None else None,
                details=photo_view(d) if d is not None else None,
                camera=d.camera_line if d is not None else "",
                detections=tuple(detection_view(x) for x in detections.get(image_id, ())),
            )
        )
    return items
