"""Safe exports and imports: no CSV cell runs as a formula in a spreadsheet (and Quadrat reads
its own files back exactly), exported files get a normal file's mode, an import is all or
nothing after a backup, and a bad judgments file is refused in one line naming its line."""

from __future__ import annotations

import csv
import os
import re
import sqlite3
import stat
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from sqlalchemy import func, select

from engine.catalog import Collection, Image, Judgment, JudgmentEvent, Query, Taxon
from engine.catalog.library import Library
from engine.errors import BadInputError
from engine.evaluation.evaluate import (
    BenchmarkJudgment,
    BenchmarkQuery,
    load_judgments,
    load_queries_csv,
    write_judgments_csv,
    write_queries_csv,
)
from engine.files import FORMULA_STARTS, csv_cell, csv_field
from engine.io.export import (
    copy_relevant_photos,
    export_judgments,
    export_results_csv,
    import_benchmark,
)
from engine.judgments.queries import QueryStore
from tests.catalogs import folder_url

# Photo names a spreadsheet would run, and one that merely looks like a guarded cell.
HOSTILE_NAMES = [
    "=HYPERLINK(1).jpg",
    "-x.jpg",
    "+1.jpg",
    "@SUM(A1).jpg",
    "\tTab.jpg",
    "'=quoted.jpg",
    "plain.jpg",
]
NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


def assert_no_formula(path: Path) -> list[list[str]]:
    """Every cell of the CSV at `path` is shown as text by a spreadsheet: none starts with a
    formula character unless it is a plain number. Returns the rows."""
    with open(path, encoding="utf-8", newline="") as handle:
        rows = list(csv.reader(handle))
    for row in rows:
        for cell in row:
            assert not cell.startswith(FORMULA_STARTS) or NUMBER.fullmatch(cell), (cell, row)
    return rows


def _open_library(tmp_path: Path, database_url: str | None = None) -> Library:
    """A library whose photos carry hostile names and metadata (on the catalog given)."""
    photos = tmp_path / "photos"
    photos.mkdir()
    lib = Library.open(tmp_path / "lib", database_url=database_url)
    with lib.catalog.session() as s:
        coll = Collection(root=str(photos), name="=coll")
        taxon = Taxon(key="x", name="-Rana", common_name="@frog", genus="+Rana")
        s.add_all([coll, taxon])
        s.flush()
        for n, name in enumerate(HOSTILE_NAMES):
            (photos / name).write_bytes(f"photo {n}".encode())
            s.add(
                Image(
                    collection_id=coll.id,
                    rel_path=name,
                    size=7,
                    mtime_ns=1,
                    taxon_id=taxon.id,
                    observed_at=datetime(2021, 5, 3),
                    latitude=43.7,
                    longitude=-79.3,
                    license="=cc-by",
                    rights_holder="=cmd|' /C calc'!A0",
                )
            )
    return lib


@pytest.fixture
def library(tmp_path: Path) -> Iterator[Library]:
    with _open_library(tmp_path) as lib:
        yield lib


@pytest.fixture
def any_library(
    tmp_path: Path, catalog_url: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Library]:
    """`library` on SQLite, then on a PostgreSQL server catalog."""
    with _open_library(tmp_path, folder_url(catalog_url, monkeypatch)) as lib:
        yield lib


def image_ids(library: Library) -> dict[str, int]:
    with library.catalog.session() as s:
        return dict(s.execute(select(Image.rel_path, Image.id)).all())  # type: ignore[arg-type]


def judgments_of(library: Library) -> dict[tuple[int, int], int]:
    with library.catalog.session() as s:
        rows = s.execute(select(Judgment.query_id, Judgment.image_id, Judgment.relevance))
        return {(q, i): r for q, i, r in rows}


def counts(library: Library) -> tuple[int, int]:
    """(saved queries, judgment events)."""
    with library.catalog.session() as s:
        return (
            s.scalar(select(func.count()).select_from(Query)) or 0,
            s.scalar(select(func.count()).select_from(JudgmentEvent)) or 0,
        )


