"""Analyses of a query's found set: its relevant photos counted by month and day of year per
year (phenology), by hour of the day (diel activity), by taxon and by place; written as CSV
files and PNG charts (`write_analyses`, `quadrat analyses`).

What counts: the photos judged relevant to the query. Times are the observer's local clock
(`observed_at`, as the catalog stores it). A record that gave only a date is stored at
midnight, so a time of exactly 00:00:00 counts as "no time of day" in the diel counts (a
photo taken on the stroke of midnight to the second is rarer than a date without a time).
Places are cells of `PLACE_CELL_DEGREES` of latitude and longitude (there are no place names in
the catalog), named by their centre, counted from each place as the catalog's place rule
publishes it (`engine.catalog.privacy.PlacePolicy`): a withheld place is in no cell (counted
apart), a generalised one in the cell of its published point.

The charts are drawn with Pillow, already a dependency (no plotting library for five bar
charts); every file is written whole or not at all (`engine.files`), and a full or read-only
disk fails in one line (`engine.io.export.plain_write_errors`).
"""

from __future__ import annotations

import csv
import io
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TypeVar

from PIL import Image, ImageDraw, ImageFont

from engine.catalog.library import Library
from engine.catalog.privacy import WITHHELD, PlacePolicy
from engine.catalog.reads import PhotoDetails, photo_details
from engine.files import atomic_write_bytes, csv_row
from engine.io.export import plain_write_errors
from engine.judgments.queries import QueryStore
from engine.search.filters import latitude_text, longitude_text

PLACE_CELL_DEGREES = 1.0
"""The side of a place cell (about 111 km of latitude)."""
CHART_ROWS = 20  # the taxa and places a chart shows (the CSV lists all)
K = TypeVar("K")
_RECORDS_ONLY = PlacePolicy()  # the records' own place privacy, without a lab's list
MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


@dataclass(frozen=True)
class Place:
    """A cell of the place grid: its south-west corner and its name (its centre)."""

    south: float
    west: float

    @property
    def centre(self) -> tuple[float, float]:
        half = PLACE_CELL_DEGREES / 2
        return self.south + half, self.west + half

    @property
    def name(self) -> str:
        lat, lon = self.centre
        return f"{latitude_text(lat)} {longitude_text(lon)}"


def place_of(latitude: float, longitude: float) -> Place:
    """The grid cell holding a point (longitude 180 falls in the cell from 179)."""
    south = math.floor(latitude / PLACE_CELL_DEGREES) * PLACE_CELL_DEGREES
    west = math.floor(longitude / PLACE_CELL_DEGREES) * PLACE_CELL_DEGREES
    return Place(min(south, 90 - PLACE_CELL_DEGREES), min(west, 180 - PLACE_CELL_DEGREES))


@dataclass
class FoundSetAnalyses:
    """The counts of one found set; `no_*` count the photos the metadata leaves out of each."""

    relevant: int = 0
    by_month: Counter[tuple[int, int]] = field(default_factory=Counter)  # (year, month)
    by_day: Counter[tuple[int, int]] = field(default_factory=Counter)  # (year, day of year)
    by_hour: Counter[int] = field(default_factory=Counter)
    by_taxon: Counter[tuple[str, str]] = field(default_factory=Counter)  # (name, common)
    by_place: Counter[Place] = field(default_factory=Counter)
    no_date: int = 0
    no_time: int = 0
    no_taxon: int = 0
    no_place: int = 0
    withheld_place: int = 0  # of no_place: a place the record or the lab withholds

    def add(self, photo: PhotoDetails, policy: PlacePolicy | None = None) -> None:
        """Count one relevant photo; its place as `policy` publishes it (the records' own
        privacy only, without the lab's sensitive taxa, when None)."""
        self.relevant += 1
        self._add_time(photo.observed_at)
        if photo.taxon:
            self.by_taxon[(photo.taxon, photo.common_name or "")] += 1
        else:
            self.no_taxon += 1
        names = (photo.taxon, *(name for _, name in photo.lineage))
        place = (policy or _RECORDS_ONLY).publish(
            photo.latitude, photo.longitude, photo.location_uncertainty, photo.place_privacy,
            names,
        )  # fmt: skip
        if place.latitude is not None and place.longitude is not None:
            self.by_place[place_of(place.latitude, place.longitude)] += 1
        else:
            self.no_place += 1
            self.withheld_place += place.decision == WITHHELD

    def _add_time(self, moment: datetime | None) -> None:
        if moment is None:
            self.no_date += 1
            self.no_time += 1
            return
        self.by_month[(moment.year, moment.month)] += 1
        self.by_day[(moment.year, moment.timetuple().tm_yday)] += 1
        if (moment.hour, moment.minute, moment.second) == (0, 0, 0):
            self.no_time += 1  # a date without a time of day (see the module)
        else:
            self.by_hour[moment.hour] += 1

    @property
    def years(self) -> list[int]:
        return sorted({year for year, _ in self.by_month})

    def summary(self) -> str:
        """One line: how many photos, and how many each count leaves out."""
        withheld = f" ({self.withheld_place} withheld)" if self.withheld_place else ""
        return (
            f"{self.relevant} relevant photos: {self.relevant - self.no_date} dated, "
            f"{self.relevant - self.no_time} with a time of day, "
            f"{self.relevant - self.no_taxon} with a taxon, "
            f"{self.relevant - self.no_place} with a place{withheld}"
        )


