"""Positive and negative terms in a query, as rclip has them: "red circle -square +yellow".

A word or a quoted phrase with a leading "+" is pulled towards, one with a leading "-" pushed
away from; the rest of the words are the base query. The query vector is then
normalise(v(base) + Σ v(plus) − Σ v(minus)), each v a unit vector first (`combine_vectors`).
Only a sign at the start of a word counts: "red-eyed" and "blue-green" stay words, as do a lone
"-" or "+" and a sign before a number ("-5 degrees"), so ordinary text never turns into terms
by accident.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

# A sign at the start of the text or after white space, then a quoted phrase or a word.
_TERM = re.compile(r'(?:(?<=\s)|^)([+-])(?:"([^"]*)"|(\S+))')


@dataclass(frozen=True)
class QueryTerms:
    """A query split into its base words and its + and - terms (each stripped, none empty)."""

    base: str
    plus: tuple[str, ...] = ()
    minus: tuple[str, ...] = ()

    @property
    def has_terms(self) -> bool:
        return bool(self.plus or self.minus)

    def to_json(self) -> dict[str, object]:
        return {"base": self.base, "plus": list(self.plus), "minus": list(self.minus)}


def _is_term(body: str) -> bool:
    """A term must say something: a letter somewhere (not "-5", not "--")."""
    return any(ch.isalpha() for ch in body)


def parse_terms(text: str) -> QueryTerms:
    """Split `text` into base words, + terms and - terms.

    >>> parse_terms('red circle -square +yellow -"blue square"')
    QueryTerms(base='red circle', plus=('yellow',), minus=('square', 'blue square'))
    """
    text = text or ""
    plus: list[str] = []
    minus: list[str] = []
    base_parts: list[str] = []
    position = 0
    for match in _TERM.finditer(text):
        sign, phrase, word = match.group(1), match.group(2), match.group(3)
        raw = phrase if phrase is not None else word.strip("\"'")  # an unclosed quote
        body = " ".join(raw.split())
        if not _is_term(body):
            continue  # left in the base text as written
        base_parts.append(text[position : match.start()])
        position = match.end()
        (plus if sign == "+" else minus).append(body)
    base_parts.append(text[position:])
    base = " ".join("".join(base_parts).split())
    return QueryTerms(base, tuple(plus), tuple(minus))


def combine_vectors(
    base: np.ndarray | None, plus: list[np.ndarray], minus: list[np.ndarray]
) -> np.ndarray:
    """normalise(v(base) + Σ v(plus) − Σ v(minus)), every v normalised first (rclip's rule).

    `base` may be None (a query of + terms only). A sum of exactly zero stays zero rather than
    dividing by it."""
    parts = [v for v in ([base] if base is not None else []) + plus if v is not None]
    if not parts:
        raise ValueError("a query vector needs a base or a + term")
    total = np.zeros_like(np.asarray(parts[0], dtype=np.float32))
    for vector in parts:
        total += _unit(vector)
    for vector in minus:
        total -= _unit(vector)
    return _unit(total)


def _unit(vector: np.ndarray) -> np.ndarray:
    v = np.asarray(vector, dtype=np.float32)
    norm = float(np.linalg.norm(v))
    return v / norm if norm > 0 else v
