"""The rows of a Camtrap DP package's three tables and its datapackage.json, built from what
`engine.io.camtrap_sources` read and decided (docs/SPEC.md §4.2).

Nothing here writes a file: `build_package` returns the tables as rows of text, the descriptor,
and what was left out or changed and why, so the same build serves the pre-flight check (which
writes nothing) and the export.
"""

from __future__ import annotations

import mimetypes
import os
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engine import quadrat_version
from engine.catalog.privacy import GENERALISED, NO_PLACE, WITHHELD, PlacePolicy
from engine.detections.records import StoredDetection
from engine.io.camtrap_check import field_names
from engine.io.camtrap_sources import (
    CameraDeployment,
    Frame,
    Sources,
    Verdict,
    place_of,
    set_times,
    zone_for,
)
from engine.io.dwc import ListedPhoto, dataset_licence
from engine.judgments.attributes import PIPE
from engine.licences import Licence, read_licence

VERSION = "1.0"
_BASE = f"https://raw.githubusercontent.com/tdwg/camtrap-dp/{VERSION}/"
PROFILE = _BASE + "camtrap-dp-profile.json"
TABLES = ("deployments", "media", "observations")
SCHEMAS = {name: f"{_BASE}{name}-table-schema.json" for name in TABLES}
DEPLOYMENT_FIELDS = field_names("deployments")
MEDIA_FIELDS = field_names("media")
OBSERVATION_FIELDS = field_names("observations")

# Camtrap DP's own vocabularies for the attributes judges set with Darwin Core's.
_LIFE_STAGES = ("adult", "subadult", "juvenile")
_SEXES = ("female", "male")
# Attribute terms Camtrap DP has no column for: kept in observationComments, never dropped.
_COMMENT_TERMS = ("reproductiveCondition", "vitality", "associatedTaxa")
# MegaDetector's own advice for its v5 output: boxes under 0.2 are mostly not animals.
DEFAULT_DETECTION_THRESHOLD = 0.2
# A detector's category as Camtrap DP's observationType.
_OBSERVATION_TYPES = {"animal": "animal", "person": "human", "vehicle": "vehicle"}
# Classifier labels that name no taxon (SpeciesNet's and the usual words).
_NOT_TAXA = frozenset(
    {"blank", "empty", "animal", "human", "person", "vehicle", "unknown", "no cv result"}
)
# A scientific name: a capitalised genus or higher taxon, then lower-case epithets.
_TAXON = re.compile(r"^[A-Z][a-z]+(?: [a-z][a-z-]+){0,2}$")


@dataclass(frozen=True)
class Options:
    """What the user chose for a package."""

    scientific_name: str | None = None
    creator: str = ""
    now: datetime | None = None
    timezone: str | None = None  # for frames without a UTC offset, every deployment
    deployment_timezones: Mapping[str, str] = field(default_factory=dict)  # by name
    include_restricted: bool = False
    sensitive_taxa: bool = True  # the lab's list applied to the places (§4.3)
    # Detector boxes below this confidence are not written (labels without one always are);
    # None writes every box.
    detection_threshold: float | None = DEFAULT_DETECTION_THRESHOLD

    @classmethod
    def of(
        cls,
        *,
        scientific_name: str | None = None,
        creator: str | None = None,
        now: datetime | None = None,
        timezone: str | None = None,
        deployment_timezones: Mapping[str, str] | None = None,
        include_restricted: bool = False,
        sensitive_taxa: bool = True,
        detection_threshold: float | None = DEFAULT_DETECTION_THRESHOLD,
    ) -> Options:
        """The options as the public functions take them (empty text counts as none)."""
        return cls(
            scientific_name or None,
            creator or "",
            now,
            timezone or None,
            dict(deployment_timezones or {}),
            include_restricted,
            sensitive_taxa,
            detection_threshold,
        )


