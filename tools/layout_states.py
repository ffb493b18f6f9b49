"""The main window's view states and the geometry checks a layout must pass in each of them.

Shared by the layout test (tests/gui/test_layout_states.py, on Qt's offscreen platform) and
`tools/screenshots.py --check-layout --states` (the real window, under Xvfb or offscreen): a
state is a function that puts plain data into the window's widgets, as the controllers would
(a Reranked run with its question editor, VisRet's drawings, filter chips, twelve runs, a
300-character query, ...); `view_problems` then lists what a user would find wrong.

A new state is one more function in `STATES`; `reset` undoes what any state did.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from PySide6.QtCore import QEvent, QPoint, QRect, Qt
from PySide6.QtGui import QColor, QImage, QPixmap, QTextDocument
from PySide6.QtGui import Qt as GuiQt
from PySide6.QtWidgets import (
    QApplication,
    QDialog,
    QLabel,
    QLayout,
    QListView,
    QMainWindow,
    QScrollArea,
    QSplitter,
    QSplitterHandle,
    QTreeWidget,
    QWidget,
)

SCREENS = [(1280, 800), (1366, 768), (1600, 1000), (1920, 1080), (2560, 1440)]
TOLERANCE = 2  # px: rounding in layouts and style sheets, not a cut anyone would see
GRID_ROWS = 2  # the results grid shows at least this many rows of thumbnails
QUERY_SHOWN = 16  # characters of a saved query's text the Queries tab shows at least
# The metrics' chart and the analyses' maps are of no use smaller than this (px); the six
# metric values, Export analyses… and these charts must be in view without scrolling.
USABLE_CHART = (180, 100)

LONG_QUERY = ("a red circle beside a blue square on a pale ground, seen from above, " * 5)[:300]
RERANK_LABEL = (
    "Reranked (base=hybrid, subqueries=['Is there a red circle in this image?', "
    "'Is there a blue square in this image?'])"
)
VISRET_LABEL = "VisRet (leave_out=1)"
RUN_LABELS = (
    "Text · 14:03",
    "Hybrid · 14:05",
    f"{VISRET_LABEL} · 14:07",
    f"{RERANK_LABEL} · 14:09",
)
QUESTIONS = ("Is there a red circle in this image?", "Is there a blue square in this image?")
COST = (
    "Next run: 100 photos × 2 questions = 200 calls, under a minute with clip-regions "
    "(scores already cached are not asked again)"
)


# -- plain data, as the controllers hand it over -----------------------------------------------


def _details(number: int) -> Any:
    from widgets.photo_view import PhotoView

    return PhotoView(
        common_name=f"Red circle of the northern uplands {number}",
        taxon="Circulus ruber",
        lineage=(("kingdom", "Plantae"), ("species", "C. ruber")),
        observed_at=datetime(2019, 12, 2, 10, 47),
        latitude=37.7113,
        longitude=-122.47806,
        location_uncertainty=323.0,
        license="CC BY-NC-SA 4.0",
        rights_holder="Ada Linnaea and the Upland Naturalists' Society",
        width=4032,
        height=3024,
        collection="demo-collection",
    )


def _results(count: int = 40) -> list[Any]:
    from widgets.results import ResultItem

    return [
        ResultItem(
            rank,
            1.0 - rank / 100,
            rank,
            f"/photos/{rank:05}.jpg",
            "red circle",
            None,
            _details(rank),
        )  # fmt: skip
        for rank in range(1, count + 1)
    ]


def _runs(labels: tuple[str, ...], current: int = -1) -> Any:
    from widgets.metrics_panel import RunMetrics

    values = {"P": 0.3, "R_at_k": 0.333, "AP": 0.176, "nDCG": 0.381, "RR": 1.0, "judged": 0.6}
    curve = [1.0, 0.5, 0.33, 0.25, 0.2, 0.33, 0.29, 0.25, 0.33, 0.3]
    runs = [
        RunMetrics(number, label.split(" · ")[0], label, values, curve, 0 + number, 1)
        for number, label in enumerate(labels, start=1)
    ]
    return runs, runs[current].run_id


def _metrics(window: QMainWindow, title: str, labels: tuple[str, ...], note: str = "") -> None:
    from widgets.metrics_panel import MetricsView

    runs, current = _runs(labels)
    view = MetricsView(title, 10, 9, 15, current, runs, judgments_note=note)
    window.metrics_panel.show_metrics(view)  # type: ignore[attr-defined]
    window.metrics_panel.set_recall_estimate(  # type: ignore[attr-defined]
        "found 9 of about 12 (90 %: 10–16)", "from 15 judgments"
    )


def _queries() -> list[Any]:
    from widgets.query_list import QueryRow

    texts = [
        "a red circle beside a blue square",
        "red circle",
        "a blue square under a green triangle",
        LONG_QUERY,
    ]
    methods = "Text · Hybrid · " + VISRET_LABEL + " · " + RERANK_LABEL
    return [
        QueryRow(number, text, text, None, None, methods, None, 4, 9, 15)
        for number, text in enumerate(texts, start=1)
    ]


# -- the states ----------------------------------------------------------------------------------


def reset(window: QMainWindow) -> None:
    """Back to a plain Text search with a selected photo: every state starts from here."""
    w: Any = window
    w.drawings_strip.hide()
    w.subquery_editor.hide()
    w.message_banner.dismiss()
    w.filter_bar.set_filters([], {})
    w.filmstrip.clear()
    w.group_events_action.setChecked(False)
    w.query_bar.edit.setText("red circle")
    w.results_model.set_results(_results())
    w.detail_pane.set_item(_results(1)[0])
    photo = QPixmap(1600, 1200)
    photo.fill(QColor("#7a9a6a"))
    w.detail_pane.set_photo(photo)
    w.set_status("40 results for “red circle” · Text · search 15 ms")
    _metrics(window, "red circle", RUN_LABELS[:1])
    w.query_list.set_queries(_queries()[:2])
    w.library_dock.raise_()
    w.detail_dock.raise_()
    w.metrics_dock.raise_()
    w.place_pane.set_mode(0)  # Where and when: the results


def state_text(window: QMainWindow) -> None:
    """A Text search, as after the first query."""


def state_visret(window: QMainWindow) -> None:
    """VisRet: the drawings strip above the grid, its run in the metrics."""
    from widgets.drawings_strip import DrawingCard

    w: Any = window
    image = QImage(256, 256, QImage.Format.Format_RGB32)
    image.fill(QColor("#c0392b"))
    cards = [DrawingCard(i, 1000 + i, image, seconds=1.5) for i in range(4)]
    w.drawings_strip.show_drawings("a photo of a red circle beside a blue square", cards, "done")
    w.drawings_strip.show()
    w.set_status(f"40 results for “a red circle beside a blue square” · {VISRET_LABEL} · 1.2 s")
    _metrics(window, "a red circle beside a blue square", RUN_LABELS[:3])


def _rerank_editor(window: QMainWindow) -> None:
    from widgets.subquery_editor import QuestionRow

    w: Any = window
    editor = w.subquery_editor
    editor.set_bases([("text", "Text"), ("hybrid", "Hybrid")], "hybrid")
    editor.set_questions([QuestionRow(q, "builtin") for q in QUESTIONS])
    editor.set_sort_choices(list(QUESTIONS))
    editor.set_cost(COST)
    editor.show()


def state_rerank(window: QMainWindow) -> None:
    """Reranked after Suggest: the question editor, a long run name everywhere it is shown."""
    _rerank_editor(window)
    w: Any = window
    w.set_status(f"40 results for “a red circle beside a blue square” · {RERANK_LABEL} · 1.3 s")
    _metrics(window, "a red circle beside a blue square", RUN_LABELS)


def state_rerank_after_visret(window: QMainWindow) -> None:
    """Reranked chosen right after a VisRet run: both panels at once."""
    state_visret(window)
    state_rerank(window)


def state_filters_and_map(window: QMainWindow) -> None:
    """Filters set (a row of chips) and the map and months in front of the metrics."""
    w: Any = window
    chips = [
        ("taxon", "Taxon: Circulus ruber (red circle) and its descendants"),
        ("months", "Months: March–August"),
        ("licenses", "Licence: CC BY 4.0, CC0 1.0, CC BY-NC-SA 4.0"),
        ("box", "Place: 51.5° N – 37.7° N, 122.5° W – 0.1° W"),
        ("judged", "Not judged"),
    ]
    w.filter_bar.set_filters(chips, {})
    w.show_place_pane()


def state_relevant_analyses(window: QMainWindow) -> None:
    """Where and when › Relevant photos of this query: map, months, hours, taxa, export."""
    from widgets.map_view import MapPoint
    from widgets.place_pane import RELEVANT, RelevantView

    w: Any = window
    w.show_place_pane()
    w.place_pane.set_mode(RELEVANT)
    taxa = [(f"Circulus species {n} (a long common name {n})", 40 - 3 * n) for n in range(10)]
    w.place_pane.relevant.show_view(
        RelevantView(
            title="red circle",
            points=[MapPoint(n, 50.0 - n, -120.0 + 9 * n, 1) for n in range(20)],
            months=[3, 5, 9, 14, 20, 18, 12, 8, 4, 2, 1, 0],
            undated=2,
            hours=[0, 0, 0, 0, 1, 3, 8, 12, 10, 7, 5, 4, 4, 3, 5, 6, 8, 9, 6, 2, 1, 0, 0, 0],
            no_time=5,
            taxa=taxa,
            summary="96 relevant photos: 94 dated, 91 with a time of day, 96 with a taxon, "
            "96 with a place",
        )
    )


def state_long_query(window: QMainWindow) -> None:
    """A 300-character query: in the bar, the metrics' title, the status line, the list."""
    w: Any = window
    w.query_bar.edit.setText(LONG_QUERY)
    w.set_status(f"40 results for “{LONG_QUERY}” · Text · search 15 ms")
    _metrics(window, LONG_QUERY, RUN_LABELS[:2])
    w.query_list.set_queries(_queries())


