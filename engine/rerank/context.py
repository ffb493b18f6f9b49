"""Per-query expert context for structured reranking, as Divide-and-Conquer uses it: one
passage per query, prepended to every scorer prompt of that query (Kumar, Vendrow & Beery).

A benchmark's contexts live in a CSV beside its queries file (`query_id,query,context`, e.g.
`queries.contexts.csv`): drafted once per query by the configured language model
(`draft_missing`), then read by the rerank method (`contexts=FILE`), which finds a query's row
by its text, the only thing a method is given. The file stays editable by hand; a drafted
context is never drafted again while its row is there.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from engine.errors import BadInputError
from engine.files import atomic_write_text, csv_field, csv_row

__all__ = [
    "CONTEXT_COLUMNS",
    "ContextRow",
    "context_for",
    "draft_missing",
    "read_contexts",
    "write_contexts",
]

CONTEXT_COLUMNS = ("query_id", "query", "context")
MAX_CONTEXT_CHARS = 4000  # a passage, not a document: a longer cell is refused
MAX_FAILURES_IN_A_ROW = 3


@dataclass(frozen=True)
class ContextRow:
    """One query's expert context."""

    query_id: str
    query: str
    context: str


def _words(text: str) -> str:
    return " ".join(text.split())


def _key(query: str) -> str:
    return _words(query).lower()


def read_contexts(path: str | os.PathLike[str]) -> list[ContextRow]:
    """The rows of a contexts CSV, in file order; `BadInputError` (one line, naming the file
    and line) on a missing file, a missing column, an empty or repeated query id, or two rows
    giving the same query different contexts."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError as error:
        raise BadInputError(f"{path}: no such contexts file") from error
    except (OSError, UnicodeDecodeError) as error:
        raise BadInputError(f"{path}: cannot read the contexts file ({error})") from error
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in CONTEXT_COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise BadInputError(f"{path}: the contexts file needs the columns {', '.join(missing)}")
    rows: list[ContextRow] = []
    ids: dict[str, int] = {}
    texts: dict[str, str] = {}
    try:
        for record in reader:
            line = reader.line_num
            query_id = csv_field(record.get("query_id") or "").strip()
            query = _words(csv_field(record.get("query") or ""))
            context = _words(csv_field(record.get("context") or ""))
            if not query_id:
                raise BadInputError(f"{path}, line {line}: empty query_id")
            if query_id in ids:
                raise BadInputError(
                    f"{path}, line {line}: query_id {query_id} repeats line {ids[query_id]}"
                )
            if len(context) > MAX_CONTEXT_CHARS:
                raise BadInputError(
                    f"{path}, line {line}: the context is over {MAX_CONTEXT_CHARS} characters"
                )
            if texts.get(_key(query), context) != context:
                raise BadInputError(
                    f"{path}, line {line}: the query {query!r} has another context above"
                )
            ids[query_id] = line
            texts[_key(query)] = context
            rows.append(ContextRow(query_id, query, context))
    except csv.Error as error:
        raise BadInputError(f"{path}: not a readable CSV ({error})") from error
    return rows


def write_contexts(path: str | os.PathLike[str], rows: Iterable[ContextRow]) -> None:
    """Write `rows` as a contexts CSV, atomically (a reader never sees half a file); cells a
    spreadsheet would run are guarded, and `read_contexts` undoes it."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CONTEXT_COLUMNS)
    for row in rows:
        writer.writerow(csv_row((row.query_id, _words(row.query), _words(row.context))))
    atomic_write_text(path, buffer.getvalue())


def context_for(rows: Sequence[ContextRow], query: str) -> str | None:
    """The context of `query` (matched by its words, any case), or None when no row has it."""
    key = _key(query)
    for row in rows:
        if _key(row.query) == key:
            return row.context
    return None


def draft_missing(
    path: str | os.PathLike[str],
    queries: Sequence[tuple[str, str]],
    draft: Callable[[str], tuple[str, str]],
) -> tuple[int, list[str]]:
    """Draft the context of every (query id, query text) without a row in the file at `path`
    (made when missing) and write the file after each one, so an interruption keeps what was
    drafted. `draft(query)` gives (context, "") or ("", a note why not). Returns the number
    drafted and the notes of those that failed (left out of the file, drafted next time)."""
    path = Path(path)
    rows = read_contexts(path) if path.exists() else []
    have = {row.query_id for row in rows}
    drafted, notes, failed_in_a_row = 0, [], 0
    for query_id, query in queries:
        if query_id in have:
            continue
        if failed_in_a_row >= MAX_FAILURES_IN_A_ROW:
            # An endpoint that is down would otherwise cost a time-out per query.
            notes.append(f"stopped drafting after {failed_in_a_row} failures in a row")
            break
        context, note = draft(query)
        if not context:
            failed_in_a_row += 1
            notes.append(f"query {query_id}: {note or 'no context drafted'}")
            continue
        failed_in_a_row = 0
        rows.append(ContextRow(query_id, _words(query), _words(context)))
        have.add(query_id)
        write_contexts(path, rows)
        drafted += 1
    if not path.exists():
        write_contexts(path, rows)
    return drafted, notes
