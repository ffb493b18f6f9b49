"""The window reads the engine's method registry: the picker (plug-ins included, greyed with a
reason when they cannot run), a method's options form, runs saved with their kind and options,
and the benchmark view comparing methods."""

from __future__ import annotations

from PySide6.QtCore import Qt

from tests.gui.test_window import indexed_app, search


def picker_items(app) -> dict[str, tuple[str, bool, str]]:
    combo = app.window.query_bar.method
    model = combo.model()
    return {
        combo.itemData(row): (
            combo.itemText(row),
            model.item(row).isEnabled(),
            str(combo.itemData(row, Qt.ItemDataRole.ToolTipRole) or ""),
        )
        for row in range(combo.count())
    }


def test_the_picker_lists_the_registry_with_plugins(qtbot, make_app, with_plugin) -> None:
    app = make_app(start=False)
    items = picker_items(app)
    assert items["text"][:2] == ("Text", True)
    assert items["reverse"][:2] == ("Reverse", True)
    label, enabled, tip = items["needsgpu"]
    assert not enabled and "no GPU with 80 GB found" in tip
    assert not items["broken"][1] and "could not be loaded" in items["broken"][2]
    dialog = app.open_benchmark()
    assert {"text", "reverse"} <= set(dialog.method_boxes)
    assert "needsgpu" not in dialog.method_boxes  # only what can run


def test_options_make_a_separate_run_and_a_second_line(qtbot, make_app, photos) -> None:
    app = indexed_app(qtbot, make_app, photos)
    search(qtbot, app, "red circle")
    qtbot.waitUntil(lambda: app.judging.query_id is not None and len(app.judging.runs) == 1)

    dialog = app.search.edit_options("text")
    assert dialog is not None
    editors = dialog._editors
    editors["template"].setText("a photo of {query}")
    dialog.accept()
    assert app.search.options["text"] == {"template": "a photo of {query}"}

    with qtbot.waitSignal(app.judging.queryOpened, timeout=20_000):
        search(qtbot, app, "red circle")
    runs = app.judging.store.runs_for(app.judging.query_id)
    assert [r.params.get("template") for r in runs] == ["{query}", "a photo of {query}"]
    assert [r.kind for r in runs] == ["text", "text"]
    assert runs[1].quadrat_version  # repeatable: the version is recorded
    labels = [r.method for r in app.judging.runs]
    assert labels == ["Text", "Text (template=a photo of {query})"]
    assert app.window.metrics_panel.runs.topLevelItemCount() == 2

    bad = app.search.edit_options("text")
    bad._editors["template"].setText("no placeholder")
    before = len(app.errors.reported)
    bad.accept()
    assert app.search.options["text"] == {"template": "a photo of {query}"}  # unchanged
    qtbot.waitUntil(lambda: len(app.errors.reported) > before)  # said in the message band
    assert "must contain {query}" in app.errors.reported[-1].text
    assert "must contain {query}" in app.window.message_banner.message()


def test_the_benchmark_view_compares_methods(qtbot, make_app, photos) -> None:
    app = indexed_app(qtbot, make_app, photos)
    dialog = app.open_benchmark()
    dialog.set_files(str(photos / "queries.csv"), str(photos / "judgments.csv"))
    dialog.more_methods.setText("text:template=a photo of {query}; text:template=ensemble")
    with qtbot.waitSignal(app.benchmark.finished, timeout=120_000) as blocker:
        dialog.run_button.click()
    outcome = blocker.args[0]
    assert outcome is not None
    assert list(outcome.results) == [
        "text", "text:template=a photo of {query}", "text:template=ensemble"
    ]  # fmt: skip
    header = dialog.summary.headerItem()
    assert [header.text(c) for c in range(5, 8)] == ["ΔmAP vs first", "95% CI", "p"]
    assert dialog.summary.topLevelItem(0).text(5) == ""  # the baseline itself
    second = dialog.summary.topLevelItem(1)
    assert second.text(5).startswith(("+", "-")) and second.text(6).startswith("[")
    assert 0 < float(second.text(7)) <= 1


def test_new_results_start_at_the_top(qtbot, make_app, photos) -> None:
    app = indexed_app(qtbot, make_app, photos)
    search(qtbot, app, "red circle")
    view = app.window.results
    bar = view.verticalScrollBar()
    qtbot.waitUntil(lambda: bar.maximum() > 0, timeout=5_000)
    bar.setValue(bar.maximum())
    search(qtbot, app, "blue square")
    assert bar.value() == 0


def test_the_metrics_k_is_remembered_across_sessions(qtbot, make_app) -> None:
    from app.settings import load_settings, settings_path

    app = make_app(start=False)
    panel = app.window.metrics_panel
    assert panel.k() == 10
    panel.k_combo.setCurrentIndex(panel.k_combo.findData(50))
    qtbot.waitUntil(lambda: settings_path().exists(), timeout=5_000)
    qtbot.waitUntil(lambda: load_settings().settings.metrics_k == 50, timeout=5_000)
    assert app.judging.k == 50

    again = make_app(settings=load_settings().settings, start=False)
    assert again.window.metrics_panel.k() == 50 and again.judging.k == 50


def test_help_lists_the_shortcuts_and_about_names_the_folders(qtbot, make_app) -> None:
    app = make_app(start=False)
    lines = dict((what, keys) for keys, what in app.window.shortcut_lines())
    assert lines["Mark relevant"] == "R" and lines["Undo the last judgment"] == "Ctrl+Z"
    assert "Keyboard shortcuts" in lines and "Focus the query" in lines
    box = app.window.show_shortcuts()
    assert "Mark not relevant" in box.text()
    box.done(0)
    about = dict(app.about_lines())
    assert about["Model"] == "demo" and about["Library"] == str(app.session.library_dir)
    assert about["Backups"].endswith("backups") and about["Version"]
    box = app.window.show_about(app.about_lines())
    assert "Library" in box.text()
    box.done(0)


