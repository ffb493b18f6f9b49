"""Judge › Ask an attribute question…: a closed question learnt from the open query's judged
photos (`engine.judgments.attribute_questions`), its cross-validation shown before the
collection is asked, then the suggestions, answered yes or no from the dialog
(`widgets/attribute_questions_dialog.py`).

The question is learnt and asked in the read pool (newest wins); answers are written in the
write pool, after the judgments queued before them.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal

from app.controllers.install import say
from app.controllers.open_query import OpenQuery
from app.controllers.session import LibrarySession
from app.workers import WRITE, TaskContext, TaskHandle, TaskRunner
from widgets.attribute_questions_dialog import AttributeQuestionDialog, SuggestionRow

if TYPE_CHECKING:
    from PySide6.QtWidgets import QWidget

    from app.controllers.application import Application
    from engine.judgments.attribute_questions import AttributeAnswers, QuestionModel

log = logging.getLogger(__name__)

SUGGESTIONS = 100  # the dialog lists this many


class AttributeQuestionsController(QObject):
    """Opens the dialog for the open query, asks its question, writes the answers."""

    message = Signal(str)
    checked = Signal(str)  # the cross-validation, said from the worker before the bulk run
    answered = Signal(object)  # the AttributeAnswers of a finished question

    def __init__(self, runner: TaskRunner, session: LibrarySession, query: OpenQuery) -> None:
        super().__init__()
        self.runner = runner
        self.session = session
        self.query = query  # read only: the open query
        self.dialog: AttributeQuestionDialog | None = None
        self.checked.connect(self._show_check)  # queued: emitted in a worker

    def open_dialog(self, parent: QWidget | None = None) -> AttributeQuestionDialog | None:
        """The dialog for the open query, or None (said in one line) when no query is open."""
        from engine.judgments.dwc_terms import ATTRIBUTE_TERMS

        if self.session.library is None or self.query.query_id is None:
            self.message.emit(
                "Open a query and set attributes on some of its judged photos first: a "
                "question is learnt from them"
            )
            return None
        dialog = self.dialog = AttributeQuestionDialog(
            self.query.title, [(t.term, t.caption) for t in ATTRIBUTE_TERMS], parent
        )
        dialog.askRequested.connect(self.ask)
        dialog.acceptRequested.connect(lambda ids: self.answer(ids, True))
        dialog.rejectRequested.connect(lambda ids: self.answer(ids, False))
        dialog.open()
        return dialog

    def ask(self, term: str, value: str) -> TaskHandle | None:
        """Learn TERM=VALUE from the open query's judged photos and ask it of the collection."""
        from engine.errors import BadInputError
        from engine.judgments.attribute_questions import AttributeQuestion

        library, query_id = self.session.library, self.query.query_id
        if library is None or query_id is None:
            self.message.emit("Open a query first")
            return None
        try:
            question = AttributeQuestion.parse(f"{term}={value}")
        except BadInputError as error:
            self._say_failure(str(error))
            return None
        if self.dialog is not None:
            self.dialog.show_busy(f"Learning {question.sentence!r} from the judged photos…")

        def run(ctx: TaskContext) -> tuple[AttributeAnswers, dict[int, str]]:
            from engine.judgments.attribute_questions import ask_collection, photo_paths

            def heard(learnt: QuestionModel) -> None:
                ctx.check()
                self.checked.emit(f"{learnt.validation.summary()}. Asking the collection…")

            answers = ask_collection(library, query_id, question, top=SUGGESTIONS, on_checked=heard)
            return answers, photo_paths(library, [s.image_id for s in answers.suggestions])

        def done(result: tuple[AttributeAnswers, dict[int, str]]) -> None:
            answers, paths = result
            check = answers.learnt.validation.summary()
            if answers.curve is not None:
                check += f". {answers.curve.note[:1].upper()}{answers.curve.note[1:]}"
            check += f". {answers.scored:,} photos without an answer asked."
            rows = [
                SuggestionRow(s.image_id, s.probability, Path(paths.get(s.image_id, "?")).name,
                              paths.get(s.image_id, ""))
                for s in answers.suggestions
            ]  # fmt: skip
            if self.dialog is not None:
                self.dialog.show_suggestions(check, rows)
            self.answered.emit(answers)

        def failed(error: BaseException) -> None:
            from engine.errors import QuadratError

            if isinstance(error, QuadratError):  # too few answers, no vectors yet
                self._say_failure(str(error))
            else:
                self._say_failure("The question could not be asked")
                self.runner.report_error(error, "Asking an attribute question")

        return self.runner.submit(
            run,
            title=f"Asking {question.sentence!r}",
            group="attribute-question",  # a newer question supersedes this one
            on_success=done,
            on_failure=failed,
        )

    def answer(self, image_ids: list[int], yes: bool) -> TaskHandle | None:
        """Store the answer for the photos (the value, or "not value") in the write pool."""
        from engine.judgments.attribute_questions import AttributeQuestion

        library, query_id = self.session.library, self.query.query_id
        if library is None or query_id is None or self.dialog is None or not image_ids:
            return None
        term, value = self.dialog.question()
        question = AttributeQuestion.parse(f"{term}={value}")
        ids = list(image_ids)
        queries = self.session.query_store()  # its judge answers (read in the worker)

        def write(ctx: TaskContext) -> None:
            from engine.judgments.attribute_questions import accept_suggestion, reject_suggestion

            store = accept_suggestion if yes else reject_suggestion
            judge = queries.user if queries is not None else None
            for image_id in ids:
                store(library, query_id, image_id, question, judge)

        def done(_result: None) -> None:
            word = "yes" if yes else "no"
            if self.dialog is not None:
                self.dialog.mark_answered(ids, word)
            stored = question.label if yes else f"{question.term}=not {question.value}"
            self.message.emit(f"{len(ids)} photos answered {word}: {stored}")

        return self.runner.submit(
            write, title="Storing attribute answers", pool=WRITE, on_success=done
        )

    def _show_check(self, text: str) -> None:
        if self.dialog is not None:
            self.dialog.show_check(text)

    def _say_failure(self, text: str) -> None:
        if self.dialog is not None:
            self.dialog.show_failure(text)
        self.message.emit(text)


def install(app: Application) -> None:
    """Judge › Ask an attribute question…: learnt from the judged photos' attributes."""
    w = app.window
    questions = app.questions = AttributeQuestionsController(
        app.runner, app.session, app.open_query
    )
    w.askQuestionRequested.connect(lambda: questions.open_dialog(w))
    say(app, questions.message)
