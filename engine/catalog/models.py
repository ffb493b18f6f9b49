"""SQLAlchemy 2.0 models of the catalog.

The catalog is the source of truth: image rows, their metadata, their embeddings (one row per
image and model), and the user's queries, runs and judgments. The FAISS index is derived from
the `embeddings` table and can always be rebuilt from it.
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Date,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
    func,
)
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement


def utcnow() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


class Base(DeclarativeBase):
    pass


# Values that outgrow 32 bits: file sizes, modification times in nanoseconds, source ids.
# PostgreSQL's INTEGER is 32-bit; SQLite's INTEGER is already 64-bit, so there the column stays
# INTEGER (no table rebuild, the schema SQLite libraries have).
BigInt = BigInteger().with_variant(Integer(), "sqlite")


# Image status values. Whether an image is *indexed* is per model: an `embeddings` row exists.
STATUS_OK = "ok"
STATUS_SKIPPED = "skipped"
# The file is gone from disk (a drive not mounted, a folder moved aside). The row, its id, its
# vectors and its judgments are kept; the photo is left out of search until it comes back.
# Only an explicit "forget" deletes it.
STATUS_MISSING = "missing"


class LibraryMeta(Base):
    """Key/value facts about the library, e.g. the model it was indexed with."""

    __tablename__ = "library_meta"
    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


class Collection(Base):
    """A photo folder the user added to the library."""

    __tablename__ = "collections"
    id: Mapped[int] = mapped_column(primary_key=True)
    root: Mapped[str] = mapped_column(Text, unique=True)
    name: Mapped[str] = mapped_column(String(255))
    added_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    last_scanned_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    metadata_file: Mapped[str | None] = mapped_column(Text, nullable=True)

    images: Mapped[list[Image]] = relationship(back_populates="collection")


class Taxon(Base):
    """A taxon as found in iNat folder names or COCO categories."""

    __tablename__ = "taxa"
    id: Mapped[int] = mapped_column(primary_key=True)
    # A stable lookup key: the iNat folder name when known, else the scientific name.
    key: Mapped[str] = mapped_column(Text, unique=True)
    name: Mapped[str] = mapped_column(Text)
    common_name: Mapped[str | None] = mapped_column(Text, nullable=True)
    kingdom: Mapped[str | None] = mapped_column(String(128), nullable=True)
    phylum: Mapped[str | None] = mapped_column(String(128), nullable=True)
    class_: Mapped[str | None] = mapped_column("class", String(128), nullable=True)
    order: Mapped[str | None] = mapped_column("order", String(128), nullable=True)
    family: Mapped[str | None] = mapped_column(String(128), nullable=True)
    genus: Mapped[str | None] = mapped_column(String(128), nullable=True)
    specific_epithet: Mapped[str | None] = mapped_column(String(128), nullable=True)
    category_id: Mapped[int | None] = mapped_column(Integer, nullable=True)


class Image(Base):
    """One photo file of a collection, with what the scanner learned about it."""

    __tablename__ = "images"
    __table_args__ = (
        UniqueConstraint("collection_id", "rel_path", name="uq_images_collection_path"),
        Index("ix_images_content_hash", "content_hash"),
        Index("ix_images_taxon", "taxon_id"),
        Index("ix_images_external_id", "external_id"),
        # The library panel's counts at millions of photos (migration 0008).
        Index("ix_images_collection_status", "collection_id", "status"),
        # The date and month filters, read with the status (migration 0012). Places have
        # the R*Tree `image_places` on SQLite and a GiST index over point(longitude,
        # latitude) on PostgreSQL, made by the migration (neither is a model's).
        Index("ix_images_observed_date_status", "observed_date", "observed_month", "status"),
        Index("ix_images_observed_month_status", "observed_month", "status"),
        Index("ix_images_event", "event_id"),
        Index("ix_images_deployment", "deployment_id"),
    )
    id: Mapped[int] = mapped_column(primary_key=True)
    collection_id: Mapped[int] = mapped_column(ForeignKey("collections.id", ondelete="CASCADE"))
    rel_path: Mapped[str] = mapped_column(Text)
    size: Mapped[int] = mapped_column(BigInt)
    mtime_ns: Mapped[int] = mapped_column(BigInt)
    content_hash: Mapped[str | None] = mapped_column(String(64), nullable=True)
    width: Mapped[int | None] = mapped_column(Integer, nullable=True)
    height: Mapped[int | None] = mapped_column(Integer, nullable=True)
    taxon_id: Mapped[int | None] = mapped_column(
        ForeignKey("taxa.id", ondelete="SET NULL"), nullable=True
    )
    # The observer's local time (what the date filters read), and its UTC offset in minutes
    # east when the metadata gave one (migration 0011).
    observed_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    observed_utc_offset: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # The local date of `observed_at` and its parts, written by the database's own triggers
    # whenever `observed_at` is (migration 0012): never set them from Python.
    observed_date: Mapped[date | None] = mapped_column(Date, nullable=True)
    observed_year: Mapped[int | None] = mapped_column(Integer, nullable=True)
    observed_month: Mapped[int | None] = mapped_column(Integer, nullable=True)
    latitude: Mapped[float | None] = mapped_column(Float, nullable=True)
    longitude: Mapped[float | None] = mapped_column(Float, nullable=True)
    location_uncertainty: Mapped[float | None] = mapped_column(Float, nullable=True)
    license: Mapped[str | None] = mapped_column(Text, nullable=True)
    rights_holder: Mapped[str | None] = mapped_column(Text, nullable=True)
    # The observer's own words about the photo (a COCO record's "notes", "description" or
    # "remarks"); searched with the taxon's names through the FTS5 table `record_text`.
    notes: Mapped[str | None] = mapped_column(Text, nullable=True)
    # Keywords from the photo's XMP sidecar and its embedded XMP/IPTC, one per line (flat or
    # hierarchical "A|B|C"), searched as words of the record; the XMP rating (-1 rejected,
    # 0..5); and what they were read from, so a re-scan reads only changed files (migration
    # 0015, engine/indexing/keywords.py).
    keywords: Mapped[str | None] = mapped_column(Text, nullable=True)
    rating: Mapped[int | None] = mapped_column(Integer, nullable=True)
    keywords_source: Mapped[str | None] = mapped_column(Text, nullable=True)
    # The id the photo has in its source data set (COCO image id; INQUIRE judgments use it).
    external_id: Mapped[int | None] = mapped_column(BigInt, nullable=True)
    # The camera as EXIF names it, what EXIF held that was dropped as impossible (bits of
    # engine.indexing.exif), the camera clock's reading when it is the photo's time
    # (`observed_at` is it plus the deployment's clock offset), the deployment and the event
    # (the id of its first frame; a frame set apart is an event of its own) (migration 0014).
    camera_make: Mapped[str | None] = mapped_column(String(128), nullable=True)
    camera_model: Mapped[str | None] = mapped_column(String(128), nullable=True)
    camera_serial: Mapped[str | None] = mapped_column(String(128), nullable=True)
    exif_flags: Mapped[int | None] = mapped_column(Integer, nullable=True)
    camera_time: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    # No foreign key (see migration 0014): engine.indexing.deployments keeps it true.
    deployment_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    event_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    event_apart: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    # What the record says about publishing the place (iNaturalist's words: "open", "obscured",
    # "private"), whether its coordinates are already obscured, whether it withheld the place
    # (null coordinates: the EXIF GPS is then never used) and the uncertainty its source
    # publishes with obscured coordinates (migration 0018, engine/catalog/privacy.py).
    geoprivacy: Mapped[str | None] = mapped_column(String(16), nullable=True)
    taxon_geoprivacy: Mapped[str | None] = mapped_column(String(16), nullable=True)
    coordinates_obscured: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    location_withheld: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    public_location_uncertainty: Mapped[float | None] = mapped_column(Float, nullable=True)
    status: Mapped[str] = mapped_column(String(16), default=STATUS_OK)
    skip_reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    missing_since: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    added_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow, onupdate=utcnow)

    collection: Mapped[Collection] = relationship(back_populates="images")
    taxon: Mapped[Taxon | None] = relationship()


class SensitiveTaxon(Base):
    """A taxon (any rank, by scientific name) whose places every export generalises to a grid of
    `grid_km` or withholds: the lab's own list, shared by every workstation of a catalog
    (migration 0018)."""

    __tablename__ = "sensitive_taxa"
    __table_args__ = (UniqueConstraint("name", name="uq_sensitive_taxa_name"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(Text)
    action: Mapped[str] = mapped_column(String(16))  # "generalise" or "withhold"
    grid_km: Mapped[float | None] = mapped_column(Float, nullable=True)
    note: Mapped[str | None] = mapped_column(Text, nullable=True)
    added_by: Mapped[str | None] = mapped_column(String(128), nullable=True)
    added_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


class Deployment(Base):
    """A camera at a place: a folder of a collection and, when EXIF names one, a camera serial
    ('' when none). Made after indexing (`engine.indexing.deployments`); `marked` when its
    folder lies in a tree the user marked as deployments. `clock_offset_s` is added to the
    camera's clock for every time shown, filtered and exported; the previous offset is kept so
    a change can be undone (migration 0014)."""

    __tablename__ = "deployments"
    __table_args__ = (
        UniqueConstraint(
            "collection_id", "folder", "camera_serial", name="uq_deployments_folder_serial"
        ),
    )
    id: Mapped[int] = mapped_column(primary_key=True)
    collection_id: Mapped[int] = mapped_column(ForeignKey("collections.id", ondelete="CASCADE"))
    folder: Mapped[str] = mapped_column(Text)
    camera_serial: Mapped[str] = mapped_column(String(128), default="")
    name: Mapped[str] = mapped_column(Text)
    marked: Mapped[bool] = mapped_column(Boolean, default=False)
    clock_offset_s: Mapped[int] = mapped_column(Integer, default=0)
    previous_clock_offset_s: Mapped[int | None] = mapped_column(Integer, nullable=True)


class Embedding(Base):
    """An image's vector under one model. The FAISS index is rebuilt from these rows."""

    __tablename__ = "embeddings"
    image_id: Mapped[int] = mapped_column(
        ForeignKey("images.id", ondelete="CASCADE"), primary_key=True
    )
    model_key: Mapped[str] = mapped_column(String(255), primary_key=True)
    vector: Mapped[bytes] = mapped_column(LargeBinary)  # float32, little-endian, L2-normalised


