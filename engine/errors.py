"""Exceptions the engine raises. Each carries a message fit to show a user as one line."""

from __future__ import annotations


def one_line(error: object, limit: int = 200) -> str:
    """`error` as one line of at most `limit` characters (its type's name when it says nothing)."""
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= limit else text[:limit] + "..."


class QuadratError(Exception):
    """Base class: an error whose message is meant for the user (no traceback needed)."""


class BadInputError(QuadratError):
    """The user gave something unusable: a missing folder, a malformed file, a bad query.

    The command line maps this to exit code 2.
    """


class ModelLoadError(QuadratError):
    """A model could not be loaded: unknown name, missing or corrupt checkpoint, unsafe pickle."""


class ModelMismatchError(QuadratError):
    """A library was indexed with one model and is being searched with another."""


class BadImageError(QuadratError):
    """One image cannot be used (unreadable, truncated, too large). `reason` is recorded."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Cancelled(Exception):  # noqa: N818 - reads better at call sites than CancelledError
    """Long work stopped because the user asked it to. Not an error: committed work is kept."""


class CatalogError(QuadratError):
    """The catalog database could not be read or written (I/O error, disk full, read-only,
    damaged file). The message names the cause and the way on; details go to the log."""


class CorruptIndexError(QuadratError):
    """A vector index file failed its checksum, or served a score no cosine similarity can
    have. The library rebuilds the file from the catalog."""
