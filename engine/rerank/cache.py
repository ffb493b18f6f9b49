"""The score cache of structured reranking, in the catalog (table `rerank_scores`).

An answer is keyed by what determines it: the photo's content hash, the question (its text and
the object it asks about), the expert context and the scorer's identity. Each batch is
committed as it is scored, so a cancelled run keeps everything answered before the cancel.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

from sqlalchemy import select
from sqlalchemy.dialects import postgresql, sqlite

from engine.catalog.library import Library
from engine.catalog.models import Collection, Image, RerankScore
from engine.rerank.base import Answer, Photo, Question

# SQLite caps the number of bound parameters of one statement.
_CHUNK = 500


def question_key(question: Question) -> str:
    """The cache key of a question: its text, plus its target when it has one."""
    text = question.text.strip()
    raw = f"{text}\x1f{question.target}" if question.target else text
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()


def context_key(context: str) -> str:
    """The cache key of an expert context paragraph ("" for none)."""
    text = context.strip()
    return hashlib.sha256(text.encode("utf-8")).hexdigest() if text else ""


class ScoreCache:
    """Answers kept in the library's catalog."""

    def __init__(self, library: Library) -> None:
        self.library = library

    def get(
        self, photos: Sequence[Photo], question: Question, context: str, scorer: str
    ) -> dict[str, Answer]:
        """Cached answers by content hash, for those of `photos` that have one."""
        hashes = sorted({p.content_hash for p in photos if p.content_hash})
        q_key, c_key = question_key(question), context_key(context)
        found: dict[str, Answer] = {}
        with self.library.catalog.session() as s:
            for start in range(0, len(hashes), _CHUNK):
                stmt = select(RerankScore).where(
                    RerankScore.question_key == q_key,
                    RerankScore.context_key == c_key,
                    RerankScore.scorer == scorer,
                    RerankScore.content_hash.in_(hashes[start : start + _CHUNK]),
                )
                for row in s.scalars(stmt):
                    found[row.content_hash] = Answer(row.p_yes, row.answer, row.l_yes, row.l_no)
        return found

    def put(
        self,
        answers: Iterable[tuple[Photo, Answer]],
        question: Question,
        context: str,
        scorer: str,
    ) -> int:
        """Keep `answers` (one transaction, committed on return); returns how many."""
        q_key, c_key = question_key(question), context_key(context)
        rows = [
            {
                "content_hash": photo.content_hash,
                "question_key": q_key,
                "context_key": c_key,
                "scorer": scorer,
                "p_yes": float(answer.p_yes),
                "answer": answer.answer,
                "l_yes": answer.l_yes,
                "l_no": answer.l_no,
            }
            for photo, answer in answers
            if photo.content_hash  # a photo never hashed cannot be found again
        ]
        if not rows:
            return 0
        # The upsert is each database's own construct (the same API on SQLite and PostgreSQL).
        server = self.library.catalog.engine.dialect.name == "postgresql"
        insert = postgresql.insert if server else sqlite.insert
        with self.library.catalog.session() as s:
            for start in range(0, len(rows), _CHUNK // 10):
                stmt = insert(RerankScore).values(rows[start : start + _CHUNK // 10])
                stmt = stmt.on_conflict_do_update(
                    index_elements=["content_hash", "question_key", "context_key", "scorer"],
                    set_={
                        "p_yes": stmt.excluded.p_yes,
                        "answer": stmt.excluded.answer,
                        "l_yes": stmt.excluded.l_yes,
                        "l_no": stmt.excluded.l_no,
                    },
                )
                s.execute(stmt)
        return len(rows)

    def count(self, scorer: str | None = None) -> int:
        """How many answers are kept (for one scorer, or all)."""
        from sqlalchemy import func

        with self.library.catalog.session() as s:
            stmt = select(func.count()).select_from(RerankScore)
            if scorer is not None:
                stmt = stmt.where(RerankScore.scorer == scorer)
            return int(s.scalar(stmt) or 0)


def photos_for(library: Library, image_ids: Sequence[int]) -> dict[int, Photo]:
    """The photos (path on disk, content hash) of catalog ids; ids not in the catalog are absent."""
    ids = [int(i) for i in image_ids]
    out: dict[int, Photo] = {}
    with library.catalog.session() as s:
        for start in range(0, len(ids), _CHUNK):
            stmt = (
                select(Image.id, Collection.root, Image.rel_path, Image.content_hash)
                .join(Collection, Collection.id == Image.collection_id)
                .where(Image.id.in_(ids[start : start + _CHUNK]))
            )
            for image_id, root, rel, content_hash in s.execute(stmt):
                path = library.photo_root(root) / rel
                out[int(image_id)] = Photo(int(image_id), path, content_hash or "")
    return out
