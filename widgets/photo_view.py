"""What the detail pane shows about one photo: plain data the controllers build from the
catalog's record, so the widgets need nothing from the engine."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class PhotoView:
    """One photo's catalog facts as the detail pane shows them; None where unknown."""

    taxon: str | None = None
    common_name: str | None = None
    lineage: tuple[tuple[str, str], ...] = ()  # (rank, name) from kingdom down to species
    observed_at: datetime | None = None
    latitude: float | None = None
    longitude: float | None = None
    location_uncertainty: float | None = None  # metres
    license: str | None = None
    rights_holder: str | None = None
    width: int | None = None
    height: int | None = None
    collection: str | None = None
