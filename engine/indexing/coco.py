"""Reading a COCO-style metadata file (docs/SPEC.md §3.2) into `ImageMeta` records, one record
at a time in one streaming pass: `load_coco_metadata` gives them as a dict (`CocoMetadata`)
with a tally of the impossible or unusable values it ignored (the first few logged);
`engine.indexing.metadata_store` keeps the same records on disk instead."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import ijson

from engine.errors import BadInputError
from engine.indexing.coco_stream import (
    OPENERS,
    JsonStream,
    Nested,
    read_record,
    skip_value,
    syntax_error,
)
from engine.indexing.metadata import (
    INT64_MAX,
    INT64_MIN,
    NOTES_FIELDS,
    NOTES_MAX_CHARS,
    ImageMeta,
    as_bool,
    as_float,
    as_geoprivacy,
    as_int,
    as_text,
    ignored_metadata_line,
    metadata_key,
    parse_date,
)
from engine.indexing.names import TaxonInfo, parse_inat_dirname
from engine.progress import ProgressCallback, RateMeter, no_progress

log = logging.getLogger(__name__)

READING_METADATA = "reading metadata"

_T = TypeVar("_T")


def _notes(fields: _Fields) -> str | None:
    """The record's notes: the first of NOTES_FIELDS with text, stripped and capped."""
    for key in NOTES_FIELDS:
        text = fields.get(key, as_text)
        if text is not None:
            return text[:NOTES_MAX_CHARS].rstrip()
    return None


def _short(value: object) -> str:
    """A few characters of a rejected value, for log examples."""
    if isinstance(value, str):
        return repr(value) if len(value) <= 30 else repr(value[:30]) + "…"
    try:
        text = str(value)  # a scalar from the parser: `JsonStream` caps its digits
    except ValueError:
        text = "a huge number"
    return text if len(text) <= 30 else text[:24] + "…"


class _Fields:
    """One record's fields, converted one by one; present values that cannot be used are noted."""

    __slots__ = ("_record", "issues")

    def __init__(self, record: dict[str, object]) -> None:
        self._record = record
        self.issues: list[str] = []

    def get(self, key: str, convert: Callable[[object], _T | None]) -> _T | None:
        value = self._record.get(key)
        if value is None:
            return None
        result = convert(value)
        if result is None and not (isinstance(value, str) and not value.strip()):
            if isinstance(value, Nested):
                self.issues.append(f"{key} is a list or object")
            elif isinstance(value, int) and not INT64_MIN <= value <= INT64_MAX:
                self.issues.append(f"{key} {_short(value)} is out of range")
            else:
                self.issues.append(f"{key} {_short(value)} is not usable")
        return result


def _taxon_from_category(category: _Fields, category_id: int | None) -> TaxonInfo | None:
    ranks = {
        key: category.get(key, as_text)
        for key in ("kingdom", "phylum", "class", "order", "family", "genus")
    }
    epithet = category.get("specific_epithet", as_text)
    dir_name = category.get("image_dir_name", as_text)
    from_dir = parse_inat_dirname(dir_name) if dir_name else None
    name = category.get("name", as_text)
    common_name = category.get("common_name", as_text)
    if name is None and ranks["genus"] and epithet:
        name = f"{ranks['genus']} {epithet}"
    if name is None:  # fall back to the deepest rank known
        name = next((r for r in reversed(ranks.values()) if r), None)
    if name is None and from_dir is not None:
        name = from_dir.name
    if name is None:
        return None

    def pick(value: str | None, fallback: str | None) -> str | None:
        return value if value is not None else fallback

    d = from_dir
    return TaxonInfo(
        name=name,
        kingdom=pick(ranks["kingdom"], d.kingdom if d else None),
        phylum=pick(ranks["phylum"], d.phylum if d else None),
        class_=pick(ranks["class"], d.class_ if d else None),
        order=pick(ranks["order"], d.order if d else None),
        family=pick(ranks["family"], d.family if d else None),
        genus=pick(ranks["genus"], d.genus if d else None),
        specific_epithet=pick(epithet, d.specific_epithet if d else None),
        common_name=common_name,
        category_id=category_id,
        image_dir_name=dir_name,
    )


