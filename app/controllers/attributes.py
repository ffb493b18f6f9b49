"""What the shown photo shows, as Darwin Core attributes of its judgment for the open query,
and the query's presets (engine/judgments/attributes.py).

The detail pane's editor (`widgets.attributes_editor.AttributesEditor`) shows the attributes of
the selected photo for the open query; an edit is shown at once and stored in the single-thread
"write" pool (after any judgment clicked before it), then goes on the judging controller's undo
stack, so Ctrl+Z takes it back. Values are read in the "read" pool, newest selection wins; the
GUI thread never waits on the catalog. A value outside its vocabulary is kept and flagged.
Presets set or changed are offered to the photos judged relevant before them, with their count;
giving them is one step on the same undo stack.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal

from app.controllers.install import say
from app.workers import WRITE, TaskContext, TaskHandle, TaskRunner
from widgets.attributes_editor import (
    AttributeField,
    AttributesEditor,
    PresetsDialog,
    ask_to_fill_presets,
)

if TYPE_CHECKING:
    from app.controllers.application import Application
    from app.controllers.judging import JudgingController
    from engine.judgments.attributes import AttributeChange, PresetFill, PresetOffer
    from widgets.detail_pane import DetailPane

log = logging.getLogger(__name__)

NO_QUERY_NOTE = "Run a search or open a saved query to describe its photos."
NO_PHOTO_NOTE = "Select a photo to describe it."

PresetsAsker = Callable[[Sequence[AttributeField], str, dict[str, str]], "dict[str, str] | None"]
FillAsker = Callable[[str, int], bool]  # (the question, photos it would change) -> apply?


def attribute_fields() -> list[AttributeField]:
    """The editor's inputs: every Darwin Core term, labelled and with the suggested values of
    `engine.judgments.dwc_terms` (the one table the dialogs and the command line read too)."""
    from engine.judgments.dwc_terms import ATTRIBUTE_TERMS

    fields = []
    for spec in ATTRIBUTE_TERMS:
        tooltip = f"Darwin Core: {spec.term}" + (
            f"; values from {spec.source}" if spec.source else ""
        )
        if spec.term == "behavior":
            tooltip += "; several as a pipe list, dominant first"
        fields.append(AttributeField(spec.term, spec.caption, spec.vocabulary, spec.hint, tooltip))
    return fields


def flag_reasons(values: dict[str, str]) -> dict[str, str]:
    """term -> why its value is marked: the parts its vocabulary does not list."""
    from engine.judgments.attributes import off_vocabulary
    from engine.judgments.dwc_terms import caption

    return {
        term: (
            f"Not among the suggested {caption(term)} values ({', '.join(parts)}): kept as typed"
        )
        for term, parts in off_vocabulary(values).items()
    }


def presets_text(presets: dict[str, str]) -> str:
    """The line under the form naming the open query's presets."""
    from engine.judgments.dwc_terms import caption

    if not presets:
        return "No presets for this query."
    shown = ", ".join(f"{caption(t)} = {v}" for t, v in presets.items())
    return f"Relevant photos get: {shown}"


def fill_question(offer: PresetOffer) -> str:
    """What giving the presets to the photos judged before does, as the question asks it."""
    from engine.judgments.dwc_terms import caption

    shown = " and ".join(f"{caption(t)} = {v}" for t, v in offer.presets.items())
    photos = "the relevant photo" if offer.photos == 1 else f"the {offer.photos:,} relevant photos"
    return (
        f"Apply {shown} to {photos} judged before? Photos with their own value keep it. "
        "Undo the last judgment (Ctrl+Z) takes it back."
    )


