"""The pre-flight check of a Camtrap DP 1.0 package: what a validator of the standard would reject,
found before anything is written, and what a user should know before publishing.

The tables are checked against the standard's own table schemas, shipped with Quadrat
(resources/camtrap_dp, MIT, source named in its README), read field by field as a Frictionless
validator reads them: the header, `required`, the type (string, number, integer, boolean, `any`
as a JSON object, datetime in the schema's format with its UTC offset), `enum`, `pattern`,
`minimum`/`maximum`, `unique`, the primary key and the foreign keys (`deploymentID`,
`mediaID`). `datapackage.json` is checked against what the profile requires: its required
properties, the resources' names, paths, profiles and versioned schema URLs, contributor roles,
the project's required fields and vocabularies, `temporal` dates, `taxonomic` names, `licenses`
(scopes data and media) and `coordinatePrecision`.

A problem is an error when a validator would reject the package, a warning otherwise: cells a
spreadsheet would run as a formula (the standard allows no guard character, so they are written
as they are and named here), deployments whose times are uncertain, observations without a
name.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from functools import cache
from importlib import resources
from typing import Any

from engine.files import FORMULA_STARTS, csv_cell

ERROR, WARNING = "error", "warning"
TABLES = ("deployments", "media", "observations")
DESCRIPTOR = "datapackage.json"
_SCHEMA_PACKAGE = "resources.camtrap_dp"
_DATETIME_FORMAT = "%Y-%m-%dT%H:%M:%S%z"
_CONTRIBUTOR_ROLES = (
    "contact",
    "principalInvestigator",
    "rightsHolder",
    "publisher",
    "contributor",
)
_SAMPLING_DESIGNS = (
    "simpleRandom", "systematicRandom", "clusteredRandom", "experimental", "targeted",
    "opportunistic",
)  # fmt: skip
_CAPTURE_METHODS = ("activityDetection", "timeLapse")
_LEVELS = ("media", "event")
_TAXON_RANKS = (
    "kingdom", "phylum", "class", "order", "family", "genus", "species", "subspecies",
)  # fmt: skip
_VERSIONED = re.compile(r"^https?://\S*1\.0\S*$")  # the profile's "$defs/version" and a URI


@dataclass(frozen=True)
class Problem:
    """One thing wrong with one record: its table, the record's id (deploymentID, mediaID or
    observationID; a property path in datapackage.json), the column, what is wrong, and whether
    it would make the package rejected (ERROR) or is for the user to know (WARNING). `photo`
    names the photo a media or observation row stands for, where there is one."""

    table: str
    record: str
    column: str
    message: str
    severity: str = ERROR
    photo: str = ""

    @property
    def line(self) -> str:
        """The problem as one line for the command line and the window."""
        file = self.table if self.table == DESCRIPTOR else f"{self.table}.csv"
        where = " ".join(part for part in (file, self.record) if part)
        where += f" ({self.photo})" if self.photo else ""
        column = f" {self.column}:" if self.column else ":"
        return f"{self.severity}: {where}{column} {self.message}"


@cache
def table_schema(name: str) -> dict[str, Any]:
    """The standard's table schema of `name` (deployments, media, observations)."""
    text = resources.files(_SCHEMA_PACKAGE).joinpath(f"{name}-table-schema.json").read_text("utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


def field_names(name: str) -> tuple[str, ...]:
    """The columns of a table, in the schema's order."""
    return tuple(field["name"] for field in table_schema(name)["fields"])


# --- the tables ----------------------------------------------------------------------------------


def _number_problem(kind: str, value: str) -> tuple[float | None, str]:
    """A number or integer cell's value, or what is wrong with it."""
    if kind == "integer":
        if not re.fullmatch(r"[+-]?\d+", value):
            return None, f"{value!r} is not an integer"
        return int(value), ""
    try:
        number = float(value)
    except ValueError:
        return None, f"{value!r} is not a number"
    if not math.isfinite(number):
        return None, f"{value!r} is not a finite number"
    return number, ""


def _datetime_problem(value: str, form: str) -> str:
    try:
        parsed = datetime.strptime(value, form)
    except ValueError:
        return f"{value!r} is not a date and time as YYYY-MM-DDThh:mm:ss±hh:mm"
    return "" if parsed.tzinfo is not None else f"{value!r} has no UTC offset"


def _json_object_problem(value: str) -> str:
    try:
        return "" if isinstance(json.loads(value), dict) else "not a JSON object"
    except ValueError:
        return "not valid JSON"


def _type_problem(field: Mapping[str, Any], value: str) -> str:
    """What is wrong with a non-empty cell under its field's type and constraints ("" if
    nothing)."""
    kind, limits = field["type"], field.get("constraints", {})
    number: float | None = None
    problem = ""
    if kind in ("number", "integer"):
        number, problem = _number_problem(kind, value)
    elif kind == "boolean" and value not in ("true", "false"):
        problem = f"{value!r} is not true or false"
    elif kind == "datetime":
        problem = _datetime_problem(value, field.get("format", _DATETIME_FORMAT))
    elif kind == "any" and field["name"] == "exifData":
        problem = _json_object_problem(value)
    if problem:
        return problem
    if number is not None and "minimum" in limits and number < limits["minimum"]:
        return f"{value} is below the minimum {limits['minimum']}"
    if number is not None and "maximum" in limits and number > limits["maximum"]:
        return f"{value} is above the maximum {limits['maximum']}"
    if "enum" in limits and value not in limits["enum"]:
        return f"{value!r} is not one of {', '.join(map(str, limits['enum']))}"
    if "pattern" in limits and not re.fullmatch(limits["pattern"], value):
        return f"{value!r} does not match the pattern {limits['pattern']}"
    return ""


def check_table(
    name: str,
    header: Sequence[str],
    rows: Sequence[Mapping[str, str]],
    photos: Mapping[str, str] | None = None,
) -> list[Problem]:
    """Every problem of one table under its schema; `photos` names the photo of a record id."""
    schema = table_schema(name)
    key = schema["primaryKey"]
    named = photos or {}
    problems: list[Problem] = []
    expected = field_names(name)
    if tuple(header) != expected:
        problems.append(
            Problem(name, "header", "", f"the columns are not the schema's: {', '.join(expected)}")
        )
    missing = set(schema.get("missingValues", [""]))
    seen: dict[str, set[str]] = {}
    for number, row in enumerate(rows, start=2):
        record = row.get(key) or f"line {number}"
        for field in schema["fields"]:
            value = row.get(field["name"], "")
            limits = field.get("constraints", {})
            if value in missing:
                message = "required, empty" if limits.get("required") else ""
            else:
                message = _type_problem(field, value)
                if limits.get("unique") or field["name"] == key:
                    values = seen.setdefault(field["name"], set())
                    if value in values:
                        message = message or f"{value!r} appears twice"
                    values.add(value)
            if message:
                problems.append(
                    Problem(name, record, field["name"], message, photo=named.get(record, ""))
                )
    return problems


def check_foreign_keys(
    tables: Mapping[str, Sequence[Mapping[str, str]]], photos: Mapping[str, str] | None = None
) -> list[Problem]:
    """The media and observations rows whose deploymentID or mediaID names no row."""
    named = photos or {}
    problems: list[Problem] = []
    for name in ("media", "observations"):
        key = table_schema(name)["primaryKey"]
        for reference in table_schema(name).get("foreignKeys", []):
            column = reference["fields"]
            target = reference["reference"]
            known = {row.get(target["fields"], "") for row in tables.get(target["resource"], ())}
            for row in tables.get(name, ()):
                value = row.get(column, "")
                if value and value not in known:
                    record = row.get(key, "")
                    problems.append(
                        Problem(
                            name,
                            record,
                            column,
                            f"{value!r} names no row of {target['resource']}.csv",
                            photo=named.get(record, ""),
                        )
                    )
    return problems


def looks_like_formula(value: str) -> bool:
    """Whether a spreadsheet would run the cell as a formula (a plain number never)."""
    return value.startswith(FORMULA_STARTS) and csv_cell(value) != value


def formula_cells(
    tables: Mapping[str, Sequence[Mapping[str, str]]], photos: Mapping[str, str] | None = None
) -> list[Problem]:
    """A warning per cell a spreadsheet would run as a formula. Camtrap DP's values are data:
    the standard allows no leading quote, so they are written as they are."""
    named = photos or {}
    problems: list[Problem] = []
    for name in TABLES:
        key = table_schema(name)["primaryKey"]
        for row in tables.get(name, ()):
            for column, value in row.items():
                if value and looks_like_formula(value):
                    record = row.get(key, "")
                    problems.append(
                        Problem(
                            name,
                            record,
                            column,
                            f"{value[:40]!r} starts like a spreadsheet formula (written as it "
                            "is; open the CSV as text, docs/SPEC.md §4.2)",
                            WARNING,
                            named.get(record, ""),
                        )
                    )
    return problems


# --- datapackage.json ----------------------------------------------------------------------------


def _descriptor_problem(path: str, message: str) -> Problem:
    return Problem(DESCRIPTOR, path, "", message)


def _is_date(value: object) -> bool:
    if not isinstance(value, str) or not re.fullmatch(r"\d{4}-\d{2}-\d{2}", value):
        return False
    try:
        date.fromisoformat(value)
    except ValueError:
        return False
    return True


def _check_resources(descriptor: Mapping[str, Any]) -> Iterable[Problem]:
    resources_ = descriptor.get("resources")
    if not isinstance(resources_, list) or len(resources_) < 3:
        yield _descriptor_problem("resources", "needs the three tables")
        return
    names = [item.get("name") for item in resources_ if isinstance(item, dict)]
    for table in TABLES:
        if table not in names:
            yield _descriptor_problem("resources", f"has no {table} resource")
    for index, item in enumerate(resources_):
        if not isinstance(item, dict) or item.get("name") not in TABLES:
            continue
        where = f"resources[{index}]"
        for needed in ("name", "path", "profile", "schema"):
            if not item.get(needed):
                yield _descriptor_problem(where, f"has no {needed}")
        if item.get("profile") != "tabular-data-resource":
            yield _descriptor_problem(where, "profile must be tabular-data-resource")
        if not _VERSIONED.match(str(item.get("schema", ""))):
            yield _descriptor_problem(where, "schema must be the URL of a 1.0 table schema")


def _check_project(project: object) -> Iterable[Problem]:
    if not isinstance(project, dict):
        yield _descriptor_problem("project", "must be an object")
        return
    for needed in ("title", "samplingDesign", "captureMethod", "individualAnimals"):
        if needed not in project:
            yield _descriptor_problem(f"project.{needed}", "required, missing")
    if "observationLevel" not in project:
        yield _descriptor_problem("project.observationLevel", "required, missing")
    for text in ("id", "title", "acronym", "description"):
        if text in project and not isinstance(project[text], str):
            yield _descriptor_problem(f"project.{text}", "must be text")
    if "samplingDesign" in project and project["samplingDesign"] not in _SAMPLING_DESIGNS:
        yield _descriptor_problem("project.samplingDesign", "is not in the vocabulary")
    methods = project.get("captureMethod", [])
    if (
        not isinstance(methods, list)
        or not methods
        or len(set(map(str, methods))) != len(methods)
        or any(m not in _CAPTURE_METHODS for m in methods)
    ):
        yield _descriptor_problem("project.captureMethod", "must list activityDetection/timeLapse")
    if not isinstance(project.get("individualAnimals", False), bool):
        yield _descriptor_problem("project.individualAnimals", "must be true or false")
    levels = project.get("observationLevel", [])
    if not isinstance(levels, list) or any(level not in _LEVELS for level in levels):
        yield _descriptor_problem("project.observationLevel", "must list media/event")


def _check_licences(licences: object) -> Iterable[Problem]:
    if not isinstance(licences, list) or len(licences) < 2:
        yield _descriptor_problem("licenses", "needs a licence of scope data and one of media")
        return
    scopes = set()
    for index, item in enumerate(licences):
        where = f"licenses[{index}]"
        if not isinstance(item, dict):
            yield _descriptor_problem(where, "must be an object")
            continue
        scopes.add(item.get("scope"))
        if item.get("scope") not in ("data", "media"):
            yield _descriptor_problem(where, "scope must be data or media")
        if not item.get("name") and not item.get("path"):
            yield _descriptor_problem(where, "needs a name or a path")
    for scope in ("data", "media"):
        if scope not in scopes:
            yield _descriptor_problem("licenses", f"has no licence of scope {scope}")


def _check_contributors(contributors: object) -> Iterable[Problem]:
    if not isinstance(contributors, list) or not contributors:
        yield _descriptor_problem("contributors", "needs at least one contributor")
        return
    for index, person in enumerate(contributors):
        if not isinstance(person, dict) or not person.get("title"):
            yield _descriptor_problem(f"contributors[{index}]", "has no title")
        elif person.get("role", "contributor") not in _CONTRIBUTOR_ROLES:
            yield _descriptor_problem(f"contributors[{index}]", "role is not in the vocabulary")


def _check_coverage(descriptor: Mapping[str, Any]) -> Iterable[Problem]:
    """spatial, temporal and taxonomic."""
    spatial = descriptor.get("spatial")
    if not isinstance(spatial, dict) or "type" not in spatial:
        yield _descriptor_problem("spatial", "must be a GeoJSON object")
    temporal = descriptor.get("temporal", {})
    for end in ("start", "end"):
        if not isinstance(temporal, dict) or not _is_date(temporal.get(end)):
            yield _descriptor_problem(f"temporal.{end}", "must be a date YYYY-MM-DD")
    taxa = descriptor.get("taxonomic", [])
    if not isinstance(taxa, list):
        yield _descriptor_problem("taxonomic", "must be a list")
        return
    for index, taxon in enumerate(taxa):
        if not isinstance(taxon, dict) or not isinstance(taxon.get("scientificName"), str):
            yield _descriptor_problem(f"taxonomic[{index}]", "has no scientificName")
        elif taxon.get("taxonRank", "species") not in _TAXON_RANKS:
            yield _descriptor_problem(f"taxonomic[{index}]", "rank not allowed")


def check_descriptor(descriptor: Mapping[str, Any]) -> list[Problem]:
    """What in datapackage.json the Camtrap DP 1.0 profile would reject."""
    problems = [
        _descriptor_problem(needed, "required, missing")
        for needed in (
            "profile",
            "created",
            "contributors",
            "project",
            "spatial",
            "temporal",
            "taxonomic",
        )  # fmt: skip
        if needed not in descriptor
    ]
    problems += _check_resources(descriptor)
    if not _VERSIONED.match(str(descriptor.get("profile", ""))):
        problems.append(_descriptor_problem("profile", "must be the URL of the 1.0 profile"))
    created = descriptor.get("created")
    try:
        datetime.fromisoformat(str(created).replace("Z", "+00:00"))
    except ValueError:
        problems.append(_descriptor_problem("created", f"{created!r} is not a date and time"))
    problems += _check_contributors(descriptor.get("contributors", []))
    problems += _check_project(descriptor.get("project"))
    problems += _check_coverage(descriptor)
    if "licenses" in descriptor:
        problems += _check_licences(descriptor["licenses"])
    precision = descriptor.get("coordinatePrecision")
    if precision is not None and (
        isinstance(precision, bool) or not isinstance(precision, int | float)
    ):
        problems.append(_descriptor_problem("coordinatePrecision", "must be a number"))
    return problems


def check_package(
    tables: Mapping[str, Sequence[Mapping[str, str]]],
    descriptor: Mapping[str, Any],
    photos: Mapping[str, str] | None = None,
) -> list[Problem]:
    """Every problem of a package about to be written: the tables (each row under its schema,
    the foreign keys), datapackage.json, and the cells that start like formulas."""
    problems: list[Problem] = []
    for name in TABLES:
        problems += check_table(name, field_names(name), tables.get(name, ()), photos)
    problems += check_foreign_keys(tables, photos)
    problems += check_descriptor(descriptor)
    problems += formula_cells(tables, photos)
    return problems