class Query(Base):
    """A question the user asked; runs of several methods and the judgments hang off it.

    One query per text and query photo, kept by the database (`uq_queries_text_image`, declared
    below the class): two people asking the same new question at once get the same query. The
    text is compared exactly, case and punctuation included; the app collapses runs of
    whitespace before it stores a text (`QueryStore.find_or_create_query`), so spacing alone
    never makes a second query. A text-only query has no photo: the key reads NULL as ''
    (a unique index would let NULLs repeat). On PostgreSQL the key holds md5s of the two."""

    __tablename__ = "queries"
    id: Mapped[int] = mapped_column(primary_key=True)
    text: Mapped[str] = mapped_column(Text)
    image_path: Mapped[str | None] = mapped_column(Text, nullable=True)
    name: Mapped[str | None] = mapped_column(Text, nullable=True)
    notes: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow, onupdate=utcnow)


class key_text(FunctionElement[str]):  # lower case: used like a SQL function
    """A text as the unique key of `queries` holds it: the text itself on SQLite; its md5 on
    PostgreSQL, whose index entries hold at most 2.7 KB (a long query text would not fit)."""

    inherit_cache = True
    name = "key_text"


@compiles(key_text)
def _key_text(element: key_text, compiler: SQLCompiler, **kw: Any) -> str:
    return str(compiler.process(element.clauses, **kw))


