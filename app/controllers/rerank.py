"""Structured reranking in the window: the subquery editor above the grid, partial results
streaming in while photos are scored, each photo's answers in the detail pane, and sorting the
grid by one question.

A Reranked search runs like any other (`SearchController`, a `MethodSpec` in a worker). Before
it starts, `prepare` puts the editor's questions, expert context and base method into its
parameters. The method reports `RerankProgress` and `RerankPartial` events; this controller
listens to them (`SearchController.add_event_listener`), turns a partial ranking into plain
result cards in the worker and queues them to the GUI thread, so the grid fills in as batches
finish and Cancel leaves what was scored on screen. A finished run keeps each photo's answers
with its saved parameters (`SavedRunParams.evidence`), so a reopened run shows them again; the
questions are saved with the query (`engine.rerank.store`) and come back when it is opened.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, Qt, Signal, Slot

from app.controllers.install import say
from app.controllers.judging import JudgingController
from app.controllers.results import result_items
from app.controllers.search import SearchController, SearchOutcome, SearchRequest
from app.controllers.session import LibrarySession
from app.settings import language_model
from app.workers import READ, WRITE, TaskContext, TaskHandle, TaskRunner
from engine.judgments.runs import SavedRunParams
from engine.methods.events import MethodEvent, RerankPartial, RerankProgress
from widgets.detail_pane import DetailPane
from widgets.results import ResultItem, ResultsView
from widgets.subquery_editor import SORT_BY_RANK, QuestionRow, SubqueryEditor

if TYPE_CHECKING:
    from app.controllers.application import Application
    from engine.catalog.library import Library
    from engine.judgments.queries import RunInfo
    from engine.rerank.base import Decomposer, Decomposition

log = logging.getLogger(__name__)

METHOD = "rerank"
DEFAULT_DEPTH = 100
DEFAULT_SCORER = "auto"


def _words(text: str) -> str:
    return " ".join(text.split()).lower()


def question_rows(questions: Any) -> list[QuestionRow]:
    """`Question`s or their saved dicts ({"text", "source"}) as the editor's rows."""
    rows = []
    for q in questions or ():
        text = q.get("text", "") if isinstance(q, dict) else getattr(q, "text", "")
        source = q.get("source", "user") if isinstance(q, dict) else getattr(q, "source", "user")
        if str(text).strip():
            rows.append(QuestionRow(str(text), str(source or "user")))
    return rows


def answer_rows(evidence: dict[str, Any]) -> list[tuple[str, str, float]]:
    """(question, answer, p) per subquery, in the order asked."""
    rows = []
    for answer in evidence.get("answers", []):
        try:
            p = float(answer.get("p", 0.0))
        except (TypeError, ValueError):
            p = 0.0
        rows.append((str(answer.get("question", "")), str(answer.get("answer", "") or ""), p))
    return rows


def sorted_by_question(
    order: list[int], evidence: dict[int, dict[str, Any]], index: int
) -> list[int]:
    """`order` sorted by question `index`'s p, highest first; ties and photos without an
    answer keep the run's order (unanswered last)."""

    def p_of(image_id: int) -> float | None:
        answers = evidence.get(image_id, {}).get("answers", [])
        if 0 <= index < len(answers):
            try:
                return float(answers[index].get("p", 0.0))
            except (TypeError, ValueError):
                return None
        return None

    position = {image_id: i for i, image_id in enumerate(order)}
    answered = [i for i in order if p_of(i) is not None]
    answered.sort(key=lambda i: (-(p_of(i) or 0.0), position[i]))
    return answered + [i for i in order if p_of(i) is None]