@dataclass(frozen=True)
class LeftOutDeployment:
    """A deployment not in the package (or moved), with how many photos and why."""

    name: str
    photos: int
    reason: str


@dataclass
class Built:
    """A package as rows and a descriptor, and what the user should be told about it."""

    tables: dict[str, list[dict[str, str]]]
    descriptor: dict[str, Any]
    photos: dict[str, str]  # record id (mediaID, observationID) -> the photo's path
    events: int = 0
    restricted: list[ListedPhoto] = field(default_factory=list)
    undated: list[ListedPhoto] = field(default_factory=list)
    outside: list[ListedPhoto] = field(default_factory=list)
    withheld: list[LeftOutDeployment] = field(default_factory=list)
    generalised: list[LeftOutDeployment] = field(default_factory=list)
    unplaced: list[str] = field(default_factory=list)
    timestamp_issues: list[str] = field(default_factory=list)  # deploymentIDs
    unnamed: int = 0
    without_offset: int = 0  # media written as UTC: their UTC offset is unknown
    machine: int = 0  # observations written from detections (boxes and labels)
    licences: list[Licence] = field(default_factory=list)  # of the media written


def iso(moment: datetime) -> str:
    """A time as Camtrap DP writes it: ISO 8601 to the second, with its offset (Z for UTC)."""
    text = moment.isoformat(timespec="seconds")
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def _number(value: float, places: int = 6) -> str:
    text = f"{value:.{places}f}".rstrip("0").rstrip(".")
    return "0" if text in ("", "-0") else text


def _media_type(rel_path: str) -> str:
    guessed = mimetypes.guess_type(rel_path)[0]
    if guessed and guessed.split("/")[0] in ("image", "video", "audio"):
        return guessed
    return "image/x-" + (Path(rel_path).suffix.lower().lstrip(".") or "unknown")


def _file_path(rel_path: str) -> str:
    """A path as the media schema's pattern allows (relative, no "..", not starting with ".",
    "/" or "~")."""
    parts = [p for p in rel_path.replace(os.sep, "/").split("/") if p not in ("", ".", "..")]
    text = "/".join(parts)
    return "_" + text if text[:1] in (".", "~") else text


def _judged_time(verdict: Verdict) -> str:
    at = verdict.judged_at
    return iso(at if at.tzinfo else at.replace(tzinfo=UTC))  # the catalog keeps UTC


def attribute_columns(values: Mapping[str, str]) -> dict[str, str]:
    """lifeStage, sex and behavior in Camtrap DP's vocabularies; what they cannot hold goes to
    observationComments (said, never dropped)."""
    out: dict[str, str] = {}
    notes: list[str] = []
    for term, vocabulary in (("lifeStage", _LIFE_STAGES), ("sex", _SEXES)):
        value = values.get(term, "")
        if value and value.lower() in vocabulary:
            out[term] = value.lower()
        elif value:
            notes.append(f"{term}: {value}")
    if values.get("behavior"):
        out["behavior"] = values["behavior"]
    notes += [f"{term}: {values[term]}" for term in _COMMENT_TERMS if values.get(term)]
    if values.get("occurrenceRemarks"):
        notes.append(values["occurrenceRemarks"])
    if notes:
        out["observationComments"] = PIPE.join(notes)
    return out


def _how_decided(verdict: Verdict) -> dict[str, str]:
    """classificationProbability, tags and a comment saying how a photo's judgment was made:
    the share of judges who judged it relevant where two or more did, and an adjudication."""
    out: dict[str, str] = {}
    share = verdict.agreement
    yes = sum(1 for mark in verdict.marks.values() if mark > 0)
    if verdict.adjudicated:
        out["observationTags"] = "adjudicated:true"
        judges = (
            f" ({yes} of {len(verdict.marks)} judges judged it relevant)"
            if share is not None
            else ""
        )
        out["observationComments"] = f"adjudicated by {verdict.judged_by or 'unknown'}{judges}"
    elif share is not None:
        out["classificationProbability"] = _number(share, 3)
        out["observationComments"] = f"{yes} of {len(verdict.marks)} judges judged it relevant"
    return out