def _licence_id(value: object) -> int | None:
    """An int licence value is an id into the top-level "licenses" list (resolved at the end)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return as_int(value)  # None (and noted) when out of range
    return None


def _read_place_privacy(record: dict[str, object], fields: _Fields, meta: ImageMeta) -> None:
    """What the record says about publishing its place. In iNaturalist's format a latitude or
    longitude given as null means the place is withheld (a private place, or a taxon whose
    places iNaturalist hides), not unknown: the photo's own GPS must then never stand in."""
    meta.geoprivacy = fields.get("geoprivacy", as_geoprivacy)
    meta.taxon_geoprivacy = fields.get("taxon_geoprivacy", as_geoprivacy)
    meta.coordinates_obscured = fields.get("coordinates_obscured", as_bool)
    meta.public_location_uncertainty = fields.get("public_positional_accuracy", _uncertainty)
    nulled = any(key in record and record[key] is None for key in ("latitude", "longitude"))
    hidden = "private" in (meta.geoprivacy, meta.taxon_geoprivacy) or bool(
        meta.coordinates_obscured
    )
    no_place = meta.latitude is None or meta.longitude is None
    if no_place and (nulled or hidden):
        meta.location_withheld = True


_latitude = partial(as_float, low=-90.0, high=90.0)
_longitude = partial(as_float, low=-180.0, high=180.0)
_uncertainty = partial(as_float, low=0.0)
_EXAMPLES = 5  # problem descriptions kept for the log


class CocoMetadata(dict[str, ImageMeta]):
    """What `load_coco_metadata` read: ImageMeta by `metadata_key(file_name)`, plus a tally
    of what it had to ignore.

    `problems` counts records with at least one ignored value and records ignored whole;
    `values_ignored` counts the values dropped (a latitude "north", a longitude 720, a date of
    month 13), `records_ignored` the records skipped whole; `examples` describes the first few,
    e.g. "images[3]: id 18446744073709551616 is out of range".
    """

    def __init__(self) -> None:
        super().__init__()
        self.problems: int = 0
        self.values_ignored: int = 0
        self.records_ignored: int = 0
        self.examples: list[str] = []

    def _note(self, where: str, issues: list[str], *, whole: bool = False) -> None:
        self.problems += 1
        if whole:
            self.records_ignored += 1
        else:
            self.values_ignored += len(issues)
        if len(self.examples) < _EXAMPLES:
            self.examples.append(f"{where}: {'; '.join(issues)}")

    def problem_line(self) -> str:
        """What was ignored, in words ("" when nothing was): for summaries and the log."""
        return ignored_metadata_line(self.values_ignored, self.records_ignored)


