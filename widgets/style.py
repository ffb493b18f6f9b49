"""The application's look: the bundled style sheet over Qt's Fusion style."""

from __future__ import annotations

import logging
from importlib import resources

from PySide6.QtWidgets import QApplication

log = logging.getLogger(__name__)


def style_sheet() -> str:
    try:
        return (resources.files("resources") / "style.qss").read_text(encoding="utf-8")
    except OSError as exc:  # a missing style sheet is cosmetic
        log.warning("style sheet not found: %s", exc)
        return ""


def apply_style(app: QApplication) -> None:
    app.setStyle("Fusion")
    app.setStyleSheet(style_sheet())
