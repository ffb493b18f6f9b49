"""Module boundaries, as docs/ARCHITECTURE.md draws them:

    app.main -> app.controllers -> widgets          (Qt and plain data only)
                app.controllers -> app.workers, app.settings, app.paths -> engine
    app.cli* -> app.settings, app.paths, app.logs -> engine    (no Qt)

Every import statement in engine/, app/ and widgets/ (lazy ones inside functions included) is
read from the source and checked against `RULES`; a subprocess then checks what importing
really loads."""

from __future__ import annotations

import ast
import functools
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import engine

ROOT = Path(__file__).resolve().parents[1]
QT = {"PySide6", "shiboken6", "PyQt5", "PyQt6"}
APP_ABOVE_WORKERS = {"widgets", "app.controllers", "app.main"}
# The model store's modules, above the loader (engine.models.encoders).
MODEL_STORE = {
    "engine.models.store",
    "engine.models.download",
    "engine.models.packs",
    "engine.models.offers",
}

# (modules a rule covers, what they must never import, why). A name ending in "*" covers every
# module whose name starts with it ("app.cli*": app.cli, app.cli.common, ...).
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
        "engine.judgments.queries",
        QT | {"app", "widgets", "engine.methods"},
        "saved queries know no search method: run labels come from engine.methods.registry",
    ),
    # The query store stores; scoring a ranking against its judgments is evaluation's job
    # (engine.evaluation.live), done by whoever holds both.
    (
        "engine.judgments.queries",
        QT | {"app", "widgets", "engine.evaluation"},
        "the query store scores nothing: live metrics are engine.evaluation.live's",
    ),
    (
        "engine.methods.base",
        QT | {"app", "widgets", "engine.judgments.queries"},
        "a method's context is given the judgments it needs, never opens the query store",
    ),
    # The model spec, the store's folders and the hub's reachability are what the loader and
    # the model store both use; the store (store, download, packs) uses the loader's public
    # names only, and only lazily where torch is needed anyway; the loader never imports it.
    (
        "engine.models.spec",
        QT
        | {"app", "widgets"}
        | MODEL_STORE
        | {"engine.models.encoders", "engine.models.folders", "engine.models.hub"},
        "the model spec is what the loader and the store share: it imports neither",
    ),
    (
        "engine.models.folders",
        QT | {"app", "widgets", "engine.models.encoders"} | MODEL_STORE,
        "the store's folders are read by the loader too: they import neither it nor the store",
    ),
    (
        "engine.models.hub",
        QT | {"app", "widgets", "engine.models.encoders"} | MODEL_STORE,
        "the hub's reachability is asked by the loader too: it imports neither it nor the store",
    ),
    (
        "engine.models.encoders",
        QT | {"app", "widgets"} | MODEL_STORE,
        "the loader finds installed models through engine.models.folders, never the store",
    ),
    *[
        (
            name,
            QT | {"app", "widgets", "engine.models.encoders._*"},
            "the model store never reaches into the loader's private helpers",
        )
        for name in sorted(MODEL_STORE - {"engine.models.offers"})
    ],
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


def type_checking_only(tree: ast.Module) -> set[ast.AST]:
    """The import statements under `if TYPE_CHECKING:`, which never run."""
    guarded: set[ast.AST] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for statement in node.body:
                guarded.update(ast.walk(statement))
    return guarded


@functools.cache
def _parsed(source: str) -> tuple[ast.Module, frozenset[ast.AST]]:
    """A source's tree and its imports for type checking only, parsed once per session: the
    layer, circle and boundary checks each read every engine module."""
    tree = ast.parse(source)
    return tree, frozenset(type_checking_only(tree))


def imported_modules(path: Path, *, runtime_only: bool = False) -> set[str]:
    """Every module `path` imports, relative imports resolved; for `from X import Y` both X
    and X.Y (Y may be a submodule). `runtime_only` leaves out imports for type checking."""
    tree, guarded = _parsed(path.read_text(encoding="utf-8"))
    skipped = guarded if runtime_only else frozenset()
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package.pop()
    names: set[str] = set()
    for node in ast.walk(tree):
        if node in skipped:
            continue
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
        "app/controllers/d.py": "from app.cli.common import open_library\n",
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


# The engine's packages by job, lowest first. A module imports its own package and the layers
# below it, never one above (lazy imports inside functions count): what sits low can be read,
# tested and reused without what sits high. Packages in one layer may use each other.
ENGINE_LAYERS: list[tuple[str, ...]] = [
    (
        "engine",
        "engine.errors",
        "engine.progress",
        "engine.files",
        "engine.terms",
        "engine.licences",
    ),
    ("engine.evaluation", "engine.models", "engine.vectors", "engine.demo"),
    ("engine.catalog",),
    ("engine.indexing",),
    ("engine.detections",),
    ("engine.search",),
    ("engine.judgments",),
    ("engine.methods", "engine.rerank", "engine.visret"),
    ("engine.benchmarks",),
    ("engine.io",),
]


