"""Turn a Linux bundle built with PyPI's CUDA torch into a CPU-only bundle.

PyPI's Linux torch wheel is a CUDA build: libtorch_python.so, libtorch.so and libtorch_cpu.so
name libtorch_cuda.so, libcudart, cuDNN, NCCL, CUPTI ... as DT_NEEDED, so deleting those files
makes `import torch` fail. This removes the NVIDIA and CUDA libraries (and triton) from the
bundle, then writes in place of each one still named by a remaining library a tiny stub with the
same soname, version nodes and every symbol the remaining libraries import from it. Stub
functions return an error code (NVIDIA APIs) or zero (torch's CUDA side, so the device count is
0 and torch.cuda.is_available() is False); stub data is zeroed. The CPU paths never call them.

With a CPU-only torch the same pass covers the other case: PyPI's torchvision is a CUDA build
whose extensions name libc10_cuda.so and libtorch_cuda.so, which a CPU torch does not have. A
stub is then written for each such soname, holding every symbol the extension imports that no
library in the bundle defines.

Usage: python cuda_stubs.py BUNDLE_FOLDER   (needs binutils' readelf and gcc)
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

# Whole folders of the bundle that hold only GPU code.
REMOVED_DIRS = ("nvidia", "triton")
# Library files (by name) that hold only GPU code, wherever the analysis placed them (not Qt's
# libcupsprintersupport.so).
REMOVED_NAME = re.compile(
    r"^lib(cu(?!ps)|nv|nccl|cudnn|torch_cuda|c10_cuda|caffe2_nvrtc|torch_nvshmem|checkpoint|"
    r"pcsamplingutil|triton)[^/]*\.so(\.[0-9.]+)?$"
)
# Written into the bundle when torch's own CUDA libraries were stubbed (a CUDA torch made CPU-only).
STUBBED_TORCH_MARKER = "quadrat-cuda-stubs.txt"
# NVIDIA's APIs answer an error code (100 is cudaErrorNoDevice / CUDA_ERROR_NO_DEVICE); torch's
# own CUDA libraries answer a zeroed scratch area (see stub_source).
TORCH_CUDA = re.compile(r"^lib(torch_cuda|c10_cuda|caffe2_nvrtc|torch_nvshmem)")


@dataclass(frozen=True)
class Symbol:
    name: str
    kind: str  # FUNC, OBJECT, TLS, NOTYPE
    size: int
    version: str | None


_SYM = re.compile(r"^\s*\d+:\s+[0-9a-f]+\s+(\d+|0x[0-9a-f]+)\s+(\w+)\s+(\w+)\s+\w+\s+(\w+)\s+(\S+)")


def is_elf(path: Path) -> bool:
    """True for an ELF file (a shared library or an executable)."""
    try:
        with path.open("rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def dynamic_symbols(path: Path) -> tuple[list[Symbol], list[Symbol]]:
    """(defined, undefined) dynamic symbols of one ELF file."""
    out = subprocess.run(
        ["readelf", "--dyn-syms", "-W", str(path)], capture_output=True, text=True, check=True
    ).stdout
    defined: list[Symbol] = []
    undefined: list[Symbol] = []
    for line in out.splitlines():
        m = _SYM.match(line)
        if not m or m.group(5) in ("", "0"):
            continue
        size_text, kind, bind, ndx, raw = m.groups()
        if bind == "LOCAL" or kind in ("SECTION", "FILE"):
            continue
        if ndx == "UND" and bind == "WEAK":  # optional (__gmon_start__, TLS init hooks)
            continue
        name, _, version = raw.partition("@")
        version = version.lstrip("@") or None
        size = int(size_text, 0)
        (undefined if ndx == "UND" else defined).append(Symbol(name, kind, size, version))
    return defined, undefined


def needed(path: Path) -> list[str]:
    """The sonames an ELF file names as DT_NEEDED."""
    out = subprocess.run(
        ["readelf", "-d", "-W", str(path)], capture_output=True, text=True, check=True
    ).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


def _quoted(name: str) -> str:
    return '"' + name + '";'


# The vtable every std::type_info of a class points into (libstdc++, loaded by torch before any
# stub): +16 skips the offset-to-top and RTTI slots, as the compiler writes it.
_CLASS_TYPE_INFO_VTABLE = "_ZTVN10__cxxabiv117__class_type_infoE+16"


def _object_body(name: str, size: int, label: str) -> list[str]:
    """The data of one stubbed object: zeroes, except C++ type information.

    libtorch_python registers Python classes for types libtorch_cuda defines (pybind11 hashes
    `typeid(T).name()`), so a zeroed `typeinfo for T` (_ZTI) is a null name read at import: it is
    written as a real type_info with T's mangled name; a type name (_ZTS) holds that name.
    """
    if name.startswith("_ZTS"):
        text = name[4:]
        return [f'.asciz "{text}"', f".zero {max(size - len(text) - 1, 0)}"]
    if name.startswith("_ZTI") and size >= 16:
        return [
            f".quad {_CLASS_TYPE_INFO_VTABLE}",
            f".quad {label}",
            f".zero {size - 16}",
            ".section .rodata",
            f'{label}: .asciz "{name[4:]}"',
        ]
    return [f".zero {size}"]


def stub_source(soname: str, symbols: list[Symbol]) -> tuple[str, str | None]:
    """Assembly for a stub library and its version script (None when nothing is versioned)."""
    if TORCH_CUDA.match(soname):
        # torch's static initialisers write through references these functions return
        # (c10d::get_gil_checker()), so they answer the address of a zeroed scratch area; it is
        # 256-aligned so a one-byte answer (c10::cuda::device_count()) reads as 0.
        body = ["lea quadrat_stub_scratch(%rip), %rax", "ret"]
        lines = [".bss", ".balign 256", "quadrat_stub_scratch:", ".zero 65536", ".text"]
    else:
        body = ["mov $100, %eax", "ret"]
        lines = [".text"]
    for i, s in enumerate(symbols):
        q = f'"{s.name}"'
        if s.kind == "OBJECT":
            size = max(s.size, 8)
            lines += [
                ".data",
                ".balign 16",
                f".globl {q}",
                f".type {q},@object",
                f".size {q},{size}",
                f"{q}:",
                *_object_body(s.name, size, f"quadrat_stub_name_{i}"),
                ".text",
            ]
        elif s.kind == "TLS":
            size = max(s.size, 8)
            lines += [
                '.section .tbss,"awT",@nobits',
                ".balign 16",
                f".globl {q}",
                f".type {q},@tls_object",
                f".size {q},{size}",
                f"{q}:",
                f".zero {size}",
                ".text",
            ]
        else:
            lines += [f".globl {q}", f".type {q},@function", f"{q}:", *body]
    versions: dict[str, list[str]] = {}
    for s in symbols:
        if s.version:
            versions.setdefault(s.version, []).append(s.name)
    if not versions:
        return "\n".join(lines) + "\n", None
    first = next(iter(versions))
    versions[first] += [s.name for s in symbols if not s.version]
    script = "".join(
        f"{v} {{ global: {' '.join(_quoted(n) for n in names)} }};\n"
        for v, names in versions.items()
    )
    return "\n".join(lines) + "\n", script


def _match(defined: dict[str, Symbol], wanted: Symbol) -> bool:
    d = defined.get(wanted.name)
    return d is not None and (wanted.version is None or wanted.version == d.version)


def _stub_missing_torch_cuda(
    bundle: Path, kept: list[Path], wanted: dict[str, dict[str, Symbol]], where: dict[str, Path]
) -> None:
    """Add stubs for torch CUDA sonames that kept libraries need but the bundle lacks.

    A CPU torch has no libtorch_cuda.so to read the symbols' kinds from, so they are taken from
    the importing library's undefined symbols (undefined data has size 0: give it room).
    """
    present = {p.name for p in kept} | set(where)
    missing: dict[Path, list[str]] = {}
    for p in kept:
        names = [n for n in needed(p) if TORCH_CUDA.match(n) and n not in present]
        if names:
            missing[p] = names
    if not missing:
        return
    defined_anywhere: set[str] = set()
    for p in kept:
        defined_anywhere |= {s.name for s in dynamic_symbols(p)[0]}
    for p, names in missing.items():
        home = wanted.setdefault(names[0], {})
        for n in names[1:]:
            wanted.setdefault(n, {})
        for s in dynamic_symbols(p)[1]:
            if s.version is None and s.name not in defined_anywhere:
                home[s.name] = Symbol(s.name, s.kind, s.size or 256, None)
        # At the top of the bundle: the frozen app's library path (LD_LIBRARY_PATH, set by
        # PyInstaller's bootloader) leads there; the extensions' RPATH names the wheel's build
        # machine.
        for n in names:
            where.setdefault(n, bundle / n)


def system_libraries() -> dict[str, Path]:
    """The system's shared libraries by soname (ldconfig's cache)."""
    out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=False).stdout
    found: dict[str, Path] = {}
    for m in re.finditer(r"^\s*(\S+) \(([^)]*)\) => (\S+)$", out, re.MULTILINE):
        if "x86-64" in m.group(2) or "64" not in m.group(2):
            found.setdefault(m.group(1), Path(m.group(3)))
    return found


def defined_elsewhere(kept: list[Path], skip: set[str]) -> set[str]:
    """Names that the kept libraries, or the system libraries they need, define.

    `skip`: the sonames being removed or stubbed, which a build machine may also have installed
    system-wide (a CUDA toolkit) but a user's machine need not.
    """
    names: set[str] = set()
    present = {p.name for p in kept} | skip
    system = system_libraries()
    outside: set[Path] = set()
    for p in kept:
        names |= {s.name for s in dynamic_symbols(p)[0]}
        outside |= {system[n] for n in needed(p) if n not in present and n in system}
    for lib in outside:
        names |= {s.name for s in dynamic_symbols(lib)[0]}
    return names


def strip_cuda(bundle: Path) -> list[str]:
    """Remove GPU libraries from `bundle`, stub the ones still needed; returns the stubs' names."""
    elves = [p for p in bundle.rglob("*") if p.is_file() and not p.is_symlink() and is_elf(p)]
    gone = [
        p
        for p in elves
        if REMOVED_NAME.match(p.name)
        or any(part in REMOVED_DIRS for part in p.relative_to(bundle).parts[:-1])
    ]
    gone_set = set(gone)
    kept = [p for p in elves if p not in gone_set]
    # What each removed library defines, by soname (the file name, for these wheels).
    provides: dict[str, dict[str, Symbol]] = {}
    where: dict[str, Path] = {}
    copies: dict[str, list[Path]] = {}
    for p in gone:
        defined, _ = dynamic_symbols(p)
        provides.setdefault(p.name, {}).update({s.name: s for s in defined})
        where.setdefault(p.name, p)
        copies.setdefault(p.name, []).append(p)
    wanted: dict[str, dict[str, Symbol]] = {}
    for p in kept:
        names = [n for n in needed(p) if n in provides]
        if not names:
            continue
        _, undefined = dynamic_symbols(p)
        for s in undefined:
            home = next((n for n in names if _match(provides[n], s)), None)
            if home is not None:
                wanted.setdefault(home, {})[s.name] = provides[home][s.name]
                continue
            # Reached only through a removed library's own dependencies (libtorch_cuda.so
            # brings libtorch_nvshmem.so): an unversioned symbol may live in any stub it names.
            if s.version is None and any(_match(d, s) for d in provides.values()):
                d = next(d[s.name] for d in provides.values() if _match(d, s))
                wanted.setdefault(names[0], {})[s.name] = Symbol(s.name, d.kind, d.size, None)
        for n in names:
            wanted.setdefault(n, {})
    _stub_missing_torch_cuda(bundle, kept, wanted, where)
    # The real libtorch_cuda.so also exports a few C++ runtime symbols (operator delete,
    # std::basic_stringstream's constructor): a stub that defined them would be found before
    # libstdc++ and answer for them, so whatever another library defines is left to it.
    elsewhere = defined_elsewhere(kept, skip=set(wanted) | set(provides))
    for symbols in wanted.values():
        for name in [n for n in symbols if n in elsewhere]:
            del symbols[name]
    for p in gone:
        p.unlink()
    for dirname in REMOVED_DIRS:
        for folder in bundle.rglob(dirname):
            if not folder.is_dir() or folder.is_symlink():
                continue
            if not any(f.is_file() and f.suffix == ".py" for f in folder.rglob("*")):
                shutil.rmtree(folder, ignore_errors=True)
                continue
            # Python sources stay (torch imports triton's to find it unusable); the rest is GPU
            # data: triton's CUDA static archives, headers and tools weigh 170 MB.
            for f in list(folder.rglob("*")):
                if (f.is_file() or f.is_symlink()) and f.suffix != ".py":
                    f.unlink()
    with tempfile.TemporaryDirectory() as tmp:
        for soname, symbols in sorted(wanted.items()):
            asm, script = stub_source(soname, sorted(symbols.values(), key=lambda s: s.name))
            src = Path(tmp, soname + ".s")
            src.write_text(asm)
            cmd = [
                "gcc",
                "-shared",
                "-nostdlib",
                f"-Wl,-soname,{soname}",
                "-o",
                str(where[soname]),
                str(src),
            ]
            if script:
                Path(tmp, soname + ".map").write_text(script)
                cmd.insert(-1, f"-Wl,--version-script={Path(tmp, soname + '.map')}")
            where[soname].parent.mkdir(parents=True, exist_ok=True)
            subprocess.run(cmd, check=True)
            # Wherever a removed copy was (triton ships its own libcupti): each importer's
            # RPATH leads to its own folder, and the loader must not go on to a system copy.
            for other in copies.get(soname, [])[1:]:
                other.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(where[soname], other)
    # PyInstaller links each library at the top of the bundle too; drop the links to what is gone.
    for link in [f for f in bundle.rglob("*") if f.is_symlink() and not f.exists()]:
        link.unlink()
    if any(TORCH_CUDA.match(n) for n in provides):
        # torch itself was a CUDA build: the runtime hook (rthook_stubbed_torch.py) reads this.
        (bundle / STUBBED_TORCH_MARKER).write_text("\n".join(sorted(wanted)) + "\n")
    return sorted(wanted)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    stubs = strip_cuda(Path(sys.argv[1]))
    print(f"stubbed {len(stubs)} GPU libraries: {', '.join(stubs)}")
