"""The words of the records: full-text search over names and notes, and taxa named in a query.

The catalog's table `record_text` holds, per searchable photo, its scientific names at every
rank, its common name and the observer's notes, kept current by triggers: on SQLite an FTS5
table (migration 0005), on PostgreSQL a tsvector with a GIN index (migration 0010), ranked by
the same bm25. This module turns any text a user types into a safe MATCH expression (`fts_query`),
ranks photos by bm25 (`text_ranked`), says which of the query's words a photo's record holds
(`matched_words`), and finds the catalog's taxa named in a query (`taxa_in_query`:
"mongoose standing upright" names the mongooses and leaves "standing upright" to look for).
"""

from __future__ import annotations

import json
import re
import threading
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any

import numpy as np
from sqlalchemy import TextClause
from sqlalchemy import text as sql

from engine.catalog import Catalog

RECORD_TEXT = "record_text"
"""The FTS5 table; its rowid is the image id."""
# "keywords": the photo's XMP/IPTC keywords (migration 0015).
RECORD_COLUMNS: tuple[str, ...] = ("names", "common", "notes", "keywords")

# A query longer than this many distinct words adds nothing a person meant, and every OR'ed
# word costs a posting-list scan.
MAX_QUERY_WORDS = 32

# Words as FTS5's unicode61 tokenizer cuts them: letters and digits, anything else separates
# (underscore too).
_WORD = re.compile(r"[^\W_]+")

# Ranks a query may name, broadest first; "species" is the taxon's own name.
RANKS: tuple[str, ...] = ("kingdom", "phylum", "class", "order", "family", "genus", "species")
_RANK_SQL = {
    "kingdom": "kingdom",
    "phylum": "phylum",
    "class": '"class"',
    "order": '"order"',
    "family": "family",
    "genus": "genus",
    "species": "name",
}
# A common name's last word ("mongoose" of "Banded Mongoose") names a group only when every
# taxon so called shares this rank or a deeper one: "bee" → an order, "flower" → nothing.
_HEAD_NOUN_BROADEST = "order"
_ARTICLES = frozenset({"a", "an", "the"})


def is_record_text_table(name: str) -> bool:
    """Whether a table is the FTS5 index or one of its shadow tables (for schema comparisons,
    which see them as tables the models do not describe)."""
    return name == RECORD_TEXT or name.startswith(RECORD_TEXT + "_")


# -- words -----------------------------------------------------------------------------------


@lru_cache(maxsize=65_536)
def fold(word: str) -> str:
    """A word as the index compares it: case-folded, without diacritics ("Crème" → "creme")."""
    decomposed = unicodedata.normalize("NFKD", word.casefold())
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch))


def words(text: str) -> list[str]:
    """The folded words of `text`, in order (repeats kept)."""
    return [fold(w) for w in _WORD.findall(unicodedata.normalize("NFC", text or ""))]


def _distinct(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(item for item in items if item))


# English function words: in an OR query each would favour every record that happens to use
# it ("a", "on"), whatever the query is about. Left out of the record-words ranking only.
STOPWORDS = frozenset(
    [
        "a",
        "an",
        "the",
        "and",
        "or",
        "not",
        "of",
        "on",
        "in",
        "at",
        "to",
        "by",
        "for",
        "from",
        "with",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "it",
        "its",
        "this",
        "that",
        "these",
        "those",
        "as",
    ]
)


def search_words(text: str) -> list[str]:
    """The words of `text` the record-words ranking looks for: distinct, folded, function
    words left out, each followed by its simple singulars ("circles" → "circle"), at most
    MAX_QUERY_WORDS."""
    out: list[str] = []
    for word in _distinct(words(text)):
        if word not in STOPWORDS:
            out.extend(_singulars(word))
    return _distinct(out)[:MAX_QUERY_WORDS]


def fts_query(text: str, *, exclude: str = "") -> str | None:
    """A safe FTS5 MATCH expression for any user text: its words (`search_words`), each
    quoted, so operators, column filters, prefixes and parentheses are plain words, joined by
    OR; the words of `exclude` are subtracted with NOT. None when `text` has no word to look
    for.

    >>> fts_query('red "circles" OR NEAR(x*)')
    '"red" OR "circles" OR "circle" OR "near" OR "x"'
    """
    wanted = search_words(text)
    if not wanted:
        return None
    expression = " OR ".join(_quoted(w) for w in wanted)
    unwanted = [w for w in search_words(exclude) if w not in wanted]
    if unwanted:
        expression = f"({expression}) NOT ({' OR '.join(_quoted(w) for w in unwanted)})"
    return expression


