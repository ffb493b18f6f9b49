"""`quadrat import-inquire-rerank` on Parquet files written here with INQUIRE-Rerank's published
schema (docs/SPEC.md §6.5), then `quadrat evaluate --protocol rerank --candidates` on its output."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from app.cli import main
from engine.demo.scenes import draw_demo_image
from engine.indexing.coco import load_coco_metadata

IMAGE_TYPE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
SCHEMA = pa.schema(
    [
        ("image", IMAGE_TYPE),
        ("query", pa.string()),
        ("relevant", pa.int64()),
        ("clip_score", pa.float64()),
        ("inat24_image_id", pa.int64()),
        ("inat24_file_name", pa.string()),
        ("supercategory", pa.string()),
        ("category", pa.string()),
        ("iconic_group", pa.string()),
        ("inat24_species_id", pa.int64()),
        ("inat24_species_name", pa.string()),
        ("latitude", pa.float64()),
        ("longitude", pa.float64()),
        ("location_uncertainty", pa.float64()),
        ("date", pa.string()),
        ("license", pa.string()),
        ("rights_holder", pa.string()),
    ]
)

# Photo id -> (colour, shape); 9 does not decode.
PHOTOS = {
    1: ("red", "circle"),
    2: ("red", "circle"),
    3: ("blue", "square"),
    4: ("green", "circle"),
    5: ("blue", "square"),
    6: ("yellow", "triangle"),
    7: ("green", "triangle"),
    8: ("red", "circle"),
    9: ("red", "circle"),
}
CORRUPT = 9
# (query, photo id, relevant, clip_score) in file order: queries unsorted, scores not descending,
# photos 3 and 1 each a candidate of two queries; for "a red circle" photo 8 looks right but is
# judged not relevant and photo 4 the other way round (expert judgments are not the prompt).
ROWS = [
    ("a red circle", 4, 1, 0.20),
    ("a red circle", 1, 1, 0.31),
    ("a red circle", 3, 0, 0.12),
    ("a red circle", 9, 1, 0.40),
    ("a red circle", 2, 1, 0.25),
    ("a red circle", 8, 0, 0.33),
    ("a blue square", 3, 1, 0.30),
    ("a blue square", 1, 0, 0.29),
    ("a blue square", 5, 1, 0.10),
    ("a blue square", 6, 0, 0.05),
    ("a green triangle", 6, 0, 0.22),
    ("a green triangle", 7, 1, 0.21),
]


def file_name(image_id: int) -> str:
    colour, shape = PHOTOS[image_id]
    return f"train/{image_id:05d}_Plantae_Demonstrata_Formae_Rotundales_Circulaceae_Circulus_{colour}/{image_id:04d}-{shape}.jpg"


def jpeg(image_id: int) -> bytes:
    colour, shape = PHOTOS[image_id]
    buffer = io.BytesIO()
    draw_demo_image(np.random.default_rng(image_id), colour, shape).save(buffer, format="JPEG")
    data = buffer.getvalue()
    return data[:300] if image_id == CORRUPT else data  # cut short: does not decode


def record(query: str, image_id: int, relevant: int, score: float) -> dict:
    colour, shape = PHOTOS[image_id]
    return {
        "image": {"bytes": jpeg(image_id), "path": None},
        "query": query,
        "relevant": relevant,
        "clip_score": score,
        "inat24_image_id": image_id,
        "inat24_file_name": file_name(image_id),
        "supercategory": "Appearance",
        "category": "Colour",
        "iconic_group": "Plants",
        "inat24_species_id": 100 + image_id,
        "inat24_species_name": f"{colour.title()} {shape}",
        "latitude": 10.0 + image_id,
        "longitude": -20.0 - image_id,
        "location_uncertainty": None,
        "date": f"2021-05-0{image_id} 10:00:00+00:00",
        "license": "CC BY 4.0",
        "rights_holder": f"observer {image_id}",
    }


def write_parquet(path: Path, schema: pa.Schema = SCHEMA) -> None:
    rows = [record(*row) for row in ROWS]
    table = pa.Table.from_pylist(rows, schema=SCHEMA).select(schema.names)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, row_group_size=4)  # several row groups, read in batches


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def hand_ap(ranked: list[str], relevant: set[str]) -> float:
    """AP over the whole candidate list, normalised by the relevant among the candidates."""
    hits, total = 0, 0.0
    for rank, docid in enumerate(ranked, start=1):
        if docid in relevant:
            hits += 1
            total += hits / rank
    return total / hits if hits else 0.0


def test_import_writes_collection_and_benchmark_that_evaluate_scores(capsys, tmp_path):
    source = tmp_path / "inquire-rerank"
    write_parquet(source / "data" / "validation-00000-of-00001.parquet")
    out, lib = tmp_path / "out", tmp_path / "lib"
    code, stdout, err = run(
        capsys, "import-inquire-rerank", str(source), "--out", str(out),
        "--library", str(lib), "--split", "validation", "--model", "demo", "--json",
    )  # fmt: skip
    assert code == 0, err
    report = json.loads(stdout)
    good = sorted(set(PHOTOS) - {CORRUPT})

    # One file per photo id (photos 1 and 3 serve two queries); the corrupt one is left out.
    collection = out / "collection"
    on_disk = sorted(p.relative_to(collection).as_posix() for p in collection.rglob("*.jpg"))
    assert on_disk == sorted(file_name(i) for i in good)
    assert (report["photos"], report["written"], report["rows"]) == (8, 8, 12)
    assert [bad["photo"] for bad in report["bad"]] == [f"image 9 ({file_name(9)})"]
    assert report["index"]["indexed"] == 8 and report["index"]["skipped"] == []

    # The scanner reads the metadata back: taxon, date, place, licence, rights holder.
    metadata = load_coco_metadata(collection / "metadata.json")
    meta = metadata[file_name(3)]
    assert meta.taxon is not None and meta.taxon.name == "Blue square"
    assert (meta.latitude, meta.longitude) == (13.0, -23.0)
    assert meta.observed_at is not None and meta.observed_at.date().isoformat() == "2021-05-03"
    assert (meta.license, meta.rights_holder, meta.external_id) == ("CC BY 4.0", "observer 3", 3)
    assert len(metadata) == 8

    # Queries in sorted order; negatives kept; candidates ranked by clip_score.
    queries = read_csv(out / "queries.csv")
    assert [(q["query_id"], q["query_text"]) for q in queries] == [
        ("1", "a blue square"), ("2", "a green triangle"), ("3", "a red circle"),
    ]  # fmt: skip
    assert queries[0]["supercategory"] == "Appearance" and queries[0]["split"] == "validation"
    judgments = read_csv(out / "judgments.csv")
    assert len(judgments) == 11 and sum(j["relevant"] == "0" for j in judgments) == 5
    candidates = read_csv(out / "candidates.csv")
    red = [(c["image_id"], c["rank"]) for c in candidates if c["query_id"] == "3"]
    assert red == [("8", "1"), ("1", "2"), ("2", "3"), ("4", "4"), ("3", "5")]

    # The printed command scores the benchmark on exactly the fixed candidates.
    command = report["evaluate"]
    assert command[:2] == ["quadrat", "evaluate"] and command[-4:] == [
        "--method", "text", "--method", "rerank",
    ]  # fmt: skip
    run_file = tmp_path / "run.trec"
    code, stdout, err = run(
        capsys, *command[1:-4], "--method", "text", "--json", "--run-out", str(run_file)
    )
    assert code == 0, err
    result = json.loads(stdout)
    assert result["queries"] == 3 and result["unresolved_candidates"] == 0
    ranked: dict[str, list[str]] = {}
    for line in run_file.read_text().splitlines():
        query_id, _, docid, *_ = line.split()
        ranked.setdefault(query_id, []).append(docid)
    for query_id in ("1", "2", "3"):
        listed = {c["image_id"] for c in candidates if c["query_id"] == query_id}
        assert set(ranked[query_id]) == listed  # not the top 100 of the whole collection
    relevant = {(j["query_id"], j["image_id"]) for j in judgments if j["relevant"] == "1"}
    per_query = {row["query_id"]: row for row in result["per_query"]}
    for query_id, docids in ranked.items():
        expected = hand_ap(docids, {d for q, d in relevant if q == query_id})
        assert per_query[query_id]["AP"] == pytest.approx(expected)
    assert per_query["3"]["R"] == 3  # the corrupt relevant photo is no candidate
    assert per_query["3"]["AP"] < 1.0  # so the hand computation has something to check
    assert result["mAP@100"] == pytest.approx(np.mean([per_query[q]["AP"] for q in "123"]))

    # A second run writes nothing new and leaves the same files.
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    code, stdout, err = run(
        capsys, "import-inquire-rerank", str(source), "--out", str(out), "--split", "validation",
        "--no-index", "--json",
    )  # fmt: skip
    assert code == 0, err
    assert json.loads(stdout)["written"] == 0
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


def test_a_file_missing_a_column_gives_exit_2_and_one_line(capsys, tmp_path):
    source = tmp_path / "parquet"
    write_parquet(source / "test-00000-of-00001.parquet", SCHEMA.remove(16))  # rights_holder
    code, _, err = run(capsys, "import-inquire-rerank", str(source), "--no-index")
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and "missing column rights_holder" in err
    assert not (source / "collection").exists()  # refused before any photo was written


def test_not_parquet_and_wrong_split_give_exit_2_and_one_line(capsys, tmp_path):
    source = tmp_path / "parquet"
    source.mkdir()
    (source / "test-00000-of-00001.parquet").write_bytes(b"not parquet at all")
    code, _, err = run(capsys, "import-inquire-rerank", str(source), "--no-index")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "not a Parquet file" in err
    code, _, err = run(
        capsys, "import-inquire-rerank", str(source), "--split", "validation", "--no-index"
    )
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--split all" in err
