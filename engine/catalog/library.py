"""A library folder: the catalog, one vector index per model, and caches.

The `embeddings` table is the source of truth for vectors; each FAISS file under `indexes/` is
a cache of it, and so is the float16 vector file a compressed index re-ranks with. Opening a
model's index compares them and repairs the files (adds vectors the file lacks, removes ids the
table no longer has, or rebuilds a missing or unreadable file, streaming the table in chunks).

A PostgreSQL catalog whose server has pgvector serves the vectors itself instead
(`engine.catalog.pgvector`): no file here, nothing built on a new workstation. A server without
it is said in one line, and the FAISS file is used as on any other catalog.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
from sqlalchemy import delete, func, select

from engine.catalog import Catalog, Embedding, Image, LibraryMeta, open_catalog
from engine.catalog.models import STATUS_OK
from engine.errors import BadInputError, ModelMismatchError, QuadratError
from engine.files import atomic_write_text
from engine.progress import CancelToken, ProgressCallback, no_progress

if TYPE_CHECKING:
    from sqlalchemy import URL, CursorResult

    from engine.catalog.backup import Fingerprint
    from engine.catalog.pgvector import PgVectorIndex, PgVectorSupport
    from engine.vectors.index import VectorIndex

    AnyIndex = VectorIndex | PgVectorIndex

log = logging.getLogger(__name__)

CATALOG_FILE = "catalog.sqlite3"
META_MODEL_KEY = "model_key"
META_MODEL_SPEC = "model_spec"
META_MODEL_DIM = "model_dim"
# Vectors read from the catalog at a time when a whole index is built (100 MB at 512-d).
_STREAM_CHUNK = 50_000
# "auto": a PostgreSQL catalog's server serves the vectors where it has pgvector; "faiss": a
# FAISS index on this workstation whatever the server has.
VECTOR_BACKEND_ENV = "QUADRAT_VECTOR_BACKEND"
VECTOR_BACKENDS = ("auto", "faiss")
# The server's ANN index: "hnsw" (the default) or "ivfflat".
SERVER_INDEX_ENV = "QUADRAT_SERVER_INDEX"


@dataclass(frozen=True)
class RepairReport:
    """What the consistency check changed in a model's vector index file."""

    added: int = 0
    removed: int = 0
    rebuilt: bool = False

    @property
    def changed(self) -> bool:
        return bool(self.added or self.removed or self.rebuilt)


def vectors_from_blobs(blobs: list[bytes], dim: int) -> np.ndarray:
    """Stack float32 blobs from the `embeddings` table into an (n, dim) array."""
    if not blobs:
        return np.zeros((0, dim), dtype=np.float32)
    return np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(blobs), dim).copy()


def _posix(path: str) -> str:
    """A root as compared across workstations: "/" separators, no trailing one."""
    text = path.replace("\\", "/")
    return text if text == "/" else text.rstrip("/")


@dataclass(frozen=True)
class RootMap:
    """This workstation's folders for collection roots the catalog records elsewhere: a share
    mounted as `Z:\\photos` on one workstation and `/mnt/photos` on another. `pairs` are
    (catalog root, folder here); the longest catalog root that is a whole-folder prefix wins.
    Kept per workstation (settings, `QUADRAT_MAP_ROOT`), never in a shared catalog."""

    pairs: tuple[tuple[str, str], ...] = ()

    @classmethod
    def parse(cls, items: Iterable[str]) -> RootMap:
        """From "OLD=NEW" texts; a text without "=" or with an empty side is refused."""
        pairs: list[tuple[str, str]] = []
        for item in items:
            old, sep, new = item.partition("=")
            if not sep or not old.strip() or not new.strip():
                raise BadInputError(
                    f"a root mapping is CATALOG_ROOT=FOLDER_HERE (e.g. Z:\\photos=/mnt/photos), "
                    f"not {item!r}"
                )
            pairs.append((old.strip(), new.strip()))
        return cls(tuple(pairs))

    def _match(self, path: str, side: int) -> tuple[tuple[str, str], str] | None:
        wanted = _posix(path)
        best: tuple[tuple[str, str], str] | None = None
        for pair in self.pairs:
            prefix = _posix(pair[side])
            inside = wanted == prefix or wanted.startswith(prefix + "/")
            if inside and (best is None or len(prefix) > len(_posix(best[0][side]))):
                best = (pair, wanted[len(prefix) :].lstrip("/"))
        return best

    def local(self, root: str) -> Path:
        """The folder here of a collection root as the catalog records it."""
        found = self._match(root, 0)
        if found is None:
            return Path(root)
        (_, here), rest = found
        return Path(here) / rest if rest else Path(here)

    def catalog_root(self, folder: Path | str) -> str:
        """How the catalog records this workstation's `folder` (the inverse of `local`)."""
        found = self._match(str(folder), 1)
        if found is None:
            return str(folder)
        (old, _), rest = found
        if not rest:
            return old
        separator = "\\" if "\\" in old or (len(old) >= 2 and old[1] == ":") else "/"
        return old.rstrip("/\\") + separator + rest.replace("/", separator)