def _quoted(word: str) -> str:
    return '"' + word.replace('"', '""') + '"'


# -- ranking ---------------------------------------------------------------------------------


def has_record_text(catalog: Catalog) -> bool:
    """Whether the catalog has the text index: a SQLite catalog at schema 0005 or later (FTS5),
    a PostgreSQL one at 0010 or later (a tsvector table)."""
    dialect = catalog.engine.dialect.name
    if dialect == "postgresql":
        statement = sql("SELECT to_regclass(:n) IS NOT NULL")
    elif dialect == "sqlite":
        statement = sql("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = :n")
    else:
        return False
    with catalog.session() as s:
        return bool(s.execute(statement, {"n": RECORD_TEXT}).scalar())


def _postgres(catalog: Catalog) -> bool:
    return catalog.engine.dialect.name == "postgresql"


def _id_rows(catalog: Catalog) -> str:
    """A subquery of the ids bound as `:ids` (`_ids_json`): one bound parameter however many
    ids, on either database."""
    if _postgres(catalog):
        return "SELECT CAST(value AS BIGINT) FROM json_array_elements_text(CAST(:ids AS json))"
    return "SELECT value FROM json_each(:ids)"


def _ids_json(ids: Sequence[int] | np.ndarray) -> str:
    """Ids as a JSON array, for `_id_rows`: one bound parameter however many ids."""
    return json.dumps(np.asarray(ids, dtype=np.int64).ravel().tolist())


def text_ranked(
    catalog: Catalog,
    text: str,
    limit: int,
    allowed_ids: Sequence[int] | np.ndarray | None = None,
    *,
    exclude: str = "",
) -> list[tuple[int, float]]:
    """Photos whose record holds words of `text` (and none of `exclude`), by bm25, best first:
    (image id, score) with score = -bm25 (higher is better), ties by smaller id. Within
    `allowed_ids` when given. Empty when the text has no word or the catalog no text index.
    SQLite and PostgreSQL give the same scores (FTS5's bm25, computed on PostgreSQL in SQL)."""
    expression = fts_query(text, exclude=exclude)
    if expression is None or limit < 1 or not has_record_text(catalog):
        return []
    if allowed_ids is not None and len(allowed_ids) == 0:
        return []
    if _postgres(catalog):
        return _text_ranked_postgres(catalog, text, limit, allowed_ids, exclude)
    params: dict[str, Any] = {"q": expression, "limit": int(limit)}
    within = ""
    if allowed_ids is not None:
        # "+rowid": a plain filter on the matches. Offered to FTS5 as a rowid constraint, the
        # IN list made it run the whole MATCH once per allowed id (0.6 s for 5,000 ids).
        within = f" AND +rowid IN ({_id_rows(catalog)})"
        params["ids"] = _ids_json(allowed_ids)
    statement = sql(
        f"SELECT rowid, bm25({RECORD_TEXT}) AS score FROM {RECORD_TEXT} "
        f"WHERE {RECORD_TEXT} MATCH :q{within} ORDER BY score, rowid LIMIT :limit"
    )
    with catalog.session() as s:
        rows = s.execute(statement, params).all()
    return [(int(rowid), -float(score)) for rowid, score in rows]


# FTS5's bm25 constants (k1, b) and its floor for a word in more than half the records.
_BM25_K1 = 1.2
_BM25_B = 0.75
_BM25_MIN_IDF = 1e-6


def _tsquery(wanted: Sequence[str]) -> str:
    """A tsquery of exact lexemes, any of them ('a' | 'b'): quoted, so no word is an
    operator; cast, not parsed, so nothing is normalised again."""
    return " | ".join("'" + w.replace("\\", "\\\\").replace("'", "''") + "'" for w in wanted)