def state_many_runs(window: QMainWindow) -> None:
    """Twelve runs of one query, long names among them."""
    labels = tuple(
        RUN_LABELS[n % len(RUN_LABELS)].replace("14:0", f"1{n // 4}:0") for n in range(12)
    )
    _rerank_editor(window)
    _metrics(window, "a red circle beside a blue square", labels)


def state_queries(window: QMainWindow) -> None:
    """The Queries tab in front, saved queries with many methods each."""
    w: Any = window
    w.query_list.set_queries(_queries())
    w.queries_dock.raise_()


# -- camera traps: the camera-trap demo's bursts as events (engine/demo/camera_traps.py) -----

CAMERAS = ("CAM01_trail", "CAM02_stream", "CAM03_ridge")
NIGHT_QUERY = "a red circle at night: roe deer at night"
EVENTS_NOTE = "per event (24 events)  ·  newest judgment per photo  ·  frames set apart: 3"


def _event_cards(count: int = 24) -> list[Any]:
    """Event cards as the events controller hands them: each burst's best frame, its frames."""
    from widgets.photo_view import PhotoView
    from widgets.results import ResultItem

    cards = []
    for number in range(count):
        camera = CAMERAS[number % len(CAMERAS)]
        first = 1000 + 12 * number
        frames = tuple(range(first, first + 3 + number % 8))
        details = PhotoView(
            taxon="Capreolus capreolus",
            common_name="roe deer",
            observed_at=datetime(2024, 5, 2, (22 + number) % 24, 7 * number % 60),
            latitude=52.2210 + 0.01 * (number % 3),
            longitude=5.9120,
            width=240,
            height=180,
            collection="camera-traps",
        )
        path = f"/traps/{camera}/IMG_{13 + number % 4:04}.JPG"  # cameras reuse their names
        cards.append(
            ResultItem(
                number + 1,
                0.95 - number / 100,
                first,
                path,
                Path(path).name,
                None,
                details,
                event_id=500 + number,
                frame_ids=frames,
            )  # fmt: skip
        )
    return cards


