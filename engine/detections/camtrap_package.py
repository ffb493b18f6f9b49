"""A Camtrap DP 1.0 package as it lies on disk (https://camtrap-dp.tdwg.org/): its descriptor
(`datapackage.json`), where its three tables are, and their rows read one at a time.

Both readers of a package use it: the observations import (`camtrap_observations`) and opening a
package as a collection (`engine.io.camtrap_read`). A package that cannot be read fails in one
line (`BadInputError`) before anything is written.
"""

from __future__ import annotations

import csv
import gzip
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any
from urllib.parse import unquote, urlparse

from engine.errors import BadInputError

DESCRIPTOR = "datapackage.json"
TABLES = ("deployments", "media", "observations")
_URL = re.compile(r"^[a-z][a-z0-9+.-]*://", re.IGNORECASE)
_WINDOWS_ABSOLUTE = re.compile(r"^(?:[a-z]:[\\/]|\\\\)", re.IGNORECASE)


@dataclass(frozen=True)
class Package:
    """A package's descriptor and its tables' files (absolute paths)."""

    folder: Path
    descriptor_path: Path
    descriptor: dict[str, Any]
    tables: dict[str, Path]  # deployments, media, observations -> the CSV file

    @property
    def name(self) -> str:
        return str(self.descriptor.get("title") or self.descriptor.get("name") or self.folder.name)

    def rows(self, table: str) -> Iterator[dict[str, str]]:
        """The table's rows one at a time (never the whole file in memory), every cell text
        ("" for an empty one); a table the package does not have yields nothing."""
        path = self.tables.get(table)
        if path is None:
            return
        try:
            # A table may be gzipped (tables.csv.gz), as Frictionless allows and GBIF serves.
            opener = gzip.open if path.suffix.lower() == ".gz" else open
            with opener(path, "rt", encoding="utf-8-sig", newline="") as handle:
                for row in csv.DictReader(handle):
                    yield {k: (v or "").strip() for k, v in row.items() if k is not None}
        except (OSError, EOFError, UnicodeDecodeError, csv.Error) as error:
            raise BadInputError(f"cannot read {path}: {error}") from error


def open_package(path: str | os.PathLike[str]) -> Package:
    """The package in folder `path` (or whose `datapackage.json` is `path`). Its media and
    observations tables must be local files; deployments may be absent."""
    given = Path(path).expanduser()
    descriptor_path = given if given.is_file() else given / DESCRIPTOR
    if not descriptor_path.is_file():
        raise BadInputError(f"no Camtrap DP package at {given}: {DESCRIPTOR} not found")
    descriptor_path = descriptor_path.resolve()
    try:
        descriptor = json.loads(descriptor_path.read_text(encoding="utf-8-sig"))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise BadInputError(f"cannot read {descriptor_path}: {error}") from error
    if not isinstance(descriptor, dict) or not isinstance(descriptor.get("resources"), list):
        raise BadInputError(f"{descriptor_path} is not a data package (no resources)")
    folder = descriptor_path.parent
    tables: dict[str, Path] = {}
    for resource in descriptor["resources"]:
        if not isinstance(resource, dict) or resource.get("name") not in TABLES:
            continue
        where = resource.get("path")
        if isinstance(where, list) and len(where) == 1:
            where = where[0]
        if not isinstance(where, str) or not where:
            raise BadInputError(
                f"{descriptor_path}: the {resource['name']} table is not one file of the package"
            )
        if is_url(where):
            raise BadInputError(
                f"{descriptor_path}: the {resource['name']} table is at {where}; download it "
                "into the package folder first"
            )
        file = folder / where
        if not file.is_file():
            raise BadInputError(
                f"{descriptor_path}: the {resource['name']} table {file} is missing"
            )
        tables[str(resource["name"])] = file
    missing = [name for name in ("media", "observations") if name not in tables]
    if missing:
        raise BadInputError(
            f"{descriptor_path} is not a Camtrap DP package: no {' or '.join(missing)} table"
        )
    return Package(folder, descriptor_path, descriptor, tables)


def is_url(text: str) -> bool:
    """Whether a filePath is a URL (Camtrap DP allows a URL or a path relative to the package)."""
    return bool(_URL.match(text))


def is_absolute(text: str) -> bool:
    """Whether a filePath is an absolute local path (POSIX or Windows)."""
    return text.startswith("/") or bool(_WINDOWS_ABSOLUTE.match(text))


def media_name(file_path: str, file_name: str) -> str:
    """The file name of a media row: its `fileName`, else the last part of its path or URL."""
    if file_name:
        return file_name
    if is_url(file_path):
        return unquote(PurePosixPath(urlparse(file_path).path).name)
    return PureWindowsPath(file_path).name if "\\" in file_path else PurePosixPath(file_path).name


def parse_time(text: str) -> datetime | None:
    """A Camtrap DP datetime (ISO 8601 with its UTC offset, "Z" for UTC); None when empty or
    unreadable. A time written without an offset stays naive."""
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None


def parse_number(text: str) -> float | None:
    """A finite number, else None."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value == value and abs(value) != float("inf") else None
