"""Writing files so that a crash never leaves half of one: temporary file, then rename; and
CSV cells that a spreadsheet shows as text rather than runs as a formula."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
import stat
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO

_TEMP_ATTEMPTS = 100


def _open_temp(target: Path) -> tuple[int, Path]:
    """A new hidden file beside `target`, opened for writing, with the mode a file created there
    normally gets (0666 less the umask; the existing file's mode when `target` is replaced).

    Not `tempfile.mkstemp`: its private 0600 would survive the rename, and an export that the
    lab cannot read is no export. Asking the kernel for 0666 applies the umask without changing
    the process-wide umask (which other threads may be creating files under)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    for _ in range(_TEMP_ATTEMPTS):
        temp = target.parent / f".{target.name}.{secrets.token_hex(6)}.tmp"
        try:
            fd = os.open(temp, flags, 0o666)
        except FileExistsError:
            continue
        try:
            kept = stat.S_IMODE(target.stat().st_mode)
        except OSError:
            return fd, temp  # a new file: the kernel's mode stands
        # Replacing a file keeps its mode, as writing it in place would; a file we may not
        # chmod (another owner's) keeps the normal mode.
        with contextlib.suppress(OSError):
            os.chmod(temp, kept)
        return fd, temp
    raise FileExistsError(f"no free temporary name beside {target}")


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike[str]) -> Iterator[tuple[IO[bytes], Path]]:
    """A binary handle to a temporary file beside `path` (and its name), renamed onto `path`
    when the block ends without an exception and removed when it raises. The file gets the mode
    a normally created one would (see `_open_temp`)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = _open_temp(target)
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle, temp
        os.replace(temp, target)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Replace `path` with `data` in one step, creating its folder if needed."""
    with atomic_output(path) as (handle, _):
        handle.write(data)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """`atomic_write_bytes` for UTF-8 text, newlines written as given."""
    atomic_write_bytes(path, text.encode("utf-8"))


def file_sha256(path: str | os.PathLike[str]) -> str:
    """The hex sha256 of a file, read in 1 MiB pieces (model weights run to gigabytes)."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


# --- CSV cells a spreadsheet will not run ------------------------------------------------------

# A cell starting with one of these is read as a formula by a spreadsheet (OWASP, "CSV
# Injection"); the full-width forms are read so by some. A photo named "=HYPERLINK(...).jpg" or
# a query text "-2+3" must be shown, never run.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r", "\n", "\uff1d", "\uff0b", "\uff0d", "\uff20")
CSV_GUARD = "'"
"""Put before a cell that would run as a formula; spreadsheets show the rest as text."""

# A plain decimal number (-79.3, +1e-5, .5) is a value, never a formula: left as it is.
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


def csv_cell(value: object) -> object:
    """`value` as every CSV export writes it: text a spreadsheet would run (it starts with a
    `FORMULA_STARTS` character) gets `CSV_GUARD` in front, and so does text that already starts
    with guards before such a character, so that `csv_field` undoes it exactly. Numbers, and
    text that is a plain number, are written as they are."""
    if not isinstance(value, str) or _NUMBER.fullmatch(value):
        return value
    if value.lstrip(CSV_GUARD).startswith(FORMULA_STARTS):
        return CSV_GUARD + value
    return value


def csv_row(values: Iterable[object]) -> list[object]:
    """`csv_cell` of each value of a row, for `csv.writer.writerow`."""
    return [csv_cell(value) for value in values]


def csv_record(record: Mapping[str, object]) -> dict[str, object]:
    """`csv_cell` of each value of a record, for `csv.DictWriter.writerow`."""
    return {name: csv_cell(value) for name, value in record.items()}


def csv_field(text: str) -> str:
    """A field as a Quadrat CSV export meant it: the guard `csv_cell` added is taken off, so a
    photo really named "-x.jpg" or "=cmd.jpg" comes back under its own name."""
    if text.startswith(CSV_GUARD) and text.lstrip(CSV_GUARD).startswith(FORMULA_STARTS):
        return text[len(CSV_GUARD) :]
    return text