def _merge_comments(*parts: Mapping[str, str]) -> dict[str, str]:
    merged: dict[str, str] = {}
    for part in parts:
        for key, value in part.items():
            if key == "observationComments" and merged.get(key):
                merged[key] = merged[key] + PIPE + value
            elif value:
                merged[key] = value
    return merged


class _Builder:
    """One package's rows, deployment by deployment."""

    def __init__(
        self,
        sources: Sources,
        policy: PlacePolicy,
        base: uuid.UUID,
        attributes: Mapping[int, Mapping[str, str]],
        options: Options,
        names: Sequence[str],
    ) -> None:
        self.sources = sources
        self.policy = policy
        self.base = base
        self.attributes = attributes
        self.options = options
        self.names = names  # the observations' taxon with its lineage (sensitive taxa)
        self.built = Built({name: [] for name in TABLES}, {}, {})
        self.points: list[tuple[float, float]] = []
        self.moments: list[datetime] = []
        self.taxa: set[str] = set()
        self.cells: list[float] = []
        self.observed: list[int] = []  # photos with a media-level observation

    def relevant(self, frame: Frame) -> bool:
        verdict = self.sources.verdicts.get(frame.image_id)
        return verdict is not None and verdict.relevance > 0

    def kept_frames(self, deployment: CameraDeployment) -> list[Frame]:
        """The frames that may go: reusable, or restricted ones the user asked for."""
        kept = []
        for frame in deployment.frames:
            if frame.licence.reusable or self.options.include_restricted:
                kept.append(frame)
            if not frame.licence.reusable:
                reason = f"licence: {frame.licence.text or 'unknown'}"
                self.built.restricted.append(ListedPhoto(frame.image_id, frame.path, reason))
        return kept

    def add(self, deployment: CameraDeployment) -> None:
        kept = self.kept_frames(deployment)
        if not any(self.relevant(f) for f in kept):
            return  # every relevant photo of it left out for its licence
        zone = zone_for(deployment, self.options.timezone, self.options.deployment_timezones)
        set_times(deployment, zone)
        # A classifier's taxa count for the place rule as a judge's do: a sensitive species
        # named by a label hides its place too.
        labels = [t for f in kept for t in self.detection_taxa(f.image_id)]
        place, cell = place_of(self.policy, deployment, [*self.names, *labels])
        if place.decision == WITHHELD:
            reason = place.information_withheld or place.reason
            self.built.withheld.append(
                LeftOutDeployment(deployment.key, len(deployment.frames), reason)
            )
            return
        for frame in kept:
            if frame.moment is None:
                self.built.undated.append(ListedPhoto(frame.image_id, frame.path, "no date"))
        dated = [f for f in kept if f.moment is not None]
        row = self.deployment_row(deployment, dated)
        if place.decision == NO_PLACE:
            self.built.unplaced.append(deployment.key)
        else:
            assert place.latitude is not None and place.longitude is not None
            row["latitude"], row["longitude"] = _number(place.latitude), _number(place.longitude)
            self.points.append((place.longitude, place.latitude))
        if place.decision == GENERALISED:
            if place.uncertainty_m is not None:
                row["coordinateUncertainty"] = str(max(1, round(place.uncertainty_m)))
            if cell is not None:
                self.cells.append(cell)
            words = place.data_generalizations or place.reason
            row["deploymentComments"] = _join(row.get("deploymentComments", ""), words)
            self.built.generalised.append(
                LeftOutDeployment(deployment.key, len(deployment.frames), place.reason)
            )
        self.built.tables["deployments"].append(row)
        media_ids = self.media_rows(deployment, dated)
        self.observation_rows(deployment, dated, media_ids)
        self.detection_rows(deployment, dated, media_ids)

    def deployment_row(self, deployment: CameraDeployment, dated: list[Frame]) -> dict[str, str]:
        row: dict[str, str] = {
            "deploymentID": deployment.key,
            "locationID": deployment.row.folder,
            "locationName": deployment.row.folder or deployment.key,
            "cameraID": deployment.row.camera_serial,
            "cameraModel": deployment.camera,
            "timestampIssues": "true" if deployment.timestamp_issues else "false",
        }
        every = [f.moment for f in deployment.frames if f.moment is not None]
        if every:
            row["deploymentStart"], row["deploymentEnd"] = iso(min(every)), iso(max(every))
            self.moments.extend((min(every), max(every)))
        notes = []
        if deployment.row.clock_offset_s:
            notes.append(f"camera clock corrected by {deployment.row.clock_offset_s:+d} s")
        if deployment.time_note:
            notes.append(deployment.time_note)
        if deployment.timestamp_issues:
            self.built.timestamp_issues.append(deployment.key)
        row["deploymentComments"] = "; ".join(notes)
        return row

    def media_rows(self, deployment: CameraDeployment, dated: list[Frame]) -> dict[int, str]:
        media_ids: dict[int, str] = {}
        for frame in dated:
            assert frame.moment is not None
            media_id = str(uuid.uuid5(self.base, f"image/{frame.image_id}"))
            media_ids[frame.image_id] = media_id
            self.built.photos[media_id] = frame.path
            self.built.licences.append(frame.licence)
            self.built.without_offset += frame.offset_unknown
            self.built.tables["media"].append(
                {
                    "mediaID": media_id,
                    "deploymentID": deployment.key,
                    "captureMethod": "activityDetection",
                    "timestamp": iso(frame.moment),
                    "filePath": _file_path(frame.rel_path),
                    "filePublic": "false",  # photos on a local disk, not published
                    "fileName": Path(frame.rel_path).name,
                    "fileMediatype": _media_type(frame.rel_path),
                }
            )
        return media_ids

    def observation_rows(
        self, deployment: CameraDeployment, dated: list[Frame], media_ids: dict[int, str]
    ) -> None:
        events: dict[int, list[Frame]] = {}
        for frame in dated:
            events.setdefault(frame.event_id or frame.image_id, []).append(frame)
        for event_id, frames in events.items():
            relevant = [f for f in frames if self.relevant(f)]
            if relevant:
                self.event(deployment, event_id, frames, relevant, media_ids)

    def detection_taxa(self, image_id: int) -> list[str]:
        """The taxa (with their higher names) a classifier gave the photo's detections."""
        return [
            name
            for d in self.sources.detections.get(image_id, [])
            if d.record.label and is_taxon(d.record.label)
            for name in self.sources.lineages.get(d.record.label, (d.record.label,))
        ]

    def detection_rows(
        self, deployment: CameraDeployment, dated: list[Frame], media_ids: dict[int, str]
    ) -> None:
        """One media-level observation per detection on the package's media: its box, its
        detector's category, its classifier's taxon, how and by what it was classified."""
        threshold = self.options.detection_threshold
        rows = self.built.tables["observations"]
        for frame in dated:
            assert frame.moment is not None
            for detection in self.sources.detections.get(frame.image_id, []):
                record = detection.record
                if (
                    threshold is not None
                    and record.confidence is not None
                    and record.confidence < threshold
                ):
                    continue
                key = str(uuid.uuid5(self.base, f"observation/detection/{detection.id}"))
                self.built.photos[key] = frame.path
                rows.append(
                    {
                        "observationID": key,
                        "deploymentID": deployment.key,
                        "mediaID": media_ids[frame.image_id],
                        "eventID": str(
                            uuid.uuid5(self.base, f"event/{frame.event_id or frame.image_id}")
                        ),
                        "eventStart": iso(frame.moment),
                        "eventEnd": iso(frame.moment),
                        "observationLevel": "media",
                        **self.detection_cells(detection),
                    }
                )
                self.built.machine += 1

    def detection_cells(self, detection: StoredDetection) -> dict[str, str]:
        record = detection.record
        taxon = record.label if record.label and is_taxon(record.label) else ""
        if taxon:
            self.taxa.add(taxon)
        kind = _OBSERVATION_TYPES.get(record.category or "")
        if kind is None:
            blank = record.label is not None and record.label.lower() in ("blank", "empty")
            kind = "animal" if taxon else "blank" if blank else "unknown"
        method = record.classification_method or "machine"
        probability = record.label_probability if record.label else None
        if probability is None:
            probability = record.confidence if method == "machine" else None
        cells = {
            "observationType": kind,
            "scientificName": taxon,
            "count": str(record.count) if record.count else "",
            "classificationMethod": method,
            "classifiedBy": self.sources.models.get(detection.source_id, "")
            if method == "machine"
            else "",
            "classificationProbability": _number(probability, 4) if probability is not None else "",
        }
        if record.label and not taxon:
            cells["observationComments"] = f"classifier label: {record.label}"
        if record.box is not None:
            box = record.box
            cells.update(
                bboxX=_number(box.x),
                bboxY=_number(box.y),
                # The schema asks for a positive side: a box under a millionth stays one.
                bboxWidth=_number(max(box.width, 1e-6)),
                bboxHeight=_number(max(box.height, 1e-6)),
            )
        return cells

    def event(
        self,
        deployment: CameraDeployment,
        event_id: int,
        frames: list[Frame],
        relevant: list[Frame],
        media_ids: dict[int, str],
    ) -> None:
        verdicts = self.sources.verdicts
        self.built.events += 1
        times = [f.moment for f in frames if f.moment is not None]
        taxon = next((f.taxon for f in relevant if f.taxon), None)
        taxon = taxon or self.options.scientific_name or ""
        if taxon:
            self.taxa.add(taxon)
        shared = {
            "deploymentID": deployment.key,
            "eventID": str(uuid.uuid5(self.base, f"event/{event_id}")),
            "eventStart": iso(min(times)),
            "eventEnd": iso(max(times)),
            "observationType": "animal",
            "scientificName": taxon,
            "classificationMethod": "human",
        }
        last = verdicts[max(relevant, key=lambda f: verdicts[f.image_id].judged_at).image_id]
        values = next(
            (self.attributes[f.image_id] for f in relevant if f.image_id in self.attributes), {}
        )
        adjudicated = any(verdicts[f.image_id].adjudicated for f in relevant)
        event_key = str(uuid.uuid5(self.base, f"observation/event/{event_id}"))
        rows = self.built.tables["observations"]
        rows.append(
            {
                **shared,
                "observationID": event_key,
                "observationLevel": "event",
                "classifiedBy": last.judged_by or "",
                "classificationTimestamp": _judged_time(last),
                **_merge_comments(
                    attribute_columns(values),
                    {"observationTags": "adjudicated:true"} if adjudicated else {},
                ),
            }
        )
        for frame in relevant:
            verdict = verdicts[frame.image_id]
            assert frame.moment is not None
            key = str(uuid.uuid5(self.base, f"observation/media/{frame.image_id}"))
            self.built.photos[key] = frame.path
            self.observed.append(frame.image_id)
            rows.append(
                {
                    **shared,
                    "observationID": key,
                    "mediaID": media_ids[frame.image_id],
                    "eventStart": iso(frame.moment),
                    "eventEnd": iso(frame.moment),
                    "observationLevel": "media",
                    "classifiedBy": verdict.judged_by or "",
                    "classificationTimestamp": _judged_time(verdict),
                    **_merge_comments(
                        attribute_columns(self.attributes.get(frame.image_id, {})),
                        _how_decided(verdict),
                    ),
                }
            )
        self.built.unnamed += 0 if taxon else 1 + len(relevant)


