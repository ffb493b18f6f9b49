"""Module boundaries, as docs/ARCHITECTURE.md draws them:

    app.main -> app.controllers -> widgets          (Qt and plain data only)
                app.controllers -> app.workers, app.settings, app.paths -> engine
    app.cli* -> app.settings, app.paths, app.logs -> engine    (no Qt)

Every import statement in engine/, app/ and widgets/ (lazy ones inside functions included) is
read from the source and checked against `RULES`; a subprocess then checks what importing
really loads."""

from __future__ import annotations

import ast
import pkgutil
import subprocess
import sys
from pathlib import Path

import engine

ROOT = Path(__file__).resolve().parents[1]
QT = {"PySide6", "shiboken6", "PyQt5", "PyQt6"}
APP_ABOVE_WORKERS = {"widgets", "app.controllers", "app.main"}

# (modules a rule covers, what they must never import, why). A name ending in "*" covers every
# module whose name starts with it ("app.cli*": app.cli, app.cli_common, ...).
RULES: list[tuple[str, set[str], str]] = [
    ("engine", QT | {"app", "widgets"}, "the engine is the core: no Qt, nothing above it"),
    # VisRet's backends and the module that loads them share `engine.visret.base`; a backend
    # importing the loader would close an import circle.
    (
        "engine.visret.diffusers_backend",
        QT | {"app", "widgets", "engine.visret.generator"},
        "a generator backend imports engine.visret.base, never the module that loads it",
    ),
    (
        "engine.visret.painter",
        QT | {"app", "widgets", "engine.visret.generator"},
        "a generator backend imports engine.visret.base, never the module that loads it",
    ),
    (
        "engine.visret.base",
        QT
        | {"app", "widgets", "engine.visret.generator", "engine.visret.diffusers_backend"}
        | {"engine.visret.painter"},
        "what every generator shares depends on none of them",
    ),
    # The saved-query store and the search methods: run labels come from the registry and a
    # method is given the judgments it learns from, so neither imports the other's side back.
    (
        "engine.queries",
        QT | {"app", "widgets", "engine.methods"},
        "saved queries know no search method: run labels come from engine.methods.registry",
    ),
    (
        "engine.methods.base",
        QT | {"app", "widgets", "engine.queries"},
        "a method's context is given the judgments it needs, never opens the query store",
    ),
    # The model spec is the value the loader and the model store both take; the store uses the
    # loader's public names only, and only lazily where torch is needed anyway.
    (
        "engine.modelspec",
        QT | {"app", "widgets", "engine.encoders", "engine.models"},
        "the model spec is what the loader and the store share: it imports neither",
    ),
    (
        "engine.models",
        QT | {"app", "widgets", "engine.encoders._*"},
        "the model store never reaches into the loader's private helpers",
    ),
    (
        "widgets",
        {"app", "engine"},
        "widgets lay out plain data they are given and emit signals; controllers decide",
    ),
    # Any other app module: Qt-free, like the command line that imports the package.
    ("app", QT | {"widgets"}, "app modules without a rule of their own stay Qt-free"),
    ("app.controllers", {"app.cli*", "app.main"}, "controllers serve the window, not the CLI"),
    ("app.workers", APP_ABOVE_WORKERS | {"app.cli*"}, "background work knows no view"),
    ("app.settings", QT | APP_ABOVE_WORKERS | {"app.workers", "app.cli*"}, "plain data"),
    ("app.paths", QT | APP_ABOVE_WORKERS | {"app.workers", "app.cli*"}, "plain data"),
    ("app.logs", QT | APP_ABOVE_WORKERS | {"app.workers", "app.cli*"}, "no Qt needed"),
    # The command line starts the window through app.main, lazily; nothing else above it.
    ("app.cli*", QT | {"widgets", "app.controllers", "app.workers"}, "works without Qt"),
    ("app.main", {"app.cli*"}, "starting the window needs no command line"),
    # The self-test opens and closes the window as app.main does; the CLI imports it lazily.
    ("app.selftest", {"app.cli*"}, "the self-test starts the window, as app.main does"),
]


def within(name: str, pattern: str) -> bool:
    if pattern.endswith("*"):
        return name.startswith(pattern[:-1])
    return name == pattern or name.startswith(pattern + ".")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(path: Path) -> set[str]:
    """Every module `path` imports, relative imports resolved; for `from X import Y` both X
    and X.Y (Y may be a submodule)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package.pop()
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package[: len(package) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            if base:
                names.add(base)
            names.update(f"{base}.{alias.name}" if base else alias.name for alias in node.names)
    return names


def rules_for(module: str) -> list[tuple[str, set[str], str]]:
    """The most specific rule covering `module` (the longest pattern), or none."""
    covering = [rule for rule in RULES if within(module, rule[0])]
    if not covering:
        return []
    return [max(covering, key=lambda rule: len(rule[0]))]


def boundary_violations(paths: list[Path]) -> list[str]:
    problems = []
    for path in paths:
        module = module_name(path)
        rules = rules_for(module)
        if not rules:
            problems.append(f"{module}: no rule in tests/test_boundaries.py covers it")
        for pattern, forbidden, why in rules:
            for name in sorted(imported_modules(path)):
                if any(within(name, banned) for banned in forbidden):
                    problems.append(f"{module} imports {name} ({pattern}: {why})")
    return problems


def sources(*folders: str) -> list[Path]:
    return sorted(p for folder in folders for p in (ROOT / folder).rglob("*.py"))


def test_every_import_follows_the_layers():
    paths = sources("engine", "app", "widgets")
    assert len(paths) > 40
    assert boundary_violations(paths) == []


def test_the_checker_sees_wrong_imports(tmp_path, monkeypatch):
    # The check itself can fail: a widget importing the application (relative or absolute,
    # lazily inside a function or as "from app import x") and a worker importing a widget.
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    bad = {
        "widgets/a.py": "def f():\n    from app.workers import TaskRunner\n",
        "widgets/b.py": "from app import settings\n",
        "widgets/sub/c.py": "from ...engine import errors\n",
        "app/workers.py": "import widgets.results\n",
        "app/settings.py": "from PySide6.QtCore import QObject\n",
        "app/controllers/d.py": "from app.cli_common import open_library\n",
        "app/stray.py": "import PySide6\n",  # a new app module is Qt-free by default
        "widgets/fine.py": "from widgets.results import ResultItem\nfrom . import style\n",
    }
    for rel, text in bad.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    problems = boundary_violations(sources("app", "widgets"))
    offenders = sorted({line.split()[0] for line in problems})
    assert offenders == [
        "app.controllers.d",
        "app.settings",
        "app.stray",
        "app.workers",
        "widgets.a",
        "widgets.b",
        "widgets.sub.c",
    ], problems


def test_widgets_and_the_lower_app_modules_load_nothing_above_them():
    """What importing really loads (imports made by importlib or by other modules count)."""
    widgets = [module_name(p) for p in sources("widgets")]
    code = (
        "import importlib, sys\n"
        f"for name in {widgets!r}:\n"
        "    importlib.import_module(name)\n"
        "print(sorted(n for n in sys.modules if n.split('.')[0] in ('app', 'engine')))\n"
        "import app.workers, app.settings, app.paths\n"
        "print(sorted(n for n in sys.modules if n.startswith(('app.controllers', 'app.main'))))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:2] == ["[]", "[]"]


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
