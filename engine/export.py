"""Exports and imports: results and judgments as CSV (SPEC.md §4), TREC qrels, INQUIRE-style
judgment files, and copying the photos judged relevant to a folder."""

from __future__ import annotations

import csv
import io
import logging
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select

from engine.benchmark import JudgmentResolver, catalog_docid
from engine.catalog import Judgment, Query
from engine.collections import PhotoDetails, photo_details
from engine.errors import BadInputError
from engine.evaluate import Judgment as FileJudgment
from engine.evaluate import load_judgments, load_queries_csv, write_judgments_csv, write_trec_qrels
from engine.files import atomic_write_text
from engine.library import Library
from engine.queries import QueryStore

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
]


def _result_row(details: PhotoDetails) -> dict[str, object]:
    """The metadata columns of RESULT_COLUMNS for one photo."""
    ranks = dict(details.lineage)
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
        "latitude": "" if details.latitude is None else details.latitude,
        "longitude": "" if details.longitude is None else details.longitude,
        "license": details.license or "",
        "rights_holder": details.rights_holder or "",
    }


def export_results_csv(
    library: Library,
    path: str | Path,
    ranking: Sequence[tuple[int, float]],
    judgments: dict[int, int] | None = None,
) -> int:
    """Write a ranked result list with judgments and metadata as CSV; returns rows written."""
    judgments = judgments or {}
    records = photo_details(library, [int(i) for i, _ in ranking])
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=RESULT_COLUMNS, lineterminator="\n")
    writer.writeheader()
    rows = 0
    for rank, (image_id, score) in enumerate(ranking, start=1):
        record = records.get(int(image_id))
        if record is None:
            continue
        judged = judgments.get(int(image_id))
        writer.writerow(
            {
                **_result_row(record),
                "rank": rank,
                "score": f"{score:.6f}",
                "judgment": "" if judged is None else judged,
            }
        )
        rows += 1
    atomic_write_text(path, buffer.getvalue())
    return rows


def _file_judgments(library: Library, query_ids: Sequence[int] | None) -> list[FileJudgment]:
    with library.catalog.session() as s:
        stmt = select(Judgment.query_id, Judgment.image_id, Judgment.relevance).order_by(
            Judgment.query_id, Judgment.image_id
        )
        if query_ids is not None:
            stmt = stmt.where(Judgment.query_id.in_(list(query_ids)))
        rows = s.execute(stmt).all()
    records = photo_details(library, [r.image_id for r in rows])
    out = []
    for query_id, image_id, relevance in rows:
        record = records.get(image_id)
        if record is None:
            continue
        docid = (
            str(record.external_id) if record.external_id is not None else catalog_docid(image_id)
        )
        out.append(FileJudgment(str(query_id), docid, record.rel_path, relevance))
    return out


def export_judgments(
    library: Library, path: str | Path, query_ids: Sequence[int] | None = None, fmt: str = "csv"
) -> int:
    """Write the user's judgments as an INQUIRE-style CSV (with a `relevant` column) or as TREC
    qrels (`fmt="qrels"`); query ids are the library's saved-query ids. Returns rows written."""
    judgments = _file_judgments(library, query_ids)
    if fmt == "csv":
        write_judgments_csv(path, judgments)
    elif fmt == "qrels":
        write_trec_qrels(path, judgments)
    else:
        raise BadInputError(f"unknown judgment format {fmt!r}; use csv or qrels")
    return len(judgments)


@dataclass(frozen=True)
class ImportReport:
    queries: int
    judgments: int
    unresolved: int
    query_ids: dict[str, int]  # benchmark query id -> saved query id


def import_benchmark(
    library: Library, queries_path: str | Path | None, judgments_path: str | Path | None = None
) -> ImportReport:
    """Turn benchmark queries (and their judgments) into saved queries of the library, so they
    can be opened, searched and judged further in the window.

    Without a queries file the judgments' query ids are the library's saved-query ids, as
    `export_judgments` writes them: a round trip restores the judgments.
    """
    store = QueryStore(library)
    if queries_path is not None:
        queries = load_queries_csv(queries_path)
        mapping = {q.query_id: store.find_or_create_query(q.text) for q in queries}
        count = len(queries)
    else:
        if judgments_path is None:
            raise BadInputError("give a queries file, a judgments file, or both")
        mapping = {str(q.id): q.id for q in store.list_queries()}
        count = 0
    judged = unresolved = 0
    if judgments_path is not None:
        resolver = JudgmentResolver(library)
        for j in load_judgments(judgments_path):
            saved = mapping.get(j.query_id)
            image_id = resolver(j) if saved is not None else None
            if saved is None or image_id is None:
                unresolved += 1
                continue
            store.judge(saved, image_id, j.relevant)
            judged += 1
    return ImportReport(count, judged, unresolved, mapping)


class CopiedPhotos(list[Path]):
    """The files `copy_relevant_photos` wrote; `missing` counts the relevant photos whose files
    are gone from disk (not copied; their judgments stay)."""

    missing: int = 0


def copy_relevant_photos(library: Library, query_id: int, dest: str | Path) -> CopiedPhotos:
    """Copy the photos judged relevant for a query into `dest`; name clashes get a suffix.
    Photos missing from disk are skipped and counted in the result's `missing`."""
    dest = Path(dest).expanduser()
    dest.mkdir(parents=True, exist_ok=True)
    with library.catalog.session() as s:
        if s.get(Query, query_id) is None:
            raise BadInputError(f"no saved query with id {query_id}")
        ids = list(
            s.scalars(
                select(Judgment.image_id).where(
                    Judgment.query_id == query_id, Judgment.relevance > 0
                )
            )
        )
    copied = CopiedPhotos()
    for record in sorted(photo_details(library, ids).values(), key=lambda r: r.rel_path):
        source = Path(record.path)
        if not source.is_file():
            log.warning("not copied, file is gone: %s", source)
            copied.missing += 1
            continue
        target = dest / source.name
        n = 1
        while target.exists():
            target = dest / f"{source.stem}-{n}{source.suffix}"
            n += 1
        shutil.copy2(source, target)
        copied.append(target)
    return copied