def analyse_photos(
    photos: Sequence[PhotoDetails], policy: PlacePolicy | None = None
) -> FoundSetAnalyses:
    """The counts of these photos, places as `policy` publishes them (give the library's,
    `PlacePolicy.of(catalog)`, for files that leave the workstation)."""
    analyses = FoundSetAnalyses()
    for photo in photos:
        analyses.add(photo, policy)
    return analyses


def analyse_query(library: Library, query_id: int) -> FoundSetAnalyses:
    """The counts of the photos judged relevant to the saved query `query_id`, places as the
    library's place rule publishes them (the lab's sensitive taxa included)."""
    judgments = QueryStore(library).judgments(query_id)
    relevant = sorted(image_id for image_id, value in judgments.items() if value > 0)
    details = photo_details(library, relevant)
    photos = [details[i] for i in relevant if i in details]
    return analyse_photos(photos, PlacePolicy.of(library.catalog))


# -- CSV --------------------------------------------------------------------------------------


def _csv(header: Sequence[str], rows: Sequence[Sequence[object]]) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    for row in rows:
        writer.writerow(csv_row(row))
    return out.getvalue().encode("utf-8")


def csv_files(analyses: FoundSetAnalyses) -> dict[str, bytes]:
    """File name -> CSV contents: one file per count, plus `summary.csv`."""
    a = analyses
    return {
        "phenology_month.csv": _csv(
            ("year", "month", "photos"), [(y, m, n) for (y, m), n in sorted(a.by_month.items())]
        ),
        "phenology_day.csv": _csv(
            ("year", "day_of_year", "photos"),
            [(y, d, n) for (y, d), n in sorted(a.by_day.items())],
        ),
        "diel.csv": _csv(("hour", "photos"), [(h, a.by_hour.get(h, 0)) for h in range(24)]),
        "taxa.csv": _csv(
            ("taxon", "common_name", "photos"),
            [(name, common, n) for (name, common), n in _most_common(a.by_taxon)],
        ),
        "places.csv": _csv(
            ("place", "latitude", "longitude", "photos"),
            [(p.name, *p.centre, n) for p, n in _most_common(a.by_place)],
        ),
        "summary.csv": _csv(
            ("measure", "photos"),
            [
                ("relevant", a.relevant),
                ("no_date", a.no_date),
                ("no_time_of_day", a.no_time),
                ("no_taxon", a.no_taxon),
                ("no_place", a.no_place),
                ("place_withheld", a.withheld_place),
            ],
        ),
    }


def _most_common(counts: Counter[K]) -> list[tuple[K, int]]:
    """Most photos first; ties in the order of the keys' text, so files do not vary."""
    return sorted(counts.items(), key=lambda item: (-item[1], str(item[0])))


# -- charts -----------------------------------------------------------------------------------

_WIDTH, _HEIGHT = 960, 420
_MARGIN_LEFT, _MARGIN_RIGHT, _MARGIN_TOP, _MARGIN_BOTTOM = 56, 16, 40, 48
_BAR = (46, 125, 50)
_INK, _GRID, _PAPER = (33, 33, 33), (224, 224, 224), (255, 255, 255)
# Years told apart by colour (Okabe and Ito's palette, which colour-blind readers can tell apart).
_YEAR_COLOURS = (
    (0, 114, 178), (230, 159, 0), (0, 158, 115), (204, 121, 167), (86, 180, 233),
    (213, 94, 0), (240, 228, 66), (0, 0, 0),
)  # fmt: skip


def _font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    return ImageFont.load_default(size=size)


