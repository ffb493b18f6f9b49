"""Shared fixtures. Every test runs with its own QUADRAT_HOME so no user files are touched."""

from __future__ import annotations

import os
import pickle
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
from filelock import FileLock

# Catalog fixtures for SQLite and PostgreSQL: catalog_url, postgres_url, postgres_server.
from tests.catalogs import (  # noqa: F401
    catalog_url,
    pgvector_server,
    pgvector_url,
    postgres_server,
    postgres_url,
)

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# One torch/FAISS thread per test process: the xdist workers already take the cores, and an
# OpenMP team that loses a core to another worker stalls each forward (the tiny demo model
# encoded 25x slower at two threads than at one beside the other worker at load 10).
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(autouse=True)
def quadrat_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("QUADRAT_HOME", str(home))
    return home


T = TypeVar("T")


def _built_once(
    tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], T]
) -> T:
    """What `build(folder)` returns, built once per test run: the first xdist worker to ask
    builds `name` in a folder every worker of the run shares while the others wait on a file
    lock, then read the pickled result. Session fixtures that write or index a collection are
    otherwise paid once per worker. The folder is new with each run (under pytest's base
    temporary folder), so nothing stale is ever reused; callers treat it as read-only."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the run's folder, above each worker's own
    shared = base / "built-once"
    shared.mkdir(exist_ok=True)
    folder, result = shared / name, shared / f"{name}.pickle"
    with FileLock(str(shared / f"{name}.lock")):
        if not result.exists():
            shutil.rmtree(folder, ignore_errors=True)  # a build that failed part-way
            folder.mkdir()
            value = build(folder)
            result.write_bytes(pickle.dumps(value))
            return value
    loaded: T = pickle.loads(result.read_bytes())
    return loaded


@pytest.fixture(scope="session")
def demo_encoder():
    """The bundled demo CLIP model, loaded once per test session."""
    from engine.models.encoders import load_encoder

    return load_encoder("demo", device="cpu")


@pytest.fixture(scope="session")
def demo_collection(tmp_path_factory: pytest.TempPathFactory):
    """The demo collection as `quadrat demo` writes it (read-only: copy before changing it)."""
    from engine.demo.collection import write_demo_collection

    return _built_once(
        tmp_path_factory, "demo", lambda folder: write_demo_collection(folder / "collection")
    )


@pytest.fixture(scope="session")
def small_demo_collection(tmp_path_factory: pytest.TempPathFactory):
    """A smaller demo collection (5 photos per class) for tests that change files."""
    from engine.demo.collection import write_demo_collection

    return _built_once(
        tmp_path_factory,
        "demo-small",
        lambda folder: write_demo_collection(folder / "c", images_per_class=5),
    )


@pytest.fixture
def photos(tmp_path: Path, small_demo_collection) -> Path:
    """A private copy of the small demo collection (60 photos) the test may change."""
    dest = tmp_path / "photos"
    shutil.copytree(small_demo_collection.root, dest)
    return dest


@pytest.fixture(scope="session")
def indexed_small_demo(
    tmp_path_factory: pytest.TempPathFactory, small_demo_collection, request: pytest.FixtureRequest
) -> Path:
    """A library folder of the small demo collection indexed with the demo model, built once
    per session (read-only: take a copy with `copy_small_demo_library` to change it).

    Its catalog records the session's `small_demo_collection.root` as the collection root, so a
    copy of the folder (its own `catalog.sqlite3`, no `catalog.url`) opens as a library of that
    same, shared photo folder."""
    from engine.catalog.library import Library
    from engine.indexing.indexer import Indexer

    def build(folder: Path) -> Path:
        encoder = request.getfixturevalue("demo_encoder")  # loaded only where it is built
        with Library.open(folder / "lib") as library:
            Indexer(library, encoder).run(small_demo_collection.root)
        return folder / "lib"

    return _built_once(tmp_path_factory, "indexed-small-demo", build)


def _cli_indexed(tmp_path_factory: pytest.TempPathFactory, name: str, photos: Path) -> Path:
    """A library of `photos` indexed through `quadrat index --model demo --json`."""
    from app.cli import main

    def build(folder: Path) -> Path:
        lib = folder / "lib"
        with pytest.MonkeyPatch.context() as patch:  # no user files touched, as in any test
            patch.setenv("QUADRAT_HOME", str(tmp_path_factory.mktemp("home")))
            code = main(["index", str(photos), "--library", str(lib), "--model", "demo", "--json"])
        assert code == 0
        return lib

    return _built_once(tmp_path_factory, name, build)


@pytest.fixture(scope="session")
def cli_indexed_small_demo(tmp_path_factory: pytest.TempPathFactory, small_demo_collection) -> Path:
    """The small demo collection indexed once through `quadrat index --model demo` (read-only:
    take a copy with `copy_cli_small_demo_library`)."""
    return _cli_indexed(tmp_path_factory, "cli-indexed-small-demo", small_demo_collection.root)


@pytest.fixture(scope="session")
def cli_indexed_demo(tmp_path_factory: pytest.TempPathFactory, demo_collection) -> Path:
    """The full demo collection indexed once through `quadrat index --model demo` (read-only:
    take a copy with `copy_cli_demo_library`)."""
    return _cli_indexed(tmp_path_factory, "cli-indexed-demo", demo_collection.root)


def _copier(template: Path) -> Callable[[Path], Path]:
    def copy(dest: Path) -> Path:
        shutil.copytree(template, dest)
        return dest

    return copy


@pytest.fixture(scope="session")
def copy_small_demo_library(indexed_small_demo: Path) -> Callable[[Path], Path]:
    """Copy the indexed small demo library to a new folder (returned): indexing it again would
    cost seconds per module, a copy milliseconds. The copy belongs to the caller."""
    return _copier(indexed_small_demo)


@pytest.fixture(scope="session")
def copy_cli_small_demo_library(cli_indexed_small_demo: Path) -> Callable[[Path], Path]:
    """Copy the small demo library indexed through the command line to a new folder."""
    return _copier(cli_indexed_small_demo)


@pytest.fixture(scope="session")
def copy_cli_demo_library(cli_indexed_demo: Path) -> Callable[[Path], Path]:
    """Copy the full demo library indexed through the command line to a new folder (returned);
    the copy searches the session's shared `demo_collection` photos and belongs to the caller."""
    return _copier(cli_indexed_demo)


