"""Progress reporting and cancellation for long engine work (indexing, generation, reranking).

Long work is plain Python that takes a `ProgressCallback` and a `CancelToken`; it calls
`token.check()` between units of work, which raises `Cancelled` once `cancel()` was called
from any thread. The GUI wraps these in workers; the CLI feeds them to tqdm; tests pass fakes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from engine.errors import Cancelled


@dataclass(frozen=True)
class Progress:
    """A snapshot of progress: `done` of `total` units, the rate and the estimated time left."""

    done: int
    total: int
    rate: float = 0.0  # units per second, over the recent window
    eta_seconds: float | None = None
    message: str = ""

    @property
    def fraction(self) -> float:
        return self.done / self.total if self.total else 1.0


ProgressCallback = Callable[[Progress], None]


def no_progress(_: Progress) -> None:
    """A progress callback that ignores every report."""


class CancelToken:
    """Thread-safe cancellation flag, checked by the worker between units of work."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def check(self) -> None:
        """Raise `Cancelled` if cancellation was requested."""
        if self._event.is_set():
            raise Cancelled()


class RateMeter:
    """Turns (done, total) counts into `Progress` with a smoothed rate and an ETA."""

    def __init__(self, total: int, window_seconds: float = 10.0) -> None:
        self.total = total
        self._window = window_seconds
        self._samples: list[tuple[float, int]] = [(time.monotonic(), 0)]

    def update(self, done: int, message: str = "") -> Progress:
        now = time.monotonic()
        self._samples.append((now, done))
        while len(self._samples) > 2 and now - self._samples[0][0] > self._window:
            self._samples.pop(0)
        t0, d0 = self._samples[0]
        elapsed = now - t0
        rate = (done - d0) / elapsed if elapsed > 0 else 0.0
        eta = (self.total - done) / rate if rate > 0 else None
        return Progress(done, self.total, rate, eta, message)
