"""GeoJSON (RFC 7946) of a saved query's relevant photos, for a map in any GIS.

One Point feature per relevant photo whose place may be published, as the Darwin Core export
decides it (`engine.catalog.privacy.PlacePolicy`: a withheld place is not written, an obscured
or sensitive one is generalised); each carries the photo's id, path, taxon, date, how it was
decided relevant and its p(relevant) (`engine.io.dwc_quality.package_quality`). The file is
written all or nothing (`engine.io.safe_write.export_text`).

    quadrat export geojson --query ID_OR_TEXT OUT.geojson [--no-sensitive-taxa]

Imported when `quadrat` builds its parser (for the options), so what it needs to write is
imported in the writer.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.io.formats import FILE, SENSITIVE_TAXA, ExportFormat

if TYPE_CHECKING:
    from engine.catalog.library import Library
    from engine.catalog.privacy import PublishedPlace
    from engine.catalog.reads import PhotoDetails
    from engine.io.dwc_quality import RecordDecision


@dataclass(frozen=True)
class GeoJsonReport:
    """What `export_geojson` wrote: the file, the photos mapped, and those left off the map."""

    path: Path
    written: int
    generalised: int
    withheld: int
    no_place: int

    def summary(self) -> str:
        left = [
            f"{count} {why}"
            for count, why in (
                (self.withheld, "withheld"),
                (self.no_place, "with no place"),
            )
            if count
        ]
        left_out = f"; left out: {', '.join(left)}" if left else ""
        generalised = f" ({self.generalised} generalised)" if self.generalised else ""
        return f"{self.written} photos written to {self.path}{generalised}{left_out}"


def _feature(
    photo: PhotoDetails, place: PublishedPlace, decision: RecordDecision
) -> dict[str, Any]:
    """One photo as a GeoJSON Point feature: RFC 7946 positions are longitude, latitude."""
    assert place.longitude is not None and place.latitude is not None
    p = decision.p_relevant.value
    return {
        "type": "Feature",
        "id": photo.image_id,
        "geometry": {"type": "Point", "coordinates": [place.longitude, place.latitude]},
        "properties": {
            "id": photo.image_id,
            "path": photo.path,
            "taxon": photo.taxon,
            "date": photo.observed_at.isoformat(timespec="seconds") if photo.observed_at else None,
            "judgment": "relevant",
            "decided": decision.how,
            "p_relevant": None if p is None else round(p, 4),
            "place": place.decision,
            "place_note": place.reason or None,
            "uncertainty_m": place.uncertainty_m,
        },
    }


def export_geojson(
    library: Library, query_id: int, out: Path, *, sensitive_taxa: bool = True
) -> GeoJsonReport:
    """Write the query's relevant photos whose place may be published as a FeatureCollection."""
    import json

    from engine.catalog.privacy import GENERALISED, WITHHELD, PlacePolicy
    from engine.io.dwc_quality import package_quality
    from engine.io.dwc_records import relevant_photos
    from engine.io.safe_write import export_text
    from engine.search.places import published_place_of

    relevant, details = relevant_photos(library, query_id)
    decisions = package_quality(library, query_id, relevant).decisions
    policy = PlacePolicy.of(library.catalog, use_list=sensitive_taxa)
    features = []
    withheld = no_place = generalised = 0
    for image_id in relevant:
        photo = details[image_id]
        place = published_place_of(policy, photo)
        if not place.has_place:  # never written: not even as a feature without a geometry
            withheld += place.decision == WITHHELD
            no_place += place.decision != WITHHELD
            continue
        generalised += place.decision == GENERALISED
        features.append(_feature(photo, place, decisions[image_id]))
    text = json.dumps({"type": "FeatureCollection", "features": features}, ensure_ascii=False)
    export_text(out, text + "\n", "the GeoJSON file")
    return GeoJsonReport(Path(out), len(features), generalised, withheld, no_place)


GEOJSON = ExportFormat(
    "geojson",
    "a query's relevant photos as GeoJSON points, places as they may be published",
    FILE,
    ".geojson",
    options=(SENSITIVE_TAXA,),
    write=export_geojson,
    label="relevant photos as &GeoJSON",
)