def _bm25_postgres(text: str, exclude: str) -> tuple[str, dict[str, Any]]:
    """The SQL (up to its SELECT) and parameters of FTS5's bm25 on PostgreSQL: a `scored`
    CTE of (image_id, score) for every record holding a wanted word. The GIN index finds the
    records; bm25 is FTS5's (per word: IDF over every record, FTS5's floor, term frequency
    and document length against the mean), so both catalogs rank alike."""
    wanted = search_words(text)
    params: dict[str, Any] = {
        "any": _tsquery(wanted),
        "words": list(wanted),
        "k1": _BM25_K1,
        "b": _BM25_B,
        "floor": _BM25_MIN_IDF,
    }
    unwanted = [w for w in search_words(exclude) if w not in wanted]
    if unwanted:
        params["none"] = _tsquery(unwanted)
    statement = (
        "WITH hits AS ("
        " SELECT r.image_id, r.doclen, u.lexeme, cardinality(u.positions) AS tf"
        f" FROM {RECORD_TEXT} r, unnest(r.document) u"
        " WHERE r.document @@ CAST(:any AS tsquery) AND u.lexeme = ANY(CAST(:words AS text[]))),"
        " df AS (SELECT lexeme, count(*) AS n FROM hits GROUP BY lexeme),"
        f" totals AS (SELECT count(*) AS n, avg(doclen) AS avgdl FROM {RECORD_TEXT}),"
        " scored AS ("
        "  SELECT h.image_id, sum(greatest(ln((t.n - df.n + 0.5) / (df.n + 0.5)), :floor)"
        "   * h.tf * (:k1 + 1) / (h.tf + :k1 * (1 - :b + :b * h.doclen / t.avgdl))) AS score"
        "  FROM hits h JOIN df ON df.lexeme = h.lexeme CROSS JOIN totals t"
        "  GROUP BY h.image_id)"
    )
    return statement, params


def _excluded(params: Mapping[str, Any]) -> str:
    """The condition on `r` (the record) that leaves out records holding an unwanted word.
    Document frequencies count every record (as FTS5's do), so exclusions and allowed ids
    apply to the scored records only."""
    return " AND NOT r.document @@ CAST(:none AS tsquery)" if "none" in params else ""


def bm25_scored(catalog: Catalog, text: str, exclude: str = "") -> TextClause | None:
    """`text_ranked`'s scores on a PostgreSQL catalog as a statement of (image_id, score) for
    every record holding words of `text` and none of `exclude`, unordered: for a query that
    ranks them beside something else (the server's vector search, `engine.catalog.pgvector`).
    None where `text_ranked` would be empty; round the scores with `bm25_score`."""
    if (
        not _postgres(catalog)
        or fts_query(text, exclude=exclude) is None
        or not has_record_text(catalog)
    ):
        return None
    head, params = _bm25_postgres(text, exclude)
    statement = sql(
        f"{head} SELECT s.image_id, s.score FROM scored s"
        f" JOIN {RECORD_TEXT} r ON r.image_id = s.image_id WHERE TRUE{_excluded(params)}"
    )
    return statement.bindparams(**params)


def bm25_score(score: float) -> float:
    """A bm25 score as `text_ranked` gives it. 12 digits: records with the same words must
    tie exactly (the fusion shares their rank), whatever order the server summed their words
    in."""
    return float(f"{score:.12g}")


def _text_ranked_postgres(
    catalog: Catalog,
    text: str,
    limit: int,
    allowed_ids: Sequence[int] | np.ndarray | None,
    exclude: str,
) -> list[tuple[int, float]]:
    """`text_ranked` on PostgreSQL (`_bm25_postgres`)."""
    head, params = _bm25_postgres(text, exclude)
    params["limit"] = int(limit)
    keep = _excluded(params)
    if allowed_ids is not None:
        keep += f" AND r.image_id IN ({_id_rows(catalog)})"
        params["ids"] = _ids_json(allowed_ids)
    statement = sql(
        f"{head} SELECT s.image_id, s.score FROM scored s"
        f" JOIN {RECORD_TEXT} r ON r.image_id = s.image_id WHERE TRUE{keep}"
        " ORDER BY s.score DESC, s.image_id LIMIT :limit"
    )
    with catalog.session() as s:
        rows = s.execute(statement, params).all()
    return [(int(image_id), bm25_score(score)) for image_id, score in rows]


def matched_words(
    catalog: Catalog, ids: Sequence[int], text: str
) -> dict[int, dict[str, list[str]]]:
    """For each photo of `ids` whose record holds words of `text`: column ("names", "common",
    "notes") -> those words (folded, in the query's order). Photos matching nothing are left
    out."""
    wanted = search_words(text)
    if not wanted or not ids or not has_record_text(catalog):
        return {}
    key = "image_id" if _postgres(catalog) else "rowid"
    statement = sql(
        f"SELECT {key}, {', '.join(RECORD_COLUMNS)} FROM {RECORD_TEXT} "
        f"WHERE {key} IN ({_id_rows(catalog)})"
    )
    with catalog.session() as s:
        rows = s.execute(statement, {"ids": _ids_json(ids)}).all()
    out: dict[int, dict[str, list[str]]] = {}
    for rowid, *values in rows:
        found: dict[str, list[str]] = {}
        for column, value in zip(RECORD_COLUMNS, values, strict=True):
            present = set(words(value or ""))
            hits = [w for w in wanted if w in present]
            if hits:
                found[column] = hits
        if found:
            out[int(rowid)] = found
    return out