def engine_layer(module: str) -> int:
    """The index in ENGINE_LAYERS of the most specific entry covering `module`."""
    covering = [
        (len(name), depth)
        for depth, names in enumerate(ENGINE_LAYERS)
        for name in names
        if within(module, name)
    ]
    if not covering:
        raise KeyError(f"{module}: no layer in ENGINE_LAYERS covers it")
    return max(covering)[1]


def resolved_imports(path: Path, modules: set[str], *, runtime_only: bool = False) -> set[str]:
    """The engine modules `path` imports: `from X import Y` counts as X.Y where that is a
    module, else as X."""
    found = set()
    for name in imported_modules(path, runtime_only=runtime_only):
        if not within(name, "engine"):
            continue
        while name not in modules and "." in name:
            name = name.rsplit(".", 1)[0]
        if name in modules:
            found.add(name)
    return found


def layer_violations(paths: list[Path]) -> list[str]:
    modules = {module_name(p) for p in paths}
    problems = []
    for path in paths:
        module = module_name(path)
        try:
            depth = engine_layer(module)
        except KeyError as error:
            problems.append(str(error))
            continue
        for name in sorted(resolved_imports(path, modules)):
            if engine_layer(name) > depth:
                problems.append(
                    f"{module} (layer {depth}) imports {name} (layer {engine_layer(name)})"
                )
    return problems


# The method registry finds its built-in methods lazily, as it finds third-party ones; every
# other import circle in the engine is a defect.
REGISTRY_BUILT_INS = "engine.methods.registry"


def import_circles(paths: list[Path]) -> list[list[str]]:
    """Strongly connected groups of more than one engine module (Tarjan's algorithm) over the
    imports that run (those for type checking only never do)."""
    modules = {module_name(p) for p in paths}
    edges = {
        module_name(p): sorted(resolved_imports(p, modules, runtime_only=True) - {module_name(p)})
        for p in paths
        if module_name(p) != REGISTRY_BUILT_INS
    }
    edges[REGISTRY_BUILT_INS] = (
        sorted(
            name
            for name in resolved_imports(
                ROOT / "engine/methods/registry.py", modules, runtime_only=True
            )
            if not name.startswith("engine.methods.") or name == "engine.methods.base"
        )
        if REGISTRY_BUILT_INS in modules
        else []
    )
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in edges.get(node, []):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                circles.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return circles


def test_engine_packages_import_only_their_own_layer_and_below():
    paths = [p for p in sources("engine") if ".migrations" not in module_name(p)]
    assert len(paths) > 40
    assert layer_violations(paths) == []


def test_the_engine_has_no_import_circle():
    paths = [p for p in sources("engine") if ".migrations" not in module_name(p)]
    assert import_circles(paths) == []


def test_the_layer_and_circle_checks_see_wrong_imports(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    bad = {
        "engine/__init__.py": "",
        "engine/errors.py": "",
        "engine/evaluation/__init__.py": "",
        "engine/evaluation/metrics.py": "def f():\n    from engine.methods.base import Method\n",
        "engine/methods/__init__.py": "",
        "engine/methods/base.py": "from engine.evaluation import metrics\n",
        "engine/search/__init__.py": "",
        "engine/search/a.py": "from engine.search.b import x\n",
        "engine/search/b.py": "def g():\n    import engine.search.a\n",
        "engine/search/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import engine.search.d\n",
        "engine/search/d.py": "import engine.search.c\n",
        "engine/stray.py": "",
    }
    for rel, text in bad.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    paths = sources("engine")
    problems = layer_violations(paths)
    assert problems == [
        "engine.evaluation.metrics (layer 1) imports engine.methods.base (layer 7)",
    ], problems
    circles = import_circles(paths)
    assert ["engine.search.a", "engine.search.b"] in circles
    assert ["engine.evaluation.metrics", "engine.methods.base"] in circles
    assert len(circles) == 2  # an import for type checking only closes no circle


@pytest.mark.integration  # a new interpreter of its own
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


@pytest.mark.integration  # a new interpreter of its own
def test_importing_every_engine_module_and_the_cli_loads_no_qt():
    modules = [
        m.name
        for m in pkgutil.walk_packages(engine.__path__, prefix="engine.")
        if ".migrations" not in m.name
    ]
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r} + ['app.cli', 'app.cli.metrics', 'app.cli.evaluate']:\n"
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
