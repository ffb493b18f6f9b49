"""`quadrat gui [FOLDER] [--demo]` (and `quadrat` alone): the window. Qt is imported only
here, and only when the window is asked for."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from app.cli.registry import Command
from engine.errors import QuadratError


def _gui_arguments(gui: argparse.ArgumentParser) -> None:
    """The options of `quadrat gui`."""
    gui.add_argument("folder", nargs="?", type=Path)
    gui.add_argument("--demo", action="store_true", help="open the bundled demo collection")


def _no_display() -> bool:
    """True on a Linux/BSD session with no screen, where Qt would abort with a core dump."""
    if sys.platform.startswith(("win", "darwin")) or os.environ.get("QT_QPA_PLATFORM"):
        return False
    return not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def _window_import_failure(exc: ImportError) -> str:
    """One line for an import the window needed and could not make: what, and how to fix it."""
    name = exc.name or "a module"
    detail = " ".join(str(exc).split())
    if name.split(".")[0] in ("PySide6", "shiboken6"):
        if isinstance(exc, ModuleNotFoundError):
            how = "install Qt for Python (pip install PySide6-Essentials)"
        else:  # the module is there but a system library it links to is not
            how = "install the missing system library with your package manager"
        what = f"Qt could not be imported ({name}: {detail})"
    else:
        what, how = f"{name} could not be imported ({detail})", "reinstall Quadrat"
    return f"the window cannot start: {what}; {how}, or use the command line (quadrat --help)"


def cmd_gui(args: argparse.Namespace) -> int:
    if _no_display():
        raise QuadratError(
            "no display found for the window; run it on a desktop, or use the command line "
            "(quadrat --help)"
        )
    # Qt is imported inside run_gui, not at the top of app.main: both failures land here.
    try:
        from app.main import run_gui

        return run_gui(folder=args.folder, demo=args.demo)
    except ImportError as exc:
        raise QuadratError(_window_import_failure(exc)) from exc


COMMANDS = (
    Command(
        "gui",
        help="open the window",
        add_arguments=_gui_arguments,
        run=cmd_gui,
    ),
)