def _slug(model_key: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", model_key).strip("_")[:120] or "model"


class Library:
    """One library folder. Thread-safe for reads of the vector index; writes go through
    the indexer (one writer at a time)."""

    def __init__(self, root: Path, catalog: Catalog, root_map: RootMap | None = None) -> None:
        self.root = root
        self.catalog = catalog
        # Where this workstation finds collection roots recorded elsewhere (see RootMap).
        self.root_map = root_map or RootMap()
        self._indexes: dict[str, AnyIndex] = {}
        backend = os.environ.get(VECTOR_BACKEND_ENV, "").strip().lower() or "auto"
        if backend not in VECTOR_BACKENDS:
            raise BadInputError(
                f"{VECTOR_BACKEND_ENV}={backend!r} is not one of {', '.join(VECTOR_BACKENDS)}"
            )
        self.vector_backend = backend
        self.server_index_kind = os.environ.get(SERVER_INDEX_ENV, "").strip().lower() or "hnsw"
        self._server_support: PgVectorSupport | None = None
        # The catalog's restore mark the indexes in memory were loaded under (read when first
        # needed: `_loaded_under`).
        self._restored_as: str | None = None
        self._restored_as_read = False
        self._lock = threading.RLock()
        # Bytes the vector index may take in memory (None: engine.vectors.policy.DEFAULT_MEMORY_BUDGET);
        # the application sets the user's setting. Decides the index kind at the next build.
        self.index_memory_budget: int | None = None
        # Judgments as the session found them: a session that changed them ends with a backup.
        self._judgments_at_open: Fingerprint | None = None
        if catalog.path is not None:  # a server catalog is backed up by its server
            from engine.catalog.backup import judgment_fingerprint

            self._judgments_at_open = judgment_fingerprint(catalog.engine)

    @classmethod
    def open(
        cls, root: str | Path, database_url: str | None = None, root_map: RootMap | None = None
    ) -> Library:
        """Open or create the library at `root`: the catalog it records (see
        `engine.catalog.binding`), else the one at `database_url` (recorded in the folder), else
        a SQLite file inside it. A URL naming another catalog than the folder's is refused.

        Two processes creating the same library at once are safe: the catalog is created under
        a lock and the second finds it ready. A folder that cannot be created or written, or a
        catalog fault, raises a one-line `CatalogError`. `root_map` says where this workstation
        finds collection roots the catalog records elsewhere."""
        from engine.catalog.db import catalog_faults
        from engine.errors import CatalogError

        root = Path(root).expanduser()
        if root.exists() and not root.is_dir():
            raise QuadratError(f"library path is not a folder: {root}")
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise CatalogError(
                f"cannot create the library folder {root} ({error.strerror or error}); pick a "
                "writable library folder with --library or in Settings"
            ) from error
        from engine.catalog.binding import choose_catalog, record_catalog

        # A folder created with a database URL records it and opens that catalog from then on.
        url = choose_catalog(root, root / CATALOG_FILE, database_url)
        catalog = open_catalog(url, before_upgrade=partial(_backup_before_upgrade, root, url))
        try:
            record_catalog(root, url, root / CATALOG_FILE)
            with catalog_faults(catalog.location, opening=True):
                return cls(root, catalog, root_map)
        except BaseException:
            catalog.dispose()
            raise

    def photo_root(self, root: str) -> Path:
        """The folder on this workstation of a collection root as the catalog records it: the
        one place a recorded root becomes a path to open (results, thumbnails, the detail pane,
        copies, re-scans)."""
        return self.root_map.local(root)

    def catalog_root(self, folder: Path | str) -> str:
        """The collection root the catalog records for this workstation's `folder`."""
        return self.root_map.catalog_root(folder)

    @contextmanager
    def writer_lock(self) -> Iterator[None]:
        """Held while indexing: a second process (the window and a script, say) indexing the
        same library at once is refused with a clear message instead of racing the first."""
        from filelock import FileLock, Timeout

        lock = FileLock(str(self.root / "indexing.lock"), timeout=0)
        try:
            lock.acquire()
        except Timeout:
            raise QuadratError(
                f"another Quadrat is indexing the library at {self.root}; wait for it to finish "
                "or cancel it, then try again"
            ) from None
        try:
            with self.catalog.writer_lock():  # a server catalog: across workstations too
                yield
        finally:
            lock.release()

    def indexing_now(self) -> bool:
        """Whether an indexing run holds the library (this process, another, or on a server
        catalog another workstation). Probes the writer lock for an instant: for messages only,
        never a reason to skip work."""
        from engine.errors import CatalogError

        try:
            with self.writer_lock():
                return False
        except CatalogError:  # the server, not a run, failed to answer: say nothing of a run
            return False
        except QuadratError:
            return True

    def no_photos_message(self, what_to_do: str) -> str:
        """What to say when a search finds no indexed photo: that an indexing run is under way
        and has committed none yet (searches see each checkpoint as it commits), or that the
        library has none, then `what_to_do`."""
        if self.indexing_now():
            return (
                "indexing is running and has not committed its first photos yet; search again "
                "in a moment (photos are searchable as each batch is saved)"
            )
        return f"the library has no indexed photos yet: {what_to_do}"

    def close(self) -> None:
        """Close the catalog; first back it up if this session changed any judgment (the
        newest few backups are kept in `backups/`). A failed backup never stops the close."""
        try:
            if self._judgments_at_open is not None:
                from engine.catalog.backup import backup_if_changed, judgment_fingerprint
                from engine.catalog.db import catalog_faults

                with catalog_faults(self.catalog.location):  # one line, not the SQL dump
                    backup_if_changed(
                        self.root,
                        self.catalog.engine.url,
                        self._judgments_at_open,
                        judgment_fingerprint(self.catalog.engine),
                    )
        except Exception as exc:
            log.warning("could not back up the catalog: %s", exc)
        finally:
            self._judgments_at_open = None  # closing twice backs up once
            self.catalog.dispose()

    def judgments_saved(self) -> None:
        """Take the catalog as it is now as the session's starting point, so closing makes no
        backup of it (after a restore, say, whose result is already a backup)."""
        if self._judgments_at_open is not None:
            from engine.catalog.backup import judgment_fingerprint

            self._judgments_at_open = judgment_fingerprint(self.catalog.engine)

    def __enter__(self) -> Library:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the model the library was indexed with -------------------------------------------

    def meta(self, key: str) -> str | None:
        with self.catalog.session() as s:
            row = s.get(LibraryMeta, key)
            return row.value if row else None

    @property
    def model_key(self) -> str | None:
        return self.meta(META_MODEL_KEY)

    @property
    def model_spec(self) -> str | None:
        return self.meta(META_MODEL_SPEC)

    def model_changed_under(self, model_key: str, spec: str | None) -> bool:
        """True when the library was indexed under the same model spec but other weights (the
        bundled demo model after an update, a checkpoint file replaced at the same path)."""
        known = self.model_key
        return (
            known is not None
            and known != model_key
            and spec is not None
            and (self.model_spec == spec)
        )

    def check_model(self, model_key: str, spec: str | None = None) -> None:
        """Raise `ModelMismatchError` unless the library is empty or indexed with `model_key`."""
        known = self.model_key
        if self.model_changed_under(model_key, spec):
            raise ModelMismatchError(
                f"the model '{spec}' has changed since this library was indexed (an update, or "
                "another file at the same path): index its folders again to re-encode the "
                "photos (quadrat index FOLDER)"
            )
        if known is not None and known != model_key:
            spec = self.model_spec or known
            raise ModelMismatchError(
                f"this library was indexed with model '{spec}'; search it with --model {spec}, "
                f"or re-index it with the new model (quadrat index FOLDER --reindex --model ...)"
            )

    def record_model(self, model_key: str, spec: str, dim: int) -> None:
        with self.catalog.session() as s:
            for key, value in (
                (META_MODEL_KEY, model_key),
                (META_MODEL_SPEC, spec),
                (META_MODEL_DIM, str(dim)),
            ):
                s.merge(LibraryMeta(key=key, value=value))

    def drop_embeddings_except(self, model_key: str) -> int:
        """Delete vectors of every other model (a re-index with a new model)."""
        with self.catalog.session() as s:
            # A DELETE gives a CursorResult; Session.execute is typed as returning a Result.
            result = cast(
                "CursorResult[Any]",
                s.execute(delete(Embedding).where(Embedding.model_key != model_key)),
            )
            removed = result.rowcount or 0
        if self.server_vectors().usable:
            from engine.catalog.pgvector import drop_columns_except

            drop_columns_except(self.catalog.engine, model_key)
        with self._lock:
            for key in list(self._indexes):
                if key != model_key:
                    del self._indexes[key]
        keep = self.index_path(model_key).with_suffix("").name
        for path in (self.root / "indexes").glob("*.faiss"):
            if path.name != self.index_path(model_key).name:
                path.unlink(missing_ok=True)
        for path in (self.root / "indexes").glob("*.vectors.*"):
            if not path.name.startswith(keep + ".vectors."):
                path.unlink(missing_ok=True)
        for path in (self.root / "indexes").glob("*.faiss-restore-mark"):
            if path != self._restore_mark_path(model_key):
                path.unlink(missing_ok=True)
        return removed

    # -- vector indexes -----------------------------------------------------------------------

    def index_path(self, model_key: str) -> Path:
        return self.root / "indexes" / f"{_slug(model_key)}.faiss"

    def embedding_ids(self, model_key: str) -> np.ndarray:
        """Ids of the photos the model's index should hold: vectors of photos on disk (a photo
        gone missing keeps its vector in the catalog but leaves the index)."""
        stmt = (
            select(Embedding.image_id)
            .join(Image, Image.id == Embedding.image_id)
            .where(Embedding.model_key == model_key, Image.status == STATUS_OK)
        )
        with self.catalog.session() as s:
            if s.get_bind().dialect.name == "sqlite":
                # One text parsed by numpy: 5 million ids as ORM rows took about 15 s.
                text = s.execute(select(func.group_concat(stmt.subquery().c.image_id))).scalar()
                return (
                    np.fromstring(text, dtype=np.int64, sep=",") if text else np.empty(0, np.int64)
                )
            return np.fromiter(s.scalars(stmt), dtype=np.int64)

    def load_vectors(
        self, model_key: str, ids: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Vectors of `model_key` from the catalog (all, or those of `ids`): (ids, vectors).
        Photos that are missing from disk are left out, as the index leaves them out."""
        dim = self._dim(model_key)
        out_ids: list[int] = []
        blobs: list[bytes] = []
        with self.catalog.session() as s:
            stmt = (
                select(Embedding.image_id, Embedding.vector)
                .join(Image, Image.id == Embedding.image_id)
                .where(Embedding.model_key == model_key, Image.status == STATUS_OK)
            )
            if ids is None:
                for image_id, blob in s.execute(stmt):
                    out_ids.append(image_id)
                    blobs.append(blob)
            else:
                id_list = [int(i) for i in ids]
                for start in range(0, len(id_list), 900):  # SQLite's variable limit
                    chunk = id_list[start : start + 900]
                    for image_id, blob in s.execute(stmt.where(Embedding.image_id.in_(chunk))):
                        out_ids.append(image_id)
                        blobs.append(blob)
        return np.asarray(out_ids, dtype=np.int64), vectors_from_blobs(blobs, dim)

    def iter_vectors(
        self, model_key: str, chunk_size: int = _STREAM_CHUNK
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """The vectors `load_vectors` returns, as (ids, vectors) chunks in id order, so a
        million photos never sit in memory at once."""
        dim = self._dim(model_key)
        last = -1
        while True:
            with self.catalog.session() as s:
                rows = s.execute(
                    select(Embedding.image_id, Embedding.vector)
                    .join(Image, Image.id == Embedding.image_id)
                    .where(
                        Embedding.model_key == model_key,
                        Image.status == STATUS_OK,
                        Embedding.image_id > last,
                    )
                    .order_by(Embedding.image_id)
                    .limit(chunk_size)
                ).all()
            if not rows:
                return
            ids = np.fromiter((row[0] for row in rows), dtype=np.int64, count=len(rows))
            yield ids, vectors_from_blobs([row[1] for row in rows], dim)
            last = int(ids[-1])

    def _dim(self, model_key: str) -> int:
        if model_key == self.model_key and (dim := self.meta(META_MODEL_DIM)):
            return int(dim)
        with self.catalog.session() as s:
            blob = s.scalar(
                select(Embedding.vector).where(Embedding.model_key == model_key).limit(1)
            )
        if blob is None:
            raise QuadratError(f"no vectors stored for model {model_key}")
        return len(blob) // 4

    def server_vectors(self) -> PgVectorSupport:
        """Whether the catalog's server holds and searches the vectors (pgvector); asked once.
        A PostgreSQL server without it is said in one warning line with how to add it."""
        from engine.catalog.pgvector import PgVectorSupport, support_of

        with self._lock:
            if self._server_support is None:
                if (
                    self.catalog.engine.dialect.name != "postgresql"
                    or self.vector_backend == "faiss"
                ):
                    self._server_support = PgVectorSupport(None)
                else:
                    from engine.catalog.db import catalog_faults

                    with catalog_faults(self.catalog.location):
                        self._server_support = support_of(self.catalog.engine)
                    if self._server_support.message:
                        log.warning("%s", self._server_support.message)
            return self._server_support

    def vector_index(
        self, model_key: str, dim: int | None = None, progress: ProgressCallback = no_progress
    ) -> AnyIndex:
        """The model's vector index, loaded and checked against the catalog on first use.

        `progress` hears about a rebuild from the catalog (minutes at a million photos), and
        first about the filter columns of photos catalogued before they existed (filled once,
        minutes at millions of photos; `engine.catalog.filter_columns`).
        """
        with self._lock:
            restored = self.restore_mark()
            if self._indexes and restored != self._loaded_under():
                log.info("the catalog was restored meanwhile: its vector indexes are read again")
                self._indexes.clear()
            self._restored_as, self._restored_as_read = restored, True
            index = self._indexes.get(model_key)
            if index is None:
                from engine.catalog.filter_columns import fill_filter_columns
                from engine.errors import CatalogError

                try:
                    fill_filter_columns(self.catalog, progress)
                except CatalogError as error:  # a full disk, say: no answer depends on it
                    log.warning(
                        "the date and place filters are not prepared yet (%s); they read every "
                        "photo until a later search prepares them",
                        error,
                    )
                if self.server_vectors().usable:
                    index = self._server_index(model_key, dim, progress)
                else:
                    index, report = self._load_and_repair(model_key, dim, progress)
                    if report.changed:
                        log.info("repaired vector index for %s: %s", model_key, report)
                self._indexes[model_key] = index
            index.memory_budget = self.index_memory_budget
            return index

    def _server_index(
        self,
        model_key: str,
        dim: int | None,
        progress: ProgressCallback = no_progress,
        cancel: CancelToken | None = None,
    ) -> PgVectorIndex:
        """The model's vectors on the catalog's server, made ready (`pgvector.open_index`:
        what `embeddings` holds and the column lacks copied over, the ANN index built once
        the column outgrows exact search)."""
        from engine.catalog.db import catalog_faults
        from engine.catalog.pgvector import open_index

        if dim is None:
            try:
                dim = self._dim(model_key)
            except QuadratError:
                raise QuadratError(self.no_photos_message("index a folder first")) from None
        with catalog_faults(self.catalog.location):
            return open_index(
                self.catalog.engine,
                model_key,
                dim,
                self.server_vectors(),
                ann=self.server_index_kind,
                progress=progress,
                cancel=cancel,
            )

    def restore_mark(self) -> str | None:
        """The catalog's mark of its last full restore (`engine.catalog.restore`), or None."""
        from engine.catalog.backup_source import META_RESTORED

        return self.meta(META_RESTORED)

    def restored_since_indexes_loaded(self) -> bool:
        """Whether a full restore (by any process) replaced the catalog after this library's
        vector indexes were loaded: their ids may now name other photos."""
        return bool(self._indexes) and self.restore_mark() != self._loaded_under()

    def _loaded_under(self) -> str | None:
        if not self._restored_as_read:
            self._restored_as, self._restored_as_read = self.restore_mark(), True
        return self._restored_as

    def _load_and_repair(
        self, model_key: str, dim: int | None, progress: ProgressCallback = no_progress
    ) -> tuple[VectorIndex, RepairReport]:
        """Load the model's index file, verified by its checksum, and repair it from the
        catalog: add the vectors it lacks, remove ids the table no longer has, or rebuild it
        when it is missing, fails its check or cannot be read (one warning line says which).
        Returns (index, RepairReport)."""
        from engine.errors import CorruptIndexError
        from engine.vectors.index import VectorIndex

        path = self.index_path(model_key)
        table_ids = self.embedding_ids(model_key)
        if dim is None:
            dim = self._dim(model_key) if len(table_ids) else None
        index = None
        if path.exists() and self._made_before_a_restore(model_key):
            log.warning(
                "vector index made before the catalog was restored, rebuilding from the "
                "restored catalog: %s",
                path,
            )
        elif path.exists():
            try:
                index = VectorIndex.load(path)
                if dim is not None and index.dim != dim:
                    log.warning(
                        "vector index holds %d-dimensional vectors where the model has %d, "
                        "rebuilding from the catalog",
                        index.dim,
                        dim,
                    )
                    index = None
            except CorruptIndexError as exc:
                log.warning("vector index failed its check, rebuilding from the catalog: %s", exc)
                index = None
            except QuadratError as exc:
                log.warning("vector index unreadable, rebuilding from the catalog: %s", exc)
                index = None
        elif len(table_ids):
            log.warning("vector index file missing, rebuilding from the catalog: %s", path)
        if index is not None:
            index.memory_budget = self.index_memory_budget
        if index is None or index.needs_rebuild():
            if dim is None:
                raise QuadratError(self.no_photos_message("index a folder first"))
            index = self._build_from_catalog(model_key, progress, None)
            return index, RepairReport(added=len(index), rebuilt=True)
        if index.needs_vectors:
            self._attach_vector_file(model_key, index, len(table_ids), progress)
        file_ids = index.ids()
        missing = np.setdiff1d(table_ids, file_ids, assume_unique=True)
        extra = np.setdiff1d(file_ids, table_ids, assume_unique=True)
        removed = index.remove(extra) if len(extra) else 0
        if len(missing):
            ids, vectors = self.load_vectors(model_key, missing)
            index.add(ids, vectors)
        report = RepairReport(added=len(missing), removed=removed)
        if report.changed:
            self._save(model_key, index)
        return index, report

    def _attach_vector_file(
        self, model_key: str, index: VectorIndex, count: int, progress: ProgressCallback
    ) -> None:
        """Give a compressed index its vector file, rebuilt from the catalog when it is
        missing, fails its checks or does not hold the index's ids."""
        from engine.errors import CorruptIndexError
        from engine.vectors.vectorfile import VectorFile

        path = self.index_path(model_key)
        try:
            vectors = VectorFile.open(path, index.dim)
            if not np.array_equal(vectors.ids(), index.ids()):
                raise CorruptIndexError("the vector file does not hold the index's photos")
        except QuadratError as exc:  # CorruptIndexError included
            log.warning("rebuilding the vector file from the catalog: %s", exc)
            vectors = VectorFile.create(
                path, index.dim, self.iter_vectors(model_key), total=count, progress=progress
            )
        index.attach_vectors(vectors)

    def check_consistency(self, model_key: str | None = None) -> RepairReport:
        """Compare the model's index file with the catalog and repair it; reload it afterwards."""
        model_key = model_key or self.model_key
        if model_key is None:
            return RepairReport()
        with self._lock:
            self._indexes.pop(model_key, None)
            if self.server_vectors().usable:
                server = self._server_index(model_key, None)
                self._indexes[model_key] = server
                return RepairReport()
            index, report = self._load_and_repair(model_key, None)
            self._indexes[model_key] = index
            return report

    def rebuild_index(
        self,
        model_key: str,
        progress: ProgressCallback = no_progress,
        cancel: CancelToken | None = None,
    ) -> AnyIndex:
        """Build the model's index afresh from the catalog (the kind chosen by size) and save it.

        At a million photos an approximate (IVF) build takes minutes: it reports progress and
        can be cancelled, leaving the previous index in place. On a server with pgvector: the
        column's vectors checked against the catalog and the server's ANN index built.
        """
        if self.server_vectors().usable:
            server = self._server_index(model_key, None, progress, cancel)
            if server.ann_index() is None and len(server) > server.exact_limit:
                server.build_ann(progress, cancel)
            self.set_index(model_key, server)
            return server
        index = self._build_from_catalog(model_key, progress, cancel)
        self.set_index(model_key, index)
        return index

    def _build_from_catalog(
        self, model_key: str, progress: ProgressCallback, cancel: CancelToken | None
    ) -> VectorIndex:
        from engine.vectors.index import VectorIndex

        table_ids = self.embedding_ids(model_key)
        path = self.index_path(model_key)
        log.info("building the vector index of %s for %d photos", model_key, len(table_ids))

        def sample(size: int) -> np.ndarray:
            # A fixed seed: the same catalog gives the same index.
            rng = np.random.default_rng(0)
            chosen = rng.choice(table_ids, size=min(size, len(table_ids)), replace=False)
            return self.load_vectors(model_key, np.sort(chosen))[1]

        index = VectorIndex.build_streamed(
            self._dim(model_key),
            len(table_ids),
            lambda: self.iter_vectors(model_key),
            sample,
            vectors_path=path,
            memory_budget=self.index_memory_budget,
            progress=progress,
            cancel=cancel,
        )
        self._save(model_key, index)
        return index

    def save_index(self, model_key: str) -> None:
        with self._lock:
            index = self._indexes.get(model_key)
            if index is not None and index.kind != "pgvector":
                self._save(model_key, cast("VectorIndex", index))

    def _save(self, model_key: str, index: VectorIndex) -> None:
        """Save an index file with, beside it, the catalog restore mark it was made under
        (`_restore_mark_path`): a later restore makes it a file to rebuild, not to trust."""
        path = self.index_path(model_key)
        index.save(path)
        atomic_write_text(self._restore_mark_path(model_key), self._loaded_under() or "")

    def _restore_mark_path(self, model_key: str) -> Path:
        path = self.index_path(model_key)
        return path.with_name(path.name + "-restore-mark")

    def _made_before_a_restore(self, model_key: str) -> bool:
        """Whether the index file was made under another restore mark than the catalog's now
        (none beside it: made before any restore, fine while the catalog was never restored)."""
        try:
            made_under = self._restore_mark_path(model_key).read_text(encoding="utf-8").strip()
        except OSError:
            made_under = ""
        return made_under != (self._loaded_under() or "")

    def set_index(self, model_key: str, index: AnyIndex) -> None:
        with self._lock:
            self._indexes[model_key] = index


def _backup_before_upgrade(root: Path, catalog: URL, current: str, head: str) -> None:
    """A whole copy of a SQLite catalog before its schema is upgraded (whole, not judgments
    only: the copy must open with the version that wrote it). The upgrade does not run when
    the backup cannot be written. A server catalog's backups are the server's (pg_dump)."""
    from engine.catalog.backup import backup_catalog
    from engine.catalog.backup_source import is_sqlite_catalog, sqlite_catalog_file

    if not is_sqlite_catalog(catalog):
        return
    source = sqlite_catalog_file(catalog)
    try:
        backup_catalog(root, source, reason=f"before-upgrade-{current}-to-{head}")
    except QuadratError as error:
        raise QuadratError(
            f"this version of Quadrat must upgrade the catalog at {source} (schema {current} to "
            f"{head}) and backs it up first, but the backup failed ({error}); free at least "
            f"{_catalog_size(source) / 1e6:.0f} MB in {root} and try again (nothing was changed)"
        ) from error


def _catalog_size(path: Path) -> int:
    """The catalog file and its -wal, the size a backup needs."""
    total = 0
    for part in (path, path.with_name(path.name + "-wal")):
        if part.is_file():
            total += part.stat().st_size
    return total