@pytest.fixture(scope="session")
def camera_trap_demo_library(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Path:
    """A folder holding the camera-trap demo (`photos`) and a library of it (`lib`) indexed
    with the demo model, its queries and judgments imported (judge alice); built once per run
    (read-only: `camera_trap_library` gives each test module a copy of the library)."""
    from engine.catalog.library import Library
    from engine.demo.camera_traps import write_camera_trap_demo
    from engine.indexing.indexer import Indexer
    from engine.io.export import import_benchmark

    def build(folder: Path) -> Path:
        demo = write_camera_trap_demo(folder / "photos")
        encoder = request.getfixturevalue("demo_encoder")
        with Library.open(folder / "lib") as library:
            Indexer(library, encoder).run(demo.root)
            import_benchmark(library, demo.queries_path, demo.judgments_path, judge="alice")
        return folder

    return _built_once(tmp_path_factory, "camera-trap-library", build)


@pytest.fixture(scope="module")
def camera_trap_library(tmp_path_factory: pytest.TempPathFactory, camera_trap_demo_library) -> Path:
    """A folder of the module's own holding a copy of the camera-trap demo's library (`lib`,
    of the shared photos) for the module's tests to change and write beside."""
    root = tmp_path_factory.mktemp("camtrap")
    shutil.copytree(camera_trap_demo_library / "lib", root / "lib")
    return root


@pytest.fixture(scope="session")
def tiny_sd_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Stable Diffusion pipeline folder (see tests/tiny_sd.py; read-only)."""
    from tests.tiny_sd import build_tiny_sd

    return build_tiny_sd(tmp_path_factory.mktemp("tiny-sd") / "pipeline")


@pytest.fixture(scope="session")
def warm_python():
    """Runs `python -c ...` / `python -m ...` commands as new processes forked from a parent
    that imported torch and the engine once (see tests/warm_python.py): a real process per
    command without seconds of imports each time."""
    from tests.warm_python import WarmPython

    warm = WarmPython()
    yield warm
    warm.stop()


@pytest.fixture(scope="session")
def plugin_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding an installed test plug-in package (see tests/plugin.py)."""
    from tests.plugin import build_plugin

    return build_plugin(tmp_path_factory)


@pytest.fixture
def with_plugin(plugin_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The test plug-in importable and its methods in the registry, for this test only."""
    import importlib

    from engine import methods as registry

    monkeypatch.syspath_prepend(str(plugin_path))
    importlib.invalidate_caches()
    registry.reload()
    yield plugin_path
    registry.reload()


# Fixtures that make a test an integration test: a window, a process of its own, a server,
# the whole 960-photo demo collection (benchmark runs end to end), a diffusers pipeline.
_INTEGRATION_FIXTURES = frozenset(
    {
        "demo_collection",
        "tiny_sd_dir",
        "qtbot",
        "qapp",
        "make_app",
        "warm_python",
        "postgres_server",
        "postgres_url",
        "pgvector_server",
        "pgvector_url",
    }
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marks the integration tests (windows, processes, Ray, servers, packaging, the whole demo
    benchmark, diffusers pipelines) so that
    `make test-fast` can leave them out; modules that run processes say so themselves with
    `pytestmark = pytest.mark.integration`, the rest is told by the fixtures a test asks for."""
    for item in items:
        in_window_tests = "tests/gui/" in str(item.path).replace("\\", "/")
        fixtures = set(getattr(item, "fixturenames", ()))
        callspec = getattr(item, "callspec", None)
        on_postgres = callspec is not None and callspec.params.get("catalog_url") == "postgresql"
        if in_window_tests or fixtures & _INTEGRATION_FIXTURES or on_postgres:
            item.add_marker(pytest.mark.integration)