def state_events(window: QMainWindow) -> None:
    """The camera-trap demo grouped by event: cards with their frame counts, the selected
    event's filmstrip under the photo, the deployment and night-hour chips, per-event metrics."""
    from dataclasses import replace

    w: Any = window
    cards = _event_cards()
    w.group_events_action.setVisible(True)
    w.group_events_action.setChecked(True)
    w.results_model.set_results(cards)
    w.detail_pane.set_item(cards[0])
    frames = [replace(cards[0], image_id=i, frame_ids=()) for i in cards[0].frame_ids]
    w.filmstrip.set_frames(frames, cards[0].image_id)
    w.filter_bar.set_filters(
        [
            ("deployments", f"Deployments: {CAMERAS[0]}, {CAMERAS[2]}"),
            ("hours", "Hours: 22:00–05:00"),
            ("collections", "Collection: camera-traps"),
        ],
        {},
    )
    w.query_bar.edit.setText(NIGHT_QUERY)
    w.set_status(f"24 events (96 frames) for “{NIGHT_QUERY}” · Text · search 9 ms · filtered")
    _metrics(window, NIGHT_QUERY, RUN_LABELS[:2], EVENTS_NOTE)


def state_events_analyses(window: QMainWindow) -> None:
    """Events, with Where and when › Relevant photos: the night hours the camera traps saw."""
    from widgets.map_view import MapPoint
    from widgets.place_pane import RELEVANT, RelevantView

    state_events(window)
    w: Any = window
    w.show_place_pane()
    w.place_pane.set_mode(RELEVANT)
    hours = [9, 12, 7, 4, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 3, 6, 10, 14]
    w.place_pane.relevant.show_view(
        RelevantView(
            title=NIGHT_QUERY,
            points=[
                MapPoint(n, 52.22 + 0.01 * (n % 3), 5.91 + 0.01 * (n % 2), 1) for n in range(9)
            ],
            months=[0, 0, 0, 0, 68, 0, 0, 0, 0, 0, 0, 0],
            hours=hours,
            taxa=[("Capreolus capreolus (roe deer)", 68)],
            summary="68 relevant frames in 9 events: all dated, all with a time of day, "
            "all with a taxon and a place",
        )
    )


