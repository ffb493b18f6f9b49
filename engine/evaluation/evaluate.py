"""Benchmark files and benchmark runs (docs/SPEC.md §3–§5).

Reads INQUIRE query and judgment CSVs and TREC qrels and runs; writes TREC runs and qrels and
INQUIRE-style CSVs; scores runs with `engine.evaluation.metrics` under the FULLRANK or RERANK protocol.
The library is not imported here: `run_benchmark` takes the search and the judgment-to-image
matching as callables, so the same code serves the CLI, the GUI and tests.

Every malformed file raises `BadInputError` with one line naming the file and the line number.
"""

from __future__ import annotations

import csv
import io
import logging
import math
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from engine.errors import BadInputError
from engine.evaluation.metrics import (
    PROTOCOLS,
    TIES,
    MeanMetrics,
    QueryMetrics,
    evaluate_scored_ranking,
    mean_metrics,
    strict_order,
)
from engine.files import atomic_write_text, csv_field, csv_row
from engine.progress import CancelToken, ProgressCallback, RateMeter, no_progress

log = logging.getLogger(__name__)

StrPath = str | os.PathLike[str]

INQUIRE_QUERY_ID = "inquire_query_id"
"""A queries column holding INQUIRE's own id of a query (an imported benchmark renumbers its
queries): carried to per-query results so they join INQUIRE's, and never a category to average."""


@dataclass(frozen=True)
class BenchmarkQuery:
    """One benchmark query; `extra` keeps the other columns (supercategory, category, ...)."""

    query_id: str
    text: str
    extra: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class BenchmarkJudgment:
    """One line of a benchmark's judgments file (CSV or TREC qrels; the catalog's own rows are
    `engine.catalog.Judgment`): an image (by id, by path relative to the collection root, or
    both) is relevant (> 0) or not (0) for a query. The integer leaves room for graded ones."""

    query_id: str
    image_id: str | None
    image_path: str | None
    relevant: int
    # The collection the photo belongs to (its name, or its folder when names clash): a relative
    # path is ambiguous in a library whose collections share a layout. None when not given.
    collection: str | None = None


# --- reading ---------------------------------------------------------------------------------


def _read_text(path: StrPath) -> str:
    """The whole file as text (UTF-8, a byte-order mark tolerated), or a one-line BadInputError."""
    try:
        with open(path, encoding="utf-8-sig", newline="") as handle:
            return handle.read()
    except FileNotFoundError:
        raise BadInputError(f"{os.fspath(path)}: no such file") from None
    except IsADirectoryError:
        raise BadInputError(f"{os.fspath(path)}: is a folder, expected a file") from None
    except UnicodeDecodeError as err:
        raise BadInputError(
            f"{os.fspath(path)}: not a UTF-8 text file (byte {err.start})"
        ) from None
    except OSError as err:
        raise BadInputError(f"{os.fspath(path)}: cannot read ({err.strerror})") from None


def _fail(path: StrPath, line: int, message: str) -> BadInputError:
    return BadInputError(f"{os.fspath(path)} line {line}: {message}")


def _csv_rows(path: StrPath, text: str) -> Iterator[tuple[int, list[str]]]:
    """(line number, fields) for each non-blank CSV record; the number is the record's last line.
    Fields come back as Quadrat's exports meant them (`engine.files.csv_field`)."""
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    try:
        for row in reader:
            if not row or all(not value.strip() for value in row):
                continue
            yield reader.line_num, [csv_field(value.strip()) for value in row]
    except csv.Error as err:
        raise _fail(path, reader.line_num, _csv_problem(err)) from None


def _csv_problem(err: csv.Error) -> str:
    """What a csv module error means for the person holding the file."""
    if "field larger than field limit" in str(err):
        return (
            f"a field is longer than {csv.field_size_limit():,} characters, more than any photo "
            "path or query text; check the quotes (a quote left open runs to the end of the "
            "file) and that this is the file you meant"
        )
    return f"malformed CSV ({err})"


