"""Argument types shared by the `quadrat` subcommands."""

from __future__ import annotations

import argparse
from pathlib import Path


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1, with a one-line message otherwise."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a number of at least 1, got {value}")
    return value


def index_memory_gb(text: str) -> float:
    """An argparse type: the vector index's memory budget in GB (0.25 to 4096)."""
    from app.settings import MAX_INDEX_MEMORY_GB, MIN_INDEX_MEMORY_GB

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of GB, got {text!r}") from None
    if not MIN_INDEX_MEMORY_GB <= value <= MAX_INDEX_MEMORY_GB:
        raise argparse.ArgumentTypeError(
            f"expected {MIN_INDEX_MEMORY_GB:g} to {MAX_INDEX_MEMORY_GB:g} GB, got {text}"
        )
    return value


def add_library_options(parser: argparse.ArgumentParser) -> None:
    """`--library` and `--database-url`: the library a command works on."""
    parser.add_argument("--library", type=Path, help="library folder (catalog, indexes, caches)")
    parser.add_argument(
        "--database-url",
        metavar="URL",
        help="the catalog of a new library folder, e.g. postgresql://USER@HOST/DATABASE "
        "(recorded in the folder, password never; default: the settings' database URL)",
    )


def add_model_options(parser: argparse.ArgumentParser) -> None:
    """`--model` and `--device`: the model a command encodes with."""
    parser.add_argument(
        "--model",
        help="demo | ARCH:PRETRAINED | hf-hub:ORG/NAME | ARCH:/path/to/checkpoint "
        "(default: the library's model)",
    )
    parser.add_argument(
        "--device", choices=["auto", "cpu", "cuda", "mps"], help="default: the settings' device"
    )


def add_runtime_option(parser: argparse.ArgumentParser) -> None:
    """`--runtime`: how the model encodes on the CPU."""
    parser.add_argument(
        "--runtime",
        choices=["torch", "onnx", "auto"],
        help="how the model encodes on the CPU: onnx (exported once into the model store "
        "and checked against torch; same vectors), torch, or auto: onnx when the model "
        "exports (default: the settings' runtime, auto)",
    )
