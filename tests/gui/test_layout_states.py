"""The window in every view state on five screens (1280×800, 1366×768, 1600×1000, 1920×1080,
2560×1440), the camera-trap demo's events among them: it never outgrows the screen, no widget
is cut by its parent or drawn over a sibling, the grid keeps two rows of thumbnails, every
label's text fits or is elided with the whole of it in the tooltip, saved queries can be told
apart, and the metrics and the analyses stay usable (the six numbers, the chart, the maps and
Export analyses… in view without scrolling) whatever is shown above the grid.

The states and the checks live in tools/layout_states.py, shared with
`tools/screenshots.py --check-layout --states`, which the last two tests run: the application's
own window on a real screen (Qt's offscreen platform always, Xvfb where it is installed). In
process, one window per screen size goes through every state, so that part takes seconds.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from PySide6.QtCore import QRect, QSize, Qt
from PySide6.QtWidgets import QApplication, QDockWidget, QWidget

from widgets.main_window import MainWindow, first_size
from widgets.style import style_sheet

ROOT = Path(__file__).resolve().parents[2]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "quadrat_layout_states", ROOT / "tools" / "layout_states.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


states = _load()
Windows = dict[tuple[int, int], MainWindow]  # one per screen size
_windows: Windows = {}


@pytest.fixture(scope="module")
def windows(qapp: QApplication) -> Iterator[Windows]:
    """One first window per screen size, placed on an available area of that size."""
    yield _windows
    for window in _windows.values():
        window.close()
        window.deleteLater()
    _windows.clear()


def _window(windows: Windows, size: tuple[int, int]) -> MainWindow:
    if size not in windows:
        window = MainWindow()
        window.setStyleSheet(style_sheet())
        window.place_on(QRect(0, 0, *size))
        window.show()
        states.settle(10)
        windows[size] = window
    return windows[size]


@pytest.mark.parametrize("size", states.SCREENS, ids=[f"{w}x{h}" for w, h in states.SCREENS])
@pytest.mark.parametrize("state", list(states.STATES))
def test_every_state_fits_every_screen(windows: Windows, size: tuple[int, int], state: str) -> None:
    window = _window(windows, size)
    states.apply_state(window, state, QRect(0, 0, *size))
    assert states.view_problems(window, QRect(0, 0, *size)) == []
    # Not merely inside the screen: no panel, name or text made the first window any larger.
    assert window.size() == first_size(QSize(*size))


@pytest.mark.parametrize("size", states.SCREENS, ids=[f"{w}x{h}" for w, h in states.SCREENS])
def test_the_benchmark_view_fits_every_screen(windows: Windows, size: tuple[int, int]) -> None:
    window = _window(windows, size)
    dialog = states.benchmark_dialog(window)
    try:
        dialog.show()
        states.settle()
        assert states.dialog_problems(dialog, QRect(0, 0, *size)) == []
    finally:
        dialog.close()
        dialog.deleteLater()


@pytest.mark.parametrize("width", [700, 837])  # 837: the metrics dock of a 1280×800 window
def test_the_metrics_headline_is_readable_in_a_small_dock(qtbot, width: int) -> None:
    """With a long run name, the runs table asked for more room than a 1280×800 window's
    dock has: the metric tiles were squashed onto one another and the table covered the
    chart. In a dock of that size (held by a parent, as a maximised window holds it) every
    metric, the stop rule and the chart have their room, or scroll."""
    from widgets.metrics_panel import MetricsPanel, MetricsView

    holder = QWidget()
    holder.setStyleSheet(style_sheet())
    qtbot.addWidget(holder)
    panel = MetricsPanel(holder)
    runs, current = states._runs(states.RUN_LABELS)
    panel.show_metrics(MetricsView(states.LONG_QUERY, 10, 9, 15, current, runs))
    panel.set_recall_estimate("found 9 of about 12 (90 %: 10–16)")
    holder.resize(width + 20, 200)
    panel.setGeometry(0, 0, width, 150)
    holder.show()
    states.settle(10)

    assert states.geometry_problems(panel) + states.label_problems(panel) == []
    assert panel.title.toolTip() == f"“{states.LONG_QUERY}”"


def test_the_metrics_go_beside_the_grid_on_a_short_screen(windows: Windows) -> None:
    """Under the grid, VisRet's drawings, Reranked's questions or a chip left the metrics and
    Where and when 65–110 px on a 1280×800 screen. A window without the height for them there
    has them beside the grid, full height; a taller one keeps them under it."""
    from widgets.window_docks import BOTTOM, SIDE

    for size in states.SCREENS:
        window = _window(windows, size)
        states.apply_state(window, "message", QRect(0, 0, *size))
        placement = window.dock_layout.placement
        assert placement == (SIDE if size[1] <= 1000 else BOTTOM), size
        if placement == SIDE:
            assert (
                window.dockWidgetArea(window.metrics_dock) == Qt.DockWidgetArea.LeftDockWidgetArea
            )
            assert window.metrics_dock.height() > 0.8 * window.height()
        for dock in (window.metrics_dock, window.place_dock):
            assert dock.features() & QDockWidget.DockWidgetFeature.DockWidgetFloatable


def test_the_metrics_lend_the_panels_height_and_get_it_back(windows: Windows) -> None:
    """Under the grid (1920×1080) the Reranked editor takes its room from the metrics, never
    below their usable height, and they get it back when it goes (Qt would leave them at their
    least); beside the grid (1280×800) the editor takes nothing from them."""
    from widgets.window_docks import PANEL_LEAST_HEIGHT

    for size in ((1920, 1080), (1280, 800)):
        window = _window(windows, size)
        states.apply_state(window, "text", QRect(0, 0, *size))
        window_size, metrics = window.size(), window.metrics_dock.height()

        states.state_rerank_after_visret(window)
        states.state_message(window)
        states.settle(10)
        assert window.size() == window_size
        assert window.subquery_editor.isVisible()
        if size == (1920, 1080):
            assert window.metrics_dock.height() <= metrics
            assert window.metrics_panel.height() >= PANEL_LEAST_HEIGHT - 2
        else:
            assert window.metrics_dock.height() == metrics
        assert states.grid_problems(window) == []

        window.subquery_editor.hide()
        window.drawings_strip.hide()
        window.message_banner.dismiss()
        window.filter_bar.set_filters([], {})
        states.settle(10)
        assert abs(window.metrics_dock.height() - metrics) <= 2


@pytest.mark.parametrize("size", states.SCREENS, ids=[f"{w}x{h}" for w, h in states.SCREENS])
def test_the_metrics_divider_moves(windows: Windows, size: tuple[int, int]) -> None:
    """With everything shown above the grid, the divider between the metrics and the grid
    still moves a useful way (about 25 px under the grid on 1280×800), and never past the
    metrics' usable size or the window's edge."""
    window = _window(windows, size)
    states.apply_state(window, "message", QRect(0, 0, *size))
    dock = window.metrics_dock
    beside = window.dock_layout.placement == "side"
    orientation = Qt.Orientation.Horizontal if beside else Qt.Orientation.Vertical
    reach = []
    for asked in (1, 5000):  # as small, then as large, as the window lets it be
        window.resizeDocks([dock], [asked], orientation)
        states.settle(10)
        reach.append(dock.width() if beside else dock.height())
        assert states.panel_problems(window) == [], asked
        assert window.size() == first_size(QSize(*size))
    assert reach[1] - reach[0] >= 60
    window.apply_default_docks()
    states.settle(10)


# A floating dock asks the offscreen platform for what it cannot do; that says nothing here.
@pytest.mark.qt_log_ignore("does not support propagateSizeHints", "does not support raise")
def test_a_floating_metrics_dock_is_a_band_and_docks_back(windows: Windows) -> None:
    window = _window(windows, (1280, 800))
    states.apply_state(window, "many-runs", QRect(0, 0, 1280, 800))
    dock, panel = window.metrics_dock, window.metrics_panel
    assert panel.narrow  # a column beside the grid
    dock.setFloating(True)
    dock.resize(900, 320)
    states.settle(10)
    assert not panel.narrow  # a window of its own: side by side, as under the grid
    assert panel.runs.x() > panel.values["P"].x()  # the table beside the tiles
    dock.setFloating(False)
    states.settle(10)
    assert panel.narrow and window.dockWidgetArea(dock) == Qt.DockWidgetArea.LeftDockWidgetArea
    window.apply_default_docks()


def test_the_metrics_header_fits_in_event_mode(windows: Windows) -> None:
    """Grouped by event, the summary says "per event" and whose judgments: it overflowed the
    header. It is one elided line now, whole in its tooltip, on every screen."""
    for size in states.SCREENS:
        window = _window(windows, size)
        states.apply_state(window, "events", QRect(0, 0, *size))
        summary = window.metrics_panel.summary
        assert states.EVENTS_NOTE in summary.toolTip()
        assert summary.x() + summary.width() <= summary.parentWidget().width()
        assert states.label_problems(window.metrics_panel) == []
        # However long the note, the panel asks for no more width than without it.
        with_note = window.metrics_panel.minimumSizeHint().width()
        states._metrics(window, states.NIGHT_QUERY, states.RUN_LABELS[:2])
        assert window.metrics_panel.minimumSizeHint().width() == with_note


@pytest.mark.parametrize("size", [(1920, 1080), (2560, 1440)], ids=["1920x1080", "2560x1440"])
def test_no_room_is_wasted_on_a_large_screen(windows: Windows, size: tuple[int, int]) -> None:
    """On 1920×1080 a row of chips sat over a blank band (the panels' room was sized for the
    chips at their narrowest), and the library's list stood mostly empty over a tab hiding the
    saved queries. The chips take their own height; the library and the queries are both in
    view, one above the other."""
    window = _window(windows, size)
    states.apply_state(window, "filters-map", QRect(0, 0, *size))
    stack, chips = window.method_panels, window.filter_bar
    assert chips.isVisible()
    assert stack.height() <= chips.height() + 2
    for dock in (window.library_dock, window.queries_dock):
        assert dock.isVisible() and not dock.visibleRegion().isEmpty(), dock.windowTitle()
    assert window.queries_dock.y() > window.library_dock.y()


@pytest.mark.parametrize("size", states.SCREENS, ids=[f"{w}x{h}" for w, h in states.SCREENS])
def test_the_chart_names_every_run_whole(windows: Windows, size: tuple[int, int]) -> None:
    """Beside the grid the chart is tall and narrow: its legend goes under the curves, so a
    long run name (Reranked's questions, a deployment and hour filter) is wrapped, not cut."""
    window = _window(windows, size)
    for state in ("rerank-after-visret", "events"):
        states.apply_state(window, state, QRect(0, 0, *size))
        window.metrics_panel.chart.grab()  # paints, placing the legend
        assert window.metrics_panel.clipped() == [], state


def test_a_dozen_runs_in_the_legend_stay_inside_the_chart(qtbot) -> None:
    """Twelve runs: the legend names as many as fit and the rest in a “+ N more” tooltip,
    instead of painting labels past the chart's bottom edge."""
    from widgets.metrics_panel import PrecisionChart

    chart = PrecisionChart()
    qtbot.addWidget(chart)
    labels = tuple(f"{states.RUN_LABELS[n % 4]} #{n}" for n in range(12))
    runs, current = states._runs(labels)
    chart.set_runs(runs, current, 10)
    chart.resize(420, 150)
    chart.grab()  # paints, placing the legend

    placed = chart._legend_rects
    assert all(chart.rect().toRectF().contains(rect) for rect, _label in placed)
    named = "\n".join(label for _rect, label in placed)
    assert all(label in named for label in labels)


def test_the_checks_see_a_squeezed_metrics_panel(windows: Windows) -> None:
    """The usable-height check itself: metrics squeezed under the grid as they were (one row
    of numbers, no chart) are found."""
    window = _window(windows, (1920, 1080))
    states.apply_state(window, "rerank-after-visret", QRect(0, 0, 1920, 1080))
    scroll = window.metrics_panel.scroll_area
    try:
        scroll.least_height = 40
        scroll.updateGeometry()
        window.metrics_dock.setMaximumHeight(100)  # as short as the panels above left it
        states.settle(10)
        found = states.panel_problems(window)
        assert any(p.startswith("metrics: nDCG") for p in found), found
        assert any(p.startswith("metrics: chart") for p in found), found
    finally:
        scroll.least_height = window.dock_layout.least_height(window.metrics_dock)
        window.metrics_dock.setMaximumHeight(16_777_215)
        window.apply_default_docks()
        states.apply_state(window, "text", QRect(0, 0, 1920, 1080))


def test_the_checks_see_a_cut_label_and_a_window_too_large(windows: Windows) -> None:
    """The checks themselves: what they must find, they find."""
    window = _window(windows, (1920, 1080))
    states.apply_state(window, "text", QRect(0, 0, 1920, 1080))
    assert any(
        "larger than the screen" in p for p in states.view_problems(window, QRect(0, 0, 800, 600))
    )
    label = window.library_panel.findChildren(type(window.empty_label))[0]
    text = label.text()
    try:
        label.setText("x" * 400)
        label.setToolTip("")
        label.setWordWrap(False)
        label.setMaximumWidth(100)
        states.settle()
        assert any("px of text in" in p for p in states.label_problems(window))
    finally:
        label.setMaximumWidth(16777215)
        label.setText(text)


def _real_window(platform: str, size: tuple[int, int], out: Path) -> subprocess.Popen[str]:
    """`tools/screenshots.py --check-layout --states`: the real window, controllers and all,
    on a real screen of `size` (Qt's offscreen platform with that screen, or Xvfb)."""
    width, height = size
    return subprocess.Popen(
        [sys.executable, str(ROOT / "tools" / "screenshots.py"), "--check-layout", "--states"]
        + ["--platform", platform, "--screen", f"{width}x{height}x24", "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "QT_QPA_PLATFORM"},
    )


def _states_report(process: subprocess.Popen[str]) -> dict[str, object]:
    stdout, stderr = process.communicate(timeout=180)
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    assert lines, f"no layout report (exit {process.returncode}): {stderr[-2000:]}"
    report: dict[str, object] = json.loads(lines[-1])
    shown = report["states"]
    assert isinstance(shown, dict) and set(shown) == set(states.STATES) | {"benchmark"}
    return report


def test_the_real_window_in_every_state_on_a_small_screen(tmp_path: Path) -> None:
    """The application's own window on the offscreen platform's 1280×800 screen (no X)."""
    report = _states_report(_real_window("offscreen", (1280, 800), tmp_path))
    assert report["problems"] == []
    assert (tmp_path / "state-rerank-after-visret-1280x800.png").stat().st_size > 10_000


# Under CI it never skips: .ci/xvfb.sh installs Xvfb, and a CI machine without it fails here.
@pytest.mark.skipif(
    shutil.which("Xvfb") is None and not os.environ.get("CI"), reason="Xvfb is not installed"
)
def test_the_real_window_in_every_state_under_xvfb(tmp_path: Path) -> None:
    runs = {size: _real_window("xvfb", size, tmp_path / f"{size[0]}") for size in states.SCREENS}
    for size, process in runs.items():
        report = _states_report(process)
        assert report["problems"] == [], size
        window = report["window"]
        assert window[0] <= size[0] and window[1] <= size[1]  # type: ignore[index]
