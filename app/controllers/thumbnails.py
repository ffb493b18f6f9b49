"""Loads thumbnails off the GUI thread: disk cache -> QImage (worker) -> QPixmap (GUI thread).

A RAM cache of pixmaps sits over the engine's disk cache. A new result set (`reset`) cancels
the loads still queued for the old one, and their late results are dropped. When the disk cache
cannot be written (a full disk), thumbnails still show and `problem` says so once.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QImage, QPixmap

from app.workers import THUMBNAILS, TaskContext, TaskHandle, TaskRunner

log = logging.getLogger(__name__)


class ThumbnailLoader(QObject):
    """The results model's `ThumbnailSource`."""

    thumbnailReady = Signal(int)  # image id
    problem = Signal(str)  # one line, once per spell of failed thumbnail writes (disk full)

    def __init__(
        self, runner: TaskRunner, cache: Callable[[], object | None], ram_limit: int = 3000
    ) -> None:
        super().__init__()
        self._runner = runner
        self._cache = (
            cache  # -> engine.indexing.thumbnails.ThumbnailCache of the open library, or None
        )
        self._ram_limit = ram_limit
        self._pixmaps: OrderedDict[int, QPixmap] = OrderedDict()
        self._failed: set[int] = set()
        self._pending: dict[int, TaskHandle] = {}
        self._generation = 0
        self._problem: str | None = None  # the last write problem told to the user

    def pixmap(self, image_id: int) -> QPixmap | None:
        pixmap = self._pixmaps.get(image_id)
        if pixmap is not None:
            self._pixmaps.move_to_end(image_id)
        return pixmap

    def request(self, image_id: int, path: str, content_hash: str | None) -> None:
        if image_id in self._pending or image_id in self._failed or image_id in self._pixmaps:
            return
        cache = self._cache()
        if cache is None:
            return
        generation = self._generation

        def load(ctx: TaskContext) -> tuple[QImage | None, str | None]:
            from engine.errors import BadImageError

            ctx.check()  # superseded while queued: skip the work
            try:
                data = cache.get_or_create(path, content_hash)  # type: ignore[attr-defined]
            except BadImageError as exc:
                # An expected state (a photo missing from disk, a file replaced by junk): the
                # grid shows its placeholder; no warning with a traceback in the log.
                log.info("no thumbnail for %s: %s", path, exc.reason)
                return None, getattr(cache, "write_problem", None)
            problem = getattr(cache, "write_problem", None)
            image = QImage.fromData(data)
            if image.isNull():
                raise ValueError("undecodable thumbnail")
            return image, problem

        handle = self._runner.submit(
            load,
            title="Loading a thumbnail",
            pool=THUMBNAILS,
            on_success=lambda result: self._loaded(image_id, generation, *result),
            on_failure=lambda exc: self._failed_load(image_id, generation, exc),
        )
        handle.cancelled.connect(lambda: self._forget(image_id, handle))
        self._pending[image_id] = handle

    def _forget(self, image_id: int, handle: TaskHandle) -> None:
        if self._pending.get(image_id) is handle:
            del self._pending[image_id]

    def _loaded(
        self, image_id: int, generation: int, image: QImage | None, problem: str | None = None
    ) -> None:
        self._pending.pop(image_id, None)
        if problem is not None and self._problem is None:  # once per spell of failures
            self.problem.emit(problem[:1].upper() + problem[1:])
        self._problem = problem
        if generation != self._generation:
            return
        if image is None:
            self._failed.add(image_id)
            return
        self._pixmaps[image_id] = QPixmap.fromImage(image)
        while len(self._pixmaps) > self._ram_limit:
            self._pixmaps.popitem(last=False)
        self.thumbnailReady.emit(image_id)

    def _failed_load(self, image_id: int, generation: int, exc: BaseException) -> None:
        self._pending.pop(image_id, None)
        if generation == self._generation:
            log.info("no thumbnail for image %s: %s", image_id, exc)
            self._failed.add(image_id)

    def reset(self) -> None:
        """A new result set: cancel queued loads (the RAM cache stays)."""
        self._generation += 1
        for handle in self._pending.values():
            handle.cancel()
        self._pending.clear()

    def clear(self) -> None:
        self.reset()
        self._pixmaps.clear()
        self._failed.clear()