def _csv_table(
    path: StrPath, text: str, required: Sequence[str]
) -> tuple[list[str], Iterator[tuple[int, dict[str, str]]]]:
    """Header names and an iterator of rows as dicts; unnamed columns (a pandas index) dropped."""
    rows = _csv_rows(path, text)
    first = next(rows, None)
    if first is None:
        raise BadInputError(f"{os.fspath(path)}: empty file, expected a CSV header")
    header_line, header = first
    names = [name.lower() if name.lower() in required else name for name in header]
    missing = [name for name in required if name not in names]
    if missing:
        raise _fail(
            path,
            header_line,
            f"missing column {', '.join(missing)} in header ({', '.join(header) or 'empty'})",
        )

    def records() -> Iterator[tuple[int, dict[str, str]]]:
        for line, values in rows:
            if len(values) != len(names):
                raise _fail(path, line, f"expected {len(names)} fields, got {len(values)}")
            yield line, {name: value for name, value in zip(names, values, strict=True) if name}

    return [name for name in names if name], records()


def load_queries_csv(path: StrPath) -> list[BenchmarkQuery]:
    """Queries in the INQUIRE format: `,query_id,query_text,supercategory,category,iconic_group`.

    `query_id` and `query_text` are required; other named columns are kept in `extra`, an unnamed
    first column (the pandas index) is dropped, missing optional columns are fine.
    """
    text = _read_text(path)
    _, records = _csv_table(path, text, required=("query_id", "query_text"))
    queries: list[BenchmarkQuery] = []
    seen: dict[str, int] = {}
    for line, record in records:
        query_id = record.pop("query_id")
        query_text = record.pop("query_text")
        if not query_id:
            raise _fail(path, line, "empty query_id")
        if not query_text:
            raise _fail(path, line, f"empty query_text for query {query_id}")
        if query_id in seen:
            raise _fail(path, line, f"query_id {query_id} repeats line {seen[query_id]}")
        seen[query_id] = line
        queries.append(BenchmarkQuery(query_id, query_text, record))
    if not queries:
        raise BadInputError(f"{path}: no queries in the file (empty)")
    return queries


def _looks_like_csv_header(line: str) -> bool:
    try:
        fields = next(csv.reader([line]), [])
    except csv.Error:  # a field over the size limit: `_csv_rows` says so with its line
        return "query_id" in line.lower()
    return "query_id" in (name.strip().lower() for name in fields)


def load_judgments(path: StrPath) -> list[BenchmarkJudgment]:
    """Judgments from any of the accepted formats, told apart by content:

    - INQUIRE annotations CSV `query_id,image_id,image_path`: one row per relevant image;
    - the same with a `relevant` column (0/1, any integer), so negatives are recorded too;
      either of `image_id` / `image_path` may be absent;
    - TREC qrels `qid 0 docid rel` (whitespace separated); the docid becomes `image_id`.

    A file with no judgment (empty, blank, comments or a header only) is an error: scoring against
    nothing would print zeros that look like results. A photo judged twice for one query is
    counted once, with a warning naming the lines, when both lines agree, and is an error naming
    both lines when they do not.
    """
    return [judgment for _, judgment in load_judgment_lines(path)]