def is_taxon(label: str) -> bool:
    """Whether a classifier's label is a scientific name ("Vulpes vulpes", "Cervidae"), not a
    common word ("blank", "animal") or a common name ("red fox")."""
    return label.lower() not in _NOT_TAXA and bool(_TAXON.match(label))


def _join(first: str, second: str) -> str:
    return "; ".join(part for part in (first, second) if part)


def build_package(
    sources: Sources,
    policy: PlacePolicy,
    base: uuid.UUID,
    attributes: Mapping[int, Mapping[str, str]],
    options: Options,
    names: Sequence[str],
    certificate: str,
) -> Built:
    """The package's rows and descriptor (see the module docstring); `certificate`: the
    query's certified recall in words ("" when none was recorded)."""
    builder = _Builder(sources, policy, base, attributes, options, names)
    for deployment in sources.deployments.values():
        builder.add(deployment)
    built = builder.built
    _media_licence_comments(built)
    built.outside = [ListedPhoto(i, path, "in no deployment") for i, path in sources.outside]
    judges = sorted(
        {v.judged_by for v in sources.verdicts.values() if v.judged_by and v.relevance > 0}
    )
    built.descriptor = descriptor(
        sources,
        options,
        judges,
        builder.points,
        builder.moments,
        builder.taxa,
        licences(built.licences),
        max(builder.cells) if builder.cells else None,
        quality_text([sources.verdicts[i] for i in builder.observed], certificate),
    )
    if built.machine:
        built.descriptor["project"]["description"] += (
            f"\n\n{built.machine:,} media-level observations are a detector's boxes and a "
            "classifier's labels read into Quadrat (classificationMethod machine, classifiedBy "
            "the model, classificationProbability the label's probability or the box's "
            "confidence)."
        )
    return built