def state_detections(window: QMainWindow) -> None:
    """Detector boxes on every tile and the detail pane's lines: a MegaDetector box with a
    SpeciesNet label, a faint second box, a whole-photo label with a long taxon name."""
    from dataclasses import replace

    from widgets.boxes import DetectionView

    w: Any = window
    detections = (
        DetectionView((0.3, 0.35, 0.3, 0.4), "animal", 0.94, "Capreolus capreolus", 0.91,
                      "megadetector", "MDV5A"),
        DetectionView((0.7, 0.6, 0.12, 0.15), "person", 0.41, source="megadetector",
                      model="MDV5A"),
        DetectionView(None, label="Mammalia Artiodactyla Cervidae Capreolus capreolus",
                      label_probability=0.88, source="speciesnet", model="4.0.1a"),
    )  # fmt: skip
    cards = [replace(item, detections=detections) for item in _results()]
    w.show_boxes_action.setVisible(True)
    w.results_model.set_results(cards)
    w.detail_pane.set_item(cards[0])
    w.detail_pane.set_boxes(detections, 0)
    w.results_model.choose_box(cards[0].image_id, 0)


def state_message(window: QMainWindow) -> None:
    """A message to read (a 2,000-character query refused) over VisRet's drawings and a row
    of chips: the most the window ever shows above the grid."""
    from widgets.message_banner import ERROR

    state_visret(window)
    state_filters_and_map(window)
    w: Any = window
    w.metrics_dock.raise_()
    query = ("a red circle beside a blue square " * 60)[:2000]
    w.show_message(
        ERROR,
        "Searching failed",
        f"the query is {len(query):,} characters long; the limit is 1,000 (“{query}”)",
    )


STATES: dict[str, Callable[[QMainWindow], None]] = {
    "text": state_text,
    "visret": state_visret,
    "rerank": state_rerank,
    "rerank-after-visret": state_rerank_after_visret,
    "filters-map": state_filters_and_map,
    "relevant-analyses": state_relevant_analyses,
    "long-query": state_long_query,
    "many-runs": state_many_runs,
    "queries": state_queries,
    "events": state_events,
    "events-analyses": state_events_analyses,
    "message": state_message,
    "detections": state_detections,
}


