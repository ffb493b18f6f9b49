"""PyInstaller runtime hook: let a CUDA torch whose GPU libraries were stubbed run on the CPU.

packaging/linux/cuda_stubs.py writes quadrat-cuda-stubs.txt into the bundle when it replaced
torch's own CUDA libraries (PyPI's Linux torch is a CUDA build). Torch still believes it was built
with CUDA then, and at import it would call into the stubs: torch.distributed registers NCCL
process groups with default options that libtorch_cuda constructs, and torch._native looks up
CUDA kernels that libtorch_cuda never registered. So, as soon as torch._C is loaded, this hook
makes it report what it now is: built without CUDA and without torch.distributed (as torch's own
CPU and macOS builds report), which the Python side of torch already handles.
Without the marker (the gpu variant, or a CPU-only torch) it does nothing.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

MARKER = "quadrat-cuda-stubs.txt"
# torch._C's entry points of torch.distributed: without them torch.distributed.is_available() and
# torch.distributed.rpc.is_available() are False and nothing reaches the NCCL stubs.
DISTRIBUTED_INITS = ("_c10d_init", "_rpc_init", "_dist_autograd_init", "_faulty_agent_init")


def as_cpu_build(module: ModuleType) -> None:
    """Make a loaded torch._C describe a CPU-only build without torch.distributed."""
    for name in DISTRIBUTED_INITS:
        if hasattr(module, name):
            delattr(module, name)
    module._has_cuda = False  # type: ignore[attr-defined]  # torch.backends.cuda.is_built()


class _TorchCFinder(importlib.abc.MetaPathFinder):
    """Finds torch._C through the other finders, and patches it once it has loaded."""

    def find_spec(
        self, fullname: str, path: object = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "torch._C":
            return None
        sys.meta_path.remove(self)  # once, and so find_spec below does not come back here
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        exec_module = loader.exec_module

        def exec_and_patch(module: ModuleType) -> None:
            exec_module(module)
            as_cpu_build(module)

        loader.exec_module = exec_and_patch  # type: ignore[method-assign]
        return spec


def install(bundle: Path) -> bool:
    """Patch torch._C on import when `bundle` holds stubbed torch CUDA libraries."""
    if not (bundle / MARKER).is_file():
        return False
    sys.meta_path.insert(0, _TorchCFinder())
    return True


if hasattr(sys, "_MEIPASS"):
    install(Path(sys._MEIPASS))
