"""Camtrap DP 1.0 export of a query's judged camera-trap photos (https://camtrap-dp.tdwg.org/).

A package is a folder of four files: `datapackage.json` (the Frictionless Data Package with
Camtrap DP's profile: created, contributors, project, spatial, temporal, taxonomic, licenses),
`deployments.csv`, `media.csv` and `observations.csv`, each table as the standard's table schema
(version 1.0) describes it (docs/SPEC.md §4.2).

- Deployments: those holding a photo judged relevant; each with its place (the mean of its
  photos' GPS, published through the catalog's place rule: generalised, or the deployment left
  out when its place is withheld), its first and last capture time, its camera serial and model,
  and `timestampIssues` true where the frames' UTC offset is unknown.
- Media: every dated photo of those deployments (the blanks too: Camtrap DP counts effort from
  them) whose licence allows reuse (the others on request), its time in ISO 8601 with its UTC
  offset: EXIF's, else the deployment's time zone given by the user, else flagged unknown.
- Observations: per event holding a photo judged relevant, one event-level observation
  (`mediaID` empty, the event's first and last frame time) and one media-level observation per
  relevant frame; `observationType` animal, `classificationMethod` human, `classifiedBy` the
  judge, `classificationProbability` the judges' agreement where two or more judged, an
  adjudication in `observationTags`; lifeStage, sex and behavior from the judgments' attributes
  where Camtrap DP's vocabulary has the value (others go to `observationComments`).

Every package is checked before anything is written (`check_camtrap_dp`, engine/io/
camtrap_check.py); one a validator would reject is not written unless asked (`write_anyway`).
The four files are written beside their targets first and put in place only when all four are
complete, so a full disk, a read-only folder or a kill leaves no mixed package: the earlier one
stays whole, or (a kill between the renames) has no datapackage.json.

Written with the standard library. The `camtrapdp` package on PyPI (0.1.0, one release in 2024)
was compared: it reads and writes the three tables through pandas data frames (a dependency
Quadrat does not have), writes no `datapackage.json` and validates nothing; frictionless-py
validates but brings a large dependency tree for what the standard's schemas ask.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import io
import json
import os
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from types import TracebackType

from engine.catalog.library import Library
from engine.catalog.privacy import PlacePolicy
from engine.errors import BadInputError, QuadratError
from engine.files import atomic_output
from engine.io.camtrap_check import ERROR, WARNING, Problem, check_package
from engine.io.camtrap_sources import (
    deployment_names,
    read_sources,
    resolve_zone,
    taxon_lineage,
)
from engine.io.camtrap_tables import (
    DEFAULT_DETECTION_THRESHOLD,
    DEPLOYMENT_FIELDS,
    MEDIA_FIELDS,
    OBSERVATION_FIELDS,
    PROFILE,
    SCHEMAS,
    TABLES,
    VERSION,
    Built,
    LeftOutDeployment,
    Options,
    build_package,
    iso,
)
from engine.io.dwc import ListedPhoto, library_id
from engine.io.export import free_bytes, plain_write_errors, write_failure
from engine.judgments.attributes import attributes_for_query
from engine.judgments.queries import QueryStore

__all__ = [
    "DEPLOYMENT_FIELDS", "MEDIA_FIELDS", "NOTHING_TO_PUBLISH", "OBSERVATION_FIELDS", "PROFILE",
    "SCHEMAS", "TABLES", "VERSION", "CamtrapCheck", "CamtrapReport", "LeftOutDeployment",
    "PackageRejected", "Problem", "camtrap_package", "check_camtrap_dp", "export_camtrap_dp",
    "iso",
]  # fmt: skip

WHAT = "the Camtrap DP package"
NOTHING_TO_PUBLISH = "nothing to publish"
FILES = ("deployments.csv", "media.csv", "observations.csv", "datapackage.json")
INCLUDE_HINT = "include them with --include-restricted"
NAME_HINT = "give one with --scientific-name"
ZONE_HINT = "give their time zone with --timezone"
WRITE_ANYWAY_HINT = "list them with --check; write it all the same with --write-anyway"
_STALE_TEMP_S = 60  # a temporary file of ours older than this was left by a killed export
_TEMP = re.compile(
    r"^\.(?:deployments\.csv|media\.csv|observations\.csv|datapackage\.json)\.[0-9a-f]{12}\.tmp$"
)


@dataclass(frozen=True)
class CamtrapReport:
    """What an export wrote (or a check would write), and what a user should know about it."""

    folder: Path
    deployments: int
    media: int
    observations: int  # rows of observations.csv (event and media level)
    events: int  # events with an animal judged relevant
    machine: int = 0  # of the observations, those written from detections
    timestamp_issues: int = 0  # deployments whose frames' UTC offset is unknown
    without_offset: int = 0  # photos among them written as UTC, their offset unknown
    undated: int = 0  # photos of the deployments left out of media.csv: no capture time
    outside: int = 0  # relevant photos in no deployment (not exported)
    unplaced: tuple[str, ...] = ()  # deployments without GPS: latitude/longitude to fill in
    unnamed: int = 0  # observations without a scientific name
    restricted: int = 0  # photos whose licence does not allow reuse
    restricted_included: bool = False
    generalised: int = 0  # deployments whose place was generalised
    withheld: int = 0  # deployments left out: their place is withheld
    errors: int = 0  # problems a validator would reject the package for
    warnings: int = 0
    written: bool = True

    def summary(
        self,
        name_hint: str = NAME_HINT,
        include_hint: str = INCLUDE_HINT,
        zone_hint: str = ZONE_HINT,
    ) -> str:
        """The outcome in one line; the hints say how to name the observations' taxon, include
        restricted photos and give a time zone (the command line's options by default)."""
        head = (
            f"Camtrap DP package written to {self.folder}"
            if self.written
            else "Camtrap DP package checked, nothing written"
        )
        parts = [
            f"{head}: {self.deployments:,} deployments, {self.media:,} media, "
            f"{self.observations:,} observations ({self.events:,} events"
            + (f", {self.machine:,} from detections" if self.machine else "")
            + ")"
        ]
        if self.generalised or self.withheld:
            parts.append(
                f"deployment places: {self.generalised:,} generalised, {self.withheld:,} "
                "withheld (left out with their photos)"
            )
        if self.restricted:
            n = self.restricted
            parts.append(
                f"{n:,} with a restricted licence included"
                if self.restricted_included
                else f"{n:,} {'photo' if n == 1 else 'photos'} left out: their licence does "
                f"not allow reuse ({include_hint})"
            )
        if self.timestamp_issues:
            parts.append(
                f"{self.timestamp_issues:,} deployments with no known UTC offset: "
                f"{self.without_offset:,} times written as UTC, timestampIssues true ({zone_hint})"
            )
        if self.undated:
            parts.append(f"{self.undated:,} undated photos left out")
        if self.outside:
            parts.append(f"{self.outside:,} relevant photos in no deployment left out")
        if self.unplaced:
            parts.append(
                "no GPS for deployment(s) " + ", ".join(self.unplaced) + ": fill in "
                "latitude and longitude in deployments.csv before publishing"
            )
        if self.unnamed:
            parts.append(f"{self.unnamed:,} observations without a scientific name ({name_hint})")
        if self.errors or self.warnings:
            parts.append(f"{self.errors:,} errors, {self.warnings:,} warnings")
        return "; ".join(parts)


@dataclass(frozen=True)
class CamtrapCheck:
    """The pre-flight check of a package: its problems per record, and what would be left out
    (or moved) and why. Nothing is written to make it."""

    report: CamtrapReport
    problems: tuple[Problem, ...] = ()
    restricted: tuple[ListedPhoto, ...] = ()  # left out unless included
    undated: tuple[ListedPhoto, ...] = ()
    outside: tuple[ListedPhoto, ...] = ()  # relevant photos in no deployment
    withheld: tuple[LeftOutDeployment, ...] = ()
    generalised: tuple[LeftOutDeployment, ...] = field(default=())

    @property
    def errors(self) -> tuple[Problem, ...]:
        return tuple(p for p in self.problems if p.severity == ERROR)

    @property
    def warnings(self) -> tuple[Problem, ...]:
        return tuple(p for p in self.problems if p.severity == WARNING)

    @property
    def rejected(self) -> bool:
        """Whether a validator of the standard would reject the package."""
        return bool(self.errors)


class PackageRejected(QuadratError):
    """A package the pre-flight check found invalid was not written; `check` lists why."""

    def __init__(self, check: CamtrapCheck) -> None:
        first = check.errors[0].line if check.errors else ""
        count = len(check.errors)
        super().__init__(
            f"the Camtrap DP package was not written: {count:,} "
            f"{'problem' if count == 1 else 'problems'} would make it invalid (first: {first}); "
            f"{WRITE_ANYWAY_HINT}"
        )
        self.check = check


def _warnings(built: Built) -> list[Problem]:
    """What the user should know before publishing, per record."""
    found = [
        Problem(
            "deployments",
            key,
            "timestampIssues",
            "the frames' UTC offset is unknown: times written as UTC, timestampIssues true "
            f"({ZONE_HINT})",
            WARNING,
        )
        for key in built.timestamp_issues
    ]
    found += [
        Problem("observations", key, "scientificName", f"no scientific name ({NAME_HINT})", WARNING)
        for key, row in ((r["observationID"], r) for r in built.tables["observations"])
        # A detector's box without a classifier's taxon is what it is, not a judge's omission.
        if not row.get("scientificName") and row.get("classificationMethod") != "machine"
    ]
    if not built.tables["observations"]:
        found.append(
            Problem(
                "observations",
                "",
                "",
                f"{NOTHING_TO_PUBLISH}: no observation (see the records left out, and why)",
                ERROR,
            )
        )
    if "licenses" not in built.descriptor and built.tables["media"]:
        found.append(
            Problem(
                "datapackage.json",
                "licenses",
                "",
                "no media licence allows reuse: the package states no licences",
                WARNING,
            )
        )
    return found


def _csv(fields: Sequence[str], rows: Iterable[Mapping[str, str]]) -> bytes:
    buffer = io.StringIO(newline="")
    writer = csv.DictWriter(buffer, fieldnames=list(fields), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({name: row.get(name, "") for name in fields})
    return buffer.getvalue().encode("utf-8")


def _build(
    library: Library,
    query_id: int,
    options: Options,
) -> tuple[Built, CamtrapCheck]:
    """The package's rows and its pre-flight check."""
    from engine.judgments.adjudication import certificates

    for zone in (options.timezone, *options.deployment_timezones.values()):
        if zone is not None:
            resolve_zone(zone)  # a bad zone fails before anything is read
    sources = read_sources(library, query_id, min_confidence=options.detection_threshold)
    unknown = set(options.deployment_timezones) - {
        name for d in sources.deployments.values() for name in deployment_names(d)
    }
    if unknown:
        raise BadInputError("no deployment of this package is named " + ", ".join(sorted(unknown)))
    options = replace(options, creator=options.creator or QueryStore(library).user)
    certified = certificates(library, [query_id]).get(query_id)
    built = build_package(
        sources,
        PlacePolicy.of(library.catalog, use_list=options.sensitive_taxa),
        library_id(library),
        attributes_for_query(library, query_id),
        options,
        taxon_lineage(library, options.scientific_name),
        certified.text() if certified is not None else "",
    )
    problems = check_package(built.tables, built.descriptor, built.photos) + _warnings(built)
    report = CamtrapReport(
        Path(),
        len(built.tables["deployments"]),
        len(built.tables["media"]),
        len(built.tables["observations"]),
        built.events,
        built.machine,
        timestamp_issues=len(built.timestamp_issues),
        without_offset=built.without_offset,
        undated=len(built.undated),
        outside=len(built.outside),
        unplaced=tuple(built.unplaced),
        unnamed=built.unnamed,
        restricted=len(built.restricted),
        restricted_included=options.include_restricted,
        generalised=len(built.generalised),
        withheld=len(built.withheld),
        errors=sum(p.severity == ERROR for p in problems),
        warnings=sum(p.severity == WARNING for p in problems),
        written=False,
    )
    check = CamtrapCheck(
        report,
        tuple(problems),
        tuple(built.restricted),
        tuple(built.undated),
        tuple(built.outside),
        tuple(built.withheld),
        tuple(built.generalised),
    )
    return built, check


def check_camtrap_dp(
    library: Library,
    query_id: int,
    *,
    scientific_name: str | None = None,
    creator: str | None = None,
    timezone: str | None = None,
    deployment_timezones: Mapping[str, str] | None = None,
    include_restricted: bool = False,
    sensitive_taxa: bool = True,
    detection_threshold: float | None = DEFAULT_DETECTION_THRESHOLD,
) -> CamtrapCheck:
    """The pre-flight check of a query's package, writing nothing: its problems per record
    (errors a validator would reject it for, warnings) and the records left out and why."""
    options = Options.of(
        scientific_name=scientific_name,
        creator=creator,
        timezone=timezone,
        deployment_timezones=deployment_timezones,
        include_restricted=include_restricted,
        sensitive_taxa=sensitive_taxa,
        detection_threshold=detection_threshold,
    )
    return _build(library, query_id, options)[1]


def camtrap_package(
    library: Library,
    query_id: int,
    *,
    scientific_name: str | None = None,
    creator: str | None = None,
    now: datetime | None = None,
    timezone: str | None = None,
    deployment_timezones: Mapping[str, str] | None = None,
    include_restricted: bool = False,
    sensitive_taxa: bool = True,
    detection_threshold: float | None = DEFAULT_DETECTION_THRESHOLD,
) -> tuple[dict[str, bytes], CamtrapReport]:
    """The package's files (name -> bytes) for a saved query, and its report (its `folder`
    empty, `written` false). `scientific_name`: the taxon of the observations where the photos
    name none; `timezone`: an IANA zone or a UTC offset for frames without one (per deployment
    name in `deployment_timezones`); `sensitive_taxa` False leaves the lab's list out."""
    options = Options.of(
        scientific_name=scientific_name,
        creator=creator,
        now=now,
        timezone=timezone,
        deployment_timezones=deployment_timezones,
        include_restricted=include_restricted,
        sensitive_taxa=sensitive_taxa,
        detection_threshold=detection_threshold,
    )
    files, check = _package_files(library, query_id, options)
    return files, check.report


def _package_files(
    library: Library, query_id: int, options: Options
) -> tuple[dict[str, bytes], CamtrapCheck]:
    built, check = _build(library, query_id, options)
    tables = built.tables
    files = {
        "deployments.csv": _csv(DEPLOYMENT_FIELDS, tables["deployments"]),
        "media.csv": _csv(MEDIA_FIELDS, tables["media"]),
        "observations.csv": _csv(OBSERVATION_FIELDS, tables["observations"]),
        "datapackage.json": (
            json.dumps(built.descriptor, indent=2, ensure_ascii=False) + "\n"
        ).encode("utf-8"),
    }
    return files, check


def export_camtrap_dp(
    library: Library,
    query_id: int,
    folder: str | os.PathLike[str],
    *,
    scientific_name: str | None = None,
    creator: str | None = None,
    timezone: str | None = None,
    deployment_timezones: Mapping[str, str] | None = None,
    include_restricted: bool = False,
    sensitive_taxa: bool = True,
    write_anyway: bool = False,
    detection_threshold: float | None = DEFAULT_DETECTION_THRESHOLD,
) -> CamtrapReport:
    """Write the Camtrap DP package of a saved query into `folder` (made if missing), after its
    pre-flight check: a package the check finds invalid raises `PackageRejected` and writes
    nothing, unless `write_anyway`. The four files replace the earlier ones together (module
    docstring); a full or read-only disk fails in one line and leaves the earlier package."""
    options = Options.of(
        scientific_name=scientific_name,
        creator=creator,
        timezone=timezone,
        deployment_timezones=deployment_timezones,
        include_restricted=include_restricted,
        sensitive_taxa=sensitive_taxa,
        detection_threshold=detection_threshold,
    )
    return export_checked(library, query_id, folder, options, write_anyway=write_anyway)[0]


def export_checked(
    library: Library,
    query_id: int,
    folder: str | os.PathLike[str],
    options: Options,
    *,
    write_anyway: bool = False,
) -> tuple[CamtrapReport, CamtrapCheck]:
    """`export_camtrap_dp` with its options as one `Options`, returning the check as well."""
    files, check = _package_files(library, query_id, options)
    if check.rejected and not write_anyway:
        raise PackageRejected(check)
    target = Path(folder).expanduser()
    write_package(target, files)
    return replace(check.report, folder=target, written=True), check


# --- writing, all four or none ---------------------------------------------------------------------


def _remove_stale_temps(target: Path) -> None:
    """Temporary files a killed export left in the folder (ours by name, and old)."""
    with contextlib.suppress(OSError):
        for entry in os.scandir(target):
            if _TEMP.match(entry.name) and entry.is_file(follow_symlinks=False):
                with contextlib.suppress(OSError):
                    if time.time() - entry.stat(follow_symlinks=False).st_mtime > _STALE_TEMP_S:
                        os.unlink(entry.path)


class _RemoveOldDescriptor:
    """Before the tables are renamed into place, the earlier descriptor goes, so that a kill
    between the renames leaves no package that claims to be complete."""

    def __init__(self, descriptor: Path) -> None:
        self.descriptor = descriptor

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if kind is None:
            self.descriptor.unlink(missing_ok=True)


def write_package(target: Path, files: Mapping[str, bytes]) -> None:
    """Write the package's files into `target`: each to a temporary file beside its name,
    flushed to disk, and only when all are complete renamed into place (datapackage.json
    last). Any failure removes the temporary files and leaves the folder as it was."""
    total = sum(len(data) for data in files.values())
    parent = target.absolute()
    free = free_bytes(parent)
    if free is not None and total > free:
        raise write_failure(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), parent, WHAT, total)
    made = not target.exists()
    try:
        with plain_write_errors(target / FILES[-1], WHAT, total):
            target.mkdir(parents=True, exist_ok=True)
            _remove_stale_temps(target)
            with contextlib.ExitStack() as stack:
                # Entered descriptor first: the stack renames in reverse, so it is renamed last.
                for name in reversed(FILES):
                    handle, _ = stack.enter_context(atomic_output(target / name))
                    handle.write(files[name])
                    handle.flush()
                    os.fsync(handle.fileno())  # a full disk shows here, before any rename
                stack.enter_context(_RemoveOldDescriptor(target / FILES[-1]))
    except BaseException:
        if made:  # the folder this export made, empty again: taken back
            with contextlib.suppress(OSError):
                target.rmdir()
        raise