@compiles(key_text, "postgresql")
def _key_text_md5(element: key_text, compiler: SQLCompiler, **kw: Any) -> str:
    return f"md5({compiler.process(element.clauses, **kw)})"


# Migration 0009 merged the twins a race had made before it added this key.
Index(
    "uq_queries_text_image",
    key_text(Query.text),
    key_text(func.coalesce(Query.image_path, "")),
    unique=True,
)


class Run(Base):
    """One execution of a query by one method: the ranked list it produced."""

    __tablename__ = "runs"
    id: Mapped[int] = mapped_column(primary_key=True)
    query_id: Mapped[int] = mapped_column(ForeignKey("queries.id", ondelete="CASCADE"), index=True)
    method: Mapped[str] = mapped_column(String(32))
    # "text", "image" or "image+text": what the user asked with (a dropped photo is an image run).
    kind: Mapped[str] = mapped_column(String(16), default="text", server_default="text")
    model_key: Mapped[str | None] = mapped_column(String(255), nullable=True)
    params: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    quadrat_version: Mapped[str | None] = mapped_column(String(32), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    duration_ms: Mapped[float | None] = mapped_column(Float, nullable=True)


class RunResult(Base):
    __tablename__ = "run_results"
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    rank: Mapped[int] = mapped_column(Integer, primary_key=True)  # 1-based
    image_id: Mapped[int] = mapped_column(ForeignKey("images.id", ondelete="CASCADE"))
    score: Mapped[float] = mapped_column(Float)


class Judgment(Base):
    """The user's relevance judgment of one image for one query (not per run)."""

    __tablename__ = "judgments"
    query_id: Mapped[int] = mapped_column(
        ForeignKey("queries.id", ondelete="CASCADE"), primary_key=True
    )
    image_id: Mapped[int] = mapped_column(
        ForeignKey("images.id", ondelete="CASCADE"), primary_key=True
    )
    relevance: Mapped[int] = mapped_column(Integer)  # 0/1 now; graded later
    judged_by: Mapped[str | None] = mapped_column(String(128), nullable=True)
    judged_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    # The box the judge looked at when the judgment was made on a detection (migration 0021):
    # its geometry as `engine.detections.records.Box.text` writes it, not a detection id, so
    # it outlives a re-import of the detector's file and travels in a judgments-only backup.
    box: Mapped[str | None] = mapped_column(String(64), nullable=True)


class JudgmentEvent(Base):
    """Every judgment as it was made, by whom and when, kept after a later one replaces it
    (`judgments` holds the newest per photo, which the metrics use): on a shared catalog two
    people may judge the same photo, and neither act is lost. A cleared judgment has
    relevance NULL."""

    __tablename__ = "judgment_events"
    __table_args__ = (Index("ix_judgment_events_query_image", "query_id", "image_id"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    query_id: Mapped[int] = mapped_column(ForeignKey("queries.id", ondelete="CASCADE"))
    image_id: Mapped[int] = mapped_column(ForeignKey("images.id", ondelete="CASCADE"))
    relevance: Mapped[int | None] = mapped_column(Integer, nullable=True)
    judged_by: Mapped[str | None] = mapped_column(String(128), nullable=True)
    judged_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    box: Mapped[str | None] = mapped_column(String(64), nullable=True)  # as in `judgments`
    # "judgment" (a judge's own) or "adjudication" (settles a disagreement; migration 0017).
    # The server's default only: a statement that names no kind stays valid against a catalog
    # of an older revision (the upgrade tests write through these classes).
    kind: Mapped[str] = mapped_column(String(16), server_default="judgment")


class DoubleJudging(Base):
    """A photo of a query offered blind to a second judge (migration 0017): judging it, a judge
    sees only their own marks (`engine/judgments/adjudication.py`)."""

    __tablename__ = "double_judging"
    query_id: Mapped[int] = mapped_column(
        ForeignKey("queries.id", ondelete="CASCADE"), primary_key=True
    )
    image_id: Mapped[int] = mapped_column(
        ForeignKey("images.id", ondelete="CASCADE"), primary_key=True
    )
    offered_by: Mapped[str | None] = mapped_column(String(128), nullable=True)
    offered_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


class RecallCertificate(Base):
    """A query's recall certified by a stopping rule (migration 0017): the target, the
    confidence, the judgments it took and the rule, kept for exports and method texts."""

    __tablename__ = "recall_certificates"
    __table_args__ = (Index("ix_recall_certificates_query", "query_id"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    query_id: Mapped[int] = mapped_column(ForeignKey("queries.id", ondelete="CASCADE"))
    target: Mapped[float] = mapped_column(Float)
    confidence: Mapped[float] = mapped_column(Float)
    judged: Mapped[int] = mapped_column(Integer)
    sample_judged: Mapped[int] = mapped_column(Integer)
    stop_rank: Mapped[int] = mapped_column(Integer)
    found: Mapped[int] = mapped_column(Integer)
    rule: Mapped[str] = mapped_column(Text)
    certified_by: Mapped[str | None] = mapped_column(String(128), nullable=True)
    certified_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


class JudgmentAttribute(Base):
    """What was seen in a photo judged for a query, one Darwin Core term a row (`behavior`,
    `lifeStage`, ...): the newest value, with who set it and when (migration 0013). Every change
    is kept in `attribute_events`; `engine/judgments/attributes.py` writes both."""

    __tablename__ = "judgment_attributes"
    query_id: Mapped[int] = mapped_column(
        ForeignKey("queries.id", ondelete="CASCADE"), primary_key=True
    )
    image_id: Mapped[int] = mapped_column(
        ForeignKey("images.id", ondelete="CASCADE"), primary_key=True
    )
    term: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text)
    set_by: Mapped[str | None] = mapped_column(String(128), nullable=True)
    set_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


class AttributeEvent(Base):
    """Every attribute change as it was made, by whom and when (value NULL: cleared)."""

    __tablename__ = "attribute_events"
    __table_args__ = (Index("ix_attribute_events_query_image", "query_id", "image_id"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    query_id: Mapped[int] = mapped_column(ForeignKey("queries.id", ondelete="CASCADE"))
    image_id: Mapped[int] = mapped_column(ForeignKey("images.id", ondelete="CASCADE"))
    term: Mapped[str] = mapped_column(String(64))
    value: Mapped[str | None] = mapped_column(Text, nullable=True)
    changed_by: Mapped[str | None] = mapped_column(String(128), nullable=True)
    changed_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


class AttributePreset(Base):
    """A value a query gives the photos judged relevant for it ("flowering" ->
    reproductiveCondition=flowering), one Darwin Core term a row."""

    __tablename__ = "attribute_presets"
    query_id: Mapped[int] = mapped_column(
        ForeignKey("queries.id", ondelete="CASCADE"), primary_key=True
    )
    term: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


class Subquery(Base):
    """A yes/no subquery that a query was decomposed into (structured reranking)."""

    __tablename__ = "subqueries"
    id: Mapped[int] = mapped_column(primary_key=True)
    query_id: Mapped[int] = mapped_column(ForeignKey("queries.id", ondelete="CASCADE"), index=True)
    position: Mapped[int] = mapped_column(Integer)
    text: Mapped[str] = mapped_column(Text)
    source: Mapped[str] = mapped_column(String(32), default="user")
    # The object the question asks about ("red circle"); "" for a whole-scene question.
    target: Mapped[str] = mapped_column(Text, default="", server_default="")


class SubqueryScore(Base):
    __tablename__ = "subquery_scores"
    subquery_id: Mapped[int] = mapped_column(
        ForeignKey("subqueries.id", ondelete="CASCADE"), primary_key=True
    )
    image_id: Mapped[int] = mapped_column(
        ForeignKey("images.id", ondelete="CASCADE"), primary_key=True
    )
    scorer: Mapped[str] = mapped_column(String(128), primary_key=True)
    p_yes: Mapped[float] = mapped_column(Float)


class RerankScore(Base):
    """A cached answer of a reranking scorer: keyed by what determines it (the photo's content,
    the question, the expert context and the scorer), not by catalog ids, so a photo that moves
    or a query asked again reuses it."""

    __tablename__ = "rerank_scores"
    content_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    question_key: Mapped[str] = mapped_column(String(64), primary_key=True)  # sha256 of the text
    context_key: Mapped[str] = mapped_column(String(64), primary_key=True)  # sha256 of context
    scorer: Mapped[str] = mapped_column(String(255), primary_key=True)
    p_yes: Mapped[float] = mapped_column(Float)
    answer: Mapped[str] = mapped_column(Text, default="")
    l_yes: Mapped[float | None] = mapped_column(Float, nullable=True)
    l_no: Mapped[float | None] = mapped_column(Float, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


class DetectionSource(Base):
    """One imported file of detector or classifier output (MegaDetector batch output,
    SpeciesNet predictions, a Camtrap DP package's observations), or the boxes a demo drew.
    Importing the same file again (same kind and path) replaces its detections (migration 0021).
    """

    __tablename__ = "detection_sources"
    __table_args__ = (UniqueConstraint("kind", "path", name="uq_detection_sources_kind_path"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    kind: Mapped[str] = mapped_column(String(32))  # megadetector, speciesnet, camtrap-dp, demo
    path: Mapped[str] = mapped_column(Text)  # the file as imported (absolute)
    sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # The detector's or classifier's name and version as the file gives them.
    model: Mapped[str | None] = mapped_column(Text, nullable=True)
    # The file's category map (MegaDetector: {"1": "animal", "2": "person", "3": "vehicle"}).
    categories: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    imported_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


class DetectionFrame(Base):
    """A photo a source looked at, with its highest detection confidence (NULL when it found
    nothing): a frame whose every source stayed below a threshold is "empty" at it, while a
    photo no source looked at is unknown, not empty. `failure` is the source's own word when it
    could not read the photo (migration 0021)."""

    __tablename__ = "detection_frames"
    __table_args__ = (Index("ix_detection_frames_image", "image_id"),)
    source_id: Mapped[int] = mapped_column(
        ForeignKey("detection_sources.id", ondelete="CASCADE"), primary_key=True
    )
    image_id: Mapped[int] = mapped_column(
        ForeignKey("images.id", ondelete="CASCADE"), primary_key=True
    )
    max_confidence: Mapped[float | None] = mapped_column(Float, nullable=True)
    failure: Mapped[str | None] = mapped_column(Text, nullable=True)


class Detection(Base):
    """One box (or one whole-photo classification, with no box) a source reported on a photo.

    The box is normalised to the photo, origin top left, as MegaDetector and Camtrap DP write
    it: x, y, width, height in 0..1. `category` is the detector's class (animal, person,
    vehicle); `label` and `label_probability` the classifier's (a taxon's name or a common
    word such as "blank"); `classification_method` Camtrap DP's (machine or human);
    `observation_id` the Camtrap DP observation it came from (migration 0021)."""

    __tablename__ = "detections"
    __table_args__ = (
        Index("ix_detections_image", "image_id"),
        Index("ix_detections_source", "source_id"),
        Index("ix_detections_category_confidence", "category", "confidence"),
    )
    id: Mapped[int] = mapped_column(primary_key=True)
    source_id: Mapped[int] = mapped_column(ForeignKey("detection_sources.id", ondelete="CASCADE"))
    image_id: Mapped[int] = mapped_column(ForeignKey("images.id", ondelete="CASCADE"))
    box_x: Mapped[float | None] = mapped_column(Float, nullable=True)
    box_y: Mapped[float | None] = mapped_column(Float, nullable=True)
    box_width: Mapped[float | None] = mapped_column(Float, nullable=True)
    box_height: Mapped[float | None] = mapped_column(Float, nullable=True)
    category: Mapped[str | None] = mapped_column(String(32), nullable=True)
    confidence: Mapped[float | None] = mapped_column(Float, nullable=True)
    label: Mapped[str | None] = mapped_column(Text, nullable=True)
    label_probability: Mapped[float | None] = mapped_column(Float, nullable=True)
    classification_method: Mapped[str | None] = mapped_column(String(16), nullable=True)
    observation_id: Mapped[str | None] = mapped_column(Text, nullable=True)
    count: Mapped[int | None] = mapped_column(Integer, nullable=True)


class CropEmbedding(Base):
    """A detection's crop (its box with a context margin) encoded by one model: the vectors box
    search ranks. Derived like `embeddings`, and gone with its detection (migration 0021)."""

    __tablename__ = "crop_embeddings"
    detection_id: Mapped[int] = mapped_column(
        ForeignKey("detections.id", ondelete="CASCADE"), primary_key=True
    )
    model_key: Mapped[str] = mapped_column(String(255), primary_key=True)
    vector: Mapped[bytes] = mapped_column(LargeBinary)  # float32, little-endian, L2-normalised