class CocoReader:
    """Turns the records of one metadata file into CocoMetadata, one record at a time.

    Sections may come in any order (iNat's files list the images before the categories,
    annotations and licences they refer to), so taxa and licence names are joined in
    `finish`, once the whole file has been read.
    """

    def __init__(self) -> None:
        self.result = CocoMetadata()
        self.saw_images = False
        self._taxa: dict[int, TaxonInfo] = {}
        self._category_by_image: dict[int, int] = {}  # the first annotation of each image
        self._later_categories: dict[int, list[int]] = {}  # further annotations, rare
        self._category_ids: dict[int, int] = {}  # one int object per category id
        self._licence_names: dict[int, str] = {}
        self._by_licence: dict[int, list[ImageMeta]] = {}

    def _fields(self, where: str, record: dict[str, object] | None) -> _Fields | None:
        if record is None:
            self.result._note(where, ["not an object; ignored"], whole=True)
            return None
        return _Fields(record)

    def _done(self, where: str, fields: _Fields) -> None:
        if fields.issues:
            self.result._note(where, fields.issues)

    def image(self, index: int, record: dict[str, object] | None) -> None:
        where = f"images[{index}]"
        fields = self._fields(where, record)
        if fields is None or record is None:
            return
        file_name = record.get("file_name")
        if not isinstance(file_name, str) or not file_name.strip():
            self.result._note(where, ["no usable file_name; ignored"], whole=True)
            return
        key = metadata_key(file_name.strip())
        if key in self.result:
            self._listed_twice(where, key)
            return
        meta = ImageMeta(
            observed_at=fields.get("date", parse_date),
            latitude=fields.get("latitude", _latitude),
            longitude=fields.get("longitude", _longitude),
            location_uncertainty=fields.get("location_uncertainty", _uncertainty)
            if record.get("location_uncertainty") is not None
            else fields.get("positional_accuracy", _uncertainty),
            rights_holder=fields.get("rights_holder", as_text),
            width=fields.get("width", as_int),
            height=fields.get("height", as_int),
            external_id=fields.get("id", as_int),
            notes=_notes(fields),
        )
        _read_place_privacy(record, fields, meta)
        licence = record.get("license")
        licence_id: int | None = None
        if isinstance(licence, int) and not isinstance(licence, bool):
            licence_id = fields.get("license", _licence_id)
        else:
            meta.license = fields.get("license", as_text)
        if not self._keep(key, meta, licence_id):
            self._listed_twice(where, key)
            return
        self._done(where, fields)

    def _listed_twice(self, where: str, key: str) -> None:
        self.result._note(where, [f"{_short(key)} is listed twice; the first is kept"], whole=True)

    def _keep(self, key: str, meta: ImageMeta, licence_id: int | None) -> bool:
        """Keep one image's record; False when `key` was already kept (the first one wins)."""
        if licence_id is not None:
            self._by_licence.setdefault(licence_id, []).append(meta)
        self.result[key] = meta
        return True

    def _keep_annotation(self, image_id: int, category_id: int) -> None:
        category_id = self._category_ids.setdefault(category_id, category_id)
        if image_id in self._category_by_image:
            self._later_categories.setdefault(image_id, []).append(category_id)
        else:
            self._category_by_image[image_id] = category_id

    def category(self, index: int, record: dict[str, object] | None) -> None:
        where = f"categories[{index}]"
        fields = self._fields(where, record)
        if fields is None:
            return
        category_id = fields.get("id", as_int)
        taxon = _taxon_from_category(fields, category_id)
        if category_id is not None and taxon is not None:
            self._taxa[category_id] = taxon
        self._done(where, fields)

    def annotation(self, index: int, record: dict[str, object] | None) -> None:
        where = f"annotations[{index}]"
        fields = self._fields(where, record)
        if fields is None:
            return
        image_id = fields.get("image_id", as_int)
        category_id = fields.get("category_id", as_int)
        if image_id is not None and category_id is not None:
            self._keep_annotation(image_id, category_id)
        self._done(where, fields)

    def licence(self, index: int, record: dict[str, object] | None) -> None:
        where = f"licenses[{index}]"
        fields = self._fields(where, record)
        if fields is None:
            return
        licence_id = fields.get("id", as_int)
        # The URL names the licence exactly (its version too), the name only in words.
        name = fields.get("url", as_text) or fields.get("name", as_text)
        if licence_id is not None and name is not None:
            self._licence_names[licence_id] = name
        self._done(where, fields)

    def _taxon(self, image_id: int) -> TaxonInfo | None:
        """The taxon of the image's first annotation whose category is known."""
        first = self._category_by_image.get(image_id)
        if first is None:
            return None
        taxon = self._taxa.get(first)
        if taxon is None:
            for category_id in self._later_categories.get(image_id, ()):
                taxon = self._taxa.get(category_id)
                if taxon is not None:
                    break
        return taxon

    def finish(self) -> CocoMetadata:
        for licence_id, metas in self._by_licence.items():
            name = self._licence_names.get(licence_id)  # an unknown id leaves no licence
            for meta in metas:
                meta.license = name
        if self._category_by_image and self._taxa:
            for meta in self.result.values():
                if meta.external_id is not None:
                    meta.taxon = self._taxon(meta.external_id)
        return self.result


