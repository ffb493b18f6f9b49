"""The one way to run background work from the GUI.

A task is a plain function `fn(ctx: TaskContext) -> result`. `TaskRunner.submit` runs it on one
of three thread pools and delivers the outcome back on the GUI thread through queued signals on
a `TaskHandle` (a QObject that lives on the GUI thread): `on_success(result)`,
`on_failure(exc)` (the central error handler when not given), `on_progress(Progress)`
(throttled), `on_cancelled()`.

Pools:
- ``"read"``: catalog reads, searches, previews; several at a time.
- ``"write"``: one thread, so writes to the catalog (indexing, removing a collection) stay in
  order and never compete for the database lock.
- ``"thumbnails"``: many small jobs; the newest request runs first.

Tasks submitted with the same `group` supersede each other: submitting a new one cancels the
pending one and its late result is dropped (the newer request wins). Workers never touch
widgets; they return plain data or a `QImage`, never a `QPixmap`.

`InlineTaskRunner` has the same interface but runs each task at once in the caller's thread (a
synchronous fake pool), so a controller is unit-tested without a window or threads.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

from PySide6.QtCore import (
    QCoreApplication,
    QElapsedTimer,
    QObject,
    QRunnable,
    Qt,
    QThreadPool,
    Signal,
    Slot,
)

from app.logs import log_failure
from engine.errors import Cancelled
from engine.progress import CancelToken, Progress

log = logging.getLogger(__name__)

READ, WRITE, THUMBNAILS = "read", "write", "thumbnails"
PROGRESS_INTERVAL_S = 0.1

ErrorHandler = Callable[[BaseException, str], None]


class TaskContext:
    """What a task function receives: its cancel token and a throttled progress reporter."""

    def __init__(self, cancel: CancelToken, emit_progress: Callable[[Progress], None]) -> None:
        self.cancel = cancel
        self._emit = emit_progress
        self._last = 0.0

    def progress(self, report: Progress) -> None:
        """Report progress; at most one report per 100 ms reaches the GUI (plus the last)."""
        now = time.monotonic()
        if now - self._last >= PROGRESS_INTERVAL_S or report.done >= report.total > 0:
            self._last = now
            self._emit(report)

    def check(self) -> None:
        """Raise `Cancelled` when the task was cancelled."""
        self.cancel.check()

    @property
    def cancelled(self) -> bool:
        return self.cancel.cancelled


class TaskHandle(QObject):
    """A submitted task, seen from the GUI thread. Signals fire on the GUI thread."""

    succeeded = Signal(object)
    failed = Signal(object)
    progressed = Signal(object)
    cancelled = Signal()
    finished = Signal()  # after any of the above

    # Emitted from the worker thread; delivered to this object's (GUI) thread.
    _deliver = Signal(str, object)

    def __init__(self, title: str, group: str | None = None, pool: str = READ) -> None:
        super().__init__()
        self.title = title
        self.group = group
        self.pool = pool
        self.token = CancelToken()
        self.done = False
        self.stale = False  # superseded or cancelled: outcome dropped
        self._deliver.connect(self._on_deliver, Qt.ConnectionType.QueuedConnection)

    def cancel(self) -> None:
        """Ask the task to stop. Its result, if it still arrives, is dropped."""
        self.token.cancel()
        self.stale = True

    @property
    def running(self) -> bool:
        return not self.done

    @Slot(str, object)
    def _on_deliver(self, kind: str, payload: object) -> None:
        if kind == "progress":
            if not self.done and not self.stale:
                self.progressed.emit(payload)
            return
        self.done = True
        if kind == "cancelled" or (self.stale and kind == "success" and self.token.cancelled):
            self.cancelled.emit()
        elif self.stale:
            log.debug("dropping the late outcome of %s", self.title)
        elif kind == "success":
            self.succeeded.emit(payload)
        else:
            self.failed.emit(payload)
        self.finished.emit()


_T = TypeVar("_T")  # what a task returns, handed to its on_success


class _Runnable(QRunnable):
    def __init__(self, fn: Callable[[TaskContext], Any], handle: TaskHandle) -> None:
        super().__init__()
        self.setAutoDelete(True)
        self._fn = fn
        self._handle = handle
        # Bind the emitter now: the handle's Python wrapper must not be touched from the worker
        # after the GUI thread dropped it.
        self._emit = handle._deliver.emit
        self._token = handle.token
        self._title = handle.title

    def run(self) -> None:
        _execute(self._fn, self._token, self._title, self._emit)


def _execute(
    fn: Callable[[TaskContext], Any],
    token: CancelToken,
    title: str,
    emit: Callable[[str, object], None],
) -> None:
    """Run one task and hand its outcome to `emit(kind, payload)`: "progress", then one of
    "success", "failure" or "cancelled". Shared by the pools and the inline runner."""
    if token.cancelled:
        emit("cancelled", None)
        return
    ctx = TaskContext(token, lambda p: emit("progress", p))
    try:
        result = fn(ctx)
    except Cancelled:
        emit("cancelled", None)
    except BaseException as exc:  # any failure must reach the window, never kill a thread
        # An expected failure (engine.errors) is one warning line; a bug keeps its traceback.
        log_failure(exc, title)
        emit("failure", exc)
    else:
        emit("success", result)


class TaskRunner(QObject):
    """Runs task functions on thread pools; see the module docstring."""

    def __init__(self, error_handler: ErrorHandler | None = None, read_threads: int = 2) -> None:
        super().__init__()
        self.error_handler = error_handler
        self._pools = {
            READ: QThreadPool(self),
            WRITE: QThreadPool(self),
            THUMBNAILS: QThreadPool(self),
        }
        self._pools[READ].setMaxThreadCount(max(2, read_threads))
        self._pools[WRITE].setMaxThreadCount(1)
        self._pools[THUMBNAILS].setMaxThreadCount(2)
        self._active: set[TaskHandle] = set()
        self._groups: dict[str, TaskHandle] = {}
        self._priority = itertools.count()

    def submit(
        self,
        fn: Callable[[TaskContext], _T],
        *,
        title: str,
        pool: str = READ,
        group: str | None = None,
        on_success: Callable[[_T], None] | None = None,
        on_failure: Callable[[BaseException], None] | None = None,
        on_progress: Callable[[Progress], None] | None = None,
        on_cancelled: Callable[[], None] | None = None,
    ) -> TaskHandle:
        """Run `fn(ctx)` on `pool`; callbacks run on the GUI thread. Returns the handle."""
        if group is not None and (previous := self._groups.get(group)) is not None:
            previous.cancel()
        handle = TaskHandle(title, group, pool)
        if on_success is not None:
            handle.succeeded.connect(on_success)
        handle.failed.connect(on_failure or (lambda exc: self.report_error(exc, title)))
        if on_progress is not None:
            handle.progressed.connect(on_progress)
        if on_cancelled is not None:
            handle.cancelled.connect(on_cancelled)
        handle.finished.connect(lambda: self._forget(handle))
        self._active.add(handle)
        if group is not None:
            self._groups[group] = handle
        self._start(fn, handle)
        return handle

    def _start(self, fn: Callable[[TaskContext], Any], handle: TaskHandle) -> None:
        """Queue `fn` on its handle's pool; the outcome comes back through the handle."""
        # Newer thumbnail requests first: they are the rows the user is looking at now.
        priority = next(self._priority) % 1_000_000 if handle.pool == THUMBNAILS else 0
        self._pools[handle.pool].start(_Runnable(fn, handle), priority)

    def report_error(self, exc: BaseException, title: str) -> None:
        """Hand a failure to the central error handler (log + dialog), as a task that gives no
        `on_failure` of its own does. For callers whose own failure handler still wants the
        user told; `title` names the work that failed ("Saving the judgment")."""
        if self.error_handler is not None:
            self.error_handler(exc, title)

    def _forget(self, handle: TaskHandle) -> None:
        self._active.discard(handle)
        if handle.group is not None and self._groups.get(handle.group) is handle:
            del self._groups[handle.group]

    def active(self, pool_group: str | None = None) -> list[TaskHandle]:
        """Tasks not finished yet (optionally only those of one group)."""
        return [h for h in self._active if pool_group is None or h.group == pool_group]

    def cancel_all(self) -> None:
        for handle in list(self._active):
            handle.cancel()

    def wait(self, timeout_s: float = 30.0) -> bool:
        """Process events until every task finished and delivered its outcome (False on
        timeout). For closing the window and test teardown; never during normal work."""
        timer = QElapsedTimer()
        timer.start()
        while self._active or any(p.activeThreadCount() for p in self._pools.values()):
            if timer.elapsed() > timeout_s * 1000:
                return False
            for pool in self._pools.values():
                pool.waitForDone(10)
            QCoreApplication.processEvents()
        return True

    def idle(self) -> bool:
        """True when no pool has a running or queued task."""
        return not self._active and all(p.activeThreadCount() == 0 for p in self._pools.values())


