"""Module boundaries from the design: the engine and the command line never load Qt;
widgets depend on app, never on the engine directly."""

from __future__ import annotations

import ast
import pkgutil
import subprocess
import sys
from pathlib import Path

import engine

ROOT = Path(__file__).resolve().parents[1]


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_engine_sources_import_no_qt_and_nothing_above_them():
    for path in (ROOT / "engine").rglob("*.py"):
        for name in imported_modules(path):
            top = name.split(".")[0]
            assert top not in {"PySide6", "shiboken6", "PyQt5", "PyQt6", "app", "widgets"}, (
                path,
                name,
            )


def test_widgets_do_not_reach_into_the_engine():
    for path in (ROOT / "widgets").rglob("*.py"):
        for name in imported_modules(path):
            assert name.split(".")[0] != "engine", (path, name)


def test_importing_every_engine_module_and_the_cli_loads_no_qt():
    modules = [
        m.name
        for m in pkgutil.walk_packages(engine.__path__, prefix="engine.")
        if ".migrations" not in m.name
    ]
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r} + ['app.cli', 'app.cli_metrics', 'app.cli_evaluate']:\n"
        "    importlib.import_module(name)\n"
        "import app.cli; app.cli.build_parser()\n"
        "loaded = sorted(n for n in sys.modules if n.startswith(('PySide6', 'shiboken6')))\n"
        "print(loaded)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
    assert len(modules) >= 15
