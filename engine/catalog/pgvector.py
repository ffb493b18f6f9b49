"""Vectors served by the PostgreSQL catalog's server (pgvector), not by a FAISS file here.

A PostgreSQL catalog whose server has the `vector` extension keeps, per model key, a vector
column in `image_vectors` (migration 0020): `halfvec` where the server's pgvector has it (0.7 and
later: half the memory), else `vector`. It is filled from `embeddings` (the source of truth) as
photos are indexed, back-filled for photos catalogued before, and indexed on the server (HNSW;
IVFFlat as an option), so a new workstation answers its first search with nothing built here.

`PgVectorIndex` answers what `engine.vectors.index.VectorIndex` answers (`search`,
`search_many`, `ids`, `len`, `add`, `remove`), so every method above `Searcher.ranked` works
unchanged. One query per search: the vector order, the photo's status, the filter and the
exact float32 vectors of a shortlist, which are re-ranked here so the scores and the strict
order (score descending, ties by smaller id) are the FAISS index's. A filtered search
(`search_filtered`) joins the filter's own SQL (`engine.search.filters.filter_terms`) with the
vector order in that one statement; hybrid's words ranking (bm25 over the tsvector) rides along
in it too (`search_with_words`), so both lists come back in one round trip.

How a search is answered (pgvector before 0.8 has no iterative index scans):
- up to `exact_limit` vectors, or with no ANN index yet, or a k the index cannot give (pgvector
  returns at most `ef_search` rows, 1,000): an exact scan on the server;
- filtered: how many photos pass is counted in a sample of the catalog (`estimate_passing`);
  where they are few (`exact_filtered_limit`) or too rare for the index's candidates to hold
  enough of them, an exact scan of those photos alone (the filter's indexes first, vectors
  looked up by key); else the index's widened candidate list (ef_search raised), then the
  filter, then the exact re-rank, and an exact scan when it still comes back short. With
  pgvector 0.8 and later the index scan is iterative (`hnsw.iterative_scan`), which holds
  filtered recall without widening. The plan is logged at debug level.

A server without the extension is said in one line (`support_of`), and the library falls back
to its local FAISS index.
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Connection,
    Engine,
    Float,
    LargeBinary,
    Select,
    TextClause,
    and_,
    cast,
    column,
    func,
    literal_column,
    null,
    select,
    table,
    tablesample,
    text,
    union_all,
)
from sqlalchemy.sql import Executable
from sqlalchemy.sql.util import ClauseAdapter

from engine.catalog.models import Image
from engine.errors import QuadratError
from engine.progress import CancelToken, Progress, ProgressCallback, no_progress
from engine.vectors.scoring import check_scores, inner_products, strict_top_k

log = logging.getLogger(__name__)

TABLE = "image_vectors"
# Vectors read from `embeddings` and written to the server per step of a back-fill.
FILL_CHUNK = 20_000
# Up to this many vectors a search scans them all (exact, as the FAISS index does); above it
# the ANN index answers. An exact scan of 20,000 512-d vectors takes about 30 ms on a server.
EXACT_LIMIT = 20_000
# A filter that allows at most this many photos is answered by scanning them exactly.
EXACT_FILTERED_LIMIT = 50_000
# Photos a filtered search samples to estimate how many pass its filter.
ESTIMATE_SAMPLE = 20_000
# pgvector's largest hnsw.ef_search (an index scan gives at most that many rows).
MAX_EF_SEARCH = 1_000
# HNSW build parameters.
HNSW_M = 16
# Above pgvector's 64: at 300k 512-d clustered vectors, 64 held recall@100 at 0.94 even with
# ef_search 600 (bench_pgvector.py); a better graph costs build time, not search time.
HNSW_EF_CONSTRUCTION = 128
ANN_KINDS = ("hnsw", "ivfflat")
_STATUS_OK = "ok"
# The photos on disk, as a WHERE term on `images` (the value written into the SQL, as the
# filters write it, so the planner matches the partial indexes made for it).
_OK: ColumnElement[bool] = Image.status == literal_column("'ok'")


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version)[:3])


@dataclass(frozen=True)
class PgVectorSupport:
    """What the catalog's server offers: pgvector's installed version (None when it cannot be
    used) and, when it cannot, the one line that says how to add it."""

    version: str | None
    message: str = ""

    @property
    def usable(self) -> bool:
        return self.version is not None

    @property
    def has_halfvec(self) -> bool:
        """halfvec (16-bit floats) came with pgvector 0.7."""
        return self.version is not None and _version_tuple(self.version) >= (0, 7)

    @property
    def has_iterative_scans(self) -> bool:
        """Iterative index scans (filtered searches that keep scanning) came with 0.8."""
        return self.version is not None and _version_tuple(self.version) >= (0, 8)


def _how_to_add(database: str, reason: str) -> str:
    return (
        f"the catalog's server {reason}, so this workstation searches its own vector index "
        f"(built from the catalog); to serve vectors from the server, an administrator installs "
        f"pgvector (Debian/Ubuntu: the PGDG package postgresql-<version>-pgvector) and runs "
        f"CREATE EXTENSION vector in the database {database}"
    )


def support_of(engine: Engine) -> PgVectorSupport:
    """Whether the catalog's server can hold and search the vectors (pgvector installed in the
    database, or available and created here when the role may). Never raises for a server
    without it: the answer then carries the one line to show."""
    database = engine.url.database or "of the catalog"
    with engine.connect() as conn:
        row = conn.execute(
            text(
                "SELECT default_version, installed_version FROM pg_available_extensions "
                "WHERE name = 'vector'"
            )
        ).first()
        if row is None:
            return PgVectorSupport(None, _how_to_add(database, "has no pgvector extension"))
        if row[1] is not None:
            return PgVectorSupport(str(row[1]))
    # Available but not created: a role that may create it does so (a superuser, or the
    # database owner where the server marks it trusted); any other is told who can.
    try:
        with engine.begin() as conn:
            conn.execute(text("CREATE EXTENSION IF NOT EXISTS vector"))
            version = conn.execute(
                text("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
            ).scalar()
    except Exception as error:  # a permission error, in the server's words
        first = str(getattr(error, "orig", error)).strip().splitlines()[0][:160]
        log.info("could not create the vector extension: %s", first)
        return PgVectorSupport(
            None, _how_to_add(database, "has pgvector available but not created in the catalog")
        )
    log.info("created the vector extension (pgvector %s) in %s", version, database)
    return PgVectorSupport(str(version))


def column_name(model_key: str) -> str:
    """The `image_vectors` column of a model key: a fixed name from its hash (keys hold any
    characters; the column's comment holds the key itself)."""
    return "v_" + hashlib.sha256(model_key.encode("utf-8")).hexdigest()[:24]


def vector_literal(vector: np.ndarray) -> str:
    """pgvector's text form of one vector: '[x,y,...]'."""
    return "[" + ",".join(f"{float(x):.9g}" for x in np.asarray(vector).ravel()) + "]"


def _copy_payload(ids: np.ndarray, vectors: np.ndarray, half: bool) -> bytes:
    """PostgreSQL's binary COPY of (bigint, vector|halfvec) rows, made by numpy in one go:
    pgvector's binary form is int16 dimensions, int16 unused, then the values big-endian."""
    n, dim = vectors.shape
    value = ">f2" if half else ">f4"
    row = np.dtype(
        [
            ("fields", ">i2"),
            ("id_len", ">i4"),
            ("id", ">i8"),
            ("vec_len", ">i4"),
            ("dim", ">i2"),
            ("unused", ">i2"),
            ("values", value, (dim,)),
        ]
    )
    rows = np.empty(n, dtype=row)
    rows["fields"] = 2
    rows["id_len"] = 8
    rows["id"] = ids
    rows["vec_len"] = 4 + dim * (2 if half else 4)
    rows["dim"] = dim
    rows["unused"] = 0
    rows["values"] = vectors
    header = b"PGCOPY\n\xff\r\n\x00" + (0).to_bytes(4, "big") + (0).to_bytes(4, "big")
    return header + rows.tobytes() + (-1).to_bytes(2, "big", signed=True)


class PgVectorIndex:
    """One model's vectors on the server (see the module doc); the library's vector index where
    the catalog's server has pgvector."""

    kind = "pgvector"
    needs_vectors = False
    nprobe = 0
    nlist = 0
    codec = None

    def __init__(
        self,
        engine: Engine,
        model_key: str,
        dim: int,
        support: PgVectorSupport,
        *,
        ann: str = "hnsw",
    ) -> None:
        if ann not in ANN_KINDS:
            raise ValueError(f"unknown ANN index kind {ann!r}; one of {', '.join(ANN_KINDS)}")
        self.engine = engine
        self.model_key = model_key
        self.dim = int(dim)
        self.support = support
        self.ann = ann
        self.column = column_name(model_key)
        self.type_name = "halfvec" if support.has_halfvec else "vector"
        self.exact_limit = EXACT_LIMIT
        self.exact_filtered_limit = EXACT_FILTERED_LIMIT
        self.memory_budget: int | None = None  # read by the library; the server decides
        self.ef_search: int | None = None  # hnsw.ef_search of unfiltered searches (None: `_ef`)
        self._lock = threading.RLock()
        self._count: int | None = None
        self._ann_index: str | None = None  # the index's kind once seen (it is never dropped)
        self._ann_absent_at: float | None = None  # when the server last had none

    # ------------------------------------------------------------------ the column

    @property
    def index_name(self) -> str:
        return f"{TABLE}_{self.column}_{self.ann}"

    def ensure_column(self) -> None:
        """Add the model's column (two workstations at once: the server's lock orders them)."""
        quoted_key = self.model_key.replace("'", "''")
        with self.engine.begin() as conn:
            conn.execute(text("SELECT pg_advisory_xact_lock(hashtext('quadrat image_vectors'))"))
            existing = conn.execute(
                text(
                    "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
                    "WHERE attrelid = CAST(:table AS regclass) AND attname = :column "
                    "AND NOT attisdropped"
                ),
                {"table": TABLE, "column": self.column},
            ).scalar()
            if existing is not None:
                found = str(existing)
                if found != f"{self.type_name}({self.dim})":
                    # Another dimension (a model re-trained under the same key) or type: the
                    # column is rebuilt from `embeddings`, the source of truth.
                    log.warning(
                        "the server's vectors of %s are %s, not %s(%d): filled again",
                        self.model_key,
                        found,
                        self.type_name,
                        self.dim,
                    )
                    conn.execute(text(f"ALTER TABLE {TABLE} DROP COLUMN {self.column}"))
                    existing = None
            if existing is None:
                conn.execute(
                    text(
                        f"ALTER TABLE {TABLE} ADD COLUMN {self.column} {self.type_name}({self.dim})"
                    )
                )
                conn.execute(
                    text(f"COMMENT ON COLUMN {TABLE}.{self.column} IS 'model {quoted_key}'")
                )
                # Kept in the row, not compressed out of line (TOAST: past about 2 kB, a 512-d
                # float32 vector): exact scans read it without a second lookup.
                conn.execute(
                    text(f"ALTER TABLE {TABLE} ALTER COLUMN {self.column} SET STORAGE PLAIN")
                )

    def missing_count(self) -> int:
        """Vectors `embeddings` holds for photos on disk that the column lacks."""
        with self.engine.connect() as conn:
            return int(
                conn.execute(
                    text(
                        f"SELECT count(*) FROM embeddings e JOIN images i ON i.id = e.image_id "
                        f"LEFT JOIN {TABLE} v ON v.image_id = e.image_id "
                        f"WHERE e.model_key = :key AND i.status = '{_STATUS_OK}' "
                        f"AND v.{self.column} IS NULL"
                    ),
                    {"key": self.model_key},
                ).scalar()
                or 0
            )

    def backfill(
        self, progress: ProgressCallback = no_progress, cancel: CancelToken | None = None
    ) -> int:
        """Copy into the column the vectors of `embeddings` it lacks (photos on disk), a chunk
        per transaction in id order, with progress; a kill or Cancel keeps what was committed
        and the next open goes on. Returns how many were copied."""
        total = self.missing_count()
        if total == 0:
            return 0
        log.info("copying %d vectors of %s to the catalog's server", total, self.model_key)
        done, last = 0, -1
        progress(Progress(0, total, message="copying vectors to the server"))
        while True:
            if cancel is not None:
                cancel.check()
            with self.engine.connect() as conn:
                rows = conn.execute(
                    text(
                        f"SELECT e.image_id, e.vector FROM embeddings e "
                        f"JOIN images i ON i.id = e.image_id "
                        f"LEFT JOIN {TABLE} v ON v.image_id = e.image_id "
                        f"WHERE e.model_key = :key AND i.status = '{_STATUS_OK}' "
                        f"AND v.{self.column} IS NULL AND e.image_id > :last "
                        f"ORDER BY e.image_id LIMIT {FILL_CHUNK}"
                    ),
                    {"key": self.model_key, "last": last},
                ).all()
            if not rows:
                break
            ids = np.fromiter((row[0] for row in rows), dtype=np.int64, count=len(rows))
            vectors = _vectors_of([row[1] for row in rows], self.dim)
            self._write(ids, vectors)
            done += len(ids)
            last = int(ids[-1])
            progress(Progress(done, max(total, done), message="copying vectors to the server"))
        with self.engine.begin() as conn:
            # The planner's row counts: for exact scans, and for the join to `embeddings`
            # (filled in bulk, a table it believes small is read whole for every row).
            conn.execute(text(f"ANALYZE {TABLE}"))
            conn.execute(text("ANALYZE embeddings"))
        return done

    def _write(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        """Upsert (id, vector) rows: a binary COPY into a temporary table, then one INSERT."""
        payload = _copy_payload(ids, vectors, self.type_name == "halfvec")
        with self.engine.begin() as conn:
            cursor = _driver(conn).cursor()
            cursor.execute(
                f"CREATE TEMPORARY TABLE IF NOT EXISTS quadrat_vectors_in "
                f"(image_id bigint, vec {self.type_name}({self.dim})) ON COMMIT DROP"
            )
            with cursor.copy("COPY quadrat_vectors_in FROM STDIN (FORMAT BINARY)") as copy:
                copy.write(payload)
            cursor.execute(
                f"INSERT INTO {TABLE} (image_id, {self.column}) "
                f"SELECT q.image_id, q.vec FROM quadrat_vectors_in q "
                f"JOIN images i ON i.id = q.image_id "
                f"ON CONFLICT (image_id) DO UPDATE SET {self.column} = EXCLUDED.{self.column}"
            )
        with self._lock:
            self._count = None

    # ------------------------------------------------------------------ the ANN index

    def ann_index(self) -> str | None:
        """The kind of the column's ANN index on the server ("hnsw", "ivfflat"), or None."""
        if self._ann_index is not None:
            return self._ann_index
        if self._ann_absent_at is not None and time.monotonic() - self._ann_absent_at < 60:
            return None  # asked again a minute later: another workstation may build it
        with self.engine.connect() as conn:
            found = conn.execute(
                text(
                    "SELECT am.amname FROM pg_index x "
                    "JOIN pg_class c ON c.oid = x.indexrelid "
                    "JOIN pg_am am ON am.oid = c.relam "
                    "JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = x.indkey[0] "
                    "WHERE x.indrelid = CAST(:table AS regclass) AND a.attname = :column "
                    "AND x.indisvalid AND am.amname IN ('hnsw', 'ivfflat')"
                ),
                {"table": TABLE, "column": self.column},
            ).scalar()
        if found is not None:
            self._ann_index = str(found)
        else:
            self._ann_absent_at = time.monotonic()
        return self._ann_index

    def needs_rebuild(self) -> bool:
        """Whether the column has grown past `exact_limit` without its ANN index (the library
        then builds it, with progress)."""
        return len(self) > self.exact_limit and self.ann_index() is None

    def build_ann(
        self, progress: ProgressCallback = no_progress, cancel: CancelToken | None = None
    ) -> float:
        """Build the column's ANN index on the server (`ann`: HNSW, or IVFFlat), reporting
        the server's own progress (pg_stat_progress_create_index); Cancel stops the build
        there. Returns the seconds it took."""
        opclass = f"{self.type_name}_ip_ops"
        if self.ann == "hnsw":
            using = f"hnsw ({self.column} {opclass}) WITH (m = {HNSW_M}, "
            using += f"ef_construction = {HNSW_EF_CONSTRUCTION})"
        else:
            using = f"ivfflat ({self.column} {opclass}) WITH (lists = {ivf_lists(len(self))})"
        statement = f"CREATE INDEX IF NOT EXISTS {self.index_name} ON {TABLE} USING {using}"
        started = time.monotonic()
        message = f"building the server's {self.ann.upper()} index"
        progress(Progress(0, 1, message=message))
        pid: list[int] = []
        failure: list[BaseException] = []

        def build() -> None:
            try:
                with self.engine.begin() as conn:
                    pid.append(int(conn.execute(text("SELECT pg_backend_pid()")).scalar() or 0))
                    conn.execute(text(f"SET LOCAL maintenance_work_mem = '{_build_memory(self)}'"))
                    conn.execute(text(statement))
            except BaseException as error:  # handed to the caller's thread
                failure.append(error)

        worker = threading.Thread(target=build, name="pgvector-build", daemon=True)
        worker.start()
        while worker.is_alive():
            worker.join(0.5)
            if not pid or not worker.is_alive():
                continue
            if cancel is not None and cancel.cancelled:
                with self.engine.connect() as conn:
                    conn.execute(text("SELECT pg_cancel_backend(:pid)"), {"pid": pid[0]})
                worker.join()
                cancel.check()
            with self.engine.connect() as conn:
                row = conn.execute(
                    text(
                        "SELECT phase, tuples_done, tuples_total, blocks_done, blocks_total "
                        "FROM pg_stat_progress_create_index WHERE pid = :pid"
                    ),
                    {"pid": pid[0]},
                ).first()
            if row is not None:
                done, total = (row[1], row[2]) if row[2] else (row[3], row[4])
                progress(Progress(int(done or 0), int(total or 0), message=f"{message}: {row[0]}"))
        if failure:
            if cancel is not None:
                cancel.check()
            raise QuadratError(
                f"the catalog's server could not build the vector index ({_first_line(failure[0])})"
            )
        with self._lock:
            self._ann_index = self.ann
        seconds = time.monotonic() - started
        log.info("built the server's %s index of %s in %.1f s", self.ann, self.model_key, seconds)
        progress(Progress(1, 1, message=message))
        return seconds

    # ------------------------------------------------------------------ contents

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        """Write `vectors` (n, dim) under `ids` (an id already there is replaced)."""
        ids = np.asarray(ids, dtype=np.int64)
        vectors = np.asarray(vectors, dtype=np.float32)
        if len(ids) != len(vectors):
            raise ValueError(f"{len(ids)} ids for {len(vectors)} vectors")
        if len(ids) == 0:
            return
        if vectors.ndim != 2 or vectors.shape[1] != self.dim:
            raise ValueError(f"expected vectors of shape (n, {self.dim}), got {vectors.shape}")
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        if not np.all(np.isfinite(norms)) or np.any(norms == 0):
            raise ValueError("vectors must be finite and non-zero")
        order = np.argsort(ids, kind="stable")
        ids, vectors = ids[order], vectors[order] / norms[order]
        keep = np.append(ids[1:] != ids[:-1], True)  # the last of equal ids wins
        self._write(ids[keep], vectors[keep])

    def remove(self, ids: np.ndarray) -> int:
        """Take the vectors of `ids` out of search (their rows in `embeddings` stay)."""
        id_list = [int(i) for i in np.asarray(ids, dtype=np.int64)]
        if not id_list:
            return 0
        with self.engine.begin() as conn:
            result = conn.execute(
                text(
                    f"UPDATE {TABLE} SET {self.column} = NULL WHERE image_id = ANY(:ids) "
                    f"AND {self.column} IS NOT NULL"
                ),
                {"ids": id_list},
            )
        with self._lock:
            self._count = None
        return int(result.rowcount or 0)

    def ids(self) -> np.ndarray:
        """The ids searched (photos on disk with a vector), sorted ascending."""
        with self.engine.connect() as conn:
            joined = conn.execute(
                text(
                    f"SELECT string_agg(v.image_id::text, ',' ORDER BY v.image_id) FROM {TABLE} v "
                    f"JOIN images i ON i.id = v.image_id "
                    f"WHERE v.{self.column} IS NOT NULL AND i.status = '{_STATUS_OK}'"
                )
            ).scalar()
        if not joined:
            return np.empty(0, dtype=np.int64)
        return np.array(joined.split(","), dtype=np.int64)

    def __len__(self) -> int:
        with self._lock:
            if self._count is None:
                with self.engine.connect() as conn:
                    self._count = int(
                        conn.execute(
                            text(
                                f"SELECT count(*) FROM {TABLE} v JOIN images i ON i.id = "
                                f"v.image_id WHERE v.{self.column} IS NOT NULL "
                                f"AND i.status = '{_STATUS_OK}'"
                            )
                        ).scalar()
                        or 0
                    )
            return self._count

    def __contains__(self, image_id: object) -> bool:
        if not isinstance(image_id, int | np.integer):
            return False
        with self.engine.connect() as conn:
            return (
                conn.execute(
                    text(
                        f"SELECT 1 FROM {TABLE} v JOIN images i ON i.id = v.image_id "
                        f"WHERE v.image_id = :id AND v.{self.column} IS NOT NULL "
                        f"AND i.status = '{_STATUS_OK}'"
                    ),
                    {"id": int(image_id)},
                ).first()
                is not None
            )

    def save(self, _path: object = None) -> None:
        """Nothing to write here: the server holds the vectors."""

    # ------------------------------------------------------------------ search

    def search(
        self, query: np.ndarray, k: int, allowed_ids: np.ndarray | None = None
    ) -> list[tuple[int, float]]:
        """The up to `k` best (id, score) for one query vector (dim,), best first, ties by
        smaller id; `allowed_ids` restricts the search to those ids."""
        query = np.asarray(query, dtype=np.float32)
        if query.ndim != 1:
            raise ValueError(f"search takes one vector of shape ({self.dim},), got {query.shape}")
        return self.search_many(query[None, :], k, allowed_ids)[0]

    def search_many(
        self, queries: np.ndarray, k: int, allowed_ids: np.ndarray | None = None
    ) -> list[list[tuple[int, float]]]:
        """`search` for each row of `queries` (nq, dim): one query to the server each."""
        queries = np.asarray(queries, dtype=np.float32)
        if queries.ndim != 2 or queries.shape[1] != self.dim:
            raise ValueError(f"expected queries of shape (n, {self.dim}), got {queries.shape}")
        norms = np.linalg.norm(queries, axis=1, keepdims=True)
        if not np.all(np.isfinite(norms)) or np.any(norms == 0):
            raise ValueError("vectors must be finite and non-zero")
        queries = queries / norms
        if k <= 0:
            return [[] for _ in range(len(queries))]
        allowed = None
        if allowed_ids is not None:
            allowed = np.unique(np.asarray(allowed_ids, dtype=np.int64))
            if len(allowed) == 0:
                return [[] for _ in range(len(queries))]
        return [self._search_one(query, k, allowed) for query in queries]

    def plan(self, k: int, allowed: int | None) -> SearchPlan:
        """How a search of `k` (within `allowed` photos, when filtered) is answered."""
        count = len(self)
        shortlist = k + max(k // 2, 20)
        ann = self.ann_index()
        if ann is None or count <= self.exact_limit or shortlist > MAX_EF_SEARCH:
            return SearchPlan("exact", shortlist)
        if allowed is None:
            ef = min(MAX_EF_SEARCH, max(shortlist, self.ef_search or _ef(shortlist, count)))
            return SearchPlan(ann, shortlist, ef, _probes(count))
        if allowed <= self.exact_filtered_limit:
            return SearchPlan("exact", shortlist)
        share = allowed / max(count, 1)
        if self.support.has_iterative_scans:
            scan = max(20_000, math.ceil(shortlist * 4 / share))
            return SearchPlan(ann, shortlist, _ef(shortlist), _probes(count), scan)
        # Without iterative scans the index gives its ef_search candidates, then the filter:
        # they must hold the shortlist with room to spare, else scanning the allowed photos
        # is the only way to keep recall.
        ef = min(MAX_EF_SEARCH, max(_ef(shortlist), math.ceil(shortlist * 2 / share)))
        if ef * share < shortlist * 1.5:
            return SearchPlan("exact", shortlist)
        return SearchPlan(ann, shortlist, ef, min(ivf_lists(count), _probes(count) * 4))

    def _search_one(
        self, query: np.ndarray, k: int, allowed: np.ndarray | None
    ) -> list[tuple[int, float]]:
        plan = self.plan(k, None if allowed is None else len(allowed))
        rows = self._fetch(query, plan, allowed)
        wanted = min(k, len(allowed) if allowed is not None else len(self))
        if plan.method != "exact" and len(rows) < min(plan.shortlist, wanted):
            # The index's candidates held too few allowed photos: scan them exactly.
            log.debug("pgvector index search came back short (%d rows): exact", len(rows))
            rows = self._fetch(query, SearchPlan("exact", plan.shortlist), allowed)
        return self._reranked(query, rows, k)

    def _fetch(self, query: np.ndarray, plan: SearchPlan, allowed: np.ndarray | None) -> list[Any]:
        """The shortlist's (id, float32 vector bytes), nearest first by the server's order."""
        distance = f"v.{self.column} <#> CAST(:q AS {self.type_name})"
        params: dict[str, Any] = {"q": vector_literal(query), "key": self.model_key}
        joins = ""
        where = [f"v.{self.column} IS NOT NULL"]
        if allowed is not None:
            params["allowed"] = allowed.tolist()
            if plan.method == "exact":
                # The allowed photos looked up by key, not the whole table read and filtered.
                joins = "JOIN unnest(CAST(:allowed AS bigint[])) AS a(id) ON a.id = v.image_id "
            else:
                where.append("v.image_id = ANY(:allowed)")
        order = distance if plan.method != "exact" else f"({distance}) + 0"  # + 0: no index
        # The ordered scan reads `image_vectors` alone, so the planner takes the ANN index
        # whatever it believes of the joins; photos gone missing have no vector there (remove),
        # and the status checked after it only covers a crash between the two writes.
        statement = (
            f"WITH top AS MATERIALIZED (SELECT v.image_id, {order} AS d FROM {TABLE} v {joins}"
            f"WHERE {' AND '.join(where)} ORDER BY {order} LIMIT {int(plan.shortlist)}) "
            "SELECT top.image_id, e.vector FROM top "
            f"JOIN images i ON i.id = top.image_id AND i.status = '{_STATUS_OK}' "
            "JOIN embeddings e ON e.image_id = top.image_id AND e.model_key = :key "
            "ORDER BY top.d, top.image_id"
        )
        with self.engine.begin() as conn:
            for setting in self._settings(plan):
                conn.execute(text(setting))
            return list(conn.execute(text(statement), params).all())

    # ------------------------------------------------------------------ filtered, in SQL

    def search_filtered(
        self, query: np.ndarray, k: int, terms: Sequence[ColumnElement[bool]]
    ) -> list[tuple[int, float]]:
        """`search` within the photos that pass `terms` (WHERE terms on `images`, as
        `engine.search.filters.filter_terms` gives them): the filter and the vector order in
        one statement, no id list sent. The plan follows the planner's estimate of how many
        photos pass; an index search that comes back short is answered exactly."""
        query = self._one_query(query)
        if k <= 0:
            return []
        estimate = self.estimate_passing(terms)
        plan = self.plan(k, max(estimate, 1))
        log.debug(
            "pgvector filtered search: about %d photos pass, plan %s (ef_search %d)",
            estimate,
            plan.method,
            plan.ef_search,
        )
        rows = self._run(plan, self.filtered_statement(query, plan, terms))
        if plan.method != "exact" and len(rows) < plan.shortlist:
            log.debug("pgvector filtered index search came back short (%d rows): exact", len(rows))
            exact = SearchPlan("exact", plan.shortlist)
            rows = self._run(exact, self.filtered_statement(query, exact, terms))
        return self._reranked(query, rows, k)

    def estimate_passing(self, terms: Sequence[ColumnElement[bool]]) -> int:
        """How many photos pass `terms`, counted in a sample of about `ESTIMATE_SAMPLE` photos
        (TABLESAMPLE SYSTEM: whole pages, a few ms at a million) and scaled up. The planner's
        own estimate is cheaper but multiplies conditions as if independent: a place's
        latitude and longitude ranges came out 40 times too few."""
        total = len(self)
        if total == 0:
            return 0
        percent = min(100.0, 100.0 * ESTIMATE_SAMPLE / total)
        sample = tablesample(Image.__table__, func.system(percent), seed=literal_column("1"))
        adapter = ClauseAdapter(sample)
        statement = select(func.count()).select_from(sample)
        statement = statement.where(*(adapter.traverse(term) for term in terms))
        with self.engine.connect() as conn:
            counted = int(conn.execute(statement).scalar() or 0)
        return round(counted * 100.0 / percent)

    def filtered_statement(
        self, query: np.ndarray, plan: SearchPlan, terms: Sequence[ColumnElement[bool]] | None
    ) -> Select[Any]:
        """The one SELECT of a filtered search under `plan`: (id, float32 vector bytes) of the
        shortlist, nearest first by the server's order. `terms` None: no filter (the order
        reads `image_vectors` alone; the photo's status is checked on the shortlist).

        - exact: the passing photos' vectors scanned in full (the planner reads the filter's
          indexes first; `+ 0` keeps the ANN index out of it);
        - an index, pgvector before 0.8: the index's `ef_search` nearest of all photos (it
          returns no more), then the filter, then the shortlist;
        - an index with iterative scans (0.8 and later): the filter and the index order in one
          scan, which goes on until the shortlist is full (`_settings`)."""
        distance = f"v.{self.column} <#> CAST('{vector_literal(query)}' AS {self.type_name})"
        vectors = table(TABLE, column("image_id"), column(self.column)).alias("v")
        images = Image.__table__
        present = vectors.c[self.column].is_not(None)
        if terms is None:
            order_by: ColumnElement[Any] = literal_column(
                f"({distance}) + 0" if plan.method == "exact" else distance
            )
            top = (
                select(vectors.c.image_id, order_by.label("d"))
                .where(present)
                .order_by(order_by)
                .limit(plan.shortlist)
            )
        elif plan.method == "exact" or plan.max_scan_tuples:
            order: ColumnElement[Any] = literal_column(
                f"({distance}) + 0" if plan.method == "exact" else distance
            )
            top = (
                select(vectors.c.image_id, order.label("d"))
                .join(images, images.c.id == vectors.c.image_id)
                .where(present, *terms)
                .order_by(order)
                .limit(plan.shortlist)
            )
        else:
            order = literal_column(distance)
            nearest = (
                select(vectors.c.image_id, order.label("d"))
                .where(present)
                .order_by(order)
                .limit(plan.ef_search)
                .cte("nearest")
                .prefix_with("MATERIALIZED")
            )
            top = (
                select(nearest.c.image_id, nearest.c.d)
                .join(images, images.c.id == nearest.c.image_id)
                .where(*terms)
                .order_by(nearest.c.d)
                .limit(plan.shortlist)
            )
        shortlist = top.cte("top").prefix_with("MATERIALIZED")
        embeddings = table("embeddings", column("image_id"), column("model_key"), column("vector"))
        statement = select(shortlist.c.image_id, embeddings.c.vector).join(
            embeddings,
            and_(
                embeddings.c.image_id == shortlist.c.image_id,
                embeddings.c.model_key == self.model_key,
            ),
        )
        if terms is None:
            statement = statement.join(images, images.c.id == shortlist.c.image_id).where(_OK)
        return statement.order_by(shortlist.c.d, shortlist.c.image_id)

    def search_with_words(
        self,
        query: np.ndarray,
        k: int,
        terms: Sequence[ColumnElement[bool]] | None,
        words: TextClause,
        words_limit: int,
    ) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
        """`search` (or `search_filtered` within `terms`) and the best `words_limit` photos of
        `words` (a statement of (image_id, score): `engine.search.fulltext.bm25_scored`,
        within `terms` too), in one statement: the two lists a hybrid search fuses. The words'
        list comes best first, ties by smaller id, as `text_ranked` gives it, with the
        server's raw scores (the caller rounds them as `text_ranked` does)."""
        query = self._one_query(query)
        if k <= 0 or words_limit <= 0:
            return [], []
        if terms is None:
            plan = self.plan(k, None)
        else:
            plan = self.plan(k, max(self.estimate_passing(terms), 1))
        nearest = self.filtered_statement(query, plan, terms).subquery("nearest_rows")
        scored = words.columns(column("image_id", BigInteger), column("score", Float))
        found = scored.subquery("words")
        best = select(found.c.image_id, found.c.score)
        if terms is not None:
            images = Image.__table__
            best = best.join(images, images.c.id == found.c.image_id).where(*terms)
        position = func.row_number().over(order_by=(found.c.score.desc(), found.c.image_id))
        best = best.add_columns(position.label("position"))
        best = best.order_by(found.c.score.desc(), found.c.image_id).limit(int(words_limit))
        top_words = best.subquery("top_words")
        statement = union_all(
            select(
                literal_column("0").label("side"),
                nearest.c.image_id,
                nearest.c.vector,
                cast(null(), Float).label("score"),
                cast(null(), BigInteger).label("position"),
            ),
            select(
                literal_column("1"),
                top_words.c.image_id,
                cast(null(), LargeBinary),
                top_words.c.score,
                top_words.c.position,
            ),
        )
        rows = self._run(plan, statement)
        vector_rows = [(row[1], row[2]) for row in rows if row[0] == 0]
        word_rows = sorted((row[4], int(row[1]), float(row[3])) for row in rows if row[0] == 1)
        if plan.method != "exact" and len(vector_rows) < plan.shortlist:
            log.debug("pgvector index search came back short (%d rows): exact", len(vector_rows))
            exact = SearchPlan("exact", plan.shortlist)
            vector_rows = self._run(exact, self.filtered_statement(query, exact, terms))
        return self._reranked(query, vector_rows, k), [(i, score) for _, i, score in word_rows]

    def _one_query(self, query: np.ndarray) -> np.ndarray:
        """One query vector of the index's shape, unit length; else a ValueError."""
        query = np.asarray(query, dtype=np.float32)
        if query.ndim != 1 or query.shape[0] != self.dim:
            raise ValueError(f"search takes one vector of shape ({self.dim},), got {query.shape}")
        norm = float(np.linalg.norm(query))
        if not math.isfinite(norm) or norm == 0:
            raise ValueError("vectors must be finite and non-zero")
        return query / norm

    def _settings(self, plan: SearchPlan) -> list[str]:
        """The SET LOCALs of a search under `plan`: the index's parameters, and joins by key.
        A search joins a few hundred to some ten thousand photos to their vectors; the
        planner, not counting what a distance costs, would rather read every vector and hash
        (10 % of 30,000 photos: 100 ms against 15), and it does the same with `embeddings`
        while its statistics are young."""
        out = ["SET LOCAL enable_hashjoin = off", "SET LOCAL enable_mergejoin = off"]
        if plan.method == "hnsw":
            out.append(f"SET LOCAL hnsw.ef_search = {int(plan.ef_search)}")
            if plan.max_scan_tuples:
                out.append("SET LOCAL hnsw.iterative_scan = relaxed_order")
                out.append(f"SET LOCAL hnsw.max_scan_tuples = {int(plan.max_scan_tuples)}")
        elif plan.method == "ivfflat":
            out.append(f"SET LOCAL ivfflat.probes = {int(plan.probes)}")
            if plan.max_scan_tuples:
                out.append("SET LOCAL ivfflat.iterative_scan = relaxed_order")
        return out

    def _run(self, plan: SearchPlan, statement: Executable) -> list[Any]:
        with self.engine.begin() as conn:
            for setting in self._settings(plan):
                conn.execute(text(setting))
            return list(conn.execute(statement).all())

    def _reranked(self, query: np.ndarray, rows: list[Any], k: int) -> list[tuple[int, float]]:
        """The rows' exact float32 scores, the FAISS index's arithmetic and strict order."""
        if not rows:
            return []
        ids = np.fromiter((row[0] for row in rows), dtype=np.int64, count=len(rows))
        scores = inner_products(query[None, :], _vectors_of([row[1] for row in rows], self.dim))
        check_scores(scores)
        return strict_top_k(ids, scores[0], k)


@dataclass(frozen=True)
class SearchPlan:
    """One search's way through the server: "exact", "hnsw" or "ivfflat"; the shortlist of
    rows re-ranked here; the index's parameters."""

    method: str
    shortlist: int
    ef_search: int = 0
    probes: int = 0
    max_scan_tuples: int = 0


def _ef(shortlist: int, count: int = 0) -> int:
    """hnsw.ef_search for a shortlist: 4 x (2 x gave recall@100 0.97 at 100k but 0.92 at 300k
    on the benchmark's 512-d mixture), pgvector's largest from half a million vectors (at 1M,
    600 gave recall@100 0.933 and 1,000 gave 0.953; bench_pgvector.py)."""
    if count >= 500_000:
        return MAX_EF_SEARCH
    return min(MAX_EF_SEARCH, max(200, 4 * shortlist))


def ivf_lists(count: int) -> int:
    """IVFFlat lists, as pgvector advises: rows / 1000 up to a million rows, sqrt(rows) above."""
    if count <= 1_000_000:
        return max(1, count // 1000)
    return int(math.sqrt(count))


def _probes(count: int) -> int:
    return max(1, ivf_lists(count) // 16)


def _build_memory(index: PgVectorIndex) -> str:
    """maintenance_work_mem for a build: the HNSW graph in memory (much faster than spilling),
    about 1.3 x (vector + 2m neighbour links) per row, within 64 MB to 4 GB."""
    per_row = (2 if index.type_name == "halfvec" else 4) * index.dim + 16 * HNSW_M + 64
    wanted = int(len(index) * per_row * 1.3 / 1e6) + 64
    return f"{min(max(wanted, 64), 4096)}MB"


def _vectors_of(blobs: list[bytes], dim: int) -> np.ndarray:
    if not blobs:
        return np.empty((0, dim), dtype=np.float32)
    joined = np.frombuffer(b"".join(blobs), dtype="<f4")
    if joined.size != len(blobs) * dim:
        raise QuadratError(f"the catalog holds vectors that are not of {dim} dimensions")
    return joined.reshape(len(blobs), dim).astype(np.float32, copy=False)


def _driver(conn: Connection) -> Any:
    """The psycopg connection under a SQLAlchemy one (its COPY)."""
    return conn.connection.driver_connection


def _first_line(error: BaseException) -> str:
    base = getattr(error, "orig", None) or error
    lines = str(base).strip().splitlines()
    return (lines[0] if lines else type(base).__name__)[:200]


def open_index(
    engine: Engine,
    model_key: str,
    dim: int,
    support: PgVectorSupport,
    *,
    ann: str = "hnsw",
    progress: ProgressCallback = no_progress,
    cancel: CancelToken | None = None,
) -> PgVectorIndex:
    """The model's vectors on the server, made ready: the column added where missing, vectors
    `embeddings` holds that it lacks copied (a catalog from before, or a crash between a commit
    and its vectors), and the ANN index built once the column outgrows exact search."""
    index = PgVectorIndex(engine, model_key, dim, support, ann=ann)
    index.ensure_column()
    index.backfill(progress, cancel)
    if index.needs_rebuild():
        index.build_ann(progress, cancel)
    return index


def drop_columns_except(engine: Engine, model_key: str) -> int:
    """Drop the vector columns (and their indexes) of every other model; returns how many."""
    keep = column_name(model_key)
    with engine.begin() as conn:
        names = [
            str(name)
            for name in conn.execute(
                text(
                    "SELECT attname FROM pg_attribute WHERE attrelid = CAST(:table AS regclass) "
                    "AND attnum > 0 AND NOT attisdropped AND attname LIKE 'v\\_%'"
                ),
                {"table": TABLE},
            ).scalars()
            if name != keep
        ]
        for name in names:
            conn.execute(text(f"ALTER TABLE {TABLE} DROP COLUMN {name}"))
    return len(names)
