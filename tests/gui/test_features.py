"""Features install themselves: the application is a list of them, and a new one adds its
action, menu and messages without a line changed in app/controllers/application.py."""

from __future__ import annotations

import ast
from pathlib import Path

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QAction

import app.controllers.application as application_module
from app.controllers.features import FEATURES
from app.controllers.install import menu, say


def test_the_application_is_built_from_a_short_list_of_features() -> None:
    tree = ast.parse(Path(application_module.__file__).read_text(encoding="utf-8"))
    (app_class,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Application"]
    (init,) = [n for n in app_class.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"]
    assert init.end_lineno is not None
    assert init.end_lineno - init.lineno + 1 < 80
    assert len(FEATURES) >= 20  # the controllers are made by the features, not by __init__


class _Counter(QObject):
    message = Signal(str)


def test_a_new_feature_installs_its_menu_action_and_messages(qtbot, make_app) -> None:
    counted: list[int] = []

    def toy(app) -> None:  # a feature as a new module would write it
        counter = app.toy = _Counter()
        action = QAction("&Count the results", app.window)

        def count() -> None:
            counted.append(app.window.results_model.rowCount())
            counter.message.emit(f"{counted[-1]} results")

        action.triggered.connect(count)
        menu(app.window, "Tools").addAction(action)
        say(app, counter.message)

    app = make_app(features=(*FEATURES, toy), start=False)
    tools = menu(app.window, "&Tools")
    labels = [a.text() for a in tools.actions()]
    assert labels == ["&Benchmark…", "&Count the results"]
    tools.actions()[-1].trigger()
    assert counted == [0]
    assert app.window.status_line.text() == "0 results"
    # Without the feature the window has no such action.
    plain = make_app(start=False)
    assert [a.text() for a in menu(plain.window, "Tools").actions()] == ["&Benchmark…"]
    # A menu a feature asks for that the window lacks is added to the menu bar.
    assert menu(plain.window, "&Lab").title() == "&Lab"
    assert menu(plain.window, "Lab") is menu(plain.window, "&Lab")
