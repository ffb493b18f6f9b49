"""The `quadrat` command (docs/SPEC.md §5). Never imports Qt unless the GUI is asked for.

Each command is a module of this package registered in `app/cli/registry.py`; this module
builds the parser from the registry and turns failures into exit codes and one line.

Exit codes: 0 success; 2 bad usage or bad input (one line on stderr); 1 any other failure.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from app.cli.common import EXIT_FAILURE, EXIT_OK, EXIT_USAGE, reset_settings, set_database_url
from app.cli.registry import commands
from engine.errors import BadInputError, ModelLoadError, ModelMismatchError, QuadratError
from engine.models.hub import ModelUnavailableError

log = logging.getLogger("quadrat.cli")


class UsageError(Exception):
    """Raised by the argument parser instead of printing a two-line usage message."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="quadrat", description="Expert image search over local photo collections."
    )
    parser.add_argument(  # handled in main(), before logging touches the user's folders
        "--self-test",
        action="store_true",
        help="check this installation offline in a throwaway folder (demo, index, search, "
        "judge, metrics, window) and print one line; exit 0 only if all passed",
    )
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)
    for command in commands():
        command.install(sub)
    return parser


# 128 + SIGPIPE, what a shell reports for a Unix tool whose reader went away.
EXIT_BROKEN_PIPE = 141


# -- entry point ----------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    from app.logs import setup_logging

    reset_settings()  # each command reads the settings file as it is now
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--self-test"]:  # it logs only inside its own throwaway folder
        from app.selftest import main as self_test

        return self_test(argv[1:])
    log_file = setup_logging()
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            from app.cli.gui import cmd_gui

            return cmd_gui(argparse.Namespace(folder=None, demo=False))
        set_database_url(getattr(args, "database_url", None))
        code = int(args.func(args) or EXIT_OK)
        sys.stdout.flush()  # a reader that went away is met here, not in Python's exit
        return code
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ModelUnavailableError as exc:  # the command was right; the network was not there
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    except (BadInputError, ModelLoadError, ModelMismatchError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except QuadratError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        print("interrupted: work committed so far is kept", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader of stdout went away (`| head`, `| grep -q`): stop quietly, as Unix tools
        # do on SIGPIPE, and keep Python from reporting the unflushed rest at exit.
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except Exception as exc:  # the details go to the log file, the user gets one line
        log.debug("unexpected failure", exc_info=True)
        if type(exc).__module__.startswith("sqlalchemy"):  # never SQL and its parameters
            from engine.catalog.db import catalog_error

            print(f"error: {catalog_error(exc, None)}", file=sys.stderr)
            return EXIT_FAILURE
        where = f" (details in {log_file})" if log_file else ""
        print(f"error: {type(exc).__name__}: {exc}{where}", file=sys.stderr)
        return EXIT_FAILURE
