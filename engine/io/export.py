"""Exports and imports: results and judgments as CSV (docs/SPEC.md §4), TREC qrels,
INQUIRE-style judgment files; copying the photos judged relevant to a folder is in
`engine/io/photo_copies.py` and importable from here.

Every write is all or nothing: a file is written whole or not at all (`engine/io/safe_write.py`,
`engine.files`), copies are taken back when one fails, and a failed write says in one line
where, why, the space needed and free where known, and that nothing was lost. Files get the mode a file created
there normally gets, and no CSV cell runs as a formula in a spreadsheet (`engine.files.csv_cell`,
undone when Quadrat reads its own files back). An import is one transaction, after a backup.
"""

from __future__ import annotations

import csv
import io
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from engine.benchmarks.runner import JudgmentResolver, catalog_docid
from engine.catalog import Collection, Image, Judgment, Query
from engine.catalog.backup import safety_backup
from engine.catalog.library import Library
from engine.catalog.models import utcnow
from engine.catalog.privacy import PlacePolicy
from engine.catalog.reads import PhotoDetails, photo_details
from engine.detections.records import Box
from engine.errors import BadInputError, QuadratError
from engine.evaluation.evaluate import (
    BenchmarkJudgment,
    BenchmarkQuery,
    load_judgment_lines,
    load_queries_csv,
    trec_qrels_text,
)
from engine.files import csv_field, csv_record, csv_row
from engine.io.photo_copies import CopiedPhotos as CopiedPhotos
from engine.io.photo_copies import copy_relevant_photos as copy_relevant_photos
from engine.io.safe_write import NOTHING_LOST as NOTHING_LOST
from engine.io.safe_write import export_bytes as export_bytes
from engine.io.safe_write import export_text as export_text
from engine.io.safe_write import free_bytes as free_bytes
from engine.io.safe_write import human_size as human_size
from engine.io.safe_write import plain_write_errors as plain_write_errors
from engine.io.safe_write import write_failure as write_failure
from engine.judgments.adjudication import adjudicated_photos
from engine.judgments.attributes import (
    DWC_ATTRIBUTE_TERMS,
    attributes_for_query,
    normalize_value,
    write_changes,
)
from engine.judgments.queries import (
    ADJUDICATION,
    JUDGMENT,
    JudgmentAct,
    QueryStore,
    find_query,
    insert_query,
    record_judgment,
)

log = logging.getLogger(__name__)

RESULT_COLUMNS = [
    "path",
    "image_id",
    "rank",
    "score",
    "judgment",
    "taxon",
    "common_name",
    "kingdom",
    "phylum",
    "class",
    "order",
    "family",
    "genus",
    "date",
    "latitude",
    "longitude",
    "license",
    "rights_holder",
    "place_note",
]


def _result_row(details: PhotoDetails, policy: PlacePolicy) -> dict[str, object]:
    """The metadata columns of RESULT_COLUMNS for one photo; its place as the catalog's place
    rule publishes it (withheld: empty; generalised: the cell's centre), `place_note` saying
    why where it is not the recorded place."""
    ranks = dict(details.lineage)
    names = (details.taxon, *(name for _, name in details.lineage))
    place = policy.publish(
        details.latitude, details.longitude, details.location_uncertainty,
        details.place_privacy, names,
    )  # fmt: skip
    return {
        "path": details.path,
        "image_id": details.image_id,
        "taxon": details.taxon or "",
        "common_name": details.common_name or "",
        **{
            rank: ranks.get(rank, "")
            for rank in ("kingdom", "phylum", "class", "order", "family", "genus")
        },
        "date": details.observed_at.isoformat() if details.observed_at else "",
        "latitude": "" if place.latitude is None else place.latitude,
        "longitude": "" if place.longitude is None else place.longitude,
        "license": details.license or "",
        "rights_holder": details.rights_holder or "",
        "place_note": place.reason,
    }


