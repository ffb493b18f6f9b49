"""Filter kinds of what a photo's record says: taxon, licence, collection, keyword, camera
deployment."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from engine.catalog import Image, Taxon
from engine.errors import BadInputError
from engine.indexing.keywords import clean_keyword, keyword_condition
from engine.licences import family_label, licence_family
from engine.search.filter_kinds.base import (
    STATUS_OK,
    CliOption,
    FilterKind,
    MenuEntry,
    Terms,
    as_sequence,
    as_text,
    fail,
    fold,
    in_ids,
    like_escaped,
    named_ids,
    unique_ids,
)

# Longer taxon texts are matched in Python: SQLite refuses LIKE patterns over 50,000 bytes.
SQL_NEEDLE = 10_000
# The higher ranks of `taxa`, broadest first, with the name each has in suggestions.
RANKS: tuple[tuple[str, Any], ...] = (
    ("kingdom", Taxon.kingdom),
    ("phylum", Taxon.phylum),
    ("class", Taxon.class_),
    ("order", Taxon.order),
    ("family", Taxon.family),
    ("genus", Taxon.genus),
)


# -- licences ---------------------------------------------------------------------------------


def normalise_license(text: str | None) -> str | None:
    """A licence as the filter's code (`engine.licences.licence_family`): "CC-BY-NC 4.0",
    "cc_by_nc", "Attribution-NonCommercial License" and
    "http://creativecommons.org/licenses/by-nc/4.0/" give "cc-by-nc"; CC0 gives "cc0" and the
    Public Domain Mark "pdm"; anything else its lowercased, stripped text (None for no text)."""
    return licence_family(text)


def license_label(code: str) -> str:
    """How a licence code reads on screen: "cc-by-nc" -> "CC BY-NC", "cc0" -> "CC0"."""
    return family_label(code)


def licence_code(text: str) -> str:
    """A licence in any usual spelling, as its code ("CC BY-NC" -> cc-by-nc)."""
    code = normalise_license(text)
    if not code:
        raise BadInputError("expected a licence such as cc-by, cc-by-nc or cc0")
    return code


def licence_values(session: Session, codes: Sequence[str]) -> list[str]:
    """The catalog's licence texts whose normalised code is one of `codes` (the catalog holds
    few distinct texts, so they are normalised here and matched in SQL by their exact text)."""
    wanted = set(codes)
    stmt = select(Image.license).where(STATUS_OK, Image.license.is_not(None)).distinct()
    texts = session.scalars(stmt)
    return [t for t in texts if t is not None and normalise_license(t) in wanted]


# -- taxa -------------------------------------------------------------------------------------


def taxon_ids(session: Session, text: str) -> list[int]:
    """The ids of the taxa a taxon filter's text names.

    Exact first: the taxa with a scientific name at some rank (kingdom to species) or a common
    name equal to the text, ignoring case. Only when no name is equal does it fall back to the
    names containing the text. Why: a substring match would make "Anura" (frogs) also take
    "Anurans-something", and "Rana" the water bug "Ranatra"; yet a part of a name ("milkweed"
    for "common milkweed") should still find something when it names nothing exactly.
    """
    needle = fold(text)
    if not needle:
        return []
    columns = (Taxon.name, Taxon.common_name, *(column for _, column in RANKS))
    if needle.isascii() and len(needle) <= SQL_NEEDLE:
        # In SQL (the taxa table can hold tens of thousands of rows): lower() folds ASCII,
        # which is all an ASCII needle can equal. LIKE's wildcards in the text are escaped.
        exact = select(Taxon.id).where(or_(*(func.lower(c) == needle for c in columns)))
        found = list(session.scalars(exact))
        if found:
            return found
        pattern = like_escaped(needle)
        part = select(Taxon.id).where(or_(*(func.lower(c).like(pattern, "\\") for c in columns)))
        return list(session.scalars(part))
    # Other scripts and accents: Python's casefold, over every name.
    rows = session.execute(select(Taxon.id, *columns)).all()
    folded = [(row[0], [fold(v) for v in row[1:] if v]) for row in rows]
    exact_ids = [taxon_id for taxon_id, names in folded if needle in names]
    if exact_ids:
        return exact_ids
    return [taxon_id for taxon_id, names in folded if any(needle in name for name in names)]


# -- the kinds --------------------------------------------------------------------------------


def _check_taxon(filters: Any) -> dict[str, Any]:
    return {"taxon": as_text("taxon", filters.taxon)}


def _taxon_terms(session: Session, filters: Any) -> Terms:
    if not filters.taxon:
        return []
    taxa = taxon_ids(session, filters.taxon)
    return [in_ids(Image.taxon_id, taxa)] if taxa else None


def _check_license(filters: Any) -> dict[str, Any]:
    text = filters.license
    if text is not None and not isinstance(text, str):
        raise fail("license", f"expected text, got {text!r:.60}")
    return {"license": text.strip() if text and text.strip() else None}


def _license_terms(_session: Session, filters: Any) -> Terms:
    if not filters.license:
        return []
    return [func.lower(Image.license).like(like_escaped(filters.license), escape="\\")]


def _check_licenses(filters: Any) -> dict[str, Any]:
    codes: list[str] = []
    for code in as_sequence("licenses", filters.licenses):
        if not isinstance(code, str):
            raise fail("licenses", f"expected licence codes, got {code!r:.60}")
        normal = normalise_license(code)
        if normal and normal not in codes:
            codes.append(normal)
    return {"licenses": tuple(codes)}


def _licenses_terms(session: Session, filters: Any) -> Terms:
    if not filters.licenses:
        return []
    texts = licence_values(session, filters.licenses)
    return [Image.license.in_(texts)] if texts else None


def _check_keyword(filters: Any) -> dict[str, Any]:
    keyword = filters.keyword
    if keyword is not None and not isinstance(keyword, str):
        raise fail("keyword", f"expected text, got {keyword!r:.60}")
    cleaned = clean_keyword(keyword) if keyword else None
    if cleaned is None and keyword and keyword.strip(" |"):
        raise fail("keyword", f"not a keyword (too long?): {keyword!r:.60}")
    return {"keyword": cleaned}


TAXON = FilterKind(
    "taxon",
    "records",
    ("taxon",),
    check=_check_taxon,
    condition=_taxon_terms,
    chip=lambda f, _names: f.taxon or None,
    cli=(
        CliOption(
            "--taxon",
            "taxon",
            "only this taxon: a scientific name at any rank (kingdom to species) or a common "
            "name, any case; a part of a name when no name is equal",
            1,
        ),
    ),
    menu=MenuEntry("Taxon", "taxon", 1),
)
LICENSE = FilterKind(
    "license",
    "records",
    ("license",),
    check=_check_license,
    condition=_license_terms,
    chip=lambda f, _names: f"licence contains “{f.license}”" if f.license else None,
)
LICENSES = FilterKind(
    "licenses",
    "records",
    ("licenses",),
    check=_check_licenses,
    condition=_licenses_terms,
    chip=lambda f, _names: " or ".join(license_label(c) for c in f.licenses) or None,
    cli=(
        CliOption(
            "--license",
            "licenses",
            "only photos under this licence (cc0, cc-by, cc-by-nc, ...; any spelling); give it "
            "again to allow several",
            7,
            metavar="CODE",
            parse=licence_code,
            many=True,
        ),
    ),
    menu=MenuEntry("Licence", "licenses", 7),
)
COLLECTIONS = FilterKind(
    "collection_ids",
    "records",
    ("collection_ids",),
    check=lambda f: {"collection_ids": unique_ids("collection_ids", f.collection_ids)},
    condition=lambda _s, f: (
        [in_ids(Image.collection_id, f.collection_ids)] if f.collection_ids else []
    ),
    chip=lambda f, names: (
        named_ids("collection", f.collection_ids, names.collections) if f.collection_ids else None
    ),
    cli=(
        CliOption(
            "--collection",
            "collection_ids",
            "only this collection (its name, folder or id); give it again for several",
            11,
            metavar="NAME_OR_ID",
            many=True,
            by_name=True,
        ),
    ),
    menu=MenuEntry("Collection", "collections", 8),
)
KEYWORD = FilterKind(
    "keyword",
    "records",
    ("keyword",),
    check=_check_keyword,
    condition=lambda _s, f: [keyword_condition(f.keyword)] if f.keyword else [],
    chip=lambda f, _names: f"keyword “{f.keyword}”" if f.keyword else None,
    cli=(
        CliOption(
            "--keyword",
            "keyword",
            "only photos with this keyword (from XMP sidecars or embedded XMP/IPTC; any case; "
            "a whole keyword or a level of a hierarchical one: juvenile, lifeStage|juvenile)",
            8,
            metavar="K",
        ),
    ),
    menu=MenuEntry("Keyword…", "keyword", 5),
)
DEPLOYMENTS = FilterKind(
    "deployment_ids",
    "records",
    ("deployment_ids",),
    check=lambda f: {"deployment_ids": unique_ids("deployment_ids", f.deployment_ids)},
    condition=lambda _s, f: (
        [in_ids(Image.deployment_id, f.deployment_ids)] if f.deployment_ids else []
    ),
    chip=lambda f, names: (
        named_ids("deployment", f.deployment_ids, names.deployments) if f.deployment_ids else None
    ),
    cli=(
        CliOption(
            "--deployment",
            "deployment_ids",
            "only this camera deployment ('quadrat deployments' lists them); again for several",
            10,
            metavar="ID",
            parse=int,
            many=True,
        ),
    ),
    menu=MenuEntry("Deployment", "deployments", 9),
)
