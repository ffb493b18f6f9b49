"""The stored vectors a compressed index re-ranks its shortlist with: a memory-mapped float16 file.

A compressed (IVF-PQ) index keeps only short codes in memory; the exact score of each vector on
its shortlist comes from this file, beside the index file (``X.faiss`` -> ``X.vectors.f16`` and
``X.vectors.map.npz``). Like the index it is a cache of the catalog's `embeddings` table, which
the library rebuilds when it is missing or damaged.

Layout. The data file is a 64-byte header (magic, format version, dimension, a random
generation token) followed by rows of `dim` little-endian float16 numbers. The map file (numpy
``.npz``, whose zip members carry CRC-32 checks) holds the image id of each row (-1: removed),
the number of rows and the generation token of the data file it describes. Rows are appended
(new photos, replaced vectors) and marked removed in place, so the data file only grows until
the next rebuild.

Writes are atomic as a pair: a new file is written under temporary names and renamed in place;
an append writes the rows first and the map after (renamed over the old one), so a crash leaves
the old map, which ignores the rows past its count. A map whose token differs from the data
file's (a crash between the two renames of a rebuild) is refused.

Why float16 and a memory map (docs/BENCHMARKS.md, "Five million photos"): float16 lost no
measurable recall@100 against float32 re-ranking, halves the file (5 GB at 5M x 512), and
reading a shortlist's 400 rows from the map took a fraction of a millisecond, many times less
than reading the same float32 blobs from SQLite.
"""

from __future__ import annotations

import logging
import os
import secrets
import struct
import tempfile
import zipfile
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from engine.errors import CorruptIndexError, QuadratError
from engine.progress import CancelToken, Progress, ProgressCallback, no_progress

log = logging.getLogger(__name__)

DATA_SUFFIX = ".vectors.f16"
MAP_SUFFIX = ".vectors.map.npz"
_MAGIC = b"QVECF16\0"
_VERSION = 1
_HEADER = struct.Struct("<8sII16s")
_HEADER_BYTES = 64
_DTYPE = np.dtype("<f2")
# A stored vector is unit length; float16 rounding keeps its norm within ~1e-3 of 1. A norm
# further off than this means the bytes were damaged.
NORM_TOLERANCE: float = 1e-2


def vector_file_paths(index_path: Path) -> tuple[Path, Path]:
    """(data file, map file) of the vector file beside the index file `index_path`."""
    stem = Path(index_path).with_suffix("")
    return stem.with_name(stem.name + DATA_SUFFIX), stem.with_name(stem.name + MAP_SUFFIX)