# -- taxa named in a query -------------------------------------------------------------------


@dataclass(frozen=True)
class TaxonMention:
    """A catalog taxon named in a query: `name` at `rank` ("Herpestidae", "family"), how the
    query named it (`matched`, characters `start`:`end` of the query; `common_name` when by a
    common name), the status-ok photos under it (`count`), and the query without those words
    (`rest`: what is left to look for)."""

    name: str
    rank: str
    matched: str
    start: int
    end: int
    count: int
    rest: str
    common_name: str | None = None

    @property
    def label(self) -> str:
        """E.g. "Herpestidae (mongoose)" or "Circulus ruber (red circle)"."""
        return f"{self.name} ({self.common_name})" if self.common_name else self.name

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TaxonMention:
        fields = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        return cls(**fields)


@dataclass(frozen=True)
class _Named:
    """What a run of folded words names: a taxon rank and value (as the catalog spells it)."""

    rank: str
    value: str
    common_name: str | None
    exact: bool  # a whole name (True) or a common name's last word (False)


@dataclass(frozen=True)
class _TaxonRow:
    id: int
    values: tuple[str | None, ...]  # by RANKS
    common_name: str | None


class _Vocabulary:
    """Every name of the catalog's taxa, as tuples of folded words -> what they name."""

    def __init__(self, rows: Sequence[_TaxonRow]) -> None:
        self.rows = rows
        self.names: dict[tuple[str, ...], list[_Named]] = {}
        by_common: dict[tuple[str, ...], list[_TaxonRow]] = {}
        by_head: dict[str, list[_TaxonRow]] = {}
        for row in rows:
            for rank, value in zip(RANKS, row.values, strict=True):
                if value:
                    key = tuple(words(value))
                    if key:
                        common = row.common_name if rank == "species" else None
                        self._add(key, _Named(rank, value, common, True))
            if row.common_name:
                key = tuple(words(row.common_name))
                if key:
                    by_common.setdefault(key, []).append(row)
                    if len(key) > 1:
                        by_head.setdefault(key[-1], []).append(row)
        for key, taxa in by_common.items():
            found = _common_rank(taxa)
            if found is not None:
                rank, value = found
                self._add(key, _Named(rank, value, taxa[0].common_name, True))
        for head, taxa in by_head.items():
            if (head,) in self.names:
                continue  # a whole name of its own wins
            found = _common_rank(taxa, broadest=_HEAD_NOUN_BROADEST)
            if found is not None:
                self._add((head,), _Named(found[0], found[1], head, False))
        self.longest = max((len(k) for k in self.names), default=0)

    def _add(self, key: tuple[str, ...], named: _Named) -> None:
        entries = self.names.setdefault(key, [])
        if all((e.rank, fold(e.value)) != (named.rank, fold(named.value)) for e in entries):
            entries.append(named)

    def taxon_ids(self, rank: str, value: str) -> list[int]:
        """The taxa whose `rank` is `value` (case and diacritics ignored)."""
        column = RANKS.index(rank)
        wanted = fold(value)
        return [r.id for r in self.rows if r.values[column] and fold(r.values[column]) == wanted]


def _common_rank(taxa: Sequence[_TaxonRow], broadest: str = "kingdom") -> tuple[str, str] | None:
    """The deepest rank all `taxa` share, with its value, not broader than `broadest`."""
    stop = RANKS.index(broadest)
    for index in range(len(RANKS) - 1, stop - 1, -1):
        values = {r.values[index] for r in taxa}
        if len(values) == 1 and (value := values.pop()):
            return RANKS[index], value
    return None


_vocabulary_lock = threading.Lock()
_vocabularies: dict[tuple[str, int], _Vocabulary] = {}


def _vocabulary(catalog: Catalog) -> _Vocabulary:
    """The catalog's names, rebuilt only when the taxa rows changed (a few thousand rows are
    read each time; folding and indexing them is what is kept)."""
    statement = sql(
        'SELECT id, kingdom, phylum, "class", "order", family, genus, name, common_name '
        "FROM taxa ORDER BY id"
    )
    with catalog.session() as s:
        rows = tuple(tuple(r) for r in s.execute(statement))
    key = (str(catalog.engine.url), hash(rows))
    with _vocabulary_lock:
        found = _vocabularies.get(key)
        if found is None:
            taxa = [_TaxonRow(int(r[0]), tuple(r[1:8]), r[8]) for r in rows]
            found = _Vocabulary(taxa)
            _vocabularies.clear()  # one catalog at a time is the rule; never grow
            _vocabularies[key] = found
        return found


