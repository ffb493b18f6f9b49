"""Where the window draws photos: their places as they would be published.

The map of the results, the map of a query's relevant photos and the place filter's display
show a place through `engine.catalog.privacy.PlacePolicy`, as every export does: a withheld
place (by its record, or a sensitive taxon the lab withholds) is not drawn, and a generalised
one (an obscured record, a sensitive taxon generalised to a grid) is drawn where it would be
published, so the lab sees on the map what the world would see. Searching by place still reads
the catalog's own coordinates: only what is shown changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from sqlalchemy import select

from engine.catalog.db import Catalog
from engine.catalog.models import Image, Taxon
from engine.catalog.privacy import GENERALISED, WITHHELD, PlaceFacts, PlacePolicy, PublishedPlace
from engine.catalog.reads import PhotoDetails

_CHUNK = 500  # ids per query: under SQLite's bound-parameter limit


@dataclass
class ShownPlaces:
    """The places to draw for some photos: (id, latitude, longitude) as published, in the
    order asked; the photos whose place is withheld or generalised, each with its reason."""

    places: list[tuple[int, float, float]] = field(default_factory=list)
    withheld_reasons: dict[int, str] = field(default_factory=dict)
    generalised_reasons: dict[int, str] = field(default_factory=dict)

    @property
    def withheld(self) -> int:
        return len(self.withheld_reasons)

    @property
    def generalised(self) -> int:
        return len(self.generalised_reasons)

    def note(self) -> str:
        """A few words for the map's caption ("" when every place is shown as recorded)."""
        parts = []
        if self.withheld:
            parts.append(f"{self.withheld:,} withheld")
        if self.generalised:
            parts.append(f"{self.generalised:,} generalised")
        return " · ".join(parts)

    def without_place(self, photos: int) -> int:
        """Of `photos` asked for, how many have no place at all (withheld ones not counted)."""
        return photos - len(self.places) - self.withheld


def taxon_names(details: PhotoDetails) -> tuple[str, ...]:
    """The names a sensitive-taxa rule may name for a photo: its taxon and every rank above."""
    names = [details.taxon] if details.taxon else []
    return tuple(names + [name for _rank, name in details.lineage if name])


def published_place_of(policy: PlacePolicy, details: PhotoDetails) -> PublishedPlace:
    """A photo's place as it would be published."""
    return policy.publish(
        details.latitude,
        details.longitude,
        details.location_uncertainty,
        details.place_privacy,
        taxon_names(details),
    )


def shown_places(
    catalog: Catalog, image_ids: Sequence[int], policy: PlacePolicy | None = None
) -> ShownPlaces:
    """The published places of `image_ids` (each id once, in their order), read in chunks;
    `policy` defaults to the catalog's own (its sensitive taxa)."""
    policy = policy or PlacePolicy.of(catalog)
    ids = list(dict.fromkeys(int(i) for i in image_ids))
    published: dict[int, PublishedPlace] = {}
    ranks = (Taxon.kingdom, Taxon.phylum, Taxon.class_, Taxon.order, Taxon.family, Taxon.genus)
    with catalog.session() as s:
        for start in range(0, len(ids), _CHUNK):
            chunk = ids[start : start + _CHUNK]
            rows = s.execute(
                select(
                    Image.id,
                    Image.latitude,
                    Image.longitude,
                    Image.location_uncertainty,
                    Image.geoprivacy,
                    Image.taxon_geoprivacy,
                    Image.coordinates_obscured,
                    Image.location_withheld,
                    Image.public_location_uncertainty,
                    Taxon.name,
                    Taxon.specific_epithet,
                    *ranks,
                )
                .outerjoin(Taxon, Taxon.id == Image.taxon_id)
                .where(Image.id.in_(chunk))
            )
            for (
                image_id,
                lat,
                lon,
                uncertainty,
                geo,
                taxon_geo,
                obscured,
                withheld,
                public,
                *t,
            ) in rows:
                name, epithet, *lineage = t
                genus = lineage[-1]
                species = f"{genus} {epithet}" if genus and epithet else None
                published[image_id] = policy.publish(
                    lat,
                    lon,
                    uncertainty,
                    PlaceFacts(geo, taxon_geo, obscured, withheld, public),
                    (name, species, *lineage),
                )
    shown = ShownPlaces()
    for image_id in ids:
        place = published.get(image_id)
        if place is None:
            continue
        if place.decision == WITHHELD:
            shown.withheld_reasons[image_id] = place.reason
        elif place.decision == GENERALISED:
            shown.generalised_reasons[image_id] = place.reason
        if place.latitude is not None and place.longitude is not None:
            shown.places.append((image_id, float(place.latitude), float(place.longitude)))
    return shown
