"""The command registry (app/cli/registry.py): a command is a module with `COMMANDS` and one
line in `COMMAND_MODULES`; `quadrat --help` lists it and `quadrat NAME` runs it."""

from __future__ import annotations

import argparse
import sys
import types

import pytest

import app.cli.registry as registry
from app.cli import build_parser, main
from app.cli.registry import Command


def test_help_lists_every_registered_command_in_registry_order():
    sub = build_parser()._subparsers._group_actions[0]  # type: ignore[union-attr]
    assert list(sub.choices) == [command.name for command in registry.commands()]
    assert list(sub.choices)[:8] == [
        "gui", "index", "search", "forget", "relocate", "demo", "export", "import",
    ]  # fmt: skip


def test_a_command_module_plugs_in_with_one_registry_line(monkeypatch, capsys):
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("name")

    def run(args: argparse.Namespace) -> int:
        print(f"hello {args.name}")
        return 3

    module = types.ModuleType("tests_cli_hello")
    module.COMMANDS = (Command("hello", help="say hello", add_arguments=add_arguments, run=run),)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "tests_cli_hello", module)
    monkeypatch.setattr(registry, "COMMAND_MODULES", (*registry.COMMAND_MODULES, "tests_cli_hello"))
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "say hello" in capsys.readouterr().out
    assert main(["hello", "world"]) == 3
    assert capsys.readouterr().out == "hello world\n"