def _spans(text: str) -> list[tuple[str, int, int]]:
    """The query's folded words with their character spans."""
    return [(fold(m.group()), m.start(), m.end()) for m in _WORD.finditer(text)]


def _singulars(word: str) -> list[str]:
    """The word and its simple English singulars: "circles" → "circle", "boxes" → "box",
    "butterflies" → "butterfly". A guess that is no word ("horses" → "hors") matches nothing."""
    out = [word]
    if len(word) > 4 and word.endswith("ies"):
        out.append(word[:-3] + "y")
    elif len(word) > 3 and word.endswith("es") and word[:-2].endswith(("s", "x", "z", "ch", "sh")):
        out.append(word[:-2])
        if word[:-2].endswith("s"):
            out.append(word[:-1])
    elif len(word) > 2 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        out.append(word[:-1])
    return out


def _rest(text: str, start: int, end: int) -> str:
    """`text` without characters start:end (and an article right before them)."""
    before = text[:start].rstrip()
    last = before.split()[-1:] if before else []
    if last and last[0].casefold() in _ARTICLES:
        before = before[: len(before) - len(last[0])]
    return " ".join((before + " " + text[end:]).split())


def _count_photos(catalog: Catalog, taxon_ids: Sequence[int]) -> int:
    if not taxon_ids:
        return 0
    statement = sql(
        f"SELECT count(*) FROM images WHERE status = 'ok' AND taxon_id IN ({_id_rows(catalog)})"
    )
    with catalog.session() as s:
        return int(s.execute(statement, {"ids": json.dumps(list(taxon_ids))}).scalar() or 0)


def taxa_in_query(catalog: Catalog, text: str) -> list[TaxonMention]:
    """The catalog's taxa named in `text`, longest mention (in words) first, then the earliest, none
    overlapping another: scientific names at any rank and common names, whole words, case and
    diacritics ignored, a simple plural ("s", "es") on the last word accepted. A common name's
    last word names the group of taxa so called when they share an order or a deeper rank
    ("mongoose" → Herpestidae). Taxa without a searchable photo are not named."""
    text = text or ""
    spans = _spans(text)
    if not spans:
        return []
    vocabulary = _vocabulary(catalog)
    found: list[tuple[int, int, _Named]] = []  # (first word, last word + 1, what it names)
    for first in range(len(spans)):
        for size in range(min(vocabulary.longest, len(spans) - first), 0, -1):
            head = tuple(w for w, _, _ in spans[first : first + size - 1])
            for last in _singulars(spans[first + size - 1][0]):
                for named in vocabulary.names.get((*head, last), ()):
                    found.append((first, first + size, named))
    candidates: list[TaxonMention] = []
    counted: dict[tuple[str, str], int] = {}
    for first, stop, named in found:
        key = (named.rank, fold(named.value))
        if key not in counted:
            counted[key] = _count_photos(catalog, vocabulary.taxon_ids(named.rank, named.value))
        count = counted[key]
        if count == 0:
            continue
        start, end = spans[first][1], spans[stop - 1][2]
        candidates.append(
            TaxonMention(
                name=named.value,
                rank=named.rank,
                matched=text[start:end],
                start=start,
                end=end,
                count=count,
                rest=_rest(text, start, end),
                common_name=named.common_name,
            )
        )
    # Longest (in words) first, then the earliest (the subject of the sentence, usually the
    # taxon the observation is filed under); at the same words, the narrower rank first.
    candidates.sort(key=lambda m: (-len(_WORD.findall(m.matched)), m.start, -RANKS.index(m.rank)))
    chosen: list[TaxonMention] = []
    for mention in candidates:
        if all(mention.end <= c.start or mention.start >= c.end for c in chosen):
            chosen.append(mention)
    return chosen


def mention_taxon_ids(catalog: Catalog, mention: TaxonMention) -> list[int]:
    """The taxa a mention covers: every taxon whose `mention.rank` is `mention.name`."""
    return _vocabulary(catalog).taxon_ids(mention.rank, mention.name)


def mention_image_ids(catalog: Catalog, mention: TaxonMention) -> np.ndarray:
    """Sorted ids of the status-ok photos under a mentioned taxon."""
    taxa = mention_taxon_ids(catalog, mention)
    if not taxa:
        return np.zeros(0, dtype=np.int64)
    statement = sql(
        "SELECT id FROM images WHERE status = 'ok' "
        f"AND taxon_id IN ({_id_rows(catalog)}) ORDER BY id"
    )
    with catalog.session() as s:
        ids = s.scalars(statement, {"ids": json.dumps(taxa)}).all()
    return np.asarray(ids, dtype=np.int64)