def load_judgment_lines(
    path: StrPath, judge_of_line: Callable[[int], str] | None = None
) -> list[tuple[int, BenchmarkJudgment]]:
    """`load_judgments` with the line each judgment was read from (for messages).

    With `judge_of_line` (line -> who made the judgment on it), a file may hold several judges'
    marks of one photo: repeats are checked per judge, per photo, and each judge's are kept."""
    text = _read_text(path)
    first_line = next(
        (line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")),
        None,
    )
    if first_line is None:
        judgments: list[tuple[int, BenchmarkJudgment]] = []
    elif _looks_like_csv_header(first_line):
        judgments = _load_judgments_csv(path, text)
    elif "," in first_line:
        line = text.splitlines().index(first_line) + 1
        raise _fail(
            path,
            line,
            "a judgments CSV needs a header with query_id and image_id or image_path",
        )
    else:
        judgments = _load_trec_qrels(path, text)
    if not judgments:
        raise BadInputError(f"{os.fspath(path)}: no judgments in the file (empty)")
    return _without_repeats(path, judgments, judge_of_line)


_REPEATS_NAMED = 5  # repeated lines a warning names before it says "and N more"


def _without_repeats(
    path: StrPath,
    judgments: Sequence[tuple[int, BenchmarkJudgment]],
    judge_of_line: Callable[[int], str] | None = None,
) -> list[tuple[int, BenchmarkJudgment]]:
    """Each (query, photo) once, or once per judge with `judge_of_line`. A photo is the same
    when its image id or its image path is (within the same collection, when the file names
    collections); a repeat that agrees is dropped (one warning for the file), one that
    disagrees is an error."""
    first: dict[tuple[str, str, str, str, str], tuple[int, BenchmarkJudgment]] = {}
    repeats: list[tuple[int, int]] = []
    kept: list[tuple[int, BenchmarkJudgment]] = []
    for line, judgment in judgments:
        judge = judge_of_line(line) if judge_of_line is not None else ""
        keys = [
            (judge, judgment.query_id, judgment.collection or "", kind, value)
            for kind, value in (("id", judgment.image_id), ("path", judgment.image_path))
            if value
        ]
        shared = next((key for key in keys if key in first), None)
        if shared is None:
            for key in keys:
                first[key] = (line, judgment)
            kept.append((line, judgment))
            continue
        earlier_line, earlier_judgment = first[shared]
        if earlier_judgment.relevant != judgment.relevant:
            raise _fail(
                path,
                line,
                f"query {judgment.query_id}, image {shared[4]} judged "
                f"{judgment.relevant} here but {earlier_judgment.relevant} on line {earlier_line}"
                + (f" by {judge}" if judge else ""),
            )
        repeats.append((line, earlier_line))
    if repeats:
        named = ", ".join(
            f"line {line} repeats line {then}" for line, then in repeats[:_REPEATS_NAMED]
        )
        more = len(repeats) - _REPEATS_NAMED
        if len(repeats) == 1:
            log.warning("%s: %s (the same judgment); counted once", os.fspath(path), named)
        else:
            log.warning(
                "%s: %d judgments repeat an earlier line with the same value (%s%s); "
                "each is counted once",
                os.fspath(path),
                len(repeats),
                named,
                f", and {more} more" if more > 0 else "",
            )
    return kept


def _load_judgments_csv(path: StrPath, text: str) -> list[tuple[int, BenchmarkJudgment]]:
    """(line number, judgment) for each row of an INQUIRE-style judgments CSV."""
    columns, records = _csv_table(path, text, required=("query_id",))
    lowered = {name.lower(): name for name in columns}
    id_column = lowered.get("image_id")
    path_column = lowered.get("image_path")
    relevant_column = lowered.get("relevant")
    collection_column = lowered.get("collection")
    if id_column is None and path_column is None:
        raise _fail(path, 1, f"missing column image_id or image_path ({', '.join(columns)})")
    judgments: list[tuple[int, BenchmarkJudgment]] = []
    for line, record in records:
        query_id = record["query_id"]
        image_id = record.get(id_column, "") if id_column else ""
        image_path = record.get(path_column, "") if path_column else ""
        if not query_id:
            raise _fail(path, line, "empty query_id")
        if not image_id and not image_path:
            raise _fail(path, line, "neither image_id nor image_path given")
        relevant = 1
        if relevant_column is not None:
            relevant = _parse_grade(path, line, "relevant", record[relevant_column])
        collection = record.get(collection_column, "") if collection_column else ""
        judgments.append(
            (
                line,
                BenchmarkJudgment(
                    query_id, image_id or None, image_path or None, relevant, collection or None
                ),
            )
        )
    return judgments


def _shown(value: str, limit: int = 40) -> str:
    """A value quoted for a one-line message, cut short when long."""
    if len(value) <= limit:
        return repr(value)
    return f"{value[:limit]!r}... ({len(value):,} characters)"


def _parse_int(path: StrPath, line: int, what: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:  # also a number of thousands of digits (Python's own limit)
        raise _fail(path, line, f"{what} must be an integer, got {_shown(value)}") from None


# A grade is stored in a 32-bit column on every catalog (PostgreSQL's integer).
GRADE_MIN, GRADE_MAX = -(2**31), 2**31 - 1


def _parse_grade(path: StrPath, line: int, what: str, value: str) -> int:
    """A relevance grade: an integer a catalog can store (a huge one would fail half-way
    through an import with a raw OverflowError)."""
    grade = _parse_int(path, line, what, value)
    if not GRADE_MIN <= grade <= GRADE_MAX:
        raise _fail(
            path,
            line,
            f"{what} {_shown(value)} is out of range; use 0 (not relevant) or a positive grade "
            "such as 1 (relevant)",
        )
    return grade


def _whitespace_lines(text: str) -> Iterator[tuple[int, list[str]]]:
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            yield number, stripped.split()


def _load_trec_qrels(path: StrPath, text: str) -> list[tuple[int, BenchmarkJudgment]]:
    """(line number, judgment) for each `qid 0 docid rel` line of TREC qrels."""
    judgments: list[tuple[int, BenchmarkJudgment]] = []
    for line, fields in _whitespace_lines(text):
        if len(fields) != 4:
            raise _fail(
                path, line, f"expected 4 fields in TREC qrels (qid 0 docid rel), got {len(fields)}"
            )
        query_id, _, docid, rel = fields
        judgments.append(
            (line, BenchmarkJudgment(query_id, docid, None, _parse_grade(path, line, "rel", rel)))
        )
    return judgments


def load_trec_run(path: StrPath) -> dict[str, list[tuple[str, float]]]:
    """A TREC run, `qid Q0 docid rank score tag` per line, as query id -> [(docid, score)].

    Per query, a strict order (docs/SPEC.md §1.6): by score, descending; ties by the earlier
    rank column, then by docid. The rank column only breaks ties, as in trec_eval, so a run whose
    ranks contradict its scores is read by its scores. A docid repeated within one query is an
    error, as in trec_eval, and so is a run with no results.
    """
    text = _read_text(path)
    rows: dict[str, list[tuple[int, float, str]]] = {}
    first_line_of: dict[tuple[str, str], int] = {}
    for line, fields in _whitespace_lines(text):
        if len(fields) != 6:
            raise _fail(
                path,
                line,
                f"expected 6 fields in a TREC run (qid Q0 docid rank score tag), got {len(fields)}",
            )
        query_id, _, docid, rank_text, score_text, _ = fields
        rank = _parse_int(path, line, "rank", rank_text)
        try:
            score = float(score_text)
        except ValueError:
            raise _fail(path, line, f"score must be a number, got {score_text!r}") from None
        if not math.isfinite(score):
            raise _fail(path, line, f"score must be finite, got {score_text!r}")
        if (query_id, docid) in first_line_of:
            raise _fail(
                path,
                line,
                f"docid {docid} repeats line {first_line_of[query_id, docid]} for query {query_id}",
            )
        first_line_of[query_id, docid] = line
        rows.setdefault(query_id, []).append((rank, score, docid))
    if not rows:
        raise BadInputError(f"{os.fspath(path)}: no results in the run file (empty)")
    run: dict[str, list[tuple[str, float]]] = {}
    for query_id, results in rows.items():
        scores = {docid: score for _, score, docid in results}
        ranks = {docid: rank for rank, _, docid in results}
        run[query_id] = [
            (docid, scores[docid]) for docid in strict_order(list(scores.items()), ranks)
        ]
    return run


# --- writing ---------------------------------------------------------------------------------


def _check_token(kind: str, value: str) -> str:
    if not value or any(char.isspace() for char in value):
        raise ValueError(f"{kind} {value!r} cannot be written to a TREC file: empty or has spaces")
    return value


def write_trec_run(
    path: StrPath, runs: Mapping[str, Sequence[tuple[str | int, float]]], tag: str
) -> None:
    """Write `qid Q0 docid rank score tag` lines, ranks 1.. in the given order of each list."""
    _check_token("run tag", tag)
    lines = []
    for query_id, results in runs.items():
        _check_token("query id", query_id)
        for rank, (docid, score) in enumerate(results, start=1):
            docid_text = _check_token("docid", str(docid))
            lines.append(f"{query_id} Q0 {docid_text} {rank} {float(score)!r} {tag}\n")
    atomic_write_text(path, "".join(lines))


def _docid(judgment: BenchmarkJudgment) -> str:
    docid = judgment.image_id or judgment.image_path
    if not docid:
        raise ValueError(f"judgment for query {judgment.query_id} names no image")
    return docid


def trec_qrels_text(judgments: Iterable[BenchmarkJudgment]) -> str:
    """`qid 0 docid rel` lines; the docid is the image id, else the image path."""
    return "".join(
        f"{_check_token('query id', j.query_id)} 0 {_check_token('docid', _docid(j))} "
        f"{j.relevant}\n"
        for j in judgments
    )


def write_trec_qrels(path: StrPath, judgments: Iterable[BenchmarkJudgment]) -> None:
    """Write `qid 0 docid rel` lines; the docid is the image id, else the image path."""
    atomic_write_text(path, trec_qrels_text(judgments))


def write_judgments_csv(path: StrPath, judgments: Iterable[BenchmarkJudgment]) -> None:
    """Write INQUIRE-style `query_id,image_id,image_path,relevant` rows (negatives included)."""
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["query_id", "image_id", "image_path", "relevant"])
    for j in judgments:
        writer.writerow(csv_row([j.query_id, j.image_id or "", j.image_path or "", j.relevant]))
    atomic_write_text(path, buffer.getvalue())


def write_queries_csv(path: StrPath, queries: Iterable[BenchmarkQuery]) -> None:
    """Write queries in the INQUIRE layout: an unnamed index column, query_id, query_text, extras."""
    queries = list(queries)
    extra_columns: list[str] = []
    for query in queries:
        for name in query.extra:
            if name not in extra_columns:
                extra_columns.append(name)
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(csv_row(["", "query_id", "query_text", *extra_columns]))
    for index, query in enumerate(queries):
        extras = [query.extra.get(name, "") for name in extra_columns]
        writer.writerow(csv_row([index, query.query_id, query.text, *extras]))
    atomic_write_text(path, buffer.getvalue())


# --- scoring ---------------------------------------------------------------------------------


def _natural_key(query_id: str) -> tuple[int, int, str]:
    return (0, int(query_id), "") if query_id.isdigit() else (1, 0, query_id)


def qrels_from_judgments(
    judgments: Iterable[BenchmarkJudgment], key: str = "image_id"
) -> dict[str, dict[str, int]]:
    """query id -> {docid: relevance}; docid is the `key` field (`image_id` or `image_path`),
    the other one when a judgment lacks it. A later judgment of the same image wins."""
    if key not in ("image_id", "image_path"):
        raise ValueError(f"key must be image_id or image_path, got {key!r}")
    other = "image_path" if key == "image_id" else "image_id"
    qrels: dict[str, dict[str, int]] = {}
    for j in judgments:
        docid = getattr(j, key) or getattr(j, other)
        if docid:
            qrels.setdefault(j.query_id, {})[docid] = j.relevant
    return qrels


def qrels_for_run(
    run: Mapping[str, Iterable[tuple[str, float]] | Iterable[str]],
    judgments: Sequence[BenchmarkJudgment],
) -> dict[str, dict[str, int]]:
    """qrels keyed the way the run names images: by image id, or by image path when the run's
    docids match more judgment paths than judgment ids (an INQUIRE CSV carries both)."""
    docids = {
        item[0] if isinstance(item, tuple) else item for results in run.values() for item in results
    }
    by_id = sum(1 for j in judgments if j.image_id in docids)
    by_path = sum(1 for j in judgments if j.image_path in docids)
    return qrels_from_judgments(judgments, "image_path" if by_path > by_id else "image_id")


def _check_protocol(protocol: str) -> None:
    if protocol not in PROTOCOLS:
        raise BadInputError(f"unknown protocol {protocol!r}; use {' or '.join(PROTOCOLS)}")


def _check_ties(ties: str) -> None:
    if ties not in TIES:
        raise BadInputError(f"unknown ties {ties!r}; use {' or '.join(TIES)}")


def evaluate_run(
    run: Mapping[str, Sequence[str] | Sequence[tuple[str, float]]],
    qrels: Mapping[str, Mapping[str, int]],
    k: int,
    protocol: str = "fullrank",
    ties: str = "order",
) -> MeanMetrics:
    """Score ranked docids per query against qrels at cut-off k.

    Every query with judgments is scored (a query the run skipped scores 0); a query in the run
    without judgments is listed with R = 0 and left out of the means. Under `rerank` each query's
    list is its fixed candidate set, so R counts the relevant candidates (as INQUIRE-RERANK does).
    A query's list holds docids, or (docid, score) pairs as `load_trec_run` reads them;
    `ties="group"` needs the scores (`metrics.evaluate_scored_ranking`).
    """
    _check_protocol(protocol)
    _check_ties(ties)
    per_query: list[QueryMetrics] = []
    for query_id in sorted(set(run) | set(qrels), key=_natural_key):
        scored = _scored(run.get(query_id, ()), ties)
        relevance: Mapping[str, int] = qrels.get(query_id, {})
        if protocol == "rerank":
            candidates = {docid for docid, _ in scored}
            relevance = {d: rel for d, rel in relevance.items() if d in candidates}
        per_query.append(
            evaluate_scored_ranking(scored, relevance, k, protocol, query_id=query_id, ties=ties)
        )
    return mean_metrics(per_query)


def _scored(
    ranked: Sequence[str] | Sequence[tuple[str, float]], ties: str
) -> list[tuple[str, float]]:
    """(docid, score) pairs of a query's list; a bare docid has no score (NaN), which only
    `ties="group"` needs."""
    scored: list[tuple[str, float]] = []
    for item in ranked:
        if isinstance(item, str):
            if ties == "group":
                raise ValueError("grouping tied scores needs the run's scores")
            scored.append((item, math.nan))
        else:
            scored.append((item[0], float(item[1])))
    return scored


def metrics_json(mean: MeanMetrics, k: int) -> dict[str, object]:
    """The JSON object of `quadrat evaluate --json` / `metrics --json` (docs/SPEC.md §5.4)."""
    return {
        "queries": mean.queries,
        f"mAP@{k}": mean.mAP,
        f"nDCG@{k}": mean.mean_nDCG,
        f"MRR@{k}": mean.MRR,
        "per_query": [
            {"query_id": m.query_id, "AP": m.AP, "nDCG": m.nDCG, "RR": m.RR, "R": m.R}
            for m in mean.per_query
        ],
    }


# --- benchmark runs --------------------------------------------------------------------------

Search = Callable[[BenchmarkQuery, Sequence[int] | None], Sequence[tuple[int, float]]]
"""search(query, candidates) -> ranked (image id, score). `candidates` is None under fullrank
(rank the whole collection) and the fixed candidate ids under rerank (reorder those)."""

Resolve = Callable[[BenchmarkJudgment], int | None]
Candidates = Callable[[BenchmarkQuery], Sequence[int]]


@dataclass
class BenchmarkResult:
    """The outcome of `run_benchmark`. `runs` holds each query's evaluated ranking with scores."""

    mean: MeanMetrics
    per_query: list[QueryMetrics]
    by_category: dict[str, dict[str, MeanMetrics]]
    unresolved_judgments: int
    runs: dict[str, list[tuple[int, float]]]
    k: int = 50
    protocol: str = "fullrank"
    unresolved: list[BenchmarkJudgment] = field(
        default_factory=list
    )  # the judgments behind the count
    judgments_without_query: int = 0  # judgments of query ids not in the queries file
    ties: str = "order"  # how AP and nDCG treated tied scores (metrics.TIES)


def _ranked(scored: Sequence[tuple[int, float]]) -> list[tuple[int, float]]:
    """A strict order of a method's output: by score, ties by the method's own order, then id."""
    first: dict[int, float] = {}
    prior_rank: dict[int, int] = {}
    for position, (image_id, score) in enumerate(scored, start=1):
        if image_id not in first:  # a repeated id keeps its first (best) place
            first[image_id] = float(score)
            prior_rank[image_id] = position
    order = strict_order(list(first.items()), prior_rank)
    return [(image_id, first[image_id]) for image_id in order]


def _restrict_to_candidates(
    query_id: str, ranked: list[tuple[int, float]], candidates: Sequence[int]
) -> list[tuple[int, float]]:
    """Keep the reranking inside the fixed candidate set: foreign ids are dropped and candidates
    the reranker left out follow in their original order (so no relevant candidate disappears)."""
    allowed = dict.fromkeys(candidates)
    kept = [(image_id, score) for image_id, score in ranked if image_id in allowed]
    if len(kept) < len(ranked):
        dropped = len(ranked) - len(kept)
        log.warning("query %s: reranker returned %d ids outside the candidates", query_id, dropped)
    returned = {image_id for image_id, _ in kept}
    left_out = [image_id for image_id in allowed if image_id not in returned]
    if left_out:
        log.warning("query %s: reranker left out %d candidates", query_id, len(left_out))
        floor = min((score for _, score in kept), default=0.0)
        kept += [(image_id, floor) for image_id in left_out]
    return kept


def _as_events(
    ranked: list[tuple[int, float]],
    relevance: Mapping[int, int],
    event_of: Callable[[Sequence[int]], Mapping[int, int]],
) -> tuple[list[tuple[int, float]], dict[int, int]]:
    """A ranking of photos and their judgments as events: each event at its best frame, with
    that frame's score (see `engine.evaluation.units`)."""
    from engine.evaluation.units import to_event_units

    events = event_of([image_id for image_id, _ in ranked] + list(relevance))
    best: dict[int, float] = {}
    for image_id, score in ranked:
        best.setdefault(events.get(image_id, image_id), score)
    ranked_events, event_relevance = to_event_units([i for i, _ in ranked], relevance, events)
    return [(event, best[event]) for event in ranked_events], event_relevance


def _relevance_by_query(
    queries: Sequence[BenchmarkQuery], judgments: Iterable[BenchmarkJudgment], resolve: Resolve
) -> tuple[dict[str, dict[int, int]], list[BenchmarkJudgment], int]:
    """query id -> {image id: relevance} of the judgments `resolve` maps to an image, the
    judgments it could not map, and how many judgments name no query of `queries` (left
    out; both logged)."""
    known = {query.query_id for query in queries}
    relevance: dict[str, dict[int, int]] = {query.query_id: {} for query in queries}
    unresolved: list[BenchmarkJudgment] = []
    without_query = 0
    for judgment in judgments:
        if judgment.query_id not in known:
            without_query += 1
            continue
        image_id = resolve(judgment)
        if image_id is None:
            unresolved.append(judgment)
        else:
            relevance[judgment.query_id][image_id] = judgment.relevant
    if unresolved:
        log.warning("%d judgments name images not in the collection", len(unresolved))
    if without_query:
        log.warning("%d judgments belong to queries not in the queries file", without_query)
    return relevance, unresolved, without_query


def _reranked(
    query: BenchmarkQuery,
    candidates: Candidates,
    search: Search,
    relevance: Mapping[int, int],
) -> tuple[list[tuple[int, float]], dict[int, int]]:
    """Under rerank: the query's fixed candidates as `search` reorders them, and the
    relevance of the candidates alone (R counts the relevant candidates)."""
    candidate_ids = list(dict.fromkeys(candidates(query)))
    ranked = _restrict_to_candidates(
        query.query_id, _ranked(search(query, candidate_ids)), candidate_ids
    )
    candidate_set = set(candidate_ids)
    kept = {image_id: rel for image_id, rel in relevance.items() if image_id in candidate_set}
    return ranked, kept


def _by_category(
    queries: Sequence[BenchmarkQuery], per_query: Sequence[QueryMetrics]
) -> dict[str, dict[str, MeanMetrics]]:
    """Mean metrics per value of each of the queries' other columns (supercategory, ...),
    the INQUIRE query id column left out."""
    metrics_by_id = {m.query_id: m for m in per_query}
    grouped: dict[str, dict[str, list[QueryMetrics]]] = {}
    for query in queries:
        for column, value in query.extra.items():
            if value and column != INQUIRE_QUERY_ID:
                grouped.setdefault(column, {}).setdefault(value, []).append(
                    metrics_by_id[query.query_id]
                )
    return {
        column: {value: mean_metrics(group) for value, group in sorted(values.items())}
        for column, values in grouped.items()
    }


def run_benchmark(
    queries: Sequence[BenchmarkQuery],
    judgments: Iterable[BenchmarkJudgment],
    search: Search,
    resolve: Resolve,
    k: int = 50,
    protocol: str = "fullrank",
    candidates: Candidates | None = None,
    progress: ProgressCallback = no_progress,
    cancel: CancelToken | None = None,
    ties: str = "order",
    event_of: Callable[[Sequence[int]], Mapping[int, int]] | None = None,
) -> BenchmarkResult:
    """Run every query through `search` and score it against the judgments at cut-off k.

    fullrank: `search(query, None)` ranks the whole collection; R counts every relevant judgment
    that `resolve` maps to a catalog image. rerank: `candidates(query)` gives the fixed candidate
    list, `search(query, candidate_ids)` reorders it, and R counts the relevant candidates.
    Judgments that `resolve` cannot map (images not in the collection) are counted in
    `unresolved_judgments` and left out of R: no method could retrieve them here.
    `ties="group"` scores AP and nDCG with tied scores as one group (INQUIRE's sklearn
    metrics); RR keeps the strict order. With `event_of` (image ids -> their event ids) the
    metrics are per event (`engine.evaluation.units`); the runs kept are still of photos.
    """
    _check_protocol(protocol)
    _check_ties(ties)
    if protocol == "rerank" and candidates is None:
        raise ValueError("the rerank protocol needs a candidates callable")
    if k < 1:
        raise BadInputError(f"k must be at least 1, got {k}")

    relevance, unresolved, without_query = _relevance_by_query(queries, judgments, resolve)
    meter = RateMeter(len(queries))
    runs: dict[str, list[tuple[int, float]]] = {}
    per_query: list[QueryMetrics] = []
    for done, query in enumerate(queries):
        if cancel is not None:
            cancel.check()
        query_relevance: Mapping[int, int] = relevance[query.query_id]
        if protocol == "rerank":
            assert candidates is not None
            ranked, query_relevance = _reranked(query, candidates, search, query_relevance)
        else:
            ranked = _ranked(search(query, None))
        runs[query.query_id] = ranked
        if event_of is not None:
            ranked, query_relevance = _as_events(ranked, query_relevance, event_of)
        per_query.append(
            evaluate_scored_ranking(ranked, query_relevance, k, protocol, query.query_id, ties)
        )
        progress(meter.update(done + 1, message=f"query {query.query_id}"))

    return BenchmarkResult(
        mean=mean_metrics(per_query),
        per_query=per_query,
        by_category=_by_category(queries, per_query),
        unresolved_judgments=len(unresolved),
        runs=runs,
        k=k,
        protocol=protocol,
        unresolved=unresolved,
        judgments_without_query=without_query,
        ties=ties,
    )
