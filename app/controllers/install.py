"""What a feature needs to install itself in the window.

A feature is a function `install(app)` beside its controller (the `install` at the foot of
app/controllers/records.py, events.py, ...): it makes its controller, keeps it on the
`Application` under the feature's name, and connects the window's actions, menus and signals
it answers. `app/controllers/features.py` lists them in the order they are installed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from PySide6.QtCore import SignalInstance
from PySide6.QtWidgets import QMainWindow, QMenu

from widgets.message_banner import DONE

if TYPE_CHECKING:
    from app.controllers.application import Application

Install = Callable[["Application"], None]


def say(app: Application, *messages: SignalInstance) -> None:
    """Each signal's text in the window's status line."""
    for message in messages:
        message.connect(app.window.set_status)


def announce(app: Application, *outcomes: SignalInstance) -> None:
    """Outcomes that matter (files written, judgments imported): read whole in the message
    band, and echoed in the status line."""
    window = app.window
    for outcome in outcomes:
        outcome.connect(window.set_status)
        outcome.connect(lambda text: window.show_message(DONE, "", text))


def asker(app: Application) -> Callable[[str, str], bool]:
    """A yes / no question put to the user over the window."""
    window = app.window
    return lambda title, text: window.ask_yes_no(title, text)


def menu(window: QMainWindow, title: str) -> QMenu:
    """The menu bar's menu called `title` ("Tools" finds "&Tools"), added when missing."""
    wanted = title.replace("&", "")
    for action in window.menuBar().actions():
        found = action.menu()
        if isinstance(found, QMenu) and action.text().replace("&", "") == wanted:
            return found
    return window.menuBar().addMenu(title)
