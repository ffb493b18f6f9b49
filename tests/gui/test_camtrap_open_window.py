"""File › Open Camtrap DP package… in the window: the package's folder is indexed as a
collection, its deployments and observations read, the Library pane counts it, and a package
of URLs is refused in one line in the message band."""

from __future__ import annotations

from pathlib import Path

from app.controllers.application import Application
from app.controllers.camtrap_open import ACTION_TEXT
from app.controllers.install import menu
from engine.catalog.models import DetectionFrame
from engine.indexing.deployments import list_deployments
from tests.gui.test_window import wait_ready
from tests.test_camtrap_read import write_example


def _open(app: Application, package: Path) -> None:
    app.window.ask_open_file = lambda caption, file_filter: str(package / "datapackage.json")
    file_menu = menu(app.window, "File")
    labels = [a.text() for a in file_menu.actions()]
    assert labels.index(ACTION_TEXT) == labels.index("&Add folder…") + 1
    next(a for a in file_menu.actions() if a.text() == ACTION_TEXT).trigger()


def test_a_package_opens_as_a_collection(qtbot, make_app, tmp_path: Path) -> None:
    app: Application = make_app()
    wait_ready(qtbot, app)
    package = write_example(tmp_path / "package")
    with qtbot.waitSignal(app.camtrap_open.opened, timeout=60_000):
        _open(app, package)
    library = app.session.library
    assert library is not None
    assert sorted(d.name for d in list_deployments(library)) == ["00a2c20d", "62c200a9"]
    with library.catalog.session() as s:
        assert s.query(DetectionFrame).count() == 2
    qtbot.waitUntil(lambda: "2 deployments" in app.window.status_line.text(), timeout=5_000)


def test_a_package_of_urls_is_refused_in_one_line(qtbot, make_app, tmp_path: Path) -> None:
    app: Application = make_app()
    wait_ready(qtbot, app)
    package = write_example(tmp_path / "package", url=True)
    _open(app, package)
    qtbot.waitUntil(lambda: "media are URLs" in app.window.message_banner.message(), timeout=20_000)
