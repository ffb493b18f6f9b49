"""The library panel while folders are indexed: a folder is listed the moment it is added, with
its progress, and turns into its collection row when the run ends; a stopped or failed run
stays listed with its state. Also what the window says of ignored metadata, and Help › User
guide."""

from __future__ import annotations

import re
import tomllib
from fnmatch import fnmatch
from pathlib import Path

from app.settings import Settings
from engine.errors import ModelLoadError
from tests.gui.conftest import SlowEncoder
from tests.gui.test_window import index, wait_ready
from tests.test_metadata_problems import spoil

ROOT = Path(__file__).resolve().parents[2]


def test_a_folder_is_listed_at_once_with_its_progress(
    qtbot, make_app, photos: Path, demo_encoder
) -> None:
    # `quadrat gui FOLDER`: the folder is added while the library is still opening.
    app = make_app(folder=photos, encoder=SlowEncoder(demo_encoder, 0.2))
    panel = app.window.library_panel
    assert panel.row_texts() == ["photos — waiting for the library to open…"]
    assert not panel.empty_hint.isVisibleTo(panel)
    # Listed with photos done of total while the run is still going.
    progress = re.compile(r"photos — (\d+) of 108 photos \(\d+ %\)")
    qtbot.waitUntil(
        lambda: any(progress.fullmatch(t) for t in panel.row_texts()) and app.library.indexing,
        timeout=30_000,
    )
    assert int(progress.fullmatch(panel.row_texts()[0]).group(1)) < 108  # type: ignore[union-attr]
    # When it ends, the same row is the plain collection row with its counts.
    qtbot.waitUntil(lambda: not app.library.indexing and bool(app.library.stats), timeout=60_000)
    qtbot.waitUntil(lambda: panel.row_texts() == ["photos"], timeout=10_000)
    row = panel.tree.topLevelItem(0)
    assert (row.text(1), row.text(2), row.text(3)) == ("108", "0", "0")
    assert panel.runs() == []


def test_a_stopped_run_stays_listed_and_resumes(
    qtbot, make_app, photos: Path, demo_encoder, monkeypatch
) -> None:
    monkeypatch.setenv("QUADRAT_CHECKPOINT_EVERY", "16")
    settings = Settings(model="demo", library_dir=str(photos.parent / "lib"), batch_size=8)
    app = make_app(settings=settings, encoder=SlowEncoder(demo_encoder, 0.25))
    wait_ready(qtbot, app)
    panel = app.window.library_panel
    app.library.add_folder(photos)
    qtbot.waitUntil(lambda: panel.progress.bar.value() >= 24, timeout=30_000)
    with qtbot.waitSignal(app.library.indexingFinished, timeout=10_000):
        panel.progress.cancel_button.click()
    qtbot.waitUntil(lambda: bool(app.library.stats), timeout=10_000)
    stats = app.library.stats[0]
    assert 16 <= stats.indexed < 108
    assert panel.row_texts() == [
        f"photos — stopped at {stats.indexed + stats.skipped} of 108 — Resume indexing to go on"
    ]
    # Re-scan resumes: only the photos not yet indexed are encoded.
    panel.select(stats.id)
    with qtbot.waitSignal(app.library.indexingFinished, timeout=60_000) as blocker:
        panel.rescan_button.click()
    assert blocker.args[0].report.indexed == 108 - stats.indexed
    qtbot.waitUntil(lambda: panel.row_texts() == ["photos"], timeout=10_000)
    assert panel.tree.topLevelItem(0).text(1) == "108"


def test_a_folder_waiting_for_a_model_says_so(qtbot, make_app, photos: Path) -> None:
    app = make_app()
    wait_ready(qtbot, app)
    panel = app.window.library_panel
    held: list = []
    # The model gate keeps the folder until a model is on disk, then starts it.
    app.library.model_gate = lambda folder, start: held.append(start) or False
    app.library.add_folder(photos)
    qtbot.waitUntil(lambda: panel.row_texts() == ["photos — waiting for a model"], timeout=10_000)
    assert not app.library.indexing and len(held) == 1
    app.library.model_gate = None
    with qtbot.waitSignal(app.library.indexingFinished, timeout=60_000):
        held[0]()
    qtbot.waitUntil(lambda: panel.row_texts() == ["photos"], timeout=10_000)


def test_a_failed_run_stays_listed_with_its_error(qtbot, make_app, photos: Path) -> None:
    def no_network(spec: str, device: str) -> object:
        raise ModelLoadError("the model ViT-B-32 could not be downloaded: no network")

    app = make_app(encoder_loader=no_network)
    wait_ready(qtbot, app)
    panel = app.window.library_panel
    with qtbot.waitSignal(app.library.indexingFinished, timeout=30_000):
        app.library.add_folder(photos)
    expected = "photos — failed: the model ViT-B-32 could not be downloaded: no network"
    qtbot.waitUntil(lambda: panel.row_texts() == [expected], timeout=10_000)
    qtbot.waitUntil(lambda: len(app.errors.reported) == 1)  # said once, in the message band
    # Nothing of it is in the library: Re-scan would try again, Remove unlists it.
    panel.tree.topLevelItem(0).setSelected(True)
    assert panel.rescan_button.isEnabled() and panel.remove_button.isEnabled()
    panel.remove_button.click()
    assert panel.row_texts() == [] and panel.empty_hint.isVisibleTo(panel)


def test_the_window_says_how_many_metadata_values_were_ignored(
    qtbot, make_app, photos: Path
) -> None:
    spoil(photos)
    app = make_app()
    wait_ready(qtbot, app)
    index(qtbot, app, photos)
    qtbot.waitUntil(
        lambda: (
            "; 3 metadata values were ignored as impossible or unusable (examples in the log)"
            in app.window.status_line.text()
        ),
        timeout=10_000,
    )


