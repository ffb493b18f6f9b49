"""Visualize-then-retrieve in the window: the drawings strip beside the search.

A VisRet search runs like any other (`SearchController`, a `MethodSpec` in a worker); this
controller listens to its events (`SearchController.add_event_listener`) and turns each
`DrawingMade` and `DrawingProgress` into plain data in the worker (a `QImage`, never a widget),
handed to the GUI thread through a queued signal, so the strip fills in while the method is
still drawing.

What the user does in the strip becomes another search with changed parameters: a toggle sets
`leave_out` (the drawings come from the cache, so the ranking is only fused again), "Draw again"
moves the seeds on by the number of images, an edited prompt becomes the template. A saved
VisRet run reopened from the Queries tab or the metrics panel shows its drawings again, read
from the cache paths its saved parameters' details hold (`SavedRunParams.details`).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, Qt, Signal, Slot
from PySide6.QtGui import QImage

from app.controllers.install import say
from app.controllers.judging import JudgingController
from app.controllers.search import SearchController, SearchOutcome, SearchRequest, pil_to_qimage
from app.workers import READ, TaskContext, TaskHandle, TaskRunner
from engine.judgments.runs import SavedRunParams
from engine.methods.events import DrawingMade, DrawingProgress, MethodEvent
from widgets.drawings_strip import DrawingCard, DrawingsStrip

if TYPE_CHECKING:
    from app.controllers.application import Application
    from engine.visret import Drawing

log = logging.getLogger(__name__)

METHOD = "visret"
# Parameters that change what is drawn; the others (leave_out) only change the fusion.
_NOT_DRAWING = frozenset({"leave_out", "k_rrf", "fusion", "include_text", "depth"})


def drawing_card(drawing: Drawing, left_out: bool = False) -> DrawingCard:
    """An engine `Drawing` as the strip shows it (its PIL image as a QImage). Runs in a
    worker."""
    image = drawing.image
    return DrawingCard(
        index=int(drawing.index),
        seed=int(drawing.seed),
        image=pil_to_qimage(image) if image is not None else None,
        error=str(drawing.error or ""),
        left_out=left_out or bool(drawing.error),
        cached=bool(getattr(drawing, "cached", False)),
        seconds=float(getattr(drawing, "seconds", 0.0)),
    )


def saved_cards(details: dict[str, Any]) -> list[DrawingCard]:
    """The drawings a saved run used, read back from the cache files. Runs in a worker."""
    cards: list[DrawingCard] = []
    for row in details.get("drawings", []):
        path = row.get("path")
        image = QImage(str(path)) if path and Path(str(path)).is_file() else None
        error = str(row.get("error") or "")
        if image is not None and image.isNull():
            image = None
        if image is None and not error and path:
            error = "the drawing is no longer in the cache; Draw again makes it anew"
        cards.append(
            DrawingCard(
                index=int(row.get("index", len(cards))),
                seed=int(row.get("seed", 0)),
                image=image,
                error=error,
                left_out=bool(row.get("left_out")) or bool(error),
                cached=True,
            )
        )
    return cards


def _leave_out_text(indices: list[int]) -> str:
    return ",".join(str(i) for i in sorted(set(indices)))


def _fingerprint(details: dict[str, Any]) -> tuple[Any, ...]:
    return (
        details.get("prompt"),
        tuple(
            (row.get("key"), row.get("path"), bool(row.get("left_out")))
            for row in details.get("drawings", [])
        ),
    )


def template_from_prompt(prompt: str, query: str) -> str | None:
    """An edited prompt as a template: the query's words in it become {query} again, so the
    edit holds for the same words. None when it holds neither the words nor {query} (a
    template must say where the query goes)."""
    if "{query}" in prompt:
        return prompt
    words = " ".join(query.split())
    if words and words in prompt:
        return prompt.replace(words, "{query}")
    return None


class VisRetController(QObject):
    """Fills the drawings strip from VisRet searches and turns its toggles, Draw again and
    prompt edits into searches."""

    message = Signal(str)
    drawingShown = Signal(object)  # DrawingCard, once it is in the strip
    # From the worker, queued to the GUI thread: (search id, DrawingCard, prompt) and
    # (search id, drawing index, steps done, steps in all).
    _drawing = Signal(int, object, str)
    _step = Signal(int, int, int, int)

    def __init__(
        self,
        runner: TaskRunner,
        search: SearchController,
        judging: JudgingController,
        strip: DrawingsStrip,
    ) -> None:
        super().__init__()
        self.runner = runner
        self.search = search
        self.judging = judging
        self.strip = strip
        self._live: int | None = None  # the VisRet search the strip is filling, if any
        self._request: SearchRequest | None = None  # the VisRet run shown
        self._params: dict[str, Any] = {}  # its method parameters, all of them
        self._shown: tuple[Any, ...] | None = None  # what the strip shows (see _fingerprint)
        self.cards: dict[int, DrawingCard] = {}  # the live run's drawings, by index
        self._generation = 0  # the newest search or opened run wins the strip
        self._drawing.connect(self._on_drawing, Qt.ConnectionType.QueuedConnection)
        self._step.connect(self._on_step, Qt.ConnectionType.QueuedConnection)
        search.add_event_listener(self._in_worker)
        search.searchStarted.connect(self._on_started)
        search.searchFinished.connect(self._on_finished)
        search.searchStopped.connect(self._on_stopped)
        judging.queryOpened.connect(self._on_query_opened)
        strip.leaveOutChanged.connect(self.leave_out)
        strip.drawAgainRequested.connect(self.draw_again)
        strip.promptEdited.connect(self.edit_prompt)
        strip.cancelRequested.connect(self.cancel)
        search.query_bar.method.currentIndexChanged.connect(lambda _row: self._update_visible())
        strip.hide()

    def _update_visible(self) -> None:
        """The strip shows while a VisRet search draws (its progress and Cancel are there), and
        while the picker says VisRet and the strip holds the drawings of the run shown."""
        picked = self.search.query_bar.method_key() == METHOD
        self.strip.setVisible(self._live is not None or (picked and self._request is not None))

    # -- the worker's side ------------------------------------------------------------------------

    def _in_worker(self, search_id: int, event: MethodEvent) -> None:
        """A method's event, in the search's worker: VisRet's become plain data, then a queued
        signal (the strip is touched on the GUI thread alone); others are not for the strip."""
        if isinstance(event, DrawingMade):
            drawing = event.drawing
            self._drawing.emit(search_id, drawing_card(drawing), str(drawing.prompt))
        elif isinstance(event, DrawingProgress):
            progress = event.progress
            self._step.emit(search_id, int(event.index), int(progress.done), int(progress.total))

    @Slot(int, object, str)
    def _on_drawing(self, search_id: int, card: DrawingCard, prompt: str) -> None:
        if search_id != self._live:
            return  # a search replaced, cancelled, or not a VisRet one
        self.cards[card.index] = card
        if prompt:
            self.strip.set_prompt(prompt)
        self.strip.set_drawing(card)
        self.drawingShown.emit(card)

    @Slot(int, int, int, int)
    def _on_step(self, search_id: int, index: int, done: int, total: int) -> None:
        if search_id == self._live:
            self.strip.set_progress(index, done, total)

    # -- searches ---------------------------------------------------------------------------------

    def _on_started(self, search_id: int, request: SearchRequest) -> None:
        self._generation += 1
        if request.method != METHOD:
            self._live = None
            self._request, self._shown = None, None
            self._update_visible()
            return
        from engine.methods import get_method, param_defaults

        defaults = param_defaults(get_method(METHOD).Params)
        count = int(request.params.get("images", defaults.get("images", 3)))
        # Only the fusion changed: the drawings shown stay while the ranking is made again.
        keep = (
            self._request is not None
            and self._shown is not None
            and self._request.text == request.text
            and self._request.image == request.image
            and _drawing_params({**defaults, **self._params})
            == _drawing_params({**defaults, **request.params})
        )
        self._live = search_id
        self.cards = {}
        self.strip.start(count, self.strip.prompt.text() if keep else "", keep=keep)
        self._update_visible()

    def _on_finished(self, outcome: SearchOutcome) -> None:
        if outcome.search_id != self._live or outcome.request.method != METHOD:
            return
        self._live = None
        details = dict(outcome.params.details or {})
        self._request = outcome.request
        self._params = outcome.params.search_params()
        self._shown = _fingerprint(details)
        rows = details.get("drawings", [])
        for row in rows:
            index = int(row.get("index", -1))
            card = self.cards.get(index)
            if card is not None:
                self.strip.set_drawing(replace(card, left_out=bool(row.get("left_out"))))
        if details.get("prompt"):
            self.strip.set_prompt(str(details["prompt"]))
        self.strip.finish(_summary(details, self.cards))
        self._update_visible()  # the picker may have moved on while it drew

    def _on_stopped(self, search_id: int, how: str) -> None:
        if search_id != self._live:
            return
        self._live = None
        self._shown = None  # the strip no longer shows a whole run
        self.strip.finish(
            "Cancelled" if how == "cancelled" else "The search failed: see the status line"
        )

    def cancel(self) -> None:
        """Stop the drawing; what was drawn so far stays in the cache for the next run."""
        if self._live is None:
            return
        self._live = None
        self._shown = None
        self.search.cancel()
        drawn = len(self.cards)
        self.strip.finish(
            f"Cancelled after {drawn} drawing{'s' * (drawn != 1)} (kept for the next run)"
        )

    # -- what the user does in the strip ----------------------------------------------------------

    def _rerun(self, changes: dict[str, Any]) -> TaskHandle | None:
        if self._request is None or self.strip.busy():
            return None
        params = {**self._params, **changes}
        request = replace(self._request, params=params)
        return self.search.search(request)

    def leave_out(self, indices: list[int]) -> TaskHandle | None:
        """Fuse again without the drawings `indices` (they are not drawn again)."""
        return self._rerun({"leave_out": _leave_out_text(indices)})

    def draw_again(self) -> TaskHandle | None:
        """New drawings with the next seeds (seed + images)."""
        from engine.methods import get_method, param_defaults

        defaults = param_defaults(get_method(METHOD).Params)
        params = {**defaults, **self._params}
        seed = int(params.get("seed", 0)) + int(params.get("images", 3))
        return self._rerun({"seed": seed, "leave_out": ""})

    def edit_prompt(self, prompt: str) -> TaskHandle | None:
        """Draw again from an edited prompt (the query's words in it become {query})."""
        if self._request is None:
            return None
        template = template_from_prompt(prompt, self._request.text)
        if template is None:
            words = " ".join(self._request.text.split())
            self.message.emit(
                f"Keep the query's words “{words}” in the prompt (or write {{query}} where "
                "they go); the prompt was not changed"
            )
            self.strip.set_prompt(self.strip.prompt_used())
            return None
        # Drawn as typed: a configured language model must not rewrite the user's edit.
        return self._rerun({"template": template, "leave_out": "", "rewrite": False})

    # -- saved runs -------------------------------------------------------------------------------

    def _on_query_opened(self, query_id: int) -> TaskHandle | None:
        """A query or run was opened: show the shown run's drawings, or hide the strip."""
        store, run_id = self.judging.store, self.judging.run_id
        if store is None or run_id is None:
            return None
        shown = self.judging.current_run()
        if shown is not None and shown.method_key and shown.method_key != METHOD:
            # Not a VisRet run: no drawings to read; the strip goes at once (unless drawing).
            if self._live is None:
                self._generation += 1
                self._request, self._shown = None, None
                self._update_visible()
            return None
        text = self.search.query_bar.edit.text()
        top_k = self.search.session.settings.top_k
        self._generation += 1
        generation = self._generation

        def load(ctx: TaskContext) -> tuple[SavedRunParams, list[DrawingCard]] | None:
            run = next((r for r in store.runs_for(query_id) if r.id == run_id), None)
            if run is None or run.method != METHOD:
                return None
            params = run.saved
            return params, saved_cards(dict(params.details or {}))

        def loaded(result: tuple[SavedRunParams, list[DrawingCard]] | None) -> None:
            if self._live is not None or generation != self._generation:
                return  # a search is filling the strip, or a newer one replaced this
            if result is None:
                self._request, self._shown = None, None
                self._update_visible()
                return
            params, cards = result
            details = dict(params.details or {})
            image = params.image
            self._params = params.search_params()
            self._request = SearchRequest(
                text, Path(image) if image else None, METHOD, top_k, dict(self._params)
            )
            if self._shown != _fingerprint(details):
                self._shown = _fingerprint(details)
                self.strip.show_drawings(
                    str(details.get("prompt", "")), cards, _summary(details, {})
                )
            self._update_visible()

        return self.runner.submit(
            load,
            title="Reading the run's drawings",
            pool=READ,
            group="visret-run",
            on_success=loaded,
            on_failure=lambda exc: log.info("the run's drawings: %s", exc),
        )


def _drawing_params(params: dict[str, Any]) -> dict[str, Any]:
    return {n: v for n, v in params.items() if n not in _NOT_DRAWING}


def _summary(details: dict[str, Any], cards: dict[int, DrawingCard]) -> str:
    """One line under the prompt: how many drawings were used, drawn now or cached, and why the
    prompt is the plain template when a rewrite was asked for."""
    rows = details.get("drawings", [])
    used = sum(1 for r in rows if not r.get("left_out") and not r.get("error"))
    failed = sum(1 for r in rows if r.get("error"))
    parts = [f"{used} of {len(rows)} drawings used"]
    if failed:
        parts.append(f"{failed} failed")
    if cards:
        cached = sum(1 for c in cards.values() if c.cached)
        parts.append(f"{len(cards) - cached} drawn now, {cached} from the cache")
    if details.get("generator"):
        parts.append(str(details["generator"]))
    if details.get("prompt_note"):  # rewritten by the language model, or why not
        parts.append(str(details["prompt_note"]))
    return "  ·  ".join(parts)


def install(app: Application) -> None:
    """VisRet's drawings above the results: filled while a search draws, back with a run."""
    app.visret = VisRetController(app.runner, app.search, app.judging, app.window.drawings_strip)
    say(app, app.visret.message)