def settle(rounds: int = 6) -> None:
    """Let layouts and deferred resizes run (they post events to themselves)."""
    app = QApplication.instance()
    for _ in range(rounds):
        if app is not None:
            app.processEvents()
            app.sendPostedEvents()
            # Widgets let go (chips of the last state) are gone, as the event loop's next turn
            # would have them: processEvents alone leaves them painted where they were.
            app.sendPostedEvents(None, QEvent.Type.DeferredDelete)


def apply_state(window: QMainWindow, name: str, area: QRect) -> None:
    """Show state `name` in a first window on a screen whose available area is `area`."""
    reset(window)
    settle()  # the window's minimum size follows what is shown now, before it is placed
    window.place_on(area)  # type: ignore[attr-defined]
    STATES[name](window)
    settle()


def benchmark_dialog(parent: QWidget) -> QDialog:
    """The benchmark view with two methods compared and every table filled."""
    from widgets.benchmark_view import (
        BenchmarkDialog,
        BenchmarkTables,
        CategoryRow,
        QueryRow,
        SummaryRow,
    )

    methods = ["Text", RERANK_LABEL]
    summary = [
        SummaryRow("Text", 12, 0.803, 0.85, 0.9, 1.0),
        SummaryRow(RERANK_LABEL, 12, 0.721, 0.8, 0.88, 1.0, -0.082, (-0.15, -0.02), 0.007),
    ]
    per_query = [
        QueryRow(str(n), LONG_QUERY[: 20 + 10 * n], method, 0.5, 0.6, 1.0, 10, 0.8, 2)
        for n in range(12)
        for method in methods
    ]
    per_category = [
        CategoryRow("supercategory", value, method, 4, 0.7, 0.8)
        for value in ("Plantae", "Animalia", "Fungi")
        for method in methods
    ]
    dialog = BenchmarkDialog(["text", "hybrid", "visret", "rerank"], parent)
    dialog.show_tables(BenchmarkTables(50, "FULLRANK", summary, per_query, per_category,
                                       note="12 queries, 960 photos"))  # fmt: skip
    return dialog


# -- the checks ----------------------------------------------------------------------------------


def _layout_widgets(layout: QLayout | None) -> Iterator[QWidget]:
    """The widgets a layout places, nested layouts included."""
    if layout is None:
        return
    for index in range(layout.count()):
        item = layout.itemAt(index)
        if item is None:
            continue
        placed, nested = item.widget(), item.layout()
        if placed is not None:
            yield placed
        elif nested is not None:
            yield from _layout_widgets(nested)


def _placed_children(widget: QWidget) -> list[QWidget]:
    """The visible children whose geometry a layout (or a splitter) decides: those that must
    fit their parent and not overlap one another. Children placed by hand (a scroll area's
    contents, a dock's title bar) scroll or draw over on purpose and are left out."""
    placed: list[QWidget | None]
    if isinstance(widget, QSplitter):
        placed = [widget.widget(i) for i in range(widget.count())]
    elif isinstance(widget, QMainWindow):
        placed = [widget.centralWidget()]  # the docks are the window's own concern
    else:
        placed = list(_layout_widgets(widget.layout()))
    return [
        child
        for child in placed
        if child is not None
        and child.isVisible()
        and not child.isWindow()
        and not isinstance(child, QSplitterHandle)
    ]


def _name(widget: QWidget) -> str:
    label = widget.objectName() or type(widget).__name__
    if isinstance(widget, QLabel) and QLabel.text(widget):
        label += f" “{QLabel.text(widget)[:40]}”"
    return label


