"""A COCO metadata file as a safe stream of JSON events: the bytes ijson reads (`JsonStream`:
UTF-8 whatever the file's encoding, runs of digits capped, pieces cut between tokens), records
read as flat dicts whatever their nesting (`read_record`, `skip_value`), and a syntax error
that names the line where it can (`syntax_error`). What the records mean is
`engine.indexing.coco`'s job."""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from engine.errors import BadInputError


class Nested:
    """Stands for a list or object found where a record's field value belongs (never built)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<list or object>"


NESTED = Nested()


# One JSON integer becomes one Python int, and int() refuses more digits than
# sys.get_int_max_str_digits() (4300 by default): ijson's python backend then stops with a
# syntax error and yajl2_c's parse() crashes the process. 640 is the smallest limit Python
# lets anyone set, so a run capped there always converts, and stays an absurd number that
# every field rejects. Runs inside strings are capped too; no real name holds 640 digits.
_MAX_DIGITS = 640
_DIGITS = b"0123456789"
_DIGIT_MASK = bytes(0x30 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))  # digit -> "0"
_TOO_MANY_DIGITS = b"0" * (_MAX_DIGITS + 1)
_LONG_DIGIT_RUN = re.compile(rb"(?<![0-9])[0-9]{%d,}" % (_MAX_DIGITS + 1))
_READ_SIZE = 1 << 16
_PROGRESS_BYTES = 1 << 20  # a progress report per MiB read: a thousand for a GB


class JsonStream:
    """A metadata file as ijson reads it: UTF-8 bytes (a UTF-8 BOM dropped, UTF-16/32 as
    `json.load` detects them re-encoded), with every run of digits cut to _MAX_DIGITS.

    Each piece handed out ends at its last "," "}" or "]" where it has one: ijson's pure-Python
    lexer keeps appending pieces to its buffer until one ends between tokens, so without this
    it could hold (and copy, quadratically) much of a file of long strings. yajl2_c does not
    care either way.
    """

    def __init__(self, raw: BinaryIO, on_read: Callable[[int], None] | None = None) -> None:
        self._raw = raw
        self._decoder: codecs.IncrementalDecoder | None = None
        self._started = False
        self._held = b""  # the end of the last piece read, after its last "," "}" or "]"
        self._run = 0  # digits at the end of what was handed out so far
        self.position = 0  # bytes of the file read so far, for error messages and progress
        self._on_read = on_read
        self._reported = 0

    def read(self, size: int = -1) -> bytes:
        if size == 0:
            return b""
        while True:
            chunk = self._raw.read(size if size > 0 else _READ_SIZE)
            self.position += len(chunk)
            if self._on_read is not None and self.position - self._reported >= _PROGRESS_BYTES:
                self._reported = self.position
                self._on_read(self.position)
            data = chunk if self._started else self._start(chunk)
            if self._decoder is not None:
                data = self._decoder.decode(data, final=not chunk).encode("utf-8")
            data, self._held = self._held + data, b""
            if chunk:
                cut = max(data.rfind(b","), data.rfind(b"}"), data.rfind(b"]")) + 1
                if cut:
                    data, self._held = data[:cut], data[cut:]
            data = self._cap_digits(data)
            # An empty answer means the end of the file to ijson: read on while a decoder
            # holds back a partial character or the cap dropped a whole chunk of digits.
            if data or not chunk:
                return data

    def _start(self, data: bytes) -> bytes:
        self._started = True
        encoding = json.detect_encoding(data)
        if encoding == "utf-8-sig":
            return data[len(codecs.BOM_UTF8) :]
        if encoding != "utf-8":
            self._decoder = codecs.getincrementaldecoder(encoding)()
        return data

    def _cap_digits(self, data: bytes) -> bytes:
        lead = len(data) - len(data.lstrip(_DIGITS))  # digits continuing the last chunk's run
        if self._run + lead > _MAX_DIGITS or _TOO_MANY_DIGITS in data.translate(_DIGIT_MASK):
            keep = max(0, _MAX_DIGITS - self._run)
            rest = _LONG_DIGIT_RUN.sub(lambda m: m.group()[:_MAX_DIGITS], data[lead:])
            data = data[: min(lead, keep)] + rest
        tail = len(data) - len(data.rstrip(_DIGITS))
        self._run = self._run + len(data) if tail == len(data) else tail
        return data


OPENERS = ("start_map", "start_array")


def skip_value(events: Iterator[tuple[str, Any]]) -> None:
    """Pass over the rest of a list or object whose start was just read: no recursion, nothing
    built, so nesting of any depth costs nothing."""
    depth = 1
    for event, _ in events:
        if event == "start_map" or event == "start_array":
            depth += 1
        elif event == "end_map" or event == "end_array":
            depth -= 1
            if depth == 0:
                return


def read_record(events: Iterator[tuple[str, Any]]) -> dict[str, object]:
    """The rest of an object whose start was just read: its scalar values, with NESTED for
    each list or object (skipped, never built: record fields are scalars)."""
    record: dict[str, object] = {}
    key = ""
    for event, value in events:
        if event == "map_key":
            key = value
        elif event == "end_map":
            break
        elif event == "start_map" or event == "start_array":
            skip_value(events)
            record[key] = NESTED
        else:
            record[key] = value
    return record


_FALLBACK_MAX_BYTES = 64 << 20  # json.loads takes about ten times a file's size in memory


def syntax_error(path: Path, error: Exception, position: int) -> BadInputError:
    """The error for a file ijson could not parse, naming the line where json can tell it.

    ijson reports no line, so a file small enough is parsed again by json just for the
    message. json may fail otherwise (deep nesting) or not at all (it accepts NaN, which is
    not JSON); then ijson's own message and the bytes read stand.
    """
    detail = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
    try:
        if path.stat().st_size <= _FALLBACK_MAX_BYTES:
            # parse_int: no int() of each integer, which refuses thousands of digits.
            json.loads(path.read_bytes(), parse_int=len)
            detail += " (NaN and Infinity are not JSON)"  # what json accepts beyond JSON
    except json.JSONDecodeError as exc:
        return BadInputError(
            f"{path}: malformed JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        )
    except UnicodeDecodeError:
        return BadInputError(f"{path}: not a UTF-8 text file")
    except (RecursionError, ValueError, MemoryError, OSError):
        pass
    return BadInputError(f"{path}: malformed JSON (within its first {position:,} bytes): {detail}")
