"""The main window, driven like a user would: index, search, inspect, cancel, settings, errors."""

from __future__ import annotations

from pathlib import Path

from app.controllers.application import Application


def wait_ready(qtbot, app: Application, timeout: int = 20_000) -> None:
    qtbot.waitUntil(lambda: app.session.library is not None, timeout=timeout)


def index(qtbot, app: Application, folder: Path, timeout: int = 60_000) -> None:
    with qtbot.waitSignal(app.library.indexingFinished, timeout=timeout) as blocker:
        app.library.add_folder(folder)
    assert blocker.args[0] is not None


def test_index_then_search_fills_the_grid(qtbot, make_app, photos, small_demo_collection) -> None:
    app = make_app()
    wait_ready(qtbot, app)
    index(qtbot, app, photos)
    qtbot.waitUntil(lambda: app.session.ready, timeout=20_000)
    qtbot.waitUntil(lambda: bool(app.library.stats) and app.library.stats[0].indexed == 108)
    bar = app.window.query_bar
    bar.edit.setText("red circle")
    with qtbot.waitSignal(app.search.searchFinished, timeout=20_000):
        bar.submit()
    model = app.window.results_model
    assert model.rowCount() == 108
    top = model.item(0)
    rel = Path(top.path).relative_to(photos).as_posix()
    assert small_demo_collection.labels[rel] == "red circle"
    assert top.title == "red circle"


def search(qtbot, app: Application, text: str) -> None:
    bar = app.window.query_bar
    bar.edit.setText(text)
    with qtbot.waitSignal(app.search.searchFinished, timeout=20_000):
        bar.submit()


def indexed_app(qtbot, make_app, photos: Path) -> Application:
    app = make_app()
    wait_ready(qtbot, app)
    index(qtbot, app, photos)
    qtbot.waitUntil(lambda: app.session.ready, timeout=20_000)
    return app


def test_window_opens_with_the_query_bar_focused(qtbot, make_app) -> None:
    app = make_app()
    assert app.window.windowTitle().startswith("Quadrat")
    qtbot.waitUntil(lambda: app.window.query_bar.edit.hasFocus())
    wait_ready(qtbot, app)
    # An empty library says what to do rather than offering a search that cannot run.
    qtbot.waitUntil(lambda: "Add a photo folder" in app.window.query_bar.edit.placeholderText())
    assert not app.session.ready


def test_detail_pane_shows_the_selected_photo(qtbot, make_app, photos) -> None:
    import json

    app = indexed_app(qtbot, make_app, photos)
    search(qtbot, app, "blue square")
    view = app.window.results
    view.setCurrentIndex(app.window.results_model.index(2, 0))
    item = app.window.results_model.item(2)
    pane = app.window.detail_pane
    assert pane.item() is item

    meta = json.loads((photos / "metadata.json").read_text())
    rel = Path(item.path).relative_to(photos).as_posix()
    record = next(i for i in meta["images"] if i["file_name"] == rel)
    assert pane.title.text() == "blue square"
    assert "Quadratum caeruleum" in pane.fields["taxonomy"].text()
    assert pane.fields["license"].text() == record["license"]
    assert pane.fields["rights"].text() == record["rights_holder"]
    assert pane.fields["observed"].text().startswith(record["date"][:10])
    lat = f"{abs(record['latitude']):.5f}° {'N' if record['latitude'] >= 0 else 'S'}"
    assert pane.fields["place"].text().startswith(lat)
    assert pane.fields["score"].text() == f"#3  ·  {item.score:.4f}"
    assert item.path in pane.fields["path"].text()
    # The large photo arrives from a worker.
    qtbot.waitUntil(lambda: pane.photo.photo() is not None, timeout=10_000)
    assert pane.photo.photo().width() == 160


def test_thumbnails_load_lazily_for_visible_rows_only(qtbot, make_app, photos) -> None:
    app = make_app()
    app.window.resize(900, 600)
    wait_ready(qtbot, app)
    index(qtbot, app, photos)
    qtbot.waitUntil(lambda: app.session.ready, timeout=20_000)
    search(qtbot, app, "green triangle")
    loader = app.thumbnails
    qtbot.waitUntil(
        lambda: loader.pixmap(app.window.results_model.item(0).image_id) is not None, timeout=10_000
    )
    requested = len(loader._pixmaps) + len(loader._pending)
    assert 0 < requested < 60  # only what the grid painted
    cached = list((app.session.library.root / "cache" / "thumbnails").rglob("*.jpg"))
    assert cached, "thumbnails are written to the library's disk cache"


def test_cancel_stops_the_run_and_keeps_committed_rows(
    qtbot, make_app, photos, demo_encoder, monkeypatch
) -> None:

    from app.settings import Settings
    from tests.gui.conftest import SlowEncoder

    monkeypatch.setenv("QUADRAT_CHECKPOINT_EVERY", "16")
    settings = Settings(model="demo", library_dir=str(photos.parent / "lib"), batch_size=8)
    app = make_app(settings=settings, encoder=SlowEncoder(demo_encoder, 0.25))
    wait_ready(qtbot, app)
    progress = app.window.library_panel.progress
    app.library.add_folder(photos)
    # 8 photos per batch, a checkpoint every 16: at 24 done at least 16 are committed.
    qtbot.waitUntil(
        lambda: progress.bar.maximum() == 108 and progress.bar.value() >= 24, timeout=30_000
    )
    qtbot.waitUntil(progress.isVisible)  # shown once the run took longer than 0.5 s
    # How fast it answers is a benchmark (tests/bench/bench_responsiveness.py); the limit here
    # only tells a stop from a run that goes on to the end (108 photos, 0.25 s a batch of 8).
    with qtbot.waitSignal(app.library.indexingFinished, timeout=5_000) as blocker:
        progress.cancel_button.click()
    report = blocker.args[0].report
    assert report.cancelled
    assert 16 <= report.indexed < 108
    qtbot.waitUntil(lambda: bool(app.library.stats), timeout=10_000)
    stats = app.library.stats[0]
    assert stats.indexed == report.indexed  # what was committed is kept
    assert stats.pending == 108 - report.indexed
    assert not progress.isVisible()