def _read_document(path: Path, events: Iterator[tuple[str, Any]], reader: CocoReader) -> None:
    """Hand each record of the top-level sections to `reader`, in one pass over `events`."""
    not_coco = f'{path}: not COCO metadata (expected an object with an "images" list)'
    handlers: dict[str, Callable[[int, dict[str, object] | None], None]] = {
        "images": reader.image,
        "categories": reader.category,
        "annotations": reader.annotation,
        "licenses": reader.licence,
    }
    if next(events, ("", None))[0] != "start_map":
        raise BadInputError(not_coco)
    for event, key in events:
        if event == "end_map":
            break
        event, _ = next(events)  # the start of the key's value
        handler = handlers.get(key)
        if handler is None or (event == "null" and key != "images"):
            if event in OPENERS:
                skip_value(events)  # "info" and anything else not used
            continue
        if event != "start_array":
            raise BadInputError(
                not_coco if key == "images" else f'{path}: "{key}" should be a list'
            )
        reader.saw_images = reader.saw_images or key == "images"
        # One event starts each item; read_record and skip_value take the rest of it.
        for index, (event, _) in enumerate(events):
            if event == "end_array":
                break
            if event == "start_map":
                handler(index, read_record(events))
            else:
                if event in OPENERS:
                    skip_value(events)
                handler(index, None)
    for _ in events:  # the parser's own checks of what follows (trailing garbage)
        pass
    if not reader.saw_images:
        raise BadInputError(not_coco)


def load_coco_metadata(path: Path, progress: ProgressCallback = no_progress) -> CocoMetadata:
    """Read a COCO-style metadata file (docs/SPEC.md §3.2), keyed by `metadata_key(file_name)`.

    One streaming pass, record by record, so a multi-GB iNat train.json never sits in memory
    whole (its records do: `MetadataStore.load` keeps them on disk instead). Missing or null
    fields become None; images without annotations get no taxon. A value that cannot be used
    (an id beyond 64 bits, a list where text belongs, a number of thousands of digits) is
    ignored, a record that is not an object or has no file_name is skipped, and both count in
    the result's `problems`: one bad record never costs the rest. `progress` hears the bytes
    read of the file's size. Raises `BadInputError` naming the file (and the line, for JSON
    syntax errors, where it can be had) when the file cannot be read, is not JSON, or is not
    shaped like COCO metadata.
    """
    path = Path(path)
    reader = CocoReader()
    read_coco(path, reader, progress)
    metadata = reader.finish()
    log_problems(path, metadata)
    return metadata


def read_coco(path: Path, reader: CocoReader, progress: ProgressCallback) -> None:
    """Stream the records of the file at `path` into `reader`, reporting bytes read."""
    try:
        size = path.stat().st_size
        with path.open("rb") as handle:
            meter = RateMeter(size)
            progress(meter.update(0, READING_METADATA))
            stream = JsonStream(handle, lambda done: progress(meter.update(done, READING_METADATA)))
            # basic_parse, not parse or items: their path prefixes grow with nesting depth, so
            # 100,000 nested lists cost O(depth²) memory (tens of GB); basic_parse is linear.
            # use_float=False: ints stay exact and decimals cannot overflow, where yajl's own
            # number parsing (use_float=True) fails the whole file at 2**63 or 1e999.
            events = ijson.basic_parse(stream, use_float=False)
            try:
                _read_document(path, events, reader)
            except UnicodeError:
                raise
            except (ijson.JSONError, ValueError) as exc:
                raise syntax_error(path, exc, stream.position) from None
            progress(meter.update(stream.position, READING_METADATA))
    except UnicodeError:
        raise BadInputError(f"{path}: not a UTF-8 text file") from None
    except OSError as exc:
        raise BadInputError(f"cannot read {path}: {exc.strerror or exc}") from None


def log_problems(path: Path, tally: CocoMetadata) -> None:
    """Log what the reading of `path` ignored, once, with the first few examples."""
    if tally.problems:
        log.warning(
            "%s: %s, in %d metadata records; the first: %s",
            path,
            tally.problem_line(),
            tally.problems,
            " | ".join(tally.examples),
        )
