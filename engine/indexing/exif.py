"""What a photo's EXIF says about when, where and with which camera it was taken.

`read_exif` reads, from an opened image and never raising:

- the capture time: DateTimeOriginal with OffsetTimeOriginal, else DateTimeDigitized with
  OffsetTimeDigitized. Never the file's time: a photo whose EXIF gives none is undated.
  A time before 1990 or more than a day in the future is a camera whose clock was never set
  (or a corrupt tag): it is dropped, the photo is undated, and the reason is kept as a flag;
- the GPS position (degrees, minutes, seconds with their N/S and E/W references); (0, 0) is a
  receiver that had no fix, dropped and flagged;
- Make, Model and the camera's serial number (BodySerialNumber, else the DNG
  CameraSerialNumber; maker notes are not parsed: too costly per photo for what they add);
- the orientation (1..8).

A photo whose EXIF gives no capture time takes one from its embedded XMP (exif:DateTimeOriginal,
photoshop:DateCreated, xmp:CreateDate) or IPTC (DateCreated with TimeCreated, else
DigitalCreationDate with its time), reconciled as `engine.indexing.embedded` says, within the
same bounds, and flagged `EXIF_DATE_FROM_XMP`: editors and scanners keep a date there when they
write no EXIF. (A sidecar's dates are not read here: a sidecar can change without its photo
being decoded again.)

The flags (`EXIF_*`) are stored with the photo (`images.exif_flags`), so the catalog can count
and list what was dropped and why.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from PIL import ExifTags, Image

from engine.indexing.embedded import embedded_facts, embedded_in_image
from engine.indexing.metadata import as_float

log = logging.getLogger(__name__)

# Why a value of the EXIF was dropped: bits of `ExifInfo.flags` and `images.exif_flags`.
EXIF_DATE_IN_FUTURE = 1
EXIF_DATE_BEFORE_1990 = 2
EXIF_DATE_UNREADABLE = 4  # a capture time tag whose text is no date ("0000:00:00 00:00:00")
EXIF_GPS_ZERO = 8  # GPS of (0, 0): no fix, not a place in the Gulf of Guinea
EXIF_DATE_FROM_XMP = 16  # no EXIF capture time: the date is the embedded XMP's or IPTC's

EXIF_FLAG_REASONS: dict[int, str] = {
    EXIF_DATE_IN_FUTURE: "capture time in the future",
    EXIF_DATE_BEFORE_1990: "capture time before 1990",
    EXIF_DATE_UNREADABLE: "capture time unreadable",
    EXIF_GPS_ZERO: "GPS position (0, 0)",
    EXIF_DATE_FROM_XMP: "date from XMP/IPTC",
}
EXIF_DATE_FLAGS = EXIF_DATE_IN_FUTURE | EXIF_DATE_BEFORE_1990 | EXIF_DATE_UNREADABLE

EARLIEST_CAPTURE_YEAR = 1990
# Clocks ahead by a time zone or two are not "in the future" yet.
FUTURE_SLACK = timedelta(days=1)


def flag_reasons(flags: int | None) -> list[str]:
    """The reasons the bits of `flags` stand for, in a fixed order."""
    return [reason for bit, reason in EXIF_FLAG_REASONS.items() if (flags or 0) & bit]


@dataclass(frozen=True)
class ExifInfo:
    """What a photo's EXIF says about when and where it was taken, with which camera, and how
    to turn it. Every field may be None; `flags` says what was dropped as impossible."""

    observed_at: datetime | None = None
    latitude: float | None = None
    longitude: float | None = None
    orientation: int | None = None  # 1..8 as in the EXIF standard
    make: str | None = None
    model: str | None = None
    serial: str | None = None
    flags: int = 0


_TAG_MAKE, _TAG_MODEL, _TAG_ORIENTATION = 0x010F, 0x0110, 0x0112
_TAG_DATETIME_ORIGINAL, _TAG_DATETIME_DIGITIZED = 0x9003, 0x9004
_TAG_OFFSET_TIME_ORIGINAL, _TAG_OFFSET_TIME_DIGITIZED = 0x9011, 0x9012
_TAG_BODY_SERIAL = 0xA431
_TAG_DNG_CAMERA_SERIAL = 0xC62F  # in IFD0
_GPS_LATITUDE_REF, _GPS_LATITUDE, _GPS_LONGITUDE_REF, _GPS_LONGITUDE = 1, 2, 3, 4
_OFFSET_RE = re.compile(r"([+-])(\d{2}):?(\d{2})\Z")
_MAX_TEXT = 128  # a make, model or serial longer than this is junk, not a name


def _exif_text(value: object) -> str | None:
    """An EXIF ASCII value: the text before its terminating NUL (cameras leave junk after it
    in fixed-size fields), without the blanks around it."""
    if isinstance(value, bytes):
        value = value.decode("ascii", "replace")
    if not isinstance(value, str):
        return None
    return value.split("\x00", 1)[0].strip() or None


def _name(value: object) -> str | None:
    """A make, model or serial: printable text of reasonable length, else None."""
    text = _exif_text(value)
    if text is None or len(text) > _MAX_TEXT or not text.isprintable():
        return None
    return text


def _with_offset(moment: datetime, offset_text: str | None) -> datetime:
    offset = _OFFSET_RE.match(offset_text or "")
    if offset:
        sign = -1 if offset.group(1) == "-" else 1
        delta = timedelta(hours=int(offset.group(2)), minutes=int(offset.group(3)))
        if delta < timedelta(hours=24):
            moment = moment.replace(tzinfo=timezone(sign * delta))
    return moment


def capture_time(
    exif_ifd: dict[int, Any], now: datetime | None = None
) -> tuple[datetime | None, int]:
    """The capture time of an EXIF sub-IFD (original, else digitized, each with its own
    offset) and the flags of what was dropped. A time outside [1990, now + 1 day] is dropped:
    the photo is undated rather than dated wrongly."""
    flags = 0
    for time_tag, offset_tag in (
        (_TAG_DATETIME_ORIGINAL, _TAG_OFFSET_TIME_ORIGINAL),
        (_TAG_DATETIME_DIGITIZED, _TAG_OFFSET_TIME_DIGITIZED),
    ):
        text = _exif_text(exif_ifd.get(time_tag))
        if text is None:
            continue
        try:
            moment = datetime.strptime(text[:19], "%Y:%m:%d %H:%M:%S")
        except ValueError:  # "0000:00:00 00:00:00", blanks, junk: an unset clock
            flags |= EXIF_DATE_UNREADABLE
            continue
        moment = _with_offset(moment, _exif_text(exif_ifd.get(offset_tag)))
        dropped = _impossible(moment, now)
        if dropped:
            flags |= dropped
            continue
        return moment, 0  # a good digitized time: the original's problem was not kept
    return None, flags


def _impossible(moment: datetime, now: datetime | None) -> int:
    """The flag of a capture time outside [1990, now + 1 day], else 0."""
    if moment.year < EARLIEST_CAPTURE_YEAR:
        return EXIF_DATE_BEFORE_1990
    # Compared as the camera's wall clock against ours: a zone's difference is in the slack.
    if moment.replace(tzinfo=None) > (now or datetime.now()) + FUTURE_SLACK:
        return EXIF_DATE_IN_FUTURE
    return 0


def fallback_time(
    image: Image.Image, exif: Image.Exif | None, now: datetime | None = None
) -> tuple[datetime | None, int]:
    """The capture time of the image's embedded XMP or IPTC (the first candidate within the
    bounds) flagged `EXIF_DATE_FROM_XMP`, else None with the flags of what was dropped."""
    try:
        candidates = embedded_facts(embedded_in_image(image, exif)).dates
    except Exception as exc:  # noqa: BLE001 - junk metadata: no date, never a failure
        log.debug("unreadable XMP/IPTC date: %s", exc)
        return None, 0
    flags = 0
    for moment in candidates:
        dropped = _impossible(moment, now)
        if not dropped:
            return moment, EXIF_DATE_FROM_XMP
        flags |= dropped
    return None, flags


def _gps_coordinate(value: object, ref: object, limit: float) -> float | None:
    """Degrees from EXIF (degrees, minutes, seconds) rationals; S and W give negatives."""
    parts = value if isinstance(value, tuple | list) else (value,)
    if not 1 <= len(parts) <= 3:
        return None
    degrees = 0.0
    for part, scale in zip(parts, (1.0, 60.0, 3600.0), strict=False):
        number = as_float(part)  # a zero denominator gives nan, rejected here
        if number is None or number < 0:
            return None
        degrees += number / scale
    if degrees > limit:
        return None
    ref_text = (_exif_text(ref) or "").upper()
    return -degrees if ref_text in ("S", "W") else degrees


def read_exif(image: Image.Image, now: datetime | None = None) -> ExifInfo:
    """Capture time, GPS position, camera and orientation from an opened image.

    Never raises: junk or missing EXIF gives None fields. `now` (for tests) bounds the
    capture time from above."""
    try:
        exif = image.getexif()
    except Exception as exc:  # PIL raises many kinds of errors on junk EXIF
        log.debug("unreadable EXIF: %s", exc)
        exif = Image.Exif()  # nothing from it; the XMP's or IPTC's date may still be read

    orientation: int | None = None
    make = model = serial = None
    try:
        raw = exif.get(_TAG_ORIENTATION)
        if isinstance(raw, int) and 1 <= raw <= 8:
            orientation = raw
        make, model = _name(exif.get(_TAG_MAKE)), _name(exif.get(_TAG_MODEL))
        serial = _name(exif.get(_TAG_DNG_CAMERA_SERIAL))
    except Exception as exc:
        log.debug("unreadable EXIF IFD0: %s", exc)

    flags = 0
    observed_at: datetime | None = None
    try:
        exif_ifd = exif.get_ifd(ExifTags.IFD.Exif)
        observed_at, flags = capture_time(exif_ifd, now)
        serial = _name(exif_ifd.get(_TAG_BODY_SERIAL)) or serial
    except Exception as exc:
        log.debug("unreadable EXIF date: %s", exc)
    if observed_at is None:
        observed_at, fallback_flags = fallback_time(image, exif, now)
        # A date found elsewhere replaces the EXIF's dropped one, as a digitized time would.
        flags = fallback_flags if observed_at is not None else flags | fallback_flags

    latitude = longitude = None
    try:
        gps = exif.get_ifd(ExifTags.IFD.GPSInfo)
        latitude = _gps_coordinate(gps.get(_GPS_LATITUDE), gps.get(_GPS_LATITUDE_REF), 90.0)
        longitude = _gps_coordinate(gps.get(_GPS_LONGITUDE), gps.get(_GPS_LONGITUDE_REF), 180.0)
        if latitude is None or longitude is None:  # half a position is no position
            latitude = longitude = None
        elif latitude == 0.0 and longitude == 0.0:
            latitude = longitude = None
            flags |= EXIF_GPS_ZERO
    except Exception as exc:
        log.debug("unreadable EXIF GPS: %s", exc)
        latitude = longitude = None

    return ExifInfo(observed_at, latitude, longitude, orientation, make, model, serial, flags)
