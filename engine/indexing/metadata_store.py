"""`MetadataStore`: what a metadata file says about each photo, read as `load_coco_metadata`
reads it but kept in a temporary SQLite file rather than in memory (iNat24's train.json lists
5 million photos)."""

from __future__ import annotations

import pickle
import sqlite3
from collections.abc import Iterator, Mapping
from dataclasses import fields as dataclass_fields
from pathlib import Path

from engine.indexing.coco import CocoMetadata, CocoReader, log_problems, read_coco
from engine.indexing.metadata import ImageMeta, ignored_metadata_line
from engine.indexing.names import TaxonInfo
from engine.progress import ProgressCallback, no_progress

# ImageMeta's fields in order, as MetadataStore keeps them (the taxon is joined when read).
_META_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclass_fields(ImageMeta))


class _SpillingReader(CocoReader):
    """A `CocoReader` that writes each image record and annotation to a temporary SQLite
    file as it reads them, instead of keeping them in memory (categories and licences, a few
    thousand at most, stay in memory)."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        super().__init__()
        self._db = connection
        self._annotations: list[tuple[int, int]] = []
        self._images = 0

    def _keep(self, key: str, meta: ImageMeta, licence_id: int | None) -> bool:
        values = tuple(getattr(meta, name) for name in _META_FIELDS)
        cursor = self._db.execute(
            "INSERT OR IGNORE INTO images (key, external_id, licence_id, data) VALUES (?, ?, ?, ?)",
            (key, meta.external_id, licence_id, pickle.dumps(values, protocol=5)),
        )
        if cursor.rowcount == 0:
            return False
        self._images += 1
        return True

    def _keep_annotation(self, image_id: int, category_id: int) -> None:
        self._annotations.append((image_id, category_id))
        if len(self._annotations) >= 50_000:
            self._flush()

    def _flush(self) -> None:
        self._db.executemany(
            "INSERT INTO annotations (image_id, category_id) VALUES (?, ?)", self._annotations
        )
        self._annotations.clear()

    def finish_store(self, path: Path) -> MetadataStore:
        self._flush()
        self._db.execute("CREATE INDEX annotations_image ON annotations (image_id)")
        self._db.commit()
        return MetadataStore(
            self._db, path, self._images, self.result, self._taxa, self._licence_names
        )


class MetadataStore(Mapping[str, ImageMeta]):
    """What a metadata file says about each photo, as `load_coco_metadata` gives it, but kept
    in a temporary SQLite file rather than in memory: iNat24's train.json lists 5 million
    photos, and a dict of their records took about 800 bytes each. A read-only mapping from
    `metadata_key(file_name)` to ImageMeta with the same tally of what was ignored (`problems`,
    `values_ignored`, `records_ignored`, `examples`). Close it (or use `with`) to delete the
    temporary database; one thread at a time."""

    def __init__(
        self,
        connection: sqlite3.Connection,
        source: Path,
        count: int,
        tally: CocoMetadata,
        taxa: dict[int, TaxonInfo],
        licence_names: dict[int, str],
    ) -> None:
        self._db: sqlite3.Connection | None = connection
        self.source = source
        self._count = count
        self._taxa = taxa
        self._licence_names = licence_names
        self.problems = tally.problems
        self.values_ignored = tally.values_ignored
        self.records_ignored = tally.records_ignored
        self.examples = list(tally.examples)

    @classmethod
    def load(cls, path: Path, progress: ProgressCallback = no_progress) -> MetadataStore:
        """Read the COCO file at `path` in one streaming pass (as `load_coco_metadata`, with the
        same errors and progress) into a new temporary database."""
        path = Path(path)
        # SQLite's private temporary database (the empty name): a file in the system's
        # temporary folder that SQLite deletes itself, even when the process is killed.
        connection = sqlite3.connect("", check_same_thread=False)
        try:
            # A scratch file: nothing to recover after a crash, so no journal and no syncs.
            connection.execute("PRAGMA journal_mode=OFF")
            connection.execute("PRAGMA synchronous=OFF")
            connection.execute("PRAGMA cache_size=-32768")  # 32 MB of pages
            connection.execute(
                "CREATE TABLE images (key TEXT PRIMARY KEY, external_id INTEGER, "
                "licence_id INTEGER, data BLOB)"
            )
            connection.execute("CREATE TABLE annotations (image_id INTEGER, category_id INTEGER)")
            reader = _SpillingReader(connection)
            read_coco(path, reader, progress)
            store = reader.finish_store(path)
        except BaseException:
            connection.close()
            raise
        log_problems(path, reader.result)
        return store

    def _connection(self) -> sqlite3.Connection:
        if self._db is None:
            raise ValueError("the metadata store is closed")
        return self._db

    def __getitem__(self, key: str) -> ImageMeta:
        row = (
            self._connection()
            .execute("SELECT external_id, licence_id, data FROM images WHERE key = ?", (key,))
            .fetchone()
        )
        if row is None:
            raise KeyError(key)
        external_id, licence_id, data = row
        meta = ImageMeta(*pickle.loads(data))
        if licence_id is not None:
            meta.license = self._licence_names.get(licence_id)  # an unknown id: no licence
        if external_id is not None and self._taxa:
            meta.taxon = self._taxon(external_id)
        return meta

    def _taxon(self, image_id: int) -> TaxonInfo | None:
        """The taxon of the image's first annotation whose category is known."""
        for (category_id,) in self._connection().execute(
            "SELECT category_id FROM annotations WHERE image_id = ? ORDER BY rowid", (image_id,)
        ):
            taxon = self._taxa.get(category_id)
            if taxon is not None:
                return taxon
        return None

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[str]:
        for (key,) in self._connection().execute("SELECT key FROM images ORDER BY rowid"):
            yield key

    def problem_line(self) -> str:
        """What was ignored, in words ("" when nothing was)."""
        return ignored_metadata_line(self.values_ignored, self.records_ignored)

    def close(self) -> None:
        """Close it, which deletes its temporary database (closing twice is harmless)."""
        if self._db is not None:
            self._db.close()
            self._db = None

    def __enter__(self) -> MetadataStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
