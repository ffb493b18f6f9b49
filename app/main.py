"""Starting the GUI: create the application, show the window at once, load the rest behind it.

torch, open_clip and FAISS are imported by a worker after the window is on screen; this module
imports only Qt and the light parts of the application.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path
from typing import cast

log = logging.getLogger(__name__)

# Set by the benchmark to print start-up milestones ("window-shown", "ready") on stdout.
MILESTONES_ENV = "QUADRAT_PRINT_MILESTONES"


def _milestone(name: str, started: float) -> None:
    elapsed = time.monotonic() - started
    log.info("start-up: %s after %.3f s", name, elapsed)
    if os.environ.get(MILESTONES_ENV):
        print(f"milestone {name} {elapsed:.4f}", flush=True)


def run_gui(folder: Path | None, demo: bool) -> int:
    """Open the main window (on FOLDER, or the demo collection) and run until it closes."""
    started = time.monotonic()
    from widgets.qtcompat import keep_none_alive

    keep_none_alive()  # before the first Qt object (see widgets/qtcompat.py)
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    from app.controllers.application import Application
    from app.logs import setup_logging
    from widgets.style import apply_style

    log_file = None
    for handler in logging.getLogger().handlers:
        log_file = getattr(handler, "baseFilename", None) or log_file
    if log_file is None:
        log_file = setup_logging()
    # The running application is a QApplication (a widget app); Qt's types say QCoreApplication.
    qt_app = cast(QApplication, QApplication.instance() or QApplication(sys.argv[:1]))
    qt_app.setApplicationName("Quadrat")
    qt_app.setOrganizationName("Quadrat")
    apply_style(qt_app)
    app = Application(folder=folder, demo=demo, log_file=Path(log_file) if log_file else None)

    def ready_changed(ready: bool, _message: str) -> None:
        if ready:
            _milestone("ready", started)

    app.session.readyChanged.connect(ready_changed)
    app.show()
    _milestone("window-shown", started)
    QTimer.singleShot(0, app.start)
    qt_app.aboutToQuit.connect(app.shutdown)
    return int(qt_app.exec())
