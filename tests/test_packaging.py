"""Fast checks of the packaging files: nothing here builds a bundle (see docs/PACKAGING.md)."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
import types
import xml.etree.ElementTree as ET
import zlib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.warm_python import WarmPython

pytestmark = pytest.mark.integration  # (runs processes; the fast lane leaves it out)

ROOT = Path(__file__).resolve().parents[1]
PACKAGING = ROOT / "packaging"


def _run_spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, dict[str, Any]]:
    """Execute quadrat.spec against stand-ins for PyInstaller (each collect_* answers with a
    token naming what it was asked for) and for torchvision's folder; returns the keyword
    arguments each build step (Analysis, EXE, COLLECT...) was given."""
    hooks = types.ModuleType("PyInstaller.utils.hooks")
    hooks.collect_submodules = lambda package: [f"{package}.*"]  # type: ignore[attr-defined]
    hooks.collect_dynamic_libs = lambda package: [(f"{package} libs", package)]  # type: ignore[attr-defined]
    hooks.copy_metadata = lambda dist: [(f"{dist} metadata", dist)]  # type: ignore[attr-defined]

    def collect_data_files(package: str, include_py_files: bool = False, **_: object) -> list:
        return [(f"{package} data{' with .py' if include_py_files else ''}", package)]

    hooks.collect_data_files = collect_data_files  # type: ignore[attr-defined]
    torchvision = tmp_path / "torchvision"
    torchvision.mkdir()
    (torchvision / "__init__.py").write_text("")
    (torchvision / "_C_stable.so").write_bytes(b"")
    (torchvision / "_C.so").write_bytes(b"")
    for name in ("PyInstaller", "PyInstaller.utils"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "PyInstaller.utils.hooks", hooks)
    # The spec imports the stand-in torchvision: it must leave sys.modules as it was, even when
    # the real one was not imported yet (a later open_clip import would find the stand-in).
    monkeypatch.setitem(sys.modules, "torchvision", types.ModuleType("torchvision"))
    monkeypatch.delitem(sys.modules, "torchvision")
    monkeypatch.syspath_prepend(str(tmp_path))
    calls: dict[str, dict[str, Any]] = {}

    def step(name: str) -> Any:
        def record(*args: Any, **kwargs: Any) -> SimpleNamespace:
            calls[name] = {"args": args, **kwargs}
            return SimpleNamespace(pure=[], scripts=[], binaries=[], datas=[])

        return record

    spec = PACKAGING / "quadrat.spec"
    namespace = {"SPECPATH": str(PACKAGING), "__file__": str(spec)}
    namespace |= {name: step(name) for name in ("Analysis", "PYZ", "EXE", "COLLECT", "BUNDLE")}
    exec(compile(spec.read_text(encoding="utf-8"), str(spec), "exec"), namespace)
    return calls


def test_spec_collects_what_the_hooks_miss(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _run_spec(tmp_path, monkeypatch)
    analysis = calls["Analysis"]
    (script,) = analysis["args"][0]
    assert Path(script) == PACKAGING / "entry.py" and Path(script).is_file()
    # Our lazily imported modules, and the data read through importlib.resources.
    for package in ("app", "engine", "widgets", "resources", "faiss"):
        assert f"{package}.*" in analysis["hiddenimports"], package
    assert ("resources data", "resources") in analysis["datas"]
    assert ("open_clip data", "open_clip") in analysis["datas"]  # tokenizer vocabulary, configs
    # Alembic reads the migration scripts as files: they must travel as .py, and be there.
    migrations = "engine.catalog.migrations"
    assert (f"{migrations} data with .py", migrations) in analysis["datas"]
    assert list((ROOT / "engine" / "catalog" / "migrations" / "versions").glob("0001_*.py"))
    # torchvision's *_stable extensions (which its hook misses) and FAISS's libraries.
    stable = str(tmp_path / "torchvision" / "_C_stable.so")
    assert (stable, "torchvision") in analysis["binaries"]
    assert (str(tmp_path / "torchvision" / "_C.so"), "torchvision") not in analysis["binaries"]
    assert ("faiss libs", "faiss") in analysis["binaries"]
    assert ("onnxruntime libs", "onnxruntime") in analysis["binaries"]  # the CPU runtime
    assert "onnxruntime" in analysis["hiddenimports"]
    assert calls["COLLECT"]["name"] == "Quadrat"


def test_entry_answers_version_from_the_package_metadata() -> None:
    from importlib.metadata import version

    out = subprocess.run(
        ["python", str(PACKAGING / "entry.py"), "--version"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert out.stdout.strip() == f"Quadrat {version('quadrat')}"


def test_desktop_entry_is_well_formed() -> None:
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keys are case-sensitive
    parser.read(PACKAGING / "linux" / "quadrat.desktop", encoding="utf-8")
    entry = parser["Desktop Entry"]
    assert entry["Type"] == "Application"
    assert entry["Name"] == "Quadrat"
    assert entry["Exec"].split()[0] == "quadrat"
    assert entry["Icon"] == "quadrat"
    assert entry["Categories"].endswith(";")


def test_icon_is_svg() -> None:
    root = ET.parse(PACKAGING / "linux" / "quadrat.svg").getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg"


@pytest.mark.parametrize(
    "script", ["build_linux.sh", "test_bundle.sh", "linux/install.sh", "windows/build_standin.sh"]
)
def test_shell_scripts_parse(script: str) -> None:
    result = subprocess.run(["bash", "-n", str(PACKAGING / script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_the_bundle_test_imports_a_model_pack_offline_and_searches_with_it(
    tmp_path: Path, warm_python: WarmPython
) -> None:
    """packaging/test_bundle.sh (make package-test) on a stand-in bundle: self-test, then a pack
    made by tools/make_model_pack.py imported with no network, indexed with and searched.

    The stand-in's Quadrat and the build Python run as children of the warm parent (seven
    commands, each importing torch otherwise), in the script's clean environment and, where
    `unshare -n` cut it, without network: they enter the launcher's network namespace."""
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    warm_python.launcher(
        bundle / "Quadrat", "-c", "import sys; from app.cli import main; sys.exit(main())"
    )
    build_python = warm_python.launcher(tmp_path / "python")
    result = subprocess.run(
        ["bash", str(PACKAGING / "test_bundle.sh"), str(bundle)],
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "PYTHON": str(build_python)},
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "self-test passed" in result.stdout
    assert "hf-hub:quadrat/tiny-clip indexed the demo and searched it (5 results)" in result.stdout


