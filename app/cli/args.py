"""Argument types shared by the `quadrat` subcommands."""

from __future__ import annotations

import argparse


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
