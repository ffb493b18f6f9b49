"""Which Linux variant packaging/build_linux.sh can build from the build environment's torch.

Usage: python variant.py cpu|gpu   prints one line saying what will be built, or exits 2 with a
line saying why that variant cannot be built here and what to do.

PyPI's Linux torch is a CUDA build, and the registries a build machine may reach (PyPI, Debian)
serve no CPU-only torch for Linux, so the cpu variant is built from whichever torch is installed:
a CPU-only one as it is, a CUDA one with its CUDA libraries removed and stubbed
(cuda_stubs.py), which the bundle never calls because it then reports no CUDA.
"""

from __future__ import annotations

import sys


class CannotBuild(Exception):
    """The requested variant needs a torch this build environment does not have."""


def plan(requested: str, torch_version: str, torch_cuda: str | None) -> str:
    """The line build_linux.sh prints before it builds `requested` with this torch."""
    if requested == "cpu" and torch_cuda:
        return (
            f"building the cpu variant from torch {torch_version}, a CUDA {torch_cuda} build: "
            "its CUDA libraries are removed and stubbed, so the bundle runs on the CPU only"
        )
    if requested == "cpu":
        return f"building the cpu variant with the CPU-only torch {torch_version}"
    if requested == "gpu" and torch_cuda:
        return (
            f"building the gpu variant with torch {torch_version} and its CUDA {torch_cuda} "
            "libraries (about 5.6 GB installed)"
        )
    if requested == "gpu":
        raise CannotBuild(
            f"the gpu variant needs a CUDA torch, and this one ({torch_version}) is CPU-only: "
            "install PyPI's torch (pip install torch), or build the cpu variant"
        )
    raise CannotBuild(f"unknown variant {requested!r}: use cpu or gpu")


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    import torch

    try:
        print(plan(argv[0], torch.__version__, torch.version.cuda))
    except CannotBuild as e:
        print(e, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