# --- 1. CSV injection ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [*HOSTILE_NAMES, "", "'", "''=x", "-79.3", "+1e5", ".5", "-1+2", "-inf", "\uff1dcmd", "a=b"],
)
def test_a_guarded_cell_reads_back_exactly(value: str) -> None:
    cell = csv_cell(value)
    assert isinstance(cell, str)
    assert not cell.startswith(FORMULA_STARTS) or NUMBER.fullmatch(cell)
    assert csv_field(cell) == value


def test_numbers_stay_numbers() -> None:
    assert csv_cell(-79.3) == -79.3
    assert csv_cell("-79.3") == "-79.3"
    assert csv_cell("-0.012000") == "-0.012000"  # a benchmark delta
    assert csv_cell("=1+1") == "'=1+1"


def test_results_and_likely_relevant_exports_run_no_formula(library, tmp_path) -> None:
    ids = image_ids(library)
    ranking = [(ids[name], 0.9 - n / 10) for n, name in enumerate(HOSTILE_NAMES)]
    out = tmp_path / "results.csv"
    export_results_csv(library, out, ranking, {ids["-x.jpg"]: 1})
    rows = assert_no_formula(out)
    table = [dict(zip(rows[0], row, strict=True)) for row in rows[1:]]
    assert table[0]["license"] == "'=cc-by" and table[0]["taxon"] == "'-Rana"
    assert table[0]["longitude"] == "-79.3"  # a number stays a number
    assert table[1]["path"].endswith("/-x.jpg")  # a full path starts with "/" or a drive
    # "Likely relevant" (the probability column) is the same writer.
    likely = tmp_path / "likely.csv"
    export_results_csv(library, likely, ranking, {}, probabilities={i: 0.5 for i, _ in ranking})
    assert_no_formula(likely)


def test_judgments_export_runs_no_formula_and_reads_back_exactly(library, tmp_path) -> None:
    ids = image_ids(library)
    store = QueryStore(library)
    query = store.find_or_create_query("=1+1 frogs")
    store.rename_query(query, "@name")
    store.set_notes(query, "-2+3 notes")
    for n, name in enumerate(HOSTILE_NAMES):
        store.judge(query, ids[name], n % 2)
    out = tmp_path / "judgments.csv"
    export_judgments(library, out)
    assert_no_formula(out)
    before = judgments_of(library)

    # Read back by Quadrat into a fresh library with the same photos: every hostile name
    # matches its own photo, and the query keeps its words, name and notes.
    with Library.open(tmp_path / "other") as other:
        with other.catalog.session() as s:
            coll = Collection(root=str(tmp_path / "photos"), name="=coll")
            s.add(coll)
            s.flush()
            for name in HOSTILE_NAMES:
                s.add(Image(collection_id=coll.id, rel_path=name, size=7, mtime_ns=1))
        report = import_benchmark(other, None, out)
        assert (report.judgments, report.unresolved) == (len(HOSTILE_NAMES), 0)
        (info,) = QueryStore(other).list_queries()
        assert (info.text, info.name, info.notes) == ("=1+1 frogs", "@name", "-2+3 notes")
        other_ids = image_ids(other)
        assert {
            name: QueryStore(other).judgments(info.id)[other_ids[name]] for name in HOSTILE_NAMES
        } == {name: before[query, ids[name]] for name in HOSTILE_NAMES}


def test_benchmark_files_run_no_formula_and_read_back_exactly(tmp_path) -> None:
    queries = [BenchmarkQuery("1", "=cmd query", {"category": "@cat", "=col": "x"})]
    write_queries_csv(tmp_path / "q.csv", queries)
    assert_no_formula(tmp_path / "q.csv")
    assert load_queries_csv(tmp_path / "q.csv") == queries
    judgments = [BenchmarkJudgment("1", f"-{n}a", name, 1) for n, name in enumerate(HOSTILE_NAMES)]
    write_judgments_csv(tmp_path / "j.csv", judgments)
    assert_no_formula(tmp_path / "j.csv")
    assert load_judgments(tmp_path / "j.csv") == judgments  # the leading tab too


