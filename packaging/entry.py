"""Entry point of the frozen application: the same `quadrat` command as a pip install.

`--version` is answered here, from the bundled package metadata, so a support request can name
the exact build without starting torch.
"""

import multiprocessing
import sys
from importlib.metadata import version


def run() -> int:
    """Run the `quadrat` command line (no arguments opens the window)."""
    multiprocessing.freeze_support()  # a frozen app re-executes itself for worker processes
    if sys.argv[1:] == ["--version"]:
        print(f"Quadrat {version('quadrat')}")
        return 0
    from app.cli import main

    return main()


if __name__ == "__main__":
    sys.exit(run())
