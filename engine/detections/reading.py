"""What every importer of detector or classifier output hands over, and the helpers the
readers share: `Entry` (one photo as the file names it), `Reading` (an opened file),
`Importer` (a kind of file: how to recognise it, how to read it), streamed JSON, checks.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from engine.detections.records import DetectionRecord
from engine.errors import BadInputError

# -- what an importer hands over --------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """One photo as a source file names it, and what the source found there."""

    file: str  # the path as written in the file
    where: str  # the entry's place, for messages: "images[12]"
    detections: tuple[DetectionRecord, ...] = ()
    failure: str | None = None
    # The highest confidence of every box the file gives (before the import's threshold), or
    # the file's own `max_detection_conf`: what decides whether the frame is empty.
    max_confidence: float | None = None


@dataclass
class Reading:
    """An opened source file: its model and category maps, then its entries (a stream)."""

    model: str | None
    categories: dict[str, Any] | None
    entries: Iterator[Entry]


class ByteStream(Protocol):
    """What a reader reads from: a binary file (counted, for progress)."""

    def read(self, size: int = -1, /) -> bytes: ...


@dataclass(frozen=True)
class Importer:
    """One kind of file: `sniff` says from the file's first bytes (text) whether it is one;
    `read` opens it, dropping boxes below `threshold`; `stream` is how it reads bytes."""

    kind: str
    description: str
    sniff: Callable[[str], bool]
    read: Callable[[ByteStream, Path, float], Reading]


def top_level_keys(head: str) -> set[str]:
    """The keys that look like an outer JSON object's in a file's first bytes (for sniffing):
    quoted names right after "{" or "," at the first nesting level."""
    keys: set[str] = set()
    depth = 0
    for match in re.finditer(r'"((?:[^"\\]|\\.)*)"(\s*:)?|[{}\[\]]', head):
        token = match.group(0)
        if token in ("{", "["):
            depth += 1
        elif token in ("}", "]"):
            depth -= 1
        elif depth == 1 and match.group(2):
            keys.add(match.group(1))
    return keys


# -- helpers the readers share ----------------------------------------------------------------


def checked_confidence(value: object, where: str) -> float:
    """A confidence in 0..1, else a one-line `BadInputError` naming the entry."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise BadInputError(f"{where}: a confidence is a number from 0 to 1, got {value!r:.40}")
    return float(value)


def checked_object(value: object, where: str, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise BadInputError(f"{where}: expected {what}, got {type(value).__name__}")
    return value


def json_items(stream: ByteStream, prefix: str, path: Path, what: str) -> Iterator[Any]:
    """The items under `prefix` ("images.item"), streamed; a file that is not JSON of that
    shape raises a one-line `BadInputError` naming it."""
    import ijson

    try:
        yield from ijson.items(stream, prefix, use_float=True)
    except ijson.JSONError as error:
        raise BadInputError(f"{path}: not {what} (not JSON: {one_line(error)})") from None


def one_line(error: BaseException) -> str:
    """An error's message on one line (a JSON parser's points at the place on a second)."""
    return " ".join(str(error).split())[:200]


def json_header(path: Path, array_key: str, wanted: tuple[str, ...], what: str) -> dict[str, Any]:
    """The small top-level values `wanted` of a JSON file whose `array_key` holds the bulk,
    read without building that array: events up to the array, then (for a key written after
    it) a scan that builds only that key's value."""
    import ijson
    from ijson.common import ObjectBuilder

    found: dict[str, Any] = {}
    shape = f'{path}: not {what}: no "{array_key}" list'
    try:
        with path.open("rb") as stream:
            builder: ObjectBuilder | None = None
            current: str | None = None
            depth = 0
            events = ijson.parse(stream, use_float=True)
            for prefix, event, value in events:
                if builder is not None and current is not None:
                    builder.event(event, value)
                    depth += event in ("start_map", "start_array")
                    depth -= event in ("end_map", "end_array")
                    if depth == 0:
                        found[current] = builder.value
                        builder, current = None, None
                elif prefix == "" and event == "map_key":
                    if value == array_key:
                        if next(events, ("", "", None))[1] != "start_array":
                            raise BadInputError(shape)
                        break
                    if value in wanted:
                        builder, current, depth = ObjectBuilder(), value, 0
                elif prefix == "" and event == "start_map":
                    continue
                elif prefix == "" and event != "end_map":
                    raise BadInputError(shape)
            else:
                raise BadInputError(shape)
        for key in wanted:
            if key not in found:
                with path.open("rb") as stream:
                    value = next(ijson.items(stream, key, use_float=True), None)
                if value is not None:
                    found[key] = value
    except ijson.JSONError as error:
        raise BadInputError(f"{path}: not {what} (not JSON: {one_line(error)})") from None
    return found
