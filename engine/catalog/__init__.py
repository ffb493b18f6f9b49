"""The catalog: SQLAlchemy models, the session factory and schema migrations."""

from typing import cast

from sqlalchemy import Index, Table

from engine.catalog.db import Catalog, open_catalog
from engine.catalog.models import (
    Base,
    Collection,
    Embedding,
    Image,
    Judgment,
    LibraryMeta,
    Query,
    Run,
    RunResult,
    Subquery,
    SubqueryScore,
    Taxon,
)

# Migration 0007's index: the models describe the schema the migrations build.
_images = cast(Table, Image.__table__)
if "ix_images_collection_status" not in {index.name for index in _images.indexes}:
    Index("ix_images_collection_status", _images.c.collection_id, _images.c.status)

__all__ = [
    "Base",
    "Catalog",
    "Collection",
    "Embedding",
    "Image",
    "Judgment",
    "LibraryMeta",
    "Query",
    "Run",
    "RunResult",
    "Subquery",
    "SubqueryScore",
    "Taxon",
    "open_catalog",
]