def _media_licence_comments(built: Built) -> None:
    """Each media row's own licence in mediaComments, where the package-level licences cannot
    say it: the media carry several, or some carry none that allows reuse (included on
    request)."""
    labels = {licence.label for licence in built.licences}
    if len(labels) < 2 and all(licence.reusable for licence in built.licences):
        return
    for row, licence in zip(built.tables["media"], built.licences, strict=True):
        words = licence.label if licence.recognised else (licence.text or "none recorded")
        row["mediaComments"] = f"licence: {words}"


def quality_text(verdicts: Sequence[Verdict], certificate: str) -> str:
    """The package's measured quality, for the project description (Markdown): precision as
    the share of its photos judged by two or more judges that every judge judged relevant,
    with Wilson's 95 % interval, the adjudications, and the certified recall where recorded."""
    from engine.judgments.attribute_questions import wilson_interval

    checked = [v for v in verdicts if len(v.marks) >= 2]
    agreed = sum(1 for v in checked if all(mark > 0 for mark in v.marks.values()))
    adjudicated = sum(1 for v in verdicts if v.adjudicated)
    lines = ["Quality of the observations, as measured in Quadrat:", ""]
    if checked:
        low, high = wilson_interval(agreed, len(checked))
        lines.append(
            f"- Precision: of the {len(checked):,} photos of this package that two or more "
            f"judges judged, {agreed:,} were judged relevant by every judge: "
            f"{agreed / len(checked):.3f} (95 % Wilson interval {low:.3f}–{high:.3f})."
        )
    else:
        lines.append(
            "- Precision: not measured (no photo of this package was judged by a second judge)."
        )
    if adjudicated:
        lines.append(
            f"- Adjudicated: {adjudicated:,} photo{'s' * (adjudicated != 1)} where judges "
            "disagreed, settled by an adjudicator (observationTags adjudicated:true)."
        )
    if certificate:
        lines.append(f"- Recall: {certificate}.")
    else:
        lines.append("- Recall: not certified (no certified recall was recorded for the query).")
    lines.append(
        f"- Observations: {len(verdicts):,} photos judged relevant by people "
        "(classificationMethod human, classifiedBy the judge; classificationProbability the "
        "share of judges who judged a photo relevant, where two or more judged it)."
    )
    return "\n".join(lines)