def _canvas(title: str, height: int = _HEIGHT) -> tuple[Image.Image, ImageDraw.ImageDraw]:
    image = Image.new("RGB", (_WIDTH, height), _PAPER)
    draw = ImageDraw.Draw(image)
    draw.text((_MARGIN_LEFT, 10), title, fill=_INK, font=_font(16))
    return image, draw


def _axis_step(value: int) -> int:
    """A whole step of 1, 2 or 5 times a power of ten giving at most four steps up to `value`."""
    if value <= 4:
        return 1
    power = int(10 ** math.floor(math.log10(value / 4)))
    return next(step * power for step in (1, 2, 5, 10) if step * power * 4 >= value)


def _value_axis(draw: ImageDraw.ImageDraw, highest: int, label: str) -> int:
    """Horizontal grid lines at whole counts up to a top at or above `highest`; the top."""
    step = _axis_step(highest)
    ticks = max(1, math.ceil(highest / step))
    top = step * ticks
    plot_bottom = _HEIGHT - _MARGIN_BOTTOM
    for tick in range(ticks + 1):
        y = plot_bottom - (plot_bottom - _MARGIN_TOP) * tick / ticks
        draw.line((_MARGIN_LEFT, y, _WIDTH - _MARGIN_RIGHT, y), fill=_GRID)
        draw.text((_MARGIN_LEFT - 6, y), str(tick * step), fill=_INK, font=_font(11), anchor="rm")
    draw.text((8, _MARGIN_TOP - 22), label, fill=_INK, font=_font(11))
    return top


def _png(image: Image.Image) -> bytes:
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def _bars(
    title: str,
    labels: Sequence[str],
    series: Sequence[tuple[str, tuple[int, int, int], Sequence[int]]],
    note: str,
    *,
    stacked: bool = False,
) -> bytes:
    """Vertical bars, one group per label: a bar per series (a year) side by side, or stacked
    (many narrow groups, where side-by-side bars would be hairlines)."""
    image, draw = _canvas(title)
    if stacked:
        highest = max((sum(v) for v in zip(*(values for _, _, values in series), strict=True)),
                      default=0)  # fmt: skip
    else:
        highest = max((max(values, default=0) for _, _, values in series), default=0)
    top = _value_axis(draw, highest, "photos")
    plot_bottom = _HEIGHT - _MARGIN_BOTTOM
    scale = (plot_bottom - _MARGIN_TOP) / top
    group = (_WIDTH - _MARGIN_LEFT - _MARGIN_RIGHT) / max(len(labels), 1)
    bar = group * 0.8 / (1 if stacked else max(len(series), 1))
    for g, label in enumerate(labels):
        left = _MARGIN_LEFT + g * group + group * 0.1
        base = float(plot_bottom)
        for s, (_, colour, values) in enumerate(series):
            if not values[g]:
                continue
            x0 = left if stacked else left + s * bar
            y0 = base - values[g] * scale if stacked else plot_bottom - values[g] * scale
            y1 = base if stacked else plot_bottom
            draw.rectangle((x0, y0, x0 + max(bar - 1, 1), y1), fill=colour)
            if stacked:
                base = y0
        draw.text((left + group * 0.4, plot_bottom + 6), label, fill=_INK, font=_font(11),
                  anchor="mt")  # fmt: skip
    _legend(draw, [(name, colour) for name, colour, _ in series if name])
    draw.text((_MARGIN_LEFT, _HEIGHT - 18), note, fill=_INK, font=_font(11))
    return _png(image)


def _legend(draw: ImageDraw.ImageDraw, items: Sequence[tuple[str, tuple[int, int, int]]]) -> None:
    x = float(_WIDTH - _MARGIN_RIGHT)
    for name, colour in reversed(items):
        width = draw.textlength(name, font=_font(11))
        x -= width + 6
        draw.text((x, 16), name, fill=_INK, font=_font(11))
        x -= 14
        draw.rectangle((x, 16, x + 10, 26), fill=colour)
        x -= 10


def _year_series(
    analyses: FoundSetAnalyses, count: Mapping[tuple[int, int], int], slots: int
) -> list[tuple[str, tuple[int, int, int], list[int]]]:
    years = analyses.years
    if len(years) > len(_YEAR_COLOURS):  # too many to tell apart: all years as one
        totals = [0] * slots
        for (_, slot), n in count.items():
            totals[slot - 1] += n
        return [(f"{years[0]}–{years[-1]}", _BAR, totals)]
    series = []
    for colour, year in zip(_YEAR_COLOURS, years, strict=False):
        values = [count.get((year, slot), 0) for slot in range(1, slots + 1)]
        series.append((str(year), colour, values))
    return series