def export_results_csv(
    library: Library,
    path: str | Path,
    ranking: Sequence[tuple[int, float]],
    judgments: dict[int, int] | None = None,
    probabilities: Mapping[int, float] | None = None,
) -> int:
    """Write a ranked result list with judgments and metadata as CSV; returns rows written.
    With `probabilities` (image id -> calibrated probability of relevance) a `probability`
    column follows `score`. Places are published through the catalog's place rule (the lab's
    sensitive taxa included), as every export's."""
    judgments = judgments or {}
    records = photo_details(library, [int(i) for i, _ in ranking])
    policy = PlacePolicy.of(library.catalog)
    columns = list(RESULT_COLUMNS)
    if probabilities is not None:
        columns.insert(columns.index("score") + 1, "probability")
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    rows = 0
    for rank, (image_id, score) in enumerate(ranking, start=1):
        record = records.get(int(image_id))
        if record is None:
            continue
        judged = judgments.get(int(image_id))
        writer.writerow(
            csv_record(
                {
                    **_result_row(record, policy),
                    "rank": rank,
                    "score": f"{score:.6f}",
                    "judgment": "" if judged is None else judged,
                    **(
                        {"probability": f"{probabilities[int(image_id)]:.4f}"}
                        if probabilities is not None
                        else {}
                    ),
                }
            )
        )
        rows += 1
    export_text(path, buffer.getvalue(), "the results")
    return rows


JUDGMENT_COLUMNS = [
    "query_id",
    "image_id",
    "image_path",
    "relevant",
    "collection",
    "query_text",
    "query_name",
    "query_notes",
    *DWC_ATTRIBUTE_TERMS,
    "judge",
    "judged_as",
    "recall_certificate",
    "box",
]
"""An exported judgments CSV (docs/SPEC.md §4): the INQUIRE columns first, then what makes the file
readable alone and its paths unambiguous across collections, then the judgment's attributes as
columns named by their Darwin Core terms (`behavior`, `lifeStage`, ...; empty where none), then
who judged (`judge`: the judge, the adjudicator, or "majority"), which judgments the file holds
(`judged_as`: judgment, adjudication, majority), the query's certified recall, if any, and the
detector's box the judgment was made on (`box`: "x,y,w,h" normalised; empty: the frame)."""


@dataclass(frozen=True)
class JudgeColumns:
    """Who made an exported judgment, of which kind, and its query's certified recall."""

    judge: str = ""
    judged_as: str = "judgment"
    certificate: str = ""
    box: str = ""  # the detector's box the judgment was made on, as `Box.text` writes it


@dataclass(frozen=True)
class QueryColumns:
    """The query a judgments file describes: its words, the name and notes given to it."""

    text: str
    name: str = ""
    notes: str = ""


def collection_labels(library: Library) -> dict[int, str]:
    """collection id -> how files name it: its name, or its folder when names clash."""
    with library.catalog.session() as s:
        rows = s.execute(select(Collection.id, Collection.name, Collection.root)).all()
    counts: dict[str, int] = {}
    for _, name, _ in rows:
        counts[name] = counts.get(name, 0) + 1
    return {cid: name if counts[name] == 1 else root for cid, name, root in rows}


def _shared_external_ids(library: Library) -> set[int]:
    """Source ids that several photos carry (copies of a collection with its metadata)."""
    with library.catalog.session() as s:
        return set(
            s.scalars(
                select(Image.external_id)
                .where(Image.external_id.is_not(None))
                .group_by(Image.external_id)
                .having(func.count() > 1)
            )
        )


class _JudgmentRow(NamedTuple):
    query_id: int
    image_id: int
    relevance: int
    who: JudgeColumns


def _judgment_rows(
    library: Library, query_ids: Sequence[int] | None, view: str
) -> list[_JudgmentRow]:
    """(query id, photo, relevance, who and how) of the judgments `view` takes
    (`engine.judgments.adjudication.judgment_view`; "newest" uses adjudications where they
    exist), by query and photo."""
    from engine.judgments.adjudication import MAJORITY, NEWEST, adjudications, judgment_view

    with library.catalog.session() as s:
        stmt = select(
            Judgment.query_id,
            Judgment.image_id,
            Judgment.relevance,
            Judgment.judged_by,
            Judgment.box,
        ).order_by(Judgment.query_id, Judgment.image_id)
        if query_ids is not None:
            stmt = stmt.where(Judgment.query_id.in_(list(query_ids)))
        newest = s.execute(stmt).all()
    out: list[_JudgmentRow] = []
    if view == NEWEST:
        settled = {qid: adjudications(library, qid) for qid in {r.query_id for r in newest}}
        for query_id, image_id, relevance, judge, box in newest:
            kind = "adjudication" if image_id in settled[query_id] else "judgment"
            who = JudgeColumns(judge or "", kind, box=box or "")
            out.append(_JudgmentRow(query_id, image_id, relevance, who))
        return out
    for query_id in sorted(set(query_ids or ()) or {r.query_id for r in newest}):
        shown = judgment_view(library, query_id, view)
        settled_here = adjudications(library, query_id)
        for image_id in sorted(shown.judgments):
            if image_id in settled_here:
                who = JudgeColumns("", "adjudication")
            elif view == MAJORITY:
                who = JudgeColumns("majority", "majority")
            else:
                who = JudgeColumns(view, "judgment")
            out.append(_JudgmentRow(query_id, image_id, shown.judgments[image_id], who))
    return out