class AttributesController(QObject):
    """Loads, shows and stores the attributes of the shown photo and the open query's presets."""

    message = Signal(str)
    attributesShown = Signal(int, int)  # query id, image id: loaded into the editor
    attributeSaved = Signal(int, int, str)  # query id, image id, term: now durable
    presetsSaved = Signal(int)  # query id
    presetsFilled = Signal(int, int)  # query id, photos given the presets (stored)

    def __init__(
        self,
        runner: TaskRunner,
        judging: JudgingController,
        detail: DetailPane,
        ask_presets: PresetsAsker | None = None,
        ask_fill: FillAsker | None = None,
    ) -> None:
        super().__init__()
        self.runner = runner
        self.judging = judging
        self.fields = attribute_fields()
        self.editor = AttributesEditor(self.fields, detail)
        detail.add_section(self.editor)
        self._detail = detail
        self._ask_presets = ask_presets or self._presets_dialog
        self._ask_fill = ask_fill or (
            lambda question, photos: ask_to_fill_presets(self._detail.window(), question, photos)
        )
        self.shown: tuple[int, int] | None = None  # (query id, image id) in the editor
        self.values: dict[str, str] = {}
        self.presets: dict[str, str] = {}
        self._presets_of: int | None = None  # the query `presets` belong to

        self.editor.attributeEdited.connect(self.edit)
        self.editor.presetsRequested.connect(self.edit_presets)
        judging.view.currentItemChanged.connect(lambda _item: self.refresh())
        judging.queryOpened.connect(lambda _query_id: self.refresh())
        judging.judgmentSaved.connect(self._judgment_saved)
        judging.attributesRestored.connect(self._restored)

    # -- showing ----------------------------------------------------------------------------------

    def refresh(self) -> TaskHandle | None:
        """Show the attributes of the selected photo for the open query (read in the pool)."""
        item = self.judging.view.current_item()
        query_id = self.judging.query_id
        store = self.judging.store
        if query_id is None or store is None or item is None:
            self.shown, self.values = None, {}
            self.editor.set_values({})
            self.editor.set_presets_text("")
            self.editor.set_editable(False, NO_QUERY_NOTE if query_id is None else NO_PHOTO_NOTE)
            return None
        target = (query_id, item.image_id)
        if target != self.shown:
            # Nothing of the previous photo may be edited onto this one while it loads.
            self.editor.set_values({})
            self.editor.set_editable(False, "")
        self.shown = target
        library = store.library

        def read(ctx: TaskContext) -> tuple[dict[str, str], dict[str, str]]:
            from engine.judgments.attributes import attributes_of, query_presets

            return attributes_of(library, *target), query_presets(library, query_id)

        def loaded(result: tuple[dict[str, str], dict[str, str]]) -> None:
            if self.shown != target:
                return  # another photo was selected meanwhile
            self.values, self.presets = result
            self._presets_of = query_id
            self._show()
            self.attributesShown.emit(*target)

        return self.runner.submit(
            read, title="Reading the photo's attributes", group="attributes", on_success=loaded
        )

    def _show(self) -> None:
        self.editor.set_values(self.values, flag_reasons(self.values))
        self.editor.set_presets_text(presets_text(self.presets))
        self.editor.set_editable(True, "")

    def _judgment_saved(self, query_id: int, image_id: int, _relevance: object) -> None:
        # A relevant judgment may have filled the query's presets; a changed one taken them back.
        if self.shown == (query_id, image_id):
            self.refresh()

    def _restored(self, query_id: int, image_id: int) -> None:
        if self.shown == (query_id, image_id):
            self.refresh()

    # -- editing ----------------------------------------------------------------------------------

    def edit(self, term: str, text: str) -> TaskHandle | None:
        """The user finished editing one term of the shown photo: show it, store it."""
        store = self.judging.store
        if self.shown is None or store is None:
            return None
        query_id, image_id = self.shown
        before = dict(self.values)
        if text:
            self.values[term] = text
        else:
            self.values.pop(term, None)
        self.editor.set_values(self.values, flag_reasons(self.values))
        library = store.library
        from engine.judgments.attributes import AttributeChange

        # On the undo stack now, so Ctrl+Z right after the edit takes this edit back.
        shown_change = AttributeChange(
            query_id, image_id, {term: before.get(term)}, {term: text or None}
        )
        self.judging.record_attribute_change(shown_change)

        def write(ctx: TaskContext) -> AttributeChange:
            from engine.judgments.attributes import set_attributes

            # The judge's name is read here: on PostgreSQL the first read asks the server.
            return set_attributes(library, query_id, image_id, {term: text or None}, store.user)

        def saved(change: AttributeChange) -> None:
            self.judging.replace_attribute_change(shown_change, change)
            if self.shown == (query_id, image_id) and term in change.current:
                # As stored: "Flowering" is the vocabulary's "flowering".
                value = change.current[term]
                if value is None:
                    self.values.pop(term, None)
                else:
                    self.values[term] = value
                self.editor.set_values(self.values, flag_reasons(self.values))
            self.attributeSaved.emit(query_id, image_id, term)

        def failed(exc: BaseException) -> None:
            self.judging.replace_attribute_change(shown_change, None)
            if self.shown == (query_id, image_id):
                self.values = before
                self._show()
            self.runner.report_error(exc, "Saving the attribute")

        return self.runner.submit(
            write, title="Saving the attribute", pool=WRITE, on_success=saved, on_failure=failed
        )

    def edit_presets(self) -> TaskHandle | None:
        """Ask for the open query's presets, then store them."""
        query_id = self.judging.query_id
        if query_id is None or self._presets_of != query_id:
            self.message.emit("Open a saved query to set its presets")
            return None
        values = self._ask_presets(self.fields, self.judging.query_title, dict(self.presets))
        if values is None:
            return None
        return self.set_presets(query_id, values)

    def set_presets(self, query_id: int, values: dict[str, str]) -> TaskHandle | None:
        """Store a query's presets (blank values dropped) and show them; then, where photos
        judged relevant before have no value for them, offer to give them the presets."""
        store = self.judging.store
        if store is None:
            return None
        library = store.library

        def write(ctx: TaskContext) -> PresetOffer:
            from engine.judgments.attributes import preset_offer, set_query_presets

            set_query_presets(library, query_id, {t: v or None for t, v in values.items()})
            return preset_offer(library, query_id)

        def saved(offer: PresetOffer) -> None:
            if self._presets_of == query_id:
                self.presets = dict(offer.presets)
                self.editor.set_presets_text(presets_text(offer.presets))
            self.presetsSaved.emit(query_id)
            if offer.photos and self._ask_fill(fill_question(offer), offer.photos):
                self.fill_presets(query_id)

        return self.runner.submit(
            write,
            title="Saving the query's presets",
            pool=WRITE,
            on_success=saved,
            on_failure=lambda exc: self.runner.report_error(exc, "Saving the query's presets"),
        )

    def fill_presets(self, query_id: int) -> TaskHandle | None:
        """Give the query's presets to the photos judged relevant before them (in the write
        pool, after every judgment queued before); one step on the undo stack."""
        store = self.judging.store
        if store is None:
            return None
        library = store.library

        def write(ctx: TaskContext) -> PresetFill:
            from engine.judgments.attributes import fill_presets

            return fill_presets(library, query_id, store.user)

        def filled(fill: PresetFill) -> None:
            self.judging.record_preset_fill(fill)
            n = fill.photos
            self.message.emit(
                f"The query's presets given to {n:,} {'photo' if n == 1 else 'photos'} judged "
                "before (Ctrl+Z takes them back)"
            )
            self.presetsFilled.emit(query_id, n)
            shown = self.shown
            if shown is not None and any((query_id, c.image_id) == shown for c in fill.changes):
                self.refresh()

        return self.runner.submit(
            write,
            title="Giving the presets to the photos judged before",
            pool=WRITE,
            on_success=filled,
            on_failure=lambda exc: self.runner.report_error(exc, "Giving the presets"),
        )

    def _presets_dialog(
        self, fields: Sequence[AttributeField], title: str, values: dict[str, str]
    ) -> dict[str, str] | None:
        dialog = PresetsDialog(fields, title, values, self._detail.window())
        return dialog.values() if dialog.exec() else None


def install(app: Application) -> None:
    """What the shown photo shows (Darwin Core attributes), edited in the detail pane."""
    app.attributes = AttributesController(app.runner, app.judging, app.window.detail_pane)
    say(app, app.attributes.message)
