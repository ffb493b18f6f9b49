"""The one registry of `quadrat` commands, as engine/methods has for search methods.

Each command module declares `COMMANDS`: what each command is called, its one-line help, the
options it adds to its parser and the function that runs it. `COMMAND_MODULES` lists the modules
in the order `quadrat --help` shows their commands; adding a command is a module of its own and
one line here. The modules import from `app.cli.common`, never from `app.cli`, so no import
circle forms.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# The command modules, in the order of `quadrat --help`.
COMMAND_MODULES = (
    "app.cli.gui",
    "app.cli.index",
    "app.cli.search",
    "app.cli.forget",
    "app.cli.relocate",
    "app.cli.demo",
    "app.cli.export",
    "app.cli.import_judgments",
    "app.cli.camtrap_dp",
    "app.cli.metrics",
    "app.cli.evaluate",
    "app.cli.inquire",
    "app.cli.backup",
    "app.cli.events",
    "app.cli.methods",
    "app.cli.models",
    "app.cli.feedback",
    "app.cli.attributes",
    "app.cli.analyses",
    "app.cli.judges",
    "app.cli.privacy",
)


@dataclass(frozen=True)
class Command:
    """One `quadrat` command: its name, help, options and what runs it.

    `run` is None for a command whose actions (`quadrat models list`, ...) each set their own
    with `set_defaults(func=...)` in `add_arguments`."""

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int] | None = None
    description: str | None = None

    def install(self, subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:  # type: ignore[type-arg]
        """Add this command's parser to the `quadrat` subcommand parser."""
        kwargs: dict[str, Any] = {"help": self.help}
        if self.description is not None:
            kwargs["description"] = self.description
        parser: argparse.ArgumentParser = subparsers.add_parser(self.name, **kwargs)
        self.add_arguments(parser)
        if self.run is not None:
            parser.set_defaults(func=self.run)
        return parser


def commands() -> list[Command]:
    """Every command, in the order of `quadrat --help`."""
    found: list[Command] = []
    for module in COMMAND_MODULES:
        found.extend(importlib.import_module(module).COMMANDS)
    return found