def test_inquire_candidates_file_runs_no_formula_and_reads_back(tmp_path) -> None:
    from engine.benchmarks.inquire_rerank import (
        ImportReport,
        _Row,
        _write_benchmark,
        load_candidates_csv,
    )

    report = ImportReport(out=tmp_path, collection=tmp_path / "collection", files=[])
    rows = {"=cmd text": [_Row(0, 7, 1, -0.25)]}
    _write_benchmark(report, rows, {"=cmd text": {}}, {7: {"file_name": "-x/=y.jpg"}})
    for name in ("queries.csv", "judgments.csv", "candidates.csv"):
        assert_no_formula(tmp_path / name)
    (candidate,) = load_candidates_csv(tmp_path / "candidates.csv")["1"]
    assert candidate.image_path == "-x/=y.jpg"


def test_benchmark_tables_csv_runs_no_formula() -> None:
    from app.controllers.benchmark import tables_csv
    from widgets.benchmark_view import BenchmarkTables, CategoryRow, QueryRow, SummaryRow

    tables = BenchmarkTables(
        10,
        "fullrank",
        [SummaryRow("=method", 1, 0.5, 0.5, 0.5, delta=-0.25, ci95=(-0.5, 0.1), p=0.3)],
        [QueryRow("-1", "=HYPERLINK(evil)", "+m", 0.5, 0.5, 1.0, 2)],
        [CategoryRow("@col", "-val", "=m", 1, 0.5, 0.5)],
    )
    text = tables_csv(tables)
    rows = list(csv.reader(text.splitlines()))
    for row in rows:
        for cell in row:
            assert not cell.startswith(FORMULA_STARTS) or NUMBER.fullmatch(cell), (cell, row)
    assert rows[1][12] == "-0.250000"  # delta_vs_first: a number, left as one
    assert rows[2][3] == "'=HYPERLINK(evil)"


# --- 2. file modes -----------------------------------------------------------------------------


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