def geometry_problems(root: QWidget, tolerance: int = TOLERANCE) -> list[str]:
    """Children cut by their parent's edge, or on top of a sibling, anywhere under `root`."""
    problems: list[str] = []

    def visit(widget: QWidget, path: str) -> None:
        placed = _placed_children(widget)
        bounds = widget.rect().adjusted(-tolerance, -tolerance, tolerance, tolerance)
        for number, child in enumerate(placed):
            if not bounds.contains(child.geometry()):
                problems.append(
                    f"{path} › {_name(child)}: {_rect(child.geometry())} cut by its parent "
                    f"({widget.width()}×{widget.height()})"
                )
            for other in placed[number + 1 :]:
                overlap = child.geometry().intersected(other.geometry())
                if overlap.width() > tolerance and overlap.height() > tolerance:
                    problems.append(
                        f"{path} › {_name(child)} overlaps {_name(other)} by "
                        f"{overlap.width()}×{overlap.height()}"
                    )
        for child in widget.findChildren(
            QWidget, options=Qt.FindChildOption.FindDirectChildrenOnly
        ):
            if child.isVisible() and not child.isWindow():
                visit(child, f"{path} › {_name(child)}")

    visit(root, _name(root))
    return problems


def _rect(rect: QRect) -> str:
    return f"{rect.width()}×{rect.height()} at ({rect.x()}, {rect.y()})"


def _paints_itself(label: QLabel) -> bool:
    return type(label).paintEvent is not QLabel.paintEvent


def label_problems(root: QWidget, tolerance: int = TOLERANCE) -> list[str]:
    """Visible labels whose text is cut: a single line wider than the label and not elided
    with the whole text in its tooltip, or wrapped lines taller than the label."""
    problems = []
    for label in root.findChildren(QLabel):
        if not label.isVisible() or label.isWindow():
            continue
        shown = QLabel.text(label)  # what QLabel paints (an eliding label sets it elided)
        if not shown.strip():
            continue
        room = label.contentsRect().adjusted(label.margin(), 0, -label.margin(), 0)
        if label.wordWrap():
            needed = label.heightForWidth(label.width())
            if needed > label.height() + tolerance:
                problems.append(
                    f"label {_name(label)} needs {needed} px of height, has {label.height()}"
                )
            continue
        lines = shown.count("\n") + 1
        tall = lines * label.fontMetrics().height()
        if tall > room.height() + tolerance and not label.pixmap():
            problems.append(f"label {_name(label)} is {tall} px of text in {room.height()} px high")
            continue
        if label.textFormat() != Qt.TextFormat.PlainText and GuiQt.mightBeRichText(shown):
            document = QTextDocument()
            document.setDefaultFont(label.font())
            document.setHtml(shown)
            document.setDocumentMargin(0)
            width = round(document.idealWidth())
        else:
            metrics = label.fontMetrics()
            width = max(metrics.horizontalAdvance(line) for line in shown.split("\n"))
        if width <= room.width() + tolerance:
            continue
        full = label.text()
        elided = ("…" in shown or _paints_itself(label)) and label.toolTip() == full
        if not elided:
            problems.append(f"label {_name(label)} is {width} px of text in {room.width()} px")
    return problems


def grid_problems(window: QMainWindow) -> list[str]:
    """The results grid shows fewer than `GRID_ROWS` rows of thumbnails."""
    grid: QListView | None = getattr(window, "results", None)
    if grid is None or not grid.isVisible():
        return []
    row = grid.gridSize().height()
    shown = grid.viewport().height()
    if row > 0 and shown < GRID_ROWS * row:
        return [f"results grid {shown} px high: fewer than {GRID_ROWS} rows of {row} px"]
    return []


def query_list_problems(window: QMainWindow) -> list[str]:
    """Saved queries the Queries tab cuts so short that they cannot be told apart."""
    panel: Any = getattr(window, "query_list", None)
    if panel is None or panel.visibleRegion().isEmpty():  # not the tab in front
        return []
    tree: QTreeWidget = panel.tree
    metrics = tree.fontMetrics()
    problems = []
    for row in range(tree.topLevelItemCount()):
        item = tree.topLevelItem(row)
        if item is None:
            continue
        text = item.text(0)
        room = tree.visualItemRect(item).width() if tree.columnCount() == 1 else tree.columnWidth(0)
        room -= tree.iconSize().width() if not item.icon(0).isNull() else 0
        shown = metrics.elidedText(text, Qt.TextElideMode.ElideRight, max(0, room - 12))
        if len(shown.rstrip("…")) < min(len(text), QUERY_SHOWN):
            problems.append(f"saved query “{text[:30]}” shown as “{shown}”")
    return problems


