"""INQUIRE-Rerank as published (Parquet, docs/SPEC.md §6.5) turned into a Quadrat collection and
INQUIRE-format benchmark files.

`import_inquire_rerank(source, out)` streams the Parquet files of `source` a batch at a time
(memory stays bounded by one batch of encoded images) and writes, under `out`:

- `collection/<inat24_file_name>`: each photo once (by `inat24_image_id`), checked with the
  indexer's own decoder, so every photo written here is one the index accepts;
- `collection/metadata.json`: COCO-style metadata that `engine.indexing.coco` reads (taxon from the
  species, date, latitude/longitude, location uncertainty, licence, rights holder);
- `queries.csv`, `judgments.csv` (with `relevant`, negatives kept) and `candidates.csv`
  (`query_id,image_id,image_path,rank,clip_score`): each query's candidates are its rows,
  ranked by descending `clip_score` (ties in file order), the ranking they were drawn from.

Query ids number the distinct query texts in sorted order, as INQUIRE's code takes them. The
Parquet files carry no query id, so INQUIRE's own (`query_id` of its `inquire_queries_*.csv`) is
matched by query text from those files when given or found beside the Parquet files, and kept in
an `inquire_query_id` column of queries.csv and candidates.csv. Files that are not the split asked
for, or (without a split in their name) not INQUIRE-Rerank's schema, are skipped with a reason
each: a full download of the dataset repository may hold `train-*` files of an earlier upload.
A photo that does not decode is counted and left out (of the collection and of every file); the
rest is imported. Every file is written atomically and a second run leaves the same files.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import math
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path, PurePosixPath
from typing import Any

from engine.errors import BadImageError, BadInputError
from engine.evaluation.evaluate import (
    INQUIRE_QUERY_ID,
    BenchmarkJudgment,
    BenchmarkQuery,
    load_queries_csv,
    write_judgments_csv,
    write_queries_csv,
)
from engine.files import atomic_output, atomic_write_text, csv_field, csv_row
from engine.indexing.decode import IMAGE_EXTENSIONS, decode_image
from engine.progress import CancelToken, ProgressCallback, RateMeter, no_progress

log = logging.getLogger(__name__)

StrPath = str | os.PathLike[str]

COLUMNS: tuple[str, ...] = (
    "image",
    "query",
    "relevant",
    "clip_score",
    "inat24_image_id",
    "inat24_file_name",
    "supercategory",
    "category",
    "iconic_group",
    "inat24_species_id",
    "inat24_species_name",
    "latitude",
    "longitude",
    "location_uncertainty",
    "date",
    "license",
    "rights_holder",
)
"""The published columns (docs/SPEC.md §6.5); a file without any of them is refused."""

SPLITS: tuple[str, ...] = ("validation", "test", "all")
PUBLISHED_SPLITS: tuple[str, ...] = ("validation", "test")
INQUIRE_QUERIES_GLOB = "inquire_queries*.csv"  # INQUIRE's own query files, found beside the data
QUERY_COLUMNS: tuple[str, ...] = ("supercategory", "category", "iconic_group")

COLLECTION_FOLDER = "collection"
METADATA_FILE = (
    "metadata.json"  # found by engine.indexing.metadata.find_metadata_file at the collection root
)
QUERIES_FILE = "queries.csv"
JUDGMENTS_FILE = "judgments.csv"
CANDIDATES_FILE = "candidates.csv"

_BATCH_ROWS = 64  # rows (encoded images) held at once
_CHECK_SIDE = 64  # JPEGs decode at reduced size for the check: every byte is still read
_EXAMPLES = 5  # bad photos named in the summary


@dataclass(frozen=True)
class Candidate:
    """One candidate of a query, as a candidates file names it: its image id and/or path,
    relative to the collection root, at a 1-based rank."""

    query_id: str
    image_id: str | None
    image_path: str | None
    rank: int


@dataclass
class ImportReport:
    """What `import_inquire_rerank` read and wrote."""

    out: Path
    collection: Path
    files: list[Path]  # the Parquet files read
    rows: int = 0  # rows read
    queries: int = 0
    photos: int = 0  # distinct photos in the collection (written now or already there)
    written: int = 0  # photos written in this run (new or changed)
    bad: list[tuple[str, str]] = field(default_factory=list)  # (photo or row, reason)
    rows_left_out: int = 0  # rows of bad photos or unusable rows
    candidates: int = 0  # rows of candidates.csv
    skipped: list[tuple[Path, str]] = field(default_factory=list)  # (file, why) not read
    inquire_files: list[Path] = field(default_factory=list)  # INQUIRE queries files matched
    inquire_ids: int = 0  # queries given INQUIRE's id
    inquire_ids_missing: list[str] = field(default_factory=list)  # query texts without one

    @property
    def queries_path(self) -> Path:
        return self.out / QUERIES_FILE

    @property
    def judgments_path(self) -> Path:
        return self.out / JUDGMENTS_FILE

    @property
    def candidates_path(self) -> Path:
        return self.out / CANDIDATES_FILE

    @property
    def metadata_path(self) -> Path:
        return self.collection / METADATA_FILE

    def summary(self) -> str:
        """One line: queries, candidates, photos, and what was left out."""
        line = (
            f"{self.queries} queries, {self.candidates} candidates, {self.photos} photos "
            f"({self.written} written, {self.photos - self.written} already there) "
            f"from {self.rows} rows of {len(self.files)} Parquet file"
            f"{'s' * (len(self.files) != 1)}"
        )
        if self.skipped:
            line += f" ({len(self.skipped)} file{'s' * (len(self.skipped) != 1)} skipped)"
        if self.inquire_files:
            line += f"; INQUIRE query ids for {self.inquire_ids} of {self.queries} queries"
        if self.bad:
            named = "; ".join(f"{what}: {why}" for what, why in self.bad[:_EXAMPLES])
            more = f"; and {len(self.bad) - _EXAMPLES} more" if len(self.bad) > _EXAMPLES else ""
            line += (
                f"; {len(self.bad)} left out ({self.rows_left_out} row"
                f"{'s' * (self.rows_left_out != 1)}), as unusable "
                f"({named}{more})"
            )
        return line

    def to_json(self) -> dict[str, Any]:
        return {
            "out": str(self.out),
            "collection": str(self.collection),
            "files": [str(path) for path in self.files],
            "rows": self.rows,
            "queries": self.queries,
            "candidates": self.candidates,
            "photos": self.photos,
            "written": self.written,
            "bad": [{"photo": what, "reason": why} for what, why in self.bad],
            "rows_left_out": self.rows_left_out,
            "skipped": [{"file": str(path), "reason": why} for path, why in self.skipped],
            "inquire_queries_files": [str(path) for path in self.inquire_files],
            "inquire_ids": self.inquire_ids,
            "inquire_ids_missing": len(self.inquire_ids_missing),
            "queries_file": str(self.queries_path),
            "judgments_file": str(self.judgments_path),
            "candidates_file": str(self.candidates_path),
            "metadata_file": str(self.metadata_path),
        }


# --- finding and checking the files ----------------------------------------------------------


def split_of(path: Path) -> str | None:
    """The split a file belongs to, from its name or folder ("validation-00000-of-
    00001.parquet", "test/…", "train-…" of an earlier upload); None when neither names one."""
    for part in reversed(path.parts):
        name = part.lower()
        if name.startswith(("validation", "val-", "val_", "val.")) or name == "val":
            return "validation"
        if name.startswith("test"):
            return "test"
        if name.startswith("train"):
            return "train"
    return None


def _not_this_split(named: str | None, split: str) -> str | None:
    """Why a file whose name gives split `named` is not read for `split`; None when it is."""
    if named in PUBLISHED_SPLITS and split in (named, "all"):
        return None
    if named is None:
        return None if split == "all" else "its name gives no split (--split all reads it)"
    if named not in PUBLISHED_SPLITS:
        return (
            f"its name gives the {named} split; INQUIRE-Rerank is published as validation and "
            "test (a full download may hold files of an earlier upload)"
        )
    return f"the {named} split, not {split}"


def parquet_files(
    source: StrPath, split: str = "test"
) -> tuple[list[tuple[Path, str | None]], list[tuple[Path, str]]]:
    """The Parquet files of `source` (a folder, searched recursively, or one file) for `split`
    (validation, test or all), in name order, each with the split its name gives, and the files
    passed over, each with why; a one-line BadInputError when none is left. Only names below
    `source` count (not its own folders); one file given by name is always read."""
    if split not in SPLITS:
        raise BadInputError(f"unknown split {split!r}; use {', '.join(SPLITS)}")
    root = Path(source).expanduser()
    if not root.exists():
        raise BadInputError(f"{root}: no such file or folder")
    found = [root] if root.is_file() else sorted(root.rglob("*.parquet"))
    if not found:
        raise BadInputError(
            f"{root}: no .parquet files; download the INQUIRE-Rerank Parquet files into it"
        )
    if root.is_file():
        return [(root, split_of(Path(root.name)))], []
    chosen: list[tuple[Path, str | None]] = []
    skipped: list[tuple[Path, str]] = []
    for path in found:
        named = split_of(path.relative_to(root))
        why = _not_this_split(named, split)
        if why is None:
            chosen.append((path, named))
        else:
            skipped.append((path, why))
    if not chosen:
        named = ", ".join(path.name for path in found[:3])
        if split == "all":
            raise BadInputError(
                f"{root}: no Parquet file of the validation or test split (found {named}: "
                "train-* files are not a published split); download the validation-* and test-* "
                "files, or give one file by name to read it anyway"
            )
        raise BadInputError(
            f"{root}: no Parquet file of the {split} split (files named like "
            f"'{split}-00000-of-00001.parquet'; found {named}); use --split all to read every file"
        )
    return chosen, skipped


def _open_parquet(path: Path) -> tuple[Any, str | None]:
    """A `pyarrow.parquet.ParquetFile` with the published columns and None, or None and why
    the file is not one (a short phrase)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        return None, f"not a Parquet file ({first})"
    schema = parquet.schema_arrow
    missing = [name for name in COLUMNS if name not in schema.names]
    if missing:
        return None, (
            f"missing column{'s' * (len(missing) != 1)} {', '.join(missing)} "
            "(not an INQUIRE-Rerank file)"
        )
    image_type = schema.field("image").type
    if not (pa.types.is_struct(image_type) and image_type.get_field_index("bytes") >= 0):
        return None, f"column image is {image_type}, expected a struct with the encoded bytes"
    return parquet, None


def _opened(
    files: list[tuple[Path, str | None]], skipped: list[tuple[Path, str]], one_file: bool
) -> list[tuple[Path, str | None, Any]]:
    """Every chosen file opened and checked. A file of a published split (or one given by
    name) that is not INQUIRE-Rerank's is the data asked for: a one-line BadInputError. A file
    whose name gives no split is passed over, with why, when its schema is another's."""
    opened: list[tuple[Path, str | None, Any]] = []
    for path, named in files:
        parquet, problem = _open_parquet(path)
        if problem is None:
            opened.append((path, named, parquet))
        elif named is None and not one_file:
            skipped.append((path, f"its name gives no split and it is {problem}"))
        else:
            raise BadInputError(f"{path}: {problem}")
    if not opened:
        path, why = skipped[-1]
        raise BadInputError(f"{path}: {why}; no INQUIRE-Rerank Parquet file left to read")
    return opened


def _inquire_ids(root: Path, given: Sequence[StrPath]) -> tuple[dict[str, str], list[Path]]:
    """INQUIRE's query ids by normalised query text, from INQUIRE's queries files (`given`, else
    any `inquire_queries*.csv` below a source folder); a bad file is a one-line BadInputError."""
    if given:
        paths = [Path(path).expanduser() for path in given]
    else:
        paths = sorted(root.rglob(INQUIRE_QUERIES_GLOB)) if root.is_dir() else []
    ids: dict[str, str] = {}
    for path in paths:
        for query in load_queries_csv(path):
            ids.setdefault(_text_key(query.text), query.query_id)
    return ids, paths


def _text_key(text: str) -> str:
    """A query text as matched across INQUIRE's files: case and spacing do not count."""
    return " ".join(text.split()).casefold()


def _rows(parquet: Any, cancel: CancelToken) -> Iterator[list[dict[str, Any]]]:
    """The file's rows, a bounded batch of dicts at a time."""
    for batch in parquet.iter_batches(batch_size=_BATCH_ROWS, columns=list(COLUMNS)):
        cancel.check()
        yield batch.to_pylist()


# --- values ------------------------------------------------------------------------------------


def _text(value: object) -> str | None:
    if value is None:
        return None
    text = str(value).strip()
    return text or None


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _date(value: object) -> str | None:
    if isinstance(value, datetime | date):
        return value.isoformat()
    return _text(value)


def _safe_relative(name: str) -> str | None:
    """`name` as a relative POSIX path inside the collection, or None when it would leave it."""
    path = PurePosixPath(name.replace("\\", "/"))
    if path.is_absolute() or not path.parts or ".." in path.parts or ":" in path.parts[0]:
        return None
    parts = [part for part in path.parts if part != "."]
    return "/".join(parts) or None


# --- writing photos ----------------------------------------------------------------------------


def _write_photo(target: Path, data: bytes) -> tuple[bool, int, int]:
    """Write `data` at `target` unless the same bytes are there already; decode it with the
    indexer's decoder first. Returns (written, width, height); raises BadImageError."""
    if target.is_file() and target.stat().st_size == len(data) and target.read_bytes() == data:
        decoded = decode_image(target, min_side=_CHECK_SIDE)
        return False, decoded.width, decoded.height
    # A normal file's mode (not mkstemp's private 0600: colleagues read the collection too),
    # decoded before the rename, so a photo that fails is never put in place.
    with atomic_output(target) as (handle, temp):
        handle.write(data)
        handle.flush()
        decoded = decode_image(temp, min_side=_CHECK_SIDE)
    return True, decoded.width, decoded.height


# --- the import --------------------------------------------------------------------------------


@dataclass
class _Row:
    order: int  # position among all rows read: breaks clip_score ties
    image_id: int
    relevant: int
    clip_score: float


def import_inquire_rerank(
    source: StrPath,
    out: StrPath | None = None,
    *,
    split: str = "test",
    inquire_queries: Sequence[StrPath] = (),
    progress: ProgressCallback = no_progress,
    cancel: CancelToken | None = None,
) -> ImportReport:
    """Read the INQUIRE-Rerank Parquet files of `source` (see `parquet_files`) and write the
    collection, its metadata and the benchmark files under `out` (default: `source`).
    `inquire_queries`: INQUIRE's queries CSVs giving its query ids (default: any
    `inquire_queries*.csv` below a source folder).

    Raises BadInputError (one line) for a file of the split that is not Parquet or lacks a
    published column, or a bad INQUIRE queries file, before any photo is written; files of no
    published split are skipped, each with why (`ImportReport.skipped`). `Cancelled` between
    batches (photos written so far are kept, the benchmark files are written only by a run that
    finishes)."""
    cancel = cancel or CancelToken()
    files, skipped = parquet_files(source, split)
    root = Path(source).expanduser()
    out_dir = (
        Path(out).expanduser() if out is not None else (root if root.is_dir() else root.parent)
    )
    # Every file is checked before any photo is written.
    opened = _opened(files, skipped, root.is_file())
    inquire_ids, inquire_files = _inquire_ids(root, inquire_queries)
    collection = out_dir / COLLECTION_FOLDER
    report = ImportReport(out_dir, collection, [path for path, _, _ in opened])
    report.skipped, report.inquire_files = skipped, inquire_files
    for path, why in skipped:
        log.info("INQUIRE-Rerank: %s skipped: %s", path, why)

    total = sum(int(parquet.metadata.num_rows) for _, _, parquet in opened)
    meter = RateMeter(total)
    rows_of: dict[str, list[_Row]] = {}
    extra_of: dict[str, dict[str, str]] = {}
    images: dict[int, dict[str, Any]] = {}  # COCO image records of the photos written
    species: dict[int, str] = {}
    bad_ids: set[int] = set()
    for path, file_split, parquet in opened:
        for batch in _rows(parquet, cancel):
            for record in batch:
                report.rows += 1
                where = f"{path.name} row {report.rows}"
                row = _read_row(record, where, report, images, species, bad_ids, collection)
                if row is not None:
                    query = str(record["query"]).strip()
                    rows_of.setdefault(query, []).append(row)
                    if query not in extra_of:
                        extra = {name: _text(record[name]) or "" for name in QUERY_COLUMNS}
                        extra["split"] = file_split or ""
                        extra_of[query] = extra
            progress(meter.update(report.rows, message=f"{report.photos} photos"))

    cancel.check()
    _write_metadata(report.metadata_path, images, species)
    if inquire_files:
        for text, extra in extra_of.items():
            extra[INQUIRE_QUERY_ID] = inquire_ids.get(_text_key(text), "")
    _write_benchmark(report, rows_of, extra_of, images)
    log.info("INQUIRE-Rerank import: %s", report.summary())
    return report


def _row_fields(record: dict[str, Any]) -> tuple[int, int] | str:
    """(inat24 image id, relevance 0 or 1) of a Parquet row, or why the row cannot be used."""
    image_id = record["inat24_image_id"]
    query = _text(record["query"])
    if not isinstance(image_id, int) or isinstance(image_id, bool) or query is None:
        return "no query" if query is None else "no usable inat24_image_id"
    relevant = record["relevant"]
    if isinstance(relevant, bool):
        relevant = int(relevant)
    if not isinstance(relevant, int) or relevant not in (0, 1):
        return f"relevant is {relevant!r}, expected 0 or 1"
    return image_id, relevant


def _photo_problem(record: dict[str, Any], name: str | None, data: object) -> str | None:
    """Why a row's photo cannot be written (its file name, extension or bytes), else None."""
    if name is None:
        return f"inat24_file_name {record['inat24_file_name']!r} is not a relative path"
    if PurePosixPath(name).suffix.lower() not in IMAGE_EXTENSIONS:
        return f"{PurePosixPath(name).suffix or 'no'} extension is not a photo's"
    if not data:
        return "no image bytes"
    return None


def _read_row(
    record: dict[str, Any],
    where: str,
    report: ImportReport,
    images: dict[int, dict[str, Any]],
    species: dict[int, str],
    bad_ids: set[int],
    collection: Path,
) -> _Row | None:
    """One Parquet row: its photo written (the first time its id is seen) and its candidate row;
    None (counted in the report) when the row or its photo cannot be used."""

    def left_out(what: str, why: str) -> None:
        report.rows_left_out += 1
        report.bad.append((what, why))
        log.info("INQUIRE-Rerank: %s left out: %s", what, why)  # the summary names them

    fields = _row_fields(record)
    if isinstance(fields, str):
        left_out(where, fields)
        return None
    image_id, relevant = fields
    score = _number(record["clip_score"])
    row = _Row(report.rows, image_id, relevant, score if score is not None else -math.inf)
    if image_id in bad_ids:
        report.rows_left_out += 1  # the photo is already counted once as bad
        return None
    if image_id in images:
        return row
    name = _safe_relative(str(record["inat24_file_name"] or ""))
    label = f"image {image_id}" + (f" ({name})" if name else "")
    image = record["image"] or {}
    data = image.get("bytes") if isinstance(image, dict) else None
    reason = _photo_problem(record, name, data)
    if reason is None:
        assert name is not None and isinstance(data, bytes)
        try:
            written, width, height = _write_photo(collection / name, data)
        except BadImageError as err:
            reason = str(err)
    if reason is not None:
        bad_ids.add(image_id)
        left_out(label, reason)
        return None
    report.photos += 1
    report.written += int(written)
    species_id = record["inat24_species_id"]
    species_name = _text(record["inat24_species_name"])
    if isinstance(species_id, int) and species_name is not None:
        species.setdefault(species_id, species_name)
    images[image_id] = {
        "id": image_id,
        "file_name": name,
        "width": width,
        "height": height,
        "date": _date(record["date"]),
        "latitude": _number(record["latitude"]),
        "longitude": _number(record["longitude"]),
        "location_uncertainty": _number(record["location_uncertainty"]),
        "license": _text(record["license"]),
        "rights_holder": _text(record["rights_holder"]),
        "category_id": species_id if isinstance(species_id, int) else None,
    }
    return row


def _write_metadata(path: Path, images: dict[int, dict[str, Any]], species: dict[int, str]) -> None:
    """COCO-style metadata of the photos (docs/SPEC.md §3.2), in image id order."""
    records: list[dict[str, Any]] = []
    annotations: list[dict[str, int]] = []
    for image_id in sorted(images):
        record = dict(images[image_id])
        category_id = record.pop("category_id")
        records.append({key: value for key, value in record.items() if value is not None})
        if category_id is not None and category_id in species:
            annotations.append(
                {"id": len(annotations) + 1, "image_id": image_id, "category_id": category_id}
            )
    document = {
        "info": {"description": "INQUIRE-Rerank photos"},
        "images": records,
        "categories": [{"id": key, "name": species[key]} for key in sorted(species)],
        "annotations": annotations,
    }
    atomic_write_text(path, json.dumps(document, ensure_ascii=False, indent=1) + "\n")


def _write_benchmark(
    report: ImportReport,
    rows_of: dict[str, list[_Row]],
    extra_of: dict[str, dict[str, str]],
    images: dict[int, dict[str, Any]],
) -> None:
    """queries.csv, judgments.csv and candidates.csv: query ids in sorted query order."""
    queries: list[BenchmarkQuery] = []
    judgments: list[BenchmarkJudgment] = []
    candidates: list[tuple[str, int, str, int, float]] = []
    inquire_of: dict[str, str] = {}
    for number, text in enumerate(sorted(rows_of), start=1):
        query_id = str(number)
        queries.append(BenchmarkQuery(query_id, text, extra_of[text]))
        if INQUIRE_QUERY_ID in extra_of[text]:
            inquire_of[query_id] = extra_of[text][INQUIRE_QUERY_ID]
            if inquire_of[query_id]:
                report.inquire_ids += 1
            else:
                report.inquire_ids_missing.append(text)
        seen: set[int] = set()
        ranked = sorted(rows_of[text], key=lambda row: (-row.clip_score, row.order))
        for row in ranked:
            if row.image_id in seen:  # a photo listed twice for one query counts once
                continue
            seen.add(row.image_id)
            path = images[row.image_id]["file_name"]
            judgments.append(BenchmarkJudgment(query_id, str(row.image_id), path, row.relevant))
            candidates.append((query_id, row.image_id, path, len(seen), row.clip_score))
    report.queries = len(queries)
    report.candidates = len(candidates)
    write_queries_csv(report.queries_path, queries)
    write_judgments_csv(report.judgments_path, judgments)
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer, lineterminator="\n")
    # INQUIRE's id (when known) last: readers of the first five columns are unaffected.
    extra = [INQUIRE_QUERY_ID] if inquire_of else []
    writer.writerow(["query_id", "image_id", "image_path", "rank", "clip_score", *extra])
    for query_id, image_id, path, rank, score in candidates:
        shown = repr(score) if math.isfinite(score) else ""
        ids = [inquire_of.get(query_id, "")] if inquire_of else []
        writer.writerow(csv_row([query_id, image_id, path, rank, shown, *ids]))
    atomic_write_text(report.candidates_path, buffer.getvalue())