class RerankController(QObject):
    """Drives the subquery editor, streams a Reranked search's partial results into the grid,
    shows each photo's answers and sorts the grid by one question."""

    message = Signal(str)
    partialShown = Signal(int)  # photos in the grid after a partial result arrived
    questionsLoaded = Signal(int)  # query id whose saved questions the editor now shows
    # From the worker, queued to the GUI thread: (search id, photos scored, photos to score)
    # and (search id, result cards so far, their evidence by id, the questions asked).
    _scored = Signal(int, int, int)
    _partial = Signal(int, object, object, object)

    def __init__(
        self,
        runner: TaskRunner,
        session: LibrarySession,
        search: SearchController,
        judging: JudgingController,
        editor: SubqueryEditor,
        results: ResultsView,
        detail: DetailPane,
    ) -> None:
        super().__init__()
        self.runner = runner
        self.session = session
        self.search = search
        self.judging = judging
        self.editor = editor
        self.results = results
        self.detail = detail
        self._live: int | None = None  # the Reranked search filling the grid, if any
        self._progress: tuple[int, int] = (0, 0)
        # The query the editor's questions came from (words, lowercase): a run or an opened
        # query; None once the user edited them (they are for the next run, whatever its text).
        self._query_text: str | None = None
        self._edited = False  # the user wrote or took these questions: the next run asks them
        self._to_save: list[QuestionRow] | None = None  # saved with the query once it is open
        # Each query has its own expert context (Divide-and-Conquer's per-query passage): the
        # passage of each query (words, lowercase) written this session, and whose the box holds.
        self._contexts: dict[str, str] = {}
        self._context_for: str | None = None
        self.evidence: dict[int, dict[str, Any]] = {}  # the shown reranked run's answers
        self.questions_shown: list[str] = []  # its questions, in order (for Sort by)
        self._order: list[int] = []  # its ids in the run's order
        self._reranked_shown = False
        self._generation = 0
        search.add_event_listener(self._in_worker)
        search.prepare = self.prepare
        search.evidence_kept.add(METHOD)
        self._scored.connect(self._on_scored, Qt.ConnectionType.QueuedConnection)
        self._partial.connect(self._on_partial, Qt.ConnectionType.QueuedConnection)
        search.searchStarted.connect(self._on_started)
        search.searchFinished.connect(self._on_finished)
        search.searchStopped.connect(self._on_stopped)
        judging.queryOpened.connect(self._on_query_opened)
        results.currentItemChanged.connect(self.show_answers)
        search.query_bar.method.currentIndexChanged.connect(lambda _row: self._update_visible())
        editor.questionsEdited.connect(self._on_edited)
        editor.baseChanged.connect(self._on_base_changed)
        editor.suggestRequested.connect(self.suggest)
        editor.draftContextRequested.connect(self.draft_context)
        editor.contextEdited.connect(self._on_context_edited)
        editor.sortRequested.connect(self.sort_by)
        editor.cancelRequested.connect(self.cancel)
        self.refresh_bases()
        self._update_visible()

    # -- set-up -----------------------------------------------------------------------------------

    def refresh_bases(self) -> None:
        """The base methods offered: every available method that is not a reranker or a
        method that learns from judgments (it runs on a saved query only)."""
        from app.controllers.feedback import learning_method_keys
        from engine.methods import method_infos

        learning = learning_method_keys()
        choices = [
            (info.key, info.label)
            for info in method_infos()
            if info.available and info.key != METHOD and info.key not in learning
        ]
        self.editor.set_bases(choices, self._option("base", "text"))
        llm = language_model(self.session.settings)
        self.editor.set_can_draft(
            llm.configured, "Configure a language model in Settings to draft the context"
        )

    def _option(self, name: str, fallback: Any) -> Any:
        """The Reranked option `name`: what the user set (⚙ or the editor), else the default."""
        from engine.methods import get_method, param_defaults

        values = self.search.options.get(METHOD, {})
        if name in values:
            return values[name]
        try:
            defaults = param_defaults(get_method(METHOD).Params)
        except Exception:  # the method is not in the registry (a broken install)
            return fallback
        return defaults.get(name, fallback)

    def _update_visible(self) -> None:
        """The editor shows while the picker says Reranked (whatever the grid holds: its
        questions are for the next run), and while a Reranked search runs (its progress and
        Cancel are there)."""
        picked = self.search.query_bar.method_key() == METHOD
        self.editor.setVisible(picked or self._live is not None)
        if picked:
            self.update_cost()

    # -- before a run -----------------------------------------------------------------------------

    def prepare(self, request: SearchRequest) -> SearchRequest:
        """Put the editor's questions, context and base into a Reranked request (GUI thread)."""
        if request.method != METHOD:
            return request
        params = dict(request.params)
        if self._query_text is not None and _words(request.text) != self._query_text:
            # Another query: the questions shown were another query's; the method decomposes
            # this one, and the questions it asked fill the editor when it is done.
            self._query_text = _words(request.text)
            self._edited = False
            self.editor.set_questions([])
        base = params.get("base")
        if base and base != self.editor.base_key():
            self.refresh_bases()  # set in the ⚙ form: the editor follows
        elif self.editor.base_key():
            params["base"] = self.editor.base_key()
        questions = self.editor.questions()
        if self._edited and questions:
            # ";" separates subqueries in the parameter; one inside a question would split it.
            params["subqueries"] = "; ".join(q.text.replace(";", ",") for q in questions)
        words = _words(request.text)
        if self._context_for is not None and self._context_for != words:
            # The box holds another query's passage: this query's own (or none) replaces it,
            # so one query's expert context never reaches another's prompts.
            self._show_context(self._contexts.get(words, ""), words)
        context = self.editor.context_text()
        if context:
            params["context"] = context
            self._show_context(context, words)
        return replace(request, params=params)

    def _on_context_edited(self) -> None:
        """The user wrote in the context box: the passage of the query in the bar."""
        self._context_for = _words(self.search.query_bar.text())
        self._contexts[self._context_for] = self.editor.context_text()

    def _show_context(self, text: str, words: str) -> None:
        """Show `text` as the expert context of the query `words`, and remember it."""
        if text != self.editor.context_text():
            self.editor.set_context(text)
        self._context_for = words
        self._contexts[words] = text

    def update_cost(self) -> None:
        """calls = photos × questions and an estimated time, for the next run."""
        from engine.rerank.cost import estimate_cost

        depth = int(self._option("depth", DEFAULT_DEPTH))
        scorer = str(self._option("scorer", DEFAULT_SCORER))
        count = len(self.editor.questions())
        if count == 0:
            self.editor.set_cost(
                f"Next run: top {depth} photos of {self.editor.base.currentText() or 'the base'}"
                f" × the built-in questions (Suggest shows them)  ·  scorer {scorer}"
            )
            return
        calls, seconds = estimate_cost(depth, count, scorer)
        self.editor.set_cost(
            f"Next run: {depth} photos × {count} question{'s' * (count != 1)} = {calls:,} "
            f"calls, {_duration(seconds)} with {scorer} (scores already cached are "
            "not asked again)"
        )

    def _on_edited(self) -> None:
        self._edited = True
        self._query_text = None
        self.update_cost()

    def _on_base_changed(self, key: str) -> None:
        options = dict(self.search.options.get(METHOD, {}))
        options["base"] = key
        self.search.options[METHOD] = options
        self.update_cost()

    def suggest(self) -> TaskHandle | None:
        """Questions for the query in the bar: the language model's when one is configured,
        else the built-in ones."""
        text = self.search.query_bar.text()
        if not text.strip():
            self.message.emit("Type the query first; Suggest writes questions for it")
            return None
        library = self.session.library
        llm = language_model(self.session.settings)
        context = self.editor.context_text()

        def work(ctx: TaskContext) -> Decomposition:
            from engine.methods.rerank import known_names
            from engine.rerank.decompose import BuiltinDecomposer, LlmDecomposer

            names = known_names(library) if library is not None else []
            decomposer: Decomposer = (
                LlmDecomposer(llm.url, llm.model, llm.api_key)
                if llm.configured
                else BuiltinDecomposer()
            )
            return decomposer.decompose(text, context=context, known_names=names)

        def done(decomposition: Decomposition) -> None:
            self.editor.set_questions(question_rows(decomposition.questions))
            self._on_edited()
            note = f"  ·  {decomposition.note}" if decomposition.note else ""
            count = len(decomposition.questions)
            self.message.emit(f"{count} question{'s' * (count != 1)} suggested{note}")

        return self.runner.submit(
            work, title="Suggesting questions", pool=READ, group="rerank-suggest",
            on_success=done,
        )  # fmt: skip

    def draft_context(self) -> TaskHandle | None:
        """The language model drafts the expert context; it stays editable."""
        text = self.search.query_bar.text()
        llm = language_model(self.session.settings)
        if not llm.configured or not text.strip():
            self.message.emit("Drafting the context needs a query and a language model (Settings)")
            return None

        def work(ctx: TaskContext) -> tuple[str, str]:
            from engine.rerank.decompose import LlmDecomposer

            return LlmDecomposer(llm.url, llm.model, llm.api_key).draft_context(text)

        def done(result: tuple[str, str]) -> None:
            paragraph, note = result
            if paragraph:
                self._show_context(paragraph, _words(text))
                self.message.emit("Context drafted: edit it as you see fit")
            else:
                self.message.emit(note)

        return self.runner.submit(
            work, title="Drafting the context", pool=READ, group="rerank-draft",
            on_success=done,
        )  # fmt: skip

    # -- the worker's side ------------------------------------------------------------------------

    def _in_worker(self, search_id: int, event: MethodEvent) -> None:
        """A method's event, in the search's worker: Reranked's become plain data, then a
        queued signal; others are not for the editor."""
        if isinstance(event, RerankProgress):
            self._scored.emit(search_id, int(event.done), int(event.total))
        elif isinstance(event, RerankPartial):
            ranking = event.ranking
            library = self.session.library
            items = result_items(library, ranking.pairs()) if library is not None else []
            evidence = {int(i): dict(e) for i, e in ranking.evidence.items()}
            # A partial ranking has no details yet: its questions are those each photo answered.
            first = next(iter(evidence.values()), {})
            questions = [str(a.get("question", "")) for a in first.get("answers", [])]
            self._partial.emit(search_id, items, evidence, questions)

    @Slot(int, int, int)
    def _on_scored(self, search_id: int, done: int, total: int) -> None:
        if search_id != self._live:
            return  # replaced, cancelled, or not a Reranked search
        self._progress = (done, total)
        self.editor.set_running(True, f"Scored {done} of {total} photos")

    @Slot(int, object, object, object)
    def _on_partial(
        self,
        search_id: int,
        items: list[ResultItem],
        evidence: dict[int, dict[str, Any]],
        questions: list[str],
    ) -> None:
        if search_id != self._live:
            return
        self.search.model.set_results(items)
        self._show_run(evidence, questions)
        self.partialShown.emit(len(items))

    # -- searches ---------------------------------------------------------------------------------

    def _on_started(self, search_id: int, request: SearchRequest) -> None:
        self._generation += 1
        if request.method != METHOD:
            self._live = None
            self._reranked_shown = False
            self._show_run({}, [])
            self._update_visible()
            return
        self._live = search_id
        self._progress = (0, 0)
        self._reranked_shown = True
        self._show_run({}, [])
        self.editor.set_running(True, "Scoring…")
        self._update_visible()

    def _on_finished(self, outcome: SearchOutcome) -> None:
        if outcome.search_id != self._live or outcome.request.method != METHOD:
            return
        self._live = None
        self._update_visible()
        details = dict(outcome.params.details or {})
        rows = question_rows(details.get("questions"))
        self.editor.set_questions(rows)
        self._query_text = _words(outcome.request.text)
        self._to_save = rows
        self._show_run(outcome.params.evidence, [r.text for r in rows])
        self.editor.set_running(False, _summary(details))
        self.update_cost()

    def _on_stopped(self, search_id: int, how: str) -> None:
        if search_id != self._live:
            return
        self._live = None
        self._update_visible()
        done, total = self._progress
        if how == "cancelled":
            self.editor.set_running(
                False, f"Cancelled: {done} of {total} photos scored, kept in the grid and cache"
            )
        else:
            self.editor.set_running(False, "The search failed: see the status line")

    def cancel(self) -> None:
        """Stop scoring; the grid keeps the photos scored so far."""
        if self._live is not None:
            self.search.cancel()

    # -- the shown run ----------------------------------------------------------------------------

    def _show_run(self, evidence: dict[int, dict[str, Any]], questions: list[str]) -> None:
        self.evidence = evidence
        self.questions_shown = [q for q in questions if q]
        self._order = [item.image_id for item in self.search.model.items()]
        self.editor.set_sort_choices(self.questions_shown if evidence else [])
        self.show_answers(self.results.current_item())

    def show_answers(self, item: ResultItem | None) -> None:
        """The selected photo's answers to the shown run's questions (none: not reranked)."""
        if item is None or not self._reranked_shown:
            self.detail.set_answers(None)
            return
        evidence = self.evidence.get(item.image_id)
        if evidence is None:
            self.detail.set_answers([], "Not reranked: below the rerank depth, or not scored yet")
            return
        note = f"Rerank score {float(evidence.get('score', 0.0)):.3f}"
        if evidence.get("base_rank") is not None:
            note += f"  ·  base rank #{evidence['base_rank']}"
        self.detail.set_answers(answer_rows(evidence), note)

    def sort_by(self, index: int) -> None:
        """Order the grid by question `index`'s p (SORT_BY_RANK: the run's own order)."""
        if index == SORT_BY_RANK:
            order = self._order
        else:
            order = sorted_by_question(self._order, self.evidence, index)
        self.search.model.reorder(order)

    # -- saved queries ----------------------------------------------------------------------------

    def _on_query_opened(self, query_id: int) -> TaskHandle | None:
        """Save the questions a run just used with its query; show an opened run's answers and
        the query's saved questions."""
        library, store, run_id = self.session.library, self.judging.store, self.judging.run_id
        if library is None or store is None:
            return None
        to_save, self._to_save = self._to_save, None
        if to_save is not None:
            self._save(library, query_id, to_save)
        if self._live is not None:
            return None  # a search is filling the grid
        self._generation += 1
        generation = self._generation

        def load(ctx: TaskContext) -> tuple[RunInfo | None, list[QuestionRow]]:
            from engine.rerank.store import load_questions

            run = next((r for r in store.runs_for(query_id) if r.id == run_id), None)
            return run, question_rows(load_questions(library, query_id))

        def loaded(result: tuple[RunInfo | None, list[QuestionRow]]) -> None:
            if generation != self._generation or self._live is not None:
                return
            run, saved = result
            params = run.saved if run is not None else SavedRunParams()
            reranked = run is not None and run.method == METHOD
            details = dict(params.details or {})
            if saved:
                self.editor.set_questions(saved)
                self._edited = True  # the next run asks the questions saved with the query
                self._query_text = _words(self.search.query_bar.text())
            if reranked:
                context = str(params.method_params.get("context", ""))
                self._show_context(context, _words(self.search.query_bar.text()))
            self._reranked_shown = reranked
            questions = [r.text for r in question_rows(details.get("questions"))]
            self._show_run(params.evidence if reranked else {}, questions)
            self._update_visible()
            if saved:
                self.questionsLoaded.emit(query_id)

        return self.runner.submit(
            load, title="Reading the query's questions", pool=WRITE, group="rerank-open",
            on_success=loaded,
            on_failure=lambda exc: log.info("the query's questions: %s", exc),
        )  # fmt: skip

    def _save(self, library: Library, query_id: int, rows: list[QuestionRow]) -> TaskHandle:
        def save(ctx: TaskContext) -> None:
            from engine.rerank.base import Question
            from engine.rerank.decompose import question_target
            from engine.rerank.store import save_questions

            save_questions(
                library,
                query_id,
                [Question(r.text, r.source, question_target(r.text)) for r in rows],
            )

        return self.runner.submit(save, title="Saving the questions", pool=WRITE)


def _duration(seconds: float) -> str:
    if seconds < 1:
        return "under a second"
    if seconds < 90:
        return f"about {seconds:.0f} s"
    if seconds < 5400:
        return f"about {seconds / 60:.0f} min"
    return f"about {seconds / 3600:.1f} h"


def _summary(details: dict[str, Any]) -> str:
    """One line after a run: questions, calls, what came from the cache, and any note."""
    parts = []
    count = len(details.get("questions") or [])
    if count:
        parts.append(f"{count} question{'s' * (count != 1)}")
    if details.get("calls") is not None:
        parts.append(f"{int(details['calls']):,} calls")
    if details.get("cached"):
        parts.append(f"{int(details['cached']):,} from the cache")
    if details.get("scorer"):
        parts.append(str(details["scorer"]))
    if details.get("note"):
        parts.append(str(details["note"]))
    return "  ·  ".join(parts)


def install(app: Application) -> None:
    """Reranked searches: the subquery editor, partial results, answers per photo. After
    VisRet: its worker hook passes VisRet's events on."""
    w = app.window
    app.rerank = RerankController(
        app.runner,
        app.session,
        app.search,
        app.judging,
        w.subquery_editor,
        w.results,
        w.detail_pane,
    )
    say(app, app.rerank.message)
