"""The filter flags of `quadrat search` and `quadrat evaluate` (app/cli/filters.py), end to end:
each flag alone and combined on the demo and on the hand-made collection of edge cases, bad
values refused with one line naming the flag, and benchmark rankings restricted by them."""

from __future__ import annotations

import csv
import json
from datetime import date, datetime
from pathlib import Path

import pytest

from app.cli import main
from engine.search.filters import SearchFilters
from tests.test_filters import (
    EVERY_OK,
    MORE_PHOTOS,
    build_edge_collections,
    demo_expected,
)


def run(capsys, *argv: object) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def found(capsys, library: Path, *flags: object, text: str = "a photo") -> set[str]:
    code, out, err = run(capsys, "search", text, "--library", library, "--top", 1000, "--json",
                         *flags)  # fmt: skip
    assert code == 0, err
    return {json.loads(line)["rel_path"] for line in out.splitlines() if line.strip()}


@pytest.fixture(scope="module")
def demo_lib(tmp_path_factory, copy_cli_small_demo_library) -> Path:
    return copy_cli_small_demo_library(tmp_path_factory.mktemp("cli-filters") / "lib")


@pytest.fixture(scope="module")
def demo_records(small_demo_collection) -> dict[str, dict]:
    data = json.loads(Path(small_demo_collection.metadata_path).read_text())
    taxon_of = {a["image_id"]: a["category_id"] for a in reversed(data["annotations"])}
    categories = {c["id"]: c for c in data["categories"]}
    return {
        img["file_name"]: {**img, "taxon": categories[taxon_of[img["id"]]]}
        for img in data["images"]
    }


@pytest.fixture(scope="module")
def edge_lib(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("cli-edge")
    edge, more = build_edge_collections(root / "photos")
    lib = root / "lib"
    for folder in (edge, more):
        assert main(["index", str(folder), "--library", str(lib), "--model", "demo"]) == 0
    (edge / "gone.jpg").unlink()  # indexed, then gone from disk: kept as missing, never found
    assert main(["index", str(edge), "--library", str(lib)]) == 0
    return lib


# -- search on the demo -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "filters"),
    [
        (["--taxon", "circulus"], SearchFilters(taxon="Circulus")),
        (["--taxon", "Blue Square"], SearchFilters(taxon="blue square")),
        (["--months", "jun-aug"], SearchFilters(months=(6, 8))),
        (["--months", "6-8"], SearchFilters(months=(6, 8))),
        (["--months", "November-feb"], SearchFilters(months=(11, 2))),
        (["--months", "jul"], SearchFilters(months=(7, 7))),
        (["--date-from", "2021-01-01", "--date-to", "2022-06-30"],
         SearchFilters(date_from=date(2021, 1, 1), date_to=date(2022, 6, 30))),
        (["--bbox", "-60,100,0,-100"], SearchFilters(bbox=(-60, 100, 0, -100))),  # across 180°
        (["--near", "51.5,-0.12,10"], SearchFilters(near=(51.5, -0.12, 10))),
        (["--license", "CC BY 4.0", "--license", "cc0"], SearchFilters(licenses=("cc-by", "cc0"))),
        (["--taxon", "Quadratales", "--months", "3-9", "--license", "cc_by_nc"],
         SearchFilters(taxon="Quadratales", months=(3, 9), licenses=("cc-by-nc",))),
        (["--near", "35.68,139.69,50", "--date-from", "2021-01-01", "--taxon", "Formae"],
         SearchFilters(near=(35.68, 139.69, 50), date_from=date(2021, 1, 1), taxon="Formae")),
    ],
)  # fmt: skip
def test_search_flags_alone_and_combined_on_the_demo(
    capsys, demo_lib, demo_records, flags, filters
):
    expected = demo_expected(demo_records, filters)
    assert 0 < len(expected) < len(demo_records)  # each case really filters
    assert found(capsys, demo_lib, *flags) == expected


def test_search_says_which_filters_applied(capsys, demo_lib, small_demo_collection):
    code, out, err = run(capsys, "search", "red circle", "--library", demo_lib, "--months",
                         "nov-feb", "--collection", Path(small_demo_collection.root).name)  # fmt: skip
    assert code == 0
    # The collection by its name, as the window's chip says it, not by its number.
    name = Path(small_demo_collection.root).name
    assert f"note: only photos passing the filters: Nov–Feb, any year; collection {name}" in err
    assert out.strip()


