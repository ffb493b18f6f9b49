"""The window in every view state on four screens (1280×800, 1366×768, 1920×1080, 2560×1440):
it never outgrows the screen, no widget is cut by its parent or drawn over a sibling, the grid
keeps two rows of thumbnails, every label's text fits or is elided with the whole of it in the
tooltip, and saved queries can be told apart.

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
from PySide6.QtCore import QRect, QSize
from PySide6.QtWidgets import QApplication, QWidget

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


def test_the_metrics_lend_the_panels_height_and_get_it_back(windows: Windows) -> None:
    """On 1280×800 the Reranked editor takes its room from the metrics, not from the grid or
    past the screen's edge, and the metrics get their height back when it goes (Qt would
    leave them at their least)."""
    window = _window(windows, (1280, 800))
    states.apply_state(window, "text", QRect(0, 0, 1280, 800))
    size, metrics = window.size(), window.metrics_dock.height()

    states.state_rerank(window)
    states.settle(10)
    assert window.size() == size
    assert window.subquery_editor.isVisible()
    assert window.metrics_dock.height() < metrics
    assert states.grid_problems(window) == []

    window.subquery_editor.hide()
    states.settle(10)
    assert abs(window.metrics_dock.height() - metrics) <= 2


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


@pytest.mark.skipif(shutil.which("Xvfb") is None, reason="Xvfb is not installed")
def test_the_real_window_in_every_state_under_xvfb(tmp_path: Path) -> None:
    runs = {size: _real_window("xvfb", size, tmp_path / f"{size[0]}") for size in states.SCREENS}
    for size, process in runs.items():
        report = _states_report(process)
        assert report["problems"] == [], size
        window = report["window"]
        assert window[0] <= size[0] and window[1] <= size[1]  # type: ignore[index]
