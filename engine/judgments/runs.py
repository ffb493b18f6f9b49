"""What a saved run was made with: `SavedRunParams`, the one record of a run's stored parameters.

A run's parameters are kept in the catalog as one JSON object (`runs.params`): the method's own
parameters at the top level, beside what the run was made of and within:

    {<method parameter>: value, ...,
     "filters": {...},                    the metadata filters it ran within (`SearchFilters`)
     "details": {..., "evidence": {...}}, what the method drew or chose; per-photo evidence
                                          (a reranked run's answers) keyed by image id as text
     "top_k": 1000, "image": "/path",     how many it kept, the photo it searched with
     "from_run": 12}                      a refined run: the run it learnt from

Every writer builds this record and stores `to_json()`; every reader takes `from_json()` and
reads attributes. The stored format is the one earlier versions wrote, so old runs read back,
and keys this version does not know are kept as they were (with the method's parameters).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from engine.errors import QuadratError

if TYPE_CHECKING:
    from engine.search.filters import FilterNames

# The keys a run keeps beside its method's parameters; every other key is a method parameter.
FILTERS, DETAILS, EVIDENCE, TOP_K, IMAGE, FROM_RUN = (
    "filters",
    "details",
    "evidence",
    "top_k",
    "image",
    "from_run",
)
RUN_KEYS = (FILTERS, DETAILS, TOP_K, IMAGE, FROM_RUN)


def json_safe(value: object) -> Any:
    """`value` as JSON gives it back: paths and other objects as text, tuples as lists."""
    return json.loads(json.dumps(value, default=str))


@dataclass(frozen=True)
class SavedRunParams:
    """A saved run's parameters, typed. `method_params` holds the method's parameters (and any
    key this version does not read); the other attributes are absent (None) when not stored."""

    method_params: dict[str, Any] = field(default_factory=dict)
    filters: dict[str, Any] | None = None  # `SearchFilters.to_params()`: the chips it ran with
    details: dict[str, Any] | None = None  # what the method drew or chose, evidence apart
    evidence: dict[int, dict[str, Any]] = field(default_factory=dict)  # image id -> evidence
    top_k: int | None = None
    image: str | None = None  # the query photo's path
    from_run: int | None = None  # a refined run: the run it learnt from

    @classmethod
    def for_run(
        cls,
        method_params: Mapping[str, Any],
        *,
        details: Mapping[str, Any] | None = None,
        evidence: Mapping[int, Mapping[str, Any]] | None = None,
        filters: Mapping[str, Any] | None = None,
        top_k: int | None = None,
        image: str | None = None,
        from_run: int | None = None,
    ) -> SavedRunParams:
        """The record of a run about to be saved: details and evidence made JSON-safe (paths
        as text), as they will read back. `details` None keeps none, `{}` keeps an empty one;
        empty evidence is not kept."""
        return cls(
            method_params=dict(method_params),
            filters=dict(filters) if filters is not None else None,
            details=json_safe(dict(details)) if details is not None else None,
            evidence={int(i): json_safe(dict(e)) for i, e in (evidence or {}).items()},
            top_k=top_k,
            image=image,
            from_run=from_run,
        )

    @classmethod
    def from_json(cls, stored: Mapping[str, Any] | None) -> SavedRunParams:
        """A run's stored parameters (old runs alike). A value of an unexpected shape is kept
        untouched with the method's parameters, so `to_json` gives the same object back."""
        params = dict(stored or {})
        filters = params.pop(FILTERS) if isinstance(params.get(FILTERS), dict) else None
        details = params.pop(DETAILS) if isinstance(params.get(DETAILS), dict) else None
        top_k = params.pop(TOP_K) if _is_int(params.get(TOP_K)) else None
        image = params.pop(IMAGE) if isinstance(params.get(IMAGE), str) else None
        from_run = params.pop(FROM_RUN) if _is_int(params.get(FROM_RUN)) else None
        evidence: dict[int, dict[str, Any]] = {}
        if details is not None:
            details = dict(details)
            read = _read_evidence(details.get(EVIDENCE))
            if read is not None:
                del details[EVIDENCE]
                evidence = read
        return cls(params, filters, details, evidence, top_k, image, from_run)

    def to_json(self) -> dict[str, Any]:
        """The JSON object stored with the run: the method's parameters, then filters,
        details (evidence last in them, keyed by id as text), top_k, image and from_run."""
        out = dict(self.method_params)
        if self.filters is not None:
            out[FILTERS] = dict(self.filters)
        details = dict(self.details) if self.details is not None else None
        if self.evidence:
            details = details if details is not None else {}
            details[EVIDENCE] = {str(i): dict(e) for i, e in self.evidence.items()}
        if details is not None:
            out[DETAILS] = details
        if self.top_k is not None:
            out[TOP_K] = self.top_k
        if self.image is not None:
            out[IMAGE] = self.image
        if self.from_run is not None:
            out[FROM_RUN] = self.from_run
        return out

    def filters_label(self, names: FilterNames | None = None) -> str:
        """The filters the run ran within, as the run's label names them ("taxon=Aves",
        "May–Jun, any year", joined by " · "); "" with none. Runs that differ only by their
        filters are told apart by it. Filters this version cannot read are named by key."""
        from engine.search.filters import SearchFilters

        if not self.filters:
            return ""
        try:
            chips = SearchFilters.from_params(self.filters).describe(names)
        except QuadratError:  # a run saved by another version, with a value not read here
            return " · ".join(sorted(self.filters))
        return " · ".join(f"{key}={label}" if key == "taxon" else label for key, label in chips)

    def search_params(self) -> dict[str, Any]:
        """What makes the run the search it is, to compare or repeat it: the stored object but
        what it drew or scored, how many it kept and the photo's path (the method's parameters,
        the filters, the run it learnt from)."""
        return {k: v for k, v in self.to_json().items() if k not in (DETAILS, TOP_K, IMAGE)}


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _read_evidence(value: object) -> dict[int, dict[str, Any]] | None:
    """Stored evidence ({"12": {...}}) by image id; None when it is empty or not of that shape
    (then it stays in the details as stored)."""
    if not isinstance(value, dict) or not value:
        return None
    evidence: dict[int, dict[str, Any]] = {}
    for key, item in value.items():
        if not isinstance(item, dict) or not isinstance(key, str) or str(_as_int(key)) != key:
            return None
        evidence[int(key)] = dict(item)
    return evidence


def _as_int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None