# -- search on the edge cases -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--taxon", "Anura"], {"frog1.jpg", "frog2.jpg", "frog3.jpg"}),
        (["--date-from", "2020-02-29", "--date-to", "2020-02-29"], {"frog1.jpg"}),
        (["--months", "feb"], {"frog1.jpg", "squirrel.jpg"}),
        (["--months", "nov-feb"],
         {"frog1.jpg", "bug1.jpg", "bug2.jpg", "beetle1.jpg", "squirrel.jpg"}),
        (["--bbox", "-20,179,-10,-179"], {"bug1.jpg", "bug2.jpg"}),
        (["--near", "-17,179.95,20"], {"bug1.jpg", "bug2.jpg"}),
        (["--near", "89.5,0,150"], {"beetle1.jpg", "beetle2.jpg"}),
        # "public domain" is the Public Domain Mark, never CC0 (a different instrument).
        (["--license", "public domain"], {"beetle1.jpg"}),
        (["--license", "CC0"], {"frog3.jpg", "untaxed.jpg"}),
        (["--license", "http://creativecommons.org/licenses/by-nc/4.0/"],
         {"frog2.jpg", "bug1.jpg", "bug2.jpg"}),
        (["--collection", "more"], set(MORE_PHOTOS)),
        (["--collection", "edge", "--collection", "more"], EVERY_OK),
        (["--taxon", "Animalia", "--near", "89.5,0,150", "--months", "mar"], {"beetle2.jpg"}),
        (["--taxon", "Rana", "--collection", "more"], set()),
    ],
)  # fmt: skip
def test_search_flags_on_the_edge_cases(capsys, edge_lib, flags, expected):
    assert found(capsys, edge_lib, *flags) == expected


# -- bad values -------------------------------------------------------------------------------


BAD_FLAGS = [
    (["--months", "13"], "--months"),
    (["--months", "jun-foo"], "--months"),
    (["--months", "1-2-3"], "--months"),
    (["--date-from", "2021-02-29"], "--date-from"),  # not a leap year
    (["--date-to", "yesterday"], "--date-to"),
    (["--date-from", "2021-03-01", "--date-to", "2021-02-01"], "--date-from"),
    (["--bbox", "1,2,3"], "--bbox"),
    (["--bbox", "10,0,-10,5"], "--bbox"),
    (["--bbox", "0,0,10,181"], "--bbox"),
    (["--near", "45,-79"], "--near"),
    (["--near", "45,-79,0"], "--near"),
    (["--near", "45,-79,20001"], "--near"),
    (["--near", "91,0,5"], "--near"),
    (["--near", "45,-79,nan"], "--near"),
    (["--license", "  "], "--license"),
]


@pytest.mark.parametrize(("flags", "named"), BAD_FLAGS)
def test_bad_search_filter_values_exit_2_naming_the_flag(capsys, demo_lib, flags, named):
    code, out, err = run(capsys, "search", "red circle", "--library", demo_lib, *flags)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and named in err and "Traceback" not in err


def test_unknown_collection_exits_2_naming_the_flag_and_the_choices(capsys, edge_lib):
    code, _, err = run(capsys, "search", "a frog", "--library", edge_lib, "--collection", "nope")
    assert code == 2
    assert err.strip() == (
        "error: --collection: no collection 'nope' in the library; the collections: 'edge', 'more'"
    )


# -- evaluate ---------------------------------------------------------------------------------


def _evaluate(capsys, library: Path, collection, *flags: object) -> tuple[int, dict, str]:
    code, out, err = run(capsys, "evaluate", "--queries", collection.queries_path, "--judgments",
                         collection.judgments_path, "--library", library, "--k", 10,
                         "--permutations", 100, "--json", *flags)  # fmt: skip
    return code, (json.loads(out) if code == 0 else {}), err


def _run_file(path: Path, records: dict[str, dict]) -> dict[str, list[str]]:
    by_id = {str(r["id"]): name for name, r in records.items()}
    ranked: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        qid, _, docid, *_ = line.split()
        ranked.setdefault(qid, []).append(by_id[docid])
    return ranked