def test_the_bundle_test_fails_when_the_bundle_cannot_search(tmp_path: Path) -> None:
    # A bundle whose searches print nothing. Every step before the search is the test above's:
    # here they answer at once (the pack is not made, `models list` names the imported model)
    # so that only the search can fail the script.
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "Quadrat").write_text(
        '#!/bin/sh\n[ "$1 $2" = "models list" ] && echo "hf-hub:quadrat/tiny-clip"\nexit 0\n'
    )
    (bundle / "Quadrat").chmod(0o755)
    result = subprocess.run(
        ["bash", str(PACKAGING / "test_bundle.sh"), str(bundle)],
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "PYTHON": "true"},
    )
    assert result.returncode != 0
    assert "gave 0 results, not 5" in result.stderr


def test_install_script_installs_per_user(tmp_path: Path) -> None:
    """install.sh run from an unpacked archive puts the command, menu entry and icon in HOME."""
    archive = tmp_path / "Quadrat-x-linux-cpu"
    (archive / "app").mkdir(parents=True)
    (archive / "app" / "Quadrat").write_text('#!/bin/sh\necho frozen "$@"\n')
    (archive / "app" / "Quadrat").chmod(0o755)
    for name in ("install.sh", "quadrat.desktop", "quadrat.svg"):
        (archive / name).write_bytes((PACKAGING / "linux" / name).read_bytes())
    (archive / "quadrat").write_text(
        '#!/bin/sh\nhere="$(dirname "$(readlink -f "$0")")"\nexec "$here/app/Quadrat" "$@"\n'
    )
    (archive / "quadrat").chmod(0o755)
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin"}
    subprocess.run(["sh", str(archive / "install.sh")], env=env, check=True, timeout=60)
    data = home / ".local" / "share"
    desktop = (data / "applications" / "quadrat.desktop").read_text()
    assert f"Exec={data}/quadrat/quadrat gui" in desktop
    assert (data / "icons" / "hicolor" / "scalable" / "apps" / "quadrat.svg").is_file()
    out = subprocess.run(
        [str(home / ".local" / "bin" / "quadrat"), "--self-test"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "frozen --self-test"


@pytest.mark.skipif(shutil.which("gcc") is None, reason="cuda_stubs.py needs gcc and readelf")
def test_cuda_stubs_let_a_cuda_extension_load_beside_a_cpu_torch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PyPI's torchvision names libtorch_cuda.so, which a CPU torch lacks: a stub must stand in.

    Qt's libcupsprintersupport.so starts like a CUDA library's name and must stay.
    """
    monkeypatch.syspath_prepend(str(PACKAGING / "linux"))
    from cuda_stubs import strip_cuda

    elsewhere, bundle = tmp_path / "build-machine", tmp_path / "bundle"
    elsewhere.mkdir()
    bundle.mkdir()
    cuda_c = elsewhere / "cuda.c"
    cuda_c.write_text("int c10_cuda_device_count(void) { return 4; }\n")
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-Wl,-soname,libtorch_cuda.so", "-o",
         str(elsewhere / "libtorch_cuda.so"), str(cuda_c)],
        check=True,
    )  # fmt: skip
    ext_c = elsewhere / "ext.c"
    ext_c.write_text(
        "int c10_cuda_device_count(void);\nint gpus(void) { return c10_cuda_device_count(); }\n"
    )
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-o", str(bundle / "_C.so"), str(ext_c),
         f"-L{elsewhere}", "-ltorch_cuda"],
        check=True,
    )  # fmt: skip
    plugin = bundle / "printsupport" / "libcupsprintersupport.so"
    plugin.parent.mkdir()
    plugin.write_bytes((bundle / "_C.so").read_bytes())
    load = [
        sys.executable,
        "-c",
        f"import ctypes; print(ctypes.CDLL({str(bundle / '_C.so')!r}).gpus())",
    ]
    env = {"LD_LIBRARY_PATH": str(bundle), "PATH": "/usr/bin:/bin"}
    assert subprocess.run(load, env=env, capture_output=True).returncode != 0  # nothing to load

    assert strip_cuda(bundle) == ["libtorch_cuda.so"]

    out = subprocess.run(load, env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() != "4"  # the stub answers, not a GPU library
    assert plugin.is_file()


def _fake_build_python(folder: Path, torch_cuda: str | None) -> dict[str, str]:
    """An environment whose Python sees a stand-in torch (CUDA or CPU-only) and a PyInstaller
    that stops the build at once (exit 3): build_linux.sh's decision, without a build."""
    torch = folder / "torch"
    torch.mkdir(parents=True)
    version = "2.14.1+cu130" if torch_cuda else "2.14.1+cpu"
    (torch / "__init__.py").write_text(f"__version__ = {version!r}\nfrom . import version\n")
    (torch / "version.py").write_text(f"cuda = {torch_cuda!r}\n")
    (folder / "PyInstaller").mkdir()
    (folder / "PyInstaller" / "__init__.py").write_text("")
    (folder / "PyInstaller" / "__main__.py").write_text(
        "import sys\nprint('pyinstaller would run now')\nsys.exit(3)\n"
    )
    return {"PATH": "/usr/bin:/bin", "PYTHON": sys.executable, "PYTHONPATH": str(folder)}


def test_make_package_builds_the_cpu_variant_from_pypis_cuda_torch_and_says_so(
    tmp_path: Path,
) -> None:
    """PyPI's Linux torch is a CUDA build and no registry a build machine reaches serves a CPU
    one: `make package` (build_linux.sh cpu) must go on to build, saying how, not refuse."""
    env = _fake_build_python(tmp_path, torch_cuda="13.0")
    result = subprocess.run(
        ["bash", str(PACKAGING / "build_linux.sh"), "cpu"],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert "needs a CPU-only torch" not in result.stderr
    assert result.returncode == 3, result.stdout + result.stderr  # it got to PyInstaller
    first = result.stdout.splitlines()[0]
    assert first == (
        "building the cpu variant from torch 2.14.1+cu130, a CUDA 13.0 build: its CUDA "
        "libraries are removed and stubbed, so the bundle runs on the CPU only"
    )


def test_build_variant_plan_names_the_torch_it_builds_from(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(PACKAGING / "linux"))
    from variant import CannotBuild, plan

    assert plan("cpu", "2.13.0+cpu", None) == (
        "building the cpu variant with the CPU-only torch 2.13.0+cpu"
    )
    assert "gpu variant with torch 2.14.1+cu130 and its CUDA 13.0" in plan(
        "gpu", "2.14.1+cu130", "13.0"
    )
    with pytest.raises(CannotBuild, match="the gpu variant needs a CUDA torch"):
        plan("gpu", "2.13.0+cpu", None)


def test_build_refuses_a_gpu_variant_without_a_cuda_torch_before_building(
    tmp_path: Path,
) -> None:
    env = _fake_build_python(tmp_path, torch_cuda=None)
    result = subprocess.run(
        ["bash", str(PACKAGING / "build_linux.sh"), "gpu"],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 2
    assert "pyinstaller would run now" not in result.stdout
    assert result.stderr.strip() == (
        "the gpu variant needs a CUDA torch, and this one (2.14.1+cpu) is CPU-only: "
        "install PyPI's torch (pip install torch), or build the cpu variant"
    )


def _gcc(*args: str | Path) -> None:
    subprocess.run(["gcc", "-shared", "-fPIC", *map(str, args)], check=True, timeout=120)


@pytest.mark.skipif(shutil.which("g++") is None, reason="cuda_stubs.py needs gcc and readelf")
def test_cuda_stubs_keep_cxx_type_names_and_leave_libc_symbols_to_libc(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stubbed libtorch_cuda.so must (1) give each C++ type it defined a real name, since
    torch registers Python classes by typeid(T).name() at import, and (2) not answer for what a
    system library defines (the real one exports operator delete, which a stub must not take
    over from libstdc++; zlib stands in for it here, outside the Python process's own scope)."""
    monkeypatch.syspath_prepend(str(PACKAGING / "linux"))
    from cuda_stubs import strip_cuda

    bundle = tmp_path / "bundle"
    (bundle / "lib").mkdir(parents=True)
    cuda = tmp_path / "cuda.cpp"
    cuda.write_text(
        "#include <cstddef>\nstruct Runner { virtual ~Runner(); };\nRunner::~Runner() {}\n"
        'extern "C" const char* zlibVersion() { return "not zlib"; }\n'
    )
    _gcc("-x", "c++", "-Wl,-soname,libtorch_cuda.so", "-o", bundle / "lib" / "libtorch_cuda.so",
         cuda)  # fmt: skip
    ext = tmp_path / "ext.cpp"
    ext.write_text(
        '#include <typeinfo>\nstruct Runner { virtual ~Runner(); };\nextern "C" {\n'
        "const char* type_name() { return typeid(Runner).name(); }\n"
        "const char* zlibVersion();\nconst char* zlib_version() { return zlibVersion(); }\n}\n"
    )
    # The extension names libtorch_cuda.so before the system library, as torch's libraries do.
    _gcc("-x", "c++", "-o", bundle / "_C.so", ext, f"-L{bundle / 'lib'}", "-ltorch_cuda",
         "-Wl,--no-as-needed", "-l:libz.so.1", "-lstdc++")  # fmt: skip
    probe = (
        "import ctypes, sys; lib = ctypes.CDLL(sys.argv[1]); "
        "lib.type_name.restype = lib.zlib_version.restype = ctypes.c_char_p; "
        "print(lib.type_name().decode(), lib.zlib_version().decode())"
    )
    env = {"LD_LIBRARY_PATH": str(bundle / "lib"), "PATH": "/usr/bin:/bin"}

    assert strip_cuda(bundle) == ["libtorch_cuda.so"]

    out = subprocess.run(
        [sys.executable, "-c", probe, str(bundle / "_C.so")],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["6Runner", zlib.ZLIB_RUNTIME_VERSION]
    assert (bundle / "quadrat-cuda-stubs.txt").read_text() == "libtorch_cuda.so\n"


def test_runtime_hook_makes_a_stubbed_cuda_torch_report_a_cpu_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a bundle whose torch CUDA libraries were stubbed, torch must say it has no CUDA and no
    torch.distributed (whose import would call the NCCL stubs); without the marker, nothing."""
    monkeypatch.syspath_prepend(str(PACKAGING / "linux"))
    import rthook_stubbed_torch

    finders = list(sys.meta_path)
    assert rthook_stubbed_torch.install(tmp_path) is False  # the gpu variant: no stubs
    assert sys.meta_path == finders
    probe = (
        "import sys; sys.path.insert(0, sys.argv[1]); from pathlib import Path; "
        "import rthook_stubbed_torch as hook; print(hook.install(Path(sys.argv[2]))); "
        "import torch; print(torch.backends.cuda.is_built(), torch.distributed.is_available(), "
        "torch.cuda.is_available())"
    )
    (tmp_path / "quadrat-cuda-stubs.txt").write_text("libtorch_cuda.so\n")
    out = subprocess.run(
        [sys.executable, "-c", probe, str(PACKAGING / "linux"), str(tmp_path)],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    assert out.stdout.split() == ["True", "False", "False", "False"]