def _in_view(widget: QWidget, scroll: QScrollArea) -> str:
    """ "" when `widget` is shown whole in `scroll`'s viewport without scrolling, else why not."""
    if not widget.isVisible():
        return "hidden"
    viewport = scroll.viewport()
    shown = QRect(widget.mapTo(viewport, QPoint(0, 0)), widget.size())
    if not viewport.rect().adjusted(-TOLERANCE, -TOLERANCE, TOLERANCE, TOLERANCE).contains(shown):
        return f"{_rect(shown)} outside the {viewport.width()}×{viewport.height()} view"
    return ""


def _usable_chart(name: str, chart: QWidget, scroll: QScrollArea) -> list[str]:
    width, height = USABLE_CHART
    if why := _in_view(chart, scroll):
        return [f"{name}: {why}"]
    if chart.width() < width or chart.height() < height:
        return [f"{name} {chart.width()}×{chart.height()}: less than {width}×{height}"]
    return []


def panel_problems(window: QMainWindow) -> list[str]:
    """The metrics and the analyses of Where and when unusable as the window shows them: any
    of the six metric values, the precision chart, a page's map, the hours or Export
    analyses… not in view without scrolling, or a chart too small to read. Each dock is
    brought to the front in turn (and put back): both must be usable, whichever is shown."""
    from widgets.place_pane import RELEVANT, RESULTS

    w: Any = window
    docks = (w.metrics_dock, w.place_dock)
    front = [d for d in docks if d.isVisible() and not d.visibleRegion().isEmpty()]
    others = [d for d in w.docks() if d not in docks and not d.visibleRegion().isEmpty()]
    mode = w.place_pane.mode()
    problems: list[str] = []
    try:
        w.metrics_dock.raise_()
        settle()
        panel = w.metrics_panel
        for key, value in panel.values.items():
            if why := _in_view(value, panel.scroll_area):
                problems.append(f"metrics: {key} {why}")
        problems += _usable_chart("metrics: chart", panel.chart, panel.scroll_area)
        w.show_place_pane()
        for page in (RESULTS, RELEVANT):
            w.place_pane.set_mode(page)
            settle()
            pane, name = w.place_pane, ("results" if page == RESULTS else "relevant photos")
            shown = pane.map_view if page == RESULTS else pane.relevant.map_view
            problems += _usable_chart(f"Where and when, {name}: map", shown, w.place_scroll)
            if page == RELEVANT:
                relevant = pane.relevant
                hours = relevant.hour_histogram
                problems += _usable_chart("Where and when: hours", hours, w.place_scroll)
                if why := _in_view(relevant.export_button, w.place_scroll):
                    problems.append(f"Where and when: Export analyses… {why}")
    finally:
        w.place_pane.set_mode(mode)
        for dock in others + front:
            dock.raise_()
        settle()
    return problems


def window_problems(window: QWidget, area: QRect) -> list[str]:
    """A top-level window larger than the available screen, or not on it."""
    frame = window.frameGeometry()
    if frame.width() > area.width() or frame.height() > area.height():
        return [f"{_name(window)} {frame.width()}×{frame.height()} larger than the screen "
                f"{area.width()}×{area.height()}"]  # fmt: skip
    if not area.contains(frame):
        return [f"{_name(window)} {_rect(frame)} not on the screen {_rect(area)}"]
    return []


def view_problems(window: QMainWindow, area: QRect) -> list[str]:
    """Everything the layout check finds wrong with the window as it is shown now."""
    problems = window_problems(window, area)
    problems += geometry_problems(window)
    problems += label_problems(window)
    problems += grid_problems(window)
    problems += query_list_problems(window)
    problems += panel_problems(window)
    return problems


def dialog_problems(dialog: QWidget, area: QRect) -> list[str]:
    """A dialog larger than the screen, or with cut or overlapping widgets or labels."""
    return window_problems(dialog, area) + geometry_problems(dialog) + label_problems(dialog)