# --- datapackage.json ----------------------------------------------------------------------------


def _licence_entry(licence: Licence, scope: str) -> dict[str, str]:
    entry = {"name": licence.code, "path": licence.url, "title": licence.label, "scope": scope}
    return {key: value for key, value in entry.items() if value}


def licences(media: Sequence[Licence]) -> list[dict[str, str]]:
    """The package's `licenses`: the data's (the GBIF licence that respects every photo
    written, as the Darwin Core export chooses it) and each licence the media carry; none when
    no media licence is known (the profile asks for both scopes or no list at all)."""
    known: dict[str, Licence] = {}
    for licence in media:
        if licence.reusable and licence.code:
            known.setdefault(licence.code, licence)
    if not known:
        return []
    data = read_licence(dataset_licence(list(media))[0])
    return [
        _licence_entry(data, "data"),
        *(_licence_entry(licence, "media") for _, licence in sorted(known.items())),
    ]


def descriptor(
    sources: Sources,
    options: Options,
    judges: list[str],
    points: list[tuple[float, float]],
    moments: list[datetime],
    taxa: set[str],
    licence_list: list[dict[str, str]],
    precision: float | None,
    quality: str,
) -> dict[str, Any]:
    """datapackage.json: the resources and Camtrap DP's package properties."""
    query = sources.query
    title = query.name or query.text
    created = (options.now or datetime.now(UTC)).astimezone(UTC)
    contributors = [{"title": options.creator, "role": "contact"}] + [
        {"title": judge, "role": "contributor"} for judge in judges if judge != options.creator
    ]
    spatial: dict[str, Any] = {"type": "MultiPoint", "coordinates": []}
    if points:
        lons, lats = [p[0] for p in points], [p[1] for p in points]
        spatial["bbox"] = [round(v, 6) for v in (min(lons), min(lats), max(lons), max(lats))]
        spatial["coordinates"] = [[round(lon, 6), round(lat, 6)] for lon, lat in points]
    day = created.date().isoformat()
    temporal = {"start": day, "end": day}
    if moments:
        temporal = {
            "start": min(moments).date().isoformat(),
            "end": max(moments).date().isoformat(),
        }
    description = (
        f'Photos found with Quadrat for the query "{query.text}" and judged by people; '
        "observations are the events judged relevant."
    )  # then the measured quality
    if not options.sensitive_taxa:
        description += (
            " The lab's sensitive-taxa list was not applied to the places (records that "
            "withhold or obscure their place were respected)."
        )
    package: dict[str, Any] = {
        "resources": [
            {
                "name": name,
                "path": f"{name}.csv",
                "profile": "tabular-data-resource",
                "format": "csv",
                "mediatype": "text/csv",
                "encoding": "utf-8",
                "schema": SCHEMAS[name],
            }
            for name in TABLES
        ],
        "profile": PROFILE,
        "name": f"quadrat-query-{query.id}",
        "id": str(uuid.uuid4()),
        "created": iso(created),
        "title": f"Camera-trap observations of {title} judged with Quadrat",
        "contributors": contributors,
        "sources": [{"title": "Quadrat", "version": quadrat_version()}],
        "project": {
            "id": str(query.id),
            "title": title,
            "description": description + ("\n\n" + quality if quality else ""),
            "samplingDesign": "opportunistic",
            "captureMethod": ["activityDetection"],
            "individualAnimals": False,
            "observationLevel": ["media", "event"],
        },
        "spatial": spatial,
        "temporal": temporal,
        "taxonomic": [{"scientificName": name} for name in sorted(taxa)],
    }
    if licence_list:
        package["licenses"] = licence_list
    if precision is not None:
        package["coordinatePrecision"] = round(precision, 6)
    return package
