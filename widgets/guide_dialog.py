"""Help › User guide: the short guide shipped in resources/guide.md, shown as rich text."""

from __future__ import annotations

import logging
from importlib import resources

from PySide6.QtWidgets import QDialog, QDialogButtonBox, QTextBrowser, QVBoxLayout, QWidget

log = logging.getLogger(__name__)

GUIDE_RESOURCE = "guide.md"


def guide_text() -> str:
    """The guide's Markdown, read from the `resources` package (so a frozen app has it too)."""
    try:
        return (resources.files("resources") / GUIDE_RESOURCE).read_text(encoding="utf-8")
    except OSError as exc:  # a broken installation: say so in the dialog, not with a crash
        log.warning("user guide not found: %s", exc)
        return "# Quadrat user guide\n\nThe guide is missing from this installation."


class GuideDialog(QDialog):
    """A non-modal window with the user guide; links open in the system browser."""

    def __init__(self, markdown: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("guideDialog")
        self.setWindowTitle("Quadrat user guide")
        self.resize(640, 560)
        self.browser = QTextBrowser(self)
        self.browser.setObjectName("guideText")
        self.browser.setOpenExternalLinks(True)
        self.browser.setMarkdown(markdown)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close, self)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(self.browser)
        layout.addWidget(buttons)

    def text(self) -> str:
        """The guide as the user reads it (no markup)."""
        return self.browser.toPlainText()
