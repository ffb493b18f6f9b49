"""The window's features, in the order they install themselves (`install(app)` beside each
controller). A feature installed later may connect to one installed before it; the order also
decides which listener of a shared signal hears it first (the comments say where it matters).
"""

from __future__ import annotations

from app.controllers import (
    agreement,
    analyses,
    attribute_questions,
    attributes,
    backups,
    benchmark,
    boxes,
    camtrap_open,
    certify,
    deployments,
    events,
    feedback,
    filters,
    full_view,
    judging,
    library,
    models,
    queries,
    records,
    rerank,
    search,
    sidecars,
    transfer,
    visret,
)
from app.controllers.application import install_window
from app.controllers.install import Install

FEATURES: tuple[Install, ...] = (
    library.install,  # the Library pane, indexing
    camtrap_open.install,  # File › Open Camtrap DP package… (after Add folder…)
    models.install,  # File › Models…, the model gate before indexing
    search.install,  # the query bar and the grid's search actions
    judging.install,  # R / N / U / Ctrl+Z, the metrics' k
    attributes.install,  # Darwin Core attributes in the detail pane
    transfer.install,  # File › Import / Export judgments, Export results, Copy relevant
    attribute_questions.install,  # Judge › Ask an attribute question…
    sidecars.install,  # Judge › Write XMP sidecars…
    backups.install,  # File › Backups…
    deployments.install,  # Library › Deployments… (camera traps)
    full_view.install,  # Space: the full-size view
    visret.install,  # VisRet's drawings
    rerank.install,  # Reranked (after VisRet: its worker hook passes VisRet's events on)
    queries.install,  # the saved queries pane (hears a search finish after VisRet, Reranked)
    filters.install,  # the filter chips, the map, the month histogram
    feedback.install,  # Refine, Judge next, Sample to judge, Export likely relevant photos…
    agreement.install,  # judges, blind double judging, Agreement…
    records.install,  # Judge › Export records… (Darwin Core; after agreement: judging blind)
    certify.install,  # Judge › Certify recall…
    analyses.install,  # Where and when › Relevant photos of this query
    events.install,  # View › Group results by event (camera traps)
    boxes.install,  # View › Show detector boxes, B: judge on the next box
    benchmark.install,  # Tools › Benchmark…
    install_window,  # the window's own wiring, last
)