class InlineTaskRunner(TaskRunner):
    """A `TaskRunner` that runs each task at once in the caller's thread (Picard's synchronous
    fake thread pool): `submit` returns after the task ran and its callbacks fired, in the same
    order and with the same rules as the pools (progress, then success, failure or cancelled;
    a task of a group superseded before it ran is cancelled). For unit tests of controllers.

    With `hold=True` tasks wait until `run_pending` (or `wait`), so a test can submit several
    and see the newest of a group win, as on a busy pool.
    """

    def __init__(self, error_handler: ErrorHandler | None = None, *, hold: bool = False) -> None:
        super().__init__(error_handler)
        self.hold = hold
        self.titles: list[str] = []  # every task submitted, in order: what a test can assert
        self._held: list[tuple[Callable[[TaskContext], Any], TaskHandle]] = []

    def _start(self, fn: Callable[[TaskContext], Any], handle: TaskHandle) -> None:
        self.titles.append(handle.title)
        if self.hold:
            self._held.append((fn, handle))
        else:
            self._run(fn, handle)

    def _run(self, fn: Callable[[TaskContext], Any], handle: TaskHandle) -> None:
        # Straight to the handle's slot: there is no other thread to queue the outcome from.
        _execute(fn, handle.token, handle.title, handle._on_deliver)

    def run_pending(self) -> int:
        """Run the held tasks in the order submitted (with those they submit); how many ran."""
        ran = 0
        while self._held:
            fn, handle = self._held.pop(0)
            self._run(fn, handle)
            ran += 1
        return ran

    def wait(self, timeout_s: float = 30.0) -> bool:
        """Run whatever is held; every task has then finished."""
        self.run_pending()
        return True

    def idle(self) -> bool:
        return not self._held and not self._active