@pytest.mark.skipif(os.name == "nt", reason="POSIX modes")
def test_exports_get_a_normal_files_mode(library, tmp_path, umask_022) -> None:
    ids = image_ids(library)
    store = QueryStore(library)
    query = store.find_or_create_query("frogs")
    store.judge(query, ids["plain.jpg"], 1)
    export_judgments(library, tmp_path / "j.csv")
    export_results_csv(library, tmp_path / "r.csv", [(ids["plain.jpg"], 1.0)])
    for name in ("j.csv", "r.csv"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o644, name

    # A copied photo: the mode of a new file there, whatever the source's (private here).
    (tmp_path / "photos" / "plain.jpg").chmod(0o600)
    (copied,) = copy_relevant_photos(library, query, tmp_path / "out")
    assert stat.S_IMODE(copied.stat().st_mode) == 0o644
    assert copied.read_bytes() == (tmp_path / "photos" / "plain.jpg").read_bytes()

    # Writing over an export keeps the mode its owner gave it, as writing in place would.
    (tmp_path / "j.csv").chmod(0o640)
    export_judgments(library, tmp_path / "j.csv")
    assert stat.S_IMODE((tmp_path / "j.csv").stat().st_mode) == 0o640


# --- 3. imports: all or nothing, after a backup --------------------------------------------

_KILLED_IMPORT = textwrap.dedent(
    """
    import os, sys
    import engine.io.export
    from engine.benchmarks.runner import JudgmentResolver
    from engine.io.export import import_benchmark
    from engine.catalog.library import Library

    engine.io.export._FLUSH_EVERY = 1  # every judgment reaches the database before the kill
    calls = 0
    resolve = JudgmentResolver.__call__

    def dying(self, judgment):
        global calls
        calls += 1
        if calls == int(sys.argv[3]):
            os._exit(9)  # killed mid-import, with no chance to clean up
        return resolve(self, judgment)

    JudgmentResolver.__call__ = dying
    with Library.open(sys.argv[1]) as library:
        import_benchmark(library, None, sys.argv[2])
    """
)


def test_a_killed_import_leaves_every_old_value_and_no_new_one(any_library, tmp_path) -> None:
    library = any_library
    ids = image_ids(library)
    store = QueryStore(library)
    query = store.find_or_create_query("frogs")
    old = {name: n % 2 for n, name in enumerate(HOSTILE_NAMES)}
    for name, relevance in old.items():
        store.judge(query, ids[name], relevance)
    before = judgments_of(library)
    queries_before, events_before = counts(library)
    # The file flips every judgment of the saved query and adds a new query of its own.
    lines = ["query_id,image_path,relevant,query_text"]
    lines += [f"{query},{csv_cell(name)},{1 - old[name]},frogs" for name in HOSTILE_NAMES]
    lines += [f"new-1,{csv_cell(name)},1,a new query" for name in HOSTILE_NAMES]
    judgments_file = tmp_path / "import.csv"
    judgments_file.write_text("\n".join(lines) + "\n")
    library_root = library.root
    library.close()

    killed = subprocess.run(
        [sys.executable, "-c", _KILLED_IMPORT, str(library_root), str(judgments_file), "10"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert killed.returncode == 9, killed.stderr

    with Library.open(library_root) as reopened:
        assert judgments_of(reopened) == before  # every old value, no new one
        assert counts(reopened) == (queries_before, events_before)
        # The backup taken before the import holds the library as it was.
        (backup,) = (library_root / "backups").glob("*before-import*")
        if reopened.catalog.engine.dialect.name == "sqlite":
            with sqlite3.connect(backup) as db:
                assert db.execute("SELECT count(*) FROM judgments").fetchone() == (len(old),)
        # The same import, not killed, applies whole.
        report = import_benchmark(reopened, None, judgments_file)
        assert (report.judgments, report.unresolved) == (2 * len(HOSTILE_NAMES), 0)
        after = judgments_of(reopened)
        assert {name: after[query, ids[name]] for name in HOSTILE_NAMES} == {
            name: 1 - value for name, value in old.items()
        }
        assert counts(reopened)[0] == queries_before + 1


# --- 4. messages -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "line", "says"),
    [
        ("1,plain.jpg,1\n1,-x.jpg,99999999999999999999999999\n", 3, "out of range"),
        ("1,plain.jpg,1\n1," + "b" * 140_000 + ",1\n", 3, "longer than 131,072 characters"),
        ("1,plain.jpg,1\n1,-x.jpg,-1\n", 3, "relevant -1 cannot be imported"),
        ("1,plain.jpg,1\n1,-x.jpg,1" + "9" * 5000 + "\n", 3, "must be an integer"),
    ],
    ids=["overflow", "field-size", "negative", "huge-digits"],
)
def test_a_bad_judgments_file_is_one_line_and_imports_nothing(
    library, tmp_path, body, line, says
) -> None:
    ids = image_ids(library)
    store = QueryStore(library)
    query = store.find_or_create_query("frogs")
    store.judge(query, ids["plain.jpg"], 0)
    before, counted = judgments_of(library), counts(library)
    path = tmp_path / "bad.csv"
    path.write_text("query_id,image_path,relevant\n" + body.replace("1,", f"{query},", 1))
    with pytest.raises(BadInputError) as caught:
        import_benchmark(library, None, path)
    message = str(caught.value)
    assert "\n" not in message and len(message) < 400
    assert f"{path} line {line}:" in message and says in message
    assert "nothing was imported" in message
    assert judgments_of(library) == before and counts(library) == counted
    assert not (library.root / "backups").exists()  # refused before the backup, too
