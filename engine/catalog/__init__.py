"""The catalog: SQLAlchemy models, the session factory and schema migrations."""

from engine.catalog.db import Catalog, open_catalog
from engine.catalog.models import (
    Base,
    Collection,
    Embedding,
    Image,
    Judgment,
    JudgmentEvent,
    LibraryMeta,
    Query,
    Run,
    RunResult,
    Subquery,
    SubqueryScore,
    Taxon,
)

__all__ = [
    "Base",
    "Catalog",
    "Collection",
    "Embedding",
    "Image",
    "Judgment",
    "JudgmentEvent",
    "LibraryMeta",
    "Query",
    "Run",
    "RunResult",
    "Subquery",
    "SubqueryScore",
    "Taxon",
    "open_catalog",
]