def _file_judgments(
    library: Library, query_ids: Sequence[int] | None, view: str = "newest"
) -> tuple[
    list[BenchmarkJudgment], dict[str, QueryColumns], list[dict[str, str]], list[JudgeColumns]
]:  # fmt: skip
    """The judgments as files write them, the queries they describe, each judgment's
    attributes and who made it (in the judgments' order)."""
    from engine.judgments.adjudication import certificates

    rows = _judgment_rows(library, query_ids, view)
    certified = certificates(library, sorted({r.query_id for r in rows}))
    with library.catalog.session() as s:
        queries = {
            str(q.id): QueryColumns(q.text, q.name or "", q.notes or "")
            for q in s.scalars(select(Query).where(Query.id.in_({r.query_id for r in rows})))
        }
        collection_of = dict(
            s.execute(
                select(Image.id, Image.collection_id).where(
                    Image.id.in_({r.image_id for r in rows})
                )
            ).all()
        )
    records = photo_details(library, [r.image_id for r in rows])
    labels = collection_labels(library)
    shared = _shared_external_ids(library)
    values = {qid: attributes_for_query(library, qid) for qid in {r.query_id for r in rows}}
    out = []
    attributes = []
    judges = []
    for query_id, image_id, relevance, who in rows:
        record = records.get(image_id)
        if record is None:
            continue
        # A source id names one photo only when no copy carries it too.
        unique = record.external_id is not None and record.external_id not in shared
        docid = str(record.external_id) if unique else catalog_docid(image_id)
        label = labels.get(collection_of.get(image_id, -1), record.collection)
        out.append(BenchmarkJudgment(str(query_id), docid, record.rel_path, relevance, label))
        attributes.append(values[query_id].get(image_id, {}))
        certificate = certified.get(query_id)
        text = certificate.text() if certificate is not None else ""
        judges.append(JudgeColumns(who.judge, who.judged_as, text, who.box))
    return out, queries, attributes, judges


def judgments_csv_text(
    judgments: Sequence[BenchmarkJudgment],
    queries: dict[str, QueryColumns],
    attributes: Sequence[Mapping[str, str]] | None = None,
    judges: Sequence[JudgeColumns] | None = None,
) -> str:
    """The judgments CSV of JUDGMENT_COLUMNS; `attributes[i]` holds judgment i's Darwin Core
    values and `judges[i]` who made it (none given: empty cells)."""
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(JUDGMENT_COLUMNS)
    for index, j in enumerate(judgments):
        query = queries.get(j.query_id, QueryColumns(""))
        values = attributes[index] if attributes is not None else {}
        who = judges[index] if judges is not None else JudgeColumns()
        writer.writerow(
            csv_row(
                [
                    j.query_id,
                    j.image_id or "",
                    j.image_path or "",
                    j.relevant,
                    j.collection or "",
                    query.text,
                    query.name,
                    query.notes,
                    *(values.get(term, "") for term in DWC_ATTRIBUTE_TERMS),
                    who.judge,
                    who.judged_as,
                    who.certificate,
                    who.box,
                ]
            )
        )
    return buffer.getvalue()


def export_judgments(
    library: Library,
    path: str | Path,
    query_ids: Sequence[int] | None = None,
    fmt: str = "csv",
    view: str = "newest",
) -> int:
    """Write the user's judgments as CSV (JUDGMENT_COLUMNS: INQUIRE's columns with `relevant`,
    the collection and the query's text, name and notes, who judged) or as TREC qrels
    (`fmt="qrels"`); query ids are the library's saved-query ids. `view`: "newest" (adjudicated
    where settled), "majority", "adjudicated" or a judge's name. Returns rows written."""
    if fmt not in ("csv", "qrels"):
        raise BadInputError(f"unknown judgment format {fmt!r}; use csv or qrels")
    judgments, queries, attributes, judges = _file_judgments(library, query_ids, view)
    if fmt == "csv":
        text = judgments_csv_text(judgments, queries, attributes, judges)
        export_text(path, text, "the judgments")
    else:
        export_text(path, trec_qrels_text(judgments), "the qrels")
    return len(judgments)