def test_closing_mid_index_asks_then_stops_cleanly(qtbot, make_app, photos, demo_encoder) -> None:
    from tests.gui.conftest import SlowEncoder

    app = make_app(encoder=SlowEncoder(demo_encoder, 0.3))
    wait_ready(qtbot, app)
    questions: list[str] = []
    answers = iter([False, True])
    app.window.ask_yes_no = lambda title, text: questions.append(title) or next(answers)
    app.library.add_folder(photos)
    qtbot.waitUntil(lambda: app.window.library_panel.progress.bar.value() > 0, timeout=30_000)
    assert not app.window.close()  # "no": keep working
    assert app.library.indexing
    assert app.window.close()  # "yes": stop and close
    assert questions == ["Indexing is running", "Indexing is running"]
    assert app.runner.idle()


def test_a_failing_worker_shows_an_error_dialog(qtbot, make_app, tmp_path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    app = make_app()
    wait_ready(qtbot, app)
    app.library.add_folder(empty)
    qtbot.waitUntil(lambda: bool(app.errors.reported), timeout=20_000)
    banner = app.window.message_banner
    assert "no photos found" in banner.message()
    assert banner.isVisible() and not banner.log_button.isVisible()  # expected: no log needed


def test_an_unexpected_failure_is_reported_not_swallowed(qtbot, make_app, photos) -> None:
    def broken_loader(spec: str, device: str) -> object:
        raise RuntimeError("CUDA driver exploded")

    app = make_app(encoder_loader=broken_loader)
    wait_ready(qtbot, app)
    app.library.add_folder(photos)
    qtbot.waitUntil(lambda: bool(app.errors.reported), timeout=20_000)
    banner = app.window.message_banner
    assert banner.message().startswith("Unexpected error: RuntimeError: CUDA driver exploded")
    assert "Details are in the log file" in banner.message()  # a bug: its traceback is there
    assert banner.title.text() == "Indexing photos failed" and banner.log_button.isVisible()


def test_remove_collection_forgets_its_photos(qtbot, make_app, photos) -> None:
    app = indexed_app(qtbot, make_app, photos)
    app.window.ask_yes_no = lambda title, text: True
    qtbot.waitUntil(lambda: bool(app.library.stats), timeout=10_000)
    collection_id = app.library.stats[0].id
    with qtbot.waitSignal(
        app.library.statsChanged, timeout=20_000, check_params_cb=lambda s: s == []
    ):
        app.window.library_panel.removeRequested.emit(collection_id)
    assert app.window.library_panel.tree.topLevelItemCount() == 0
    assert len(app.session.library.vector_index(app.session.encoder.model_key)) == 0


def test_settings_dialog_round_trip_and_bad_values(qtbot, make_app, tmp_path) -> None:
    from app.settings import load_settings

    app = make_app()
    wait_ready(qtbot, app)
    dialog = app.open_settings()
    dialog.batch_size.setValue(8)
    assert dialog.index_memory.value() == 4.0
    dialog.index_memory.setValue(8.0)
    dialog.model.setEditText("ViT-B-32:/nowhere/model.safetensors")
    dialog.accept()
    assert dialog.isVisible()
    assert "does not exist" in dialog.error.text()
    dialog.model.setEditText("demo")
    dialog.accept()
    assert not dialog.isVisible()
    saved = load_settings()
    assert saved.problems == []
    assert saved.settings.batch_size == 8
    assert saved.settings.index_memory_gb == 8.0
    assert saved.settings == app.settings
    # The open library builds its next index within the new budget.
    assert app.session.library.index_memory_budget == 8 * 1024**3


def test_settings_dialog_maps_a_shared_catalogs_folders_to_this_workstation(
    qtbot, make_app, tmp_path
) -> None:
    from app.settings import load_settings

    app = make_app()
    wait_ready(qtbot, app)
    dialog = app.open_settings()
    dialog.root_map.setText("/only/one/side")
    dialog.accept()
    assert dialog.isVisible() and "CATALOG_ROOT=FOLDER_HERE" in dialog.error.text()
    here = tmp_path / "photos"
    dialog.root_map.setText(f"Z:\\photos={here}; /srv/birds=/mnt/birds")
    dialog.accept()
    assert not dialog.isVisible()
    assert load_settings().settings.root_map == f"Z:\\photos={here}\n/srv/birds=/mnt/birds"
    # The open library opens the mapped folders from now on, without a restart.
    assert app.session.library.photo_root("Z:\\photos\\frogs") == here / "frogs"
    assert app.session.library.photo_root("/srv/birds") == Path("/mnt/birds")
    # Shown again as it was typed.
    assert app.open_settings().root_map.text() == f"Z:\\photos={here}; /srv/birds=/mnt/birds"


def test_settings_dialog_names_the_model_the_library_was_indexed_with(
    qtbot, make_app, photos
) -> None:
    app = indexed_app(qtbot, make_app, photos)
    dialog = app.open_settings()
    assert f"indexed with {app.session.library_spec}" in dialog.note.text()
    dialog.reject()
