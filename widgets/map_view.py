"""A small offline world map: coastlines, the results' places as dots, and a box to draw.

Equirectangular (longitude and latitude as x and y, one degree as wide as it is high), drawn
with `QPainter` from Natural Earth's 1:110m land shipped in `resources/map/land-110m.json`
(`read_coastlines`, called off the GUI thread by the controller): no tiles, no network.

The view fits the results' places with a margin (the whole world when none has a place). A
group of places on both sides of the antimeridian (Fiji, the Aleutians) is fitted across it:
longitudes run on past 180° and the coastlines are drawn again one turn further.

Dragging a rectangle emits `boxDrawn((min_lat, min_lon, max_lat, max_lon))`, longitudes in
[-180, 180]; a box across the antimeridian has min_lon > max_lon. A click on a dot emits
`pointClicked(image_id)`. The wheel zooms about the pointer; a double click fits the results
again.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from importlib import resources

from PySide6.QtCore import QPointF, QRectF, QSize, Qt, Signal
from PySide6.QtGui import (
    QBrush,
    QColor,
    QMouseEvent,
    QPainter,
    QPainterPath,
    QPaintEvent,
    QPen,
    QPixmap,
    QResizeEvent,
    QTransform,
    QWheelEvent,
)
from PySide6.QtWidgets import QSizePolicy, QWidget

COASTLINE_RESOURCE = "land-110m.json"
WORLD = QRectF(-180.0, -90.0, 360.0, 180.0)  # x: longitude, y: latitude (south up to north)
MIN_SPAN = (16.0, 8.0)  # degrees: one place (or a tight group) shows its region, not a dot
MARGIN = 0.15  # of the places' extent, on each side
CLICK_SLOP = 4  # px: a press and release closer than this is a click, not a box
HIT_RADIUS = 7  # px: a click this close to a dot selects it
DOT_RADIUS = 3.5

OCEAN = QColor("#dce9f2")
LAND = QColor("#f4f1e8")
COAST = QColor("#9aa7ae")
GRID = QColor("#c9d7e0")
DOT_COLOURS = {None: QColor("#1f6fb2"), 1: QColor("#2b8a3e"), 0: QColor("#c92a2a")}
BOX = QColor("#d9480f")


# What the dots are: places as an export would publish them (the controller decides which).
PUBLISHED_LEGEND = (
    "Places are drawn as they would be published: a withheld place is not drawn, and a "
    "sensitive taxon's or an obscured record's at its generalised place."
)


@dataclass(frozen=True)
class MapPoint:
    """One result with a place: its catalog id, where it was seen, and its judgment for the
    open query (1 relevant, 0 not relevant, None not judged)."""

    image_id: int
    lat: float
    lon: float
    judgment: int | None = None


def read_coastlines() -> list[list[float]]:
    """The land's rings as flat [lon, lat, lon, lat, ...] lists in degrees, read from the
    resources package (a frozen app has them too). Reads a file: call it off the GUI thread."""
    text = (resources.files("resources.map") / COASTLINE_RESOURCE).read_text(encoding="utf-8")
    return [[value / 100.0 for value in ring] for ring in json.loads(text)["rings"]]


def land_path(rings: list[list[float]]) -> QPainterPath:
    """The rings as one path in map coordinates (x = longitude, y = -latitude, so north is up),
    filled even-odd so lakes stay holes."""
    path = QPainterPath()
    path.setFillRule(Qt.FillRule.OddEvenFill)
    for ring in rings:
        if len(ring) < 6:
            continue
        path.moveTo(ring[0], -ring[1])
        for i in range(2, len(ring), 2):
            path.lineTo(ring[i], -ring[i + 1])
        path.closeSubpath()
    return path


def fit_extent(points: list[tuple[float, float]]) -> QRectF:
    """The (lon, lat) rectangle to show `points` ((lat, lon) pairs) with a margin: the world
    when there are none. Longitudes may run past 180° when the places straddle the
    antimeridian (the largest empty stretch of longitudes is left out, wherever it is)."""
    if not points:
        return QRectF(WORLD)
    lons = sorted({lon for _lat, lon in points})
    lats = [lat for lat, _lon in points]
    # The widest gap between neighbouring longitudes, the one across ±180° included.
    gap, start = lons[0] + 360.0 - lons[-1], lons[0]
    for before, after in zip(lons, lons[1:], strict=False):
        if after - before > gap:
            gap, start = after - before, after
    west, east = start, start + 360.0 - gap
    south, north = min(lats), max(lats)
    width = max(east - west, 0.0)
    height = max(north - south, 0.0)
    pad_x = max(width * MARGIN, (MIN_SPAN[0] - width) / 2)
    pad_y = max(height * MARGIN, (MIN_SPAN[1] - height) / 2)
    rect = QRectF(west - pad_x, south - pad_y, width + 2 * pad_x, height + 2 * pad_y)
    if rect.width() > 360.0:
        rect = QRectF(-180.0, rect.top(), 360.0, rect.height())
    if rect.height() > 180.0:
        rect = QRectF(rect.left(), -90.0, rect.width(), 180.0)
    elif rect.top() < -90.0:  # shifted, not cut: the margin stays on the other side
        rect.moveTop(-90.0)
    elif rect.bottom() > 90.0:
        rect.moveBottom(90.0)
    return rect


def normalised_lon(lon: float) -> float:
    """A longitude in [-180, 180)."""
    return (lon + 180.0) % 360.0 - 180.0


class MapView(QWidget):
    """The results' places on coastlines; a drawn box is a place filter. See the module
    docstring."""

    boxDrawn = Signal(object)  # (min_lat, min_lon, max_lat, max_lon)
    pointClicked = Signal(int)  # image id

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("mapView")
        self.setMouseTracking(False)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self.setToolTip(
            "Where the results were seen. Drag a box to keep only photos from there; click a "
            f"dot to select its photo; the wheel zooms, a double click fits the results.\n"
            f"{PUBLISHED_LEGEND}"
        )
        self._land = QPainterPath()
        self._has_land = False
        self._points: list[MapPoint] = []
        self._without_place = 0
        self._note = ""  # how many places are withheld or generalised
        self._extent = QRectF(WORLD)  # what must be visible (degrees; lon may pass 180)
        self._box: tuple[float, float, float, float] | None = None
        self._near: tuple[float, float, float] | None = None
        self._current: int | None = None
        self._press: QPointF | None = None
        self._drag: QPointF | None = None
        self._dots: dict[tuple[int | None, float], QPixmap] = {}  # see `_dot`

    # -- data --------------------------------------------------------------------------------

    def set_coastlines(self, rings: list[list[float]]) -> None:
        """The land to draw (from `read_coastlines`)."""
        self._land = land_path(rings)
        self._has_land = bool(rings)
        self.update()

    def has_coastlines(self) -> bool:
        return self._has_land

    def set_points(self, points: list[MapPoint], without_place: int = 0, note: str = "") -> None:
        """The results' places (the view fits them), how many results have none, and `note`:
        how many others are withheld or drawn generalised ("2 withheld · 1 generalised")."""
        self._points = list(points)
        self._without_place = without_place
        self._note = note
        self.fit()

    def caption(self) -> str:
        """The line drawn in the map's corner."""
        if not self._points:
            text = "No result has a place" if self._without_place and not self._note else ""
        elif self._without_place:
            text = f"{self._without_place:,} without a place"
        else:
            text = ""
        return " · ".join(part for part in (text, self._note) if part)

    def points(self) -> list[MapPoint]:
        return list(self._points)

    def set_judgments(self, judgments: dict[int, int]) -> None:
        """Recolour the dots after judging (image id -> 1 / 0; absent: not judged)."""
        self._points = [
            MapPoint(p.image_id, p.lat, p.lon, judgments.get(p.image_id)) for p in self._points
        ]
        self.update()

    def set_box(self, bbox: tuple[float, float, float, float] | None) -> None:
        """The place filter's box, drawn dashed (None: no box)."""
        self._box = tuple(bbox) if bbox is not None else None  # type: ignore[assignment]
        self.update()

    def set_near(self, near: tuple[float, float, float] | None) -> None:
        """The "within N km" filter's circle: (lat, lon, radius km), or None."""
        self._near = tuple(near) if near is not None else None  # type: ignore[assignment]
        self.update()

    def set_current(self, image_id: int | None) -> None:
        """Ring the dot of the photo selected in the grid."""
        self._current = image_id
        self.update()

    def fit(self) -> None:
        """Show the results' places with a margin (the world when there are none)."""
        self._extent = fit_extent([(p.lat, p.lon) for p in self._points])
        self.update()

    def extent(self) -> QRectF:
        """The (lon, lat) rectangle that must be visible; the widget shows at least this."""
        return QRectF(self._extent)

    # -- geometry ----------------------------------------------------------------------------

    def _area(self) -> QRectF:
        return QRectF(self.rect()).adjusted(2, 2, -2, -2)

    def transform(self) -> QTransform:
        """Map coordinates (x = longitude, y = -latitude) to pixels: the extent centred in the
        widget, degrees square."""
        area, extent = self._area(), self._extent
        scale = min(area.width() / extent.width(), area.height() / extent.height())
        scale = max(scale, 1e-6)
        centre_x = extent.center().x()
        centre_y = -extent.center().y()
        t = QTransform()
        t.translate(area.center().x(), area.center().y())
        t.scale(scale, scale)
        t.translate(-centre_x, -centre_y)
        return t

    def to_pixel(self, lat: float, lon: float, t: QTransform | None = None) -> QPointF:
        """Where (lat, lon) is drawn: of its copies one turn apart, the one nearest the view's
        centre (so places across the antimeridian sit together). `t`: `transform()`, when the
        caller has it already."""
        centre = self._extent.center().x()
        lon = lon + 360.0 * round((centre - lon) / 360.0)
        return (t or self.transform()).map(QPointF(lon, -lat))

    def to_lat_lon(self, pixel: QPointF) -> tuple[float, float]:
        """(lat, lon) under a pixel; the longitude unwrapped (it may pass ±180°)."""
        inverse, _ok = self.transform().inverted()
        point = inverse.map(pixel)
        return max(-90.0, min(90.0, -point.y())), point.x()

    def box_from_pixels(self, a: QPointF, b: QPointF) -> tuple[float, float, float, float]:
        """The (min_lat, min_lon, max_lat, max_lon) box between two pixels, longitudes in
        [-180, 180]; min_lon > max_lon when it crosses the antimeridian."""
        lat_a, lon_a = self.to_lat_lon(a)
        lat_b, lon_b = self.to_lat_lon(b)
        west, east = sorted((lon_a, lon_b))
        south, north = sorted((lat_a, lat_b))
        if east - west >= 360.0:
            west, east = -180.0, 180.0
        else:
            span = east - west
            west = normalised_lon(west)
            east = west + span
            if east > 180.0:
                east -= 360.0
        return (round(south, 4), round(west, 4), round(north, 4), round(east, 4))

    def point_at(self, pixel: QPointF) -> MapPoint | None:
        """The dot nearest `pixel`, within a few pixels, or None."""
        best, best_distance = None, float(HIT_RADIUS)
        t = self.transform()
        for point in self._points:
            at = self.to_pixel(point.lat, point.lon, t)
            distance = math.hypot(at.x() - pixel.x(), at.y() - pixel.y())
            if distance <= best_distance:
                best, best_distance = point, distance
        return best

    # -- painting ----------------------------------------------------------------------------

    def sizeHint(self) -> QSize:  # noqa: N802
        return QSize(360, 190)

    def minimumSizeHint(self) -> QSize:  # noqa: N802
        return QSize(120, 70)

    def _visible_lon_range(self, t: QTransform) -> tuple[float, float]:
        inverse, _ok = t.inverted()
        left = inverse.map(QPointF(0, 0)).x()
        right = inverse.map(QPointF(self.width(), 0)).x()
        return left, right

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.fillRect(self.rect(), OCEAN)
        t = self.transform()
        left, right = self._visible_lon_range(t)
        # One copy of the world per turn of longitude in view (two across the antimeridian);
        # land cut at the antimeridian runs on past ±180°, so its bounds decide.
        land = self._land.boundingRect() if self._has_land else QRectF(WORLD)
        west, east = min(land.left(), -180.0), max(land.right(), 180.0)
        turns = range(math.floor((left - east) / 360.0) + 1, math.ceil((right - west) / 360.0))
        painter.save()
        painter.setTransform(t)
        grid = QPen(GRID, 0)
        grid.setCosmetic(True)
        coast = QPen(COAST, 1.0)
        coast.setCosmetic(True)
        for turn in turns:
            painter.save()
            painter.translate(360.0 * turn, 0.0)
            painter.setPen(grid)
            for lon in range(-180, 180, 30):
                painter.drawLine(QPointF(lon, -90.0), QPointF(lon, 90.0))
            for lat in range(-60, 61, 30):
                painter.drawLine(QPointF(-180.0, -lat), QPointF(180.0, -lat))
            if self._has_land:
                painter.setPen(coast)
                painter.setBrush(LAND)
                painter.drawPath(self._land)
            painter.restore()
        painter.restore()
        self._paint_filters(painter, t)
        self._paint_points(painter, t)
        self._paint_drag(painter)
        self._paint_caption(painter)

    def _box_rect(self, t: QTransform, bbox: tuple[float, float, float, float]) -> QRectF:
        south, west, north, east = bbox
        if east < west:
            east += 360.0
        centre = self._extent.center().x()
        shift = 360.0 * round((centre - (west + east) / 2) / 360.0)
        return t.mapRect(QRectF(QPointF(west + shift, -north), QPointF(east + shift, -south)))

    def _paint_filters(self, painter: QPainter, t: QTransform) -> None:
        pen = QPen(BOX, 1.5, Qt.PenStyle.DashLine)
        painter.setPen(pen)
        painter.setBrush(QBrush(QColor(217, 72, 15, 28)))
        if self._box is not None:
            painter.drawRect(self._box_rect(t, self._box))
        if self._near is not None:
            lat, lon, km = self._near
            dlat = km / 111.2
            dlon = km / (111.2 * max(math.cos(math.radians(lat)), 0.01))
            centre = self.to_pixel(lat, lon, t)
            scale = t.m11()
            painter.drawEllipse(centre, dlon * scale, dlat * scale)

    def _dot(self, judgment: int | None) -> QPixmap:
        """A dot of that judgment's colour, drawn once: a thousand results paint as fast as
        copying a thousand small pictures."""
        ratio = self.devicePixelRatioF()
        key = (judgment, ratio)
        dot = self._dots.get(key)
        if dot is None:
            side = math.ceil(2 * DOT_RADIUS + 2)
            dot = QPixmap(round(side * ratio), round(side * ratio))
            dot.setDevicePixelRatio(ratio)
            dot.fill(Qt.GlobalColor.transparent)
            sprite = QPainter(dot)
            sprite.setRenderHint(QPainter.RenderHint.Antialiasing)
            sprite.setPen(QPen(QColor("#ffffff"), 1.0))
            sprite.setBrush(DOT_COLOURS.get(judgment, DOT_COLOURS[None]))
            sprite.drawEllipse(QPointF(side / 2, side / 2), DOT_RADIUS, DOT_RADIUS)
            sprite.end()
            self._dots[key] = dot
        return dot

    def _paint_points(self, painter: QPainter, t: QTransform) -> None:
        # Judged dots last, so a relevant photo is not hidden under unjudged ones; photos on
        # the same pixel (one site, many photos) are drawn once.
        ordered = sorted(self._points, key=lambda p: p.judgment is not None)
        # `to_pixel` inlined (the transform only scales and shifts): a thousand calls of it
        # would take longer than the painting.
        centre = self._extent.center().x()
        scale_x, scale_y, shift_x, shift_y = t.m11(), t.m22(), t.dx(), t.dy()
        drawn: set[tuple[int, int, int | None]] = set()
        for point in ordered:
            lon = point.lon + 360.0 * round((centre - point.lon) / 360.0)
            x, y = lon * scale_x + shift_x, -point.lat * scale_y + shift_y
            spot = (round(x), round(y), point.judgment)
            if spot in drawn:
                continue
            drawn.add(spot)
            dot = self._dot(point.judgment)
            half = dot.width() / dot.devicePixelRatio() / 2
            painter.drawPixmap(QPointF(x - half, y - half), dot)
        current = next((p for p in self._points if p.image_id == self._current), None)
        if current is not None:
            painter.setPen(QPen(QColor("#1f2629"), 2.0))
            painter.setBrush(Qt.BrushStyle.NoBrush)
            painter.drawEllipse(self.to_pixel(current.lat, current.lon, t), 7.0, 7.0)

    def _paint_drag(self, painter: QPainter) -> None:
        if self._press is None or self._drag is None:
            return
        painter.setPen(QPen(BOX, 1.5))
        painter.setBrush(QBrush(QColor(217, 72, 15, 40)))
        painter.drawRect(QRectF(self._press, self._drag).normalized())

    def _paint_caption(self, painter: QPainter) -> None:
        text = self.caption()
        if not text:
            return
        metrics = painter.fontMetrics()
        box = QRectF(
            4, self.height() - metrics.height() - 6, metrics.horizontalAdvance(text) + 10,
            metrics.height() + 2,
        )  # fmt: skip
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(QColor(255, 255, 255, 200))
        painter.drawRoundedRect(box, 3, 3)
        painter.setPen(QColor("#3c454c"))
        painter.drawText(box, int(Qt.AlignmentFlag.AlignCenter), text)

    # -- mouse -------------------------------------------------------------------------------

    def mousePressEvent(self, event: QMouseEvent) -> None:  # noqa: N802
        if event.button() == Qt.MouseButton.LeftButton:
            self._press = event.position()
            self._drag = None
        super().mousePressEvent(event)

    def mouseMoveEvent(self, event: QMouseEvent) -> None:  # noqa: N802
        if self._press is not None:
            self._drag = event.position()
            self.update()
        super().mouseMoveEvent(event)

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:  # noqa: N802
        press, self._press, self._drag = self._press, None, None
        if press is None or event.button() != Qt.MouseButton.LeftButton:
            super().mouseReleaseEvent(event)
            return
        end = event.position()
        self.update()
        if abs(end.x() - press.x()) < CLICK_SLOP and abs(end.y() - press.y()) < CLICK_SLOP:
            point = self.point_at(end)
            if point is not None:
                self.pointClicked.emit(point.image_id)
            return
        self.boxDrawn.emit(self.box_from_pixels(press, end))

    def mouseDoubleClickEvent(self, event: QMouseEvent) -> None:  # noqa: N802
        self.fit()

    def wheelEvent(self, event: QWheelEvent) -> None:  # noqa: N802
        steps = event.angleDelta().y() / 120.0
        if not steps:
            return
        factor = 0.8**steps
        lat, lon = self.to_lat_lon(event.position())
        extent = self._extent
        width = min(360.0, max(0.5, extent.width() * factor))
        height = min(180.0, max(0.25, extent.height() * factor))
        # The place under the pointer stays under it.
        left = lon - (lon - extent.left()) * width / extent.width()
        top = lat - (lat - extent.top()) * height / extent.height()
        top = max(-90.0, min(90.0 - height, top))
        self._extent = QRectF(left, top, width, height)
        self.update()
        event.accept()

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802
        super().resizeEvent(event)
        self.update()