@dataclass(frozen=True)
class ImportReport:
    queries: int  # queries of the queries file, or saved queries created from query_text
    judgments: int
    unresolved: int
    query_ids: dict[str, int]  # benchmark query id -> saved query id
    backup: Path | None = None  # the catalog as it was before the import


def read_query_columns(path: str | Path) -> dict[str, QueryColumns]:
    """query id -> the query_text, query_name and query_notes a judgments CSV carries (as
    `export_judgments` writes them); empty for a file without a query_text column."""
    try:
        with open(path, encoding="utf-8-sig", newline="") as handle:
            lines = [line for line in handle if line.strip() and not line.lstrip().startswith("#")]
    except (OSError, UnicodeDecodeError):
        return {}  # load_judgments has said what is wrong with the file
    reader = csv.DictReader(lines)
    out: dict[str, QueryColumns] = {}
    try:
        fields = {csv_field(name.strip()).lower(): name for name in reader.fieldnames or []}
        if "query_text" not in fields or "query_id" not in fields:
            return {}

        def cell(row: dict[str, str], column: str) -> str:
            name = fields.get(column)
            return csv_field((row.get(name) or "").strip()) if name is not None else ""

        for row in reader:
            query_id = cell(row, "query_id")
            text = " ".join(cell(row, "query_text").split())
            if query_id and text and query_id not in out:
                out[query_id] = QueryColumns(
                    text, cell(row, "query_name"), cell(row, "query_notes")
                )
    except csv.Error:
        return {}  # load_judgments has said what is wrong with the file
    return out


def read_attribute_columns(path: str | Path) -> dict[int, dict[str, str]]:
    """line -> {Darwin Core term: value} of a judgments CSV's attribute columns (the line is
    the record's last line, as `load_judgment_lines` numbers it); only the cells that hold a
    value. Empty for a file with no such column (or no CSV)."""
    try:
        with open(path, encoding="utf-8-sig", newline="") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError):
        return {}  # load_judgments has said what is wrong with the file
    known = {term.lower(): term for term in DWC_ATTRIBUTE_TERMS}
    reader = csv.reader(io.StringIO(text, newline=""))
    out: dict[int, dict[str, str]] = {}
    columns: dict[int, str] | None = None
    try:
        for row in reader:
            if not row or all(not cell.strip() for cell in row):
                continue
            if columns is None:
                header = [csv_field(cell.strip()).lower() for cell in row]
                if "query_id" not in header:
                    return {}  # TREC qrels: no columns
                columns = {i: known[name] for i, name in enumerate(header) if name in known}
                if not columns:
                    return {}
                continue
            values = {
                term: csv_field(row[i].strip())
                for i, term in columns.items()
                if i < len(row) and row[i].strip()
            }
            if values:
                out[reader.line_num] = values
    except csv.Error:
        return {}  # load_judgments has said what is wrong with the file
    return out


class _QueryFinder:
    """Saved queries found or created inside the import's transaction, as
    `QueryStore.find_or_create_query` finds them (the catalog's one query per text)."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.created = 0

    def find_or_create(self, text: str) -> int:
        text = " ".join(text.split())
        if not text:
            raise BadInputError("a query needs text")
        existing = find_query(self.session, text)
        if existing is not None:
            return existing
        query_id, inserted = insert_query(self.session, text)
        self.created += inserted
        return query_id


def _saved_queries_for(
    session: Session, query_ids: Sequence[str], described: dict[str, QueryColumns]
) -> tuple[dict[str, int], int]:
    """Saved queries for a judgments file without a queries file: the saved query of that id
    when the file does not say otherwise (a Quadrat export read back), else the saved query with
    the file's query_text, created with its name and notes if new. Returns (mapping, created)."""
    finder = _QueryFinder(session)
    mapping: dict[str, int] = {}
    for query_id in dict.fromkeys(query_ids):
        info = described.get(query_id)
        existing = session.get(Query, int(query_id)) if _small_int(query_id) else None
        if info is None:
            if existing is not None:
                mapping[query_id] = existing.id
            continue
        if existing is not None and existing.text == info.text:
            mapping[query_id] = existing.id
            continue
        before = finder.created
        target = session.get(Query, finder.find_or_create(info.text))
        if target is None:  # deleted by another session between the two statements
            raise QuadratError(f"the saved query {info.text!r} was deleted meanwhile; try again")
        new = finder.created > before
        # Fill in a name and notes the saved query lacks; never overwrite the user's own.
        if info.name and (new or not target.name):
            target.name = info.name.strip() or None
        if info.notes and (new or not target.notes):
            target.notes = info.notes
        mapping[query_id] = target.id
    return mapping, finder.created


