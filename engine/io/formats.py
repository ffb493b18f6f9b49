"""The one registry of export formats, as engine/methods has for search methods.

`quadrat export FORMAT` lists and runs what is registered here. A format is an `ExportFormat`:
its name, a one-line description, what it writes (a file, a folder, or sidecars beside the
photos), the options its writer takes, a menu label, and the writer, `write(library, query_id,
out, **options)` returning a report with a `summary()` line. Adding a format is a module of its
own and one line in `_FORMATS`; nothing is imported until a format is asked for, so listing the
names costs a command nothing. A format with a label that writes one file is also an entry of
the window's File menu (`app/controllers/transfer.py`).

The formats written before this registry (judgments, relevant-photos, xmp, dwca, dwc-csv,
camtrap-dp) are entries of `engine/io/builtin_formats.py`; their command lines (several queries,
a check without writing, problems listed) and window actions stay their own.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from engine.errors import BadInputError

if TYPE_CHECKING:
    from engine.catalog.library import Library

FILE, FOLDER, BESIDE = "file", "folder", "beside the photos"


class ExportReport(Protocol):
    """What a writer returns: one line saying what was written, and where."""

    def summary(self) -> str: ...


Writer = Callable[..., ExportReport]


@dataclass(frozen=True)
class FormatOption:
    """One option a format's writer takes: its flag on the command line, its help, and the
    keyword the writer gets (`dest`). A `switch` is off unless given; `negated` is a switch
    that turns a default-on keyword off (`--no-sensitive-taxa` -> sensitive_taxa=False)."""

    flag: str
    help: str
    dest: str
    switch: bool = False
    negated: bool = False
    metavar: str | None = None


@dataclass(frozen=True)
class ExportFormat:
    """One export format: name, description, what it writes, its options and its writer."""

    name: str
    description: str
    target: str  # FILE, FOLDER or BESIDE
    suffix: str = ""  # a file's usual ending, for file dialogs (".geojson")
    options: tuple[FormatOption, ...] = ()
    write: Writer | None = None  # None: listed only (no writer to call)
    label: str = ""  # File › Export's entry "Export <label>…"; empty: not offered there

    def run(
        self, library: Library, query_id: int, out: Path | None, **options: Any
    ) -> ExportReport:
        """Write one saved query's export to `out` with the format's options."""
        if self.write is None:
            raise BadInputError(f"export {self.name} has no writer")
        known = {option.dest for option in self.options}
        return self.write(
            library, query_id, out, **{k: v for k, v in options.items() if k in known}
        )


SENSITIVE_TAXA = FormatOption(
    "--no-sensitive-taxa",
    "do not apply the lab's sensitive-taxa list",
    dest="sensitive_taxa",
    switch=True,
    negated=True,
)
"""The option every format that publishes places shares (one flag on the command line)."""


# Every format, in the order `quadrat export` lists them: name -> "module:attribute".
_FORMATS = {
    "judgments": "engine.io.builtin_formats:JUDGMENTS",
    "relevant-photos": "engine.io.builtin_formats:RELEVANT_PHOTOS",
    "xmp": "engine.io.builtin_formats:XMP",
    "dwca": "engine.io.builtin_formats:DWCA",
    "dwc-csv": "engine.io.builtin_formats:DWC_CSV",
    "camtrap-dp": "engine.io.builtin_formats:CAMTRAP_DP",
    "geojson": "engine.io.geojson:GEOJSON",
}


def format_names() -> list[str]:
    """Every format's name, in registry order (nothing imported)."""
    return list(_FORMATS)


def get_format(name: str) -> ExportFormat:
    """The format called `name`; a one-line BadInputError naming the known ones otherwise."""
    if name not in _FORMATS:
        raise BadInputError(f"unknown export format '{name}'; known: {', '.join(_FORMATS)}")
    module, attribute = _FORMATS[name].split(":")
    found = getattr(importlib.import_module(module), attribute)
    if not isinstance(found, ExportFormat) or found.name != name:
        raise TypeError(f"{_FORMATS[name]} is not the ExportFormat {name!r}")
    return found


def export_formats() -> list[ExportFormat]:
    """Every format, in registry order."""
    return [get_format(name) for name in _FORMATS]
