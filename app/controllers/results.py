"""Result cards: ranked photos with their catalog details, as the grid and detail pane show
them. One builder for a search just run and for a stored run reopened."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from widgets.results import ResultItem


def result_items(
    library: Any, ranking: Sequence[tuple[int, float]], hits: Iterable[Any] = ()
) -> list[ResultItem]:
    """Cards for `ranking` ((image id, score), best first), numbered from 1, with each photo's
    catalog details read in one query. Runs in a worker (it reads the catalog).

    `hits` are the engine's `SearchHit`s of the search that made the ranking: they say where a
    photo is and what it shows when the catalog has no row for it. A photo with neither a
    catalog row nor a hit (a stored run reopened after its photo was removed) is left out.
    """
    from engine.collections import photo_details

    by_id = {hit.image_id: hit for hit in hits}
    details = photo_details(library, [image_id for image_id, _ in ranking])
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
                details=d,
            )
        )
    return items
