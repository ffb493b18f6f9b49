"""`SavedRunParams`: a saved run's parameters as one typed record that reads the JSON earlier
versions stored and writes exactly that JSON again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engine.catalog.library import Library
from engine.judgments.queries import QueryStore
from engine.judgments.runs import SavedRunParams

# As the window stored a reranked run: the method's parameters, the filters it ran within,
# details with the evidence keyed by id as text, then top_k and the query photo.
RERANKED = {
    "base": "text",
    "depth": 100,
    "subqueries": "Is there a red circle?",
    "filters": {"taxon": "Mungos mungo", "months": [11, 2]},
    "details": {
        "questions": [{"text": "Is there a red circle?", "source": "user"}],
        "calls": 100,
        "evidence": {
            "12": {"score": 0.9, "base_rank": 3, "answers": [{"question": "q", "p": 0.9}]},
            "7": {"score": 0.4, "base_rank": 1, "answers": []},
        },
    },
    "top_k": 1000,
    "image": "/photos/mongoose.jpg",
}
# As `quadrat refine` stored a refined run: details always (empty here), the run it came from.
REFINED = {
    "alpha": 1.0,
    "beta": 0.75,
    "top_k": 500,
    "from_run": 4,
    "details": {},
    "filters": {"judged": "unjudged"},
}
# As a run of a plug-in stored it, with keys this version does not know.
PLUG_IN = {"depth": 10, "some_new_key": {"nested": [1, 2]}, "details": {"note": "n"}}


@pytest.mark.parametrize("stored", [RERANKED, REFINED, PLUG_IN, {}], ids=lambda s: str(len(s)))
def test_stored_parameters_read_back_and_write_the_same_json(stored: dict[str, Any]) -> None:
    record = SavedRunParams.from_json(json.loads(json.dumps(stored)))
    assert record.to_json() == stored
    assert SavedRunParams.from_json(record.to_json()) == record


def test_a_stored_run_is_read_by_attribute() -> None:
    record = SavedRunParams.from_json(RERANKED)
    assert record.method_params == {
        "base": "text",
        "depth": 100,
        "subqueries": "Is there a red circle?",
    }
    assert record.filters == {"taxon": "Mungos mungo", "months": [11, 2]}
    assert record.details == {
        "questions": [{"text": "Is there a red circle?", "source": "user"}],
        "calls": 100,
    }
    assert sorted(record.evidence) == [7, 12] and record.evidence[12]["base_rank"] == 3
    assert (record.top_k, record.image, record.from_run) == (1000, "/photos/mongoose.jpg", None)
    # The window's order of keys is kept, to the byte.
    assert json.dumps(record.to_json()) == json.dumps(RERANKED)

    refined = SavedRunParams.from_json(REFINED)
    assert (refined.from_run, refined.top_k, refined.details) == (4, 500, {})
    assert refined.search_params() == {
        "alpha": 1.0,
        "beta": 0.75,
        "from_run": 4,
        "filters": {"judged": "unjudged"},
    }


def test_values_of_an_unexpected_shape_are_kept_as_stored() -> None:
    odd = {
        "filters": None,
        "top_k": "many",
        "image": 3,
        "details": {"evidence": {"x": {"score": 1}, "12": {"score": 0.5}}},
    }
    record = SavedRunParams.from_json(odd)
    assert record.to_json() == odd
    assert record.evidence == {}  # not evidence by image id: left in the details as it was
    assert record.filters is None and record.top_k is None and record.image is None
    empty = {"details": {"evidence": {}}}
    assert SavedRunParams.from_json(empty).to_json() == empty


def _old_run_params(
    method: dict[str, Any],
    details: dict[str, Any],
    evidence: dict[int, dict[str, Any]],
    filters: dict[str, Any] | None,
    keep_evidence: bool,
) -> dict[str, Any]:
    """How the window built a run's parameters before the record (the reference)."""

    def json_safe(value: object) -> Any:
        return json.loads(json.dumps(value, default=str))

    params = dict(method)
    if filters is not None:
        params["filters"] = filters
    if details:
        params["details"] = json_safe(details)
    if keep_evidence and evidence:
        params.setdefault("details", {})["evidence"] = json_safe(
            {str(i): e for i, e in evidence.items()}
        )
    return params


@pytest.mark.parametrize(
    ("details", "evidence", "filters", "keep"),
    [
        ({"prompt": "a red circle", "drawings": [{"path": Path("/c/1.png")}]}, {}, None, False),
        ({}, {3: {"score": 0.5, "answers": [("q", 0.5)]}}, {"licence": ["cc0"]}, True),
        ({"calls": 4}, {3: {"score": 0.5}}, None, False),
        ({"calls": 4}, {3: {"score": 0.5}, 9: {"score": 0.1}}, {"judged": "judged"}, True),
        ({}, {}, None, True),
    ],
)
def test_a_new_run_is_written_as_the_old_code_wrote_it(
    details: dict[str, Any],
    evidence: dict[int, dict[str, Any]],
    filters: dict[str, Any] | None,
    keep: bool,
) -> None:
    method = {"template": "{query}", "image_weight": 0.5}
    record = SavedRunParams.for_run(
        method,
        details=details or None,
        evidence=evidence if keep else None,
        filters=filters,
    )
    old = _old_run_params(method, details, evidence, filters, keep)
    assert json.dumps(record.to_json()) == json.dumps(old)


def test_the_store_saves_the_record_and_gives_it_back(tmp_path: Path) -> None:
    with Library.open(tmp_path / "library") as library:
        store = QueryStore(library)
        query_id = store.find_or_create_query("a red circle")
        record = SavedRunParams.from_json(RERANKED)
        store.save_run(query_id, "rerank", [], params=record)
        store.save_run(query_id, "rocchio", [], params=REFINED)  # a plain dict, as before
        reranked, refined = store.runs_for(query_id)
    assert reranked.params == RERANKED and reranked.saved == record
    assert refined.params == REFINED and refined.saved.from_run == 4
