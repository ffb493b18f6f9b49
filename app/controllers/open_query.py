"""The open query: which saved query the window shows, its runs and its judgments.

One `OpenQuery` lives for the whole window. `SavedQueriesController` decides which query is
open (it reads a `QueryState` from the catalog and hands it to `JudgingController.show_query`);
`JudgingController` changes the judgments shown and commits them. Controllers that only read
the open query's state (exports, sidecars, records, analyses, certify, attribute questions)
take this object rather than the judging controller, and listen to its signals.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from PySide6.QtCore import QObject, Signal


@dataclass(frozen=True)
class RunState:
    """One run of the open query, as the metrics panel needs it."""

    run_id: int
    method: str  # the run's label ("Text", "VisRet (leave_out=1)")
    label: str
    ranking: list[tuple[int, float]]
    method_key: str = ""  # the registry's key of its method ("text", "visret")

    @property
    def ids(self) -> list[int]:
        return [image_id for image_id, _ in self.ranking]


@dataclass
class QueryState:
    """A saved query as read from the catalog: its runs (the shown one is `run_id`) and
    judgments."""

    query_id: int
    title: str
    run_id: int | None
    runs: list[RunState] = field(default_factory=list)
    judgments: dict[int, int] = field(default_factory=dict)
    # The detector's box each photo's judgment was made on, where it was made on one.
    judged_boxes: dict[int, tuple[float, float, float, float]] = field(default_factory=dict)


class OpenQuery(QObject):
    """The query open in the window (none: `query_id` is None), its runs and judgments."""

    opened = Signal(int)  # query id; its runs and judgments are loaded
    runsChanged = Signal()  # the runs or the shown run changed (opened or closed)
    judgmentChanged = Signal(int, int, object)  # query id, image id, relevance: shown now
    judgmentSaved = Signal(int, int, object)  # query id, image id, relevance: now durable

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.query_id: int | None = None
        self.title = ""
        self.runs: list[RunState] = []
        self.run_id: int | None = None
        self.judgments: dict[int, int] = {}
        self.judged_boxes: dict[int, tuple[float, float, float, float]] = {}

    def current_run(self) -> RunState | None:
        """The run shown in the grid."""
        return next((r for r in self.runs if r.run_id == self.run_id), None)

    def open(self, state: QueryState) -> None:
        """Make `state` the open query. Emits `opened`, then `runsChanged`."""
        self.query_id = state.query_id
        self.title = state.title
        self.runs = list(state.runs)
        self.run_id = state.run_id
        self.judgments = dict(state.judgments)
        self.judged_boxes = dict(state.judged_boxes)
        self.opened.emit(state.query_id)
        self.runsChanged.emit()

    def close(self) -> None:
        """No query is open any more (another ranking is shown, or it was deleted)."""
        self.query_id, self.runs, self.run_id, self.judgments = None, [], None, {}
        self.judged_boxes = {}
        self.runsChanged.emit()

    def retitle(self, query_id: int, title: str) -> bool:
        """The saved query `query_id` was renamed; True when it is the open one."""
        if query_id != self.query_id:
            return False
        self.title = title
        return True

    def set_judgment(self, query_id: int, image_id: int, relevance: int | None) -> bool:
        """Show `relevance` (None: cleared) for `image_id` when `query_id` is the open query;
        True when it is. Emits `judgmentChanged`."""
        if query_id != self.query_id:
            return False
        if relevance is None:
            self.judgments.pop(image_id, None)
        else:
            self.judgments[image_id] = relevance
        self.judgmentChanged.emit(query_id, image_id, relevance)
        return True

    def relevant(self) -> int:
        """How many photos the open query has judged relevant."""
        return sum(1 for v in self.judgments.values() if v > 0)
