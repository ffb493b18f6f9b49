"""The registry of filter kinds: every filter field has one kind that checks it, and what the
command line and the window read from the registry is what they showed before."""

from __future__ import annotations

from dataclasses import fields

import pytest

from engine.errors import BadInputError
from engine.search.filter_kinds import KINDS, cli_options, menu_entries
from engine.search.filters import SearchFilters


def test_every_filter_field_has_exactly_one_kind() -> None:
    owned = [name for kind in KINDS for name in kind.fields]
    assert sorted(owned) == sorted(f.name for f in fields(SearchFilters))
    assert len({kind.name for kind in KINDS}) == len(KINDS)
    # Checks, SQL terms and chips go in the order of the fields.
    assert owned == [f.name for f in fields(SearchFilters)]


def test_the_options_and_the_menu_come_in_their_documented_order() -> None:
    assert [o.flag for o in cli_options()] == [
        "--taxon", "--date-from", "--date-to", "--months", "--bbox", "--near", "--license",
        "--keyword", "--hours", "--deployment", "--collection", "--empty", "--not-empty",
        "--detected", "--label",
    ]  # fmt: skip
    assert [e.label for e in menu_entries()] == [
        "Taxon", "Date range…", "Months of the year…", "Hour of day…", "Keyword…", "Place",
        "Licence", "Collection", "Deployment", "Judged for the open query", "Empty frames",
        "Detected category", "Classifier label",
    ]  # fmt: skip
    names = {f.name for f in fields(SearchFilters)}
    assert all(o.field in names for o in cli_options())


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"months": [0, 5]}, "filter months"),
        ({"hours": [3]}, "filter hours"),
        ({"near": [0, 0, 0]}, "filter near"),
        ({"judged": "judged"}, "filter judged"),
        ({"licenses": [3]}, "filter licenses"),
        ({"keyword": 7}, "filter keyword"),
    ],
)
def test_a_bad_value_is_refused_by_its_own_kind(values: dict[str, object], named: str) -> None:
    with pytest.raises(BadInputError, match=named):
        SearchFilters(**values)  # type: ignore[arg-type]


def test_without_clears_every_field_of_the_kind_named() -> None:
    filters = SearchFilters(
        judged="judged", judged_query_id=3, deployment_ids=(2, 1), date_from="2024-01-01"
    )
    assert filters.without("judged_query_id") == filters.without("judged")
    assert filters.without("judged") == SearchFilters(deployment_ids=(1, 2), date_from="2024-01-01")  # type: ignore[arg-type]
    assert filters.without("deployment_ids").deployment_ids == ()
    assert not filters.without("date").date_from
    with pytest.raises(ValueError, match="no filter 'nope'"):
        filters.without("nope")