class VectorFile:
    """Unit vectors by image id, memory-mapped from a float16 file (see the module doc).

    Not thread-safe by itself: the vector index that owns it serialises access.
    """

    def __init__(
        self,
        rows: np.ndarray,
        ids_by_row: np.ndarray,
        data_path: Path | None,
        map_path: Path | None,
        token: bytes,
    ) -> None:
        self._rows = rows  # (capacity, dim) float16, usually a read-only memory map
        self._ids_by_row = ids_by_row
        self.dim = int(rows.shape[1])
        self.data_path = data_path
        self.map_path = map_path
        self._token = token
        self._index_lookup()
        self._dirty = False

    def _index_lookup(self) -> None:
        live = np.flatnonzero(self._ids_by_row >= 0)
        order = np.argsort(self._ids_by_row[live], kind="stable")
        self._sorted_ids = self._ids_by_row[live][order]
        self._sorted_rows = live[order]

    # ------------------------------------------------------------------ making and opening

    @classmethod
    def wrap_rows(cls, rows: np.ndarray, ids: np.ndarray, path: Path | None = None) -> VectorFile:
        """A read-only VectorFile over float16 `rows` already in memory or mapped, row i holding
        `ids[i]` (benchmarks); it has no files of its own."""
        return cls(rows, np.asarray(ids, dtype=np.int64), None, None, b"\0" * 16)

    @classmethod
    def create(
        cls,
        index_path: Path,
        dim: int,
        chunks: Iterable[tuple[np.ndarray, np.ndarray]],
        *,
        total: int = 0,
        progress: ProgressCallback = no_progress,
        cancel: CancelToken | None = None,
    ) -> VectorFile:
        """Write the vector file of `index_path` from (ids, unit vectors) chunks, streamed: a
        chunk at a time in memory. Replaces the old file only once the new one is complete."""
        data_path, map_path = vector_file_paths(index_path)
        folder = data_path.parent
        folder.mkdir(parents=True, exist_ok=True)
        token = secrets.token_bytes(16)
        temporaries: list[Path] = []
        try:
            fd, tmp_name = tempfile.mkstemp(prefix=f".{data_path.name}.", suffix=".tmp", dir=folder)
            tmp_data = Path(tmp_name)
            temporaries.append(tmp_data)
            id_parts: list[np.ndarray] = []
            done = 0
            with os.fdopen(fd, "wb") as handle:
                handle.write(_header(dim, token))
                for ids, vectors in chunks:
                    if cancel is not None:
                        cancel.check()
                    handle.write(_as_f16(vectors, dim).tobytes())
                    id_parts.append(np.asarray(ids, dtype=np.int64))
                    done += len(ids)
                    progress(Progress(done, max(total, done), message="writing vectors"))
                handle.flush()
                os.fsync(handle.fileno())
            ids_by_row = np.concatenate(id_parts) if id_parts else np.empty(0, np.int64)
            tmp_map = _write_map(map_path, ids_by_row, token, dim)
            temporaries.append(tmp_map)
            os.replace(tmp_data, data_path)
            temporaries.remove(tmp_data)
            os.replace(tmp_map, map_path)
            temporaries.remove(tmp_map)
        finally:
            for leftover in temporaries:
                leftover.unlink(missing_ok=True)
        return cls.open(index_path, dim)

    @classmethod
    def open(cls, index_path: Path, dim: int) -> VectorFile:
        """Open the vector file of `index_path`. Raises QuadratError if it is missing and
        CorruptIndexError if it fails a check (header, map, size, generation token)."""
        data_path, map_path = vector_file_paths(index_path)
        if not data_path.is_file() or not map_path.is_file():
            raise QuadratError(f"Vector file {data_path} or its map {map_path.name} is missing")
        try:
            with open(data_path, "rb") as handle:
                header = handle.read(_HEADER_BYTES)
            with np.load(map_path, allow_pickle=False) as saved:
                ids_by_row = np.asarray(saved["ids"], dtype=np.int64)
                map_token = bytes(np.asarray(saved["token"], dtype=np.uint8))
                map_dim = int(saved["dim"])
        except (OSError, KeyError, ValueError, zipfile.BadZipFile) as exc:
            raise CorruptIndexError(f"Vector file {data_path} is unreadable ({exc})") from exc
        if len(header) < _HEADER.size:
            raise CorruptIndexError(f"Vector file {data_path} is truncated")
        magic, version, file_dim, token = _HEADER.unpack_from(header)
        if magic != _MAGIC or version != _VERSION:
            raise CorruptIndexError(f"Vector file {data_path} is not a Quadrat vector file")
        if file_dim != dim or map_dim != dim:
            raise CorruptIndexError(
                f"Vector file {data_path} holds {file_dim}-dimensional vectors, expected {dim}"
            )
        if token != map_token:
            raise CorruptIndexError(
                f"Vector file {data_path} does not match its map {map_path.name} (a save cut short)"
            )
        count = len(ids_by_row)
        needed = _HEADER_BYTES + count * dim * _DTYPE.itemsize
        if data_path.stat().st_size < needed:
            raise CorruptIndexError(
                f"Vector file {data_path} is truncated: {data_path.stat().st_size} bytes where "
                f"its map needs {needed}"
            )
        rows = (
            np.memmap(data_path, dtype=_DTYPE, mode="r", offset=_HEADER_BYTES, shape=(count, dim))
            if count
            else np.zeros((0, dim), dtype=_DTYPE)
        )
        return cls(rows, ids_by_row, data_path, map_path, token)

    # ------------------------------------------------------------------ contents

    def __len__(self) -> int:
        return len(self._sorted_ids)

    def ids(self) -> np.ndarray:
        """The ids held, sorted ascending."""
        return self._sorted_ids.copy()

    def get(self, ids: np.ndarray) -> np.ndarray:
        """Unit float32 vectors (len(ids), dim) of `ids`, which must all be held. Raises
        CorruptIndexError for a damaged row (its norm far from 1) or an id not held."""
        ids = np.asarray(ids, dtype=np.int64)
        if len(ids) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        positions = np.minimum(np.searchsorted(self._sorted_ids, ids), len(self._sorted_ids) - 1)
        if len(self._sorted_ids) == 0 or not bool(np.all(self._sorted_ids[positions] == ids)):
            raise CorruptIndexError("the vector file lacks vectors the index holds")
        rows = self._sorted_rows[positions]
        # Ascending rows read the memory map in file order; then put them back in `ids` order.
        order = np.argsort(rows)
        vectors = np.empty((len(ids), self.dim), dtype=np.float32)
        vectors[order] = self._rows[rows[order]]
        norms = np.linalg.norm(vectors, axis=1)
        if not bool(np.all(np.abs(norms - 1.0) <= NORM_TOLERANCE)):
            raise CorruptIndexError("the vector file holds damaged vectors (norm not 1)")
        vectors /= norms[:, None]
        return vectors

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        """Append unit `vectors` under unique `ids`; an id already held is replaced. The rows
        go to the data file at once; the map follows on `flush`."""
        ids = np.asarray(ids, dtype=np.int64)
        if len(ids) == 0:
            return
        if self.data_path is None:
            raise QuadratError("this vector file is read-only")
        self._mark_removed(ids)
        start = len(self._ids_by_row)
        with open(self.data_path, "r+b") as handle:
            # Rows past the map's count are leftovers of an append whose map was never saved.
            handle.truncate(_HEADER_BYTES + start * self.dim * _DTYPE.itemsize)
            handle.seek(0, os.SEEK_END)
            handle.write(_as_f16(vectors, self.dim).tobytes())
            handle.flush()
            os.fsync(handle.fileno())
        self._ids_by_row = np.concatenate([self._ids_by_row, ids])
        self._rows = np.memmap(
            self.data_path,
            dtype=_DTYPE,
            mode="r",
            offset=_HEADER_BYTES,
            shape=(len(self._ids_by_row), self.dim),
        )
        self._index_lookup()
        self._dirty = True

    def remove(self, ids: np.ndarray) -> None:
        """Forget `ids` (absent ones are ignored); saved by `flush`."""
        if self._mark_removed(np.asarray(ids, dtype=np.int64)):
            self._index_lookup()
            self._dirty = True

    def _mark_removed(self, ids: np.ndarray) -> bool:
        if len(self._sorted_ids) == 0 or len(ids) == 0:
            return False
        positions = np.minimum(np.searchsorted(self._sorted_ids, ids), len(self._sorted_ids) - 1)
        held = self._sorted_ids[positions] == ids
        if not bool(held.any()):
            return False
        self._ids_by_row = self._ids_by_row.copy()
        self._ids_by_row[self._sorted_rows[positions[held]]] = -1
        return True

    def flush(self) -> None:
        """Save the map (atomically) if rows were added or removed since the last save."""
        if not self._dirty or self.map_path is None:
            return
        tmp_map = _write_map(self.map_path, self._ids_by_row, self._token, self.dim)
        try:
            os.replace(tmp_map, self.map_path)
        finally:
            tmp_map.unlink(missing_ok=True)
        self._dirty = False

    @property
    def nbytes(self) -> int:
        """Bytes of the data file's rows (mapped: the page cache holds what searches touch)."""
        return int(self._rows.nbytes)


def _header(dim: int, token: bytes) -> bytes:
    return _HEADER.pack(_MAGIC, _VERSION, dim, token).ljust(_HEADER_BYTES, b"\0")


def _as_f16(vectors: np.ndarray, dim: int) -> np.ndarray:
    array = np.asarray(vectors)
    if array.ndim != 2 or array.shape[1] != dim:
        raise ValueError(f"expected vectors of shape (n, {dim}), got {array.shape}")
    return np.ascontiguousarray(array, dtype=_DTYPE)


def _write_map(map_path: Path, ids_by_row: np.ndarray, token: bytes, dim: int) -> Path:
    """The map written and flushed to a temporary file beside `map_path`; the caller renames."""
    fd, name = tempfile.mkstemp(prefix=f".{map_path.name}.", suffix=".tmp", dir=map_path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            np.savez(
                handle,
                ids=ids_by_row,
                token=np.frombuffer(token, dtype=np.uint8),
                dim=np.int64(dim),
            )
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise
    return Path(name)


__all__ = ["DATA_SUFFIX", "MAP_SUFFIX", "NORM_TOLERANCE", "VectorFile", "vector_file_paths"]
