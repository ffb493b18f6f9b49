"""docs/CLI.md is the commands' own `--help`: it cannot drift from the parser, and it reads the
same whatever terminal writes it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tools import cli_docs


@pytest.mark.skipif(
    sys.version_info[:2] != cli_docs.PYTHON, reason="the page holds the layout of CI's Python"
)
def test_the_page_is_the_commands_help() -> None:
    page = cli_docs.PAGE.read_text(encoding="utf-8")
    assert page == cli_docs.render(), "docs/CLI.md is out of date: run `python tools/cli_docs.py`"


def test_every_command_and_subcommand_has_its_help() -> None:
    from app.cli import build_parser

    page = cli_docs.render()
    for parser, _ in cli_docs.commands(build_parser()):
        assert f"\n## {parser.prog}\n\n```text\nusage: {parser.prog}" in page
    # Nested commands are walked too, and their options are there.
    assert "\n## quadrat models download\n" in page and "\n## quadrat sensitive-taxa add\n" in page
    index = page.split("\n## quadrat index\n", 1)[1].split("\n## ", 1)[0]
    assert "--library LIBRARY" in index and "--model MODEL" in index


def test_the_page_does_not_depend_on_the_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    wide = cli_docs.render()
    monkeypatch.setenv("COLUMNS", "40")
    assert cli_docs.render() == wide
    assert os.environ["COLUMNS"] == "40"  # the terminal's own setting is given back


@pytest.mark.skipif(
    sys.version_info[:2] != cli_docs.PYTHON, reason="the script runs with CI's Python only"
)
def test_check_says_how_to_fix_a_stale_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stale = tmp_path / "CLI.md"
    stale.write_text(cli_docs.render().replace("--top TOP", "--top N"), encoding="utf-8")
    monkeypatch.setattr(cli_docs, "PAGE", stale)
    assert cli_docs.main(["--check"]) == 1
    assert "run `python tools/cli_docs.py`" in capsys.readouterr().err
    assert cli_docs.main([]) == 0 and cli_docs.main(["--check"]) == 0