def pick_with_keys(qtbot, app, key: str) -> None:
    """Choose the method `key` in the picker with the arrow keys, as a keyboard user does
    (each step is a choice the window hears)."""
    combo = app.window.query_bar.method
    app.window.activateWindow()
    combo.setFocus()
    qtbot.waitUntil(combo.hasFocus)
    target = combo.findData(key)
    assert target >= 0
    for _ in range(combo.count()):
        if combo.currentIndex() == target:
            break
        step = Qt.Key.Key_Down if target > combo.currentIndex() else Qt.Key.Key_Up
        qtbot.keyClick(combo, step)
    assert app.window.query_bar.method_key() == key


def stale_note(app) -> str:
    """The note under the query saying the grid is another method's ("" when not shown)."""
    note = app.window.query_bar.stale_note
    return "" if note.isHidden() else note.text()


def panels(app) -> tuple[bool, bool]:
    """(drawings strip shown, subquery editor shown), as the window lays them out."""
    window = app.window
    return (not window.drawings_strip.isHidden(), not window.subquery_editor.isHidden())


def test_a_quick_method_picked_reruns_and_a_slow_one_marks_the_grid_stale(
    qtbot, make_app, photos
) -> None:
    app = indexed_app(qtbot, make_app, photos)
    bar = app.window.query_bar
    app.window.resize(1300, 900)
    with qtbot.waitSignal(app.judging.queryOpened, timeout=20_000):
        search(qtbot, app, "red circle")
    query_id = app.judging.query_id

    # Hybrid answers at once: picking it runs the query shown again, saved beside Text.
    with qtbot.waitSignal(app.search.searchFinished, timeout=20_000) as finished:
        pick_with_keys(qtbot, app, "hybrid")
    assert finished.args[0].request.method == "hybrid"
    assert finished.args[0].request.text == "red circle"
    qtbot.waitUntil(lambda: len(app.judging.runs) == 2, timeout=20_000)
    assert app.judging.query_id == query_id
    assert [run.method for run in app.judging.runs] == ["Text", "Hybrid"]
    assert stale_note(app) == ""

    # Reranked asks a scorer about every photo: picking it runs nothing, and says so.
    shown = [item.image_id for item in app.window.results_model.items()]
    started: list[object] = []
    app.search.searchStarted.connect(lambda *args: started.append(args))
    pick_with_keys(qtbot, app, "rerank")
    qtbot.wait(800)  # past the quick rerun's delay
    assert not started
    assert [item.image_id for item in app.window.results_model.items()] == shown
    assert stale_note(app) == "Results are from Hybrid — press Enter to run Reranked"
    assert panels(app) == (False, True)

    # Back to Hybrid: the grid is Hybrid's again, nothing to run.
    pick_with_keys(qtbot, app, "hybrid")
    assert stale_note(app) == "" and panels(app) == (False, False)

    # A new query being typed is not run by a change of method: the note says what to do.
    bar.edit.setText("blue square")
    pick_with_keys(qtbot, app, "text")
    qtbot.wait(800)
    assert not started
    assert stale_note(app) == "Results are from Hybrid — press Enter to run Text"
    with qtbot.waitSignal(app.search.searchFinished, timeout=20_000):
        qtbot.keyClick(bar.edit, Qt.Key.Key_Return)
    assert stale_note(app) == ""


def test_the_picker_and_the_panels_follow_the_results_shown(qtbot, make_app, photos) -> None:
    from tests.gui.test_rerank_window import QUERY, rerank_search, write_questions
    from tests.gui.test_visret_window import shown_seeds, visret_search

    app = indexed_app(qtbot, make_app, photos)
    app.window.resize(1300, 900)
    bar = app.window.query_bar

    pick_with_keys(qtbot, app, "rerank")
    write_questions(app, ["Is there a red circle in this image?"])
    rerank_search(qtbot, app, QUERY)
    reranked = app.judging.query_id
    assert panels(app) == (False, True)
    pick_with_keys(qtbot, app, "hybrid")  # stale: another query is typed next
    bar.edit.setText("yellow star")
    with qtbot.waitSignal(app.judging.queryOpened, timeout=20_000):
        bar.submit()
    hybrid = app.judging.query_id
    assert panels(app) == (False, False)

    # Reopening the Reranked query: the picker says Reranked and its editor is shown.
    with qtbot.waitSignal(app.rerank.questionsLoaded, timeout=20_000):
        app.window.query_list.openRequested.emit(reranked)
    assert bar.method_key() == "rerank"
    assert panels(app) == (False, True) and stale_note(app) == ""
    # And the Hybrid one: the picker says Hybrid, no Reranked editor.
    with qtbot.waitSignal(app.judging.queryOpened, timeout=20_000):
        app.window.query_list.openRequested.emit(hybrid)
    assert bar.method_key() == "hybrid"
    assert panels(app) == (False, False) and stale_note(app) == ""

    # A VisRet run: its drawings go when Reranked is picked (stale), and come back with VisRet.
    visret_search(qtbot, app, "two green triangles")
    assert panels(app) == (True, False) and len(shown_seeds(app)) == 3
    pick_with_keys(qtbot, app, "rerank")
    assert panels(app) == (False, True)
    assert stale_note(app) == "Results are from VisRet — press Enter to run Reranked"
    pick_with_keys(qtbot, app, "visret")
    assert panels(app) == (True, False) and stale_note(app) == ""
    assert len(shown_seeds(app)) == 3