def test_the_user_guide_opens_from_the_help_menu(qtbot, make_app) -> None:
    from widgets.guide_dialog import GuideDialog

    app = make_app(start=False)
    window = app.window
    help_menu = next(a.menu() for a in window.menuBar().actions() if a.text() == "&Help")
    assert window.guide_action in help_menu.actions()
    window.guide_action.trigger()
    dialog = window.findChild(GuideDialog)
    assert dialog is not None
    qtbot.waitUntil(dialog.isVisible)
    text = dialog.text()
    # The judging keys, as the guide's table reads them.
    for key, meaning in (("R", "relevant"), ("N", "not relevant"), ("U", "clear the judgment")):
        assert f"\n{key}\n{meaning}\n" in text
    for topic in ("Adding folders", "Searching", "Metrics", "Benchmarks", "Exports", "Backups"):
        assert topic in text
    dialog.close()


def test_the_guide_ships_as_package_data() -> None:
    # A frozen or installed app reads it from the `resources` package, like the style sheet.
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = config["tool"]["setuptools"]["package-data"]["*"]
    assert (ROOT / "resources" / "guide.md").is_file()
    assert any(fnmatch("guide.md", pattern) for pattern in patterns)


def test_a_full_thumbnail_disk_is_said_once_in_the_window(qtbot, tmp_path: Path) -> None:
    from PIL import Image

    from app.controllers.thumbnails import ThumbnailLoader
    from app.workers import TaskRunner
    from engine.indexing.thumbnails import ThumbnailCache
    from tests.small_disk import small_tmpfs
    from tests.test_thumbnails import fill_disk

    photos = [tmp_path / f"noise{n}.jpg" for n in range(3)]
    for photo in photos:
        Image.effect_noise((400, 400), 80).convert("RGB").save(photo, quality=95)
    runner = TaskRunner()
    with small_tmpfs(tmp_path / "small-disk", "256k") as disk:
        cache = ThumbnailCache(disk / "thumbnails")
        fill_disk(disk)
        loader = ThumbnailLoader(runner, lambda: cache)
        said: list[str] = []
        loader.problem.connect(said.append)
        ready: list[int] = []
        loader.thumbnailReady.connect(ready.append)
        for image_id, photo in enumerate(photos):
            loader.request(image_id, str(photo), None)
        qtbot.waitUntil(lambda: len(ready) == 3, timeout=10_000)  # shown all the same
        assert runner.wait(10)
    assert len(said) == 1  # once for the spell, not once per photo
    assert said[0].startswith(f"Thumbnails cannot be saved in {disk / 'thumbnails'}: the disk")
    assert "nothing was lost" in said[0]


def test_the_results_area_says_which_folder_is_indexing_and_how_far(
    qtbot, make_app, photos: Path, demo_encoder
) -> None:
    app = make_app(encoder=SlowEncoder(demo_encoder, 0.2))
    wait_ready(qtbot, app)
    empty = app.window.empty_label
    qtbot.waitUntil(lambda: empty.text().startswith("The library is empty"), timeout=10_000)
    app.library.add_folder(photos)  # File › Add folder… on an empty library
    going = re.compile(
        r"Indexing “photos”… (\d+) of 108 photos \(\d+ %\)\nYou can search once it is indexed\."
    )
    qtbot.waitUntil(
        lambda: going.fullmatch(empty.text()) is not None and app.library.indexing,
        timeout=30_000,
    )
    assert empty.isVisibleTo(app.window)
    qtbot.waitUntil(
        lambda: empty.text() == "Type what you are looking for and press Enter.", timeout=60_000
    )


def test_after_quitting_mid_index_the_reopened_window_offers_to_resume(
    qtbot, make_app, photos: Path, demo_encoder, monkeypatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("QUADRAT_CHECKPOINT_EVERY", "16")
    settings = Settings(model="demo", library_dir=str(tmp_path / "lib"), batch_size=8)
    first = make_app(settings=settings, encoder=SlowEncoder(demo_encoder, 0.25))
    wait_ready(qtbot, first)
    first.library.add_folder(photos)
    qtbot.waitUntil(lambda: first.window.library_panel.progress.bar.value() >= 24, timeout=30_000)
    first.window.ask_yes_no = lambda title, text: True  # "Stop indexing and quit?" Yes
    assert first.window.close()

    app = make_app(settings=settings)
    panel = app.window.library_panel
    qtbot.waitUntil(lambda: bool(app.library.stats), timeout=20_000)
    stats = app.library.stats[0]
    assert 16 <= stats.indexed < 108 and stats.pending == 108 - stats.indexed - stats.skipped
    done = stats.indexed + stats.skipped
    assert panel.row_texts() == [f"photos — unfinished: {done} of 108 indexed"]
    assert panel.summary.text().endswith(f"; “photos” unfinished ({108 - done} to index)")
    panel.tree.clearSelection()  # no row needs to be found and selected first
    assert panel.resume_button.isVisibleTo(panel) and panel.resume_button.isEnabled()
    with qtbot.waitSignal(app.library.indexingFinished, timeout=60_000) as finished:
        panel.resume_button.click()
    assert finished.args[0].report.indexed == 108 - stats.indexed  # only the rest is encoded
    qtbot.waitUntil(lambda: panel.row_texts() == ["photos"], timeout=10_000)
    assert panel.tree.topLevelItem(0).text(1) == "108"
    assert not panel.resume_button.isVisibleTo(panel)