def _small_int(text: str) -> bool:
    """Whether `text` is a saved query's id as files write it (plain digits, in SQL's range)."""
    return re.fullmatch(r"[1-9][0-9]{0,17}", text) is not None


# Serializes imports with each other (two workstations importing one file must not both create
# its queries); two 32-bit numbers for PostgreSQL's advisory lock, "QUAD" "IMPT".
_IMPORT_LOCK = (0x51554144, 0x494D5054)
_FLUSH_EVERY = 500  # judgments sent to the database at a time, inside the one transaction


def read_judge_column(path: str | Path) -> dict[int, str]:
    """line -> the judge a judgments CSV names for the record ending on that line (its `judge`
    column, as `export_judgments` writes it); empty for a file without one. "majority" and an
    empty cell name no judge."""
    names = _read_column(path, "judge")
    return {line: name for line, name in names.items() if name != "majority"}


def read_adjudicated_lines(path: str | Path) -> set[int]:
    """The lines of a judgments CSV whose `judged_as` is "adjudication"."""
    return {line for line, kind in _read_column(path, "judged_as").items() if kind == ADJUDICATION}


def _read_column(path: str | Path, name: str) -> dict[int, str]:
    """line -> the non-empty cell of column `name` for the record ending on that line."""
    try:
        with open(path, encoding="utf-8-sig", newline="") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError):
        return {}  # load_judgments has said what is wrong with the file
    reader = csv.reader(io.StringIO(text, newline=""))
    column: int | None = None
    out: dict[int, str] = {}
    try:
        for row in reader:
            if not row or all(not cell.strip() for cell in row):
                continue
            if column is None:
                header = [csv_field(cell.strip()).lower() for cell in row]
                if "query_id" not in header or name not in header:
                    return {}
                column = header.index(name)
                continue
            cell = csv_field(row[column].strip()) if column < len(row) else ""
            if cell:
                out[reader.line_num] = cell
    except csv.Error:
        return {}  # load_judgments has said what is wrong with the file
    return out


def import_benchmark(
    library: Library,
    queries_path: str | Path | None,
    judgments_path: str | Path | None = None,
    judge: str | None = None,
) -> ImportReport:
    """Turn benchmark queries (and their judgments) into saved queries of the library, so they
    can be opened, searched and judged further in the window.

    Without a queries file the judgments attach to the library's saved queries by id, as
    `export_judgments` writes them (a round trip restores the judgments); when the file carries
    query_text (an export from another library), a query whose id names no saved query of that
    text attaches to the saved query of that text, created if need be. A `collection` column
    picks the photo among collections that share relative paths.

    All or nothing: the files are read and checked first (a bad one changes nothing and names
    its line), a backup of the catalog is taken (`reason="before-import"`), and every query and
    judgment is written in one transaction, so an import stopped at any moment leaves the
    library as it was.

    Each judgment is recorded as made by the judge its `judge` column names, else `judge`,
    else the default judge (`QueryStore.user`): a second judge's file imports as theirs, and a
    file holding several judges' marks of the same photos imports each as that judge's own act
    (consistency is checked per judge, per photo), which `quadrat agreement` then measures.
    """
    if queries_path is None and judgments_path is None:
        raise BadInputError("give a queries file, a judgments file, or both")
    files = _read_import(library, queries_path, judgments_path, judge)
    resolver = JudgmentResolver(library) if files.lines else None
    backup = safety_backup(library.root, library.catalog.engine.url, reason="before-import")
    catalog = library.catalog
    with catalog.session() as s:
        catalog.serialize(s, _IMPORT_LOCK)
        if queries_path is not None:
            finder = _QueryFinder(s)
            mapping = {q.query_id: finder.find_or_create(q.text) for q in files.queries}
            count = len(files.queries)
        else:
            query_ids = [j.query_id for _, j in files.lines]
            mapping, count = _saved_queries_for(s, query_ids, files.described)
        judged, unresolved = _write_judgments(s, files, mapping, resolver)
    catalog.checkpoint_wal()  # a plain copy of the catalog file now holds the import too
    log.info("imported %d judgments; the catalog before the import is in %s", judged, backup)
    return ImportReport(count, judged, unresolved, mapping, backup)


