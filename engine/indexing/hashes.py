"""Content hashes: a fingerprint of a file's bytes, how the catalog tells a changed photo from
an unchanged one and finds a moved one (the thumbnail and rerank caches key on it too)."""

from __future__ import annotations

import hashlib
from pathlib import Path

_HASH_CHUNK = 1 << 20


def content_hash(path: Path) -> str:
    """Hex BLAKE2b (16-byte digest) of the file's bytes, read in chunks."""
    digest = hashlib.blake2b(digest_size=16)
    with Path(path).open("rb") as handle:
        while chunk := handle.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()