# --- reading a candidates file -----------------------------------------------------------------


def load_candidates_csv(path: StrPath) -> dict[str, list[Candidate]]:
    """A candidates file `query_id,image_id,image_path,rank` (image_id or image_path may be
    absent; rank optional: file order) as query id -> candidates in rank order; malformed
    files give a one-line BadInputError naming the file and line."""
    try:
        with open(path, encoding="utf-8-sig", newline="") as handle:
            text = handle.read()
    except FileNotFoundError:
        raise BadInputError(f"{os.fspath(path)}: no such file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise BadInputError(f"{os.fspath(path)}: cannot read ({err})") from None
    reader = csv.reader(io.StringIO(text, newline=""))
    header = [name.strip().lower() for name in next(reader, [])]
    if "query_id" not in header or not {"image_id", "image_path"} & set(header):
        raise BadInputError(
            f"{os.fspath(path)} line 1: a candidates file needs the columns query_id and "
            f"image_id or image_path (found {', '.join(header) or 'nothing'})"
        )
    found: dict[str, list[Candidate]] = {}
    for values in reader:
        if not any(value.strip() for value in values):
            continue
        line = reader.line_num
        if len(values) != len(header):
            raise BadInputError(
                f"{os.fspath(path)} line {line}: expected {len(header)} fields, got {len(values)}"
            )
        record = {
            name: csv_field(value.strip()) for name, value in zip(header, values, strict=True)
        }
        query_id = record["query_id"]
        image_id = record.get("image_id") or None
        image_path = record.get("image_path") or None
        if not query_id or not (image_id or image_path):
            raise BadInputError(
                f"{os.fspath(path)} line {line}: needs a query_id and an image_id or image_path"
            )
        listed = found.setdefault(query_id, [])
        rank_text = record.get("rank") or str(len(listed) + 1)
        try:
            rank = int(rank_text)
        except ValueError:
            raise BadInputError(
                f"{os.fspath(path)} line {line}: rank must be a whole number, got {rank_text!r}"
            ) from None
        listed.append(Candidate(query_id, image_id, image_path, rank))
    if not found:
        raise BadInputError(f"{os.fspath(path)}: no candidates in the file (empty)")
    return {qid: sorted(listed, key=lambda c: c.rank) for qid, listed in found.items()}


def evaluate_command(
    report: ImportReport, library: StrPath | None = None, methods: Sequence[str] = ()
) -> list[str]:
    """The `quadrat evaluate` arguments that score the imported benchmark: the rerank protocol
    on the fixed candidates, k = 100 so AP covers all of a query's candidates (INQUIRE-Rerank's
    AP, normalised by the relevant among them), tied scores grouped as INQUIRE's code does."""
    args = [
        "quadrat",
        "evaluate",
        "--queries",
        str(report.queries_path),
        "--judgments",
        str(report.judgments_path),
        "--candidates",
        str(report.candidates_path),
        "--protocol",
        "rerank",
        "--k",
        "100",
        "--ties",
        "group",  # INQUIRE's AP (sklearn) counts tied scores as one threshold
    ]
    if library is not None:
        args += ["--library", os.fspath(library)]
    for method in methods or ("text", "rerank"):
        args += ["--method", method]
    return args
