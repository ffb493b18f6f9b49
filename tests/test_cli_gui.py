"""`quadrat gui` when the window cannot be loaded: one line saying what and how, never exit 0."""

from __future__ import annotations

import builtins
from collections.abc import Callable

import pytest

from app.cli import main


def _refuse_import(
    monkeypatch: pytest.MonkeyPatch, prefix: str, error: Callable[[str], ImportError]
) -> None:
    """Make every import of `prefix` (or a submodule of it) raise `error(name)`, even when the
    module is already loaded, as on a machine where it is missing."""
    real_import = builtins.__import__

    def fake_import(name: str, *args: object, **kwargs: object) -> object:
        if name == prefix or name.startswith(prefix + "."):
            raise error(name)
        return real_import(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setenv("QT_QPA_PLATFORM", "offscreen")  # past the no-display check
    monkeypatch.setattr(builtins, "__import__", fake_import)


def _run_gui(capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["gui"])
    out, err = capsys.readouterr()
    return code, out, err


def test_gui_without_pyside6_fails_with_one_line_saying_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def missing(name: str) -> ImportError:
        return ModuleNotFoundError(f"No module named {name!r}", name=name)

    _refuse_import(monkeypatch, "PySide6", missing)
    code, out, err = _run_gui(capsys)
    assert code == 1
    assert out == ""  # no help text standing in for the window
    assert len(err.strip().splitlines()) == 1
    assert err.startswith("error: the window cannot start: Qt could not be imported (PySide6")
    assert "pip install PySide6-Essentials" in err


def test_gui_missing_a_qt_system_library_names_the_library(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def no_libegl(name: str) -> ImportError:
        # What the dynamic loader raises when an extension module's library is absent.
        return ImportError(
            "libEGL.so.1: cannot open shared object file: No such file or directory",
            name="PySide6.QtGui",
            path="/site-packages/PySide6/QtGui.abi3.so",
        )

    _refuse_import(monkeypatch, "PySide6", no_libegl)
    code, out, err = _run_gui(capsys)
    assert (code, out) == (1, "")
    assert len(err.strip().splitlines()) == 1
    assert "libEGL.so.1: cannot open shared object file" in err
    assert "install the missing system library with your package manager" in err


def test_gui_whose_own_module_cannot_be_imported_does_not_print_help_and_exit_0(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _refuse_import(
        monkeypatch, "app.main", lambda name: ImportError(f"cannot import {name}", name=name)
    )
    code, out, err = _run_gui(capsys)
    assert (code, out) == (1, "")
    assert err.strip() == (
        "error: the window cannot start: app.main could not be imported (cannot import "
        "app.main); reinstall Quadrat, or use the command line (quadrat --help)"
    )