def _left_out(count: int, what: str) -> str:
    return f"{count} relevant photos without {what} are not shown" if count else ""


def _horizontal(title: str, rows: Sequence[tuple[str, int]], note: str) -> bytes:
    """Horizontal bars, most first, for taxa and places."""
    step = 24.0
    height = int(_MARGIN_TOP + step * max(len(rows), 1) + _MARGIN_BOTTOM)  # fits the rows
    image, draw = _canvas(title, height)
    label_width = 300
    top = max((n for _, n in rows), default=0) or 1
    plot_top = _MARGIN_TOP
    plot_left = _MARGIN_LEFT + label_width
    plot_width = _WIDTH - _MARGIN_RIGHT - plot_left - 40
    for r, (label, n) in enumerate(rows):
        y = plot_top + r * step
        text = label if len(label) <= 44 else label[:43] + "…"
        draw.text((plot_left - 8, y + step / 2), text, fill=_INK, font=_font(11), anchor="rm")
        width = plot_width * n / top
        draw.rectangle((plot_left, y + step * 0.15, plot_left + max(width, 1), y + step * 0.85),
                       fill=_BAR)  # fmt: skip
        draw.text((plot_left + width + 4, y + step / 2), str(n), fill=_INK, font=_font(11),
                  anchor="lm")  # fmt: skip
    draw.text((_MARGIN_LEFT, height - 18), note, fill=_INK, font=_font(11))
    return _png(image)


def chart_files(analyses: FoundSetAnalyses, title: str) -> dict[str, bytes]:
    """File name -> PNG chart for each count (taxa and places: the first `CHART_ROWS`)."""
    a = analyses
    weeks = Counter({(y, min((d - 1) // 7 + 1, 52)): 0 for y, d in a.by_day})
    for (year, day), n in a.by_day.items():
        weeks[(year, min((day - 1) // 7 + 1, 52))] += n  # the 365th and 366th days: week 52
    taxa = [(f"{name} ({common})" if common else name, n)
            for (name, common), n in _most_common(a.by_taxon)[:CHART_ROWS]]  # fmt: skip
    places = [(p.name, n) for p, n in _most_common(a.by_place)[:CHART_ROWS]]
    more_taxa = len(a.by_taxon) - len(taxa)
    more_places = len(a.by_place) - len(places)
    return {
        "phenology_month.png": _bars(
            f"{title}: relevant photos by month", MONTHS,
            _year_series(a, a.by_month, 12), _left_out(a.no_date, "a date"),
        ),
        "phenology_week.png": _bars(
            f"{title}: relevant photos by week of the year (day of year / 7)",
            [str(w) if w % 4 == 1 else "" for w in range(1, 53)],
            _year_series(a, weeks, 52), _left_out(a.no_date, "a date"), stacked=True,
        ),
        "diel.png": _bars(
            f"{title}: relevant photos by hour of the day (local time)",
            [f"{h:02d}" for h in range(24)],
            [("", _BAR, [a.by_hour.get(h, 0) for h in range(24)])],
            _left_out(a.no_time, "a time of day"),
        ),
        "taxa.png": _horizontal(
            f"{title}: relevant photos by taxon", taxa,
            "; ".join(t for t in (_left_out(a.no_taxon, "a taxon"),
                                  f"{more_taxa} more taxa in taxa.csv" if more_taxa else "") if t),
        ),
        "places.png": _horizontal(
            f"{title}: relevant photos by place ({PLACE_CELL_DEGREES:g}° cells)", places,
            "; ".join(t for t in (_left_out(a.no_place, "a place"),
                                  f"{more_places} more in places.csv" if more_places else "") if t),
        ),
    }  # fmt: skip


def write_analyses(
    analyses: FoundSetAnalyses, out_dir: str | Path, title: str, *, charts: bool = True
) -> list[Path]:
    """Write the CSV files (and the PNG charts) into `out_dir`; the paths written, in order.
    Each file is whole or absent; a failed write says in one line where and why."""
    folder = Path(out_dir).expanduser()
    files = csv_files(analyses)
    if charts:
        files.update(chart_files(analyses, title))
    written = []
    for name, data in files.items():
        path = folder / name
        with plain_write_errors(path, f"the analysis {name}", len(data)):
            atomic_write_bytes(path, data)
        written.append(path)
    return written