@dataclass(frozen=True)
class _ImportFiles:
    """A benchmark import's files, read and checked before anything is written: the queries,
    each judgment with its line and judge, the lines that adjudicate, the attribute cells
    and the query columns of a judgments file read without a queries file."""

    queries: list[BenchmarkQuery]
    lines: list[tuple[int, BenchmarkJudgment]]
    judge_cells: dict[int, str]
    user: str
    adjudicated: set[int]
    attribute_cells: dict[int, dict[str, str]]
    described: dict[str, QueryColumns]
    boxes: dict[int, Box]  # line -> the box its judgment was made on (its `box` cell)

    def judge_of(self, line: int) -> str:
        return self.judge_cells.get(line, self.user)


def _read_import(
    library: Library,
    queries_path: str | Path | None,
    judgments_path: str | Path | None,
    judge: str | None,
) -> _ImportFiles:
    """Read and check an import's files (a bad one names its line; nothing is written)."""
    user = judge or QueryStore(library).user
    judge_cells = read_judge_column(judgments_path) if judgments_path is not None else {}
    adjudicated = read_adjudicated_lines(judgments_path) if judgments_path is not None else set()

    def judge_of_line(line: int) -> str:
        # Whose act the line records: several judges may mark one photo (the input agreement
        # is measured from), so a file is consistent per judge and per photo.
        who = judge_cells.get(line, user)
        return f"{who} (adjudication)" if line in adjudicated else who

    try:
        lines = (
            load_judgment_lines(judgments_path, judge_of_line) if judgments_path is not None else []
        )
        queries = load_queries_csv(queries_path) if queries_path is not None else []
    except BadInputError as error:
        raise BadInputError(f"{error}; nothing was imported") from None
    for line, j in lines:
        if j.relevant < 0:
            raise BadInputError(
                f"{judgments_path} line {line}: relevant {j.relevant} cannot be imported; use 0 "
                "(not relevant) or a positive grade such as 1 (relevant); nothing was imported"
            )
    attribute_cells = read_attribute_columns(judgments_path) if judgments_path is not None else {}
    described = (
        read_query_columns(judgments_path)
        if queries_path is None and judgments_path is not None
        else {}
    )
    boxes: dict[int, Box] = {}
    if judgments_path is not None:
        for line, text in _read_column(judgments_path, "box").items():
            try:
                boxes[line] = Box.from_text(text)
            except BadInputError as error:
                raise BadInputError(
                    f"{judgments_path} line {line}: {error}; nothing was imported"
                ) from None
    return _ImportFiles(
        queries, lines, judge_cells, user, adjudicated, attribute_cells, described, boxes
    )


def _write_judgments(
    s: Session,
    files: _ImportFiles,
    mapping: Mapping[str, int],
    resolver: JudgmentResolver | None,
) -> tuple[int, int]:
    """Write an import's judgments in the caller's transaction, each as `QueryStore.judge`
    records it (`record_judgment`), with its attribute cells. Returns (judged, unresolved)."""
    judged = unresolved = 0
    rows = {
        (row.query_id, row.image_id): row
        for row in s.scalars(select(Judgment).where(Judgment.query_id.in_(set(mapping.values()))))
    }
    now = utcnow()
    settled = adjudicated_photos(s, set(mapping.values()))
    for line, j in files.lines:
        saved = mapping.get(j.query_id)
        image_id = resolver(j) if saved is not None and resolver is not None else None
        if saved is None or image_id is None:
            unresolved += 1
            continue
        who = files.judge_of(line)
        # As `QueryStore.judge` records a judgment or an adjudication: the act, and the
        # newest per photo (an adjudication settles the photo from here on).
        kind = ADJUDICATION if line in files.adjudicated else JUDGMENT
        key = (saved, image_id)
        act = JudgmentAct(saved, image_id, j.relevant, who, now, kind)
        keep = kind == JUDGMENT and key in settled
        row = record_judgment(
            s, act, rows.get(key), shown=j.relevant, settled=keep, box=files.boxes.get(line)
        )
        if row is not None:
            rows[key] = row
        if kind == ADJUDICATION:
            settled.add(key)
        cells = files.attribute_cells.get(line)
        if cells:
            # A value sets the term (an event, as an edit in the window); an empty cell
            # leaves the library's value alone: a file never clears what was typed.
            changes = {term: normalize_value(term, value) for term, value in cells.items()}
            write_changes(s, saved, image_id, changes, who, now)
        judged += 1
        if judged % _FLUSH_EVERY == 0:
            s.flush()
    return judged, unresolved
