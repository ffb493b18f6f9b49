"""Camtrap DP 1.0 packages written by tests in the standard's published shape (the headers of
its table schemas, shipped in resources/camtrap_dp; datapackage.json as its example writes it),
with small JPEGs made by PIL for the media that are local files."""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from PIL import Image as PILImage

from engine.io.camtrap_check import field_names

_BASE = "https://raw.githubusercontent.com/tdwg/camtrap-dp/1.0/"
CC_BY = "http://creativecommons.org/licenses/by/4.0/"


def jpeg(path: Path, shade: int = 90, size: tuple[int, int] = (64, 48)) -> Path:
    """A small JPEG at `path` (folders made), plain grey of `shade` with a lighter square."""
    path.parent.mkdir(parents=True, exist_ok=True)
    image = PILImage.new("RGB", size, (shade, shade, shade))
    image.paste((255 - shade, 200, 40), (8, 8, 24, 24))
    image.save(path, "JPEG")
    return path


def write_table(path: Path, table: str, rows: Sequence[Mapping[str, str]]) -> None:
    names = field_names(table)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(names), lineterminator="\n")
        writer.writeheader()
        for row in rows:
            unknown = set(row) - set(names)
            assert not unknown, f"{table} has no column {unknown}"
            writer.writerow({name: row.get(name, "") for name in names})


def write_package(
    folder: Path,
    *,
    deployments: Sequence[Mapping[str, str]] = (),
    media: Sequence[Mapping[str, str]] = (),
    observations: Sequence[Mapping[str, str]] = (),
    licenses: Sequence[Mapping[str, str]] | None = None,
) -> Path:
    """The package's three tables and its datapackage.json in `folder`; the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, rows in (
        ("deployments", deployments),
        ("media", media),
        ("observations", observations),
    ):
        write_table(folder / f"{name}.csv", name, rows)
    descriptor: dict[str, Any] = {
        "resources": [
            {
                "name": name,
                "path": f"{name}.csv",
                "profile": "tabular-data-resource",
                "format": "csv",
                "mediatype": "text/csv",
                "encoding": "utf-8",
                "schema": f"{_BASE}{name}-table-schema.json",
            }
            for name in ("deployments", "media", "observations")
        ],
        "profile": f"{_BASE}camtrap-dp-profile.json",
        "name": "test-package",
        "created": "2024-01-01T00:00:00Z",
        "title": "A test package",
        "contributors": [{"title": "Ann Tester", "role": "contact"}],
        "project": {
            "title": "Tests",
            "samplingDesign": "opportunistic",
            "captureMethod": ["activityDetection"],
            "individualAnimals": False,
            "observationLevel": ["media", "event"],
        },
        "spatial": {"type": "Point", "coordinates": [4.774, 51.496]},
        "temporal": {"start": "2020-05-30", "end": "2020-07-01"},
        "taxonomic": [{"scientificName": "Anas platyrhynchos"}],
        "licenses": list(
            licenses
            if licenses is not None
            else [{"name": "CC0-1.0", "scope": "data"}, {"path": CC_BY, "scope": "media"}]
        ),
    }
    (folder / "datapackage.json").write_text(json.dumps(descriptor, indent=2), encoding="utf-8")
    return folder
