"""Where the main window's docks go and how large they are.

The library and the saved queries are on the left, the photo on the right. The live metrics
and "Where and when" (tabs of one group) go where the window has room for them:

- **under the grid** when the window is tall enough for everything above the grid (the query
  bar, the panels above the grid at their least, a message), the grid's rows, the status line
  *and* `PANEL_LEAST_HEIGHT` for the metrics; the library and the queries then share the left
  column one above the other;
- **beside the grid**, full height, on a shorter window (a 1280×800 or 1366×768 screen): the
  metrics a tab of the left column next to the library and the queries (so the photo and the
  numbers are both in view while judging), Where and when a tab beside the Photo pane (its
  charts need the width, and four tabs do not fit one column). Under the grid there they got
  65–110 px once VisRet's drawings, Reranked's questions or a filter chip were shown.

The choice follows the window's height only, never what is shown: a chip added must not move
the metrics. Docks the user floated or moved to another side are left where they are. A
saved layout is kept, and moved only when the window it comes back in cannot hold it.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QEvent, QObject, QRect, QSize, Qt, QTimer
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QDockWidget, QMainWindow, QWidget

BOTTOM, SIDE = "bottom", "side"  # where the metrics and Where and when are
AREA = Qt.DockWidgetArea
BAND = AREA.BottomDockWidgetArea

# A first window takes this much of the screen's available area (room left for the frame) ...
FIRST_FILL = (0.94, 0.92)
FIRST_MAX = QSize(2200, 1400)  # ... and no more: a huge window on a huge screen is no help
# Default dock sizes as fractions of the window, each within (least, most) pixels; a pane's own
# minimum width still wins.
LIBRARY_WIDTH = (0.2, 260, 380)
SIDE_WIDTH = (0.2, 250, 420)  # the left column holding the metrics beside the grid
DETAIL_WIDTH = (0.27, 300, 600)
METRICS_HEIGHT = (0.28, 210, 320)  # under the grid
LIBRARY_SHARE = 0.42  # of the left column's height, above the saved queries
# The metrics' and Where and when's least height under the grid: the six numbers and the chart,
# or the map and Export analyses…, without scrolling.
PANEL_LEAST_HEIGHT = 200
SCROLL_LEAST_HEIGHT = 64  # px: elsewhere a panel scrolls rather than ask the window for height
DOCK_CHROME = 62  # px: a dock's title bar and the tab bar of tabbed docks, with separators


def first_size(available: QSize) -> QSize:
    """The size of a first window on a screen whose available area is `available`."""
    return QSize(
        min(round(available.width() * FIRST_FILL[0]), FIRST_MAX.width()),
        min(round(available.height() * FIRST_FILL[1]), FIRST_MAX.height()),
    )


def share(total: int, rule: tuple[float, int, int]) -> int:
    fraction, least, most = rule
    return max(least, min(most, round(total * fraction)))


def default_dock_sizes(window: QSize) -> tuple[int, int, int]:
    """(library width, Photo pane width, metrics height under the grid) for a window of this
    size."""
    return (
        share(window.width(), LIBRARY_WIDTH),
        share(window.width(), DETAIL_WIDTH),
        share(window.height(), METRICS_HEIGHT),
    )


def rect_text(rect: QRect) -> str:
    return f"{rect.width()}×{rect.height()} at ({rect.x()}, {rect.y()})"


class WindowDocks(QObject):
    """Places the window's five docks (see the module docstring) and checks what a user would
    find unusable about them. `panels` are the panels above the grid; `centre_least` is the height the centre needs with the panels
    above the grid at their least; `detail_least_width` the Photo pane's least width;
    `lay_out(dock, column, least_height)` lays a dock's panel out for a column or a band,
    scrolling below `least_height`."""

    def __init__(
        self,
        window: QMainWindow,
        docks: dict[str, QDockWidget],
        panels: QWidget,
        centre_least: Callable[[], int],
        detail_least_width: Callable[[], int],
        lay_out: Callable[[QDockWidget, bool, int], None],
    ) -> None:
        super().__init__(window)
        self.window = window
        self.library, self.queries = docks["library"], docks["queries"]
        self.detail = docks["detail"]
        self.metrics, self.place = docks["metrics"], docks["place"]
        self.panels = panels  # the panels above the grid (chips, drawings, questions)
        self._centre_least = centre_least
        self._detail_least_width = detail_least_width
        self._lay_out = lay_out
        self.placement: str | None = None  # None: not placed yet (the window not shown)
        self.restored = False  # a saved layout placed the docks
        self._arranging = False
        self._pending = False
        # The metrics' height under the grid while no panel is above it: what they get back
        # once the panels that borrowed it are gone (Qt would give it all to the grid).
        self.metrics_height = 0
        self.giving_back = False
        for dock in (self.metrics, self.place):
            dock.dockLocationChanged.connect(lambda _area, d=dock: self._follow_area(d))
            dock.topLevelChanged.connect(lambda _floating, d=dock: self._follow_area(d))
        window.installEventFilter(self)

    def all(self) -> list[QDockWidget]:
        return [self.library, self.queries, self.detail, self.metrics, self.place]

    # -- where the metrics go ---------------------------------------------------------------------

    def bottom_needs(self) -> int:
        """The least window height that holds the metrics under the grid in every state."""
        menu = self.window.menuBar().sizeHint().height()
        return menu + self._centre_least() + DOCK_CHROME + PANEL_LEAST_HEIGHT

    def wanted(self) -> str:
        return BOTTOM if self.window.height() >= self.bottom_needs() else SIDE

    def _column(self, dock: QDockWidget) -> Qt.DockWidgetArea:
        """The column `dock` goes to beside the grid."""
        return AREA.LeftDockWidgetArea if dock is self.metrics else AREA.RightDockWidgetArea

    def _managed(self, dock: QDockWidget) -> bool:
        """Whether `dock` is where this class puts it (not floated or moved by the user)."""
        if dock.isFloating():
            return False
        return self.window.dockWidgetArea(dock) in (BAND, self._column(dock))

    def found_placement(self) -> str | None:
        """The placement a restored layout shows (None: the user put the metrics elsewhere)."""
        if not self._managed(self.metrics):
            return None
        return BOTTOM if self.window.dockWidgetArea(self.metrics) == BAND else SIDE

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802
        if watched is self.window and event.type() == QEvent.Type.Resize:
            self.schedule()
        elif watched is self.metrics and event.type() == QEvent.Type.Resize:
            self.remember_metrics_height()
        return super().eventFilter(watched, event)

    def schedule(self) -> None:
        """Arrange once the events in hand (a resize, the first show) are done."""
        if self.placement is not None and not self._pending:
            self._pending = True
            QTimer.singleShot(0, self, self._arrange_now)

    def _arrange_now(self) -> None:
        self._pending = False
        self.arrange()

    def first_shown(self) -> None:
        """The window is shown for the first time: the docks go where its height says (a
        second group of tabbed docks made before the window is shown leaves a stale copy of
        its tab bar painted over the library, Qt 6.11)."""
        if self.placement is not None:
            return
        self.metrics.installEventFilter(self)
        found = self.found_placement() if self.restored else None
        if found is None and self.restored:
            self.placement = "user"  # the user's own layout, whatever it is
            self.place.show()
            return
        self.placement = found or ""
        self.arrange(force=found is None)

    def arrange(self, force: bool = False) -> None:
        """Move the metrics and Where and when to where the window's height wants them."""
        if self.placement in (None, "user") or self._arranging:
            return
        wanted = self.wanted()
        if wanted == self.placement and not force:
            return
        self._arranging = True
        try:
            if wanted == SIDE:
                self._to_side()
            else:
                self._to_bottom()
            self.placement = wanted
            for dock in (self.metrics, self.place):
                self._follow_area(dock)
            self.apply_default_sizes()
            # Again once Qt has laid out the moved docks (sizes asked in the same turn as a
            # move are not always kept).
            QTimer.singleShot(0, self, self.apply_default_sizes)
        finally:
            self._arranging = False

    def _front(self, docks: list[QDockWidget]) -> QDockWidget | None:
        """Which of tabbed `docks` is in front (visible), if any."""
        return next((d for d in docks if d.isVisible() and not d.visibleRegion().isEmpty()), None)

    def _keep_hidden(self, dock: QDockWidget) -> bool:
        """Whether `dock` stays closed where it goes: closed by the user (Where and when is
        hidden only until its first placement)."""
        return dock.isHidden() and not (dock is self.place and not self.placement)

    def _to_side(self) -> None:
        w = self.window
        # Laid out for a column before they move: a wide band's least width in a column would
        # widen the window past its screen (Qt grows a window to its docks' least sizes).
        for dock in (self.metrics, self.place):
            if self._managed(dock):
                self._lay_out(dock, True, SCROLL_LEAST_HEIGHT)
        front = self._front([self.library, self.queries]) or self.library
        shown = self._front([self.metrics]) if self.placement else None
        left = self.library if not self.library.isHidden() else self.queries
        for dock in (self.queries, self.metrics):
            if dock is left or (dock is self.metrics and not self._managed(dock)):
                continue
            hidden = self._keep_hidden(dock)
            w.tabifyDockWidget(left, dock)
            dock.setHidden(hidden)
        if self._managed(self.place):
            hidden = self._keep_hidden(self.place)
            if self.detail.isHidden() or self.detail.isFloating():
                w.addDockWidget(self._column(self.place), self.place)
            else:
                w.tabifyDockWidget(self.detail, self.place)
            self.place.setHidden(hidden)
            self.detail.raise_()  # the photo in front; the analyses a click away
        # What was in front under the grid stays in front; a first window shows the library.
        (shown or front).raise_()

    def _to_bottom(self) -> None:
        w = self.window
        shown = self._front([self.metrics, self.place]) or self.metrics
        if shown is self.place and self._front([self.metrics]) is not None:
            shown = self.metrics  # both were in view beside the grid: the metrics stay
        for dock in (self.metrics, self.place):
            hidden = self._keep_hidden(dock)
            if self._managed(dock) and w.dockWidgetArea(dock) != BAND:
                w.addDockWidget(BAND, dock)
            dock.setHidden(hidden)
        if self._managed(self.place) and self._managed(self.metrics):
            hidden = self.place.isHidden()
            w.tabifyDockWidget(self.metrics, self.place)
            self.place.setHidden(hidden)
        # The left column is tall now: the library above the saved queries, both in view.
        queries = self.queries
        left = w.dockWidgetArea(queries) == AREA.LeftDockWidgetArea
        if left and not queries.isFloating() and not self.library.isHidden():
            hidden = queries.isHidden()
            # A dock tabbed with another is split from it only once out of its group.
            w.removeDockWidget(queries)
            w.addDockWidget(AREA.LeftDockWidgetArea, queries)
            w.splitDockWidget(self.library, queries, Qt.Orientation.Vertical)
            queries.setHidden(hidden)
        shown.raise_()

    def least_height(self, dock: QDockWidget) -> int:
        """How short a bottom panel may be before it scrolls: `PANEL_LEAST_HEIGHT` under the
        grid (the window was found tall enough for it), less anywhere else (a column is tall,
        a floating window is the user's to size)."""
        band = self._in_band(dock) and self.placement == BOTTOM
        return PANEL_LEAST_HEIGHT if band else SCROLL_LEAST_HEIGHT

    def _follow_area(self, dock: QDockWidget) -> None:
        """A panel in a column (left or right) is laid out for height, in a band for width."""
        area = self.window.dockWidgetArea(dock)
        column = not dock.isFloating() and area in (
            AREA.LeftDockWidgetArea,
            AREA.RightDockWidgetArea,
        )
        self._lay_out(dock, column, self.least_height(dock))

    # -- sizes ------------------------------------------------------------------------------------

    def apply_default_sizes(self) -> None:
        """Dock sizes as fractions of the window (see `default_dock_sizes`)."""
        w = self.window
        library, detail, metrics = default_dock_sizes(w.size())
        detail = max(detail, self._detail_least_width())
        if self.placement == SIDE:
            library = share(w.width(), SIDE_WIDTH)
        # Qt sizes a group of tabbed docks through the one in front (a hidden tab is ignored).
        left = self._front([self.library, self.queries, self.metrics]) or self.library
        right = self._front([self.detail, self.place]) or self.detail
        w.resizeDocks([left, right], [library, detail], Qt.Orientation.Horizontal)
        if self.placement != SIDE:
            below = self._front([self.metrics, self.place]) or self.metrics
            w.resizeDocks([below], [metrics], Qt.Orientation.Vertical)
        if self.placement == BOTTOM and self._split_left():
            column = w.height() - metrics - w.menuBar().sizeHint().height()
            above = round(column * LIBRARY_SHARE)
            w.resizeDocks(
                [self.library, self.queries], [above, column - above], Qt.Orientation.Vertical
            )

    def _split_left(self) -> bool:
        """The library and the queries one above the other (not tabs of one group)."""
        return (
            self.library.isVisible()
            and self.queries.isVisible()
            and self.library.geometry().bottom() < self.queries.geometry().top()
        )

    def remember_metrics_height(self) -> None:
        if self.panels.isHidden() and not self.giving_back and self._in_band(self.metrics):
            self.metrics_height = self.metrics.height()

    def panels_shown(self, shown: bool) -> None:
        """The panels above the grid take their room from the metrics under it while the grid
        is at its least height; once they go, the metrics get their height back."""
        if not shown and self.metrics_height and self.placement == BOTTOM:
            self.giving_back = True  # the sizes on the way are not the user's
            QTimer.singleShot(0, self, self._give_metrics_back)

    def _give_metrics_back(self, asked: int = 0) -> None:
        """Resize the metrics to `metrics_height`; `asked`: what the first try asked for. Qt
        counts a tabbed dock's tab bar in the size asked, so a second try asks for what the
        first fell short by."""
        dock, wanted = self.metrics, self.metrics_height
        if self.panels.isHidden() and self._in_band(dock):
            if asked == 0:
                self.window.resizeDocks([dock], [wanted], Qt.Orientation.Vertical)
                QTimer.singleShot(0, self, lambda: self._give_metrics_back(wanted))
                return
            if dock.height() < wanted:
                more = asked + wanted - dock.height()
                self.window.resizeDocks([dock], [more], Qt.Orientation.Vertical)
        self.giving_back = False

    def _in_band(self, dock: QDockWidget) -> bool:
        return not dock.isFloating() and self.window.dockWidgetArea(dock) == BAND

    # -- checks -----------------------------------------------------------------------------------

    def problems(self, centre_least_width: int) -> list[str]:
        """Docks that leave a pane unusable: a narrow Photo pane or results grid, metrics taking
        half the height or squeezed under the grid, a floating dock off every screen."""
        w = self.window
        problems = []
        results = w.centralWidget()
        if results is not None and results.width() < centre_least_width:
            problems.append(f"results {results.width()} px wide")
        least = self._detail_least_width()
        pane = self.detail.widget()
        if self.detail.isVisible() and not self.detail.isFloating() and pane.width() < least:
            problems.append(f"Photo pane {pane.width()} px wide")
        for dock in (self.metrics, self.place):
            if not dock.isVisible() or not self._in_band(dock):
                continue
            if dock.height() > w.height() // 2:
                problems.append(f"{dock.windowTitle()} {dock.height()} px high")
            inner = dock.widget().height()
            if inner < PANEL_LEAST_HEIGHT - 4:
                problems.append(f"{dock.windowTitle()} {inner} px high under the grid")
        for dock in self.all():
            if dock.isFloating() and QGuiApplication.screenAt(dock.geometry().center()) is None:
                problems.append(f"{dock.windowTitle()} off screen")
        return problems

    def dock_off_screen(self) -> None:
        """Dock again every floating dock that is on no screen."""
        for dock in self.all():
            if dock.isFloating() and QGuiApplication.screenAt(dock.geometry().center()) is None:
                dock.setFloating(False)
