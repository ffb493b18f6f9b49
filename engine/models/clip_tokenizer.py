"""CLIP's byte-pair tokenizer without torch, for a text search on the ONNX text tower.

`ClipTokenizer` is a torch-free copy of open_clip's `SimpleTokenizer` (both from OpenAI's CLIP,
MIT licence) reading open_clip's vocabulary file without importing open_clip (which imports
torch).
"""

from __future__ import annotations

import html
import importlib.util
import zlib
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np

from engine.errors import BadInputError


def _open_clip_vocabulary() -> Path:
    """open_clip's BPE vocabulary file, found without importing open_clip (which imports
    torch)."""
    found = importlib.util.find_spec("open_clip")
    locations = list(found.submodule_search_locations or []) if found else []
    for location in locations:
        path = Path(location) / "bpe_simple_vocab_16e6.txt.gz"
        if path.is_file():
            return path
    raise BadInputError(
        "open_clip's tokenizer vocabulary (bpe_simple_vocab_16e6.txt.gz) is missing"
    )


@lru_cache(maxsize=1)
def _bytes_to_unicode() -> dict[int, str]:
    """CLIP's reversible map of bytes to printable characters."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    codes = printable[:]
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            codes.append(256 + extra)
            extra += 1
    return dict(zip(printable, (chr(code) for code in codes), strict=True))


_MERGES = 49152 - 256 - 2  # the merges CLIP uses: the vocabulary file's lines after the first
_NOT_A_MERGE = float("inf")


def _merge_lines(vocabulary: Path, count: int) -> list[str]:
    """The `count` merge lines ("first second") after the vocabulary file's header line. Only
    about a sixth of the file is decompressed: inflating all of it took a third of the
    tokenizer's start."""
    inflater = zlib.decompressobj(wbits=31)  # a gzip stream
    parts: list[bytes] = []
    newlines = 0
    with vocabulary.open("rb") as packed:
        while newlines <= count:
            chunk = packed.read(1 << 16)
            if not chunk:
                break
            part = inflater.decompress(chunk)
            parts.append(part)
            newlines += part.count(b"\n")
    data = b"".join(parts)
    if newlines > count:  # cut after a whole line: a chunk may end inside a character
        data = data[: data.rindex(b"\n")]
    return data.decode("utf-8").split("\n")[1 : count + 1]


def _ftfy_leaves_alone(text: str) -> bool:
    """Whether ftfy's `fix_text` surely returns `text` unchanged: printable ASCII without the
    "&" of an HTML entity (what it fixes are mis-decoded, non-ASCII or control characters,
    entities and line breaks)."""
    return text.isascii() and text.isprintable() and "&" not in text


class ClipTokenizer:
    """open_clip's `SimpleTokenizer` (lower-casing clean-up, plain truncation) without torch;
    `tokens` gives the same int64 array its call gives as a tensor."""

    def __init__(self, vocabulary: Path | None = None) -> None:
        import regex  # type: ignore[import-untyped]

        merges = _merge_lines(vocabulary or _open_clip_vocabulary(), _MERGES)
        symbols = list(_bytes_to_unicode().values())
        vocab = symbols + [symbol + "</w>" for symbol in symbols]
        vocab += [merge.replace(" ", "") for merge in merges] + ["<start_of_text>", "<end_of_text>"]
        # Built by dict(zip()) from the lines as they are, keyed "first second": a third of
        # the time of a dict of split tuples, which every search's start waited for.
        self.encoder = dict(zip(vocab, range(len(vocab)), strict=True))
        self._ranks = dict(zip(merges, range(len(merges)), strict=True))
        self._cache = {"<start_of_text>": "<start_of_text>", "<end_of_text>": "<end_of_text>"}
        self._pattern = regex.compile(
            r"<start_of_text>|<end_of_text>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|"
            r"[^\s\p{L}\p{N}]+",
            regex.IGNORECASE,
        )
        self.sot, self.eot = self.encoder["<start_of_text>"], self.encoder["<end_of_text>"]

    def _bpe(self, token: str) -> str:
        if token in self._cache:
            return self._cache[token]
        word: tuple[str, ...] = (*token[:-1], token[-1] + "</w>")
        while len(word) > 1:
            pairs = {f"{first} {second}" for first, second in zip(word, word[1:], strict=False)}
            joined_best = min(pairs, key=lambda pair: self._ranks.get(pair, _NOT_A_MERGE))
            if joined_best not in self._ranks:
                break
            best = joined_best.split(" ")
            merged: list[str] = []
            i = 0
            while i < len(word):
                if i < len(word) - 1 and word[i] == best[0] and word[i + 1] == best[1]:
                    merged.append(best[0] + best[1])
                    i += 2
                else:
                    merged.append(word[i])
                    i += 1
            word = tuple(merged)
        joined = " ".join(word)
        self._cache[token] = joined
        return joined

    def encode(self, text: str) -> list[int]:
        if not _ftfy_leaves_alone(text):
            import ftfy  # a twentieth of a second to import: only for text it may change

            text = ftfy.fix_text(text)
        cleaned = html.unescape(html.unescape(text)).strip()
        cleaned = " ".join(cleaned.split()).lower()
        byte_map = _bytes_to_unicode()
        ids: list[int] = []
        for piece in self._pattern.findall(cleaned):
            mapped = "".join(byte_map[b] for b in piece.encode("utf-8"))
            ids.extend(self.encoder[part] for part in self._bpe(mapped).split(" "))
        return ids

    def tokens(self, texts: Sequence[str], context_length: int) -> np.ndarray:
        """(n, context_length) int64 token ids, cut at the context length (ending in EOT)."""
        out = np.zeros((len(texts), context_length), dtype=np.int64)
        for row, text in enumerate(texts):
            ids = [self.sot, *self.encode(text), self.eot]
            if len(ids) > context_length:
                ids = ids[:context_length]
                ids[-1] = self.eot
            out[row, : len(ids)] = ids
        return out


@lru_cache(maxsize=1)
def clip_tokenizer() -> ClipTokenizer:
    """The one `ClipTokenizer` of the process (reading the vocabulary takes a moment)."""
    return ClipTokenizer()