def test_evaluate_filters_restrict_every_ranking_and_keep_R(
    capsys, tmp_path, demo_lib, demo_records, small_demo_collection
):
    run_out = tmp_path / "run.trec"
    code, plain, _ = _evaluate(capsys, demo_lib, small_demo_collection)
    assert code == 0
    code, filtered, err = _evaluate(capsys, demo_lib, small_demo_collection, "--months", "jun-aug",
                                    "--license", "cc-by", "--license", "CC0",
                                    "--run-out", run_out)  # fmt: skip
    assert code == 0, err
    filters = SearchFilters(months=(6, 8), licenses=("cc-by", "cc0"))
    allowed = demo_expected(demo_records, filters)
    ranked = _run_file(run_out, demo_records)
    assert ranked and all(set(names) <= allowed for names in ranked.values())
    assert filtered["filters"] == {"months": [6, 8], "licenses": ["cc-by", "cc0"]}
    with open(small_demo_collection.judgments_path, newline="") as f:
        relevant = [row["image_path"] for row in csv.DictReader(f)]
    outside = sum(1 for path in relevant if path not in allowed)
    assert 0 < outside < len(relevant)
    assert filtered["relevant_outside_filters"] == outside
    assert f"{outside} relevant judgments name photos outside them and stay in R" in err
    # R is whole: the same per-query R as without filters, and the mean can only fall.
    assert [q["R"] for q in filtered["per_query"]] == [q["R"] for q in plain["per_query"]]
    assert filtered["mAP@10"] < plain["mAP@10"]
    assert "filters" not in plain


def test_evaluate_several_collections_with_a_filter(capsys, tmp_path, edge_lib):
    queries = tmp_path / "queries.csv"
    queries.write_text(",query_id,query_text,supercategory,category,iconic_group\n"
                       "0,1,a frog,Animals,species,Amphibia\n")  # fmt: skip
    judgments = tmp_path / "judgments.csv"
    judgments.write_text("query_id,image_path\n1,frog1.jpg\n1,frog2.jpg\n1,more1.jpg\n")
    run_out = tmp_path / "run.trec"
    code, out, err = run(capsys, "evaluate", "--queries", queries, "--judgments", judgments,
                         "--library", edge_lib, "--k", 10, "--permutations", 10, "--json",
                         "--collection", "edge", "--collection", "more", "--taxon", "Anura",
                         "--run-out", run_out)  # fmt: skip
    assert code == 0, err
    result = json.loads(out)
    assert sorted(c["name"] for c in result["collections"]) == ["edge", "more"]
    assert result["filters"]["taxon"] == "Anura"
    assert result["relevant_outside_filters"] == 1  # more1.jpg: relevant, but no frog
    assert result["per_query"][0]["R"] == 3
    assert len(run_out.read_text().splitlines()) == 3  # only the three frogs were ranked
    # One collection of the two: the other's judged photo leaves R, as --collection does.
    code, out, err = run(capsys, "evaluate", "--queries", queries, "--judgments", judgments,
                         "--library", edge_lib, "--k", 10, "--permutations", 10, "--json",
                         "--collection", "edge")  # fmt: skip
    assert code == 0, err
    assert json.loads(out)["per_query"][0]["R"] == 2


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        *BAD_FLAGS,
        (["--collection", "all", "--collection", "edge"], "--collection"),
        (["--collection", "edge", "--collection", "nope"], "--collection"),
    ],
)
def test_bad_evaluate_filter_values_exit_2_naming_the_flag(
    capsys, edge_lib, small_demo_collection, flags, named
):
    code, _, err = _evaluate(capsys, edge_lib, small_demo_collection, *flags)
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and named in err and "Traceback" not in err


def test_month_names_and_numbers_parse_alike():
    from app.cli.filters import month_range

    assert month_range("jun-aug") == month_range("6-8") == month_range("June–August") == (6, 8)
    assert month_range("nov-feb") == (11, 2)
    assert month_range("Sept") == (9, 9)
    assert datetime(2024, 2, 29).month in range(month_range("feb")[0], month_range("feb")[1] + 1)
