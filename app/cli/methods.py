"""`quadrat methods`: the registry's search methods (docs/SPEC.md §6.1), and the `--method` help
that `search` and `evaluate` share."""

from __future__ import annotations

import argparse
import json

from app.cli.common import EXIT_OK
from app.cli.registry import Command


class _MethodsHere:
    """The keys of the methods that can run here, listed when argparse formats a help text.
    Listing them imports every method (a quarter of a second): a command that prints no help,
    such as a search, must not pay for it."""

    def __str__(self) -> str:
        from engine.methods import method_infos

        return ", ".join(info.key for info in method_infos() if info.available)


def method_option_help() -> str:
    """`--method` help naming the methods that can run here (a method that cannot is listed by
    `quadrat methods` with its reason); its argument goes through `lists_methods`."""
    return (
        "search method: KEY or KEY:NAME=VALUE[,NAME=VALUE…] (default: text); here: "
        "%(methods_here)s; 'quadrat methods' lists each with its parameters"
    )


def lists_methods(action: argparse.Action) -> argparse.Action:
    """`action` (a `--method` option) with what its help's %(methods_here)s names: argparse
    fills a help's %-keys from the action's attributes, only when it prints the help."""
    action.methods_here = _MethodsHere()  # type: ignore[attr-defined]
    return action


def _arguments(p: argparse.ArgumentParser) -> None:
    """The options of `quadrat methods`."""
    p.add_argument("--json", action="store_true", help="one JSON list")


def cmd_methods(args: argparse.Namespace) -> int:
    from engine.methods import method_infos

    infos = method_infos()
    if args.json:
        print(json.dumps([info.to_json() for info in infos]))
        return EXIT_OK
    for info in infos:
        state = "" if info.available else f"  [cannot run here: {info.reason}]"
        print(f"{info.key:<10} {info.label}: {info.description}{state}")
        print(f"{'':<10} queries: {', '.join(info.kinds)}; from: {info.source}")
        for name, default in info.params.items():
            print(f"{'':<10} {name} = {default!r}")
    return EXIT_OK


COMMANDS = (
    Command(
        "methods",
        help="list the search methods and their parameters",
        add_arguments=_arguments,
        run=cmd_methods,
    ),
)
